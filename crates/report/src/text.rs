//! The terminal rendering of a [`Summary`]: readable at a glance, sizes in
//! binary units, the peak and any OOM explained with the sites that held memory.

use std::fmt::Write;

use vramscope_analysis::categories::Source;
use vramscope_analysis::{Category, CategoryTotal, DeviceSummary, Site, Summary};

use vramscope_text::units::{bytes, count, duration_us, timestamp_us};

/// Render a summary for a terminal. `name` labels the input (a file name).
pub fn summary_text(s: &Summary, name: &str) -> String {
    let mut o = String::new();
    let src = &s.source;
    let enc = match src.pickle_protocol {
        Some(p) => format!("{} protocol {p}", src.encoding),
        None => src.encoding.clone(),
    };
    let comp = if src.compression == "none" {
        String::new()
    } else {
        format!(", {}", src.compression)
    };
    let legacy = if src.legacy_blocks {
        ", PyTorch 2.0 layout"
    } else {
        ""
    };
    let _ = writeln!(
        o,
        "{name}  ({}, {enc}{comp}{legacy})",
        bytes(src.file_bytes)
    );
    if s.devices.is_empty() {
        let _ = writeln!(o, "\n  No device has segments or events in this snapshot.");
    }
    for d in &s.devices {
        device(&mut o, d);
    }
    if let Some(settings) = &s.allocator_settings {
        let mut parts = Vec::new();
        for (k, v) in settings {
            let shown = match v {
                serde_json::Value::String(x) if x.is_empty() => continue,
                serde_json::Value::String(x) => x.clone(),
                serde_json::Value::Object(m) if m.values().all(|x| x == &serde_json::json!(0)) => {
                    continue
                }
                other => other.to_string(),
            };
            parts.push(format!("{k}={shown}"));
        }
        if !parts.is_empty() {
            let _ = writeln!(o, "\nAllocator settings  {}", parts.join("  "));
        }
    }
    if !s.annotations.is_empty() {
        // `ProfilerStep#1`, `ProfilerStep#2`, ... read better as one line.
        let mut grouped: std::collections::BTreeMap<&str, u64> = Default::default();
        for (k, n) in &s.annotations {
            let base = match k.rsplit_once('#') {
                Some((b, num)) if !num.is_empty() && num.bytes().all(|c| c.is_ascii_digit()) => b,
                _ => k.as_str(),
            };
            *grouped.entry(base).or_insert(0) += n;
        }
        let mut v: Vec<_> = grouped.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = v.iter().take(6).map(|(k, n)| format!("{k} ×{n}")).collect();
        let more = if v.len() > 6 {
            format!(" (+{} more)", v.len() - 6)
        } else {
            String::new()
        };
        let _ = writeln!(o, "Annotations         {}{more}", shown.join(", "));
    }
    for w in &src.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    for sk in &src.skipped {
        let _ = writeln!(o, "skipped: {sk}");
    }
    o
}

