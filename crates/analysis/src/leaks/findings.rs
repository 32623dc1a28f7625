//! Turning series shapes and gradient lifetimes into findings (their words
//! are in `explain`).

use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{DeviceTrace, Snapshot, StackId};

use super::explain::{
    cycle_finding, evaluation_held_finding, growth_finding, held_finding, library_state,
    long_lived_finding, one_time_finding, regrown_finding,
};
use super::held::{freed_after_own_step, scan_gradients_in_evaluation, scan_held_gradients};
pub(super) use super::held::{EvaluationHeld, HeldScan};
use super::series::{shape, site_series, BlockIterations, Shape, SiteTable};
use super::source::Sources;
use super::{Finding, HeldFix, IterationStats, LeakOptions, Severity};
use crate::categories::evaluation::Evaluation;
use crate::categories::Phases;
use crate::lifetimes::Lifetimes;
use crate::sites::{frame_location, is_library, is_native, is_third_party};

/// What the finders share.
pub(super) struct Context<'a> {
    pub snap: &'a Snapshot,
    pub trace: &'a DeviceTrace,
    /// Allocated bytes after each event.
    pub allocated: &'a [u64],
    /// The run's highest allocated: its first event (the evaluation
    /// findings ask where it is).
    pub run_peak: Option<usize>,
    pub opts: &'a LeakOptions,
    pub iterations: &'a [IterationStats],
    pub complete: u32,
    pub lifetimes: &'a Lifetimes,
    pub block_iterations: &'a BlockIterations,
    pub sites: &'a SiteTable,
    pub gc_runs: usize,
    /// Collections run by the recorder before writing the snapshot.
    pub gc_probes: usize,
    pub has_gc_marks: bool,
    /// Stacks from the profiler: a frame's line is where its function
    /// starts, or where profiling began, not the line that allocated.
    pub function_lines: bool,
    /// The phase of each event (forward, backward, `zero_grad`, ...).
    pub phases: &'a Phases,
    /// The evaluation passes of a recording that trains.
    pub evaluation: &'a Evaluation,
    /// Each block's category.
    pub categories: &'a [crate::categories::Category],
    /// [`crate::categories::named_gradients`] of the trace's blocks, once.
    pub named_gradients: Option<Vec<bool>>,
    /// The recorder's holders, by address.
    pub holders: &'a super::holders::HolderIndex<'a>,
    /// Which block's backward made what (the recorder's spans).
    pub backward: &'a crate::backward_blocks::BackwardBlocks,
}

/// A site and its growth per iteration (or bytes, depending on the finding).
pub(super) type SiteRate = (u32, f64);

/// How growing sites are grouped into findings: the signs of their
/// iteration-to-iteration changes, or the holder that keeps them.
type GroupKey = (Vec<i8>, Option<u32>);

/// The series of the sites worth a look (not flat, or freed by the
/// collector, or outliving, or holding gradients), with their shapes.
pub(super) struct SiteSeries {
    pub shaped: Vec<(u32, Shape, Vec<i64>)>,
    pub index: HashMap<u32, usize>,
}

impl SiteSeries {
    /// Live bytes of `site` at iteration ends (empty if not kept).
    pub fn get(&self, site: u32) -> &[i64] {
        self.index
            .get(&site)
            .map_or(&[], |&i| self.shaped[i].2.as_slice())
    }

    pub fn shape(&self, site: u32) -> Option<&Shape> {
        self.index.get(&site).map(|&i| &self.shaped[i].1)
    }
}

/// What kind of memory a stack allocates, from its category or frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Gradient,
    Optimizer,
    Other,
}

/// `stackless`: the role of an allocation without a stack (see
/// [`crate::categories::phases::stackless_is_backward`]).
fn role_of_stack(snap: &Snapshot, stack: StackId, stackless: Role) -> Role {
    if stack.is_none() || snap.stacks.get(stack).is_empty() {
        return stackless;
    }
    let mut role = Role::Other;
    let mut outside_torch = false;
    for &fid in snap.stacks.get(stack) {
        let (file, _, name) = frame_location(snap, snap.frames.get(fid));
        let f = file.replace('\\', "/");
        if f.contains("torch/optim/") {
            // A step given a closure (Lightning, LBFGS) runs forward and
            // backward inside it: the optimizer's own allocations have no
            // code of the program or another package between them and it.
            return if outside_torch { role } else { Role::Optimizer };
        }
        outside_torch |= !is_native(&file, &name) && (!is_library(&file) || is_third_party(&file));
        if name.contains("AccumulateGrad")
            || (name.contains("Backward") && name.contains("::apply"))
            || (f.ends_with("torch/autograd/__init__.py") && name == "backward")
            || name == "_engine_run_backward"
            || (f.ends_with("torch/_tensor.py") && name == "backward")
        {
            role = Role::Gradient;
        }
    }
    role
}

