"""One training step of one MegEngine model-zoo model on one side, written to a JSON file.

    python runner.py megengine MODEL WORK OUT    # real MegEngine, on MegEngine's interpreter
    python runner.py project MODEL WORK OUT      # this project, `megengine*` aliased to it

`WORK` holds the inputs (`.npy`, written by the test) and the MegEngine side's initial
`state_dict` (`MODEL.pkl`, written by `megengine.save`), which the project side loads. The zoo
is found through `MEGENGINE_MODELS`. Arrays travel as in `tests/parity/runner.py`: JSON
lists with their dtype and shape, since the two interpreters have different numpy versions.

Dropout modules are put in eval mode after `model.train()`: their random streams differ
between MegEngine and this project, and every other module stays in training mode.

Pretrained backbones: DeepLabV3+ has a config flag (`backbone_pretrained`); SimpleBaseline's
`simplebaseline_res50` always asks `hub` for an ImageNet ResNet-50. The test points
`MGE_HOME` of both subprocesses at a folder of `WORK`, and the MegEngine side first
`megengine.save`s a freshly initialised ResNet-50's `state_dict` at the path its hub would
download to (`MGE_HOME/serialized/<sha256(url)[:6]>_<basename>`), so both hubs read that file
and nothing is downloaded.

CLIP: `official.multimodal` imports DALL-E's tokenizer, `youtokentome`, which does not build
on this Python, and CLIP's tokenizer imports `ftfy` and `regex` (and the DALL-E code and
big_sleep `tqdm`); none of them is used by the model's forward. `youtokentome` is replaced
by an empty module on both sides, and the others by empty modules where they are not
installed.

GANs. `biggan` is big_sleep's trainable part: a small `BigGAN` and big_sleep's `Latents` under
its `EMA`, run by `BigSleep.forward_model` (the zoo's, unchanged, on a module holding only those
two; CLIP, which `BigSleep` loads pretrained, is left out). Its step is big_sleep's: backward,
then `Adam` (lr 0.07) on the latents and `EMA.update()`; the spectral norms' power iteration
writes their `weight_u`/`weight_v` (and `weight`) buffers during the forward. The buffers and the
latents' parameters (model, EMA average and biased copy) after the step are returned as
`state`, and compared too. `vqgan` and `vqgan_gumbel` are a small `VQModel` and `GumbelVQ`,
called through `encode` and `decode` (as `forward` does) to return the code indices as `state`;
their loss is taming's VQ loss before the discriminator starts and without the LPIPS network
(neither is in the zoo): mean |x - x_rec| + the quantizer's loss. The Gumbel quantizer's noise
(`functional.sample_exponential`, `megengine.random.uniform` inside the step) is replaced by the
same formula on a fixed uniform array, an input of the step.

`dcgan` and `wgan` (`official/vision/gan`, megengine_mimicry): `nets/losses.py` imports
`megengine.core.tensor_factory`, gone from MegEngine 1.x (`ModuleNotFoundError` in MegEngine
1.13, `MegEngineAliasError` here); `shim_tensor_factory` serves it on both sides, its `zeros`
being `megengine.functional.zeros`. The package's `__init__` imports its training, data set and
metrics code (tensorboardX, TensorFlow, SciPy, scikit-learn), which the networks do not use: the
package is registered without running it. The step is one generator and one discriminator loss
of the zoo's `losses` on fixed noise and images (the zoo's own steps use MegEngine 0.x's
`optimizer.backward` and `F.zero_grad`); MegEngine 1.13 then fails in the generator
(`F.interpolate`, now `F.nn.interpolate`), so only this project's side is compared. The
networks are not put in training mode (they are built in it): their `BaseModel.train(mode)`
lacks MegEngine 1.x's `recursive` argument, with which MegEngine 1.13's `Module.train` (and
so `eval`) calls it, raising `TypeError`.

A step that raises on the MegEngine side (after its `state_dict` is saved) is reported as
`{"error": ...}`, so that this project's side still runs and its `partial_trace` run is
still compared with its eager run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from typing import Any

import numpy as np

DETECTORS = ("retinanet", "fcos", "atss", "freeanchor", "faster_rcnn")
GANS = ("biggan", "vqgan", "vqgan_gumbel", "dcgan", "wgan")

BERT_CONFIG = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                   type_vocab_size=2, initializer_range=0.02)
CLIP_CONFIG = dict(embed_dim=32, image_resolution=32, vision_layers=2, vision_width=64,
                   vision_patch_size=8, context_length=8, vocab_size=100, transformer_width=32,
                   transformer_heads=2, transformer_layers=2)
# 4x4 to 16x16, self-attention at 8x8; `num_classes` as the zoo's, for big_sleep's latents.
# A block halves the channels or keeps them, the last one giving `base_channel`.
BIGGAN_CONFIG = dict(layers=[[True, 16, 8], [True, 8, 4], [False, 4, 2], [False, 2, 1]],
                     output_dim=16, z_dim=16, class_embed_dim=16, base_channel=4,
                     num_classes=1000, attention_layer_position=1, eps=1e-4, n_stats=51)
# 32x32 images to 16x16 codes, attention at 16x16; GroupNorm(32, .) needs 32-channel multiples.
# `GumbelQuantizer` projects the quantiser's input (embed_dim channels) from z_channel ones.
VQGAN_CONFIG = dict(in_resolution=32, in_channel=3, z_channel=16, out_channel=3,
                    base_channel=32, attention_resolutions=[16], num_res_blocks=1,
                    double_z=False, dropout=0.0)
VQGAN_MULTIPLIER = [1., 2.]  # a fresh list each build: `Decoder` reverses it in place
VQGAN_CODES, VQGAN_EMBED = 32, 16
MIMICRY_CONFIG = dict(nz=16, ngf=32, bottom_width=2)  # 2x2 to 16x16 images


def _stub_unused_modules() -> None:
    """Empty stand-ins for modules `official.multimodal` imports but the models do not use
    (the tokenizers' dependencies; see the module docstring)."""
    import importlib

    sys.modules.setdefault("youtokentome", types.ModuleType("youtokentome"))
    for name in ("ftfy", "regex", "tqdm"):
        try:
            importlib.import_module(name)
        except ImportError:
            module = sys.modules.setdefault(name, types.ModuleType(name))
            if name == "tqdm":
                module.tqdm = lambda iterable=None, *args, **kwargs: iterable
                module.trange = lambda *args, **kwargs: range(*args)


def shim_tensor_factory() -> None:
    """Serve MegEngine 0.x's `megengine.core.tensor_factory` (`zeros`), which megengine_mimicry
    imports, and register the `megengine_mimicry` package without running its `__init__`."""
    import megengine.core  # noqa: F401  (the parent package, before its child is registered)
    import megengine.functional as F

    factory = types.ModuleType("megengine.core.tensor_factory")
    factory.zeros = F.zeros
    sys.modules["megengine.core.tensor_factory"] = factory
    package = types.ModuleType("megengine_mimicry")
    package.__path__ = [os.path.join(os.environ["MEGENGINE_MODELS"], "official", "vision",
                                     "gan", "megengine_mimicry")]
    sys.modules.setdefault("megengine_mimicry", package)


def _gan_module(name: str, megengine: Any) -> Any:
    """The module `name` (one of `GANS`) runs: see the module docstring."""
    import megengine.module as M

    if name == "biggan":
        _stub_unused_modules()
        from official.multimodal.big_sleep.big_sleep import BigSleep, Latents
        from official.multimodal.big_sleep.biggan import BigGAN, BigGANConfig
        from official.multimodal.big_sleep.ema import EMA

        class BigSleepGenerator(M.Module):
            """`BigSleep`'s latents and generator, without its CLIP."""

            def __init__(self) -> None:
                super().__init__()
                config = BigGANConfig(**BIGGAN_CONFIG)
                self.biggan = BigGAN(config)
                self.latents = EMA(Latents(num_latents=len(config.layers) + 1,
                                           num_classes=config.num_classes,
                                           z_dim=config.z_dim), 0.99)

            forward = BigSleep.forward_model

        model = BigSleepGenerator()
        # the attention's gain starts at 0, which leaves its other weights without gradient
        M.init.fill_(model.biggan.generator.layers[BIGGAN_CONFIG["attention_layer_position"]]
                     .gamma, 0.5)
        return model
    if name in ("vqgan", "vqgan_gumbel"):
        _stub_unused_modules()
        from official.multimodal.taming_transformer.vqgan import GumbelVQ, VQModel

        config = dict(VQGAN_CONFIG, channel_multiplier=list(VQGAN_MULTIPLIER))
        if name == "vqgan":
            return VQModel(config, num_embeddings=VQGAN_CODES, embed_dim=VQGAN_EMBED)
        # kl_weight 1 (the zoo's is 1e-8) so that the KL term is seen in the loss
        return GumbelVQ(config, num_embeddings=VQGAN_CODES, embed_dim=VQGAN_EMBED, kl_weight=1.0)
    shim_tensor_factory()
    import importlib

    nets = importlib.import_module(f"megengine_mimicry.nets.{name}.{name}_cifar")
    prefix = name.upper()

    class GAN(M.Module):
        """megengine_mimicry's generator and discriminator for CIFAR-10."""

        def __init__(self) -> None:
            super().__init__()
            self.netG = getattr(nets, f"{prefix}GeneratorCIFAR")(**MIMICRY_CONFIG)
            self.netD = getattr(nets, f"{prefix}DiscriminatorCIFAR")(ndf=MIMICRY_CONFIG["ngf"])

        def forward(self, noise: Any) -> Any:  # the step calls netG and netD itself
            return self.netD(self.netG(noise))

    return GAN()


def _pretrained_url(function: Any) -> str:
    """The URL a `@hub.pretrained` function loads from (the decorator's closure holds it)."""
    return next(cell.cell_contents.url for cell in function.__closure__
                if hasattr(cell.cell_contents, "url"))


def _seed_hub_cache(function: Any, megengine: Any) -> None:
    """Save a fresh initialisation of `function`'s model where the hub looks for its weights."""
    import hashlib
    from urllib.parse import urlparse

    url = _pretrained_url(function)
    folder = os.path.join(os.environ["MGE_HOME"], "serialized")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(url.encode()).hexdigest()[:6] + "_"
                        + os.path.basename(urlparse(url).path))
    megengine.save(function().state_dict(), path)


