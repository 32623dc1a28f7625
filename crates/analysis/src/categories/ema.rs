//! Weights kept by an exponential moving average (EMA) of the model: a
//! second copy of every parameter (diffusion models, ViTs and GANs train
//! with one), updated after each optimizer step and used for evaluation.
//! The copy is not the model's: no optimizer steps it and it makes no
//! gradient, so the other rules call it `unknown` (from before the trace),
//! `optimizer_state` (made between two optimizer steps and kept, as
//! `AveragedModel` is when built inside the loop), or `parameter` (the
//! recorder tags it when the EMA model runs a forward, to evaluate).
//!
//! The libraries' EMA classes make the copy in their own code, which the
//! allocation's stack passes through ([`Rule::EmaFrames`]):
//!
//! | library | file | functions that make the copy |
//! |---|---|---|
//! | diffusers | `diffusers/training_utils.py` (`EMAModel`) | `__init__` (`shadow_params`), `to` (the copy moved, as `--offload_ema` does each step), `load_state_dict` |
//! | timm | `timm/utils/model_ema.py` (`ModelEma`, `ModelEmaV2`, `ModelEmaV3`) | `__init__` (`deepcopy(model)`), `_load_checkpoint` |
//! | PyTorch | `torch/optim/swa_utils.py` (`AveragedModel`, Lightning's `WeightAveraging`) | `__init__` |
//! | torch_ema | `torch_ema/ema.py` (`ExponentialMovingAverage`) | `__init__`, `to`, `load_state_dict` |
//! | ema_pytorch | `ema_pytorch/ema_pytorch.py`, `post_hoc_ema.py` | `__init__` |
//!
//! What the update allocates and frees (`EMAModel.step` with `foreach=True`
//! holds a difference of every parameter at once) is a temporary made in
//! the EMA's update ([`Rule::EmaUpdate`]; otherwise `unknown`: it runs
//! outside forward, backward and the optimizer step). An EMA written by
//! hand (`copy.deepcopy(model)`, clones in a list) has no such frame: its
//! copy stays what the other rules say. A recorder tag of gradient or
//! optimizer state is never overridden.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Snapshot, StackId};

use super::{Categories, Category, Rule, Source};
use crate::lifetimes::{Lifetimes, STILL_ALIVE};

/// One library's EMA code: its file (a path suffix), the functions in it
/// that make the copy of the weights and those that update it.
struct EmaCode {
    library: &'static str,
    file: &'static str,
    copy: &'static [&'static str],
    update: &'static [&'static str],
}

const EMA_CODE: &[EmaCode] = &[
    EmaCode {
        library: "diffusers",
        file: "diffusers/training_utils.py",
        copy: &["__init__", "to", "pin_memory", "load_state_dict"],
        update: &["step"],
    },
    EmaCode {
        library: "timm",
        file: "timm/utils/model_ema.py",
        copy: &["__init__", "_load_checkpoint"],
        update: &[
            "update",
            "_update",
            "apply_update_",
            "apply_update_no_buffers_",
            "_lerp_",
            "_foreach_lerp_",
            "_update_chunk",
        ],
    },
    EmaCode {
        library: "torch",
        file: "torch/optim/swa_utils.py",
        copy: &["__init__"],
        update: &["update_parameters", "ema_update", "swa_update"],
    },
    EmaCode {
        library: "torch_ema",
        file: "torch_ema/ema.py",
        copy: &["__init__", "to", "load_state_dict"],
        update: &["update"],
    },
    EmaCode {
        library: "ema_pytorch",
        file: "ema_pytorch/ema_pytorch.py",
        copy: &["__init__"],
        update: &["update", "update_moving_average"],
    },
    EmaCode {
        library: "ema_pytorch",
        file: "ema_pytorch/post_hoc_ema.py",
        copy: &["__init__"],
        update: &["update"],
    },
];

/// What an EMA's code was doing when a block was made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Made {
    Copy,
    Update,
}

/// Whether `filename` is `suffix` or ends with `/suffix` (`\` on Windows).
fn is_file(filename: &str, suffix: &str) -> bool {
    let Some(head) = filename.strip_suffix(suffix) else {
        return false;
    };
    let head = head.as_bytes();
    head.is_empty() || matches!(head[head.len() - 1], b'/' | b'\\')
}

/// The innermost of `stack`'s frames that is an EMA's code making its
/// copy or updating it, with that code.
fn made_by(snap: &Snapshot, stack: StackId) -> Option<(&'static EmaCode, Made)> {
    snap.stacks.get(stack).iter().find_map(|&f| {
        let frame = snap.frames.get(f);
        let (file, name) = (snap.str(frame.filename), snap.str(frame.name));
        EMA_CODE
            .iter()
            .filter(|c| is_file(file, c.file))
            .find_map(|c| {
                if c.copy.contains(&name) {
                    Some((c, Made::Copy))
                } else {
                    c.update.contains(&name).then_some((c, Made::Update))
                }
            })
    })
}

/// The library whose EMA class made a copy of the weights at `stack`
/// (`diffusers`, `timm`, `torch` for `AveragedModel`, `torch_ema`,
/// `ema_pytorch`): what its code to move the copy off the device is.
pub fn ema_library(snap: &Snapshot, stack: StackId) -> Option<&'static str> {
    match made_by(snap, stack)? {
        (code, Made::Copy) => Some(code.library),
        (_, Made::Update) => None,
    }
}

/// Label the EMA's weights, and its update's temporaries, among `l`'s
/// blocks: those the file gave no label, or gave `parameter` or `unknown`.
pub(super) fn label(snap: &Snapshot, l: &Lifetimes, given: &[bool], c: &mut Categories) {
    let mut by_stack: HashMap<StackId, Option<Made>> = HashMap::default();
    for (b, &is_given) in given.iter().enumerate() {
        if is_given && !matches!(c.category[b], Category::Parameter | Category::Unknown) {
            continue;
        }
        // (The allocation's stack; a block from before the window, the
        // one the dump kept.)
        let stack = l.stack[b];
        if stack.is_none() {
            continue;
        }
        let made = *by_stack
            .entry(stack)
            .or_insert_with(|| made_by(snap, stack).map(|(_, m)| m));
        let (category, rule) = match made {
            Some(Made::Copy) => (Category::Ema, Rule::EmaFrames),
            // Freed: the update's working memory. Kept: not known to be
            // one (the update keeps nothing it makes in the libraries here).
            Some(Made::Update) if l.death[b] != STILL_ALIVE => {
                (Category::Temporary, Rule::EmaUpdate)
            }
            Some(Made::Update) | None => continue,
        };
        c.category[b] = category;
        c.source[b] = Some(Source::Inferred);
        c.rule[b] = rule;
    }
}

#[cfg(test)]
mod tests {
    use super::is_file;

    #[test]
    fn a_file_is_matched_by_its_whole_path_suffix() {
        let s = "torch/optim/swa_utils.py";
        assert!(is_file(
            "/venv/lib/python3.11/site-packages/torch/optim/swa_utils.py",
            s
        ));
        assert!(is_file("torch/optim/swa_utils.py", s));
        assert!(is_file(
            r"C:\env\Lib\site-packages\torch/optim/swa_utils.py",
            s
        ));
        assert!(!is_file("/src/mytorch/optim/swa_utils.py", s));
        assert!(!is_file("/src/torch/optim/swa_utils.pyc", s));
    }
}
