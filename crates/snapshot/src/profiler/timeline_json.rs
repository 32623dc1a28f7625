//! The two JSON forms of `torch.profiler.profile.export_memory_timeline`
//! (torch/profiler/_memory_profiler.py, `MemoryProfileTimeline`):
//!
//! * raw (`export_memory_timeline_raw`, a `.raw.json.gz` path): rows
//!   `[t_ns, action, bytes, category]`, sorted by time then action, where
//!   `action` is `Action.value` (1 `PREEXISTING`, 2 `CREATE`, 3
//!   `INCREMENT_VERSION`, 4 `DESTROY`), `bytes` is positive for the first
//!   two and negative for `DESTROY`, and an `INCREMENT_VERSION` is two rows
//!   at one time, `-n` with the old version's category then `+n` with the
//!   new one's; `category` is an index of `_CATEGORY_TO_INDEX` (0
//!   parameter, 1 optimizer_state, 2 input, 3 temporary, 4 activation, 5
//!   gradient, 6 autograd_detail, 7 unknown); `PREEXISTING` rows have
//!   time -1;
//! * plot points (`.json` / `.json.gz`): `[times_us, sizes]`, where
//!   `sizes[k]` has 9 numbers, bytes per category after point `k` at
//!   index `category + 1` (index 0 is always 0).
//!
//! Names are accepted where numbers are written (`"CREATE"`,
//! `"Category.GRADIENT"`, `null` for unknown), for hand-made files.

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use super::values::Num;
use crate::error::SnapshotError;

/// The Memory Profiler's category names, by `_CATEGORY_TO_INDEX`.
pub(super) const CATEGORIES: [&str; 8] = [
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
];
/// Index of `unknown` (the category `None`).
pub(super) const UNKNOWN: u8 = 7;

/// `Action.value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowAction {
    Preexisting,
    Create,
    IncrementVersion,
    Destroy,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Row {
    pub t_ns: i64,
    pub action: RowAction,
    pub bytes: i64,
    pub category: u8,
}

pub(super) enum Timeline {
    Raw(Vec<Row>),
    /// Times (µs) and bytes per category (by index) at each point.
    Plot(Vec<i64>, Vec<[i64; 8]>),
}

/// One value of a row: a number or a name.
enum Scalar {
    Num(Num),
    Name(Box<str>),
}

/// An element of the top-level list: numbers (a row, or the plot's times)
/// or lists of numbers (the plot's sizes).
enum Elem {
    Flat(Vec<Scalar>),
    Nested(Vec<Vec<Num>>),
}

pub(super) fn parse(data: &[u8]) -> Result<Timeline, SnapshotError> {
    let elems: Vec<Elem> = serde_json::from_slice(data).map_err(|e| SnapshotError::Json {
        line: e.line(),
        column: e.column(),
        message: format!("in a memory timeline: {e}"),
    })?;
    let bad = |msg: String| {
        SnapshotError::NotASnapshot(format!(
            "a JSON list of lists, but not a memory timeline (export_memory_timeline's raw rows \
             [t_ns, action, bytes, category] or its [times, sizes] points): {msg}"
        ))
    };
    if let [Elem::Flat(times), Elem::Nested(sizes)] = elems.as_slice() {
        if times.len() != sizes.len() {
            return Err(bad(format!(
                "{} times but {} size rows",
                times.len(),
                sizes.len()
            )));
        }
        let times = times
            .iter()
            .enumerate()
            .map(|(k, s)| int(s).ok_or_else(|| bad(format!("times[{k}] is {}", describe(s)))))
            .collect::<Result<Vec<i64>, _>>()?;
        let mut out = Vec::with_capacity(sizes.len());
        for (k, row) in sizes.iter().enumerate() {
            if row.len() != CATEGORIES.len() + 1 {
                return Err(bad(format!(
                    "sizes[{k}] has {} numbers, expected {} (0, then bytes per category)",
                    row.len(),
                    CATEGORIES.len() + 1
                )));
            }
            let mut v = [0i64; 8];
            for (c, n) in row[1..].iter().enumerate() {
                v[c] = n
                    .to_i64()
                    .ok_or_else(|| bad(format!("sizes[{k}][{}] is {}", c + 1, n.describe())))?;
            }
            out.push(v);
        }
        return Ok(Timeline::Plot(times, out));
    }
    let mut rows = Vec::with_capacity(elems.len());
    for (k, e) in elems.iter().enumerate() {
        let Elem::Flat(v) = e else {
            return Err(bad(format!("element {k} is a list of lists")));
        };
        let [t, a, b, c] = v.as_slice() else {
            return Err(bad(format!("row {k} has {} values, expected 4", v.len())));
        };
        let field = |what: &str, s: &Scalar| bad(format!("row {k}: {what} is {}", describe(s)));
        rows.push(Row {
            t_ns: int(t).ok_or_else(|| field("the time", t))?,
            action: action(a).ok_or_else(|| field("the action", a))?,
            bytes: int(b).ok_or_else(|| field("the size", b))?,
            category: category(c).ok_or_else(|| field("the category", c))?,
        });
    }
    Ok(Timeline::Raw(rows))
}

