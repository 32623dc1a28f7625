//! Damaged files through the allocator model: `simulate` and `advise` on
//! real GPU recordings cut short at many points (a process killed while it
//! dumped) and mutated at random. Nothing may panic. A cut inside the trace
//! leaves segments dumped at the end that the trace never reached: one of
//! them, freed before the cut and made again after it, once became two
//! segments over the same bytes and the replay panicked.
//! `VRAMSCOPE_MUTATION_ITERS` raises the number of random mutants.

use std::panic::{catch_unwind, AssertUnwindSafe};

use vramscope_advise::{advise, AdviseOptions};
use vramscope_simulate::{simulate, SimulateOptions};
use vramscope_snapshot::{decode_bytes, LoadOptions};
use vramscope_testdata::gpu_bytes;
use vramscope_testdata::Rng;

const SEEDS: [&str; 5] = [
    "advise_leak.pickle",
    "oom_gpt_default.pickle",
    "oom_frag_default.pickle",
    "facts_gpt_b24.pickle",
    "settings_expandable.pickle",
];

/// Whether the model ran (`Some(true)`), the file was refused (`Some(false)`),
/// or something panicked (`None`).
fn model_runs(input: &[u8]) -> Option<bool> {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(snap) = decode_bytes(input, &LoadOptions::default()) else {
            return false;
        };
        let ran = simulate(&snap, &SimulateOptions::default()).is_ok();
        let _ = advise(&snap, &AdviseOptions::default());
        ran
    }))
    .ok()
}

#[test]
fn files_cut_short_never_panic_the_model() {
    let mut ran = 0;
    for name in SEEDS {
        let full = gpu_bytes(name);
        for k in 1..60 {
            let cut = full.len() * k / 60;
            match model_runs(&full[..cut]) {
                Some(r) => ran += r as usize,
                None => panic!(
                    "{name} cut at byte {cut} of {}: the model panicked",
                    full.len()
                ),
            }
        }
    }
    assert!(ran > 100, "only {ran} cut files were replayed");
}

#[test]
fn mutated_files_never_panic_the_model() {
    let iters: usize = std::env::var("VRAMSCOPE_MUTATION_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(300, |n: usize| n / 100);
    let seeds: Vec<Vec<u8>> = SEEDS.iter().map(|n| gpu_bytes(n)).collect();
    let mut rng = Rng(0x51_7cc1_b727_220a);
    for i in 0..iters {
        let s = i % seeds.len();
        let mut v = seeds[s].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(v.len());
            match rng.below(4) {
                0 => v[at] ^= 1 << rng.below(8),
                1 => v[at] = rng.next_u64() as u8,
                // A run of bytes repeated: memo references and whole values
                // written twice.
                2 => {
                    let end = (at + 1 + rng.below(64)).min(v.len());
                    let run = v[at..end].to_vec();
                    v.splice(at..at, run);
                }
                _ => v.truncate(at.max(1)),
            }
        }
        if model_runs(&v).is_none() {
            let path = std::env::temp_dir().join(format!("vramscope-model-mutant-{i}.pickle"));
            let _ = std::fs::write(&path, &v);
            panic!(
                "mutant {i} of {}: the model panicked; saved to {}",
                SEEDS[s],
                path.display()
            );
        }
    }
}
