//! `vramscope simulate`: the allocator model replays real and generated
//! traces, reproduces their segment events and OOMs, and its what-if
//! answers obey the checks a user would make by hand.

mod common;

use common::*;
use serde_json::Value;
use vramscope_testdata::real;

fn simulate_json(args: &[&str]) -> Value {
    let mut all = vec!["simulate", "--json", "-q"];
    all.extend_from_slice(args);
    let o = vramscope(&all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("json")
}

fn runs(j: &Value) -> &Vec<Value> {
    j["runs"].as_array().expect("runs")
}

#[test]
fn a_real_runs_segments_are_reproduced_and_the_sweep_is_sane() {
    let p = real("decomfl_opt_zo_fl_memory.pickle.gz");
    let j = simulate_json(&[p.to_str().expect("utf-8"), "--sweep"]);
    let rec = &runs(&j)[0];
    assert_eq!(rec["label"], "recorded");
    assert_eq!(rec["recorded_segment_events"], 61);
    assert_eq!(rec["matched_segment_events"], 61);
    assert_eq!(
        rec["simulated_peak_reserved"],
        rec["recorded_peak_reserved"]
    );
    assert_eq!(runs(&j).len(), 1 + vramscope_allocator::SWEEP.len());
    for r in runs(&j) {
        let reserved = r["simulated_peak_reserved"].as_u64().expect("u64");
        let allocated = r["simulated_peak_allocated"].as_u64().expect("u64");
        assert!(reserved >= allocated, "{r}");
    }
}

#[test]
fn more_memory_never_turns_a_fit_into_an_oom() {
    let p = real("decomfl_opt_zo_fl_memory.pickle.gz");
    let p = p.to_str().expect("utf-8");
    let peak = simulate_json(&[p])["runs"][0]["simulated_peak_allocated"]
        .as_u64()
        .expect("u64");
    let mut fitted = false;
    // From below the peak allocated (cannot fit) upwards.
    for k in [90u64, 100, 101, 103, 106, 110, 120, 150, 200] {
        let cap = format!("{}", peak / 100 * k);
        let j = simulate_json(&[p, "--capacity", &cap]);
        let fits = j["runs"][0]["oom"].is_null();
        if k == 90 {
            assert!(!fits, "below the peak allocated nothing fits");
        }
        assert!(
            !fitted || fits,
            "fits at a smaller capacity but not at {cap}"
        );
        fitted |= fits;
    }
    assert!(fitted);
}

#[test]
fn a_request_larger_than_the_gpu_is_answered_plainly() {
    let dir = temp_dir("simulate-oom");
    let f = dir.join("oom.pickle");
    let f = f.to_str().expect("utf-8");
    let o = vramscope(&["synth", "-o", f, "--entries", "20000", "--oom"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = simulate_json(&[f, "--sweep"]);
    let oom = &j["recorded_oom"];
    let rec = &runs(&j)[0];
    // The model fails where the program failed, after releasing the cache
    // as the allocator did (the file's segment_free events included).
    assert_eq!(rec["oom"][0], oom["entry"]);
    assert_eq!(
        rec["matched_segment_events"],
        rec["recorded_segment_events"]
    );
    assert!(runs(&j).iter().all(|r| !r["oom"].is_null()));
    let answer = j["answer"].as_str().expect("answer");
    assert!(
        answer.starts_with("no setting helps: the request alone"),
        "{answer}"
    );
    let text = stdout(&vramscope(&["simulate", f, "-q"]));
    assert!(text.contains(answer), "{text}");
}

#[test]
fn a_bad_setting_is_a_usage_error() {
    let p = real("decomfl_opt_zo_fl_memory.pickle.gz");
    let o = vramscope(&[
        "simulate",
        p.to_str().expect("utf-8"),
        "--set",
        "max_split_size_mb:lots",
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("max_split_size_mb"), "{}", stderr(&o));
}
