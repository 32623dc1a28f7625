//! What the memory is, for snapshots nobody labelled: each inference rule
//! on a small trace built for it, and the real GPU snapshots against what
//! their programs are known to hold.

use serde_json::{json, Value};
use vramscope_analysis::categories::{categorize, Category, Rule, Source};
use vramscope_analysis::lifetimes::Lifetimes;
use vramscope_analysis::Liveness;
use vramscope_snapshot::{decode_bytes, load, Snapshot};

fn frame(file: &str, name: &str) -> Value {
    json!({"filename": file, "line": 1, "name": name})
}

/// Stacks of each phase, as PyTorch records them with Python stacks.
fn stack(phase: &str) -> Value {
    let user = frame("/w/train.py", "main");
    match phase {
        "forward" => json!([
            frame("/env/torch/nn/functional.py", "linear"),
            frame("/w/model.py", "forward"),
            frame("/env/torch/nn/modules/module.py", "_call_impl"),
            user
        ]),
        "loss" => json!([frame("/env/torch/nn/functional.py", "cross_entropy"), user]),
        "optimizer" => json!([
            frame("/env/torch/optim/adam.py", "_init_group"),
            frame("/env/torch/optim/adam.py", "step"),
            user
        ]),
        "zero_grad" => json!([frame("/env/torch/optim/optimizer.py", "zero_grad"), user]),
        "data" => json!([frame("/w/train.py", "load_batch"), user]),
        // torchvision's Normalize, an nn.Module, called by the dataset's
        // transforms inside the DataLoader.
        "loader" => json!([
            frame("/env/torchvision/transforms/functional.py", "normalize"),
            frame("/env/torchvision/transforms/transforms.py", "forward"),
            frame("/env/torch/nn/modules/module.py", "_call_impl"),
            frame("/env/torchvision/transforms/transforms.py", "__call__"),
            frame("/env/torchvision/datasets/mnist.py", "__getitem__"),
            frame("/env/torch/utils/data/_utils/fetch.py", "fetch"),
            frame("/env/torch/utils/data/dataloader.py", "__next__"),
            user
        ]),
        "setup" => json!([
            frame("/env/torch/nn/modules/module.py", "_apply"),
            frame("/env/torch/nn/modules/module.py", "to"),
            user
        ]),
        // Backward runs on the autograd engine's thread: no Python frames.
        "backward" => json!([]),
        _ => unreachable!(),
    }
}

/// A trace from `(action, addr, size, phase)` steps, a parameter of 4096
/// bytes alive from before the trace at address 1<<30.
fn snapshot(steps: &[(&str, u64, u64, &str)], extra_live: &[(u64, u64)]) -> Snapshot {
    let mut entries = Vec::new();
    for (k, (action, addr, size, phase)) in steps.iter().enumerate() {
        entries.push(
            json!({"action": action, "addr": addr, "size": size, "stream": 0,
            "time_us": 1000 + k as u64, "frames": stack(phase)}),
        );
    }
    let mut blocks = vec![
        json!({"address": 1u64 << 30, "size": 4096, "requested_size": 4096,
        "state": "active_allocated", "frames": []}),
    ];
    for &(addr, size) in extra_live {
        blocks.push(
            json!({"address": addr, "size": size, "requested_size": size,
            "state": "active_allocated", "frames": []}),
        );
    }
    let doc = json!({
        "segments": [{"device": 0, "address": 1u64 << 30, "total_size": 1u64 << 30, "blocks": blocks}],
        "device_traces": [entries],
    });
    decode_bytes(&serde_json::to_vec(&doc).unwrap(), &Default::default()).expect("decodes")
}

/// (category, rule) of the block allocated at `addr` inside the trace, or
/// of the block from before it at `addr`.
fn label(snap: &Snapshot, addr: u64) -> (Category, Rule) {
    let l = Lifetimes::new(snap, 0);
    let c = categorize(snap, 0, &l);
    let b = (0..l.len())
        .find(|&b| l.addr[b] == addr)
        .unwrap_or_else(|| panic!("no block at {addr}"));
    (c.category[b], c.rule[b])
}

