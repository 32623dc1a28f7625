//! What a stack says about the phase of a training step it ran in: the
//! innermost frame that names one (`torch/optim/` an optimizer step,
//! `zero_grad`, the autograd engine backward, a module's call forward,
//! `.to()` and loading the model's setup), cached per frame and per stack.

use vramscope_snapshot::hash::FxHashSet as HashSet;
use vramscope_snapshot::{Snapshot, StackId, StrId};

use super::Phase;
use crate::sites::{frame_location, is_native};

/// Whether a frame is a module's call: `nn.Module.__call__`'s
/// implementation (Python stacks), or the profiler's `nn.Module: Name`.
pub(crate) fn is_module_call(file: &str, name: &str) -> bool {
    (file
        .replace('\\', "/")
        .ends_with("torch/nn/modules/module.py")
        && (name == "_call_impl" || name == "_wrapped_call_impl"))
        || name.starts_with("nn.Module: ")
}

/// What one frame says about the phase (`None`: nothing).
pub(super) fn frame_phase(file: &str, name: &str) -> Option<Phase> {
    let f = file.replace('\\', "/");
    if name == "zero_grad" || name.contains("Optimizer.zero_grad") {
        return Some(Phase::ZeroGrad);
    }
    if f.contains("torch/optim/") || name.contains("Optimizer.step#") {
        return Some(Phase::Optimizer);
    }
    let native = is_native(&f, name);
    let backward = name.contains("AccumulateGrad")
        || (name.contains("Backward") && name.contains("::apply"))
        // Profiler traces name autograd nodes and the engine's scope:
        // `autograd::engine::evaluate_function: MmBackward0`, `MmBackward0`.
        || name.starts_with("autograd::engine::evaluate_function")
        || (native && name.contains("Backward"))
        || name.contains("Engine::evaluate_function")
        || name.contains("Engine::thread_main")
        || name.contains("run_backward")
        || name == "_engine_run_backward"
        || ((f.ends_with("torch/autograd/__init__.py") || f.ends_with("torch/_tensor.py"))
            && name == "backward");
    if backward {
        return Some(Phase::Backward);
    }
    let forward = is_module_call(&f, name)
        || (name == "forward" && !native)
        // torch.compile's compiled graph, as profiler traces name it.
        || (native && name == "CompiledFunction");
    if forward {
        return Some(Phase::Forward);
    }
    let setup = (f.ends_with("torch/nn/modules/module.py")
        && matches!(
            name,
            "_apply" | "to" | "cuda" | "load_state_dict" | "_load_from_state_dict" | "__init__"
        ))
        || f.ends_with("torch/nn/init.py")
        || name == "reset_parameters"
        || f.ends_with("torch/serialization.py")
        || f.ends_with("transformers/modeling_utils.py");
    setup.then_some(Phase::Setup)
}

const UNSEEN: u8 = u8::MAX;
const NONE: u8 = u8::MAX - 1;
/// A frame of PyTorch's data loading (see [`is_data_loading`]).
const DATA: u8 = u8::MAX - 2;

/// Whether a frame is PyTorch's data loading (`DataLoader.__next__`, its
/// fetchers): what runs under it is the dataset's code, transforms
/// included, which is not the model's forward even where a transform is a
/// module (torchvision's `Normalize`, whose call would name forward).
pub(super) fn is_data_loading(file: &str) -> bool {
    file.replace('\\', "/").contains("torch/utils/data/")
}

fn decode(v: u8) -> Option<Phase> {
    match v {
        0 => Some(Phase::Forward),
        1 => Some(Phase::Backward),
        2 => Some(Phase::Optimizer),
        3 => Some(Phase::ZeroGrad),
        4 => Some(Phase::Setup),
        5 => Some(Phase::Other),
        _ => None,
    }
}

/// Which stacks pass through PyTorch's data loading, cached per stack.
#[derive(Default)]
pub(super) struct DataStacks(vramscope_snapshot::hash::FxHashMap<StackId, bool>);

impl DataStacks {
    pub(super) fn of(&mut self, snap: &Snapshot, s: StackId) -> bool {
        if s.is_none() {
            return false;
        }
        *self.0.entry(s).or_insert_with(|| {
            snap.stacks.get(s).iter().any(|&f| {
                let (file, _, _) = frame_location(snap, snap.frames.get(f));
                is_data_loading(&file)
            })
        })
    }
}

/// What stacks say about the phase: the innermost frame that names one,
/// cached per frame and per stack.
///
/// In a stack through code `torch.compile` generated, the frames inside the
/// generated one are the source lines the reader put there
/// (`vramscope_snapshot`'s `generated`): a compiled backward's kernels are
/// traced from the forward's lines, so those frames name a forward. The
/// phase is what the frames outside the generated one say (the autograd
/// engine, or the compiled forward's wrapper).
pub(crate) struct StackPhases {
    frames: Vec<u8>,
    stacks: Vec<u8>,
    generated: HashSet<StrId>,
}

impl StackPhases {
    pub(crate) fn new(snap: &Snapshot) -> StackPhases {
        let generated = snap
            .source
            .recorder
            .as_ref()
            .map(|r| {
                r.generated
                    .iter()
                    .filter_map(|g| snap.strings.lookup(&g.file))
                    .collect()
            })
            .unwrap_or_default();
        StackPhases {
            frames: vec![UNSEEN; snap.frames.len()],
            stacks: vec![UNSEEN; snap.stacks.len()],
            generated,
        }
    }

    pub(crate) fn of(&mut self, snap: &Snapshot, s: StackId) -> Option<Phase> {
        if s.is_none() {
            return None;
        }
        let cached = self.stacks[s.0 as usize];
        if cached != UNSEEN {
            return decode(cached);
        }
        let frames = snap.stacks.get(s);
        let outside = frames
            .iter()
            .rposition(|&f| self.generated.contains(&snap.frames.get(f).filename))
            .map_or(0, |g| g + 1);
        let mut found = None;
        for &f in &frames[outside..] {
            let slot = &mut self.frames[f.0 as usize];
            if *slot == UNSEEN {
                let (file, _, name) = frame_location(snap, snap.frames.get(f));
                *slot = if is_data_loading(&file) {
                    DATA
                } else {
                    frame_phase(&file, &name).map_or(NONE, |p| p as u8)
                };
            }
            // Data loading, wherever it is on the stack, is no phase of
            // the step: the innermost frame does not decide.
            if *slot == DATA {
                found = Some(Phase::Other);
                break;
            }
            if found.is_none() {
                found = decode(*slot);
            }
        }
        self.stacks[s.0 as usize] = found.map_or(NONE, |p| p as u8);
        found
    }
}
