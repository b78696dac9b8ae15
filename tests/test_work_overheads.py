"""The one-rank work beyond the layer calls: dense batched kernels that advance
their stacked states in place and in cache-sized chunks, the core's paired sums, the final
sweep that reads its stored states instead of copying them again, stacking into a reused
buffer, cache-sized gradient chunks, and line-search objectives without the final sweep.
Every fast path against the plain computation, bit for bit."""

import numpy as np
import pytest
from apps import DenseResNet

import braidpy
from braidpy import Core, _core
from braidpy.adjoint import GradientSolver
from braidpy.nn import (ResNet, ResNetApp, dense_adjoint, dense_adjoint_batched,
                        dense_forward, dense_forward_batched, dense_gradient,
                        dense_gradient_batched)
from braidpy.nn import _dense_chunks

ACTS = ["smooth_relu", "relu", "tanh"]


def _problem(m, batch=37, width=8, seed=29):
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((m, batch, width))
    W = rng.standard_normal((m, batch, width))
    Ks = 0.4 * rng.standard_normal((m, width, width))
    bs = rng.standard_normal((m, width))
    hs = rng.uniform(0.01, 0.5, m)
    return U, W, Ks, bs, hs


def _rows(fn, *arrays, hs, act):
    """fn over each interval alone: the reference every batched row must equal."""
    return [fn(*(a[i] for a in arrays), float(hs[i]), act) for i in range(len(hs))]


@pytest.fixture(params=[8, 40], ids=["width 8", "width 40"])
def width(request):
    """Width 8 takes the one-pass kernels (braidpy.nn.dense.ROWS_MAX_WIDTH), 40 BLAS's
    product and the compiled pass in chunks (braidpy.nn._dense_chunks)."""
    return request.param


@pytest.fixture(params=["whole", "chunks of 3 rows"])
def chunking(request, monkeypatch, width):
    """The batched kernels as one call, and in chunks (3 rows of 37 x width float64)."""
    if request.param != "whole":
        monkeypatch.setattr(_dense_chunks, "CHUNK_BYTES", 3 * 37 * width * 8)
    return request.param


# ------------------------------------------------------------ dense kernels, out=
@pytest.mark.parametrize("act", ACTS)
def test_forward_batched_into_its_input_or_out_is_the_single_steps(act, chunking, width):
    U, _, Ks, bs, hs = _problem(10, width=width)
    want = np.stack(_rows(dense_forward, U, Ks, bs, hs=hs, act=act))
    assert np.array_equal(dense_forward_batched(U, Ks, bs, hs, act), want)
    out = np.full_like(U, np.nan)
    assert dense_forward_batched(U, Ks, bs, hs, act, out=out) is out
    assert np.array_equal(out, want)
    V = U.copy()
    assert dense_forward_batched(V, Ks, bs, hs, act, out=V) is V
    assert np.array_equal(V, want)
    # out sharing U's memory under another name, and a strided out
    V = U.copy()
    alias = V[...]
    assert dense_forward_batched(V, Ks, bs, hs, act, out=alias) is alias
    assert np.array_equal(V, want)
    wide = np.full(U.shape[:2] + (2 * width,), np.nan)
    dense_forward_batched(U, Ks, bs, hs, act, out=wide[..., :width])
    assert np.array_equal(wide[..., :width], want)


@pytest.mark.parametrize("act", ACTS)
def test_adjoint_batched_into_its_adjoints_or_out_is_the_single_steps(act, chunking, width):
    U, W, Ks, bs, hs = _problem(10, width=width)
    Ks_strided = np.repeat(Ks, 2, axis=0)[::2]  # as a coarse level's every-cf-th layer
    want = np.stack(_rows(dense_adjoint, W, U, Ks, bs, hs=hs, act=act))
    assert np.array_equal(dense_adjoint_batched(W, U, Ks_strided, bs, hs, act), want)
    out = np.full_like(W, np.nan)
    assert dense_adjoint_batched(W, U, Ks, bs, hs, act, out=out) is out
    assert np.array_equal(out, want)
    V = W.copy()
    assert dense_adjoint_batched(V, U, Ks, bs, hs, act, out=V) is V
    assert np.array_equal(V, want)
    V = W.copy()
    assert np.array_equal(dense_adjoint_batched(V, U, Ks, bs, hs, act, out=V[...]), want)
    V = U.copy()  # out is the primal states' memory
    assert np.array_equal(dense_adjoint_batched(W, V, Ks, bs, hs, act, out=V[...]), want)


