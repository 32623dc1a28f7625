//! Turning series shapes and gradient lifetimes into findings: plain-language
//! explanations with their evidence and a concrete fix.

use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId};

use super::series::{shape, site_series, BlockIterations, Shape, SiteTable};
use super::source::Sources;
use super::{Finding, FindingKind, IterationStats, LeakOptions, Severity, SiteEvidence};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::sites::{frame_label, frame_location, stack_lines};
use crate::units::bytes;

pub(super) struct Context<'a> {
    pub snap: &'a Snapshot,
    pub trace: &'a DeviceTrace,
    /// Allocated bytes after each event.
    pub allocated: &'a [u64],
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
}

impl Context<'_> {
    fn max_peak(&self) -> u64 {
        self.iterations
            .iter()
            .map(|i| i.peak_bytes)
            .max()
            .unwrap_or(0)
    }

    fn significant(&self, b: u64) -> bool {
        b as f64 >= self.opts.min_fraction_of_peak * self.max_peak() as f64 && b > 0
    }

    /// Evidence of `site`: `v` is its growth per iteration when `rate`, else
    /// the bytes it contributes to the finding.
    fn evidence(
        &self,
        site: u32,
        series: &[i64],
        v: f64,
        rate: bool,
        keeper: bool,
        src: &mut Sources,
    ) -> SiteEvidence {
        let s = &self.sites.stats[site as usize];
        let (label, file, line) = match s.site {
            Some(fid) => {
                let (file, line, _) = frame_location(self.snap, self.snap.frames.get(fid));
                let mut label = frame_label(self.snap, fid);
                if let Some(c) = s.callee {
                    label = format!("{label} → {}", callee_label(self.snap, c));
                }
                (label, file, line)
            }
            None => ("<no stack recorded>".to_owned(), String::new(), 0),
        };
        SiteEvidence {
            code: src
                .line(&file, line)
                .filter(|c| !self.function_lines || c.starts_with("def ")),
            kept_by: if keeper {
                src.keeper(&file, line)
            } else {
                None
            },
            site: label,
            file,
            line,
            live_bytes: series.iter().map(|&x| x.max(0) as u64).collect(),
            bytes_per_iteration: if rate { v } else { 0.0 },
            bytes: if rate {
                series.last().map_or(0, |&x| x.max(0) as u64)
            } else {
                v.max(0.0) as u64
            },
            outliving_blocks: s.outliving,
            outliving_bytes: s.outliving_bytes,
            gc_freed_blocks: s.gc_freed,
            gc_freed_bytes: s.gc_freed_bytes,
            stack: stack_lines(self.snap, s.example.1),
        }
    }
}

/// What kind of memory a stack allocates, from its category or frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Gradient,
    Optimizer,
    Other,
}

fn role_of_stack(snap: &Snapshot, stack: StackId) -> Role {
    let mut role = Role::Other;
    for &fid in snap.stacks.get(stack) {
        let (file, _, name) = frame_location(snap, snap.frames.get(fid));
        let f = file.replace('\\', "/");
        if f.contains("torch/optim/") {
            return Role::Optimizer;
        }
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
        let snap = self.snap;
        *self
            .cache
            .entry(t.stack[i])
            .or_insert_with(|| role_of_stack(snap, t.stack[i]))
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
        let snap = self.snap;
        *self
            .cache
            .entry(l.stack[b])
            .or_insert_with(|| role_of_stack(snap, l.stack[b]))
    }
}

/// Gradients of an earlier iteration alive at iteration k's peak.
struct HeldScan {
    /// Index into `iterations` of the worst iteration.
    worst: usize,
    held: Vec<u64>,
    /// Of those, bytes still allocated at the worst iteration's own peak.
    at_peak: u64,
    /// Per iteration: the forward pass's peak (event, bytes) and the peak
    /// after it.
    forward: Vec<(usize, u64, u64)>,
    /// Site → (bytes, blocks) at the worst iteration's peak.
    by_site: HashMap<u32, (u64, u64)>,
    /// Whether those gradients were never freed between iterations.
    never_freed: bool,
}

