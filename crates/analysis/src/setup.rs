//! A peak before the first forward: memory the program made while it set
//! up (built the model, loaded a checkpoint) and dropped before training.
//!
//! pytorch/examples' fast neural style builds torchvision's whole VGG-16
//! and keeps its `.features`: the 471.67 MiB of its classifier are made
//! and dropped before the first forward, and the run peaked there (534.20
//! MiB, its training steps 160.59 MiB). The summary said only where, and
//! `advise` ranked FSDP first for "17.77 MiB less": no change to the
//! training reaches that peak. On a GPU the same comes of a model built on
//! the device (`with torch.device("cuda")`, `set_default_device`) and of
//! `torch.load(path, map_location="cuda")`, whose copy of every weight is
//! alive beside the model's until `load_state_dict` returns.
//!
//! The setup is every event before the first one in a forward (the
//! categories' phases); its transients are the blocks made there and freed
//! before that forward.

use serde::Serialize;
use vramscope_snapshot::Snapshot;

use crate::backward_blocks::marked_spans;
use crate::categories::phases::Phase;
use crate::categories::Labelled;
use crate::lifetimes::BEFORE_WINDOW;
use crate::sites::{frame_label, frame_location, site_frame};
use vramscope_text::units::bytes;

/// What set up the program when the run peaked before its first forward.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SetupPeak {
    /// The first event in a forward: where the setup ends.
    pub first_forward: u64,
    /// Bytes alive at the peak that were made in the setup and freed
    /// before the first forward, and how many blocks.
    pub transient_bytes: u64,
    pub transient_blocks: u64,
    /// What made them: `checkpoint` where most of those bytes were made
    /// inside `torch.load`; `build` where most were made building modules
    /// (a stack through `torch/nn/modules/` or `torch/nn/init.py`: a
    /// model's constructor, its initialisation); `data` otherwise (inputs
    /// prepared whole and dropped: pytorch/examples' GCN builds its
    /// adjacency dense, 2,708², before making it sparse).
    pub made_by: SetupKind,
    /// The program's lines that made them (the innermost frame outside
    /// libraries), with their bytes alive at the peak, largest first.
    pub sites: Vec<(String, u64)>,
    /// The highest allocated from the first forward on, and its event.
    pub after_bytes: u64,
    pub after_event: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupKind {
    Checkpoint,
    Build,
    Data,
}

impl SetupPeak {
    /// The summary's sentence beside the peak.
    pub fn sentence(&self) -> String {
        let sites: Vec<String> = self
            .sites
            .iter()
            .take(2)
            .map(|(s, b)| format!("{s} {}", bytes(*b)))
            .collect();
        format!(
            "while the program sets up, before its first forward (event {}): {} of it ({} block{}) was made there and \
             freed before training ({}{}); from the first forward on the peak is {} (event {})",
            vramscope_text::units::count(self.first_forward),
            bytes(self.transient_bytes),
            self.transient_blocks,
            if self.transient_blocks == 1 { "" } else { "s" },
            match self.made_by {
                SetupKind::Checkpoint => "a checkpoint loaded beside the model: ",
                SetupKind::Build => "modules built and dropped: ",
                SetupKind::Data => "made and dropped: ",
            },
            sites.join(", "),
            bytes(self.after_bytes),
            vramscope_text::units::count(self.after_event),
        )
    }
}

/// `Some` where the run's peak (`peak`, the event after which it holds) is
/// before its first forward and above everything from that forward on,
/// and blocks made in the setup and freed before the forward are alive
/// there; `allocated` is `device`'s allocated series.
pub fn setup_peak(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    peak: usize,
    allocated: &[u64],
) -> Option<SetupPeak> {
    let first = first_forward(labelled).filter(|&first| peak < first)?;
    let (after_event, after_bytes) = allocated
        .iter()
        .enumerate()
        .skip(first)
        .max_by_key(|&(k, &a)| (a, std::cmp::Reverse(k)))
        .map(|(k, &a)| (k, a))?;
    if after_bytes >= allocated.get(peak).copied().unwrap_or(0) {
        return None;
    }
    let l = &labelled.lifetimes;
    let loads = load_spans(snap, device);
    let (mut total, mut blocks, mut from_load, mut from_modules) = (0u64, 0u64, 0u64, 0u64);
    let mut by_site: Vec<(String, u64)> = Vec::new();
    for b in 0..l.len() {
        let (birth, death) = (l.birth[b], l.death[b]);
        if birth == BEFORE_WINDOW || (death as usize) >= first || !l.alive_after(b, peak as u32) {
            continue;
        }
        total += l.size[b];
        blocks += 1;
        // Made inside `torch.load`: by its stack, or (the CPU recorders
        // give its storages none) inside a load the recorder noted.
        let frames = snap.stacks.get(l.stack[b]);
        let load = loads
            .iter()
            .find(|(_, s, e)| *s <= birth as usize && birth as usize <= *e);
        let in_load = load.is_some()
            || frames.iter().any(|&f| {
                let (file, _, name) = frame_location(snap, snap.frames.get(f));
                file.ends_with("torch/serialization.py") && name == "load"
            });
        if in_load {
            from_load += l.size[b];
        } else if frames.iter().any(|&f| {
            let (file, _, _) = frame_location(snap, snap.frames.get(f));
            let file = file.replace('\\', "/");
            file.contains("torch/nn/modules/") || file.ends_with("torch/nn/init.py")
        }) {
            from_modules += l.size[b];
        }
        // The program's own line, as the summary's sites name it; a
        // stackless storage of a load, the line that called `torch.load`.
        let site = match (site_frame(snap, l.stack[b]), load) {
            (Some(f), _) => frame_label(snap, f),
            (None, Some((caller, _, _))) if !caller.is_empty() => format!("{caller} (torch.load)"),
            _ => "<no stack recorded>".to_owned(),
        };
        match by_site.iter_mut().find(|(s, _)| *s == site) {
            Some((_, n)) => *n += l.size[b],
            None => by_site.push((site, l.size[b])),
        }
    }
    if total == 0 {
        return None;
    }
    by_site.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(SetupPeak {
        first_forward: first as u64,
        transient_bytes: total,
        transient_blocks: blocks,
        made_by: if from_load * 2 > total {
            SetupKind::Checkpoint
        } else if from_modules * 2 > total {
            SetupKind::Build
        } else {
            SetupKind::Data
        },
        sites: by_site,
        after_bytes,
        after_event: after_event as u64,
    })
}

/// The first event in a forward (where the setup ends), by the
/// categories' phases; `None` in a trace without one.
pub fn first_forward(labelled: &Labelled) -> Option<usize> {
    labelled
        .categories
        .phases
        .phase
        .iter()
        .position(|&p| p == Phase::Forward)
}

/// Each `torch.load` the recorder noted (its `vramscope.load#LINE`
/// annotations): the line that called it, its first and last event.
fn load_spans(snap: &Snapshot, device: u32) -> Vec<(&str, usize, usize)> {
    marked_spans(snap, device, LOAD_ANNOTATION, true)
        .into_iter()
        .map(|(rest, first, last)| (rest.strip_prefix('#').unwrap_or(""), first, last))
        .collect()
}

/// The recorder's annotation around each `torch.load`.
pub const LOAD_ANNOTATION: &str = "vramscope.load";