@pytest.mark.parametrize("act", ACTS)
def test_gradient_batched_in_chunks_is_the_single_steps(act, chunking, width):
    U, W, Ks, bs, hs = _problem(10, width=width)
    dKs, dbs = dense_gradient_batched(W, U, Ks, bs, hs, act)
    for i, (dK, db) in enumerate(_rows(dense_gradient, W, U, Ks, bs, hs=hs, act=act)):
        assert np.array_equal(dKs[i], dK) and np.array_equal(dbs[i], db), i


def test_chunk_rows_keep_about_chunk_bytes_of_states():
    assert _dense_chunks.chunk_rows(np.empty((64, 1000, 8))) == 2 ** 20 // 64000
    assert _dense_chunks.chunk_rows(np.empty((64, 50000, 8))) == 1  # a row above the budget


def test_out_must_match_and_be_writable():
    U, W, Ks, bs, hs = _problem(4)
    with pytest.raises(ValueError, match=r"out must be a NumPy array of U's shape"):
        dense_forward_batched(U, Ks, bs, hs, "relu", out=np.empty((4, 37, 7)))
    with pytest.raises(ValueError, match=r"out must be a NumPy array of W's shape .* float64"):
        dense_adjoint_batched(W, U, Ks, bs, hs, "relu", out=np.empty(W.shape, np.float32))
    frozen = U.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out is U, which is read-only"):
        dense_forward_batched(frozen, Ks, bs, hs, "relu", out=frozen)
    with pytest.raises(ValueError, match="out is read-only"):
        dense_adjoint_batched(W, U, Ks, bs, hs, "relu", out=frozen)


def test_the_compiled_update_refuses_a_read_only_or_overlapping_state():
    U, _, Ks, bs, hs = _problem(2)
    Z = np.matmul(U, np.ascontiguousarray(np.swapaxes(Ks, -1, -2)))
    frozen = U.copy()
    frozen.flags.writeable = False
    update = _core._host_dense.dense_step_update
    with pytest.raises(ValueError, match="U must be writable"):
        update(Z, frozen, bs, hs, 3)
    with pytest.raises(ValueError, match="must not share memory"):
        update(U, U, bs, hs, 3)


def test_layers_write_out_with_or_without_in_place_kernels():
    from braidpy.nn import DenseLayer

    U, W, Ks, bs, hs = _problem(3)
    for backend, in_place in (("numpy", True), ("array-api", False)):
        layer = DenseLayer(8, "smooth_relu", backend=backend)
        assert layer.batched_out is in_place
        want = layer.forward_batched(U, Ks, bs, hs)
        V = U.copy()
        assert layer.forward_batched(V, Ks, bs, hs, out=V) is V and np.array_equal(V, want)
        want = layer.adjoint_batched(W, U, Ks, bs, hs)
        V = W.copy()
        assert layer.adjoint_batched(V, U, Ks, bs, hs, out=V) is V and np.array_equal(V, want)


# ------------------------------------------------------------ the ResNet app
def _resnet(nlayers=16, samples=40, activation="smooth_relu"):
    rng = np.random.default_rng(11)
    X = rng.uniform(-2.0, 2.0, size=(samples, 2))
    C = np.eye(3)[rng.integers(0, 3, size=samples)]
    net = ResNet((2,), 3, width=6, nlayers=nlayers, activation=activation)
    return net, net.init_params(seed=5), X, C


