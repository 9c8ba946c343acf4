"""The three peer benchmark workloads (mlp, cnn, gpt): the same work in every implementation.

For each workload this module holds the canonical data (`make_batch`) and initial weights
(`init_params`, PyTorch layout and `state_dict` names), the `eager` model with the same parameter
names, and implementations of one training step that do exactly the same work:

- `eager_step`: this framework, op by op (forward, `GradManager` backward, optimizer step);
- `partial_step`: the same with the backbone under `partial_trace` (compiled forward and
  backward segment, head and optimizer eager);
- `xla_step`: the same eager step compiled whole by `xla_trace` (state donated);
- `jax_jit_step`: pure jax, forward + backward + update in one `jax.jit` with donated state;
- `jax_split`: pure jax, jitted backbone vjp, head and loss by hand in eager `jax.numpy`, jitted
  backbone backward, jitted optimizer update (what an ideal `partial_trace` costs);
- `jax_eager`: pure jax, `jax.value_and_grad` and a `jax.tree.map` optimizer with no jit at all.

The `dynamic` workload is the mlp whose loss is the mean cross-entropy over the samples whose
loss is at or above the batch mean (OHEM-style): a count that changes with the data, nearly every
step (47 to 73 of the 128 samples; over the suite's 100 timed steps it changes on 87 steps of 99,
23 distinct counts). The eager versions select (`per_sample[per_sample >= per_sample.mean()]`:
a ragged tensor stored at the batch's size with its count on the device, as inside `xla_trace`);
the pure-jax ones use the masked form at a fixed size, the natural jax idiom (see
`masked_mean_loss`).

The jax versions keep the cnn in NCHW / OIHW layout, as the eager model does. Every implementation
returns a `Runner`: `step()` (or calling the runner) runs one training step and returns the loss
(a Tensor or a jax array), `sync(loss)` blocks until the step's loss and state are computed,
`float_loss(loss)` reads a loss, `state_dict()` returns the parameters and BatchNorm buffers as
numpy arrays under the spec's names.

The recipes leave the exact numpy calls open; this module draws normal values with
`rng.standard_normal(shape)`, uniform ones with `rng.uniform(-b, b, shape)` and labels with
`rng.integers(0, classes, shape)`, all in float64 / int64 and then cast (float32, int32).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace

WORKLOADS = ("mlp", "cnn", "gpt")
# The mlp with a dynamic head: the loss over the samples whose loss is at or above the batch mean
# (a data-dependent count that changes nearly every step).
DYNAMIC = "dynamic"
NUM_PARAMS = {"mlp": 669_706, "cnn": 170_410, "gpt": 470_784}
NUM_BUFFER_FLOATS = {"mlp": 0, "cnn": 960, "gpt": 0}
WARMUP_STEPS = {"mlp": 10, "cnn": 5, "gpt": 5}
TIMED_STEPS = {"mlp": 100, "cnn": 30, "gpt": 50}
NUM_CLASSES = {"mlp": 10, "cnn": 10, "gpt": 256}

_BN_EPS = 1e-5
_LN_EPS = 1e-5
_BN_MOMENTUM = 0.1  # PyTorch's convention: running = (1 - m) * running + m * batch
_GPT = dict(vocab=256, d=128, heads=4, seq=64, hidden=512, blocks=2, batch=16)
_SGD = dict(lr=0.01, momentum=0.9)
_ADAM = dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8)
_CNN_BLOCKS = (("layer1.0", 32, 32, 1), ("layer1.1", 32, 32, 1),
               ("layer2.0", 32, 64, 2), ("layer2.1", 64, 64, 1))


# ----- data and init ----------------------------------------------------------------------------
def spec_of(name: str) -> str:
    """The spec workload a workload's model, data and optimizer follow (`dynamic` is the mlp)."""
    return "mlp" if name == DYNAMIC else name


