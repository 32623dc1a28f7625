//! Precision: the weights in bf16, and mixed precision as a bound.
//!
//! A snapshot records sizes, not dtypes. `vramscope.record` adds what the
//! advice needs to know: the parameters' bytes by dtype (each optimizer's
//! description) and the autocast state of the model's outermost forward
//! calls. With fp32 parameters and no autocast, every floating tensor of the
//! step is fp32, so `model.to(torch.bfloat16)` halves the parameters, their
//! gradients, the optimizer state (it takes the parameters' dtype), the
//! activations, autograd's detail and the temporaries. The inputs are kept
//! as recorded: token ids stay integers, and a float batch is cast by the
//! program from what the data loader gives. Checked on the CPU: the
//! Transformer and the MLP within 0.1%, the CNN 6.7% under: its bf16
//! backward holds more than half of what the fp32 one held at the same
//! point (4.49 MiB of autograd detail beside 11 MiB of activations), so
//! the real peak moves to where the halved trace is not highest.
//!
//! Mixed precision (autocast) is not predicted: what it saves depends on
//! which ops run in 16-bit and where the peak is (measured on the CPU: -39%,
//! -15% and 0% for three programs), which no share of any category gives.
//! What it can never shrink is known (fp32 weights, gradients, optimizer
//! state), so it is offered as a bound: the least the peak can be
//! ([`Method::Bound`]).

use vramscope_analysis::categories::{Category, Labelled};
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use vramscope_simulate::settings::Settings;

/// What the recorder says of the step's dtypes.
enum Precision {
    /// Nothing recorded (PyTorch's own files, older recorders).
    Unknown,
    /// fp32 parameters, forward outside autocast.
    Fp32,
    /// Parameters already 16-bit (their dtypes).
    Weights16(String),
    /// Forward under autocast (its dtype).
    Autocast(String),
}

fn precision(snap: &Snapshot) -> Precision {
    let Some(r) = snap.source.recorder.as_ref() else {
        return Precision::Unknown;
    };
    let dtypes: Vec<&(String, u64)> = r
        .optimizers
        .iter()
        .flat_map(|o| o.parameter_dtypes.iter())
        .filter(|d| d.1 > 0)
        .collect();
    if dtypes.is_empty() || r.autocast.is_empty() {
        return Precision::Unknown;
    }
    let narrow: Vec<&str> = dtypes
        .iter()
        .filter(|d| d.0 != "float32" && d.0 != "float64")
        .map(|d| d.0.as_str())
        .collect();
    if !narrow.is_empty() {
        return Precision::Weights16(narrow.join(", "));
    }
    match r.autocast.iter().find(|a| a.as_str() != "off") {
        Some(a) => Precision::Autocast(a.clone()),
        None => Precision::Fp32,
    }
}

/// The bytes of one element of the parameters the recorder saw, where
/// they are all of one width (`None`: not recorded, or mixed).
pub(super) fn parameter_bytes_per_element(snap: &Snapshot) -> Option<u64> {
    let r = snap.source.recorder.as_ref()?;
    let width = |d: &str| match d {
        "float64" | "int64" | "complex64" => Some(8),
        "float32" | "int32" => Some(4),
        "float16" | "bfloat16" | "int16" => Some(2),
        "int8" | "uint8" | "bool" | "float8_e4m3fn" | "float8_e5m2" => Some(1),
        _ => None,
    };
    let mut widths = r
        .optimizers
        .iter()
        .flat_map(|o| o.parameter_dtypes.iter())
        .filter(|d| d.1 > 0)
        .map(|d| width(&d.0));
    let first = widths.next()??;
    widths.all(|w| w == Some(first)).then_some(first)
}

