"""The per-layer convolution benchmark: its layers, the kernel it reads from XLA's program, and
its report."""

import jax
import pytest

from benchmarks.conv_layers import OTHER_LIBRARY, Layer, _count, table, time_layer, xla_parts

cpu_only = pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's kernels")


def test_identical_convolutions_are_counted_once():
    a = ((2, 8, 16, 16), (8, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, True)
    b = ((2, 8, 16, 16), (16, 8, 3, 3), (2, 2), (1, 1), (1, 1), 1, False, True)
    layers = _count("m", [a, b, a, a])
    assert [(la.count, la.w[0], la.dx) for la in layers] == [(3, 8, True), (1, 16, False)]
    assert layers[1].out_hw() == (8, 8)
    assert layers[1].flops() == 2 * 2 * 8 * 8 * 16 * 8 * 9


@cpu_only
def test_the_path_names_the_kernel_xla_chose():
    layer = Layer("t", (2, 32, 8, 8), (32, 32, 3, 3), (2, 2), (1, 1))
    ours, other = xla_parts(layer), xla_parts(layer, OTHER_LIBRARY)
    assert all(ours[p][1].startswith("eigen") for p in ours)
    assert other["fwd"][1].startswith("ynn")
    assert "+dil" in ours["dx"][1]  # a strided convolution's input gradient dilates its input


def test_the_report_weights_layers_by_count_and_needed_parts():
    layers = [Layer("a", (1, 4, 8, 8), (4, 4, 3, 3), padding=(1, 1), count=2, dx=False),
              Layer("b", (1, 4, 8, 8), (8, 4, 1, 1))]
    results = [time_layer(la, rounds=1) for la in layers]
    text = table(layers, results, peak=100.0)
    rows = [ln for ln in text.splitlines() if ln.startswith("| 1x4x8x8")]
    assert len(rows) == 2 and "| 2 |" in rows[0] and " / - / " in rows[0]
    ours = 2 * (results[0]["ours.fwd"] + results[0]["ours.dw"]) + sum(
        results[1][f"ours.{p}"] for p in ("fwd", "dx", "dw"))
    assert f"ours {ours:.1f} ms" in text


@cpu_only
def test_a_small_map_is_timed_in_the_form_the_op_computes_it():
    layer = Layer("t", (2, 32, 2, 2), (32, 32, 3, 3), padding=(1, 1))
    assert {path for _, path in xla_parts(layer).values()} == {"matmul"}
    assert xla_parts(layer, hwio=True)["fwd"][1].startswith("eigen")
