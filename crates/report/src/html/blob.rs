//! The binary container embedded in a report: a JSON header that names and
//! locates typed arrays, then the arrays, each 8-byte aligned so the page can
//! view them in place (`new Float64Array(buffer, offset, len)`). The whole
//! blob is deflated and base64-encoded into the HTML; the page inflates it
//! with the browser's own `DecompressionStream`, so no library is needed.

use std::io::Write;

use serde_json::{json, Value};

/// Element types the page knows how to view.
#[derive(Clone, Copy)]
pub enum Kind {
    U8,
    U16,
    U32,
    I32,
    F64,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::U8 => "u8",
            Kind::U16 => "u16",
            Kind::U32 => "u32",
            Kind::I32 => "i32",
            Kind::F64 => "f64",
        }
    }
}

/// Collects arrays and a JSON header.
pub struct Blob {
    arrays: Vec<(String, Kind, usize, Vec<u8>)>,
    pub header: serde_json::Map<String, Value>,
}

impl Blob {
    pub fn new() -> Self {
        Blob {
            arrays: Vec::new(),
            header: serde_json::Map::new(),
        }
    }

    fn push(&mut self, name: &str, kind: Kind, len: usize, bytes: Vec<u8>) {
        self.arrays.push((name.to_owned(), kind, len, bytes));
    }

    pub fn u8(&mut self, name: &str, v: &[u8]) {
        self.push(name, Kind::U8, v.len(), v.to_vec());
    }
    pub fn u16(&mut self, name: &str, v: &[u16]) {
        self.push(
            name,
            Kind::U16,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        );
    }
    pub fn u32(&mut self, name: &str, v: &[u32]) {
        self.push(
            name,
            Kind::U32,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        );
    }
    pub fn i32(&mut self, name: &str, v: &[i32]) {
        self.push(
            name,
            Kind::I32,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        );
    }
    pub fn f64(&mut self, name: &str, v: &[f64]) {
        self.push(
            name,
            Kind::F64,
            v.len(),
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        );
    }

    /// Layout: `u32 header length`, header JSON, padding, arrays.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut index = Vec::new();
        let mut offset = 0usize;
        for (name, kind, len, bytes) in &self.arrays {
            index.push(json!({"name": name, "type": kind.name(), "offset": offset, "len": len}));
            offset += bytes.len().div_ceil(8) * 8;
        }
        let mut header = self.header.clone();
        header.insert("arrays".into(), Value::Array(index));
        let head = serde_json::to_vec(&Value::Object(header)).unwrap_or_default();
        let start = (4 + head.len()).div_ceil(8) * 8;
        let mut out = Vec::with_capacity(start + offset);
        out.extend_from_slice(&(head.len() as u32).to_le_bytes());
        out.extend_from_slice(&head);
        out.resize(start, 0);
        for (_, _, _, bytes) in &self.arrays {
            out.extend_from_slice(bytes);
            out.resize(out.len().div_ceil(8) * 8, 0);
        }
        out
    }
}

/// Deflate (zlib format, what `DecompressionStream("deflate")` reads) then base64.
pub fn pack(bytes: &[u8]) -> String {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(1));
    // Writing to a Vec cannot fail.
    let _ = z.write_all(bytes);
    let compressed = z.finish().unwrap_or_default();
    base64(&compressed)
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn arrays_are_aligned() {
        let mut b = Blob::new();
        b.u8("a", &[1, 2, 3]);
        b.f64("b", &[1.5]);
        let bytes = b.to_bytes();
        let hlen = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        let head: Value = serde_json::from_slice(&bytes[4..4 + hlen]).unwrap();
        let start = (4 + hlen).div_ceil(8) * 8;
        let off_b = head["arrays"][1]["offset"].as_u64().unwrap() as usize;
        assert_eq!(off_b, 8);
        let at = start + off_b;
        assert_eq!(
            f64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()),
            1.5
        );
    }
}