/// The weights in bf16 and the bound of mixed precision where the recording
/// shows an fp32 step; otherwise, why not.
pub(super) fn precision_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Vec<Candidate> {
    const MIXED: &str = "bf16 / fp16 mixed precision";
    const ESTIMATE: &str = "vramscope.estimate(model, inputs, optimizer, autocast=torch.bfloat16) answers it from the \
                            model: it traces a training step under CUDA's autocast lists and replays it through the \
                            allocator model";
    const WEIGHTS: &str = "bf16 weights (model.to(torch.bfloat16))";
    let mut refuse = |change: &str, why: String| {
        refuse(not_offered, change, why);
    };
    let p = precision(snap);
    match &p {
        Precision::Unknown => {
            let why = "a snapshot records sizes, not dtypes: whether the step is already 16-bit cannot be told \
                       (vramscope.record writes the parameters' dtypes and the forward's autocast state)";
            refuse(WEIGHTS, why.into());
            refuse(MIXED, format!("{why}; {ESTIMATE}"));
            return Vec::new();
        }
        Precision::Weights16(d) => {
            refuse(WEIGHTS, format!("the parameters are already {d}"));
            refuse(MIXED, format!("the parameters are already {d}"));
            return Vec::new();
        }
        Precision::Autocast(d) => {
            let why = format!("the forward already ran under torch.autocast ({d})");
            refuse(
                WEIGHTS,
                format!("{why}: its activations are partly 16-bit already, by op"),
            );
            refuse(MIXED, why);
            return Vec::new();
        }
        Precision::Fp32 => {}
    }
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let halved: Vec<usize> = (0..l.len())
        .filter(|&b| {
            matches!(
                cats.category.get(b),
                Some(
                    Category::Parameter
                        | Category::Gradient
                        | Category::OptimizerState
                        | Category::Activation
                        | Category::AutogradDetail
                        | Category::Temporary
                )
            )
        })
        .collect();
    if halved.is_empty() {
        return Vec::new();
    }
    let total: u64 = halved.iter().map(|&b| l.size[b]).sum();
    let v: Vec<(usize, ChangeKind)> = halved
        .iter()
        .map(|&b| (b, ChangeKind::Scale(0.5)))
        .collect();
    // Where the program upcasts, or the recording is of the CPU, halving
    // is the least the change gives.
    let (method, lead, upcast) = match upcasts(snap).or_else(|| on_the_cpu(snap)) {
        Some(why) => (Method::Bound, "the least the peak can be: ", why),
        None => (Method::Replayed, "", String::new()),
    };
    let mut out = vec![Candidate {
        class: ChangeClass::Bf16Weights,
        change: "bf16 weights: the model, its gradients and optimizer state in bfloat16 (no fp32 master copy)".into(),
        code: "model = model.to(torch.bfloat16)\n\
               x = x.to(torch.bfloat16)  # floating inputs; token ids stay integers\n\
               # updates smaller than bf16's resolution are lost: mixed precision keeps fp32 weights"
            .into(),
        settings: recorded.clone(),
        method,
        edits: Some(for_blocks(snap, device, l, &v, "parameters, gradients, optimizer state, activations")),
        how: format!(
            "{}replayed with the {} parameter, gradient, optimizer-state, activation, autograd-detail and \
             temporary blocks ({}) at half their size: the recorder saw fp32 parameters and a forward outside \
             autocast; inputs as recorded{}",
            lead,
            halved.len(),
            bytes(total),
            upcast
        ),
    }];
    out.extend(mixed_precision(snap, device, labelled, recorded, ESTIMATE));
    out
}

/// Upcasts under this size (a loss scalar's `.float()`) change nothing
/// that shows.
const UPCAST_MIN_BYTES: u64 = 1 << 20;

/// Why the bf16 row is a bound, where the program asks for fp32 of
/// tensors of a MiB or more (`logits.float()` before the loss, as Hugging
/// Face's losses do): a no-op in the fp32 run recorded, an fp32 copy in
/// bf16, and what is computed from it stays fp32. None of that is in the
/// recording; on the zoo's Llama the bf16 run peaked 18% above the halved
/// trace, on GPT-2 22% (docs/advise.md).
fn upcasts(snap: &Snapshot) -> Option<String> {
    let r = snap.source.recorder.as_ref()?;
    let mut big: Vec<&vramscope_snapshot::Upcast> = r
        .upcasts
        .iter()
        .filter(|u| u.bytes >= UPCAST_MIN_BYTES)
        .collect();
    if big.is_empty() {
        return None;
    }
    big.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.line.cmp(&b.line)));
    let sites: Vec<String> = big
        .iter()
        .take(3)
        .map(|u| {
            let file = u.file.rsplit('/').next().unwrap_or(&u.file);
            format!(
                "{file}:{} in {} ({} calls, up to {})",
                u.line,
                u.name,
                u.count,
                bytes(u.bytes)
            )
        })
        .collect();
    Some(format!(
        ". The program asks for fp32 of tensors that already are fp32 ({}): nothing in this run, but in bf16 each \
         is an fp32 copy, and what is computed from it stays fp32 (a loss on upcast logits: its log-softmax and \
         their gradients), which the recording cannot show: the real peak is higher by those (18% on the zoo's \
         Llama, 22% on GPT-2, whose losses upcast the logits)",
        sites.join("; ")
    ))
}

