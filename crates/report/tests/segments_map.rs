//! The segment map: totals identical to `memory_state` on every real
//! snapshot, reconstruction at earlier moments (exact against the dump at
//! the last event, and against the summary's peak), a golden text map, the
//! folding of identical segments, and the JSON form.
//!
//! `VRAMSCOPE_BLESS=1 cargo test` rewrites the golden files.

use std::path::PathBuf;

use serde_json::{json, Value};
use vramscope_analysis::liveness::reserved_after;
use vramscope_analysis::moment::{resolve, Moment};
use vramscope_analysis::segments_map::{at_end, at_moment, reconstruct, SegmentsMap};
use vramscope_analysis::{memory_state, summarize, Liveness, SummaryOptions};
use vramscope_report::{segments_json, segments_text, MapOptions};
use vramscope_snapshot::{decode_bytes, DeviceTrace, LoadOptions, Snapshot};

const MIB: u64 = 1 << 20;

fn decode(doc: Value) -> Snapshot {
    decode_bytes(
        &serde_json::to_vec(&doc).expect("json"),
        &LoadOptions::default(),
    )
    .expect("decodes")
}

fn seg(addr: u64, size: u64, kind: &str, blocks: Value) -> Value {
    json!({"device": 0, "address": addr, "total_size": size, "allocated_size": 0, "active_size": 0,
           "requested_size": 0, "stream": 0, "segment_type": kind, "blocks": blocks})
}

fn blk(addr: u64, size: u64, req: u64, state: &str) -> Value {
    json!({"address": addr, "size": size, "requested_size": req, "state": state})
}

/// Two segments: a large one with every state, and a small one.
fn golden_snapshot() -> Snapshot {
    let a = 0x7f00_0000_0000u64;
    let b = a + 0x0400_0000;
    decode(json!({"segments": [
        seg(b, 2 * MIB, "small", json!([blk(b, 512 * 1024, 512 * 1024, "active_allocated"),
                                         blk(b + 512 * 1024, 1536 * 1024, 0, "inactive")])),
        seg(a, 20 * MIB, "large", json!([
            blk(a, 8 * MIB, 8 * MIB, "active_allocated"),
            blk(a + 8 * MIB, 4 * MIB, MIB, "active_allocated"),
            blk(a + 12 * MIB, 2 * MIB, 2 * MIB, "active_pending_free"),
            blk(a + 14 * MIB, 6 * MIB, 0, "inactive")])),
    ], "device_traces": [[]]}))
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("VRAMSCOPE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, actual).expect("bless");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (VRAMSCOPE_BLESS=1 writes it)", path.display()));
    assert_eq!(
        expected,
        actual,
        "{} differs (VRAMSCOPE_BLESS=1 rewrites it)",
        path.display()
    );
}

#[test]
fn golden_text_map() {
    let snap = golden_snapshot();
    let map = at_end(&snap, 0);
    let opts = MapOptions {
        width: 40,
        ..MapOptions::default()
    };
    let text = segments_text(&map, "golden.json", &opts);
    golden("segments.txt", &text);
    assert!(!text.contains('\x1b'), "no colour unless asked");
    // 8 MiB allocated, 1 MiB requested + 3 MiB rounding, 2 MiB pending, 6 MiB free: 2 cells per MiB.
    let large = text
        .lines()
        .find(|l| l.contains("0x7f0000000000"))
        .expect("large line");
    assert!(large.contains(&format!(
        "{}{}{}{}{}",
        "█".repeat(18),
        "▒".repeat(6),
        "▓".repeat(4),
        "░".repeat(12),
        " "
    )));
    let coloured = segments_text(
        &map,
        "golden.json",
        &MapOptions {
            color: true,
            ..opts
        },
    );
    assert!(coloured.contains("\x1b[32m█"));
    // Sorted by address although the dump listed the small segment first.
    assert!(map.segments[0].address < map.segments[1].address);
    let t = &map.totals;
    assert_eq!(
        (t.reserved_bytes, t.allocated_bytes, t.pending_free_bytes),
        (22 * MIB, 12 * MIB + 512 * 1024, 2 * MIB)
    );
    assert_eq!(
        (
            t.cached_free_bytes,
            t.largest_free_block,
            t.rounding_waste_bytes
        ),
        (7 * MIB + 512 * 1024, 6 * MIB, 3 * MIB)
    );
}

