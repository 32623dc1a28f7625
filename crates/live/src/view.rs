//! The `vramscope live` screen as lines of text: a pure function of the
//! latest state, the samples kept, the terminal size and what the user
//! selected, so that it is tested without a terminal and printed as
//! plain text where there is none.
//!
//! Top to bottom: the process and its numbers; the curve of allocated and
//! reserved with the iteration boundaries under it; the bytes per
//! category as one bar; the largest holders (the selected one marked
//! `>`, its stack under it when expanded); the latest OOMs and dumps; the
//! keys.

use vramscope_text::units::{bytes, signed_bytes};

use crate::curve::{draw, History};
use crate::state::State;

/// How a line is shown in a terminal; plain output ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Normal,
    Title,
    Selected,
    Dim,
    Alert,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub text: String,
    pub style: Style,
}

/// What the user chose on the screen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UiState {
    /// Index into the state's `top`.
    pub selected: usize,
    /// Whether the selected holder's stack is shown.
    pub expanded: bool,
    /// First line of the holders table shown (kept by [`render`] so the
    /// selection stays visible).
    pub scroll: usize,
    pub paused: bool,
    /// A message above everything, e.g. that the process ended.
    pub status: Option<String>,
    /// Show the keys at the bottom (a terminal, not plain output).
    pub keys: bool,
}

impl UiState {
    /// A new state arrived: keep the same site selected even if it moved
    /// in the ranking, and the index within the new list.
    pub fn follow(&mut self, old: Option<&State>, new: &State) {
        let site = old.and_then(|o| o.top.get(self.selected)).map(|h| &h.site);
        if let Some(i) = site.and_then(|s| new.top.iter().position(|h| &h.site == s)) {
            self.selected = i;
        }
        self.selected = self.selected.min(new.top.len().saturating_sub(1));
    }

    pub fn down(&mut self, n_holders: usize) {
        self.selected = (self.selected + 1).min(n_holders.saturating_sub(1));
    }

    pub fn up(&mut self) {
        self.selected = self.selected.saturating_sub(1);
    }
}

/// A rendered screen; `scroll` is the table's first line, to keep in the
/// [`UiState`] for the next frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub lines: Vec<Line>,
    pub scroll: usize,
}

impl Frame {
    /// The lines as text, without styles or trailing spaces.
    pub fn to_plain(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            s.push_str(l.text.trim_end());
            s.push('\n');
        }
        s
    }
}

/// The glyphs of the category bar, in the publisher's category order.
const CATEGORY_GLYPHS: [char; 8] = ['█', '▓', '▒', '░', '▞', '▚', '▄', '▀'];

pub const KEYS: &str = "q quit · ↑↓/jk select · enter/→ stack · ← close · p pause";

/// Render the screen at `size` = (columns, rows).
pub fn render(s: &State, history: &History, size: (usize, usize), ui: &UiState) -> Frame {
    let (w, h) = (size.0.max(20), size.1.max(10));
    let mut out: Vec<Line> = Vec::new();
    let push = |out: &mut Vec<Line>, text: String, style: Style| {
        out.push(Line {
            text: truncate(&text, w),
            style,
        });
    };
    if let Some(st) = &ui.status {
        push(&mut out, st.clone(), Style::Alert);
    }
    for (text, style) in header(s, ui) {
        push(&mut out, text, style);
    }

    let events = events(s);
    let shown_events = events.len().min(4);
    // Fixed lines: the curve's title, marks and labels, the category bar
    // and legend, the table's header, the events and the keys.
    let fixed = out.len() + 3 + 2 + 1 + shown_events + usize::from(ui.keys);
    let room = h.saturating_sub(fixed);
    let curve_rows = (room * 2 / 5).clamp(2, 16);
    let table_rows = room.saturating_sub(curve_rows).max(1);

    let plot = draw(history, &s.iterations, w, curve_rows);
    let title = format!(
        "⣿ allocated, ⠁ reserved · over {} · top {} · ┴ iteration ends",
        duration(history.span_us().max(0) as u64),
        bytes(plot.scale_top)
    );
    push(&mut out, title, Style::Dim);
    for r in plot.rows {
        push(&mut out, r, Style::Normal);
    }
    push(&mut out, plot.marks, Style::Dim);
    push(&mut out, plot.labels, Style::Dim);

    let (bar, legend) = category_bar(s, w);
    push(&mut out, bar, Style::Normal);
    push(&mut out, legend, Style::Normal);

    push(
        &mut out,
        format!("  {:>10}  {:>7}  largest holders (site)", "bytes", "blocks"),
        Style::Title,
    );
    let (table, scroll) = holders(s, ui, table_rows);
    for (text, style) in table {
        push(&mut out, text, style);
    }
    for e in events.into_iter().take(shown_events) {
        push(&mut out, e, Style::Alert);
    }
    if ui.keys {
        push(&mut out, KEYS.to_string(), Style::Dim);
    }
    out.truncate(h);
    Frame { lines: out, scroll }
}

