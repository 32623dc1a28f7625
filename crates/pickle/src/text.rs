//! Text arguments of protocol 0/1 opcodes (INT, LONG, STRING, UNICODE, GET).

/// Decimal (optionally signed) to little-endian two's complement bytes.
pub fn decimal_to_le_bytes(s: &[u8]) -> Option<Vec<u8>> {
    let s = s.trim_ascii();
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Magnitude as little-endian base-2^32 limbs.
    let mut limbs: Vec<u32> = vec![0];
    for &d in digits {
        let mut carry = (d - b'0') as u64;
        for l in limbs.iter_mut() {
            let x = *l as u64 * 10 + carry;
            *l = x as u32;
            carry = x >> 32;
        }
        if carry != 0 {
            limbs.push(carry as u32);
        }
    }
    let mut bytes: Vec<u8> = limbs.iter().flat_map(|l| l.to_le_bytes()).collect();
    bytes.push(0); // room for the sign bit
    if neg {
        // Two's complement: invert and add one.
        let mut carry = 1u16;
        for b in bytes.iter_mut() {
            let x = (!*b) as u16 + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    Some(bytes)
}

pub fn parse_u64(s: &[u8]) -> Option<u64> {
    std::str::from_utf8(s).ok()?.trim().parse().ok()
}

/// Bytes to str, one char per byte (how Python 2 `str` maps onto text).
pub fn latin1(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

/// Protocol 0 STRING: a Python 2 `repr` of a byte string, quotes included.
pub fn unquote_py2_string(line: &[u8]) -> Option<Vec<u8>> {
    let q = *line.first()?;
    if !(q == b'\'' || q == b'"') || line.len() < 2 || *line.last()? != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        i += 1;
        if c != b'\\' || i >= body.len() {
            out.push(c);
            continue;
        }
        let e = body[i];
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'x' => {
                let h = body.get(i..i + 2)?;
                out.push(u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < body.len() && (b'0'..=b'7').contains(&body[i]) {
                    v = v * 8 + (body[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            other => {
                if !matches!(other, b'\\' | b'\'' | b'"') {
                    out.push(b'\\');
                }
                out.push(other);
            }
        }
    }
    Some(out)
}

/// Protocol 0 UNICODE: `raw-unicode-escape` (latin-1 plus `\uXXXX` and `\UXXXXXXXX`).
pub fn raw_unicode_escape(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let c = line[i];
        if c == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let n = if line[i + 1] == b'u' { 4 } else { 8 };
            if let Some(hex) = line.get(i + 2..i + 2 + n) {
                if let Some(ch) = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .and_then(char::from_u32)
                {
                    out.push(ch);
                    i += 2 + n;
                    continue;
                }
                // A lone surrogate (\ud800) has no char: keep it visible.
                out.push('\u{fffd}');
                i += 2 + n;
                continue;
            }
        }
        out.push(c as char);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_roundtrip_small() {
        assert_eq!(decimal_to_le_bytes(b"-1").unwrap()[0], 0xff);
        assert_eq!(decimal_to_le_bytes(b"258").unwrap()[..2], [2, 1]);
        assert!(decimal_to_le_bytes(b"12a").is_none());
    }

    #[test]
    fn py2_string_escapes() {
        assert_eq!(unquote_py2_string(b"'a\\nb\\x41\\''").unwrap(), b"a\nbA'");
    }

    #[test]
    fn raw_unicode() {
        assert_eq!(
            raw_unicode_escape(b"caf\\u00e9 \\U0001f600"),
            "caf\u{e9} \u{1f600}"
        );
    }
}
