//! Snapshot variants from the format guide, built as small JSON documents
//! (the decoder treats JSON and pickle the same): expandable segments,
//! several devices, entries without time_us, profiler categories, OOMs, and
//! a trace window that starts after blocks were allocated.

use serde_json::json;
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::{decode_bytes, Action, LoadOptions};

fn summary_of(v: serde_json::Value) -> (vramscope_snapshot::Snapshot, vramscope_analysis::Summary) {
    let bytes = serde_json::to_vec(&v).expect("json");
    let snap = decode_bytes(&bytes, &LoadOptions::default()).expect("decodes");
    let s = summarize(&snap, &SummaryOptions::default());
    (snap, s)
}

fn frame(file: &str, line: u32, name: &str) -> serde_json::Value {
    json!({"filename": file, "line": line, "name": name})
}

#[test]
fn expandable_segments_and_multiple_devices() {
    let user = [
        frame(
            "/usr/lib/python3/site-packages/torch/nn/modules/linear.py",
            125,
            "forward",
        ),
        frame("/home/u/train.py", 40, "step"),
    ];
    let (snap, s) = summary_of(json!({
        "segments": [
            {"device": 0, "address": 1u64 << 40, "total_size": 64 << 20, "allocated_size": 8 << 20, "active_size": 8 << 20,
             "requested_size": 8 << 20, "stream": 0, "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": true,
             "blocks": [
                {"address": 1u64 << 40, "size": 8 << 20, "requested_size": 8 << 20, "state": "active_allocated", "frames": user},
                {"address": (1u64 << 40) + (8 << 20), "size": 56 << 20, "requested_size": 0, "state": "inactive"}]},
            {"device": 1, "address": 2u64 << 40, "total_size": 2 << 20, "allocated_size": 0, "active_size": 0,
             "requested_size": 0, "stream": 0, "segment_type": "small", "blocks": []}
        ],
        "device_traces": [
            [
                {"action": "segment_map", "addr": 1u64 << 40, "size": 32 << 20, "stream": 0, "frames": user},
                {"action": "alloc", "addr": 1u64 << 40, "size": 8 << 20, "stream": 0, "frames": user},
                {"action": "segment_map", "addr": (1u64 << 40) + (32 << 20), "size": 32 << 20, "stream": 0},
                {"action": "alloc", "addr": (1u64 << 40) + (8 << 20), "size": 40 << 20, "stream": 0, "frames": user},
                {"action": "free_requested", "addr": (1u64 << 40) + (8 << 20), "size": 40 << 20, "stream": 0},
                {"action": "free_completed", "addr": (1u64 << 40) + (8 << 20), "size": 40 << 20, "stream": 0}
            ],
            [{"action": "segment_alloc", "addr": 2u64 << 40, "size": 2 << 20, "stream": 0}]
        ]
    }));
    assert_eq!(snap.devices(), vec![0, 1]);
    let d0 = &s.devices[0];
    assert_eq!(d0.end.segments.expandable, 1);
    assert_eq!(d0.peak.allocated_bytes, 48 << 20);
    assert_eq!(d0.peak.event_index, Some(3));
    assert_eq!(d0.peak.time_us, None, "no time_us recorded");
    assert_eq!(d0.events.first_time_us, None);
    // Reserved grows through the two maps: 32 MiB, then 64 MiB.
    assert_eq!(d0.peak_reserved_bytes, 64 << 20);
    assert_eq!(d0.peak.top_sites[0].site, "/home/u/train.py:40 in step");
    assert_eq!(d0.peak.top_sites[0].bytes, 48 << 20);
    let d1 = &s.devices[1];
    assert_eq!(d1.end.reserved_bytes, 2 << 20);
    assert_eq!(d1.events.by_action.get("segment_alloc"), Some(&1));
}

