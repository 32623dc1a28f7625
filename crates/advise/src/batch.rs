//! Half the batch: the memory that follows the batch, at half its size.
//!
//! In a recording that trains, the training step's batch and an evaluation
//! pass's are two numbers in the program (pytorch/examples' MNIST trains
//! on 64 and tests on 1,000): a smaller micro-batch with gradient
//! accumulation changes the first only, and where the peak is in an
//! evaluation pass it does not lower it at all. So the training row halves
//! what the training steps make, and a row of its own halves what the
//! evaluation passes make (`categories::evaluation`: forwards no backward
//! used). Checked for real on the CPU (`advise_check.py`, the `eval_big`
//! programs: a training loop that evaluates on batches four times its
//! own).

use vramscope_analysis::categories::{Category, Labelled, Rule};
use vramscope_analysis::iterations::Iterations;
use vramscope_analysis::lifetimes::BEFORE_WINDOW;
use vramscope_analysis::liveness::allocated_series;
use vramscope_analysis::optimizers::alternatives::Stepped;
use vramscope_analysis::sites::{
    frame_label, frame_location, is_launcher, is_noise, is_third_party,
};
use vramscope_analysis::Liveness;
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::{FrameId, Snapshot};
use vramscope_text::units::bytes;

use super::no_grad::Graphs;
use super::{Candidate, ChangeClass, Method, NotOffered};

/// The blocks the batch makes: activations, autograd's detail and the
/// temporaries of forward and backward (the optimizer step's follow the
/// parameters). Half the batch halves them; mixed precision can at most.
pub(super) fn batch_made(labelled: &Labelled) -> Vec<usize> {
    let cats = &labelled.categories;
    (0..labelled.lifetimes.len())
        .filter(|&b| {
            matches!(
                cats.category.get(b),
                Some(Category::Activation | Category::Temporary | Category::AutogradDetail)
            ) && cats.rule.get(b) != Some(&Rule::OptimizerFreed)
        })
        .collect()
}

/// Of the blocks the batch makes, those known to follow it: every
/// activation, and a backward's or an op's own block (autograd detail, a
/// temporary) of the size of an activation or an input (a gradient of one,
/// a softmax's, a matrix product's result). A block of no such size is a
/// kernel's own scratch, which may not follow the batch (oneDNN's 15.3 MiB
/// inside timm's ConvNeXt stem convolution's backward is the same at batch
/// 8 and 4; halved, the row read 10% below the real run): it stays whole.
fn scales_with_the_batch(labelled: &Labelled, made: &[usize]) -> Vec<usize> {
    let cats = &labelled.categories;
    let l = &labelled.lifetimes;
    let sizes: vramscope_snapshot::hash::FxHashSet<u64> = (0..l.len())
        .filter(|&b| {
            matches!(
                cats.category.get(b),
                Some(Category::Activation | Category::Input)
            )
        })
        .map(|b| l.size[b])
        .collect();
    made.iter()
        .copied()
        .filter(|&b| {
            cats.category.get(b) == Some(&Category::Activation) || sizes.contains(&l.size[b])
        })
        .collect()
}

/// The inputs every training step is given, where it is given the same
/// ones: those alive from before the second iteration to the end of the
/// last (blocks, bytes), where what each iteration makes of its own inputs
/// (a loss's labels indexed by a mask) is under a sixteenth of them. A
/// program that trains on its whole dataset at once (a graph network
/// on its one graph, L-BFGS on a fixed set, a benchmark's one batch):
/// halving "the batch" splits the dataset, which only holds where its
/// rows are independent samples. `None` where a step makes its inputs (a
/// data loader's batch), or fewer than two training iterations were
/// recorded (the second on are read).
pub(super) fn fixed_inputs(labelled: &Labelled, its: &Iterations) -> Option<(usize, u64)> {
    let cats = &labelled.categories;
    let l = &labelled.lifetimes;
    let eval = &cats.evaluation;
    // From the second iteration: the first can hold the setup that made
    // the data (the recorder's first iteration starts with the trace).
    let complete: Vec<_> = its.complete().skip(1).collect();
    let (first, last) = (complete.first()?, complete.last()?);
    let (mut n, mut fixed) = (0usize, 0u64);
    // Inputs made inside each training iteration (the labels a loss is
    // given, indexed by a mask, are inputs of the loss module's call).
    let mut made = vec![0u64; complete.len()];
    for b in 0..l.len() {
        if cats.category.get(b) != Some(&Category::Input) {
            continue;
        }
        let birth = l.birth[b];
        if birth != BEFORE_WINDOW {
            let at = birth as usize;
            if first.start <= at && at < last.end && !eval.contains(at) {
                let k = complete.partition_point(|it| it.end <= at);
                if let Some(m) = made.get_mut(k) {
                    *m += l.size[b];
                }
                continue;
            }
        }
        if (birth == BEFORE_WINDOW || (birth as usize) < first.start)
            && l.alive_after(b, last.end as u32 - 1)
        {
            n += 1;
            fixed += l.size[b];
        }
    }
    let most_made = made.iter().copied().max().unwrap_or(0);
    (n > 0 && most_made.saturating_mul(16) <= fixed).then_some((n, fixed))
}

