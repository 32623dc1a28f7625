//! Hostile input: lengths that lie, huge memo indices, deep nesting, every
//! truncation of a real-looking pickle, and a bounded-time mutation test.
//! The reader must never panic, must keep memory proportional to the input
//! and must finish in time proportional to the input.
//!
//! `VRAMSCOPE_MUTATION_ITERS` sets the number of mutants (default 200000,
//! a few seconds).
//!
//! The seed pickles in `tests/data/` are snapshot-shaped dicts written by
//! CPython's `pickle.dumps` at protocols 0, 2, 4 and 5.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use vramscope_pickle::{Document, Opaque, ParseOptions, PickleError, Val, Value};
use vramscope_testdata::Rng;

// ----- allocation accounting (per thread, so parallel tests do not interfere) -----

struct Counting;

thread_local! {
    static CUR: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = CUR.try_with(|c| {
        let v = c.get() + delta;
        c.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v)
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        note(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            note(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the peak number of bytes it had
/// allocated at once on this thread.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CUR.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    let peak = PEAK.with(Cell::get) - base;
    (r, peak.max(0) as usize)
}

/// Bound on `Document::heap_bytes` (the arena: items, containers, strings).
fn budget(input_len: usize) -> usize {
    64 * input_len + (1 << 20)
}

/// Bound on everything a parse allocates at once, counted by the global
/// allocator: the arena, the VM's stack and memo, inert objects (a one-byte
/// NEXT_BUFFER makes a ~56-byte `Opaque`) and the skipped-construct records
/// (at most `MAX_SKIPPED_RECORDS` of a few KiB each).
fn alloc_budget(input_len: usize) -> usize {
    256 * input_len + (4 << 20)
}

// ----- helpers -----

fn parse(b: &[u8]) -> Result<Document, PickleError> {
    vramscope_pickle::parse(b)
}

fn data(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    [
        "snapshot_p0.pickle",
        "snapshot_p2.pickle",
        "snapshot_p4.pickle",
        "snapshot_objects_p5.pickle",
    ]
    .iter()
    .map(|n| (n.to_string(), data(n)))
    .collect()
}

/// Visits every value reachable from the root, each container once,
/// iteratively and depth-limited. Returns (values visited, max depth seen).
fn walk_all(doc: &Document, max_depth: usize) -> (usize, usize) {
    let mut seen = HashSet::new();
    let mut stack: Vec<(Value, usize)> = vec![(doc.root(), 0)];
    let (mut n, mut deepest) = (0, 0);
    while let Some((v, depth)) = stack.pop() {
        n += 1;
        deepest = deepest.max(depth);
        if depth >= max_depth {
            continue;
        }
        match doc.get(v) {
            Val::Opaque(o) => match o {
                Opaque::Reduce {
                    callable: a,
                    args: b,
                }
                | Opaque::NewObj { class: a, args: b }
                | Opaque::Build {
                    object: a,
                    state: b,
                } => {
                    stack.push((*a, depth + 1));
                    stack.push((*b, depth + 1));
                }
                Opaque::PersistentId(p) => stack.push((*p, depth + 1)),
                Opaque::Global { module, name } => {
                    std::hint::black_box((module.len(), name.len()));
                }
                Opaque::Extension(_) | Opaque::OutOfBandBuffer => {}
            },
            Val::Str(s) => {
                std::hint::black_box(s.len());
            }
            Val::BigInt(b) | Val::Bytes(b) | Val::ByteArray(b) => {
                std::hint::black_box(b.len());
            }
            _ => {
                if let Some(c) = v.container() {
                    if seen.insert(c) {
                        let _ = (doc.kind(c), doc.len(c));
                        for item in doc.items(c) {
                            stack.push((item, depth + 1));
                        }
                    }
                }
            }
        }
    }
    (n, deepest)
}

/// Parses under `catch_unwind` and checks the invariants every result must
/// satisfy. Returns whether a document came back.
fn check(input: &[u8], what: &str) -> bool {
    let ((res, walked), peak) = measure(|| {
        let res = catch_unwind(AssertUnwindSafe(|| parse(input)));
        let walked = match &res {
            Ok(Ok(doc)) => Some(catch_unwind(AssertUnwindSafe(|| walk_all(doc, 100_000)))),
            _ => None,
        };
        (res, walked)
    });
    let res = res.unwrap_or_else(|_| panic!("{what}: parse panicked on {} bytes", input.len()));
    if let Some(w) = walked {
        assert!(w.is_ok(), "{what}: walking the document panicked");
    }
    assert!(
        peak <= alloc_budget(input.len()),
        "{what}: parsing {} bytes allocated {peak} bytes at once",
        input.len()
    );
    match res {
        Ok(doc) => {
            assert!(
                doc.heap_bytes() <= budget(input.len()),
                "{what}: document holds {} bytes for {} bytes of input",
                doc.heap_bytes(),
                input.len()
            );
            if let Some(t) = &doc.truncated {
                assert!(t.offset as usize <= input.len(), "{what}: {t:?}");
            }
            for s in &doc.skipped {
                assert!((s.offset as usize) < input.len(), "{what}: {s:?}");
            }
            true
        }
        Err(e) => {
            let msg = e.to_string();
            match e.offset() {
                Some(off) => {
                    assert!(off as usize <= input.len(), "{what}: {msg}");
                    assert!(msg.contains("byte"), "{what}: {msg}");
                }
                None => assert!(matches!(e, PickleError::Empty), "{what}: {msg}"),
            }
            false
        }
    }
}

fn le64(n: u64) -> [u8; 8] {
    n.to_le_bytes()
}

fn le32(n: u32) -> [u8; 4] {
    n.to_le_bytes()
}

// ----- lengths that lie -----

#[test]
fn claimed_lengths_beyond_the_input() {
    let big = 1u64 << 40;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "BINUNICODE8 2^40",
            [&b"\x80\x04\x8d"[..], &le64(big), b"abc"].concat(),
        ),
        (
            "BINUNICODE8 max",
            [&b"\x80\x04\x8d"[..], &le64(u64::MAX), b"abc"].concat(),
        ),
        (
            "BINBYTES8 2^40",
            [&b"\x80\x04\x8e"[..], &le64(big), b"abc"].concat(),
        ),
        (
            "BYTEARRAY8 max",
            [&b"\x80\x05\x96"[..], &le64(u64::MAX)].concat(),
        ),
        (
            "BINUNICODE 4G",
            [&b"\x80\x02X"[..], &le32(u32::MAX), b"abc"].concat(),
        ),
        (
            "BINBYTES 4G",
            [&b"\x80\x03B"[..], &le32(u32::MAX), b"abc"].concat(),
        ),
        (
            "BINSTRING 2G",
            [&b"T"[..], &le32(i32::MAX as u32), b"abc"].concat(),
        ),
        (
            "BINSTRING negative",
            [&b"T"[..], &le32(u32::MAX), b"abc."].concat(),
        ),
        (
            "LONG4 2G",
            [&b"\x80\x02\x8b"[..], &le32(i32::MAX as u32), b"abc"].concat(),
        ),
        (
            "LONG4 negative",
            [&b"\x80\x02\x8b"[..], &le32(u32::MAX), b"abc."].concat(),
        ),
        ("LONG1 short", b"\x80\x02\x8a\xff\x01\x02".to_vec()),
        (
            "FRAME 2^40",
            [&b"\x80\x04\x95"[..], &le64(big), b"K\x01."].concat(),
        ),
        ("SHORT_BINUNICODE short", b"\x80\x04\x8c\xffab".to_vec()),
        // Inside an open list: the list is recovered, the lying item dropped.
        (
            "list then BINUNICODE8 2^40",
            [&b"\x80\x04](K\x01K\x02\x8d"[..], &le64(big), b"abc"].concat(),
        ),
    ];
    for (name, bytes) in &cases {
        let t = Instant::now();
        check(bytes, name);
        assert!(t.elapsed() < Duration::from_secs(1), "{name}: too slow");
    }
    // The recovered list keeps the items before the lie.
    let doc = parse(&cases.last().unwrap().1).unwrap();
    let t = doc.truncated.as_ref().expect("truncation recorded");
    assert!(t.reason.contains("BINUNICODE8"), "{t:?}");
    let root = doc.root().container().unwrap();
    let items: Vec<i64> = doc.items(root).filter_map(|v| doc.as_int(v)).collect();
    assert_eq!(items, [1, 2]);
    // A FRAME length is only a hint.
    let doc = parse(&cases[11].1).unwrap();
    assert_eq!(doc.as_int(doc.root()), Some(1));
}

#[test]
fn huge_memo_indices_do_not_allocate() {
    // LONG_BINPUT / LONG_BINGET 0xFFFFFFFF.
    let b = b"\x80\x02]r\xff\xff\xff\xffj\xff\xff\xff\xffa.";
    let (doc, peak) = measure(|| parse(b).unwrap());
    assert!(peak < 1 << 20, "{peak}");
    let root = doc.root().container().unwrap();
    let first = doc.items(root).next().unwrap();
    assert_eq!(first.container(), Some(root), "the list contains itself");

    // PUT / GET 99999999999 (protocol 0 text indices).
    let b = b"(lp99999999999\ng99999999999\na.";
    let (doc, peak) = measure(|| parse(b).unwrap());
    assert!(peak < 1 << 20, "{peak}");
    let root = doc.root().container().unwrap();
    assert_eq!(doc.items(root).next().unwrap().container(), Some(root));

    // Indices beyond u64 are an error, not a wrap-around.
    check(b"(lp99999999999999999999999999\n.", "PUT beyond u64");
    assert!(parse(b"(lp99999999999999999999999999\n.").is_err());
    // A slot that was never written.
    assert!(matches!(
        parse(b"\x80\x02]r\xff\xff\xff\xffj\xfe\xff\xff\xff."),
        Err(PickleError::MemoMissing { .. })
    ));

    // 100k sparse puts of distinct huge indices: memory stays linear.
    let mut b = b"\x80\x02]".to_vec();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.push(b'r');
        b.extend_from_slice(&((x as u32) | 0x8000_0000).to_le_bytes());
    }
    b.push(b'.');
    check(&b, "sparse puts");
}