/// One iteration: data, forward (an activation saved for backward, a
/// temporary inside one op), the loss, backward (autograd detail, a
/// gradient), the optimizer step (state, a temporary), zero_grad.
fn one_step() -> Snapshot {
    snapshot(
        &[
            ("alloc", 0x100, 512, "data"),     // the batch
            ("alloc", 0x200, 1024, "forward"), // activation, saved
            ("alloc", 0x300, 2048, "forward"), // workspace of the same op
            ("free_completed", 0x300, 2048, "forward"),
            ("alloc", 0x400, 512, "loss"), // the loss, outside any module
            ("alloc", 0x500, 8192, "backward"), // grad of an activation
            ("alloc", 0x600, 4096, "backward"), // the parameter's gradient
            ("free_completed", 0x500, 8192, "backward"),
            ("free_completed", 0x200, 1024, "backward"),
            ("alloc", 0x700, 4096, "optimizer"), // exp_avg
            ("alloc", 0x800, 4096, "optimizer"), // a temporary of the step
            ("free_completed", 0x800, 4096, "optimizer"),
            ("free_completed", 0x400, 512, "data"),
            ("free_completed", 0x600, 4096, "zero_grad"),
            ("free_completed", 0x100, 512, "data"), // replaced by the next batch
            ("alloc", 0x900, 512, "data"),
            ("alloc", 0xa00, 1024, "forward"),
        ],
        &[],
    )
}

#[test]
fn each_phase_and_lifetime_gives_its_label() {
    let s = one_step();
    let want = [
        (0x100, Category::Input, Rule::BeforeForward),
        (0x200, Category::Activation, Rule::ForwardKept),
        (0x300, Category::Temporary, Rule::WithinOp),
        (0x400, Category::Activation, Rule::ForwardKept),
        (0x500, Category::AutogradDetail, Rule::BackwardFreed),
        (0x600, Category::Gradient, Rule::BackwardKept),
        (0x700, Category::OptimizerState, Rule::OptimizerKept),
        (0x800, Category::Temporary, Rule::OptimizerFreed),
        (1 << 30, Category::Parameter, Rule::MirrorsGradient),
        (0xa00, Category::Activation, Rule::ForwardKept),
    ];
    for (addr, cat, rule) in want {
        assert_eq!(label(&s, addr), (cat, rule), "block at {addr:#x}");
    }
    // The last batch is alive at the end: nothing says yet what it is.
    assert_eq!(label(&s, 0x900), (Category::Unknown, Rule::NoEvidence));
}

#[test]
fn what_the_data_loader_makes_is_an_input_through_a_transform_module() {
    // The transform's call (a module's) inside the DataLoader once read as
    // a forward: the sample and the batch were activations, and the batch
    // cut the step's forward in two.
    let snap = snapshot(
        &[
            ("alloc", 0x100, 512, "loader"),  // a sample, normalized
            ("alloc", 0x180, 2048, "loader"), // the batch, collated
            ("free_completed", 0x100, 512, "loader"),
            ("alloc", 0x200, 1024, "forward"),
            ("alloc", 0x400, 512, "loss"),
            ("alloc", 0x600, 4096, "backward"),
            ("free_completed", 0x200, 1024, "backward"),
            ("alloc", 0x700, 4096, "optimizer"),
            // The next batch, fetched one ahead: it lives through two
            // forwards, which the rule of a batch by its lifetime refuses.
            ("alloc", 0x280, 2048, "loader"),
            ("free_completed", 0x180, 2048, "data"),
            ("alloc", 0x300, 1024, "forward"),
            ("alloc", 0x500, 512, "loss"),
            ("alloc", 0x380, 2048, "loader"),
            ("free_completed", 0x280, 2048, "data"),
            ("alloc", 0x800, 1024, "forward"),
        ],
        &[],
    );
    assert_eq!(label(&snap, 0x100), (Category::Input, Rule::DataLoader));
    assert_eq!(label(&snap, 0x180), (Category::Input, Rule::DataLoader));
    assert_eq!(label(&snap, 0x280), (Category::Input, Rule::DataLoader));
    assert_eq!(
        label(&snap, 0x200),
        (Category::Activation, Rule::ForwardKept)
    );
}

