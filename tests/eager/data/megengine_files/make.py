"""Regenerate the MegEngine fixtures of `tests/eager/test_foreign_checkpoints.py` with real
MegEngine 1.13 (the project's tests read them without MegEngine):

    cd /tmp && /path/to/megengine-python /work/main/tests/eager/data/megengine_files/make.py

Each `<name>.mge` is written by `megengine.save`, as a user would write it; `expected.npz` holds
the inputs and MegEngine's outputs (numpy's own format, read with `allow_pickle=False`).
"""

from pathlib import Path

import megengine as mge
import megengine.functional as F
import megengine.module as M
import megengine.optimizer as optim
import numpy as np
from megengine.autodiff import GradManager

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(0)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


class ConvNet(M.Module):
    """A grouped conv, BatchNorm, a depthwise conv, a grouped transposed conv and a Linear. The
    first conv has no bias: BatchNorm cancels its gradient, and Adam would amplify the
    round-off that is left into steps that differ between frameworks."""

    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(4, 8, 3, padding=1, groups=2, bias=False)
        self.bn = M.BatchNorm2d(8)
        self.dw = M.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = M.ConvTranspose2d(8, 4, 2, stride=2, groups=2)
        self.fc = M.Linear(4, 3)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.up(self.dw(x))
        return self.fc(x.mean(axis=(2, 3)))


def params(net):
    return {name: p.numpy().copy() for name, p in net.named_parameters()}


def steps(net, opt, x, n):
    gm = GradManager().attach(net.parameters())
    for _ in range(n):
        with gm:
            gm.backward((net(x) ** 2).sum())
        opt.step().clear_grad()


def convnet(out):
    """convnet.mge: the state after two SGD steps (BatchNorm statistics updated); sgd.mge and
    adam.mge: the optimizers' state after two steps from the same start; expected: the eval
    output and the parameters after a third step."""
    net = ConvNet()
    x = mge.tensor(randn(2, 4, 5, 5))
    start = net.state_dict()
    out["convnet.x"] = x.numpy()
    out["convnet.order"] = np.array([name for name, _ in net.named_parameters()])
    for name, make in (("sgd", lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9)),
                       ("adam", lambda ps: optim.Adam(ps, lr=0.01))):
        net.load_state_dict(start)
        net.train()
        opt = make(net.parameters())
        steps(net, opt, x, 2)
        mge.save(opt.state_dict(), str(HERE / f"{name}.mge"))
        if name == "sgd":
            mge.save(net.state_dict(), str(HERE / "convnet.mge"))
            net.eval()
            out["convnet.y"] = net(x).numpy()
            net.train()
        else:
            out.update({f"adam.step2.{k}": v for k, v in net.state_dict().items()})
        steps(net, opt, x, 1)
        out.update({f"{name}.step3.{k}": v for k, v in params(net).items()})


def layernorm(out):
    ln = M.LayerNorm((3, 4))
    ln.weight[...] = randn(3, 4)
    ln.bias[...] = randn(3, 4)
    x = randn(2, 5, 3, 4)
    mge.save(ln.state_dict(), str(HERE / "layernorm.mge"))
    out.update({"layernorm.x": x, "layernorm.y": ln(mge.tensor(x)).numpy()})


def recurrent(out):
    x = randn(4, 2, 3)
    out["lstm.x"] = x
    lstm = M.LSTM(3, 4, num_layers=2, bidirectional=True)
    y, (h, c) = lstm(mge.tensor(x))
    mge.save(lstm.state_dict(), str(HERE / "lstm.mge"))
    out.update({"lstm.y": y.numpy(), "lstm.h": h.numpy(), "lstm.c": c.numpy()})
    rnn = M.RNN(3, 4, nonlinearity="relu", batch_first=True)
    y, h = rnn(mge.tensor(x))
    mge.save(rnn.state_dict(), str(HERE / "rnn.mge"))
    out.update({"rnn.y": y.numpy(), "rnn.h": h.numpy()})


def attention(out):
    mha = M.MultiHeadAttention(8, 2)
    mha.io_weight_bias[...] = randn(1, 288, scale=0.3)
    q, k = randn(2, 3, 8), randn(2, 4, 8)
    y = mha(mge.tensor(q), mge.tensor(k), mge.tensor(k))[0]
    mge.save(mha.state_dict(), str(HERE / "mha.mge"))
    out.update({"mha.q": q, "mha.k": k, "mha.y": y.numpy()})


def tensors(out):
    """Objects a checkpoint holds besides state dicts: MegEngine Tensors and Parameters of
    several dtypes, numpy arrays and scalars, plain Python values."""
    w = randn(2, 3)
    obj = {
        "epoch": 3, "name": "run", "lr": 0.5, "none": None, "flags": (True, False),
        "w": mge.tensor(w), "p": mge.Parameter(w[0]), "i": mge.tensor([1, -2], dtype="int32"),
        "h": mge.tensor([0.5, -1.5], dtype="float16"), "np": np.arange(6, dtype="int64"),
        "scalar": np.float32(2.5), "nested": [{"t": mge.tensor([[1.0], [2.0]])}],
    }
    mge.save(obj, str(HERE / "tensors.mge"))
    out["tensors.w"] = w


if __name__ == "__main__":
    mge.random.seed(0)
    out = {}
    for make in (convnet, layernorm, recurrent, attention, tensors):
        make(out)
    np.savez_compressed(HERE / "expected.npz", **out)
    print(sorted((p.name, p.stat().st_size) for p in HERE.iterdir()))
