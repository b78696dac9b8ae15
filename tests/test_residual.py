"""A user residual (App.residual, XBraid's braid_SetResidual) and the full residual norm
(Options.full_rnorm, XBraid's braid_SetFullRNormRes) against XBraid.

tests/data/xbraid_residual.json holds what XBraid's ex-01-expanded and ex-02 print with
``-res`` at 1, 2 and 4 processes (each entry records its command and XBraid commit);
residual_cases.py reimplements both examples' step and residual. Every printed residual,
the iteration and level counts and a final value must agree to all printed digits, at
the rank count XBraid used. tests/data/xbraid_full_rnorm.json does the same for the full
residual norm (printed "Full || r_k ||" lines and the final "Global res 2-norm"), from a
small C driver built against XBraid (tests/data/XBRAID_GOLDEN_NOTES.md). The contract's
errors are checked here too.
"""

import re

import numpy as np
import pytest
from residual_cases import (CASES, FULL_CASES, TRACE_CASES, Ex01Res, at_rank_count, case_id,
                            expected, expected_full, full_case_id, problem, run, run_full,
                            run_trace, trace_case_id)
from test_mpi import run_driver

import braidpy


@pytest.mark.parametrize("case", at_rank_count(1), ids=case_id)
def test_matches_xbraid(case):
    assert case["history"]
    assert run(case) == expected(case)


@pytest.mark.parametrize("case", [c for c in FULL_CASES if c["nprocs"] == 1], ids=full_case_id)
def test_full_rnorm_matches_xbraid(case):
    assert case["full_history"]
    assert run_full(case) == expected_full(case)


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_matches_xbraid_at_its_rank_count(nranks, tmp_path):
    cases = at_rank_count(nranks)
    full = [c for c in FULL_CASES if c["nprocs"] == nranks]
    assert len(cases) == 13 and len(full) == 4
    got = run_driver(nranks, "residual", tmp_path)
    assert sorted(got) == sorted([case_id(c) for c in cases] + [full_case_id(c) for c in full]
                                 + [trace_case_id(c) for c in TRACE_CASES]
                                 + [case_id(c) + " batched" for c in cases])
    for case in cases:
        assert got[case_id(case)] == expected(case), case_id(case)
        batched = got[case_id(case) + " batched"]
        assert batched.pop("stacked_calls") > 0
        bits = [batched.pop(k) for k in ("final_bits", "residual_bits")]
        assert bits == batched.pop("unbatched_bits")  # bit for bit as unbatched
        assert batched == expected(case), case_id(case) + " batched"
    for case in full:
        assert got[full_case_id(case)] == expected_full(case), full_case_id(case)
    for case in TRACE_CASES:
        assert got[trace_case_id(case)] == case["steps"], trace_case_id(case)


@pytest.mark.parametrize("case", TRACE_CASES, ids=trace_case_id)
def test_every_step_call_matches_xbraid(case):
    """Each step call XBraid makes (iteration, level, index, u, ustop, fstop), and no
    other: fstop where XBraid passes one, ustop as XBraid chooses it."""
    assert len(case["steps"]) > 200
    assert run_trace(case) == case["steps"]


def test_full_rnorm_halts_on_the_full_norm():
    """The -fullexact cases stop on the full norm, later than the C-point norm would."""
    case = next(c for c in FULL_CASES if "-tol 8.07e-2" in c["args"] and c["nprocs"] == 1)
    tol = 8.07e-2
    assert min(float(v) for v in case["history"].values()) < tol
    first_c = min(int(k) for k, v in case["history"].items() if float(v) < tol)
    assert case["iterations"] - 1 > first_c


def test_full_rnorm_needs_a_residual():
    from xbraid_cases import Ex01

    with pytest.raises(TypeError, match="full_rnorm"):
        braidpy.Core(Ex01(0.456), 0.0, 1.0, 8, full_rnorm=True)
    with pytest.raises(ValueError, match="full_rnorm"):
        from braidpy.adjoint import GradientSolver
        from apps import DecayRate

        GradientSolver(DecayRate(), 0.0, 1.0, 8, primal=dict(full_rnorm=True))


def test_cases_cover_both_examples_and_cycles():
    assert {c["example"] for c in CASES} == {"ex-01-expanded", "ex-02"}
    assert any("-fmg" in c["args"] for c in CASES)
    assert any("-nu 0" in c["args"] for c in CASES)
    assert sum(len(c["history"]) for c in CASES) > 300


