//! `diff`: blocks are matched by stack text and size (not by address or
//! stack id), as a multiset; identical inputs give an empty diff, on small
//! hand-built snapshots and on every real fixture.

use serde_json::{json, Value};
use vramscope_analysis::{diff, Diff, DiffOptions, LiveBlock, Liveness};
use vramscope_snapshot::{decode_bytes, DeviceTrace, LoadOptions, Snapshot};

fn frame(file: &str, line: u32, name: &str) -> Value {
    json!({"filename": file, "line": line, "name": name})
}

/// A stack: a library frame inside a user frame.
fn stack(user_line: u32, name: &str) -> Vec<Value> {
    vec![
        frame(
            "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
            125,
            "forward",
        ),
        frame("/home/u/train.py", user_line, name),
        frame("/home/u/train.py", 200, "<module>"),
    ]
}

/// A snapshot whose only segment holds `blocks` (size, stack), all
/// allocated, placed from `base` on; no trace.
fn snapshot(base: u64, blocks: &[(u64, Vec<Value>)]) -> Snapshot {
    let mut addr = base;
    let mut bs = Vec::new();
    for (size, frames) in blocks {
        bs.push(
            json!({"address": addr, "size": size, "requested_size": size,
                       "state": "active_allocated", "frames": frames}),
        );
        addr += size;
    }
    let total = addr - base;
    let doc = json!({
        "segments": [{"device": 0, "address": base, "total_size": total, "allocated_size": total,
                      "active_size": total, "requested_size": total, "stream": 0,
                      "segment_type": "large", "blocks": bs}],
        "device_traces": [[]]
    });
    decode_bytes(
        &serde_json::to_vec(&doc).expect("json"),
        &LoadOptions::default(),
    )
    .expect("decodes")
}

fn live(s: &Snapshot) -> Vec<LiveBlock> {
    let empty = DeviceTrace::default();
    let t = s.trace(0).unwrap_or(&empty);
    Liveness::new(s, 0).live_after(t, t.len().checked_sub(1))
}

fn run(a: &Snapshot, b: &Snapshot) -> Diff {
    diff(a, &live(a), b, &live(b), &DiffOptions::default())
}

fn assert_empty(d: &Diff, what: &str) {
    assert!(d.grown.is_empty(), "{what}: grown {:?}", d.grown);
    assert!(d.shrunk.is_empty(), "{what}: shrunk {:?}", d.shrunk);
    assert!(d.by_site.iter().all(|s| s.delta == 0), "{what}");
    assert_eq!(d.totals.delta, 0, "{what}");
    assert_eq!(d.totals.a_bytes, d.totals.b_bytes, "{what}");
    assert_eq!(d.totals.matched_blocks, d.totals.b_blocks, "{what}");
    assert_eq!(d.totals.grown_bytes + d.totals.shrunk_bytes, 0, "{what}");
    assert!(d.is_empty(), "{what}");
}

/// Matched plus unmatched is everything, on each side.
fn assert_consistent(d: &Diff) {
    let t = &d.totals;
    assert_eq!(t.matched_bytes + t.grown_bytes, t.b_bytes);
    assert_eq!(t.matched_bytes + t.shrunk_bytes, t.a_bytes);
    assert_eq!(t.matched_blocks + t.grown_blocks, t.b_blocks);
    assert_eq!(t.matched_blocks + t.shrunk_blocks, t.a_blocks);
    assert_eq!(t.delta, t.b_bytes as i64 - t.a_bytes as i64);
    for g in d.grown.iter().chain(&d.shrunk) {
        let listed: u64 = g.sizes.iter().map(|s| s.size * s.count).sum();
        assert!(listed <= g.bytes);
    }
}

#[test]
fn identical_blocks_at_other_addresses_and_stack_ids_match() {
    let a = snapshot(
        1 << 30,
        &[(1 << 20, stack(10, "f")), (4096, stack(20, "g"))],
    );
    // B interns another stack first, so the same stacks get other ids, and
    // its blocks lie elsewhere and in another order.
    let b0 = snapshot(
        5 << 30,
        &[(4096, stack(20, "g")), (1 << 20, stack(10, "f"))],
    );
    assert_ne!(live(&a)[0].addr, live(&b0)[0].addr);
    let d = run(&a, &b0);
    assert_empty(&d, "same blocks");
    assert_eq!(d.totals.a_blocks, 2);
    assert_eq!(d.by_site.len(), 2);
    assert_empty(&run(&a, &a), "itself");
}

