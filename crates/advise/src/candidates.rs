//! The changes `advise` tries, each built from what the trace holds: the
//! sweep's settings, what must go at an OOM, the leaks found, and changes
//! to memory of a kind (the batch, the optimizer state, the optimizer
//! step's temporaries). A change whose target is not in the trace is not
//! built; the kinds that are never built here say why in `not_offered`.

use vramscope_analysis::categories::{Category, Labelled, Rule};
use vramscope_analysis::optimizers::alternatives::{
    eight_bit_all, eight_bit_bytes, per_parameter, Stepped, BLOCK_ELEMENTS,
};
use vramscope_simulate::edits::{for_blocks, Change, ChangeKind, Edits};
use vramscope_snapshot::Snapshot;

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use vramscope_analysis::iterations::Iterations;
use vramscope_analysis::lifetimes::{BEFORE_WINDOW, STILL_ALIVE};
use vramscope_simulate::settings::Settings;
use vramscope_simulate::simulate::Simulation;

/// The sweep's settings, each as an environment variable to set: those
/// whose replay from the file's segments differs from the recorded
/// settings' (peak reserved or where it runs out). A setting that changes
/// nothing there is not replayed again: it is left out, not claimed.
pub(super) fn settings_candidates(sim: &Simulation) -> Vec<Candidate> {
    let Some(rec) = sim.runs.first() else {
        return Vec::new();
    };
    let same = |r: &vramscope_simulate::simulate::Run| {
        r.replayed.simulated_peak_reserved == rec.replayed.simulated_peak_reserved
            && r.replayed.oom == rec.replayed.oom
            && r.projection.as_ref().map(|p| (p.peak_reserved, p.oom))
                == rec.projection.as_ref().map(|p| (p.peak_reserved, p.oom))
    };
    sim.runs
        .iter()
        .skip(1)
        .filter(|r| !r.changed && !same(r))
        .map(|r| Candidate {
            class: ChangeClass::Settings,
            change: format!("allocator settings {}", r.label),
            code: format!("PYTORCH_CUDA_ALLOC_CONF={} python train.py", r.label),
            settings: r.settings.clone(),
            method: Method::Replayed,
            edits: None,
            how: format!("the recorded trace replayed under {}", r.label),
        })
        .collect()
}

/// Where no setting serves the failing request: the least of the biggest
/// holders' memory whose absence lets the replay serve it, freed.
pub(super) fn must_go_candidate(sim: &Simulation) -> Option<Candidate> {
    use vramscope_text::units::bytes;
    let m = sim.must_go.iter().find(|m| m.label == "recorded")?;
    let mut edits = Edits::default();
    vramscope_simulate::must_go::never_allocated(&mut edits, &m.gone);
    edits.matched.push(vramscope_simulate::edits::ChangeMatch {
        change: Change {
            site: "the holders at the failing request".into(),
            kind: ChangeKind::Drop,
        },
        sites: m.sites.iter().map(|s| s.site.clone()).collect(),
        blocks: m.blocks as u64,
        bytes: m.bytes,
    });
    let sites: Vec<String> = m
        .sites
        .iter()
        .map(|s| {
            format!(
                "{} at {} ({} block{})",
                bytes(s.bytes),
                s.site,
                s.blocks,
                if s.blocks == 1 { "" } else { "s" }
            )
        })
        .collect();
    let code: Vec<String> = m
        .sites
        .iter()
        .map(|s| format!("del ...  # the tensors made at {} ({}), before the allocation that failed", s.site, bytes(s.bytes)))
        .chain(std::iter::once(
            "# or make the large tensor first, before these: their segments then pin nothing it needs".into(),
        ))
        .collect();
    let recorded = sim.runs.first()?.settings.clone();
    Some(Candidate {
        class: ChangeClass::FreeHolders,
        change: format!("free what pins the segments before the failing request: {}", sites.join(", ")),
        code: code.join("\n"),
        settings: recorded,
        method: Method::Replayed,
        edits: Some(edits),
        how: format!(
            "replayed with these {} block{} gone at the failing request: the least of the biggest holders' memory \
             the search over the model found{}",
            m.blocks,
            if m.blocks == 1 { "" } else { "s" },
            if m.least { " (with one block fewer, it still fails)" } else { "" }
        ),
    })
}

