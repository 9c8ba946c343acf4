"""`partial.alias_megengine` and `python -m partial.run_megengine`: MegEngine code imports this
project unchanged, never in place of a real MegEngine unless asked."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import eager
import eager.functional
import eager.module.normalization
import partial
from partial.megengine_alias import _Alias, target

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def alias():
    partial.alias_megengine(shadow=True)  # shadow: a test machine may have MegEngine installed
    yield
    partial.unalias_megengine()


def test_megengine_modules_are_the_projects_own(alias):
    import megengine
    import megengine.functional as F
    import megengine.jit as jit
    from megengine.module.normalization import GroupNorm

    assert megengine is eager and F is eager.functional and jit is partial
    assert GroupNorm is eager.module.normalization.GroupNorm
    assert megengine.functional.nn.relu is F.relu


def test_aliased_modules_keep_their_own_spec(alias):
    import megengine.module.normalization  # noqa: F401

    assert eager.module.normalization.__spec__.name == "eager.module.normalization"


# MegEngine 1.13's public module paths that resolve, each to the project's module of that name
SERVED = [
    "megengine", "megengine.amp", "megengine.amp.autocast", "megengine.amp.grad_scaler",
    "megengine.autodiff", "megengine.autodiff.grad_manager", "megengine.config", "megengine.core",
    "megengine.data", "megengine.data.collator", "megengine.data.dataloader",
    "megengine.data.dataset", "megengine.data.dataset.meta_dataset",
    "megengine.data.dataset.vision", "megengine.data.dataset.vision.cifar",
    "megengine.data.dataset.vision.coco", "megengine.data.dataset.vision.folder",
    "megengine.data.dataset.vision.imagenet",
    "megengine.data.dataset.vision.meta_vision", "megengine.data.dataset.vision.mnist",
    "megengine.data.dataset.vision.objects365", "megengine.data.dataset.vision.voc",
    "megengine.data.sampler", "megengine.data.transform",
    "megengine.data.transform.meta_transform", "megengine.data.transform.vision",
    "megengine.data.transform.vision.functional", "megengine.data.transform.vision.transform",
    "megengine.device", "megengine.distributed", "megengine.distributed.functional",
    "megengine.distributed.group", "megengine.distributed.helper",
    "megengine.distributed.launcher", "megengine.functional", "megengine.functional.distributed",
    "megengine.functional.elemwise", "megengine.functional.loss", "megengine.functional.math",
    "megengine.functional.metric", "megengine.functional.nn", "megengine.functional.tensor",
    "megengine.functional.utils", "megengine.functional.vision",
    "megengine.hub", "megengine.hub.const", "megengine.hub.exceptions", "megengine.hub.fetcher",
    "megengine.hub.hub", "megengine.hub.tools", "megengine.jit", "megengine.jit.partial_tracing",
    "megengine.jit.tracing", "megengine.jit.xla_backend", "megengine.logger", "megengine.module",
    "megengine.module.activation", "megengine.module.adaptive_pooling",
    "megengine.module.batchnorm", "megengine.module.conv", "megengine.module.conv_bn",
    "megengine.module.dropout", "megengine.module.embedding", "megengine.module.identity",
    "megengine.module.init", "megengine.module.linear", "megengine.module.lrn",
    "megengine.module.module", "megengine.module.multiheadattn", "megengine.module.normalization",
    "megengine.module.padding", "megengine.module.pixel_shuffle", "megengine.module.pooling",
    "megengine.module.rnn", "megengine.module.sequential", "megengine.module.sliding_window",
    "megengine.optimizer", "megengine.optimizer.adadelta", "megengine.optimizer.adagrad",
    "megengine.optimizer.adam", "megengine.optimizer.adamw", "megengine.optimizer.clip_grad",
    "megengine.optimizer.lamb", "megengine.optimizer.lr_scheduler",
    "megengine.optimizer.multi_step_lr", "megengine.optimizer.optimizer",
    "megengine.optimizer.sgd", "megengine.random", "megengine.random.rng",
    "megengine.serialization", "megengine.tensor",
    # quantization-aware training, and the modules MegEngine provides for it
    "megengine.quantization", "megengine.quantization.fake_quant",
    "megengine.quantization.observer", "megengine.quantization.qconfig",
    "megengine.quantization.quantize", "megengine.quantization.utils", "megengine.module.qat",
    "megengine.module.qat.module", "megengine.module.qat.conv", "megengine.module.qat.conv_bn",
    "megengine.module.qat.conv_transpose_bn", "megengine.module.qat.linear",
    "megengine.module.qat.linear_bn", "megengine.module.qat.elemwise",
    "megengine.module.qat.concat", "megengine.module.qat.quant_dequant",
    "megengine.module.qat.batch_matmul_activation", "megengine.module.quant_dequant",
    # int8 inference: the modules quantize() converts to, and their kernels
    "megengine.module.quantized", "megengine.module.quantized.module",
    "megengine.module.quantized.conv", "megengine.module.quantized.conv_bn",
    "megengine.module.quantized.conv_transpose_bn", "megengine.module.quantized.linear",
    "megengine.module.quantized.linear_bn", "megengine.module.quantized.elemwise",
    "megengine.module.quantized.concat", "megengine.module.quantized.quant_dequant",
    "megengine.module.quantized.batch_matmul_activation", "megengine.functional.quantized",
    "megengine.core.tensor.dtype",
    "megengine.module.elemwise", "megengine.module.concat",
    "megengine.module.batch_matmul_activation", "megengine.module.conv_transpose_bn",
    "megengine.module.linear_bn",
]

# (MegEngine module, name, where the name is public here, the module whose code defines it)
HOMES = [
    ("megengine.amp.autocast", "autocast", "eager.amp", "eager.amp.autocast"),
    ("megengine.amp.grad_scaler", "GradScaler", "eager.amp", "eager.amp.grad_scaler"),
    ("megengine.autodiff.grad_manager", "GradManager", "eager.autodiff",
     "eager.autodiff.grad_manager"),
    ("megengine.autodiff.grad_manager", "GradManagerGroup", "eager.autodiff",
     "eager.autodiff.grad_manager"),
    ("megengine.random.rng", "RNG", "eager.random", "eager.random.rng"),
    ("megengine.random.rng", "seed", "eager.random", "eager.random.rng"),
    ("megengine.random.rng", "normal", "eager.random", "eager.random.rng"),
    ("megengine.optimizer.adamw", "AdamW", "eager.optimizer", "eager.optimizer.adamw"),
    ("megengine.optimizer.clip_grad", "clip_grad_norm", "eager.optimizer",
     "eager.optimizer.clip_grad"),
    ("megengine.optimizer.clip_grad", "clip_grad_value", "eager.optimizer",
     "eager.optimizer.clip_grad"),
    ("megengine.optimizer.multi_step_lr", "MultiStepLR", "eager.optimizer",
     "eager.optimizer.multi_step_lr"),
    ("megengine.optimizer.lr_scheduler", "MultiStepLR", "eager.optimizer.lr_scheduler",
     "eager.optimizer.multi_step_lr"),
    ("megengine.optimizer.lr_scheduler", "LRScheduler", "eager.optimizer",
     "eager.optimizer.lr_scheduler"),
    ("megengine.data.dataset.meta_dataset", "Dataset", "eager.data.dataset",
     "eager.data.dataset.meta_dataset"),
    ("megengine.data.dataset.meta_dataset", "ArrayDataset", "eager.data",
     "eager.data.dataset.meta_dataset"),
    ("megengine.data.transform.meta_transform", "Transform", "eager.data.transform",
     "eager.data.transform.meta_transform"),
    ("megengine.data.transform.meta_transform", "PseudoTransform", "eager.data.transform",
     "eager.data.transform.meta_transform"),
    ("megengine.data.transform.vision.transform", "VisionTransform", "eager.data.transform",
     "eager.data.transform.vision.transform"),
    ("megengine.data.transform.vision.transform", "Compose", "eager.data.transform",
     "eager.data.transform.vision.transform"),
    ("megengine.data.transform.vision", "Resize", "eager.data.transform",
     "eager.data.transform.vision.geometry"),
    ("megengine.data.transform.vision.functional", "pad", "eager.data.transform.vision.functional",
     "eager.data.transform.vision.functional"),
    ("megengine.distributed.helper", "make_allreduce_cb", "eager.distributed",
     "eager.distributed.helper"),
    ("megengine.distributed.helper", "bcast_list_", "eager.distributed",
     "eager.distributed.helper"),
    ("megengine.distributed.launcher", "launcher", "eager.distributed",
     "eager.distributed.launcher"),
    ("megengine.jit.tracing", "trace", "partial", "partial.tracing"),
    ("megengine.jit.tracing", "exclude_from_trace", "partial", "partial.tracing"),
    ("megengine.jit.tracing", "TraceError", "partial", "partial.errors"),
    ("megengine.jit.partial_tracing", "partial_trace", "partial", "partial.partial_tracing"),
    ("megengine.jit.xla_backend", "xla_trace", "partial", "partial.xla_backend"),
    ("megengine.functional.elemwise", "exp", "eager.functional", "eager.functional.elemwise"),
    ("megengine.functional.elemwise", "logaddexp", "eager.functional",
     "eager.functional.elemwise"),
    ("megengine.functional.tensor", "concat", "eager.functional", "eager.functional.tensor"),
    ("megengine.functional.tensor", "roll", "eager.functional", "eager.functional.tensor"),
    ("megengine.functional.tensor", "zeros", "eager", "eager.core.creation"),
    ("megengine.functional.math", "sum", "eager.functional", "eager.functional.math"),
    ("megengine.functional.math", "topk", "eager.functional", "eager.functional.math"),
    ("megengine.functional.math", "matmul", "eager.functional", "eager.functional.math"),
    ("megengine.functional.nn", "relu", "eager.functional", "eager.functional.nn"),
    ("megengine.functional.nn", "one_hot", "eager.functional", "eager.functional.nn"),
    ("megengine.functional.nn", "sum", "eager.functional", "eager.functional.math"),
    ("megengine.functional.loss", "ctc_loss", "eager.functional", "eager.functional.loss"),
    ("megengine.functional.metric", "topk_accuracy", "eager.functional",
     "eager.functional.metric"),
    ("megengine.functional.utils", "topk_accuracy", "eager.functional",
     "eager.functional.metric"),
    ("megengine.functional.distributed", "all_reduce_sum", "eager.distributed.functional",
     "eager.distributed.functional"),
]

# MegEngine 1.13's public module paths with deliberately no counterpart here (docs/guide.md)
UNSERVED = [
    "megengine.functional.inplace", "megengine.functional.external",
    "megengine.functional.tensor_cache", "megengine.functional.debug_param",
    "megengine.traced_module", "megengine.dtr",
    "megengine.dtr.dtr", "megengine.xla", "megengine.jit.dtr_config",
    "megengine.jit.sublinear_memory_config", "megengine.jit.graph_opt_config",
    "megengine.amp.convert_format", "megengine.data.dataset.vision.cityscapes",
    "megengine.data.dataset.vision.utils",
    "megengine.data.signal_handling", "megengine.data.tools", "megengine.distributed.server",
    "megengine.tools", "megengine.utils", "megengine.experimental", "megengine.version",
    "megengine.conftest"
]


@pytest.mark.parametrize("path", SERVED)
def test_megengine_module_paths_resolve_to_the_projects_module(alias, path):
    module = importlib.import_module(path)
    assert module.__name__ == target(path)
    assert sys.modules[target(path)] is module


@pytest.mark.parametrize(("path", "name", "public", "home"), HOMES,
                         ids=[f"{p}.{n}" for p, n, _, _ in HOMES])
def test_a_megengine_module_holds_the_real_object(alias, path, name, public, home):
    obj = getattr(importlib.import_module(path), name)
    assert obj is getattr(importlib.import_module(public), name)
    assert obj.__module__ == home


def test_importing_a_submodule_keeps_the_public_name_of_its_spelling(alias):
    # `megengine.amp.autocast` is a module and, in its parent, the class; `megengine.tensor`
    # likewise the module and the function. Importing the module must not rebind the name.
    for path in ("megengine.amp.autocast", "megengine.distributed.launcher", "megengine.tensor"):
        importlib.import_module(path)
    assert isinstance(eager.amp.autocast, type) and callable(eager.tensor)
    assert callable(eager.distributed.launcher) and not isinstance(eager.tensor, type(sys))
    from megengine.amp.autocast import autocast

    assert autocast is eager.amp.autocast


@pytest.mark.parametrize("path", UNSERVED)
def test_a_path_without_counterpart_says_so_and_why(alias, path):
    # an unserved package's submodules fail at the package, which the message names
    named = next(p for p in UNSERVED if path == p or path.startswith(p + "."))
    with pytest.raises(partial.MegEngineAliasError) as e:
        importlib.import_module(path)
    assert re.match(rf"`{re.escape(named)}` has no counterpart in this project \(it would be "
                    rf"`{re.escape(target(named))}`\): \S", str(e.value)), str(e.value)


def test_the_guide_lists_every_path_without_counterpart():
    guide = (ROOT / "docs" / "guide.md").read_text()
    section = guide[guide.index("## Running MegEngine code unchanged"):]
    tops = {p for p in UNSERVED if not any(p.startswith(q + ".") for q in UNSERVED)}
    missing = [p for p in sorted(tops) if f"`{p}`" not in section]
    assert not missing, f"docs/guide.md: list {missing} among the paths without counterpart"


def test_a_missing_counterpart_names_the_module(alias):
    with pytest.raises(partial.MegEngineAliasError, match=r"megengine\.no_such_thing.*eager\."
                                                          r"no_such_thing"):
        import megengine.no_such_thing  # noqa: F401


def test_unalias_forgets_the_served_modules(alias):
    import megengine  # noqa: F401

    partial.unalias_megengine()
    assert "megengine" not in sys.modules
    assert not any(isinstance(f, _Alias) for f in sys.meta_path)
    partial.alias_megengine(shadow=True)  # the fixture removes it again


def test_an_installed_megengine_is_not_hidden(tmp_path, monkeypatch):
    fake = tmp_path / "megengine"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(partial.MegEngineAliasError, match="shadow=True"):
        partial.alias_megengine()
    assert not any(isinstance(f, _Alias) for f in sys.meta_path)
    partial.alias_megengine(shadow=True)
    try:
        import megengine

        assert megengine is eager
    finally:
        partial.unalias_megengine()


def test_run_megengine_runs_a_script_with_its_arguments(tmp_path):
    script = tmp_path / "train.py"
    (tmp_path / "helper_mod.py").write_text("VALUE = 3\n")
    script.write_text(textwrap.dedent("""
        import sys
        import megengine as mge
        import megengine.functional as F
        import helper_mod  # the script's folder is on sys.path, as with `python train.py`

        x = mge.tensor([1.0, -2.0])
        print(sys.argv[1:], F.relu(x).numpy().tolist(), helper_mod.VALUE, __name__)
    """))
    done = subprocess.run([sys.executable, "-m", "partial.run_megengine", "--shadow",
                           str(script), "--lr", "0.1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['--lr', '0.1'] [1.0, 0.0] 3 __main__"
