//! The differential flamegraph: a [`DiffNode`] tree (A and B merged frame
//! by frame, `vramscope_analysis::flame::diff_tree`) drawn by the one
//! renderer, red where B holds more, blue where it holds less, the deeper
//! the colour the larger the change.

use vramscope_analysis::flame::DiffNode;

use crate::flame_svg::{draw, Chart};
use vramscope_text::units::signed_bytes;
use vramscope_text::units::{bytes, count};

/// How the differential SVG is drawn.
#[derive(Clone, Debug)]
pub struct DiffSvgOptions {
    /// Image width in pixels. Default 1200.
    pub width: u32,
    /// Headline. Default `Differential memory flamegraph`.
    pub title: Option<String>,
    /// Second line. Default: the totals of A and B and the change.
    pub subtitle: Option<String>,
    /// Frames narrower than this are not drawn. Default 0.1.
    pub min_width_px: f64,
}

impl Default for DiffSvgOptions {
    fn default() -> Self {
        DiffSvgOptions {
            width: 1200,
            title: None,
            subtitle: None,
            min_width_px: 0.1,
        }
    }
}

/// Red for growth, blue for shrinkage, grey when unchanged; `t` in 0..=1
/// is the size of the change relative to the largest one.
fn colour(delta: i64, t: f64) -> String {
    if delta == 0 {
        return "rgb(221,221,214)".into();
    }
    let fade = (232.0 - 172.0 * t.clamp(0.0, 1.0)) as u8;
    if delta > 0 {
        format!("rgb(250,{fade},{fade})")
    } else {
        format!("rgb({fade},{fade},250)")
    }
}

fn blocks(n: u64) -> String {
    format!("{} {}", count(n), if n == 1 { "block" } else { "blocks" })
}

/// Draw `tree` as a standalone SVG document (hover a frame for A, B and
/// the change). The root element has class `vramscope-diff`, and its style
/// rules are scoped to it, so the SVG can also be inlined in a page.
pub fn diff_svg(tree: &DiffNode, opts: &DiffSvgOptions) -> String {
    let mut max_change = 0u64;
    tree.walk(&mut |n, _| max_change = max_change.max(n.delta().unsigned_abs()));
    let max_change = max_change as f64;
    let title = opts
        .title
        .as_deref()
        .unwrap_or("Differential memory flamegraph");
    let totals = format!(
        "A {} → B {} (change {}); width: the larger of A and B",
        bytes(tree.a_bytes),
        bytes(tree.b_bytes),
        signed_bytes(tree.delta() as f64)
    );
    let legend: Vec<(String, &str)> = [(1, "more in B"), (-1, "less in B"), (0, "unchanged")]
        .into_iter()
        .map(|(delta, text)| (colour(delta, 0.6), text))
        .collect();
    let chart = Chart {
        width: opts.width,
        min_width_px: opts.min_width_px,
        inverted: false,
        class: Some("vramscope-diff"),
        title,
        subtitle: opts.subtitle.as_deref().unwrap_or(&totals),
        fit_subtitle: true,
        empty: "Nothing is allocated in A or in B.",
        legend: &legend,
    };
    draw(
        tree,
        &chart,
        |n| {
            let d = n.delta();
            let t = if max_change > 0.0 {
                (d.unsigned_abs() as f64 / max_change).sqrt()
            } else {
                0.0
            };
            colour(d, t)
        },
        |n| {
            format!(
                "{} — A {} in {}, B {} in {}, change {}",
                n.label,
                bytes(n.a_bytes),
                blocks(n.a_count),
                bytes(n.b_bytes),
                blocks(n.b_count),
                signed_bytes(n.delta() as f64)
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_analysis::flame::{merge_trees, FlameNode, FrameKind};

    fn node(label: &str, bytes: u64, children: Vec<FlameNode>) -> FlameNode {
        FlameNode {
            name: label.to_owned(),
            label: label.to_owned(),
            kind: FrameKind::User,
            bytes,
            count: 1,
            children,
        }
    }

    #[test]
    fn growth_is_red_shrinkage_blue_and_no_change_grey() {
        // A: all → f → g; B: all → f → h (the tree itself is checked in
        // vramscope_analysis::flame).
        let a = node("all", 10, vec![node("f", 10, vec![node("g", 10, vec![])])]);
        let b = node("all", 10, vec![node("f", 10, vec![node("h", 10, vec![])])]);
        let svg = diff_svg(&merge_trees(&a, &b), &DiffSvgOptions::default());
        assert!(svg.contains(&colour(-10, 1.0)) && svg.contains(&colour(10, 1.0)));
        // The same tree on both sides: nothing red or blue.
        let same = diff_svg(&merge_trees(&a, &a), &DiffSvgOptions::default());
        let grey = format!("fill=\"{}\"", colour(0, 0.0));
        let frames: Vec<&str> = same.split("<g><title>").skip(1).collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|g| g.contains(&grey)), "{same}");
        assert!(same.contains("change 0 B"));
    }
}
