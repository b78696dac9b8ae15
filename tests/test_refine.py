"""Temporal refinement (Options.refine, status.set_rfactor) against XBraid's own output.

tests/data/xbraid_refine.json holds what XBraid (commit in the file) printed for
examples/ex-01-refinement with -refine 1..4 and the limits' options, at 1, 2 and 4 ranks
(tests/data/make_xbraid_refine.py made it; XBraid's output is the same at every rank
count). braidpy runs the same problem (refine_cases.Ex01Refinement) and must print the same
residual line for line (7 digits, the refined iteration's k twice), the same refinement
lines (grid sizes, the limits' stop), iteration, level and refinement counts, final grid
size and final value (15 digits, as the example's access file writes it).
"""

import math

import numpy as np
import pytest
from refine_cases import CASES, Ex01Refinement, make, printed

import braidpy

SERIAL = [c for c in CASES if c["ranks"] == 1]


def _run(case, capsys, app=None, **extra):
    made, opts = make(case["args"])
    app = app or made
    result = braidpy.solve(app, 0.0, 5.0, 100, print_level=1, **{**opts, **extra})
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines()
             if "Temporal refinement" in ln]
    return app, result, lines


def _assert_as_xbraid(case, app, result, lines):
    assert printed(result) == case["residuals"]
    assert lines == [ln for ln in case["lines"] if "Temporal refinement" in ln]
    assert len(result.times) - 1 == case["ntime"]
    assert result.iterations == case["iterations"]
    assert result.levels == case["levels"]
    assert result.refinements == case["refinements"]
    assert f"{result.final[0]:.14e}" == case["final_u"]
    assert f"{result.times[-1]:.14e}" == case["final_t"]
    if case["num_syncs"] is not None:
        assert app.syncs == case["num_syncs"]


def test_reference_covers_the_variants():
    assert {tuple(c["args"][:2]) for c in SERIAL} == {("-refine", str(r)) for r in (1, 2, 3, 4)}
    assert len(SERIAL) == 10
    for c in CASES:  # XBraid's redistribution gives the same answer at 1, 2, 4 ranks
        same = next(s for s in SERIAL if s["args"] == c["args"])
        assert (c["residuals"], c["final_u"], c["ntime"]) == \
            (same["residuals"], same["final_u"], same["ntime"])


@pytest.mark.parametrize("case", SERIAL, ids=lambda c: " ".join(c["args"]))
def test_ex01_refinement_as_xbraid(case, capsys):
    _assert_as_xbraid(case, *_run(case, capsys))


class Stacked(Ex01Refinement):
    """The same steps in batches, one refinement factor per row."""

    def step_stacked(self, U, t0s, t1s, status):
        rfs = []
        for k in range(U.shape[0]):
            v = U[k, 0]
            U[k, 0] = 1.0 / (1.0 + (t1s[k] - t0s[k])) * v
            fine = int(status.fine_indices[k])
            rf = self.rfactor(v, U[k, 0], t0s[k], t1s[k], _Row(status, fine, k))
            rfs.append(1 if rf is None else rf)
        if status.level == 0 and status.nrefine < 8:
            status.set_rfactor(rfs)


class _Row:
    """What Ex01Refinement.rfactor reads of a step's status, for row k of a batch."""

    def __init__(self, status, fine, k):
        self.level, self.nrefine, self.fine_index = status.level, status.nrefine, fine
        self._status, self._k = status, k

    def set_refinement_dt_values(self, rf, dts):
        self._status.set_refinement_dt_values(rf, dts, row=self._k)


@pytest.mark.parametrize("case", [c for c in SERIAL if c["args"] in
                                  (["-refine", "1"], ["-refine", "3"], ["-refine", "4"])],
                         ids=lambda c: " ".join(c["args"]))
def test_batched_steps_refine_alike(case, capsys):
    made, _ = make(case["args"])
    app = Stacked(made.refine)
    app.sync = None
    app, result, lines = _run(case, capsys, app=app)
    assert result.counts.get("step_batch", 0) > 0
    _assert_as_xbraid(case, app, result, lines)


def test_tpoints_cutoff_stops_refining(capsys):
    case = next(c for c in SERIAL if c["args"] == ["-refine", "4"])
    _, result, lines = _run(case, capsys, tpoints_cutoff=200)
    assert len(result.times) - 1 == 200 and result.refinements == 1
    assert lines == ["Braid: Temporal refinement occurred, 200 time steps",
                     "Braid: Temporal refinement stopped, 200 time steps, 1 refinements done",
                     "Braid: Temporal refinement limits: time steps = 200, refinements = 200"]


