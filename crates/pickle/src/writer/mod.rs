//! A streaming pickle writer that emits the bytes CPython's `pickle.dump`
//! would, for protocols 2 to 5.
//!
//! Values are written one call at a time, so a list of millions of entries
//! never has to exist in memory. Containers are opened with `begin_*` and
//! closed with `end_*`; a value written between them becomes an item (dict
//! keys and values alternate). Every string and container is memoised, as
//! CPython does, and its [`MemoId`] can be referenced again with
//! [`PickleWriter::get`]: that is how shared objects are written.
//!
//! Byte-for-byte fidelity with the C pickler (`_pickle.c`) covers: opcode
//! choice for ints (BININT1/BININT2/BININT/LONG1), strings and bytes;
//! MEMOIZE (protocol 4+) or BINPUT/LONG_BINPUT; batches of 1000 with the
//! single-item APPEND/SETITEM special case and the trailing empty
//! `MARK SETITEMS` of dicts whose size is a multiple of 1000; frames of
//! about 64 KiB committed at the start of a value, frames under 4 bytes left
//! unframed, and strings or bytes of 64 KiB or more written outside frames.
//! Protocol 2 bytes use CPython's `_codecs.encode(str, "latin1")` reduction.
//!
//! Misuse panics: closing what is not open, a dict closed after a key, a
//! container given a length it does not get, a second root value, or
//! finishing an incomplete pickle.
//!
//! I/O errors are latched: the first failure stops output, [`PickleWriter::check`]
//! reports it early and [`PickleWriter::finish`] returns it.
//!
//! ```
//! use vramscope_pickle::writer::PickleWriter;
//! // pickle.dumps({"a": [1, 2]}, protocol=4)
//! let mut w = PickleWriter::new(Vec::new(), 4).unwrap();
//! w.begin_dict();
//! w.str("a");
//! w.begin_list();
//! w.int(1);
//! w.int(2);
//! w.end_list();
//! w.end_dict();
//! let bytes = w.finish().unwrap();
//! assert_eq!(bytes, b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01K\x02es.");
//! ```

use crate::ops::*;
use std::io::{self, Write};

mod engine;

const FRAME_SIZE_TARGET: usize = 64 * 1024;
const FRAME_SIZE_MIN: usize = 4;
const BATCH: u64 = 1000;

/// Index of a memoised object, for [`PickleWriter::get`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoId(pub u32);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Dict,
    Tuple,
}

struct Open {
    kind: Kind,
    /// Items (lists, tuples) or pairs (dicts) completed.
    done: u64,
    in_batch: u64,
    batch_open: bool,
    /// Dict: a key was written, its value is due.
    half: bool,
    len: Option<u64>,
    /// Unknown length and one item so far: MARK may still go at `mark_at`.
    pending: bool,
    mark_at: usize,
}

#[derive(Clone, Copy)]
enum Event {
    /// Start of a value: CPython commits the frame here once it reaches 64 KiB.
    Boundary(usize),
    /// A long string or bytes payload, written outside any frame.
    Raw(usize, usize),
}

/// Streaming pickle encoder; see the [module docs](self).
pub struct PickleWriter<W: Write> {
    out: W,
    proto: u8,
    buf: Vec<u8>,
    /// Start of the uncommitted part of `buf`.
    origin: usize,
    stack: Vec<Open>,
    pendings: usize,
    deferred: Vec<Event>,
    memo: u32,
    root_done: bool,
    written: u64,
    err: Option<io::Error>,
    failed: Option<io::ErrorKind>,
    /// Protocol 2 bytes: memo ids of `_codecs.encode`, `"latin1"`, `bytes`.
    p2_globals: [Option<MemoId>; 3],
}

