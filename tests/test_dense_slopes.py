"""braidpy.nn.dense.SlopeCache: the activation's slopes kept over one gradient's adjoint
(the first visit of a layer keeps them, the others skip the product u K^T), with the
bits of the plain kernels; and where it does not apply."""

import numpy as np
import pytest

from braidpy._core import _host_dense
from braidpy.nn import dense_adjoint_batched, dense_gradient_batched
from braidpy.nn.dense import SlopeCache


def _layers(n=12, rows=40, width=8, seed=5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    T = rng.standard_normal((n, rows, width)).astype(dtype)  # primal states u_0 .. u_n-1
    Ks = (rng.standard_normal((n, width, width)) / np.sqrt(width)).astype(dtype)
    bs = (0.3 * rng.standard_normal((n, width))).astype(dtype)
    return T, Ks, bs, rng


@pytest.mark.parametrize("act", ["relu", "smooth_relu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kept_slopes_give_the_plain_kernels_bits(act, dtype):
    """Visits as MGRIT makes them: every cf-th layer forwards and backwards (strided and
    reversed views), then all layers, then a gradient; each adjoint and gradient equals
    the plain kernel's bit for bit, and after the first visit the slopes are read."""
    T, Ks, bs, rng = _layers(dtype=dtype)
    cache = SlopeCache(act, len(T))
    visits = [slice(1, 12, 4), slice(9, 0, -4), slice(0, 12, 1), slice(11, None, -1),
              slice(2, 12, 4), slice(2, 12, 4)]
    for sl in visits:
        U = T[sl]
        W = rng.standard_normal(U.shape).astype(dtype)
        hs = rng.uniform(0.05, 0.3, len(U)).astype(dtype)
        want = dense_adjoint_batched(W.copy(), U, Ks[sl], bs[sl], hs, act)
        got = W.copy()
        assert cache.adjoint(got, U, Ks[sl], bs[sl], hs, sl) is got
        np.testing.assert_array_equal(got, want, err_msg=str(sl))
        dK, db = cache.gradient(W, U, Ks[sl], bs[sl], hs, sl)
        wK, wb = dense_gradient_batched(W, U, Ks[sl], bs[sl], hs, act)
        np.testing.assert_array_equal(dK, wK)
        np.testing.assert_array_equal(db, wb)
    # kept at the first visits of layers 1, 5, 9 and of all layers (some were new);
    # read by the other four adjoints and by every gradient
    assert cache.kept == 2 and cache.given == 4 + len(visits)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_single_steps_keep_and_read_the_same_slopes(dtype):
    """The coarsest level's sequential adjoint steps (one layer each) keep and read the
    slopes the batched calls keep and read, with the single kernel's bits."""
    from braidpy.nn import dense_adjoint

    T, Ks, bs, rng = _layers(dtype=dtype)
    cache = SlopeCache("smooth_relu", len(T))
    w = rng.standard_normal(T[0].shape).astype(dtype)
    for n in (4, 8, 4):  # keep, keep, read
        got = w.copy()
        assert cache.adjoint_one(got, T[n], Ks[n], bs[n], 0.3, n) is got
        np.testing.assert_array_equal(got, dense_adjoint(w, T[n], Ks[n], bs[n], 0.3,
                                                         "smooth_relu"))
    assert (cache.kept, cache.given) == (2, 1)
    sl = slice(0, 12, 4)  # layers 0, 4, 8: 4 and 8 kept by the single steps, 0 not yet
    W = rng.standard_normal(T[sl].shape).astype(dtype)
    assert cache.gradient(W, T[sl], Ks[sl], bs[sl], np.full(3, 0.3, dtype), sl) is None
    single = w.copy()
    cache.adjoint_one(single, T[0], Ks[0], bs[0], 0.3, 0)
    assert cache.gradient(W, T[sl], Ks[sl], bs[sl], np.full(3, 0.3, dtype), sl) is not None
    # a NumPy float64 step promotes a float32 step's result in NumPy: the plain kernels'
    done = cache.adjoint_one(w.copy(), T[0], Ks[0], bs[0], np.float64(0.3), 0)
    assert (done is None) == (dtype == np.float32)


def test_gradient_needs_every_slope_kept_and_reset_forgets_them():
    T, Ks, bs, rng = _layers()
    cache = SlopeCache("smooth_relu", len(T))
    W, hs = rng.standard_normal(T.shape), np.full(len(T), 0.1)
    assert cache.gradient(W, T, Ks, bs, hs, slice(0, 12)) is None  # nothing kept yet
    cache.adjoint(W[0:12:2].copy(), T[0:12:2], Ks[0:12:2], bs[0:12:2], hs[:6], slice(0, 12, 2))
    assert cache.gradient(W, T, Ks, bs, hs, slice(0, 12)) is None  # half kept
    assert cache.gradient(W[0:12:2], T[0:12:2], Ks[0:12:2], bs[0:12:2], hs[:6],
                          slice(0, 12, 2)) is not None
    cache.reset()
    assert cache.gradient(W[0:12:2], T[0:12:2], Ks[0:12:2], bs[0:12:2], hs[:6],
                          slice(0, 12, 2)) is None


def test_stale_slopes_are_what_reset_prevents():
    """The slopes belong to the primal states: new states without a reset would reuse
    old slopes (a wrong adjoint), which is why ResNetApp resets at every primal solve."""
    T, Ks, bs, rng = _layers()
    cache = SlopeCache("smooth_relu", len(T))
    W, hs, sl = rng.standard_normal(T.shape), np.full(len(T), 0.1), slice(0, 12)
    cache.adjoint(W.copy(), T, Ks, bs, hs, sl)
    T2 = T + 1.0
    want = dense_adjoint_batched(W.copy(), T2, Ks, bs, hs, "smooth_relu")
    stale = W.copy()
    cache.adjoint(stale, T2, Ks, bs, hs, sl)
    assert not np.array_equal(stale, want)
    cache.reset()
    fresh = W.copy()
    cache.adjoint(fresh, T2, Ks, bs, hs, sl)
    np.testing.assert_array_equal(fresh, want)


def test_where_kept_slopes_do_not_apply_nothing_is_done():
    T, Ks, bs, rng = _layers()
    W, hs, sl = rng.standard_normal(T.shape), np.full(len(T), 0.1), slice(0, 12)
    for cache, args in (
            (SlopeCache("tanh", 12), (W, T, Ks, bs, hs, sl)),  # not a one-pass activation
            (SlopeCache("relu", 12, limit=T.nbytes - 1), (W, T, Ks, bs, hs, sl)),  # too big
            (SlopeCache("relu", 12), (W, T, Ks, bs.astype(np.float32), hs, sl)),  # mixed
            (SlopeCache("relu", 12), (W, T, Ks, bs, hs, np.arange(12))),  # not a slice
            (SlopeCache("relu", 12), (W, T[0], Ks[0], bs[0], 0.1, 0))):  # not batched
        before = W.copy()
        assert cache.adjoint(*args) is None
        assert cache.gradient(*args) is None
        np.testing.assert_array_equal(W, before)
        assert cache.kept == cache.given == 0
    wide = _layers(rows=3, width=33)
    cache = SlopeCache("relu", 12)
    W33 = np.ones(wide[0].shape)
    assert cache.adjoint(W33, wide[0], wide[1], wide[2], hs, sl) is None


def test_kept_slopes_kernels_check_their_slopes():
    T, Ks, bs, _ = _layers(n=3, rows=4, width=4)
    W, h, out = np.ones_like(T), np.full(3, 0.1), np.empty_like(T)
    with pytest.raises(ValueError, match="D must have U's shape and dtype"):
        _host_dense.dense_rows_adjoint_keep(W, T, Ks, bs, h, 2, out, np.empty((3, 4, 3)))
    with pytest.raises(ValueError, match="D must share no memory with the other arrays"):
        _host_dense.dense_rows_adjoint_keep(W, T, Ks, bs, h, 2, out, out)
    ro = np.empty_like(T)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="D must be writable"):
        _host_dense.dense_rows_adjoint_keep(W, T, Ks, bs, h, 2, out, ro)
    with pytest.raises(ValueError, match="D must share no memory with out"):
        _host_dense.dense_rows_adjoint_given(W, T, Ks, bs, h, 2, W, W)
