"""A zoo of architectures and training styles, each small enough for a CPU.

Every architecture is built as its library's users build it (Hugging Face
configs, torchvision and diffusers constructors, plain ``nn`` modules),
with a batch, targets and the loss its users compute. Every style is a way
to train it: fp32, bf16 autocast given to the estimate (``autocast=``) or
entered by the model's own forward, ``torch.compile``, per-block
activation checkpointing, and inference.

``real_peak(arch, style)`` runs the style for real and returns the peak of
c10's allocator over it (the model, its inputs and targets adopted as
already there, as a training script has them before its loop);
``estimated(arch, style)`` asks ``vramscope.estimate`` for the same steps.
``python bench/zoo_table.py`` prints the table of both; the tests in
``python/tests/test_zoo_estimate.py`` hold each cell to its tolerance;
``tests/fixtures/gpu/programs/zoo_run.py`` runs the same cells on CUDA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 2
LR = 1e-3
VOCAB = 4096


@dataclass
class Case:
    """One architecture: the model, one batch, the loss, and how its users
    turn on per-block checkpointing."""

    model: nn.Module
    inputs: Tuple[Any, ...]
    targets: Tuple[Any, ...]
    loss_fn: Callable[..., Any]
    checkpoint: Callable[[nn.Module], None]
    kwargs: Dict[str, Any] = field(default_factory=dict)


def _lm_loss(out: Any, y: Any) -> Any:
    """Next-token loss on the logits in fp32, as training loops write it."""
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def _hf_checkpoint(model: nn.Module) -> None:
    """Hugging Face's own per-layer checkpointing (``activation_checkpointing_enable``
    from transformers 5, ``gradient_checkpointing_enable`` before)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable()
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _tokens(batch: int, seq: int, vocab: int = VOCAB) -> Tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g)


def llama() -> Case:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
    x, y = _tokens(4, 128)
    return Case(LlamaForCausalLM(cfg), (x,), (y,), _lm_loss, _hf_checkpoint)


def qwen2() -> Case:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
    x, y = _tokens(4, 128)
    return Case(Qwen2ForCausalLM(cfg), (x,), (y,), _lm_loss, _hf_checkpoint)


def mixtral() -> Case:
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=VOCAB, hidden_size=192, intermediate_size=384, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=512)
    x, y = _tokens(4, 128)
    return Case(MixtralForCausalLM(cfg), (x,), (y,), _lm_loss, _hf_checkpoint)


def gpt2() -> Case:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=256, n_layer=4, n_head=4)
    x, y = _tokens(4, 128)
    return Case(GPT2LMHeadModel(cfg), (x,), (y,), _lm_loss, _hf_checkpoint)


def bert() -> Case:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, max_position_embeddings=256)
    x, y = _tokens(4, 128)
    return Case(BertForMaskedLM(cfg), (x,), (y,), _lm_loss, _hf_checkpoint)


def t5() -> Case:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=256, d_kv=32, d_ff=1024, num_layers=3, num_decoder_layers=3, num_heads=8, decoder_start_token_id=0)
    x, y = _tokens(4, 128)

    def loss(out: Any, labels: Any) -> Any:
        return _lm_loss(out, labels)

    return Case(T5ForConditionalGeneration(cfg), (x,), (y,), loss, _hf_checkpoint, kwargs={"decoder_input_ids": y})


def vit() -> Case:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=64, patch_size=8, hidden_size=192, num_hidden_layers=4, num_attention_heads=3, intermediate_size=768, num_labels=100)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 64, 64, generator=g)
    y = torch.randint(0, 100, (8,), generator=g)
    return Case(ViTForImageClassification(cfg), (x,), (y,), lambda out, y: F.cross_entropy(out.logits.float(), y), _hf_checkpoint)


def _checkpointed(blocks: List[nn.Module]) -> None:
    """Each block's forward through ``torch.utils.checkpoint`` (non-reentrant)."""
    from torch.utils.checkpoint import checkpoint

    for b in blocks:
        inner = b.forward

        def fwd(*args: Any, __inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(__inner, *args, use_reentrant=False, **kwargs)

        b.forward = fwd  # type: ignore[method-assign]


def resnet() -> Case:
    import torchvision

    model = torchvision.models.resnet18(num_classes=100)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 64, 64, generator=g)
    y = torch.randint(0, 100, (8,), generator=g)
    return Case(model, (x,), (y,), lambda out, y: F.cross_entropy(out, y), lambda m: _checkpointed([m.layer1, m.layer2, m.layer3, m.layer4]))


