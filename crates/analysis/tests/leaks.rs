//! Leak analysis on synthetic runs with a known planted leak, and on every
//! real snapshot in tests/fixtures/real (no crash; the iterations and
//! findings that make sense for each are pinned).

use vramscope_analysis::iterations::IterationSource;
use vramscope_analysis::leaks::{find_leaks, FindingKind, LeakOptions, Severity};
use vramscope_snapshot::{decode_bytes, load, Snapshot};
use vramscope_synth::{write_snapshot, SynthOptions};

fn synth(leak: u64, seed: u64) -> (Snapshot, vramscope_synth::SynthTruth) {
    let mut buf = Vec::new();
    let opts = SynthOptions {
        entries: 60_000,
        iterations: 12,
        seed,
        leak_bytes_per_iter: leak,
        ..Default::default()
    };
    let truth = write_snapshot(&opts, &mut buf).expect("synth");
    (
        decode_bytes(&buf, &Default::default()).expect("decode"),
        truth,
    )
}

fn opts() -> LeakOptions {
    LeakOptions {
        read_sources: false,
        ..LeakOptions::default()
    }
}

#[test]
fn planted_leak_is_found_with_its_site_and_rate() {
    const LEAK: u64 = 8 << 20;
    let (snap, truth) = synth(LEAK, 7);
    let r = find_leaks(&snap, 0, &opts());
    assert_eq!(r.iteration_source, IterationSource::ProfilerStep);
    assert!(
        r.iterations.len() >= 10,
        "{} iterations",
        r.iterations.len()
    );
    let leaks: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Leak)
        .collect();
    assert_eq!(leaks.len(), 1, "{:#?}", r.findings);
    let f = leaks[0];
    assert_eq!(f.kind, FindingKind::Growth);
    assert!(
        f.sites[0]
            .site
            .ends_with("train.py:74 in accumulate_history"),
        "{}",
        f.sites[0].site
    );
    // The allocator rounds each leaked tensor up to 512 bytes.
    let per = f.bytes_per_iteration;
    assert!(per >= LEAK as f64 && per < LEAK as f64 + 512.0, "{per}");
    // Everything leaked in the window is still alive at the end.
    assert!(f.sites[0].live_bytes.last().copied().unwrap_or(0) <= truth.leaked_bytes + 512 * 64);
    assert!(f.sites[0].outliving_blocks >= 8);
    assert!(r.leaks_found);
    assert!(
        (r.growth_per_iteration - per).abs() < 1.0,
        "{} vs {per}",
        r.growth_per_iteration
    );
}

#[test]
fn clean_run_has_no_leak() {
    let (snap, _) = synth(0, 7);
    let r = find_leaks(&snap, 0, &opts());
    assert!(!r.leaks_found, "{:#?}", r.findings);
    assert!(
        r.findings.iter().all(|f| f.severity == Severity::Benign),
        "{:#?}",
        r.findings
    );
    // The synthetic model's optimizer state appears in the first step.
    assert!(r
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::OneTime && f.title.starts_with("optimizer state")));
}

fn real(name: &str) -> Snapshot {
    load(&vramscope_testdata::real(name), &Default::default()).expect("real fixture loads")
}

#[test]
fn real_fixtures_iterations_and_findings() {
    // (file, iteration source, iterations found)
    let expect: &[(&str, Option<IterationSource>, usize)] = &[
        (
            "decomfl_opt_zo_fl_memory.pickle",
            Some(IterationSource::Annotation(
                "Optimizer.zero_grad#SGD.zero_grad".into(),
            )),
            2,
        ),
        (
            "nothanmin_cs336_999segments.pickle",
            Some(IterationSource::OptimizerStep),
            2,
        ),
        // One training step: its 24 layers repeat, but memory does not come
        // back down between them, so they are not taken for iterations.
        (
            "wedsonlin_medium_1024_training_memory_snapshot.pickle",
            None,
            0,
        ),
        ("magma27_cs336_windows.pickle", None, 0),
        // Inference: each of the 24 layers frees its temporaries; the
        // repetition is found, and nothing grows.
        (
            "wedsonlin_medium_512_inference_memory_snapshot.pickle",
            Some(IterationSource::RepeatedPattern),
            24,
        ),
        ("yiyi_flexgen_opt1.3b_legacy_pt20.pickle", None, 0),
        ("yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle", None, 0),
    ];
    for (name, source, n) in expect {
        let snap = real(name);
        for d in snap.devices() {
            let r = find_leaks(&snap, d, &opts());
            serde_json::to_string(&r).expect("serialises");
            if d != 0 {
                continue;
            }
            let source = source.clone().unwrap_or(IterationSource::None);
            assert_eq!(r.iteration_source, source, "{name}");
            assert_eq!(r.iterations.len(), *n, "{name}");
            // None of these runs leaks; with fewer than 3 complete
            // iterations the analysis says it cannot tell.
            assert!(!r.leaks_found, "{name}: {:#?}", r.findings);
            if r.iterations.iter().filter(|i| i.range.complete).count() < 3 {
                assert!(!r.notes.is_empty(), "{name}: a note explains the limit");
            }
            // The single training steps repeat per layer; the note says why
            // those repeats are not iterations.
            if name.contains("training_memory") || name.starts_with("magma27") {
                assert!(
                    r.notes.iter().any(|n| n.contains("layers of one pass")),
                    "{name}: {:?}",
                    r.notes
                );
            }
        }
    }
}

