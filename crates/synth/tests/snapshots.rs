//! Synthetic snapshots loaded by CPython's `pickle` and checked against the
//! generator's own [`SynthTruth`]: structure and key order, blocks tiling
//! segments, per-segment sums, the peak replay, end-state totals, object
//! sharing, and byte-for-byte equality with `pickle.dumps` of the loaded
//! object.

mod common;

use vramscope_synth::{write_snapshot, StackKind, SynthError, SynthOptions, SynthTruth};

/// Prints one JSON line per `path protocol` pair given as arguments.
const CHECK: &str = r#"
import json, pickle, sys
from collections import Counter

def check(path, proto):
    data = open(path, "rb").read()
    s = pickle.loads(data)
    out = {"keys": list(s)}
    assert list(s)[:3] == ["segments", "device_traces", "allocator_settings"]
    SEG = ["device", "address", "total_size", "allocated_size", "active_size", "requested_size",
           "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"]
    ENTRY = ["action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"]
    for g in s["segments"]:
        assert list(g) == SEG, list(g)
        at = g["address"]
        for b in g["blocks"]:
            assert list(b) == ["address", "size", "requested_size", "state", "frames"], list(b)
            assert b["address"] == at and b["size"] > 0 and b["size"] % 512 == 0, "blocks tile the segment"
            at += b["size"]
        assert at == g["address"] + g["total_size"], "blocks cover the segment"
        act = [b for b in g["blocks"] if b["state"] == "active_allocated"]
        assert g["allocated_size"] == g["active_size"] == sum(b["size"] for b in act)
        assert g["requested_size"] == sum(b["requested_size"] for b in act)
        assert all(b["frames"] for b in act)
        assert all(b["frames"] == [] for b in g["blocks"] if b["state"] == "inactive")
        assert g["segment_pool_id"] == (0, 0) and g["segment_type"] in ("small", "large")
        assert (g["total_size"] == 2 << 20) == (g["segment_type"] == "small") or g["is_expandable"]
    traces = s["device_traces"]
    for t in traces:
        for e in t:
            keys = ["addr" if k == "device_free" else k for k in e]
            assert keys in (ENTRY, [k for k in ENTRY if k != "time_us"]), list(e)
            assert e["stream"] == 0 and e["compile_context"] == "N/A" and e["user_metadata"] == ""
        times = [e["time_us"] for e in t if "time_us" in e]
        assert times == sorted(times) and all(t > 1.7e15 for t in times)
    tr = traces[0]
    segs = [g for g in s["segments"] if g["device"] == 0]
    live = [b for g in segs for b in g["blocks"] if b["state"] == "active_allocated"]
    # Peak: alloc +size, free_completed -size, from the bytes live before the trace.
    seen, start = {}, 0
    for e in tr:
        if e["action"] == "alloc":
            seen[e["addr"]] = e
        elif e["action"] == "free_completed" and seen.pop(e["addr"], None) is None:
            start += e["size"]
    start += sum(b["size"] for b in live if b["address"] not in seen)
    peak, index, cur = start, 0, start
    for i, e in enumerate(tr):
        cur += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
        if cur > peak:
            peak, index = cur, i
    out.update(entries=len(tr), peak_allocated=peak, peak_event_index=index,
               allocated_at_end=sum(b["size"] for b in live),
               reserved_at_end=sum(g["total_size"] for g in segs), segments=len(segs))
    out["live_from_before"] = sum(1 for b in live if b["address"] not in seen)
    out["leaked_bytes"] = sum(b["requested_size"] for b in live
                              if any(f["name"] == "accumulate_history" and f["filename"].endswith("train.py")
                                     for f in b["frames"]))
    # Sharing: frame dicts once each, one list per allocator call.
    frames = [f for t in traces for e in t for f in e["frames"]]
    out["frame_dicts"] = len({id(f) for f in frames})
    assert out["frame_dicts"] == len({(f["name"], f["filename"], f["line"]) for f in frames})
    out["frame_refs"] = len(frames)
    for t in traces:
        for a, b in zip(t, t[1:]):
            if b["action"] == "free_completed":
                assert a["action"] == "free_requested" and a["addr"] == b["addr"] and a["frames"] is b["frames"]
            if a["action"] in ("segment_alloc", "segment_map") and b["action"] == "alloc":
                assert a["frames"] is b["frames"]
            if b["action"] == "alloc":
                assert b["frames"] is not a["frames"] or a["action"].startswith("segment_")
    shared = sum(1 for b in live if b["address"] in seen and seen[b["address"]]["frames"] is b["frames"])
    assert shared == sum(1 for b in live if b["address"] in seen), "blocks share their alloc's frames list"
    out["lists"] = len({id(e["frames"]) for e in tr})
    out["actions"] = dict(Counter(e["action"] for e in tr))
    out["last"] = tr[-1]["action"] if tr else None
    if out["last"] == "oom":
        assert tr[-1]["size"] > tr[-1]["device_free"] and list(tr[-1])[1] == "device_free"
    out["expandable"] = sorted({g["is_expandable"] for g in s["segments"]})
    out["trace_lengths"] = [len(t) for t in traces]
    out["annotations"] = len(s.get("external_annotations", []))
    out["settings_expandable"] = s["allocator_settings"]["expandable_segments"]
    lens = [len(e["frames"]) for e in tr if e["action"] == "alloc"]
    out["alloc_frames"] = sum(lens) / max(1, len(lens))
    out["redump_equal"] = pickle.dumps(s, protocol=proto) == data
    return out

