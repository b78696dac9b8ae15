"""braidpy._core: CoreOptions, Outcome, Status fields and the callback gateway."""

import gc
import math
import re
import sys
import weakref

import numpy as np
import pytest
from apps import Decay

import braidpy
from braidpy import Options, _core

FIELDS = [k for k, v in vars(_core.CoreOptions).items() if isinstance(v, property)]


class Boom(ValueError):
    pass


def make_solver(app, ntime=16, comm=None, rank=0, size=1, **fields):
    """A bare core Solver on [0, 1] (no braidpy.Core around it)."""
    app.tstart, app.tstop, app.ntime = 0.0, 1.0, ntime
    times = np.linspace(0.0, 1.0, ntime + 1).tolist()
    return _core.Solver(app, comm, rank, size, _core.CoreOptions(**fields), times, None)


# ---------------------------------------------------------------- CoreOptions

def test_core_options_defaults_are_the_python_defaults():
    assert len(FIELDS) == 45 and FIELDS[0] == "max_levels" and FIELDS[-1] == "step_ustop"
    assert repr(Options().to_core()) == repr(_core.CoreOptions(batch=True))


def test_core_options_repr_round_trips():
    o = _core.CoreOptions(cfactor=4, cfactor_level={1: 3}, tnorm=0, abs_tol=1e-7,
                          fine_ranges=[(0, 3), (4, 8)], batch=True)
    assert repr(o).startswith("CoreOptions(max_levels=30, ")
    assert "cfactor_level={1: 3}" in repr(o) and "fine_ranges=[(0, 3), (4, 8)]" in repr(o)
    again = eval(repr(o), {"CoreOptions": _core.CoreOptions})  # noqa: S307 - our own repr
    assert repr(again) == repr(o)


