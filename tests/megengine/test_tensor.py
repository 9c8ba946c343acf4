"""`megengine.Tensor`: construction dtypes, operators, methods and indexing, as MegEngine
documents them (`megengine` imported as `mge`)."""

import numpy as np
import pytest

import eager as mge
import eager.functional as F
from eager.autodiff import GradManager


@pytest.mark.parametrize("data, dtype", [
    ([1, 2, 3], np.int32),                       # Python ints are int32
    ([1.0, 2.0], np.float32),                    # Python floats are float32
    (np.arange(3, dtype=np.int64), np.int32),    # numpy int64 narrows to int32
    (np.ones(3, np.float64), np.float32),        # numpy float64 narrows to float32
    (np.ones(3, np.float16), np.float16),
])
def test_tensor_default_dtypes(data, dtype):
    x = mge.tensor(data)
    assert x.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(x.numpy(), np.asarray(data).astype(dtype))


def test_tensor_properties_and_item():
    x = mge.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.shape == (2, 3) and isinstance(x.shape, tuple)
    assert x.ndim == 2 and x.size == 6
    assert mge.tensor([3.5]).item() == 3.5
    assert x.grad is None


def test_parameter_is_a_float32_tensor():
    p = mge.Parameter([1.0, 2.0])
    assert isinstance(p, mge.Tensor)
    assert p.dtype == np.float32
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])


def test_arithmetic_broadcasts_and_keeps_float32():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.0, 2.0, 4.0], np.float32)
    x, y = mge.tensor(a), mge.tensor(b)
    np.testing.assert_allclose((x + y).numpy(), a + b)
    np.testing.assert_allclose((x * 2 - y / 2).numpy(), a * 2 - b / 2)
    np.testing.assert_allclose((x ** 2).numpy(), a ** 2)
    np.testing.assert_allclose((-x).numpy(), -a)
    assert (x * 2.5).dtype == np.float32


def test_true_division_of_integers_gives_float():
    x = mge.tensor([1, 2, 3])
    out = x / 2
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), [0.5, 1.0, 1.5])
    np.testing.assert_array_equal((mge.tensor([7, 2, 3]) // 2).numpy(), [3, 1, 1])
    np.testing.assert_array_equal((mge.tensor([5, -5]) % 3).numpy(), [2, 1])


def test_comparisons_give_bool():
    x = mge.tensor([1.0, 2.0, 3.0])
    out = x > 1.5
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out.numpy(), [False, True, True])
    np.testing.assert_array_equal((x == 2).numpy(), [False, True, False])


def test_matmul_operator():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose((mge.tensor(a) @ mge.tensor(b)).numpy(), a @ b)


def test_reshape_transpose_flatten():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = mge.tensor(a)
    assert x.reshape(6, -1).shape == (6, 4)
    assert x.reshape((4, 6)).shape == (4, 6)
    np.testing.assert_array_equal(x.transpose(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.flatten().numpy(), a.ravel())
    np.testing.assert_array_equal(x[0].T.numpy(), a[0].T)


def test_reduction_methods():
    a = np.array([[1.0, 5.0, 2.0], [4.0, 0.0, 6.0]], np.float32)
    x = mge.tensor(a)
    assert x.sum().item() == 18.0
    np.testing.assert_allclose(x.mean(axis=0).numpy(), a.mean(axis=0))
    np.testing.assert_allclose(x.max(axis=1, keepdims=True).numpy(), [[5.0], [6.0]])
    np.testing.assert_allclose(x.min(axis=1).numpy(), [1.0, 0.0])
    np.testing.assert_allclose(x.prod(axis=1).numpy(), [10.0, 0.0])
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), [1, 2])
    np.testing.assert_array_equal(x.argmin(axis=0).numpy(), [0, 1, 0])


def test_astype_truncates_toward_zero():
    out = mge.tensor([1.7, -1.7]).astype("int32")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), [1, -1])


def test_detach_stops_the_gradient():
    x = mge.tensor([3.0])
    gm = GradManager().attach([x])
    with gm:
        y = x * x.detach()
        gm.backward(y)
    np.testing.assert_allclose(x.grad.numpy(), [3.0])


def test_indexing_like_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = mge.tensor(a)
    np.testing.assert_array_equal(x[1, :, ::2].numpy(), a[1, :, ::2])
    np.testing.assert_array_equal(x[..., -1].numpy(), a[..., -1])
    np.testing.assert_array_equal(x[:, None, 0].numpy(), a[:, None, 0])
    idx = np.array([2, 0])
    np.testing.assert_array_equal(x[:, mge.tensor(idx)].numpy(), a[:, idx])
    mask = a[0] > 5
    np.testing.assert_array_equal(x[0][mge.tensor(mask)].numpy(), a[0][mask])


def test_setitem_writes_in_place_and_is_differentiable():
    x = mge.tensor(np.zeros((2, 3), np.float32))
    v = mge.tensor([1.0, 2.0, 3.0])
    gm = GradManager().attach([v])
    with gm:
        x[1] = v * 2
        gm.backward(x.sum())
    np.testing.assert_array_equal(x.numpy(), [[0, 0, 0], [2, 4, 6]])
    np.testing.assert_allclose(v.grad.numpy(), [2.0, 2.0, 2.0])


def test_inplace_arithmetic_keeps_shape_and_dtype():
    x = mge.tensor([[1.0, 2.0, 3.0]])
    x += 1
    x *= 2
    assert x.shape == (1, 3) and x.dtype == np.float32
    np.testing.assert_array_equal(x.numpy(), [[4.0, 6.0, 8.0]])


def test_creation_functions():
    assert F.zeros((2, 3)).dtype == np.float32
    np.testing.assert_array_equal(F.ones((2,)).numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(F.full((2,), 3.0).numpy(), [3.0, 3.0])
    arange = F.arange(0, 5)
    assert arange.dtype == np.float32
    np.testing.assert_array_equal(arange.numpy(), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(F.arange(1, 2, 0.25).numpy(), [1.0, 1.25, 1.5, 1.75])
    np.testing.assert_allclose(F.linspace(3, 10, 3).numpy(), [3.0, 6.5, 10.0])
    np.testing.assert_array_equal(F.eye(2, 3).numpy(), np.eye(2, 3))
    x = mge.tensor([[1, 2]])
    like = F.zeros_like(x)
    assert like.dtype == np.int32 and like.shape == (1, 2)
    np.testing.assert_array_equal(F.ones_like(x).numpy(), [[1, 1]])


def test_reset_replaces_the_value_where_it_is_held():
    """MegEngine's `_reset` (what its `set_value` calls, and code calls directly)."""
    a = mge.tensor([1.0, 2.0])
    holder = [a]
    a._reset([7, 8])  # converted to a's dtype
    assert holder[0] is a and a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), [7.0, 8.0])
    a._reset(mge.tensor([1, 2, 3], dtype="int32"))  # a tensor: shape and dtype too
    assert a.dtype == np.int32 and a.shape == (3,)
    a.reset_zero()
    np.testing.assert_array_equal(a.numpy(), [0, 0, 0])


def test_var_is_the_functional_variance():
    x = np.array([[1.0, 2.0, 4.0], [0.0, -1.0, 3.0]], np.float32)
    t = mge.tensor(x)
    np.testing.assert_allclose(t.var().numpy(), x.var(), rtol=1e-6)
    np.testing.assert_allclose(t.var(axis=1, keepdims=True).numpy(),
                               x.var(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(t.var(0, unbiased=True).numpy(), x.var(0, ddof=1), rtol=1e-6)
