"""Parity cases for the data transforms (`megengine.data.transform`): every transform on a fixed
uint8 image, alone and with boxes, a mask and keypoints through `order`, after
`np.random.seed(k)`. Each case also returns the next number numpy's generator gives after the
transforms ran (`after`), so the number of draws is compared too, not only their use.

MegEngine behaviour measured here and deliberately not copied (the `megengine_bug` cases keep
the evidence):
- `Pad` (and `RandomCrop`'s padding) given one number pads only the image's first channel with
  it and the others with 0 (OpenCV reads a lone number as (v, 0, 0, 0)); here every channel.
- `RandomCrop`'s padding keeps the `order` the crop had when it was built, so inside a `Compose`
  with an order of (image, boxes, mask) the image is padded but the boxes are not moved and the
  mask is not padded, and both end up misplaced; here the padding follows the crop's order.
- `ColorJitter` likewise keeps the order it was built with for the transforms it holds, so in
  a `Compose` whose order does not put the image first it jitters the wrong element (a mask);
  here the jitter follows the order it is given.
- `RandomCrop` pads the mask with 0 for `padding_size` whatever `padding_maskvalue` says (it
  uses that value only to enlarge an image smaller than the crop); here with
  `padding_maskvalue` for both.
- Points (coords, keypoints, polygons) are moved in place: the caller's arrays change. Here the
  transforms return new arrays.
- Not compared: a sequence of interpolations is drawn from Python's `random` in MegEngine
  (which `np.random.seed` does not seed), from `rng()` here; `TorchTransformCompose` needs
  Pillow, which MegEngine's side lacks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from parity_cases import case

ORDER = ("image", "boxes", "mask")


def _image(h: int = 20, w: int = 24, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (h, w, c)).astype(np.uint8)


def _sample(h: int = 20, w: int = 24) -> tuple:
    """(image, boxes, mask) made afresh: MegEngine changes points in place."""
    boxes = np.array([[2, 3, 10, 15], [5, 1, w - 2, h - 1]], np.float32)
    mask = np.random.RandomState(1).randint(0, 5, (h, w, 1)).astype(np.uint8)
    return _image(h, w), boxes, mask


def _keypoints() -> np.ndarray:
    points = np.random.RandomState(2).uniform(0, 18, (2, 3, 2)).astype(np.float32)
    return np.concatenate([points, np.ones((2, 3, 1), np.float32)], axis=-1)


def _seeded(transform: Any, make: Any, seeds: tuple = (0, 1, 2, 3)) -> dict:
    """The transform of a fresh `make()` after each seed, and numpy's next draw after it."""
    out = {}
    for seed in seeds:
        np.random.seed(seed)
        out[f"seed{seed}"] = transform.apply(make())
        out[f"after{seed}"] = int(np.random.randint(1 << 30))
    return out


# ----- the protocol ---------------------------------------------------------------------------
@case()
def transform_pseudo_and_apply_batch() -> dict:
    import megengine.data.transform as T

    batch = [_image(seed=s) for s in range(3)]
    return {"pseudo": T.PseudoTransform().apply_batch(batch),
            "tomode": T.ToMode().apply_batch(batch), "repr": repr(T.Resize(3))}


@case()
def transform_order_passes_categories_and_extras_through() -> dict:
    import megengine.data.transform as T

    image, boxes, mask = _sample()
    t = T.CenterCrop(10, order=("image", "image_category", "boxes", "info"))
    return {"out": t.apply((image, 7, boxes, "path", 99)),
            "short": t.apply((image, 3)), "bare": t.apply(image)}


@case()
def transform_order_batch_kind_raises() -> dict:
    import megengine.data.transform as T

    T.Resize(4, order=("image", "batch"))
    return {}


@case()
def transform_order_unknown_kind_raises() -> dict:
    import megengine.data.transform as T

    T.Normalize(order=("image", "depth"))
    return {}


@case()
def transform_order_not_a_sequence_raises() -> dict:
    import megengine.data.transform as T

    T.Normalize(order=5)
    return {}


@case()
def transform_order_without_image_raises() -> dict:
    import megengine.data.transform as T

    _, boxes, _ = _sample()
    return {"out": T.CenterCrop(4, order=("boxes",)).apply((boxes,))}


@case()
def transform_tomode_with_mask_and_keypoints() -> dict:
    import megengine.data.transform as T

    image, boxes, mask = _sample()
    t = T.ToMode("CHW", order=("image", "boxes", "mask", "keypoints"))
    return {"out": t.apply((image, boxes, mask, _keypoints()))}


