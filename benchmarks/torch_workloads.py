"""PyTorch implementations of the benchmark workloads, for comparison (torch is never a
dependency: `benchmarks.suite` uses this module only when `import torch` works).

Each follows the workloads of `benchmarks.workloads` exactly: the same canonical initial
weights (loaded by their PyTorch `state_dict` names), the same fixed batch, the same optimizer
(SGD with momentum or Adam), BatchNorm with PyTorch's momentum 0.1, exact GELU, and causal
attention through `F.scaled_dot_product_attention`; the dynamic workload uses the same
hard-example head as the others (the mean loss of the samples at or above the batch mean). Two
variants: `torch_eager`, and `torch_compile_backbone` (`torch.compile` of the backbone,
Inductor's default mode; head, loss, backward and optimizer eager). PyTorch runs with 2 threads,
as the spec's measurements do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn

from .workloads import (
    _CNN_BLOCKS,
    _GPT,
    DYNAMIC,
    NUM_CLASSES,
    Runner,
    init_params,
    make_batch,
    spec_of,
)

torch.set_num_threads(2)


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = ConvBN(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(TF.relu(self.bn1(self.conv1(x)))))
        return TF.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBN(3, 32, 3)
        blocks = {b: BasicBlock(cin, cout, s) for b, cin, cout, s in _CNN_BLOCKS}
        self.layer1 = nn.Sequential(blocks["layer1.0"], blocks["layer1.1"])
        self.layer2 = nn.Sequential(blocks["layer2.0"], blocks["layer2.1"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(self.layer1(TF.relu(self.stem(x)))).mean(dim=(2, 3))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 512), nn.Linear(512, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TF.relu(self.fc2(TF.relu(self.fc1(x))))


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (u.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for u in self.qkv(x).split(d, dim=-1))
        o = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential()
        self.mlp.fc, self.mlp.proj = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.ln1(h))
        return h + self.mlp.proj(TF.gelu(self.mlp.fc(self.ln2(h))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        d = _GPT["d"]
        self.tok_emb = nn.Embedding(_GPT["vocab"], d)
        self.pos_emb = nn.Parameter(torch.zeros(_GPT["seq"], d))
        self.blocks = nn.ModuleList(Block(d, _GPT["heads"], _GPT["hidden"])
                                    for _ in range(_GPT["blocks"]))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_emb(x) + self.pos_emb[: x.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.ln_f(h)


_MODELS = {"mlp": (MLP, 512), "cnn": (ResNet, 64), "gpt": (GPT, 128)}


class Model(nn.Module):
    def __init__(self, name: str):
        super().__init__()
        backbone, features = _MODELS[spec_of(name)]
        self.backbone, self.head = backbone(), nn.Linear(features, NUM_CLASSES[spec_of(name)])
        state = {k: torch.from_numpy(v) for k, v in init_params(name).items()}
        missing, unexpected = self.load_state_dict(state, strict=False)
        assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)


def _loss(name: str, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if name != DYNAMIC:
        return TF.cross_entropy(logits, y)
    # The samples at or above the mean loss: boolean indexing reads the mask (a count that
    # changes every step), as the eager versions' selection does.
    per_sample = TF.cross_entropy(logits, y, reduction="none")
    return per_sample[per_sample >= per_sample.mean()].mean()


class TorchRunner(Runner):
    """`zero_grad(set_to_none=True)`, forward, loss, `loss.backward()`, `opt.step()`."""

    def __init__(self, name: str, batch: int | None = None, compile_backbone: bool = False):
        self.name = name
        self.model = Model(name)
        self.backbone = torch.compile(self.model.backbone) if compile_backbone \
            else self.model.backbone
        params = list(self.model.parameters())
        if spec_of(name) == "gpt":
            self.opt: torch.optim.Optimizer = torch.optim.Adam(
                params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=True)
        else:
            self.opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
        x, y = make_batch(name, batch)
        self.x = torch.from_numpy(x).long() if spec_of(name) == "gpt" else torch.from_numpy(x)
        self.y = torch.from_numpy(y.reshape(-1)).long()

    def step(self) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        feats = self.backbone(self.x)
        loss = _loss(self.name, self.model.head(feats.reshape(-1, feats.shape[-1])), self.y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def sync(self, loss: Any) -> None:
        """PyTorch on the CPU is synchronous."""

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy() for k, v in self.model.state_dict().items()
                if not k.endswith("num_batches_tracked")}

    @staticmethod
    def float_loss(loss: Any) -> float:
        return float(loss)


def torch_eager(name: str, batch: int | None = None) -> TorchRunner:
    """PyTorch eager training step of workload `name`."""
    return TorchRunner(name, batch)


def torch_compile_backbone(name: str, batch: int | None = None) -> TorchRunner:
    """PyTorch step with `torch.compile` of the backbone (head, loss, optimizer eager)."""
    return TorchRunner(name, batch, compile_backbone=True)


VARIANTS = {"torch_eager": torch_eager, "torch_compile_backbone": torch_compile_backbone}