#[test]
fn identical_segments_share_a_line_when_there_are_many() {
    let segs: Vec<Value> = (0..60u64)
        .map(|i| {
            let a = (1u64 << 40) + i * 2 * MIB;
            seg(a, 2 * MIB, "small", json!([blk(a, 2 * MIB, 0, "inactive")]))
        })
        .chain([seg(
            1 << 41,
            20 * MIB,
            "large",
            json!([blk(1 << 41, 20 * MIB, 20 * MIB, "active_allocated")]),
        )])
        .collect();
    let snap = decode(json!({"segments": segs}));
    let map = at_end(&snap, 0);
    let text = segments_text(&map, "many", &MapOptions::default());
    assert!(text.contains("×60 identical"), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains(" small ")).count(), 1);
    let all = segments_text(
        &map,
        "many",
        &MapOptions {
            group_above: usize::MAX,
            ..MapOptions::default()
        },
    );
    assert_eq!(all.lines().filter(|l| l.contains(" small ")).count(), 60);
}

#[test]
fn json_lists_segments_with_their_blocks() {
    let map = at_end(&golden_snapshot(), 0);
    let v: Value = serde_json::from_str(&segments_json(&map)).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["reconstructed"], false);
    assert_eq!(v["segments"][0]["type"], "large");
    assert_eq!(
        v["segments"][0]["blocks"][2]["state"],
        "active_pending_free"
    );
    assert_eq!(v["segments"][1]["blocks"][0]["size"], 512 * 1024);
    assert_eq!(v["totals"]["largest_free_block"], 6 * MIB);
    assert_eq!(
        segments_json(&map),
        segments_json(&at_end(&golden_snapshot(), 0)),
        "stable"
    );
}

/// A window that creates, frees, maps and unmaps segments.
#[test]
fn reconstruction_undoes_segment_events() {
    let a = 1u64 << 40;
    let e = 2u64 << 40;
    let ev = |action: &str, addr: u64, size: u64| json!({"action": action, "addr": addr, "size": size, "stream": 0});
    let snap = decode(json!({
        "segments": [
            seg(a, 20 * MIB, "large", json!([blk(a, 4 * MIB, 4 * MIB, "active_allocated"), blk(a + 4 * MIB, 16 * MIB, 0, "inactive")])),
            {"device": 0, "address": e, "total_size": 4 * MIB, "stream": 0, "segment_type": "large", "is_expandable": true,
             "blocks": [blk(e, 4 * MIB, 0, "inactive")]},
        ],
        "device_traces": [[
            ev("segment_alloc", a, 20 * MIB),            // 0
            ev("alloc", a, 4 * MIB),                     // 1
            ev("segment_alloc", 3 << 40, 2 * MIB),       // 2
            ev("alloc", 3 << 40, 512),                   // 3
            ev("segment_map", e, 2 * MIB),               // 4
            ev("segment_map", e + 2 * MIB, 6 * MIB),     // 5
            ev("alloc", e + 2 * MIB, 6 * MIB),           // 6
            ev("free_requested", e + 2 * MIB, 6 * MIB),  // 7
            ev("free_requested", 3 << 40, 512),          // 8
            ev("free_completed", 3 << 40, 512),          // 9
            ev("segment_free", 3 << 40, 2 * MIB),        // 10
            ev("free_completed", e + 2 * MIB, 6 * MIB),  // 11
            ev("segment_unmap", e + 4 * MIB, 4 * MIB),   // 12
        ]]
    }));
    let liveness = Liveness::new(&snap, 0);
    let at = |i: Option<usize>| reconstruct(&snap, 0, &liveness, i);
    let shape = |m: &SegmentsMap| -> Vec<(u64, u64, &'static str, bool)> {
        m.segments
            .iter()
            .map(|s| (s.address, s.size, s.segment_type, s.expandable))
            .collect()
    };
    assert!(at(None).segments.is_empty());
    assert_eq!(
        shape(&at(Some(2))),
        [
            (a, 20 * MIB, "large", false),
            (3 << 40, 2 * MIB, "small", false)
        ]
    );
    // Both mapped pieces of the expandable segment form one segment.
    let m7 = at(Some(7));
    assert_eq!(shape(&m7)[1], (e, 8 * MIB, "large", true));
    let pending = &m7.segments[1].blocks[1];
    assert_eq!(
        (pending.address, pending.size, pending.state),
        (e + 2 * MIB, 6 * MIB, "active_pending_free")
    );
    assert_eq!(m7.segments[1].blocks[0].state, "inactive");
    assert_eq!(
        (m7.totals.allocated_bytes, m7.totals.pending_free_bytes),
        (4 * MIB + 512, 6 * MIB)
    );
    assert_eq!(m7.totals.reserved_bytes, 30 * MIB);
    let m11 = at(Some(11));
    assert_eq!(
        shape(&m11),
        [(a, 20 * MIB, "large", false), (e, 8 * MIB, "large", true)]
    );
    assert_eq!(m11.totals.largest_free_block, 16 * MIB);
    // At the last event the reconstruction is the dump.
    assert_eq!(at(Some(12)).totals, at_end(&snap, 0).totals);
    assert!(at(Some(12)).reconstructed);
    let end = resolve(Moment::End, snap.trace(0).expect("trace"), &liveness).expect("end");
    assert!(!at_moment(&snap, 0, &liveness, &end).reconstructed);
}

