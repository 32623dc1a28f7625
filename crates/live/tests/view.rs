//! The screen's content for known states: sizes, the stack of the
//! selected holder, the curve's width, the iteration marks, the events.

use vramscope_live::view::{duration, render, Style};
use vramscope_live::{History, State, UiState};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// 30 iterations of 10 s that each leave 1 MiB more, the last state at
/// the end of the 30th plus 5 s.
fn run() -> (State, History) {
    let t0: i64 = 1_732_538_000_000_000;
    let its: Vec<String> = (1..=30)
        .map(|n| {
            format!(
                r#"{{"n": {n}, "end_us": {}, "allocated": {}, "reserved": {}, "peak": {}}}"#,
                t0 + n as i64 * 10_000_000,
                GIB + n * MIB,
                2 * GIB,
                GIB + n * MIB + 100 * MIB
            )
        })
        .collect();
    let now = t0 + 305_000_000;
    let text = format!(
        r#"{{"version": 1, "pid": 4242, "host": "node1", "rank": 3, "world_size": 8, "device": "cuda:3",
            "recorder": "cuda", "time_us": {now}, "seq": 600, "iteration": 30,
            "allocated": {alloc}, "reserved": {res}, "peak_allocated": {peak}, "peak_reserved": {res},
            "capacity": {cap}, "publish_us": 850,
            "categories": {{"parameter": {gib}, "gradient": {half}, "optimizer_state": 0, "other": {rest}}},
            "top": [
              {{"site": "train.py:41 in step", "bytes": {gib}, "blocks": 12,
                "stack": ["train.py:41 in step", "train.py:80 in <module>"]}},
              {{"site": "model.py:7 in forward", "bytes": {half}, "blocks": 3,
                "stack": ["model.py:7 in forward", "nn/module.py:1736 in _call_impl", "train.py:40 in step"]}}
            ],
            "iterations": [{its}],
            "ooms": [{{"time_us": {oom}, "requested": {req}, "device_free": {free}}}],
            "dumps": [{{"time_us": {dump}, "path": "/runs/a/oom.pickle", "reason": "oom"}}],
            "unknown_later": 1}}"#,
        alloc = GIB + 30 * MIB + 512 * MIB,
        res = 2 * GIB,
        peak = GIB + 31 * MIB + 512 * MIB,
        cap = 80 * GIB,
        gib = GIB,
        half = 512 * MIB,
        rest = 30 * MIB,
        its = its.join(","),
        oom = now - 35_000_000,
        req = 4 * GIB,
        free = 256 * MIB,
        dump = now - 34_000_000,
    );
    let s = State::parse(&text, "test").unwrap();
    let mut h = History::default();
    assert!(h.push(&s));
    (s, h)
}

fn text(f: &vramscope_live::view::Frame) -> String {
    f.to_plain()
}

#[test]
fn header_has_the_process_and_human_sizes() {
    let (s, h) = run();
    let f = render(&s, &h, (120, 40), &UiState::default());
    let t = text(&f);
    let first = &f.lines[0].text;
    assert!(
        first.contains("pid 4242 on node1")
            && first.contains("rank 3/8")
            && first.contains("cuda:3"),
        "{first}"
    );
    assert!(first.contains("iteration 31 (30 done)"), "{first}");
    assert!(t.contains("allocated 1.53 GiB · reserved 2.00 GiB"), "{t}");
    assert!(t.contains("peak 1.53 GiB (2.00 GiB reserved)"), "{t}");
    assert!(t.contains("capacity 80.00 GiB (2.5% reserved)"), "{t}");
    // 1 MiB more per iteration.
    assert!(t.contains("peak 1.53 GiB (2.00 GiB reserved) · growth +1.00 MiB/iteration · publish cost 850 µs · seq 600"), "{t}");
    assert!(t.contains("publish cost 850 µs"), "{t}");
    // From the end of iteration 1 (the oldest sample) to now.
    assert!(t.contains("over 4m 55s"), "{t}");
}

