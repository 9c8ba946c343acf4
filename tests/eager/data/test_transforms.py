"""The data transforms (`eager.data.transform`): shapes and dtypes of every transform, how
`order` sends the elements of a sample to their kinds, Compose's order hand-down and shuffling,
the errors, and the randomness (one generator per sample through `sample_rng`). Agreement with
real MegEngine, pixel for pixel, is in tests/parity/cases_transforms.py."""

import copy
import itertools
import pickle
import threading

import cv2
import numpy as np
import pytest

import eager.data.transform as T
from eager.core.errors import EagerError
from eager.data.sample_rng import drawing_from, rng

ORDER = ("image", "boxes", "mask")


def image(h=20, w=24, c=3, seed=0, dtype=np.uint8):
    return np.random.RandomState(seed).randint(0, 256, (h, w, c)).astype(dtype)


def sample(h=20, w=24):
    boxes = np.array([[2, 3, 10, 15], [5, 1, 20, 18]], np.float32)
    mask = np.random.RandomState(1).randint(0, 5, (h, w, 1)).astype(np.uint8)
    return image(h, w), boxes, mask


def keypoints():
    points = np.random.RandomState(2).uniform(0, 18, (2, 3, 2)).astype(np.float32)
    return np.concatenate([points, np.ones((2, 3, 1), np.float32)], axis=-1)


