//! Allocation sites: which frame of a stack a user is shown as "where this
//! came from", for the stacks of plain loops and of framework-run loops.

use serde_json::{json, Value};
use vramscope_analysis::sites::{frame_location, site_frame};
use vramscope_snapshot::{decode_bytes, Snapshot};

const ENV: &str = "/env/lib/python3.11/site-packages";

fn frame(file: &str, line: u32, name: &str) -> Value {
    json!({"filename": file, "line": line, "name": name})
}

/// One snapshot whose blocks carry `stacks` (innermost first), in order.
fn snapshot(stacks: &[Value]) -> Snapshot {
    let blocks: Vec<Value> = stacks
        .iter()
        .enumerate()
        .map(|(i, frames)| {
            json!({"address": (1u64 << 30) + 512 * i as u64, "size": 512, "requested_size": 512,
                   "state": "active_allocated", "frames": frames})
        })
        .collect();
    let doc = json!({
        "segments": [{"device": 0, "address": 1u64 << 30, "total_size": 1u64 << 20, "blocks": blocks}],
        "device_traces": [[]],
    });
    decode_bytes(&serde_json::to_vec(&doc).unwrap(), &Default::default()).expect("decodes")
}

/// `file:line in function` of each block's site.
fn sites(stacks: &[Value]) -> Vec<String> {
    let snap = snapshot(stacks);
    snap.blocks
        .iter()
        .map(|b| {
            let fid = site_frame(&snap, b.stack).expect("a site");
            let (file, line, name) = frame_location(&snap, snap.frames.get(fid));
            format!(
                "{}:{line} in {name}",
                file.rsplit('/').next().unwrap_or(&file)
            )
        })
        .collect()
}

#[test]
fn a_plain_loop_is_shown_at_the_users_line() {
    let got = sites(&[
        // The user's forward, through torch.
        json!([
            frame(&format!("{ENV}/torch/nn/functional.py"), 10, "linear"),
            frame("/w/model.py", 12, "forward"),
            frame(
                &format!("{ENV}/torch/nn/modules/module.py"),
                1700,
                "_call_impl"
            ),
            frame("/w/train.py", 40, "main"),
        ]),
        // A model from a library, built by the user's line: the user's line.
        json!([
            frame(
                &format!("{ENV}/torch/nn/modules/linear.py"),
                100,
                "__init__"
            ),
            frame(
                &format!("{ENV}/transformers/models/gpt2/modeling_gpt2.py"),
                641,
                "__init__"
            ),
            frame("/w/train.py", 20, "main"),
        ]),
        // accelerate's backward called by the user's loop: the user's call.
        json!([
            frame(&format!("{ENV}/torch/_tensor.py"), 600, "backward"),
            frame(
                &format!("{ENV}/accelerate/accelerator.py"),
                2400,
                "backward"
            ),
            frame("/w/train.py", 44, "main"),
        ]),
    ]);
    assert_eq!(
        got,
        [
            "model.py:12 in forward",
            "train.py:20 in main",
            "train.py:44 in main"
        ]
    );
}

#[test]
fn a_framework_run_loop_is_shown_at_the_model_code_not_the_launcher() {
    let launch = frame("/w/train.py", 30, "main"); // trainer.train()
    let got = sites(&[
        // HF Trainer: the model's forward in modeling_gpt2.py.
        json!([
            frame(&format!("{ENV}/torch/nn/functional.py"), 10, "softmax"),
            frame(
                &format!("{ENV}/transformers/models/gpt2/modeling_gpt2.py"),
                250,
                "forward"
            ),
            frame(
                &format!("{ENV}/torch/nn/modules/module.py"),
                1700,
                "_call_impl"
            ),
            frame(
                &format!("{ENV}/transformers/trainer.py"),
                3700,
                "compute_loss"
            ),
            frame(
                &format!("{ENV}/transformers/trainer.py"),
                2400,
                "_inner_training_loop"
            ),
            launch.clone(),
        ]),
        // Lightning running backward: lightning's line that called it.
        json!([
            frame(
                &format!("{ENV}/torch/autograd/__init__.py"),
                340,
                "backward"
            ),
            frame(&format!("{ENV}/torch/_tensor.py"), 600, "backward"),
            frame(
                &format!("{ENV}/lightning/pytorch/core/module.py"),
                1100,
                "backward"
            ),
            frame(
                &format!("{ENV}/lightning/pytorch/loops/fit_loop.py"),
                200,
                "run"
            ),
            frame(
                &format!("{ENV}/lightning/pytorch/trainer/trainer.py"),
                500,
                "fit"
            ),
            launch.clone(),
        ]),
        // A LightningModule's training_step is the user's own code.
        json!([
            frame(&format!("{ENV}/torch/nn/functional.py"), 10, "linear"),
            frame("/w/train.py", 12, "training_step"),
            frame(
                &format!("{ENV}/lightning/pytorch/loops/fit_loop.py"),
                200,
                "run"
            ),
            launch,
        ]),
    ]);
    assert_eq!(
        got,
        [
            "modeling_gpt2.py:250 in forward",
            "module.py:1100 in backward",
            "train.py:12 in training_step"
        ]
    );
}