def test_refine_off_ignores_requests():
    app, opts = make(["-refine", "1"])
    app.sync = None
    opts["refine"] = False
    result = braidpy.solve(app, 0.0, 5.0, 100, **opts)
    assert len(result.times) == 101 and result.refinements == 0


def test_warm_restart_keeps_the_refined_grid():
    app, opts = make(["-refine", "1"])
    app.sync = None
    core = braidpy.Core(app, 0.0, 5.0, 100, **opts)
    first = core.solve()
    second = core.solve()
    assert len(second.times) == 299 and second.refinements == 1
    assert abs(second.final[0] - first.final[0]) < 1e-6


class Failing(Ex01Refinement):
    def __init__(self, when):
        super().__init__(1)
        self.when = when

    def step(self, u, t0, t1, status):
        if self.when(status):
            raise ZeroDivisionError("step failed while refining")
        super().step(u, t0, t1, status)


@pytest.mark.parametrize("when", [lambda s: s.phase == "refine",
                                  lambda s: s.phase == "refine" and s.ntime > 100])
def test_a_step_failing_while_refining_surfaces(when):
    app = Failing(when)
    app.sync = None
    with pytest.raises(ZeroDivisionError, match="while refining"):
        braidpy.solve(app, 0.0, 5.0, 100, max_levels=15, abs_tol=1e-6, refine=True)


