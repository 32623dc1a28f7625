//! The findings in words: a title, an explanation with the figures and
//! evidence, and the fix, for each kind of finding.

use vramscope_snapshot::{FrameId, Snapshot, StackId};

use super::findings::{Context, EvaluationHeld, HeldScan, Role, SiteSeries};
use super::series::Shape;
use super::source::Sources;
use super::{Finding, FindingKind, Severity, SiteEvidence};
use crate::lifetimes::{BEFORE_WINDOW, STILL_ALIVE};
use crate::optimizers;
use crate::sites::{
    frame_label, frame_location, is_library, is_native, is_noise, stack_lines, PARTS_PER_SITE,
};
use crate::within::{parts, ModuleIndex};
use vramscope_text::units::bytes;

mod growth;
mod regrown;

pub(super) use growth::growth_finding;
pub(super) use regrown::{library_state, regrown_finding};

impl Context<'_> {
    pub(super) fn max_peak(&self) -> u64 {
        self.iterations
            .iter()
            .map(|i| i.peak_bytes)
            .max()
            .unwrap_or(0)
    }

    pub(super) fn significant(&self, b: u64) -> bool {
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
        let shown = s.shown_stack();
        let stack = stack_lines(self.snap, shown);
        let held_by = self.holders.held_by(
            self.lifetimes,
            self.trace,
            (0..self.lifetimes.len()).filter(|&b| self.sites.of_block[b] == site),
            &user_files(self.snap, shown),
            src,
        );
        // Beneath the site: the model's modules and lines that made what
        // is still alive at the end (what the finding is about).
        let lt = self.lifetimes;
        let mine = (0..lt.len())
            .filter(|&b| self.sites.of_block[b] == site && lt.death[b] == STILL_ALIVE)
            .map(|b| {
                (
                    lt.stack[b],
                    lt.size[b],
                    Some(lt.birth[b]).filter(|&i| i != BEFORE_WINDOW),
                )
            });
        let within = parts(
            self.snap,
            &ModuleIndex::new(self.snap),
            self.backward,
            s.site,
            mine,
            PARTS_PER_SITE,
        );
        let path = (s.leak_example.0 > 0 && s.freed_example.0 > 0)
            .then(|| leaking_path(self.snap, s.leak_example.1, s.freed_example.1))
            .flatten();
        let own = if keeper {
            src.keeper(&file, line)
        } else {
            None
        };
        let (kept_by, kept_in) = match own {
            Some(k) => (Some(k), None),
            None if keeper => s
                .site
                .and_then(|fid| keeper_in_callers(self.snap, shown, fid, src))
                .map_or((None, None), |(k, at)| (Some(k), Some(at))),
            None => (None, None),
        };
        SiteEvidence {
            held_by,
            code: src
                .line(&file, line)
                .filter(|c| !self.function_lines || c.starts_with("def ")),
            kept_by,
            kept_in,
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
            stack,
            leaking_path: path,
            within,
            category: s
                .category()
                .filter(|c| *c != crate::categories::Category::Unknown),
        }
    }
}

/// A line that stores the tensor in a caller of the site's function: the
/// site is where the tensor was made (a model's `forward`), the caller
/// assigns what it returned and keeps it (`out = model(x)`, then
/// `kept.append(out)`, or a hook on `out` that refers to it): the
/// program's frames outside the site, nearest first, a few deep. With
/// vramscope's recorder the holder is named anyway; this is what a
/// snapshot from PyTorch's own recorder has.
fn keeper_in_callers(
    snap: &Snapshot,
    stack: StackId,
    site: FrameId,
    src: &mut Sources,
) -> Option<((u32, String), String)> {
    snap.stacks
        .get(stack)
        .iter()
        .skip_while(|&&f| f != site)
        .skip(1)
        .map(|&f| (f, frame_location(snap, snap.frames.get(f))))
        .filter(|(_, (file, _, name))| {
            !is_noise(file, name) && !is_native(file, name) && !is_library(file)
        })
        .take(4)
        .find_map(|(f, (file, line, _))| src.keeper(&file, line).map(|k| (k, frame_label(snap, f))))
}