def encode(array: Any) -> dict[str, Any]:
    array = np.asarray(array)
    return {"array": array.tolist(), "dtype": str(array.dtype), "shape": list(array.shape)}


def build(name: str, megengine: Any, side: str) -> Any:
    """The model `name` in training mode (dropout off), its random initialisation seeded."""
    megengine.random.seed(0)
    np.random.seed(0)
    if name == "resnet18":
        from official.vision.classification.resnet.model import resnet18

        model = resnet18()
    elif name == "shufflenet_v2_x0_5":
        from official.vision.classification.shufflenet.model import shufflenet_v2_x0_5

        model = shufflenet_v2_x0_5()
    elif name == "bert":
        from official.nlp.bert.model import BertConfig, BertForSequenceClassification

        model = BertForSequenceClassification(BertConfig.from_dict(BERT_CONFIG), num_labels=2)
    elif name == "deeplabv3plus":
        from official.vision.segmentation.configs.deeplabv3plus_res101_voc_512size import Cfg, Net

        cfg = Cfg()
        cfg.backbone_pretrained = False
        model = Net(cfg)
    elif name == "simplebaseline_res50":
        from official.vision.classification.resnet.model import resnet50
        from official.vision.keypoints.models.simplebaseline import simplebaseline_res50

        if side == "megengine":  # this project's hub reads the same file
            _seed_hub_cache(resnet50, megengine)
        model = simplebaseline_res50()
    elif name == "clip":
        _stub_unused_modules()
        from official.multimodal.clip.models import CLIP, CLIPConfig

        model = CLIP(CLIPConfig(**CLIP_CONFIG))
    elif name in GANS:
        model = _gan_module(name, megengine)
    else:
        from official.vision.detection.tools.utils import import_from_file

        zoo = os.environ["MEGENGINE_MODELS"]
        net = import_from_file(os.path.join(
            zoo, "official", "vision", "detection", "configs", f"{name}_res18_coco_3x_800size.py"))
        cfg = net.Cfg()
        cfg.backbone_pretrained = False
        if name == "faster_rcnn":
            # `sample_labels` keeps every label when there are no more than it may sample; with
            # these budgets nothing is sampled, so no random stream enters the losses.
            cfg.num_sample_anchors = 10 ** 6
            cfg.num_rois = 10 ** 6
        model = net.Net(cfg)
    return _training_mode(model, name)


