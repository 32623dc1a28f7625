"""Greedy decoding with Hugging Face's cache of past keys and values that
also concatenates each step's logits (as `generate(output_scores=True)`
keeps them): two tensors made again larger at every call, a library's and
the program's. Recorded with `python -m vramscope run -o OUT decoding_scores.py`
(tests/fixtures/recorded/gpt2_decoding_with_scores.pickle.gz)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
m = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=2)).eval()
ids = torch.randint(0, 512, (4, 8))
scores = None
with torch.no_grad():
    out = m(ids, use_cache=True)
    for _ in range(16):
        logits = out.logits[:, -1:]
        scores = logits if scores is None else torch.cat([scores, logits], dim=1)
        out = m(logits.argmax(-1), past_key_values=out.past_key_values, use_cache=True)
print(scores.shape)
