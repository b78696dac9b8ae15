"""Delta correction and Lyapunov estimates (Options.delta_rank, App.init_basis/inner_prod):
XBraid's ex-07 (Lorenz) reproduced at 1, 2 and 4 ranks against its saved output, the
contract's errors, the finite-difference Jacobian-vector product.

Under pytest this file holds the tests. Run as a script it is their MPI driver
(mpi_launch.launch starts it)::

    mpiexec -n P python tests/test_delta.py P OUT.json

It runs every ex-07 case on P ranks and rank 0 writes what each printed as JSON.
"""

import json
import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import braidpy  # noqa: E402
import delta_cases as dc  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
SAVED = json.loads((DATA / "xbraid_ex07_delta.json").read_text())
COMMANDS = sorted({c["command"] for c in SAVED["cases"]}, key=lambda c: (len(c), c))


def saved(command, nranks):
    (case,) = [c for c in SAVED["cases"] if c["command"] == command and c["ranks"] == nranks]
    return case


def printed(r, app):
    """What ex-07 prints or writes, formatted as XBraid formats it."""
    exps = r.lyapunov_exponents
    return dict(
        residuals=[f"{x:.6e}" for x in r.residuals], iterations=r.iterations, levels=r.levels,
        exponents=None if exps is None else [f"{x:f}" for x in exps],
        final=[f"{x:.6e}" for x in r.final],
        vectors=None if app.final_basis is None else
        [[f"{x:.6e}" for x in b] for b in app.final_basis])


def expected(case):
    rank = int(case["command"].split("-rank ")[1].split()[0]) if "-rank" in case["command"] \
        else 3
    exps = case["lyapunov_exponents"]
    if exps is not None and "-noLyap" in case["command"]:
        exps = None  # ex-07 prints zeros where it estimated nothing; braidpy answers None
    return dict(
        residuals=[line.split("= ")[1].split(",")[0] for line in case["residuals_printed"]],
        iterations=case["iterations"], levels=case["levels"], exponents=exps,
        final=[f"{float(x):.6e}" for x in case["final"]],
        vectors=[[f"{float(x):.6e}" for x in b] for b in case["final_lyapunov_vectors"]]
        if rank > 0 else [])


def run_printed(command, comm=None):
    r, app = dc.run(command.split()[1:], comm=comm)
    out = printed(r, app)
    if comm is not None:  # the final basis is seen by the rank that owns the last point
        from mpi_world import assert_split

        assert_split(comm, r.owned, len(r.times))
        seen = comm.allgather(out["vectors"])
        out["vectors"] = [v for v in seen if v is not None][0]
    return out


@pytest.mark.parametrize("command", COMMANDS)
def test_ex07_matches_xbraid(command):
    """Every residual to 7 digits, the iteration and level counts, the final state and
    Lyapunov vectors to 7 digits and the exponents to 6 decimals, as XBraid's ex-07."""
    assert run_printed(command) == expected(saved(command, 1))


def drive(nranks, path):
    from mpi4py import MPI
    from mpi_world import expect_world

    comm = MPI.COMM_WORLD
    expect_world(comm, nranks)
    out = {"size": comm.Get_size(), "cases": {c: run_printed(c, comm) for c in COMMANDS}}

    class Failing(dc.Ex07):  # init_basis raises on the last rank only
        def init_basis(self, t, index):
            if comm.Get_rank() == comm.Get_size() - 1 and index == 2:
                raise KeyError("init_basis failed on the last rank")
            return super().init_basis(t, index)

    try:
        dc.run(["-ml", "2"], comm=comm, app=Failing())
        error = None
    except Exception as e:  # noqa: BLE001 - what each rank raised, compared by the test
        error = [type(e).__name__, str(e)]
    out["errors"] = comm.gather(error, root=0)
    if comm.Get_rank() == 0:
        Path(path).write_text(json.dumps(out))


@pytest.mark.parametrize("nranks", [2, 4])
def test_ex07_under_mpi_matches_xbraid(nranks, tmp_path):
    from mpi_launch import launch

    par = launch(Path(__file__).name, nranks, tmp_path, timeout=600)
    assert par["size"] == nranks
    for command in COMMANDS:
        assert par["cases"][command] == expected(saved(command, nranks)), command
    # a failing init_basis stops every rank: the original exception where it was raised,
    # a BraidError naming it on the others
    last = nranks - 1
    assert par["errors"][last] == ["KeyError", "'init_basis failed on the last rank'"]
    assert par["errors"][:last] == [[
        "BraidError", f"solve failed on another rank (rank {last}: init_basis raised "
                      f"KeyError: 'init_basis failed on the last rank')"]] * last