def unet() -> Case:
    from diffusers import UNet2DModel

    model = UNet2DModel(
        sample_size=32, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 64, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8,
    )
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 32, 32, generator=g)
    noise = torch.randn(4, 3, 32, 32, generator=g)
    t = torch.tensor([10, 200, 500, 900])

    def loss(out: Any, target: Any) -> Any:
        return F.mse_loss(out.sample.float(), target)

    return Case(model, (x, t), (noise,), loss, lambda m: m.enable_gradient_checkpointing())


def swin() -> Case:
    """Shifted-window attention: its pooled head hands the last layer norm a
    transposed gradient (the estimate once read it as transposed all the
    way down)."""
    from transformers import SwinConfig, SwinForImageClassification

    cfg = SwinConfig(image_size=64, patch_size=4, embed_dim=48, depths=[2, 2], num_heads=[3, 6], window_size=4, num_labels=100)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 64, 64, generator=g)
    y = torch.randint(0, 100, (8,), generator=g)
    return Case(SwinForImageClassification(cfg), (x,), (y,), lambda out, y: F.cross_entropy(out.logits.float(), y), _hf_checkpoint)


def convnext() -> Case:
    """timm's ConvNeXt: depthwise 7×7 convolutions, channels-last layer
    norms, timm's own checkpointing."""
    import timm

    model = timm.create_model("convnext_atto", num_classes=100)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 64, 64, generator=g)
    y = torch.randint(0, 100, (8,), generator=g)
    return Case(model, (x,), (y,), lambda out, y: F.cross_entropy(out, y), lambda m: m.set_grad_checkpointing(True))


def whisper() -> Case:
    """A speech encoder-decoder: 1-D convolutions over log-mel frames, then
    a text decoder with cross-attention."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(
        vocab_size=VOCAB, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=512, decoder_ffn_dim=512, num_mel_bins=40, max_source_positions=100, max_target_positions=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(4, 40, 200, generator=g)
    text = torch.randint(0, VOCAB, (4, 32), generator=g)
    return Case(WhisperForConditionalGeneration(cfg), (frames,), (text,), _lm_loss, _hf_checkpoint, kwargs={"decoder_input_ids": text})


class LSTMLM(nn.Module):
    """A two-layer LSTM language model."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 256)
        self.rnn = nn.LSTM(256, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, VOCAB)

    def forward(self, x: Any) -> Any:
        h, _ = self.rnn(self.emb(x))
        return self.head(h)


def lstm() -> Case:
    x, y = _tokens(8, 64)
    return Case(LSTMLM(), (x,), (y,), _lm_loss, lambda m: _checkpointed([m.rnn]))


ARCHS: Dict[str, Callable[[], Case]] = {
    "llama": llama, "qwen2": qwen2, "mixtral": mixtral, "gpt2": gpt2, "bert": bert, "t5": t5,
    "vit": vit, "resnet": resnet, "unet": unet, "lstm": lstm, "swin": swin, "convnext": convnext, "whisper": whisper,
}

STYLES = ("fp32", "bf16", "autocast_forward", "checkpoint", "compiled", "inference")

# The architectures built with Hugging Face's transformers: the tests start
# their programs from a Python that has imported its modeling code
# (forkserver.py's preload).
TRANSFORMERS = frozenset({"llama", "qwen2", "mixtral", "gpt2", "bert", "t5", "vit", "swin", "whisper"})
HF_PRELOAD = ("transformers.modeling_utils",)


def preload(program: str) -> Tuple[str, ...]:
    """What the tests' fork server imports for a program named
    ``zoo_<arch>`` (the corpus's and the advice checks' name for it)."""
    return HF_PRELOAD if program.startswith("zoo_") and program[len("zoo_"):] in TRANSFORMERS else ()