pub(super) struct Roles<'a> {
    snap: &'a Snapshot,
    cache: HashMap<StackId, Role>,
    /// Role of allocations without a stack (see [`role_of_stack`]).
    stackless: Role,
}

impl<'a> Roles<'a> {
    pub(super) fn new(snap: &'a Snapshot, t: &DeviceTrace) -> Roles<'a> {
        // The rule the phases follow (CUDA's engine threads have no Python
        // frames; the CPU's engine runs on the calling thread).
        let stacked = crate::categories::phases::stackless_is_backward(snap, t);
        Roles {
            snap,
            cache: HashMap::default(),
            stackless: if stacked { Role::Gradient } else { Role::Other },
        }
    }
}

impl Roles<'_> {
    pub(super) fn of_event(&mut self, t: &DeviceTrace, i: usize) -> Role {
        if let Some(c) = t.category.as_ref().and_then(|c| c.get(i)) {
            match self.snap.str(*c) {
                "gradient" => return Role::Gradient,
                "optimizer_state" => return Role::Optimizer,
                "parameter" | "activation" | "input" => return Role::Other,
                _ => {}
            }
        }
        self.of_stack(t.stack[i])
    }

    /// The role of `stack`, once per stack.
    pub(super) fn of_stack(&mut self, stack: StackId) -> Role {
        let (snap, stackless) = (self.snap, self.stackless);
        *self
            .cache
            .entry(stack)
            .or_insert_with(|| role_of_stack(snap, stack, stackless))
    }

    pub(super) fn of_block(&mut self, l: &Lifetimes, b: usize) -> Role {
        if let Some(c) = l.category[b] {
            match self.snap.str(c) {
                "gradient" => return Role::Gradient,
                "optimizer_state" => return Role::Optimizer,
                "parameter" | "activation" | "input" | "temporary" => return Role::Other,
                _ => {}
            }
        }
        self.of_stack(l.stack[b])
    }
}