#[test]
fn window_oom_and_categories() {
    let f = [frame("none", 0, "/home/u/model.py(12): forward")];
    let (snap, s) = summary_of(json!({
        "segments": [{"device": 0, "address": 4096, "total_size": 20 << 20, "allocated_size": 3 << 20,
            "active_size": 3 << 20, "requested_size": 3 << 20, "stream": 0, "segment_type": "large",
            "blocks": [
                {"address": 4096, "size": 2 << 20, "requested_size": 2 << 20, "state": "active_allocated", "frames": f},
                {"address": 4096 + (2 << 20), "size": 1 << 20, "requested_size": 1 << 20, "state": "active_allocated"},
                {"address": 4096 + (3 << 20), "size": 17 << 20, "requested_size": 0, "state": "inactive"}]}],
        "device_traces": [[
            // Freed in the window, allocated before it: counts from the start.
            {"action": "free_completed", "addr": 1 << 30, "size": 5 << 20, "stream": 0, "time_us": 100, "category": "activation"},
            {"action": "alloc", "addr": 4096 + (2 << 20), "size": 1 << 20, "stream": 0, "time_us": 200, "category": "parameter", "frames": f},
            {"action": "oom", "size": 1 << 30, "device_free": 123456, "stream": 0, "time_us": 300}
        ]]
    }));
    let t = snap.trace(0).expect("trace");
    assert_eq!(
        t.action,
        vec![Action::FreeCompleted, Action::Alloc, Action::Oom]
    );
    let cats: Vec<&str> = t
        .category
        .as_ref()
        .expect("categories")
        .iter()
        .map(|&c| snap.str(c))
        .collect();
    assert_eq!(cats, ["activation", "parameter", ""]);
    let d = &s.devices[0];
    // Before the window: the 5 MiB block freed at event 0 and the 2 MiB block alive at the end.
    assert_eq!(d.peak.before_window_bytes, 7 << 20);
    assert_eq!(d.peak.allocated_bytes, 7 << 20);
    assert_eq!(d.peak.event_index, None);
    assert_eq!(d.ooms.len(), 1);
    let oom = &d.ooms[0];
    assert_eq!(oom.requested_bytes, 1 << 30);
    assert_eq!(oom.device_free_bytes, Some(123456));
    assert_eq!(oom.allocated_bytes, 3 << 20);
    assert_eq!(oom.time_us, Some(300));
    // Profiler-built frames keep the location in the name; the site splits it.
    assert_eq!(oom.top_holders[0].site, "/home/u/model.py:12 in forward");
    assert_eq!(oom.top_holders[0].bytes, 3 << 20);
    assert_eq!(d.end.fragmentation.largest_free_block, 17 << 20);
}

/// A recorder's file whose dump holds a block larger than its trace entry:
/// the allocator gave a 4 MiB free block to a 3 MiB request without
/// splitting it (the remainder under 1 MiB), as on an H200 recording. The
/// trace and the dump agree; a block the trace leaves alive that the dump
/// shows free is a dump taken at another moment.
#[test]
fn an_unsplit_block_is_no_disagreement_between_trace_and_dump() {
    let base = 1u64 << 40;
    let doc = |later: bool| {
        let mut trace = vec![
            json!({"action": "segment_alloc", "addr": base, "size": 6 << 20, "stream": 0, "time_us": 10}),
            json!({"action": "alloc", "addr": base, "size": 3 << 20, "stream": 0, "time_us": 11}),
        ];
        if later {
            trace.push(json!({"action": "alloc", "addr": base + (4 << 20), "size": 2 << 20, "stream": 0, "time_us": 12}));
        }
        json!({
            "segments": [{"device": 0, "address": base, "total_size": 6 << 20, "allocated_size": 4 << 20, "active_size": 4 << 20,
                          "requested_size": 3 << 20, "stream": 0, "segment_type": "large", "blocks": [
                {"address": base, "size": 4 << 20, "requested_size": 3 << 20, "state": "active_allocated"},
                {"address": base + (4 << 20), "size": 2 << 20, "requested_size": 0, "state": "inactive"}]}],
            "device_traces": [trace],
            "vramscope": {"recorder": "cuda-allocator-history"}
        })
    };
    let (snap, s) = summary_of(doc(false));
    assert!(snap.source.recorder.is_some(), "read as a recorder's file");
    let d = &s.devices[0];
    assert_eq!(
        (d.end.allocated_bytes, d.end_trace_bytes),
        (4 << 20, 3 << 20)
    );
    assert!(d.inconsistencies.is_empty(), "{:?}", d.inconsistencies);
    let (_, s) = summary_of(doc(true));
    let d = &s.devices[0];
    assert!(
        d.inconsistencies
            .iter()
            .any(|w| w.contains("another moment")),
        "{:?}",
        d.inconsistencies
    );
}
