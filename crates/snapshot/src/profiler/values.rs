//! The small values a trace event is made of, each deserialized without
//! failing on an odd type: a number written as a string, an id that is a
//! string in one event and an int in the next (old traces write an
//! operator's `tid` as `"25738"` and its `[memory]` event's as `25738`), a
//! `null`. One odd event must not throw a trace away.

use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The keys the parser looks at, at any level (top, event, `args`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Key {
    TraceEvents,
    BaseTimeNanoseconds,
    /// `segments` or `device_traces`: a memory snapshot, not a trace.
    Snapshot,
    Ph,
    Cat,
    Name,
    Pid,
    Tid,
    Ts,
    Dur,
    Args,
    Addr,
    Bytes,
    TotalAllocated,
    TotalReserved,
    DeviceType,
    DeviceId,
    CallStack,
    Other,
}

impl Key {
    /// Dispatch on length first: this runs for every key of every event.
    fn from_bytes(s: &[u8]) -> Key {
        match s.len() {
            2 if s == b"ph" => Key::Ph,
            2 if s == b"ts" => Key::Ts,
            3 => match s {
                b"cat" => Key::Cat,
                b"pid" => Key::Pid,
                b"tid" => Key::Tid,
                b"dur" => Key::Dur,
                _ => Key::Other,
            },
            4 => match s {
                b"name" => Key::Name,
                b"args" => Key::Args,
                b"Addr" => Key::Addr,
                _ => Key::Other,
            },
            5 if s == b"Bytes" => Key::Bytes,
            8 if s == b"segments" => Key::Snapshot,
            9 if s == b"Device Id" => Key::DeviceId,
            10 if s == b"Call stack" => Key::CallStack,
            11 if s == b"Device Type" => Key::DeviceType,
            11 if s == b"traceEvents" => Key::TraceEvents,
            13 if s == b"device_traces" => Key::Snapshot,
            14 if s == b"Total Reserved" => Key::TotalReserved,
            15 if s == b"Total Allocated" => Key::TotalAllocated,
            19 if s == b"baseTimeNanoseconds" => Key::BaseTimeNanoseconds,
            _ => Key::Other,
        }
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(Key::from_bytes(s.as_bytes()))
            }
            fn visit_bytes<E: de::Error>(self, s: &[u8]) -> Result<Key, E> {
                Ok(Key::from_bytes(s))
            }
        }
        // As bytes: keys are compared, never kept, so serde_json need not
        // check that they are UTF-8.
        d.deserialize_bytes(V)
    }
}

/// An event's `cat`, as far as memory analysis cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Cat {
    #[default]
    Unset,
    /// `python_function` (traces recorded `with_stack=True`).
    PythonFunction,
    /// `cpu_op`, or `Operator` in older traces.
    CpuOp,
    /// `user_annotation`: a `record_function` scope.
    UserAnnotation,
    Other,
}

impl<'de> Deserialize<'de> for Cat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cat, D::Error> {
        let s = CowStr::deserialize(d)?;
        Ok(match s.0.as_ref() {
            "python_function" => Cat::PythonFunction,
            "cpu_op" | "Operator" => Cat::CpuOp,
            "user_annotation" => Cat::UserAnnotation,
            _ => Cat::Other,
        })
    }
}

/// A string, borrowed from the input when it has no escapes; any other
/// type reads as the empty string.
#[derive(Debug, Default)]
pub(super) struct CowStr<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CowStr<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Owned(s)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<CowStr<'de>, E> {
                Ok(CowStr::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<CowStr<'de>, E> {
                Ok(CowStr::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<CowStr<'de>, E> {
                Ok(CowStr::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<CowStr<'de>, E> {
                Ok(CowStr::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<CowStr<'de>, E> {
                Ok(CowStr::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<CowStr<'de>, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(CowStr::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<CowStr<'de>, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(CowStr::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// A number as written; `Bad` keeps what was found instead, for messages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Num {
    Int(i64),
    Float(f64),
    Bad(&'static str),
}

impl Num {
    pub fn to_i64(self) -> Option<i64> {
        match self {
            Num::Int(i) => Some(i),
            Num::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Some(f as i64),
            _ => None,
        }
    }

    /// Trace times are µs, with a fraction in newer traces; kept as ns.
    pub fn to_ns(self) -> Option<i64> {
        match self {
            Num::Int(i) => i.checked_mul(1000),
            Num::Float(f) if f.is_finite() && (f * 1000.0).abs() < 9.0e18 => {
                Some((f * 1000.0).round() as i64)
            }
            _ => None,
        }
    }

    pub fn describe(self) -> String {
        match self {
            Num::Int(i) => format!("the int {i}"),
            Num::Float(f) => format!("the float {f}"),
            Num::Bad(what) => what.to_owned(),
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                // Addresses above i64::MAX keep their bits.
                Ok(Num::Int(v as i64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num::Float(v))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Num, E> {
                Ok(match (s.trim().parse::<i64>(), s.trim().parse::<f64>()) {
                    (Ok(i), _) => Num::Int(i),
                    (_, Ok(f)) => Num::Float(f),
                    _ => Num::Bad("a string"),
                })
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Num, E> {
                Ok(Num::Bad("a bool"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num::Bad("null"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Num, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num::Bad("a list"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Num, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num::Bad("a dict"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A `pid` or `tid`: an int, or a string (a numeric string is that int;
/// names such as `"stream 7"` get an id of their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Id(pub u64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id(v as u64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id(v as i64 as u64))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Id, E> {
                if let Ok(i) = s.trim().parse::<i64>() {
                    return Ok(Id(i as u64));
                }
                // A name: its own id, with the top bit set so that it
                // cannot equal a numeric one.
                let mut h = crate::hash::FxHasher::default();
                std::hash::Hasher::write(&mut h, s.as_bytes());
                Ok(Id(std::hash::Hasher::finish(&h) | 1 << 63))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Id, E> {
                Ok(Id::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Id, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Id::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Id, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Id::default())
            }
        }
        d.deserialize_any(V)
    }
}
