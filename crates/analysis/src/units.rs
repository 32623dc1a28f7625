//! Byte counts for people, used in the explanations analyses write.

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

/// A signed amount: `+1.50 KiB`, `-512 B`.
pub fn signed_bytes(n: f64) -> String {
    let sign = if n < 0.0 { "-" } else { "+" };
    format!("{sign}{}", bytes(n.abs().round() as u64))
}
