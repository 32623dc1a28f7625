//! The memory flamegraph: tree shape (outermost frame at the root, noise
//! removed, frame kinds), a byte-for-byte golden SVG, escaping of hostile
//! frame names into well-formed XML, and real snapshots whose peak tree
//! adds up to the summary's peak.
//!
//! `VRAMSCOPE_BLESS=1 cargo test` rewrites the golden files.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use vramscope_analysis::flame::{flame_tree, FlameNode, FrameKind, NO_STACK};
use vramscope_analysis::{summarize, LiveBlock, Liveness, SummaryOptions};
use vramscope_report::flamegraph::{flamegraph_svg, FlameOptions};
use vramscope_snapshot::{decode_bytes, DeviceTrace, LoadOptions, Snapshot};

fn frame(file: &str, line: u32, name: &str) -> Value {
    json!({"filename": file, "line": line, "name": name})
}

fn block(addr: u64, size: u64, frames: Option<Value>) -> Value {
    let mut b =
        json!({"address": addr, "size": size, "requested_size": size, "state": "active_allocated"});
    if let Some(f) = frames {
        b["frames"] = f;
    }
    b
}

/// One segment holding `blocks` (the rest of it free).
fn snapshot(blocks: Vec<Value>) -> Snapshot {
    let base = 1u64 << 32;
    let mut placed = Vec::new();
    let mut addr = base;
    for mut b in blocks {
        b["address"] = json!(addr);
        addr += b["size"].as_u64().expect("size");
        placed.push(b);
    }
    let total = (addr - base).next_multiple_of(2 << 20) + (2 << 20);
    placed.push(json!({"address": addr, "size": base + total - addr, "requested_size": 0, "state": "inactive"}));
    let doc = json!({"segments": [{"device": 0, "address": base, "total_size": total, "allocated_size": addr - base,
        "active_size": addr - base, "requested_size": addr - base, "stream": 0, "segment_type": "large",
        "blocks": placed}], "device_traces": [[]]});
    decode_bytes(
        &serde_json::to_vec(&doc).expect("json"),
        &LoadOptions::default(),
    )
    .expect("decodes")
}

fn live(snap: &Snapshot) -> Vec<LiveBlock> {
    Liveness::new(snap, 0).live_after(&DeviceTrace::default(), None)
}

/// Innermost first, as PyTorch records them.
fn golden_snapshot() -> Snapshot {
    let native = frame(
        "??",
        0,
        "c10::cuda::CUDACachingAllocator::malloc(void**, long)",
    );
    let noise = frame("??", 0, "torch::unwind::unwind()");
    let lib = frame(
        "/usr/lib/python3/site-packages/torch/nn/modules/linear.py",
        125,
        "forward",
    );
    let model = frame("/home/u/model.py", 40, "forward");
    let attn = frame("/home/u/model.py", 77, "attention");
    let main = frame("/home/u/train.py", 12, "main");
    snapshot(vec![
        block(0, 6 << 20, Some(json!([noise, native, lib, model, main]))),
        block(0, 2 << 20, Some(json!([noise, native, lib, model, main]))),
        block(0, 3 << 20, Some(json!([native, attn, model, main]))),
        block(0, 1 << 20, Some(json!([model, main]))),
        block(0, 1 << 20, None),
        block(0, 512, Some(json!([frame("/home/u/tiny.py", 1, "tiny")]))),
    ])
}

fn child<'a>(n: &'a FlameNode, name: &str) -> &'a FlameNode {
    n.children
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} under {}", n.name))
}

#[test]
fn tree_runs_from_the_outermost_frame_without_noise() {
    let snap = golden_snapshot();
    let t = flame_tree(&snap, &live(&snap));
    assert_eq!(
        (t.kind, t.bytes, t.count),
        (FrameKind::Root, (13 << 20) + 512, 6)
    );
    // Widest first: main (12 MiB), then the block without a stack, then tiny.
    let names: Vec<&str> = t.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["main (train.py:12)", NO_STACK, "tiny (tiny.py:1)"]);
    let main = child(&t, "main (train.py:12)");
    assert_eq!(
        (main.kind, main.bytes, main.count),
        (FrameKind::User, 12 << 20, 4)
    );
    let model = child(main, "forward (model.py:40)");
    assert_eq!(model.self_bytes(), 1 << 20);
    let lib = child(model, "forward (linear.py:125)");
    assert_eq!(
        (lib.kind, lib.bytes, lib.count),
        (FrameKind::Library, 8 << 20, 2)
    );
    let native = child(lib, "c10::cuda::CUDACachingAllocator::malloc");
    assert_eq!(native.kind, FrameKind::Native);
    assert_eq!(
        native.label,
        "c10::cuda::CUDACachingAllocator::malloc(void**, long)"
    );
    assert!(native.children.is_empty(), "the unwinder frame is noise");
    assert_eq!(child(&t, NO_STACK).kind, FrameKind::NoStack);
    assert_eq!(t.depth(), 4);
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
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  expected: {:?}\n  actual:   {:?}\n(VRAMSCOPE_BLESS=1 rewrites it)",
            path.display(),
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

#[test]
fn golden_svg() {
    let snap = golden_snapshot();
    let tree = flame_tree(&snap, &live(&snap));
    let opts = FlameOptions {
        subtitle: Some("golden.json · device 0 · end".into()),
        ..FlameOptions::default()
    };
    let svg = flamegraph_svg(&tree, &opts);
    golden("flamegraph.svg", &svg);
    let icicle = flamegraph_svg(
        &tree,
        &FlameOptions {
            inverted: true,
            width: 600,
            ..opts
        },
    );
    golden("flamegraph_inverted.svg", &icicle);
    well_formed(&svg);
    well_formed(&icicle);
}