# ----- every transform: output shape and dtype ----------------------------------------------------
# (transform, input dtype, output shape of a 20 x 24 x 3 image, output dtype)
SHAPES = {
    "pad": (T.Pad(2), np.uint8, (24, 28, 3), np.uint8),
    "pad_float_value": (T.Pad(1, value=0.5), np.uint8, (22, 26, 3), np.float32),
    "resize": (T.Resize((10, 7)), np.uint8, (10, 7, 3), np.uint8),
    "resize_short_side": (T.Resize(10), np.uint8, (10, 12, 3), np.uint8),
    "shortest_edge": (T.ShortestEdgeResize(12, 100), np.uint8, (12, 14, 3), np.uint8),
    "shortest_edge_bounded": (T.ShortestEdgeResize(30, 30), np.uint8, (25, 30, 3), np.uint8),
    "random_resize": (T.RandomResize((0.5, 0.5)), np.uint8, (10, 12, 3), np.uint8),
    "random_crop": (T.RandomCrop((8, 9)), np.uint8, (8, 9, 3), np.uint8),
    "random_crop_larger": (T.RandomCrop(30), np.uint8, (30, 30, 3), np.uint8),
    "random_resized_crop": (T.RandomResizedCrop((5, 6)), np.uint8, (5, 6, 3), np.uint8),
    "center_crop": (T.CenterCrop(7), np.uint8, (7, 7, 3), np.uint8),
    "hflip": (T.RandomHorizontalFlip(), np.uint8, (20, 24, 3), np.uint8),
    "vflip": (T.RandomVerticalFlip(), np.uint8, (20, 24, 3), np.uint8),
    "to_mode": (T.ToMode(), np.uint8, (3, 20, 24), np.uint8),
    "normalize": (T.Normalize([1, 2, 3], [4, 5, 6]), np.uint8, (20, 24, 3), np.float32),
    "normalize_float64": (T.Normalize(), np.float64, (20, 24, 3), np.float64),
    "noise": (T.GaussianNoise(std=0.1), np.uint8, (20, 24, 3), np.uint8),
    "brightness": (T.BrightnessTransform(0.5), np.float32, (20, 24, 3), np.float32),
    "contrast": (T.ContrastTransform(0.5), np.uint8, (20, 24, 3), np.uint8),
    "saturation": (T.SaturationTransform(0.5), np.uint8, (20, 24, 3), np.uint8),
    "hue": (T.HueTransform(0.2), np.float32, (20, 24, 3), np.float32),
    "color_jitter": (T.ColorJitter(0.3, 0.3, 0.3, 0.3), np.uint8, (20, 24, 3), np.uint8),
    "lighting": (T.Lighting(0.1), np.uint8, (20, 24, 3), np.uint8),
    "compose": (T.Compose([T.Resize((8, 8)), T.ToMode()]), np.uint8, (3, 8, 8), np.uint8),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_output_shape_and_dtype(name):
    transform, dtype, shape, out_dtype = SHAPES[name]
    out = transform.apply(image(dtype=dtype))
    assert out.shape == shape and out.dtype == out_dtype
    batch = transform.apply_batch([image(dtype=dtype), image(seed=1, dtype=dtype)])
    assert isinstance(batch, tuple) and [b.shape for b in batch] == [shape, shape]


def test_a_one_channel_mask_keeps_its_channel_axis():
    out = T.Resize((10, 12), order=ORDER).apply(sample())
    assert out[2].shape == (10, 12, 1) and out[2].dtype == np.uint8
    # nearest-neighbour: a mask keeps its labels
    assert set(np.unique(out[2])) <= set(range(5))


def test_pseudo_transform_is_the_identity():
    x = image()
    assert T.PseudoTransform().apply(x) is x
    assert T.PseudoTransform().apply_batch([x, 3]) == (x, 3)
    assert repr(T.CenterCrop(3)) == "CenterCrop"


# ----- order: the elements of a sample by kind --------------------------------------------------
def test_a_bare_image_comes_back_bare_and_a_tuple_as_a_tuple():
    x = image()
    assert isinstance(T.CenterCrop(4).apply(x), np.ndarray)
    out = T.CenterCrop(4).apply((x,))
    assert isinstance(out, np.ndarray)  # a one-element result is returned bare
    out = T.CenterCrop(4).apply((x, "extra", 5))  # elements past `order` pass through
    assert out[1:] == ("extra", 5) and out[0].shape == (4, 4, 3)


def test_categories_and_infos_pass_through():
    x, boxes, _ = sample()
    t = T.Pad(1, order=("image", "boxes_category", "boxes", "info"))
    out = t.apply((x, [1, 2], boxes, {"path": "a.jpg"}))
    assert out[1] == [1, 2] and out[3] == {"path": "a.jpg"}
    np.testing.assert_array_equal(out[2], boxes + 1)


def test_pad_moves_boxes_keypoints_coords_and_polygons():
    order = ("image", "boxes", "mask", "keypoints", "coords", "polygons")
    x, boxes, mask = sample()
    coords = np.array([[0.0, 0.0], [5.0, 6.0]], np.float32)
    polygons = [[coords.copy(), coords[:1].copy()]]
    out = T.Pad((1, 2, 3, 4), mask_value=7, order=order).apply(
        (x, boxes, mask, keypoints(), coords, polygons))
    np.testing.assert_array_equal(out[1], boxes + [3, 1, 3, 1])
    assert out[2].shape == (23, 31, 1) and out[2][0, 0, 0] == 7
    np.testing.assert_allclose(out[3][..., :2], keypoints()[..., :2] + [3, 1])
    np.testing.assert_array_equal(out[3][..., 2], 1)
    np.testing.assert_array_equal(out[4], coords + [3, 1])
    np.testing.assert_array_equal(out[5][0][1], coords[:1] + [3, 1])


def test_points_of_the_caller_are_not_changed():
    points, coords = keypoints(), np.array([[1.0, 2.0]], np.float32)
    kept = points.copy(), coords.copy()
    T.RandomHorizontalFlip(1.0, order=("image", "keypoints", "coords")).apply(
        (image(), points, coords))
    np.testing.assert_array_equal(points, kept[0])
    np.testing.assert_array_equal(coords, kept[1])


def test_an_image_without_instances_has_empty_keypoints():
    empty = np.zeros((0, 3, 3), np.float32)
    out = T.Pad(2, order=("image", "keypoints")).apply((image(), empty))
    assert out[1].shape == (0, 3, 3)


@pytest.mark.parametrize("prob, flipped", [(1.0, True), (0.0, False)])
def test_flips_move_boxes_with_the_pixels(prob, flipped):
    x, boxes, mask = sample()
    out = T.RandomHorizontalFlip(prob, order=ORDER).apply((x, boxes, mask))
    want = np.stack([24 - boxes[:, 2], boxes[:, 1], 24 - boxes[:, 0], boxes[:, 3]], 1)
    np.testing.assert_array_equal(out[0], x[:, ::-1] if flipped else x)
    np.testing.assert_array_equal(out[1], want if flipped else boxes)
    np.testing.assert_array_equal(out[2], mask[:, ::-1] if flipped else mask)
    out = T.RandomVerticalFlip(prob, order=ORDER).apply((x, boxes, mask))
    want = np.stack([boxes[:, 0], 20 - boxes[:, 3], boxes[:, 2], 20 - boxes[:, 1]], 1)
    np.testing.assert_array_equal(out[1], want if flipped else boxes)
    np.testing.assert_array_equal(out[2], mask[::-1] if flipped else mask)


def test_crops_move_boxes_by_the_corner():
    x, boxes, mask = sample()
    out = T.CenterCrop((10, 12), order=ORDER).apply((x, boxes, mask))
    np.testing.assert_array_equal(out[0], x[5:15, 6:18])
    np.testing.assert_array_equal(out[1], boxes - [6, 5, 6, 5])
    np.testing.assert_array_equal(out[2], mask[5:15, 6:18])


def test_the_image_sets_the_size_wherever_order_puts_it():
    x, boxes, mask = sample()
    out = T.Resize((10, 12), order=("mask", "boxes", "image")).apply((mask, boxes, x))
    assert out[2].shape == (10, 12, 3) and out[0].shape == (10, 12, 1)
    np.testing.assert_allclose(out[1], boxes / 2)


def test_photometric_transforms_leave_labels_alone():
    x, boxes, mask = sample()
    for t in (T.Normalize(order=ORDER), T.BrightnessTransform(0.5, order=ORDER),
              T.ColorJitter(0.5, 0.5, 0.5, 0.2, order=ORDER), T.Lighting(0.1, order=ORDER)):
        out = t.apply((x, boxes, mask))
        np.testing.assert_array_equal(out[1], boxes)
        assert out[2] is mask


# ----- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: T.Resize(4, order=("image", "batch")),
    lambda: T.Normalize(order=5),
    lambda: T.ToMode("HWC"),
    lambda: T.Pad((1, 2, 3)),
    lambda: T.Pad(1, mask_value=0.5),
    lambda: T.RandomResizedCrop(4, ratio_range=(2.0, 1.0)),
    lambda: T.BrightnessTransform(-1),
    lambda: T.HueTransform(0.7),
    lambda: T.ColorJitter(brightness=[0.5, 1.5]),
    lambda: T.Lighting(-0.1),
    lambda: T.Compose([T.Pad(1)], batch_compose=True, shuffle_indices=[(1,)]),
    lambda: T.Compose([T.Pad(1), T.Pad(2)], shuffle_indices=[(0, 1)]),
    lambda: T.CenterCrop((30, 4)).apply(image()),
    lambda: T.CenterCrop(4, order=("boxes",)).apply((np.zeros((1, 4)),)),
    lambda: T.Resize((4, 4)).apply(image()[:, :, 0]),
    lambda: T.HueTransform(0.2).apply(image(c=1)),
])
def test_bad_arguments_raise_a_value_error_of_the_project(make):
    with pytest.raises(T.TransformError) as caught:
        make()
    assert isinstance(caught.value, (ValueError, EagerError))


