"""Every convolution of a model's training step, timed alone: forward, input gradient and
weight gradient, here (XLA, compiled as this project compiles a region's convolutions) and in
PyTorch on the same shapes, side by side, with the kernel XLA chose and the share of the
machine's peak each reaches.

Run `MEGENGINE_MODELS=../shared/megengine-models python -m benchmarks.conv_layers
[--models resnet18 retinanet] [--rounds N] [--json PATH]`.

The layers are recorded from the zoo's models themselves (`benchmarks.zoo_models`: the same
sizes, batch and frozen layers as `benchmarks.zoo`): one forward with a hook on every `Conv2d`,
identical convolutions counted once with their number. A layer needs its weight gradient when
its weight is trained and its input gradient when a trained convolution ran before it (the
zoo's detectors freeze conv1 and layer1, so their backward stops at layer2).

Here, each part is its own executable, compiled the way a compiled region compiles its
convolutions: activations channels-last (NHWC), the weight in the API's OIHW order, a small
map's convolution as the op computes it (`eager/core/ops/conv_forms.py`), gradients by jax's
rules, `eager.hooks.conv_options` and `xla_segments.base_compile_options()`. The
`YNNPACK` column compiles the same with the convolutions sent to XLA:CPU's YNNPACK path
(`OTHER_LIBRARY`); the `weight HWIO` column hands the weight over already in the HWIO order
XLA:CPU's kernels read, so the difference to ours is what relaying the weight out costs. "path"
is read from the optimized HLO: `matmul` when no convolution is left, `ynn` when the
convolution sits in a YNNPACK fusion, `onednn` for a oneDNN custom call, else `eigen`
(XLA:CPU's own convolution thunk); `+rev` marks a reversed window, `+dil` a dilated input (a
strided convolution's input gradient), `+T` transposes or reversals around it in the program.

PyTorch: `conv2d` and `aten.convolution_backward` (one mask per part) on NCHW tensors, as its
eager mode runs the torchvision models (channels-last in the JSON as well), `ZOO_TORCH_THREADS`
threads (2 by default). Each implementation of a layer runs `WARM` untimed calls then
`--rounds` timed ones in a row (call-by-call interleaving made PyTorch's spinning threads slow
XLA's next call), all of a layer's implementations within a second or two, so a busy moment
hits both sides alike; medians are printed.

Peak: the best of a 2048x2048 float32 matrix product in XLA and in PyTorch, in GFLOP/s; a
convolution's part costs 2 N Ho Wo Cout (Cin / groups) kh kw FLOPs, the same for all three.
The totals weight each layer by its count and count only the parts the step needs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: The XLA option that sends convolutions to YNNPACK, for the `other` column.
OTHER_LIBRARY = {"xla_cpu_experimental_ynn_fusion_type":
                 "LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION"}
PARTS = ("fwd", "dx", "dw")
#: Untimed calls before an implementation's timed ones: PyTorch's OpenMP threads spin on the
#: cores for a while after a call returns, which slowed the next XLA convolution by up to 1.6x
#: here when the two were interleaved call by call.
WARM = 3


@dataclasses.dataclass(frozen=True)
class Layer:
    """One convolution of a step: NCHW input, OIHW weight, its settings, how often it runs
    and which gradients the step needs."""

    name: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    count: int = 1
    dx: bool = True
    dw: bool = True

    def out_hw(self) -> tuple[int, ...]:
        from eager.core.ops.checks import out_size

        return out_size(self.x[2:], self.w[2:], self.stride, self.padding, self.dilation)

    def flops(self) -> float:
        ho, wo = self.out_hw()
        return 2.0 * self.x[0] * ho * wo * self.w[0] * self.w[1] * self.w[2] * self.w[3]

    def needs(self, part: str) -> bool:
        return part == "fwd" or getattr(self, part)

    def label(self) -> str:
        n, c, h, w = self.x
        k = "x".join(map(str, self.w[2:]))
        s = f" s{self.stride[0]}" if self.stride != (1, 1) else ""
        g = f" g{self.groups}" if self.groups != 1 else ""
        return f"{n}x{c}x{h}x{w} -> {self.w[0]}, {k}{s}{g}"


# ----- the layers of a zoo model --------------------------------------------------------------
def zoo_layers(name: str) -> list[Layer]:
    """The convolutions of one training forward of zoo model `name`, as `Layer`s."""
    from benchmarks import zoo_models

    model, trained, run = zoo_models.zoo_forward(name)
    seen: list[tuple] = []
    trained_ran = [False]

    def hook(module: Any, inputs: tuple, _output: Any) -> None:
        w_trained = any(p is module.weight for p in trained)
        seen.append((tuple(inputs[0].shape), tuple(module.weight.shape), _pair(module.stride),
                     _pair(module.padding), _pair(module.dilation), int(module.groups),
                     trained_ran[0], w_trained))
        trained_ran[0] = trained_ran[0] or w_trained

    handles = [m.register_forward_hook(hook) for m in _modules(model)
               if type(m).__name__ == "Conv2d"]
    run()
    for h in handles:
        h.remove()
    return _count(name, seen)


def _modules(model: Any) -> list[Any]:
    return [m for _, m in model.named_modules()]


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if np.isscalar(v) else tuple(int(a) for a in v)


def _count(model: str, seen: list[tuple]) -> list[Layer]:
    layers: dict[tuple, Layer] = {}
    for x, w, stride, padding, dilation, groups, dx, dw in seen:
        key = (x, w, stride, padding, dilation, groups, dx, dw)
        if key in layers:
            layers[key] = dataclasses.replace(layers[key], count=layers[key].count + 1)
        else:
            layers[key] = Layer(f"{model}.{len(layers)}", x, w, stride, padding, dilation,
                                groups, 1, dx, dw)
    return list(layers.values())


# ----- XLA, compiled as a region compiles its convolutions ------------------------------------
def xla_parts(layer: Layer, extra: dict | None = None,
              hwio: bool = False) -> dict[str, tuple[Callable, str]]:
    """The compiled forward, input gradient and weight gradient of `layer` (each a no-argument
    callable) and the path XLA chose for each; `extra` XLA options; `hwio`: the weight already
    in the HWIO order XLA:CPU's kernels read (no relayout of the weight in the program)."""
    import jax
    from jax import lax

    import eager
    import xla_segments
    from eager.core.ops import conv_forms

    rng = np.random.default_rng(0)
    n, c, h, w = layer.x
    x = jax.numpy.asarray(rng.standard_normal((n, h, w, c)), "float32")
    k = jax.numpy.asarray(rng.standard_normal(layer.w) * 0.05, "float32")
    if hwio:
        k = k.transpose(2, 3, 1, 0)
    ho, wo = layer.out_hw()
    g = jax.numpy.asarray(rng.standard_normal((n, ho, wo, layer.w[0])), "float32")

    def conv(x: Any, k: Any) -> Any:
        return lax.conv_general_dilated(
            x, k, layer.stride, [(p, p) for p in layer.padding], rhs_dilation=layer.dilation,
            dimension_numbers=("NHWC", "HWIO" if hwio else "OIHW", "NHWC"),
            feature_group_count=layer.groups)

    def small_map(x: Any, k: Any) -> Any:  # the op's form for small maps (NCHW inside)
        y = conv_forms.conv_matmul(x.transpose(0, 3, 1, 2), k, **settings)
        return y.transpose(0, 2, 3, 1)

    settings = dict(stride=layer.stride, padding=layer.padding, dilation=layer.dilation)
    nchw = jax.ShapeDtypeStruct(layer.x, "float32")
    ours = not hwio and not extra
    fwd = (small_map if ours and conv_forms.as_matmul(nchw, k, groups=layer.groups, **settings)
           else conv)

    def dx(k: Any, g: Any) -> Any:
        return jax.vjp(lambda x: fwd(x, k), x)[1](g)[0]

    def dw(x: Any, g: Any) -> Any:
        return jax.vjp(lambda k: fwd(x, k), k)[1](g)[0]

    options = {**xla_segments.base_compile_options(),
               **(eager.hooks.conv_options(jax.default_backend()) or {}), **(extra or {})}
    parts = {}
    for part, fn, args in (("fwd", fwd, (x, k)), ("dx", dx, (k, g)), ("dw", dw, (x, g))):
        compiled = jax.jit(fn).lower(*args).compile(compiler_options=options)
        parts[part] = (_runner(compiled, args), hlo_path(compiled.as_text()))
    return parts