/// Changes to memory of a kind: the optimizer state (the batch's are
/// `batch::half_batch_candidates`).
pub(super) fn category_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    ranks: u32,
    not_offered: &mut Vec<NotOffered>,
) -> Vec<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let blocks_of = |keep: &dyn Fn(usize) -> bool| -> Vec<usize> {
        (0..l.len()).filter(|&b| keep(b)).collect()
    };
    let bytes_of = |v: &[usize]| -> u64 { v.iter().map(|&b| l.size[b]).sum() };
    let mut out = Vec::new();
    let with = |blocks: &[usize], kind: ChangeKind, label: &str| {
        let v: Vec<(usize, ChangeKind)> = blocks.iter().map(|&b| (b, kind.clone())).collect();
        for_blocks(snap, device, l, &v, label)
    };

    let state = blocks_of(&|b| cats.category.get(b) == Some(&Category::OptimizerState));
    if state.is_empty() {
        not_offered.push(NotOffered {
            change: "8-bit or sharded optimizer state".into(),
            why: "no memory in this trace is labelled optimizer state".into(),
        });
        return out;
    }
    let total = vramscope_text::units::bytes(bytes_of(&state));
    let all = Stepped::all(snap);
    match (!all.is_empty()).then(|| eight_bit_all(&all)) {
        Some(Err(why)) => not_offered.push(NotOffered {
            change: "8-bit optimizer state (bitsandbytes, torchao)".into(),
            why,
        }),
        found => {
            let classes = found.and_then(Result::ok).unwrap_or_default();
            let e = classes.first().map(|c| c.1.clone());
            let element = super::precision::parameter_bytes_per_element(snap).unwrap_or(4);
            let (edits, small) = eight_bit_edits(snap, device, labelled, &state, element);
            let (class, code) = match &e {
                Some(_) if classes.len() > 1 => (
                    format!(
                        "bitsandbytes' {}",
                        classes.iter().map(|c| c.1.bitsandbytes).collect::<Vec<_>>().join(", ")
                    ),
                    format!(
                        "import bitsandbytes as bnb\n{}",
                        classes
                            .iter()
                            .map(|(was, e)| format!(
                                "bnb.optim.{}(params, lr=lr)  # for the {was} optimizer, with its settings",
                                e.bitsandbytes
                            ))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                ),
                Some(e) => (
                    format!("bitsandbytes' {}", e.bitsandbytes),
                    format!(
                        "import bitsandbytes as bnb\noptimizer = bnb.optim.{}(model.parameters(), lr=lr)  # the \
                         same settings as now{}",
                        e.bitsandbytes,
                        e.torchao.map_or(String::new(), |t| format!(
                            "\n# or, on any device: from torchao.optim import {t}"
                        ))
                    ),
                ),
                None => (
                    "the 8-bit version of the optimizer".into(),
                    "import bitsandbytes as bnb\n# the file does not name the optimizer: its 8-bit version, if \
                     bitsandbytes has one (Adam8bit, AdamW8bit, SGD8bit, RMSprop8bit, Adagrad8bit, Lion8bit)\n\
                     optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)"
                        .into(),
                ),
            };
            out.push(Candidate {
                class: ChangeClass::OptimizerState8bit,
                change: format!("8-bit optimizer state ({class})"),
                code,
                settings: recorded.clone(),
                method: Method::Replayed,
                edits: Some(edits),
                how: format!(
                    "replayed with the optimizer state ({total}) in 8 bits: a byte per element and an fp32 scale per \
                     {BLOCK_ELEMENTS} elements for each state tensor of 4,096 elements or more, \
                     {}-byte elements now; the {small} smaller ones as recorded, as bitsandbytes and torchao keep \
                     them",
                    element
                ),
            });
            // Measured on an H200 (tests/fixtures/gpu/advise_run.json): the
            // GPT's reserved peak 3,634 MiB, 3,512 with AdamW8bit, 3,450 with
            // PagedAdamW8bit, whose state the caching allocator never sees.
            if let Some(paged) = e
                .as_ref()
                .and_then(|e| e.paged)
                .filter(|_| classes.len() == 1)
            {
                out.push(Candidate {
                    class: ChangeClass::PagedOptimizerState8bit,
                    change: format!(
                        "paged 8-bit optimizer state (bitsandbytes' {paged}: in CUDA unified memory, moved to the \
                         CPU when the GPU runs short)"
                    ),
                    code: format!("import bitsandbytes as bnb\noptimizer = bnb.optim.{paged}(model.parameters(), lr=lr)"),
                    settings: recorded.clone(),
                    method: Method::Replayed,
                    edits: Some(with(&state, ChangeKind::Drop, "optimizer state")),
                    how: format!(
                        "replayed without the optimizer state ({total}): its 8-bit copy lives in unified memory, \
                         outside PyTorch's cache, on the GPU while it fits (a quarter of the state beside the peak \
                         shown) and paged out to the CPU's memory when the GPU runs short, at the cost of slower \
                         steps"
                    ),
                });
            }
        }
    }
    let per_param = all.iter().try_for_each(per_parameter);
    if let Err(why) = per_param {
        for change in [
            "the optimizer state and step offloaded to the CPU",
            "the optimizer state sharded (ZeRO-1)",
        ] {
            not_offered.push(NotOffered {
                change: change.into(),
                why: why.clone(),
            });
        }
        return out;
    }
    // A program that shards already (FSDP's shards are what its optimizer
    // steps; ZeroRedundancyOptimizer, DeepSpeed's ZeRO): neither row.
    if let Some(sharded) = vramscope_analysis::sharded::already_sharded(snap) {
        let (offload, zero) = if sharded.parameters {
            (
                format!(
                    "the program shards its parameters already ({}): its optimizer keeps the state of its shards; \
                     FSDP2 offloads them and the step with fully_shard(..., offload_policy=CPUOffloadPolicy())",
                    sharded.by
                ),
                format!(
                    "the program shards its parameters already ({}), and with them the optimizer state: more ranks \
                     shard it further",
                    sharded.by
                ),
            )
        } else {
            (
                format!(
                    "the program shards its optimizer state already ({}): its offload is that library's",
                    sharded.by
                ),
                format!("the program shards its optimizer state already ({})", sharded.by),
            )
        };
        for (change, why) in [
            ("the optimizer state and step offloaded to the CPU", offload),
            ("the optimizer state sharded (ZeRO-1)", zero),
        ] {
            not_offered.push(NotOffered {
                change: change.into(),
                why,
            });
        }
        return out;
    }
    let class = class_code_for_all(&all);
    out.push(cpu_offload(
        labelled, &state, recorded, snap, device, &class,
    ));
    let params: Vec<u64> = blocks_of(&|b| cats.category.get(b) == Some(&Category::Parameter))
        .iter()
        .map(|&b| l.size[b])
        .collect();
    let share = zero_share(&params, ranks);
    out.push(Candidate {
        class: ChangeClass::ShardOptimizerState,
        change: format!("the optimizer state sharded over {ranks} ranks (ZeRO-1)"),
        code: format!(
            "from torch.distributed.optim import ZeroRedundancyOptimizer\n{}optimizer = \
             ZeroRedundancyOptimizer(model.parameters(), optimizer_class={}, lr=lr){}",
            class.import, class.name, class.comment
        ),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(with(&state, ChangeKind::Scale(share), "optimizer state")),
        how: format!(
            "replayed with the optimizer state ({total}) at {:.1}% of its size: the share of the rank that \
             holds most, ZeroRedundancyOptimizer placing whole parameters, largest first, each on the rank \
             with the fewest so far ({} parameters over {ranks} ranks)",
            100.0 * share,
            params.len()
        ),
    });

    out
}