/// One pass's share of the batch's blocks: those halved, and those of
/// the size of no activation or input, kept whole.
struct Share {
    halved: Vec<usize>,
    whole: usize,
    whole_bytes: u64,
}

impl Share {
    /// Of `made` and its part that follows the batch (`batch`), the
    /// blocks `keep` takes.
    fn new(
        labelled: &Labelled,
        made: &[usize],
        batch: &[usize],
        keep: impl Fn(usize) -> bool,
    ) -> Share {
        let l = &labelled.lifetimes;
        let (mut whole, mut whole_bytes) = (0, 0);
        for &b in made.iter().filter(|&&b| keep(b)) {
            whole += 1;
            whole_bytes += l.size[b];
        }
        let halved: Vec<usize> = batch.iter().copied().filter(|&b| keep(b)).collect();
        Share {
            whole: whole - halved.len(),
            whole_bytes: whole_bytes - halved.iter().map(|&b| l.size[b]).sum::<u64>(),
            halved,
        }
    }

    fn activations(&self, labelled: &Labelled) -> usize {
        let cats = &labelled.categories;
        self.halved
            .iter()
            .filter(|&&b| cats.category.get(b) == Some(&Category::Activation))
            .count()
    }

    /// "the K activation, temporary and autograd-detail blocks (X) at half
    /// its size: ... (the W blocks ... kept whole ...)".
    fn how(&self, labelled: &Labelled, whose: &str) -> String {
        let l = &labelled.lifetimes;
        format!(
            "each of the {} activation, temporary and autograd-detail blocks{whose} ({}) at half its size: the memory \
             that grows with the batch{}",
            self.halved.len(),
            bytes(self.halved.iter().map(|&b| l.size[b]).sum()),
            if self.whole == 0 {
                String::new()
            } else {
                format!(
                    " (the {} blocks of the size of no activation or input, {}, kept whole: a kernel's own \
                     scratch, which may not follow the batch)",
                    self.whole,
                    bytes(self.whole_bytes)
                )
            }
        )
    }
}

