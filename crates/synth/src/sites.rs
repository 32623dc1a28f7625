//! The simulated training script's call sites: where it allocates and
//! frees, and the Python frames (innermost first) of each. The script is a
//! user-written trainer (`train.py`, `trainer.py`, `model.py`) calling a
//! GPT-style model, with forward and backward inside the closure passed to
//! `optimizer.step`; some wrappers (DDP, accelerate, `python -m`) depend on
//! the seed.

/// Declares `Site` and the table `from_index` reads, from one list.
macro_rules! sites {
    ($($v:ident,)*) => {
        /// Where the training script allocates or frees.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Site { $($v,)* }

        const ALL: &[Site] = &[$(Site::$v,)*];
    };
}

sites! {
    ParamInit,
    Data,
    Embedding,
    LayerNorm,
    Qkv,
    AttnScores,
    Softmax,
    Dropout,
    AttnContext,
    Proj,
    Residual,
    Fc1,
    Gelu,
    Fc2,
    LmHead,
    Loss,
    BwdLinear,
    BwdLayerNorm,
    BwdAttention,
    BwdSoftmax,
    BwdGelu,
    BwdDropout,
    BwdEmbedding,
    BwdLoss,
    AccumulateGrad,
    OptimInit,
    OptimStep,
    ZeroGrad,
    Leak,
}

pub(crate) const SITES: usize = Site::Leak as usize + 1;

impl Site {
    pub(crate) fn from_index(n: usize) -> Site {
        ALL[n]
    }

    pub(crate) fn is_backward(self) -> bool {
        use Site::*;
        matches!(
            self,
            BwdLinear
                | BwdLayerNorm
                | BwdAttention
                | BwdSoftmax
                | BwdGelu
                | BwdDropout
                | BwdEmbedding
                | BwdLoss
                | AccumulateGrad
        )
    }
}