def test_delta_halves_the_iterations_on_lorenz():
    """ex-07 (2 levels): 20 iterations of plain FAS, 9 with rank-3 Delta correction."""
    plain, _ = dc.run(["-rank", "0", "-ml", "2"])
    delta, _ = dc.run(["-rank", "3", "-ml", "2"])
    assert (plain.iterations, delta.iterations) == (20, 9)


# --- the contract ----------------------------------------------------------------------------

def test_a_step_may_replace_its_basis_vectors():
    """status.set_basis (new objects) gives what in-place updates give."""

    class Replacing(dc.Ex07):
        def step(self, u, t0, t1, status):
            olds = [b.copy() for b in status.basis]
            for k, b in enumerate(status.basis):
                status.set_basis(k, b.copy())
            super().step(u, t0, t1, status)
            for k, (b, old) in enumerate(zip(status.basis, olds)):
                new = b.copy()
                b[...] = old  # the replaced object is no longer the basis
                status.set_basis(k, new)

    a, _ = dc.run(["-ml", "2"])
    b, _ = dc.run(["-ml", "2"], app=Replacing())
    assert b.residuals == a.residuals
    np.testing.assert_array_equal(b.lyapunov_exponents, a.lyapunov_exponents)


def test_batched_apps_step_one_state_at_a_time():
    class Stacked(dc.Ex07):
        def step_stacked(self, U, t0s, t1s, status):
            raise AssertionError("Delta correction steps each state with its basis")

    a, _ = dc.run(["-ml", "2"])
    b, _ = dc.run(["-ml", "2"], app=Stacked())
    assert b.residuals == a.residuals


def test_warm_restart_and_counts():
    o, ntime, tstop = dc.options(["-ml", "2"])
    core = braidpy.Core(dc.Ex07(), 0.0, tstop, ntime, **o)
    first = core.solve()
    assert first.counts["init_basis"] == 3 * first.counts["init"] > 0
    assert first.counts["inner_prod"] > 0
    again = core.solve()
    assert again.iterations <= 2 and again.residuals[-1] < 1e-6
    np.testing.assert_allclose(again.final, first.final, rtol=1e-8)  # within tol
    plain = braidpy.Core(dc.Ex07(), 0.0, tstop, ntime, **dict(o, delta_rank=0,
                                                              lyapunov_estimate=False,
                                                              lyapunov_exponents=False))
    counts = plain.solve().counts
    assert "init_basis" not in counts and "inner_prod" not in counts


def test_missing_callbacks_and_unsupported_combinations():
    class NoBasis(braidpy.App):
        def init(self, t):
            return np.zeros(3)

        def step(self, u, t0, t1, status):
            pass

    with pytest.raises(TypeError, match=r"delta_rank=2 needs NoBasis.init_basis"):
        braidpy.Core(NoBasis(), 0.0, 1.0, 8, delta_rank=2)

    class WithResidual(dc.Ex07):
        def step(self, u, t0, t1, status, fstop=None):
            super().step(u, t0, t1, status)

        def residual(self, ustop, r, status):
            pass

    with pytest.raises(ValueError, match="delta_rank=3 does not support a user residual"):
        braidpy.Core(WithResidual(), 0.0, 1.0, 8, delta_rank=3, batch=False)
    with pytest.raises(ValueError, match="delta_rank=3 does not support periodic"):
        braidpy.Core(dc.Ex07(), 0.0, 1.0, 8, delta_rank=3, periodic=True, max_levels=2)
    from braidpy.adjoint.solver import solve_options  # GradientSolver's options check

    for primal, adjoint in ((dict(delta_rank=3), None), (None, dict(delta_rank=1))):
        with pytest.raises(ValueError, match=r"not supported by the adjoint"):
            solve_options(primal, adjoint, None)
    with pytest.raises(ValueError, match=r"lyapunov_exponents=True needs Delta correction"):
        braidpy.Options(lyapunov_exponents=True)
    with pytest.raises(ValueError, match=r"delta_defer_level=1 needs Delta correction"):
        braidpy.Options(delta_defer_level=1)
    with pytest.raises(ValueError, match=r"delta_rank must be"):
        braidpy.Options(delta_rank=-1)
    with pytest.raises(ValueError, match="full_rnorm"):
        braidpy.Options(delta_rank=1, full_rnorm=True)


