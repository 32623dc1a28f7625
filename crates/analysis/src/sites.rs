//! Allocation sites: the frame a user recognises as "where this came from".
//!
//! A stack starts deep inside PyTorch (C++ allocator frames, `torch/nn/...`);
//! the site is the first frame in the user's own code. Library frames, C++
//! frames and interpreter noise are skipped, using the same filters as
//! PyTorch's viewer plus site-packages and the standard library.

use vramscope_snapshot::hash::FxHashMap as HashMap;

use serde::Serialize;
use vramscope_snapshot::{Frame, FrameId, Snapshot, StackId};

use crate::backward_blocks::BackwardBlocks;
use crate::liveness::LiveBlock;
use crate::within::{parts, ModuleIndex, PartBlock, SitePart};

/// Frames PyTorch's viewer hides (names and files).
const NOISE_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    // PyTorch's own stack capture, present in every C++ stack.
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
const NOISE_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "ceval.c",
    // Runners between the interpreter and the program: `python -m`,
    // `vramscope run`.
    "<frozen runpy>",
    "/runpy.py",
    "vramscope/run.py",
    "vramscope/__main__.py",
];

/// A frame's file, line and function as text. Profiler-built snapshots put
/// the whole location into the name (`"torch/optim/adam.py(140): _init_group"`,
/// filename `"none"`); those are split back apart.
pub fn frame_location(snap: &Snapshot, f: Frame) -> (String, u32, String) {
    let file = snap.str(f.filename);
    let name = snap.str(f.name);
    if file == "none" || file.is_empty() {
        if let Some((loc, func)) = name.split_once("): ") {
            if let Some((path, line)) = loc.rsplit_once('(') {
                if let Ok(line) = line.parse::<u32>() {
                    return (path.to_owned(), line, func.to_owned());
                }
            }
        }
    }
    (file.to_owned(), f.line, name.to_owned())
}

/// Whether a frame is C++ or interpreter code rather than Python. Python
/// frames name a `.py` file or a pseudo-file such as `<frozen runpy>`,
/// `<string>` or `<ipython-input-3>`; anything else (`??`, `.cpp`, `.so`,
/// `thread48.o`) is native.
/// The frames of `frames` that are Python's (the native ones left out).
pub fn python_frames(snap: &Snapshot, frames: &[FrameId]) -> Vec<FrameId> {
    frames
        .iter()
        .copied()
        .filter(|&f| {
            let (file, _, name) = frame_location(snap, snap.frames.get(f));
            !is_native(&file, &name)
        })
        .collect()
}

pub fn is_native(file: &str, _name: &str) -> bool {
    !(file.ends_with(".py") || file.ends_with(".pyx") || file.starts_with('<'))
}

/// For stacks with no Python frame (the autograd engine's thread runs
/// backward in C++), the autograd node is the most telling frame:
/// `torch::autograd::generated::MmBackward0::apply(...)` in a C++ stack,
/// `MmBackward0` in a profiler trace's operator stack. A compiled graph's
/// backward (`CompiledFunctionBackward`) runs a whole graph, so the operator
/// inside it says more.
fn is_backward_node(name: &str) -> bool {
    if name.starts_with("CompiledFunction") {
        return false;
    }
    (name.contains("Backward") && name.contains("::apply"))
        || (!name.contains("::") && !name.contains(' ') && name.contains("Backward"))
}

/// Failing that, the ATen operator that allocated: `at::_ops::div_Tensor::call`
/// in a C++ stack, `aten::div` in a profiler trace.
fn aten_op(name: &str) -> Option<&str> {
    name.strip_prefix("at::_ops::")
        .map(|r| r.split("::").next().unwrap_or(r))
        .or_else(|| name.strip_prefix("aten::"))
}

/// Operators that only make the memory (`empty`, `zeros_like`, ...): the
/// operator around them (`clone`, `mm`, `to`) says what it is for.
fn is_allocation_op(op: &str) -> bool {
    let base = op.split('_').next().unwrap_or(op);
    matches!(base, "empty" | "zeros" | "ones" | "full" | "resize")
        || op.starts_with("new_empty")
        || op.starts_with("new_zeros")
}

/// Whether a frame is noise nobody wants to see.
pub fn is_noise(file: &str, name: &str) -> bool {
    NOISE_NAMES.iter().any(|n| name.contains(n)) || NOISE_FILES.iter().any(|n| file.contains(n))
}

/// Whether a Python file belongs to a library rather than the user's code.
/// Code that `torch.compile` generates (Inductor's modules, in its cache
/// directory) is not the user's either: it would own every allocation of a
/// compiled model under a name that means nothing once the run is over.
pub fn is_library(file: &str) -> bool {
    let f = file.replace('\\', "/");
    is_generated(&f)
        || f.contains("site-packages/")
        || f.contains("dist-packages/")
        || f.starts_with("<frozen")
        || f.starts_with("torch/")
        || f.contains("/torch/")
        || f.contains("/lib/python3")
        || f.contains("/Lib/")
        || f.starts_with('<')
}