// ----- nesting -----

#[test]
fn deep_marks_are_capped() {
    let b = vec![b'('; 100_000];
    let t = Instant::now();
    let e = match parse(&b) {
        Err(e) => e,
        Ok(_) => panic!("100k open MARKs must hit the limit"),
    };
    assert!(matches!(e, PickleError::LimitExceeded { .. }), "{e}");
    assert!(e.to_string().contains("byte 4096"), "{e}");
    check(&b, "100k MARKs");

    // Raised limit: the truncated input recovers as 100k nested lists.
    let mut opts = ParseOptions {
        max_marks: 200_000,
        ..ParseOptions::default()
    };
    let doc = vramscope_pickle::parse_with(&b, &mut opts).unwrap();
    assert!(doc.truncated.is_some());
    let mut depth = 0;
    let mut v = doc.root();
    while let Some(c) = v.container() {
        depth += 1;
        match doc.items(c).next() {
            Some(next) => v = next,
            None => break,
        }
    }
    assert_eq!(depth, 100_000);
    let (_, deepest) = walk_all(&doc, 1_000_000);
    assert_eq!(deepest, 100_000 - 1);

    // The same with list/append pairs: `](` 100k times.
    let b = b"](".repeat(100_000);
    check(&b, "100k ](");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_megabyte_of_nested_lists() {
    // EMPTY_LIST × n then APPEND × (n-1): n lists nested n deep, no MARK.
    let n = 512 * 1024;
    let mut b = b"\x80\x02".to_vec();
    b.resize(b.len() + n, b']');
    b.resize(b.len() + n - 1, b'a');
    b.push(b'.');
    assert!(b.len() > 1 << 20);
    let t = Instant::now();
    assert!(check(&b, "nested lists"));
    let doc = parse(&b).unwrap();
    let mut depth = 0;
    let mut v = doc.root();
    while let Some(c) = v.container() {
        depth += 1;
        match doc.items(c).next() {
            Some(next) => v = next,
            None => break,
        }
    }
    assert_eq!(depth, n);
    assert_eq!(doc.container_count(), n);
    // Dropping a deeply nested document must not recurse.
    drop(doc);

    // Dicts nested the same way through SETITEM.
    let n = 200_000;
    let mut b = b"\x80\x02".to_vec();
    for _ in 0..n - 1 {
        b.extend_from_slice(b"}K\x01");
    }
    b.push(b'}');
    b.resize(b.len() + n - 1, b's');
    b.push(b'.');
    assert!(check(&b, "nested dicts"));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn shared_references_stay_linear() {
    // "Billion laughs": each level is a list holding the previous level ten
    // times. Logically 10^40 leaves; the document is linear in the input.
    let mut b = b"\x80\x02]q\x00".to_vec();
    for level in 1..=40u8 {
        b.extend_from_slice(b"](");
        for _ in 0..10 {
            b.extend_from_slice(&[b'h', level - 1]);
        }
        b.extend_from_slice(&[b'e', b'q', level]);
    }
    b.push(b'.');
    assert!(check(&b, "laughs"));
    let doc = parse(&b).unwrap();
    assert_eq!(doc.container_count(), 41);
    let root = doc.root().container().unwrap();
    let kids: HashSet<_> = doc.items(root).map(|v| v.container()).collect();
    assert_eq!(kids.len(), 1, "all ten items are one shared list");

    // A million DUPs of one list.
    let mut b = b"\x80\x02](]".to_vec();
    b.resize(b.len() + 1_000_000, b'2');
    b.extend_from_slice(b"e.");
    assert!(check(&b, "dup"));
}

// ----- time bombs -----

fn assert_fast(name: &str, input: &[u8], limit: Duration) {
    let t = Instant::now();
    check(input, name);
    let took = t.elapsed();
    assert!(took < limit, "{name}: {} bytes took {took:?}", input.len());
}

#[test]
fn long_text_arguments_take_linear_time() {
    let digits = vec![b'7'; 1 << 20];
    // Protocol 0 LONG / INT with a megabyte of digits.
    let b = [&b"L"[..], &digits, b"L\n."].concat();
    assert_fast("LONG 1M digits", &b, Duration::from_secs(2));
    let b = [&b"I"[..], &digits, b"\n."].concat();
    assert_fast("INT 1M digits", &b, Duration::from_secs(2));
    // FLOAT with a megabyte of digits.
    let b = [&b"F0."[..], &digits, b"\n."].concat();
    assert_fast("FLOAT 1M digits", &b, Duration::from_secs(2));
    // Many medium LONGs.
    let mut b = b"(".to_vec();
    for _ in 0..200 {
        b.push(b'L');
        b.resize(b.len() + 4000, b'9');
        b.extend_from_slice(b"L\n");
    }
    b.extend_from_slice(b"l.");
    assert_fast("200 LONGs of 4000 digits", &b, Duration::from_secs(2));
    // A megabyte line with no newline (GLOBAL, GET, UNICODE).
    for op in [&b"c"[..], b"g", b"V", b"S'", b"P", b"I", b"F"] {
        let b = [op, &vec![b'x'; 1 << 20]].concat();
        assert_fast("unterminated line", &b, Duration::from_secs(1));
    }
    // Many unterminated-looking lines: each scan must stop at its own newline.
    let b = b"Vabc\n0".repeat(200_000);
    assert_fast("many short lines", &b, Duration::from_secs(2));
}

#[test]
fn copied_names_do_not_amplify() {
    // One 256 KiB string, memoised, then used as module and name of 20k
    // STACK_GLOBALs and REDUCEs: each is 5-6 bytes of input and must not
    // copy the whole string again.
    let long = "m".repeat(256 * 1024);
    let mut b = b"\x80\x04X".to_vec();
    b.extend_from_slice(&(long.len() as u32).to_le_bytes());
    b.extend_from_slice(long.as_bytes());
    b.extend_from_slice(b"\x94(");
    for _ in 0..20_000 {
        b.extend_from_slice(b"h\x00h\x00\x93");
    }
    b.extend_from_slice(b"l.");
    assert_fast(
        "STACK_GLOBAL of a memoised 256K name",
        &b,
        Duration::from_secs(2),
    );

    let mut b = b"c".to_vec();
    b.extend_from_slice(long.as_bytes());
    b.extend_from_slice(b"\nf\n\x94(");
    for _ in 0..20_000 {
        b.extend_from_slice(b"h\x00)R");
    }
    b.extend_from_slice(b"l.");
    assert_fast("REDUCE of a 256K global", &b, Duration::from_secs(2));
}

// ----- truncation -----

#[test]
fn every_truncation_of_real_looking_pickles() {
    for (name, full) in seeds() {
        let whole = parse(&full).unwrap();
        assert!(whole.truncated.is_none(), "{name}");
        let (total, _) = walk_all(&whole, 10_000);
        let mut recovered = 0;
        for n in 0..full.len() {
            let prefix = &full[..n];
            let what = format!("{name}[..{n}]");
            if check(prefix, &what) {
                let doc = parse(prefix).unwrap();
                let t = doc
                    .truncated
                    .as_ref()
                    .unwrap_or_else(|| panic!("{what}: parsed without a truncation record"));
                assert_eq!(t.offset as usize, n, "{what}");
                let (count, _) = walk_all(&doc, 10_000);
                // A prefix never holds more than the whole (plus the lists
                // that recovery builds for pending MARKs).
                assert!(count <= total + 16, "{what}: {count} > {total}");
                recovered += 1;
            } else if n > 0 {
                let e = parse(prefix).err().unwrap();
                assert!(
                    matches!(e, PickleError::UnexpectedEof { .. }),
                    "{what}: a prefix may only fail for lack of input, got {e}"
                );
            }
        }
        // Once the root container is open, every later prefix is recoverable.
        assert!(
            recovered > full.len() * 9 / 10,
            "{name}: {recovered}/{}",
            full.len()
        );
    }
}

// ----- mutation -----

const INTERESTING_BYTES: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0xff, b'(', b'.', b'0', b'1', b'2', b'a', b'e', b'h', b'j', b'q', b'r',
    b's', b'u', b'R', b'b', b'c', b'\n', b']', b'}', b')', 0x85, 0x86, 0x87, 0x8a, 0x8b, 0x8c,
    0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,
];

const INTERESTING_WORDS: &[u64] = &[
    0,
    1,
    0x7f,
    0xff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 40,
    u64::MAX,
    i64::MAX as u64,
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    // Mostly one or two edits, so that mutants get deep into the file.
    let rounds = if rng.below(4) == 0 {
        1 + rng.below(8)
    } else {
        1 + rng.below(2)
    };
    for _ in 0..rounds {
        let len = b.len();
        match rng.below(10) {
            0 | 1 => {
                if len > 0 {
                    let i = rng.below(len);
                    b[i] ^= 1 << rng.below(8);
                }
            }
            2 => {
                if len > 0 {
                    let i = rng.below(len);
                    b[i] = rng.next_u64() as u8;
                }
            }
            3 => {
                if len > 0 {
                    let i = rng.below(len);
                    b[i] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())];
                }
            }
            4 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let ins: Vec<u8> = (0..n)
                    .map(|_| {
                        if rng.below(2) == 0 {
                            INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]
                        } else {
                            rng.next_u64() as u8
                        }
                    })
                    .collect();
                b.splice(i..i, ins);
            }
            5 => {
                if len > 0 {
                    let i = rng.below(len);
                    let n = 1 + rng.below(64.min(len - i));
                    b.drain(i..i + n);
                }
            }
            6 => {
                // Duplicate a run (repeats opcodes: extra APPENDS, BINGETs, MARKs).
                if len > 0 {
                    let i = rng.below(len);
                    let n = 1 + rng.below(64.min(len - i));
                    let run = b[i..i + n].to_vec();
                    let at = rng.below(len + 1);
                    b.splice(at..at, run);
                }
            }
            7 => {
                if len > 8 {
                    let i = rng.below(len - 8);
                    let w = INTERESTING_WORDS[rng.below(INTERESTING_WORDS.len())];
                    let width = [1, 2, 4, 8][rng.below(4)];
                    b[i..i + width].copy_from_slice(&w.to_le_bytes()[..width]);
                }
            }
            8 => {
                let n = rng.below(len + 1);
                b.truncate(n);
            }
            _ => {
                // Swap two runs.
                if len > 16 {
                    let i = rng.below(len - 8);
                    let j = rng.below(len - 8);
                    for k in 0..8 {
                        b.swap(i + k, j + k);
                    }
                }
            }
        }
    }
    b
}