#[test]
fn blocks_from_before_the_trace() {
    // A parameter without a gradient of its size in the trace, beside one
    // with: only the mirrored one is a parameter.
    let s = snapshot(
        &[
            ("alloc", 0x200, 1024, "forward"),
            ("alloc", 0x600, 4096, "backward"),
            ("free_completed", 0x200, 1024, "backward"),
        ],
        &[(2 << 30, 12288)],
    );
    assert_eq!(
        label(&s, 1 << 30),
        (Category::Parameter, Rule::MirrorsGradient)
    );
    // Still unknown, and said to be what a training run keeps throughout
    // (frozen weights, buffers, gradients kept across steps).
    assert_eq!(
        label(&s, 2 << 30),
        (Category::Unknown, Rule::AliveThroughout)
    );
    // Gradients of the step before the trace, freed by zero_grad; the
    // optimizer's state before the trace, which its step replaces.
    let s = snapshot(
        &[
            ("free_completed", 0x5000, 4096, "zero_grad"),
            ("alloc", 0x200, 1024, "forward"),
            ("free_completed", 0x6000, 4096, "optimizer"),
        ],
        &[],
    );
    assert_eq!(
        label(&s, 0x5000),
        (Category::Gradient, Rule::FreedByZeroGrad)
    );
    assert_eq!(
        label(&s, 0x6000),
        (Category::OptimizerState, Rule::ReplacedByOptimizer)
    );
    // Inference: no backward in the trace, the weights were there before it.
    let s = snapshot(
        &[
            ("alloc", 0x200, 1024, "forward"),
            ("free_completed", 0x200, 1024, "forward"),
        ],
        &[],
    );
    assert_eq!(
        label(&s, 1 << 30),
        (Category::Parameter, Rule::KeptWithoutBackward)
    );
    // Nothing but the dump: no evidence, no label.
    let s = snapshot(&[], &[]);
    assert_eq!(label(&s, 1 << 30), (Category::Unknown, Rule::NoEvidence));
}

#[test]
fn model_setup_and_state_kept_across_iterations() {
    let s = snapshot(
        &[
            ("alloc", 0x100, 4096, "setup"), // model.to(device)
            ("alloc", 0x110, 512, "data"),   // kept by the program for good
            ("alloc", 0x200, 1024, "forward"),
            ("free_completed", 0x200, 1024, "forward"),
            ("alloc", 0x300, 8192, "backward"),
            ("free_completed", 0x300, 8192, "backward"),
            ("alloc", 0x210, 1024, "forward"),
            ("free_completed", 0x210, 1024, "forward"),
            ("free_completed", 0x110, 512, "data"),
        ],
        &[],
    );
    assert_eq!(label(&s, 0x100), (Category::Parameter, Rule::ModelSetup));
    // Not an input: it lived through two forwards.
    assert_eq!(label(&s, 0x110), (Category::Unknown, Rule::NoEvidence));
}

