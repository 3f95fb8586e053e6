"""MLP: three linear layers with ReLU (an MNIST-sized classifier), exported to ONNX, tuned, compiled, checked.

    python examples/mlp/tune_mlp.py                # 3 minutes of tuning (--time), all cores (--threads)
    python examples/mlp/tune_mlp.py --small --time 20s --db /tmp/mlp.db   # a quick look
"""

import torch
from torch import nn

from autosched.family_example import Example, run_example


def build(small: bool):
    sizes = (64, 128, 10) if small else (784, 1024, 1024, 10)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers), (torch.randn(1, sizes[0]),)


EXAMPLE = Example("mlp", build, ["x"])


if __name__ == "__main__":
    run_example(EXAMPLE)
