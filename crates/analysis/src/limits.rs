//! Memory limits, for CI and tests: on the peak, reserved memory and growth
//! per iteration, and "no leak", checked against a snapshot (`vramscope
//! check`, Python's `vramscope.limits` and `Snapshot.check`).
//!
//! ```no_run
//! use vramscope_analysis::limits::{check, Limits};
//! let snap = vramscope_snapshot::load("test.pickle".as_ref(), &Default::default())?;
//! let limits = Limits { max_peak: Some(12 << 30), no_leaks: true, ..Default::default() };
//! let r = check(&snap, 0, &limits, &Default::default());
//! assert!(r.passed, "{:?}", r.checks);
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

use serde::Serialize;
use vramscope_snapshot::Snapshot;

use crate::leaks::{find_leaks, LeakOptions, LeakReport, Severity};
use crate::liveness::Liveness;
use vramscope_text::units::bytes;

/// Version of the `vramscope check --json` schema.
pub const CHECK_SCHEMA_VERSION: u32 = 1;

/// The limits; `None`/`false` checks nothing.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Highest allocated bytes over the trace.
    pub max_peak: Option<u64>,
    /// Reserved (cached by the allocator) bytes at the end.
    pub max_reserved: Option<u64>,
    /// No finding of severity `leak`.
    pub no_leaks: bool,
    /// Growth per iteration of the allocated bytes at iteration ends.
    pub max_growth_per_iteration: Option<u64>,
}

/// One limit and how the snapshot fared.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// `max_peak`, `max_reserved`, `no_leaks`, `max_growth`.
    pub name: &'static str,
    pub passed: bool,
    /// The measured value (bytes, or the number of leaks).
    pub value: f64,
    pub limit: f64,
    /// One line for people.
    pub message: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub schema_version: u32,
    pub device: u32,
    pub passed: bool,
    pub checks: Vec<Check>,
    /// The leak analysis, when a check needed it.
    pub leaks: Option<LeakReport>,
    /// How far a passing limit holds ([`crate::reach`]).
    pub reach: crate::reach::Reach,
}

/// Check `device` of `snap` against `limits`.
pub fn check(
    snap: &Snapshot,
    device: u32,
    limits: &Limits,
    leak_opts: &LeakOptions,
) -> CheckReport {
    let mut checks = Vec::new();
    let reach = crate::reach::reach(snap, device, None, None);
    // A limit met is met over what was recorded: said the way every "fits" is.
    let held = |passed: bool, message: String| match passed {
        true => format!("{message}, {}", reach.sentence()),
        false => message,
    };
    if let Some(limit) = limits.max_peak {
        let peak = Liveness::new(snap, device).peak_bytes;
        checks.push(Check {
            name: "max_peak",
            passed: peak <= limit,
            value: peak as f64,
            limit: limit as f64,
            message: held(
                peak <= limit,
                format!("peak allocated {} (limit {})", bytes(peak), bytes(limit)),
            ),
        });
    }
    if let Some(limit) = limits.max_reserved {
        let reserved: u64 = snap.segments_of(device).map(|s| s.total_size).sum();
        checks.push(Check {
            name: "max_reserved",
            passed: reserved <= limit,
            value: reserved as f64,
            limit: limit as f64,
            message: held(
                reserved <= limit,
                format!(
                    "reserved at the end {} (limit {})",
                    bytes(reserved),
                    bytes(limit)
                ),
            ),
        });
    }
    let leaks = (limits.no_leaks || limits.max_growth_per_iteration.is_some())
        .then(|| find_leaks(snap, device, leak_opts));
    if let Some(r) = &leaks {
        if limits.no_leaks {
            let found: Vec<&str> = r
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Leak)
                .map(|f| f.title.as_str())
                .collect();
            checks.push(Check {
                name: "no_leaks",
                passed: found.is_empty(),
                value: found.len() as f64,
                limit: 0.0,
                message: if found.is_empty() {
                    format!("no leak over {} iteration(s)", r.iterations.len())
                } else {
                    format!("{} leak(s): {}", found.len(), found.join("; "))
                },
            });
        }
        if let Some(limit) = limits.max_growth_per_iteration {
            let g = r.growth_per_iteration;
            checks.push(Check {
                name: "max_growth",
                passed: g <= limit as f64,
                value: g,
                limit: limit as f64,
                message: format!(
                    "allocated grows by {} per iteration (limit {})",
                    vramscope_text::units::signed_bytes(g),
                    bytes(limit)
                ),
            });
        }
    }
    CheckReport {
        schema_version: CHECK_SCHEMA_VERSION,
        device,
        passed: checks.iter().all(|c| c.passed),
        checks,
        leaks,
        reach,
    }
}
