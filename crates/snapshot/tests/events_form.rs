//! A trace written in events (`vramscope.trace_form = "events"`: one
//! `alloc` per allocation, one `free_completed` per free, as the CPU
//! allocator recorder writes) reads as the entries PyTorch would write for
//! an allocator that caches nothing.

use serde_json::{json, Value};
use vramscope_snapshot::{decode_bytes, Action, LoadOptions};

fn doc(form: Option<&str>) -> Value {
    let frames = json!([{"filename": "/home/u/train.py", "line": 3, "name": "<module>"}]);
    let mut rec = json!({"recorder": "cpu-allocator", "device_type": "cpu"});
    if let Some(f) = form {
        rec["trace_form"] = json!(f);
    }
    json!({
        "segments": [],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10, "frames": frames},
            {"action": "alloc", "addr": 8192, "size": 256, "stream": 0, "time_us": 11, "frames": frames, "user_metadata": "warmup"},
            {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 12, "frames": frames, "user_metadata": "warmup"}
        ]],
        "vramscope": rec
    })
}

#[test]
fn events_become_pytorchs_entries() {
    let bytes = serde_json::to_vec(&doc(Some("events"))).unwrap();
    let snap = decode_bytes(&bytes, &LoadOptions::default()).expect("decodes");
    let t = &snap.traces[0];
    use Action::*;
    assert_eq!(
        t.action,
        [
            SegmentAlloc,
            Alloc,
            SegmentAlloc,
            Alloc,
            FreeRequested,
            FreeCompleted,
            SegmentFree
        ]
    );
    assert_eq!(t.size, [512, 512, 256, 256, 512, 512, 512]);
    assert_eq!(t.time_us, [10, 10, 11, 11, 12, 12, 12]);
    let meta = t.user_metadata.as_ref().expect("labels kept");
    let label = |i: usize| snap.str(meta[i]).to_owned();
    assert_eq!(
        label(2),
        "warmup",
        "the added entries carry the event's label"
    );
    assert_eq!(label(6), "warmup");
    assert_eq!(label(0), "");
}

#[test]
fn pytorch_form_is_left_as_written() {
    for form in [None, Some("entries")] {
        let bytes = serde_json::to_vec(&doc(form)).unwrap();
        let snap = decode_bytes(&bytes, &LoadOptions::default()).expect("decodes");
        assert_eq!(snap.traces[0].len(), 3, "{form:?}");
    }
}
