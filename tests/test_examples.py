"""The numbered examples run serially and under mpiexec with the same results."""

import math
import re
import sys
from pathlib import Path

import pytest
from test_mpi import MPIEXEC
from mpi_process import run_mpi

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = {
    "ex01_scalar_ode.py": ["--ntime", "512"],
    "ex02_heat1d.py": ["--nspace", "65", "--ntime", "128"],
    "ex08_nonlinear_residual.py": ["--nspace", "33", "--ntime", "128"],
    "ex09_advection_spatial.py": ["--nspace", "64", "--ntime", "64"],
    "ex10_periodic.py": ["--ntime", "256", "--cfactor", "2"],
    "ex12_lorenz_delta.py": ["--lyapunov-times", "2", "--ntime", "1024"],
    "ex13_ks_delta.py": ["--lyapunov-times", "1", "--ntime", "256", "--rank", "4"],
}


def run(nranks, script, args):
    cmd = [sys.executable, str(ROOT / "examples" / script), *args]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


NUM = r"([-+]?\d\.\d+e[-+]\d+)"
NUMF = r"([-+]?\d+\.\d+)"


def number(pattern, out):
    """The float printed where ``pattern`` (with NUM groups) matches."""
    found = re.search(pattern, out)
    assert found, f"{pattern!r} not in:\n{out}"
    return [float(g) for g in found.groups()]


def check_ex01(out):
    """u(T) against backward Euler computed here, and the printed errors against them."""
    mgrit, seq, exact = number(rf"u\(T\): MGRIT {NUM}, sequential {NUM}, exact {NUM}", out)
    dt = 5.0 / 512
    u = 1.0
    for _ in range(512):
        u /= 1.0 + dt
    assert math.isclose(seq, u, rel_tol=1e-13) and math.isclose(exact, math.exp(-5.0),
                                                                rel_tol=1e-14)
    [err] = number(rf"\|MGRIT - sequential\| at t_N = {NUM}", out)
    # Converged to |r| < 1e-10: MGRIT equals backward Euler far below the printed digits.
    assert err < 1e-10 and abs(mgrit - u) < 1e-10
    assert math.isclose(err, abs(mgrit - seq), rel_tol=1e-2, abs_tol=1e-14)
    [err_exact, seq_exact] = number(rf"\|MGRIT - exp\(lam T\)\| += {NUM}  "
                                    rf"\(\|sequential - exp\(lam T\)\| = {NUM}\)", out)
    assert math.isclose(seq_exact, abs(u - math.exp(-5.0)), rel_tol=1e-3)
    assert abs(err_exact - seq_exact) <= err + 1e-6 * seq_exact  # the printed 4 digits


def check_ex02(out):
    """MGRIT equals implicit Euler (tolerance 1e-8); its error against the exact solution
    is then the sequential one, first order in dt = pi/128."""
    [err] = number(rf"max \|MGRIT - sequential\| over space-time = {NUM}", out)
    assert err < 1e-8
    mgrit, seq = number(rf"max \|MGRIT - exact\| +over space-time = {NUM}  "
                        rf"\(sequential: {NUM}\)", out)
    assert abs(mgrit - seq) <= err + 1e-3 * seq
    assert 0.1 * math.pi / 128 < seq < math.pi / 128


def check_ex08(out):
    """The app passes check_app's rules, its residual one included; MGRIT (tolerance
    1e-9) equals sequential Newton-backward-Euler stepping; starting Newton from ustop
    takes fewer Newton iterations than sequential stepping from u."""
    assert "all 11 rules passed" in out
    [err] = number(rf"max \|MGRIT - sequential\| at t_N = {NUM}", out)
    assert err < 1e-8
    found = re.search(r"Newton iterations per step: (\S+) \(from ustop; sequential stepping: "
                      r"(\S+)\)", out)
    assert found and float(found.group(1)) < float(found.group(2))


def check_ex09(out):
    """Every level keeps the fine CFL number 0.5; MGRIT (tolerance 1e-6) is close to
    sequential forward Euler."""
    assert "CFL dt/dx per level: 0.5, 0.5, 0.5, 0.5" in out
    [err] = number(rf"max \|MGRIT - sequential\| at t_N = {NUM}", out)
    assert err < 1e-5


def check_ex10(out):
    """u(T) = u(0) exactly; MGRIT (tolerance 1e-10) is the discrete periodic orbit; its
    amplitude is near the continuous steady state's (first order in dt)."""
    assert "|u(T) - u(0)| = 0.000e+00" in out
    [err] = number(rf"max \|MGRIT - periodic sequential\| over the period = {NUM}", out)
    assert err < 1e-8
    amp, exact = number(rf"amplitude of x: {NUM} \(continuous steady state: {NUM}\)", out)
    assert abs(amp - exact) < 0.02 * exact


def check_ex12(out):
    """Both solves converge; Delta correction (rank 3) takes at most half of plain FAS's
    iterations; the exponents are Lorenz's (about 0.9, 0, -14.6; forward Euler over two
    Lyapunov times gives 0.82, 0.02, -14.62); both solves reach the same trajectory."""
    found = re.search(r"plain FAS \(delta_rank 0\): (\d+) iterations, converged", out)
    assert found, out
    plain = int(found.group(1))
    found = re.search(r"Delta correction \(delta_rank 3\): (\d+) iterations, converged", out)
    assert found, out
    delta = int(found.group(1))
    assert (plain, delta) == (24, 10)
    assert f"iterations: {plain} without Delta, {delta} with (ratio 0.42)" in out
    found = re.search(rf"Lyapunov exponents: {NUMF}, {NUMF}, {NUMF}", out)
    assert found, out
    l1, l2, l3 = (float(g) for g in found.groups())
    assert 0.7 < l1 < 1.0 and abs(l2) < 0.1 and -15.0 < l3 < -14.2
    [diff] = number(rf"u\(T\) with Delta - u\(T\) without: {NUM}", out)
    assert diff < 1e-5