args = sys.argv[1:]
for path, proto in zip(args[::2], args[1::2]):
    print(json.dumps(check(path, int(proto))))
"#;

struct Case {
    name: &'static str,
    opts: SynthOptions,
}

fn case(name: &'static str, opts: SynthOptions) -> Case {
    Case { name, opts }
}

fn small() -> SynthOptions {
    SynthOptions {
        entries: 2_000,
        ..Default::default()
    }
}

fn get(v: &str, key: &str) -> String {
    // The checker prints flat JSON; pull one value out without a JSON crate.
    let at = v
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("no {key} in {v}"));
    let rest = &v[at + key.len() + 4..];
    let end = if rest.starts_with('{') || rest.starts_with('[') {
        rest.find(['}', ']']).map_or(rest.len(), |i| i + 1)
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    rest[..end].to_string()
}

fn num(v: &str, key: &str) -> u64 {
    get(v, key)
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {v}"))
}

fn assert_truth(name: &str, v: &str, t: &SynthTruth) {
    let found = [
        ("entries", t.entries),
        ("peak_allocated", t.peak_allocated),
        ("peak_event_index", t.peak_event_index),
        ("allocated_at_end", t.allocated_at_end),
        ("reserved_at_end", t.reserved_at_end),
        ("segments", t.segments),
        ("leaked_bytes", t.leaked_bytes),
    ];
    for (key, expected) in found {
        assert_eq!(num(v, key), expected, "{name}: {key} recomputed by Python");
    }
    assert_eq!(
        get(v, "redump_equal"),
        "true",
        "{name}: pickle.dumps(loaded) differs from the file"
    );
}

#[test]
fn snapshots_check_out_in_cpython() {
    let cases = vec![
        case(
            "python-p2",
            SynthOptions {
                protocol: 2,
                ..small()
            },
        ),
        case(
            "python-p3",
            SynthOptions {
                protocol: 3,
                ..small()
            },
        ),
        case("python-p4", small()),
        case(
            "python-p5",
            SynthOptions {
                protocol: 5,
                seed: 5,
                ..small()
            },
        ),
        case(
            "cpp",
            SynthOptions {
                stacks: StackKind::Cpp,
                ..small()
            },
        ),
        case(
            "leak",
            SynthOptions {
                leak_bytes_per_iter: 48 << 20,
                seed: 2,
                ..small()
            },
        ),
        case(
            "oom",
            SynthOptions {
                oom: true,
                ..small()
            },
        ),
        case(
            "window",
            SynthOptions {
                max_entries_window: Some(700),
                seed: 3,
                ..small()
            },
        ),
        case(
            "expandable",
            SynthOptions {
                expandable_segments: true,
                ..small()
            },
        ),
        case(
            "devices",
            SynthOptions {
                devices: 2,
                ..small()
            },
        ),
        case(
            "everything",
            SynthOptions {
                stacks: StackKind::Cpp,
                expandable_segments: true,
                oom: true,
                leak_bytes_per_iter: 3 << 20,
                max_entries_window: Some(1_500),
                devices: 2,
                protocol: 5,
                seed: 9,
                ..small()
            },
        ),
        case(
            "bare",
            SynthOptions {
                with_time: false,
                annotations: false,
                ..small()
            },
        ),
    ];
    let mut args = Vec::new();
    let mut truths = Vec::new();
    let mut files = Vec::new();
    for c in &cases {
        let path = common::scratch(&format!("{}.pickle", c.name));
        let file = std::fs::File::create(&*path).expect("create scratch file");
        let truth = write_snapshot(&c.opts, std::io::BufWriter::new(file)).expect("write snapshot");
        assert_eq!(
            std::fs::metadata(&*path).expect("stat").len(),
            truth.bytes_written,
            "{}",
            c.name
        );
        args.push(common::path_str(&path).to_string());
        args.push(c.opts.protocol.to_string());
        truths.push(truth);
        files.push(path);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(out) = common::python(CHECK, &argv) else {
        return;
    };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), cases.len());
    for ((c, t), v) in cases.iter().zip(&truths).zip(lines) {
        assert_truth(c.name, v, t);
        let window = c.opts.max_entries_window.unwrap_or(u64::MAX);
        if !c.opts.oom {
            assert_eq!(
                t.entries,
                c.opts.entries.min(window),
                "{}: exact length",
                c.name
            );
        }
        assert!(
            num(v, "frame_dicts") < 400,
            "{}: frame dicts are shared: {v}",
            c.name
        );
        assert!(
            num(v, "frame_refs") > 20 * num(v, "frame_dicts"),
            "{}: {v}",
            c.name
        );
        let actions = get(v, "actions");
        assert!(
            actions.contains("\"free_completed\""),
            "{}: {actions}",
            c.name
        );
        assert_eq!(
            get(v, "last") == "\"oom\"",
            c.opts.oom,
            "{}: ends with oom",
            c.name
        );
        assert_eq!(
            actions.contains("segment_map"),
            c.opts.expandable_segments,
            "{}",
            c.name
        );
        if c.opts.expandable_segments {
            assert!(!actions.contains("segment_alloc"), "{}: {actions}", c.name);
        } else if window == u64::MAX {
            assert!(actions.contains("segment_alloc"), "{}: {actions}", c.name);
        }
        let expandable = if c.opts.expandable_segments {
            "[true]"
        } else {
            "[false]"
        };
        assert_eq!(get(v, "expandable"), expandable, "{}", c.name);
        assert_eq!(
            get(v, "settings_expandable"),
            c.opts.expandable_segments.to_string(),
            "{}",
            c.name
        );
        assert_eq!(
            num(v, "live_from_before") > 0,
            window < c.opts.entries,
            "{}: window",
            c.name
        );
        assert_eq!(
            t.leaked_bytes > 0,
            c.opts.leak_bytes_per_iter > 0,
            "{}: leak",
            c.name
        );
        assert_eq!(num(v, "annotations") > 0, c.opts.annotations, "{}", c.name);
        let lengths = get(v, "trace_lengths");
        assert_eq!(
            lengths.matches(',').count() + 1,
            c.opts.devices as usize,
            "{}: {lengths}",
            c.name
        );
        let frames: f64 = get(v, "alloc_frames").parse().expect("mean frames");
        let range = if c.opts.stacks == StackKind::Cpp {
            35.0..80.0
        } else {
            12.0..32.0
        };
        assert!(
            range.contains(&frames),
            "{}: {frames} frames per alloc",
            c.name
        );
    }
}

