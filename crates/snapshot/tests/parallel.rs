//! Large traces are decoded on two threads, each half with its own intern
//! tables; the result must be identical to a sequential decode.

use vramscope_snapshot::{decode_bytes, LoadOptions, Snapshot};

fn decode(bytes: &[u8], threads: usize) -> Snapshot {
    let opts = LoadOptions {
        threads: Some(threads),
        ..Default::default()
    };
    decode_bytes(bytes, &opts).expect("decodes")
}

/// Columns with interned ids resolved to text, so two snapshots with
/// different id numbering compare equal when they mean the same.
fn resolved(s: &Snapshot) -> Vec<String> {
    let t = s.trace(0).expect("trace");
    (0..t.len())
        .map(|i| {
            let stack: Vec<String> = s
                .stacks
                .get(t.stack[i])
                .iter()
                .map(|&f| {
                    let f = s.frames.get(f);
                    format!("{}:{}:{}", s.str(f.filename), f.line, s.str(f.name))
                })
                .collect();
            let cat = t.category.as_ref().map(|c| s.str(c[i]).to_owned());
            let cc = t.compile_context.as_ref().map(|c| s.str(c[i]).to_owned());
            format!(
                "{:?} {} {} {} {} {:?} {:?} {:?} {:?}",
                t.action[i],
                t.addr[i],
                t.size[i],
                t.stream[i],
                t.time_us[i],
                stack,
                cat,
                cc,
                t.device_free_at(i)
            )
        })
        .collect()
}

#[test]
fn parallel_decode_equals_sequential() {
    let n = 240_000usize;
    // JSON text built directly: json! values for 240k entries would cost
    // more than everything under test.
    let frames: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"filename": "/src/mod{}.py", "line": {i}, "name": "f{i}"}}"#,
                i % 7
            )
        })
        .collect();
    let mut text = String::from(r#"{"segments": [], "device_traces": [["#);
    for i in 0..n {
        let depth = 1 + i % 13;
        let start = i % 27;
        // Unknown actions and missing times in both halves: the repairs of
        // the two decoders are merged.
        let action = match i {
            1_000 | 200_000 => "teleport",
            _ => ["alloc", "free_requested", "free_completed"][i % 3],
        };
        let time = if i % 10_007 == 0 {
            "null".to_string()
        } else {
            (1_700_000_000_000_000u64 + i as u64).to_string()
        };
        let mut extra = String::new();
        // Optional columns that only the second half has, or only some entries.
        if i > n * 3 / 4 {
            extra.push_str(&format!(
                r#", "category": "{}""#,
                ["activation", "gradient"][i % 2]
            ));
        }
        if i % 5 == 0 {
            extra.push_str(&format!(r#", "compile_context": "ctx{}""#, i % 3));
        }
        text.push_str(&format!(
            r#"{{"action": "{action}", "addr": {}, "size": {}, "stream": 0, "time_us": {}, "frames": [{}]{extra}}},"#,
            (1u64 << 40) | ((i / 3) as u64) << 9,
            512 * (1 + i % 97),
            time,
            frames[start..start + depth].join(", ")
        ));
    }
    text.push_str(r#"{"action": "oom", "size": 17179869184, "device_free": 1234, "stream": 0}]]}"#);
    let bytes = text.into_bytes();
    let seq = decode(&bytes, 1);
    let par = decode(&bytes, 2);
    assert_eq!(seq.trace(0).map(|t| t.len()), Some(n + 1));
    let (a, b) = (resolved(&seq), resolved(&par));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "event {i} differs");
    }
    assert_eq!(seq.source.repairs, par.source.repairs);
    let count = |field: &str| {
        par.source
            .repairs
            .iter()
            .find(|r| r.field == field)
            .map(|r| r.count)
    };
    assert_eq!(count("device_traces[*][*].action"), Some(2));
    assert_eq!(count("device_traces[*][*].time_us"), Some(24));
    // Interned tables hold no duplicates after the merge.
    assert_eq!(seq.stacks.len(), par.stacks.len());
    assert_eq!(seq.frames.len(), par.frames.len());
}