def _training_mode(model: Any, name: str) -> Any:
    """`model` in training mode, its Dropout modules in eval mode."""
    import megengine.module as M

    if name not in ("dcgan", "wgan"):  # built in training mode; see the module docstring
        model.train()
    for module in model.modules():
        if isinstance(module, M.Dropout):
            module.eval()
    return model


# The gradients compared in full: the bottom-up network's stem, one FPN conv, the head's (or
# the classifier's) last layers. Every other parameter's gradient is compared by its norm.
NAMES = {
    "resnet18": ["conv1.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias"],
    "shufflenet_v2_x0_5": ["first_conv.0.weight", "features.9.branch_main.6.weight",
                           "classifier.0.weight"],
    "bert": ["bert.embeddings.word_embeddings.weight",
             "bert.encoder.layer.0.attention.self.query.weight", "classifier.weight"],
    "deeplabv3plus": ["backbone.conv1.weight", "aspp.conv1.0.weight", "conv_out.weight",
                      "conv_out.bias"],
    "simplebaseline_res50": ["backbone.conv1.weight", "backbone.layer4.2.conv3.weight",
                             "last_layer.weight", "last_layer.bias"],
    "clip": ["visual.conv1.weight", "token_embedding.weight", "text_projection", "logit_scale"],
    "biggan": ["latents.model.normu", "latents.model.cls", "biggan.embeddings.weight",
               "biggan.generator.gen_z.weight_orig",
               "biggan.generator.layers.1.theta.weight_orig", "biggan.generator.layers.1.gamma",
               "biggan.generator.layers.4.bn_3.scale.weight_orig",
               "biggan.generator.conv_to_rgb.weight_orig"],
    **{name: ["encoder.head.weight", "encoder.downblocks.2.attn.proj_q.weight",
              "quantize.embedding.weight", "decoder.upblocks.0.block1.2.weight",
              "decoder.tail.2.weight", "decoder.tail.2.bias"]
       + (["quantize.proj.weight"] if name == "vqgan_gumbel" else [])
       for name in ("vqgan", "vqgan_gumbel")},
    **{name: ["netG.l1.weight", "netG.block2.c1.weight", "netG.c5.weight",
              "netD.block1.c1.weight", "netD.l5.weight"] for name in ("dcgan", "wgan")},
    "faster_rcnn": ["backbone.bottom_up.conv1.weight", "backbone.fpn_output2.weight",
                    "rpn.rpn_cls_score.weight", "rcnn.pred_cls.weight"],
    **{name: ["backbone.bottom_up.conv1.weight", "backbone.fpn_output3.weight",
              "head.cls_score.weight", "head.bbox_pred.bias"] for name in DETECTORS
       if name != "faster_rcnn"},
}


