//! `vramscope ranks`: a job's rank files from the command line, its JSON,
//! limits with exit 3, the rank taken from a pattern.

mod common;

use common::*;
use serde_json::Value;

/// Four ranks in Megatron's naming; rank 2 keeps an extra 256 MiB every
/// iteration and runs out of memory.
fn job() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = shared_dir("ranks-job");
        for rank in 0..4 {
            let name = if rank == 2 {
                format!("node{}/mem_oom_rank_{rank}.pickle", 10 + rank)
            } else {
                format!("node{}/mem_{rank}.pickle", 10 + rank)
            };
            let f = dir.join(name);
            std::fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
            let f = f.to_str().expect("utf-8").to_owned();
            let mut args = vec![
                "synth",
                "-o",
                &f,
                "--entries",
                "15000",
                "--seed",
                "4",
                "--iterations",
                "6",
            ];
            if rank == 2 {
                args.extend(["--leak", "256MiB", "--oom"]);
            }
            let o = vramscope(&args);
            assert!(o.status.success(), "{}", stderr(&o));
        }
        dir
    })
    .clone()
}

#[test]
fn the_rank_that_runs_out_first_comes_first_with_its_extra_holder() {
    let dir = job();
    let o = vramscope(&["ranks", dir.to_str().expect("utf-8"), "--json", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(j["files"], 4);
    assert_eq!(j["ranks"][0]["rank"], 2);
    assert!(j["ranks"][0]["oom"].is_object());
    assert_eq!(j["outliers"], serde_json::json!([2]));
    let site = j["worst"]["sites"][0]["site"].as_str().expect("site");
    assert!(
        site.ends_with("train.py:74 in accumulate_history"),
        "{site}"
    );
    let text = stdout(&vramscope(&["ranks", dir.to_str().expect("utf-8"), "-q"]));
    assert!(text.contains("rank 2 against the median rank"), "{text}");
}

#[test]
fn limits_fail_with_exit_3() {
    let dir = job();
    let d = dir.to_str().expect("utf-8");
    let o = vramscope(&["ranks", d, "-q", "--max-imbalance", "1.01"]);
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    assert!(stdout(&o).contains("FAIL max_imbalance"));
    let o = vramscope(&[
        "ranks",
        d,
        "-q",
        "--max-imbalance",
        "50",
        "--max-peak",
        "1TiB",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let o = vramscope(&["ranks", d, "-q", "--max-peak", "1MiB"]);
    assert_eq!(o.status.code(), Some(3));
}

#[test]
fn a_pattern_names_the_ranks_and_bad_input_is_refused() {
    let dir = job();
    let d = dir.to_str().expect("utf-8");
    let o = vramscope(&["ranks", d, "--json", "-q", "--rank-from", r"node(\d+)"]);
    let j: Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(j["ranks"][0]["rank"], 12);
    let o = vramscope(&["ranks", d, "-q", "--rank-from", "node(\\d+"]);
    assert_eq!(o.status.code(), Some(2));
    let o = vramscope(&["ranks", "/nonexistent/dir", "-q"]);
    assert_eq!(o.status.code(), Some(1));
}
