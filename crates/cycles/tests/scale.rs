mod common;

use std::time::Instant;

use common::{Builder, TENSOR_BYTES};
use vramscope_cycles::{analyze, report_html, CycleOptions, Graph};

#[test]
fn ten_thousand_node_pairs_are_one_finding() {
    const PAIRS: u64 = 10_000;
    let mut b = Builder::new();
    for _ in 0..PAIRS {
        b.node_pair(true);
    }
    assert_eq!(b.g.nodes.len(), 60_000);
    // Through JSON, as the Python side sends it.
    let json = serde_json::to_string(&b.g).unwrap();
    let start = Instant::now();
    let g = Graph::from_json(&json).unwrap();
    let parsed = start.elapsed();
    // The best of three runs (the machine may be busy).
    let (r, took) = (0..3)
        .map(|_| {
            let start = Instant::now();
            let r = analyze(&g, &CycleOptions::default());
            (r, start.elapsed())
        })
        .min_by_key(|(_, t)| *t)
        .unwrap();
    println!(
        "10,000 cycles (60,000 nodes, 60,000 edges): parse {parsed:?}, analyze {took:?} ({} bytes of JSON)",
        json.len()
    );
    assert_eq!(r.findings.len(), 1);
    let f = &r.findings[0];
    assert_eq!(f.count, PAIRS);
    assert_eq!(f.tensors, 2 * PAIRS);
    assert_eq!(f.bytes, 2 * PAIRS * TENSOR_BYTES);
    assert_eq!(f.cycle_length, 4);
    assert_eq!(r.components_with_tensors, PAIRS);
    assert!(took.as_secs_f64() < 2.0, "analysis took {took:?}");
    let start = Instant::now();
    let html = report_html(&r, "scale");
    println!("report_html: {:?}, {} bytes", start.elapsed(), html.len());
}
