"""Spatial coarsening (App.coarsen / App.refine, XBraid's braid_SetSpatialCoarsen and
braid_SetSpatialRefine) against XBraid's printed output at 1, 2 and 4 ranks, and the
contract around it."""

import numpy as np
import pytest
import spatial_cases as s
from mpi_launch import launch

import braidpy


def _ids(cases):
    return [c["command"].split(" ", 3)[3] for c in cases]


SERIAL = [c for c in s.CASES if c["nranks"] == 1]


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
@pytest.mark.parametrize("case", SERIAL, ids=_ids(SERIAL))
def test_serial_run_prints_what_xbraid_printed(case, batched):
    got = s.run_case(case, batched=batched)
    assert {k: got[k] for k in ("residuals", "iterations", "levels", "final")} == \
        s.expected(case)
    assert got["batched"] == batched
    assert (got["coarsen"] > 0) == (case["sc"] > 0) and (got["refine"] > 0) == (case["sc"] > 0)


def test_out_of_place_batched_steps_get_each_levels_states():
    case = next(c for c in SERIAL if c["example"] == "drive-burgers-1D" and c["sc"] == 1
                and "options" not in c)
    got = s.run_case(case, batched=True, out_of_place=True)
    assert {k: got[k] for k in ("residuals", "iterations", "levels", "final")} == \
        s.expected(case)


def test_spatial_coarsening_keeps_the_coarse_cfl():
    """The driver's point: without -sc the coarse levels' CFL doubles per level (the
    residual jumps to 3e10 on the way); with it every level keeps a*dt/dx = 0.5."""
    for sc, cfl in ((0, [0.5, 1.0, 2.0, 4.0]), (1, [0.5] * 4)):
        app = s.Advection(64, sc)
        braidpy.solve(app, 0.0, 5.0, 128, **{**s.burgers_options(), "max_iter": 2})
        assert [app.seen[level][1] / app.seen[level][0] for level in range(4)] == cfl
    by_sc = {c["sc"]: [float(r) for r in c["residuals"]] for c in SERIAL
             if c["example"] == "drive-burgers-1D" and "options" not in c}
    assert max(by_sc[0]) > 1e10 and max(by_sc[1]) == by_sc[1][0]


@pytest.fixture(scope="module", params=[1, 2, 4])
def mpi_run(request, tmp_path_factory):
    n = request.param
    return n, launch("mpi_spatial_coarsen_driver.py", n, tmp_path_factory.mktemp("sc"))


def test_mpi_runs_print_what_xbraid_printed(mpi_run):
    n, out = mpi_run
    cases = [c for c in s.CASES if c["nranks"] == n]
    assert len(cases) == 7
    for c in cases:
        for key in (c["command"], c["command"] + " batched"):
            got = out[key]
            assert {k: got[k] for k in ("residuals", "iterations", "levels", "final")} == \
                s.expected(c), key
            assert got["batched"] == key.endswith("batched")
    for which in ("coarsen", "refine"):  # the failing rank raises its own exception
        *others, (kind, message) = [rank[which] for rank in out["failures"]]
        assert (kind, message) == ("Broken", f"{which} failed on purpose"), out["failures"]
        for kind, message in others:
            assert kind == "BraidError" and f"rank {n - 1}" in message, out["failures"]
    strict = [k for k in out if k.endswith("array-api-strict")]
    assert len(strict) == 1
    got = out[strict[0]]
    case = next(c for c in cases if strict[0] == c["command"] + " array-api-strict")
    assert got["residuals"] == case["residuals"][:5] and got["levels"] == case["levels"]


def test_array_api_states_on_their_device():
    pytest.importorskip("array_api_strict")
    case = next(c for c in SERIAL if c["example"] == "drive-burgers-1D" and c["sc"] == 1)
    got = s.run_strict(case)
    assert got["residuals"] == case["residuals"][:5] and got["levels"] == case["levels"]
    assert got["device"] == "array_api_strict.Device('device1')"


