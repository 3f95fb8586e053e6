"""Mobile CNN: MobileNetV2-style inverted residual blocks (1x1 expansion, 3x3 depthwise, 1x1 projection,
ReLU6, residual where the shape allows), exported to ONNX, tuned, compiled, checked.

    python examples/mobilenet/tune_mobilenet.py    # 224x224, width 1.0, 3 minutes of tuning
    python examples/mobilenet/tune_mobilenet.py --small --time 30s --db /tmp/mobilenet.db
"""

import torch
from torch import nn

from autosched.family_example import Example, run_example


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([nn.ReLU6()] if act else []))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.block = nn.Sequential(conv_bn(cin, hidden, 1), conv_bn(hidden, hidden, 3, stride, groups=hidden),
                                   conv_bn(hidden, cout, 1, act=False))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    # (expansion, output channels, blocks, first stride), as in the paper
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, settings=SETTINGS, n_classes=1000, last=1280):
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2)], 32
        for expand, cout, n, stride in settings:
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        self.features = nn.Sequential(*layers, conv_bn(cin, last, 1))
        self.head = nn.Linear(last, n_classes)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def build(small: bool):
    model = MobileNetV2(((1, 16, 1, 1), (6, 24, 2, 2)), 10, 64) if small else MobileNetV2()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_var, 0.5, 1.5)
            nn.init.normal_(m.running_mean, 0.0, 0.1)
    size = 32 if small else 224
    return model, (torch.randn(1, 3, size, size),)


EXAMPLE = Example("mobilenet", build, ["image"])


if __name__ == "__main__":
    run_example(EXAMPLE)
