"""CNN: a ResNet-18 (basic residual blocks, batch norm, ReLU, max and average pooling), exported to ONNX,
tuned, compiled, checked. Batch norms fold into the convolutions; convolutions run channels-last; each conv's
bias, residual add and ReLU run in its loop nest.

    python examples/resnet/tune_resnet.py          # ResNet-18 at 224x224, 3 minutes of tuning
    python examples/resnet/tune_resnet.py --small --time 30s --db /tmp/resnet.db
"""

import torch
from torch import nn

from autosched.family_example import Example, run_example


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class Residual(nn.Module):
    """Two 3x3 convolutions with a shortcut (a 1x1 projection where the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout, 3))
        self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride > 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(widths=(64, 128, 256, 512), depth=2, n_classes=1000) -> nn.Sequential:
    """ResNet-18 with the defaults: a 7x7 stem, four stages of ``depth`` residual blocks, pooling, a classifier."""
    layers = [*conv_bn(3, widths[0], 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    for stage, width in enumerate(widths):
        cin = widths[max(stage - 1, 0)]
        layers += [Residual(cin if i == 0 else width, width, 2 if i == 0 and stage > 0 else 1) for i in range(depth)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(widths[-1], n_classes))


def build(small: bool):
    model = resnet((16, 32), 1, 10) if small else resnet()
    for m in model.modules():  # random batch-norm statistics, as a trained model has
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_var, 0.5, 1.5)
            nn.init.normal_(m.running_mean, 0.0, 0.1)
    return model, (torch.randn(1, 3, 32 if small else 224, 32 if small else 224),)


EXAMPLE = Example("resnet", build, ["image"])


if __name__ == "__main__":
    run_example(EXAMPLE)
