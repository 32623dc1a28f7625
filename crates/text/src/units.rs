//! Byte counts, counts, durations and times for people, and sizes read from text.

/// `1536` → `1.50 KiB`; bytes below 1 KiB print as `512 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A signed amount, rounded to a whole byte: `+1.50 KiB`, `-512 B`, `0 B`
/// (a change per iteration, the difference of two moments).
pub fn signed_bytes(n: f64) -> String {
    let whole = n.abs().round() as u64;
    match whole {
        0 => "0 B".to_owned(),
        _ if n < 0.0 => format!("-{}", bytes(whole)),
        _ => format!("+{}", bytes(whole)),
    }
}

/// Parse a byte count for people: `12GiB`, `1.5 GB`, `512MiB`, `4096`,
/// `1MiB/iter` (a trailing `/iter`, `/iteration` or `/step` is accepted
/// and ignored, for limits per iteration). Binary units (KiB, MiB, GiB,
/// TiB) are powers of 1024; decimal ones (kB, MB, GB, TB) powers of 1000;
/// a bare `K`/`M`/`G`/`T` is binary, as in PyTorch's own messages.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = ["/iteration", "/iter", "/step", "/it"]
        .iter()
        .find_map(|suf| t.strip_suffix(suf))
        .unwrap_or(t)
        .trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("expected a size such as 12GiB or 512MiB, found {s:?}"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "unknown unit {u:?} in {s:?} (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    let v = num * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("size out of range: {s:?}"));
    }
    Ok(v.round() as u64)
}

/// A duration in µs as `850 µs`, `12.3 ms`, `4.56 s`, `3 min 05 s`.
pub fn duration_us(us: i64) -> String {
    let a = us.unsigned_abs();
    let sign = if us < 0 { "-" } else { "" };
    if a < 1_000 {
        format!("{sign}{a} µs")
    } else if a < 1_000_000 {
        format!("{sign}{:.1} ms", a as f64 / 1e3)
    } else if a < 120_000_000 {
        format!("{sign}{:.2} s", a as f64 / 1e6)
    } else {
        let s = a / 1_000_000;
        format!("{sign}{} min {:02} s", s / 60, s % 60)
    }
}

/// µs since the Unix epoch as `2026-11-21 21:46:43.123 UTC`.
pub fn timestamp_us(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let ms = us.rem_euclid(1_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03} UTC",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("12GiB"), Ok(12 << 30));
        assert_eq!(parse_bytes("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("1MiB/iter"), Ok(1 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("-1GiB").is_err());
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(signed_bytes(-512.0), "-512 B");
        assert_eq!(signed_bytes(1536.0), "+1.50 KiB");
        assert_eq!(signed_bytes(0.2), "0 B");
        assert_eq!(signed_bytes(i64::MIN as f64), "-8192.00 PiB");
    }

    #[test]
    fn timestamps_are_utc_with_milliseconds() {
        assert_eq!(
            timestamp_us(1_763_324_225_770_003),
            "2025-11-16 20:17:05.770 UTC"
        );
    }
}
