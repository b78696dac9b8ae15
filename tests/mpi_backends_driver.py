"""Runs backend_cases.run_strict, run_strict_adjoint and run_strict_training under mpiexec and
writes their JSON (rank 0).

    mpiexec -n P python tests/mpi_backends_driver.py OUT.json P

P repeats the rank count: the driver fails unless MPI really joined that many
ranks (see mpi_world.py).
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
        from backend_cases import run_strict, run_strict_adjoint, run_strict_training

        result = {"solve": run_strict(COMM), "adjoint": run_strict_adjoint(COMM),
                  "training": run_strict_training(COMM), "size": COMM.size}
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.rank == 0:
        Path(sys.argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
