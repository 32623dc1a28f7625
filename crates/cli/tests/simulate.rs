//! `vramscope simulate`: the allocator model replays real and generated
//! traces, reproduces their segment events and OOMs, and its simulations
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
    assert_eq!(runs(&j).len(), 1 + vramscope_simulate::SWEEP.len());
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

/// The demo's snapshot (the built-in example), written once by
/// `vramscope demo` for all the tests of this file.
fn demo_file() -> String {
    static FILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = shared_dir("simulate-demo");
        let o = vramscope(&["demo", "-o", dir.to_str().expect("utf-8")]);
        assert!(o.status.success(), "{}", stderr(&o));
        dir.join("demo_snapshot.pickle")
            .to_str()
            .expect("utf-8")
            .to_owned()
    })
    .clone()
}

#[test]
fn the_demos_oom_is_answered_with_what_must_shrink() {
    let f = demo_file();
    let j = simulate_json(&[&f, "--sweep"]);
    let oom = &j["recorded_oom"];
    let (request, cap) = (
        oom["request"].as_u64().expect("u64"),
        oom["capacity"].as_u64().expect("u64"),
    );
    assert!(request > cap);
    let answer = j["answer"].as_str().expect("answer");
    assert!(answer.starts_with("no setting helps"), "{answer}");
    let shrink = format!(
        "must shrink by at least {:.2} GiB",
        (request - cap) as f64 / (1u64 << 30) as f64
    );
    assert!(answer.contains(&shrink), "{answer}");
    // The holders at the OOM are listed, biggest first.
    let holders = oom["holders"].as_array().expect("holders");
    assert!(holders.len() >= 2);
    assert!(holders[0]["bytes"].as_u64() >= holders[1]["bytes"].as_u64());
}

#[test]
fn dropping_the_biggest_holder_lowers_memory_at_the_oom_by_its_bytes() {
    let f = demo_file();
    let j = simulate_json(&[&f]);
    let holder = &j["recorded_oom"]["holders"][0];
    let site = holder["site"].as_str().expect("site");
    let bytes = holder["bytes"].as_u64().expect("u64");
    let dropped = simulate_json(&[&f, "--drop", site]);
    let (base, changed) = (&runs(&dropped)[0], &runs(&dropped)[1]);
    assert_eq!(base["label"], "recorded");
    assert_eq!(changed["label"], format!("drop {site}"));
    let at = |r: &Value, k: &str| r[k].as_u64().expect("u64");
    // Requested bytes live at the OOM: exactly the holder's less.
    assert_eq!(
        at(base, "requested_before_recorded_oom") - at(changed, "requested_before_recorded_oom"),
        bytes
    );
    // Allocated (block) bytes: at least that, as blocks are rounded up.
    let freed =
        at(base, "allocated_before_recorded_oom") - at(changed, "allocated_before_recorded_oom");
    assert!(freed >= bytes, "{freed} < {bytes}");
    let count = holder["count"].as_u64().expect("u64");
    assert!(freed <= bytes + count * (1 << 20), "{freed}");
    assert_eq!(dropped["changes"][0]["sites"][0], site);
}

#[test]
fn free_early_and_scale_change_what_is_live_by_what_they_matched() {
    let f = demo_file();
    // The leak the demo plants: a list that keeps one tensor per iteration.
    let j = simulate_json(&[
        &f,
        "--free-early",
        "train.py:74",
        "--scale",
        "trainer.py:66 in _backward=0.5",
    ]);
    let changes = j["changes"].as_array().expect("changes");
    let leak = changes[0]["bytes"].as_u64().expect("u64");
    assert_eq!(changes[0]["blocks"], 8, "one per iteration");
    let r = runs(&j);
    let live = |r: &Value| r["requested_before_recorded_oom"].as_u64().expect("u64");
    let base = live(&r[0]);
    let changed = live(&r[1]);
    // Every leaked tensor is gone by the OOM; the backward's tensors live
    // then are half their size (rounded down per block).
    let holders = simulate_json(&[&f])["recorded_oom"]["holders"].clone();
    let backward = holders
        .as_array()
        .expect("holders")
        .iter()
        .find(|h| {
            h["site"]
                .as_str()
                .is_some_and(|s| s.ends_with("trainer.py:66 in _backward"))
        })
        .expect("backward holds memory at the OOM");
    let (b_bytes, b_count) = (
        backward["bytes"].as_u64().expect("u64"),
        backward["count"].as_u64().expect("u64"),
    );
    let saved = base - changed;
    assert!(saved >= leak + b_bytes / 2, "{saved}");
    assert!(saved <= leak + b_bytes / 2 + b_count, "{saved}");
}

#[test]
fn a_site_that_matches_nothing_is_a_usage_error_naming_the_sites() {
    let f = demo_file();
    let o = vramscope(&["simulate", &f, "--drop", "nowhere.py:1", "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nowhere.py:1"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("trainer.py:66 in _backward"),
        "{}",
        stderr(&o)
    );
    let o = vramscope(&["simulate", &f, "--scale", "train.py:74", "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("SITE=FACTOR"), "{}", stderr(&o));
}

#[test]
fn files_the_model_does_not_describe_are_refused() {
    for p in [
        real("kineto_resnet50_v100_profile_memory.pt.trace.json.gz"),
        vramscope_testdata::recorded("cnn_sgd_cpu.pickle.gz"),
    ] {
        let o = vramscope(&["simulate", p.to_str().expect("utf-8"), "-q"]);
        assert_eq!(o.status.code(), Some(2), "{p:?}");
        assert!(stderr(&o).contains("CUDA"), "{}", stderr(&o));
    }
}
