//! Turning series shapes and gradient lifetimes into findings (their words
//! are in `explain`).

use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId};

use super::explain::{
    cycle_finding, evaluation_held_finding, growth_finding, held_finding, library_state,
    long_lived_finding, one_time_finding, regrown_finding,
};
use super::series::{shape, site_series, BlockIterations, Shape, SiteTable};
use super::source::Sources;
use super::{Finding, IterationStats, LeakOptions, Severity};
use crate::categories::evaluation::Evaluation;
use crate::categories::{Phase, Phases};
use crate::lifetimes::{Lifetimes, STILL_ALIVE};
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

struct Roles<'a> {
    snap: &'a Snapshot,
    cache: HashMap<StackId, Role>,
    /// Role of allocations without a stack (see [`role_of_stack`]).
    stackless: Role,
}

impl<'a> Roles<'a> {
    fn new(snap: &'a Snapshot, t: &DeviceTrace) -> Roles<'a> {
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
    fn of_event(&mut self, t: &DeviceTrace, i: usize) -> Role {
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
    fn of_stack(&mut self, stack: StackId) -> Role {
        let (snap, stackless) = (self.snap, self.stackless);
        *self
            .cache
            .entry(stack)
            .or_insert_with(|| role_of_stack(snap, stack, stackless))
    }

    fn of_block(&mut self, l: &Lifetimes, b: usize) -> Role {
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

/// Gradients of an earlier iteration alive at iteration k's peak.
pub(super) struct HeldScan {
    /// Index into `iterations` of the worst iteration.
    pub worst: usize,
    pub held: Vec<u64>,
    /// Of those, bytes still allocated at the worst iteration's own peak.
    pub at_peak: u64,
    /// Per iteration: the forward pass's peak (event, bytes) and the peak
    /// after it.
    pub forward: Vec<(usize, u64, u64)>,
    /// Site → (bytes, blocks) at the worst iteration's peak.
    pub by_site: HashMap<u32, (u64, u64)>,
    /// Whether those gradients were never freed between iterations.
    pub never_freed: bool,
    /// The fix replayed (`zero_grad` before the forward): each gradient
    /// held into an iteration's forward and freed before its backward,
    /// with the event before that forward's first allocation, where it is
    /// freed instead.
    pub moved: Vec<(usize, usize)>,
}

impl HeldScan {
    /// Whether the held gradients raise the worst iteration's peak (they
    /// are on top of the forward pass's peak, and it is the iteration's),
    /// or are still allocated at that peak.
    pub fn costs_at_peak(&self) -> bool {
        let (_, fwd_peak, rest) = self.forward[self.worst];
        self.at_peak > 0 || (fwd_peak > rest && self.held[self.worst] > 0)
    }
}

fn scan_held_gradients(ctx: &Context, roles: &mut Roles) -> Option<HeldScan> {
    let mut its: Vec<(usize, &IterationStats)> = ctx
        .iterations
        .iter()
        .enumerate()
        .filter(|(_, i)| i.range.complete && i.range.number >= 2)
        .collect();
    if its.is_empty() {
        return None;
    }
    let (l, bi) = (ctx.lifetimes, ctx.block_iterations);
    // The forward pass of each iteration: from its start to its first
    // backward allocation. Gradients held into it are the problem; during
    // backward they are expected.
    let mut forward = vec![(0usize, 0u64, 0u64); ctx.iterations.len()];
    // Per iteration: where its forward begins and its backward's first
    // allocation.
    let mut bounds = vec![(0usize, 0usize); ctx.iterations.len()];
    let mut stepped: Vec<usize> = Vec::new();
    for &(k, it) in &its {
        let (start, end) = (it.range.start, it.range.end);
        let bwd = (start..end)
            .find(|&i| {
                ctx.trace.action[i] == Action::Alloc
                    && roles.of_event(ctx.trace, i) == Role::Gradient
            })
            .unwrap_or(end);
        // The forward pass begins with its first allocation in a module
        // call (by its own stack or tag, not one its neighbours lent it).
        // What comes before it (the batch from the DataLoader, a
        // `zero_grad` that frees last iteration's gradients) is not the
        // forward pass: with `zero_grad()` at the top of the loop the
        // gradients are alive while the batch loads, and that is right.
        // Without phases (no stacks, no annotations) the whole stretch
        // before backward counts.
        // An evaluation pass is not a step's forward: what it holds is
        // the last step's gradients, said on their own
        // ([`scan_gradients_in_evaluation`]), and an iteration that is all
        // evaluation (a loop with no optimizer counts module calls) has no
        // step's forward.
        let step_forward = |i: usize| {
            ctx.trace.action[i] == Action::Alloc
                && ctx.phases.phase.get(i) == Some(&Phase::Forward)
                && ctx.phases.marked.get(i) == Some(&true)
                && !ctx.evaluation.contains(i)
        };
        let fwd_begin = match (start..bwd).find(|&i| step_forward(i)) {
            Some(i) => i,
            None if ctx.evaluation.spans_any(start, bwd) => continue,
            None => start,
        };
        let a = ctx.allocated;
        let fwd_peak = (fwd_begin..bwd)
            .filter(|&i| !ctx.evaluation.contains(i))
            .max_by_key(|&i| (a[i], std::cmp::Reverse(i)))
            .unwrap_or(fwd_begin);
        let rest = (bwd..end).map(|i| a[i]).max().unwrap_or(0);
        forward[k] = (fwd_peak, a.get(fwd_peak).copied().unwrap_or(0), rest);
        bounds[k] = (fwd_begin, bwd);
        stepped.push(k);
    }
    its.retain(|(k, _)| stepped.contains(k));
    if its.is_empty() {
        return None;
    }
    let peaks: Vec<usize> = its.iter().map(|(k, _)| forward[*k].0).collect();
    let mut held = vec![0u64; ctx.iterations.len()];
    let mut diff = vec![0i64; its.len() + 1];
    let mut grads = Vec::new();
    for b in 0..l.len() {
        // Blocks from before the window or from setup are not a previous
        // iteration's gradients.
        if bi.born[b] == 0 || roles.of_block(l, b) != Role::Gradient {
            continue;
        }
        let (birth, death) = l.span(b);
        // Iterations after the block's own whose peak falls in its lifetime.
        let lo = its
            .partition_point(|(_, i)| i.range.number <= bi.born[b])
            .max(peaks.partition_point(|&p| p < birth));
        let hi = peaks.partition_point(|&p| p < death);
        if lo < hi {
            diff[lo] += l.size[b] as i64;
            diff[hi] -= l.size[b] as i64;
            grads.push(b);
        }
    }
    let mut acc = 0i64;
    for (j, (k, _)) in its.iter().enumerate() {
        acc += diff[j];
        held[*k] = acc.max(0) as u64;
    }
    let with_held = its.iter().filter(|(k, _)| held[*k] > 0).count();
    let &(worst, _) = its.iter().max_by_key(|(k, _)| held[*k])?;
    if with_held * 2 < its.len() || !ctx.significant(held[worst]) {
        return None;
    }
    let peak = forward[worst].0;
    let number = ctx.iterations[worst].range.number;
    let mut by_site: HashMap<u32, (u64, u64)> = HashMap::default();
    let mut never_freed = true;
    let mut at_peak = 0u64;
    let iteration_peak = ctx.iterations[worst].peak_event as u32;
    for &b in &grads {
        if bi.born[b] < number && l.alive_after(b, iteration_peak) {
            at_peak += l.size[b];
        }
        if bi.born[b] < number && l.alive_after(b, peak as u32) {
            let e = by_site.entry(ctx.sites.of_block[b]).or_default();
            e.0 += l.size[b];
            e.1 += 1;
            never_freed &= l.death[b] == STILL_ALIVE && bi.born[b] <= 1;
        }
    }
    // Freed between the forward and the backward they were held into:
    // `zero_grad()` there; at the top of the loop, they go before it.
    let mut moved = Vec::new();
    for &b in &grads {
        let (birth, death) = l.span(b);
        let next = its
            .iter()
            .map(|&(k, _)| bounds[k])
            .find(|&(begin, _)| begin > birth);
        if let Some((begin, bwd)) = next {
            if begin > 0 && death > begin && death < bwd {
                moved.push((b, begin - 1));
            }
        }
    }
    Some(HeldScan {
        worst,
        at_peak,
        forward,
        held,
        by_site,
        never_freed,
        moved,
    })
}

/// Gradients alive at the run's peak where it is in an evaluation pass.
pub(super) struct EvaluationHeld {
    /// The run's peak (an event in an evaluation pass).
    pub peak: usize,
    pub bytes: u64,
    /// Site → (bytes, blocks).
    pub by_site: HashMap<u32, (u64, u64)>,
    /// The highest allocated outside the evaluation passes.
    pub outside: u64,
}

/// Where the run peaks in an evaluation pass, the gradients alive there:
/// the last training step's, which nothing frees before evaluating when
/// `zero_grad` runs at the top of the next step (pytorch/examples' MNIST
/// and word language model, most loops written the classic way).
fn scan_gradients_in_evaluation(ctx: &Context, roles: &mut Roles) -> Option<EvaluationHeld> {
    let a = ctx.allocated;
    let peak = ctx.run_peak?;
    if !ctx.evaluation.contains(peak) {
        return None;
    }
    let l = ctx.lifetimes;
    let mut by_site: HashMap<u32, (u64, u64)> = HashMap::default();
    let mut bytes = 0u64;
    for b in 0..l.len() {
        if l.alive_after(b, peak as u32) && roles.of_block(l, b) == Role::Gradient {
            bytes += l.size[b];
            let e = by_site.entry(ctx.sites.of_block[b]).or_default();
            e.0 += l.size[b];
            e.1 += 1;
        }
    }
    let outside = (0..a.len())
        .filter(|&i| !ctx.evaluation.contains(i))
        .map(|i| a[i])
        .max()
        .unwrap_or(0);
    ctx.significant(bytes).then_some(EvaluationHeld {
        peak,
        bytes,
        by_site,
        outside,
    })
}

/// All findings of one device.
pub(super) fn analyze(ctx: &Context, src: &mut Sources) -> (Vec<Finding>, Vec<(usize, usize)>) {
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
    // iteration's peak: a GAN's generator keeps its gradients through its
    // next forward (DCGAN zeroes them after the discriminator's step), but
    // when that forward is not where the iteration peaks, nothing is lost.
    if let Some(h) = &held {
        let mut f = held_finding(ctx, h, series, src);
        if !h.costs_at_peak() {
            f.severity = Severity::Benign; // shown, not warned
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
    let moved = held
        .filter(|h| h.costs_at_peak())
        .map(|h| h.moved)
        .unwrap_or_default();
    (out, moved)
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
