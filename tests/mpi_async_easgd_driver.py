"""Asynchronous EASGD under mpiexec (see test_easgd.py).

    mpiexec -n P python tests/mpi_async_easgd_driver.py P OUT.json

Rank 0 is the centre; every other rank minimises 0.5 * |W - c_rank|^2. Case "train":
every worker trains to the end. Case "failure": the last worker raises after a few
steps. Case "centre failure": the centre raises while serving its 5th update. Case
"centre ctrl-c": the centre gets SIGINT there, inside braidpy's deferral (as under the
CLI), and must act on it at once. Rank 0 writes each rank's outcome and numbers as JSON.
"""

import json
import os
import signal
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from easgd_cases import target  # noqa: E402
from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

from braidpy.parallel.interrupts import deferred_interrupts  # noqa: E402
from braidpy.train.easgd import AsyncEASGD  # noqa: E402

COMM = MPI.COMM_WORLD
STEPS = 600


class Boom(RuntimeError):
    pass


class FailingLog(list):
    """The centre's record of served workers, raising at its n-th entry: a failure
    inside the centre's loop, right after it has replied to a worker."""

    def __init__(self, n, interrupt=False):
        super().__init__()
        self.n, self.interrupt = n, interrupt

    def append(self, item):
        if len(self) + 1 == self.n:
            if self.interrupt:  # Ctrl-C: deferred, then taken at the centre's next poll
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise Boom("centre failed on purpose")
        super().append(item)


def run(fail_at=None, centre_fails_at=None, interrupt=False):
    opt = AsyncEASGD(COMM, lr=0.1, rho=0.5, tau=1, momentum=0.0)  # plain: the reference
    if centre_fails_at is not None and opt.is_centre:
        opt.served = FailingLog(centre_fails_at, interrupt)
    out = {"rank": COMM.rank}
    try:
        if opt.is_centre:
            with deferred_interrupts():
                out["center"] = opt.serve(np.zeros(3)).tolist()
            out["served"] = list(opt.served)
        else:
            w = np.zeros(3)
            with opt.session():
                for step in range(STEPS):
                    if fail_at is not None and COMM.rank == COMM.size - 1 and step == fail_at:
                        raise Boom("worker failed on purpose")
                    opt.step(w, 0.0, w - target(COMM.rank))
            out["w"] = w.tolist()
        out["outcome"] = ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - reported (KeyboardInterrupt too)
        out["outcome"] = [type(exc).__name__, str(exc)]
    out["exchanges"] = opt.exchanges
    opt.close()
    return out


def main():
    expect_world(COMM, sys.argv[1])
    out = {"train": COMM.gather(run()), "failure": COMM.gather(run(fail_at=20)),
           "centre failure": COMM.gather(run(centre_fails_at=5)),
           "centre ctrl-c": COMM.gather(run(centre_fails_at=5, interrupt=True))}
    if COMM.rank == 0:
        Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
