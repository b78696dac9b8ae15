"""Asynchronous EASGD under mpiexec (see test_easgd.py).

    mpiexec -n P python tests/mpi_async_easgd_driver.py P OUT.json

Rank 0 is the centre; every other rank minimises 0.5 * |W - c_rank|^2. Case "train":
every worker trains to the end. Case "failure": the last worker raises after a few
steps. Rank 0 writes each rank's outcome and numbers as JSON.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from easgd_cases import target  # noqa: E402
from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

from braidpy.train.easgd import AsyncEASGD  # noqa: E402

COMM = MPI.COMM_WORLD
STEPS = 600


class Boom(RuntimeError):
    pass


def run(fail_at=None):
    opt = AsyncEASGD(COMM, lr=0.1, rho=0.5, tau=1)
    out = {"rank": COMM.rank}
    try:
        if opt.is_centre:
            out["center"] = opt.serve(np.zeros(3)).tolist()
            out["served"] = opt.served
        else:
            w = np.zeros(3)
            with opt.session():
                for step in range(STEPS):
                    if fail_at is not None and COMM.rank == COMM.size - 1 and step == fail_at:
                        raise Boom("worker failed on purpose")
                    opt.step(w, 0.0, w - target(COMM.rank))
            out["w"] = w.tolist()
        out["outcome"] = ["ok", ""]
    except Exception as exc:  # noqa: BLE001 - reported
        out["outcome"] = [type(exc).__name__, str(exc)]
    out["exchanges"] = opt.exchanges
    opt.close()
    return out


def main():
    expect_world(COMM, sys.argv[1])
    out = {"train": COMM.gather(run()), "failure": COMM.gather(run(fail_at=20))}
    if COMM.rank == 0:
        Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
