"""Runs the Kuramoto-Sivashinsky cases of tests/data/xbraid_ks.json that XBraid ran on P
processes, on P ranks, and writes their results (rank 0) as JSON:

    mpiexec -n P python tests/mpi_ks_driver.py P OUT.json

The first argument is the rank count: the driver fails unless MPI really joined that
many ranks (see mpi_world.py).
"""

import json
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def main():
    nranks, path = sys.argv[1], sys.argv[2]
    try:
        from ks_cases import run_at
        from mpi_world import expect_world

        expect_world(COMM, nranks)
        result = run_at(int(nranks), COMM)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        Path(path).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