/// Whether a file is a module Inductor generated: under its cache
/// directory (`/tmp/torchinductor_<user>/` by default), or named as it
/// names them (`<two characters>/c<51 characters>.py`) where
/// `TORCHINDUCTOR_CACHE_DIR` moved it.
pub fn is_generated(file: &str) -> bool {
    if file.contains("/torchinductor_") {
        return true;
    }
    let mut parts = file.rsplit('/');
    let (Some(name), Some(dir)) = (parts.next(), parts.next()) else {
        return false;
    };
    let stem = name.strip_suffix(".py").unwrap_or("");
    dir.len() == 2
        && stem.len() == 52
        && stem.starts_with('c')
        && stem
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && stem.get(1..3) == Some(dir)
}

/// Training loops of frameworks that call the model's code from the
/// library (`trainer.train()`, `trainer.fit(...)`): the user's frame above
/// them is only the line that launched the whole run.
const LAUNCHERS: &[&str] = &[
    "/transformers/trainer",
    "/trl/trainer/",
    "/lightning/pytorch/",
    "/pytorch_lightning/",
    "/ignite/engine/",
    "/composer/trainer/",
];

/// Whether a frame is inside a framework's training loop.
pub fn is_launcher(file: &str) -> bool {
    let f = file.replace('\\', "/");
    LAUNCHERS.iter().any(|l| f.contains(l))
}

/// Whether a library file is a third-party package other than PyTorch
/// itself: model code (`transformers/models/gpt2/modeling_gpt2.py`,
/// `torchvision/models/resnet.py`) or a framework's own line.
pub fn is_third_party(file: &str) -> bool {
    let f = file.replace('\\', "/");
    (f.contains("site-packages/") || f.contains("dist-packages/"))
        && !f.contains("/torch/")
        && !f.starts_with("torch/")
}

/// The site of a stack: first user frame, else first Python frame, else
/// for C++-only stacks the autograd node (backward) or the ATen operator,
/// else the first non-noise frame. `None` if the stack is empty.
///
/// When a framework's training loop lies between the allocation and the
/// first user frame, that user frame is the launcher line (`trainer.train()`)
/// and would own nearly everything; the site is then the first frame
/// outside PyTorch: the model's code (`modeling_gpt2.py:… in forward`) or
/// the framework's line that ran backward or the optimizer.
pub fn site_frame(snap: &Snapshot, stack: StackId) -> Option<FrameId> {
    let frames = snap.stacks.get(stack);
    let mut first_third_party = None;
    let mut launched = false;
    let mut first_python = None;
    let mut first_backward = None;
    let mut first_op = None;
    let mut first_alloc_op = None;
    let mut first_any = None;
    for &fid in frames {
        let (file, _, name) = frame_location(snap, snap.frames.get(fid));
        if is_noise(&file, &name) {
            continue;
        }
        first_any.get_or_insert(fid);
        if is_native(&file, &name) {
            if is_backward_node(&name) {
                first_backward.get_or_insert(fid);
            } else if let Some(op) = aten_op(&name) {
                if is_allocation_op(op) {
                    first_alloc_op.get_or_insert(fid);
                } else {
                    first_op.get_or_insert(fid);
                }
            }
            continue;
        }
        first_python.get_or_insert(fid);
        if !is_library(&file) {
            return Some(match first_third_party {
                Some(inner) if launched => inner,
                _ => fid,
            });
        }
        if is_third_party(&file) {
            first_third_party.get_or_insert(fid);
        }
        launched |= is_launcher(&file);
    }
    first_python
        .or(first_backward)
        .or(first_op)
        .or(first_alloc_op)
        .or(first_any)
}

/// Bytes held by one allocation site.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Site {
    /// `file:line in function`, or `<no stack recorded>`.
    pub site: String,
    pub file: String,
    pub line: u32,
    pub function: String,
    pub bytes: u64,
    pub count: u64,
    /// Stack of the largest block at this site, innermost first, noise removed.
    pub stack: Vec<String>,
    /// What within the site made the memory: the model's modules and lines
    /// beneath the user's line, largest first (empty when the stacks name
    /// none). See [`crate::within`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub within: Vec<SitePart>,
}

/// Parts listed beneath each site.
pub const PARTS_PER_SITE: usize = 5;

/// A frame as one line: `file:line in function`; C++ frames as their
/// qualified name without the argument list (`at::_ops::mm::call (C++)`),
/// since `??:0` and long template arguments tell a reader nothing.
pub fn frame_label(snap: &Snapshot, fid: FrameId) -> String {
    let (file, line, name) = frame_location(snap, snap.frames.get(fid));
    if is_native(&file, &name) {
        return format!("{} (C++)", native_name(&name));
    }
    format!("{file}:{line} in {name}")
}