def make_batch(name: str, batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The fixed batch `(x, y)` of workload `name`: float32 inputs (int32 tokens for the gpt) and
    int32 labels (`[16, 64]` for the gpt; the runners flatten them to the 1024 token labels).
    `batch` keeps only the first rows (quick runs), which changes the measured work."""
    x, y = _canonical_batch(spec_of(name))
    return (x, y) if batch is None else (x[:batch], y[:batch])


def _canonical_batch(name: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([0, 1])
    if name == "mlp":
        x = rng.standard_normal((128, 784)).astype(np.float32)
        return x, rng.integers(0, 10, (128,)).astype(np.int32)
    if name == "cnn":
        x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
        return x, rng.integers(0, 10, (64,)).astype(np.int32)
    if name == "gpt":
        tokens = rng.integers(0, _GPT["vocab"], (_GPT["batch"], _GPT["seq"] + 1)).astype(np.int32)
        return tokens[:, :-1].copy(), tokens[:, 1:].copy()
    raise ValueError(f"unknown workload {name!r}; choose from {WORKLOADS}")


def _linear_spec(name: str, fan_in: int, fan_out: int, init: tuple) -> dict[str, tuple]:
    bias = init if init[0] == "uniform" else ("zeros",)
    return {f"{name}.weight": ((fan_out, fan_in), init), f"{name}.bias": ((fan_out,), bias)}


def _bn_spec(name: str, c: int) -> dict[str, tuple]:
    return {f"{name}.weight": ((c,), ("ones",)), f"{name}.bias": ((c,), ("zeros",)),
            f"{name}.running_mean": ((c,), ("zeros",)), f"{name}.running_var": ((c,), ("ones",))}


def _conv_bn_spec(name: str, conv: str, bn: str, cin: int, cout: int, k: int) -> dict:
    fan_in = cin * k * k
    return {f"{name}.{conv}.weight": ((cout, cin, k, k), ("uniform", 1 / math.sqrt(fan_in))),
            **_bn_spec(f"{name}.{bn}", cout)}


def _tensor_specs(name: str) -> dict[str, tuple]:
    """name -> (shape, init) for every parameter and buffer, in PyTorch `state_dict` order."""
    if name == "mlp":
        return {**_linear_spec("backbone.fc1", 784, 512, ("uniform", 1 / math.sqrt(784))),
                **_linear_spec("backbone.fc2", 512, 512, ("uniform", 1 / math.sqrt(512))),
                **_linear_spec("head", 512, 10, ("uniform", 1 / math.sqrt(512)))}
    if name == "cnn":
        spec = _conv_bn_spec("backbone.stem", "conv", "bn", 3, 32, 3)
        for block, cin, cout, stride in _CNN_BLOCKS:
            pre = f"backbone.{block}"
            spec |= _conv_bn_spec(pre, "conv1", "bn1", cin, cout, 3)
            spec |= _conv_bn_spec(pre, "conv2", "bn2", cout, cout, 3)
            if stride != 1 or cin != cout:
                spec |= _conv_bn_spec(f"{pre}.shortcut", "conv", "bn", cin, cout, 1)
        return spec | _linear_spec("head", 64, 10, ("uniform", 1 / math.sqrt(64)))
    if name == "gpt":
        d, hidden, normal = _GPT["d"], _GPT["hidden"], ("normal", 0.02)
        spec = {"backbone.pos_emb": ((_GPT["seq"], d), normal),
                "backbone.tok_emb.weight": ((_GPT["vocab"], d), normal)}
        for i in range(_GPT["blocks"]):
            pre = f"backbone.blocks.{i}"
            spec |= _ln_spec(f"{pre}.ln1", d)
            spec |= _linear_spec(f"{pre}.attn.qkv", d, 3 * d, normal)
            spec |= _linear_spec(f"{pre}.attn.proj", d, d, normal)
            spec |= _ln_spec(f"{pre}.ln2", d)
            spec |= _linear_spec(f"{pre}.mlp.fc", d, hidden, normal)
            spec |= _linear_spec(f"{pre}.mlp.proj", hidden, d, normal)
        return spec | _ln_spec("backbone.ln_f", d) | _linear_spec("head", d, _GPT["vocab"], normal)
    raise ValueError(f"unknown workload {name!r}; choose from {WORKLOADS}")


def _ln_spec(name: str, d: int) -> dict[str, tuple]:
    return {f"{name}.weight": ((d,), ("ones",)), f"{name}.bias": ((d,), ("zeros",))}


def _draw(name: str, shape: tuple, init: tuple) -> np.ndarray:
    rng = np.random.default_rng([0, zlib.crc32(name.encode())])
    if init[0] == "uniform":
        return rng.uniform(-init[1], init[1], shape).astype(np.float32)
    if init[0] == "normal":
        return (init[1] * rng.standard_normal(shape)).astype(np.float32)
    return (np.ones if init[0] == "ones" else np.zeros)(shape, np.float32)


def is_buffer(key: str) -> bool:
    """True for BatchNorm running statistics (state, not trained)."""
    return key.endswith((".running_mean", ".running_var"))


def init_params(name: str) -> dict[str, np.ndarray]:
    """The canonical initial state dict of workload `name`: float32 arrays in PyTorch layout under
    PyTorch `state_dict` names, parameters and (cnn) BatchNorm running statistics."""
    return {k: _draw(k, shape, init) for k, (shape, init) in _tensor_specs(spec_of(name)).items()}


# ----- eager models -----------------------------------------------------------------------------
class Model(M.Module):
    """`Model(backbone, head)`: features from the backbone, then the `Linear` head over the last
    axis (gpt features `[B, T, D]` are flattened to `[B*T, D]` first)."""

    def __init__(self, backbone: M.Module, head: M.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return self.classify(self.backbone(x))

    def classify(self, feats: eg.Tensor) -> eg.Tensor:
        """The head's logits for backbone features (token features flattened first)."""
        if feats.ndim > 2:
            feats = feats.reshape(-1, feats.shape[-1])
        return self.head(feats)


class MLPBackbone(M.Module):
    """fc1 (784 -> 512), ReLU, fc2 (512 -> 512), ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = M.Linear(784, 512)
        self.fc2 = M.Linear(512, 512)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return F.relu(self.fc2(F.relu(self.fc1(x))))


class ConvBN(M.Module):
    """A bias-free convolution with padding (k-1)//2 followed by BatchNorm2d (`conv`, `bn`)."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1):
        super().__init__()
        self.conv = M.Conv2d(cin, cout, k, stride=stride, padding=(k - 1) // 2, bias=False)
        self.bn = M.BatchNorm2d(cout)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return self.bn(self.conv(x))


class BasicBlock(M.Module):
    """ResNet basic block: two 3x3 conv+BN, identity or 1x1 conv+BN projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.shortcut = ConvBN(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc)


class ResNetBackbone(M.Module):
    """stem conv+BN+ReLU, layer1 (2 blocks of 32), layer2 (2 blocks of 64, stride 2), avg pool."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBN(3, 32, 3)
        self.layer1 = M.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 32, 1))
        self.layer2 = M.Sequential(BasicBlock(32, 64, 2), BasicBlock(64, 64, 1))

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        x = self.layer2(self.layer1(F.relu(self.stem(x))))
        return x.mean(axis=(2, 3))


