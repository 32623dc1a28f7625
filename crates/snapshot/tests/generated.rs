//! Stacks through code torch.compile generated get the source lines that
//! code computes (the recorder's `vramscope.generated` map), inserted just
//! inside the generated frame.

use serde_json::json;
use vramscope_snapshot::{decode_bytes, LoadOptions, StackId};

const GEN: &str = "/tmp/torchinductor_u/wo/cwofjyrkm5gmsgoptwvpbvfdxuilcyisc56bqwjnkfsk4xphcy2o.py";

fn labels(snap: &vramscope_snapshot::Snapshot, s: StackId) -> Vec<String> {
    snap.stacks
        .get(s)
        .iter()
        .map(|&f| {
            let f = snap.frames.get(f);
            format!("{}:{}", snap.str(f.filename), f.line)
        })
        .collect()
}

#[test]
fn generated_frames_get_the_source_they_compute() {
    let at = |line: u32| {
        json!([
            {"filename": GEN, "line": line, "name": "call"},
            {"filename": "/home/u/train.py", "line": 30, "name": "<module>"}
        ])
    };
    let doc = json!({
        "segments": [],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": at(92)},
            {"action": "alloc", "addr": 8192, "size": 512, "stream": 0, "frames": at(99)},
            {"action": "alloc", "addr": 12288, "size": 512, "stream": 0, "frames": at(40)},
            {"action": "alloc", "addr": 16384, "size": 512, "stream": 0, "frames": at(97)}
        ]],
        "vramscope": {"recorder": "cpu-allocator", "generated": [{
            "file": GEN,
            "lines": [91, 97, 98],
            "frames": [
                [{"filename": "/home/u/model.py", "line": 7, "name": "forward"}],
                [],
                [{"filename": "/home/u/model.py", "line": 9, "name": "forward"},
                 {"filename": "/home/u/model.py", "line": 20, "name": "forward"}]
            ]
        }]}
    });
    let snap =
        decode_bytes(&serde_json::to_vec(&doc).unwrap(), &LoadOptions::default()).expect("decodes");
    let t = &snap.traces[0];
    // Line 92 computes what line 7 traced: the source is inside the call.
    assert_eq!(
        labels(&snap, t.stack[0]),
        [
            "/home/u/model.py:7",
            &format!("{GEN}:92"),
            "/home/u/train.py:30"
        ]
    );
    // Line 99: the entry from 98 on, two source frames, innermost first.
    assert_eq!(
        labels(&snap, t.stack[1]),
        [
            "/home/u/model.py:9",
            "/home/u/model.py:20",
            &format!("{GEN}:99"),
            "/home/u/train.py:30"
        ]
    );
    // Before the first mapped line, and in a range with no source: as recorded.
    assert_eq!(
        labels(&snap, t.stack[2]),
        [format!("{GEN}:40"), "/home/u/train.py:30".into()]
    );
    assert_eq!(
        labels(&snap, t.stack[3]),
        [format!("{GEN}:97"), "/home/u/train.py:30".into()]
    );
}