pub(super) fn evidence_list(
    ctx: &Context,
    sites: &[(u32, f64)],
    (rate, keeper): (bool, bool),
    series: &SiteSeries,
    src: &mut Sources,
) -> Vec<SiteEvidence> {
    sites
        .iter()
        .take(ctx.opts.max_sites.max(1))
        .map(|&(site, v)| ctx.evidence(site, series.get(site), v, rate, keeper, src))
        .collect()
}

/// The median of the rises of `live` from one iteration's end to the
/// next (0 when it never rises).
fn median_rise(live: &[u64]) -> u64 {
    let mut rises: Vec<u64> = live
        .windows(2)
        .filter(|w| w[1] > w[0])
        .map(|w| w[1] - w[0])
        .collect();
    rises.sort_unstable();
    rises.get(rises.len() / 2).copied().unwrap_or(0)
}

pub(super) fn cycle_finding(
    ctx: &Context,
    sites: &[(u32, f64)],
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let mut sites = sites.to_vec();
    sites.sort_by_key(|s| std::cmp::Reverse(ctx.sites.stats[s.0 as usize].gc_freed_bytes));
    let ev = evidence_list(ctx, &sites, (true, false), series, src);
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
    // How fast they pile up between collections: the typical rise from one
    // iteration's end to the next. The slope over the whole run (`per`)
    // averages the drops in (a quarter of it with a collection every 4
    // iterations).
    let pile: u64 = ev.iter().map(|e| median_rise(&e.live_bytes)).sum();
    let first = &ev[0];
    let code = first
        .code
        .as_ref()
        .map(|c| format!(" (`{c}`)"))
        .unwrap_or_default();
    let explanation = if gc_blocks > 0 {
        let runs = match (ctx.gc_runs - ctx.gc_probes, ctx.gc_probes) {
            (0, _) => "the full collection vramscope ran before writing the snapshot; no collection during the recording freed any tensor".to_owned(),
            (n, 0) => format!("{n} collection(s) during the recording"),
            (n, _) => format!("{n} collection(s) during the recording and the one vramscope ran before writing the snapshot"),
        };
        format!(
            "{gc_blocks} tensors ({}) allocated at {}{code} were freed only by Python's cycle collector ({runs}): nothing but reference cycles kept them alive. \
             Reference counting frees everything else at once; these wait for a collection, which knows nothing about GPU memory, so they pile up ({} per iteration, up to {} alive at once) and can run the device out of memory.",
            bytes(gc_bytes),
            first.site,
            bytes(if pile > 0 { pile } else { per.max(0.0) as u64 }),
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
        fix: "Break the cycle: make back-references weak (`weakref.ref(parent)`), clear them when done (`node.other = None`), and do not store on an object a bound method or closure that refers to the object itself. `vramscope.cycles.watch()` shows the objects and the edges of each cycle, but for a loop through a suspended generator or coroutine (`self.it = self._batches()` on the object the generator reads), which the collector breaks by closing the generator before it frees anything; `gc.collect()` after each iteration is a stop-gap.".into(),
        bytes_per_iteration: per,
        bytes: gc_bytes.max(swing),
        iterations: (1, ctx.complete),
        sites: ev,
    }
}

/// The evidence of gradients held, by site (site → bytes, blocks), the
/// largest first, and how many tensors they are.
fn gradient_evidence(
    ctx: &Context,
    by_site: &vramscope_snapshot::hash::FxHashMap<u32, (u64, u64)>,
    series: &SiteSeries,
    src: &mut Sources,
) -> (Vec<SiteEvidence>, u64) {
    let mut sites: Vec<(u32, f64)> = by_site.iter().map(|(&s, &(b, _))| (s, b as f64)).collect();
    sites.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut ev = evidence_list(ctx, &sites, (false, false), series, src);
    // The bytes shown are the site's gradients; the site's own label is
    // what most of its bytes are, and a backward's line makes more
    // autograd detail than gradients.
    for e in &mut ev {
        e.category = Some(crate::categories::Category::Gradient);
    }
    (ev, by_site.values().map(|v| v.1).sum())
}

/// The `held_gradients` finding, and whether it is told as several
/// optimizers' (a GAN's: the fix is each one's `zero_grad` right after its
/// own step, which `advise` replays instead of `zero_grad` first).
pub(super) fn held_finding(
    ctx: &Context,
    h: &HeldScan,
    series: &SiteSeries,
    src: &mut Sources,
) -> (Finding, bool) {
    let worst = &ctx.iterations[h.worst];
    let (_, fwd_peak, rest) = h.forward[h.worst];
    let held = h.held[h.worst];
    let (ev, count) = gradient_evidence(ctx, &h.by_site, series, src);
    // Without them the forward pass would have peaked `held` lower; the
    // iteration's peak drops by as much, down to the peak after the forward.
    let raise = h.lowers_by();
    let effect = if h.at_peak > 0 && (h.never_freed || raise >= h.at_peak) {
        format!(
            " {} of them are still allocated at the iteration's peak ({}).",
            bytes(h.at_peak),
            bytes(worst.peak_bytes)
        )
    } else if h.at_peak > 0 && rest >= worst.peak_bytes {
        // Kept past the forward into the backward, where the iteration
        // peaks: some of them are made again there before it.
        format!(
            " {} of them are allocated at the iteration's peak ({}), in the backward pass: without them the iteration's peak is {} lower.",
            bytes(h.at_peak),
            bytes(worst.peak_bytes),
            bytes(raise)
        )
    } else if h.at_peak > 0 {
        // The backward pass peaks almost as high: the fix gains less than
        // the gradients' size, and the finding says how much.
        format!(
            " {} of them are allocated at the iteration's peak ({}), in the forward pass, but the backward pass \
             after it peaks at {}: without them the iteration's peak is {} lower.",
            bytes(h.at_peak),
            bytes(worst.peak_bytes),
            bytes(rest),
            bytes(raise)
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
    // Lightning's automatic optimization runs the program's training_step,
    // then zero_grad, then backward, all inside the optimizer's closure: the
    // program never calls zero_grad itself, so the fix is Lightning's hook.
    let lightning = ev.iter().any(|e| {
        e.stack.iter().any(|f| {
            f.contains("lightning/pytorch/loops/") || f.contains("pytorch_lightning/loops/")
        })
    });
    // Several optimizers (a GAN's two): what is held is the gradients one
    // optimizer has stepped on, kept through another model's forward (and
    // backward) until its own `zero_grad()`; "before the forward" reads
    // wrongly where the program zeroes each model before its own step.
    let optimizers = ctx
        .snap
        .source
        .recorder
        .as_ref()
        .map_or(0, |r| r.optimizers.len());
    let several = optimizers >= 2 && !lightning && !h.never_freed;
    let never = if h.never_freed {
        " They were allocated by the first backward pass and never freed: `zero_grad(set_to_none=False)` zeroes gradients in place and keeps their memory."
    } else if several {
        " The program steps several optimizers: these are gradients an optimizer has already stepped on, kept through the next forward pass (a GAN's generator gradients through the discriminator's step) until that optimizer's `zero_grad()` runs. The other optimizers' gradients may be kept past their steps the same way; those are not counted here (which gradients a backward pass writes into cannot be told from the recording), and the same fix frees them."
    } else if lightning {
        " They were freed later in that iteration: Lightning's automatic optimization calls `zero_grad` inside the optimizer's closure, after `training_step` and before `backward`, so the previous gradients live through every forward pass."
    } else {
        " They were freed later in that iteration: `zero_grad()` runs after the forward pass instead of before it."
    };
    let fix = if several {
        "Free each optimizer's gradients right after its own step: `opt.zero_grad(set_to_none=True)` after each `opt.step()` (a GAN: `optimizerG.zero_grad(set_to_none=True)` after `optimizerG.step()` and the same for the discriminator, and `netD.requires_grad_(False)` around the generator's step so its backward makes no discriminator gradients at all)."
    } else if lightning && !h.never_freed {
        "In the LightningModule, override `optimizer_zero_grad(self, epoch, batch_idx, optimizer)` to do nothing and call `self.optimizers().zero_grad(set_to_none=True)` in `on_train_batch_start` (with `accumulate_grad_batches`, only on the batches that step), so gradients are freed before `training_step` allocates activations."
    } else {
        "Call `optimizer.zero_grad(set_to_none=True)` before the forward pass (at the top of the loop, or right after `optimizer.step()`), so gradients are freed before activations are allocated."
    };
    let f = Finding {
        kind: FindingKind::HeldGradients,
        severity: Severity::Warning,
        title: if several {
            format!("gradients an optimizer has stepped on held through a later forward pass: {}", bytes(held))
        } else {
            format!("gradients of the previous iteration held through the forward pass: {}", bytes(held))
        },
        explanation: format!(
            "When the forward pass of iteration {} peaked ({}), {count} gradient tensors ({}) from the previous backward pass were still allocated, on top of the activations.{never}{effect}",
            worst.range.number,
            bytes(fwd_peak),
            bytes(held),
        ),
        fix: fix.into(),
        bytes_per_iteration: 0.0,
        bytes: held,
        iterations: (worst.range.number, worst.range.number),
        sites: ev,
    };
    (f, several)
}

pub(super) fn evaluation_held_finding(
    ctx: &Context,
    e: &EvaluationHeld,
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let (ev, count) = gradient_evidence(ctx, &e.by_site, series, src);
    let peak = ctx.allocated.get(e.peak).copied().unwrap_or(0);
    let number = ctx
        .iterations
        .iter()
        .find(|i| i.range.start <= e.peak && e.peak < i.range.end)
        .map_or(0, |i| i.range.number);
    Finding {
        kind: FindingKind::GradientsInEvaluation,
        severity: Severity::Warning,
        title: format!("gradients of the last training step held through evaluation: {}", bytes(e.bytes)),
        explanation: format!(
            "The run peaks ({}) in an evaluation pass (forwards no backward used) with {count} gradient tensors ({}) \
             of the last training step still allocated: nothing frees them between that step and the evaluation \
             (`zero_grad` runs at the top of the next step). Without them the evaluation peaks at {}; the rest of \
             the run peaks at {}.",
            bytes(peak),
            bytes(e.bytes),
            bytes(peak.saturating_sub(e.bytes)),
            bytes(e.outside),
        ),
        fix: "Free them before evaluating: `optimizer.zero_grad(set_to_none=True)` (or `model.zero_grad(set_to_none=True)`) \
             after the last step, before the evaluation loop; the next backward makes them again."
            .into(),
        bytes_per_iteration: 0.0,
        bytes: e.bytes,
        iterations: (number, number),
        sites: ev,
    }
}

pub(super) fn long_lived_finding(
    ctx: &Context,
    site: u32,
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let st = &ctx.sites.stats[site as usize];
    let ev = evidence_list(
        ctx,
        &[(site, st.outliving_bytes as f64)],
        (false, true),
        series,
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

/// Whether the sites' gradients were made in more than one iteration:
/// each backward makes them again (set to None in between), rather than
/// the first one's kept.
fn remade(ctx: &Context, sites: &[(u32, f64)]) -> bool {
    let mut first: Option<u32> = None;
    for (b, &site) in ctx.sites.of_block.iter().enumerate() {
        if ctx.categories.get(b) != Some(&crate::categories::Category::Gradient)
            || !sites.iter().any(|s| s.0 == site)
        {
            continue;
        }
        let born = ctx.block_iterations.born[b];
        match first {
            None => first = Some(born),
            Some(f) if f != born => return true,
            Some(_) => {}
        }
    }
    false
}

pub(super) fn one_time_finding(
    ctx: &Context,
    role: Role,
    sites: &[(u32, f64)],
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let total: f64 = sites.iter().map(|s| s.1).sum();
    let ev = evidence_list(ctx, sites, (false, false), series, src);
    let by = sites
        .iter()
        .filter_map(|s| match series.shape(s.0) {
            Some(Shape::OneTime { by, .. }) => Some(*by),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    let (title, explanation) = match role {
        Role::Optimizer => {
            let classes = optimizers::annotated_classes(ctx.snap);
            let named = match ctx.snap.source.recorder.as_ref().map(|r| &r.optimizers) {
                Some(o) if !o.is_empty() => optimizers::names(o.iter().map(|o| o.type_name.as_str())),
                _ => classes.join(", "),
            };
            let rule = optimizers::state_rule(ctx.snap).unwrap_or_else(|| {
                "The file does not name the optimizer: Adam keeps two tensors the size of each parameter, SGD with momentum one.".into()
            });
            (
                if named.is_empty() {
                    format!("optimizer state: {} created by the first step (expected)", bytes(total as u64))
                } else {
                    format!("optimizer state ({named}): {} created by the first step (expected)", bytes(total as u64))
                },
                format!("{} were allocated by the optimizer during iteration {by} and stayed constant afterwards: its state. {rule} This is expected and happens once.", bytes(total as u64)),
            )
        }
        // Gradients kept (`zero_grad(set_to_none=False)`, or never zeroed)
        // are the tensors the first backward made; set to None, each
        // backward makes them again.
        Role::Gradient if remade(ctx, sites) => (
            format!("gradients: {} made by each backward pass, the same size every iteration (expected)", bytes(total as u64)),
            format!("{} of gradients are alive at each iteration's end from iteration {by} on: each backward pass makes them again (`zero_grad(set_to_none=True)` frees them in between), at a constant size.", bytes(total as u64)),
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
pub(super) fn callee_label(snap: &Snapshot, fid: vramscope_snapshot::FrameId) -> String {
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
    // PyTorch's module-call plumbing (`module.py:1787 in
    // _wrapped_call_impl`) says only that a module was called.
    if file
        .replace('\\', "/")
        .ends_with("torch/nn/modules/module.py")
        && matches!(name.as_str(), "_wrapped_call_impl" | "_call_impl" | "inner")
    {
        return "Module.__call__".to_owned();
    }
    if crate::sites::is_native(&file, &name) {
        return format!("{}()", crate::sites::native_name(&name));
    }
    let f = file.replace('\\', "/");
    // A compiled module's call runs through Dynamo's frame evaluation.
    if f.ends_with("torch/_dynamo/eval_frame.py") {
        return "torch.compile'd call".to_owned();
    }
    // An installed package's file from the package on (the environment's
    // path says nothing about the call).
    match f
        .rsplit_once("/site-packages/")
        .or_else(|| f.rsplit_once("/dist-packages/"))
    {
        Some((_, tail)) => format!("{tail}:{line} in {name}"),
        None => format!("{file}:{line} in {name}"),
    }
}

/// The program's files in the first site's stack.
pub(super) fn first_files(ev: &[SiteEvidence]) -> Vec<String> {
    ev.first().map(|e| vec![e.file.clone()]).unwrap_or_default()
}

/// The files of a stack's frames in the program rather than in libraries,
/// innermost first: where the line that stores a tensor usually is.
fn user_files(snap: &Snapshot, stack: vramscope_snapshot::StackId) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &fid in snap.stacks.get(stack) {
        let (file, _, _) = frame_location(snap, snap.frames.get(fid));
        let f = file.replace('\\', "/");
        let library = f.contains("/site-packages/")
            || f.contains("/dist-packages/")
            || f.starts_with('<')
            || f.contains("/lib/python");
        if !library && !f.is_empty() && !out.contains(&file) {
            out.push(file);
        }
    }
    out
}

/// The last two components of a path, for prose.
pub(super) fn short_file(f: &str) -> String {
    let f = f.replace('\\', "/");
    let parts: Vec<&str> = f.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// Where a leaking stack and a freeing one of the same site part: the first
/// frame, from the site outwards, that is not the same in both, as
/// (`file:line in function` of the leaking path, of the freeing one).
/// `None` when the stacks do not part (the same path both kept and freed).
fn leaking_path(snap: &Snapshot, leaked: StackId, freed: StackId) -> Option<(String, String)> {
    let user = |s: StackId| -> Vec<FrameId> {
        snap.stacks
            .get(s)
            .iter()
            .copied()
            .filter(|&f| {
                let (file, _, name) = frame_location(snap, snap.frames.get(f));
                !is_noise(&file, &name)
            })
            .collect()
    };
    let (a, b) = (user(leaked), user(freed));
    // Stacks are innermost first: walk both outwards from the site.
    a.iter()
        .zip(b.iter())
        .find(|(x, y)| x != y)
        .map(|(&x, &y)| (frame_label(snap, x), frame_label(snap, y)))
}