/// A Hugging Face Llama trained on the CPU under `vramscope.record`, each
/// step's logits kept (tests/fixtures/recorded/llama_kept_logits): the
/// memory made inside the library is named beneath the user's line by the
/// model's modules and lines.
#[test]
fn a_library_models_memory_is_named_by_its_modules() {
    use vramscope_analysis::{leaks::find_leaks, summarize, SummaryOptions};
    let snap = recorded("llama_kept_logits.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    let peak = &s.devices[0].peak;
    let site = peak
        .top_sites
        .iter()
        .find(|s| s.site.ends_with("llama_loop.py:29 in main"))
        .expect("the model's call line is a site");
    let names: Vec<&str> = site
        .within
        .iter()
        .filter_map(|p| p.module.as_deref())
        .collect();
    assert!(names.contains(&"lm_head"), "{names:?}");
    assert!(
        names.contains(&"model.layers[*].mlp.{gate_proj,up_proj,down_proj}"),
        "{names:?}"
    );
    let parts: u64 = site.within.iter().map(|p| p.bytes).sum();
    assert!(parts <= site.bytes, "{parts} > {}", site.bytes);
    let head = site
        .within
        .iter()
        .find(|p| p.module.as_deref() == Some("lm_head"))
        .expect("head");
    // The logits of batch 4 x 128 tokens x 4096 vocabulary, fp32: the kept
    // ones of earlier steps and this step's.
    assert_eq!(head.bytes % (4 * 128 * 4096 * 4), 0, "{head:?}");
    assert!(head
        .label
        .starts_with("lm_head (Linear) at transformers/models/llama/modeling_llama.py:"));

    let leaks = find_leaks(&snap, 0, &Default::default());
    let leak = leaks
        .findings
        .iter()
        .find(|f| f.severity == vramscope_analysis::leaks::Severity::Leak)
        .expect("the kept logits are a leak");
    assert!(leak.title.contains("→ Module.__call__"), "{}", leak.title);
    let top = &leak.sites[0].within[0];
    assert_eq!(
        top.module.as_deref(),
        Some("lm_head"),
        "{:?}",
        leak.sites[0].within
    );
    assert_eq!(top.bytes, 4 * (4 * 128 * 4096 * 4), "{top:?}");
}

/// Three MLP blocks trained with SGD on the CPU under `vramscope.record`
/// (tests/fixtures/recorded/backward_blocks): the gradients alive at the
/// optimizer's peak have only `loss.backward()` on their stacks; the
/// recorder's backward spans name them by the block that made them, and
/// nothing else at that line is named.
#[test]
fn backwards_memory_is_named_by_its_block() {
    use vramscope_analysis::{summarize, SummaryOptions};
    let snap = recorded("backward_blocks.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    let d = &s.devices[0];
    let site = d
        .end_top_sites
        .iter()
        .find(|s| s.site.ends_with("backward_blocks.py:50 in main"))
        .expect("the backward line is a site");
    // Each block's fc1 and fc2, weights and biases, fp32.
    let per_block = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4;
    assert_eq!(site.bytes, 3 * per_block);
    assert_eq!(site.within.len(), 1, "{:?}", site.within);
    let part = &site.within[0];
    assert!(part.backward);
    assert_eq!(part.module.as_deref(), Some("blocks[*]"));
    assert_eq!(part.class.as_deref(), Some("Block"));
    assert_eq!(part.label, "blocks[*] (Block) in backward");
    assert_eq!((part.bytes, part.count), (3 * per_block, 12));
    // At the peak (the first step's momentum buffers made) the same
    // gradients, and the backward's last temporary with them.
    let peak = d
        .peak
        .top_sites
        .iter()
        .find(|s| s.site.ends_with("backward_blocks.py:50 in main"))
        .expect("at the peak too");
    assert_eq!(peak.within[0].label, "blocks[*] (Block) in backward");
    assert!(peak.within[0].bytes >= 3 * per_block, "{:?}", peak.within);
}

/// The Transformer of `advise_runs.py` (every layer checkpointed,
/// tests/fixtures/recorded/checkpointed_transformer): its peak is the
/// start of backward, where the cross-entropy's backward holds the
/// logits' gradient and its softmax (2 × 16 × 64 × 2,000 floats) before
/// autograd reaches the head, the first module the recorder marked. That
/// memory is named for what came after the head's output: the loss.
#[test]
fn backwards_memory_before_the_model_is_the_losss() {
    use vramscope_analysis::{summarize, SummaryOptions};
    let snap = recorded("checkpointed_transformer.pickle.gz");
    let s = summarize(&snap, &SummaryOptions::default());
    let site = s.devices[0]
        .peak
        .top_sites
        .iter()
        .find(|s| s.site.ends_with("advise_runs.py:282 in main"))
        .expect("the backward line is a site at the peak");
    let logits = 16 * 64 * 2000 * 4;
    assert!(site.bytes >= 2 * logits, "{site:?}");
    let part = &site.within[0];
    assert_eq!(part.label, "after head's output (the loss), in backward");
    assert!(part.backward && part.module.is_none() && part.class.is_none());
    assert_eq!(part.bytes, site.bytes, "all of it the loss's");
}

/// Checkpointed programs' backward makes each layer's forward again. Where
/// the layer's own lines are on those allocations' stacks (a Hugging Face
/// GPT-2, tests/fixtures/recorded/gpt2_checkpointed, whose modules the
/// recorder maps), they are named as the layer's forward, recomputed in
/// backward; where they are not (PyTorch's own `TransformerEncoderLayer`,
/// no module map for PyTorch's files), by the layer whose backward made
/// them.
#[test]
fn a_recomputed_forward_is_named_as_such() {
    use vramscope_analysis::backward_blocks::BackwardBlocks;
    use vramscope_analysis::categories::recompute::recomputes;
    use vramscope_analysis::sites::site_frame;
    use vramscope_analysis::within::{parts, ModuleIndex, SitePart};
    use vramscope_snapshot::Action;
    let recomputed_parts = |name: &str| -> (Vec<SitePart>, u64) {
        let snap = recorded(name);
        let t = snap.trace(0).expect("a trace");
        let made: Vec<(vramscope_snapshot::StackId, u64, Option<u32>)> = (0..t.len())
            .filter(|&i| t.action[i] == Action::Alloc && recomputes(&snap, t.stack[i]))
            .map(|i| (t.stack[i], t.size[i], Some(i as u32)))
            .collect();
        let total = made.iter().map(|m| m.1).sum();
        let site = site_frame(&snap, made[0].0);
        let p = parts(
            &snap,
            &ModuleIndex::new(&snap),
            &BackwardBlocks::new(&snap, 0),
            site,
            made.into_iter(),
            64,
        );
        (p, total)
    };
    let (p, total) = recomputed_parts("gpt2_checkpointed.pickle.gz");
    let named: u64 = p.iter().filter(|x| x.recomputed).map(|x| x.bytes).sum();
    assert!(named * 2 > total, "{named} of {total}: {p:?}");
    for part in p.iter().filter(|x| x.recomputed) {
        assert!(
            !part.backward && part.label.ends_with(", recomputed in backward"),
            "{part:?}"
        );
        assert!(
            part.module
                .as_deref()
                .is_some_and(|m| m.starts_with("transformer.h[*]")),
            "{part:?}"
        );
    }
    // Each layer's recomputation allocates what its forward did
    // (11,592,192 B: `recompute.rs`'s forward runs), two layers a step,
    // four steps; all inside the layer's backward.
    let (p, total) = recomputed_parts("checkpointed_transformer.pickle.gz");
    assert_eq!(total, 8 * 11_592_192);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        p[0].label,
        "blocks.layers[*] (TransformerEncoderLayer) in backward"
    );
    assert_eq!((p[0].bytes, p[0].recomputed), (total, false));
}

/// A recording of tests/fixtures/recorded.
fn recorded(name: &str) -> Snapshot {
    vramscope_snapshot::load(&vramscope_testdata::recorded(name), &Default::default())
        .expect("loads")
}
