"""A torchvision-style ResNet-18 twice: in eager's modules and in torch.nn (torchvision is not
a dependency), with torchvision's parameter names, so a state dict saved by one loads into the
other. torch is imported only by `torch_resnet18`."""

import eager.functional as F
import eager.module as M


class BasicBlock(M.Module):
    """torchvision's BasicBlock: conv1, bn1, conv2, bn2 and an optional `downsample`."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = M.Sequential(M.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                           M.BatchNorm2d(cout))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(M.Module):
    """torchvision's `resnet18(num_classes=...)`."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = M.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = M.BatchNorm2d(64)
        self.maxpool = M.MaxPool2d(3, stride=2, padding=1)
        widths, cin = (64, 128, 256, 512), 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", M.Sequential(BasicBlock(cin, width, stride),
                                                        BasicBlock(width, width, 1)))
            cin = width
        self.fc = M.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean(axis=(2, 3)))


def torch_resnet18(num_classes: int = 1000):
    """The same network in torch.nn, randomly initialised (BatchNorm statistics too)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(out + (x if self.downsample is None else self.downsample(x)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin = 64
            for i, width in enumerate((64, 128, 256, 512)):
                stride = 1 if i == 0 else 2
                setattr(self, f"layer{i + 1}", nn.Sequential(Block(cin, width, stride),
                                                             Block(width, width, 1)))
                cin = width
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(x.mean(dim=(2, 3)))

    net = Net()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.num_batches_tracked += 10
    return net