#[test]
fn labels_given_with_the_file_win() {
    // Recorder tags in user_metadata, and a profiler category.
    let doc = json!({
        "segments": [],
        "device_traces": [[
            {"action": "alloc", "addr": 0x100, "size": 512, "time_us": 1, "frames": stack("forward"),
             "user_metadata": "phase=forward;category=input"},
            {"action": "alloc", "addr": 0x200, "size": 512, "time_us": 2, "frames": stack("forward"),
             "user_metadata": ""},
            {"action": "annotate", "addr": 0x200, "size": 0, "time_us": 3, "user_metadata": "category=parameter"},
            {"action": "alloc", "addr": 0x300, "size": 512, "time_us": 4, "frames": stack("forward"),
             "user_metadata": ""},
        ]],
    });
    let s = decode_bytes(&serde_json::to_vec(&doc).unwrap(), &Default::default()).unwrap();
    let l = Lifetimes::new(&s, 0);
    let c = categorize(&s, 0, &l);
    let at = |addr: u64| (0..l.len()).find(|&b| l.addr[b] == addr).unwrap();
    assert_eq!(c.category[at(0x100)], Category::Input);
    assert_eq!(c.source[at(0x100)], Some(Source::Recorder));
    assert_eq!(c.category[at(0x200)], Category::Parameter);
    assert_eq!(c.source[at(0x200)], Some(Source::Recorder));
    assert_eq!(c.category[at(0x300)], Category::Activation);
    assert_eq!(c.source[at(0x300)], Some(Source::Inferred));
}

fn real(name: &str) -> Snapshot {
    load(&vramscope_testdata::real(name), &Default::default()).expect("loads")
}

/// Bytes per category alive at the end of device 0's trace.
fn at_end(snap: &Snapshot) -> std::collections::HashMap<Category, u64> {
    let l = Lifetimes::new(snap, 0);
    let c = categorize(snap, 0, &l);
    let r = Liveness::new(snap, 0);
    let t = snap.trace(0).expect("trace");
    let live = r.live_after(t, t.len().checked_sub(1));
    c.totals(&l, &live)
        .into_iter()
        .map(|x| (x.category, x.bytes))
        .collect()
}

fn within(got: u64, want: u64, pct: f64) -> bool {
    (got as f64 - want as f64).abs() <= want as f64 * pct / 100.0
}

/// The CS336 "medium" Transformer LM: 423,183,360 fp32 parameters, AdamW,
/// one step, recorded on a GPU with C++ and Python stacks.
#[test]
fn real_training_step_parameters_gradients_and_adam_state() {
    let s = real("wedsonlin_medium_1024_training_memory_snapshot.pickle");
    let e = at_end(&s);
    let p = 423_183_360u64 * 4;
    let got = |c| e.get(&c).copied().unwrap_or(0);
    assert!(
        within(got(Category::Parameter), p, 2.0),
        "parameters {}",
        got(Category::Parameter)
    );
    assert!(
        within(got(Category::Gradient), p, 2.0),
        "gradients {}",
        got(Category::Gradient)
    );
    assert!(
        within(got(Category::OptimizerState), 2 * p, 2.0),
        "optimizer state {}",
        got(Category::OptimizerState)
    );
    // As measured: gradients and AdamW's two moments exactly; parameters
    // 0.12% over (blocks from before the trace are counted with their
    // rounded size).
    assert_eq!(got(Category::Gradient), 1_692_733_440);
    assert_eq!(got(Category::OptimizerState), 3_385_466_880);
    assert_eq!(got(Category::Parameter), 1_694_699_520);
}

#[test]
fn other_real_snapshots() {
    // A full training step (torch 2.6, Python stacks): AdamW's state is
    // twice the parameters, the gradients as large as them.
    let e = at_end(&real("nothanmin_cs336_999segments.pickle"));
    let (p, g, st) = (
        e[&Category::Parameter],
        e[&Category::Gradient],
        e[&Category::OptimizerState],
    );
    assert!(within(st, 2 * p, 1.0), "state {st} vs parameters {p}");
    assert!(within(g, p, 3.0), "gradients {g} vs parameters {p}");
    // Inference: everything alive at the end is the model's weights.
    let s = real("wedsonlin_medium_512_inference_memory_snapshot.pickle");
    let e = at_end(&s);
    assert_eq!(e.len(), 1);
    assert_eq!(e[&Category::Parameter], 1_703_448_576);
    // Backward without gradients kept (a benchmark), and dumps with no
    // trace: nothing is called a parameter or gradient without evidence.
    for name in [
        "magma27_cs336_windows.pickle",
        "yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle",
        "yiyi_flexgen_opt1.3b_legacy_pt20.pickle",
    ] {
        let e = at_end(&real(name));
        assert!(!e.contains_key(&Category::Parameter), "{name}: {e:?}");
        assert!(!e.contains_key(&Category::Gradient), "{name}: {e:?}");
        assert!(e.contains_key(&Category::Unknown), "{name}: {e:?}");
    }
}

