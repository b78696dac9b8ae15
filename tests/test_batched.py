"""Batched relaxation (App.step_batch / step_stacked): same results as unbatched."""

import numpy as np
import pytest
from apps import BatchedDecay, BatchedDecayInto, Decay, DenseResNet
from batched_cases import BATCHED_CASES

import braidpy


def assert_batched_equals_unbatched(case, where):
    on, off = case["True"], case["False"]
    on, off = dict(on), dict(off)
    for key in ("batched_calls", "into_calls"):
        on.pop(key), off.pop(key)
    assert on == off, where  # bitwise: values, residual histories, iterations


@pytest.mark.parametrize("name", sorted(BATCHED_CASES))
def test_batched_equals_unbatched(name):
    case = BATCHED_CASES[name](None)
    assert_batched_equals_unbatched(case, name)
    if name != "decay_one_level":
        assert case["True"]["batched_calls"] > 0, "the batched path was not taken"
    assert case["False"]["batched_calls"] == 0
    if "_into" in name:  # the out-of-place hooks were used, and only when batching
        assert case["True"]["into_calls"] > 0 and case["False"]["into_calls"] == 0, name


class Boom(ValueError):
    pass


class FailingBatchedDecay(BatchedDecayInto):
    """Raises Boom in `hook` (step_stacked or step_stacked_into) where `when(status)`;
    into=False hides the out-of-place hook, so that every batched step is step_stacked."""

    def __init__(self, hook, when, into):
        super().__init__()
        self.hook, self.when = hook, when
        if not into:
            self.step_stacked_into = None

    def _maybe(self, name, status):
        if name == self.hook and self.when(status):
            raise Boom(f"{name} failed on purpose")

    def step_stacked(self, U, t0s, t1s, status):
        self._maybe("step_stacked", status)
        return super().step_stacked(U, t0s, t1s, status)

    def step_stacked_into(self, U, out, t0s, t1s, status):
        self._maybe("step_stacked_into", status)
        return super().step_stacked_into(U, out, t0s, t1s, status)