def test_an_unknown_kind_is_not_implemented():
    with pytest.raises(NotImplementedError, match="'depth'"):
        T.Normalize(order=("image", "depth"))
    with pytest.raises(NotImplementedError):
        T.ShortestEdgeResize(4, 8, sample_style="uniform")
    with pytest.raises(T.UnsupportedError):
        T.Normalize(order="image")  # a string is a sequence of one-letter kinds


def test_a_subclass_writes_only_the_kinds_it_needs():
    class Invert(T.VisionTransform):
        def _apply_image(self, image):
            return 255 - image

    x = image()
    np.testing.assert_array_equal(Invert().apply(x), 255 - x)
    with pytest.raises(NotImplementedError):  # boxes need `_apply_coords`
        Invert(order=("image", "boxes")).apply((x, np.zeros((1, 4))))


# ----- Compose ----------------------------------------------------------------------------------
class Record(T.VisionTransform):
    """Appends its name to the sample's log (the element after the image)."""

    def __init__(self, name, order=None):
        super().__init__(order)
        self.name = name

    def apply(self, input):
        x, log = input
        return x, [*log, self.name]


def test_compose_shuffles_each_group_and_nothing_else():
    t = T.Compose([Record(i) for i in range(1, 6)], shuffle_indices=[(1, 3), (2, 4, 5)])
    seen = set()
    np.random.seed(0)
    for _ in range(200):
        seen.add(tuple(t.apply((None, []))[1]))
    allowed = {(a, b, c, d, e) for a, c in itertools.permutations((1, 3))
               for b, d, e in itertools.permutations((2, 4, 5))}
    assert seen == allowed


def test_compose_hands_its_order_down_through_nested_containers():
    crop = T.RandomCrop(8, padding_size=2)
    jitter = T.ColorJitter(0.5)
    inner = T.Compose([crop, jitter])
    T.Compose([inner], order=("image", "boxes"))
    for t in (inner, crop, crop.pad, jitter, jitter.transforms, jitter.transforms.transforms[0]):
        assert tuple(t.order) == ("image", "boxes"), t


def test_random_crop_padding_moves_boxes_inside_a_compose():
    x, boxes, mask = sample()
    np.random.seed(3)
    out = T.Compose([T.RandomCrop(16, padding_size=2, padding_maskvalue=9)],
                    order=ORDER).apply((x, boxes, mask))
    np.random.seed(3)
    cx, cy = np.random.randint(0, 13), np.random.randint(0, 9)
    np.testing.assert_array_equal(out[1], boxes + [2 - cx, 2 - cy] * 2)
    padded = np.pad(mask, ((2, 2), (2, 2), (0, 0)), constant_values=9)
    np.testing.assert_array_equal(out[2], padded[cy:cy + 16, cx:cx + 16])


