//! The unpickling machine: protocols 0 to 5, no code execution.
//!
//! Differences from CPython's `pickle.load`, all on purpose:
//! * GLOBAL, STACK_GLOBAL, REDUCE, NEWOBJ(_EX), INST, OBJ, BUILD, PERSID,
//!   EXT* and NEXT_BUFFER produce inert [`Opaque`] values and are listed in
//!   [`Document::skipped`]; nothing is imported, called or constructed.
//! * Every length is checked against the bytes that remain, so allocation is
//!   bounded by a small multiple of the input size.
//! * The machine is iterative; open MARKs (the only source of VM nesting)
//!   are capped by [`ParseOptions::max_marks`].
//! * When the input ends before STOP (a process killed mid-dump), the open
//!   containers are closed as if their pending SETITEMS/APPENDS had run, and
//!   the document records a [`Truncation`].
//! * Module and class names that STACK_GLOBAL takes from (possibly memoised)
//!   strings are cut to `MAX_NAME_BYTES`, so that a 5-byte
//!   `BINGET BINGET STACK_GLOBAL` cannot copy a huge string again each time.
//! * Decimal integers of protocols 0/1 (INT, LONG) are limited to
//!   `MAX_DECIMAL_DIGITS` digits, as in CPython 3.11+ (`int()`'s default
//!   limit): converting longer ones takes quadratic time.

use std::collections::HashMap;

use crate::builder::{short_key, DocumentBuilder};
use crate::document::{Document, Truncation};
use crate::error::PickleError;
use crate::ops::*;
use crate::prefault;
use crate::text;
use crate::value::{ContainerKind, Opaque, Val, Value, SHORT_STR};

/// Options for [`parse_with`]. `Default` gives the documented defaults.
pub struct ParseOptions<'a> {
    /// Maximum number of simultaneously open MARKs. Default 4096; real
    /// snapshots need about 6.
    pub max_marks: usize,
    /// Recover a document from input that ends before STOP. Default true.
    pub recover_truncated: bool,
    /// Called with the current byte offset roughly every
    /// [`ParseOptions::progress_every`] bytes (for progress bars, or to drop
    /// consumed pages of a memory map).
    pub progress: Option<&'a mut dyn FnMut(u64)>,
    /// Default 8 MiB.
    pub progress_every: u64,
}

impl Default for ParseOptions<'_> {
    fn default() -> Self {
        ParseOptions {
            max_marks: 4096,
            recover_truncated: true,
            progress: None,
            progress_every: 8 << 20,
        }
    }
}

/// Parse a pickle with default options.
pub fn parse(input: &[u8]) -> Result<Document, PickleError> {
    parse_with(input, &mut ParseOptions::default())
}

/// Parse a pickle.
pub fn parse_with(input: &[u8], opts: &mut ParseOptions<'_>) -> Result<Document, PickleError> {
    if input.is_empty() {
        return Err(PickleError::Empty);
    }
    let mut vm = Vm {
        input,
        pos: 0,
        op_start: 0,
        stack: Vec::with_capacity(64),
        marks: Vec::new(),
        memo: Vec::new(),
        memo_sparse: HashMap::new(),
        memo_count: 0,
        b: DocumentBuilder::for_input(input.len()),
    };
    let result = if input.len() >= PREFAULT_MIN_INPUT {
        let arenas = vm.b.arenas();
        let read = prefault::Arena::input(input);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| prefault::run(&[&arenas[0], &arenas[1], &read], &done));
            let r = vm.run(opts, Some((&arenas, &read)));
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            r
        })
    } else {
        vm.run(opts, None)
    };
    match result {
        Ok(root) => Ok(vm.b.finish(root)),
        Err(e @ PickleError::UnexpectedEof { .. }) if opts.recover_truncated => vm.recover(e),
        Err(e) => Err(e),
    }
}

/// Inputs from this size on get the prefault helper thread (below it, the
/// thread would cost more than it saves).
const PREFAULT_MIN_INPUT: usize = 16 << 20;

/// Longest module or name kept from a STACK_GLOBAL (longer ones are cut and
/// end in `…`), and longest name quoted in a [`Document::skipped`] record.
const MAX_NAME_BYTES: usize = 256;

/// Most digits accepted in a protocol 0/1 decimal integer (CPython's
/// default `sys.get_int_max_str_digits()`).
const MAX_DECIMAL_DIGITS: usize = 4300;

