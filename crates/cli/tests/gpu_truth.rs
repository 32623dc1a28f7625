//! The recordings from a real GPU (`tests/fixtures/gpu`, an H200 under
//! PyTorch 2.11) against what PyTorch itself measured in the same runs (the
//! `*.json` beside each): what vramscope reads and replays must agree with
//! the GPU, not with itself.

mod common;

use common::*;
use serde_json::Value;

fn truth(name: &str) -> Value {
    let p = vramscope_testdata::gpu(&format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("json")
}

fn json_of(args: &[&str]) -> Value {
    let o = vramscope(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("json output")
}

fn path(name: &str) -> String {
    vramscope_testdata::gpu(name)
        .to_str()
        .expect("utf-8")
        .to_owned()
}

#[test]
fn every_gpu_recording_reads_whole_with_no_repair() {
    for name in [
        "allstacks.pickle",
        "oom_frag_default.pickle",
        "oom_frag_expandable.pickle",
        "oom_frag_maxsplit64.pickle",
        "oom_gpt_default.pickle",
        "oom_gpt_expandable.pickle",
        "oom_gpt_half.pickle",
        "profiler_window.pickle",
        "settings_cap.pickle",
        "settings_default.pickle",
        "settings_expandable.pickle",
        "settings_gc.pickle",
        "settings_maxsplit64.pickle",
        "settings_rp4.pickle",
        "vramscope_record.pickle",
        "profiler_kineto.json",
        "profiler_timeline.raw.json",
    ] {
        let j = json_of(&["summary", "--json", "-q", &path(name)]);
        let src = &j["source"];
        assert_eq!(src["truncated"], false, "{name}");
        assert_eq!(
            src["repairs"].as_array().map_or(0, Vec::len),
            0,
            "{name}: {}",
            src["repairs"]
        );
        let events: u64 = j["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .map(|d| d["events"]["total"].as_u64().unwrap_or(0))
            .sum();
        assert!(events > 0, "{name}: no events");
    }
}

/// What the allocator model predicts for `settings_default` under `conf`,
/// against the run of the same program under `conf` on the GPU.
#[test]
fn replaying_the_default_run_predicts_each_settings_real_peak() {
    let runs = json_of(&[
        "simulate",
        "--json",
        "-q",
        &path("settings_default.pickle"),
        "--set",
        "expandable_segments:True",
        "--set",
        "max_split_size_mb:64",
        "--set",
        "roundup_power2_divisions:4",
    ]);
    let runs = runs["runs"].as_array().expect("runs");
    let by_label = |l: &str| {
        runs.iter()
            .find(|r| r["label"] == l)
            .unwrap_or_else(|| panic!("no run {l}"))
    };
    for (label, file) in [
        ("recorded", "settings_default"),
        ("expandable_segments:True", "settings_expandable"),
        ("max_split_size_mb:64", "settings_maxsplit64"),
        ("roundup_power2_divisions:4", "settings_rp4"),
    ] {
        let real = truth(file);
        let real_peak = real["stats"]["reserved_bytes.all.peak"]
            .as_f64()
            .expect("peak");
        let real_mallocs = real["stats"]["num_device_alloc"].as_i64().expect("mallocs");
        let r = by_label(label);
        let sim_peak = r["simulated_peak_reserved"].as_f64().expect("sim peak");
        let sim_mallocs = r["cuda_mallocs"].as_i64().expect("mallocs");
        let err = (sim_peak - real_peak).abs() / real_peak;
        // Today: exact under expandable segments; one 12 MiB segment short
        // (entry 1848 of the default run: PyTorch cudaMallocs where the
        // model serves from its cache) under the others, 0.18-0.38%.
        assert!(
            err < 0.005,
            "{label}: simulated {sim_peak}, real {real_peak} ({:.2}%)",
            err * 100.0
        );
        assert!(
            (sim_mallocs - real_mallocs).abs() <= 1,
            "{label}: {sim_mallocs} cudaMallocs, real {real_mallocs}"
        );
        if label.starts_with("expandable") {
            assert_eq!(
                sim_peak, real_peak,
                "expandable segments are modelled exactly"
            );
            assert_eq!(sim_mallocs, real_mallocs);
        }
    }
}