#[test]
fn real_snapshots_match_memory_state_and_the_peak() {
    let files = vramscope_testdata::real_snapshots();
    assert!(files.len() >= 7, "expected the 7 real snapshots");
    for f in &files {
        let name = f.display().to_string();
        let snap = vramscope_snapshot::load(f, &LoadOptions::default()).expect("loads");
        let m = memory_state(&snap, 0);
        let map = at_end(&snap, 0);
        let t = &map.totals;
        let fr = &m.fragmentation;
        assert_eq!(t.reserved_bytes, m.reserved_bytes, "{name}: reserved");
        assert_eq!(t.allocated_bytes, m.allocated_bytes, "{name}: allocated");
        assert_eq!(
            t.cached_free_bytes, fr.cached_free_bytes,
            "{name}: cached free"
        );
        assert_eq!(
            t.largest_free_block, fr.largest_free_block,
            "{name}: largest free"
        );
        assert_eq!(t.free_blocks, fr.free_blocks, "{name}: free blocks");
        assert_eq!(
            t.pending_free_bytes, fr.pending_free_bytes,
            "{name}: pending"
        );
        assert_eq!(
            t.rounding_waste_bytes, fr.rounding_waste_bytes,
            "{name}: waste"
        );
        assert_eq!(
            t.fragmentation_ratio, fr.fragmentation_ratio,
            "{name}: ratio"
        );
        assert_eq!(t.segments, m.segments.total, "{name}: segments");
        let text = segments_text(&map, &name, &MapOptions::default());
        assert!(text.contains("Largest free block"), "{name}");

        let empty = DeviceTrace::default();
        let tr = snap.trace(0).unwrap_or(&empty);
        let liveness = Liveness::new(&snap, 0);
        if let Some(last) = tr.len().checked_sub(1) {
            let r = reconstruct(&snap, 0, &liveness, Some(last));
            assert_eq!(r.unplaced_blocks, 0, "{name}: unplaced at the end");
            assert_eq!(
                r.totals.reserved_bytes, t.reserved_bytes,
                "{name}: reserved at the last event"
            );
            assert_eq!(
                r.totals.allocated_bytes, t.allocated_bytes,
                "{name}: allocated at the last event"
            );
            assert_eq!(
                r.totals.cached_free_bytes, t.cached_free_bytes,
                "{name}: free at the last event"
            );
            assert_eq!(
                r.totals.largest_free_block, t.largest_free_block,
                "{name}: largest at the last event"
            );
        }
        let s = summarize(
            &snap,
            &SummaryOptions {
                device: Some(0),
                top_sites: 1,
                ..SummaryOptions::default()
            },
        );
        let peak = reconstruct(&snap, 0, &liveness, liveness.peak_index);
        let pt = &peak.totals;
        assert_eq!(peak.unplaced_blocks, 0, "{name}: unplaced at the peak");
        // Traces record requested sizes, as the summary's peak counts them.
        let requested: u64 = peak
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state != "inactive")
            .map(|b| b.requested_size)
            .sum();
        assert_eq!(requested, s.devices[0].peak.allocated_bytes, "{name}: peak");
        let reserved = liveness
            .peak_index
            .and_then(|i| reserved_after(&snap, 0).get(i).copied())
            .unwrap_or(pt.reserved_bytes);
        assert_eq!(pt.reserved_bytes, reserved, "{name}: reserved at the peak");
        assert_eq!(
            pt.reserved_bytes,
            pt.allocated_bytes + pt.pending_free_bytes + pt.cached_free_bytes,
            "{name}"
        );
    }
}
