//! Gradients held where they cost memory: an earlier step's gradients
//! alive through the next forward (`zero_grad()` after the forward, or
//! with `set_to_none=False`), and the last step's alive through an
//! evaluation pass where the run peaks. Each scan gives the finding's
//! figures and, for the first, the blocks `zero_grad()` before the
//! forward would free and where (`advise`'s `zero_grad_first`).

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::Action;

use super::findings::{Context, Role, Roles};
use super::IterationStats;
use crate::categories::Phase;
use crate::lifetimes::STILL_ALIVE;

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
    /// Whether they cost memory at the worst iteration's peak: a 1% share
    /// of the run's peak or more comes off it without them
    /// ([`HeldScan::lowers_by`]), or, never freed, they are allocated there.
    pub costly: bool,
    /// What the worst iteration's peak loses without them
    /// ([`HeldScan::lowers_by`]).
    lowers: u64,
}

impl HeldScan {
    /// What the worst iteration's peak loses without them: the iteration's
    /// allocated with each held gradient gone from the iteration's start
    /// until it was freed, at its highest. Freed before the backward (the
    /// usual `zero_grad()` after the forward), that is the forward peaking
    /// that much lower, down to the peak after it (backward and the step,
    /// which make the gradients again): torchvision's Faster R-CNN
    /// (MobileNetV3) held 72.36 MiB of gradients at its forward's peak,
    /// 905.93 MiB, and its backward peaks at 894.40, which the run with
    /// `zero_grad()` first peaked at: 11.53 MiB lower, not 72.36. Freed
    /// later, they are gone from the backward's peak too: a GAN's
    /// generator gradients, stepped on at the end of one loop and freed by
    /// `netG.zero_grad()` after the discriminator's step in the next,
    /// through the discriminator's backward, where the run peaks.
    pub fn lowers_by(&self) -> u64 {
        self.lowers
    }

    /// Whether the held gradients cost memory at the worst iteration's
    /// peak (see `costly`).
    pub fn costs_at_peak(&self) -> bool {
        self.costly
    }
}

