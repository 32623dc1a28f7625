//! Where the run peaks while it sets up: the row that makes only what it
//! keeps (`analysis::setup`).
//!
//! A model built whole of which a part is kept (pytorch/examples' fast
//! neural style keeps VGG-16's `.features` and drops its 471.67 MiB
//! classifier), or a checkpoint loaded onto the device beside the model
//! (`torch.load(path, map_location="cuda")`), peaks before the first
//! forward, where no change to the training reaches. The replay drops
//! every block the setup made and freed before that forward: what the
//! program makes when it builds only the part it keeps, or builds it on the
//! CPU and moves that part, or loads the checkpoint to the CPU.

use vramscope_analysis::categories::Labelled;
use vramscope_analysis::liveness::{allocated_series, Liveness};
use vramscope_analysis::setup::{first_forward, setup_peak, SetupKind};
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{Candidate, ChangeClass, Method};

/// The row, where the run peaks before its first forward with blocks the
/// setup made and dropped alive there.
pub(super) fn setup_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
) -> Option<Candidate> {
    let t = snap.trace(device)?;
    let first = first_forward(labelled)?;
    let liveness = Liveness::new(snap, device);
    // The allocated series only where the peak is before the first forward.
    let peak = liveness.peak_index.filter(|&i| i < first)?;
    let allocated = allocated_series(&liveness, t);
    let s = setup_peak(snap, device, labelled, peak, &allocated)?;
    let l = &labelled.lifetimes;
    let dropped: Vec<(usize, ChangeKind)> = (0..l.len())
        .filter(|&b| {
            l.birth[b] != vramscope_analysis::lifetimes::BEFORE_WINDOW
                && (l.death[b] as usize) < first
        })
        .map(|b| (b, ChangeKind::Drop))
        .collect();
    let made: u64 = dropped.iter().map(|&(b, _)| l.size[b]).sum();
    let site = s.sites.first().map_or("", |(site, _)| site.as_str());
    let device_memory = vramscope_analysis::summary::caching_allocator(snap, device);
    let (change, code) = match s.made_by {
        // On a GPU the copy goes to the CPU; on the CPU (no second
        // device), the file is mapped and the model takes its tensors.
        SetupKind::Checkpoint if device_memory => (
            "load the checkpoint to the CPU: its copy of each weight is not made on the device beside the model's"
                .to_owned(),
            format!(
                "# {site}: torch.load makes a copy of every weight on the device beside the model's\n\
                 state = torch.load(path, map_location=\"cpu\", mmap=True)\n\
                 model.load_state_dict(state)  # copied into the model's weights on the device\n\
                 del state"
            ),
        ),
        SetupKind::Checkpoint => (
            "load the checkpoint memory-mapped and let the model take its tensors: no second copy of each weight"
                .to_owned(),
            format!(
                "# {site}: torch.load makes a copy of every weight beside the model's\n\
                 state = torch.load(path, mmap=True)  # read from the file as needed\n\
                 model.load_state_dict(state, assign=True)  # the model takes them: no copy\n\
                 # (build the model under torch.device(\"meta\") and its own weights are never made either)"
            ),
        ),
        SetupKind::Data => (
            "make less while the program sets up: what it makes and drops before training, outside building \
             the model (data prepared whole, a matrix built dense), is above its training's peak"
                .to_owned(),
            format!(
                "# {site} makes {} that is dropped before training: make it in its final form (a sparse matrix \
                 built sparse),\n# in pieces, or where memory is plentiful (the CPU) and move only what is kept",
                bytes(s.transient_bytes)
            ),
        ),
        SetupKind::Build => (
            "make only what the program keeps while it sets up: build the part of the model it uses, or build the \
             whole on the CPU and move only that part"
                .to_owned(),
            format!(
                "# {site} builds {} that is dropped before training: build only the part kept,\n\
                 # or build the whole on the CPU and move that part (on a GPU nothing else reaches it):\n\
                 part = build_model().features  # on the CPU: the rest is dropped there\n\
                 part = part.to(device)",
                bytes(s.transient_bytes)
            ),
        ),
    };
    Some(Candidate {
        class: ChangeClass::SetupTransients,
        change,
        code,
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &dropped, "what the setup made and dropped")),
        how: format!(
            "replayed without the {} blocks ({}) the setup made and freed before the first forward (event {}), {} \
             of them alive at the run's peak: {}; everything from the first forward on as recorded (it peaked at \
             {})",
            dropped.len(),
            bytes(made),
            vramscope_text::units::count(s.first_forward),
            bytes(s.transient_bytes),
            s.sites
                .iter()
                .take(3)
                .map(|(site, b)| format!("{site} {}", bytes(*b)))
                .collect::<Vec<_>>()
                .join(", "),
            bytes(s.after_bytes),
        ),
    })
}