def test_fstop_goes_into_the_step():
    """With a residual, the coarse step sees the FAS right-hand side as fstop (never
    adds it after): the step records what it was given."""
    seen = []

    class Recording(Ex01Res):
        def step(self, u, t0, t1, status, fstop=None, ustop=None):
            seen.append((status.level, fstop is not None, ustop is not None))
            super().step(u, t0, t1, status, fstop=fstop)

    braidpy.solve(Recording(), 0.0, 5.0, 16, max_levels=3, abs_tol=1e-8, batch=False)
    assert {lvl for lvl, has_f, _ in seen if has_f} == {1, 2}
    assert not any(has_f for lvl, has_f, _ in seen if lvl == 0)
    assert all(has_u for _, _, has_u in seen)


def test_ustop_is_optional_and_read_only_guess():
    class NoUstop(Ex01Res):
        def step(self, u, t0, t1, status, fstop=None):
            super().step(u, t0, t1, status, fstop=fstop)

    case = at_rank_count(1)[1]
    from residual_cases import problem
    _, tstart, tstop, ntime, opts = problem(case)
    a = braidpy.solve(NoUstop(), tstart, tstop, ntime, **opts)
    b = braidpy.solve(Ex01Res(), tstart, tstop, ntime, **opts)
    assert a.residuals == b.residuals and a.final[0] == b.final[0]


def test_step_without_fstop_is_refused():
    class Old(Ex01Res):
        def step(self, u, t0, t1, status):
            u /= 1.0 + (t1 - t0)

    with pytest.raises(TypeError, match="fstop"):
        braidpy.Core(Old(), 0.0, 1.0, 8)


def test_batched_step_without_fstop_is_refused():
    class Batched(Ex01Res):
        def step_stacked(self, U, t0s, t1s, status):
            U /= (1.0 + (t1s - t0s))[:, None]

    with pytest.raises(ValueError, match=r"step_stacked\(U, t0s, t1s, status, fstop=None, "
                                         r"ustop=None\).*or pass batch=False"):
        braidpy.Core(Batched(), 0.0, 1.0, 8)
    r = braidpy.solve(Batched(), 0.0, 5.0, 10, max_levels=2, abs_tol=1e-6, batch=False)
    assert f"{r.residuals[-1]:e}" == CASES[0]["final_residual_norm"]

    class OwnBatch(Ex01Res):  # a list-based step_batch has no stacked fstop to take
        def step_batch(self, us, t0s, t1s, status):
            for u, t0, t1 in zip(us, t0s, t1s):
                self.step(u, t0, t1, status)

    with pytest.raises(ValueError, match="no step_batch"):
        braidpy.Core(OwnBatch(), 0.0, 1.0, 8)


@pytest.mark.parametrize("case", at_rank_count(1), ids=case_id)
def test_batched_steps_with_a_residual_match_xbraid_and_the_unbatched_bits(case):
    """step_stacked(U, t0s, t1s, status, fstop=F, ustop=US): F and US stacked like U
    (batch_steps steps each row by step); every value the same bits as unbatched."""
    got = run(case, batched=True)
    assert got.pop("stacked_calls") > 0
    bits = {k: got.pop(k) for k in ("final_bits", "residual_bits")}
    assert got == expected(case)
    app, tstart, tstop, ntime, opts = problem(case)
    plain = braidpy.solve(app, tstart, tstop, ntime, batch=False, **opts)
    assert bits["final_bits"] == plain.final.tobytes().hex()
    assert bits["residual_bits"] == [float(v).hex() for v in plain.residuals]


@pytest.mark.parametrize("case", [c for c in TRACE_CASES if 1 in c["nprocs"]],
                         ids=trace_case_id)
def test_batched_steps_get_xbraid_s_fstop_and_ustop(case):
    """The stacked fstop and ustop rows are, call for call, what XBraid passes."""
    got = run_trace(case, batched=True)
    assert sorted(map(repr, got)) == sorted(map(repr, case["steps"]))


def test_adjoint_refuses_a_residual():
    from braidpy.adjoint import GradientSolver

    with pytest.raises(TypeError, match="residual"):
        GradientSolver(Ex01Res(), 0.0, 1.0, 8)


def test_residual_failure_surfaces_as_the_original_exception():
    class Failing(Ex01Res):
        def residual(self, ustop, r, status):
            raise ZeroDivisionError("planted")

    with pytest.raises(ZeroDivisionError, match="planted"):
        braidpy.solve(Failing(), 0.0, 5.0, 10, max_levels=2)


def test_residual_may_return_a_new_vector():
    class Returning(Ex01Res):
        def residual(self, ustop, r, status):
            return np.array([(1.0 + status.t1 - status.t0) * ustop[0] - r[0]])

    case = CASES[0]
    r = braidpy.solve(Returning(), 0.0, 5.0, 10, max_levels=2, abs_tol=1e-6)
    assert [f"{v:e}" for v in r.residuals] == list(case["history"].values())
    assert r.counts["residual"] > 0


