"""Fills and ranges made on the host are the bits jax's programs make (eager.core.host_values)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eager as eg
from eager.core import creation, host_values

DTYPES = [np.dtype(d) for d in ("float32", "float16", "int32", "int16", "int8", "uint8", "bool",
                                "float64", "int64")] + [np.dtype(ml_dtypes.bfloat16)]
SPECIAL = [0.0, -0.0, 1.0, -1.5, 0.1, 1e-45, 3.4e38, 1e39, -1e39, float("inf"), float("nan"),
           65504.0, 65520.0, 2 ** 24 + 1.0, 0, 1, -1, 7, 255, 256, -129, 2 ** 24 + 1, 2 ** 31 - 1,
           -(2 ** 31), True, False, np.float32(2.5), np.float64(0.1), np.int32(-3), np.bool_(True)]


# dtypes every plain number fills on the host (floats only into floats)
HOST_FILLED = [np.dtype(d) for d in ("float32", "float16", "int32", "int8", "uint8", "bool")]


def _float_to_integer(value: object, dtype: np.dtype) -> bool:
    return np.asarray(value).dtype.kind == "f" and dtype.kind != "f"


def _bits(a: object) -> tuple:
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


def _program_full(value: object, dtype: np.dtype) -> np.ndarray:
    return np.asarray(jax.jit(lambda v: jnp.full((3,), v, dtype))(value))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", SPECIAL, ids=repr)
def test_a_host_fill_is_the_programs_bits(value, dtype):
    fill = host_values.fill_value((3,), value, dtype)
    if fill is None:  # the program is kept for this case: the public call still gives its bits
        assert _float_to_integer(value, dtype) or dtype not in HOST_FILLED or abs(value) >= 2 ** 31
    else:
        assert _bits(np.full((3,), fill)) == _bits(_program_full(value, dtype))
    assert _bits(eg.full((3,), value, dtype).numpy()) == _bits(_program_full(value, dtype))


@settings(max_examples=150, deadline=None)
@given(value=st.one_of(st.floats(width=64), st.integers(-(2 ** 31), 2 ** 31 - 1), st.booleans()),
       dtype=st.sampled_from(DTYPES))
def test_host_fills_match_the_program_on_any_value(value, dtype):
    fill = host_values.fill_value((3,), value, dtype)
    if fill is not None:
        assert _bits(np.full((3,), fill)) == _bits(_program_full(value, dtype))


_BOUND = st.one_of(st.integers(-1000, 1000), st.floats(-1e4, 1e4, width=32))


@settings(max_examples=200, deadline=None)
@given(start=_BOUND, count=st.integers(0, 300),
       step=st.one_of(st.integers(1, 50), st.integers(-50, -1),
                      st.floats(0.125, 50, width=32), st.floats(-50, -0.125, width=32)),
       dtype=st.sampled_from([np.dtype(d) for d in ("float32", "float16", "int32", "int64")]
                             + [np.dtype(ml_dtypes.bfloat16)]))
def test_a_host_range_is_jax_arange(start, count, step, dtype):
    stop = start + step * count + (0.5 * step if count % 3 == 0 else 0)
    values = host_values.arange_values(start, stop, step, dtype)
    want = np.asarray(jnp.arange(start, stop, step, dtype=dtype))
    if values is None:  # only for float bounds of an integer range, or bounds near zero
        assert (dtype.kind == "i" and float in (type(start), type(step))
                or 0 < abs(start) < 2.0 ** -100)
    else:
        assert _bits(values) == _bits(want)


def test_ranges_and_fills_compile_nothing(monkeypatch):
    """The anchors' and losses' plain calls make no program at all."""
    def refuse(*args):
        raise AssertionError(f"compiled a program for {args}")

    monkeypatch.setattr(creation, "_full_program", refuse)
    monkeypatch.setattr(creation, "_arange_program", refuse)
    assert eg.arange(0, 8, 0.5).numpy().tolist() == np.arange(0, 8, 0.5).tolist()
    assert eg.arange(5, dtype="int32").numpy().tolist() == [0, 1, 2, 3, 4]
    assert eg.ones((2, 2)).numpy().tolist() == [[1, 1], [1, 1]]
    assert eg.full((2,), -1, "int32").numpy().tolist() == [-1, -1]
    assert eg.full((1,), -0.0).numpy().tobytes() == np.float32(-0.0).tobytes()


def test_a_large_fill_or_range_runs_its_kept_program(monkeypatch):
    """Above `MAX_BYTES` the compiled program is faster at every step: it is kept for those."""
    programs = []
    for name in ("_full_program", "_arange_program"):
        real = getattr(creation, name)
        monkeypatch.setattr(creation, name, lambda *a, _r=real: programs.append(a) or _r(*a))
    limit = host_values.MAX_BYTES // 4
    assert eg.zeros((limit,)).numpy().sum() == 0 and eg.arange(limit).numpy()[-1] == limit - 1
    assert programs == []
    big = eg.full((limit + 1,), 2.5).numpy()
    ranged = eg.arange(limit + 1, dtype="int32").numpy()
    assert [name for name, *_ in programs] == [(limit + 1,), (0, limit + 1, 1)]
    assert big.dtype == np.float32 and (big == 2.5).all()
    np.testing.assert_array_equal(ranged, np.arange(limit + 1, dtype=np.int32))
