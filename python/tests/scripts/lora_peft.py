"""LoRA fine-tuning as peft's README shows it: GPT-2 (4 layers of 256, built
from its config, nothing downloaded), its weights frozen, adapters (r=8) on
the attention's ``c_attn``, AdamW over what trains, 6 steps of 8×128 tokens.

``python lora_peft.py``: the program as it is (recorded for
``tests/fixtures/recorded/lora_peft_gpt2.pickle.gz``).
``torchrun --nproc-per-node=2 lora_peft.py --fsdp``: the same under FSDP2
over two gloo ranks, each layer and the root ``fully_shard``-ed after the
model is built, what ``vramscope advise`` predicts for it.
``python lora_peft.py --checkpoint``: every layer checkpointed by
transformers' own switch, as the advice's code writes it; ``--half``:
each batch in two halves, gradients accumulated (the micro-batch row).
Needs ``peft`` and ``transformers``."""

import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

fsdp = "--fsdp" in sys.argv
checkpointed = "--checkpoint" in sys.argv
half = "--half" in sys.argv
if fsdp:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")

torch.manual_seed(0)
config = GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=256)
model = GPT2LMHeadModel(config)
lora = LoraConfig(r=8, lora_alpha=16, target_modules=["c_attn"], lora_dropout=0.05, task_type="CAUSAL_LM")
model = get_peft_model(model, lora)
if checkpointed:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
if fsdp:
    for block in model.base_model.model.transformer.h:
        fully_shard(block)
    fully_shard(model)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
model.train()
for step in range(6):
    ids = torch.randint(0, config.vocab_size, (8, 128))
    for chunk in ids.chunk(2) if half else (ids,):
        out = model(input_ids=chunk, labels=chunk)
        (out.loss / (2 if half else 1)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, out.loss.item())
if fsdp:
    dist.destroy_process_group()
