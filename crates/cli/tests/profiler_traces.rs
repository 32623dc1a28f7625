//! Profiler traces and memory timelines are read by every command like
//! snapshots: the real Kineto traces and the Memory Profiler timeline of
//! tests/fixtures/real, with figures checked against the files themselves.

mod common;

use common::*;
use serde_json::Value;
use vramscope_testdata::{real, real_bytes};

const FILES: [&str; 3] = [
    "hta_df_index_resolver_kineto_trace.json.gz",
    "kineto_resnet50_v100_profile_memory.pt.trace.json.gz",
    "hta_memory_timeline.raw.gz",
];

fn path(name: &str) -> String {
    real(name).to_str().expect("utf-8 path").to_owned()
}

fn ok(args: &[&str]) -> String {
    let o = vramscope(args);
    assert!(o.status.success(), "{args:?} failed: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn every_command_reads_the_profiler_outputs() {
    let dir = temp_dir("profiler-traces");
    for name in FILES {
        let p = path(name);
        let text = ok(&["summary", &p]);
        assert!(text.contains("Peak allocated"), "{name}: {text}");
        let html = dir.join(format!("{name}.html"));
        ok(&["report", &p, "-o", html.to_str().expect("utf-8"), "-q"]);
        let len = std::fs::metadata(&html).map(|m| m.len()).unwrap_or(0);
        assert!(len > 10_000, "{name}: report of {len} bytes");
        ok(&["leaks", &p, "-q"]);
        ok(&["check", "--max-peak", "100GiB", &p, "-q"]);
        ok(&["diff", &p, &p, "-q"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn trace_json(name: &str) -> Value {
    serde_json::from_slice(&real_bytes(name)).expect("fixture is JSON")
}

#[test]
fn kineto_trace_summary_is_the_traces_own_figures() {
    let name = FILES[0];
    let trace = trace_json(name);
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut cuda: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "[memory]" && e["args"]["Device Type"] == 1)
        .collect();
    cuda.sort_by_key(|e| e["ts"].as_i64());
    let total = |e: &Value, k: &str| e["args"][k].as_u64().expect("total");
    let peak = cuda.iter().map(|e| total(e, "Total Allocated")).max();
    let last = cuda.last().expect("events");

    let j = summary_json(&real(name));
    assert!(
        j["source"]["warnings"][0].as_str().is_some_and(
            |w| w.starts_with("read as a PyTorch profiler trace: 26770 [memory] events")
        ),
        "{}",
        j["source"]["warnings"]
    );
    let d = &j["devices"][0];
    assert_eq!(d["device"], 1);
    assert_eq!(d["peak"]["allocated_bytes"].as_u64(), peak);
    assert_eq!(d["peak"]["allocated_bytes"].as_u64(), Some(6_629_508_096));
    assert_eq!(
        d["end"]["allocated_bytes"].as_u64(),
        Some(total(last, "Total Allocated"))
    );
    assert_eq!(
        d["end"]["reserved_bytes"].as_u64(),
        Some(total(last, "Total Reserved"))
    );
    assert_eq!(
        d["peak"]["before_window_bytes"].as_u64(),
        Some(4_096_614_400)
    );
    // Sites are the operators the allocations happened in.
    let sites: Vec<&str> = d["peak"]["top_sites"]
        .as_array()
        .expect("sites")
        .iter()
        .filter_map(|s| s["site"].as_str())
        .collect();
    assert!(sites.contains(&"aten::mm (C++)"), "{sites:?}");
    // Operators that only make memory give way to the one that asked for it.
    assert!(
        !sites.iter().any(|s| s.starts_with("aten::empty")),
        "{sites:?}"
    );
    assert!(events
        .iter()
        .any(|e| e["cat"] == "cpu_op" && e["name"] == "aten::mm"));
    // Iterations come from the ProfilerStep spans.
    assert_eq!(j["annotations"]["ProfilerStep#2"], 1);
}

#[test]
fn old_trace_sites_come_from_the_operators_call_stacks() {
    let j = summary_json(&real(FILES[1]));
    let d = &j["devices"][0];
    assert_eq!(d["peak"]["allocated_bytes"].as_u64(), Some(2_791_636_480));
    assert_eq!(
        d["peak"]["top_sites"][0]["site"].as_str(),
        Some("resnet50_profiler_api.py:46 in <module>")
    );
}

#[test]
fn memory_timeline_summary_shows_the_profilers_categories() {
    let rows = trace_json(FILES[2]);
    let rows = rows.as_array().expect("rows");
    let (mut cur, mut peak) = (0i64, 0i64);
    for r in rows {
        cur += r[2].as_i64().expect("bytes");
        peak = peak.max(cur);
    }
    let j = summary_json(&real(FILES[2]));
    let d = &j["devices"][0];
    assert_eq!(d["peak"]["allocated_bytes"].as_i64(), Some(peak));
    assert_eq!(d["end"]["allocated_bytes"].as_i64(), Some(cur));
    let by_cat = d["peak"]["by_category"].as_array().expect("categories");
    assert_eq!(by_cat[0]["category"], "activation");
    assert!(
        by_cat.iter().all(|c| c["source"] == "profiler"),
        "{by_cat:?}"
    );
    let sum: i64 = by_cat.iter().filter_map(|c| c["bytes"].as_i64()).sum();
    assert_eq!(sum, peak);
}

/// Records a small training loop on the CPU with this machine's torch and
/// writes its trace and both timeline forms, with the figures the test
/// expects computed by Python from the files and torch's own category order.
const RECORD: &str = r#"
import gzip, json, sys, warnings
import torch
from torch.profiler import profile, ProfilerActivity
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX
warnings.simplefilter("ignore")
out = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
             with_stack=True) as prof:
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
prof.export_chrome_trace(out + "/trace.json")
prof.export_memory_timeline(out + "/timeline.json", device="cpu")
prof.export_memory_timeline(out + "/timeline.raw.json.gz", device="cpu")

names = [None] * len(_CATEGORY_TO_INDEX)
for c, i in _CATEGORY_TO_INDEX.items():
    names[i] = "unknown" if c is None else c.name.lower()
def by_name(sizes):
    return {names[i]: b for i, b in enumerate(sizes[1:]) if b}
times, sizes = json.load(open(out + "/timeline.json"))
peak = max(range(len(sizes)), key=lambda k: (sum(sizes[k]), -k))
mem = [e for e in json.load(open(out + "/trace.json"))["traceEvents"] if e.get("name") == "[memory]"]
mem.sort(key=lambda e: e["ts"])
py = sorted({e["name"] for e in json.load(open(out + "/trace.json"))["traceEvents"]
             if e.get("cat") == "python_function"})
rows = json.load(gzip.open(out + "/timeline.raw.json.gz"))
cur, states = [0] * (len(names) + 1), []
for t, action, b, c in rows:
    cur[c + 1] += b
    states.append(list(cur))
raw_peak = max(range(len(states)), key=lambda k: (sum(states[k]), -k))
json.dump({
    "raw_peak": by_name(states[raw_peak]),
    "raw_end": by_name(states[-1]),
    "trace_peak": max(e["args"]["Total Allocated"] for e in mem),
    "trace_end": mem[-1]["args"]["Total Allocated"],
    "python_functions": py,
    "plot_peak": by_name(sizes[peak]),
    "plot_end": by_name(sizes[-1]),
}, open(out + "/expected.json", "w"))
"#;

fn torch_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && std::env::var_os("CI").is_some() {
        panic!("torch is not importable by python3 in CI (scripts/test.sh installs it in .venv)");
    }
    ok
}

fn categories(v: &Value) -> serde_json::Map<String, Value> {
    v.as_array()
        .expect("by_category")
        .iter()
        .map(|c| {
            let name = c["category"].as_str().expect("name").to_owned();
            (name, c["bytes"].clone())
        })
        .collect()
}

#[test]
fn this_torchs_trace_and_timelines_read_as_recorded() {
    if !torch_available() {
        eprintln!("skipping: python3 cannot import torch");
        return;
    }
    let d = temp_dir("profiler-torch");
    python(RECORD, &[d.to_str().expect("utf-8")]).expect("python3 runs");
    let want: Value =
        serde_json::from_slice(&std::fs::read(d.join("expected.json")).expect("read"))
            .expect("expected.json");

    // The trace: CPU memory only (device 0), times relative to
    // baseTimeNanoseconds, Python spans around every allocation.
    let j = summary_json(&d.join("trace.json"));
    let dev = &j["devices"][0];
    assert_eq!(dev["peak"]["allocated_bytes"], want["trace_peak"]);
    assert_eq!(dev["end"]["allocated_bytes"], want["trace_end"]);
    let py: Vec<&str> = want["python_functions"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let site = &dev["peak"]["top_sites"][0];
    let (file, line, func) = (
        site["file"].as_str().expect("file"),
        site["line"].as_u64().expect("line"),
        site["function"].as_str().expect("function"),
    );
    let spelled = format!("{file}({line}): {func}");
    assert!(
        py.contains(&spelled.as_str()),
        "{spelled} is not a python_function of the trace"
    );

    // Both timeline forms: bytes per category at the peak and the end are
    // the profiler's.
    for (name, form) in [("timeline.json", "plot"), ("timeline.raw.json.gz", "raw")] {
        let j = summary_json(&d.join(name));
        let dev = &j["devices"][0];
        let peak = categories(&dev["peak"]["by_category"]);
        let end = categories(&dev["end_by_category"]);
        assert_eq!(
            Value::Object(peak),
            want[format!("{form}_peak")],
            "{name} at the peak"
        );
        assert_eq!(
            Value::Object(end),
            want[format!("{form}_end")],
            "{name} at the end"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