class AutocastInForward(nn.Module):
    """The model with ``torch.autocast`` entered by its own forward: the
    program's region, not the estimate's ``autocast=``."""

    def __init__(self, inner: nn.Module, device: str) -> None:
        super().__init__()
        self.inner = inner
        self.device = device

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=self.device, dtype=torch.bfloat16):
            return self.inner(*args, **kwargs)


def prepared(arch: str, style: str, device: str = "cpu", seed: int = 0, place: Optional[str] = None) -> Tuple[Case, nn.Module]:
    """The case and the module to train in ``style`` (wrapped, compiled or
    checkpointed as the style asks) on ``device``; ``place`` keeps the
    tensors elsewhere (an estimate for CUDA reads CPU tensors' shapes)."""
    torch.manual_seed(seed)
    case = ARCHS[arch]()
    where = place or device
    if where != "cpu":
        move = lambda t: t.to(where) if isinstance(t, torch.Tensor) else t  # noqa: E731
        case.model.to(where)
        case.inputs = tuple(move(t) for t in case.inputs)
        case.targets = tuple(move(t) for t in case.targets)
        case.kwargs = {k: move(v) for k, v in case.kwargs.items()}
    model = case.model
    if style == "checkpoint":
        case.checkpoint(model)
    if style == "autocast_forward":
        model = AutocastInForward(model, device)
    if style == "compiled":
        model = torch.compile(model)
    return case, model


def _storages(tensors: Sequence[Any]) -> Dict[int, int]:
    out: Dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
            st = t.untyped_storage()
            out[st.data_ptr()] = st.nbytes()
    return out


def train(case: Case, model: nn.Module, style: str, device: str = "cpu", steps: int = STEPS) -> None:
    """``steps`` iterations as a training loop runs them: zero_grad, forward,
    loss (the output let go before backward), backward, AdamW's step; or
    forward passes under ``no_grad`` for inference."""
    kwargs = case.kwargs
    if style == "inference":
        with torch.no_grad():
            for _ in range(steps):
                out = model(*case.inputs, **kwargs)
                del out
        return
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    region = (lambda: torch.autocast(device_type=device, dtype=torch.bfloat16)) if style == "bf16" else contextlib.nullcontext
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with region():
            out = model(*case.inputs, **kwargs)
            loss = case.loss_fn(out, *case.targets)
        del out
        loss.backward()
        del loss
        opt.step()


def real_peak(arch: str, style: str) -> int:
    """The peak of c10's CPU allocator over ``STEPS`` real iterations, with
    the model, its inputs and targets there from the start."""
    from vramscope import _native

    if style == "compiled":
        torch._dynamo.reset()  # each cell compiles afresh (Dynamo's recompilation limits are per process)
    case, model = prepared(arch, style)
    model.train(style != "inference")
    there = _storages([*model.parameters(), *model.buffers(), *case.inputs, *case.targets, *case.kwargs.values()])
    _native.cpu_allocator_install()
    _native.cpu_allocator_start(1)
    try:
        for addr, size in there.items():
            _native.cpu_allocator_adopt(addr, size)
        train(case, model, style)
        _allocated, peak, _window = _native.cpu_allocator_totals()
    finally:
        _native.cpu_allocator_stop()
    return int(peak)


def estimated(arch: str, style: str, device: str = "cpu", **options: Any) -> Any:
    """``vramscope.estimate`` of the same ``STEPS`` iterations."""
    import vramscope

    case, model = prepared(arch, style, device, place="cpu")
    model.train(style != "inference")
    kwargs = case.kwargs

    if kwargs:
        # Keyword inputs (T5's decoder ids) as the last positional inputs.
        names = list(kwargs)
        inner = model

        class WithKeywords(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, *args: Any) -> Any:
                n = len(args) - len(names)
                return self.inner(*args[:n], **dict(zip(names, args[n:])))

        model = WithKeywords()
    inputs = (*case.inputs, *kwargs.values())
    if style != "inference":
        options = {"lr": LR, **options}
    return vramscope.estimate(
        model, inputs, None if style == "inference" else torch.optim.AdamW, loss_fn=case.loss_fn, targets=case.targets,
        steps=STEPS, device=device, inference=style == "inference", autocast=torch.bfloat16 if style == "bf16" else None,
        **options,
    )