#[test]
fn mutants_never_panic_and_stay_bounded() {
    let iters: usize = std::env::var("VRAMSCOPE_MUTATION_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let mut seeds = seeds();
    // The whole real file, and its first 64 KiB (faster mutants of real structure).
    let f = vramscope_testdata::real_bytes("magma27_cs336_windows.pickle");
    seeds.push(("magma27 head".into(), f[..f.len().min(64 << 10)].to_vec()));
    seeds.push(("magma27".into(), f));
    let mut rng = Rng(0x5EED_0FBA_DF00_D00D);
    let t = Instant::now();
    let (mut ok, mut err) = (0usize, 0usize);
    let mut big_parses = 0;
    for i in 0..iters {
        // The whole real file is ~500 KB: mutate it in 1 of 64 iterations.
        let k = if seeds.len() > 4 && i % 64 == 63 {
            big_parses += 1;
            seeds.len() - 1
        } else {
            rng.below(seeds.len().min(5))
        };
        let (name, seed) = &seeds[k];
        let m = mutate(&mut rng, seed);
        let what = format!("mutant {i} of {name}");
        if check(&m, &what) {
            ok += 1;
        } else {
            err += 1;
        }
    }
    eprintln!(
        "mutation: {iters} mutants ({big_parses} of the whole real fixture) in {:.2?}: {ok} parsed, {err} rejected",
        t.elapsed()
    );
}