/// How code names the program's optimizer class: `torch.optim.SGD`, or a
/// class of another library with its import line; `torch.optim.AdamW`
/// with a comment where the file names none.
pub(super) struct OptimizerCode {
    pub(super) name: String,
    /// `from ... import ...\n`, or empty.
    pub(super) import: String,
    /// `  # ...` after the line, or empty.
    pub(super) comment: String,
}

fn optimizer_class_code(stepped: Option<&Stepped>) -> OptimizerCode {
    match stepped {
        Some(s) => OptimizerCode {
            name: s.code_name(),
            import: s.import().map_or(String::new(), |i| format!("{i}\n")),
            comment: String::new(),
        },
        None => OptimizerCode {
            name: "torch.optim.AdamW".into(),
            import: String::new(),
            comment: "  # the file does not name the optimizer: the program's class".into(),
        },
    }
}

/// The first optimizer's class for the code, with a comment naming them
/// all where the program steps several.
fn class_code_for_all(all: &[Stepped]) -> OptimizerCode {
    let mut c = optimizer_class_code(all.first());
    if all.len() > 1 {
        let names: Vec<&str> = all.iter().map(|s| s.class.as_str()).collect();
        c.comment = format!(
            "  # one for each optimizer of the program: {}",
            names.join(", ")
        );
    }
    c
}