fn int(s: &Scalar) -> Option<i64> {
    match s {
        Scalar::Num(Num::Float(f)) if f.is_finite() && f.abs() < 9.0e18 => Some(*f as i64),
        Scalar::Num(n) => n.to_i64(),
        Scalar::Name(_) => None,
    }
}

fn describe(s: &Scalar) -> String {
    match s {
        Scalar::Num(n) => n.describe(),
        Scalar::Name(n) => format!("the string {n:?}"),
    }
}

/// `"Action.CREATE"`, `"create"` → `create`.
fn bare(name: &str) -> String {
    name.rsplit('.')
        .next()
        .unwrap_or(name)
        .trim()
        .to_ascii_lowercase()
}

fn action(s: &Scalar) -> Option<RowAction> {
    let code = match s {
        Scalar::Name(n) => match bare(n).as_str() {
            "preexisting" => 1,
            "create" => 2,
            "increment_version" => 3,
            "destroy" => 4,
            _ => return None,
        },
        _ => int(s)?,
    };
    Some(match code {
        1 => RowAction::Preexisting,
        2 => RowAction::Create,
        3 => RowAction::IncrementVersion,
        4 => RowAction::Destroy,
        _ => return None,
    })
}

fn category(s: &Scalar) -> Option<u8> {
    match s {
        Scalar::Num(Num::Bad("null")) => Some(UNKNOWN),
        Scalar::Name(n) => match bare(n).as_str() {
            "none" | "" => Some(UNKNOWN),
            b => CATEGORIES.iter().position(|c| *c == b).map(|i| i as u8),
        },
        _ => int(s)
            .filter(|&i| (0..CATEGORIES.len() as i64).contains(&i))
            .map(|i| i as u8),
    }
}

impl<'de> Deserialize<'de> for Elem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Elem, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elem;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of numbers or a list of lists of numbers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elem, A::Error> {
                let Some(first) = seq.next_element::<Item>()? else {
                    return Ok(Elem::Flat(Vec::new()));
                };
                match first {
                    Item::Scalar(s) => {
                        let mut v = Vec::with_capacity(4);
                        v.push(s);
                        while let Some(it) = seq.next_element::<Item>()? {
                            match it {
                                Item::Scalar(s) => v.push(s),
                                Item::List(_) => {
                                    return Err(de::Error::custom(
                                        "a list mixing numbers and lists",
                                    ))
                                }
                            }
                        }
                        Ok(Elem::Flat(v))
                    }
                    Item::List(l) => {
                        let mut v = vec![l];
                        while let Some(it) = seq.next_element::<Item>()? {
                            match it {
                                Item::List(l) => v.push(l),
                                Item::Scalar(_) => {
                                    return Err(de::Error::custom(
                                        "a list mixing lists and numbers",
                                    ))
                                }
                            }
                        }
                        Ok(Elem::Nested(v))
                    }
                }
            }
        }
        d.deserialize_seq(V)
    }
}

/// A value inside an element: a number or name, or a list of numbers.
enum Item {
    Scalar(Scalar),
    List(Vec<Num>),
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Item, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Item;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, a name or a list of numbers")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Num(Num::Int(v))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Num(
                    i64::try_from(v).map_or(Num::Bad("an int above 2**63"), Num::Int),
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Num(Num::Float(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Name(v.into())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Num(Num::Bad("null"))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Item, E> {
                Ok(Item::Scalar(Scalar::Num(Num::Bad("a bool"))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
                let mut v = Vec::with_capacity(9);
                while let Some(n) = seq.next_element::<Num>()? {
                    v.push(n);
                }
                Ok(Item::List(v))
            }
        }
        d.deserialize_any(V)
    }
}
