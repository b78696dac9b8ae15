"""ex02's batched implicit step (Heat1D.step_stacked): bitwise the unbatched step, at 1, 2, 4 ranks.

Under pytest this file holds the tests. Run as a script it is their MPI driver
(mpi_launch.launch starts it)::

    mpiexec -n P python tests/test_heat_batched.py P OUT.json

It runs every case of CASES batched and unbatched on P ranks and rank 0 writes
the summaries (iterations, residual history, the whole space-time solution) as JSON.
"""

import json
import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import braidpy  # noqa: E402
from examples import ex02_heat1d as ex02  # noqa: E402

NSPACE, NTIME = 33, 192


def graded_times(ntime):
    """A fine grid on [0, pi] whose steps repeat dt, 2 dt, 3 dt: with cfactor 4 the rows of
    every batched call have several step sizes (one LU factorization each)."""
    steps = np.resize([1.0, 2.0, 3.0], ntime)
    grid = np.concatenate(([0.0], np.cumsum(steps)))
    return grid * (math.pi / grid[-1])


# name: (command line of ex02 beyond --nspace/--ntime, fine time grid or None)
CASES = {
    "example": ([], None),  # the example's own settings: cfactor 16, F-relaxation
    "fcf_cf4": (["--cfactor", "4", "--nrelax", "1"], None),  # 4 levels, C-relaxation
    "graded": (["--cfactor", "4", "--nrelax", "1"], graded_times(NTIME)),
}


def run_case(name, batched, comm=None):
    """Summary of ex02's MGRIT solve of case ``name`` (the solution only on rank 0)."""
    extra, times = CASES[name]
    flag = "--batched" if batched else "--no-batched"
    args = ex02.parse_args(["--nspace", str(NSPACE), "--ntime", str(NTIME), flag, *extra])
    app = ex02.Heat1D(nspace=args.nspace)
    r = braidpy.solve(app, 0.0, args.tstop, args.ntime, comm=comm, times=times,
                      **ex02.mgrit_options(args))
    if comm is not None:
        from mpi_world import assert_split

        assert_split(comm, r.owned, len(r.times))
    U = ex02.gather_solution(app, r, comm)
    calls = r.counts["step_batch"]
    return dict(levels=r.levels, iterations=r.iterations,
                residual_iterations=[int(k) for k in r.residual_iterations],
                residuals=[float(x) for x in r.residuals],
                final=r.final.tolist(), solution=None if U is None else U.tolist(),
                times=r.times.tolist(), factorizations=len(app.factorizations),
                batched_calls=calls if comm is None else comm.allreduce(calls))


def drive(nranks, path):
    """The MPI driver: every case batched and unbatched; rank 0 writes the JSON."""
    from mpi4py import MPI
    from mpi_world import expect_world

    comm = MPI.COMM_WORLD
    expect_world(comm, nranks)
    out = {"size": comm.Get_size(), "ranks": comm.gather(comm.Get_rank())}
    for name in CASES:
        out[name] = {str(b): run_case(name, b, comm) for b in (True, False)}
    if comm.Get_rank() == 0:
        Path(path).write_text(json.dumps(out))



def stacked_vs_rows(app, U, t0s, t1s):
    """(step_stacked on a copy of U, step row by row on another copy)."""
    A, B = U.copy(), U.copy()
    assert app.step_stacked(A, t0s, t1s, None) is None  # in place
    for k in range(len(U)):
        app.step(B[k], float(t0s[k]), float(t1s[k]), None)
    return A, B


@pytest.mark.parametrize("nspace", [3, 33, 1025])
def test_step_stacked_is_step_row_by_row_bitwise(nspace):
    app = ex02.Heat1D(nspace)
    rng = np.random.default_rng(20261128)
    m = 2 * app._rhs_per_solve + 3  # more than one SuperLU call per group
    U = rng.standard_normal((m, nspace - 2))
    dt = math.pi / 1024
    t0s = np.arange(m) * (4 * dt)
    A, B = stacked_vs_rows(app, U, t0s, t0s + dt)
    assert np.array_equal(A, B)
    # Rows with three step sizes, interleaved: each row gets its own group's solve.
    sizes = np.resize([dt, 2 * dt, 16 * dt], m)
    rng.shuffle(sizes)
    A, B = stacked_vs_rows(app, U, t0s, t0s + sizes)
    assert np.array_equal(A, B)
    assert not np.array_equal(A[0], A[1])  # the rows are distinct states
    assert len(app.factorizations) == 3