def _fixed_gumbel_noise(uniform: np.ndarray, megengine: Any) -> None:
    """Make taming's `sample_exponential` read `uniform` instead of drawing it."""
    import megengine.functional as F
    from official.multimodal.taming_transformer import functional

    def sample_exponential(size: Any, lambd: float = 1., eps: float = 1e-10) -> Any:
        assert tuple(size) == uniform.shape, (tuple(size), uniform.shape)
        return -(1 / lambd) * F.log(megengine.tensor(uniform) + eps)

    functional.sample_exponential = sample_exponential


def _gan_step(model: Any, name: str, tensor: dict[str, Any], call: Any) -> tuple[Any, Any]:
    """The losses of one of `GANS` (see the module docstring) and the step's `state` tensors
    that are not parameters' gradients."""
    import megengine.functional as F

    if name == "biggan":
        out = call()
        return {"total_loss": (out ** 2).mean(), "image_mean": out.mean()}, {}
    if name in ("vqgan", "vqgan_gumbel"):
        image = tensor["image"]
        quant, q_loss, (_, _, indices) = model.encode(image)
        rec = F.abs(image - model.decode(quant)).mean()
        return ({"total_loss": rec + q_loss, "rec_loss": rec, "q_loss": q_loss},
                {"indices": indices})
    from megengine_mimicry.nets import losses

    fake = model.netG(tensor["noise"])
    if name == "dcgan":
        loss_g = losses.ns_loss_gen(model.netD(fake))
        loss_d = losses.minimax_loss_dis(output_fake=model.netD(fake.detach()),
                                         output_real=model.netD(tensor["image"]))
    else:
        loss_g = losses.wasserstein_loss_gen(model.netD(fake))
        loss_d = losses.wasserstein_loss_dis(output_real=model.netD(tensor["image"]),
                                             output_fake=model.netD(fake.detach()))
    return {"total_loss": loss_g + loss_d, "loss_g": loss_g, "loss_d": loss_d}, {}