def test_batch_compose_runs_each_transform_over_the_whole_batch():
    t = T.Compose([Record("a"), Record("b")], batch_compose=True)
    assert t.apply_batch([(0, []), (1, [])]) == ((0, ["a", "b"]), (1, ["a", "b"]))


def test_transforms_pickle():
    t = T.Compose([T.RandomCrop(8, padding_size=1), T.ColorJitter(0.2)], order=ORDER)
    back = pickle.loads(pickle.dumps(t))
    with drawing_from(np.random.SeedSequence(1)):
        want = t.apply(sample())
    with drawing_from(np.random.SeedSequence(1)):
        got = back.apply(sample())
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


# ----- randomness ---------------------------------------------------------------------------------
RANDOM = [T.RandomResize((0.5, 1.5), order=ORDER), T.RandomCrop(12, 2, order=ORDER),
          T.RandomResizedCrop(10, order=ORDER), T.ShortestEdgeResize((8, 30), 40, order=ORDER),
          T.RandomHorizontalFlip(order=ORDER), T.GaussianNoise(std=0.1, order=ORDER),
          T.ColorJitter(0.4, 0.4, 0.4, 0.1, order=ORDER), T.Lighting(0.2, order=ORDER),
          T.Compose([T.RandomVerticalFlip(), T.BrightnessTransform(0.5), T.HueTransform(0.3)],
                    shuffle_indices=[(1, 2, 3)], order=ORDER)]


@pytest.mark.parametrize("t", RANDOM, ids=repr)
def test_a_sample_seed_repeats_its_draws_and_another_differs(t):
    def run(seed):
        with drawing_from(np.random.SeedSequence([seed, 0, 5])):
            return [t.apply(sample()) for _ in range(4)]

    first, again = run(7), run(7)
    state = np.random.get_state()[1].copy()
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert not all(all(np.array_equal(x, y) for x, y in zip(a, b))
                   for a, b in zip(first, run(8)))
    # numpy's global generator was not touched
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_outside_a_loader_the_draws_are_numpys():
    t = T.RandomCrop(10)
    np.random.seed(5)
    out = t.apply(image())
    np.random.seed(5)
    x, y = np.random.randint(0, 15), np.random.randint(0, 11)
    np.testing.assert_array_equal(out, image()[y:y + 10, x:x + 10])


def test_a_sequence_of_interpolations_is_drawn_from_the_sample_generator():
    t = T.Resize((7, 9), interpolation=(cv2.INTER_NEAREST, cv2.INTER_CUBIC))
    want = {cv2.resize(image(), (9, 7), interpolation=i).tobytes()
            for i in (cv2.INTER_NEAREST, cv2.INTER_CUBIC)}
    got = set()
    for seed in range(20):
        with drawing_from(np.random.SeedSequence(seed)) as generator:
            expected = t.interpolation[np.random.RandomState(
                np.random.MT19937(np.random.SeedSequence(seed))).randint(2)]
            out = t.apply(image())
            assert generator is rng()
        assert out.tobytes() == cv2.resize(image(), (9, 7), interpolation=expected).tobytes()
        got.add(out.tobytes())
    assert got == want


def test_one_transform_object_serves_several_threads():
    t = T.Compose([T.RandomCrop(10), T.RandomHorizontalFlip()], order=("image", "boxes"))
    boxes = np.array([[0, 0, 24, 20]], np.float32)
    before = copy.copy(t.transforms[0].__dict__)
    errors = []

    def work(seed):
        for i in range(50):
            with drawing_from(np.random.SeedSequence([seed, i])):
                crop, moved = t.apply((image(), boxes))
            # the box of the whole image tells where the crop was and whether it was flipped
            left, top, right = int(moved[0, 0]), int(moved[0, 1]), int(moved[0, 2])
            plain = image()[-top:10 - top, -left:10 - left]
            flipped = image()[-top:10 - top, right - 10:right][:, ::-1]
            if not (np.array_equal(crop, plain) or np.array_equal(crop, flipped)):
                errors.append((seed, i))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert t.transforms[0].__dict__ == before  # one call's draws stay off the shared object


def test_torch_transform_compose_hands_pil_images_in_rgb():
    pil = pytest.importorskip("PIL.Image")
    x = image()
    seen = []

    def mirror(picture):
        seen.append(np.array(picture))
        return picture.transpose(pil.Transpose.FLIP_LEFT_RIGHT)

    out = T.TorchTransformCompose([mirror]).apply(x)
    np.testing.assert_array_equal(seen[0], x[:, :, ::-1])  # the callable saw RGB
    np.testing.assert_array_equal(out, x[:, ::-1])  # and BGR came back