def test_apps_without_residual_are_unchanged():
    from xbraid_cases import Ex01

    r = braidpy.solve(Ex01(0.456), 0.0, 5.0, 10, max_levels=2, abs_tol=1e-6)
    assert r.counts["residual"] == 0 and r.full_residuals == [] and r.final_full_residual is None


def test_check_app_checks_the_residual():
    from braidpy.testing import RESIDUAL_RULE, check_app

    report = check_app(Ex01Res())
    assert RESIDUAL_RULE in report.passed

    class WrongSign(Ex01Res):
        def residual(self, ustop, r, status):
            r[0] = r[0] - (1.0 + status.t1 - status.t0) * ustop[0]

    class IgnoresFstop(Ex01Res):
        def step(self, u, t0, t1, status, fstop=None, ustop=None):
            u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

    for bad in (WrongSign(), IgnoresFstop()):
        report = check_app(bad, raise_on_failure=False)
        assert [rule for rule, _ in report.failed] == [RESIDUAL_RULE]
        assert "fstop" in report.failed[0][1]


def test_array_api_states():
    """A residual app on array_api_strict arrays (on its second device): the same
    residuals as the NumPy one, and nothing is quietly converted to NumPy."""
    xp = pytest.importorskip("array_api_strict")
    device = xp.Device("device1")

    class Strict(Ex01Res):
        array_namespace = xp
        array_device = device

        def init(self, t):
            return xp.asarray([1.0 if t == self.tstart else 0.456], device=device)

        def step(self, u, t0, t1, status, fstop=None, ustop=None):
            assert u.device == device and (fstop is None or fstop.device == device)
            if fstop is not None:
                u += fstop
            u *= 1.0 / (1.0 + t1 - t0)

        def residual(self, ustop, r, status):
            r *= -1.0
            r += (1.0 + status.t1 - status.t0) * ustop

        def norm(self, u):
            return float(xp.sqrt(u[0] * u[0]))

    r = braidpy.solve(Strict(), 0.0, 5.0, 10, max_levels=2, abs_tol=1e-6, batch=False)
    assert [f"{v:e}" for v in r.residuals] == list(CASES[0]["history"].values())
    assert r.final.device == device


def test_warm_restart_with_a_residual():
    """A second solve starts from the first one's solution: its first residual is the
    converged one's size, and it stops at once."""
    core = braidpy.Core(Ex01Res(), 0.0, 32.0, 64, max_levels=3, abs_tol=1e-10, skip=True)
    first = core.solve()
    second = core.solve()
    assert second.residuals[0] < 1e-10 and second.iterations == 1
    assert float(second.final[0]) == float(first.final[0]) or \
        abs(float(second.final[0]) - float(first.final[0])) < 1e-14


def test_full_rnorm_is_printed_as_xbraid_prints_it(capsys):
    from residual_cases import full_problem

    case = next(c for c in FULL_CASES if c["nprocs"] == 1 and "-fullexact -res" in c["args"])
    app, tstart, tstop, ntime, opts = full_problem(case)
    braidpy.solve(app, tstart, tstop, ntime, print_level=1, **opts)
    printed = dict(re.findall(r"Braid: Full \|\| r_(\d+) \|\| = (\S+)", capsys.readouterr().out))
    assert printed == case["full_history"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_residual_steps_that_return_new_states(dtype):
    """A step_stacked returning a new array (copied into the batch's rows), and states
    that are not float64 (one step per state instead of a stacked call): the same bits
    as unbatched."""

    class New(Ex01Res):
        def init(self, t):
            return np.array([1.0 if t == self.tstart else 0.456], dtype=dtype)

        def step(self, u, t0, t1, status, fstop=None, ustop=None):
            v = u + (0 if fstop is None else fstop)
            return (v / dtype(1.0 + t1 - t0)).astype(dtype)

        def step_stacked(self, U, t0s, t1s, status, fstop=None, ustop=None):
            V = U + (0 if fstop is None else fstop)
            return (V / (1.0 + (t1s - t0s)).astype(dtype)[:, None]).astype(dtype)

        def residual(self, ustop, r, status):
            r[0] = dtype(1.0 + status.t1 - status.t0) * ustop[0] - r[0]

    got = [braidpy.solve(New(), 0.0, 5.0, 16, max_levels=3, abs_tol=1e-6, batch=b,
                         storage=0) for b in (True, False)]
    assert got[0].residuals == got[1].residuals and len(got[0].residuals) > 2
    assert got[0].final.tobytes() == got[1].final.tobytes()
    # float64: stacked calls; float32: one step per state (none stacked)
    assert (got[0].counts["step_batch"] > 0) == (dtype == np.float64)