/// CPU recordings whose every allocation the Memory Profiler labelled:
/// inference alone agrees with it on at least 90% of the bytes, over time
/// and at the peak, the recorder's tags with inference on 97% (the profiler's own `unknown`, memory it could not tie
/// to a tensor, is left out).
#[test]
fn inference_agrees_with_the_memory_profiler() {
    use vramscope_analysis::categories::agreement;
    for (name, over_time, at_peak) in [
        ("cnn_sgd_cpu.pickle", 0.90, 0.90),
        ("mlp_adam_cpu.pickle", 0.90, 0.90),
    ] {
        let s = load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads");
        let a = agreement(&s, 0).expect("the file has the profiler's labels");
        assert_eq!(a.reference, Source::Profiler);
        assert!(
            a.inference.over_time >= over_time,
            "{name}: {:.3} over time: {:#?}",
            a.inference.over_time,
            a.inference.confusion
        );
        assert!(
            a.inference.at_peak >= at_peak,
            "{name}: {:.3} at the peak: {:#?}",
            a.inference.at_peak,
            a.inference.confusion
        );
        // The recorder's tags (parameters, gradients, optimizer state, the
        // batch) completed by inference: 97%.
        let w = a
            .with_tags
            .as_ref()
            .expect("the recording has the recorder's tags");
        assert!(
            w.over_time >= 0.97,
            "{name}: with tags {:.3}: {:#?}",
            w.over_time,
            w.confusion
        );
        assert!(
            w.at_peak >= 0.97,
            "{name}: with tags {:.3} at the peak",
            w.at_peak
        );
        eprintln!(
            "{name}: inference {:.1}% over time, {:.1}% at the peak; with tags {:.1}%, {:.1}%",
            a.inference.over_time * 100.0,
            a.inference.at_peak * 100.0,
            w.over_time * 100.0,
            w.at_peak * 100.0
        );
    }
}

/// On the CPU the autograd engine runs backward on the thread that called
/// it, with its Python frames: an allocation without frames there is not
/// backward's (`torch.get_rng_state()`'s 5,056-byte state, which a
/// reentrant checkpoint saves as its block's forward starts, is recorded
/// without them). On CUDA, where backward runs on the engine's device
/// threads, the same stackless allocation is backward's.
#[test]
fn a_stackless_allocation_in_a_cpu_recordings_forward_is_forward() {
    use vramscope_analysis::categories::Phase;
    let steps = [
        ("alloc", 0x1000u64, 512u64, "forward"),
        ("alloc", 0x2000, 5056, "backward"), // no frames
        ("alloc", 0x3000, 512, "forward"),
        ("free_completed", 0x2000, 5056, "backward"),
    ];
    let doc = |recorder: Option<&str>| {
        let entries: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(k, (action, addr, size, phase))| {
                json!({"action": action, "addr": addr, "size": size, "stream": 0,
                "time_us": 1000 + k as u64, "frames": stack(phase)})
            })
            .collect();
        let mut d = json!({"segments": [], "device_traces": [entries]});
        if let Some(r) = recorder {
            d["vramscope"] = json!({"recorder": r, "version": 1});
        }
        decode_bytes(&serde_json::to_vec(&d).unwrap(), &Default::default()).expect("decodes")
    };
    let phases = |s: &Snapshot| {
        let l = Lifetimes::new(s, 0);
        categorize(s, 0, &l).phases.phase
    };
    let cpu = doc(Some("cpu-allocator"));
    assert_eq!(
        cpu.source.recorder.as_ref().map(|r| r.device_kind()),
        Some("cpu")
    );
    assert_eq!(phases(&cpu)[..3], [Phase::Forward; 3]);
    let cuda = doc(None);
    assert_eq!(phases(&cuda)[1], Phase::Backward);
}