class Attention(M.Module):
    """Causal multi-head self-attention with a fused `qkv` projection and an output `proj`."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = M.Linear(d, 3 * d)
        self.proj = M.Linear(d, d)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        b, t, d = x.shape
        q, k, v = (u.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)
                   for u in F.split(self.qkv(x), 3, axis=-1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(0, 2, 1, 3).reshape(b, t, d))


class MLPBlock(M.Module):
    """fc (d -> hidden), exact GELU, proj (hidden -> d)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc = M.Linear(d, hidden)
        self.proj = M.Linear(hidden, d)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(M.Module):
    """Pre-LN decoder block: h + attn(ln1(h)), then h + mlp(ln2(h))."""

    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.ln1 = M.LayerNorm(d, eps=_LN_EPS)
        self.attn = Attention(d, heads)
        self.ln2 = M.LayerNorm(d, eps=_LN_EPS)
        self.mlp = MLPBlock(d, hidden)

    def forward(self, h: eg.Tensor) -> eg.Tensor:
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


class GPTBackbone(M.Module):
    """Token and learned position embeddings, 2 pre-LN blocks, final LayerNorm. The sizes
    default to the workload's (`_GPT`); others give a wider or deeper GPT of the same shape."""

    def __init__(self, d: int | None = None, heads: int | None = None,
                 hidden: int | None = None, blocks: int | None = None) -> None:
        super().__init__()
        d = d or _GPT["d"]
        self.tok_emb = M.Embedding(_GPT["vocab"], d)
        self.pos_emb = eg.Parameter(eg.zeros((_GPT["seq"], d)))
        self.blocks = M.ModuleList([Block(d, heads or _GPT["heads"], hidden or _GPT["hidden"])
                                    for _ in range(blocks or _GPT["blocks"])])
        self.ln_f = M.LayerNorm(d, eps=_LN_EPS)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        h = self.tok_emb(x) + self.pos_emb[: x.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.ln_f(h)


_BACKBONES = {"mlp": (MLPBackbone, 512), "cnn": (ResNetBackbone, 64), "gpt": (GPTBackbone, 128)}


def build_model(name: str, **sizes: int) -> Model:
    """The eager `Model(backbone, head)` of workload `name`, loaded with `init_params(name)`.
    `sizes` (gpt only: `GPTBackbone`'s d, heads, hidden, blocks) builds a resized GPT instead,
    with the modules' own initialization (the canonical weights fit only the canonical sizes)."""
    backbone, features = _BACKBONES[spec_of(name)]
    if sizes:
        features = sizes.get("d") or features
        return Model(backbone(**sizes), M.Linear(features, NUM_CLASSES[spec_of(name)]))
    model = Model(backbone(), M.Linear(features, NUM_CLASSES[spec_of(name)]))
    model.load_state_dict(init_params(name))
    return model


# ----- runners: the common interface ------------------------------------------------------------
class Runner:
    """One implementation of a workload's training step (see the module docstring)."""

    def step(self) -> Any:
        """Run one training step on the fixed batch; return its loss (not blocked on)."""
        raise NotImplementedError

    def __call__(self) -> Any:
        """Same as `step()`: a runner is the step function."""
        return self.step()

    def sync(self, loss: Any) -> None:
        """Block until `loss` and the updated parameters, buffers and optimizer state exist."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameters and BatchNorm buffers as numpy arrays, PyTorch layout and names."""
        raise NotImplementedError

    def step_memory(self) -> int | None:
        """Bytes the compiled whole-step executable needs at its peak, by XLA's analysis
        (arguments + outputs + temporaries - outputs written into donated arguments), for
        variants that compile the whole step; None otherwise."""
        return None

    @staticmethod
    def float_loss(loss: Any) -> float:
        """The value of a loss returned by `step`."""
        return float(np.asarray(eg.read(loss) if isinstance(loss, eg.Tensor) else loss))


def hard_example_loss(logits: eg.Tensor, labels: eg.Tensor) -> eg.Tensor:
    """Mean cross-entropy over the samples whose loss is at or above the batch mean (OHEM-style):
    the dynamic workload's head. The threshold stays on the device, and so does the count: a
    selection from 128 candidates returns a ragged tensor stored at their size with its length
    on the device (nothing read on the host, one program per op for every count); inside
    `xla_trace` it is the same masked computation."""
    per_sample = F.cross_entropy(logits, labels, reduction="none")
    return per_sample[per_sample >= per_sample.mean()].mean()


class EagerRunner(Runner):
    """The `eager` step: forward, mean CE (the dynamic head for `dynamic`), `gm.backward`,
    `opt.step().clear_grad()`."""

    def __init__(self, name: str, batch: int | None = None):
        self.model = build_model(name)
        self.loss = hard_example_loss if name == DYNAMIC else F.cross_entropy
        params = self.model.parameters()
        if name == "gpt":
            self.opt: optim.Optimizer = optim.Adam(params, lr=_ADAM["lr"],
                                                   betas=(_ADAM["b1"], _ADAM["b2"]),
                                                   eps=_ADAM["eps"])
        else:
            self.opt = optim.SGD(params, lr=_SGD["lr"], momentum=_SGD["momentum"])
        self.gm = GradManager().attach(params)
        x, y = make_batch(name, batch)
        self.x, self.y = eg.tensor(x), eg.tensor(y.reshape(-1))
        self._state = params + self.model.buffers() + [
            t for s in self.opt.state.values() for t in s.values()]

    def step(self) -> eg.Tensor:
        with self.gm:
            loss = self.loss(self.model(self.x), self.y)
            self.gm.backward(loss)
        self.opt.step().clear_grad()
        return loss

    def sync(self, loss: Any) -> None:
        # hooks.data, not eg.read: a raw array handed out is copied, not donated, by the next step
        jax.block_until_ready((eg.hooks.data(loss), [eg.hooks.data(t) for t in self._state]))

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.model.state_dict())