@case()
def transform_tomode_bad_mode_raises() -> dict:
    import megengine.data.transform as T

    T.ToMode("HWC")
    return {}


# ----- geometry -------------------------------------------------------------------------------
@case()
def transform_pad_sizes_and_values() -> dict:
    import megengine.data.transform as T

    order = ("image", "boxes", "mask", "keypoints")
    out = {}
    for name, t in {"int": T.Pad(2, order=order),
                    "two": T.Pad((3, 1), value=(9, 8, 7), mask_value=4, order=order),
                    "four": T.Pad([1, 2, 3, 4], value=[10, 20, 30], mask_value=255, order=order),
                    "float": T.Pad(1, value=[0.5, 1.5, 2.5], order=order)}.items():
        out[name] = t.apply((*_sample(), _keypoints()))
    return out


@case()
def transform_pad_bad_size_raises() -> dict:
    import megengine.data.transform as T

    T.Pad((1, 2, 3))
    return {}


@case()
def transform_pad_float_mask_value_raises() -> dict:
    import megengine.data.transform as T

    T.Pad(1, mask_value=0.5)
    return {}


@case()
def transform_resize_shapes_and_interpolations() -> dict:
    import cv2
    import megengine.data.transform as T

    out = {}
    for name, t in {"pair": T.Resize((13, 31), order=ORDER),
                    "int_wide": T.Resize(10, order=ORDER),
                    "same": T.Resize(20, order=ORDER),
                    "nearest": T.Resize((40, 30), cv2.INTER_NEAREST, order=ORDER),
                    "cubic": T.Resize((9, 17), cv2.INTER_CUBIC, order=ORDER),
                    "area": T.Resize((10, 12), cv2.INTER_AREA, order=ORDER)}.items():
        out[name] = t.apply(_sample())
    out["int_tall"] = T.Resize(8, order=ORDER).apply(_sample(30, 14))
    return out


@case()
def transform_shortest_edge_resize() -> dict:
    import megengine.data.transform as T

    return {"range": _seeded(T.ShortestEdgeResize((12, 30), 40, order=ORDER), _sample),
            "choice": _seeded(T.ShortestEdgeResize((10, 16, 22), 26, "choice", order=ORDER),
                              lambda: _sample(30, 14)),
            "int": _seeded(T.ShortestEdgeResize(15, 18), _image)}


@case()
def transform_shortest_edge_resize_bad_style_raises() -> dict:
    import megengine.data.transform as T

    T.ShortestEdgeResize(10, 20, sample_style="uniform")
    return {}


@case()
def transform_random_resize() -> dict:
    import megengine.data.transform as T

    return _seeded(T.RandomResize((0.5, 1.6), order=ORDER), _sample)


@case()
def transform_random_crop() -> dict:
    import megengine.data.transform as T

    return {"plain": _seeded(T.RandomCrop((12, 15), order=ORDER), _sample),
            "padded": _seeded(T.RandomCrop(16, padding_size=3, padding_value=[1, 2, 3],
                                           order=ORDER), _sample),
            "larger": _seeded(T.RandomCrop((26, 22), padding_value=[5, 6, 7],
                                           padding_maskvalue=9, order=ORDER), _sample),
            "keypoints": _seeded(T.RandomCrop(10, order=("image", "keypoints")),
                                 lambda: (_image(), _keypoints()))}


@case()
def transform_random_resized_crop() -> dict:
    import megengine.data.transform as T

    seeds = tuple(range(6))
    return {"default": _seeded(T.RandomResizedCrop(12, order=ORDER), _sample, seeds),
            "pair": _seeded(T.RandomResizedCrop((9, 14), (0.3, 0.9), (0.5, 2.0), order=ORDER),
                            _sample, seeds),
            # no draw fits: the centre crop, for an image wider, taller and within the ratios
            "fallback_wide": _seeded(T.RandomResizedCrop(8, (2.0, 3.0)), lambda: _image(10, 40)),
            "fallback_tall": _seeded(T.RandomResizedCrop(8, (2.0, 3.0)), lambda: _image(40, 10)),
            "fallback_within": _seeded(T.RandomResizedCrop(8, (2.0, 3.0)), _image)}


@case()
def transform_random_resized_crop_bad_range_raises() -> dict:
    import megengine.data.transform as T

    T.RandomResizedCrop(8, scale_range=(0.9, 0.1))
    return {}


@case()
def transform_center_crop() -> dict:
    import megengine.data.transform as T

    return {"square": T.CenterCrop(11, order=ORDER).apply(_sample()),
            "pair": T.CenterCrop((17, 9), order=ORDER).apply(_sample()),
            "keypoints": T.CenterCrop(12, order=("image", "keypoints")).apply(
                (_image(), _keypoints()))}