/// A block freed before any other site allocated is a temporary of its op
/// only if nothing the program made before it was freed meanwhile: an
/// inference loop that lets go of the model's output (`del out`) frees the
/// layers' outputs first, and allocates nothing until the next batch. Sites
/// are told apart by their Python frames: an op's internal copies (other
/// C++ frames, the same Python ones) freed inside it do not count.
#[test]
fn an_output_the_program_lets_go_of_outlived_its_op() {
    let py = |line: u32, name: &str| json!({"filename": "/w/model.py", "line": line, "name": name});
    let cpp = |name: &str| json!({"filename": "??", "line": 0, "name": name});
    let module = frame("/env/torch/nn/modules/module.py", "_call_impl");
    let user = frame("/w/infer.py", "main");
    let layer1 = json!([py(10, "forward"), module, user]);
    let head = json!([py(20, "forward"), module, user]);
    let head_copy = json!([cpp("at::native::_to_copy"), py(20, "forward"), module, user]);
    let head_out = json!([cpp("at::native::bmm_out"), py(20, "forward"), module, user]);
    let program = json!([user]);
    let steps = [
        ("alloc", 0x100u64, 4096u64, &layer1), // layer 1's output
        ("alloc", 0x200, 8192, &head),         // the logits
        ("free_completed", 0x100, 4096, &program),
        ("free_completed", 0x200, 8192, &program), // `del out`
        // The next batch: the head copies its input inside the op, then
        // makes its result and a scratch freed before the op returns.
        ("alloc", 0x300, 4096, &layer1),
        ("alloc", 0x400, 1024, &head_copy),
        ("alloc", 0x500, 2048, &head_out),
        ("free_completed", 0x400, 1024, &head_copy),
        ("free_completed", 0x500, 2048, &head_out),
    ];
    let entries: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(k, (action, addr, size, frames))| {
            json!({"action": action, "addr": addr, "size": size, "stream": 0,
            "time_us": 1000 + k as u64, "frames": frames})
        })
        .collect();
    let d = json!({"segments": [], "device_traces": [entries]});
    let s = decode_bytes(&serde_json::to_vec(&d).unwrap(), &Default::default()).expect("decodes");
    assert_eq!(label(&s, 0x200), (Category::Activation, Rule::ForwardKept));
    assert_eq!(label(&s, 0x100), (Category::Activation, Rule::ForwardKept));
    assert_eq!(label(&s, 0x500), (Category::Temporary, Rule::WithinOp));
}

/// No-grad inference loops of the zoo (`category_runs.py --only
/// zoo_bert_inference`, `zoo_lstm_inference`): each batch's logits, the
/// peak, are let go of by the loop with nothing allocated in between.
/// They were "temporaries" (11% agreement at the peak); now activations,
/// as the Memory Profiler labels them.
#[test]
fn inference_loops_outputs_are_activations() {
    use vramscope_analysis::categories::agreement;
    for name in ["zoo_bert_inference.pickle", "zoo_lstm_inference.pickle"] {
        let s = load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads");
        let a = agreement(&s, 0).expect("the file has the profiler's labels");
        assert!(
            a.inference.at_peak >= 0.99,
            "{name}: {:.3} at the peak: {:#?}",
            a.inference.at_peak,
            a.inference.confusion
        );
        assert!(
            a.inference.over_time >= 0.95,
            "{name}: {:.3} over time: {:#?}",
            a.inference.over_time,
            a.inference.confusion
        );
    }
}

