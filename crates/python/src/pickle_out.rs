//! Writing a snapshot whose trace lives in the CPU allocator hooks' ring.
//!
//! `pickle.dump` of a history of millions of events would first build
//! millions of Python dicts (gigabytes, inside the user's training process).
//! Instead the recorder puts a [`CpuTrace`] where the trace goes, and
//! [`write_pickle`] writes the snapshot with the streaming pickle writer:
//! Python's own objects as `pickle.dump` would, the trace entry by entry
//! from the copied events. The bytes are a plain pickle: `pickle.load` and
//! PyTorch's viewer read them.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

use pyo3::exceptions::{PyOSError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use vramscope_cpu_allocator as hooks;
use vramscope_cpu_allocator::TraceEntry;
use vramscope_pickle::writer::{MemoId, PickleWriter};

/// The allocator hooks' events at one moment, with what turns them into
/// trace entries: the recorder's stacks (lists of frame dicts, by stack id)
/// and its marks (`user_metadata` by time range).
#[pyclass(module = "vramscope._native", frozen)]
pub(crate) struct CpuTrace {
    events: Vec<hooks::Event>,
    stacks: Py<PyList>,
    marks: Vec<(String, i64, i64)>,
}

#[pymethods]
impl CpuTrace {
    /// Copies the events kept now; `marks` are `(name, start_us, end_us)`.
    #[new]
    fn new(py: Python<'_>, stacks: Py<PyList>, mut marks: Vec<(String, i64, i64)>) -> Self {
        marks.sort_by_key(|m| m.1);
        CpuTrace {
            events: py.detach(hooks::events),
            stacks,
            marks,
        }
    }

    /// Trace entries the file will hold: one per event.
    fn __len__(&self) -> usize {
        self.events.len()
    }

    /// Every event's time (µs), sorted, as int64 bytes (`array("q")`).
    fn times<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let mut t: Vec<i64> = self.events.iter().map(|e| e.time_us).collect();
        t.sort_unstable();
        let bytes: Vec<u8> = t.iter().flat_map(|v| v.to_ne_bytes()).collect();
        PyBytes::new(py, &bytes)
    }

    /// The entries as Python dicts, for a writer other than [`write_pickle`].
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let stacks = self.stacks.bind(py);
        for e in hooks::entries(&self.events, &self.range_marks()) {
            let d = PyDict::new(py);
            for (key, field) in self.fields(&e) {
                match field {
                    Field::Str(v) => d.set_item(key, v)?,
                    Field::Int(v) => d.set_item(key, v)?,
                    Field::Frames(sid) => d.set_item(key, stacks.get_item(sid as usize)?)?,
                }
            }
            out.append(d)?;
        }
        Ok(out)
    }
}

/// One value of a trace entry: the frames are the recorder's stack list.
enum Field<'a> {
    Str(&'a str),
    Int(i128),
    Frames(u32),
}

impl CpuTrace {
    fn range_marks(&self) -> Vec<(i64, i64)> {
        self.marks.iter().map(|m| (m.1, m.2)).collect()
    }

    /// An entry's keys and values as PyTorch's history writes them, in its
    /// order: the one place both writers take them from.
    fn fields<'s>(&'s self, e: &TraceEntry) -> impl Iterator<Item = (&'static str, Field<'s>)> {
        let mark = e.mark.map(|k| {
            (
                "user_metadata",
                Field::Str(self.marks[k as usize].0.as_str()),
            )
        });
        let free = e
            .device_free
            .map(|f| ("device_free", Field::Int(f as i128)));
        [
            ("action", Field::Str(e.action)),
            ("addr", Field::Int(e.addr as i128)),
            ("size", Field::Int(e.size as i128)),
            ("stream", Field::Int(0)),
            ("time_us", Field::Int(e.time_us as i128)),
            ("frames", Field::Frames(e.stack)),
        ]
        .into_iter()
        .chain(mark)
        .chain(free)
    }
}

/// Pickle `obj` to the binary file `file` at `protocol`, as `pickle.dump`
/// would; a [`CpuTrace`] inside it is written as the list of its entries.
/// Only plain data (dict, list, tuple, str, bytes, int, float, bool, None)
/// can be written: anything else is a `TypeError` naming where it was.
#[pyfunction]
pub(crate) fn write_pickle(
    file: &Bound<'_, PyAny>,
    obj: &Bound<'_, PyAny>,
    protocol: u8,
) -> PyResult<()> {
    let out = BufWriter::with_capacity(1 << 20, PyFile(file.clone()));
    let w = PickleWriter::new(out, protocol).map_err(io_err)?;
    let mut s = State {
        w,
        objects: HashMap::new(),
        strings: HashMap::new(),
    };
    s.value(obj, &mut Vec::new())?;
    let out = s.w.finish().map_err(io_err)?;
    out.into_inner().map_err(|e| io_err(e.into_error()))?;
    Ok(())
}