@pytest.mark.parametrize("bad, error", [
    (lambda s: s.set_rfactor(0), "rfactor must be an int >= 1, got 0"),
    (lambda s: s.set_rfactor(1.5), "rfactor must be an int >= 1, got 1.5"),
    (lambda s: s.set_rfactor(True), "rfactor must be an int >= 1, got True"),
    (lambda s: s.set_refinement_dt_values(3, [0.01]), "needs rfactor - 1 = 2 dts, got 1"),
    (lambda s: s.set_refinement_dt_values(2, [1.0]), "not less than the step's t1 - t0"),
    (lambda s: s.set_refinement_dt_values(2, [-0.01]), "must be finite and > 0"),
    (lambda s: s.set_rfactor(2, row=0), "row is only for step_batch's status"),
])
def test_bad_requests_raise_from_the_step(bad, error):
    class App(Ex01Refinement):
        def step(self, u, t0, t1, status):
            u[0] = 1.0 / (1.0 + (t1 - t0)) * u[0]
            bad(status)

    app = App(0)
    app.sync = None
    with pytest.raises((ValueError, TypeError), match=error.replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.").replace("+", r"\+")):
        braidpy.solve(app, 0.0, 5.0, 100, refine=True)


@pytest.mark.parametrize("kwargs, error", [
    (dict(refine=1), "refine must be True or False, got 1"),
    (dict(incr_max_levels="yes"), "incr_max_levels must be True or False"),
    (dict(max_refinements=-1), "max_refinements must be >= 0, got -1"),
    (dict(max_refinements=2.0), "max_refinements must be an int"),
    (dict(tpoints_cutoff=-5), "tpoints_cutoff must be >= 0, got -5"),
    (dict(refine=True, periodic=True), "refine=True and periodic=True exclude each other"),
    (dict(refine=True, seq_soln=True), "refine=True and seq_soln=True exclude each other"),
    (dict(refine=True, cycle_file="c.out"), "cycle_file='c.out' is not supported"),
])
def test_options_are_checked(kwargs, error):
    with pytest.raises((ValueError, TypeError), match=error.replace("(", r"\(")
                       .replace(")", r"\)")):
        braidpy.Options(**kwargs)


def test_refine_needs_two_levels():
    app, _ = make(["-refine", "1"])
    app.sync = None
    with pytest.raises(ValueError, match="refine: the hierarchy has one level"):
        braidpy.Core(app, 0.0, 5.0, 100, refine=True, max_levels=1)


def test_refine_is_refused_by_the_adjoint():
    from braidpy.adjoint.solver import solve_options
    with pytest.raises(ValueError, match="refine=True is not supported by the adjoint"):
        solve_options({"refine": True, "storage": "final"}, None, None)


def test_even_split_uses_xbraids_formula():
    # Interval (t_49, t_50] split in 100: t_49 + (j/100) * dt, as XBraid computes it.
    app, opts = make(["-refine", "1"])
    app.sync = None
    times = braidpy.solve(app, 0.0, 5.0, 100, **opts).times
    t0, t1 = 0.0 + (49 / 100) * 5.0, 0.0 + (50 / 100) * 5.0
    assert times[49] == t0 and times[149] == t1
    assert all(times[49 + j] == t0 + (j / 100) * (t1 - t0) for j in range(1, 100))
    assert math.isclose(times[-1], 5.0) and np.all(np.diff(times) > 0)


# ------------------------------------------------------------------ 2 and 4 ranks

@pytest.fixture(scope="module")
def serial_runs():
    from refine_cases import run_case

    return {tuple(c["args"]): run_case(c) for c in SERIAL}


@pytest.mark.parametrize("nranks", [2, 4])
def test_ex01_refinement_as_xbraid_on_ranks(nranks, tmp_path, serial_runs):
    """XBraid's output at nranks, the same answer as one rank (the final value to the last
    bit, the residual norms to rounding), and XBraid's block distribution of the refined
    grid: every rank's share within one point of even."""
    from test_mpi import run_driver

    out = run_driver(nranks, "refine", tmp_path)
    assert len(out["cases"]) == len(SERIAL)
    for run in out["cases"]:
        ref = next(c for c in CASES if c["args"] == run["args"] and c["ranks"] == nranks)
        serial = serial_runs[tuple(run["args"])]
        for got in filter(None, (run["got"], run["batched"])):
            where = (nranks, run["args"])
            assert got["residuals"] == ref["residuals"], where
            assert (got["ntime"], got["iterations"], got["levels"], got["refinements"]) == \
                (ref["ntime"], ref["iterations"], ref["levels"], ref["refinements"]), where
            assert (got["final_u"], got["final_t"]) == (ref["final_u"], ref["final_t"]), where
            assert got["final_hex"] == serial["final_hex"], where
            # The norm's sum over ranks may round differently in the last bit.
            assert len(got["history_hex"]) == len(serial["history_hex"]), where
            assert all(math.isclose(float.fromhex(a), float.fromhex(b), rel_tol=1e-14)
                       for a, b in zip(got["history_hex"], serial["history_hex"])), where
            if ref["num_syncs"] is not None:
                assert got["syncs"] == ref["num_syncs"], where
            shares = got["shares"]
            assert len(shares) == nranks and sum(shares) == ref["ntime"] + 1, where
            assert max(shares) - min(shares) <= 1, where
        if run["batched"] is not None:
            assert run["batched"]["steps_batched"] > 0
    outcomes = out["failure"]
    assert outcomes[1] == ["ZeroDivisionError", "step failed while refining"]
    for rank, (kind, text) in enumerate(outcomes):
        if rank != 1:
            assert kind == "BraidError" and "rank 1: step raised ZeroDivisionError" in text


def test_dt_values_are_summed_from_t0():
    class App(Ex01Refinement):
        def step(self, u, t0, t1, status):
            u[0] = 1.0 / (1.0 + (t1 - t0)) * u[0]
            if status.level == 0 and status.fine_index == 10 and status.nrefine == 0:
                dt = t1 - t0
                status.set_refinement_dt_values(3, [dt / 8, dt / 4])

    app = App(0)
    app.sync = None
    times = braidpy.solve(app, 0.0, 5.0, 100, max_levels=15, abs_tol=1e-6, refine=True).times
    t0, dt = 0.0 + (10 / 100) * 5.0, 0.0 + (11 / 100) * 5.0 - (0.0 + (10 / 100) * 5.0)
    assert len(times) == 103
    assert list(times[10:14]) == [t0, t0 + dt / 8, t0 + dt / 8 + dt / 4, 0.0 + (11 / 100) * 5.0]


def test_a_user_residual_refines_the_same_grid():
    class WithResidual(Ex01Refinement):
        def step(self, u, t0, t1, status, fstop=None):
            v = u[0]
            u[0] = (v + (0.0 if fstop is None else fstop[0])) / (1.0 + (t1 - t0))
            rf = self.rfactor(v, u[0], t0, t1, status)
            if rf is not None:
                status.set_rfactor(rf)

        def residual(self, ustop, r, status):
            r[0] = (1.0 + (status.t1 - status.t0)) * ustop[0] - r[0]

    app, opts = make(["-refine", "1"])
    app.sync = None
    plain = braidpy.solve(app, 0.0, 5.0, 100, **opts)
    res = WithResidual(1)
    res.sync = None
    got = braidpy.solve(res, 0.0, 5.0, 100, **opts)
    assert got.converged and got.refinements == 1
    assert np.array_equal(got.times, plain.times)
    assert abs(got.final[0] - plain.final[0]) < 1e-6
