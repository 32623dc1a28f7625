//! Reading the input (fixed-size arguments, lines) and naming what went
//! wrong where: every error carries the offset of its opcode.

use super::*;

impl<'i> Vm<'i> {
    // ----- reading -----

    #[inline]
    pub(super) fn take(&mut self, n: usize, op: &'static str) -> Result<&'i [u8], PickleError> {
        let rest = self.input.len() - self.pos;
        if n > rest {
            return Err(self.eof(op, (n - rest) as u64));
        }
        let s = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub(super) fn u32le(&mut self, op: &'static str) -> Result<u32, PickleError> {
        let b = self.take(4, op)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64len(&mut self, op: &'static str) -> Result<usize, PickleError> {
        let b = self.take(8, op)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        let n = u64::from_le_bytes(a);
        // Larger than the input can hold: report as a short read, not an
        // allocation attempt.
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    pub(super) fn line(&mut self, op: &'static str) -> Result<&'i [u8], PickleError> {
        let rest = &self.input[self.pos..];
        match rest.iter().position(|&c| c == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                let l = &rest[..n];
                Ok(l.strip_suffix(b"\r").unwrap_or(l))
            }
            None => Err(self.eof(op, 1)),
        }
    }

    // ----- errors -----

    pub(super) fn eof(&self, op: &'static str, needed: u64) -> PickleError {
        PickleError::UnexpectedEof {
            offset: self.op_start as u64,
            opcode: op,
            needed,
        }
    }
    pub(super) fn bad(&self, op: &'static str, detail: String) -> PickleError {
        PickleError::BadArgument {
            offset: self.op_start as u64,
            opcode: op,
            detail,
        }
    }
    pub(super) fn underflow(&self, op: &'static str) -> PickleError {
        PickleError::StackUnderflow {
            offset: self.op_start as u64,
            opcode: op,
        }
    }
    pub(super) fn wrong(
        &self,
        op: &'static str,
        expected: &'static str,
        found: Value,
    ) -> PickleError {
        PickleError::WrongType {
            offset: self.op_start as u64,
            opcode: op,
            expected,
            found: self.b.doc().get(found).type_name(),
        }
    }
}