/// A real GPU inference run (`wedsonlin_medium_512_inference`, C++ and
/// Python stacks): the logits, 40,960,000 bytes from `einsum` in the
/// model's head, let go of by the program, are activations, not an op's
/// temporaries (`einsum`'s own `_to_copy`s are freed inside it).
#[test]
fn a_real_inference_runs_logits_are_activations() {
    let s = real("wedsonlin_medium_512_inference_memory_snapshot.pickle");
    let l = Lifetimes::new(&s, 0);
    let c = categorize(&s, 0, &l);
    let logits: Vec<usize> = (0..l.len())
        .filter(|&b| {
            l.size[b] == 40_960_000 && l.birth[b] != vramscope_analysis::lifetimes::BEFORE_WINDOW
        })
        .collect();
    assert!(!logits.is_empty());
    for b in logits {
        assert_eq!(
            c.category[b],
            Category::Activation,
            "block {b}: {:?}",
            c.rule[b]
        );
    }
}

/// A compiled model's training (`category_runs.py --only zoo_gpt2_compiled
/// --backend allocator`: the zoo's GPT-2 under `torch.compile`, AdamW, 3
/// steps). The reader gives a compiled kernel's frames the source lines it
/// computes, and a compiled backward's are the forward's lines: the phase is
/// what the frames outside the generated code say (the autograd engine).
/// Inference alone against the recorder's tags: 99.9% of bytes over time
/// (10.9% when the gradients were activations and the parameters, with no
/// gradient of their size, unknown).
#[test]
fn a_compiled_backwards_gradients_are_gradients() {
    use vramscope_analysis::categories::agreement;
    let s = load(
        &vramscope_testdata::recorded("zoo_gpt2_compiled.pickle"),
        &Default::default(),
    )
    .expect("loads");
    let a = agreement(&s, 0).expect("the recording has the recorder's tags");
    assert_eq!(a.reference, Source::Recorder);
    let table = format!("{:#?}", a.inference.confusion);
    assert!(
        a.inference.over_time >= 0.99,
        "{:.3}: {table}",
        a.inference.over_time
    );
    assert!(
        a.inference.at_peak >= 0.99,
        "{:.3}: {table}",
        a.inference.at_peak
    );
    let e = at_end(&s);
    assert_eq!(e.get(&Category::Gradient), Some(&17_094_656), "{e:?}");
    // What the compiled forward keeps alive across steps (96 bytes), no
    // gradient among it.
    assert!(
        e.get(&Category::Activation).copied().unwrap_or(0) < 1024,
        "{e:?}"
    );
}

/// `zero_grad(set_to_none=False)`: no gradient is made in the trace, so
/// parameters, gradients and Adam's state are blocks from before it, alive
/// throughout, of the same sizes. Each backward makes (and frees, once
/// added into `.grad`) an incoming gradient per parameter: two of 40,000
/// bytes here, beside eight blocks of that size = two groups of parameter,
/// gradient and two moments. Where the counted sizes leave a tenth of the
/// bytes unknown, nothing is labelled.
#[test]
fn gradients_kept_across_steps_are_counted_per_parameter() {
    let steps = [
        ("alloc", 0x200u64, 1024u64, "forward"),
        ("alloc", 0x300, 40_000, "backward"), // incoming gradients
        ("free_completed", 0x300, 40_000, "backward"),
        ("alloc", 0x310, 40_000, "backward"),
        ("free_completed", 0x310, 40_000, "backward"),
        ("free_completed", 0x200, 1024, "backward"),
        ("alloc", 0x400, 40_000, "optimizer"), // a temporary of Adam's step
        ("free_completed", 0x400, 40_000, "optimizer"),
    ];
    let held: Vec<(u64, u64)> = (0..8).map(|k| ((k + 2) << 30, 40_000)).collect();
    let s = snapshot(&steps, &held);
    let l = Lifetimes::new(&s, 0);
    let c = categorize(&s, 0, &l);
    let mut count = std::collections::HashMap::new();
    for b in 0..l.len() {
        if l.size[b] == 40_000 && l.birth[b] == vramscope_analysis::lifetimes::BEFORE_WINDOW {
            assert_eq!(c.rule[b], Rule::CountedPerParameter, "block {b}");
            *count.entry(c.category[b]).or_insert(0) += 1;
        }
    }
    assert_eq!(count[&Category::Parameter], 2);
    assert_eq!(count[&Category::Gradient], 2);
    assert_eq!(count[&Category::OptimizerState], 4);
    // One block of the size too many: the count fits no reading, and what
    // fits (the 4,096-byte parameter has no incoming gradient) is too
    // little of the bytes to be labelled in part.
    let mut more = held.clone();
    more.push((12 << 30, 40_000));
    let s = snapshot(&steps, &more);
    for addr in [2u64 << 30, 12 << 30] {
        assert_eq!(label(&s, addr), (Category::Unknown, Rule::AliveThroughout));
    }
}

