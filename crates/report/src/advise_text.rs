//! `vramscope advise` as text: the answer first, then the changes ranked,
//! each with its predicted peak, how it was predicted and the code to write;
//! then the changes not offered and why.

use std::fmt::Write;

use vramscope_advise::{Advice, Advising, Method};
use vramscope_text::units::{bytes, signed_bytes};

fn verdict(a: &Advice) -> &'static str {
    match a.fits {
        Some(true) => "fits",
        Some(false) => "does not fit",
        None => "cannot tell",
    }
}

/// The advice for `name` as a terminal listing.
pub fn advise_text(a: &Advising, name: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{name} · device {} · what to change", a.device);
    match a.capacity {
        Some(c) => {
            let from = a
                .capacity_from
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default();
            let _ = writeln!(o, "device memory for PyTorch: {}{from}", bytes(c));
        }
        None => {
            let _ = writeln!(
                o,
                "device memory: not known (give --capacity or --gpu to know what fits)"
            );
        }
    }
    if let Some(r) = a.oom_request {
        let at = a
            .oom_site
            .as_ref()
            .map(|s| format!(" at {s}"))
            .unwrap_or_default();
        let _ = writeln!(o, "the run ran out of memory asking for {}{at}", bytes(r));
    }
    let _ = writeln!(o, "\n{}\n", a.answer);
    let b = &a.baseline;
    // Without a caching allocator the peak is allocated memory: one figure.
    let peak = |x: &Advice| match (x.fits == Some(false), a.caching_allocator) {
        (true, true) => "would reserve, without a limit,",
        (true, false) => "would allocate, without a limit,",
        (false, true) => "peak reserved",
        (false, false) => "peak allocated",
    };
    let allocated = if a.caching_allocator {
        format!(", {} allocated", bytes(b.peak_allocated))
    } else {
        " (no caching allocator: reserved is allocated)".to_owned()
    };
    let _ = writeln!(
        o,
        "as recorded: {} {}{allocated}{} ({})",
        peak(b),
        bytes(b.peak_reserved),
        if a.capacity.is_some() {
            format!(", {}", verdict(b))
        } else {
            String::new()
        },
        b.method.as_str()
    );
    for (i, x) in a.advice.iter().enumerate() {
        let _ = writeln!(o, "\n{:>2}. {}", i + 1, x.change);
        // A bound is the least the peak can be, so the most it saves.
        let (least, most) = match x.method {
            Method::Bound => (" at least", "at most "),
            _ => ("", ""),
        };
        let _ = writeln!(
            o,
            "    {}{least} {} ({most}{} against as recorded){}; {}",
            peak(x),
            bytes(x.peak_reserved),
            signed_bytes(-(x.saving as f64)),
            if a.capacity.is_some() {
                format!(", {}", verdict(x))
            } else {
                String::new()
            },
            x.method.as_str()
        );
        if x.acts_on_bytes > 0 {
            let _ = writeln!(
                o,
                "    acts on {} block{} ({} allocated over the trace)",
                x.acts_on_blocks,
                if x.acts_on_blocks == 1 { "" } else { "s" },
                bytes(x.acts_on_bytes)
            );
        }
        let _ = writeln!(o, "    how: {}", x.how);
        for line in x.code.lines() {
            let _ = writeln!(o, "    | {line}");
        }
    }
    if !a.no_gain.is_empty() {
        let _ = writeln!(o, "\ntried, lowers the peak by 0.1% or less here:");
        for x in &a.no_gain {
            let _ = writeln!(
                o,
                "  {}: {} {} ({} against as recorded; {})",
                x.change,
                peak(x),
                bytes(x.peak_reserved),
                signed_bytes(-(x.saving as f64)),
                x.method.as_str()
            );
        }
    }
    if !a.not_offered.is_empty() {
        let _ = writeln!(o, "\nnot offered:");
        for n in &a.not_offered {
            let _ = writeln!(o, "  {}: {}", n.change, n.why);
        }
    }
    o
}