def test_resnet_app_steps_its_block_in_place():
    net, params, X, C = _resnet()
    app = ResNetApp(net, params, X, C)
    rng = np.random.default_rng(3)
    U, W = rng.standard_normal((2, 4, 40, 6))
    st = braidpy.adjoint.AdjointStatus(fine_slice=slice(0, 8, 2))
    t0s, t1s = net.times[0:8:2], net.times[1:9:2]
    want = app.layer.forward_batched(U, app._views["K"][0:8:2], app._views["b"][0:8:2],
                                     t1s - t0s)
    assert app.step_stacked(U, t0s, t1s, st) is U and np.array_equal(U, want)
    want = app.layer.adjoint_batched(W, U, app._views["K"][0:8:2], app._views["b"][0:8:2],
                                     t1s - t0s)
    assert app.step_adjoint_batch(W, U, t0s, t1s, st) is W and np.array_equal(W, want)


# ------------------------------------------------------------ the core
class _Sums(braidpy.App):
    """A nonlinear map on a state of `size` elements; clone/sum/norm are App's (the
    compiled paths) or, with python=True, the same through Python callbacks."""

    def __init__(self, size, python=False):
        self.size = size
        if python:
            self.sum = lambda a, x, b, y: braidpy.App.sum(self, a, x, b, y)
            self.clone = lambda u: braidpy.App.clone(self, u)

    def init(self, t):
        return np.linspace(0.5, 1.5, self.size) if t == 0.0 else np.full(self.size, 0.25)

    def step(self, u, t0, t1, status):
        u += (t1 - t0) * np.sin(3.0 * u + t0)

    def step_stacked(self, U, t0s, t1s, status):
        U += (t1s - t0s)[:, None] * np.sin(3.0 * U + t0s[:, None])


@pytest.mark.parametrize("size", [1, 2, 3, 8, 1001])
def test_compiled_paired_sums_are_the_python_sums(size):
    out = []
    for python in (False, True):
        core = Core(_Sums(size, python), 0.0, 2.0, 48,
                    options=dict(cfactor=4, max_iter=3, abs_tol=0.0, storage="all"))
        r = core.solve()
        out.append((r.residuals, [core.stored(i).copy() for i in core.owned]))
    assert out[0][0] == out[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(out[0][1], out[1][1]))


class _Watched(_Sums):
    def __init__(self, size=5):
        super().__init__(size)
        self.seen = {}

    def access(self, u, status):
        self.seen[status.fine_index] = u.copy()


@pytest.mark.parametrize("storage", ["final", "C"])
def test_final_sweep_visits_the_values_it_stores(storage):
    """The lock-step final sweep reads its stored F-values for access (no second copy);
    access sees what the chain-by-chain sweep of an unbatched solve sees."""
    seen = []
    for batch in (True, False):
        app = _Watched()
        core = Core(app, 0.0, 2.0, 48, options=dict(cfactor=4, max_iter=2, abs_tol=0.0,
                                                     storage=storage, batch=batch))
        core.solve()
        assert sorted(app.seen) == list(range(49))
        if storage == "final":
            assert all(np.array_equal(app.seen[i], core.stored(i)) for i in range(49))
        seen.append(app.seen)
    assert all(np.array_equal(seen[0][i], seen[1][i]) for i in range(49))


def test_stored_block_into_a_buffer():
    core = Core(_Sums(7), 0.0, 2.0, 16, options=dict(cfactor=4, max_iter=2, storage="final"))
    core.solve()
    want = core.stored_block(0, 17)
    buf = np.full((17, 7), np.nan)
    assert core.stored_block(0, 17, out=buf) is buf and np.array_equal(buf, want)
    part = np.full((4, 7), np.nan)
    assert core.stored_block(16, 0, -5, out=part) is part
    assert np.array_equal(part, want[16::-5])
    assert core.stored_block(0, 17, out=np.empty((17, 8))[:, :7]) is None
    assert core.stored_block(0, 17, out=np.empty((16, 7))) is None
    assert core.stored_block(0, 17, out=np.empty((17, 7), np.float32)) is None
    inside = core.stored(3)  # a source's own memory cannot receive the block
    assert core.stored_block(3, 4, out=inside[None, :]) is None


# ------------------------------------------------------------ gradients
def _gradients(solver):
    g = solver.evaluate()
    return g.objective, {n: (dK.copy(), db.copy()) for n, (dK, db) in g.gradients.items()}