@pytest.mark.parametrize("where", ["init_basis", "inner_prod", "step"])
def test_a_failing_callback_surfaces(where):
    class Failing(dc.Ex07):
        def init_basis(self, t, index):
            if where == "init_basis" and t > 1.0:
                raise KeyError("init_basis failed")
            return super().init_basis(t, index)

        def inner_prod(self, u, v):
            if where == "inner_prod" and self.calls > 500:
                raise KeyError("inner_prod failed")
            self.calls += 1
            return super().inner_prod(u, v)

        def step(self, u, t0, t1, status):
            if where == "step" and status.basis and status.level == 1:
                raise KeyError("step failed")
            return super().step(u, t0, t1, status)

    app = Failing()
    app.calls = 0
    with pytest.raises(KeyError, match=f"{where} failed"):
        dc.run(["-ml", "2"], app=app)


def test_dependent_basis_vectors_raise():
    class Dependent(dc.Ex07):
        def init_basis(self, t, index):
            return np.ones(3)

    with pytest.raises(ValueError, match="linearly dependent"):
        dc.run(["-ml", "2"], app=Dependent())


class Rotation(braidpy.App):
    """u' = A u by forward Euler in any array namespace; steps return new arrays and
    replace their basis vectors (status.set_basis)."""

    A = [[-0.2, 3.0], [-3.0, 0.1]]

    def __init__(self, xp):
        self.xp = self.array_namespace = xp

    def init(self, t):
        return self.xp.asarray([1.0, 0.5], dtype=self.xp.float64)

    def init_basis(self, t, index):
        return self.xp.asarray([1.0, 0.25] if index == 0 else [0.0, 1.0],
                               dtype=self.xp.float64)

    def inner_prod(self, u, v):
        return float(self.xp.sum(u * v))

    def step(self, u, t0, t1, status):
        xp, h = self.xp, t1 - t0
        (a, b), (c, d) = self.A
        M = xp.asarray([[1.0 + h * a, h * b], [h * c, 1.0 + h * d]], dtype=xp.float64)
        for k, psi in enumerate(status.basis):
            status.set_basis(k, M @ psi)
        return M @ u


def test_array_api_states():
    """Delta correction with array_api_strict states runs as with NumPy ones."""
    xp = pytest.importorskip("array_api_strict")
    o = dict(max_levels=3, cfactor=4, nrelax=0, abs_tol=1e-10, skip=False, delta_rank=2,
             lyapunov_estimate=True, lyapunov_exponents=True)
    a = braidpy.solve(Rotation(np), 0.0, 2.0, 256, **o)
    b = braidpy.solve(Rotation(xp), 0.0, 2.0, 256, **o)
    assert a.iterations == b.iterations and a.converged
    assert b.residuals == pytest.approx(a.residuals, rel=1e-10)
    np.testing.assert_allclose(b.lyapunov_exponents, a.lyapunov_exponents, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(b.final), a.final, rtol=1e-12)
    # Euler's growth factor |det(I + hA)| per unit time: the two exponents' sum
    h = 2.0 / 256
    det = (1 + h * Rotation.A[0][0]) * (1 + h * Rotation.A[1][1]) - h * h * Rotation.A[0][1] \
        * Rotation.A[1][0]
    assert sum(a.lyapunov_exponents) == pytest.approx(math.log(abs(det)) / h, rel=1e-6)


# --- the finite-difference Jacobian-vector product --------------------------------------------

def test_finite_difference_jvp_is_accurate_to_its_stated_digits():
    rng = np.random.default_rng(20231207)
    u = np.array(dc.U0)
    h = 0.005

    def phi(x):
        return x + h * np.array(dc.lorenz(x))

    F = np.array(dc.euler_matrix(list(u), h))
    for _ in range(5):
        v = rng.standard_normal(3)
        exact = F @ v
        got = braidpy.finite_difference_jvp(phi, u, v)
        assert np.linalg.norm(got - exact) <= 1e-6 * np.linalg.norm(exact)
    assert np.all(braidpy.finite_difference_jvp(phi, u, np.zeros(3)) == 0.0)


def test_delta_with_a_finite_difference_jacobian_converges_like_the_exact_one():
    class FD(dc.Ex07):
        def step(self, u, t0, t1, status):
            h = t1 - t0

            def phi(x):
                return x + h * np.array(dc.lorenz(x))

            for k, b in enumerate(status.basis):
                status.set_basis(k, braidpy.finite_difference_jvp(phi, u, b))
            u[...] = phi(u.copy())

    exact, _ = dc.run(["-ml", "2"])
    fd, _ = dc.run(["-ml", "2"], app=FD())
    assert fd.iterations == exact.iterations
    np.testing.assert_allclose(fd.lyapunov_exponents, exact.lyapunov_exponents, atol=1e-5)
    assert math.isclose(float(fd.final[0]), float(exact.final[0]), rel_tol=1e-6)


if __name__ == "__main__":
    drive(int(sys.argv[1]), sys.argv[2])