def _after_step(model: Any, name: str, megengine: Any) -> dict[str, Any]:
    """big_sleep's update after the backward; the state it and the forward changed."""
    if name != "biggan":
        return {}
    megengine.optimizer.Adam(model.latents.model.parameters(), lr=0.07).step()
    model.latents.update()
    return {**dict(model.named_buffers()),
            **{n: p for n, p in model.named_parameters() if n.startswith("latents.")}}


def step(model: Any, name: str, inputs: dict[str, np.ndarray], megengine: Any,
         call: Any = None) -> dict[str, Any]:
    """One forward and backward; the losses and every parameter's gradient."""
    import megengine.functional as F
    from megengine.autodiff import GradManager

    params = list(model.parameters())
    for p in params:
        p.grad = None
    gm = GradManager().attach(params)
    call = call or model
    start = time.time()
    tensor = {k: megengine.tensor(v) for k, v in inputs.items()}
    state = {}
    if name == "vqgan_gumbel":
        _fixed_gumbel_noise(inputs["gumbel_uniform"], megengine)
    with gm:
        if name in GANS:
            losses, state = _gan_step(model, name, tensor, call)
        elif name in ("resnet18", "shufflenet_v2_x0_5"):
            logits = call(tensor["image"])
            losses = {"total_loss": F.nn.cross_entropy(logits, tensor["label"])}
        elif name == "bert":
            logits, loss = call(tensor["input_ids"], tensor["token_type_ids"],
                                tensor["attention_mask"], tensor["label"])
            losses = {"total_loss": loss, "logits_sum": logits.sum()}
        elif name == "deeplabv3plus":
            out = call(tensor["image"])
            losses = {"total_loss": F.nn.cross_entropy(out, tensor["label"], axis=1)}
        elif name == "simplebaseline_res50":
            out = call(tensor["image"])
            losses = {"total_loss": (out ** 2).mean()}
        elif name == "clip":
            per_image, per_text = call(tensor["image"], tensor["text"])
            loss = (F.nn.cross_entropy(per_image, tensor["label"])
                    + F.nn.cross_entropy(per_text, tensor["label"])) / 2
            losses = {"total_loss": loss, "logits_per_image_mean": per_image.mean()}
        else:
            losses = call(image=megengine.tensor(inputs["image"]),
                          im_info=megengine.tensor(inputs["im_info"]),
                          gt_boxes=megengine.tensor(inputs["gt_boxes"]))
        gm.backward(losses["total_loss"])
    state.update(_after_step(model, name, megengine))
    return {"losses": {k: float(v.numpy()) for k, v in losses.items()},
            "grads": {n: None if p.grad is None else p.grad.numpy()
                      for n, p in model.named_parameters()},
            "state": {k: v.numpy() for k, v in state.items()},
            "seconds": time.time() - start}


