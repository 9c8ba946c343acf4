"""Parity cases for quantization-aware training (eager/module/qat/,
eager/quantization/quantize.py): a small QAT model as the zoo's quantization models are built
(QuantStub, ConvBnRelu2d, a grouped ConvBnRelu2d with a bias, ConvBn2d, Elemwise
FUSE_ADD_RELU, DequantStub, a float classifier marked by `disable_quantize`), converted by
`quantize_qat` from the same weights on both sides: the forward, loss and gradients of one
training step, the observers' and BatchNorms' statistics after it, and the eval forward with
the folded weights.
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data


def _net():
    import megengine.functional as F
    import megengine.module as M

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = M.QuantStub(), M.DequantStub()
            self.stem = M.ConvBnRelu2d(3, 8, 3, stride=2, padding=1, bias=False)
            self.conv1 = M.ConvBnRelu2d(8, 8, 3, padding=1, groups=2, bias=True)
            self.conv2 = M.ConvBn2d(8, 8, 1, bias=False)
            self.add = M.Elemwise("FUSE_ADD_RELU")
            self.fc = M.Linear(8, 4)
            self.fc.disable_quantize()

        def forward(self, x):
            x = self.stem(self.quant(x))
            x = self.add(self.conv2(self.conv1(x)), x)
            return self.fc(self.dequant(F.flatten(F.avg_pool2d(x, 4), 1)))

    net = Net()
    state = {}
    for i, (name, value) in enumerate(sorted(net.state_dict().items())):
        v = data(*np.shape(value), seed=100 + i)
        if name.endswith("running_var") or name.endswith("bn.weight"):
            v = np.abs(v) + 0.5
        state[name] = (v * 0.5).astype("float32")
    net.load_state_dict(state)
    return net


STATS = ("min_val", "max_val", "running_mean", "running_var")


@case(rtol=1e-4, atol=1e-5)
def qat_model_training_step_from_the_same_weights() -> dict:
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager
    from megengine.quantization import ema_fakequant_qconfig
    from megengine.quantization.quantize import quantize_qat

    net = quantize_qat(_net(), qconfig=ema_fakequant_qconfig)
    net.train()
    params = dict(net.named_parameters())
    gm = GradManager().attach(list(params.values()))
    x = mge.tensor(data(4, 3, 8, 8, seed=1))
    labels = mge.tensor(np.array([0, 1, 2, 3], dtype="int32"))
    with gm:
        out = net(x)
        loss = F.loss.cross_entropy(out, labels)
        gm.backward(loss)
    stats = {k: np.asarray(v).reshape(-1) for k, v in net.state_dict().items()
             if k.endswith(STATS)}
    net.eval()
    folded = net(mge.tensor(data(2, 3, 8, 8, seed=2)))
    return {"out": out.numpy(), "loss": loss.numpy(), "stats": stats,
            "grads": {k: p.grad.numpy().reshape(-1) for k, p in params.items()},
            "eval": folded.numpy()}
