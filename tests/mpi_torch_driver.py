"""Runs tests/torch_cases.py under mpiexec and writes one JSON file (rank 0) holding
every rank's results.

    mpiexec -n P python tests/mpi_torch_driver.py OUT.json P

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
        from torch_cases import CASES

        mine = {name: case(COMM) for name, case in CASES.items()}
        everyone = COMM.gather(json.dumps(mine), root=0)  # test harness only
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        Path(sys.argv[1]).write_text("[" + ",".join(everyone) + "]")


if __name__ == "__main__":
    main()