@case()
def transform_center_crop_too_large_raises() -> dict:
    import megengine.data.transform as T

    return {"out": T.CenterCrop((21, 10)).apply(_image())}


@case()
def transform_random_flips() -> dict:
    import megengine.data.transform as T

    order = ("image", "boxes", "mask", "keypoints")
    make = lambda: (*_sample(), _keypoints())  # noqa: E731
    return {"horizontal": _seeded(T.RandomHorizontalFlip(order=order), make),
            "vertical": _seeded(T.RandomVerticalFlip(0.7, order=order), make),
            "never": _seeded(T.RandomHorizontalFlip(0.0), _image)}


@case()
def transform_geometry_of_a_gray_image_raises() -> dict:
    import megengine.data.transform as T

    return {"out": T.Resize((4, 4)).apply(_image()[:, :, 0])}


# ----- colour ---------------------------------------------------------------------------------
@case()
def transform_normalize() -> dict:
    import megengine.data.transform as T

    image = _image()
    return {"default": T.Normalize().apply(image),
            "channels": T.Normalize([103.5, 116.3, 123.7], [57.4, 57.1, 58.4]).apply(image),
            "float64": T.Normalize(5.0, 2.0).apply(image.astype(np.float64)),
            "int32": T.Normalize(5.0, 2.0).apply(image.astype(np.int32)),
            "with_boxes": T.Normalize(1.0, 3.0, order=ORDER).apply(_sample())}


@case()
def transform_gaussian_noise() -> dict:
    import megengine.data.transform as T

    return {"default": _seeded(T.GaussianNoise(), _image),
            "small": _seeded(T.GaussianNoise(0.01, 0.05, order=ORDER), _sample),
            "float": _seeded(T.GaussianNoise(0.0, 0.02), lambda: _image().astype(np.float32))}


@case()
def transform_brightness_contrast_saturation() -> dict:
    import megengine.data.transform as T

    out = {}
    for name, kind in (("brightness", T.BrightnessTransform), ("contrast", T.ContrastTransform),
                       ("saturation", T.SaturationTransform)):
        out[name] = _seeded(kind(0.6, order=ORDER), _sample)
        out[name + "_strong"] = _seeded(kind(1.5), _image)
        out[name + "_zero"] = _seeded(kind(0), _image, (0,))
        out[name + "_float"] = _seeded(kind(0.4), lambda: _image().astype(np.float32))
    return out


@case()
def transform_negative_brightness_raises() -> dict:
    import megengine.data.transform as T

    T.BrightnessTransform(-0.1)
    return {}


@case()
def transform_hue() -> dict:
    import megengine.data.transform as T

    seeds = tuple(range(8))  # shifts of both signs
    return {"hue": _seeded(T.HueTransform(0.5, order=ORDER), _sample, seeds),
            "small": _seeded(T.HueTransform(0.05), _image, seeds),
            "zero": _seeded(T.HueTransform(0), _image, (0,)),
            "float": _seeded(T.HueTransform(0.3), lambda: _image().astype(np.float32))}


@case()
def transform_hue_out_of_range_raises() -> dict:
    import megengine.data.transform as T

    T.HueTransform(0.6)
    return {}


@case()
def transform_color_jitter() -> dict:
    import megengine.data.transform as T

    seeds = tuple(range(6))
    return {"all": _seeded(T.ColorJitter(0.4, 0.4, 0.4, 0.1, order=ORDER), _sample, seeds),
            "two": _seeded(T.ColorJitter(contrast=0.3, hue=0.2), _image, seeds),
            "one": _seeded(T.ColorJitter(saturation=0.5), _image),
            "none": _seeded(T.ColorJitter(), _image, (0,))}


@case()
def transform_lighting() -> dict:
    import megengine.data.transform as T

    return {"uint8": _seeded(T.Lighting(0.1, order=ORDER), _sample),
            "float": _seeded(T.Lighting(0.5), lambda: _image().astype(np.float32)),
            "zero": _seeded(T.Lighting(0), _image, (0,))}


# ----- composition ----------------------------------------------------------------------------
@case()
def transform_compose_with_order() -> dict:
    import megengine.data.transform as T

    t = T.Compose([T.RandomResize((0.8, 1.3)), T.RandomHorizontalFlip(),
                   T.RandomCrop(14), T.Normalize(100.0, 50.0), T.ToMode()], order=ORDER)
    return _seeded(t, _sample)