struct State<'py, W: Write> {
    w: PickleWriter<W>,
    /// Containers written, by identity (shared frame lists become memo gets).
    objects: HashMap<usize, (Bound<'py, PyAny>, MemoId)>,
    /// Strings written, by value (strings are immutable: one copy serves).
    strings: HashMap<String, MemoId>,
}

impl<'py, W: Write> State<'py, W> {
    fn value(&mut self, v: &Bound<'py, PyAny>, path: &mut Vec<String>) -> PyResult<()> {
        if v.is_none() {
            self.w.none();
        } else if let Ok(b) = v.cast::<PyBool>() {
            self.w.bool(b.is_true());
        } else if v.is_instance_of::<PyInt>() {
            match v.extract::<i64>() {
                Ok(i) => self.w.int(i),
                Err(_) => match v.extract::<i128>() {
                    Ok(i) => self.w.int128(i),
                    Err(_) => return Err(unsupported("an int over 128 bits", path)),
                },
            }
        } else if let Ok(f) = v.cast::<PyFloat>() {
            self.w.float(f.value());
        } else if let Ok(s) = v.cast::<PyString>() {
            self.str(&s.to_cow()?);
        } else if let Ok(b) = v.cast::<PyBytes>() {
            if let Some(id) = self.seen(v) {
                self.w.get(id);
            } else {
                let id = self.w.bytes(b.as_bytes());
                self.remember(v, id);
            }
        } else if let Some(id) = self.seen(v) {
            self.w.get(id);
        } else if let Ok(l) = v.cast::<PyList>() {
            let id = self.w.begin_list_len(l.len() as u64);
            self.remember(v, id);
            for (i, item) in l.iter().enumerate() {
                path.push(format!("[{i}]"));
                self.value(&item, path)?;
                path.pop();
            }
            self.w.end_list();
        } else if let Ok(d) = v.cast::<PyDict>() {
            let id = self.w.begin_dict_len(d.len() as u64);
            self.remember(v, id);
            for (k, item) in d.iter() {
                path.push(format!(
                    "[{}]",
                    k.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                ));
                self.value(&k, path)?;
                self.value(&item, path)?;
                path.pop();
            }
            self.w.end_dict();
        } else if let Ok(t) = v.cast::<PyTuple>() {
            self.w.begin_tuple(t.len() as u64);
            for (i, item) in t.iter().enumerate() {
                path.push(format!("[{i}]"));
                self.value(&item, path)?;
                path.pop();
            }
            if let Some(id) = self.w.end_tuple() {
                self.remember(v, id);
            }
        } else if let Ok(trace) = v.cast::<CpuTrace>() {
            self.trace(trace.get(), v.py())?;
        } else {
            let kind = v
                .get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string());
            return Err(unsupported(&format!("a {kind}"), path));
        }
        Ok(())
    }

    fn str(&mut self, s: &str) {
        if let Some(&id) = self.strings.get(s) {
            self.w.get(id);
        } else {
            let id = self.w.str(s);
            self.strings.insert(s.to_owned(), id);
        }
    }

    fn seen(&self, v: &Bound<'py, PyAny>) -> Option<MemoId> {
        self.objects.get(&(v.as_ptr() as usize)).map(|e| e.1)
    }

    /// Keeps `v` alive with its id, so its address cannot be reused by
    /// another object while the file is written.
    fn remember(&mut self, v: &Bound<'py, PyAny>, id: MemoId) {
        self.objects.insert(v.as_ptr() as usize, (v.clone(), id));
    }

    /// The trace's entries, each a dict as PyTorch writes them.
    fn trace(&mut self, t: &CpuTrace, py: Python<'py>) -> PyResult<()> {
        let stacks = t.stacks.bind(py);
        let n: usize = t.__len__();
        self.w.begin_list_len(n as u64);
        let marks = t.range_marks();
        let mut path = vec!["[device_traces]".to_owned()];
        for e in hooks::entries(&t.events, &marks) {
            self.w.begin_dict();
            for (key, field) in t.fields(&e) {
                self.str(key);
                match field {
                    Field::Str(v) => self.str(v),
                    Field::Int(v) => self.w.int128(v),
                    Field::Frames(sid) => self.value(&stacks.get_item(sid as usize)?, &mut path)?,
                }
            }
            self.w.end_dict();
        }
        self.w.end_list();
        self.w.check().map_err(io_err)
    }
}

fn unsupported(what: &str, path: &[String]) -> PyErr {
    PyTypeError::new_err(format!(
        "cannot write {what} at snapshot{}: only plain data (dict, list, tuple, str, bytes, int, float, bool, None) is written",
        path.concat()
    ))
}

fn io_err(e: io::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// A Python binary file as an `io::Write` (its `write` method).
struct PyFile<'py>(Bound<'py, PyAny>);

impl Write for PyFile<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let py = self.0.py();
        let n = self
            .0
            .call_method1("write", (PyBytes::new(py, buf),))
            .and_then(|r| r.extract::<Option<usize>>())
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(n.unwrap_or(buf.len()))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
