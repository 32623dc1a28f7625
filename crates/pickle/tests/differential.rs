//! Differential test against CPython's pickler.
//!
//! `gen_random_pickles.py` builds thousands of random objects (shared and
//! self-referencing containers, edge-case ints and floats, unicode, bytes,
//! sets), pickles each with `pickle.dumps` at protocols 0 to 5 and writes the
//! object's canonical text form next to it. This test decodes every pickle
//! and renders the same canonical form from the `Document`; the two must be
//! identical, including which containers and strings are shared.
//!
//! Knobs: `VRAMSCOPE_DIFF_COUNT` (default 3000), `VRAMSCOPE_DIFF_SEED`
//! (default 20240601), `VRAMSCOPE_DIFF_KEEP=1` keeps the generated files.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use vramscope_pickle::{ContainerId, Document, Val, Value};

const MAX_DEPTH: usize = 2000;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys; assert sys.version_info >= (3, 8)"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

fn unique_temp_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("vramscope-{tag}-{}-{nanos}", std::process::id()))
}

/// Little-endian two's complement to decimal.
fn le_twos_complement_to_decimal(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "0".into();
    }
    let neg = bytes[bytes.len() - 1] & 0x80 != 0;
    let mut mag: Vec<u8> = bytes.to_vec();
    if neg {
        let mut carry = 1u16;
        for b in mag.iter_mut() {
            let x = (!*b) as u16 + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    // Base 2^32 limbs, most significant first, for long division by 10^9.
    let mut limbs: Vec<u32> = mag
        .chunks(4)
        .map(|c| {
            let mut a = [0u8; 4];
            a[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(a)
        })
        .collect();
    limbs.reverse();
    let mut groups = Vec::new();
    loop {
        while limbs.first() == Some(&0) {
            limbs.remove(0);
        }
        if limbs.is_empty() {
            break;
        }
        let mut rem = 0u64;
        for l in limbs.iter_mut() {
            let cur = (rem << 32) | *l as u64;
            *l = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        groups.push(rem as u32);
    }
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    match groups.split_last() {
        None => s.push('0'),
        Some((top, rest)) => {
            write!(s, "{top}").unwrap();
            for g in rest.iter().rev() {
                write!(s, "{g:09}").unwrap();
            }
        }
    }
    s
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        write!(s, "{x:02x}").unwrap();
    }
    s
}

/// Renders the canonical form described in `gen_random_pickles.py`.
struct Canon<'d> {
    doc: &'d Document,
    containers: HashMap<ContainerId, u32>,
    atoms: HashMap<Value, u32>,
    next: u32,
    out: String,
}

impl<'d> Canon<'d> {
    fn new(doc: &'d Document) -> Self {
        Canon {
            doc,
            containers: HashMap::new(),
            atoms: HashMap::new(),
            next: 0,
            out: String::new(),
        }
    }

    /// Writes `@n` and returns false when seen before, else writes `<prefix>n=`.
    fn label_atom(&mut self, v: Value) -> bool {
        if let Some(n) = self.atoms.get(&v) {
            write!(self.out, "@{n}").unwrap();
            return false;
        }
        self.atoms.insert(v, self.next);
        write!(self.out, "${}=", self.next).unwrap();
        self.next += 1;
        true
    }

    fn label_container(&mut self, c: ContainerId) -> bool {
        if let Some(n) = self.containers.get(&c) {
            write!(self.out, "@{n}").unwrap();
            return false;
        }
        self.containers.insert(c, self.next);
        write!(self.out, "#{}=", self.next).unwrap();
        self.next += 1;
        true
    }

    fn seq(&mut self, c: ContainerId, open: &str, close: &str, depth: usize) -> Result<(), String> {
        self.out.push_str(open);
        for (i, item) in self.doc.items(c).enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.walk(item, depth + 1)?;
        }
        self.out.push_str(close);
        Ok(())
    }

    fn walk(&mut self, v: Value, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("nesting deeper than {MAX_DEPTH}"));
        }
        match self.doc.get(v) {
            Val::None => self.out.push('N'),
            Val::Bool(b) => self.out.push_str(if b { "B1" } else { "B0" }),
            Val::Int(i) => write!(self.out, "I{i}").unwrap(),
            Val::BigInt(b) => {
                let s = le_twos_complement_to_decimal(b);
                write!(self.out, "I{s}").unwrap();
            }
            Val::Float(f) => write!(self.out, "F{:016x}", f.to_bits()).unwrap(),
            // Short strings are interned by content, so only longer ones
            // carry memo identity (see gen_random_pickles.py).
            Val::Str(s) if s.len() <= 15 => {
                write!(self.out, "U\"{}\"", hex(s.as_bytes())).unwrap();
            }
            Val::Str(s) => {
                if self.label_atom(v) {
                    write!(self.out, "U\"{}\"", hex(s.as_bytes())).unwrap();
                }
            }
            Val::Bytes(b) => {
                if self.label_atom(v) {
                    write!(self.out, "Y\"{}\"", hex(b)).unwrap();
                }
            }
            Val::ByteArray(b) => {
                if self.label_atom(v) {
                    write!(self.out, "A\"{}\"", hex(b)).unwrap();
                }
            }
            Val::Tuple(c) if self.doc.is_empty(c) => self.out.push_str("T()"),
            Val::List(c) => {
                if self.label_container(c) {
                    self.seq(c, "L[", "]", depth)?;
                }
            }
            Val::Tuple(c) => {
                if self.label_container(c) {
                    self.seq(c, "T(", ")", depth)?;
                }
            }
            Val::Set(c) => {
                if self.label_container(c) {
                    self.seq(c, "S{", "}", depth)?;
                }
            }
            Val::FrozenSet(c) => {
                if self.label_container(c) {
                    self.seq(c, "F{", "}", depth)?;
                }
            }
            Val::Dict(c) => {
                if self.label_container(c) {
                    self.out.push_str("D{");
                    for (i, (k, val)) in self.doc.pairs(c).enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        self.walk(k, depth + 1)?;
                        self.out.push(':');
                        self.walk(val, depth + 1)?;
                    }
                    self.out.push('}');
                }
            }
            Val::Opaque(o) => return Err(format!("unexpected opaque value {o:?}")),
        }
        Ok(())
    }
}