/// `ns::(anonymous namespace)::f(int, long)` → `ns::(anonymous namespace)::f`.
pub fn native_name(name: &str) -> String {
    const ANON: &str = "(anonymous namespace)";
    let masked = name.replace(ANON, "\u{1}");
    let cut = masked.find('(').unwrap_or(masked.len());
    masked[..cut].replace('\u{1}', ANON)
}

/// The readable frames of a stack (noise removed), innermost first.
pub fn stack_lines(snap: &Snapshot, stack: StackId) -> Vec<String> {
    snap.stacks
        .get(stack)
        .iter()
        .filter(|&&fid| {
            let (file, _, name) = frame_location(snap, snap.frames.get(fid));
            !is_noise(&file, &name)
        })
        .map(|&fid| frame_label(snap, fid))
        .collect()
}

/// Group blocks of `device` by site; the `top` largest sites by bytes,
/// largest first.
pub fn group_by_site(snap: &Snapshot, device: u32, blocks: &[LiveBlock], top: usize) -> Vec<Site> {
    // Keyed by site frame; `None` gathers blocks without a stack.
    let mut site_of_stack: HashMap<StackId, Option<FrameId>> = HashMap::default();
    let mut groups: HashMap<Option<FrameId>, (u64, u64, LiveBlock)> = HashMap::default();
    for b in blocks {
        let key = *site_of_stack
            .entry(b.stack)
            .or_insert_with(|| site_frame(snap, b.stack));
        let e = groups.entry(key).or_insert((0, 0, *b));
        e.0 += b.size;
        e.1 += 1;
        if b.size > e.2.size {
            e.2 = *b;
        }
    }
    let mut v: Vec<_> = groups.into_iter().collect();
    v.sort_unstable_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    v.truncate(top);
    let modules = ModuleIndex::new(snap);
    let backward = BackwardBlocks::new(snap, device);
    // The blocks of each site shown, gathered in one pass.
    let mut of_site: HashMap<Option<FrameId>, Vec<PartBlock>> =
        v.iter().map(|(k, _)| (*k, Vec::new())).collect();
    for b in blocks {
        if let Some(mine) = site_of_stack.get(&b.stack).and_then(|k| of_site.get_mut(k)) {
            mine.push((b.stack, b.size, b.alloc_index));
        }
    }
    let mut within = |key: Option<FrameId>| {
        let mine = of_site.remove(&key).unwrap_or_default();
        parts(
            snap,
            &modules,
            &backward,
            key,
            mine.into_iter(),
            PARTS_PER_SITE,
        )
    };
    v.into_iter()
        .map(|(key, (bytes, count, example))| match key {
            Some(fid) => {
                let (file, line, function) = frame_location(snap, snap.frames.get(fid));
                Site {
                    site: frame_label(snap, fid),
                    file,
                    line,
                    function,
                    bytes,
                    count,
                    stack: stack_lines(snap, example.stack),
                    within: within(key),
                }
            }
            None => Site {
                site: "<no stack recorded>".into(),
                file: String::new(),
                line: 0,
                function: String::new(),
                bytes,
                count,
                stack: Vec::new(),
                within: Vec::new(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_paths() {
        assert!(is_library(
            "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py"
        ));
        assert!(is_library(
            "C:\\Users\\me\\venv\\Lib\\site-packages\\torch\\nn\\functional.py"
        ));
        assert!(is_library("<frozen runpy>"));
        // What torch.compile generated is no one's code.
        assert!(is_library(
            "/tmp/torchinductor_root/tj/ctjztwcgrsexhdwvyfbmoo4n6t7gmi52hcuifmil4ffwggfhp4md.py"
        ));
        assert!(is_library(
            "/scratch/cache/yk/cykt33ffwggfhp4mdctjztwcgrsexhdwvyfbmoo4n6t7gmi52hcu.py"
        ));
        assert!(!is_library("/home/me/project/ab/cool_model.py"));
        assert!(!is_library("/home/me/project/train.py"));
        assert!(!is_library("D:\\work\\cs336\\model.py"));
    }

    #[test]
    fn native_names_lose_their_arguments() {
        assert_eq!(
            native_name("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
            "at::_ops::mm::call"
        );
        assert_eq!(
            native_name("torch::cuda::(anonymous namespace)::gather_with_cpp()"),
            "torch::cuda::(anonymous namespace)::gather_with_cpp"
        );
    }

    #[test]
    fn native_frames() {
        assert!(is_native("??", "torch::unwind::unwind()"));
        assert!(is_native(
            "/pytorch/c10/cuda/CUDACachingAllocator.cpp",
            "malloc"
        ));
        assert!(is_native("thread48.o", "execute_native_thread_routine"));
        assert!(!is_native("<frozen runpy>", "_run_module_as_main"));
        assert!(!is_native("/home/me/train.py", "forward"));
    }
}
