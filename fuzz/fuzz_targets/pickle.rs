//! Fuzz the pickle reader: any input must parse or fail cleanly, and the
//! whole document must be walkable.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use vramscope_pickle::{Document, Opaque, ParseOptions, PickleError, Val, Value};

const MAX_DEPTH: usize = 10_000;

/// Visits every value reachable from the root, each container once.
fn walk(doc: &Document) -> usize {
    let mut seen = HashSet::new();
    let mut stack: Vec<(Value, usize)> = vec![(doc.root(), 0)];
    let mut n = 0usize;
    while let Some((v, depth)) = stack.pop() {
        n += 1;
        if depth >= MAX_DEPTH {
            continue;
        }
        let d = depth + 1;
        match doc.get(v) {
            Val::None | Val::Bool(_) | Val::Int(_) | Val::Float(_) => {
                let _ = doc.as_int(v);
            }
            Val::BigInt(b) | Val::Bytes(b) | Val::ByteArray(b) => n += b.len() & 1,
            Val::Str(s) => {
                assert_eq!(doc.as_str(v), Some(s));
                let id = v.str_id().expect("a string has an id");
                assert_eq!(doc.str_by_id(id), Some(s));
            }
            Val::Opaque(o) => match o {
                Opaque::Reduce { callable: a, args: b }
                | Opaque::NewObj { class: a, args: b }
                | Opaque::Build { object: a, state: b } => {
                    stack.push((*a, d));
                    stack.push((*b, d));
                }
                Opaque::PersistentId(p) => stack.push((*p, d)),
                Opaque::Global { module, name } => n += module.len() + name.len(),
                Opaque::Extension(_) | Opaque::OutOfBandBuffer => {}
            },
            Val::List(c) | Val::Tuple(c) | Val::Dict(c) | Val::Set(c) | Val::FrozenSet(c) => {
                assert_eq!(v.container(), Some(c));
                if !seen.insert(c) {
                    continue;
                }
                let len = doc.len(c);
                let items = doc.items(c).count();
                if matches!(doc.get(v), Val::Dict(_)) {
                    assert_eq!(items, 2 * len);
                    assert_eq!(doc.pairs(c).count(), len);
                    let _ = doc.dict_get(c, "segments");
                } else {
                    assert_eq!(items, len);
                }
                assert_eq!(doc.is_empty(c), len == 0);
                for item in doc.items(c) {
                    stack.push((item, d));
                }
            }
        }
    }
    n + doc.heap_bytes() + doc.skipped.len()
}

fn check_error(e: &PickleError, len: usize) {
    let msg = e.to_string();
    match e.offset() {
        Some(off) => {
            assert!(off as usize <= len, "{msg}");
            assert!(msg.contains("byte"), "{msg}");
        }
        None => assert!(matches!(e, PickleError::Empty), "{msg}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let full = vramscope_pickle::parse(data);
    match &full {
        Ok(doc) => {
            assert!(doc.heap_bytes() <= 64 * data.len() + (1 << 20));
            std::hint::black_box(walk(doc));
        }
        Err(e) => check_error(e, data.len()),
    }

    // Without recovery and with few MARKs allowed: a success here must be a
    // success of the default parse too, with the same root kind.
    let mut opts = ParseOptions {
        max_marks: 64,
        recover_truncated: false,
        ..ParseOptions::default()
    };
    match vramscope_pickle::parse_with(data, &mut opts) {
        Ok(strict) => {
            assert!(strict.truncated.is_none());
            let full = full.as_ref().expect("strict parse succeeded, default failed");
            assert!(full.truncated.is_none());
            assert_eq!(
                strict.get(strict.root()).type_name(),
                full.get(full.root()).type_name()
            );
            assert_eq!(strict.container_count(), full.container_count());
            assert_eq!(strict.skipped_count, full.skipped_count);
        }
        Err(e) => check_error(&e, data.len()),
    }
});