def test_unknown_core_option_names_raise_attribute_error():
    o = _core.CoreOptions()
    with pytest.raises(AttributeError, match="cfactr"):
        o.cfactr = 4  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="cfactr"):
        _core.CoreOptions(cfactr=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        o.cfactor = "4"  # type: ignore[assignment]
    assert o.cfactor == 2


def test_to_core_sets_every_option_field():
    opts = Options(max_levels=5, min_coarse=3, cfactor={0: 4, "default": 3},
                   nrelax={1: 2, "default": 0}, crelax_weight={2: 0.5, "default": 1.3},
                   max_iter=7, abs_tol=1e-5, rel_tol=1e-3,
                   tnorm=math.inf, skip=False, fmg=True, fmg_vcycles=2, nfmg=3, storage="all",
                   seq_soln=True, final_fc_relax=True, relax_only_cg=True, access_level=3,
                   timings=True, print_level=3, residual_computation=False, batch=False,
                   full_rnorm=True, max_refinements=3, tpoints_cutoff=50, incr_max_levels=True)
    got, default = opts.to_core(), _core.CoreOptions(batch=True)
    # set by braidpy itself (residual, step_ustop: from the app), not by Options
    internal = {"store_final", "fine_ranges", "residual", "step_ustop"}
    # Delta correction excludes full_rnorm: its options are set on their own below
    delta = {"delta_rank", "delta_defer_level", "delta_defer_iter", "lyapunov_estimate",
             "lyapunov_relax", "lyapunov_exponents"}
    changed = {f for f in FIELDS if getattr(got, f) != getattr(default, f)}
    # periodic and refine exclude seq_soln, storage="all" is not XBraid's int, richardson
    # and est_error exclude a weight (test_richardson.py): set on their own
    assert changed == set(FIELDS) - internal - delta - {"periodic", "storage", "refine",
                                                        "richardson", "est_error", "local_order"}
    d = Options(delta_rank=2, delta_defer_level=1, delta_defer_iter=3, lyapunov_estimate=True,
                lyapunov_relax=True, lyapunov_exponents=True).to_core()
    assert {f for f in FIELDS if getattr(d, f) != getattr(default, f)} == delta
    assert Options(periodic=True).to_core().periodic
    assert Options(refine=True).to_core().refine
    assert Options(storage=2).to_core().storage == 2
    assert (got.cfactor, got.cfactor_level, got.nrelax_level, got.tnorm) == (3, {0: 4}, {1: 2}, 0)
    assert (got.crelax_weight, got.crelax_weight_level) == (1.3, {2: 0.5})


IMPOSSIBLE = [
    ("cfactor", 1, "cfactor = 1"),
    ("max_levels", 0, "max_levels = 0"),
    ("tnorm", 3, "tnorm = 3"),
    ("min_coarse", 0, "min_coarse = 0"),
    ("nrelax", -1, "nrelax = -1"),
    ("max_iter", 0, "max_iter = 0"),
    ("abs_tol", math.nan, "abs_tol = nan"),
    ("rel_tol", -1.0, "rel_tol = -1"),
    ("fmg_vcycles", 0, "fmg_vcycles = 0"),
    ("access_level", 4, "access_level = 4"),
    ("cfactor_level", {1: 1}, r"cfactor_level\[1\] = 1"),
    ("nrelax_level", {-1: 1}, "nrelax_level key = -1"),
    ("crelax_weight", 0.0, "crelax_weight = 0"),
    ("crelax_weight", math.inf, "crelax_weight = inf"),
    ("crelax_weight_level", {1: -0.5}, r"crelax_weight_level\[1\] = -0.5"),
    ("crelax_weight_level", {-1: 1.3}, "crelax_weight_level key = -1"),
    ("fine_ranges", [(0, 3)], r"fine_ranges\[0\].hi = 3: the last range must end at ntime = 16"),
    ("fine_ranges", [(1, 16)], r"fine_ranges\[0\].lo = 1"),
]


@pytest.mark.parametrize("name,value,message", IMPOSSIBLE)
def test_solver_rejects_an_impossible_option_by_name(name, value, message):
    with pytest.raises(ValueError, match=f"invalid core option {message}"):
        make_solver(Decay(), **{name: value})


def test_solver_rejects_an_impossible_grid_or_rank():
    o = _core.CoreOptions()
    with pytest.raises(ValueError, match=r"times \(count\) = 1"):
        _core.Solver(Decay(), None, 0, 1, o, [0.0], None)
    with pytest.raises(ValueError, match=r"times\[2\] = 0.5: times must be strictly increasing"):
        _core.Solver(Decay(), None, 0, 1, o, [0.0, 1.0, 0.5], None)
    with pytest.raises(ValueError, match="rank = 2"):
        make_solver(Decay(), comm=object(), rank=2, size=2)


# ---------------------------------------------------------------- Outcome

def test_outcome_of_a_good_solve_and_of_solution():
    s = make_solver(Decay(), cfactor=4)
    out = s.solve()
    assert (out.kind, out.error, out.callback, out.vector) == ("ok", None, "", None)
    assert (out.iteration, out.level) == (-1, -1) and math.isnan(out.value)
    assert repr(out) == "<braidpy._core.Outcome ok>"
    got = s.solution(16)
    assert got.kind == "ok" and isinstance(got.vector, np.ndarray)
    assert np.array_equal(got.vector, s.final_value())
    assert s.solution(17).vector is None  # not owned


def test_outcome_of_a_failed_solve_names_the_callback():
    class Failing(Decay):
        def step(self, u, t0, t1, status):
            raise Boom("no step")

    out = make_solver(Failing()).solve()
    assert out.kind == "failed" and isinstance(out.error, Boom) and out.callback == "step"
    assert out.error.__traceback__ is not None
    assert repr(out) == "<braidpy._core.Outcome failed in 'step': Boom('no step')>"


def test_outcome_of_a_diverged_solve():
    class Explode(Decay):
        def step(self, u, t0, t1, status):
            u[:] = np.nan if status.iteration >= 1 else u / (1.0 + (t1 - t0))

    out = make_solver(Explode(), ntime=64, cfactor=4, abs_tol=1e-14).solve()
    assert (out.kind, out.iteration, out.level, out.error) == ("diverged", 1, 0, None)
    assert math.isnan(out.value) and "diverged at iteration 1, level 0" in repr(out)


def test_outcomes_hold_no_extra_references():
    boom = Boom("the same instance every time")

    class Failing(Decay):
        def step(self, u, t0, t1, status):
            raise boom

    s = make_solver(Failing())
    before = sys.getrefcount(boom)
    for _ in range(300):
        out = s.solve()
        assert out.error is boom
        del out
    assert sys.getrefcount(boom) == before
    good = make_solver(Decay())
    good.solve()
    vector = good.solution(16).vector
    assert sys.getrefcount(vector) == 2  # ours and getrefcount's argument


def test_a_failed_solve_frees_its_core_by_reference_counting():
    # Outcome is not tracked by the garbage collector: an exception -> traceback ->
    # frame -> Outcome cycle would never be freed (braidpy._solver.Core._unwrap).
    class Failing(Decay):
        def step(self, u, t0, t1, status):
            raise Boom("once")

    gc.disable()
    try:
        core = braidpy.Core(Failing(), 0.0, 1.0, 16, cfactor=4)
        ref = weakref.ref(core)
        try:
            core.solve()
        except Boom:
            pass
        del core
        assert ref() is None
    finally:
        gc.enable()


# ---------------------------------------------------------------- Status fields

def test_status_fields_are_the_bound_properties_in_order():
    props = [k for k, v in vars(_core.Status).items() if isinstance(v, property)]
    assert list(_core.STATUS_FIELDS) == props and len(props) == 27
    assert all(isinstance(name, str) for name in _core.STATUS_FIELDS)


def test_every_status_field_reads_in_step_and_step_batch():
    seen = {}

    class Watch(Decay):
        def step(self, u, t0, t1, status):
            seen.setdefault("step", {f: getattr(status, f) for f in _core.STATUS_FIELDS})
            super().step(u, t0, t1, status)

        def step_stacked(self, U, t0s, t1s, status):
            seen.setdefault("batch", {f: getattr(status, f) for f in _core.STATUS_FIELDS})
            U /= (1.0 - self.lam * (t1s - t0s))[:, None]

    make_solver(Watch(), ntime=32, cfactor=4).solve()
    make_solver(Watch(), ntime=32, cfactor=4, batch=True).solve()
    step, batch = seen["step"], seen["batch"]
    assert step["t0"] < step["t1"] and step["phase"] in ("init", "relax", "residual", "final")
    assert step["batch_size"] == 0 and step["fine_indices"] is None and step["fine_slice"] is None
    assert batch["batch_size"] >= 2 and len(batch["fine_indices"]) == batch["batch_size"]
    assert isinstance(batch["fine_slice"], slice) and step["nlevels"] == batch["nlevels"] == 3


# ---------------------------------------------------------------- the gateway

class _Default(braidpy.App):
    """Two-element decay; clone/sum/norm/access are App's (C++ fast paths)."""

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.3, 0.5])

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)

    def step_stacked(self, U, t0s, t1s, status):
        U /= (1.0 + (t1s - t0s))[:, None]