/// `optimizer = <the program's class>(<args>)<comment>`, with its import.
pub(super) fn optimizer_line(snap: &Snapshot, args: &str, comment: &str) -> String {
    let c = class_code_for_all(&Stepped::all(snap));
    let comment = match (comment.is_empty(), c.comment.is_empty()) {
        (_, true) => comment.to_owned(),
        (true, false) => c.comment.clone(),
        (false, false) => format!("{comment};{}", c.comment.trim_start_matches("  #")),
    };
    format!("{}optimizer = {}({args}){comment}", c.import, c.name)
}

/// Each optimizer-state block in 8 bits (`alternatives::eight_bit_bytes`),
/// with the count of those kept as they are (under 4,096 elements).
fn eight_bit_edits(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    state: &[usize],
    element: u64,
) -> (Edits, usize) {
    let l = &labelled.lifetimes;
    let mut small = 0;
    let changes: Vec<(usize, ChangeKind)> = state
        .iter()
        .filter_map(|&b| {
            let size = l.size[b];
            let to = eight_bit_bytes(size, element);
            if to == size {
                small += 1;
                return None;
            }
            Some((b, ChangeKind::Scale(to as f64 / size.max(1) as f64)))
        })
        .collect();
    (
        for_blocks(snap, device, l, &changes, "optimizer state"),
        small,
    )
}

