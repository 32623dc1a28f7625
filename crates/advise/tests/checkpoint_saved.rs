//! What checkpointing frees: the activations the backward after a block's
//! call frees, not what outlives that backward (a Hugging Face KV cache)
//! nor what the forward frees after the call (autocast's weight casts).

use vramscope_advise::{advise, Advice, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Action, Snapshot};
use vramscope_text::units::bytes;

/// A recording of tests/fixtures/recorded.
fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

fn rows(snap: &Snapshot) -> (Advice, Vec<Advice>, Vec<Advice>) {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    let pick = |v: Vec<Advice>| -> Vec<Advice> {
        v.into_iter()
            .filter(|r| r.class == ChangeClass::Checkpoint)
            .collect()
    };
    (a.baseline, pick(a.advice), pick(a.no_gain))
}

/// A Hugging Face Llama recorded on the CPU (`vramscope.record`, its layers
/// marked): each layer appends its keys and values to the model's
/// DynamicCache. The row leaves every byte of them out and says so.
#[test]
fn a_hugging_face_kv_cache_is_left_out_and_said() {
    let snap = recorded("llama_kept_logits.pickle.gz");
    let t = snap.trace(0).expect("a trace");
    // Counted here from the stacks alone: every allocation a cache update
    // made (all of them inside the layers' calls).
    let cache: u64 = (0..t.len())
        .filter(|&i| t.action[i] == Action::Alloc)
        .filter(|&i| {
            snap.stacks.get(t.stack[i]).iter().any(|&f| {
                snap.str(snap.frames.get(f).filename)
                    .ends_with("transformers/cache_utils.py")
            })
        })
        .map(|i| t.size[i])
        .sum();
    assert!(cache > 0, "the fixture's layers write a cache");
    let (_, advice, _) = rows(&snap);
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("a checkpoint row");
    let said = format!(
        "the {} the blocks wrote to Hugging Face's KV cache",
        bytes(cache)
    );
    assert!(every.how.contains(&said), "{said:?} not in {}", every.how);
    assert!(every.how.contains("use_cache=False"), "{}", every.how);
}

/// The H200's GPT trained under bf16 autocast (PyTorch's own history, the
/// layers read from the stacks): each layer's weight casts live until
/// autocast exits. Taken for the layers' outputs, they made the replay
/// recompute every layer as the forward ended, and checkpointing saved
/// nothing (listed at the recorded peak, 2,058,792,448 B allocated).
#[test]
fn autocasts_weight_casts_are_not_a_blocks_output() {
    let snap = load(
        &vramscope_testdata::gpu("estimate_trace_b16_bf16.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    let (baseline, advice, no_gain) = rows(&snap);
    assert!(no_gain.is_empty(), "{:?}", no_gain.first().map(|r| &r.how));
    let every = advice
        .iter()
        .find(|r| !r.change.contains("fewest"))
        .expect("checkpointing lowers the peak");
    // Twelve layer calls save 134.38 MiB each; the fp32 run's checkpoint
    // row saves 36% of its peak, this one as much.
    assert!(
        (every.peak_allocated as f64) < 0.65 * baseline.peak_allocated as f64,
        "{} of {}",
        every.peak_allocated,
        baseline.peak_allocated
    );
    assert!(every.how.contains("12 block calls"), "{}", every.how);
}

/// The Transformer of `advise_runs.py` with every layer checkpointed
/// (`tests/fixtures/recorded/checkpointed_transformer.pickle.gz`): each
/// layer's recomputation inside backward is part of that backward, so
/// FSDP's whole-model unit gathers the parameters the recorder tagged
/// (3.50 MiB), not the gradients made after the last recomputation; and
/// checkpointing is not offered again.
#[test]
fn a_checkpointed_runs_fsdp_unit_is_every_parameter() {
    let snap = recorded("checkpointed_transformer.pickle.gz");
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let fsdp = a
        .advice
        .iter()
        .chain(&a.no_gain)
        .find(|r| r.class == ChangeClass::Fsdp)
        .expect("an FSDP row");
    assert!(
        fsdp.how
            .contains("the parameters (3.50 MiB, the gradients born in one backward)"),
        "{}",
        fsdp.how
    );
    // Measured: the checkpointed Transformer under fully_shard(model) over
    // two gloo ranks peaks at 43,563,168 B (python/tests/test_advise_cpu.py
    // runs it); the replay within 0.1% of it.
    let measured = 43_563_168f64;
    let err = (fsdp.peak_allocated as f64 - measured) / measured;
    assert!(
        err.abs() < 0.001,
        "{} against {measured}",
        fsdp.peak_allocated
    );
    let (_, advice, _) = rows(&snap);
    assert!(advice.is_empty(), "checkpointing offered again");
}