class _SeesPrimalRows(ResNetApp):
    """Records, for each batched adjoint call, whether its steps start at primal
    F-points (cf 4), whether its primal states U are a view (no copy of their own) and
    whether U is read-only."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen = []

    def step_adjoint_batch(self, W, U, t0s, t1s, status):
        f_points = bool(np.all(status.fine_indices % 4 != 0))
        self.seen.append((f_points, not U.flags.owndata, U.flags.writeable))
        return super().step_adjoint_batch(W, U, t0s, t1s, status)


def test_adjoint_batches_read_primal_states_in_place_and_gradients_unchanged(monkeypatch):
    """The batched adjoint F-sweeps read the primal states where the primal Core's
    lockstep sweep stored them (views, read-only, nothing stacked per evaluation); the
    gradients equal those from gathered copies, bit for bit, over two evaluations."""
    net, params, X, C = _resnet(nlayers=32, samples=30)
    mgrit = dict(cfactor=4, max_levels=2, skip=False)
    p0, p1 = params.copy(), params + 0.01

    def run():
        app = _SeesPrimalRows(net, params, X, C)
        solver = GradientSolver(app, 0.0, net.tstop, 32, primal=mgrit, oneshot=(1, 2))
        got = []
        for p in (p0, p1):
            params[...] = p
            got.append(_gradients(solver))
            assert solver.reversed_app.trajectory is None
        return got, app.seen

    viewed, seen = run()
    # F-points come from the lockstep sweep's blocks; C-points are stored one by one.
    assert {(f_points, view) for f_points, view, _ in seen} == {(True, True), (False, False)}
    assert not any(writable for _, _, writable in seen)
    monkeypatch.setattr(Core, "stored_view", lambda self, *a: None)
    copied, seen = run()
    assert not any(view for _, view, _ in seen)
    for got, want in zip(copied, viewed):
        assert got[0] == want[0] and sorted(got[1]) == sorted(want[1]) == list(range(32))
        for n in got[1]:
            assert all(np.array_equal(a, b) for a, b in zip(got[1][n], want[1][n])), n
    assert viewed[0][0] != viewed[1][0]


def test_with_f_relaxation_every_adjoint_and_gradient_call_reads_in_place(monkeypatch):
    """A cold start gathers the fine C-points into one block (Solver::gather_c_points);
    F-relaxation updates them where they lie, and a new initial condition is copied into
    its row (Ops::copy_alike): every batched adjoint call and every gradient call then
    reads the primal states and adjoint values in place, nothing is stacked."""
    from braidpy.adjoint import solver as adjoint_solver

    monkeypatch.setattr(adjoint_solver, "POSITION_MIN_BYTES", 0)  # these states are small
    net, params, X, C = _resnet(nlayers=32, samples=30)
    mgrit = dict(cfactor=4, max_levels=2, skip=False, nrelax=0)
    app = _SeesPrimalRows(net, params, X, C)
    solver = GradientSolver(app, 0.0, net.tstop, 32, primal=mgrit, oneshot=(1, 2))
    stacked = []
    block = Core.stored_block
    monkeypatch.setattr(Core, "stored_block",
                        lambda self, *a, **k: stacked.append(a) or block(self, *a, **k))
    first = solver.evaluate()
    u0 = solver.primal_core.stored(0)
    solver.primal_core.set_initial_condition(app.initial_state() + 0.5)
    second = solver.evaluate()
    assert solver.primal_core.stored(0) is u0  # the new value went into the old row
    assert stacked == [] and app.seen and all(view for _, view, _ in app.seen), app.seen
    assert first.objective != second.objective


class _InPlaceOnly(ResNetApp):
    """ResNetApp without its out-of-place hooks: every batched step in place, on copies."""

    step_stacked_into = None
    step_adjoint_batch_into = None


@pytest.mark.parametrize("nrelax", [0, 1])
def test_out_of_place_steps_copy_less_and_keep_the_bits(nrelax):
    """With step_stacked_into / step_adjoint_batch_into (ResNetApp's), the sweeps start
    from their C-points without copying them and the final sweeps write each position
    where it is stored: fewer copies, and the objective, gradients and stored states of
    the in-place steps, bit for bit, over two evaluations."""
    net, params, X, C = _resnet(nlayers=32, samples=30)
    mgrit = dict(cfactor=4, max_levels=2, skip=False, nrelax=nrelax)
    p0 = params.copy()
    runs = []
    for cls in (ResNetApp, _InPlaceOnly):
        params[...] = p0
        solver = GradientSolver(cls(net, params, X, C), 0.0, net.tstop, 32, primal=mgrit,
                                oneshot=(1, 2))
        got = []
        for k in range(2):
            params += 0.01 * k
            got.append(_gradients(solver))
        states = [solver.primal_core.stored(n).copy() for n in range(33)]
        clones = (solver.primal_core.counts()["clone"]
                  + solver.adjoint_core.counts()["clone"])
        runs.append((got, states, clones))
    (into, into_states, into_clones), (inplace, inplace_states, inplace_clones) = runs
    for a, b in zip(into, inplace):
        assert a[0] == b[0] and sorted(a[1]) == sorted(b[1]) == list(range(32))
        assert all(np.array_equal(x, y) for n in a[1] for x, y in zip(a[1][n], b[1][n]))
    assert all(np.array_equal(a, b) for a, b in zip(into_states, inplace_states))
    assert into_clones < inplace_clones, (into_clones, inplace_clones)


def test_stored_view_is_a_read_only_view_of_evenly_spaced_rows_of_one_block():
    """Core.stored_view: the rows a lockstep sweep stored as one block, either direction,
    without a copy; None where they are not (C-points, mixed blocks, float32)."""
    app = DenseResNet(32, batch=5)
    core = Core(app, 0.0, 1.0, 32, cfactor=4, max_levels=2, storage="final")
    core.solve()
    # F-points 1, 5, 9, ...: the first point of every interval, one lockstep call.
    view = core.stored_view(1, 33, 4)
    assert view is not None and not view.flags.owndata and not view.flags.writeable
    assert np.array_equal(view, np.stack([core.stored(n) for n in range(1, 33, 4)]))
    assert np.shares_memory(view, core.stored(5))
    back = core.stored_view(29, -1, -4)
    assert np.array_equal(back, view[::-1]) and np.shares_memory(back, core.stored(1))
    assert core.stored_view(1, 3, 1) is None  # points 1 and 2: two blocks
    assert core.stored_view(0, 33, 4) is None  # C-points are stored one by one
    assert core.stored_view(1, 37, 4) is None  # 33 is past the end: missing


def test_numpy_gradients_come_in_cache_sized_chunks():
    class Recorded(DenseResNet):
        def __init__(self, n):
            super().__init__(n, batch=20000)
            self.rows = []

        def step_gradient_batch(self, W, U, t0s, t1s, status):
            self.rows.append(len(W))
            return super().step_gradient_batch(W, U, t0s, t1s, status)

    app = Recorded(24)
    solver = GradientSolver(app, 0.0, 1.0, 24, primal=dict(cfactor=4, abs_tol=1e-12))
    per_chunk = solver.host_gradient_chunk_bytes // app.u0.nbytes  # 640 kB a state: 6
    assert 1 < per_chunk < 24
    solver.evaluate()
    assert app.rows == [per_chunk] * (24 // per_chunk) + ([24 % per_chunk] if 24 % per_chunk
                                                          else [])


# ------------------------------------------------------------ objective without the sweep
def _steps(counts):
    return counts["step"] + counts["step_batch_items"]


@pytest.mark.parametrize("batch", [True, False])
def test_objective_leaves_out_the_final_sweep(batch):
    net, params, X, C = _resnet(nlayers=32)
    opts = dict(cfactor=4, max_levels=2, skip=False, batch=batch)
    solver = GradientSolver(ResNetApp(net, params, X, C), 0.0, net.tstop, 32, primal=opts,
                            oneshot=(1, 2))
    full = GradientSolver(ResNetApp(net, params, X, C), 0.0, net.tstop, 32, primal=opts,
                          oneshot=(1, 2))
    full._objective_only_ok = False  # the reference: every objective with its sweep
    for k in range(3):  # objectives and gradients interleaved, as a line search does
        params += 0.003 * (k + 1)
        assert solver.objective() == full.objective()
        assert _steps(full.primal_core.counts()) - _steps(solver.primal_core.counts()) == 24
        assert solver.primal_core.stored(5) is None and solver.primal_core.stored(4) is not None
        a, b = _gradients(solver), _gradients(full)
        assert a[0] == b[0]
        assert all(np.array_equal(a[1][n][0], b[1][n][0]) for n in a[1])


def test_objective_keeps_the_sweep_where_something_reads_it():
    class Watching(DenseResNet):
        def access(self, u, status):
            pass

    class Running(DenseResNet):
        def running_objective(self, u, t, status):
            return 0.0

        def running_gradient(self, u, t, status):
            return None

    for app, opts, keeps in ((DenseResNet(24), {}, False), (Watching(24), {}, True),
                             (Watching(24), dict(access_level=0), False),
                             (Running(24), {}, True)):
        solver = GradientSolver(app, 0.0, 1.0, 24, primal=dict(cfactor=4, max_iter=2, **opts))
        solver.evaluate()
        solver.objective()
        assert (solver.primal_core.stored(5) is not None) == keeps, type(app).__name__


@pytest.mark.parametrize("ntime,storage,levels,sweeps", [
    (48, "final", 2, False), (50, "final", 2, True), (48, "all", 2, True),
    (48, "final", 1, True)])
def test_core_solve_without_final_sweep(ntime, storage, levels, sweeps):
    """Left out only where the last point is a C-point and storage is not "all" (a
    single level's sweep is its solve); the final value is the full solve's."""
    app = _Watched()
    opts = dict(cfactor=4, max_levels=levels, max_iter=2, abs_tol=0.0, storage=storage)
    full = Core(_Watched(), 0.0, 2.0, ntime, options=opts).solve()
    core = Core(app, 0.0, 2.0, ntime, options=opts)
    r = core.solve(final_sweep=False)
    assert np.array_equal(r.final, full.final) and r.residuals == full.residuals
    assert bool(app.seen) == sweeps
    assert (_steps(r.counts) == _steps(full.counts)) == sweeps
    assert np.array_equal(core.solution(index=5), full.solution(index=5))


def test_a_skipped_sweep_has_no_state_ahead_of_the_first_c_point_on_a_right_rank():
    """Rank 1 of 2 (its left neighbour simulated) has F-points ahead of its first C-point
    that only the final sweep's message from the left can give."""
    import test_core as tc

    app = tc._Default()
    s = tc.make_solver(app, ntime=32, comm=tc._RightRank(app), rank=1, size=2, cfactor=4,
                       max_iter=2)
    assert s.solve(final_sweep=False).kind == "ok"
    lo = s.owned[0]
    assert lo % 4 != 0 and s.solution(lo).vector is None
    assert s.solution((lo // 4 + 1) * 4 + 1).vector is not None
    assert s.solve().kind == "ok" and s.solution(lo).vector is not None
    # braidpy.Core says why there is no state (this bare solver put in a 1-rank Core's place)
    core = Core(tc._Default(), 0.0, 1.0, 32, options=dict(cfactor=4, max_iter=2))
    core._solver = s
    assert s.solve(final_sweep=False).kind == "ok"
    with pytest.raises(ValueError, match=f"fine index {lo} was not kept: the last solve left "
                                         f"out its final sweep"):
        core.solution(index=lo)


@pytest.mark.parametrize("ntime, cfactor", [(4, 4), (8, 4)])
def test_two_or_more_c_points_are_gathered_into_one_block(ntime, cfactor):
    """After a cold start a rank's fine C-points are rows of one block (a view reads
    them without a copy), from two of them on (one is a block of its own)."""
    core = Core(DenseResNet(ntime, batch=5), 0.0, 1.0, ntime, cfactor=cfactor,
                max_levels=2, min_coarse=1, max_iter=1)
    core.solve()
    count = ntime // cfactor + 1
    assert count >= 2
    view = core.stored_view(0, ntime + 1, cfactor)
    assert view is not None and view.shape[0] == count
    assert all(np.shares_memory(view, core.stored(c)) for c in range(0, ntime + 1, cfactor))