/// The optimizer state and step offloaded to the CPU (torchao's
/// `CPUOffloadOptimizer`, as DeepSpeed's ZeRO-Offload does): each
/// parameter of 4,096 elements or more gets a pinned CPU copy, its
/// gradient is copied to the CPU after backward and the step runs there,
/// then the parameter is copied back in place. The GPU keeps the
/// parameters and gradients; the state of those parameters and their
/// step's temporaries are gone from it. Parameters under 4,096 elements
/// keep a GPU optimizer, with their state (`minimal_size`, torchao's
/// default). Not yet made for real on a GPU: `advise_run.py`'s variant
/// `cpu_offload` measures it.
fn cpu_offload(
    labelled: &Labelled,
    state: &[usize],
    recorded: &Settings,
    snap: &Snapshot,
    device: u32,
    class: &OptimizerCode,
) -> Candidate {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    // 4,096 elements of the parameters' dtype (fp32 unless the recorder
    // saw 16-bit parameters).
    let min_bytes = 4096 * super::precision::parameter_bytes_per_element(snap).unwrap_or(4);
    let step_temporaries = (0..l.len()).filter(|&b| {
        cats.category.get(b) == Some(&Category::Temporary)
            && cats.rule.get(b) == Some(&Rule::OptimizerFreed)
    });
    let gone: Vec<(usize, ChangeKind)> = state
        .iter()
        .copied()
        .chain(step_temporaries)
        .filter(|&b| l.size[b] >= min_bytes)
        .map(|b| (b, ChangeKind::Drop))
        .collect();
    let state_bytes: u64 = state
        .iter()
        .filter(|&&b| l.size[b] >= min_bytes)
        .map(|&b| l.size[b])
        .sum();
    let temp_bytes: u64 = gone.iter().map(|&(b, _)| l.size[b]).sum::<u64>() - state_bytes;
    let bytes = vramscope_text::units::bytes;
    Candidate {
        class: ChangeClass::CpuOffload,
        change: "the optimizer state and step offloaded to the CPU (torchao's CPUOffloadOptimizer; DeepSpeed's \
                 ZeRO-Offload does the same)"
            .into(),
        code: format!(
            "from torchao.optim import CPUOffloadOptimizer\n{}optimizer = CPUOffloadOptimizer(model.parameters(), \
             {}, lr=lr)  # the step runs on the CPU: slower steps{}",
            class.import, class.name, class.comment
        ),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &gone, "optimizer state and step")),
        how: format!(
            "replayed without the optimizer state of the parameters of 4,096 elements or more ({}) and their \
             step's temporaries ({}): the step runs on the CPU, which holds pinned copies of those parameters, \
             their gradients and their state; parameters and gradients stay on the GPU as recorded, and smaller \
             parameters keep a GPU optimizer",
            bytes(state_bytes),
            bytes(temp_bytes)
        ),
    }
}

/// The outputs and loss a step leaves bound to its variables: blocks made
/// in one iteration, alive when it ends and freed during the next (when
/// `out = model(x)` is assigned again), freed at the end of their own
/// iteration instead (`del out, loss` after the step). Parameters,
/// gradients, optimizer state and inputs are left alone: they are meant to
/// stay.
pub(super) fn kept_outputs_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    its: &Iterations,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let mut blocks: Vec<(usize, ChangeKind)> = Vec::new();
    let mut bytes = 0;
    for b in 0..l.len() {
        if l.birth[b] == BEFORE_WINDOW || l.death[b] == STILL_ALIVE {
            continue;
        }
        if matches!(
            cats.category.get(b),
            Some(
                Category::Parameter
                    | Category::Gradient
                    | Category::OptimizerState
                    | Category::Input
            )
        ) {
            continue;
        }
        let k = its.of_event(l.birth[b] as usize) as usize;
        let (Some(it), Some(next)) = (
            k.checked_sub(1).and_then(|k| its.list.get(k)),
            its.list.get(k),
        ) else {
            continue;
        };
        let death = l.death[b] as usize;
        if death >= it.end && death < next.end {
            blocks.push((b, ChangeKind::FreeAfter(it.end - 1)));
            bytes += l.size[b];
        }
    }
    if blocks.is_empty() {
        return refuse(
            not_offered,
            "deleting the outputs and loss at the end of each step",
            "nothing made in one iteration stays alive into the next and is freed there",
        );
    }
    let n = blocks.len();
    Some(Candidate {
        class: ChangeClass::DeleteOutputs,
        change: "delete the outputs and loss at the end of each step, before the next forward".into(),
        code: "loss.backward()\noptimizer.step()\noptimizer.zero_grad(set_to_none=True)\ndel outputs, loss  # not kept \
               into the next forward"
            .into(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &blocks, "outputs kept into the next iteration")),
        how: format!(
            "replayed with the {n} blocks ({}) that each iteration leaves alive into the next, freed there (when its \
             variables are assigned again), freed at the end of their own iteration",
            vramscope_text::units::bytes(bytes)
        ),
    })
}