fn render(doc: &Document) -> Result<String, String> {
    let mut c = Canon::new(doc);
    c.walk(doc.root(), 0)?;
    Ok(c.out)
}

/// First differing position with some context, for readable failures.
fn diff_excerpt(a: &str, b: &str) -> String {
    let at = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(120);
    let cut = |s: &str| -> String {
        let end = (at + 200).min(s.len());
        s.get(from..end).unwrap_or("").to_string()
    };
    format!(
        "first difference at char {at} (lengths {} vs {})\n  python: ...{}...\n  rust:   ...{}...",
        a.len(),
        b.len(),
        cut(a),
        cut(b)
    )
}

fn protocol_of(path: &Path) -> u8 {
    let stem = path.file_stem().unwrap().to_str().unwrap();
    let p = stem.rsplit("_p").next().unwrap();
    p.parse().unwrap()
}

#[test]
fn bigint_to_decimal_helper() {
    assert_eq!(le_twos_complement_to_decimal(&[]), "0");
    assert_eq!(le_twos_complement_to_decimal(&[0xff]), "-1");
    assert_eq!(le_twos_complement_to_decimal(&[0x80]), "-128");
    assert_eq!(le_twos_complement_to_decimal(&[0x00, 0x01]), "256");
    // 2**64 and -(2**64)
    assert_eq!(
        le_twos_complement_to_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 1]),
        "18446744073709551616"
    );
    assert_eq!(
        le_twos_complement_to_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff]),
        "-18446744073709551616"
    );
    // 10**27 = 0x33B2E3C9FD0803CE8000000
    let mut b = vec![0u8; 12];
    let v: u128 = 10u128.pow(27);
    b.copy_from_slice(&v.to_le_bytes()[..12]);
    assert_eq!(
        le_twos_complement_to_decimal(&b),
        "1000000000000000000000000000"
    );
}

#[test]
fn matches_cpython_pickler() {
    let Some(py) = python() else {
        eprintln!("skipping differential test: python3 is not available");
        return;
    };
    let count = env_or("VRAMSCOPE_DIFF_COUNT", 3000);
    let seed = env_or("VRAMSCOPE_DIFF_SEED", 20240601);
    let dir = unique_temp_dir("diff");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen_random_pickles.py");

    let t0 = Instant::now();
    let out = Command::new(py)
        .arg(&script)
        .args(["--seed", &seed.to_string(), "--count", &count.to_string()])
        .arg(&dir)
        .output()
        .expect("run the pickle generator");
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gen_time = t0.elapsed();

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle"))
        .collect();
    files.sort();
    assert_eq!(files.len() as u64, count, "generator wrote too few files");

    let t1 = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut per_protocol = [0u32; 6];
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let p = protocol_of(path);
        let bytes = std::fs::read(path).unwrap();
        let expected = std::fs::read_to_string(path.with_extension("txt")).unwrap();
        let doc = match vramscope_pickle::parse(&bytes) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{name}: parse error: {e}"));
                continue;
            }
        };
        // Protocols 0 and 1 have no PROTO opcode.
        let want_proto = if p >= 2 { p } else { 0 };
        if doc.protocol != want_proto {
            failures.push(format!("{name}: protocol {} != {want_proto}", doc.protocol));
        }
        if doc.skipped_count != 0 {
            failures.push(format!("{name}: skipped {:?}", doc.skipped));
        }
        if doc.truncated.is_some() {
            failures.push(format!("{name}: truncated {:?}", doc.truncated));
        }
        match render(&doc) {
            Ok(got) if got == expected => per_protocol[p as usize] += 1,
            Ok(got) => failures.push(format!("{name}: {}", diff_excerpt(&expected, &got))),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let parse_time = t1.elapsed();
    eprintln!(
        "differential: {} pickles (per protocol 0..5 matched: {per_protocol:?}), \
         generated in {gen_time:.2?}, decoded and compared in {parse_time:.2?}",
        files.len()
    );

    if failures.is_empty() {
        if std::env::var_os("VRAMSCOPE_DIFF_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    } else {
        panic!(
            "{} of {} pickles differ (files kept in {}); first:\n{}",
            failures.len(),
            files.len(),
            dir.display(),
            failures[0]
        );
    }
}
