//! One snapshot's rows: its events, blocks, segments and stacks, as
//! columns ready for [`crate::columns::write_row_group`].

use vramscope_analysis::categories::Labelled;
use vramscope_analysis::iterations::find_iterations;
use vramscope_analysis::liveness::allocated_series;
use vramscope_analysis::sites::{frame_label, site_frame, stack_lines};
use vramscope_analysis::Liveness;
use vramscope_snapshot::{Snapshot, StackId, NO_TIME};

use crate::columns::Col;

fn stack_id(s: StackId) -> Option<i32> {
    (s != StackId::NONE).then_some(s.0 as i32)
}

/// Rows of the events table for `device`, in row groups of at most `group`
/// rows; also the bytes alive before the trace and the peak.
pub fn events(
    snap: &Snapshot,
    file_id: i32,
    device: u32,
    group: usize,
) -> (Vec<Vec<Col>>, u64, u64) {
    let Some(t) = snap.trace(device) else {
        return (Vec::new(), 0, 0);
    };
    let liveness = Liveness::new(snap, device);
    let series = allocated_series(&liveness, t);
    let iterations = find_iterations(snap, device);
    let has_iterations = !iterations.list.is_empty();
    let labelled = Labelled::new(snap, device);
    let category = |i: usize| -> Option<String> {
        let b = *labelled.lifetimes.event_block.get(i)?;
        let c = labelled.categories.category.get(b as usize)?;
        Some(c.as_str().to_owned())
    };
    let peak = series
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(liveness.initial_bytes);
    let mut groups = Vec::new();
    let mut start = 0;
    while start < t.len() {
        let end = (start + group).min(t.len());
        let r = start..end;
        let prev = |i: usize| {
            if i == 0 {
                liveness.initial_bytes
            } else {
                series[i - 1]
            }
        };
        groups.push(vec![
            Col::I32(vec![file_id; end - start]),
            Col::I32(vec![device as i32; end - start]),
            Col::OptI32(
                r.clone()
                    .map(|i| has_iterations.then(|| iterations.of_event(i) as i32))
                    .collect(),
            ),
            Col::I64(r.clone().map(|i| i as i64).collect()),
            Col::OptI64(
                r.clone()
                    .map(|i| Some(t.time_us[i]).filter(|&x| x != NO_TIME))
                    .collect(),
            ),
            Col::Str(r.clone().map(|i| t.action[i].as_str().to_owned()).collect()),
            Col::I64(r.clone().map(|i| t.addr[i] as i64).collect()),
            Col::I64(r.clone().map(|i| t.size[i] as i64).collect()),
            Col::I64(r.clone().map(|i| t.stream[i] as i64).collect()),
            Col::OptI32(r.clone().map(|i| stack_id(t.stack[i])).collect()),
            Col::OptStr(r.clone().map(category).collect()),
            Col::I64(r.map(|i| series[i] as i64 - prev(i) as i64).collect()),
        ]);
        start = end;
    }
    (groups, liveness.initial_bytes, peak)
}

/// Rows of the blocks table (at the dump).
pub fn blocks(snap: &Snapshot, file_id: i32) -> Vec<Col> {
    #[derive(Default)]
    struct Cols {
        device: Vec<i32>,
        segment: Vec<i64>,
        address: Vec<i64>,
        size: Vec<i64>,
        requested: Vec<i64>,
        state: Vec<String>,
        stack: Vec<Option<i32>>,
    }
    let mut c = Cols::default();
    for s in &snap.segments {
        for b in snap.blocks_of(s) {
            c.device.push(s.device as i32);
            c.segment.push(s.address as i64);
            c.address.push(b.address as i64);
            c.size.push(b.size as i64);
            c.requested.push(b.requested_size as i64);
            c.state.push(b.state.as_str().to_owned());
            c.stack.push(stack_id(b.stack));
        }
    }
    vec![
        Col::I32(vec![file_id; c.device.len()]),
        Col::I32(c.device),
        Col::I64(c.segment),
        Col::I64(c.address),
        Col::I64(c.size),
        Col::I64(c.requested),
        Col::Str(c.state),
        Col::OptI32(c.stack),
    ]
}

/// Rows of the segments table (at the dump).
pub fn segments(snap: &Snapshot, file_id: i32) -> Vec<Col> {
    let s = &snap.segments;
    let u = |f: &dyn Fn(&vramscope_snapshot::Segment) -> u64| {
        Col::I64(s.iter().map(|x| f(x) as i64).collect())
    };
    vec![
        Col::I32(vec![file_id; s.len()]),
        Col::I32(s.iter().map(|x| x.device as i32).collect()),
        u(&|x| x.address),
        u(&|x| x.total_size),
        u(&|x| x.allocated_size),
        u(&|x| x.active_size),
        u(&|x| x.requested_size),
        u(&|x| x.stream),
        Col::Str(
            s.iter()
                .map(|x| x.segment_type.as_str().to_owned())
                .collect(),
        ),
        Col::Bool(s.iter().map(|x| x.is_expandable).collect()),
    ]
}

/// Rows of the stacks table: every stack of the file, its site (the
/// frame vramscope names allocations after) and its frames, innermost
/// first, as `file:line in function`.
pub fn stacks(snap: &Snapshot, file_id: i32) -> Vec<Col> {
    let n = snap.stacks.len();
    let ids: Vec<StackId> = (0..n as u32).map(StackId).collect();
    vec![
        Col::I32(vec![file_id; n]),
        Col::I32(ids.iter().map(|s| s.0 as i32).collect()),
        Col::OptStr(
            ids.iter()
                .map(|&s| site_frame(snap, s).map(|f| frame_label(snap, f)))
                .collect(),
        ),
        Col::StrList(ids.iter().map(|&s| stack_lines(snap, s)).collect()),
    ]
}
