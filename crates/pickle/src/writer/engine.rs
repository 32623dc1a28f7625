//! The writer's engine: values become bytes in a buffer; frames, batches
//! and MARKs are decided as containers close, and committed frames are
//! written out. The public calls in the parent module drive it.

use super::{Event, Kind, MemoId, Open, PickleWriter, BATCH, FRAME_SIZE_MIN, FRAME_SIZE_TARGET};
use crate::ops::*;
use std::io::{self, Write};

impl<W: Write> PickleWriter<W> {
    pub(super) fn atom(&mut self, bytes: &[u8]) {
        self.begin_value();
        self.buf.extend_from_slice(bytes);
        self.end_value();
    }

    pub(super) fn sized(&mut self, op: u8, width: usize, data: &[u8]) {
        let start = self.buf.len();
        self.buf.push(op);
        self.buf
            .extend_from_slice(&(data.len() as u64).to_le_bytes()[..width]);
        self.buf.extend_from_slice(data);
        if self.proto >= 4 && data.len() >= FRAME_SIZE_TARGET {
            self.event(Event::Raw(start, self.buf.len()));
        }
    }

    pub(super) fn bytes_p2(&mut self, data: &[u8]) -> MemoId {
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

    pub(super) fn global_p2(&mut self, slot: usize, op: &[u8]) {
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

    pub(super) fn open(&mut self, kind: Kind, len: Option<u64>) -> MemoId {
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

    pub(super) fn close(&mut self, kind: Kind, single: u8, batch: u8) {
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
    pub(super) fn begin_value(&mut self) {
        assert!(!self.root_done, "a pickle holds a single root value");
        self.open_item();
        self.event(Event::Boundary(self.buf.len()));
    }

    pub(super) fn open_item(&mut self) {
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
    pub(super) fn end_value(&mut self) {
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

    pub(super) fn resolve_pending(&mut self) {
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

    pub(super) fn event(&mut self, ev: Event) {
        if self.pendings > 0 {
            self.deferred.push(ev);
        } else {
            self.process(ev);
            self.compact();
        }
    }

    pub(super) fn process(&mut self, ev: Event) {
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

    pub(super) fn compact(&mut self) {
        if self.origin > 0 {
            self.buf.drain(..self.origin);
            self.origin = 0;
        }
    }

    pub(super) fn emit_frame(&mut self, s: usize, e: usize) {
        let n = e - s;
        if n >= FRAME_SIZE_MIN {
            let mut head = [FRAME; 9];
            head[1..].copy_from_slice(&(n as u64).to_le_bytes());
            self.write(&head, 0, 9);
        }
        self.emit_raw(s, e);
    }

    pub(super) fn emit_raw(&mut self, s: usize, e: usize) {
        let buf = std::mem::take(&mut self.buf);
        self.write(&buf, s, e);
        self.buf = buf;
    }

    pub(super) fn write(&mut self, data: &[u8], s: usize, e: usize) {
        if self.err.is_some() || self.failed.is_some() || s == e {
            return;
        }
        match self.out.write_all(&data[s..e]) {
            Ok(()) => self.written += (e - s) as u64,
            Err(err) => self.err = Some(err),
        }
    }

    pub(super) fn fail(&mut self, msg: &str) {
        if self.err.is_none() && self.failed.is_none() {
            self.err = Some(io::Error::new(io::ErrorKind::InvalidInput, msg.to_string()));
        }
    }

    pub(super) fn memo_put(&mut self) -> MemoId {
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
