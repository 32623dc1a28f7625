//! A moment of a device trace, as the user names it on the command line:
//! `peak`, `end`, an event index `#12345`, a time offset from the first
//! event such as `1.5s` or `250ms`, or a training iteration `iter:3`
//! (its end) / `iter:3:peak`.
//!
//! Views that show the memory alive "at" a moment (the flamegraph, the
//! segment map) need the same vocabulary and the same resolution to an event
//! index, so both live here.

use vramscope_snapshot::{DeviceTrace, NO_TIME};

use crate::Liveness;
use vramscope_text::units::{count, duration_us};

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// The peak of allocated bytes over the trace.
    Peak,
    /// The moment of the dump.
    End,
    /// Right after this event.
    Event(usize),
    /// This many µs after the first timed event.
    Offset(i64),
    /// The end (or, with `peak`, the peak) of training iteration N (1-based,
    /// as `vramscope leaks` numbers them).
    Iteration { number: u32, peak: bool },
}

impl Moment {
    /// Parse `peak`, `end`, `#N`, `iter:N[:peak|:end]`, or a duration with
    /// unit `us`/`µs`/`ms`/`s`/`min`.
    pub fn parse(s: &str) -> Result<Moment, String> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "peak" => return Ok(Moment::Peak),
            "end" => return Ok(Moment::End),
            _ => {}
        }
        let lower = t.to_ascii_lowercase();
        if let Some(rest) = lower
            .strip_prefix("iter:")
            .or_else(|| lower.strip_prefix("iteration:"))
        {
            let (n, peak) = match rest.split_once(':') {
                Some((n, "peak")) => (n, true),
                Some((n, "end")) => (n, false),
                Some(_) => {
                    return Err(format!(
                        "expected iter:N, iter:N:end or iter:N:peak, found {s:?}"
                    ))
                }
                None => (rest, false),
            };
            return match n.parse::<u32>() {
                Ok(number) if number >= 1 => Ok(Moment::Iteration { number, peak }),
                _ => Err(format!(
                    "expected an iteration number from 1, like iter:3, found {s:?}"
                )),
            };
        }
        if let Some(n) = t.strip_prefix('#') {
            let digits: String = n.chars().filter(|&c| c != ',' && c != '_').collect();
            return digits
                .parse::<usize>()
                .map(Moment::Event)
                .map_err(|_| format!("expected an event index like #1234, found {s:?}"));
        }
        let body = t.strip_prefix('+').unwrap_or(t);
        let split = body.find(|c: char| c.is_alphabetic()).ok_or_else(|| {
            format!("{s:?} needs a unit (e.g. 250ms or 1.5s), or use #N for an event index")
        })?;
        let (num, unit) = body.split_at(split);
        let v: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("expected peak, end, #N or a time like 1.5s, found {s:?}"))?;
        let scale = match unit.trim() {
            "us" | "µs" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            "min" | "m" => 60e6,
            other => {
                return Err(format!(
                    "unknown time unit {other:?} in {s:?} (use us, ms, s or min)"
                ))
            }
        };
        let us = v * scale;
        if !us.is_finite() || us < 0.0 || us > i64::MAX as f64 / 2.0 {
            return Err(format!("time offset {s:?} is out of range"));
        }
        Ok(Moment::Offset(us.round() as i64))
    }
}

/// A moment tied to the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedMoment {
    /// The point to walk the trace to: state right after this event; `None` is the
    /// start of the trace window.
    pub point: Option<usize>,
    /// The dump itself (segments and blocks are then exact, not walked).
    pub is_end: bool,
    /// For people: `peak (event 1,402, +138.1 ms)`.
    pub description: String,
}

fn first_time(t: &DeviceTrace) -> Option<i64> {
    t.time_us.iter().copied().find(|&x| x != NO_TIME)
}

/// `+138.1 ms` after the first timed event, when event `i` has a time.
fn offset_text(t: &DeviceTrace, i: usize) -> String {
    match (
        first_time(t),
        t.time_us.get(i).copied().filter(|&x| x != NO_TIME),
    ) {
        (Some(t0), Some(ti)) => format!(", +{}", duration_us(ti - t0)),
        _ => String::new(),
    }
}

/// Resolve `m` for `device` of `snap`: as [`resolve`], and iterations (found
/// as `vramscope leaks` finds them).
pub fn resolve_in(
    m: Moment,
    snap: &vramscope_snapshot::Snapshot,
    device: u32,
    liveness: &Liveness,
) -> Result<ResolvedMoment, String> {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let Moment::Iteration { number, peak } = m else {
        return resolve(m, t, liveness);
    };
    let its = crate::iterations::find_iterations(snap, device);
    let it = its
        .list
        .iter()
        .find(|i| i.number == number)
        .ok_or_else(|| match its.list.len() {
            0 => "no iterations found in this trace (see vramscope leaks)".to_owned(),
            n => format!("iteration {number} does not exist (the trace has {n})"),
        })?;
    let last = t.len().checked_sub(1);
    let point = if peak {
        let series = crate::liveness::allocated_series(liveness, t);
        (it.start..it.end).max_by_key(|&i| (series[i], std::cmp::Reverse(i)))
    } else {
        Some(it.end - 1)
    };
    let what = if peak { "peak" } else { "end" };
    Ok(ResolvedMoment {
        point,
        is_end: point.is_some() && point == last,
        description: match point {
            Some(i) => format!(
                "{what} of iteration {number} (event {}{})",
                count(i as u64),
                offset_text(t, i)
            ),
            None => format!("{what} of iteration {number}"),
        },
    })
}

