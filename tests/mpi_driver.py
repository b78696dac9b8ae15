"""Runs case tables under mpiexec and writes one JSON file (rank 0).

    mpiexec -n P python tests/mpi_driver.py histories OUT.json P
    mpiexec -n P python tests/mpi_driver.py errors OUT.json P
    mpiexec -n P python tests/mpi_driver.py batched OUT.json P
    mpiexec -n P python tests/mpi_driver.py parallel OUT.json P
    mpiexec -n P python tests/mpi_driver.py resources OUT.json P
    mpiexec -n P python tests/mpi_driver.py xbraid OUT.json P
    mpiexec -n P python tests/mpi_driver.py parity OUT.json P
    mpiexec -n P python tests/mpi_driver.py residual OUT.json P
    mpiexec -n P python tests/mpi_driver.py combos OUT.json P
    mpiexec -n P python tests/mpi_driver.py optimization OUT.json P
    mpiexec -n P python tests/mpi_driver.py output OUT.json P
    mpiexec -n P python tests/mpi_driver.py refine OUT.json P
    mpiexec -n P python tests/mpi_driver.py richardson OUT.json P
    mpiexec -n P python tests/mpi_driver.py debug OUT.json P
    mpiexec -n P python tests/mpi_driver.py ex02_refinet OUT.json P

The last argument repeats the rank count: the driver fails unless MPI really joined
that many ranks (see mpi_world.py).
"""

import json
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def run_histories():
    from mpi_cases import HISTORY_CASES

    return {name: case(COMM) for name, case in HISTORY_CASES.items()}


def run_parallel():
    from parallel_cases import PARALLEL_CASES

    return {name: case(COMM) for name, case in PARALLEL_CASES.items()}


def run_batched():
    from batched_cases import BATCHED_CASES

    return {name: case(COMM) for name, case in BATCHED_CASES.items()}


def run_xbraid(nranks):
    from xbraid_cases import run_at

    return run_at(nranks, COMM)


def run_parity(nranks):
    from xbraid_parity_cases import run_at

    return run_at(nranks, COMM)


def run_richardson(nranks):
    from richardson_cases import run_at

    return run_at(nranks, COMM)


def run_residual(nranks):
    from residual_cases import run_at

    return run_at(nranks, COMM)


def run_debug(nranks):
    from debug_level_cases import run_at

    return run_at(nranks, COMM)


def run_combos(nranks):
    from combo_cases import run_at

    return run_at(nranks, COMM)


def run_optimization(nranks):
    from optimization_cases import run_at

    return run_at(nranks, COMM)


def run_output(nranks):
    from xbraid_output_cases import run_at

    return run_at(nranks, COMM)


def run_refine(nranks):
    from refine_cases import run_at

    return run_at(nranks, COMM)


def run_ex02_refinet(nranks):
    from ex02_refinet_cases import run_at

    return run_at(nranks, COMM)


def run_errors():
    from mpi_error_cases import outcomes

    return outcomes(COMM)


def run_resources():
    """More Cores and GradientSolvers than MPICH has communicator contexts (2048)."""
    import braidpy
    from apps import Decay, DecayRate
    from braidpy.adjoint import GradientSolver

    for _ in range(2100):
        braidpy.Core(Decay(), 0.0, 1.0, 4, comm=COMM, cfactor=2)
    for _ in range(1100):
        GradientSolver(DecayRate(), 0.0, 1.0, 4, comm=COMM, primal=dict(cfactor=2))
    return {"created": True}


def main():
    suite, path, nranks = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        from mpi_world import expect_world

        expect_world(COMM, nranks)
        suites = {"histories": run_histories, "errors": run_errors, "resources": run_resources,
                  "batched": run_batched, "parallel": run_parallel,
                  "xbraid": lambda: run_xbraid(int(nranks)),
                  "parity": lambda: run_parity(int(nranks)),
                  "residual": lambda: run_residual(int(nranks)),
                  "combos": lambda: run_combos(int(nranks)),
                  "optimization": lambda: run_optimization(int(nranks)),
                  "output": lambda: run_output(int(nranks)),
                  "refine": lambda: run_refine(int(nranks)),
                  "richardson": lambda: run_richardson(int(nranks)),
                  "debug": lambda: run_debug(int(nranks)),
                  "ex02_refinet": lambda: run_ex02_refinet(int(nranks))}
        result = suites[suite]()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
