//! A snapshot built by PyTorch itself from profiler data on the CPU
//! (`torch.cuda._memory_viz._profile_to_snapshot`): frames carry the whole
//! location in `name`, events carry a Memory Profiler `category`. Needs
//! `python3` with torch (scripts/test.sh puts the project's venv first on
//! PATH); skipped elsewhere, a failure in CI.

mod common;

use common::*;

const SCRIPT: &str = r#"
import pickle, sys, torch
from torch.profiler import profile, ProfilerActivity
from torch.cuda._memory_viz import _profile_to_snapshot

def build():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

torch.manual_seed(0)
model = build()
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
    for _ in range(3):
        train_step(model, opt, x, y)
pickle.dump(_profile_to_snapshot(prof), open(sys.argv[1], "wb"))
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

#[test]
fn profiler_built_snapshot_with_categories() {
    if !torch_available() {
        eprintln!("skipping: python3 cannot import torch");
        return;
    }
    let d = temp_dir("profiler");
    let path = d.join("prof.pickle");
    python(SCRIPT, &[path.to_str().expect("utf-8")]).expect("python3 runs");
    let j = summary_json(&path);
    let dev = &j["devices"][0];
    assert!(
        dev["events"]["by_action"]["alloc"].as_u64().unwrap_or(0) > 50,
        "{}",
        dev["events"]
    );
    let peak = dev["peak"]["allocated_bytes"].as_u64().unwrap_or(0);
    assert!(peak > 0);
    // AdamW state, parameters, gradients and activations all appear.
    let cats: Vec<&str> = dev["peak"]["by_category"]
        .as_array()
        .expect("categories")
        .iter()
        .filter_map(|c| c["category"].as_str())
        .collect();
    for want in ["parameter", "gradient", "optimizer_state"] {
        assert!(cats.contains(&want), "{want} missing from {cats:?}");
    }
    let by_cat: u64 = dev["peak"]["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        by_cat, peak,
        "categories account for every byte at the peak"
    );
    // The location packed into the frame name is split back into file and line.
    let sites = dev["peak"]["top_sites"].as_array().expect("sites");
    assert!(
        sites
            .iter()
            .any(|s| s["file"].as_str().is_some_and(|f| f.ends_with(".py"))
                && s["line"].as_u64().unwrap_or(0) > 0),
        "{sites:?}"
    );
}