def _runner(compiled: Any, args: tuple) -> Callable[[], None]:
    def run() -> None:
        compiled(*args).block_until_ready()
    return run


def hlo_path(hlo: str) -> str:
    """Which kernel computes the convolution of an optimized HLO module (see the module's
    docstring for the marks)."""
    lines = hlo.splitlines()
    conv = [ln for ln in lines if " convolution(" in ln]
    if not conv and any(" dot(" in ln for ln in lines):
        return "matmul"
    if any("onednn" in ln.lower() for ln in lines):
        path = "onednn"
    elif any("ynn_fusion" in ln and "convolution" in ln for ln in lines) or (
            conv and all(_in_ynn_fusion(ln, lines) for ln in conv)):
        path = "ynn"
    else:
        path = "eigen"
    window = " ".join(conv)
    marks = "".join(m for m, seen in (("+rev", "rhs_reversal=" in window or "rev=" in window),
                                      ("+dil", "lhs_dilate=" in window),
                                      ("+T", any(re.search(r" (transpose|reverse)\(", ln)
                                                 for ln in lines))) if seen)
    return path + marks


def _in_ynn_fusion(conv_line: str, lines: list[str]) -> bool:
    """Whether a convolution instruction is the body of a computation a YNNPACK fusion calls."""
    body = None
    for ln in lines:
        if ln.startswith("%") or ln.startswith("ENTRY"):
            body = ln.split(" ")[0].lstrip("%")
        if ln == conv_line:
            return body is not None and any(f"calls=%{body}" in other and "ynn" in other
                                            for other in lines)
    return False


