//! Device traces: one column per field, decoded on two threads when large.

use vramscope_pickle::{ContainerId, Val, Value};

use super::{push_opt, Decoder, PathErr};
use crate::intern::{Frame, FrameId, StackId, StrId};
use crate::keys::Key;
use crate::model::*;
use crate::repair::Seg;

/// Traces from this many events on are decoded on two threads.
const PARALLEL_MIN_EVENTS: usize = 200_000;

impl DeviceTrace {
    /// Room for `n` more events in the columns every event fills.
    fn reserve_exact(&mut self, n: usize) {
        self.action.reserve_exact(n);
        self.addr.reserve_exact(n);
        self.size.reserve_exact(n);
        self.stream.reserve_exact(n);
        self.time_us.reserve_exact(n);
        self.stack.reserve_exact(n);
    }
}

impl Action {
    /// Whether the replay uses the entry's address and size: such an entry
    /// whose address or size is unusable is kept as `unknown` rather than
    /// replayed with a made-up value.
    fn needs_addr_and_size(self) -> bool {
        matches!(
            self,
            Action::Alloc
                | Action::FreeRequested
                | Action::FreeCompleted
                | Action::SegmentAlloc
                | Action::SegmentFree
                | Action::SegmentMap
                | Action::SegmentUnmap
        )
    }
}

