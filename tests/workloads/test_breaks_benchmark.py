"""The graph-break benchmark times the same computation three ways: check that it is the same."""

import numpy as np
import pytest

import eager as eg
from benchmarks.breaks import INPUT, variants
from benchmarks.workloads import build_model
from eager.autodiff import GradManager


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_the_three_variants_compute_the_same_values_and_gradients(name):
    model = build_model(name)
    fns = variants(name, model.backbone)
    x = eg.tensor(np.random.default_rng(0).standard_normal((2, *INPUT[name])).astype(np.float32))
    params = model.backbone.parameters()
    gm = GradManager().attach(params)
    results = {}
    for key, fn in fns.items():
        model.train(False)
        out = fn(x).numpy()
        model.train(True)
        with gm:
            gm.backward(fn(x).sum())
        results[key] = [out] + [p.grad.numpy() for p in params]
        for p in params:
            p.grad = None
        model.load_state_dict(build_model(name).state_dict())  # BatchNorm statistics
    for key in ("none", "break"):
        for got, want in zip(results[key], results["eager"]):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    info = fns["break"].cache_info()
    assert info.segments == 2 and len(info.breaks) == 1