/// A frame template `(name, file, line)`: in files, `{sp}` is
/// site-packages, `{user}` the project, `{py}` the CPython sources.
pub(crate) type T = (&'static str, &'static str, u32);
/// A frame template whose name is built (C++ frames).
pub(crate) type Owned = (String, &'static str, u32);

const W: [T; 2] = [
    ("_call_impl", "{sp}/torch/nn/modules/module.py", 1750),
    (
        "_wrapped_call_impl",
        "{sp}/torch/nn/modules/module.py",
        1739,
    ),
];
const LINEAR: T = ("forward", "{sp}/torch/nn/modules/linear.py", 125);
const MODEL: &str = "{user}/model.py";
const TRAINER: &str = "{user}/trainer.py";

/// Model nesting above a forward site, innermost first: Block,
/// Transformer, LanguageModel (each reached through a module call).
const OUTER: [T; 3] = [
    ("forward", MODEL, 101),
    ("forward", MODEL, 146),
    ("forward", MODEL, 171),
];

/// Per forward site: torch frames (innermost first; a torch module when the
/// last is a `forward`), the user frame calling them, the model level of
/// that frame (4: Attention/MLP, 3: Block, 2: Transformer, 1: LanguageModel,
/// 0: the training step), and the ATen op.
pub(crate) fn forward_spec(site: Site) -> (&'static [T], T, usize, &'static str) {
    use Site::*;
    match site {
        Embedding => (
            &[
                ("embedding", "{sp}/torch/nn/functional.py", 2551),
                ("forward", "{sp}/torch/nn/modules/sparse.py", 190),
            ],
            ("forward", MODEL, 140),
            2,
            "embedding",
        ),
        LayerNorm => (
            &[
                ("layer_norm", "{sp}/torch/nn/functional.py", 2900),
                ("forward", "{sp}/torch/nn/modules/normalization.py", 217),
            ],
            ("forward", MODEL, 101),
            3,
            "native_layer_norm",
        ),
        Qkv => (&[LINEAR], ("forward", MODEL, 58), 4, "addmm"),
        AttnScores => (&[], ("forward", MODEL, 63), 4, "bmm"),
        Softmax => (
            &[("softmax", "{sp}/torch/nn/functional.py", 2140)],
            ("forward", MODEL, 65),
            4,
            "_softmax",
        ),
        Dropout => (
            &[
                ("dropout", "{sp}/torch/nn/functional.py", 1425),
                ("forward", "{sp}/torch/nn/modules/dropout.py", 70),
            ],
            ("forward", MODEL, 66),
            4,
            "native_dropout",
        ),
        AttnContext => (&[], ("forward", MODEL, 67), 4, "bmm"),
        Proj => (&[LINEAR], ("forward", MODEL, 69), 4, "addmm"),
        Residual => (&[], ("forward", MODEL, 102), 3, "add"),
        Fc1 => (&[LINEAR], ("forward", MODEL, 84), 4, "addmm"),
        Gelu => (
            &[("forward", "{sp}/torch/nn/modules/activation.py", 734)],
            ("forward", MODEL, 85),
            4,
            "gelu",
        ),
        Fc2 => (&[LINEAR], ("forward", MODEL, 86), 4, "addmm"),
        LmHead => (&[LINEAR], ("forward", MODEL, 173), 1, "mm"),
        Loss => (
            &[("cross_entropy", "{sp}/torch/nn/functional.py", 3494)],
            ("compute_loss", TRAINER, 73),
            0,
            "log_softmax",
        ),
        _ => (&[], ("train_step", TRAINER, 57), 0, "empty"),
    }
}

/// Backward sites: autograd node and the ATen op it runs.
pub(crate) fn backward_spec(site: Site) -> (&'static str, &'static str) {
    use Site::*;
    match site {
        BwdLinear => ("AddmmBackward0", "mm"),
        BwdLayerNorm => ("NativeLayerNormBackward0", "native_layer_norm_backward"),
        BwdAttention => ("BmmBackward0", "bmm"),
        BwdSoftmax => ("SoftmaxBackward0", "_softmax_backward_data"),
        BwdGelu => ("GeluBackward0", "gelu_backward"),
        BwdDropout => ("NativeDropoutBackward0", "native_dropout_backward"),
        BwdEmbedding => ("EmbeddingBackward0", "embedding_dense_backward"),
        BwdLoss => ("NllLossBackward0", "nll_loss_backward"),
        _ => ("torch::autograd::AccumulateGrad", "add"),
    }
}

/// Choices that shape the stacks of one simulated script.
pub(crate) struct Script {
    pub ddp: bool,
    pub accelerate: bool,
    pub runpy: bool,
}

impl Script {
    /// The Python frames of `site`, innermost first.
    pub(crate) fn python(&self, site: Site) -> Vec<T> {
        use Site::*;
        let outer: Vec<T> = [
            ("run", "{user}/experiment.py", 44),
            ("main", "{user}/train.py", 140),
            ("<module>", "{user}/train.py", 152),
        ]
        .into_iter()
        .chain(
            [
                ("_run_code", "<frozen runpy>", 88),
                ("_run_module_as_main", "<frozen runpy>", 198),
            ]
            .into_iter()
            .take(if self.runpy { 2 } else { 0 }),
        )
        .collect();
        let fit: Vec<T> = [("train_epoch", TRAINER, 88), ("fit", TRAINER, 112)]
            .into_iter()
            .chain(outer.iter().copied())
            .collect();
        let step = |line: u32| -> Vec<T> {
            std::iter::once(("train_step", TRAINER, line))
                .chain(fit.iter().copied())
                .collect()
        };
        // Forward and backward run in the closure passed to `optimizer.step`.
        let optimizer: [T; 5] = [
            ("step", "{sp}/torch/optim/adamw.py", 197),
            ("_use_grad", "{sp}/torch/optim/optimizer.py", 79),
            ("wrapper", "{sp}/torch/optim/optimizer.py", 487),
            ("wrapper", "{sp}/torch/optim/lr_scheduler.py", 137),
            ("_optimizer_step", TRAINER, 79),
        ];
        let closure = |line: u32| -> Vec<T> {
            std::iter::once(("closure", TRAINER, line))
                .chain(optimizer)
                .chain(step(63))
                .collect()
        };
        let cat = |a: &[T], b: Vec<T>| -> Vec<T> { a.iter().copied().chain(b).collect() };
        let backward = site.is_backward();
        match site {
            ParamInit => cat(
                &[
                    ("convert", "{sp}/torch/nn/modules/module.py", 1343),
                    ("_apply", "{sp}/torch/nn/modules/module.py", 930),
                    ("_apply", "{sp}/torch/nn/modules/module.py", 903),
                    ("_apply", "{sp}/torch/nn/modules/module.py", 903),
                    ("_apply", "{sp}/torch/nn/modules/module.py", 903),
                    ("to", "{sp}/torch/nn/modules/module.py", 1355),
                    ("build_model", "{user}/train.py", 95),
                ],
                outer.clone(),
            ),
            Data => cat(
                &[
                    ("_to_device", "{user}/data.py", 41),
                    ("prepare_batch", "{user}/data.py", 57),
                ],
                step(52),
            ),
            Leak => cat(
                &[
                    ("accumulate_history", "{user}/train.py", 74),
                    ("on_step_end", "{user}/train.py", 81),
                ],
                cat(
                    &[("train_epoch", TRAINER, 93)],
                    cat(&[("fit", TRAINER, 112)], outer.clone()),
                ),
            ),
            OptimInit | OptimStep => cat(
                &[
                    if site == OptimInit {
                        ("_init_group", "{sp}/torch/optim/adamw.py", 113)
                    } else {
                        ("_single_tensor_adamw", "{sp}/torch/optim/adamw.py", 418)
                    },
                    ("adamw", "{sp}/torch/optim/adamw.py", 768),
                    ("step", "{sp}/torch/optim/adamw.py", 209),
                ],
                optimizer[1..].iter().copied().chain(step(63)).collect(),
            ),
            ZeroGrad => cat(
                &[("zero_grad", "{sp}/torch/optim/optimizer.py", 956)],
                step(48),
            ),
            _ if backward => {
                let mut v = vec![
                    ("_engine_run_backward", "{sp}/torch/autograd/graph.py", 825),
                    ("backward", "{sp}/torch/autograd/__init__.py", 347),
                    ("backward", "{sp}/torch/_tensor.py", 626),
                ];
                if self.accelerate {
                    v.push(("backward", "{sp}/accelerate/accelerator.py", 2246));
                }
                v.push(("_backward", TRAINER, 66));
                cat(&v, closure(60))
            }
            _ => self.forward_python(site, closure(58)),
        }
    }

    /// A forward site's Python stack: torch frames, the user's modules
    /// (each through `_call_impl`), the wrappers around the model, the
    /// training loop (`caller`).
    fn forward_python(&self, site: Site, caller: Vec<T>) -> Vec<T> {
        let (torch, user, level, _) = forward_spec(site);
        let mut out: Vec<T> = torch.to_vec();
        if torch.last().is_some_and(|f| f.0 == "forward") {
            out.extend(W);
        }
        out.push(user);
        for mut frame in OUTER.into_iter().skip(4 - level.clamp(1, 4)) {
            if frame.2 == 101 && user.2 >= 84 {
                frame.2 = 102; // Block.forward calling the MLP
            }
            out.extend(W);
            out.push(frame);
        }
        if level > 0 {
            out.extend(W);
            if self.accelerate {
                out.extend([
                    ("decorate_autocast", "{sp}/torch/amp/autocast_mode.py", 44),
                    ("__call__", "{sp}/accelerate/utils/operations.py", 807),
                    ("forward", "{sp}/accelerate/utils/operations.py", 819),
                ]);
                out.extend(W);
            }
            if self.ddp {
                out.push((
                    "_run_ddp_forward",
                    "{sp}/torch/nn/parallel/distributed.py",
                    1471,
                ));
                out.push(("forward", "{sp}/torch/nn/parallel/distributed.py", 1643));
                out.extend(W);
            }
            out.push(("compute_loss", TRAINER, 71));
        }
        out.extend(caller);
        out
    }
}
