//! Memory over time: the samples kept from the states seen, and their
//! curve in braille characters (2 × 4 dots per cell, so a 100-column
//! terminal shows 200 points across), with the iteration boundaries
//! marked under it.

use std::collections::VecDeque;

use crate::state::{Iteration, State};

/// Samples kept: at one state every 0.5 s, about half an hour.
pub const DEFAULT_CAPACITY: usize = 4096;

/// Allocated and reserved at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub time_us: i64,
    pub allocated: u64,
    pub reserved: u64,
}

/// The samples of one process, oldest first, at most `capacity`.
#[derive(Debug, Clone)]
pub struct History {
    points: VecDeque<Point>,
    capacity: usize,
    last_seq: Option<u64>,
}

impl Default for History {
    fn default() -> Self {
        History::with_capacity(DEFAULT_CAPACITY)
    }
}

impl History {
    pub fn with_capacity(capacity: usize) -> Self {
        History {
            points: VecDeque::new(),
            capacity: capacity.max(2),
            last_seq: None,
        }
    }

    /// Add a state. The first one also brings the ends of the iterations
    /// it lists, so the curve has a past from the first frame on.
    /// Returns false for a state already seen (same `seq`, or not later
    /// than the last sample), which is not added.
    pub fn push(&mut self, s: &State) -> bool {
        if self.points.is_empty() {
            let mut past: Vec<&Iteration> = s
                .iterations
                .iter()
                .filter(|i| i.end_us > 0 && i.end_us < s.time_us)
                .collect();
            past.sort_by_key(|i| i.end_us);
            for i in past {
                self.add(Point {
                    time_us: i.end_us,
                    allocated: i.allocated,
                    reserved: i.reserved.max(i.allocated),
                });
            }
        }
        let dup_seq = s.seq != 0 && self.last_seq == Some(s.seq);
        let not_later = self.points.back().is_some_and(|p| p.time_us >= s.time_us);
        if dup_seq || not_later {
            return false;
        }
        self.last_seq = Some(s.seq);
        self.add(Point {
            time_us: s.time_us,
            allocated: s.allocated,
            reserved: s.reserved,
        });
        true
    }

    fn add(&mut self, p: Point) {
        self.points.push_back(p);
        while self.points.len() > self.capacity {
            self.points.pop_front();
        }
    }

    pub fn points(&self) -> &VecDeque<Point> {
        &self.points
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Microseconds from the first sample to the last.
    pub fn span_us(&self) -> i64 {
        match (self.points.front(), self.points.back()) {
            (Some(a), Some(b)) => b.time_us - a.time_us,
            _ => 0,
        }
    }
}

/// A drawn curve: `rows` of exactly `width` characters each, top first,
/// then the iteration marks and their numbers, also `width` wide.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub rows: Vec<String>,
    pub marks: String,
    pub labels: String,
    /// The value of the top row's top dot.
    pub scale_top: u64,
}

/// Braille dot bits, by column (left, right) and by dot row from the top.
const DOTS: [[u32; 4]; 2] = [[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]];

/// Draw allocated as a filled area and reserved as dots on its upper
/// edge, scaled so the highest reserved reaches the top.
pub fn draw(h: &History, iterations: &[Iteration], width: usize, height: usize) -> Plot {
    let (width, height) = (width.max(1), height.max(1));
    let xs = width * 2;
    let levels = height * 4;
    let (t0, t1) = window(h);
    let top = h
        .points
        .iter()
        .map(|p| p.reserved.max(p.allocated))
        .max()
        .unwrap_or(0)
        .max(1);

    // The highest value sampled in each dot column; columns between two
    // samples keep the earlier one (memory stays where it was seen).
    let mut cols: Vec<Option<(u64, u64)>> = vec![None; xs];
    for p in &h.points {
        let x = column(p.time_us, t0, t1, xs);
        let c = cols[x].get_or_insert((0, 0));
        *c = (c.0.max(p.allocated), c.1.max(p.reserved));
    }
    for x in 1..xs {
        if cols[x].is_none() {
            cols[x] = cols[x - 1];
        }
    }

    let mut cells = vec![vec![0u32; width]; height];
    let level = |v: u64| -> usize {
        let l = (v as f64 / top as f64 * levels as f64).round() as usize;
        // Anything held shows, however small beside the top.
        if v > 0 {
            l.clamp(1, levels)
        } else {
            0
        }
    };
    let mut set = |x: usize, y: usize| {
        let row = height - 1 - y / 4;
        cells[row][x / 2] |= DOTS[x % 2][3 - y % 4];
    };
    for (x, c) in cols.iter().enumerate() {
        let Some((a, r)) = *c else { continue };
        for y in 0..level(a) {
            set(x, y);
        }
        if let Some(y) = level(r).checked_sub(1) {
            set(x, y);
        }
    }
    let rows = cells
        .iter()
        .map(|r| {
            r.iter()
                .map(|&b| {
                    if b == 0 {
                        ' '
                    } else {
                        char::from_u32(0x2800 + b).unwrap_or(' ')
                    }
                })
                .collect()
        })
        .collect();

    let (marks, labels) = iteration_marks(iterations, t0, t1, width, !h.is_empty());
    Plot {
        rows,
        marks,
        labels,
        scale_top: top,
    }
}