pub(super) fn scan_held_gradients(ctx: &Context, roles: &mut Roles) -> Option<HeldScan> {
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
    let a = ctx.allocated;
    // The forward pass begins with its first allocation in a module call
    // (by its own stack or tag, not one its neighbours lent it). What
    // comes before it (the batch from the DataLoader, a `zero_grad` that
    // frees last iteration's gradients) is not the forward pass: with
    // `zero_grad()` at the top of the loop the gradients are alive while
    // the batch loads, and that is right. Without phases (no stacks, no
    // annotations) the whole stretch before backward counts.
    // An evaluation pass is not a step's forward: what it holds is the
    // last step's gradients, said on their own
    // ([`scan_gradients_in_evaluation`]), and an iteration that is all
    // evaluation (a loop with no optimizer counts module calls) has no
    // step's forward.
    let step_forward = |i: usize| {
        ctx.trace.action[i] == Action::Alloc
            && ctx.phases.phase.get(i) == Some(&Phase::Forward)
            && ctx.phases.marked.get(i) == Some(&true)
            && !ctx.evaluation.contains(i)
    };
    // (forward's first allocation, backward's first allocation) of the
    // stretch `start..end`, or None where it is all evaluation.
    let mut forward_of = |start: usize, end: usize| {
        let bwd = (start..end)
            .find(|&i| {
                ctx.trace.action[i] == Action::Alloc
                    && roles.of_event(ctx.trace, i) == Role::Gradient
            })
            .unwrap_or(end);
        match (start..bwd).find(|&i| step_forward(i)) {
            Some(i) => Some((i, bwd)),
            None if ctx.evaluation.spans_any(start, bwd) => None,
            None => Some((start, bwd)),
        }
    };
    for &(k, it) in &its {
        let (start, end) = (it.range.start, it.range.end);
        let Some((fwd_begin, bwd)) = forward_of(start, end) else {
            continue;
        };
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
    // The fix moves the gradients held into every forward, the one after
    // the last whole iteration too, cut off by the recording's end (where
    // a run often peaks: torchvision's Faster R-CNN's fourth forward, whose
    // gradients, kept there, made the replay of the fix gain nothing where
    // the real run gained 11.53 MiB); what is held is said of whole ones.
    let mut moves_into: Vec<(usize, usize)> = its.iter().map(|&(k, _)| bounds[k]).collect();
    let tail = ctx.iterations.last().map_or(0, |i| i.range.end);
    if tail < ctx.trace.action.len() {
        // Only a forward found as one (what follows the last step without
        // a module call, the program's end, is none).
        moves_into.extend(
            forward_of(tail, ctx.trace.action.len()).filter(|&(begin, _)| step_forward(begin)),
        );
    }
    let peaks: Vec<usize> = its.iter().map(|(k, _)| forward[*k].0).collect();
    let mut held = vec![0u64; ctx.iterations.len()];
    let mut diff = vec![0i64; its.len() + 1];
    let mut grads = Vec::new();
    let mut every_grad = Vec::new();
    let named = ctx.named_gradients.as_ref();
    for b in 0..l.len() {
        // Blocks from before the window or from setup are not a previous
        // iteration's gradients.
        if bi.born[b] == 0 || roles.of_block(l, b) != Role::Gradient || named.is_some_and(|n| !n[b])
        {
            continue;
        }
        every_grad.push(b);
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
    for &b in &every_grad {
        let (birth, death) = l.span(b);
        let next = moves_into.iter().copied().find(|&(begin, _)| begin > birth);
        if let Some((begin, bwd)) = next {
            if begin > 0 && death > begin && death < bwd {
                moved.push((b, begin - 1));
            }
        }
    }
    // The worst iteration without them: each held gradient (born before it,
    // alive at its forward's peak) gone from the iteration's start until it
    // was freed in it; one freed after it (or never: `set_to_none=False`)
    // until the backward, which makes it again.
    let range = &ctx.iterations[worst].range;
    let (start, end) = (range.start, range.end.min(a.len()));
    let backward = bounds[worst].1.clamp(start, end);
    let mut gone = vec![0i64; end.saturating_sub(start) + 1];
    for &b in &grads {
        if bi.born[b] < number && l.alive_after(b, peak as u32) {
            let freed = l.span(b).1;
            let death = if freed < end {
                freed.max(start)
            } else {
                backward
            };
            gone[0] += l.size[b] as i64;
            gone[death - start] -= l.size[b] as i64;
        }
    }
    let mut without = 0u64;
    let mut minus = 0i64;
    for i in start..end {
        minus += gone[i - start];
        without = without.max(a[i].saturating_sub(minus.max(0) as u64));
    }
    let iteration_peak = (start..end).map(|i| a[i]).max().unwrap_or(0);
    let lowers = iteration_peak.saturating_sub(without).min(held[worst]);
    let mut scan = HeldScan {
        worst,
        at_peak,
        forward,
        held,
        by_site,
        never_freed,
        moved,
        costly: false,
        lowers,
    };
    // Never freed (`set_to_none=False`), they are in backward too, where
    // `zero_grad(set_to_none=True)` first lets backward make them as it
    // frees activations: allocated at the peak is the cost.
    scan.costly = if never_freed {
        at_peak > 0 || scan.lowers_by() > 0
    } else {
        ctx.significant(scan.lowers_by())
    };
    Some(scan)
}

/// Each gradient the recorder named (`Context::named_gradients`) freed right after
/// the optimizer step that used it, where the program freed it later. The
/// recorder names a gradient inside the step of the optimizer that holds
/// its parameter (its tag's time), so the first `Optimizer.step#` to end
/// at or after that time is that step, whatever other optimizers stepped
/// since the backward that made it (two optimizers over one model stepping
/// one after the other: the second one's gradients stay through the first
/// one's step). A GAN's generator gradients, kept from its step through the
/// discriminator's in the next loop until `netG.zero_grad()`, go right
/// after the generator's step, as `optimizerG.zero_grad(set_to_none=True)`
/// there frees them; the next backward makes them again, as recorded.
/// Blocks never freed from the first iteration on (`set_to_none=False`)
/// stay: no backward makes them again. Without the recorder's names,
/// nothing: which step used a gradient cannot be told.
pub(super) fn freed_after_own_step(ctx: &Context) -> Vec<(usize, usize)> {
    use vramscope_snapshot::AnnotationStage;
    let (t, snap) = (ctx.trace, ctx.snap);
    let Some(named) = ctx.named_gradients.as_deref().filter(|_| t.has_time()) else {
        return Vec::new();
    };
    // When each step ended.
    let mut ends: Vec<i64> = snap
        .annotations
        .iter()
        .filter(|a| {
            a.stage == AnnotationStage::End && snap.str(a.name).starts_with("Optimizer.step#")
        })
        .map(|a| a.time_us)
        .collect();
    ends.sort_unstable();
    // When the recorder named a gradient at each address.
    let mut tagged: HashMap<u64, Vec<i64>> = HashMap::default();
    for g in &snap.tags {
        if snap.str(g.category) == "gradient" {
            tagged.entry(g.addr).or_default().push(g.time_us);
        }
    }
    let (l, bi) = (ctx.lifetimes, ctx.block_iterations);
    let time = |e: usize| t.time_us.get(e).copied();
    let mut out = Vec::new();
    for (b, _) in named.iter().enumerate().take(l.len()).filter(|(_, &n)| n) {
        if l.death[b] == STILL_ALIVE && bi.born[b] <= 1 {
            continue;
        }
        let (birth, death) = l.span(b);
        let (from, to) = (
            time(birth).unwrap_or(i64::MIN),
            time(death).unwrap_or(i64::MAX),
        );
        // The first time it was named while alive: inside its step.
        let Some(named_at) = tagged
            .get(&l.addr[b])
            .and_then(|ts| ts.iter().copied().filter(|&x| from <= x && x < to).min())
        else {
            continue;
        };
        let Some(&end) = ends.get(ends.partition_point(|&e| e < named_at)) else {
            continue;
        };
        // The first event after the step ended.
        let after = t.time_us.partition_point(|&e| e < end);
        if after > 0 && after < t.len() && death > after {
            out.push((b, after - 1));
        }
    }
    out
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
pub(super) fn scan_gradients_in_evaluation(
    ctx: &Context,
    roles: &mut Roles,
) -> Option<EvaluationHeld> {
    let a = ctx.allocated;
    let peak = ctx.run_peak?;
    if !ctx.evaluation.contains(peak) {
        return None;
    }
    let l = ctx.lifetimes;
    let mut by_site: HashMap<u32, (u64, u64)> = HashMap::default();
    let mut bytes = 0u64;
    let named = ctx.named_gradients.as_ref();
    for b in 0..l.len() {
        if l.alive_after(b, peak as u32)
            && roles.of_block(l, b) == Role::Gradient
            && named.is_none_or(|n| n[b])
        {
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