def check_ex13(out):
    """Over one Lyapunov time both solves converge (tolerance 1e-8), Delta (rank 4) in
    no more iterations than plain FAS."""
    found = re.search(r"iterations: (\d+) without Delta, (\d+) with", out)
    assert found, out
    plain, delta = int(found.group(1)), int(found.group(2))
    assert delta <= plain <= 8
    assert "plain FAS (delta_rank 0): " in out and out.count(" iterations, converged") == 2


CHECK_ERRORS = {"ex01_scalar_ode.py": check_ex01, "ex02_heat1d.py": check_ex02,
                "ex08_nonlinear_residual.py": check_ex08,
                "ex09_advection_spatial.py": check_ex09, "ex10_periodic.py": check_ex10,
                "ex12_lorenz_delta.py": check_ex12, "ex13_ks_delta.py": check_ex13}


def history(out):
    iterations = re.search(r"iterations: (\d+)", out).group(1)
    return iterations, re.findall(r"\|\| r_\d+ \|\| = \S+", out)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_serial_and_parallel_agree(script, tmp_path):
    plots = {"ex01_scalar_ode.py": ["--plot", str(tmp_path / "res.png")],
             "ex02_heat1d.py": ["--plot-solution", str(tmp_path / "sol.png"),
                                "--plot-residuals", str(tmp_path / "res.png")],
             "ex08_nonlinear_residual.py": [],
             "ex09_advection_spatial.py": [], "ex10_periodic.py": [],
             "ex12_lorenz_delta.py": [], "ex13_ks_delta.py": []}[script]
    serial = run(1, script, EXAMPLES[script] + plots)
    parallel = run(2, script, EXAMPLES[script])
    assert history(serial) == history(parallel)
    # The copies under mpiexec really formed one 2-rank world (the header says so).
    assert "1 MPI rank(s)" in serial and "2 MPI rank(s)" in parallel
    assert int(history(serial)[0]) > 1 and len(history(serial)[1]) > 1
    for out in (serial, parallel):
        CHECK_ERRORS[script](out)
    for png in tmp_path.glob("*.png"):
        assert png.stat().st_size > 1000
    assert len(list(tmp_path.glob("*.png"))) == len(plots) // 2


def test_ex13_delta_converges_where_plain_fas_stalls():
    """ex13's default solve (16 Lyapunov times, 4096 steps, 3 levels, cf 4, FCF,
    tolerance 1e-8): plain FAS stalls (30 iterations, its second half's residuals stay
    between 1e-8 and 1e-6, none below the tolerance) and Delta correction with rank 8
    converges in at most 20 iterations, below 1e-8."""
    out = run(1, "ex13_ks_delta.py", [])
    assert "plain FAS (delta_rank 0): 30 iterations, not converged" in out, out
    found = re.search(r"Delta correction \(delta_rank 8, defer level 0, iteration 0\): "
                      r"(\d+) iterations, converged", out)
    assert found and int(found.group(1)) <= 20, out
    low, high = number(rf"plain FAS over its last 15 iterations: residual between {NUM} "
                       rf"and {NUM}", out)
    assert 1e-8 < low and high < 1e-6
    residuals = [float(x) for x in re.findall(r"\|\| r_\d+ \|\| = (\S+)", out)]
    assert residuals[-1] < 1e-8 < min(residuals[:-1])


def test_ex02_refinet_refines_and_agrees_at_1_2_4_ranks():
    """ex02 --refinet (XBraid's ex-02 -refinet on this example's heat problem): the grid
    is refined from 16 steps to uneven smaller ones, MGRIT then equals implicit Euler on
    the refined grid, and 1 rank chain by chain, 1 rank batched, 2 and 4 ranks print the
    same residuals, iterations and refined grid (the guess is deterministic here)."""
    args = ["--nspace", "33", "--ntime", "16", "--cfactor", "2", "--nrelax", "1",
            "--refinet", "1e-3"]
    outs = [run(1, "ex02_heat1d.py", args), run(1, "ex02_heat1d.py", args + ["--no-batched"]),
            run(2, "ex02_heat1d.py", args), run(4, "ex02_heat1d.py", args)]
    assert ["1 MPI rank(s)" in outs[0], "2 MPI rank(s)" in outs[2],
            "4 MPI rank(s)" in outs[3]] == [True] * 3
    line = r"temporal refinement \(--refinet 0.001\): (\d+) rebuild\(s\), 16 -> (\d+) steps, " \
           rf"dt from {NUM} to {NUM}"
    found = [re.search(line, out) for out in outs]
    assert all(found), outs[0]
    assert len({f.group(0) for f in found}) == 1
    rebuilds, steps = int(found[0].group(1)), int(found[0].group(2))
    dt_min, dt_max = float(found[0].group(3)), float(found[0].group(4))
    assert rebuilds >= 2 and steps > 4 * 16 and dt_min < dt_max < math.pi / 16
    assert len({str(history(out)) for out in outs}) == 1
    assert "batched (step_stacked)" in outs[0] and "unbatched" in outs[1]
    for out in outs:
        [err] = number(rf"max \|MGRIT - sequential\| over space-time = {NUM}", out)
        assert err < 1e-8


def test_ex02_doctests():
    import doctest
    import importlib

    sys.path.insert(0, str(ROOT))
    try:
        ex02 = importlib.import_module("examples.ex02_heat1d")
    finally:
        sys.path.remove(str(ROOT))
    result = doctest.testmod(ex02)
    assert result.attempted >= 4 and result.failed == 0
