//! The serde side of the trace parser: the top-level dict, `traceEvents`,
//! each event's fields and its `args`, visited in place (no tree, strings
//! borrowed where they have no escapes), each event handed to the parser's
//! state as soon as it is read.

use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::parse::State;
use super::values::{Cat, CowStr, Id, Key, Num};

/// One trace event's fields of interest.
#[derive(Default)]
pub(super) struct Event<'de> {
    pub ph: u8,
    pub cat: Cat,
    pub name: Option<Cow<'de, str>>,
    pub pid: Id,
    pub tid: Id,
    pub ts: Option<Num>,
    pub dur: Option<Num>,
    pub args: Args<'de>,
}

impl Event<'_> {
    /// Whether `args` can matter, from the fields seen so far (Kineto
    /// writes `ph`, `cat` and `name` before `args`; any other order parses
    /// `args` to be safe).
    fn wants_args(&self) -> bool {
        match self.ph {
            0 => true,
            b'i' | b'I' => self.name.as_deref().is_none_or(|n| n == "[memory]"),
            // Only old traces' operators carry `Call stack`.
            b'X' => matches!(self.cat, Cat::Unset | Cat::CpuOp),
            _ => false,
        }
    }
}

/// The `args` an event may use.
#[derive(Default)]
pub(super) struct Args<'de> {
    pub addr: Option<Num>,
    pub bytes: Option<Num>,
    pub total_allocated: Option<Num>,
    pub total_reserved: Option<Num>,
    pub device_type: Option<Num>,
    pub device_id: Option<Num>,
    pub call_stack: Option<CowStr<'de>>,
}

pub(super) struct Top<'a, 'm> {
    pub st: &'a mut State<'m>,
}

impl<'de> DeserializeSeed<'de> for Top<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a trace dict")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<Key>()? {
            match k {
                Key::TraceEvents => {
                    self.st.saw_events = true;
                    map.next_value_seed(Events { st: &mut *self.st })?;
                }
                Key::BaseTimeNanoseconds => {
                    let n: Num = map.next_value()?;
                    self.st.p.base_ns = n.to_i64().unwrap_or(0);
                }
                Key::Snapshot => {
                    // A memory snapshot: leave it to the snapshot decoder.
                    self.st.snapshot_key = true;
                    return Err(de::Error::custom("a memory snapshot"));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct Events<'a, 'm> {
    st: &'a mut State<'m>,
}

impl<'de> DeserializeSeed<'de> for Events<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Events<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(EventSeed { st: &mut *self.st })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// One element of `traceEvents`, handed to the state as soon as it is read;
/// anything that is not a dict is skipped.
struct EventSeed<'a, 'm> {
    st: &'a mut State<'m>,
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a trace event (a dict)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut ev = Event::default();
        while let Some(k) = map.next_key::<Key>()? {
            match k {
                Key::Ph => {
                    let s: CowStr = map.next_value()?;
                    ev.ph = s.0.as_bytes().first().copied().unwrap_or(b'?');
                }
                Key::Cat => ev.cat = map.next_value()?,
                Key::Name => ev.name = Some(map.next_value::<CowStr>()?.0),
                Key::Pid => ev.pid = map.next_value()?,
                Key::Tid => ev.tid = map.next_value()?,
                Key::Ts => ev.ts = Some(map.next_value()?),
                Key::Dur => ev.dur = Some(map.next_value()?),
                Key::Args if ev.wants_args() => ev.args = map.next_value_seed(ArgsSeed)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        self.st.event(&ev);
        Ok(())
    }
}

struct ArgsSeed;

impl<'de> DeserializeSeed<'de> for ArgsSeed {
    type Value = Args<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Args<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed {
    type Value = Args<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("event args (a dict)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args<'de>, A::Error> {
        let mut a = Args::default();
        while let Some(k) = map.next_key::<Key>()? {
            match k {
                Key::Addr => a.addr = Some(map.next_value()?),
                Key::Bytes => a.bytes = Some(map.next_value()?),
                Key::TotalAllocated => a.total_allocated = Some(map.next_value()?),
                Key::TotalReserved => a.total_reserved = Some(map.next_value()?),
                Key::DeviceType => a.device_type = Some(map.next_value()?),
                Key::DeviceId => a.device_id = Some(map.next_value()?),
                Key::CallStack => a.call_stack = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(a)
    }
    // `args` that is not a dict carries nothing usable.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Args<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Args::default())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Args<'de>, E> {
        Ok(Args::default())
    }
}