impl Decoder<'_> {
    pub(super) fn traces(&mut self, v: Value) -> Vec<DeviceTrace> {
        let Some(c) = self.list_or_repair(v, "ignored") else {
            return Vec::new();
        };
        let doc = self.doc;
        let mut out = Vec::with_capacity(doc.len(c));
        for (d, dv) in doc.items(c).enumerate() {
            let mut t = DeviceTrace {
                device: d as u32,
                ..Default::default()
            };
            self.within(Seg::Idx(d), |s| s.trace(dv, &mut t));
            out.push(t);
        }
        out
    }

    fn trace(&mut self, v: Value, t: &mut DeviceTrace) {
        let Some(c) = self.list_or_repair(v, "device trace ignored") else {
            return;
        };
        let n = self.doc.len(c);
        t.reserve_exact(n);
        if n < PARALLEL_MIN_EVENTS || self.threads < 2 {
            return self.entries(c, 0..n, n, t);
        }
        // Two halves on two cores, each with its own intern tables; the
        // second half's ids are then mapped into this decoder's tables.
        let mid = n / 2;
        let mut other = Decoder::new(self.doc, 1);
        other.truncated = self.truncated;
        other.path = self.path.clone();
        let mut tb = DeviceTrace {
            device: t.device,
            ..Default::default()
        };
        // Sized once: growing by doubling would hold up to three halves'
        // worth of columns at a reallocation.
        tb.reserve_exact(n - mid);
        let rb = std::thread::scope(|s| {
            let h = s.spawn(|| {
                other.entries(c, mid..n, n, &mut tb);
                (other, tb)
            });
            self.entries(c, 0..mid, n, t);
            h.join()
        });
        let (other, tb) = match rb {
            Ok(x) => x,
            Err(p) => std::panic::resume_unwind(p),
        };
        self.absorb(other, tb, t);
    }

    /// Decode entries `range` of the trace list `c` (of `n` entries) into `t`.
    fn entries(
        &mut self,
        c: ContainerId,
        range: std::ops::Range<usize>,
        n: usize,
        t: &mut DeviceTrace,
    ) {
        let mut dropped = 0usize;
        let doc = self.doc;
        let items = doc.items(c).skip(range.start).take(range.len());
        self.path.push(Seg::Idx(range.start));
        for (k, ev) in items.enumerate() {
            let i = range.start + k;
            // A dump cut short leaves a half-written last entry: drop it
            // rather than count it as repaired.
            if self.truncated && i + 1 == n && !self.is_whole_entry(ev) {
                dropped += 1;
                continue;
            }
            self.set_index(i);
            self.entry(ev, t);
        }
        self.path.pop();
        if dropped > 0 {
            self.warnings.push(format!(
                "device {}: dropped {dropped} incomplete trailing event(s) of the truncated file",
                t.device
            ));
        }
    }

    /// A dict with both `action` and `size`.
    fn is_whole_entry(&mut self, v: Value) -> bool {
        let Val::Dict(c) = self.doc.get(v) else {
            return false;
        };
        let doc = self.doc;
        let (mut action, mut size) = (false, false);
        for (k, _) in doc.pairs(c) {
            match self.key(k) {
                Key::Action => action = true,
                Key::Size => size = true,
                _ => {}
            }
        }
        action && size
    }

    /// Append `tb` (decoded by `other`) to `t`, mapping its ids into ours.
    fn absorb(&mut self, other: Decoder<'_>, tb: DeviceTrace, t: &mut DeviceTrace) {
        let smap: Vec<StrId> = (0..other.strings.len() as u32)
            .map(|i| self.strings.intern(other.strings.get(StrId(i))))
            .collect();
        let fmap: Vec<FrameId> = (0..other.frames.len() as u32)
            .map(|i| {
                let f = other.frames.get(FrameId(i));
                self.frames.intern(Frame {
                    filename: smap[f.filename.0 as usize],
                    line: f.line,
                    name: smap[f.name.0 as usize],
                })
            })
            .collect();
        let mut buf = Vec::new();
        let kmap: Vec<StackId> = (0..other.stacks.len() as u32)
            .map(|i| {
                buf.clear();
                buf.extend(
                    other
                        .stacks
                        .get(StackId(i))
                        .iter()
                        .map(|f| fmap[f.0 as usize]),
                );
                self.stacks.intern(&buf)
            })
            .collect();
        let stack = |s: StackId| if s.is_none() { s } else { kmap[s.0 as usize] };
        let base = t.len();
        let nb = tb.len();
        // Each of the half's columns is freed as soon as it is copied, so
        // the whole trace and its second half are never resident together
        // (a tenth of the peak on a 10M-event file).
        let DeviceTrace {
            action,
            addr,
            size,
            stream: streams,
            time_us,
            stack: stacks,
            compile_context,
            user_metadata,
            category,
            device_free,
            forward_stack,
            pools,
            ..
        } = tb;
        t.action.extend_from_slice(&action);
        drop(action);
        t.addr.extend_from_slice(&addr);
        drop(addr);
        t.size.extend_from_slice(&size);
        drop(size);
        t.stream.extend_from_slice(&streams);
        drop(streams);
        t.time_us.extend_from_slice(&time_us);
        drop(time_us);
        t.stack.extend(stacks.iter().map(|&s| stack(s)));
        drop(stacks);
        let empty = self.empty;
        for (col, other_col) in [
            (&mut t.compile_context, compile_context),
            (&mut t.user_metadata, user_metadata),
            (&mut t.category, category),
        ] {
            match (col.as_mut(), other_col) {
                (Some(c), Some(o)) => c.extend(o.iter().map(|s| smap[s.0 as usize])),
                (Some(c), None) => c.resize(base + nb, empty),
                (None, Some(o)) => {
                    let mut c = vec![empty; base];
                    c.extend(o.iter().map(|s| smap[s.0 as usize]));
                    *col = Some(c);
                }
                (None, None) => {}
            }
        }
        t.device_free
            .extend(device_free.iter().map(|&(i, b)| (i + base as u32, b)));
        t.forward_stack.extend(
            forward_stack
                .iter()
                .map(|&(i, s)| (i + base as u32, stack(s))),
        );
        t.pools
            .extend(pools.iter().map(|&(i, p)| (i + base as u32, p)));
        self.warnings.extend(other.warnings);
        self.repairs.absorb(other.repairs);
    }

    /// One trace entry. Whatever is wrong in it is repaired and counted;
    /// only an entry that is not a dict is left out.
    fn entry(&mut self, v: Value, t: &mut DeviceTrace) {
        let Val::Dict(c) = self.doc.get(v) else {
            let e = PathErr::new("a trace entry dict", self.found(v));
            self.repair(e, "entry left out");
            return;
        };
        let doc = self.doc;
        let mut f = Fields::default();
        if let Some((shape, vals)) = doc.shaped_dict(c) {
            // The keys of the shape, resolved once for all its entries
            // (taken out while the fields are read, which borrows the
            // decoder; the length test keeps a plan that is not there from
            // passing for one).
            let keys = std::mem::take(&mut self.shape_plan);
            let keys = if self.plan_shape == Some(shape) && keys.len() == vals.len() {
                keys
            } else {
                self.plan_shape = Some(shape);
                doc.shape_keys(shape).iter().map(|&k| self.key(k)).collect()
            };
            for (&key, &val) in keys.iter().zip(vals) {
                self.field(key, val, &mut f);
            }
            self.shape_plan = keys;
        } else {
            for (k, val) in doc.pairs(c) {
                let key = self.key(k);
                self.field(key, val, &mut f);
            }
        }
        let Fields {
            action,
            action_val,
            addr,
            size,
            stream,
            time,
            unusable,
            stack,
            cc,
            um,
            cat,
            dfree,
            fwd,
            pool,
        } = f;
        let mut action = match (action, action_val) {
            (Some(Action::Unknown), Some(val)) => {
                let e = PathErr::new("a known action", self.found(val));
                self.repair(e.key("action"), "kept as unknown");
                Action::Unknown
            }
            (Some(a), _) => a,
            (None, Some(_)) => Action::Unknown, // counted above
            (None, None) => {
                let e = PathErr::new("key 'action'", "a dict without it");
                self.repair(e, "kept as unknown");
                Action::Unknown
            }
        };
        if action.needs_addr_and_size() && (unusable || size.is_none()) {
            if size.is_none() && !unusable {
                let e = PathErr::new("key 'size'", "a dict without it");
                self.repair(e, "entry kept as unknown, not replayed");
            }
            action = Action::Unknown;
        }
        let i = t.action.len();
        t.action.push(action);
        t.addr.push(addr);
        t.size.push(size.unwrap_or(0));
        t.stream.push(stream);
        t.time_us.push(time);
        t.stack.push(stack);
        push_opt(&mut t.compile_context, i, cc, self.empty);
        push_opt(&mut t.user_metadata, i, um, self.empty);
        push_opt(&mut t.category, i, cat, self.empty);
        if let Some(f) = dfree {
            t.device_free.push((i as u32, f));
        }
        if let Some(s) = fwd.filter(|s| !s.is_none()) {
            t.forward_stack.push((i as u32, s));
        }
        if let Some(p) = pool.filter(|&p| p != (0, 0)) {
            t.pools.push((i as u32, p));
        }
    }

    /// One key of a trace entry into `f`; a value that cannot be used is
    /// repaired and counted. The last of a repeated key wins, as in Python.
    #[inline]
    fn field(&mut self, key: Key, val: Value, f: &mut Fields) {
        if self.is_opaque(val) {
            return;
        }
        let r = match key {
            Key::Action => {
                f.action_val = Some(val);
                self.action(val).map(|a| f.action = Some(a))
            }
            Key::Addr => self.uint(val).map(|x| f.addr = x),
            Key::Size => self.uint(val).map(|x| f.size = Some(x)),
            Key::Stream => self.stream(val).map(|x| f.stream = x),
            Key::TimeUs => self.int(val).map(|x| f.time = x),
            Key::Frames => {
                f.stack = self.within(Seg::Key("frames"), |d| d.stack(val));
                Ok(())
            }
            Key::ForwardFrames => {
                f.fwd = Some(self.within(Seg::Key("forward_frames"), |d| d.stack(val)));
                Ok(())
            }
            Key::CompileContext => {
                f.cc = Some(self.str_or_empty(val, "compile_context"));
                Ok(())
            }
            Key::UserMetadata => {
                f.um = Some(self.str_or_empty(val, "user_metadata"));
                Ok(())
            }
            Key::Category => {
                f.cat = Some(self.str_or_empty(val, "category"));
                Ok(())
            }
            Key::DeviceFree => self.uint(val).map(|x| f.dfree = Some(x)),
            Key::PoolId => self.pool_id(val).map(|p| f.pool = Some(p)),
            _ => Ok(()),
        };
        if let Err(e) = r {
            let fix = match key {
                Key::Addr | Key::Size => {
                    f.unusable = true;
                    "entry kept as unknown, not replayed"
                }
                Key::Action => "read as unknown",
                Key::TimeUs | Key::DeviceFree => "read as not recorded",
                Key::PoolId => "read as the default pool (0, 0)",
                _ => "read as 0",
            };
            self.repair(e.key(key.name()), fix);
        }
    }
}

/// What one trace entry's keys said, before the entry is checked whole.
struct Fields {
    action: Option<Action>,
    /// The raw `action` value, for the repair of one that is not known.
    action_val: Option<Value>,
    addr: u64,
    size: Option<u64>,
    stream: u64,
    time: i64,
    /// `addr` or `size` was there but unusable.
    unusable: bool,
    stack: StackId,
    cc: Option<StrId>,
    um: Option<StrId>,
    cat: Option<StrId>,
    dfree: Option<u64>,
    fwd: Option<StackId>,
    /// `pool_id` (PyTorch 2.15 and later).
    pool: Option<(i64, i64)>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            action: None,
            action_val: None,
            addr: 0,
            size: None,
            stream: 0,
            time: NO_TIME,
            unusable: false,
            stack: StackId::NONE,
            cc: None,
            um: None,
            cat: None,
            dfree: None,
            fwd: None,
            pool: None,
        }
    }
}
