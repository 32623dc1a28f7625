//! Library buffers that are not tensors: the cuBLAS and cuBLASLt
//! workspaces. `at::cuda::getCurrentCUDABlasHandle()` gives each thread a
//! handle and allocates, once per (handle, stream), a workspace through the
//! caching allocator (`setWorkspaceForHandle` → `getNewWorkspace`); cuBLASLt
//! has one more (`getCUDABlasLtWorkspace`). None is ever freed. The forward
//! runs on the program's thread and backward on autograd's device thread:
//! two cuBLAS workspaces (32 MiB each on Hopper and Blackwell, 8,519,680 B
//! on other GPUs, `CUBLAS_WORKSPACE_CONFIG` when set) and a 1 MiB cuBLASLt
//! one (`CUBLASLT_WORKSPACE_SIZE`). Without a rule they would be called the
//! gradients or activations of whatever matmul first ran on the thread.
//!
//! Two rules, in this order:
//! * C++ frames name them (`_record_memory_history(stacks="all")`):
//!   [`Rule::WorkspaceFrames`];
//! * otherwise: never freed, made in the first forward (or backward) run of
//!   the trace and alive through later runs of it, or from before the trace
//!   with a forward stack (or none: autograd's thread) and alive throughout,
//!   with a workspace's size, one per phase and stream:
//!   [`Rule::WorkspaceSize`]. The cuBLASLt size counts only beside a cuBLAS
//!   workspace found the same way.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{DeviceTrace, Snapshot, StackId};

use super::infer::rounded;
use super::phases::StackPhases;
use super::{Categories, Category, Phase, Phases, Rule, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};

use vramscope_gpus::workspace::{cublas_sizes, cublaslt_size};

/// The workspace sizes of the recording: cuBLAS's (from
/// `CUBLAS_WORKSPACE_CONFIG` or the device's compute capability, where the
/// recorder stored them; else both defaults) and cuBLASLt's.
struct Sizes {
    cublas: Vec<u64>,
    lt: u64,
}

impl Sizes {
    fn of(snap: &Snapshot) -> Sizes {
        let facts = snap
            .source
            .recorder
            .as_ref()
            .and_then(|r| r.device.as_ref());
        let cublas = cublas_sizes(
            facts.and_then(|d| d.capability),
            facts.and_then(|d| d.env("CUBLAS_WORKSPACE_CONFIG")),
        );
        let lt = cublaslt_size(facts.and_then(|d| d.env("CUBLASLT_WORKSPACE_SIZE")));
        Sizes { cublas, lt }
    }

    fn is_cublas(&self, size: u64) -> bool {
        self.cublas.contains(&size)
    }
}

/// C++ functions that allocate a workspace.
const WORKSPACE_FRAMES: &[&str] = &[
    "setWorkspaceForHandle",
    "getNewWorkspace",
    "getCUDABlasLtWorkspace",
    "CublasLtWorkspace",
];

/// Label the workspaces among `l`'s blocks (those not given a label by the
/// file, or given `unknown`).
pub(super) fn label(
    snap: &Snapshot,
    t: &DeviceTrace,
    l: &Lifetimes,
    ph: &Phases,
    given: &[bool],
    c: &mut Categories,
) {
    let open = |c: &Categories, b: usize| !given[b] || c.category[b] == Category::Unknown;
    let mut named: HashMap<StackId, bool> = HashMap::default();
    for b in 0..l.len() {
        if !open(c, b) || l.death[b] != STILL_ALIVE {
            continue;
        }
        let stack = if l.birth[b] == BEFORE_WINDOW {
            l.stack[b]
        } else {
            t.stack[l.birth[b] as usize]
        };
        let is_ws = *named.entry(stack).or_insert_with(|| {
            snap.stacks.get(stack).iter().any(|&f| {
                let name = snap.str(snap.frames.get(f).name);
                WORKSPACE_FRAMES.iter().any(|w| name.contains(w))
            })
        });
        if is_ws {
            set(c, b, Rule::WorkspaceFrames);
        }
    }
    by_size(snap, t, l, ph, c, &open);
}

fn set(c: &mut Categories, b: usize, rule: Rule) {
    c.category[b] = Category::Workspace;
    c.source[b] = Some(Source::Inferred);
    c.rule[b] = rule;
}

/// The size rule (see the module docs).
fn by_size(
    snap: &Snapshot,
    t: &DeviceTrace,
    l: &Lifetimes,
    ph: &Phases,
    c: &mut Categories,
    open: &dyn Fn(&Categories, usize) -> bool,
) {
    let sizes = Sizes::of(snap);
    // First and last run of forward and of backward.
    let mut runs: HashMap<Phase, (u32, u32)> = HashMap::default();
    for (i, &p) in ph.phase.iter().enumerate() {
        if matches!(p, Phase::Forward | Phase::Backward) {
            let e = runs.entry(p).or_insert((ph.run[i], ph.run[i]));
            e.0 = e.0.min(ph.run[i]);
            e.1 = e.1.max(ph.run[i]);
        }
    }
    // The earliest candidate of each kind per (phase, stream).
    let mut first: HashMap<(Phase, u64, bool), usize> = HashMap::default();
    for b in 0..l.len() {
        if !open(c, b)
            || c.category[b] == Category::Workspace
            || l.birth[b] == BEFORE_WINDOW
            || l.death[b] != STILL_ALIVE
        {
            continue;
        }
        let i = l.birth[b] as usize;
        let p = ph.phase[i];
        let Some(&(first_run, last_run)) = runs.get(&p) else {
            continue;
        };
        if ph.run[i] != first_run || last_run == first_run {
            continue;
        }
        let size = rounded(l.size[b]);
        let lt = size == sizes.lt;
        if !lt && !sizes.is_cublas(size) {
            continue;
        }
        first.entry((p, t.stream[i], lt)).or_insert(b);
    }
    // Blocks from before the window, alive throughout it: the dump keeps
    // each one's stack, whose phase stands for the run that made it (no
    // stack at all: autograd's thread, with Python-only stacks).
    // Only blocks the other rules left unknown: a parameter or optimizer
    // state of the same size is told apart by the gradients it mirrors.
    let mut phases = StackPhases::new(snap);
    let mut stackless = 0;
    for b in 0..l.len() {
        if c.category[b] != Category::Unknown
            || l.birth[b] != BEFORE_WINDOW
            || l.death[b] != STILL_ALIVE
        {
            continue;
        }
        let size = rounded(l.size[b]);
        let lt = size == sizes.lt;
        if !lt && !sizes.is_cublas(size) {
            continue;
        }
        let p = if snap.stacks.get(l.stack[b]).is_empty() {
            // No stack: either thread's (a file whose history started
            // after the first step has none for anything before it). A
            // lone 1 MiB block without one is anyone's.
            if lt || stackless == 2 {
                continue;
            }
            stackless += 1;
            if stackless == 1 {
                Phase::Backward
            } else {
                Phase::Other
            }
        } else {
            match phases.of(snap, l.stack[b]) {
                Some(p @ (Phase::Forward | Phase::Backward)) => p,
                _ => continue,
            }
        };
        // Keyed apart from the window's (stream unknown: u64::MAX).
        first.entry((p, u64::MAX, lt)).or_insert(b);
    }
    // Workspaces the frames named count as found.
    let cublas_found = first.keys().any(|k| !k.2)
        || (0..l.len()).any(|b| c.category[b] == Category::Workspace && l.size[b] != sizes.lt);
    for (&(_, _, lt), &b) in &first {
        if !lt || cublas_found {
            set(c, b, Rule::WorkspaceSize);
        }
    }
}
