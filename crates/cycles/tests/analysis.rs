mod common;

use common::{Builder, TENSOR_BYTES};
use vramscope_cycles::{
    analyze, analyze_json, merge, CycleError, CycleOptions, CycleReport, Graph, ELIDED_TYPE,
};

fn labels(steps: &[vramscope_cycles::Step]) -> Vec<&str> {
    steps.iter().map(|s| s.label.as_str()).collect()
}

#[test]
fn node_pair_is_one_finding_with_both_tensors() {
    let mut b = Builder::new();
    b.node_pair(false);
    b.g.site = Some("train.py:12 in step".into());
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.components_with_tensors, 1);
    assert_eq!((r.tensors, r.bytes), (2, 2 * TENSOR_BYTES));
    let f = &r.findings[0];
    assert_eq!((f.count, f.tensors, f.bytes), (1, 2, 2 * TENSOR_BYTES));
    assert_eq!(f.bytes_per_occurrence, 2 * TENSOR_BYTES);
    assert_eq!(f.cycle_length, 2);
    assert_eq!(labels(&f.example.cycle), [".other", ".other"]);
    assert!(f.example.cycle.iter().all(|s| s.type_name == "Node"));
    assert_eq!(f.example.paths.len(), 2);
    for p in &f.example.paths {
        assert_eq!(labels(p), [".value", ""]);
        assert_eq!(p[1].type_name, "Tensor");
    }
    assert_eq!(f.shapes_seen, ["[512, 10] float32 cuda:0"]);
    assert_eq!(f.classes, ["__main__.Node"]);
    assert_eq!(f.sites, ["train.py:12 in step"]);
    assert_eq!(f.closing_edge, "Node.other → Node");
    assert_eq!(
        f.title,
        "Node —.other→ Node —.other→ (cycle) holds 2 tensors, 40.00 KiB"
    );
    assert_eq!(f.signature.len(), 32);
    // The example: 2 nodes, 2 tensors, 4 edges.
    assert_eq!(f.example.nodes.len(), 4);
    assert_eq!(f.example.edges.len(), 4);
}

#[test]
fn bound_method_cycle_names_self() {
    let mut b = Builder::new();
    let obj = b.obj("Trainer", "<Trainer>");
    let m = b.builtin("method");
    let t = b.tensor();
    b.edge(obj, m, ".callback");
    b.edge(m, obj, "__self__");
    b.edge(obj, t, ".weights");
    let r = analyze(&b.g, &CycleOptions::default());
    let f = &r.findings[0];
    assert_eq!(labels(&f.example.cycle), [".callback", "__self__"]);
    assert_eq!(f.example.cycle[0].type_name, "Trainer");
    assert_eq!(f.closing_edge, "method.__self__ → Trainer");
    assert!(f.explanation.contains("`method.__self__ → Trainer`"));
    assert!(f.explanation.contains("bound method"));
    assert!(f.explanation.contains("weakref.WeakMethod"));
    assert!(f.explanation.contains("obj.callback = None"));
}

#[test]
fn closure_cycle_names_the_closure() {
    let mut b = Builder::new();
    let obj = b.obj("Model", "<Model>");
    let func = b.builtin("function");
    let cell = b.builtin("cell");
    let t = b.tensor();
    b.edge(obj, func, ".hook");
    b.edge(func, cell, "closure 'self'");
    b.edge(cell, obj, "cell_contents");
    b.edge(obj, t, ".weight");
    let r = analyze(&b.g, &CycleOptions::default());
    let f = &r.findings[0];
    assert_eq!(
        labels(&f.example.cycle),
        [".hook", "closure 'self'", "cell_contents"]
    );
    assert_eq!(f.closing_edge, "cell.cell_contents → Model");
    assert!(f.explanation.contains("closure"), "{}", f.explanation);
    assert!(
        f.explanation.contains("captures `self`"),
        "{}",
        f.explanation
    );
    assert!(f.explanation.contains("Model.hook"), "{}", f.explanation);
    assert!(f.explanation.contains("weakref.ref(self)"));
}

#[test]
fn self_loop_is_a_cycle() {
    let mut b = Builder::new();
    let d = b.builtin("dict");
    let t = b.tensor();
    b.edge(d, d, "['me']");
    b.edge(d, t, "['t']");
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    assert_eq!(labels(&r.findings[0].example.cycle), ["['me']"]);
}