@case()
def transform_compose_shuffle() -> dict:
    import megengine.data.transform as T

    t = T.Compose([T.BrightnessTransform(0.5), T.Pad(2), T.CenterCrop(18),
                   T.RandomVerticalFlip(), T.ContrastTransform(0.5)],
                  shuffle_indices=[(1, 5), (2, 3, 4)], order=ORDER)
    return _seeded(t, _sample, tuple(range(8)))


@case()
def transform_compose_nested_takes_the_outer_order() -> dict:
    import megengine.data.transform as T

    inner = T.Compose([T.Resize((10, 12)), T.RandomHorizontalFlip(1.0)])
    outer = T.Compose([inner, T.Pad(1)], order=("image", "mask", "boxes"))
    image, boxes, mask = _sample()
    return {"out": outer.apply((image, mask, boxes)), "order": list(inner.transforms[0].order)}


@case()
def transform_compose_apply_batch() -> dict:
    import megengine.data.transform as T

    batch = [_sample() for _ in range(3)]
    out = {}
    for name, batched in (("per_sample", False), ("batch_compose", True)):
        np.random.seed(4)
        t = T.Compose([T.RandomCrop(12), T.BrightnessTransform(0.5)], batch_compose=batched,
                      order=ORDER)
        out[name] = t.apply_batch([tuple(a.copy() for a in s) for s in batch])
        out[name + "_after"] = int(np.random.randint(1 << 30))
    return out


@case()
def transform_compose_batch_and_shuffle_raises() -> dict:
    import megengine.data.transform as T

    T.Compose([T.Pad(1), T.Pad(2)], batch_compose=True, shuffle_indices=[(1, 2)])
    return {}


# ----- MegEngine's defects, not copied ----------------------------------------------------------
@case(megengine_bug="Pad with one number pads only the first channel with it (it hands the "
      "number to OpenCV, which reads a lone value as (value, 0, 0, 0)); a float value too")
def transform_pad_scalar_value_fills_every_channel() -> dict:
    import megengine.data.transform as T

    image = _image(5, 6)
    got = [T.Pad(2, value=7).apply(image), T.Pad(1, value=0.5).apply(image)]
    want = [np.pad(image, ((2, 2), (2, 2), (0, 0)), constant_values=7),
            np.pad(image.astype("float32"), ((1, 1), (1, 1), (0, 0)), constant_values=0.5)]
    return {"got": got, "want": want}


@case(megengine_bug="RandomCrop's padding ignores the order a Compose gives the crop")
def transform_random_crop_padding_follows_compose_order() -> dict:
    import megengine.data.transform as T

    image, boxes, mask = _sample()
    np.random.seed(3)
    got = T.Compose([T.RandomCrop(16, padding_size=2)], order=ORDER).apply((image, boxes, mask))
    np.random.seed(3)  # the same crop corner, drawn by hand (the padded image is 24 x 28)
    x, y = np.random.randint(0, 28 - 16 + 1), np.random.randint(0, 24 - 16 + 1)
    padded = np.pad(mask, ((2, 2), (2, 2), (0, 0)))
    want = (got[0], boxes + np.array([2 - x, 2 - y] * 2, np.float32),
            padded[y:y + 16, x:x + 16])
    return {"got": list(got), "want": list(want)}


@case(megengine_bug="RandomCrop pads the mask with 0 whatever padding_maskvalue says")
def transform_random_crop_pads_the_mask_with_its_value() -> dict:
    import megengine.data.transform as T

    image, _, mask = _sample()
    got = T.RandomCrop((24, 28), padding_size=2, padding_maskvalue=9,
                       order=("image", "mask")).apply((image, mask))[1]
    return {"got": got, "want": np.pad(mask, ((2, 2), (2, 2), (0, 0)), constant_values=9)}


@case(megengine_bug="transforms move the caller's points in place")
def transform_leaves_the_callers_points_alone() -> dict:
    import megengine.data.transform as T

    keypoints, coords = _keypoints(), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    kept = (keypoints.copy(), coords.copy())
    T.Pad(3, order=("image", "keypoints", "coords")).apply((_image(), keypoints, coords))
    return {"got": [keypoints, coords], "want": list(kept)}


@case(megengine_bug="ColorJitter ignores the order a Compose gives it")
def transform_color_jitter_follows_compose_order() -> dict:
    import megengine.data.transform as T

    image, _, mask = _sample()
    np.random.seed(0)
    got = T.Compose([T.ColorJitter(brightness=0.5)], order=("mask", "image")).apply((mask, image))
    np.random.seed(0)
    want = (mask, T.BrightnessTransform(0.5).apply(image))
    return {"got": list(got), "want": list(want)}
