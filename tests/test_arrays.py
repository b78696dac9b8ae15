"""Default vector operations for arrays (braidpy._arrays)."""

import numpy as np
import pytest

from braidpy import _arrays

RNG = np.random.default_rng(20261121)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (-1.0, 1.0), (1.0, -1.0), (2.5, -0.5), (0.0, 3.0),
                                  (1.0, 0.0), (-3.0, 2.0)])
def test_sum_matches_reference_bitwise(a, b):
    x, y = RNG.standard_normal(7), RNG.standard_normal(7)
    want = a * x + b * y
    _arrays.array_sum(a, x, b, y)
    assert np.array_equal(y, want)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (2.0, -1.0), (1.0, -1.0), (0.5, 0.25)])
def test_sum_with_x_is_y(a, b):
    x = RNG.standard_normal(5)
    want = a * x + b * x
    _arrays.array_sum(a, x, b, x)
    assert np.array_equal(x, want)


def test_sum_with_overlapping_views():
    base = np.arange(6.0)
    x, y = base[1:5], base[0:4]
    want = 2.0 * x + 3.0 * y
    _arrays.array_sum(2.0, x, 3.0, y)
    assert np.array_equal(y, want)


def test_clone_is_independent():
    u = RNG.standard_normal((3, 4))
    v = _arrays.array_clone(u)
    v += 1
    assert not np.array_equal(u, v)


@pytest.mark.parametrize("u", [np.array([3.0]), np.array([3.0, 4.0]),
                               np.array([[1.0, 2.0], [2.0, 4.0]]),
                               np.array([3 + 4j])])
def test_norm_is_euclidean(u):
    assert _arrays.array_norm(u) == pytest.approx(np.linalg.norm(u.ravel()), rel=1e-15)


@pytest.mark.parametrize("u", [np.arange(5.0), np.ones((2, 3), dtype=np.float32),
                               np.array(2.5), np.arange(4, dtype=np.int64).reshape(2, 2)[:, ::-1]])
def test_pack_round_trip(u):
    back = _arrays.array_unpack(bytearray(_arrays.array_pack(u)))
    assert back.dtype == u.dtype and back.shape == u.shape and np.array_equal(back, u)


def test_non_arrays_get_a_clear_error():
    with pytest.raises(TypeError, match="override clone"):
        _arrays.array_clone([1.0, 2.0])


def test_numpy_scalars_are_rejected_with_advice():
    with pytest.raises(TypeError, match="1-element array"):
        _arrays.array_sum(1.0, np.float64(1.0), 2.0, np.float64(2.0))


def test_numpy_scalar_state_fails_the_solve_clearly():
    import braidpy

    class Scalar(braidpy.App):
        def init(self, t):
            return np.float64(1.0)

        def step(self, u, t0, t1, status):
            return u / 2

    with pytest.raises(TypeError, match="NumPy scalar"):
        braidpy.solve(Scalar(), 0.0, 1.0, 8, cfactor=2)


def test_pack_records_the_array_library():
    buf = _arrays.array_pack(np.arange(3.0))
    assert b"numpy;" in bytes(buf[:40])