# ----- PyTorch --------------------------------------------------------------------------------
def torch_parts(layer: Layer, channels_last: bool = False) -> dict[str, Callable[[], Any]] | None:
    """PyTorch's forward, input gradient and weight gradient of `layer` (None: no torch)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(os.environ.get("ZOO_TORCH_THREADS", "2")))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(layer.x, generator=gen)
    w = torch.randn(layer.w, generator=gen) * 0.05
    if channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    args = dict(stride=list(layer.stride), padding=list(layer.padding),
                dilation=list(layer.dilation), groups=layer.groups)
    y = torch.nn.functional.conv2d(x, w, **args)
    g = torch.randn(y.shape, generator=gen).contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def backward(mask: list[bool]) -> Callable[[], Any]:
        return lambda: torch.ops.aten.convolution_backward(
            g, x, w, None, args["stride"], args["padding"], args["dilation"], False, [0, 0],
            layer.groups, mask)

    return {"fwd": lambda: torch.nn.functional.conv2d(x, w, **args),
            "dx": backward([True, False, False]), "dw": backward([False, True, False])}


# ----- timing ---------------------------------------------------------------------------------
def time_layer(layer: Layer, rounds: int) -> dict[str, Any]:
    """Medians (ms) of `rounds` timed calls of every implementation's parts of `layer`, and
    the paths XLA took."""
    xla = {"ours": xla_parts(layer), "hwio": xla_parts(layer, hwio=True),
           "other": xla_parts(layer, OTHER_LIBRARY)}
    runs: dict[str, Callable[[], Any]] = {}
    for impl, parts in xla.items():
        for part in PARTS:
            runs[f"{impl}.{part}"] = parts[part][0]
    for impl, cl in (("torch", False), ("torch_cl", True)):
        parts = torch_parts(layer, cl)
        for part, fn in (parts or {}).items():
            runs[f"{impl}.{part}"] = fn
    times: dict[str, list[float]] = {k: [] for k in runs}
    for key, fn in runs.items():
        for _ in range(WARM):
            fn()
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    result = {key: statistics.median(ts) * 1e3 for key, ts in times.items()}
    result.update({f"path.{p}": xla["ours"][p][1] for p in PARTS})
    result.update({f"other_path.{p}": xla["other"][p][1] for p in PARTS})
    return result


def peak_gflops(rounds: int = 5) -> float:
    """The machine's float32 peak as reached by a large matrix product (XLA or PyTorch)."""
    import jax

    n = 2048
    a = jax.numpy.asarray(np.random.default_rng(0).standard_normal((n, n)), "float32")
    mm = jax.jit(lambda a: a @ a).lower(a).compile()
    mm(a).block_until_ready()
    best = min(_timed(lambda: mm(a).block_until_ready()) for _ in range(rounds))
    try:
        import torch

        t = torch.from_numpy(np.array(a))
        best = min(best, *(_timed(lambda: t @ t) for _ in range(rounds)))
    except ImportError:
        pass
    return 2.0 * n**3 / best / 1e9


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ----- the report -----------------------------------------------------------------------------
def table(layers: list[Layer], results: list[dict[str, Any]], peak: float) -> str:
    """A markdown table of one model's layers and a line of weighted totals."""
    has_torch = "torch.fwd" in results[0]
    head = ("| layer | n | ours fwd / dx / dw ms | path | weight HWIO | YNNPACK | "
            + ("PyTorch fwd / dx / dw | ours / PyTorch | " if has_torch else "")
            + "ours bwd / fwd | % of peak fwd / dx / dw |")
    lines = [head, head_rule(head)]
    for layer, r in zip(layers, results):
        need = [p for p in PARTS if layer.needs(p)]
        cell = " / ".join(f"{r[f'ours.{p}']:.2f}" if layer.needs(p) else "-" for p in PARTS)
        hwio, other = (" / ".join(f"{r[f'{i}.{p}']:.2f}" if layer.needs(p) else "-"
                                  for p in PARTS) for i in ("hwio", "other"))
        paths = " ".join(r[f"path.{p}"] for p in need)
        row = f"| {layer.label()} | {layer.count} | {cell} | {paths} | {hwio} | {other} |"
        if has_torch:
            theirs = " / ".join(f"{r[f'torch.{p}']:.2f}" if layer.needs(p) else "-"
                                for p in PARTS)
            ratio = sum(r[f"ours.{p}"] for p in need) / sum(r[f"torch.{p}"] for p in need)
            row += f" {theirs} | {ratio:.2f}x |"
        bwd = sum(r[f"ours.{p}"] for p in need if p != "fwd")
        row += f" {bwd / r['ours.fwd']:.1f} |" if bwd else " - |"
        row += " " + " / ".join(f"{layer.flops() / r[f'ours.{p}'] / 1e6 / peak:.0%}"
                                if layer.needs(p) else "-" for p in PARTS) + " |"
        lines.append(row)
    lines.append("")
    lines.append(totals(layers, results))
    return "\n".join(lines)