/// Resolve `m` against the trace `t` of a device walked as `liveness`
/// (iterations need the snapshot: [`resolve_in`]).
pub fn resolve(m: Moment, t: &DeviceTrace, liveness: &Liveness) -> Result<ResolvedMoment, String> {
    let last = t.len().checked_sub(1);
    let at = |i: Option<usize>, what: &str| match i {
        Some(i) => format!("{what} (event {}{})", count(i as u64), offset_text(t, i)),
        None => format!("{what} (start of the trace)"),
    };
    Ok(match m {
        Moment::Iteration { .. } => {
            return Err("an iteration needs the whole snapshot (resolve_in)".into())
        }
        Moment::Peak => ResolvedMoment {
            point: liveness.peak_index,
            is_end: liveness.peak_index.is_some() && liveness.peak_index == last,
            description: at(liveness.peak_index, "peak"),
        },
        Moment::End => ResolvedMoment {
            point: last,
            is_end: true,
            description: "end (the moment of the dump)".into(),
        },
        Moment::Event(i) => {
            if i >= t.len() {
                return Err(format!(
                    "event #{i} is past the last event (the trace has {} events)",
                    count(t.len() as u64)
                ));
            }
            ResolvedMoment {
                point: Some(i),
                is_end: Some(i) == last,
                description: format!("event #{}{}", count(i as u64), offset_text(t, i)),
            }
        }
        Moment::Offset(us) => {
            let t0 = first_time(t)
                .ok_or("this trace records no times (time_us); use #N, peak or end")?;
            let target = t0.saturating_add(us);
            let last_time = t
                .time_us
                .iter()
                .copied()
                .filter(|&x| x != NO_TIME)
                .max()
                .unwrap_or(t0);
            if target > last_time {
                return Err(format!(
                    "+{} is after the last event (+{})",
                    duration_us(us),
                    duration_us(last_time - t0)
                ));
            }
            // The state at a time is after the last event not later than it.
            let mut point = None;
            for (i, &ti) in t.time_us.iter().enumerate() {
                if ti != NO_TIME && ti > target {
                    break;
                }
                point = Some(i);
            }
            let what = format!("+{}", duration_us(us));
            ResolvedMoment {
                point,
                is_end: point.is_some() && point == last,
                description: at(point, &what),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(Moment::parse("peak"), Ok(Moment::Peak));
        assert_eq!(Moment::parse("END"), Ok(Moment::End));
        assert_eq!(Moment::parse("#12,345"), Ok(Moment::Event(12345)));
        assert_eq!(Moment::parse("1.5s"), Ok(Moment::Offset(1_500_000)));
        assert_eq!(Moment::parse("+250ms"), Ok(Moment::Offset(250_000)));
        assert_eq!(Moment::parse("40µs"), Ok(Moment::Offset(40)));
        assert!(Moment::parse("12").is_err());
        assert!(Moment::parse("#x").is_err());
        assert!(Moment::parse("3h").is_err());
        assert!(Moment::parse("-1s").is_err());
        assert_eq!(
            Moment::parse("iter:3"),
            Ok(Moment::Iteration {
                number: 3,
                peak: false
            })
        );
        assert_eq!(
            Moment::parse("iteration:2:peak"),
            Ok(Moment::Iteration {
                number: 2,
                peak: true
            })
        );
        assert!(Moment::parse("iter:0").is_err());
        assert!(Moment::parse("iter:2:middle").is_err());
    }

    #[test]
    fn resolves_times_to_the_last_event_not_after_them() {
        let t = DeviceTrace {
            time_us: vec![1_000, 1_100, 1_100, 2_000],
            action: vec![vramscope_snapshot::Action::Alloc; 4],
            ..Default::default()
        };
        let r = Liveness::default();
        let m = |s: &str| resolve(Moment::parse(s).expect("parses"), &t, &r);
        assert_eq!(m("100us").map(|x| x.point), Ok(Some(2)));
        assert_eq!(m("0us").map(|x| x.point), Ok(Some(0)));
        assert_eq!(m("1ms").map(|x| x.is_end), Ok(true));
        assert!(m("2ms").is_err());
        assert!(m("#4").is_err());
        assert_eq!(m("#3").map(|x| x.is_end), Ok(true));
    }
}
