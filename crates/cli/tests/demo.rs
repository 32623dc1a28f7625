//! `vramscope demo` (the README's first command): writes the example and the
//! report, and explains the planted leak and the OOM.

mod common;

use common::*;

#[test]
fn demo_writes_the_example_and_names_the_leak() {
    let d = temp_dir("demo");
    let out = d.join("out");
    let o = vramscope(&["demo", "--out-dir", out.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.join("demo_snapshot.pickle").exists());
    let html = std::fs::read_to_string(out.join("demo_report.html")).expect("report written");
    assert!(html.len() > 10_000);
    assert!(text.contains("OUT OF MEMORY"), "{text}");
    let leak = text
        .lines()
        .find(|l| l.starts_with("LEAK"))
        .unwrap_or_else(|| panic!("no LEAK line in: {text}"));
    assert!(
        leak.contains("train.py:74 in accumulate_history")
            && leak.contains("64.00 MiB per iteration"),
        "{leak}"
    );
    assert!(text.contains("Next: vramscope leaks"), "{text}");
}