/// A training loop as a JSON snapshot: per iteration, a forward pass
/// (labelled with `user_metadata` "forward"), backward ("backward") whose
/// allocations have no stack (the autograd engine's thread on CUDA), and an
/// optimizer step ("step"). `leak`: forward keeps one tensor per iteration.
/// `late_zero_grad`: the previous gradients are freed after the forward pass
/// instead of before it.
fn loop_snapshot(iters: u64, leak: bool, late_zero_grad: bool) -> Snapshot {
    loop_snapshot_with(iters, leak, late_zero_grad, 64 << 20, false)
}

/// [`loop_snapshot`] with each activation `act` bytes, and with `batch`, a
/// batch loaded by a DataLoader at the top of each iteration, before
/// `zero_grad` frees the gradients (the loop most programs have).
fn loop_snapshot_with(
    iters: u64,
    leak: bool,
    late_zero_grad: bool,
    act: u64,
    batch: bool,
) -> Snapshot {
    let act_bytes = act;
    const GRAD: u64 = 32 << 20;
    let mut ev: Vec<String> = Vec::new();
    let (mut time, mut addr) = (1_000u64, 1u64 << 32);
    let mut push = |ev: &mut Vec<String>,
                    action: &str,
                    a: u64,
                    size: u64,
                    frames: &str,
                    label: &str| {
        time += 10;
        ev.push(format!(
            r#"{{"action":"{action}","addr":{a},"size":{size},"stream":0,"time_us":{time},"frames":{frames},"user_metadata":"{label}"}}"#
        ));
    };
    let fwd = r#"[{"filename":"/src/model.py","line":10,"name":"forward"},{"filename":"/src/train.py","line":20,"name":"main"}]"#;
    let kept = r#"[{"filename":"/src/train.py","line":5,"name":"main"}]"#;
    let opt = r#"[{"filename":"/env/site-packages/torch/optim/adam.py","line":99,"name":"step"},{"filename":"/src/train.py","line":22,"name":"main"}]"#;
    let data = r#"[{"filename":"/env/site-packages/torch/utils/data/dataloader.py","line":733,"name":"__next__"},{"filename":"/src/train.py","line":18,"name":"main"}]"#;
    let zero = r#"[{"filename":"/env/site-packages/torch/optim/optimizer.py","line":956,"name":"zero_grad"},{"filename":"/src/train.py","line":19,"name":"main"}]"#;
    let mut grads: Vec<u64> = Vec::new();
    let mut batches: Vec<u64> = Vec::new();
    for _ in 0..iters {
        if batch {
            addr += 1 << 28;
            push(&mut ev, "alloc", addr, 8 << 20, data, "data");
            batches.push(addr);
        }
        if batch && !late_zero_grad {
            for g in grads.drain(..) {
                push(&mut ev, "free_completed", g, GRAD, zero, "data");
            }
        }
        if !late_zero_grad {
            for g in grads.drain(..) {
                push(&mut ev, "free_completed", g, GRAD, opt, "forward");
            }
        }
        let acts: Vec<u64> = (0..4)
            .map(|_| {
                addr += 1 << 28;
                addr
            })
            .collect();
        for &a in &acts {
            push(&mut ev, "alloc", a, act_bytes, fwd, "forward");
        }
        if leak {
            addr += 1 << 28;
            push(&mut ev, "alloc", addr, 1 << 20, kept, "forward");
        }
        for g in grads.drain(..) {
            push(&mut ev, "free_completed", g, GRAD, opt, "backward");
        }
        for &a in acts.iter().rev() {
            addr += 1 << 28;
            push(&mut ev, "alloc", addr, GRAD, "[]", "backward");
            grads.push(addr);
            push(&mut ev, "free_completed", a, act_bytes, "[]", "backward");
        }
        addr += 1 << 28;
        push(&mut ev, "alloc", addr, 4096, opt, "step");
        push(&mut ev, "free_completed", addr, 4096, opt, "step");
        for b in batches.drain(..) {
            push(&mut ev, "free_completed", b, 8 << 20, data, "step");
        }
    }
    let json = format!(r#"{{"segments":[],"device_traces":[[{}]]}}"#, ev.join(","));
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

#[test]
fn iterations_from_user_metadata_and_a_leak_in_them() {
    let snap = loop_snapshot(8, true, false);
    let r = find_leaks(&snap, 0, &opts());
    assert_eq!(
        r.iteration_source,
        IterationSource::UserMetadata("forward".into())
    );
    assert_eq!(r.iterations.len(), 8);
    let leaks: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Leak)
        .collect();
    assert_eq!(leaks.len(), 1, "{:#?}", r.findings);
    assert_eq!(leaks[0].sites[0].site, "/src/train.py:5 in main");
    assert_eq!(leaks[0].bytes_per_iteration, (1u64 << 20) as f64);
    // Gradients freed before each forward pass: none held.
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != FindingKind::HeldGradients),
        "{:#?}",
        r.findings
    );
}

