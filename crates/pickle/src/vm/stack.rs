//! The VM's stack, its MARKs and its memo: pushing values, filling and
//! building containers from the items above a MARK, memo references.

use super::*;

impl<'i> Vm<'i> {
    // ----- stack -----

    #[inline]
    pub(super) fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline]
    pub(super) fn pop(&mut self, op: &'static str) -> Result<Value, PickleError> {
        if self.stack.len() <= self.fence() {
            return Err(self.underflow(op));
        }
        Ok(self.stack.pop().unwrap_or(Value::NONE))
    }

    pub(super) fn top(&self, op: &'static str) -> Result<&Value, PickleError> {
        if self.stack.len() <= self.fence() {
            return Err(self.underflow(op));
        }
        self.stack.last().ok_or_else(|| self.underflow(op))
    }

    pub(super) fn pop_mark(&mut self, op: &'static str) -> Result<usize, PickleError> {
        self.marks.pop().ok_or(PickleError::MissingMark {
            offset: self.op_start as u64,
            opcode: op,
        })
    }

    #[inline]
    pub(super) fn push_int(&mut self, i: i64) {
        let v = self.b.int(i);
        self.stack.push(v);
    }

    pub(super) fn push_container(&mut self, kind: ContainerKind) -> Result<(), PickleError> {
        let v = cap!(self, self.b.container(kind));
        self.stack.push(v);
        Ok(())
    }

    pub(super) fn push_utf8(&mut self, n: usize, op: &'static str) -> Result<(), PickleError> {
        // A short string seen before (a snapshot writes `compile_context`'s
        // 'N/A' afresh in every entry): one 16-byte load finds it, with no
        // copy and no UTF-8 check (only valid strings are stored).
        if n <= SHORT_STR && self.input.len() - self.pos >= 16 {
            let mut window = [0u8; 16];
            window.copy_from_slice(&self.input[self.pos..self.pos + 16]);
            if let Some(v) = self
                .b
                .known_short_str(short_key(u128::from_le_bytes(window), n))
            {
                self.pos += n;
                self.stack.push(v);
                return Ok(());
            }
        }
        let raw = self.take(n, op)?;
        // CPython writes lone surrogates with 'surrogatepass'; such bytes are
        // not UTF-8 and are replaced rather than rejected.
        let v = match std::str::from_utf8(raw) {
            Ok(s) => cap!(self, self.b.str(s)),
            Err(_) => cap!(self, self.b.str(&String::from_utf8_lossy(raw))),
        };
        self.stack.push(v);
        Ok(())
    }

    pub(super) fn push_bytes(
        &mut self,
        n: usize,
        op: &'static str,
        bytearray: bool,
    ) -> Result<(), PickleError> {
        let raw = self.take(n, op)?;
        let v = cap!(self, self.b.bytes(raw, bytearray));
        self.stack.push(v);
        Ok(())
    }

    pub(super) fn decimal_int(
        &mut self,
        digits: &[u8],
        op: &'static str,
    ) -> Result<Value, PickleError> {
        let n = digits.trim_ascii().len();
        if n > MAX_DECIMAL_DIGITS + 1 {
            return Err(PickleError::LimitExceeded {
                offset: self.op_start as u64,
                what: "digits in a decimal integer",
                limit: MAX_DECIMAL_DIGITS as u64,
            });
        }
        let bytes = text::decimal_to_le_bytes(digits)
            .ok_or_else(|| self.bad(op, "not a decimal integer".into()))?;
        Ok(self.b.int_from_le_bytes(&bytes))
    }

    /// SETITEMS / APPENDS / ADDITEMS: items above the mark go into the
    /// container just below it.
    pub(super) fn extend_from_mark(
        &mut self,
        op: &'static str,
        kind: ContainerKind,
    ) -> Result<(), PickleError> {
        let m = self.pop_mark(op)?;
        if m == 0 {
            return Err(self.underflow(op));
        }
        if kind == ContainerKind::Dict && !(self.stack.len() - m).is_multiple_of(2) {
            return Err(self.bad(op, "odd number of items after MARK".into()));
        }
        let target = self.stack[m - 1];
        self.extend_value(op, kind, target, m)?;
        self.stack.truncate(m);
        Ok(())
    }

    pub(super) fn extend_top(
        &mut self,
        op: &'static str,
        kind: ContainerKind,
        items: &[Value],
    ) -> Result<(), PickleError> {
        let target = *self.top(op)?;
        self.check_target(op, kind, target)?;
        if let Some(c) = target.container() {
            cap!(self, self.b.extend(c, items));
        }
        Ok(())
    }

    pub(super) fn extend_value(
        &mut self,
        op: &'static str,
        kind: ContainerKind,
        target: Value,
        from: usize,
    ) -> Result<(), PickleError> {
        self.check_target(op, kind, target)?;
        if let Some(c) = target.container() {
            cap!(self, self.b.extend(c, &self.stack[from..]));
        }
        Ok(())
    }

    /// Items added to an opaque object (e.g. an OrderedDict that was not
    /// constructed) are dropped with it; anything else of the wrong kind is an error.
    pub(super) fn check_target(
        &self,
        op: &'static str,
        kind: ContainerKind,
        target: Value,
    ) -> Result<(), PickleError> {
        let doc = self.b.doc();
        let ok = matches!(
            (doc.get(target), kind),
            (Val::Opaque(_), _)
                | (Val::List(_), ContainerKind::List)
                | (Val::Dict(_), ContainerKind::Dict)
                | (Val::Set(_), ContainerKind::Set)
        );
        if ok {
            Ok(())
        } else {
            let expected = match kind {
                ContainerKind::Dict => "a dict",
                ContainerKind::Set => "a set",
                _ => "a list",
            };
            Err(self.wrong(op, expected, target))
        }
    }

    /// TUPLE / LIST / FROZENSET: a new container from the items above the mark.
    pub(super) fn build_from_mark(
        &mut self,
        op: &'static str,
        kind: ContainerKind,
    ) -> Result<(), PickleError> {
        let m = self.pop_mark(op)?;
        let v = cap!(self, self.b.container_with(kind, &self.stack[m..]));
        self.stack.truncate(m);
        self.stack.push(v);
        Ok(())
    }

    // ----- memo -----

    /// Handle consecutive BINGET / LONG_BINGET opcodes.
    #[inline]
    pub(super) fn memo_run(&mut self) -> Result<(), PickleError> {
        let input = self.input;
        loop {
            let rest = &input[self.pos..];
            let i = match rest {
                [BINGET, i, ..] => {
                    self.op_start = self.pos;
                    self.pos += 2;
                    *i as u64
                }
                [LONG_BINGET, a, b, c, d, ..] => {
                    self.op_start = self.pos;
                    self.pos += 5;
                    u32::from_le_bytes([*a, *b, *c, *d]) as u64
                }
                _ => return Ok(()),
            };
            self.get_memo(i)?;
        }
    }

    pub(super) fn put_memo(&mut self, i: u64) -> Result<(), PickleError> {
        let v = *self.top("PUT/MEMOIZE")?;
        let dense = self.memo.len() as u64;
        let fresh = if i < dense {
            let fresh = self.memo[i as usize] == VACANT;
            self.memo[i as usize] = v;
            fresh
        } else if i == dense {
            self.memo.push(v);
            true
        } else {
            self.memo_sparse.insert(i, v).is_none()
        };
        if fresh {
            self.memo_count += 1;
        }
        Ok(())
    }

    #[inline]
    pub(super) fn get_memo(&mut self, i: u64) -> Result<(), PickleError> {
        let v = match self.memo.get(i as usize) {
            Some(&v) if v != VACANT => v,
            _ => *self.memo_sparse.get(&i).ok_or(PickleError::MemoMissing {
                offset: self.op_start as u64,
                index: i,
            })?,
        };
        self.stack.push(v);
        Ok(())
    }
}
