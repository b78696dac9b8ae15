"""Runs tests/torch_cases.py under mpiexec and writes one JSON file (rank 0) holding
every rank's results.

    mpiexec -n 4 python tests/mpi_torch_driver.py OUT.json 4

The last argument repeats the rank count: the driver fails unless MPI really joined
that many ranks (see mpi_world.py). Every case runs on the whole world (4 ranks) and
then on each half of it (two independent 2-rank communicators), so one launch covers
both rank counts (starting torch in four processes is most of a launch's time).
"""

import json
import os
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def main():
    try:
        from mpi_world import ENV, expect_world

        nranks = expect_world(COMM, sys.argv[2])
        from torch_cases import CASES

        mine = {str(nranks): {name: case(COMM) for name, case in CASES.items()}}
        if nranks % 2 == 0 and nranks > 2:
            half = COMM.Split(COMM.Get_rank() * 2 // nranks, COMM.Get_rank())
            os.environ[ENV] = str(nranks // 2)  # what assert_split expects of `half`
            try:
                mine[str(nranks // 2)] = {name: case(half) for name, case in CASES.items()}
            finally:
                os.environ[ENV] = str(nranks)
            half.Free()
        everyone = COMM.gather(json.dumps(mine), root=0)  # test harness only
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        Path(sys.argv[1]).write_text("[" + ",".join(everyone) + "]")


if __name__ == "__main__":
    main()