/// The half-batch rows: the training step's micro-batch (or, in a trace
/// with no gradient, the batch of each forward call), and where the
/// recording trains and evaluates, the evaluation passes' batch.
pub(super) fn half_batch_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    its: &Iterations,
    recorded: &Settings,
    graphs: Option<&Graphs>,
    not_offered: &mut Vec<NotOffered>,
) -> Vec<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let eval = &cats.evaluation;
    let in_eval = |b: usize| l.birth[b] != BEFORE_WINDOW && eval.contains(l.birth[b] as usize);
    // The inputs stay whole: the code splits the batch with `chunk`, whose
    // pieces are views of it (measured on the CPU's CNN: halving them
    // predicted 0.19 MiB under the real run).
    let made = batch_made(labelled);
    let batch = scales_with_the_batch(labelled, &made);
    let steps = Share::new(labelled, &made, &batch, |b| !in_eval(b));
    let evaluation = Share::new(labelled, &made, &batch, in_eval);
    let mut out = Vec::new();
    if steps.activations(labelled) + evaluation.activations(labelled) == 0 {
        not_offered.push(NotOffered {
            change: "a smaller micro-batch".into(),
            why: "no memory in this trace is labelled activations: nothing shows what grows with the batch".into(),
        });
        return out;
    }
    let halve = |blocks: &[usize], label: &str| {
        let v: Vec<(usize, ChangeKind)> = blocks
            .iter()
            .map(|&b| (b, ChangeKind::Scale(0.5)))
            .collect();
        for_blocks(snap, device, l, &v, label)
    };
    // A trace without a gradient is of a forward only: an inference run
    // (the real files of OPT under FlexGen, a Transformer's evaluation, a
    // zeroth-order optimizer), or a training run cut before its first
    // backward (the H200's GPT that ran out in its first forward): which
    // one, the trace cannot tell.
    let trained = cats.category.contains(&Category::Gradient);
    let evaluated = !evaluation.halved.is_empty();
    if steps.activations(labelled) > 0 {
        let mut edits = halve(&steps.halved, "activations, temporaries, autograd detail");
        // With gradients accumulated, the second micro-batch runs with the
        // first one's gradients alive: each iteration's gradients are made
        // at its start rather than in its backward (measured on an H200:
        // without this, half the batch came out 6% low on allocated).
        let (mut early, mut early_bytes) = (0usize, 0u64);
        for b in 0..l.len() {
            if cats.category.get(b) != Some(&Category::Gradient) || l.birth[b] == BEFORE_WINDOW {
                continue;
            }
            let birth = l.birth[b] as usize;
            let k = its.of_event(birth) as usize;
            if let Some(it) = k.checked_sub(1).and_then(|k| its.list.get(k)) {
                if it.start < birth && birth < it.end {
                    // After any evaluation pass the iteration begins with:
                    // the first micro-batch's backward comes after it.
                    let start = eval.last_end_within(it.start, birth).unwrap_or(it.start);
                    edits.born_after.entry(start).or_default().push(birth);
                    early += 1;
                    early_bytes += l.size[b];
                }
            }
        }
        let lbfgs = Stepped::of(snap).is_some_and(|s| s.is_lbfgs());
        let fixed = if trained {
            fixed_inputs(labelled, its)
        } else {
            None
        };
        let (change, code) = if trained && lbfgs {
            // L-BFGS evaluates a closure several times per step: the
            // halves are accumulated inside it, and it returns the whole
            // loss, which the line search compares.
            (
                "half the micro-batch, with gradient accumulation over 2 steps (the same effective batch)",
                "def closure():\n    optimizer.zero_grad()\n    total = 0.0\n    for x, y in zip(inputs.chunk(2), \
                 targets.chunk(2)):\n        loss = loss_fn(model(x), y) / 2\n        loss.backward()\n        \
                 total += loss.item()\n    return total\noptimizer.step(closure)",
            )
        } else if trained && fixed.is_some() {
            (
                "half the inputs per backward, with gradient accumulation over 2 steps: every step is given the \
                 same inputs (a whole dataset at once, or one batch used again), so this splits them, which holds \
                 only where their rows are independent samples",
                "# every step is given the same inputs: split them (rows must be independent samples; a graph's \
                 nodes are not)\nfor x, y in zip(inputs.chunk(2), targets.chunk(2)):\n    loss = loss_fn(model(x), y) / \
                 2\n    loss.backward()\noptimizer.step()\noptimizer.zero_grad(set_to_none=True)",
            )
        } else if trained {
            (
                "half the micro-batch, with gradient accumulation over 2 steps (the same effective batch)",
                "for chunk in batch.chunk(2):\n    outputs = model(chunk)\n    loss = loss_fn(outputs) / 2\n    loss.backward()\n\
                 optimizer.step()\noptimizer.zero_grad(set_to_none=True)",
            )
        } else {
            (
                "half the batch per forward call: the batch in two chunks, one after the other (no backward \
                 recorded; in training, with the gradients of the two accumulated)",
                "for chunk in batch.chunk(2):\n    outputs = model(chunk)\n    \
                 ...  # use this chunk's outputs (or move them off the device) before the next\n\
                 # in training (a recording that ended before the first backward), for each chunk:\n\
                 # loss = loss_fn(outputs) / 2; loss.backward(); then optimizer.step() once",
            )
        };
        let whose = if evaluated {
            " of the training steps"
        } else {
            ""
        };
        out.push(Candidate {
            class: ChangeClass::HalfBatch,
            change: change.into(),
            code: code.into(),
            settings: recorded.clone(),
            method: Method::Replayed,
            edits: Some(edits),
            how: format!(
                "replayed with {}; the inputs whole (the chunks are views of the batch), parameters and optimizer \
                 state as recorded{}{}{}",
                steps.how(labelled, whose),
                if early == 0 && !trained {
                    String::new()
                } else if early == 0 {
                    ", gradients as recorded".to_owned()
                } else {
                    format!(
                        "; the {early} gradient blocks ({}) made at the start of their iteration: the first \
                         micro-batch's gradients, alive while the second runs",
                        bytes(early_bytes)
                    )
                },
                if evaluated {
                    format!(
                        "; the evaluation passes' {} blocks as recorded: their batch is the evaluation loop's, \
                         which this code does not change",
                        evaluation.halved.len()
                    )
                } else {
                    String::new()
                },
                fixed.map_or(String::new(), |(n, b)| format!(
                    ". Every training step was given the same {n} input tensor{} ({}, made once): \
                     halving them holds only where their rows are independent samples; where they are coupled (a graph's nodes, whose message passing or \
                     attention spans the whole graph: an N x N attention matrix shrinks to a quarter, not a half) \
                     this row does not apply, and sampling subgraphs or fewer nodes changes what is trained",
                    if n == 1 { "" } else { "s" },
                    bytes(b)
                ))
            ),
        });
    }
    if evaluated && evaluation.activations(labelled) > 0 {
        let passes = passes_by_caller(snap, device, labelled);
        let highest = passes
            .first()
            .map(|(line, _)| {
                format!("# the evaluation called from {line} peaks highest: its batch first\n")
            })
            .unwrap_or_default();
        let listed: Vec<String> = passes
            .iter()
            .map(|(line, peak)| format!("{line} (peak {})", bytes(*peak)))
            .collect();
        // Passes run with autograd on: halving alone would keep their
        // graphs, and "keeps no gradients" would be untrue; the row adds
        // `torch.no_grad()` (the `no_grad_evaluation` row's replay too).
        let mut edits = halve(&evaluation.halved, "the evaluation passes' activations");
        let (no_grad_code, no_grad_how) = match graphs {
            Some(g) => {
                edits.merge(g.edits(snap, device, labelled));
                (
                    "# the passes ran with autograd on: under torch.no_grad() too (no_grad_evaluation)\n\
                     with torch.no_grad():\n    evaluate(model, eval_loader)\n",
                    format!("; with {}", g.how()),
                )
            }
            None => ("", String::new()),
        };
        out.push(Candidate {
            class: ChangeClass::HalfEvalBatch,
            change: "half the evaluation batch (the batch of the passes that run forward only, no backward: a \
                     validation or test loop, a reinforcement learner's rollouts, generation)"
                .into(),
            code: format!(
                "{highest}eval_loader = DataLoader(eval_set, batch_size=eval_batch_size // 2)\n\
                 {no_grad_code}# evaluation keeps no gradients: half the batch gives the same results, with no \
                 accumulation"
            ),
            settings: recorded.clone(),
            method: Method::Replayed,
            edits: Some(edits),
            how: format!(
                "replayed with {}{no_grad_how}; the training steps as recorded{}",
                evaluation.how(labelled, " the evaluation passes made"),
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; every evaluation batch halved: the passes, by what calls the model, highest first: \
                         {}",
                        listed.join(", ")
                    )
                }
            ),
        });
    }
    out
}

