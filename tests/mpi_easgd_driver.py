"""Synchronous EASGD under mpiexec (see test_easgd.py).

    mpiexec -n P python tests/mpi_easgd_driver.py P OUT.json

Rank i minimises 0.5 * |W - c_i|^2 (c_i differs per rank) with SyncEASGD over
COMM_WORLD as the data communicator; rank 0 writes every rank's final W_i and centre.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

from easgd_cases import CASES, target  # noqa: E402

from braidpy.train.easgd import SyncEASGD  # noqa: E402

COMM = MPI.COMM_WORLD


def run(tau, momentum, steps):
    opt = SyncEASGD(COMM, lr=0.1, rho=0.5, tau=tau, momentum=momentum)
    w = np.zeros(3)
    for _ in range(steps):
        opt.step(w, 0.0, w - target(COMM.rank))
    return {"w": w.tolist(), "center": opt.center.tolist()}


def main():
    expect_world(COMM, sys.argv[1])
    path = sys.argv[2]
    out = {name: COMM.gather(run(**case)) for name, case in CASES.items()}
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
