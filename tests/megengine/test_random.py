"""`megengine.random`: seeding, distributions' ranges and moments, permutation."""

import numpy as np

import eager as mge


def test_seed_makes_draws_repeat():
    mge.random.seed(42)
    a = mge.random.normal(size=(3,)).numpy()
    b = mge.random.uniform(size=(3,)).numpy()
    mge.random.seed(42)
    np.testing.assert_array_equal(mge.random.normal(size=(3,)).numpy(), a)
    np.testing.assert_array_equal(mge.random.uniform(size=(3,)).numpy(), b)
    assert (mge.random.normal(size=(3,)).numpy() != a).any()   # the state advances


def test_normal_and_uniform_moments():
    x = mge.random.normal(mean=2.0, std=3.0, size=(20000,))
    assert x.shape == (20000,) and x.dtype == np.float32
    assert abs(x.numpy().mean() - 2.0) < 0.1 and abs(x.numpy().std() - 3.0) < 0.1
    u = mge.random.uniform(low=-1.0, high=3.0, size=(100, 200)).numpy()
    assert u.shape == (100, 200) and u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 0.05


def test_permutation():
    p = mge.random.permutation(10)
    assert p.dtype == np.int32
    np.testing.assert_array_equal(np.sort(p.numpy()), np.arange(10))
    rows = mge.tensor(np.arange(12, dtype=np.float32).reshape(6, 2))
    shuffled = mge.random.permutation(rows).numpy()
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, rows.numpy()))


def test_gamma_and_poisson_means():
    g = mge.random.gamma(2.0, 3.0, size=(20000,)).numpy()          # mean shape * scale
    assert (g > 0).all() and abs(g.mean() - 6.0) < 0.2
    lam = mge.random.poisson(4.0, size=(20000,)).numpy()
    assert lam.dtype == np.float32 and abs(lam.mean() - 4.0) < 0.1
    np.testing.assert_array_equal(lam, np.round(lam))


def test_rng_objects_draw_from_their_own_key():
    mge.random.seed(11)
    before = mge.random.get_rng_state().numpy()
    a, b = mge.random.RNG(seed=3), mge.random.RNG(seed=3)
    x = a.normal(mean=1.0, std=2.0, size=(4,))
    np.testing.assert_array_equal(x.numpy(), b.normal(mean=1.0, std=2.0, size=(4,)).numpy())
    assert not np.array_equal(a.normal(size=(4,)).numpy(), x.numpy())  # it advanced
    u = a.uniform(low=2.0, high=3.0, size=(100,)).numpy()
    assert (u >= 2.0).all() and (u < 3.0).all()
    assert sorted(a.permutation(5).numpy().tolist()) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(mge.random.get_rng_state().numpy(), before)  # untouched