def test_step_stacked_single_row_and_roundoff_step_sizes():
    """One row; and step sizes that differ only by time-grid round-off share a factor."""
    app = ex02.Heat1D(17)
    U = np.sin(np.arange(1.0, 16.0))[None, :].repeat(5, axis=0)
    t0s = np.array([0.1, 0.7, 1.3, 2.9, 3.0])
    t1s = t0s + 0.1  # 0.1 in binary: the differences t1 - t0 vary in their last bits
    assert len(np.unique(t1s - t0s)) > 1
    A, B = stacked_vs_rows(app, U, t0s, t1s)
    assert np.array_equal(A, B) and len(app.factorizations) == 1
    A, B = stacked_vs_rows(app, U[:1], t0s[:1], t1s[:1])
    assert np.array_equal(A, B)


@pytest.fixture(scope="module")
def serial():
    return {name: {str(b): run_case(name, b) for b in (True, False)} for name in CASES}


def assert_batched_equals_unbatched(case, where):
    on, off = dict(case["True"]), dict(case["False"])
    assert on.pop("batched_calls") > 0, f"{where}: the batched path was not taken"
    assert off.pop("batched_calls") == 0, where
    assert on == off, where  # bitwise: iterations, residuals, every state


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_equals_unbatched_and_converges_to_sequential(name, serial):
    case = serial[name]
    assert_batched_equals_unbatched(case, name)
    got = case["True"]
    assert got["iterations"] > 2 and got["levels"] >= 2
    # MGRIT converged (|r| < 1e-8 in the discrete L2 norm) to sequential implicit Euler.
    U_seq = ex02.sequential_solution(ex02.Heat1D(NSPACE), got["times"])
    assert np.max(np.abs(np.array(got["solution"]) - U_seq)) < 1e-8
    if name == "graded":  # several step sizes per level: more factors than levels
        assert got["factorizations"] > got["levels"]


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_batched_equals_unbatched_under_mpi(nranks, serial, tmp_path):
    from mpi_launch import launch

    par = launch(Path(__file__).name, nranks, tmp_path)
    # The copies under mpiexec formed one world of nranks (and expect_world and
    # assert_split passed in the driver: each rank held its own part of the time grid).
    assert par["size"] == nranks and par["ranks"] == list(range(nranks))
    for name in CASES:
        where = f"{name} with {nranks} ranks"
        assert_batched_equals_unbatched(par[name], where)
        got, ser = par[name]["True"], serial[name]["True"]
        # Rank-count independent: iterations, and every value bitwise; the residual
        # norms are summed per rank first, so they agree to rounding.
        assert got["iterations"] == ser["iterations"], where
        assert got["residual_iterations"] == ser["residual_iterations"], where
        np.testing.assert_allclose(got["residuals"], ser["residuals"], rtol=1e-12, atol=0,
                                   err_msg=where)
        assert got["solution"] == ser["solution"] and got["final"] == ser["final"], where


def test_example_command_line_batched_and_not():
    """``--batched`` (the default) and ``--no-batched`` print the same run, and say which."""
    from test_examples import check_ex02, history, run

    size = ["--nspace", "65", "--ntime", "128"]
    on, off, default = (run(1, "ex02_heat1d.py", size + flag)
                        for flag in (["--batched"], ["--no-batched"], []))
    assert "stepping: batched (step_stacked)" in on and "stepping: unbatched" in off
    assert history(on) == history(off) and int(history(on)[0]) > 2
    errors = [[line for line in out.splitlines() if "max |MGRIT" in line] for out in (on, off)]
    assert errors[0] == errors[1] and len(errors[0]) == 3
    assert "stepping: batched" in default
    check_ex02(on)


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2])
