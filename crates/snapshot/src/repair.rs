//! Values the reader could not use as they were, and what it did instead.
//!
//! One odd value must never throw a file away: a `torch.compile` trace
//! whose fake-tensor frames carry `line = 2**64 - 1` (a `-1` written as
//! unsigned) still has thousands of good entries. The decoder keeps the
//! entry, frame or block, stores a sentinel (no line, not recorded, unknown)
//! and counts the repair here, one row per field and kind of repair, with
//! the first occurrence as an example. Only a top level that is not a
//! snapshot rejects a file.

use serde::Serialize;
use vramscope_pickle::Val;

/// All the values of one field that were repaired the same way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Repair {
    /// Where, with list indices generalised:
    /// `device_traces[*][*].frames[*].line`.
    pub field: String,
    /// What the reader did with them: `read as no line`, `entry skipped`, …
    pub fix: String,
    /// How many values (memo-shared frames and stacks count once).
    pub count: u64,
    /// The first one: its exact path, what was expected and what was found.
    pub example: String,
}

impl Repair {
    /// One line for the summary's warnings.
    pub fn message(&self) -> String {
        let what = if self.count == 1 { "value" } else { "values" };
        format!(
            "repaired {} {what} of {} ({}), e.g. {}",
            self.count, self.field, self.fix, self.example
        )
    }
}

/// One step of a path inside the snapshot.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seg {
    Key(&'static str),
    Idx(usize),
}

/// Repairs in the order their fields were first met.
#[derive(Debug, Default)]
pub(crate) struct Repairs {
    rows: Vec<Repair>,
}

impl Repairs {
    /// Count one repair at `prefix` followed by `rel` (innermost first, as
    /// collected while unwinding).
    pub(crate) fn add(
        &mut self,
        prefix: &[Seg],
        rel_rev: &[String],
        fix: &'static str,
        expected: &str,
        found: &str,
    ) {
        let mut exact = String::from("");
        let mut field = String::from("");
        for s in prefix {
            match s {
                Seg::Key(k) => {
                    exact.push_str(&dotted(k, exact.is_empty()));
                    field.push_str(&dotted(k, field.is_empty()));
                }
                Seg::Idx(i) => {
                    exact.push_str(&format!("[{i}]"));
                    field.push_str("[*]");
                }
            }
        }
        for s in rel_rev.iter().rev() {
            exact.push_str(s);
            if s.starts_with('[') {
                field.push_str("[*]");
            } else {
                field.push_str(s);
            }
        }
        let field = field.trim_start_matches('.').to_owned();
        let exact = exact.trim_start_matches('.');
        if let Some(r) = self
            .rows
            .iter_mut()
            .find(|r| r.field == field && r.fix == fix)
        {
            r.count += 1;
            return;
        }
        self.rows.push(Repair {
            field,
            fix: fix.to_owned(),
            count: 1,
            example: format!("{exact}: expected {expected}, found {found}"),
        });
    }

    /// Add another decoder's repairs (the second half of a parallel trace).
    pub(crate) fn absorb(&mut self, other: Repairs) {
        for o in other.rows {
            match self
                .rows
                .iter_mut()
                .find(|r| r.field == o.field && r.fix == o.fix)
            {
                Some(r) => r.count += o.count,
                None => self.rows.push(o),
            }
        }
    }

    pub(crate) fn into_rows(self) -> Vec<Repair> {
        self.rows
    }
}

fn dotted(k: &str, first: bool) -> String {
    if first {
        k.to_owned()
    } else {
        format!(".{k}")
    }
}

/// What a value is, as Python would name it: `an int of 65 bits
/// (18446744073709551615)`, `the int -1`, `None`, `a str "large"`.
pub(crate) fn describe(v: &Val<'_>) -> String {
    match v {
        Val::None => "None".into(),
        Val::Bool(b) => format!("the bool {}", if *b { "True" } else { "False" }),
        Val::Int(i) => format!("the int {i}"),
        Val::BigInt(b) => describe_big(b),
        Val::Float(f) => format!("the float {f}"),
        Val::Str(s) => {
            let short: String = s.chars().take(40).collect();
            let more = if short.len() < s.len() { "…" } else { "" };
            format!("a str {short:?}{more}")
        }
        other => format!("a {}", other.type_name()),
    }
}

/// A little-endian two's-complement integer too large for `i64`.
fn describe_big(b: &[u8]) -> String {
    if b.is_empty() {
        return "the int 0".into();
    }
    let negative = b.last().is_some_and(|&x| x & 0x80 != 0);
    // Bits of the shortest two's-complement form, the sign bit included
    // (2**64 - 1 needs 65, as the "unsigned -1" of a C++ writer does).
    let fill = if negative { 0xff } else { 0x00 };
    let mut n = b.len();
    while n > 1 && b[n - 1] == fill && (b[n - 2] & 0x80 != 0) == negative {
        n -= 1;
    }
    let top = b.get(n - 1).copied().unwrap_or(0);
    let top_bits = if negative {
        8 - (!top).leading_zeros()
    } else {
        8 - top.leading_zeros()
    };
    let bits = (n as u32 - 1) * 8 + top_bits + 1;
    if n <= 16 {
        let mut a = [fill; 16];
        a[..n].copy_from_slice(&b[..n]);
        format!("an int of {bits} bits ({})", i128::from_le_bytes(a))
    } else {
        format!("an int of {bits} bits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(v: i128, len: usize) -> Vec<u8> {
        v.to_le_bytes()[..len].to_vec()
    }

    #[test]
    fn big_ints_are_named_by_their_bits() {
        // 2**64 - 1 as pickle writes it: 8 bytes of 0xff and a sign byte.
        assert_eq!(
            describe_big(&le((1i128 << 64) - 1, 9)),
            "an int of 65 bits (18446744073709551615)"
        );
        assert_eq!(
            describe_big(&le(1i128 << 70, 9)),
            "an int of 72 bits (1180591620717411303424)"
        );
        assert_eq!(
            describe_big(&le(-(1i128 << 64), 9)),
            "an int of 65 bits (-18446744073709551616)"
        );
        let mut huge = vec![0u8; 40];
        huge[39] = 1;
        assert_eq!(describe_big(&huge), "an int of 314 bits");
    }

    #[test]
    fn rows_group_by_field_and_keep_the_first_example() {
        let mut r = Repairs::default();
        let pre = [Seg::Key("device_traces"), Seg::Idx(0), Seg::Idx(1)];
        let rel = [".line".to_string(), "[11]".into(), ".frames".into()];
        r.add(&pre, &rel, "read as no line", "a line number", "the int -1");
        let pre2 = [Seg::Key("device_traces"), Seg::Idx(0), Seg::Idx(7)];
        r.add(&pre2, &rel, "read as no line", "a line number", "None");
        let rows = r.into_rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].field, "device_traces[*][*].frames[*].line");
        assert_eq!(rows[0].count, 2);
        assert_eq!(
            rows[0].example,
            "device_traces[0][1].frames[11].line: expected a line number, found the int -1"
        );
    }
}