/// Why the bf16 row is a bound on a CPU recording: the CPU's 16-bit
/// matrix products and convolutions (oneDNN's) book scratch from c10's
/// allocator that their fp32 kernels do not, and keep parts in fp32, none
/// of which an fp32 recording shows. Made for real, the bf16 step peaked
/// at most 0.1% below the halved trace and up to 7% above on the project's
/// small models, 18% above on Swin and 38% on timm's ConvNeXt
/// (docs/advise.md); on an AVX2-only CPU (no AVX-512 BF16 or AMX), whose
/// bf16 convolutions oneDNN runs through fp32, 74% above on a small CNN.
fn on_the_cpu(snap: &Snapshot) -> Option<String> {
    let r = snap.source.recorder.as_ref()?;
    (r.device_kind() == "cpu").then(|| {
        ". This is a CPU recording: the CPU's 16-bit matrix products and convolutions (oneDNN's) book scratch \
         their fp32 kernels do not and keep parts in fp32, which the recording cannot show: the real peak is \
         higher by those (measured: within 0.1% below to 7% above on small models, 18% above on a Swin, 38% on a ConvNeXt; \
         on a CPU without bf16 instructions, AVX2 only, where each convolution is converted to fp32, 74% above on a \
         small CNN)"
            .to_owned()
    })
}

/// Mixed precision, as a bound: what the batch makes (activations,
/// autograd's detail, the forward's and backward's temporaries) at half
/// its size, the most autocast can shrink it. How much of it really
/// shrinks depends on which ops run in 16-bit (autocast's lists), which a
/// snapshot does not record; what autocast keeps fp32 (weights, their
/// gradients, the optimizer state) is as recorded. Measured on six
/// programs, the real peak was 0-43% above the bound (docs/advise.md).
fn mixed_precision(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    estimate: &str,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let shrink = super::batch::batch_made(labelled);
    if !shrink
        .iter()
        .any(|&b| cats.category.get(b) == Some(&Category::Activation))
    {
        return None;
    }
    let total: u64 = shrink.iter().map(|&b| l.size[b]).sum();
    let v: Vec<(usize, ChangeKind)> = shrink
        .iter()
        .map(|&b| (b, ChangeKind::Scale(0.5)))
        .collect();
    let on = if vramscope_analysis::summary::caching_allocator(snap, device) {
        "cuda"
    } else {
        "cpu"
    };
    Some(Candidate {
        class: ChangeClass::MixedPrecision,
        change: "bf16 mixed precision: the forward and the loss under torch.autocast, fp32 weights kept".into(),
        code: format!(
            "with torch.autocast(\"{on}\", dtype=torch.bfloat16):\n    outputs = model(x)\n    \
             loss = loss_fn(outputs, y)\nloss.backward()  # outside autocast\n\
             # fp16 instead of bf16: scale the loss with torch.amp.GradScaler"
        ),
        settings: recorded.clone(),
        method: Method::Bound,
        edits: Some(for_blocks(snap, device, l, &v, "activations, temporaries, autograd detail")),
        how: format!(
            "the least the peak can be: replayed with each of the {} activation, autograd-detail and temporary \
             blocks ({}) at half its size, the most autocast can shrink them; parameters, gradients, optimizer \
             state (fp32 under autocast) and inputs as recorded. The real peak is higher by what stays fp32 (ops \
             on autocast's fp32 list: the loss, softmax, norms) and by the 16-bit copies autocast makes of weights \
             and inputs: 0-43% above the bound on six programs measured; {estimate}",
            shrink.len(),
            bytes(total)
        ),
    })
}