/// The program's own `torch.cuda.empty_cache()` calls, removed: the cache
/// kept, so no cudaFree at each call and no cudaMalloc to take the memory
/// back (each waits for the device). It lowers no peak (a kept cache only
/// holds more), so it lands among the changes that lower none, with what
/// the calls cost the run in the allocator model's count of device calls.
pub(super) fn keep_cache_candidate(
    snap: &Snapshot,
    sim: &Simulation,
    recorded: &Settings,
) -> Option<Candidate> {
    let t = snap.trace(sim.device)?;
    let calls = vramscope_simulate::replay::empty_cache_calls(snap, t);
    if calls.is_empty() {
        return None;
    }
    let mut sites: Vec<String> = Vec::new();
    for &i in &calls {
        let label = vramscope_analysis::sites::site_frame(snap, t.stack[i])
            .map(|f| vramscope_analysis::sites::frame_label(snap, f))
            .unwrap_or_else(|| "<no stack recorded>".into());
        if !sites.contains(&label) {
            sites.push(label);
        }
    }
    let count = |keep_cache: bool| {
        let edits = Edits {
            keep_cache,
            ..Default::default()
        };
        let setup = vramscope_simulate::replay::ReplaySetup {
            capacity: sim.capacity,
            edits: Some(&edits),
            cold_start: true,
            ..Default::default()
        };
        let r = vramscope_simulate::replay::replay(snap, sim.device, recorded.clone(), &setup);
        (r.cuda_mallocs, r.cuda_frees)
    };
    let ((m_with, f_with), (m_without, f_without)) = (count(false), count(true));
    let n = calls.len();
    Some(Candidate {
        class: ChangeClass::KeepCache,
        change: format!(
            "remove the program's {n} torch.cuda.empty_cache() call{} ({})",
            if n == 1 { "" } else { "s" },
            sites.join(", ")
        ),
        code: "# torch.cuda.empty_cache()  # the cache stays: no cudaFree here, no cudaMalloc to get it back".into(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(Edits {
            keep_cache: true,
            ..Default::default()
        }),
        how: format!(
            "replayed with the cache kept where the program released it: {m_without} cudaMalloc and {f_without} \
             cudaFree calls in the allocator model against {m_with} and {f_with} with the calls (each waits for \
             the device)"
        ),
    })
}

/// The share of the optimizer state on the rank that holds most under
/// ZeRO-1: PyTorch's `ZeroRedundancyOptimizer` places whole parameters,
/// largest first, each on the rank with the fewest elements so far
/// (`_partition_parameters`), so one large parameter can leave a rank with
/// well over 1/N (the CPU's CNN: its linear layer is 74% of the model, and
/// the rank holding it peaked 0.41 MiB above the even split). 1/N where
/// the parameters are unknown.
fn zero_share(params: &[u64], ranks: u32) -> f64 {
    let total: u64 = params.iter().sum();
    if total == 0 || ranks < 2 {
        return 1.0 / ranks.max(1) as f64;
    }
    let mut sorted = params.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut load = vec![0u64; ranks as usize];
    for p in sorted {
        if let Some(min) = load.iter_mut().min_by_key(|x| **x) {
            *min += p;
        }
    }
    load.iter().copied().max().unwrap_or(0) as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::zero_share;

    #[test]
    fn zero_one_places_whole_parameters_on_the_least_loaded_rank() {
        // One parameter of 74: alone on its rank, the others on the second.
        assert!((zero_share(&[74, 10, 10, 6], 2) - 0.74).abs() < 1e-9);
        // Even sizes split evenly.
        assert!((zero_share(&[5, 5, 5, 5], 4) - 0.25).abs() < 1e-9);
        // Largest first: 6 then 5 go apart, 4 joins the 5, 3 the 6.
        assert!((zero_share(&[3, 4, 5, 6], 2) - 0.5).abs() < 1e-9);
        assert!((zero_share(&[], 2) - 0.5).abs() < 1e-9);
    }
}