/// `zero_grad()` at the top of the loop, after the DataLoader has loaded
/// the batch: the gradients are alive while the batch loads, not while the
/// forward pass allocates. With activations smaller than the gradients the
/// iteration's highest point before backward is that moment (ResNet-18 with
/// SGD: 42.65 MiB of gradients, 26 MiB of activations), which used to be
/// taken for the forward pass's peak.
#[test]
fn zero_grad_after_the_batch_and_before_forward_holds_nothing() {
    let snap = loop_snapshot_with(8, false, false, 4 << 20, true);
    let r = find_leaks(&snap, 0, &opts());
    assert!(!r.leaks_found, "{:#?}", r.findings);
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != FindingKind::HeldGradients),
        "{:#?}",
        r.findings
    );
    // The same loop with zero_grad after the forward pass is still caught.
    let late = loop_snapshot_with(8, false, true, 4 << 20, true);
    let r = find_leaks(&late, 0, &opts());
    assert!(
        r.findings
            .iter()
            .any(|f| f.kind == FindingKind::HeldGradients),
        "{:#?}",
        r.findings
    );
}

#[test]
fn stackless_gradients_held_through_the_next_forward_pass() {
    let snap = loop_snapshot(8, false, true);
    let r = find_leaks(&snap, 0, &opts());
    assert!(!r.leaks_found, "{:#?}", r.findings);
    let held: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::HeldGradients)
        .collect();
    assert_eq!(held.len(), 1, "{:#?}", r.findings);
    assert_eq!(held[0].bytes, 4 * (32u64 << 20));
    assert!(held[0].explanation.contains("after the forward pass"));
    // They raise the peak: the forward pass peaks with them on top.
    assert!(
        held[0].explanation.contains("raise the iteration's peak")
            || held[0].explanation.contains("at the iteration's peak"),
        "{}",
        held[0].explanation
    );
}

#[test]
fn a_sites_callee_is_named_from_its_package_or_as_a_compiled_call() {
    // Each iteration keeps one loss made through `F.cross_entropy` and one
    // output of a `torch.compile`d model; the optimizer's step ends it.
    let ce = r#"[{"filename":"/env/lib/python3.11/site-packages/torch/nn/functional.py","line":3547,"name":"cross_entropy"},{"filename":"/src/train.py","line":30,"name":"main"}]"#;
    let compiled = r#"[{"filename":"/env/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py","line":563,"name":"__call__"},{"filename":"/src/train.py","line":28,"name":"main"}]"#;
    let opt = r#"[{"filename":"/env/lib/python3.11/site-packages/torch/optim/adam.py","line":99,"name":"step"},{"filename":"/src/train.py","line":32,"name":"main"}]"#;
    let mut ev = Vec::new();
    let (mut time, mut addr) = (1_000u64, 1u64 << 32);
    for _ in 0..8 {
        for (frames, size) in [(compiled, 1u64 << 20), (ce, 512)] {
            time += 10;
            addr += 1 << 24;
            ev.push(format!(r#"{{"action":"alloc","addr":{addr},"size":{size},"stream":0,"time_us":{time},"frames":{frames},"user_metadata":"forward"}}"#));
        }
        for action in ["alloc", "free_completed"] {
            time += 10;
            ev.push(format!(r#"{{"action":"{action}","addr":1,"size":4096,"stream":0,"time_us":{time},"frames":{opt},"user_metadata":"step"}}"#));
        }
    }
    let json = format!(r#"{{"segments":[],"device_traces":[[{}]]}}"#, ev.join(","));
    let snap = decode_bytes(json.as_bytes(), &Default::default()).expect("decodes");
    let r = find_leaks(&snap, 0, &opts());
    let titles: Vec<&str> = r.findings.iter().map(|f| f.title.as_str()).collect();
    let sites: Vec<&str> = r
        .findings
        .iter()
        .flat_map(|f| f.sites.iter().map(|s| s.site.as_str()))
        .collect();
    assert!(
        sites.contains(&"/src/train.py:30 in main → torch/nn/functional.py:3547 in cross_entropy"),
        "{titles:?} {sites:?}"
    );
    assert!(
        sites.contains(&"/src/train.py:28 in main → torch.compile'd call"),
        "{titles:?} {sites:?}"
    );
}