def record(result: dict[str, Any], names: list[str]) -> dict[str, Any]:
    grads = result["grads"]
    return {"losses": result["losses"], "seconds": result["seconds"],
            "grad_norms": {n: None if g is None else float(np.linalg.norm(g.astype(np.float64)))
                           for n, g in grads.items()},
            "grads": {n: None if grads[n] is None else encode(grads[n]) for n in names},
            "state": {n: encode(v) for n, v in result["state"].items()}}


def run(side: str, name: str, work: str) -> dict[str, Any]:
    sys.path.insert(0, os.environ["MEGENGINE_MODELS"])
    if side == "project":
        import partial

        partial.alias_megengine()
    import megengine

    inputs = {k[:-4]: np.load(os.path.join(work, k)) for k in os.listdir(work)
              if k.endswith(".npy")}
    state = os.path.join(work, f"{name}.pkl")
    if side == "megengine":
        megengine.config.async_level = 0  # on CPU, asynchronous dispatch gives wrong losses
        model = build(name, megengine, side)
        megengine.save(model.state_dict(), state)
        try:
            return {"eager": record(step(model, name, inputs, megengine), NAMES[name])}
        except (TypeError, RuntimeError, ValueError, AttributeError) as error:  # judged there
            return {"error": f"{type(error).__name__}: {error}"}

    import eager
    import partial

    names = NAMES[name]
    model = build(name, megengine, side)
    model.load_state_dict(eager.load(state))
    out = {"eager": record(step(model, name, inputs, megengine), names)}
    if name in GANS:  # a fresh model: the spectral norms' `weight` is a buffer once run
        model = build(name, megengine, side)
    model.load_state_dict(eager.load(state))  # BatchNorm statistics as they were
    if name == "biggan":
        model.biggan = partial.partial_trace(model.biggan)
        call = None
    elif name in ("vqgan", "vqgan_gumbel"):
        model.encode = partial.partial_trace(model.encode)
        model.decode = partial.partial_trace(model.decode)
        call = None
    elif name in ("dcgan", "wgan"):
        model.netG = partial.partial_trace(model.netG)
        model.netD = partial.partial_trace(model.netD)
        call = None
    elif name in ("resnet18", "shufflenet_v2_x0_5", "clip"):
        call = partial.partial_trace(model)
    elif name == "bert":
        # the attention reshapes by `F.concat([mge.tensor(x.shape)[:-1], ...])`, a tensor whose
        # value the region cannot read (ValueReadError): split the region there
        model.bert = partial.partial_trace(model.bert, graph_breaks=True)
        call = None
    elif name in ("deeplabv3plus", "simplebaseline_res50"):
        # the models call `backbone.extract_features`, not the backbone's forward
        model.backbone.extract_features = partial.partial_trace(model.backbone.extract_features)
        call = None
    else:
        model.backbone = partial.partial_trace(model.backbone)
        if name != "faster_rcnn":
            # the one-stage detectors' box head maps the FPN maps to scores and offsets, all
            # static; Faster R-CNN's heads are not (the RPN's convs share a forward with anchor
            # matching, the RoI head sees as many RoIs as were sampled), so they stay eager
            model.head = partial.partial_trace(model.head)
        call = None
    out["partial_trace"] = record(step(model, name, inputs, megengine, call), names)
    return out


if __name__ == "__main__":
    side, model_name, work_dir, out_path = sys.argv[1:5]
    result = run(side, model_name, work_dir)
    with open(out_path, "w") as out:  # a file: MegEngine prints notices on stdout
        json.dump(result, out)
