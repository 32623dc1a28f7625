//! Rank directories in the layouts frameworks write, built with the
//! generator (ranks of one job: the same model, runs of slightly different
//! lengths; rank 5 keeps an extra tensor every iteration and runs out of
//! memory) and from the real fixtures.

use std::path::Path;

use vramscope_ranks::{ranks, RanksOptions};
use vramscope_synth::{write_snapshot, SynthOptions};
use vramscope_testdata::TestDir;

const PLANTED: &str = "train.py:74 in accumulate_history";
const BAD: u32 = 5;

fn write(path: &Path, rank: u32, step: u64, exit: bool) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let opts = SynthOptions {
        // The same model on every rank and at every step (it is sized by
        // entries per iteration); runs of slightly different lengths.
        entries: 1_200 * step + 30 * rank as u64,
        seed: 11,
        iterations: step as u32,
        leak_bytes_per_iter: if rank == BAD { 192 << 20 } else { 0 },
        oom: rank == BAD && exit,
        ..Default::default()
    };
    let f = std::fs::File::create(path).expect("create");
    write_snapshot(&opts, std::io::BufWriter::new(f)).expect("synth");
}

fn temp(name: &str) -> TestDir {
    vramscope_testdata::temp_dir(&format!("ranks-{name}"))
}

/// `layout(rank, step, exit)` → the file's path under the root.
fn job(name: &str, layout: impl Fn(u32, u64, bool) -> String) -> TestDir {
    let root = temp(name);
    for rank in 0..8 {
        for step in [10, 20] {
            write(&root.join(layout(rank, step, false)), rank, step, false);
        }
    }
    write(&root.join(layout(BAD, 20, true)), BAD, 20, true);
    root
}

fn check(root: &Path) {
    let r = ranks(&[root.to_path_buf()], &RanksOptions::default()).expect("ranks");
    assert_eq!(r.files, 17);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.ranks.len(), 8);
    let first = &r.ranks[0];
    assert_eq!(
        first.rank,
        BAD,
        "{:?}",
        r.ranks.iter().map(|x| x.rank).collect::<Vec<_>>()
    );
    let oom = first.oom.as_ref().expect("its OOM");
    assert_eq!(oom.step, Some(20));
    assert!(first.outlier);
    eprintln!(
        "{:?}",
        r.ranks
            .iter()
            .map(|x| (x.rank, x.peak_allocated, x.step))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.outliers, vec![BAD]);
    assert!(r.imbalance > 1.2, "{}", r.imbalance);
    let w = r.worst.as_ref().expect("worst against the median");
    assert_eq!(w.rank, BAD);
    assert!(w.sites[0].site.ends_with(PLANTED), "{:?}", w.sites);
    assert_eq!(w.sites[0].median_bytes, 0);
    // Its peak grows from step 10 to step 20; the others' do not.
    let d = r
        .drift
        .iter()
        .find(|d| d.rank == BAD)
        .expect("drift of rank 5");
    assert!(d.drifting && d.growth_per_step > 0.0);
    assert!(r.drift.iter().filter(|d| d.drifting).all(|d| d.rank == BAD));
}

#[test]
fn torchtitan_current_layout() {
    check(&job("titan", |rank, step, exit| {
        format!(
            "memory_snapshot/step_{step:012}{}/{rank:06}_step_{step}.pickle",
            if exit { "_exit" } else { "" }
        )
    }));
}

#[test]
fn torchtitan_older_and_torchtune_layout() {
    check(&job("titan-old", |rank, step, exit| {
        format!(
            "memory_snapshot/iteration_{step}{}/rank{rank}_memory_snapshot.pickle",
            if exit { "_exit" } else { "" }
        )
    }));
}

#[test]
fn megatron_names() {
    check(&job("megatron", |rank, step, exit| {
        if exit {
            format!("step{step}/snapshot_oom_rank_{rank}.pickle")
        } else {
            format!("step{step}/snapshot_{rank}.pickle")
        }
    }));
}

#[test]
fn real_files_as_ranks_keep_their_own_figures() {
    let root = temp("real");
    let names = [
        "wedsonlin_medium_1024_training_memory_snapshot.pickle.gz",
        "wedsonlin_medium_512_inference_memory_snapshot.pickle.gz",
        "decomfl_opt_zo_fl_memory.pickle.gz",
    ];
    for (k, n) in names.iter().enumerate() {
        std::fs::copy(
            vramscope_testdata::real(n),
            root.join(format!("snap_{k}.pickle.gz")),
        )
        .expect("copy");
    }
    let r = ranks(
        &[root.to_path_buf()],
        &RanksOptions {
            jobs: 2,
            ..Default::default()
        },
    )
    .expect("ranks");
    assert_eq!(r.ranks.len(), 3);
    for row in &r.ranks {
        let snap = vramscope_snapshot::load(
            &vramscope_testdata::real(names[row.rank as usize]),
            &Default::default(),
        )
        .expect("loads");
        let s = vramscope_analysis::summarize(&snap, &Default::default());
        let d = s
            .devices
            .iter()
            .max_by_key(|d| d.peak.allocated_bytes)
            .expect("device");
        assert_eq!(
            row.peak_allocated, d.peak.allocated_bytes,
            "rank {}",
            row.rank
        );
        assert_eq!(
            row.peak_reserved, d.peak_reserved_bytes,
            "rank {}",
            row.rank
        );
    }
    // The largest run first; the smallest is the median of three.
    assert_eq!(r.ranks[0].rank, 0);
}