def head_rule(head: str) -> str:
    return "|" + " --- |" * (head.count("|") - 1)


def totals(layers: list[Layer], results: list[dict[str, Any]]) -> str:
    """Every needed part of every layer, weighted by its count, per implementation."""
    impls = [i for i in ("ours", "hwio", "other", "torch", "torch_cl")
             if f"{i}.fwd" in results[0]]
    sums = {i: {p: sum(layer.count * r[f"{i}.{p}"] for layer, r in zip(layers, results)
                       if layer.needs(p)) for p in PARTS} for i in impls}
    names = {"ours": "ours", "hwio": "weights HWIO", "other": "YNNPACK", "torch": "PyTorch",
             "torch_cl": "PyTorch channels-last"}
    parts = []
    for i in impls:
        s = sums[i]
        whole = sum(s.values())
        ratio = f"; ours {sum(sums['ours'].values()) / whole:.2f}x" if i != "ours" else ""
        parts.append(f"{names[i]} {whole:.1f} ms (fwd {s['fwd']:.1f}, dx {s['dx']:.1f}, "
                     f"dw {s['dw']:.1f}{ratio})")
    return "totals per step: " + "; ".join(parts)


def machine(peak: float) -> str:
    import platform

    import jax

    torch = ""
    try:
        import torch as t

        torch = f", PyTorch {t.__version__} ({t.get_num_threads()} threads)"
    except ImportError:
        pass
    return (f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, jax {jax.__version__}{torch}; float32 peak "
            f"(2048^3 matrix product) {peak:.0f} GFLOP/s; load average "
            + ", ".join(f"{v:.1f}" for v in os.getloadavg()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "retinanet"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", help="write every layer's raw medians here")
    args = parser.parse_args(argv)
    peak = peak_gflops()
    print(machine(peak), flush=True)
    report: dict[str, Any] = {"machine": machine(peak), "peak_gflops": peak, "models": {}}
    for name in args.models:
        layers = zoo_layers(name)
        results = [time_layer(layer, args.rounds) for layer in layers]
        print(f"\n## {name}: {sum(la.count for la in layers)} convolutions, "
              f"{len(layers)} distinct\n")
        print(table(layers, results, peak), flush=True)
        report["models"][name] = [{**dataclasses.asdict(la), **r}
                                  for la, r in zip(layers, results)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