#[test]
fn curve_spans_the_width_with_iteration_marks() {
    let (s, h) = run();
    for w in [60, 100, 157] {
        let f = render(&s, &h, (w, 40), &UiState::default());
        let curve: Vec<&str> = f
            .lines
            .iter()
            .map(|l| l.text.as_str())
            .filter(|l| {
                l.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c))
                    && !l.contains("allocated")
            })
            .collect();
        assert!(curve.len() >= 2, "{}", text(&f));
        for row in &curve {
            assert_eq!(row.chars().count(), w, "{row:?}");
        }
        let is_marks =
            |l: &&vramscope_live::view::Line| l.text.chars().all(|c| c == '─' || c == '┴');
        let marks = f.lines.iter().find(is_marks).expect("iteration marks");
        assert_eq!(marks.text.chars().count(), w);
        // 30 iteration ends over 300 s: at 60 columns some share a column.
        let n = marks.text.matches('┴').count();
        assert!((25..=30).contains(&n), "{n}: {}", marks.text);
        let labels = &f.lines[f.lines.iter().position(|l| is_marks(&l)).unwrap() + 1].text;
        assert!(
            labels.trim_start().starts_with('1') && labels.contains("30"),
            "{labels}"
        );
    }
}

#[test]
fn selected_holder_shows_its_stack_when_expanded() {
    let (s, h) = run();
    let mut ui = UiState {
        selected: 1,
        ..UiState::default()
    };
    let f = render(&s, &h, (100, 40), &ui);
    let sel: Vec<_> = f
        .lines
        .iter()
        .filter(|l| l.style == Style::Selected)
        .collect();
    assert_eq!(sel.len(), 1);
    assert!(
        sel[0].text.starts_with(">")
            && sel[0].text.contains("512.00 MiB")
            && sel[0].text.contains("model.py:7 in forward")
    );
    assert!(!text(&f).contains("nn/module.py:1736"), "collapsed");

    ui.expanded = true;
    let t = text(&render(&s, &h, (100, 40), &ui));
    let at = t.find("> ").unwrap();
    let stack = t
        .find("      nn/module.py:1736 in _call_impl")
        .expect("stack shown");
    assert!(stack > at, "{t}");
    assert!(
        !t.contains("      train.py:80 in <module>"),
        "only the selected one's stack: {t}"
    );

    // Too little room: the selected row and its stack stay in view.
    let small = render(&s, &h, (100, 24), &ui);
    assert!(text(&small).contains("> "), "{}", text(&small));
    assert!(small.lines.len() <= 24);
}

#[test]
fn categories_and_events() {
    let (s, h) = run();
    let f = render(&s, &h, (80, 40), &UiState::default());
    let bar = f
        .lines
        .iter()
        .find(|l| l.text.starts_with('█'))
        .expect("bar");
    assert_eq!(bar.text.chars().count(), 80);
    // parameter is 1 GiB of 1.53 GiB: about 65% of the bar.
    let n = bar.text.chars().filter(|&c| c == '█').count();
    assert!((50..=54).contains(&n), "{n}: {}", bar.text);
    let t = text(&f);
    assert!(
        t.contains("█ parameter 1.00 GiB  ▓ gradient 512.00 MiB  ░ other 30.00 MiB"),
        "{t}"
    );
    assert!(
        t.contains("OOM 35 s ago: requested 4.00 GiB, device free 256.00 MiB"),
        "{t}"
    );
    assert!(t.contains("dump 34 s ago (oom): /runs/a/oom.pickle"), "{t}");
    // Newest first.
    assert!(t.find("dump 34 s").unwrap() < t.find("OOM 35 s").unwrap());
}

#[test]
fn status_pause_and_follow() {
    let (s, h) = run();
    let ui = UiState {
        paused: true,
        status: Some("process 4242 ended".into()),
        ..UiState::default()
    };
    let f = render(&s, &h, (100, 30), &ui);
    assert_eq!(f.lines[0].text, "process 4242 ended");
    assert_eq!(f.lines[0].style, Style::Alert);
    assert!(f.lines[1].text.ends_with("[paused]"));
    assert!(!f.to_plain().contains("q quit"), "keys only when asked");
    let keys = UiState {
        keys: true,
        ..UiState::default()
    };
    let f = render(&s, &h, (100, 30), &keys);
    assert_eq!(
        f.lines.last().map(|l| l.text.as_str()),
        Some(vramscope_live::view::KEYS)
    );
    assert!(f.lines.len() <= 30);
    // The selected site moves to the top: the selection follows it.
    let mut next = s.clone();
    next.top.reverse();
    let mut ui = UiState::default();
    ui.follow(Some(&s), &next);
    assert_eq!(ui.selected, 1);
    assert_eq!(
        (duration(999), duration(1500), duration(3_725_000_000)),
        ("999 µs".into(), "1.5 ms".into(), "1h 02m".into())
    );
}
