//! Two live sets compared, as `vramscope diff` and the report's Diff tab
//! show them: two files, each at a moment, and then also their peaks site
//! by site; or two moments of one file. Blocks are matched by the text of
//! their allocation stack and their size ([`mod@crate::diff`]).
//!
//! ```no_run
//! use vramscope_analysis::compare::{compare, Input};
//! use vramscope_analysis::moment::Moment;
//! let a = vramscope_snapshot::load("before.pickle".as_ref(), &Default::default())?;
//! let b = vramscope_snapshot::load("after.pickle".as_ref(), &Default::default())?;
//! let (ia, ib) = (Input::new(&a, "before.pickle", 0), Input::new(&b, "after.pickle", 0));
//! let c = compare(&ia, Moment::End, Some(&ib), Moment::End, &Default::default()).unwrap();
//! println!("{} bytes more at the end", c.report.diff.totals.delta);
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

use serde::Serialize;
use vramscope_snapshot::{DeviceTrace, Snapshot};

use crate::diff::{diff, Diff, DiffOptions, DiffTotals, SiteDelta};
use crate::liveness::{LiveBlock, Liveness};
use crate::moment::{resolve_in, Moment, ResolvedMoment};

/// Version of the `vramscope diff --json` layout (docs/diff.md).
pub const SCHEMA_VERSION: u32 = 1;

/// One side of a comparison: which file, device and moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Side {
    /// The file's name as shown to people.
    pub file: String,
    pub device: u32,
    /// The moment in words: `peak (event 1,402, +138.1 ms)`.
    pub moment: String,
    /// The live set is the state right after this event; `null` is the
    /// start of the trace window.
    pub event_index: Option<usize>,
}

impl Side {
    pub fn new(file: &str, device: u32, moment: &str, event_index: Option<usize>) -> Side {
        Side {
            file: file.to_owned(),
            device,
            moment: moment.to_owned(),
            event_index,
        }
    }

    /// `file · device N · moment`.
    pub fn describe(&self) -> String {
        format!("{} · device {} · {}", self.file, self.device, self.moment)
    }
}

/// The per-site comparison of each side's peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeakToPeak {
    pub a: Side,
    pub b: Side,
    pub totals: DiffTotals,
    pub by_site: Vec<SiteDelta>,
}

impl PeakToPeak {
    /// Keep the totals and per-site figures of a diff of the two peaks.
    pub fn new(a: Side, b: Side, d: Diff) -> PeakToPeak {
        PeakToPeak {
            a,
            b,
            totals: d.totals,
            by_site: d.by_site,
        }
    }
}

/// Everything a comparison shows: the two sides, the diff, and for two
/// files the peak-to-peak comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffReport {
    pub schema_version: u32,
    pub a: Side,
    pub b: Side,
    #[serde(flatten)]
    pub diff: Diff,
    pub peak_to_peak: Option<PeakToPeak>,
}

impl DiffReport {
    pub fn new(a: Side, b: Side, diff: Diff) -> DiffReport {
        DiffReport {
            schema_version: SCHEMA_VERSION,
            a,
            b,
            diff,
            peak_to_peak: None,
        }
    }
}

/// One file of a comparison: its device's trace walked once.
pub struct Input<'s> {
    pub snap: &'s Snapshot,
    /// The file's name as shown.
    pub file: String,
    pub device: u32,
    liveness: Liveness,
}

impl<'s> Input<'s> {
    /// `device` of `snap` (chosen by the caller: [`Snapshot::pick_device`]).
    pub fn new(snap: &'s Snapshot, file: &str, device: u32) -> Self {
        Input {
            snap,
            file: file.to_owned(),
            device,
            liveness: Liveness::new(snap, device),
        }
    }

    fn resolve(&self, m: Moment, which: &str) -> Result<ResolvedMoment, String> {
        resolve_in(m, self.snap, self.device, &self.liveness)
            .map_err(|e| format!("{which} for {}: {e}", self.file))
    }

    fn side(&self, m: &ResolvedMoment) -> Side {
        Side::new(&self.file, self.device, &m.description, m.point)
    }

    fn live(&self, points: &[Option<usize>]) -> Vec<Vec<LiveBlock>> {
        let empty = DeviceTrace::default();
        let trace = self.snap.trace(self.device).unwrap_or(&empty);
        self.liveness.live_at_points(trace, points)
    }
}

/// A comparison and the two live sets it compared (for a differential
/// flamegraph of them).
pub struct Compared {
    pub report: DiffReport,
    pub a_live: Vec<LiveBlock>,
    pub b_live: Vec<LiveBlock>,
}

/// What is alive in `b` at `at_b` and not in `a` at `at_a`, and the
/// reverse; with `b` absent, two moments of `a`. For two files the two
/// peaks are compared too, unless both moments are the peak already.
/// The error names the moment (`--at-a`, `--at-b`, `peak`) and the file.
pub fn compare(
    a: &Input,
    at_a: Moment,
    b: Option<&Input>,
    at_b: Moment,
    opts: &DiffOptions,
) -> Result<Compared, String> {
    let ra = a.resolve(at_a, "--at-a")?;
    let Some(b) = b else {
        let rb = a.resolve(at_b, "--at-b")?;
        let live = a.live(&[ra.point, rb.point]);
        let d = diff(a.snap, &live[0], a.snap, &live[1], opts);
        let report = DiffReport::new(a.side(&ra), a.side(&rb), d);
        let [a_live, b_live]: [Vec<LiveBlock>; 2] = live.try_into().unwrap_or_default();
        return Ok(Compared {
            report,
            a_live,
            b_live,
        });
    };
    let rb = b.resolve(at_b, "--at-b")?;
    let pa = a.resolve(Moment::Peak, "peak")?;
    let pb = b.resolve(Moment::Peak, "peak")?;
    let la = a.live(&[ra.point, pa.point]);
    let lb = b.live(&[rb.point, pb.point]);
    let d = diff(a.snap, &la[0], b.snap, &lb[0], opts);
    let mut report = DiffReport::new(a.side(&ra), b.side(&rb), d);
    if !(at_a == Moment::Peak && at_b == Moment::Peak) {
        let peaks = diff(a.snap, &la[1], b.snap, &lb[1], opts);
        report.peak_to_peak = Some(PeakToPeak::new(a.side(&pa), b.side(&pb), peaks));
    }
    Ok(Compared {
        report,
        a_live: la.into_iter().next().unwrap_or_default(),
        b_live: lb.into_iter().next().unwrap_or_default(),
    })
}
