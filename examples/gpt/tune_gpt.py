"""Decoder-only transformer (GPT-style): token and position embeddings, pre-LN blocks with causal
self-attention and a GELU MLP, a language-model head; exported to ONNX, tuned, compiled, checked, then used
to generate text greedily.

Generation runs the compiled model on a fixed window of tokens: the sequence so far is written at the start of
the window and the rest is padding, which causal attention never lets the real positions see, so the logits
at the last real position are the next-token logits. There is no KV cache: a cache grows by one token per step,
a symbolic sequence length that autosched's graph path does not carry yet (it tunes static shapes), so each
step recomputes the window. Each generated token is checked to be PyTorch's choice on the same prefix.

    python examples/gpt/tune_gpt.py                # 4 layers, width 256, 64-token window, 3 minutes of tuning
    python examples/gpt/tune_gpt.py --small --time 30s --db /tmp/gpt.db
"""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from autosched.family_example import Example, run_example


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab=4000, d=256, heads=4, layers=4, window=64):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(window, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        return self.head(self.norm(self.blocks(self.tokens(input_ids) + self.positions(positions))))


def build(small: bool):
    vocab, d, layers, window = (300, 64, 1, 16) if small else (4000, 256, 4, 64)
    return GPT(vocab, d, 4, layers, window), (torch.randint(0, vocab, (1, window)),)


def generate(compiled, module, args, prompt_length: int = 4) -> None:
    """Greedy generation to the end of the window with the compiled model, each token checked against
    PyTorch's logits on the same prefix (a near-tie may pick either token)."""
    window = module.positions.num_embeddings
    ids = np.zeros((1, window), np.int64)
    ids[0, :prompt_length] = np.random.default_rng(0).integers(0, module.head.out_features, prompt_length)
    for n in range(prompt_length, window):
        ids[0, n] = int(np.argmax(compiled(ids)[0][0, n - 1]))
        with torch.no_grad():
            want = module(torch.from_numpy(ids[:, :n]))[0, -1].numpy()
        if want[ids[0, n]] < want.max() - 1e-3 * np.abs(want).max():
            raise SystemExit(f"token {n}: autosched chose {ids[0, n]}, PyTorch {int(want.argmax())}")
    print(f"generated {window - prompt_length} tokens greedily (no KV cache: the window is recomputed), "
          f"each PyTorch's choice: {ids[0, prompt_length:].tolist()}")


EXAMPLE = Example("gpt", build, ["input_ids"])


if __name__ == "__main__":
    run_example(EXAMPLE, after=generate)