fn scan_held_gradients(ctx: &Context, roles: &mut Roles) -> Option<HeldScan> {
    let its: Vec<(usize, &IterationStats)> = ctx
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
    for &(k, it) in &its {
        let (start, end) = (it.range.start, it.range.end);
        let bwd = (start..end)
            .find(|&i| {
                ctx.trace.action[i] == Action::Alloc
                    && roles.of_event(ctx.trace, i) == Role::Gradient
            })
            .unwrap_or(end);
        let a = ctx.allocated;
        let fwd_peak = (start..bwd)
            .max_by_key(|&i| (a[i], std::cmp::Reverse(i)))
            .unwrap_or(start);
        let rest = (bwd..end).map(|i| a[i]).max().unwrap_or(0);
        forward[k] = (fwd_peak, a.get(fwd_peak).copied().unwrap_or(0), rest);
    }
    let peaks: Vec<usize> = its.iter().map(|(k, _)| forward[*k].0).collect();
    let mut held = vec![0u64; ctx.iterations.len()];
    let mut diff = vec![0i64; its.len() + 1];
    let mut grads = Vec::new();
    for b in 0..l.len() {
        if roles.of_block(l, b) != Role::Gradient {
            continue;
        }
        let birth = if l.birth[b] == BEFORE_WINDOW {
            0
        } else {
            l.birth[b] as usize
        };
        let death = if l.death[b] == STILL_ALIVE {
            usize::MAX
        } else {
            l.death[b] as usize
        };
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
    Some(HeldScan {
        worst,
        at_peak,
        forward,
        held,
        by_site,
        never_freed,
    })
}

/// All findings of one device.
pub(super) fn analyze(ctx: &Context, src: &mut Sources) -> Vec<Finding> {
    let mut roles = Roles {
        snap: ctx.snap,
        cache: HashMap::default(),
    };
    let held = scan_held_gradients(ctx, &mut roles);
    // The role of a site: its first block's category, else its largest block's stack.
    let site_role = |roles: &mut Roles, site: u32| -> Role {
        let st = &ctx.sites.stats[site as usize];
        let b = st.first_block as usize;
        if ctx.lifetimes.category[b].is_some() {
            return roles.of_block(ctx.lifetimes, b);
        }
        *roles
            .cache
            .entry(st.example.1)
            .or_insert_with(|| role_of_stack(ctx.snap, st.example.1))
    };
    let wanted: HashSet<u32> = held
        .as_ref()
        .map(|h| h.by_site.keys().copied().collect())
        .unwrap_or_default();
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
    let series_of: HashMap<u32, usize> = shaped.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
    let n = ctx.complete;
    let mut out = Vec::new();
    let mut claimed: HashSet<u32> = HashSet::default();

    // Reference cycles: freed by the collector, or the saw-tooth it leaves.
    let mut cycles: Vec<(u32, f64)> = Vec::new();
    for (site, sh, s) in &shaped {
        let st = &ctx.sites.stats[*site as usize];
        let per = match sh {
            Shape::Steady { per_iteration, .. } => *per_iteration,
            Shape::SawTooth { rise, .. } => *rise as f64 / n.max(1) as f64,
            _ => 0.0,
        };
        let by_gc = st.gc_freed > 0 && (per > 0.0 || ctx.significant(st.gc_freed_bytes));
        let saw = matches!(sh, Shape::SawTooth { .. }) && !ctx.has_gc_marks;
        if by_gc || saw {
            cycles.push((*site, per));
            claimed.insert(*site);
            let _ = s;
        }
    }
    if !cycles.is_empty() {
        out.push(cycle_finding(ctx, &cycles, &shaped, &series_of, src));
    }

    // Steady growth, grouped by the iterations in which sites grew.
    let mut groups: Vec<(Vec<i8>, Vec<(u32, f64)>)> = Vec::new();
    for (site, sh, s) in &shaped {
        let Shape::Steady { per_iteration, .. } = sh else {
            continue;
        };
        if claimed.contains(site) {
            continue;
        }
        let pattern: Vec<i8> = s
            .windows(2)
            .skip(1)
            .map(|w| (w[1] - w[0]).signum() as i8)
            .collect();
        match groups.iter_mut().find(|g| g.0 == pattern) {
            Some(g) => g.1.push((*site, *per_iteration)),
            None => groups.push((pattern, vec![(*site, *per_iteration)])),
        }
        claimed.insert(*site);
    }
    for (_, mut sites) in groups {
        sites.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.push(growth_finding(ctx, &sites, &shaped, &series_of, src));
    }

    if let Some(h) = &held {
        out.push(held_finding(ctx, h, &shaped, &series_of, src));
    }

    // One-time growth, by role; tensors that outlive their next iteration.
    let mut once: Vec<(u32, f64)> = Vec::new();
    for (site, sh, _) in &shaped {
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
                    out.push(long_lived_finding(ctx, *site, &shaped, &series_of, src));
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
        out.push(one_time_finding(
            ctx, role, &sites, &shaped, &series_of, src,
        ));
    }
    out
}

fn evidence_list(
    ctx: &Context,
    sites: &[(u32, f64)],
    (rate, keeper): (bool, bool),
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Vec<SiteEvidence> {
    sites
        .iter()
        .take(ctx.opts.max_sites.max(1))
        .map(|&(site, v)| {
            let s = series_of
                .get(&site)
                .map(|&i| shaped[i].2.as_slice())
                .unwrap_or(&[]);
            ctx.evidence(site, s, v, rate, keeper, src)
        })
        .collect()
}

fn growth_finding(
    ctx: &Context,
    sites: &[(u32, f64)],
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Finding {
    let per: f64 = sites.iter().map(|s| s.1).sum();
    let ev = evidence_list(ctx, sites, (true, sites.len() == 1), shaped, series_of, src);
    let n = ctx.complete;
    let first = &ev[0];
    let total: u64 = ev
        .iter()
        .map(|e| e.live_bytes.last().copied().unwrap_or(0))
        .sum();
    let outliving: u64 = ev.iter().map(|e| e.outliving_blocks).sum();
    let in_forward = ev.iter().any(|e| {
        e.stack
            .iter()
            .any(|f| f.contains(" in forward") || f.contains("torch/nn/modules/"))
    });
    if sites.len() >= 2 {
        let names: Vec<&str> = ev.iter().map(|e| e.site.as_str()).collect();
        Finding {
            kind: FindingKind::RetainedGraph,
            severity: Severity::Leak,
            title: format!("{} allocation sites grow together, {} per iteration", sites.len(), bytes(per as u64)),
            explanation: format!(
                "Tensors from {} sites ({}) are allocated in every iteration and never freed: {} more at the end of each iteration, {} by the end of iteration {n}; {outliving} tensors outlived the iteration after theirs. \
                 Sites that grow together are usually one autograd graph per iteration kept alive: a tensor that requires grad is stored across iterations{}, and its graph holds the activations saved for backward.",
                sites.len(),
                names.join(", "),
                bytes(per as u64),
                bytes(total),
                if in_forward { " (they were created in forward)" } else { "" },
            ),
            fix: "Accumulate `loss.item()` (or `loss.detach()`) instead of `loss` (`total_loss += loss` keeps every graph), store `.detach()`ed outputs, and run evaluation under `torch.inference_mode()` (or `torch.no_grad()`).".into(),
            bytes_per_iteration: per,
            bytes: total,
            iterations: (1, n),
            sites: ev,
        }
    } else {
        let keeper = first
            .kept_by
            .as_ref()
            .map(|(line, code)| {
                let verb = if ctx.function_lines {
                    "probably stores it"
                } else {
                    "stores it"
                };
                format!(
                    " Line {line} of {} {verb}: `{code}`.",
                    short_file(&first.file)
                )
            })
            .unwrap_or_default();
        let code = first
            .code
            .as_ref()
            .map(|c| format!(" (`{c}`)"))
            .unwrap_or_default();
        Finding {
            kind: FindingKind::Growth,
            severity: Severity::Leak,
            title: format!("{} grows by {} per iteration", first.site, bytes(per as u64)),
            explanation: format!(
                "The tensors allocated at {}{code} are kept from one iteration to the next: {} more are alive at the end of each iteration, {} by the end of iteration {n}; {} of them outlived the iteration after theirs.{keeper} \
                 Something holds a reference to them across iterations: a list that is appended to, an attribute, a dict or a closure.",
                first.site,
                bytes(per as u64),
                bytes(total),
                first.outliving_blocks,
            ),
            fix: if first.kept_by.as_ref().is_some_and(|k| k.1.contains(".append(")) {
                "Do not keep the tensor itself: append `x.detach()` (or `x.detach().cpu()`, or `x.item()` for a scalar), and clear the list once it has been used.".into()
            } else if in_forward {
                "Do not store tensors from `forward` on the module or in lists: keep `x.detach()` (or `.cpu()`/`.item()`) if it is for logging, and drop the reference at the end of the iteration.".into()
            } else {
                "Drop the reference at the end of the iteration, or keep `x.detach().cpu()` / `x.item()` instead of the tensor.".into()
            },
            bytes_per_iteration: per,
            bytes: total,
            iterations: (1, n),
            sites: ev,
        }
    }
}

fn cycle_finding(
    ctx: &Context,
    sites: &[(u32, f64)],
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Finding {
    let mut sites = sites.to_vec();
    sites.sort_by_key(|s| std::cmp::Reverse(ctx.sites.stats[s.0 as usize].gc_freed_bytes));
    let ev = evidence_list(ctx, &sites, (true, false), shaped, series_of, src);
    let gc_bytes: u64 = ev.iter().map(|e| e.gc_freed_bytes).sum();
    let gc_blocks: u64 = ev.iter().map(|e| e.gc_freed_blocks).sum();
    let swing: u64 = ev
        .iter()
        .map(|e| {
            let max = e.live_bytes.iter().max().copied().unwrap_or(0);
            let min = e.live_bytes.iter().min().copied().unwrap_or(0);
            max - min
        })
        .sum();
    let per: f64 = sites.iter().map(|s| s.1).sum();
    let first = &ev[0];
    let code = first
        .code
        .as_ref()
        .map(|c| format!(" (`{c}`)"))
        .unwrap_or_default();
    let explanation = if gc_blocks > 0 {
        let runs = match (ctx.gc_runs - ctx.gc_probes, ctx.gc_probes) {
            (0, _) => "the full collection vramscope ran before writing the snapshot; Python's collector had not run during the recording".to_owned(),
            (n, 0) => format!("{n} collection(s) during the recording"),
            (n, _) => format!("{n} collection(s) during the recording and the one vramscope ran before writing the snapshot"),
        };
        format!(
            "{gc_blocks} tensors ({}) allocated at {}{code} were freed only by Python's cycle collector ({runs}): nothing but reference cycles kept them alive. \
             Reference counting frees everything else at once; these wait for a collection, which knows nothing about GPU memory, so they pile up ({} per iteration, up to {} alive at once) and can run the device out of memory.",
            bytes(gc_bytes),
            first.site,
            bytes(per.max(0.0) as u64),
            bytes(swing),
        )
    } else {
        format!(
            "The tensors allocated at {}{code} pile up for several iterations and are then freed all at once (up to {} alive before a drop): the pattern of objects in reference cycles, which only Python's cycle collector frees. \
             (Record with vramscope to have collections marked in the snapshot and this confirmed.)",
            first.site,
            bytes(swing),
        )
    };
    Finding {
        kind: FindingKind::ReferenceCycle,
        severity: Severity::Leak,
        title: format!("reference cycles hold tensors from {}", first.site),
        explanation,
        fix: "Break the cycle: make back-references weak (`weakref.ref(parent)`), clear them when done (`node.other = None`), and do not store on an object a bound method or closure that refers to the object itself. `vramscope.cycles.watch()` shows the objects and the edges of each cycle; `gc.collect()` after each iteration is a stop-gap.".into(),
        bytes_per_iteration: per,
        bytes: gc_bytes.max(swing),
        iterations: (1, ctx.complete),
        sites: ev,
    }
}

fn held_finding(
    ctx: &Context,
    h: &HeldScan,
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Finding {
    let worst = &ctx.iterations[h.worst];
    let (_, fwd_peak, rest) = h.forward[h.worst];
    let held = h.held[h.worst];
    let mut sites: Vec<(u32, f64)> = h
        .by_site
        .iter()
        .map(|(&s, &(b, _))| (s, b as f64))
        .collect();
    sites.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let ev = evidence_list(ctx, &sites, (false, false), shaped, series_of, src);
    let count: u64 = h.by_site.values().map(|v| v.1).sum();
    // Without them the forward pass would have peaked `held` lower; the
    // iteration's peak drops by as much, down to the peak after the forward.
    let raise = if fwd_peak > rest {
        held.min(fwd_peak - rest)
    } else {
        0
    };
    let effect = if h.at_peak > 0 {
        format!(
            " {} of them are still allocated at the iteration's peak ({}).",
            bytes(h.at_peak),
            bytes(worst.peak_bytes)
        )
    } else if raise > 0 {
        format!(
            " They raise the iteration's peak ({}) by {}.",
            bytes(worst.peak_bytes),
            bytes(raise)
        )
    } else {
        format!(" The iteration's peak ({}) comes later, in backward or the optimizer step, so they do not raise it here; with more activations they would.", bytes(worst.peak_bytes))
    };
    let never = if h.never_freed {
        " They were allocated by the first backward pass and never freed: `zero_grad(set_to_none=False)` zeroes gradients in place and keeps their memory."
    } else {
        " They were freed later in that iteration: `zero_grad()` runs after the forward pass instead of before it."
    };
    Finding {
        kind: FindingKind::HeldGradients,
        severity: Severity::Warning,
        title: format!("gradients of the previous iteration held through the forward pass: {}", bytes(held)),
        explanation: format!(
            "When the forward pass of iteration {} peaked ({}), {count} gradient tensors ({}) from the previous backward pass were still allocated, on top of the activations.{never}{effect}",
            worst.range.number,
            bytes(fwd_peak),
            bytes(held),
        ),
        fix: "Call `optimizer.zero_grad(set_to_none=True)` before the forward pass (at the top of the loop, or right after `optimizer.step()`), so gradients are freed before activations are allocated.".into(),
        bytes_per_iteration: 0.0,
        bytes: held,
        iterations: (worst.range.number, worst.range.number),
        sites: ev,
    }
}

fn long_lived_finding(
    ctx: &Context,
    site: u32,
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Finding {
    let st = &ctx.sites.stats[site as usize];
    let ev = evidence_list(
        ctx,
        &[(site, st.outliving_bytes as f64)],
        (false, true),
        shaped,
        series_of,
        src,
    );
    let (a, b) = st.outliving_iterations;
    Finding {
        kind: FindingKind::LongLived,
        severity: Severity::Warning,
        title: format!("tensors from {} outlive the next iteration", ev[0].site),
        explanation: format!(
            "{} tensors ({}) allocated at {} in iterations {a}–{b} were still alive after the iteration following theirs, without growing further: they are kept for several iterations (a history, a cache, a deferred free).",
            st.outliving,
            bytes(st.outliving_bytes),
            ev[0].site,
        ),
        fix: "If they are not needed, drop the reference at the end of the iteration; if they are (a history of outputs), keep `.detach().cpu()` copies.".into(),
        bytes_per_iteration: 0.0,
        bytes: st.outliving_bytes,
        iterations: (a, b),
        sites: ev,
    }
}

fn one_time_finding(
    ctx: &Context,
    role: Role,
    sites: &[(u32, f64)],
    shaped: &[(u32, Shape, Vec<i64>)],
    series_of: &HashMap<u32, usize>,
    src: &mut Sources,
) -> Finding {
    let total: f64 = sites.iter().map(|s| s.1).sum();
    let ev = evidence_list(ctx, sites, (false, false), shaped, series_of, src);
    let by = sites
        .iter()
        .filter_map(|s| match series_of.get(&s.0).map(|&i| &shaped[i].1) {
            Some(Shape::OneTime { by, .. }) => Some(*by),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    let (title, explanation) = match role {
        Role::Optimizer => (
            format!("optimizer state: {} created by the first step (expected)", bytes(total as u64)),
            format!("{} were allocated by the optimizer during iteration {by} and stayed constant afterwards: its state (Adam keeps two tensors per parameter, SGD with momentum one). This is expected and happens once.", bytes(total as u64)),
        ),
        Role::Gradient => (
            format!("gradients: {} allocated once and kept (expected)", bytes(total as u64)),
            format!("{} of gradients were allocated by the backward pass of iteration {by} and stay allocated between iterations, at a constant size.", bytes(total as u64)),
        ),
        Role::Other => (
            format!("{} allocated in the first iteration(s) and kept (one-time)", bytes(total as u64)),
            format!("{} were allocated by the end of iteration {by} and stayed constant afterwards: lazily created state, caches or buffers. This does not grow.", bytes(total as u64)),
        ),
    };
    Finding {
        kind: FindingKind::OneTime,
        severity: Severity::Benign,
        title,
        explanation,
        fix: "Nothing to fix: this memory does not grow. To lower it, see the optimizer (e.g. a memory-light one, or states in bf16) or the caches.".into(),
        bytes_per_iteration: 0.0,
        bytes: total as u64,
        iterations: (1, by),
        sites: ev,
    }
}

/// A called frame, short: `relu()`, `Linear`, `torch/_tensor.py:566 in backward`.
fn callee_label(snap: &Snapshot, fid: vramscope_snapshot::FrameId) -> String {
    let (file, line, name) = frame_location(snap, snap.frames.get(fid));
    if let Some(rest) = name
        .strip_prefix("<built-in method ")
        .or_else(|| name.strip_prefix("<built-in function "))
    {
        let f = rest.split([' ', '>']).next().unwrap_or(rest);
        return format!("{f}()");
    }
    if let Some(m) = name.strip_prefix("nn.Module: ") {
        return m.to_owned();
    }
    if crate::sites::is_native(&file, &name) {
        return format!("{}()", crate::sites::native_name(&name));
    }
    format!("{file}:{line} in {name}")
}

/// The last two components of a path, for prose.
fn short_file(f: &str) -> String {
    let f = f.replace('\\', "/");
    let parts: Vec<&str> = f.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}