fn device(o: &mut String, d: &DeviceSummary) {
    let e = &d.end;
    let named = if d.name == format!("device {}", d.device) {
        String::new()
    } else {
        format!(" ({})", d.name)
    };
    let _ = writeln!(o, "\nDevice {}{named} {}", d.device, "─".repeat(60));
    for w in &d.inconsistencies {
        let _ = writeln!(o, "  ! {w}");
    }
    let _ = writeln!(
        o,
        "  At the end      reserved {}   allocated {}   active {}",
        bytes(e.reserved_bytes),
        bytes(e.allocated_bytes),
        bytes(e.active_bytes)
    );
    let p = &d.peak;
    let when = match p.event_index {
        Some(i) => {
            let t = match (p.time_us, d.events.first_time_us) {
                (Some(t), Some(t0)) => format!(" (+{}, {})", duration_us(t - t0), timestamp_us(t)),
                _ => String::new(),
            };
            format!("at event {}{t}", count(i))
        }
        None => "at the start of the trace".into(),
    };
    let _ = writeln!(
        o,
        "  Peak allocated  {} {when}; reserved peaked at {}",
        bytes(p.allocated_bytes),
        bytes(d.peak_reserved_bytes)
    );
    if let Some(s) = p.evaluation_sentence() {
        let _ = writeln!(o, "                  {s}");
    }
    if let Some(s) = &p.setup {
        let _ = writeln!(o, "                  {}", s.sentence());
    }
    if p.before_window_bytes > 0 {
        let _ = writeln!(
            o,
            "                  {} was allocated before the trace window (counted from its start)",
            bytes(p.before_window_bytes)
        );
    }
    let ev = &d.events;
    let span = ev
        .span_us
        .map(|s| format!(" over {}", duration_us(s)))
        .unwrap_or_default();
    // Lifecycle order (alloc before frees) reads better than alphabetical.
    let actions: Vec<String> = vramscope_snapshot::Action::ALL
        .iter()
        .filter_map(|a| {
            ev.by_action
                .get(a.as_str())
                .map(|v| format!("{} {}", a.as_str(), count(*v)))
        })
        .collect();
    if actions.is_empty() {
        let _ = writeln!(o, "  Events          none in the trace");
    } else {
        let _ = writeln!(
            o,
            "  Events          {}{span}: {}",
            count(ev.total),
            actions.join(" · ")
        );
    }
    if ev.total > 0 && ev.with_stack == 0 {
        let _ = writeln!(
            o,
            "                  no stacks recorded (record with context=\"all\" for stacks)"
        );
    }
    if let Some(c) = &d.device_counter {
        let missed = c
            .counter_allocated_bytes
            .saturating_sub(c.recorded_allocated_bytes);
        let share = missed as f64 / c.counter_allocated_bytes.max(1) as f64 * 100.0;
        let _ = writeln!(
            o,
            "  Device counter  allocated {}, reserved {} by the device allocator's own count at its last reading; \
             recorded {} then: {} ({share:.1}%) not in a tensor the recorder saw",
            bytes(c.counter_allocated_bytes),
            bytes(c.counter_reserved_bytes),
            bytes(c.recorded_allocated_bytes),
            bytes(missed),
        );
    }
    let sc = &e.segments;
    let mut kinds = vec![
        format!("{} large", count(sc.large)),
        format!("{} small", count(sc.small)),
    ];
    if sc.expandable > 0 {
        kinds.push(format!("{} expandable", count(sc.expandable)));
    }
    if sc.private_pool > 0 {
        kinds.push(format!("{} in private pools", count(sc.private_pool)));
    }
    let f = &e.fragmentation;
    if d.caching_allocator {
        let _ = writeln!(
            o,
            "  Segments        {} ({}), {} blocks",
            count(sc.total),
            kinds.join(", "),
            count(sc.blocks)
        );
        let _ = writeln!(
            o,
            "  Cached free     {} in {} blocks; largest free block {} (fragmentation {:.0}%)",
            bytes(f.cached_free_bytes),
            count(f.free_blocks),
            bytes(f.largest_free_block),
            f.fragmentation_ratio * 100.0
        );
        let _ = writeln!(
            o,
            "                  rounding waste {}, pending free {}, {} segment(s) with nothing allocated",
            bytes(f.rounding_waste_bytes),
            bytes(f.pending_free_bytes),
            count(f.empty_segments)
        );
    } else {
        let _ = writeln!(
            o,
            "  Allocator       none: each tensor is its own allocation ({} at the end), so reserved is allocated and nothing is cached or fragmented",
            count(sc.blocks)
        );
    }
    if let Some(l) = &d.ledger {
        ledger(o, l);
    }
    categories(
        o,
        "What it is      at the peak:",
        &p.by_category,
        p.allocated_bytes,
    );
    if d.peak.event_index.is_some() {
        categories(
            o,
            "                at the end: ",
            &d.end_by_category,
            d.end_trace_bytes,
        );
    }
    if let Some(src) = label_sources(&p.by_category, &d.end_by_category) {
        let _ = writeln!(o, "                  ({src})");
    }
    sites(
        o,
        "Alive at the peak, by allocation site",
        &p.top_sites,
        p.allocated_bytes,
    );
    // When the trace ends with an OOM, its holders are the end state: say it once.
    let end_is_last_oom = d
        .ooms
        .last()
        .is_some_and(|o| o.top_holders == d.end_top_sites);
    if d.peak.event_index.is_some() && !d.end_top_sites.is_empty() && !end_is_last_oom {
        sites(
            o,
            "Alive at the end, by allocation site",
            &d.end_top_sites,
            d.end_trace_bytes,
        );
    }
    for oom in &d.ooms {
        let t = match (oom.time_us, ev.first_time_us) {
            (Some(t), Some(t0)) => format!(" (+{})", duration_us(t - t0)),
            _ => String::new(),
        };
        let free = oom
            .device_free_bytes
            .map(|b| format!(", {} free on the device", bytes(b)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "\n  OUT OF MEMORY at event {}{t}: requested {}{free}",
            count(oom.event_index),
            bytes(oom.requested_bytes)
        );
        let _ = writeln!(
            o,
            "                  allocated {}, reserved {} ({} cached but unallocated)",
            bytes(oom.allocated_bytes),
            bytes(oom.reserved_bytes),
            bytes(oom.reserved_bytes.saturating_sub(oom.allocated_bytes))
        );
        let _ = writeln!(o, "  Why           {}", oom.cause);
        categories(o, "What held it   ", &oom.by_category, oom.allocated_bytes);
        if !oom.top_holders.is_empty() {
            sites(
                o,
                "Biggest holders at the OOM",
                &oom.top_holders,
                oom.allocated_bytes,
            );
        }
    }
}

/// One line of bytes per category, largest first, unknown last.
fn categories(o: &mut String, title: &str, cats: &[CategoryTotal], total: u64) {
    if cats.is_empty() {
        return;
    }
    let share = |b: u64| {
        if total > 0 {
            format!(" ({:.0}%)", b as f64 * 100.0 / total as f64)
        } else {
            String::new()
        }
    };
    let known = cats.iter().filter(|c| c.category != Category::Unknown);
    let unknown = cats.iter().filter(|c| c.category == Category::Unknown);
    let parts: Vec<String> = known
        .chain(unknown)
        .map(|c| {
            format!(
                "{} {}{}",
                c.category.label(),
                bytes(c.bytes),
                share(c.bytes)
            )
        })
        .collect();
    let _ = writeln!(o, "  {title} {}", parts.join(" · "));
}

/// Where the labels came from, when anything was labelled.
fn label_sources(a: &[CategoryTotal], b: &[CategoryTotal]) -> Option<String> {
    let mut srcs: Vec<Source> = a.iter().chain(b).filter_map(|c| c.source).collect();
    srcs.sort();
    srcs.dedup();
    let words: Vec<&str> = srcs
        .iter()
        .map(|s| match s {
            Source::Recorder => "tagged by vramscope's recorder",
            Source::Profiler => "labelled by PyTorch's Memory Profiler",
            Source::Inferred => "inferred from stacks, phases and lifetimes: docs/categories.md",
        })
        .collect();
    (!words.is_empty()).then(|| words.join("; "))
}

fn sites(o: &mut String, title: &str, sites: &[Site], total: u64) {
    if sites.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n  {title}");
    let _ = writeln!(o, "  {:>12} {:>6} {:>8}  site", "bytes", "share", "blocks");
    let share = |b: u64| {
        if total > 0 {
            b as f64 * 100.0 / total as f64
        } else {
            0.0
        }
    };
    for s in sites {
        let _ = writeln!(
            o,
            "  {:>12} {:>5.1}% {:>8}  {}",
            bytes(s.bytes),
            share(s.bytes),
            count(s.count),
            s.site
        );
        for part in &s.within {
            let _ = writeln!(
                o,
                "  {:>12} {:>5.1}% {:>8}    └ {}",
                bytes(part.bytes),
                share(part.bytes),
                count(part.count),
                part.label
            );
        }
    }
}

/// The device ledger: one line a part, its bytes, share and source.
fn ledger(o: &mut String, l: &vramscope_analysis::ledger::DeviceLedger) {
    use vramscope_analysis::ledger::Source;
    let _ = writeln!(
        o,
        "  Device memory   {} in all at the dump (mem_get_info){}",
        bytes(l.total_bytes),
        if l.adds_up {
            ""
        } else {
            "; the parts do not add up"
        }
    );
    let width = l
        .parts
        .iter()
        .map(|p| p.label.chars().count())
        .max()
        .unwrap_or(0);
    for p in &l.parts {
        let source = match p.source {
            Source::Measured => "measured",
            Source::ReportedByPytorch => "PyTorch",
            Source::Inferred => "inferred",
        };
        let segs = p
            .segments
            .map(|n| format!(", {} segment{}", count(n), if n == 1 { "" } else { "s" }))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "                  {:<width$}  {:>11} {:>5.1}%  {source}: {}{segs}",
            p.label,
            bytes(p.bytes),
            p.bytes as f64 / l.total_bytes.max(1) as f64 * 100.0,
            p.how,
        );
    }
    if let Some(h) = l.host_pinned_bytes.filter(|&h| h > 0) {
        let _ = writeln!(
            o,
            "                  (and {} of pinned host memory in PyTorch's host allocator: host RAM, not the device's)",
            bytes(h)
        );
    }
    for n in &l.notes {
        let _ = writeln!(o, "                  {n}");
    }
}
