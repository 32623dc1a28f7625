//! JSON in both directions: a JSON snapshot becomes a pickle [`Document`] (so
//! one decoder serves both), and small pickled values (allocator settings)
//! become `serde_json` values for output.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value as J;
use vramscope_pickle::{ContainerKind, Document, DocumentBuilder, Val, Value};

use crate::error::SnapshotError;

/// Parse JSON text into a [`Document`] with the same shape a pickle would give.
///
/// Values go straight into the builder (no intermediate `serde_json::Value`
/// tree), which keeps large JSON snapshots near the pickle path's speed.
/// serde_json caps nesting at 128 levels, so the recursion is bounded.
pub(crate) fn parse_json(bytes: &[u8]) -> Result<Document, SnapshotError> {
    let mut b = DocumentBuilder::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let root = Seed { b: &mut b }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|_| v))
        .map_err(|e| SnapshotError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
    Ok(b.finish(root))
}

struct Seed<'b> {
    b: &'b mut DocumentBuilder,
}

fn cap<E: de::Error>(e: vramscope_pickle::CapacityError) -> E {
    E::custom(format!("too many {} in the JSON document", e.0))
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::NONE)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(self.b.bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(self.b.int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        if let Ok(i) = i64::try_from(v) {
            return Ok(self.b.int(i));
        }
        let mut bytes = v.to_le_bytes().to_vec();
        bytes.push(0);
        Ok(self.b.int_from_le_bytes(&bytes))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(self.b.float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.b.str(v).map_err(cap)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(Seed { b: &mut *self.b })? {
            items.push(v);
        }
        self.b
            .container_with(ContainerKind::List, &items)
            .map_err(cap)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(16);
        while let Some(k) = map.next_key_seed(Seed { b: &mut *self.b })? {
            items.push(k);
            items.push(map.next_value_seed(Seed { b: &mut *self.b })?);
        }
        self.b
            .container_with(ContainerKind::Dict, &items)
            .map_err(cap)
    }
}

/// A pickled value as JSON, `depth` levels deep at most (deeper: `null`),
/// and no more values than the file itself holds; the second item says
/// whether that cap cut it. A pickle's memo lets one value be referenced any
/// number of times, so a file of a few MB can stand for a tree of billions
/// of values (a list that holds the one before it twice, thirty deep):
/// converted in full, a damaged 1.8 MB file took 14 GB before it was
/// stopped. A field of a real file is a part of the file.
pub(crate) fn to_json(doc: &Document, v: Value, depth: usize) -> (J, bool) {
    // About half the values of the file (a value takes 8 bytes of the arena
    // or more): a converted value costs a few hundred bytes, so a damaged
    // 1.8 MB file converts in 0.2 s and 130 MB. The largest field of the
    // test files converts to 8,822 values, of 485,000 allowed.
    let mut left = (doc.heap_bytes() / 16).max(1 << 16);
    let j = convert(doc, v, depth, &mut left);
    (j, left == 0)
}

fn convert(doc: &Document, v: Value, depth: usize, left: &mut usize) -> J {
    if depth == 0 || *left == 0 {
        return J::Null;
    }
    *left -= 1;
    match doc.get(v) {
        Val::None => J::Null,
        Val::Bool(b) => J::Bool(b),
        Val::Int(i) => J::from(i),
        Val::BigInt(_) => J::String("<big int>".into()),
        Val::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        Val::Str(s) => J::String(s.to_owned()),
        Val::Bytes(b) | Val::ByteArray(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Val::List(c) | Val::Tuple(c) | Val::Set(c) | Val::FrozenSet(c) => {
            let mut out = Vec::new();
            for x in doc.items(c) {
                if *left == 0 {
                    break;
                }
                out.push(convert(doc, x, depth - 1, left));
            }
            J::Array(out)
        }
        Val::Dict(c) => {
            let mut m = serde_json::Map::new();
            for (k, x) in doc.pairs(c) {
                if *left == 0 {
                    break;
                }
                let key = match doc.get(k) {
                    Val::Str(s) => s.to_owned(),
                    Val::Int(i) => i.to_string(),
                    other => other.type_name().to_owned(),
                };
                m.insert(key, convert(doc, x, depth - 1, left));
            }
            J::Object(m)
        }
        Val::Opaque(_) => J::String("<object not constructed>".into()),
    }
}