fn header(s: &State, ui: &UiState) -> Vec<(String, Style)> {
    let mut title = format!("vramscope live · pid {}", s.pid);
    if !s.host.is_empty() {
        title.push_str(&format!(" on {}", s.host));
    }
    title.push_str(&format!(" · rank {}/{}", s.rank, s.world_size));
    for part in [&s.device, &s.recorder] {
        if !part.is_empty() {
            title.push_str(&format!(" · {part}"));
        }
    }
    title.push_str(&format!(
        " · iteration {} ({} done)",
        s.iteration + 1,
        s.iteration
    ));
    if ui.paused {
        title.push_str("  [paused]");
    }

    let mut sizes = format!(
        "allocated {} · reserved {}",
        bytes(s.allocated),
        bytes(s.reserved)
    );
    match (s.capacity, s.used_fraction()) {
        (Some(c), Some(f)) => sizes.push_str(&format!(
            " · capacity {} ({:.1}% reserved)",
            bytes(c),
            f * 100.0
        )),
        _ => sizes.push_str(" · capacity unknown"),
    }
    if let Some(o) = s.outside_pytorch() {
        sizes.push_str(&format!(" · {} outside PyTorch", bytes(o)));
    }

    // The slope over the last `GROWTH_WINDOW` iterations; the window is in
    // the docs, not on a line that must fit 100 columns.
    let growth = match s.growth_per_iteration() {
        Some(g) => format!("growth {}/iteration", signed_bytes(g)),
        None => "growth – (after 2 iterations)".to_string(),
    };
    // Counts of OOMs and dumps are left to their list at the bottom.
    let rate = format!(
        "peak {} ({} reserved) · {growth} · publish cost {} · seq {}",
        bytes(s.peak_allocated),
        bytes(s.peak_reserved),
        duration(s.publish_us),
        s.seq
    );
    vec![
        (title, Style::Title),
        (sizes, Style::Normal),
        (rate, Style::Normal),
    ]
}

/// One bar `w` wide, each category's share of the width by its bytes
/// (largest remainders, so the widths add up), and its legend.
fn category_bar(s: &State, w: usize) -> (String, String) {
    let cats = &s.categories.0;
    let total: u64 = cats.iter().map(|c| c.1).sum();
    if total == 0 {
        return ("·".repeat(w), "categories: none reported".to_string());
    }
    let exact: Vec<f64> = cats
        .iter()
        .map(|c| c.1 as f64 / total as f64 * w as f64)
        .collect();
    let mut cells: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..cats.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let short = w.saturating_sub(cells.iter().sum());
    for &i in order.iter().cycle().take(short) {
        cells[i] += 1;
    }
    let glyph = |i: usize| CATEGORY_GLYPHS[i % CATEGORY_GLYPHS.len()];
    let bar: String = cells
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(glyph(i), n))
        .collect();
    let legend = cats
        .iter()
        .enumerate()
        .filter(|(_, c)| c.1 > 0)
        .map(|(i, (name, b))| format!("{} {name} {}", glyph(i), bytes(*b)))
        .collect::<Vec<_>>()
        .join("  ");
    (bar, legend)
}

/// The table's lines (at most `rows`) and its first line shown.
fn holders(s: &State, ui: &UiState, rows: usize) -> (Vec<(String, Style)>, usize) {
    if s.top.is_empty() {
        return (vec![("  (nothing held)".to_string(), Style::Dim)], 0);
    }
    let sel = ui.selected.min(s.top.len() - 1);
    let mut lines = Vec::new();
    let (mut sel_line, mut sel_end) = (0, 0);
    for (i, hd) in s.top.iter().enumerate() {
        let mark = if i == sel { '>' } else { ' ' };
        let style = if i == sel {
            Style::Selected
        } else {
            Style::Normal
        };
        if i == sel {
            sel_line = lines.len();
        }
        let site = if hd.site.is_empty() {
            "(unknown site)"
        } else {
            &hd.site
        };
        lines.push((
            format!("{mark} {:>10}  {:>7}  {site}", bytes(hd.bytes), hd.blocks),
            style,
        ));
        if i == sel && ui.expanded {
            if hd.stack.is_empty() {
                lines.push(("      (no stack recorded)".to_string(), Style::Dim));
            }
            for f in &hd.stack {
                lines.push((format!("      {f}"), Style::Dim));
            }
        }
        if i == sel {
            sel_end = lines.len();
        }
    }
    // Keep the selected row, and as much of its stack as fits, in view.
    let mut start = ui.scroll.min(lines.len().saturating_sub(1));
    if sel_line < start {
        start = sel_line;
    }
    if sel_end > start + rows {
        start = sel_line.max(sel_end.saturating_sub(rows));
    }
    let shown = lines.into_iter().skip(start).take(rows).collect();
    (shown, start)
}

/// The latest OOMs and dumps, newest first.
fn events(s: &State) -> Vec<String> {
    let mut ev: Vec<(i64, String)> = Vec::new();
    for o in &s.ooms {
        let req = o.requested.map_or("unknown".to_string(), bytes);
        let free = o.device_free.map_or("unknown".to_string(), bytes);
        ev.push((
            o.time_us,
            format!(
                "OOM {}: requested {req}, device free {free}",
                ago(s.time_us, o.time_us)
            ),
        ));
    }
    for d in &s.dumps {
        ev.push((
            d.time_us,
            format!(
                "dump {} ({}): {}",
                ago(s.time_us, d.time_us),
                d.reason,
                d.path
            ),
        ));
    }
    ev.sort_by_key(|e| std::cmp::Reverse(e.0));
    ev.into_iter().map(|e| e.1).collect()
}

fn ago(now_us: i64, then_us: i64) -> String {
    format!("{} ago", duration((now_us - then_us).max(0) as u64))
}

/// `850 µs`, `1.2 ms`, `35 s`, `2m 30s`, `1h 05m`.
pub fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        _ => {
            let s = us / 1_000_000;
            match s {
                0..60 => format!("{s} s"),
                60..3600 => format!("{}m {:02}s", s / 60, s % 60),
                _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
            }
        }
    }
}

/// At most `w` characters (one column each for what this screen draws;
/// wide characters in a site name may overrun, which the terminal clips).
fn truncate(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
    t.push('…');
    t
}
