"""Vision transformer (ViT): 16x16 patches embedded by a strided convolution, a class token, learned
positions, pre-LN encoder blocks, a classifier on the class token; exported to ONNX, tuned, compiled, checked.

    python examples/vit/tune_vit.py                # ViT-Tiny-like (width 192, 4 blocks) at 224x224, 3 minutes
    python examples/vit/tune_vit.py --small --time 30s --db /tmp/vit.db
"""

import torch
from torch import nn
from torch.nn import functional as F

from autosched.family_example import Example, run_example


class Block(nn.Module):  # pre-LN: x + attention(norm(x)), x + mlp(norm(x))
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, size=224, patch=16, d=192, heads=3, depth=4, n_classes=1000):
        super().__init__()
        self.patches = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, n_classes)

    def forward(self, image):
        x = self.patches(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.positions
        return self.head(self.norm(self.blocks(x))[:, 0])


def build(small: bool):
    size = 32 if small else 224
    model = ViT(size, 8, 64, 2, 1, 10) if small else ViT(size)
    return model, (torch.randn(1, 3, size, size),)


EXAMPLE = Example("vit", build, ["image"])


if __name__ == "__main__":
    run_example(EXAMPLE)
