"""Built-in example models, built in code with random weights (PyTorch), and their ONNX export.

``mlp``, ``resnet18`` and ``bert`` are the benchmark models (PEERS.md sizes); ``tiny_cnn`` and ``tiny_mlp``
are small enough for tests. Nothing is downloaded: weights and batch-norm statistics are seeded randoms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosched.errors import UnknownNameError, UserInputError


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise UserInputError("the built-in models need PyTorch: pip install 'autosched[torch]'") from err
    return torch


def _modules() -> dict[str, Any]:
    torch = _torch()
    nn = torch.nn

    class MLP(nn.Module):
        def __init__(self, sizes=(784, 1024, 1024, 10)):
            super().__init__()
            layers: list[Any] = []
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
                layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
            self.net = nn.Sequential(*layers)

        def forward(self, x):
            return self.net(x)

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, widths=(64, 128, 256, 512), blocks=2, n_classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], widths[0]
            for i, cout in enumerate(widths):
                for b in range(blocks):
                    layers.append(BasicBlock(cin, cout, 2 if (b == 0 and i > 0) else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, n_classes)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class EncoderLayer(nn.Module):  # BERT (post-LN) layer
        def __init__(self, d: int, heads: int, ffn: int):
            super().__init__()
            self.heads = heads
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = self.ln1(x + self.out((att @ v).transpose(1, 2).reshape(b, s, d)))
            return self.ln2(x + self.fc2(nn.functional.gelu(self.fc1(x))))

    class Encoder(nn.Module):
        def __init__(self, layers=2, d=256, heads=4, ffn=1024):
            super().__init__()
            self.layers = nn.Sequential(*[EncoderLayer(d, heads, ffn) for _ in range(layers)])

        def forward(self, x):
            return self.layers(x)

    class TinyCNN(nn.Module):  # conv + BN + relu, a residual add, pooling and a classifier
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(y + self.bn2(self.conv2(y)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    return {  # name -> (constructor, example input shape)
        "mlp": (lambda: MLP(), (1, 784)),
        "resnet18": (lambda: ResNet(), (1, 3, 224, 224)),
        "bert": (lambda: Encoder(), (1, 128, 256)),
        "tiny_mlp": (lambda: MLP((32, 64, 10)), (4, 32)),
        "tiny_cnn": (lambda: TinyCNN(), (1, 3, 16, 16)),
    }


ZOO = ("mlp", "resnet18", "bert", "tiny_mlp", "tiny_cnn")


def build(name: str, seed: int = 0) -> tuple[Any, tuple]:
    """(eval-mode torch module with seeded random weights and BN statistics, example inputs)."""
    if name not in ZOO:
        raise UnknownNameError("built-in model", name, ZOO)
    torch = _torch()
    torch.manual_seed(seed)
    make, shape = _modules()[name]
    module = make().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features) + 0.5)
                m.weight.copy_(torch.rand(m.num_features) + 0.5)
                m.bias.copy_(torch.randn(m.num_features) * 0.1)
    return module, (torch.randn(*shape),)


def export_onnx(name: str, path: str | Path, seed: int = 0, fold_batch_norm: bool = False) -> Path:
    """Write the built-in model as ONNX (opset 17). Batch norms stay BatchNormalization nodes unless
    ``fold_batch_norm`` (then the exporter folds them into the convolutions, as deployment exports do)."""
    torch = _torch()
    module, inputs = build(name, seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = torch.onnx.TrainingMode.EVAL if fold_batch_norm else torch.onnx.TrainingMode.PRESERVE
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, inputs, str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          opset_version=17, training=mode, do_constant_folding=fold_batch_norm)
    return path
