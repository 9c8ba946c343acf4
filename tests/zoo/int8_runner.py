"""A zoo quantization model's int8 inference on one side, as arrays in an `.npz` file.

    python int8_runner.py megengine MODEL WORK OUT   # real MegEngine, on MegEngine's interpreter
    python int8_runner.py project MODEL WORK OUT     # this project, `megengine*` aliased to it

The MegEngine side builds MODEL as `qat_runner.build` does (seeded, `quantize_qat(model,
ema_fakequant_qconfig)`), runs training-mode forwards of `WORK/calib*.npy` as the zoo's
`train.py --mode qat` does, without its optimizer steps (the observers gather statistics and
BatchNorm's running statistics move, so the folded biases are not zero), saves the QAT `state_dict`
(`WORK/MODEL.qat.pkl`), converts with `quantize(model)` and saves the int8 `state_dict`
(`WORK/MODEL.int8.pkl`: int8 weights in quantized dtypes with their scales, float biases).

The project side converts its own build, loads the QAT state (same observers, so the same
scales), converts with its `quantize` and records its int8 weights ("converted"); then loads
MegEngine's int8 state into that model, so both run the same integer weights.

Both then run `WORK/image.npy` through the int8 model and record: the logits, the input of the
DequantStub (the last int8 activation) and the output of every int8 leaf module, as integer
storage, with each output dtype's scale (`scale/NAME`); MegEngine's side also every leaf
module's quantized inputs (`in/NAME/I`). The project side records three runs: its conversion
(`converted/`), MegEngine's int8 state loaded, and that state with every leaf module fed
MegEngine's inputs from `WORK/megengine.npz` (`forced/`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qat_runner import build  # a script beside its sibling, not a package


def _mgb(dtype: Any) -> dict | None:
    return (getattr(dtype, "metadata", None) or {}).get("mgb_dtype")


def storage(value: Any) -> np.ndarray:
    """A quantized array's integer storage (its dtype's metadata dropped)."""
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    return array.view(np.dtype(array.dtype.str))


def int8_state(state: dict[str, Any]) -> dict[str, np.ndarray]:
    """An int8 `state_dict`: the quantized entries' storage and scales (`weight/`, `wscale/`),
    the float ones (`float/`: folded biases, the float classifier) flattened."""
    out = {}
    for name, value in state.items():
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        info = _mgb(array.dtype)
        if info is not None:
            out[f"weight/{name}"] = storage(array)
            out[f"wscale/{name}"] = np.float32(info["scale"])
        else:
            out[f"float/{name}"] = array.reshape(-1)  # MegEngine keeps biases 4-d
    return out


def _leaves(model: Any) -> list[tuple[str, Any]]:
    return [(n, m) for n, m in model.named_modules()
            if n and (n == "dequant" or not list(m.children()))]


def record(model: Any, image: np.ndarray, megengine: Any,
           inputs: bool = False) -> dict[str, np.ndarray]:
    """The int8 model's logits, and every leaf module's quantized output (with `inputs`, its
    quantized inputs too: `in/NAME/I`), on `image`."""
    out: dict[str, np.ndarray] = {}

    def keep(name: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if name == "dequant":
                out["last"] = storage(args[0])
            for i, arg in enumerate(args if inputs else ()):
                if _mgb(getattr(arg, "dtype", None)) is not None:
                    out[f"in/{name}/{i}"] = storage(arg)
            info = _mgb(getattr(output, "dtype", None))
            if info is not None:
                out[f"out/{name}"] = storage(output)
                out[f"scale/{name}"] = np.float32(info["scale"])
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in _leaves(model)]
    model.eval()
    out["logits"] = model(megengine.tensor(image)).numpy()
    for handle in handles:
        handle.remove()
    return out


def forced(model: Any, image: np.ndarray, theirs: dict[str, np.ndarray],
           megengine: Any) -> dict[str, np.ndarray]:
    """`record`, each leaf module fed MegEngine's quantized inputs instead of its own (a
    difference then stays in the layer that makes it)."""
    def feed(name: str) -> Any:
        def hook(module: Any, args: Any) -> tuple:
            return tuple(megengine.tensor(theirs[f"in/{name}/{i}"].view(arg.dtype))
                         if f"in/{name}/{i}" in theirs else arg for i, arg in enumerate(args))
        return hook

    handles = [m.register_forward_pre_hook(feed(n)) for n, m in _leaves(model)]
    out = record(model, image, megengine)
    for handle in handles:
        handle.remove()
    return out


def megengine_side(name: str, work: str, inputs: dict[str, np.ndarray]) -> dict:
    import megengine
    import megengine.quantization as Q

    megengine.config.async_level = 0  # on CPU, asynchronous dispatch gives wrong values
    model = build(name, megengine)
    model.train()  # train.py --mode qat's forwards: observers on, BatchNorm's statistics move
    for key in sorted(k for k in inputs if k.startswith("calib")):
        model(megengine.tensor(inputs[key]))
    megengine.save(model.state_dict(), os.path.join(work, f"{name}.qat.pkl"))
    Q.quantize(model)
    state = model.state_dict()
    megengine.save(state, os.path.join(work, f"{name}.int8.pkl"))
    return {**int8_state(state), **record(model, inputs["image"], megengine, inputs=True)}


def project_side(name: str, work: str, inputs: dict[str, np.ndarray]) -> dict:
    import partial

    with np.load(os.path.join(work, "megengine.npz")) as saved:
        theirs = {k: saved[k] for k in saved.files if k.startswith("in/")}

    partial.alias_megengine()
    import megengine
    import megengine.quantization as Q

    model = build(name, megengine)
    model.load_state_dict(megengine.load(os.path.join(work, f"{name}.qat.pkl")))
    Q.quantize(model)
    converted = int8_state(model.state_dict())
    out = {f"converted/{k}": v for k, v in converted.items()}
    converted_run = record(model, inputs["image"], megengine)
    out.update({f"converted/{k}": v for k, v in converted_run.items()})
    model.load_state_dict(megengine.load(os.path.join(work, f"{name}.int8.pkl")))
    out.update({f"forced/{k}": v for k, v in
                forced(model, inputs["image"], theirs, megengine).items()})
    return {**out, **int8_state(model.state_dict()), **record(model, inputs["image"], megengine)}


if __name__ == "__main__":
    side, model_name, work_dir, out_path = sys.argv[1:5]
    sys.path.insert(0, os.path.join(os.environ["MEGENGINE_MODELS"], "official", "quantization"))
    arrays = {k[:-4]: np.load(os.path.join(work_dir, k)) for k in os.listdir(work_dir)
              if k.endswith(".npy")}
    run = megengine_side if side == "megengine" else project_side
    np.savez(out_path, **run(model_name, work_dir, arrays))