#[test]
fn multiset_match_leaves_the_extra_blocks() {
    let mib = 1u64 << 20;
    let f = || stack(10, "f");
    let a = snapshot(
        1 << 30,
        &[
            (4 * mib, f()),
            (4 * mib, f()),
            (4 * mib, f()),
            (mib, stack(30, "h")),
        ],
    );
    let b = snapshot(
        3 << 30,
        &[
            (4 * mib, f()),
            (4 * mib, f()),
            (4 * mib, f()),
            (4 * mib, f()),
            (4 * mib, f()),
            // Same stack, other size: unmatched on both sides.
            (2 * mib, stack(30, "h")),
            (512, stack(40, "<script>alert(1)</script>")),
        ],
    );
    let d = run(&a, &b);
    assert_consistent(&d);
    assert_eq!(d.grown.len(), 3);
    let top = &d.grown[0];
    assert_eq!(top.site, "/home/u/train.py:10 in f");
    assert_eq!((top.bytes, top.count), (8 * mib, 2));
    assert_eq!(top.sizes.len(), 1);
    assert_eq!((top.sizes[0].size, top.sizes[0].count), (4 * mib, 2));
    assert_eq!(top.stack.len(), 3);
    assert_eq!(top.stack[1], top.site);
    assert_eq!(d.grown[1].site, "/home/u/train.py:30 in h");
    assert_eq!(d.grown[1].bytes, 2 * mib);
    // Names are data here; escaping is the renderers' job.
    assert_eq!(
        d.grown[2].site,
        "/home/u/train.py:40 in <script>alert(1)</script>"
    );
    assert_eq!(d.shrunk.len(), 1);
    assert_eq!((d.shrunk[0].bytes, d.shrunk[0].count), (mib, 1));
    assert_eq!(d.totals.matched_blocks, 3);
    assert_eq!(d.totals.grown_stacks, 3);
    // Per site, all blocks: f grew by 8 MiB, h by 1 MiB, the new site by 512 B.
    let by: Vec<(&str, i64)> = d
        .by_site
        .iter()
        .map(|s| (s.site.as_str(), s.delta))
        .collect();
    assert_eq!(
        by,
        vec![
            ("/home/u/train.py:10 in f", 8 * mib as i64),
            ("/home/u/train.py:30 in h", mib as i64),
            ("/home/u/train.py:40 in <script>alert(1)</script>", 512),
        ]
    );
    assert_eq!(d.by_site[0].a_bytes, 12 * mib);
    assert_eq!(d.by_site[0].b_bytes, 20 * mib);
    assert_eq!((d.by_site[0].a_blocks, d.by_site[0].b_blocks), (3, 5));

    // The other way round, grown and shrunk swap.
    let r = run(&b, &a);
    assert_consistent(&r);
    assert_eq!(r.shrunk.len(), 3);
    assert_eq!(r.shrunk[0].bytes, 8 * mib);
    assert_eq!(r.grown.len(), 1);
    assert_eq!(r.by_site[0].delta, -(8 * mib as i64));
}

#[test]
fn top_cuts_lists_but_not_totals() {
    let blocks: Vec<(u64, Vec<Value>)> = (0..30)
        .map(|i| (4096 * (i + 1), stack(100 + i as u32, "f")))
        .collect();
    let a = snapshot(1 << 30, &[]);
    let b = snapshot(1 << 30, &blocks);
    let opts = DiffOptions {
        top: 5,
        ..Default::default()
    };
    let d = diff(&a, &live(&a), &b, &live(&b), &opts);
    assert_consistent(&d);
    assert_eq!(d.grown.len(), 5);
    assert_eq!(d.by_site.len(), 5);
    assert_eq!(d.totals.grown_stacks, 30);
    assert_eq!(d.totals.sites, 30);
    assert_eq!(d.totals.grown_blocks, 30);
    assert_eq!(d.grown[0].bytes, 4096 * 30);
    assert!(d.grown.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    assert_eq!(DiffOptions::default().top, 20);
}

#[test]
fn blocks_without_stacks_match_each_other() {
    let a = snapshot(1 << 30, &[(8192, vec![]), (8192, stack(1, "f"))]);
    let b = snapshot(2 << 30, &[(8192, vec![]), (8192, vec![])]);
    let d = run(&a, &b);
    assert_consistent(&d);
    assert_eq!(d.grown.len(), 1);
    assert_eq!(d.grown[0].site, "<no stack recorded>");
    assert!(d.grown[0].stack.is_empty());
    assert_eq!(d.grown[0].count, 1);
    assert_eq!(d.shrunk[0].site, "/home/u/train.py:1 in f");
}

#[test]
fn every_real_snapshot_against_itself_is_empty() {
    let files = vramscope_testdata::real_snapshots();
    assert!(!files.is_empty(), "no .pickle fixtures");
    for path in &files {
        let name = path.display().to_string();
        let s = vramscope_snapshot::load(path, &LoadOptions::default()).expect("loads");
        // A second copy: stack ids are equal here, but nothing may depend on it.
        let s2 = vramscope_snapshot::load(path, &LoadOptions::default()).expect("loads");
        for device in s.devices() {
            let empty = DeviceTrace::default();
            let t = s.trace(device).unwrap_or(&empty);
            let liveness = Liveness::new(&s, device);
            let points = [liveness.peak_index, t.len().checked_sub(1), None];
            let sets = liveness.live_at_points(t, &points);
            for (set, what) in sets.iter().zip(["peak", "end", "start"]) {
                let d = diff(&s, set, &s2, set, &DiffOptions::default());
                assert_empty(&d, &format!("{name} device {device} at {what}"));
                let bytes: u64 = set.iter().map(|b| b.size).sum();
                assert_eq!(d.totals.a_bytes, bytes);
            }
            assert_eq!(
                sets[0].iter().map(|b| b.size).sum::<u64>(),
                liveness.peak_bytes,
                "{name}: the peak's live set"
            );
            // Peak against end is consistent, whatever it finds.
            let d = diff(&s, &sets[0], &s, &sets[1], &DiffOptions::default());
            assert_consistent(&d);
        }
    }
}
