//! Bounded-time mutation test of the whole read path: real snapshots and a
//! recorder's file with random byte flips, insertions, deletions, repeated
//! runs and truncations go through the snapshot decoder, the full summary
//! and the leak finder. Nothing may panic; every failure must be an error
//! value. `VRAMSCOPE_MUTATION_ITERS` raises the count.

use std::panic::{catch_unwind, AssertUnwindSafe};

use vramscope_analysis::leaks::{find_leaks, LeakOptions};
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::{decode_bytes, LoadOptions};
use vramscope_testdata::Rng;

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        if v.is_empty() {
            break;
        }
        let at = rng.below(v.len());
        match rng.below(6) {
            0 => v[at] = rng.next_u64() as u8,
            1 => v[at] ^= 1 << rng.below(8),
            2 => v.insert(at, rng.next_u64() as u8),
            3 => {
                v.remove(at);
            }
            // A run of bytes repeated: values and memo references written
            // twice (how a 1.8 MB file came to stand for billions of values).
            4 => {
                let end = (at + 1 + rng.below(64)).min(v.len());
                let run = v[at..end].to_vec();
                v.splice(at..at, run);
            }
            _ => v.truncate(at.max(1)),
        }
    }
    v
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in [
        "magma27_cs336_windows.pickle",
        "yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle",
    ] {
        out.push((name.to_owned(), vramscope_testdata::real_bytes(name)));
    }
    // A recorder's file: its `vramscope` dict is read whole.
    let name = "corpus_accelerate_traceback_kept.pickle";
    out.push((name.to_owned(), vramscope_testdata::recorded_bytes(name)));
    // A small JSON snapshot with every optional field, so mutations hit the
    // JSON path and the rarer keys too.
    out.push((
        "inline.json".into(),
        br#"{"segments":[{"device":0,"address":4096,"total_size":2097152,"allocated_size":1024,"active_size":1024,"requested_size":1000,"stream":0,"segment_type":"small","segment_pool_id":[0,0],"is_expandable":false,"frames":[],"blocks":[{"address":4096,"size":1024,"requested_size":1000,"state":"active_allocated","frames":[{"filename":"t.py","line":3,"name":"f"}]},{"address":5120,"size":2096128,"requested_size":0,"state":"inactive","frames":[]}]}],"device_traces":[[{"action":"segment_alloc","addr":4096,"size":2097152,"stream":0,"time_us":1},{"action":"alloc","addr":4096,"size":1000,"stream":0,"time_us":2,"frames":[{"filename":"t.py","line":3,"name":"f"}],"category":"activation"},{"action":"oom","size":99999999,"device_free":5,"stream":0,"time_us":3}]],"allocator_settings":{"expandable_segments":false},"external_annotations":[{"name":"ProfilerStep#1","stage":"START","device":0,"time_us":1}]}"#.to_vec(),
    ));
    out
}

#[test]
fn mutated_snapshots_never_panic() {
    let iters: usize = std::env::var("VRAMSCOPE_MUTATION_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let seeds = seeds();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0usize, 0usize);
    let opts = LoadOptions::default();
    let no_sources = LeakOptions {
        read_sources: false,
        ..LeakOptions::default()
    };
    for i in 0..iters {
        let (name, seed) = &seeds[i % seeds.len()];
        let input = mutate(&mut rng, seed);
        let r = catch_unwind(AssertUnwindSafe(|| match decode_bytes(&input, &opts) {
            Ok(snap) => {
                let s = summarize(&snap, &SummaryOptions::default());
                serde_json::to_string(&s).expect("summary serialises");
                for d in snap.devices() {
                    let l = find_leaks(&snap, d, &no_sources);
                    serde_json::to_string(&l).expect("leak report serialises");
                }
                true
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                false
            }
        }));
        match r {
            Ok(true) => ok += 1,
            Ok(false) => err += 1,
            Err(_) => {
                let path = std::env::temp_dir().join(format!("vramscope-mutant-{i}.bin"));
                let _ = std::fs::write(&path, &input);
                panic!("mutant {i} of {name} panicked; saved to {}", path.display());
            }
        }
    }
    eprintln!("{iters} mutants: {ok} decoded, {err} rejected with an error");
    assert_eq!(ok + err, iters);
    assert!(ok > 0 && err > 0, "mutations should produce both outcomes");
}