/// The evaluation forwards grouped by what calls the model in them (the
/// program's two innermost frames above the call: `main.py:46 in predict
/// ← main.py:169 in <module>`), each with the highest allocated inside
/// them, highest first: which evaluation's batch the peak is in
/// (pytorch/examples' Forward-Forward MNIST peaks in its `predict` of the
/// training batch, not of the test one).
fn passes_by_caller(snap: &Snapshot, device: u32, labelled: &Labelled) -> Vec<(String, u64)> {
    let eval = &labelled.categories.evaluation;
    let Some(t) = snap.trace(device) else {
        return Vec::new();
    };
    let allocated = allocated_series(&Liveness::new(snap, device), t);
    let label = |chain: &[FrameId]| -> String {
        let program: Vec<String> = chain
            .iter()
            .filter(|&&f| {
                let (file, _, name) = frame_location(snap, snap.frames.get(f));
                !is_third_party(&file) && !is_launcher(&file) && !is_noise(&file, &name)
            })
            .take(2)
            .map(|&f| frame_label(snap, f))
            .collect();
        match program.is_empty() {
            true => chain
                .first()
                .map(|&f| frame_label(snap, f))
                .unwrap_or_default(),
            false => program.join(" ← "),
        }
    };
    let mut by_caller: Vec<(String, u64)> = Vec::new();
    for &(s, e, chain) in &eval.forwards {
        let Some(chain) = chain.and_then(|c| eval.chains.get(c as usize)) else {
            continue;
        };
        let line = label(chain);
        let peak = allocated
            .get(s as usize..e as usize)
            .and_then(|a| a.iter().max().copied())
            .unwrap_or(0);
        match by_caller.iter_mut().find(|(l, _)| *l == line) {
            Some((_, p)) => *p = (*p).max(peak),
            None => by_caller.push((line, peak)),
        }
    }
    by_caller.sort_by_key(|p| std::cmp::Reverse(p.1));
    by_caller
}