class Watch(s.Advection):
    """Advection that records what coarsen and refine are told."""

    def __init__(self):
        super().__init__(16, 1)
        self.calls = []
        self.coarsen, self.refine = self._watch("coarsen"), self._watch("refine")

    def _watch(self, which):
        inner = self._coarsen_linear if which == "coarsen" else self._interp_linear

        def call(u, status):
            self.calls.append((which, u.size, status.level, status.index, status.fine_index,
                               status.t, status.f_tprior, status.f_tstop, status.c_tprior,
                               status.c_tstop, status.iteration))
            return inner(u, status)
        return call


def test_coarsen_and_refine_are_told_xbraids_coarsen_ref_status():
    app = Watch()
    core = braidpy.Core(app, 0.0, 1.0, 8, max_levels=3, cfactor=2, skip=True, max_iter=2)
    core.solve()
    t = core.times
    sizes = {0: 17, 1: 9, 2: 5}
    assert {c[0] for c in app.calls} == {"coarsen", "refine"}
    for which, size, level, j, fine, tt, fp, fs, cp, cs, it in app.calls:
        stride, n = 2 ** level, 8 // 2 ** level  # fine level `level`: n intervals
        i = j * 2  # the coarse point's index on the fine level
        assert size == sizes[level] if which == "coarsen" else size == sizes[level + 1]
        assert fine == j * 2 * stride and tt == t[fine]
        assert (fp, fs) == (t[max(i - 1, 0) * stride], t[min(i + 1, n) * stride])
        assert (cp, cs) == (t[max(j - 1, 0) * 2 * stride], t[min(j + 1, n // 2) * 2 * stride])
    levels = {(c[0], c[2]) for c in app.calls}
    assert levels == {("coarsen", 0), ("coarsen", 1), ("refine", 0), ("refine", 1)}


def test_one_of_coarsen_and_refine_is_refused():
    class Half(s.Advection):
        def __init__(self):
            super().__init__(16, 0)
            self.coarsen = self._coarsen_linear

    with pytest.raises(TypeError, match="coarsen.*refine"):
        braidpy.Core(Half(), 0.0, 1.0, 8)


def test_the_adjoint_refuses_spatial_coarsening():
    from braidpy.adjoint import GradientSolver

    with pytest.raises(ValueError, match="spatial coarsening"):
        GradientSolver(s.Advection(16, 1), 0.0, 1.0, 8)


def test_warm_restart_and_failing_refine():
    app = s.Advection(64, 1)
    core = braidpy.Core(app, 0.0, 5.0, 128, **s.burgers_options())
    first = core.solve()
    again = core.solve()  # warm: starts from the converged C-points
    assert again.iterations < first.iterations and again.residuals[-1] < first.residuals[-1]

    def broken(u, status):
        raise RuntimeError("refine failed")
    app.refine = broken
    with pytest.raises(RuntimeError, match="refine failed"):
        braidpy.Core(app, 0.0, 5.0, 128, **s.burgers_options()).solve()


@pytest.mark.parametrize("batched", [False, True], ids=["chains", "batched"])
def test_identity_coarsening_is_plain_mgrit_bitwise(batched):
    """coarsen and refine that copy: every value as without them (injection, u - v)."""
    case = next(c for c in SERIAL if c["example"] == "drive-burgers-1D" and c["sc"] == 0)
    kind = s.BatchedAdvection if batched else s.Advection
    plain = kind(64, 0)
    copying = kind(64, 0)
    copying.coarsen = copying.refine = lambda u, status: u.copy()
    runs = [braidpy.solve(app, 0.0, 5.0, 128, **s.burgers_options()) for app in (plain, copying)]
    assert runs[0].residuals == runs[1].residuals and np.array_equal(runs[0].final,
                                                                     runs[1].final)
    assert [f"{r:.6e}" for r in runs[1].residuals] == case["residuals"]
    assert runs[1].counts["coarsen"] > 0 and "coarsen" not in runs[0].counts
