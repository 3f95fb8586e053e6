"""Transformer encoder (BERT-style): token and position embeddings, post-LN encoder layers (multi-head
attention with a padding mask, GELU feed-forward), a pooled classifier; exported to ONNX, tuned, compiled,
checked. The feed-forward's bias and GELU, and each residual add, run in their matmul's loop nest.

    python examples/bert/tune_bert.py              # 4 layers, width 256, 128 tokens, 3 minutes of tuning
    python examples/bert/tune_bert.py --small --time 30s --db /tmp/bert.db
"""

import torch
from torch import nn
from torch.nn import functional as F

from autosched.family_example import Example, run_example


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, bias):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.norm1(x + self.proj(att.transpose(1, 2).reshape(b, s, d)))
        return self.norm2(x + self.ffn(x))


class Bert(nn.Module):
    def __init__(self, vocab=8000, d=256, heads=4, layers=4, seq=128, n_classes=2):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.norm = nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, n_classes)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        bias = (1.0 - attention_mask[:, None, None, :].float()) * -1e4  # padding tokens get no attention
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x[:, 0])


def build(small: bool):
    vocab, d, layers, seq = (500, 64, 1, 16) if small else (8000, 256, 4, 128)
    model = Bert(vocab, d, 4, layers, seq)
    ids = torch.randint(0, vocab, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[0, seq * 3 // 4:] = 0  # the last quarter is padding
    return model, (ids, mask)


EXAMPLE = Example("bert", build, ["input_ids", "attention_mask"])


if __name__ == "__main__":
    run_example(EXAMPLE)
