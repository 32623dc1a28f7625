//! Helpers shared by the CLI tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .expect("run vramscope")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[allow(unused_imports)] // (not every test binary uses both)
pub use vramscope_testdata::{temp_dir, TestDir};

/// A fresh directory shared by the tests of one binary (made once, behind a
/// `OnceLock`), in Cargo's temporary directory for tests under `target/`:
/// nothing drops it, so it is remade there by the next run rather than left
/// in the system's temporary directory.
pub fn shared_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vramscope-test-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create shared test dir");
    d
}

/// Run a Python snippet with `python3`; `None` when Python is unavailable.
pub fn python(script: &str, args: &[&str]) -> Option<Output> {
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .ok()?;
    assert!(
        o.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(o)
}

pub fn summary_json(path: &std::path::Path) -> serde_json::Value {
    let o = vramscope(&["summary", "--json", path.to_str().expect("utf-8 path")]);
    assert!(
        o.status.success(),
        "summary failed for {}: {}",
        path.display(),
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).expect("summary --json is JSON")
}