class _Python(_Default):
    """The same app through the Python callbacks (no fast path applies)."""

    def clone(self, u):
        return super().clone(u)

    def sum(self, a, x, b, y):
        super().sum(a, x, b, y)

    def norm(self, u):
        return super().norm(u)

    def access(self, u, status):
        pass


class _RightRank:
    """Rank 1 of 2 with a simulated left neighbour that always sends the same value."""

    def __init__(self, app):
        self.buf = app.bufpack(np.array([0.25, 0.5]))

    def post(self, dest, tag, buf):
        pass

    def receive(self, src, tag):
        return self.buf

    def advance(self):
        return True

    def finish(self):
        pass

    def allreduce(self, values, is_max):
        return values


class _LeftRank(_RightRank):
    """Rank 0 of 2 with a simulated right neighbour: logs the core's sends, its advance
    calls and the app's steps; each send stays open for ``open_tests`` tests."""

    def __init__(self, app, log, open_tests):
        super().__init__(app)
        self.log, self.open_tests, self.untested = log, open_tests, 0

    def post(self, dest, tag, buf):
        self.log.append("post")
        self.untested = self.open_tests

    def advance(self):
        self.log.append("advance")
        self.untested -= 1
        return self.untested < 0

    def receive(self, src, tag):
        self.log.append("receive")
        return self.buf

    def finish(self):
        self.log.append("finish")


