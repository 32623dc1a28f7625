//! Memory Profiler timelines (`export_memory_timeline`, raw rows and plot
//! points) decode into device 0's trace with the profiler's category on
//! every entry, bytes per category exact at every row or point.

use serde_json::{json, Value};
use vramscope_snapshot::{decode_bytes, Action, Snapshot, SourceFormat, NO_TIME};

fn decode(doc: &Value) -> Snapshot {
    let bytes = serde_json::to_vec(doc).expect("json");
    decode_bytes(&bytes, &Default::default()).expect("decodes")
}

/// Bytes per category alive after each entry, replayed the way analyses do
/// (blocks freed without an alloc, or alive at the end without one, were
/// alive from the start).
fn per_category(s: &Snapshot) -> Vec<std::collections::BTreeMap<String, i64>> {
    use std::collections::{BTreeMap, HashSet};
    let t = s.trace(0).expect("device 0");
    let cats = t.category.as_ref().expect("category column");
    let mut cur: BTreeMap<String, i64> = BTreeMap::new();
    let allocated: HashSet<u64> = (0..t.len())
        .filter(|&i| t.action[i] == Action::Alloc)
        .map(|i| t.addr[i])
        .collect();
    for (i, &c) in cats.iter().enumerate() {
        if t.action[i] == Action::FreeCompleted && !allocated.contains(&t.addr[i]) {
            *cur.entry(s.str(c).into()).or_default() += t.size[i] as i64;
        }
    }
    for seg in &s.segments {
        for b in s.blocks_of(seg) {
            if b.state.is_allocated() && !allocated.contains(&b.address) {
                *cur.entry(s.str(b.category).into()).or_default() += b.size as i64;
            }
        }
    }
    (0..t.len())
        .map(|i| {
            let sign = if t.action[i] == Action::Alloc { 1 } else { -1 };
            *cur.entry(s.str(cats[i]).into()).or_default() += sign * t.size[i] as i64;
            cur.retain(|_, v| *v != 0);
            cur.clone()
        })
        .collect()
}

fn cats(pairs: &[(&str, i64)]) -> std::collections::BTreeMap<String, i64> {
    pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
}

#[test]
fn timeline_rows_keep_bytes_per_category_exact() {
    // PREEXISTING parameter; an activation created, its in-place update
    // turning it into `unknown` (category 7); a DESTROY whose size matches
    // no block (taken from the category's newest blocks); names accepted.
    let rows = json!([
        [-1, 1, 4096, 0],
        [2_000, 2, 1000, 4],
        [3_000, 2, 600, "ACTIVATION"],
        [4_000, 3, -1000, 4],
        [4_000, 3, 1000, 7],
        [5_000, "Action.DESTROY", -500, "Category.ACTIVATION"],
        [5_000, 3, -4096, 0],
        [5_000, 3, 4096, 0],
        [6_000, 4, -1000, null],
    ]);
    let s = decode(&rows);
    assert_eq!(s.source.format, SourceFormat::MemoryTimeline);
    let got = per_category(&s);
    let t = s.trace(0).expect("device 0");
    assert_eq!(
        got.last().cloned(),
        Some(cats(&[("activation", 100), ("parameter", 4096)])),
        "end"
    );
    // After the version change: the activation's bytes moved to unknown.
    let at = |us: i64| {
        got[(0..t.len())
            .rposition(|i| t.time_us[i] == us)
            .expect("time")]
        .clone()
    };
    assert_eq!(at(2), cats(&[("activation", 1000), ("parameter", 4096)]));
    assert_eq!(
        at(4),
        cats(&[("activation", 600), ("parameter", 4096), ("unknown", 1000)])
    );
    // No 500-byte activation: 500 bytes of the newest (600) one.
    assert_eq!(
        at(5),
        cats(&[("activation", 100), ("parameter", 4096), ("unknown", 1000)])
    );
    assert!(s
        .source
        .warnings
        .iter()
        .any(|w| w.starts_with("1 DESTROY rows found no live block")));
    // Same-category version changes write nothing; PREEXISTING has no entry.
    assert_eq!(t.time_us.iter().filter(|&&x| x == NO_TIME).count(), 0);
}

#[test]
fn timeline_plot_points_keep_bytes_per_category_exact() {
    // [times µs, [0, parameter, optimizer_state, input, temporary,
    //  activation, gradient, autograd_detail, unknown]]
    let sizes = [
        [0, 100, 0, 0, 0, 0, 0, 0, 0],
        [0, 100, 0, 10, 0, 50, 0, 0, 0],
        [0, 100, 0, 10, 0, 20, 100, 0, 0],
        [0, 100, 0, 0, 0, 0, 100, 0, 7],
    ];
    let s = decode(&json!([[1000, 1005, 1010, 1020], sizes]));
    assert_eq!(s.source.format, SourceFormat::MemoryTimelinePlot);
    assert_eq!(s.source.encoding_name(), "memory_timeline_plot");
    let got = per_category(&s);
    let t = s.trace(0).expect("device 0");
    let at = |us: i64| {
        got[(0..t.len())
            .rposition(|i| t.time_us[i] == us)
            .expect("time")]
        .clone()
    };
    assert_eq!(
        at(1005),
        cats(&[("activation", 50), ("input", 10), ("parameter", 100)])
    );
    assert_eq!(
        at(1010),
        cats(&[
            ("activation", 20),
            ("gradient", 100),
            ("input", 10),
            ("parameter", 100)
        ])
    );
    assert_eq!(
        at(1020),
        cats(&[("gradient", 100), ("parameter", 100), ("unknown", 7)])
    );
    // The first point's memory is alive from the start: no entry at 1000.
    assert!(!t.time_us.contains(&1000));
}

#[test]
fn a_list_of_lists_that_is_no_timeline_is_an_error_naming_the_row() {
    let e = decode_bytes(b"[[1, 2, 3, 4], [5, 2, 7]]", &Default::default()).expect_err("bad row");
    assert!(
        e.to_string().contains("row 1 has 3 values, expected 4"),
        "{e}"
    );
    let e = decode_bytes(b"[[1, 9, 3, 4]]", &Default::default()).expect_err("bad action");
    assert!(
        e.to_string().contains("row 0: the action is the int 9"),
        "{e}"
    );
}