/// `s`, cut to `MAX_NAME_BYTES` on a char boundary.
fn clip(s: &str) -> String {
    if s.len() <= MAX_NAME_BYTES {
        return s.to_owned();
    }
    let mut end = MAX_NAME_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Memo slot that was never written.
const VACANT: Value = Value::VACANT;

struct Vm<'i> {
    input: &'i [u8],
    pos: usize,
    op_start: usize,
    stack: Vec<Value>,
    /// Stack heights at each open MARK (CPython's metastack).
    marks: Vec<usize>,
    memo: Vec<Value>,
    /// Memo slots far beyond the dense range: a hostile PUT 4000000000 must
    /// not allocate a 32 GB vector.
    memo_sparse: HashMap<u64, Value>,
    memo_count: u64,
    b: DocumentBuilder,
}

macro_rules! cap {
    ($self:ident, $e:expr) => {
        $e.map_err(|c| PickleError::LimitExceeded {
            offset: $self.op_start as u64,
            what: c.0,
            limit: u32::MAX as u64,
        })?
    };
}

// After `cap!`: macros are in scope only below their definition.
mod opaque;
mod read;
mod recover;
mod stack;

impl<'i> Vm<'i> {
    fn run(
        &mut self,
        opts: &mut ParseOptions<'_>,
        arenas: Option<(&[prefault::Arena; 2], &prefault::Arena)>,
    ) -> Result<Value, PickleError> {
        const CHECK_EVERY: usize = 1 << 20;
        let mut next_progress = opts.progress_every;
        let mut next_check = CHECK_EVERY;
        loop {
            if self.pos >= next_check {
                next_check = self.pos + CHECK_EVERY;
                if let Some((a, read)) = arenas {
                    self.b.publish(a);
                    read.used
                        .store(self.pos, std::sync::atomic::Ordering::Relaxed);
                }
                if self.pos as u64 >= next_progress {
                    if let Some(p) = opts.progress.as_mut() {
                        p(self.pos as u64);
                    }
                    next_progress = self.pos as u64 + opts.progress_every;
                }
            }
            self.op_start = self.pos;
            let Some(&op) = self.input.get(self.pos) else {
                return Err(self.eof("an opcode (no STOP before the end)", 1));
            };
            self.pos += 1;
            match op {
                // --- hot path of real snapshots first ---
                BINGET | LONG_BINGET => {
                    let i = if op == BINGET {
                        self.take(1, "BINGET")?[0] as u64
                    } else {
                        self.u32le("LONG_BINGET")? as u64
                    };
                    self.get_memo(i)?;
                    // Frame lists are long runs of memo references: consume
                    // the run here rather than through the dispatch jump,
                    // which mispredicts on every opcode.
                    self.memo_run()?;
                }
                MEMOIZE => {
                    let i = self.memo_count;
                    self.put_memo(i)?;
                }
                MARK => {
                    if self.marks.len() >= opts.max_marks {
                        return Err(PickleError::LimitExceeded {
                            offset: self.op_start as u64,
                            what: "open MARKs (nesting depth)",
                            limit: opts.max_marks as u64,
                        });
                    }
                    self.marks.push(self.stack.len());
                }
                EMPTY_DICT => self.push_container(ContainerKind::Dict)?,
                EMPTY_LIST => self.push_container(ContainerKind::List)?,
                SETITEMS => self.extend_from_mark("SETITEMS", ContainerKind::Dict)?,
                APPENDS => self.extend_from_mark("APPENDS", ContainerKind::List)?,
                BININT1 => {
                    let v = self.take(1, "BININT1")?[0] as i64;
                    self.push_int(v);
                }
                BININT2 => {
                    let b = self.take(2, "BININT2")?;
                    let v = u16::from_le_bytes([b[0], b[1]]) as i64;
                    self.push_int(v);
                }
                BININT => {
                    let v = self.u32le("BININT")? as i32 as i64;
                    self.push_int(v);
                }
                LONG1 => {
                    let n = self.take(1, "LONG1")?[0] as usize;
                    // Addresses and timestamps: 5-8 bytes, the hot case. One
                    // fixed 8-byte load where the input has the room; a
                    // copy of `n` bytes is a call to memcpy.
                    if (1..=8).contains(&n) && self.input.len() - self.pos >= 8 {
                        let mut buf = [0u8; 8];
                        buf.copy_from_slice(&self.input[self.pos..self.pos + 8]);
                        self.pos += n;
                        let shift = 64 - 8 * n as u32;
                        let x = (i64::from_le_bytes(buf) << shift) >> shift;
                        let v = self.b.int(x);
                        self.stack.push(v);
                        continue;
                    }
                    // Near the end of the input, and longer integers.
                    let bytes = self.take(n, "LONG1")?;
                    let v = self.b.int_from_le_bytes(bytes);
                    self.stack.push(v);
                }
                LONG4 => {
                    let n = self.u32le("LONG4")? as i32;
                    if n < 0 {
                        return Err(self.bad("LONG4", format!("negative length {n}")));
                    }
                    let bytes = self.take(n as usize, "LONG4")?;
                    let v = self.b.int_from_le_bytes(bytes);
                    self.stack.push(v);
                }
                SHORT_BINUNICODE => {
                    let n = self.take(1, "SHORT_BINUNICODE")?[0] as usize;
                    self.push_utf8(n, "SHORT_BINUNICODE")?;
                }
                BINUNICODE => {
                    let n = self.u32le("BINUNICODE")? as usize;
                    self.push_utf8(n, "BINUNICODE")?;
                }
                BINUNICODE8 => {
                    let n = self.u64len("BINUNICODE8")?;
                    self.push_utf8(n, "BINUNICODE8")?;
                }
                NEWTRUE => self.stack.push(Value::bool(true)),
                NEWFALSE => self.stack.push(Value::bool(false)),
                NONE => self.stack.push(Value::NONE),
                TUPLE1 | TUPLE2 | TUPLE3 => {
                    let n = (op - TUPLE1 + 1) as usize;
                    let name = ["TUPLE1", "TUPLE2", "TUPLE3"][n - 1];
                    if self.stack.len() < self.fence() + n {
                        return Err(self.underflow(name));
                    }
                    let at = self.stack.len() - n;
                    let v = cap!(
                        self,
                        self.b
                            .container_with(ContainerKind::Tuple, &self.stack[at..])
                    );
                    self.stack.truncate(at);
                    self.stack.push(v);
                }
                FRAME => {
                    // Framing is an I/O hint; the content is read linearly anyway.
                    self.take(8, "FRAME")?;
                }
                PROTO => {
                    let p = self.take(1, "PROTO")?[0];
                    if p > 5 {
                        return Err(PickleError::UnsupportedProtocol {
                            offset: self.op_start as u64,
                            protocol: p,
                        });
                    }
                    self.b.doc.protocol = p;
                }
                STOP => {
                    return match self.stack.last() {
                        Some(v) if self.marks.is_empty() => Ok(*v),
                        _ => Err(PickleError::BadStop {
                            offset: self.op_start as u64,
                            stack_len: self.stack.len(),
                        }),
                    };
                }
                // --- the rest of protocols 2-5 ---
                BINFLOAT => {
                    let b = self.take(8, "BINFLOAT")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    let v = self.b.float(f64::from_be_bytes(a));
                    self.stack.push(v);
                }
                BINBYTES => {
                    let n = self.u32le("BINBYTES")? as usize;
                    self.push_bytes(n, "BINBYTES", false)?;
                }
                SHORT_BINBYTES => {
                    let n = self.take(1, "SHORT_BINBYTES")?[0] as usize;
                    self.push_bytes(n, "SHORT_BINBYTES", false)?;
                }
                BINBYTES8 => {
                    let n = self.u64len("BINBYTES8")?;
                    self.push_bytes(n, "BINBYTES8", false)?;
                }
                BYTEARRAY8 => {
                    let n = self.u64len("BYTEARRAY8")?;
                    self.push_bytes(n, "BYTEARRAY8", true)?;
                }
                EMPTY_TUPLE => self.push_container(ContainerKind::Tuple)?,
                EMPTY_SET => self.push_container(ContainerKind::Set)?,
                ADDITEMS => self.extend_from_mark("ADDITEMS", ContainerKind::Set)?,
                FROZENSET => self.build_from_mark("FROZENSET", ContainerKind::FrozenSet)?,
                TUPLE => self.build_from_mark("TUPLE", ContainerKind::Tuple)?,
                LIST => self.build_from_mark("LIST", ContainerKind::List)?,
                DICT => {
                    let m = self.pop_mark("DICT")?;
                    if !(self.stack.len() - m).is_multiple_of(2) {
                        return Err(self.bad("DICT", "odd number of items after MARK".into()));
                    }
                    let v = cap!(
                        self,
                        self.b.container_with(ContainerKind::Dict, &self.stack[m..])
                    );
                    self.stack.truncate(m);
                    self.stack.push(v);
                }
                APPEND => {
                    let v = self.pop("APPEND")?;
                    self.extend_top("APPEND", ContainerKind::List, &[v])?;
                }
                SETITEM => {
                    let v = self.pop("SETITEM")?;
                    let k = self.pop("SETITEM")?;
                    self.extend_top("SETITEM", ContainerKind::Dict, &[k, v])?;
                }
                BINPUT => {
                    let i = self.take(1, "BINPUT")?[0] as u64;
                    self.put_memo(i)?;
                }
                LONG_BINPUT => {
                    let i = self.u32le("LONG_BINPUT")? as u64;
                    self.put_memo(i)?;
                }
                POP => {
                    if self.stack.len() > self.fence() {
                        self.stack.pop();
                    } else if let Some(m) = self.marks.pop() {
                        self.stack.truncate(m);
                    } else {
                        return Err(self.underflow("POP"));
                    }
                }
                POP_MARK => {
                    let m = self.pop_mark("POP_MARK")?;
                    self.stack.truncate(m);
                }
                DUP => {
                    let top = *self.top("DUP")?;
                    self.stack.push(top);
                }
                // --- protocol 0/1 text opcodes ---
                INT => {
                    let line = self.line("INT")?;
                    let v = match line {
                        b"01" => Value::bool(true),
                        b"00" => Value::bool(false),
                        _ => self.decimal_int(line, "INT")?,
                    };
                    self.stack.push(v);
                }
                LONG => {
                    let mut line = self.line("LONG")?;
                    if let Some(stripped) = line.strip_suffix(b"L") {
                        line = stripped;
                    }
                    let v = self.decimal_int(line, "LONG")?;
                    self.stack.push(v);
                }
                FLOAT => {
                    let line = self.line("FLOAT")?;
                    let f = std::str::from_utf8(line)
                        .ok()
                        .and_then(|s| s.trim().parse::<f64>().ok())
                        .ok_or_else(|| self.bad("FLOAT", "not a decimal float".into()))?;
                    let v = self.b.float(f);
                    self.stack.push(v);
                }
                STRING => {
                    let line = self.line("STRING")?;
                    let s = text::unquote_py2_string(line)
                        .ok_or_else(|| self.bad("STRING", "not a quoted string".into()))?;
                    let v = cap!(self, self.b.str(&text::latin1(&s)));
                    self.stack.push(v);
                }
                BINSTRING => {
                    let n = self.u32le("BINSTRING")? as i32;
                    if n < 0 {
                        return Err(self.bad("BINSTRING", format!("negative length {n}")));
                    }
                    let raw = self.take(n as usize, "BINSTRING")?;
                    let v = cap!(self, self.b.str(&text::latin1(raw)));
                    self.stack.push(v);
                }
                SHORT_BINSTRING => {
                    let n = self.take(1, "SHORT_BINSTRING")?[0] as usize;
                    let raw = self.take(n, "SHORT_BINSTRING")?;
                    let v = cap!(self, self.b.str(&text::latin1(raw)));
                    self.stack.push(v);
                }
                UNICODE => {
                    let line = self.line("UNICODE")?;
                    let s = text::raw_unicode_escape(line);
                    let v = cap!(self, self.b.str(&s));
                    self.stack.push(v);
                }
                GET => {
                    let line = self.line("GET")?;
                    let i = text::parse_u64(line)
                        .ok_or_else(|| self.bad("GET", "not an index".into()))?;
                    self.get_memo(i)?;
                }
                PUT => {
                    let line = self.line("PUT")?;
                    let i = text::parse_u64(line)
                        .ok_or_else(|| self.bad("PUT", "not an index".into()))?;
                    self.put_memo(i)?;
                }
                // --- constructs that would execute code: recorded, never run ---
                GLOBAL => {
                    let module = text::latin1(self.line("GLOBAL")?);
                    let name = text::latin1(self.line("GLOBAL")?);
                    self.push_global(module, name);
                }
                STACK_GLOBAL => {
                    let name = self.pop("STACK_GLOBAL")?;
                    let module = self.pop("STACK_GLOBAL")?;
                    let (Some(m), Some(n)) =
                        (self.b.doc().as_str(module), self.b.doc().as_str(name))
                    else {
                        return Err(self.wrong(
                            "STACK_GLOBAL",
                            "two strings (module, name)",
                            module,
                        ));
                    };
                    let (m, n) = (clip(m), clip(n));
                    self.push_global(m, n);
                }
                REDUCE => {
                    let args = self.pop("REDUCE")?;
                    let callable = self.pop("REDUCE")?;
                    let what = format!(
                        "call {}{}",
                        self.describe(callable),
                        self.describe_args(args)
                    );
                    self.push_opaque(Opaque::Reduce { callable, args }, what);
                }
                NEWOBJ => {
                    let args = self.pop("NEWOBJ")?;
                    let class = self.pop("NEWOBJ")?;
                    let what = format!(
                        "construct {}{}",
                        self.describe(class),
                        self.describe_args(args)
                    );
                    self.push_opaque(Opaque::NewObj { class, args }, what);
                }
                NEWOBJ_EX => {
                    let _kwargs = self.pop("NEWOBJ_EX")?;
                    let args = self.pop("NEWOBJ_EX")?;
                    let class = self.pop("NEWOBJ_EX")?;
                    let what = format!(
                        "construct {}{}",
                        self.describe(class),
                        self.describe_args(args)
                    );
                    self.push_opaque(Opaque::NewObj { class, args }, what);
                }
                INST => {
                    let module = text::latin1(self.line("INST")?);
                    let name = text::latin1(self.line("INST")?);
                    let m = self.pop_mark("INST")?;
                    let args = cap!(
                        self,
                        self.b
                            .container_with(ContainerKind::Tuple, &self.stack[m..])
                    );
                    self.stack.truncate(m);
                    let class = self.b.opaque(Opaque::Global {
                        module: module.clone(),
                        name: name.clone(),
                    });
                    let what = format!("construct {module}.{name}{}", self.describe_args(args));
                    self.push_opaque(Opaque::NewObj { class, args }, what);
                }
                OBJ => {
                    let m = self.pop_mark("OBJ")?;
                    if self.stack.len() == m {
                        return Err(self.underflow("OBJ"));
                    }
                    let class = self.stack[m];
                    let args = cap!(
                        self,
                        self.b
                            .container_with(ContainerKind::Tuple, &self.stack[m + 1..])
                    );
                    self.stack.truncate(m);
                    let what = format!(
                        "construct {}{}",
                        self.describe(class),
                        self.describe_args(args)
                    );
                    self.push_opaque(Opaque::NewObj { class, args }, what);
                }
                BUILD => {
                    let state = self.pop("BUILD")?;
                    let object = self.pop("BUILD")?;
                    let what = format!("set state of {}", self.describe(object));
                    self.push_opaque(Opaque::Build { object, state }, what);
                }
                PERSID => {
                    let pid = text::latin1(self.line("PERSID")?);
                    let v = cap!(self, self.b.str(&pid));
                    self.push_opaque(
                        Opaque::PersistentId(v),
                        format!("load persistent id {pid:?}"),
                    );
                }
                BINPERSID => {
                    let pid = self.pop("BINPERSID")?;
                    self.push_opaque(Opaque::PersistentId(pid), "load a persistent id".into());
                }
                EXT1 | EXT2 | EXT4 => {
                    let code = match op {
                        EXT1 => self.take(1, "EXT1")?[0] as u32,
                        EXT2 => {
                            let b = self.take(2, "EXT2")?;
                            u16::from_le_bytes([b[0], b[1]]) as u32
                        }
                        _ => self.u32le("EXT4")?,
                    };
                    self.push_opaque(
                        Opaque::Extension(code),
                        format!("look up extension code {code}"),
                    );
                }
                NEXT_BUFFER => {
                    self.push_opaque(Opaque::OutOfBandBuffer, "use an out-of-band buffer".into());
                }
                READONLY_BUFFER => {
                    self.top("READONLY_BUFFER")?;
                }
                other => {
                    return Err(PickleError::UnknownOpcode {
                        offset: self.op_start as u64,
                        byte: other,
                    })
                }
            }
        }
    }
}