#[test]
fn component_without_tensors_or_cycle_gives_no_finding() {
    let mut b = Builder::new();
    // A cycle without tensors.
    let (x, y) = (b.obj("Node", "x"), b.obj("Node", "y"));
    b.edge(x, y, ".other");
    b.edge(y, x, ".other");
    // A tensor without a cycle (the graph missed a reference).
    let z = b.obj("Holder", "z");
    let t = b.tensor();
    b.edge(z, t, ".value");
    let r = analyze(&b.g, &CycleOptions::default());
    assert!(r.findings.is_empty());
    assert_eq!(r.components_with_tensors, 1);
    assert_eq!(r.unreached_tensors, 1);
    assert_eq!((r.tensors, r.bytes), (0, 0));
    // With the Node pair beside it: one finding.
    b.node_pair(false);
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.components_with_tensors, 2);
}

#[test]
fn invalid_input_is_an_error_not_a_panic() {
    let bad_id = r#"{"nodes": [{"type": "A", "module": "m", "repr": "a", "tensor": null}],
                     "edges": [{"src": 0, "dst": 7, "label": ".x"}]}"#;
    let e = Graph::from_json(bad_id).unwrap_err();
    assert!(matches!(e, CycleError::NodeOutOfRange { id: 7, .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("edge 0") && msg.contains("dst") && msg.contains("7"),
        "{msg}"
    );
    for bad in [
        "",
        "[]",
        "{\"nodes\": 3}",
        r#"{"nodes": [], "edges": [{"src": -1, "dst": 0, "label": "x"}]}"#,
        r#"{"nodes": [{"type": "T", "tensor": {"shape": "big"}}]}"#,
    ] {
        let e = analyze_json(bad).unwrap_err();
        assert!(e.to_string().starts_with("invalid cycle graph JSON"), "{e}");
    }
    // Nulls where Python writes None are fine.
    let ok = r#"{"nodes": [{"type": "A", "module": null, "repr": null, "tensor": null}],
                 "edges": null, "site": null}"#;
    assert!(analyze_json(ok).unwrap().findings.is_empty());
    // A graph built in Rust with a bad edge: the edge is ignored.
    let mut b = Builder::new();
    b.node_pair(false);
    b.edge(0, 99, ".broken");
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    // Reports: wrong schema, bad index.
    let e = CycleReport::from_json(r#"{"schema_version": 99}"#).unwrap_err();
    assert!(e.to_string().contains("schema_version 99"), "{e}");
    assert!(r.finding(5).is_err());
}

#[test]
fn deep_cycle_does_not_overflow_the_stack() {
    const N: usize = 100_000;
    let mut b = Builder::new();
    for i in 0..N {
        b.obj("Link", &format!("<Link {i}>"));
    }
    for i in 0..N {
        b.edge(i, (i + 1) % N, ".next");
    }
    let t = b.tensor();
    b.edge(N / 2, t, ".value");
    let start = std::time::Instant::now();
    let r = analyze(&b.g, &CycleOptions::default());
    println!("100,000-node cycle: {:?}", start.elapsed());
    let f = &r.findings[0];
    assert_eq!(f.cycle_length, N as u64);
    assert_eq!(f.tensors, 1);
    // It starts at the object holding the tensor; its middle is elided.
    assert_eq!(
        f.example.nodes[f.example.cycle[0].node].repr,
        "<Link 50000>"
    );
    assert!(f.example.nodes.len() <= 60);
    assert!(f.example.nodes.iter().any(|n| n.type_name == ELIDED_TYPE));
    assert_eq!(f.example.paths.len(), 1);
    assert!(f.title.contains("(cycle of 100,000)"), "{}", f.title);
    assert_eq!(f.closing_edge, "Link.next → Link");
    // A deep chain hanging off a small cycle: a long path, not drawn.
    let mut b = Builder::new();
    let (x, y) = (b.obj("A", "x"), b.obj("A", "y"));
    b.edge(x, y, ".o");
    b.edge(y, x, ".o");
    let mut prev = x;
    for _ in 0..N {
        let n = b.obj("Chain", "c");
        b.edge(prev, n, ".next");
        prev = n;
    }
    let t = b.tensor();
    b.edge(prev, t, ".value");
    let r = analyze(&b.g, &CycleOptions::default());
    let f = &r.findings[0];
    assert_eq!(f.tensors, 1);
    assert_eq!(f.example.omitted_paths, 1);
}

#[test]
fn lists_of_different_lengths_from_the_same_code_group() {
    let mut b = Builder::new();
    for n in [2, 3] {
        let node = b.obj("Model", "<Model>");
        let list = b.builtin("list");
        b.edge(node, list, ".history");
        b.edge(list, node, "[0]");
        for k in 0..n {
            let t = b.tensor_of(&[k + 1], 4 * (k + 1));
            b.edge(list, t, &format!("[{}]", k + 1));
        }
    }
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    let f = &r.findings[0];
    assert_eq!((f.count, f.tensors), (2, 5));
    assert_eq!(f.bytes, 4 + 8 + 4 + 8 + 12);
    assert_eq!(f.bytes_per_occurrence, 24);
    assert_eq!(f.shapes_seen.len(), 3);
}

#[test]
fn views_of_one_storage_count_once() {
    let mut b = Builder::new();
    b.node_pair(false);
    for t in [2, 3] {
        b.g.nodes[t].tensor.as_mut().unwrap().storage = Some(0xdead);
    }
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!((r.tensors, r.bytes), (2, TENSOR_BYTES));
}

#[test]
fn merge_adds_counts_and_keeps_new_shapes() {
    let mut one = Builder::new();
    one.node_pair(false);
    let mut two = Builder::new();
    two.node_pair(false);
    two.node_pair(false);
    let mut other = Builder::new();
    other.node_pair(true);
    let opts = CycleOptions::default();
    let mut total = CycleReport::from_json("").unwrap();
    for g in [&one.g, &two.g, &other.g] {
        // Through JSON, as the Python side does.
        let r = CycleReport::from_json(&analyze(g, &opts).to_json()).unwrap();
        merge(&mut total, r);
    }
    assert_eq!(total.collections, 3);
    assert_eq!(total.findings.len(), 2);
    let pair = total.findings.iter().find(|f| f.cycle_length == 2).unwrap();
    assert_eq!((pair.count, pair.tensors), (3, 6));
    assert_eq!(pair.bytes, 6 * TENSOR_BYTES);
    assert_eq!(pair.bytes_per_occurrence, 2 * TENSOR_BYTES);
    assert_eq!((total.tensors, total.bytes), (8, 8 * TENSOR_BYTES));
    assert_eq!(total.cyclic_components, 4);
    // Largest first.
    assert!(total.findings[0].bytes >= total.findings[1].bytes);
}

#[test]
fn findings_beyond_the_limit_stay_in_the_totals() {
    let mut b = Builder::new();
    for k in 0..5 {
        let (x, y) = (b.obj(&format!("K{k}"), "x"), b.obj("N", "y"));
        let t = b.tensor_of(&[1], 100 * (k + 1));
        b.edge(x, y, ".o");
        b.edge(y, x, ".o");
        b.edge(x, t, ".t");
    }
    let r = analyze(
        &b.g,
        &CycleOptions {
            max_findings: 2,
            ..Default::default()
        },
    );
    assert_eq!(r.findings.len(), 2);
    assert_eq!(r.findings_omitted, 3);
    assert_eq!(r.bytes, 1500);
    assert_eq!(r.findings[0].bytes, 500);
}

#[test]
fn the_same_cycle_entered_elsewhere_is_the_same_shape() {
    let mut b = Builder::new();
    // X <-> Y, each holding a tensor; created in either order, so the
    // cycle is found starting at X in one and at Y in the other.
    for first_x in [true, false] {
        let (x, y) = if first_x {
            let x = b.obj("X", "x");
            (x, b.obj("Y", "y"))
        } else {
            let y = b.obj("Y", "y");
            (b.obj("X", "x"), y)
        };
        b.edge(x, y, ".y");
        b.edge(y, x, ".x");
        for v in [x, y] {
            let t = b.tensor();
            b.edge(v, t, ".t");
        }
    }
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].count, 2);
}