/// The time range drawn: the whole history; a single sample sits at the
/// right edge of a one-second window.
fn window(h: &History) -> (i64, i64) {
    let t1 = h.points.back().map_or(0, |p| p.time_us);
    let t0 = h.points.front().map_or(0, |p| p.time_us);
    if t1 - t0 < 1_000_000 {
        (t1 - 1_000_000, t1)
    } else {
        (t0, t1)
    }
}

fn column(t: i64, t0: i64, t1: i64, n: usize) -> usize {
    let f = (t - t0) as f64 / (t1 - t0).max(1) as f64;
    ((f * (n - 1) as f64).round().max(0.0) as usize).min(n - 1)
}

/// `─┴──┴─` under the curve where iterations ended, and their numbers
/// where they fit (one space apart, the earlier ones first).
fn iteration_marks(
    its: &[Iteration],
    t0: i64,
    t1: i64,
    width: usize,
    any: bool,
) -> (String, String) {
    let mut marks = vec!['─'; width];
    let mut labels = vec![' '; width];
    let mut free_from = 0;
    for i in its
        .iter()
        .filter(|i| any && i.end_us >= t0 && i.end_us <= t1)
    {
        let c = column(i.end_us, t0, t1, width * 2) / 2;
        marks[c] = '┴';
        let text = i.n.to_string();
        if c >= free_from && c + text.len() <= width {
            for (k, ch) in text.chars().enumerate() {
                labels[c + k] = ch;
            }
            free_from = c + text.len() + 1;
        }
    }
    (marks.into_iter().collect(), labels.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(seq: u64, t_s: i64, allocated: u64, reserved: u64) -> State {
        let text = format!(
            r#"{{"version": 1, "seq": {seq}, "time_us": {}, "allocated": {allocated}, "reserved": {reserved}}}"#,
            t_s * 1_000_000
        );
        State::parse(&text, "test").unwrap()
    }

    fn it(n: u64, t_s: i64, allocated: u64) -> Iteration {
        Iteration {
            n,
            end_us: t_s * 1_000_000,
            allocated,
            reserved: allocated,
            peak: allocated,
        }
    }

    #[test]
    fn history_seeds_from_iterations_and_skips_repeats() {
        let mut s = state(1, 100, 50, 80);
        s.iterations = vec![it(2, 90, 40), it(1, 80, 30), it(3, 101, 1)];
        let mut h = History::with_capacity(4);
        assert!(h.push(&s));
        // The iteration after the state's time is not in the past.
        let times: Vec<i64> = h.points().iter().map(|p| p.time_us / 1_000_000).collect();
        assert_eq!(times, [80, 90, 100]);
        assert!(!h.push(&s), "same seq");
        assert!(h.push(&state(2, 101, 1, 1)));
        assert!(h.push(&state(3, 102, 1, 1)));
        assert_eq!(h.len(), 4, "capacity");
        assert_eq!(h.points()[0].time_us, 90_000_000);
    }

    #[test]
    fn curve_fills_the_width_and_rises_with_memory() {
        let mut h = History::default();
        for k in 0..50 {
            h.push(&state(k + 1, 1000 + k as i64, (k + 1) * 100, 5000));
        }
        let its: Vec<Iteration> = (0..5).map(|n| it(n, 1000 + 10 * n as i64 + 5, 0)).collect();
        let p = draw(&h, &its, 37, 4);
        assert_eq!(p.rows.len(), 4);
        for r in p.rows.iter().chain([&p.marks, &p.labels]) {
            assert_eq!(r.chars().count(), 37, "{r:?}");
        }
        assert_eq!(p.scale_top, 5000);
        // Allocated reaches 5000 at the end: the last column is full.
        let last: Vec<char> = p.rows.iter().map(|r| r.chars().last().unwrap()).collect();
        assert_eq!(last, ['⣿'; 4], "{:#?}", p.rows);
        // At the start it is 100/5000 of the height: bottom row only, and
        // the reserved dot at the very top.
        let first: Vec<char> = p.rows.iter().map(|r| r.chars().next().unwrap()).collect();
        assert_eq!(
            first[0] as u32 & 0x01,
            0x01,
            "reserved at the top: {first:?}"
        );
        assert_eq!(first[1], ' ');
        assert_ne!(first[3], ' ');
        assert_eq!(p.marks.matches('┴').count(), 5, "{}", p.marks);
        assert!(
            p.labels.starts_with("0 ") || p.labels.contains(" 1 "),
            "{}",
            p.labels
        );
        assert!(p.labels.contains('4'), "{}", p.labels);
    }

    #[test]
    fn empty_and_single_sample() {
        let p = draw(&History::default(), &[], 10, 2);
        assert!(p.rows.iter().all(|r| r == "          "));
        let mut h = History::default();
        h.push(&state(1, 5, 10, 10));
        let p = draw(&h, &[], 10, 2);
        // The one sample is the right dot column of the last cell, full
        // height (it is the top of the scale).
        assert_eq!(p.rows[0].chars().last(), Some('⢸'), "{:?}", p.rows);
        assert_eq!(p.rows[1].chars().last(), Some('⢸'), "{:?}", p.rows);
        assert_eq!(p.rows[1].chars().nth(8), Some(' '));
    }
}
