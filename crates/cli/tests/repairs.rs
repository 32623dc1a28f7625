//! One odd value never rejects a file: the reader keeps the entry, frame or
//! block, stores a sentinel, and lists what it repaired (field, count, an
//! example) in the summary's warnings, text and JSON.

mod common;

use common::*;
use serde_json::{json, Value};

fn summary_json(path: &std::path::Path) -> Value {
    let o = vramscope(&["summary", "--json", path.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
    serde_json::from_slice(&o.stdout).expect("--json is JSON")
}

fn repair<'a>(j: &'a Value, field: &str) -> &'a Value {
    j["source"]["repairs"]
        .as_array()
        .expect("repairs")
        .iter()
        .find(|r| r["field"] == field)
        .unwrap_or_else(|| panic!("no repair of {field} in {}", j["source"]))
}

/// The generator's odd values (frame lines 2**64-1, -1, 2**70 and None, an
/// unknown block state, an entry with an unknown action) against the same
/// run without them.
#[test]
fn odd_values_are_repaired_and_figures_are_unchanged() {
    let d = temp_dir("repairs-synth");
    let (odd, even) = (d.join("odd.pickle"), d.join("even.pickle"));
    for (p, extra) in [(&odd, Some("--odd-values")), (&even, None)] {
        let mut args = vec!["synth", "-o", p.to_str().unwrap(), "--entries", "20000"];
        args.extend(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (a, b) = (summary_json(&odd), summary_json(&even));
    let (da, db) = (&a["devices"][0], &b["devices"][0]);
    // The peak's figures; its stacks differ only in the repaired lines.
    for k in ["allocated_bytes", "event_index", "live_blocks", "time_us"] {
        assert_eq!(da["peak"][k], db["peak"][k], "{k}");
    }
    for k in ["reserved_bytes", "allocated_bytes", "active_bytes"] {
        assert_eq!(da["end"][k], db["end"][k], "{k}");
    }
    assert_eq!(da["end"]["segments"], db["end"]["segments"]);
    // Every known action counted as before; the odd entry is kept as unknown.
    let (ea, eb) = (&da["events"], &db["events"]);
    for (action, n) in eb["by_action"].as_object().expect("by_action") {
        assert_eq!(&ea["by_action"][action], n, "{action}");
    }
    assert_eq!(ea["by_action"]["unknown"], 1);
    assert_eq!(ea["total"].as_u64(), eb["total"].as_u64().map(|n| n + 1));
    assert_eq!(b["source"]["repairs"], json!([]));

    let line = repair(&a, "segments[*].blocks[*].frames[*].line");
    assert_eq!(line["count"], 4);
    assert_eq!(line["fix"], "read as no line");
    assert!(line["example"]
        .as_str()
        .unwrap()
        .ends_with("found an int of 65 bits (18446744073709551615)"));
    let state = repair(&a, "segments[*].blocks[*].state");
    assert_eq!(state["count"], 1);
    assert!(state["example"]
        .as_str()
        .unwrap()
        .contains("\"pending_unmap\""));
    let action = repair(&a, "device_traces[*][*].action");
    assert_eq!(action["count"], 1);
    assert!(action["example"]
        .as_str()
        .unwrap()
        .starts_with("device_traces[0][20000].action: expected a known action"));
    assert_eq!(a["source"]["repairs"].as_array().map(Vec::len), Some(3));

    // The text summary says the same, one warning line per repaired field.
    let o = vramscope(&["summary", odd.to_str().unwrap()]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains(
            "warning: repaired 4 values of segments[*].blocks[*].frames[*].line (read as no line)"
        ),
        "{text}"
    );
    assert!(text.contains("unknown 1"), "{text}");
}

/// Every kind of odd value, one at a time in a hand-written file: each is
/// repaired, counted under its own field, and nothing else is lost.
#[test]
fn each_kind_of_odd_value_is_repaired() {
    let frame = |line: Value| json!({"filename": "/w/train.py", "name": "step", "line": line});
    let doc = json!({
        "segments": [
            {"device": 0, "address": 4096, "total_size": 2097152, "stream": 0,
             "segment_type": "huge", "segment_pool_id": "default",
             "blocks": [
                {"address": 4096, "size": 1024, "requested_size": -1, "state": "active_allocated",
                 "frames": [frame(json!(-1)), frame(json!("12")), 7]},
                {"address": 5120, "size": "rest", "state": "inactive", "frames": "none"},
                "not a block"
             ]},
            42
        ],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 1024, "stream": 0, "time_us": 10, "frames": [frame(json!(1e30))],
             "pool_id": "graph"},
            {"action": "alloc", "addr": null, "size": 512, "stream": 0, "time_us": 11},
            {"action": "alloc", "addr": 9000, "size": "big", "stream": 0, "time_us": 12},
            {"action": "free_completed", "addr": 9000, "size": -5, "stream": "s", "time_us": null},
            {"action": 3, "addr": 1, "size": 1},
            {"addr": 1, "size": 1},
            "not an entry",
            {"action": "oom", "size": 4096, "device_free": -1, "stream": 0, "time_us": 13,
             "compile_context": 5, "user_metadata": ["x"]}
        ]],
        "external_annotations": [
            {"name": "ProfilerStep#1", "stage": "MIDDLE", "device": 0, "time_us": "soon"},
            null
        ]
    });
    let d = temp_dir("repairs-json");
    let p = d.join("odd.json");
    std::fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
    let j = summary_json(&p);
    let rows: Vec<(String, String, u64)> = j["source"]["repairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["field"].as_str().unwrap().to_owned(),
                r["fix"].as_str().unwrap().to_owned(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: &[(&str, &str, u64)] = &[
        ("segments[*].segment_type", "read as unknown", 1),
        (
            "segments[*].segment_pool_id",
            "read as the default pool (0, 0)",
            1,
        ),
        (
            "segments[*].blocks[*].requested_size",
            "read as the block size",
            1,
        ),
        ("segments[*].blocks[*].frames[*].line", "read as no line", 2),
        ("segments[*].blocks[*].frames[*]", "frame left out", 1),
        ("segments[*].blocks[*].size", "read as 0", 1),
        ("segments[*].blocks[*].frames", "read as no stack", 1),
        ("segments[*].blocks[*]", "block left out", 1),
        ("segments[*]", "segment left out", 1),
        ("device_traces[*][*].frames[*].line", "read as no line", 1),
        (
            "device_traces[*][*].addr",
            "entry kept as unknown, not replayed",
            1,
        ),
        (
            "device_traces[*][*].size",
            "entry kept as unknown, not replayed",
            2,
        ),
        ("device_traces[*][*].stream", "read as 0", 1),
        ("device_traces[*][*].time_us", "read as not recorded", 1),
        ("device_traces[*][*].action", "read as unknown", 1),
        ("device_traces[*][*]", "kept as unknown", 1),
        ("device_traces[*][*]", "entry left out", 1),
        ("device_traces[*][*].device_free", "read as not recorded", 1),
        (
            "device_traces[*][*].pool_id",
            "read as the default pool (0, 0)",
            1,
        ),
        ("device_traces[*][*].compile_context", "read as empty", 1),
        ("device_traces[*][*].user_metadata", "read as empty", 1),
        (
            "external_annotations[*].stage",
            "read as neither start nor end",
            1,
        ),
        ("external_annotations[*].time_us", "read as not recorded", 1),
        ("external_annotations[*]", "annotation left out", 1),
    ];
    let mut want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
        .collect();
    let mut rows = rows;
    rows.sort();
    want.sort();
    assert_eq!(rows, want);
    let d0 = &j["devices"][0];
    // 8 entries, one of which is not a dict.
    assert_eq!(d0["events"]["total"], 7);
    // Only the first alloc is replayed: the others lost their address or size.
    assert_eq!(d0["events"]["by_action"]["alloc"], 1);
    assert_eq!(d0["events"]["by_action"]["unknown"], 5);
    assert_eq!(d0["peak"]["allocated_bytes"], 1024);
    assert_eq!(d0["end"]["allocated_bytes"], 1024);
    assert_eq!(d0["end"]["segments"]["total"], 1);
    // The error names the type found, never the expected one.
    let ex = |f: &str| {
        j["source"]["repairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["field"] == f)
            .map(|r| r["example"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(
        ex("device_traces[*][*].frames[*].line"),
        "device_traces[0][0].frames[0].line: expected a line number (0 to 4294967295), found the float 1000000000000000000000000000000"
    );
    assert_eq!(
        ex("device_traces[*][*].size"),
        "device_traces[0][2].size: expected a non-negative integer within 64 bits, found a str \"big\""
    );
}

/// Two segments starting at one address of a device (a recorder that saw
/// two storages over one memory) are one: the second is left out and
/// counted, so the peak is what the blocks at the peak add up to. The same
/// address on another device is another segment.
#[test]
fn a_second_segment_at_the_same_address_is_left_out() {
    let seg = |device: u32, size: u64| {
        json!({"device": device, "address": 1u64 << 20, "total_size": size, "stream": 0,
               "blocks": [{"address": 1u64 << 20, "size": size, "state": "active_allocated"}]})
    };
    let doc = json!({
        "segments": [seg(0, 4096), seg(0, 4096), seg(1, 8192)],
        "device_traces": [[
            {"action": "alloc", "addr": 65536, "size": 512, "stream": 0, "time_us": 1},
            {"action": "free_completed", "addr": 65536, "size": 512, "stream": 0, "time_us": 2}
        ], []]
    });
    let d = temp_dir("repairs-same-address");
    let p = d.join("twice.json");
    std::fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
    let j = summary_json(&p);
    let r = repair(&j, "segments[*].address");
    assert_eq!(r["fix"], "segment left out");
    assert_eq!(r["count"], 1);
    assert_eq!(
        r["example"],
        "segments[1].address: expected an address no earlier segment of its device starts at, found 0x100000 again (device 0)"
    );
    let d0 = &j["devices"][0];
    assert_eq!(d0["end"]["reserved_bytes"], 4096);
    assert_eq!(d0["peak"]["allocated_bytes"], 4096 + 512);
    assert_eq!(j["devices"][1]["end"]["reserved_bytes"], 8192);
}

/// Only a top level that is not a snapshot is rejected.
#[test]
fn a_top_level_that_is_not_a_snapshot_is_still_an_error() {
    let d = temp_dir("repairs-top");
    let cases: [(&str, &[u8], &str); 3] = [
        ("int.pickle", b"\x80\x04K\x05.", "found the int 5"),
        (
            "str.pickle",
            b"\x80\x04\x8c\x08segments\x94.",
            "found a str \"segments\"",
        ),
        ("dict.json", b"{\"a\": 1}", "found a dict with keys [\"a\"]"),
    ];
    for (name, text, needle) in cases {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        let o = vramscope(&["summary", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        assert!(stderr(&o).contains(needle), "{name}: {}", stderr(&o));
    }
    // A snapshot dict whose parts are all wrong is still read (and empty).
    let p = d.join("wrong_parts.json");
    std::fs::write(&p, r#"{"segments": "none", "device_traces": 3}"#).unwrap();
    let j = summary_json(&p);
    assert_eq!(j["source"]["repairs"].as_array().map(Vec::len), Some(2));

    // A device with segments and no trace entries: no dangling colon.
    let p = d.join("segments_only.json");
    std::fs::write(
        &p,
        r#"{"segments": [{"device": 0, "address": 0, "total_size": 2097152, "blocks": []}], "device_traces": [[]]}"#,
    )
    .unwrap();
    let o = vramscope(&["summary", p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("  Events          none in the trace\n"),
        "{text}"
    );
    assert!(!text.contains("Events          0"), "{text}");
}