class PartialRunner(EagerRunner):
    """The eager step with the backbone under `partial_trace`: one compiled forward and one
    compiled backward segment; head, loss, backward pass and optimizer stay eager. `remat` is
    `partial_trace`'s rematerialization option for the backbone (False: none)."""

    def __init__(self, name: str, batch: int | None = None, remat: bool | str = False):
        super().__init__(name, batch)
        self.backbone = partial_trace(self.model.backbone, remat=remat)

    def step(self) -> eg.Tensor:
        with self.gm:
            loss = self.loss(self.model.classify(self.backbone(self.x)), self.y)
            self.gm.backward(loss)
        self.opt.step().clear_grad()
        return loss


class XlaRunner(EagerRunner):
    """The whole eager step (forward, `gm.backward`, `opt.step().clear_grad()`) under
    `xla_trace`: one executable per step, parameters and optimizer state donated."""

    def __init__(self, name: str, batch: int | None = None):
        super().__init__(name, batch)
        self._step = xla_trace(super().step)

    def step(self) -> eg.Tensor:
        return self._step()

    def step_memory(self) -> int | None:
        return peak_bytes(self._step.segments()[-1].forward().memory_analysis())


def peak_bytes(stats: Any) -> int | None:
    """Peak bytes of an executable from XLA's `memory_analysis()` (None if unavailable)."""
    if stats is None:
        return None
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def xla_step(name: str, batch: int | None = None) -> XlaRunner:
    """The training step of workload `name` compiled whole by `xla_trace`."""
    return XlaRunner(name, batch)


