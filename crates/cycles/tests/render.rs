mod common;

use common::Builder;
use vramscope_cycles::{analyze, finding_dot, layout, report_html, report_text, CycleOptions};

/// A finding whose strings try to break out of HTML, SVG and DOT.
fn hostile() -> vramscope_cycles::CycleReport {
    let mut b = Builder::new();
    let x = b.obj(
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(2)> \"q\" \\ 'a' & \u{1}",
    );
    let y = b.obj("Node", "{\"}\\n\" } {");
    let t = b.tensor();
    b.edge(x, y, ".a\"b</text>");
    b.edge(y, x, "['}\"{']");
    b.edge(x, t, ".value");
    b.g.site = Some("<b>site</b>".into());
    analyze(&b.g, &CycleOptions::default())
}

#[test]
fn html_is_self_contained_and_escaped() {
    let r = hostile();
    let html = report_html(&r, "cycles <of> \"run\"");
    assert!(!html.contains("<script"), "a script tag in the page");
    assert!(html.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
    ));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("<img"));
    assert!(!html.contains("<b>site"));
    assert!(html.contains("<title>cycles &lt;of&gt; &quot;run&quot;</title>"));
    assert!(!html.contains('\u{1}'));
    for banned in ["http://", "https://", "url(", "@import"] {
        let outside_svg_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(!outside_svg_ns.contains(banned), "{banned} in the page");
    }
    // Tensor nodes: class and red fill; hover shows dtype and the stack.
    assert!(html.contains("<g class=\"node tensor\"><title>torch.Tensor\nshape [512, 10]\ndtype torch.float32\ndevice cuda:0\n20.00 KiB (20,480 bytes)"));
    assert!(html.contains("fill=\"#dc2626\""));
    assert!(html.contains("train.py:12 in step"));
    // The closing edge is marked, and the steps table is there.
    assert!(html.contains("class=\"edge cycle closing\""));
    assert!(html.contains("<table class=\"steps\">"));
    assert_eq!(html.matches("<svg").count(), 1);
    assert_eq!(html.matches("</svg>").count(), 1);
}

#[test]
fn html_of_nothing() {
    let r = analyze(&Builder::new().g, &CycleOptions::default());
    let html = report_html(&r, "t");
    assert!(html.contains("No reference cycle holds a tensor"));
    assert!(report_text(&r).starts_with("No reference cycle holds a tensor"));
}

/// Braces outside quoted strings balance; every string is closed.
fn check_dot(dot: &str) {
    let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
    for c in dot.chars() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                (false, '\n') => panic!("raw line break in a string:\n{dot}"),
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                assert!(depth >= 0, "unbalanced braces:\n{dot}");
            }
            _ => {}
        }
    }
    assert!(!in_str && depth == 0, "unbalanced:\n{dot}");
}

#[test]
fn dot_is_well_formed() {
    let r = hostile();
    let dot = finding_dot(&r.findings[0]);
    check_dot(&dot);
    assert!(dot.starts_with("digraph cycle {"));
    assert!(dot.contains("fillcolor=\"#dc2626\""));
    assert!(dot.contains("style=bold"));
    assert!(dot.contains("label=\".a\\\"b</text>\""));
    let mut b = Builder::new();
    b.node_pair(false);
    let r = analyze(&b.g, &CycleOptions::default());
    let dot = finding_dot(&r.findings[0]);
    check_dot(&dot);
    assert_eq!(dot.matches(" -> ").count(), 4);
    assert_eq!(dot.matches("style=bold").count(), 1);
}

#[test]
fn text_summary() {
    let mut b = Builder::new();
    b.node_pair(false);
    b.node_pair(false);
    let r = analyze(&b.g, &CycleOptions::default());
    let t = report_text(&r);
    println!("{t}");
    assert!(
        t.starts_with("Reference cycles hold 4 tensors (80.00 KiB): 1 shape in 2 garbage groups")
    );
    assert!(
        t.contains("2× 80.00 KiB  Node —.other→ Node —.other→ (cycle) holds 2 tensors, 40.00 KiB")
    );
    assert!(t.contains("closes with Node.other → Node"));
}

#[test]
fn layout_has_no_overlaps() {
    let mut b = Builder::new();
    b.node_pair(false);
    b.node_pair(true);
    // A 5-cycle with a second cycle hanging off it, a star of tensors,
    // a self-loop and a 25-cycle.
    let ring: Vec<usize> = (0..5)
        .map(|i| b.obj("Layer", &format!("<Layer {i}>")))
        .collect();
    for i in 0..5 {
        b.edge(ring[i], ring[(i + 1) % 5], ".next");
    }
    let (p, q) = (b.obj("Opt", "o"), b.obj("State", "s"));
    b.edge(ring[0], p, ".opt");
    b.edge(p, q, ".state");
    b.edge(q, p, ".owner");
    let t = b.tensor();
    b.edge(q, t, "['exp_avg']");
    let d = b.builtin("dict");
    b.edge(ring[2], d, "__dict__");
    for k in 0..10 {
        let t = b.tensor_of(&[k + 1], 4);
        b.edge(d, t, &format!("['w{k}']"));
    }
    let s = b.builtin("dict");
    b.edge(s, s, "['self']");
    let t = b.tensor();
    b.edge(s, t, "['x']");
    let long: Vec<usize> = (0..25).map(|i| b.obj("Link", &format!("{i}"))).collect();
    for i in 0..25 {
        b.edge(long[i], long[(i + 1) % 25], ".next");
    }
    let t = b.tensor();
    b.edge(long[7], t, ".v");
    let r = analyze(&b.g, &CycleOptions::default());
    assert_eq!(r.findings.len(), 5);
    for f in &r.findings {
        let l = layout(&f.example);
        assert_eq!(l.nodes.len(), f.example.nodes.len());
        assert_eq!(l.edges.len(), f.example.edges.len());
        for (i, a) in l.nodes.iter().enumerate() {
            assert!(
                a.x - a.w / 2.0 >= 0.0 && a.x + a.w / 2.0 <= l.width,
                "{}",
                f.title
            );
            assert!(
                a.y - a.h / 2.0 >= 0.0 && a.y + a.h / 2.0 <= l.height,
                "{}",
                f.title
            );
            for c in &l.nodes[i + 1..] {
                let apart = (a.x - c.x).abs() >= (a.w + c.w) / 2.0
                    || (a.y - c.y).abs() >= (a.h + c.h) / 2.0;
                assert!(apart, "overlap in {}: {a:?} {c:?}", f.title);
            }
        }
    }
    let html = report_html(&r, "t");
    assert_eq!(html.matches("<svg").count(), 5);
}
