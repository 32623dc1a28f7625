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

    // ---- internals ----

    fn atom(&mut self, bytes: &[u8]) {
        self.begin_value();
        self.buf.extend_from_slice(bytes);
        self.end_value();
    }

    fn sized(&mut self, op: u8, width: usize, data: &[u8]) {
        let start = self.buf.len();
        self.buf.push(op);
        self.buf
            .extend_from_slice(&(data.len() as u64).to_le_bytes()[..width]);
        self.buf.extend_from_slice(data);
        if self.proto >= 4 && data.len() >= FRAME_SIZE_TARGET {
            self.event(Event::Raw(start, self.buf.len()));
        }
    }

    fn bytes_p2(&mut self, data: &[u8]) -> MemoId {
        self.begin_value();
        // save_reduce: callable, argument tuple, REDUCE, then memoise. The
        // two arguments are saved inside a scope so that they do not count
        // as items of the enclosing container.
        self.stack.push(Open::new(Kind::Tuple, None));
        if data.is_empty() {
            self.global_p2(2, b"c__builtin__\nbytes\n");
            self.begin_tuple(0);
        } else {
            self.global_p2(0, b"c_codecs\nencode\n");
            self.begin_tuple(2);
            let text: String = data.iter().map(|&b| b as char).collect();
            self.str(&text);
            match self.p2_globals[1] {
                Some(id) => self.get(id),
                None => self.p2_globals[1] = Some(self.str("latin1")),
            }
        }
        self.end_tuple();
        self.stack.pop();
        self.buf.push(REDUCE);
        let id = self.memo_put();
        self.end_value();
        id
    }

    fn global_p2(&mut self, slot: usize, op: &[u8]) {
        match self.p2_globals[slot] {
            Some(id) => self.get(id),
            None => {
                self.begin_value();
                self.buf.extend_from_slice(op);
                self.p2_globals[slot] = Some(self.memo_put());
                self.end_value();
            }
        }
    }

    fn open(&mut self, kind: Kind, len: Option<u64>) -> MemoId {
        self.begin_value();
        self.buf.push(if kind == Kind::List {
            EMPTY_LIST
        } else {
            EMPTY_DICT
        });
        let id = self.memo_put();
        self.stack.push(Open::new(kind, len));
        id
    }

    fn close(&mut self, kind: Kind, single: u8, batch: u8) {
        let top = self.stack.pop().expect("end_list/end_dict without begin");
        assert!(top.kind == kind, "mismatched end_list/end_dict");
        assert!(!top.half, "dict closed after a key without its value");
        assert!(
            top.len.is_none() || top.len == Some(top.done),
            "container length"
        );
        if top.done == 1 && (top.pending || top.len == Some(1)) {
            if top.pending {
                self.resolve_pending();
            }
            self.buf.push(single);
        } else if top.in_batch > 0 {
            self.buf.push(batch);
        } else if kind == Kind::Dict && top.done > 0 {
            // batch_dict_exact loops once more after a full batch.
            self.buf.extend_from_slice(&[MARK, batch]);
        }
        self.end_value();
    }

    /// Called before every value, like the start of CPython's `save()`:
    /// opens a batch with MARK where needed, then marks a frame boundary
    /// (the frame is committed there once it holds 64 KiB).
    fn begin_value(&mut self) {
        assert!(!self.root_done, "a pickle holds a single root value");
        self.open_item();
        self.event(Event::Boundary(self.buf.len()));
    }

    fn open_item(&mut self) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        if top.kind == Kind::Tuple || (top.kind == Kind::Dict && top.half) {
            return;
        }
        if top.batch_open {
            if top.pending {
                // A second item: the first one needed its MARK after all.
                top.pending = false;
                let at = top.mark_at;
                self.buf.insert(at, MARK);
                for ev in &mut self.deferred {
                    match ev {
                        Event::Boundary(p) => *p += (*p >= at) as usize,
                        Event::Raw(s, e) => {
                            *s += (*s >= at) as usize;
                            *e += 1;
                        }
                    }
                }
                self.resolve_pending();
            }
            return;
        }
        top.batch_open = true;
        match (top.done, top.len) {
            (0, Some(1)) => {}
            (0, None) => {
                top.pending = true;
                top.mark_at = self.buf.len();
                self.pendings += 1;
            }
            _ => self.buf.push(MARK),
        }
    }

    /// Called after every complete value: batch bookkeeping of the
    /// enclosing container.
    fn end_value(&mut self) {
        let Some(top) = self.stack.last_mut() else {
            self.root_done = true;
            return;
        };
        match top.kind {
            Kind::Tuple => top.done += 1,
            Kind::Dict if !top.half => top.half = true,
            _ => {
                top.half = false;
                top.done += 1;
                top.in_batch += 1;
                if top.in_batch == BATCH {
                    self.buf.push(if top.kind == Kind::List {
                        APPENDS
                    } else {
                        SETITEMS
                    });
                    top.in_batch = 0;
                    top.batch_open = false;
                }
            }
        }
    }

    fn resolve_pending(&mut self) {
        self.pendings -= 1;
        if self.pendings == 0 {
            let events = std::mem::take(&mut self.deferred);
            for ev in &events {
                self.process(*ev);
            }
            self.deferred = events;
            self.deferred.clear();
            self.compact();
        }
    }

    fn event(&mut self, ev: Event) {
        if self.pendings > 0 {
            self.deferred.push(ev);
        } else {
            self.process(ev);
            self.compact();
        }
    }

    fn process(&mut self, ev: Event) {
        match ev {
            Event::Boundary(b) if self.proto >= 4 => {
                if b - self.origin >= FRAME_SIZE_TARGET {
                    self.emit_frame(self.origin, b);
                    self.origin = b;
                }
            }
            Event::Boundary(b) => {
                if b - self.origin >= FRAME_SIZE_TARGET {
                    self.emit_raw(self.origin, b);
                    self.origin = b;
                }
            }
            Event::Raw(s, e) => {
                self.emit_frame(self.origin, s);
                self.emit_raw(s, e);
                self.origin = e;
            }
        }
    }

    fn compact(&mut self) {
        if self.origin > 0 {
            self.buf.drain(..self.origin);
            self.origin = 0;
        }
    }

    fn emit_frame(&mut self, s: usize, e: usize) {
        let n = e - s;
        if n >= FRAME_SIZE_MIN {
            let mut head = [FRAME; 9];
            head[1..].copy_from_slice(&(n as u64).to_le_bytes());
            self.write(&head, 0, 9);
        }
        self.emit_raw(s, e);
    }

    fn emit_raw(&mut self, s: usize, e: usize) {
        let buf = std::mem::take(&mut self.buf);
        self.write(&buf, s, e);
        self.buf = buf;
    }

    fn write(&mut self, data: &[u8], s: usize, e: usize) {
        if self.err.is_some() || self.failed.is_some() || s == e {
            return;
        }
        match self.out.write_all(&data[s..e]) {
            Ok(()) => self.written += (e - s) as u64,
            Err(err) => self.err = Some(err),
        }
    }

    fn fail(&mut self, msg: &str) {
        if self.err.is_none() && self.failed.is_none() {
            self.err = Some(io::Error::new(io::ErrorKind::InvalidInput, msg.to_string()));
        }
    }

    fn memo_put(&mut self) -> MemoId {
        let id = self.memo;
        self.memo += 1;
        if self.proto >= 4 {
            self.buf.push(MEMOIZE);
        } else if id < 256 {
            self.buf.extend_from_slice(&[BINPUT, id as u8]);
        } else {
            self.buf.push(LONG_BINPUT);
            self.buf.extend_from_slice(&id.to_le_bytes());
        }
        MemoId(id)
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
mod tests {
    use super::*;

    fn dump(proto: u8, body: impl Fn(&mut PickleWriter<Vec<u8>>)) -> Vec<u8> {
        let mut w = PickleWriter::new(Vec::new(), proto).unwrap();
        body(&mut w);
        w.finish().unwrap()
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// ```python
    /// shared = [1, 2]
    /// obj = {
    ///   "ints": [0, 255, 256, 65535, 65536, -1, -256, 2**31-1, -2**31, 2**31,
    ///            -2**31-1, 2**47+512, 2**63-1, -2**63],
    ///   "misc": [None, True, False, 1.5, -0.25, "h\u00e9llo", "", (), (7,), (1, 2),
    ///            (1, 2, 3), (1, 2, 3, 4)],
    ///   "one": [shared], "shared": shared, "d1": {"x": 1},
    ///   "bytes": [b"ab", b"", b"cd"],
    /// }
    /// for p in (2, 3, 4, 5): print(p, pickle.dumps(obj, protocol=p).hex())
    /// ```
    fn small(w: &mut PickleWriter<Vec<u8>>) {
        w.begin_dict();
        w.str("ints");
        w.begin_list();
        for i in [
            0,
            255,
            256,
            65535,
            65536,
            -1,
            -256,
            i32::MAX as i64,
            i32::MIN as i64,
        ] {
            w.int(i);
        }
        for i in [1 << 31, -(1 << 31) - 1, (1 << 47) + 512, i64::MAX, i64::MIN] {
            w.int(i);
        }
        w.end_list();
        w.str("misc");
        w.begin_list_len(12);
        w.none();
        w.bool(true);
        w.bool(false);
        w.float(1.5);
        w.float(-0.25);
        w.str("h\u{e9}llo");
        w.str("");
        for n in 0..=4u64 {
            if n == 1 {
                w.begin_tuple(1);
                w.int(7);
            } else if n == 0 {
                w.begin_tuple(0);
            } else {
                w.begin_tuple(n);
                (1..=n as i64).for_each(|i| w.int(i));
            }
            w.end_tuple();
        }
        w.end_list();
        w.str("one");
        w.begin_list();
        let shared = w.begin_list();
        w.int(1);
        w.int(2);
        w.end_list();
        w.end_list();
        w.str("shared");
        w.get(shared);
        w.str("d1");
        w.begin_dict();
        w.str("x");
        w.int(1);
        w.end_dict();
        w.str("bytes");
        w.begin_list();
        w.bytes(b"ab");
        w.bytes(b"");
        w.bytes(b"cd");
        w.end_list();
        w.end_dict();
    }

    #[test]
    fn small_structure_matches_cpython() {
        let common = "4b004bff4d00014dffff4a000001004affffffff4a00ffffff4affffff7f4a000000808a0500000080008a05ffffff7fff8a07000200000080008a08ffffffffffffff7f8a080000000000000080";
        let p2 = format!("80027d7100285804000000696e747371015d710228{common}6558040000006d69736371035d7104284e8889473ff800000000000047bfd0000000000000580600000068c3a96c6c6f710558000000007106294b078571074b014b028671084b014b024b03877109284b014b024b034b0474710a6558030000006f6e65710b5d710c5d710d284b014b0265615806000000736861726564710e680d58020000006431710f7d711058010000007871114b01735805000000627974657371125d711328635f636f646563730a656e636f64650a711458020000006162711558060000006c6174696e317116867117527118635f5f6275696c74696e5f5f0a62797465730a71192952711a681458020000006364711b681686711c52711d65752e");
        let p3 = format!("80037d7100285804000000696e747371015d710228{common}6558040000006d69736371035d7104284e8889473ff800000000000047bfd0000000000000580600000068c3a96c6c6f710558000000007106294b078571074b014b028671084b014b024b03877109284b014b024b034b0474710a6558030000006f6e65710b5d710c5d710d284b014b0265615806000000736861726564710e680d58020000006431710f7d711058010000007871114b01735805000000627974657371125d7113284302616271144300711543026364711665752e");
        let p4 = format!("95eb000000000000007d94288c04696e7473945d9428{common}658c046d697363945d94284e8889473ff800000000000047bfd00000000000008c0668c3a96c6c6f948c0094294b0785944b014b0286944b014b024b038794284b014b024b034b047494658c036f6e65945d945d94284b014b0265618c0673686172656494680d8c026431947d948c0178944b01738c056279746573945d94284302616294430094430263649465752e");
        assert_eq!(dump(2, small), hex(&p2));
        assert_eq!(dump(3, small), hex(&p3));
        assert_eq!(dump(4, small), hex(&format!("8004{p4}")));
        assert_eq!(dump(5, small), hex(&format!("8005{p4}")));
    }

    #[test]
    fn ints_beyond_64_bits_match_cpython() {
        // pickle.dumps(v, 2).hex() for each v
        for (v, want) in [
            ((1i128 << 64) - 1, "80028a09ffffffffffffffff002e"),
            (1i128 << 70, "80028a090000000000000000402e"),
            (-(1i128 << 64), "80028a090000000000000000ff2e"),
            (-(1i128 << 63) - 1, "80028a09ffffffffffffff7fff2e"),
            (i128::MAX, "80028a10ffffffffffffffffffffffffffffff7f2e"),
        ] {
            assert_eq!(dump(2, |w| w.int128(v)), hex(want), "{v}");
        }
        assert_eq!(dump(2, |w| w.int128(-1)), dump(2, |w| w.int(-1)));
    }

    #[test]
    fn tiny_pickles_are_unframed() {
        // pickle.dumps(None, 4), pickle.dumps({}, 4), pickle.dumps([1], 4)
        assert_eq!(dump(4, |w| w.none()), b"\x80\x04N.");
        assert_eq!(
            dump(4, |w| {
                w.begin_dict();
                w.end_dict()
            }),
            b"\x80\x04}\x94."
        );
        let one = dump(4, |w| {
            w.begin_list();
            w.int(1);
            w.end_list()
        });
        assert_eq!(
            one,
            b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94K\x01a."
        );
    }

    #[test]
    fn rejects_bad_protocol_and_reports_io_errors() {
        assert!(PickleWriter::new(Vec::new(), 1).is_err());
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        assert!(PickleWriter::new(Full, 4).is_err());
        let mut w = PickleWriter::new(io::Cursor::new([0u8; 8]), 4).unwrap();
        w.begin_list();
        (0..100_000).for_each(|i| w.int(i));
        assert!(w.check().is_err());
        w.end_list();
        assert!(w.finish().is_err());
    }
}