def partial_step(name: str, batch: int | None = None,
                 remat: bool | str = False) -> PartialRunner:
    """The training step of workload `name` with its backbone compiled by `partial_trace`
    (`remat`: its rematerialization option, False, True or "dots")."""
    return PartialRunner(name, batch, remat)


def eager_step(name: str, batch: int | None = None) -> EagerRunner:
    """The eager training step of workload `name` (model, SGD/Adam and GradManager per spec)."""
    return EagerRunner(name, batch)


# ----- pure jax: model functions over the state dict --------------------------------------------
def _linear(p: dict, name: str, x: jax.Array) -> jax.Array:
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def _relu(x: jax.Array) -> jax.Array:
    return jnp.where(x > 0, x, 0.0)


def _mlp_backbone(p: dict, bn: dict, x: jax.Array) -> tuple[jax.Array, dict]:
    h = _relu(_linear(p, "backbone.fc1", x))
    return _relu(_linear(p, "backbone.fc2", h)), {}


def _conv(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    pad = (w.shape[-1] - 1) // 2
    return lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _batch_norm(p: dict, bn: dict, new_bn: dict, name: str, x: jax.Array) -> jax.Array:
    """Train-mode BatchNorm over (N, H, W); stores the updated running statistics in `new_bn`."""
    mean = jnp.mean(x, axis=(0, 2, 3))
    centered = x - mean[None, :, None, None]
    var = jnp.mean(centered * centered, axis=(0, 2, 3))
    scale = p[f"{name}.weight"] / jnp.sqrt(var + _BN_EPS)
    n = x.size // x.shape[1]
    m = _BN_MOMENTUM
    new_bn[f"{name}.running_mean"] = (1 - m) * bn[f"{name}.running_mean"] + m * mean
    new_bn[f"{name}.running_var"] = (1 - m) * bn[f"{name}.running_var"] + m * var * (n / (n - 1))
    return centered * scale[None, :, None, None] + p[f"{name}.bias"][None, :, None, None]


def _cnn_backbone(p: dict, bn: dict, x: jax.Array) -> tuple[jax.Array, dict]:
    new_bn: dict = {}

    def conv_bn(name: str, conv: str, norm: str, x: jax.Array, stride: int) -> jax.Array:
        y = _conv(x, p[f"{name}.{conv}.weight"], stride)
        return _batch_norm(p, bn, new_bn, f"{name}.{norm}", y)

    x = _relu(conv_bn("backbone.stem", "conv", "bn", x, 1))
    for block, cin, cout, stride in _CNN_BLOCKS:
        pre = f"backbone.{block}"
        out = _relu(conv_bn(pre, "conv1", "bn1", x, stride))
        out = conv_bn(pre, "conv2", "bn2", out, 1)
        sc = x if stride == 1 and cin == cout else conv_bn(f"{pre}.shortcut", "conv", "bn", x,
                                                            stride)
        x = _relu(out + sc)
    return jnp.mean(x, axis=(2, 3)), new_bn


def _layer_norm(p: dict, name: str, x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + _LN_EPS) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _attention(p: dict, name: str, a: jax.Array) -> jax.Array:
    b, t, d = a.shape
    heads = _GPT["heads"]
    q, k, v = (u.reshape(b, t, heads, d // heads).swapaxes(1, 2)
               for u in jnp.split(_linear(p, f"{name}.qkv", a), 3, axis=-1))
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(d // heads)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    o = jax.nn.softmax(scores, axis=-1) @ v
    return _linear(p, f"{name}.proj", o.swapaxes(1, 2).reshape(b, t, d))


def _gpt_backbone(p: dict, bn: dict, x: jax.Array) -> tuple[jax.Array, dict]:
    h = jnp.take(p["backbone.tok_emb.weight"], x, axis=0) + p["backbone.pos_emb"][: x.shape[1]]
    for i in range(_GPT["blocks"]):
        pre = f"backbone.blocks.{i}"
        h = h + _attention(p, f"{pre}.attn", _layer_norm(p, f"{pre}.ln1", h))
        m = jax.nn.gelu(_linear(p, f"{pre}.mlp.fc", _layer_norm(p, f"{pre}.ln2", h)),
                        approximate=False)
        h = h + _linear(p, f"{pre}.mlp.proj", m)
    return _layer_norm(p, "backbone.ln_f", h), {}


_JAX_BACKBONES = {"mlp": _mlp_backbone, "cnn": _cnn_backbone, "gpt": _gpt_backbone}


def masked_mean_loss(per_sample: jax.Array) -> jax.Array:
    """The dynamic head in jax: the mean of the per-sample losses at or above their mean.

    How a jax user writes a data-dependent count: `per_sample[mask]` is not jittable (its shape
    depends on the values) and, outside jit, reads the mask on the host and makes every later op
    compile once per count; the masked form keeps the batch's fixed size, needs no host read and
    compiles once, jitted or not. The mask is a comparison, so no gradient flows through the
    threshold, as with a selection."""
    keep = per_sample >= jnp.mean(per_sample)
    return jnp.sum(jnp.where(keep, per_sample, 0.0)) / jnp.sum(keep)


def _loss(backbone: Callable, params: dict, bn: dict, x: jax.Array, y: jax.Array,
          dynamic: bool = False) -> tuple[jax.Array, dict]:
    """Mean cross-entropy of the model's logits (the dynamic head's masked mean if `dynamic`)."""
    feats, new_bn = backbone(params, bn, x)
    logits = _linear(params, "head", feats.reshape(-1, feats.shape[-1]))
    logp = jax.nn.log_softmax(logits, axis=1)
    per_sample = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
    return (masked_mean_loss(per_sample) if dynamic else jnp.mean(per_sample)), new_bn


# ----- pure jax: optimizers ---------------------------------------------------------------------
def _opt_init(name: str, params: dict) -> dict:
    zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
    if name == "gpt":
        return {"step": jnp.zeros((), jnp.int32), "m": zeros,
                "v": {k: jnp.zeros_like(v) for k, v in params.items()}}
    return {"buf": zeros}


def _sgd_update(params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
    lr, mu = _SGD["lr"], _SGD["momentum"]
    buf = jax.tree.map(lambda b, g: mu * b + g, state["buf"], grads)
    return jax.tree.map(lambda p, b: p - lr * b, params, buf), {"buf": buf}


def _adam_update(params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
    lr, b1, b2, eps = _ADAM["lr"], _ADAM["b1"], _ADAM["b2"], _ADAM["eps"]
    step = state["step"] + 1
    t = step.astype(jnp.float32)
    step_size = lr / (1 - b1**t)
    root_bc2 = jnp.sqrt(1 - b2**t)
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
    new = jax.tree.map(lambda p, m, v: p - step_size * m / (jnp.sqrt(v) / root_bc2 + eps),
                       params, m, v)
    return new, {"step": step, "m": m, "v": v}


def _optimizer(name: str) -> Callable[[dict, dict, dict], tuple[dict, dict]]:
    return _adam_update if name == "gpt" else _sgd_update


# ----- pure jax: runners ------------------------------------------------------------------------
class _JaxRunner(Runner):
    """Shared state of the pure-jax runners: params, BN state, optimizer state, the batch."""

    def __init__(self, name: str, batch: int | None = None):
        state = init_params(name)
        self.name = name
        self.params = {k: jnp.asarray(v) for k, v in state.items() if not is_buffer(k)}
        self.bn = {k: jnp.asarray(v) for k, v in state.items() if is_buffer(k)}
        self.opt_state = _opt_init(spec_of(name), self.params)
        x, y = make_batch(name, batch)
        self.x, self.y = jnp.asarray(x), jnp.asarray(y.reshape(-1))
        self.backbone = _JAX_BACKBONES[spec_of(name)]
        self.update = _optimizer(spec_of(name))

    def sync(self, loss: Any) -> None:
        jax.block_until_ready((loss, self.params, self.bn, self.opt_state))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in {**self.params, **self.bn}.items()}


class JaxJitStep(_JaxRunner):
    """Forward, backward and optimizer update in one `jax.jit`, state donated (the dynamic head
    in its masked form, `masked_mean_loss`)."""

    def __init__(self, name: str, batch: int | None = None):
        super().__init__(name, batch)
        backbone, update, dynamic = self.backbone, self.update, name == DYNAMIC

        def train_step(params, opt_state, bn, x, y):
            (loss, new_bn), grads = jax.value_and_grad(
                lambda p: _loss(backbone, p, bn, x, y, dynamic), has_aux=True)(params)
            params, opt_state = update(params, grads, opt_state)
            return params, opt_state, new_bn, loss

        self._step = jax.jit(train_step, donate_argnums=(0, 1, 2))

    def step(self) -> jax.Array:
        self.params, self.opt_state, self.bn, loss = self._step(
            self.params, self.opt_state, self.bn, self.x, self.y)
        return loss

    def step_memory(self) -> int | None:
        compiled = self._step.lower(self.params, self.opt_state, self.bn, self.x,
                                    self.y).compile()
        return peak_bytes(compiled.memory_analysis())


class JaxSplit(_JaxRunner):
    """Jitted backbone vjp; head, CE and head gradients by hand with eager `jax.numpy`; jitted
    backbone backward; jitted optimizer update with params and optimizer state donated.

    The dynamic head is the masked form of `masked_mean_loss`, op by op like the rest of the
    head: per-sample weights `keep / sum(keep)` at the batch's fixed size, so a count that
    changes every step costs neither a host read nor a compile (the fairest, fastest pure-jax
    reference; `per_sample[keep]` in eager jax would read the mask and compile per count)."""

    def __init__(self, name: str, batch: int | None = None):
        super().__init__(name, batch)
        backbone = self.backbone

        def fwd(bb_params, bn, x):
            feats, vjp, new_bn = jax.vjp(lambda p: backbone(p, bn, x), bb_params, has_aux=True)
            return feats, vjp, new_bn

        self._fwd = jax.jit(fwd)
        self._bwd = jax.jit(lambda vjp, g: vjp(g)[0])
        self._update = jax.jit(self.update, donate_argnums=(0, 2))
        self._classes = jnp.arange(NUM_CLASSES[spec_of(name)], dtype=self.y.dtype)

    def step(self) -> jax.Array:
        bb = {k: v for k, v in self.params.items() if k.startswith("backbone.")}
        feats, vjp, self.bn = self._fwd(bb, self.bn, self.x)
        loss, head_grads, d_feats = self._head(feats)
        grads = self._bwd(vjp, d_feats) | head_grads
        self.params, self.opt_state = self._update(self.params, grads, self.opt_state)
        return loss

    def _head(self, feats: jax.Array) -> tuple[jax.Array, dict, jax.Array]:
        """Head forward, mean CE and its gradients, op by op: (loss, head grads, d feats)."""
        w, b = self.params["head.weight"], self.params["head.bias"]
        f = feats.reshape(-1, feats.shape[-1])
        logits = f @ w.T + b
        z = logits - jnp.max(logits, axis=1, keepdims=True)
        logp = z - jnp.log(jnp.sum(jnp.exp(z), axis=1, keepdims=True))
        onehot = (self.y[:, None] == self._classes).astype(logp.dtype)
        if self.name == DYNAMIC:  # the samples at or above the mean loss, masked (no host read)
            per_sample = -jnp.sum(logp * onehot, axis=1)
            keep = (per_sample >= jnp.mean(per_sample)).astype(logp.dtype)
            weight = (keep / jnp.sum(keep))[:, None]
        else:
            weight = 1.0 / f.shape[0]
        loss = -jnp.sum(logp * onehot * weight)
        d_logits = (jnp.exp(logp) - onehot) * weight
        grads = {"head.weight": d_logits.T @ f, "head.bias": jnp.sum(d_logits, axis=0)}
        return loss, grads, (d_logits @ w).reshape(feats.shape)


class JaxEager(_JaxRunner):
    """`jax.value_and_grad` and a `jax.tree.map` optimizer, no jit: op-by-op dispatch (the
    dynamic head in its masked form, `masked_mean_loss`)."""

    def step(self) -> jax.Array:
        dynamic = self.name == DYNAMIC
        (loss, self.bn), grads = jax.value_and_grad(
            lambda p: _loss(self.backbone, p, self.bn, self.x, self.y, dynamic),
            has_aux=True)(self.params)
        self.params, self.opt_state = self.update(self.params, grads, self.opt_state)
        return loss


def jax_jit_step(name: str, batch: int | None = None) -> JaxJitStep:
    """Pure-jax reference: the whole training step of workload `name` in one donated `jax.jit`."""
    return JaxJitStep(name, batch)


def jax_split(name: str, batch: int | None = None) -> JaxSplit:
    """Pure-jax split step of workload `name`: jitted backbone fwd/bwd, eager-jnp head."""
    return JaxSplit(name, batch)


def jax_eager(name: str, batch: int | None = None) -> JaxEager:
    """Pure-jax op-by-op step of workload `name`: no jit anywhere."""
    return JaxEager(name, batch)


VARIANTS: dict[str, Callable[..., Runner]] = {
    "eager": eager_step, "partial": partial_step, "xla": xla_step, "jax_eager": jax_eager,
    "jax_jit_step": jax_jit_step, "jax_split": jax_split,
}


def variants_for(name: str) -> list[str]:
    """The variants that apply to workload `name`: all of them (the dynamic head included: a
    whole step holds it as a masked computation)."""
    return list(VARIANTS)
