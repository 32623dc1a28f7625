//! JSON in both directions: a JSON snapshot becomes a pickle [`Document`] (so
//! one decoder serves both), and small pickled values (allocator settings)
//! become `serde_json` values for output.

use serde_json::Value as J;
use vramscope_pickle::{ContainerKind, Document, DocumentBuilder, Val, Value};

use crate::error::SnapshotError;

/// Parse JSON text into a [`Document`] with the same shape a pickle would give.
pub(crate) fn parse_json(bytes: &[u8]) -> Result<Document, SnapshotError> {
    let j: J = serde_json::from_slice(bytes).map_err(|e| SnapshotError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let mut b = DocumentBuilder::new();
    let root = build(&mut b, &j)?;
    Ok(b.finish(root))
}

fn cap(e: vramscope_pickle::CapacityError) -> SnapshotError {
    SnapshotError::Limit {
        what: format!("too many {} in the JSON document", e.0),
        limit: u32::MAX as u64,
    }
}

// serde_json already caps nesting at 128 levels, so recursion here is bounded.
fn build(b: &mut DocumentBuilder, j: &J) -> Result<Value, SnapshotError> {
    Ok(match j {
        J::Null => Value::NONE,
        J::Bool(x) => b.bool(*x),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => b.int(i),
            (None, Some(u)) => {
                let mut bytes = u.to_le_bytes().to_vec();
                bytes.push(0);
                b.int_from_le_bytes(&bytes)
            }
            _ => b.float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => b.str(s).map_err(cap)?,
        J::Array(items) => {
            let mut vals = Vec::with_capacity(items.len());
            for it in items {
                vals.push(build(b, it)?);
            }
            b.container_with(ContainerKind::List, &vals).map_err(cap)?
        }
        J::Object(m) => {
            let mut vals = Vec::with_capacity(m.len() * 2);
            for (k, v) in m {
                vals.push(b.str(k).map_err(cap)?);
                vals.push(build(b, v)?);
            }
            b.container_with(ContainerKind::Dict, &vals).map_err(cap)?
        }
    })
}

/// A pickled value as JSON, `depth` levels deep at most (deeper: `null`).
pub(crate) fn to_json(doc: &Document, v: Value, depth: usize) -> J {
    if depth == 0 {
        return J::Null;
    }
    match doc.get(v) {
        Val::None => J::Null,
        Val::Bool(b) => J::Bool(b),
        Val::Int(i) => J::from(i),
        Val::BigInt(_) => J::String("<big int>".into()),
        Val::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        Val::Str(s) => J::String(s.to_owned()),
        Val::Bytes(b) | Val::ByteArray(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        Val::List(c) | Val::Tuple(c) | Val::Set(c) | Val::FrozenSet(c) => {
            J::Array(doc.items(c).map(|x| to_json(doc, x, depth - 1)).collect())
        }
        Val::Dict(c) => {
            let mut m = serde_json::Map::new();
            for (k, x) in doc.pairs(c) {
                let key = match doc.get(k) {
                    Val::Str(s) => s.to_owned(),
                    Val::Int(i) => i.to_string(),
                    other => other.type_name().to_owned(),
                };
                m.insert(key, to_json(doc, x, depth - 1));
            }
            J::Object(m)
        }
        Val::Opaque(_) => J::String("<object not constructed>".into()),
    }
}
