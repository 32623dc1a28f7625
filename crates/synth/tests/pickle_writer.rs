//! The pickle writer against CPython: byte-for-byte on structures large
//! enough to span frames and batches, and shared objects loaded back by
//! `python3` with their identity intact.

mod common;

use vramscope_pickle::writer::{MemoId, PickleWriter};

fn dump(proto: u8, body: impl Fn(&mut PickleWriter<Vec<u8>>)) -> Vec<u8> {
    let mut w = PickleWriter::new(Vec::new(), proto).expect("valid protocol");
    body(&mut w);
    w.finish().expect("in-memory write")
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

// Frames, batches and out-of-frame payloads, checked by length and
// FNV-1a of the whole pickle:
// ```python
// cases = {
//  'a': list(range(100000)),
//  'b': ["a"*70000],
//  'c': [{"k%d"%i: "v"*i for i in range(400)}, "z"*65536, [b"q"*70000, 3]],
//  'd': {str(i): i for i in range(1000)},
//  'e': [[i, str(i)*3, (i, -i)] for i in range(30000)],
// }
// for k, v in cases.items():
//     for p in (2, 3, 4, 5):
//         d = pickle.dumps(v, p); print(k, p, len(d), hex(fnv1a64(d)))
// ```
#[test]
fn large_structures_match_cpython() {
    type Case = fn(&mut PickleWriter<Vec<u8>>);
    let cases: [(Case, [(usize, u64); 4]); 5] = [
        (
            |w| {
                w.begin_list();
                (0..100_000).for_each(|i| w.int(i));
                w.end_list();
            },
            [
                (368878, 0x9af112bf5ce5b34b),
                (368878, 0xa0d6f18f6fea4f4c),
                (368931, 0x3c70b9b7481522b6),
                (368931, 0x60aa9a77b79e17b7),
            ],
        ),
        (
            |w| {
                w.begin_list();
                w.str(&"a".repeat(70000));
                w.end_list();
            },
            [
                (70014, 0x34686dc6e86f571e),
                (70014, 0xc5c3f6b3b5f622a9),
                (70012, 0xe988062f3ebb5ccd),
                (70012, 0x53e72d6202ad96de),
            ],
        ),
        (
            |w| {
                w.begin_list();
                w.begin_dict();
                for i in 0..400 {
                    w.str(&format!("k{i}"));
                    w.str(&"v".repeat(i));
                }
                w.end_dict();
                w.str(&"z".repeat(65536));
                w.begin_list();
                w.bytes(&[b'q'; 70000]);
                w.int(3);
                w.end_list();
                w.end_list();
            },
            [
                (224156, 0x300e6f1b071bc091),
                (224107, 0x3f543f092226b7da),
                (219723, 0x76fe83bf18de17ec),
                (219723, 0x4cfb7d44703ae6d1),
            ],
        ),
        (
            |w| {
                w.begin_dict_len(1000);
                for i in 0..1000 {
                    w.str(&i.to_string());
                    w.int(i);
                }
                w.end_dict();
            },
            [
                (14879, 0x34606c6f4bf9ff7d),
                (14879, 0x32a4adf3a69a78f8),
                (8652, 0x2fb6b3a06b67c50d),
                (8652, 0x973610cbc5702866),
            ],
        ),
        (
            |w| {
                w.begin_list_len(30000);
                for i in 0..30000 {
                    w.begin_list();
                    w.int(i);
                    w.str(&i.to_string().repeat(3));
                    w.begin_tuple(2);
                    w.int(i);
                    w.int(-i);
                    w.end_tuple();
                    w.end_list();
                }
                w.end_list();
            },
            [
                (1465456, 0xce9c4b02c80c050b),
                (1465456, 0x0a9aa75c621ff3ec),
                (1016364, 0xdee9cdbc1034b6e5),
                (1016364, 0xadff730de97fb8d6),
            ],
        ),
    ];
    for (n, (case, expected)) in cases.iter().enumerate() {
        for (proto, &(len, hash)) in (2u8..=5).zip(expected) {
            let bytes = dump(proto, case);
            assert_eq!(
                (bytes.len(), fnv(&bytes)),
                (len, hash),
                "case {n} protocol {proto}"
            );
        }
    }
}

/// Shared frames, shared stack lists and shared strings, as in snapshots.
fn shared_structure(w: &mut PickleWriter<Vec<u8>>) {
    w.begin_dict();
    w.str("frames");
    w.begin_list_len(3);
    let frames: Vec<MemoId> = (0..3)
        .map(|i| {
            let id = w.begin_dict_len(2);
            w.str("name");
            w.str(&format!("fn_{i}"));
            w.str("line");
            w.int(10 * i);
            w.end_dict();
            id
        })
        .collect();
    w.end_list();
    w.str("events");
    let mut empty: Option<MemoId> = None;
    w.begin_list();
    let mut stack = None;
    let mut keys: Option<[MemoId; 3]> = None;
    for i in 0..2500i64 {
        w.begin_dict();
        // Keys are shared strings after their first use, like interned keys.
        let key = |w: &mut PickleWriter<Vec<u8>>, n: usize, text: &str| match keys {
            Some(k) => {
                w.get(k[n]);
                k[n]
            }
            None => w.str(text),
        };
        let k0 = key(w, 0, "idx");
        w.int(i << 33);
        let k1 = key(w, 1, "meta");
        match empty {
            Some(id) => w.get(id),
            None => empty = Some(w.str("")),
        }
        let k2 = key(w, 2, "frames");
        keys = Some([k0, k1, k2]);
        match (i % 3, stack) {
            (1 | 2, Some(id)) => w.get(id),
            _ => {
                let id = w.begin_list();
                w.get(frames[(i % 3) as usize]);
                w.get(frames[2]);
                w.end_list();
                stack = Some(id);
            }
        }
        w.end_dict();
    }
    w.end_list();
    w.str("big");
    w.str(&"x".repeat(70_000));
    w.str("pool");
    w.begin_tuple(2);
    w.int(0);
    w.float(0.5);
    w.end_tuple();
    w.end_dict();
}

const IDENTITY_CHECK: &str = r#"
import pickle, sys
data = open(sys.argv[1], "rb").read()
proto = int(sys.argv[2])
obj = pickle.loads(data)
frames, events = obj["frames"], obj["events"]
assert [f["name"] for f in frames] == ["fn_0", "fn_1", "fn_2"]
assert len(events) == 2500 and events[7]["idx"] == 7 << 33
for k in range(0, 2500, 3):
    group = events[k:k + 3]
    assert all(e["frames"] is group[0]["frames"] for e in group)
    assert group[0]["frames"][0] is frames[0] and group[0]["frames"][1] is frames[2]
assert len({id(e["frames"]) for e in events}) == 834
assert len({id(f) for e in events for f in e["frames"]}) == 2
assert all(e["meta"] is events[0]["meta"] == "" for e in events)
assert obj["big"] == "x" * 70000 and obj["pool"] == (0, 0.5)
assert pickle.dumps(obj, protocol=proto) == data, "CPython writes different bytes"
print("ok")
"#;

#[test]
fn shared_objects_keep_their_identity_in_cpython() {
    for proto in 2..=5 {
        let bytes = dump(proto, shared_structure);
        let path = common::scratch(&format!("shared-{proto}"));
        std::fs::write(&*path, &bytes).expect("write scratch file");
        if let Some(out) = common::python(
            IDENTITY_CHECK,
            &[common::path_str(&path), &proto.to_string()],
        ) {
            assert_eq!(out.trim(), "ok");
        }
    }
}
