//! Frames and stacks: a pool of distinct `{name, filename, line}` frames
//! and, for every allocation site of the simulated training script, the
//! stack recorded when it allocates and when it frees.

use crate::cpp_frames as cpp;
use crate::options::StackKind;
use crate::sites::{backward_spec, forward_spec, Owned, Script, Site, SITES};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StackId(pub u32);

pub(crate) struct Frame {
    pub name: String,
    pub filename: String,
    pub line: u32,
}

/// The frame pool and the stacks of every site.
pub(crate) struct Stacks {
    pub frames: Vec<Frame>,
    stacks: Vec<Vec<u32>>,
    alloc: [StackId; SITES],
    free: [StackId; SITES],
}

struct Builder {
    kind: StackKind,
    sp: &'static str,
    user: &'static str,
    py: &'static str,
    script: Script,
    frames: Vec<Frame>,
    index: HashMap<(String, String, u32), u32>,
    stacks: Vec<Vec<u32>>,
}

impl Stacks {
    /// Builds the stacks of a training script whose paths and launcher
    /// (DDP, `python -m`) are picked by `seed`.
    pub(crate) fn new(kind: StackKind, seed: u64) -> Stacks {
        let pick = |n: u64, salt: u64| (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> (salt * 8)) % n;
        let mut b = Builder {
            kind,
            sp: [
                "/home/alice/miniconda3/envs/torch/lib/python3.11/site-packages",
                "/opt/conda/lib/python3.11/site-packages",
                "/usr/local/lib/python3.10/dist-packages",
            ][pick(3, 1) as usize],
            user: [
                "/home/alice/nanogpt",
                "/workspace/llm-train",
                "/home/ubuntu/projects/gpt2",
            ][pick(3, 2) as usize],
            py: "/usr/local/src/conda/python-3.11.9",
            script: Script {
                ddp: pick(4, 3) != 0,
                accelerate: pick(4, 5) != 0,
                runpy: pick(2, 4) == 1,
            },
            frames: Vec::new(),
            index: HashMap::new(),
            stacks: Vec::new(),
        };
        let mut alloc = [StackId(0); SITES];
        let mut free = [StackId(0); SITES];
        for n in 0..SITES {
            let site = Site::from_index(n);
            let (a, f) = b.site(site);
            alloc[n] = b.push(a);
            free[n] = b.push(f);
        }
        Stacks {
            frames: b.frames,
            stacks: b.stacks,
            alloc,
            free,
        }
    }

    pub(crate) fn alloc(&self, site: Site) -> StackId {
        self.alloc[site as usize]
    }

    pub(crate) fn free(&self, site: Site) -> StackId {
        self.free[site as usize]
    }

    /// Frame indices of a stack, innermost first.
    pub(crate) fn frames_of(&self, id: StackId) -> &[u32] {
        &self.stacks[id.0 as usize]
    }
}

impl Builder {
    /// `(alloc stack, free stack)` of a site.
    fn site(&self, site: Site) -> (Vec<Owned>, Vec<Owned>) {
        use Site::*;
        let python = self.script.python(site);
        match self.kind {
            StackKind::Python => (cpp::owned(&python), cpp::owned(&python)),
            StackKind::Cpp if site.is_backward() => {
                let (node, op) = backward_spec(site);
                (
                    cpp::alloc(op, cpp::engine(node, false)),
                    cpp::free(cpp::engine(node, true)),
                )
            }
            StackKind::Cpp => {
                let op = match site {
                    ParamInit | Data => "_to_copy",
                    OptimInit | Leak => "empty_like",
                    OptimStep => "sqrt",
                    _ => forward_spec(site).3,
                };
                let py = cpp::interleave(&python);
                (
                    cpp::alloc(op, cpp::python_entry(op, py.clone())),
                    cpp::free(cpp::python_free(py)),
                )
            }
        }
    }

    fn push(&mut self, frames: Vec<Owned>) -> StackId {
        let ids = frames.into_iter().map(|t| self.intern(t)).collect();
        self.stacks.push(ids);
        StackId(self.stacks.len() as u32 - 1)
    }

    fn intern(&mut self, (name, file, line): Owned) -> u32 {
        let filename = file
            .replace("{sp}", self.sp)
            .replace("{user}", self.user)
            .replace("{py}", self.py);
        let key = (name, filename, line);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(Frame {
            name: key.0.clone(),
            filename: key.1.clone(),
            line,
        });
        self.index.insert(key, i);
        i
    }
}