/// The window keeps exactly the last entries of the same run.
#[test]
fn window_is_the_tail_of_the_full_run() {
    let full = SynthOptions {
        entries: 1_500,
        seed: 4,
        ..Default::default()
    };
    let windowed = SynthOptions {
        max_entries_window: Some(400),
        ..full.clone()
    };
    let (a, b) = (
        common::scratch("full.pickle"),
        common::scratch("tail.pickle"),
    );
    write_snapshot(&full, std::fs::File::create(&*a).expect("create")).expect("write");
    let t = write_snapshot(&windowed, std::fs::File::create(&*b).expect("create")).expect("write");
    assert_eq!(t.entries, 400);
    let script = r#"
import pickle, sys
a, b = (pickle.load(open(p, "rb")) for p in sys.argv[1:3])
ta, tb = a["device_traces"][0], b["device_traces"][0]
assert ta[-400:] == tb, "window differs from the tail"
assert a["segments"] == b["segments"]
print("ok")
"#;
    if let Some(out) = common::python(script, &[common::path_str(&a), common::path_str(&b)]) {
        assert_eq!(out.trim(), "ok");
    }
}

#[test]
fn same_options_same_bytes_and_seeds_differ() {
    let opts = SynthOptions {
        entries: 1_000,
        stacks: StackKind::Cpp,
        ..Default::default()
    };
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let ta = write_snapshot(&opts, &mut a).expect("write");
    let tb = write_snapshot(&opts, &mut b).expect("write");
    write_snapshot(&SynthOptions { seed: 2, ..opts }, &mut c).expect("write");
    assert_eq!(a, b);
    assert_eq!(ta, tb);
    assert_ne!(a, c);
    assert_eq!(ta.bytes_written, a.len() as u64);
}

#[test]
fn invalid_options_say_what_was_expected() {
    let bad = [
        SynthOptions {
            entries: 0,
            ..Default::default()
        },
        SynthOptions {
            protocol: 1,
            ..Default::default()
        },
        SynthOptions {
            devices: 0,
            ..Default::default()
        },
        SynthOptions {
            iterations: 0,
            ..Default::default()
        },
        SynthOptions {
            max_entries_window: Some(0),
            ..Default::default()
        },
    ];
    for opts in bad {
        match write_snapshot(&opts, Vec::new()) {
            Err(SynthError::InvalidOptions(msg)) => assert!(msg.contains("found"), "{msg}"),
            other => panic!("expected InvalidOptions, got {other:?}"),
        }
    }
}

#[test]
fn write_errors_are_reported() {
    struct Broken(usize);
    impl std::io::Write for Broken {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 < buf.len() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "closed",
                ));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let opts = SynthOptions {
        entries: 20_000,
        ..Default::default()
    };
    for budget in [0, 1 << 10, 1 << 20] {
        match write_snapshot(&opts, Broken(budget)) {
            Err(SynthError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe),
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }
}