/// All findings of one device.
pub(super) fn analyze(ctx: &Context, src: &mut Sources) -> (Vec<Finding>, HeldFix) {
    let mut roles = Roles::new(ctx.snap, ctx.trace);
    let held = scan_held_gradients(ctx, &mut roles);
    let in_evaluation = scan_gradients_in_evaluation(ctx, &mut roles);
    let graphs = super::graphs::scan(ctx);
    // The role of a site: its first block's category, else its largest block's stack.
    let site_role = |roles: &mut Roles, site: u32| -> Role {
        let st = &ctx.sites.stats[site as usize];
        let b = st.first_block as usize;
        if ctx.lifetimes.category[b].is_some() {
            return roles.of_block(ctx.lifetimes, b);
        }
        roles.of_stack(st.shown_stack())
    };
    let wanted: HashSet<u32> = held
        .iter()
        .flat_map(|h| h.by_site.keys())
        .chain(in_evaluation.iter().flat_map(|e| e.by_site.keys()))
        .chain(graphs.iter().flat_map(|g| g.by_site.keys()))
        .copied()
        .collect();
    let mut shaped: Vec<(u32, Shape, Vec<i64>)> = Vec::new();
    site_series(
        ctx.lifetimes,
        ctx.block_iterations,
        ctx.sites,
        ctx.complete,
        |site, s| {
            let sh = shape(s, ctx.opts.min_growth_per_iteration);
            let st = &ctx.sites.stats[site as usize];
            let long = st.outliving > 0 && st.outliving_iterations.1 > st.outliving_iterations.0;
            if sh != Shape::Flat || st.gc_freed > 0 || long || wanted.contains(&site) {
                shaped.push((site, sh, s.to_vec()));
            }
        },
    );
    let index = shaped.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
    let series = &SiteSeries { shaped, index };
    let shaped = &series.shaped;
    let n = ctx.complete;
    let mut out = Vec::new();
    let mut claimed: HashSet<u32> = HashSet::default();
    // L-BFGS's history grows for its first `history_size` evaluations:
    // the sites it explains are its finding's, not a leak's.
    let history = super::optimizer_history::scan(ctx, series);
    if let Some(h) = &history {
        claimed.extend(h.sites());
    }

    // What the recorder found holding each site's tensors, by name.
    let holder_of = ctx
        .holders
        .of_sites(ctx.lifetimes, ctx.trace, &ctx.sites.of_block);
    let named = |site: u32| holder_of.contains_key(&site);
    // Reference cycles: freed by the collector, or the saw-tooth it leaves.
    // Not tensors a named variable held (a list on a module that is itself
    // in a cycle is freed by the last collection, but the list is what
    // grows), and not memory freed only by the collection vramscope runs at
    // the end without growing (a framework's objects, in cycles, released
    // when the program is done with them).
    let collected_while_running = ctx.gc_runs > ctx.gc_probes;
    let mut cycles: Vec<(u32, f64)> = Vec::new();
    for (site, sh, s) in shaped {
        let st = &ctx.sites.stats[*site as usize];
        let per = match sh {
            Shape::Steady { per_iteration, .. } => *per_iteration,
            Shape::SawTooth { rise, .. } => *rise as f64 / n.max(1) as f64,
            _ => 0.0,
        };
        let by_gc = st.gc_freed > 0
            && (per > 0.0 || (collected_while_running && ctx.significant(st.gc_freed_bytes)));
        // The saw-tooth is the clue only where collections are not marked:
        // vramscope's recorder marks every one, so a drop it did not mark
        // was not the collector (a logger resetting its running sum).
        let saw = matches!(sh, Shape::SawTooth { .. })
            && !ctx.has_gc_marks
            && ctx.snap.source.recorder.is_none();
        if (by_gc || saw) && !named(*site) && !claimed.contains(site) {
            cycles.push((*site, per));
            claimed.insert(*site);
            let _ = s;
        }
    }
    if !cycles.is_empty() {
        out.push(cycle_finding(ctx, &cycles, series, src));
    }

    // Steady growth, grouped by the iterations in which sites grew.
    // (sign of each iteration's change, the sites that changed so)
    // Sites kept by different holders (the recorder named them) are
    // different leaks even when they grow in the same iterations.
    let mut groups: Vec<(GroupKey, Vec<SiteRate>)> = Vec::new();
    let mut regrown: Vec<SiteRate> = Vec::new();
    for (site, sh, s) in shaped {
        let Shape::Steady { per_iteration, .. } = sh else {
            continue;
        };
        if claimed.contains(site) {
            continue;
        }
        // A leak keeps tensors of many iterations: at least half of them
        // must have outlived the iteration after theirs (a scalar alive at
        // some iteration ends and not others is not one). A site whose one
        // live tensor is larger at every iteration's end is another
        // finding: a tensor grown from itself, or an input that grows.
        if ctx.sites.stats[*site as usize].outliving < u64::from(n.div_ceil(2)) {
            if let Some(per) = grows_every_iteration(s) {
                regrown.push((*site, per));
                claimed.insert(*site);
            }
            continue;
        }
        let pattern: Vec<i8> = s
            .windows(2)
            .skip(1)
            .map(|w| (w[1] - w[0]).signum() as i8)
            .collect();
        // Sites kept by one named holder are one leak, whatever their
        // pattern; the others group by the iterations they grew in.
        let pattern = match holder_of.get(site) {
            Some(&h) => (Vec::new(), Some(h)),
            None => (pattern, None),
        };
        match groups.iter_mut().find(|g| g.0 == pattern) {
            Some(g) => g.1.push((*site, *per_iteration)),
            None => groups.push((pattern, vec![(*site, *per_iteration)])),
        }
        claimed.insert(*site);
    }
    for (_, mut sites) in groups {
        sites.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.push(growth_finding(ctx, &sites, series, src));
    }
    if !regrown.is_empty() {
        regrown.sort_by(|a, b| b.1.total_cmp(&a.1));
        let work = iteration_work(ctx, &regrown);
        // A library's cache and a program's accumulator in one run are
        // two findings: one benign, one that may be a leak.
        let (library, program): (Vec<SiteRate>, Vec<SiteRate>) = regrown
            .iter()
            .partition(|&&(site, _)| library_state(ctx, site).is_some());
        for group in [library, program] {
            if !group.is_empty() {
                out.push(regrown_finding(ctx, &group, &work, series, src));
            }
        }
    }

    // Held gradients are worth a warning when they cost memory at the
    // iteration's peak: a GAN's generator keeps its gradients through the
    // discriminator's step of the next loop (DCGAN zeroes them after it),
    // where the run peaks; where they are freed before the iteration peaks,
    // nothing is lost.
    // The fix `advise` replays: `zero_grad()` before the forward, or, where
    // several optimizers step, each one's right after its own step.
    let mut held_fix = HeldFix::None;
    if let Some(h) = held {
        let (mut f, several) = held_finding(ctx, &h, series, src);
        if !h.costs_at_peak() {
            f.severity = Severity::Benign; // shown, not warned
        } else if several {
            held_fix = HeldFix::AfterOwnStep(freed_after_own_step(ctx));
        } else {
            held_fix = HeldFix::BeforeForward(h.moved);
        }
        out.push(f);
    }
    if let Some(e) = &in_evaluation {
        out.push(evaluation_held_finding(ctx, e, series, src));
    }
    // What evaluation graphs keep is theirs, not a one-time allocation
    // kept on purpose; where a leak already names the sites (a loss summed
    // with its graph, `running = running + val`), the leak is the finding.
    if let Some(g) = graphs.and_then(|g| g.without(ctx, &claimed)) {
        out.push(super::graphs::finding(ctx, &g, series, src));
        claimed.extend(g.by_site.keys());
    }

    if let Some(h) = &history {
        out.push(super::optimizer_history::finding(ctx, h, series, src));
    }

    // One-time growth, by role; tensors that outlive their next iteration.
    let mut once: Vec<(u32, f64)> = Vec::new();
    for (site, sh, _) in shaped {
        if claimed.contains(site) {
            continue;
        }
        match sh {
            Shape::OneTime { bytes, .. } => once.push((*site, *bytes as f64)),
            Shape::Flat => {
                let st = &ctx.sites.stats[*site as usize];
                if st.outliving > 0
                    && st.outliving_iterations.1 > st.outliving_iterations.0
                    && ctx.significant(st.outliving_bytes / n.max(1) as u64)
                {
                    out.push(long_lived_finding(ctx, *site, series, src));
                }
            }
            _ => {}
        }
    }
    // A site's role: that of most of its bytes alive at the end of the last
    // complete iteration (a backward call allocates gradients and temporaries).
    let once_ids: HashSet<u32> = once.iter().map(|s| s.0).collect();
    let mut role_bytes: HashMap<u32, [u64; 3]> = HashMap::default();
    let end = ctx
        .iterations
        .iter()
        .rfind(|i| i.range.complete)
        .map(|i| i.range.end - 1);
    if let Some(end) = end {
        for b in 0..ctx.lifetimes.len() {
            let site = ctx.sites.of_block[b];
            if once_ids.contains(&site) && ctx.lifetimes.alive_after(b, end as u32) {
                let r = roles.of_block(ctx.lifetimes, b) as usize;
                role_bytes.entry(site).or_default()[r] += ctx.lifetimes.size[b];
            }
        }
    }
    let mut one_time: HashMap<u8, Vec<(u32, f64)>> = HashMap::default();
    for (site, b) in once {
        let r = match role_bytes.get(&site) {
            Some(rb) => (0..3)
                .max_by_key(|&i| (rb[i], std::cmp::Reverse(i)))
                .unwrap_or(2) as u8,
            None => site_role(&mut roles, site) as u8,
        };
        one_time.entry(r).or_default().push((site, b));
    }
    for (role, mut sites) in one_time {
        let total: f64 = sites.iter().map(|s| s.1).sum();
        if !ctx.significant(total as u64) {
            continue;
        }
        sites.sort_by(|a, b| b.1.total_cmp(&a.1));
        let role = [Role::Gradient, Role::Optimizer, Role::Other][role as usize];
        out.push(one_time_finding(ctx, role, &sites, series, src));
    }
    (out, held_fix)
}