/// Well-formed XML per CPython's expat; skipped without python3 unless in CI.
fn well_formed(svg: &str) {
    // One directory per call: the tests run on parallel threads.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = vramscope_testdata::temp_dir(&format!("flame-{n}"));
    let path = dir.join(format!("{:x}.svg", svg.len()));
    std::fs::write(&path, svg).expect("write svg");
    let out = Command::new("python3")
        .args(["-c", "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); print(d.documentElement.tagName)"])
        .arg(&path)
        .output();
    match out {
        Ok(o) => {
            assert!(
                o.status.success(),
                "not well-formed XML: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "svg");
        }
        Err(e) if std::env::var_os("CI").is_some() => panic!("python3 is needed in CI: {e}"),
        Err(e) => eprintln!("skipping the XML parse: python3 unavailable ({e})"),
    }
}

#[test]
fn hostile_frame_names_are_escaped() {
    let script = "<script>alert(1)</script>";
    let img = "\"><img src=x onerror=alert(1)>";
    let snap = snapshot(vec![
        block(
            0,
            4 << 20,
            Some(json!([
                frame("/home/u/a.py", 1, script),
                frame("/home/u/x&y.py", 2, img)
            ])),
        ),
        block(
            0,
            4 << 20,
            Some(json!([
                frame(img, 3, "f\u{1}g\u{0}'q'"),
                frame(script, 0, script)
            ])),
        ),
    ]);
    let tree = flame_tree(&snap, &live(&snap));
    let opts = FlameOptions {
        title: Some(script.into()),
        subtitle: Some(img.into()),
        ..FlameOptions::default()
    };
    for inverted in [false, true] {
        let svg = flamegraph_svg(
            &tree,
            &FlameOptions {
                inverted,
                ..opts.clone()
            },
        );
        assert!(!svg.contains("<script"), "raw <script in the output");
        assert!(!svg.contains("<img"), "raw <img in the output");
        assert!(!svg.contains('\u{1}') && !svg.contains('\u{0}'));
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(svg.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
        // Only the document's own elements appear.
        for tag in svg
            .split('<')
            .skip(1)
            .map(|s| s.split([' ', '>', '/']).next().unwrap_or(""))
        {
            assert!(
                ["?xml", "svg", "style", "rect", "text", "g", "title", ""].contains(&tag),
                "unexpected element {tag:?}"
            );
        }
        well_formed(&svg);
    }
    assert_eq!(
        vramscope_text::escape::markup("a<b>&\"'\u{7}\u{FFFF}"),
        "a&lt;b&gt;&amp;&quot;&#39;\u{FFFD}\u{FFFD}"
    );
}

#[test]
fn narrow_frames_and_empty_moments() {
    let snap = golden_snapshot();
    let tree = flame_tree(&snap, &live(&snap));
    let svg = flamegraph_svg(&tree, &FlameOptions::default());
    // 512 B of 13 MiB is 0.04 px wide at 1200 px: left out, its parent keeps the bytes.
    assert!(!svg.contains("tiny.py"));
    let all = flamegraph_svg(
        &tree,
        &FlameOptions {
            min_width_px: 0.0,
            ..FlameOptions::default()
        },
    );
    assert!(all.contains("tiny.py:1 in tiny — 512 B (0.0%), 1 block"));
    let empty = flamegraph_svg(&flame_tree(&snap, &[]), &FlameOptions::default());
    assert!(empty.contains("Nothing is allocated at this moment."));
    assert!(empty.contains("0 B alive in 0 blocks"));
    well_formed(&empty);
}

/// The widest user frame anywhere in the tree.
fn widest_user(t: &FlameNode) -> Option<&FlameNode> {
    let mut best: Option<&FlameNode> = None;
    t.walk(&mut |n, _| {
        if n.kind == FrameKind::User && best.is_none_or(|b| n.bytes > b.bytes) {
            best = Some(n);
        }
    });
    best
}

#[test]
fn real_snapshots_at_peak_add_up_to_the_summary() {
    let files = vramscope_testdata::real_snapshots();
    assert!(files.len() >= 7, "expected the 7 real snapshots");
    for f in &files {
        let snap = vramscope_snapshot::load(f, &LoadOptions::default()).expect("loads");
        let s = summarize(
            &snap,
            &SummaryOptions {
                device: Some(0),
                top_sites: 1,
                ..SummaryOptions::default()
            },
        );
        let liveness = Liveness::new(&snap, 0);
        let empty = DeviceTrace::default();
        let t = snap.trace(0).unwrap_or(&empty);
        let tree = flame_tree(&snap, &liveness.live_after(t, liveness.peak_index));
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert_eq!(
            tree.bytes, s.devices[0].peak.allocated_bytes,
            "{name}: root total"
        );
        assert_eq!(tree.count, s.devices[0].peak.live_blocks, "{name}: blocks");
        let children: u64 = tree.children.iter().map(|c| c.bytes).sum();
        assert!(children <= tree.bytes, "{name}: children exceed the root");
        let user = widest_user(&tree).unwrap_or_else(|| panic!("{name}: no user frame"));
        let path = user.label.rsplit_once(" in ").map_or("", |x| x.0);
        assert!(
            !vramscope_analysis::sites::is_library(path) && path.contains(".py:"),
            "{name}: widest user frame {} is not in the user's code",
            user.label
        );
        eprintln!(
            "{name}: widest user frame {} ({} bytes)",
            user.label, user.bytes
        );
        well_formed(&flamegraph_svg(&tree, &FlameOptions::default()));
    }
}
