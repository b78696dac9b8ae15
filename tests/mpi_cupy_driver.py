"""Runs backend_cases.run_cupy under mpiexec with CuPy states and writes its JSON (rank 0).

    mpiexec -n P python tests/mpi_cupy_driver.py OUT.json P fake|real

P repeats the rank count (mpi_world.py). ``fake`` puts tests/fake_cupy.py in place of
CuPy (host tests); ``real`` imports CuPy (the GPU suite).
"""

import json
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def main():
    try:
        from mpi_world import expect_world

        expect_world(COMM, sys.argv[2])
        if sys.argv[3] == "fake":
            import fake_cupy

            fake_cupy.__name__ = "cupy"
            sys.modules["cupy"] = fake_cupy
        import cupy

        from backend_cases import run_cupy

        result = {"solve": run_cupy(COMM, cupy), "size": COMM.size}
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.rank == 0:
        Path(sys.argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