impl<W: Write> PickleWriter<W> {
    /// Starts a pickle at `protocol` (2 to 5) and writes the PROTO header.
    pub fn new(mut out: W, protocol: u8) -> io::Result<Self> {
        if !(2..=5).contains(&protocol) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("pickle protocol must be 2 to 5, found {protocol}"),
            ));
        }
        out.write_all(&[PROTO, protocol])?;
        Ok(PickleWriter {
            out,
            proto: protocol,
            buf: Vec::with_capacity(2 * FRAME_SIZE_TARGET),
            origin: 0,
            stack: Vec::new(),
            pendings: 0,
            deferred: Vec::new(),
            memo: 0,
            root_done: false,
            written: 2,
            err: None,
            failed: None,
            p2_globals: [None; 3],
        })
    }

    pub fn protocol(&self) -> u8 {
        self.proto
    }

    /// Bytes handed to the output so far (buffered bytes not included).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Number of memoised objects so far (the next [`MemoId`]).
    pub fn memo_len(&self) -> u32 {
        self.memo
    }

    /// Reports a write error that happened since the last check.
    pub fn check(&mut self) -> io::Result<()> {
        match self.err.take() {
            Some(e) => {
                self.failed = Some(e.kind());
                Err(e)
            }
            None => Ok(()),
        }
    }

    pub fn none(&mut self) {
        self.atom(&[NONE]);
    }

    pub fn bool(&mut self, b: bool) {
        self.atom(&[if b { NEWTRUE } else { NEWFALSE }]);
    }

    pub fn int(&mut self, i: i64) {
        self.begin_value();
        if let Ok(v) = i32::try_from(i) {
            let b = v.to_le_bytes();
            if b[2] != 0 || b[3] != 0 {
                self.buf.push(BININT);
                self.buf.extend_from_slice(&b);
            } else if b[1] != 0 {
                self.buf.extend_from_slice(&[BININT2, b[0], b[1]]);
            } else {
                self.buf.extend_from_slice(&[BININT1, b[0]]);
            }
        } else {
            // Same length rule as CPython's save_long: bit length / 8 + 1,
            // minus one redundant sign byte for some negatives.
            let bits = 64 - i.unsigned_abs().leading_zeros() as usize;
            let mut n = bits / 8 + 1;
            let b = (i as i128).to_le_bytes();
            if i < 0 && n > 1 && b[n - 1] == 0xff && b[n - 2] & 0x80 != 0 {
                n -= 1;
            }
            self.buf.extend_from_slice(&[LONG1, n as u8]);
            self.buf.extend_from_slice(&b[..n]);
        }
        self.end_value();
    }

    /// An integer beyond `i64` as CPython writes it (LONG1, its
    /// two's-complement bytes), e.g. the `2**64 - 1` a C++ producer writes
    /// for an unsigned `-1`.
    pub fn int128(&mut self, i: i128) {
        if let Ok(v) = i64::try_from(i) {
            return self.int(v);
        }
        self.begin_value();
        let bits = 128 - i.unsigned_abs().leading_zeros() as usize;
        let mut n = bits / 8 + 1;
        let b = i.to_le_bytes();
        if i < 0 && n > 1 && b[n - 1] == 0xff && b[n - 2] & 0x80 != 0 {
            n -= 1;
        }
        let n = n.min(16);
        self.buf.extend_from_slice(&[LONG1, n as u8]);
        self.buf.extend_from_slice(&b[..n]);
        self.end_value();
    }

    pub fn float(&mut self, f: f64) {
        let mut b = [BINFLOAT; 9];
        b[1..].copy_from_slice(&f.to_be_bytes());
        self.atom(&b);
    }

    /// Writes and memoises a new string object.
    pub fn str(&mut self, s: &str) -> MemoId {
        self.begin_value();
        let n = s.len();
        let op = if n <= 0xff && self.proto >= 4 {
            Some((SHORT_BINUNICODE, 1))
        } else if n as u64 <= 0xffff_ffff {
            Some((BINUNICODE, 4))
        } else if self.proto >= 4 {
            Some((BINUNICODE8, 8))
        } else {
            None
        };
        match op {
            Some((op, width)) => self.sized(op, width, s.as_bytes()),
            None => self.fail("strings over 4 GiB need pickle protocol 4 or higher"),
        }
        let id = self.memo_put();
        self.end_value();
        id
    }

    /// Writes and memoises a new bytes object (protocol 2: as CPython does,
    /// through `_codecs.encode(latin1 text, "latin1")`).
    pub fn bytes(&mut self, data: &[u8]) -> MemoId {
        if self.proto < 3 {
            return self.bytes_p2(data);
        }
        self.begin_value();
        let n = data.len() as u64;
        match n {
            0..=0xff => self.sized(SHORT_BINBYTES, 1, data),
            0x100..=0xffff_ffff => self.sized(BINBYTES, 4, data),
            _ if self.proto >= 4 => self.sized(BINBYTES8, 8, data),
            _ => self.fail("bytes over 4 GiB need pickle protocol 4 or higher"),
        }
        let id = self.memo_put();
        self.end_value();
        id
    }

    /// References an object memoised earlier (BINGET / LONG_BINGET).
    pub fn get(&mut self, id: MemoId) {
        debug_assert!(id.0 < self.memo, "memo id {} not written yet", id.0);
        if id.0 < 256 {
            self.atom(&[BINGET, id.0 as u8]);
        } else {
            let b = id.0.to_le_bytes();
            self.atom(&[LONG_BINGET, b[0], b[1], b[2], b[3]]);
        }
    }

    /// Opens a list of unknown length. Until its second item starts, the
    /// first item is held in memory (CPython writes a lone item with
    /// APPEND instead of MARK … APPENDS); prefer
    /// [`begin_list_len`](Self::begin_list_len) for long first items.
    pub fn begin_list(&mut self) -> MemoId {
        self.open(Kind::List, None)
    }

    /// Opens a list that will receive exactly `len` items.
    pub fn begin_list_len(&mut self, len: u64) -> MemoId {
        self.open(Kind::List, Some(len))
    }

    pub fn end_list(&mut self) {
        self.close(Kind::List, APPEND, APPENDS);
    }

    /// Opens a dict of unknown size; keys and values alternate until
    /// [`end_dict`](Self::end_dict). See [`begin_list`](Self::begin_list).
    pub fn begin_dict(&mut self) -> MemoId {
        self.open(Kind::Dict, None)
    }

    /// Opens a dict that will receive exactly `len` key/value pairs.
    pub fn begin_dict_len(&mut self, len: u64) -> MemoId {
        self.open(Kind::Dict, Some(len))
    }

    pub fn end_dict(&mut self) {
        self.close(Kind::Dict, SETITEM, SETITEMS);
    }

    /// Opens a tuple of exactly `len` elements.
    pub fn begin_tuple(&mut self, len: u64) {
        self.begin_value();
        if len > 3 {
            self.buf.push(MARK);
        }
        self.stack.push(Open::new(Kind::Tuple, Some(len)));
    }

    /// Closes a tuple; returns its memo id (the empty tuple is not memoised).
    pub fn end_tuple(&mut self) -> Option<MemoId> {
        let top = self.stack.pop().expect("end_tuple without begin_tuple");
        assert!(top.kind == Kind::Tuple, "end_tuple closes a list or dict");
        assert_eq!(Some(top.done), top.len, "tuple length");
        let id = match top.done {
            0 => {
                self.buf.push(EMPTY_TUPLE);
                None
            }
            n @ 1..=3 => {
                self.buf.push([TUPLE1, TUPLE2, TUPLE3][n as usize - 1]);
                Some(self.memo_put())
            }
            _ => {
                self.buf.push(TUPLE);
                Some(self.memo_put())
            }
        };
        self.end_value();
        id
    }

    /// Writes STOP, commits the last frame and flushes the output.
    pub fn finish(mut self) -> io::Result<W> {
        assert!(
            self.root_done && self.stack.is_empty(),
            "pickle not complete"
        );
        self.check()?;
        if let Some(kind) = self.failed {
            return Err(io::Error::new(kind, "an earlier pickle write failed"));
        }
        self.buf.push(STOP);
        let end = self.buf.len();
        if self.proto >= 4 {
            self.emit_frame(self.origin, end);
        } else {
            self.emit_raw(self.origin, end);
        }
        self.check()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl Open {
    fn new(kind: Kind, len: Option<u64>) -> Self {
        Open {
            kind,
            done: 0,
            in_batch: 0,
            batch_open: false,
            half: false,
            len,
            pending: false,
            mark_at: 0,
        }
    }
}

#[cfg(test)]
mod tests;
