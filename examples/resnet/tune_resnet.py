"""CNN: a ResNet-18 (basic residual blocks, batch norm, ReLU, max and average pooling), exported to ONNX,
tuned, compiled, checked. Batch norms fold into the convolutions; convolutions run channels-last; each conv's
bias, residual add and ReLU run in its loop nest.

    python examples/resnet/tune_resnet.py          # ResNet-18 at 224x224, 3 minutes of tuning
    python examples/resnet/tune_resnet.py --small --time 30s --db /tmp/resnet.db
"""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.down(x))


class ResNet(nn.Module):
    def __init__(self, widths=(64, 128, 256, 512), blocks=2, n_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, cout in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if b == 0 and i > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, n_classes)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def build(small: bool):
    model = ResNet((16, 32), 1, 10) if small else ResNet()
    for m in model.modules():  # random batch-norm statistics, as a trained model has
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_var, 0.5, 1.5)
            nn.init.normal_(m.running_mean, 0.0, 0.1)
    return model, (torch.randn(1, 3, 32 if small else 224, 32 if small else 224),)


if __name__ == "__main__":
    from autosched.models.family_example import run_example

    run_example("resnet", build, ["image"])