/// Larger at the end of every iteration than at the end of the one before,
/// from the first end it is alive at on (before that, the first value may
/// be held under another line: `acc = x` before `acc = torch.cat([acc,
/// x])`), in most iterations; its growth per iteration from there:
/// what a tensor made again each iteration from its previous value leaves
/// (`preds = torch.cat([preds, p])`), or the output of an input that grows.
fn grows_every_iteration(s: &[i64]) -> Option<f64> {
    let n = s.len().saturating_sub(1);
    let from = (1..=n).find(|&k| s[k] > 0)?;
    let ups = n - from;
    (n >= 3
        && ups >= 2
        && ups as f64 >= 0.6 * (n - 1) as f64
        && (from + 1..=n).all(|k| s[k] > s[k - 1]))
    .then(|| (s[n] - s[from]) as f64 / ups as f64)
}

/// Bytes allocated in each iteration but the growing tensors themselves
/// (the blocks of `except`'s sites alive at their iteration's end): the
/// work of the iteration, which grows with its input (a longer sequence, a
/// larger batch) and stays the same when only an accumulator grows. A
/// growing site may be the model's call itself (a cache made inside it),
/// so its blocks freed within their iteration are work too. Index 0 is
/// setup, `k` iteration k, up to the last complete one.
pub(super) fn iteration_work(ctx: &Context, except: &[SiteRate]) -> Vec<u64> {
    let skip: HashSet<u32> = except.iter().map(|s| s.0).collect();
    let mut work = vec![0u64; ctx.complete as usize + 1];
    let bi = ctx.block_iterations;
    for b in 0..ctx.lifetimes.len() {
        let k = bi.born[b] as usize;
        let kept = bi.died[b] > bi.born[b] && skip.contains(&ctx.sites.of_block[b]);
        if k < work.len() && !kept {
            work[k] += ctx.lifetimes.size[b];
        }
    }
    work
}