/// Where the recorder tagged the weights, nothing else is taken for a
/// parameter by size: the tagged weights fill the count of gradients of
/// their size. A batch of a bias's size (GPT-2's 4,096-byte tokens) was
/// counted with them; so were ResNet-18's batch-norm running statistics
/// (+38,400 B, measured on `category_runs.py --only zoo_resnet_fp32
/// --backend allocator`).
#[test]
fn tagged_weights_fill_the_mirror_counts() {
    for name in [
        "convnext_timm.pickle.gz",
        "swin_nested_blocks.pickle.gz",
        "gpt2_checkpointed.pickle.gz",
    ] {
        let s = load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads");
        let l = Lifetimes::new(&s, 0);
        let c = categorize(&s, 0, &l);
        let inferred: Vec<(u64, Rule)> = (0..l.len())
            .filter(|&b| {
                c.category[b] == Category::Parameter && c.source[b] != Some(Source::Recorder)
            })
            .map(|b| (l.size[b], c.rule[b]))
            .collect();
        assert!(inferred.is_empty(), "{name}: {inferred:?}");
        assert!((0..l.len()).any(|b| c.source[b] == Some(Source::Recorder)));
    }
}

/// Every CPU recording of the project that carries the recorder's tags,
/// read again with the tags left out (as PyTorch's own recorder writes a
/// snapshot): inference alone finds, at the end, the gradients and the
/// optimizer state the tags name to the byte, and the parameters within
/// 0.1% (a batch of a weight's size, alive throughout, cannot be told from
/// one).
#[test]
fn inference_alone_ends_where_the_recorders_tags_do() {
    for name in [
        "convnext_timm.pickle.gz",
        "swin_nested_blocks.pickle.gz",
        "gpt2_checkpointed.pickle.gz",
        "checkpointed_transformer.pickle.gz",
        "llama_kept_logits.pickle.gz",
        "zoo_gpt2_compiled.pickle.gz",
    ] {
        let mut s = load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads");
        let tagged = at_end(&s);
        assert!(!s.tags.is_empty(), "{name} has no tags");
        s.tags.clear();
        let alone = at_end(&s);
        let get = |m: &std::collections::HashMap<Category, u64>, c| m.get(&c).copied().unwrap_or(0);
        for c in [Category::Gradient, Category::OptimizerState] {
            assert_eq!(
                get(&alone, c),
                get(&tagged, c),
                "{name}: {c:?}: {alone:?} against {tagged:?}"
            );
        }
        let (p, q) = (
            get(&alone, Category::Parameter),
            get(&tagged, Category::Parameter),
        );
        assert!(
            q > 0 && within(p, q, 0.1),
            "{name}: parameters {p} against {q}"
        );
    }
}
