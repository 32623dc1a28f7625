//! Input that ends before STOP (a process killed mid-dump): the open
//! containers closed as if their pending SETITEMS/APPENDS had run.

use super::*;

impl<'i> Vm<'i> {
    // ----- truncated input -----

    /// CPython writes a one-item batch as `item APPEND` without a MARK, so a
    /// dump cut short can leave `[.., list, item]` on the stack with the
    /// APPEND never read. In a dict's MARK region (key, value pairs from
    /// `from`) an odd item count that ends in `list, item` is exactly that.
    pub(super) fn apply_pending_appends(&mut self, from: usize) {
        while self.stack.len() >= from + 2 && (self.stack.len() - from) % 2 == 1 {
            let n = self.stack.len();
            let Some(c) = self.stack[n - 2].container() else {
                break;
            };
            if self.b.doc().kind(c) != ContainerKind::List {
                break;
            }
            let item = self.stack[n - 1];
            if self.b.extend(c, &[item]).is_err() {
                break;
            }
            self.stack.pop();
        }
    }

    /// Close every open MARK as if the pending SETITEMS/APPENDS/ADDITEMS had
    /// run; the bottom of the stack becomes the root.
    pub(super) fn recover(mut self, cause: PickleError) -> Result<Document, PickleError> {
        while let Some(m) = self.marks.pop() {
            let target = if m > 0 { Some(self.stack[m - 1]) } else { None };
            let kind = target.and_then(|t| t.container().map(|c| self.b.doc().kind(c)));
            match kind {
                Some(ContainerKind::Dict) => {
                    self.apply_pending_appends(m);
                    // A key whose value never arrived is dropped.
                    let end = m + (self.stack.len() - m) / 2 * 2;
                    if let Some(c) = target.and_then(Value::container) {
                        cap!(self, self.b.extend(c, &self.stack[m..end]));
                    }
                }
                Some(ContainerKind::List) | Some(ContainerKind::Set) => {
                    if let Some(c) = target.and_then(Value::container) {
                        cap!(self, self.b.extend(c, &self.stack[m..]));
                    }
                }
                _ => {
                    // A MARK for TUPLE/LIST/DICT-style construction: build a list.
                    let v = cap!(
                        self,
                        self.b.container_with(ContainerKind::List, &self.stack[m..])
                    );
                    self.stack.truncate(m);
                    self.stack.push(v);
                    continue;
                }
            }
            self.stack.truncate(m);
        }
        // Below every MARK: the root, and perhaps a value waiting for APPEND.
        if self.stack.len() >= 2 {
            self.apply_pending_appends(1);
        }
        let Some(&root) = self.stack.first() else {
            return Err(cause);
        };
        let offset = self.input.len() as u64;
        self.b.doc.truncated = Some(Truncation {
            offset,
            reason: cause.to_string(),
        });
        Ok(self.b.finish(root))
    }
}