class _LoggedSteps(_Default):
    def __init__(self, log):
        self.log = log

    def step(self, u, t0, t1, status):
        self.log.append("step")
        super().step(u, t0, t1, status)

    def step_stacked(self, U, t0s, t1s, status):
        self.log.append("step")
        super().step_stacked(U, t0s, t1s, status)


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("open_tests", [0, 2])
def test_open_sends_are_tested_before_every_step_and_only_then(batch, open_tests):
    # Open MPI moves a large message only inside its sender's MPI calls: a rank that
    # posted a send tests it before each step until it completes, and not after.
    log = []
    app = _LoggedSteps(log)
    s = make_solver(app, ntime=32, comm=_LeftRank(app, log, open_tests), rank=0, size=2,
                    cfactor=4, max_iter=3, batch=batch)
    assert s.solve().kind == "ok"
    assert log.count("post") >= 3 and log.count("step") > log.count("post")
    is_open, tested, untested = False, False, 0
    for event in log:
        if event == "post":
            is_open, tested, untested = True, False, open_tests
        elif event == "advance":
            assert is_open, "advance() called with no send open"
            tested, untested = True, untested - 1
            is_open = untested >= 0
        elif event == "finish":
            is_open = False
        elif event == "step":
            assert tested or not is_open, "a step ran while a send was open, untested"
            tested = False
    # one test completes a send that the MPI already moved; an open one takes more
    assert (log.count("advance") > log.count("post")) == (open_tests > 0)


def test_a_failing_advance_fails_the_solve_with_its_exception():
    class Broken(_LeftRank):
        def advance(self):
            raise Boom("advance")

    app = _Default()
    out = make_solver(app, ntime=32, comm=Broken(app, [], 0), rank=0, size=2, cfactor=4,
                      max_iter=3).solve()
    assert out.kind == "failed" and isinstance(out.error, Boom)


class _OwnSum(_Default):
    """App's clone, norm and access (fast paths), its own sum: the core cannot share the
    injected values (Ops::share needs App's sum), so it copies them as _Python's does."""

    def sum(self, a, x, b, y):
        super().sum(a, x, b, y)


@pytest.mark.parametrize("batch", [False, True])
def test_fast_paths_are_counted_like_python_callbacks(batch):
    counts, finals = [], []
    for app in (_Default(), _OwnSum(), _Python()):
        s = make_solver(app, ntime=32, comm=_RightRank(app), rank=1, size=2, cfactor=4,
                        max_iter=3, batch=batch)
        result = s.solve()
        assert result.kind == "ok"
        counts.append(s.counts())
        finals.append(s.stored(32))
    default, own_sum, python = counts
    assert own_sum == python
    assert python["clone"] > 0 and python["sum"] > 0 and python["norm"] > 0
    assert (python["step_batch"] > 0) == batch
    # With App's clone and sum the coarse levels' injected values are the fine C-points
    # themselves (shared, not cloned): fewer clones, everything else alike, same values.
    assert {k: v for k, v in default.items() if k != "clone"} == \
        {k: v for k, v in python.items() if k != "clone"}
    assert 0 < default["clone"] < python["clone"]
    assert all(np.array_equal(finals[0], f) for f in finals[1:])


@pytest.mark.parametrize("callback,message", [("init", r"init\(t\) returned None"),
                                              ("clone", r"clone\(u\) returned None")])
def test_a_vector_callback_returning_none_is_a_type_error(callback, message):
    app = _Python()
    setattr(app, callback, lambda *args: None)
    out = make_solver(app, ntime=8).solve()
    assert out.kind == "failed" and out.callback == callback
    assert isinstance(out.error, TypeError) and re.search(message, str(out.error))
