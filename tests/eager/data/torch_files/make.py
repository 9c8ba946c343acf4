"""Regenerate the PyTorch fixtures of `tests/eager/test_foreign_checkpoints.py` with torch (the
project's tests read them without torch):

    python tests/eager/data/torch_files/make.py

`small.pt` is `torch.save(model.state_dict())` of the conv net of the MegEngine fixtures
(grouped, depthwise and grouped transposed convolutions, BatchNorm, so `num_batches_tracked`);
`tensors.pt` holds tensors that are views (transposed, offset, sharing a storage) and of
several dtypes, a Parameter and plain values; `legacy.pt` is the non-zip format
(`_use_new_zipfile_serialization=False`). `expected.npz` holds their values and the model's
eval-mode output (numpy's own format, read with `allow_pickle=False`).
"""

from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


class ConvNet(torch.nn.Module):
    """The network of `data/megengine_files/make.py` and of the test, in torch.nn."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1, groups=2, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2, groups=2)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.up(self.dw(x))
        return self.fc(x.mean(dim=(2, 3)))


def small(out: dict) -> None:
    net = ConvNet()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 1.5)
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.num_batches_tracked += 7
    x = torch.randn(2, 4, 5, 5)
    torch.save(net.state_dict(), HERE / "small.pt")
    net.eval()
    out.update({f"small.{k}": v.numpy() for k, v in net.state_dict().items()})
    out.update({"small.x": x.numpy(), "small.y": net(x).detach().numpy()})


def tensors(out: dict) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    obj = {
        "t": base.t(), "view": base[1:3, 2:5], "row": base[2], "shared": base,
        "bf16": torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16),
        "f16": torch.tensor([[0.5], [-1.0]], dtype=torch.float16),
        "i64": torch.tensor([3, -1, 7]), "bool": torch.tensor([True, False, True]),
        "u8": torch.arange(5, dtype=torch.uint8), "f64": torch.tensor([0.25, 1e-3]),
        "scalar": torch.tensor(2.5), "param": torch.nn.Parameter(torch.ones(2, 2)),
        "plain": [1, 2.5, "s", None, (True, b"raw")],
    }
    torch.save(obj, HERE / "tensors.pt")
    for k, v in obj.items():
        if isinstance(v, torch.Tensor):
            out[f"tensors.{k}"] = v.detach().float().numpy() if k == "bf16" else v.detach().numpy()
    torch.save({"w": base[:2], "b": torch.tensor([1, 2])}, HERE / "legacy.pt",
               _use_new_zipfile_serialization=False)


if __name__ == "__main__":
    torch.manual_seed(0)
    out: dict = {}
    small(out)
    tensors(out)
    np.savez_compressed(HERE / "expected.npz", **out)
    print(sorted((p.name, p.stat().st_size) for p in HERE.iterdir()))
