//! The terminal rendering of a [`DiffReport`].

use std::fmt::Write;

use vramscope_analysis::{DiffGroup, DiffTotals, SiteDelta};

use super::{sizes_text, DiffReport};
use vramscope_text::units::{bytes, count, signed_bytes};

/// Callers shown after a group's site, to tell apart stacks that share it.
const CALLERS: usize = 2;

/// Render a diff for a terminal.
pub fn diff_text(r: &DiffReport) -> String {
    let mut o = String::new();
    let d = &r.diff;
    let t = &d.totals;
    let _ = writeln!(o, "A  {}", r.a.describe());
    let _ = writeln!(o, "B  {}", r.b.describe());
    let _ = writeln!(o);
    totals(&mut o, t);
    if d.is_empty() {
        let _ = writeln!(
            o,
            "\nNo difference: every block alive in B has a block of the same size from the same stack in A, and the other way round."
        );
    } else {
        groups(
            &mut o,
            "Alive in B and not in A (grown), by stack",
            '+',
            &d.grown,
            t.grown_stacks,
        );
        groups(
            &mut o,
            "Alive in A and not in B (shrunk), by stack",
            '-',
            &d.shrunk,
            t.shrunk_stacks,
        );
        let _ = writeln!(
            o,
            "\nBy allocation site, all blocks{}",
            shown(d.by_site.len(), t.sites)
        );
        sites(&mut o, &d.by_site);
    }
    if let Some(p) = &r.peak_to_peak {
        let _ = writeln!(o, "\nPeak to peak");
        let _ = writeln!(o, "  A peak {} at {}", bytes(p.totals.a_bytes), p.a.moment);
        let _ = writeln!(o, "  B peak {} at {}", bytes(p.totals.b_bytes), p.b.moment);
        let _ = writeln!(o, "  change {}", signed_bytes(p.totals.delta as f64));
        if p.by_site.iter().all(|s| s.delta == 0) {
            let _ = writeln!(
                o,
                "  Every allocation site holds the same bytes at both peaks."
            );
        } else {
            let _ = writeln!(
                o,
                "\n  By allocation site at the peaks{}",
                shown(p.by_site.len(), p.totals.sites)
            );
            sites(&mut o, &p.by_site);
        }
    }
    o
}

/// ` (top 20 of 31)` when a list was cut.
fn shown(listed: usize, total: u64) -> String {
    if (listed as u64) < total {
        format!(" (top {listed} of {})", count(total))
    } else {
        String::new()
    }
}

fn blocks(n: u64) -> String {
    format!("{} {}", count(n), if n == 1 { "block" } else { "blocks" })
}

fn totals(o: &mut String, t: &DiffTotals) {
    let _ = writeln!(
        o,
        "  Allocated   A {} in {}   B {} in {}   change {}",
        bytes(t.a_bytes),
        blocks(t.a_blocks),
        bytes(t.b_bytes),
        blocks(t.b_blocks),
        signed_bytes(t.delta as f64)
    );
    let _ = writeln!(
        o,
        "  Matched     {} in {} (same stack and size in A and B)",
        bytes(t.matched_bytes),
        blocks(t.matched_blocks)
    );
    let stacks = |n: u64| format!("{} {}", count(n), if n == 1 { "stack" } else { "stacks" });
    let _ = writeln!(
        o,
        "  Only in B   {} in {} from {}",
        bytes(t.grown_bytes),
        blocks(t.grown_blocks),
        stacks(t.grown_stacks)
    );
    let _ = writeln!(
        o,
        "  Only in A   {} in {} from {}",
        bytes(t.shrunk_bytes),
        blocks(t.shrunk_blocks),
        stacks(t.shrunk_stacks)
    );
}

/// The frames that called the site, outermost last, as one line. Below a
/// Python site, native frames (the interpreter) are left out.
fn callers(g: &DiffGroup) -> Option<String> {
    let at = g.stack.iter().position(|l| *l == g.site)?;
    let native = |l: &str| l.ends_with(" (C++)");
    let skip_native = !native(&g.site);
    let mut outer = g.stack[at + 1..]
        .iter()
        .filter(|l| !(skip_native && native(l)));
    let rest: Vec<String> = outer.by_ref().take(CALLERS).map(|l| short(l)).collect();
    if rest.is_empty() {
        return None;
    }
    let more = if outer.next().is_some() {
        " ← …"
    } else {
        ""
    };
    Some(format!("called from {}{more}", rest.join(" ← ")))
}

/// `/home/u/model.py:39 in forward` → `forward (model.py:39)`; C++ frames
/// cut to a readable length.
fn short(line: &str) -> String {
    const MAX: usize = 60;
    if let Some((loc, name)) = line.rsplit_once(" in ") {
        if let Some((path, no)) = loc.rsplit_once(':') {
            if no.bytes().all(|c| c.is_ascii_digit()) {
                let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
                return format!("{name} ({base}:{no})");
            }
        }
    }
    if line.chars().count() > MAX {
        let mut cut: String = line.chars().take(MAX - 1).collect();
        cut.push('…');
        return cut;
    }
    line.to_owned()
}

fn groups(o: &mut String, title: &str, sign: char, v: &[DiffGroup], total: u64) {
    let _ = writeln!(o, "\n{title}{}", shown(v.len(), total));
    if v.is_empty() {
        if total == 0 {
            let _ = writeln!(o, "  (none)");
        }
        return;
    }
    let _ = writeln!(o, "  {:>12}  {:>7}  site", "bytes", "blocks");
    for g in v {
        let _ = writeln!(
            o,
            "  {:>12}  {:>7}  {}",
            format!("{sign}{}", bytes(g.bytes)),
            count(g.count),
            g.site
        );
        let pad = " ".repeat(25);
        let _ = writeln!(o, "{pad}{}", sizes_text(g));
        if let Some(c) = callers(g) {
            let _ = writeln!(o, "{pad}{c}");
        }
    }
}

fn sites(o: &mut String, v: &[SiteDelta]) {
    let _ = writeln!(o, "  {:>12}  {:>12}  {:>12}  site", "A", "B", "change");
    for s in v {
        let _ = writeln!(
            o,
            "  {:>12}  {:>12}  {:>12}  {}",
            bytes(s.a_bytes),
            bytes(s.b_bytes),
            signed_bytes(s.delta as f64),
            s.site
        );
    }
}