@pytest.mark.parametrize("hook, into", [("step_stacked", False), ("step_stacked_into", True)])
@pytest.mark.parametrize("when", [
    lambda s: True,
    lambda s: s.level == 1 and s.phase == "residual",
    lambda s: s.done,
])
def test_batched_hook_exception_is_reraised_and_core_stays_usable(hook, into, when):
    app = FailingBatchedDecay(hook, when, into)
    core = braidpy.Core(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12, storage="all")
    with pytest.raises(Boom, match=f"{hook} failed on purpose"):
        core.solve()
    app.when = lambda s: False
    calls = app.into_calls
    want = braidpy.solve(BatchedDecay(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12,
                         storage="all")
    got = core.solve()
    assert got.residuals == want.residuals and np.array_equal(got.final, want.final)
    assert (app.into_calls > calls) == into


def test_step_stacked_into_must_write_into_out():
    class Returns(BatchedDecayInto):
        def step_stacked_into(self, U, out, t0s, t1s, status):
            super().step_stacked_into(U, out, t0s, t1s, status)
            return out

    with pytest.raises(TypeError, match=r"step_stacked_into\(U, out, t0s, t1s, status\) "
                                        r"must write into out and return None, got numpy.ndarray"):
        braidpy.solve(Returns(), 0.0, 1.0, 64, cfactor=4)


def test_step_stacked_into_is_left_alone_under_an_apps_own_clone():
    """An app's own clone makes its new states: braidpy then steps in place on them."""
    class OwnClone(BatchedDecayInto):
        def clone(self, u):
            return u.copy()

    app = OwnClone()
    got = braidpy.solve(app, 0.0, 5.0, 97, cfactor=4, abs_tol=1e-12, storage="all")
    want = braidpy.solve(BatchedDecay(), 0.0, 5.0, 97, cfactor=4, abs_tol=1e-12,
                         storage="all")
    assert app.into_calls == 0 and got.residuals == want.residuals


def test_step_stacked_into_reads_c_points_where_they_lie():
    """With F-relaxation the fine C-points stay the rows of one block (gathered at a cold
    start), so each F-sweep's first step reads them in place: a read-only view."""
    app = BatchedDecayInto()
    braidpy.solve(app, 0.0, 5.0, 97, cfactor=4, nrelax=0, max_levels=2, abs_tol=1e-12)
    assert app.read_in_place == app.into_calls > 0  # nothing stacked


@pytest.mark.parametrize("app_class", [BatchedDecay, BatchedDecayInto])
@pytest.mark.parametrize("storage, access_level", [("all", 1), ("final", 1), ("C", 2)])
def test_lockstep_keeps_each_step_positions_values_in_one_block(storage, access_level,
                                                                app_class):
    """The values a lock-step sweep keeps (stored F-points, the final sweep's access
    values) are copied per step position in one clone_block (row views of one new
    block), not one clone per point: on a GPU each clone is an allocation and a launch.
    The values themselves are the unbatched run's (test_batched_equals_unbatched)."""
    seen = {}

    class Watched(app_class):
        def access(self, u, status):
            seen[status.index] = u

    n, cf = 64, 8
    opts = dict(cfactor=cf, max_levels=2, abs_tol=1e-12, storage=storage,
                access_level=access_level)
    core = braidpy.Core(Watched(), 0.0, 5.0, n, **opts)
    core.solve()
    kept = ({i: core.stored(i) for i in range(1, n) if i % cf} if storage != "C"
            else {i: seen[i] for i in range(1, n) if i % cf})
    for k in range(1, cf):  # position k of chains c = 0, cf, 2cf, ...: one block
        rows = [kept[c + k] for c in range(0, n, cf)]
        assert rows[0].base is not None
        assert all(r.base is rows[0].base for r in rows), k
    assert kept[1].base is not kept[2].base
    unbatched = braidpy.Core(Decay(), 0.0, 5.0, n, batch=False, **opts).solve()
    assert np.array_equal(core.solve().final, unbatched.final)


def test_step_batch_returning_wrong_count_raises():
    class Bad(Decay):
        def step_batch(self, us, t0s, t1s, status):
            return us[:-1]

    class Opaque(Bad):
        def clone(self, u):  # not App's default clone: the core passes lists
            return u.copy()

    with pytest.raises(ValueError, match="returned 3 states for a batch of 4"):
        braidpy.solve(Opaque(), 0.0, 1.0, 16, cfactor=4, max_levels=2)


def test_apps_without_step_batch_are_unchanged():
    a = braidpy.solve(Decay(), 0.0, 5.0, 97, cfactor=4, abs_tol=1e-12)
    b = braidpy.solve(Decay(), 0.0, 5.0, 97, cfactor=4, abs_tol=1e-12, batch=False)
    assert a.counts == b.counts and a.counts["step_batch"] == 0
    assert a.residuals == b.residuals
    assert not braidpy.Core(Decay(), 0.0, 1.0, 8).batched
    assert braidpy.Core(BatchedDecay(), 0.0, 1.0, 8).batched
    assert not braidpy.Core(BatchedDecay(), 0.0, 1.0, 8, batch=False).batched


def test_status_in_a_batch():
    seen = []

    class Spy(BatchedDecay):
        def step_stacked(self, U, t0s, t1s, status):
            seen.append((status.level, status.batch_size, status.fine_indices.tolist(),
                         status.indices.tolist(), t0s.tolist(), U.shape))
            return super().step_stacked(U, t0s, t1s, status)

        def step(self, u, t0, t1, status):
            assert status.batch_size == 0 and status.fine_indices is None
            return super().step(u, t0, t1, status)

    r = braidpy.solve(Spy(), 0.0, 1.0, 16, cfactor=4, max_levels=2, max_iter=2)
    times = r.times
    for level, n, fine, idx, t0s, shape in seen:
        assert n == len(fine) == len(idx) == len(t0s) == shape[0] and shape[1:] == (1,)
        stride = 4 ** level
        assert fine == [i * stride for i in idx]
        assert t0s == [times[f] for f in fine]
    # The first F-sweep of level 0 advances the 4 intervals together.
    assert (0, 4, [1, 5, 9, 13], [1, 5, 9, 13]) in [s[:4] for s in seen]


def test_list_default_stacks_and_writes_back():
    """App's default step_batch on a list (states the core could not stack)."""

    class Listed(BatchedDecay):
        def clone(self, u):  # a user clone: the core keeps independent vectors
            return u.copy()

    a = braidpy.solve(Listed(), 0.0, 5.0, 64, cfactor=4, abs_tol=1e-12)
    b = braidpy.solve(Decay(), 0.0, 5.0, 64, cfactor=4, abs_tol=1e-12)
    assert a.counts["step_batch"] > 0
    assert a.residuals == b.residuals
    assert np.array_equal(a.final, b.final)


def test_resnet_batched_forward_matches_plain_loop():
    n = 64
    app = DenseResNet(n)
    r = braidpy.solve(app, 0.0, 2.0, n, cfactor=8, max_levels=2, abs_tol=1e-13)
    u = app.u0.copy()
    t = r.times
    for i in range(n):
        u = u + (t[i + 1] - t[i]) * np.tanh(u @ app.K[i].T + app.b[i])
    np.testing.assert_allclose(r.final, u, rtol=0, atol=1e-12)


def test_fine_slice_matches_fine_indices():
    seen = []

    class Spy(BatchedDecay):
        def step_stacked(self, U, t0s, t1s, status):
            idx = np.arange(10**6)
            seen.append(np.array_equal(idx[status.fine_slice], status.fine_indices))
            return super().step_stacked(U, t0s, t1s, status)

    braidpy.solve(Spy(), 0.0, 1.0, 101, cfactor=3, max_levels=3, max_iter=3, fmg=True)
    assert seen and all(seen)


def test_adjoint_batch_status_slices():
    from braidpy.adjoint.status import as_slice as _as_slice

    idx = np.arange(100)
    for ns in ([5, 9, 13], [13, 9, 5], [3, 2, 1, 0], [7], [4, 0]):
        ns = np.array(ns)
        assert np.array_equal(idx[_as_slice(ns)], ns)
    assert _as_slice(np.array([1, 2, 4])) is None


def _resnet_backprop(app, times):
    """Plain NumPy forward Euler and hand-written backpropagation of DenseResNet's
    J = |u_N - y|^2 / 2 (independent of braidpy): (J, {n: (dJ/dK_n, dJ/db_n)})."""
    us = [app.u0.copy()]
    for n in range(len(times) - 1):
        h = times[n + 1] - times[n]
        us.append(us[n] + h * np.tanh(us[n] @ app.K[n].T + app.b[n]))
    w = us[-1] - app.target
    objective = 0.5 * float(np.sum(w * w))
    grads = {}
    for n in range(len(times) - 2, -1, -1):
        h = times[n + 1] - times[n]
        g = w * (1.0 - np.tanh(us[n] @ app.K[n].T + app.b[n]) ** 2)  # dJ/dz_n / h
        grads[n] = (h * g.T @ us[n], h * g.sum(axis=0))
        w = w + h * g @ app.K[n]
    return objective, grads


@pytest.mark.parametrize("batch", [True, False])
def test_resnet_gradient_matches_hand_written_backprop(batch):
    """The batched adjoint (step_gradient_batch over stacked primal rows, step_stacked in
    both solves) against plain backprop; a swapped or shifted primal row changes dK."""
    from braidpy.adjoint import GradientSolver

    class Counted(DenseResNet):
        gradient_batches = 0

        def step_gradient_batch(self, W, U, t0s, t1s, status):
            self.gradient_batches += 1
            return super().step_gradient_batch(W, U, t0s, t1s, status)

    n = 48
    app = Counted(n)
    solver = GradientSolver(app, 0.0, 1.0, n, primal=dict(cfactor=4, abs_tol=1e-13,
                                                          batch=batch))
    g = solver.evaluate()
    objective, grads = _resnet_backprop(DenseResNet(n), g.primal.times)
    assert sorted(g.gradients) == list(range(n))
    np.testing.assert_allclose(g.objective, objective, rtol=1e-12)
    for k in range(n):
        dK, db = g.gradients[k]
        np.testing.assert_allclose(dK, grads[k][0], rtol=1e-9, atol=1e-12, err_msg=str(k))
        np.testing.assert_allclose(db, grads[k][1], rtol=1e-9, atol=1e-12, err_msg=str(k))
    # The batched paths really ran (the gradients always come from step_gradient_batch;
    # states this small in one call: see the next test).
    assert app.gradient_batches == 1
    assert (g.primal.counts["step_batch"] > 0) == batch, g.primal.counts
    assert (g.adjoint.counts["step_batch"] > 0) == batch, g.adjoint.counts


@pytest.mark.parametrize("by_position", [True, False])
@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("chunk_rows", [1, 5, 48])
def test_gradient_calls_are_chunked_by_bytes_with_the_same_gradients(chunk_rows, batch,
                                                                      by_position,
                                                                      monkeypatch):
    """Large states: the final step_gradient_batch calls go position by position in the
    level-0 intervals (n mod cf): where lockstep sweeps stored those primal states and
    adjoint values as blocks (F-points of both with batch=True) one call reads them in
    place; elsewhere GradientSolver.gradient_chunk_bytes splits a position's steps into
    calls of at most that many bytes of adjoint rows. Small states (below
    POSITION_MIN_BYTES a position, as these are by default) go in chunks of consecutive
    steps. Each row has its own step's primal state, and the gradients equal
    hand-written backprop whatever the split."""
    from braidpy.adjoint import GradientSolver
    from braidpy.adjoint import solver as adjoint_solver

    if by_position:
        monkeypatch.setattr(adjoint_solver, "POSITION_MIN_BYTES", 0)

    class Recorded(DenseResNet):
        def __init__(self, n):
            super().__init__(n)
            self.calls = []

        def step_gradient_batch(self, W, U, t0s, t1s, status):
            self.calls.append(status.fine_indices.tolist())
            assert len(W) == len(U) == len(t0s) == status.batch_size
            return super().step_gradient_batch(W, U, t0s, t1s, status)

    n = 48
    app = Recorded(n)
    solver = GradientSolver(app, 0.0, 1.0, n, primal=dict(cfactor=4, abs_tol=1e-13,
                                                          batch=batch))
    solver.gradient_chunk_bytes = chunk_rows * app.u0.nbytes
    g = solver.evaluate()
    want = []
    for r in range(4) if by_position else [None]:
        steps = list(range(r, n, 4)) if by_position else list(range(n))
        # Primal F-points (r != 0) whose adjoint values w_{n+1} are adjoint F-points
        # too (m = 47 - n, r != 3): both in the lockstep's blocks, read in place.
        if by_position and batch and r not in (0, 3):
            want.append(steps)
        else:
            want += [steps[a:a + chunk_rows] for a in range(0, len(steps), chunk_rows)]
    assert app.calls == want
    objective, grads = _resnet_backprop(DenseResNet(n), g.primal.times)
    for k in range(n):
        dK, db = g.gradients[k]
        np.testing.assert_allclose(dK, grads[k][0], rtol=1e-9, atol=1e-12, err_msg=str(k))
        np.testing.assert_allclose(db, grads[k][1], rtol=1e-9, atol=1e-12, err_msg=str(k))


def test_adjoint_batch_primal_states_are_read_only():
    """The stacked primal states U handed to step_adjoint_batch are a view of braidpy's
    stored trajectory (no copy): writing into them raises instead of corrupting it."""
    from braidpy.adjoint import gradient

    class Scribbler(DenseResNet):
        def step_adjoint_batch(self, W, U, t0s, t1s, status):
            U[...] = 0.0
            return super().step_adjoint_batch(W, U, t0s, t1s, status)

    with pytest.raises(ValueError, match="read-only"):
        opts = {"max_levels": 2, "cfactor": 4, "abs_tol": 1e-12}
        gradient(Scribbler(32), 0.0, 1.0, 32, primal=opts, adjoint=opts)
