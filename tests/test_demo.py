"""The main job: the digits demo trains to the promised accuracy, its compiled backbone trains
exactly like the eager one, and the command line runs end to end."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import demo


@pytest.fixture(scope="module")
def data():
    return demo.load_data(seed=0)


@pytest.mark.slow
def test_the_partial_mode_reaches_95_percent_test_accuracy(data):
    model = demo.train(data, "partial", epochs=3, batch_size=64, seed=0)
    assert model.accuracy(data.test_x, data.test_y) >= 0.95
    assert model.features.cache_info().captures == 2  # train mode, then eval for accuracy


@pytest.mark.slow
def test_the_dynamic_head_trains_the_compiled_backbone_like_eager(data):
    losses = {}
    for mode in ("eager", "partial"):
        demo.eg.random.seed(0)
        model = demo.Model(mode)
        batches = demo.loader(data, 32, seed=0)
        losses[mode] = [model.step(x, y).item() for (x, y), _ in zip(batches, range(5))]
    np.testing.assert_allclose(losses["partial"], losses["eager"], rtol=1e-5)


@pytest.mark.slow
def test_the_command_line_runs_and_compares_the_modes(capsys):
    demo.main(["--epochs", "1", "--batch-size", "128"])
    out = capsys.readouterr().out
    assert "final test accuracy" in out
    for row in ("| eager | dynamic |", "| partial | dynamic |", "| xla | static |"):
        assert row in out
