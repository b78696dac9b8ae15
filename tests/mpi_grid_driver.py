"""ProcessGrid under mpiexec (see test_grid.py).

    mpiexec -n P python tests/mpi_grid_driver.py P OUT.json

For every data x space x layers shape of P ranks: each rank's coordinates, the world
ranks of its three sub-communicators (gathered inside them), and a solve over its
layer communicator. Rank 0 writes the gathered records as JSON.
"""

import itertools
import json

import numpy as np
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from apps import Decay  # noqa: E402
from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

import braidpy  # noqa: E402
from braidpy.parallel import ProcessGrid  # noqa: E402
from braidpy.parallel.data import GradientAverager, shard_of  # noqa: E402

COMM = MPI.COMM_WORLD


def shapes(p):
    return [(d, s, p // (d * s)) for d, s in itertools.product(range(1, p + 1), repeat=2)
            if p % (d * s) == 0]


def record(shape, space_fastest=False):
    grid = ProcessGrid(COMM, *shape, space_fastest=space_fastest)
    members = {name: (sub.allgather(COMM.rank) if sub is not None else [COMM.rank])
               for name, sub in (("layers", grid.layers_comm), ("space", grid.space_comm),
                                 ("data", grid.data_comm))}
    result = braidpy.solve(Decay(), 0.0, 4.0, 64, comm=grid.layers_comm
                           if grid.layers > 1 else None, cfactor=2, abs_tol=1e-13)
    core = braidpy.Core(Decay(), 0.0, 4.0, 64, comm=grid.layers_comm
                        if grid.layers > 1 else None, cfactor=2)
    # A gradient of 100 entries, averaged over the data group in buckets of 16; the
    # pieces come last to first in sevens (buckets must still start in order).
    pattern = 1.0 + np.arange(100) % 5
    averager = GradientAverager(grid.data_comm, 100, bucket=16)
    for lo in reversed(range(0, 100, 7)):
        averager.add(lo, ((COMM.rank + 1) * pattern)[lo:lo + 7])
    average = averager.finish()
    out = {"rank": COMM.rank, "coords": list(grid.coords), "members": members,
           "average": average.tolist(), "pattern": pattern.tolist(),
           "shard": list(shard_of(10, grid.data, grid.coords[0])),
           "world_rank": grid.world_rank(*grid.coords), "final": result.final.tolist(),
           "owned": [core.owned.start, core.owned.stop], "describe": grid.describe()}
    grid.free()
    return out


def main():
    nranks, path = expect_world(COMM, sys.argv[1]), sys.argv[2]
    out = {"shapes": {}, "errors": []}
    for shape in shapes(nranks):
        out["shapes"]["x".join(map(str, shape))] = COMM.gather(record(shape))
    # XBraid's braid_SplitCommworld ordering (space fastest), every shape too.
    out["space_fastest"] = {}
    for shape in shapes(nranks):
        out["space_fastest"]["x".join(map(str, shape))] = COMM.gather(record(shape, True))
    # XBraid's own split, as braid.c computes it: comm_x = same rank // px, comm_t =
    # same rank % px, keys = world rank; members in world-rank order.
    out["xbraid_split"] = {}
    for px in [p for p in range(1, nranks + 1) if nranks % p == 0]:
        cx = COMM.Split(COMM.rank // px, COMM.rank)
        ct = COMM.Split(COMM.rank % px, COMM.rank)
        out["xbraid_split"][str(px)] = COMM.gather({"x": cx.allgather(COMM.rank),
                                                    "t": ct.allgather(COMM.rank)})
        cx.Free()
        ct.Free()
    for bad in [(nranks + 1, 1, 1), (1, 1, nranks * 2), (0, 1, 1), (True, 1, 1)]:
        try:
            ProcessGrid(COMM, *bad)
            out["errors"].append("accepted")
        except ValueError as exc:
            out["errors"].append(str(exc))
    # Arguments that differ on one rank: every rank raises before the Splits.
    last = nranks - 1
    out["divergent"] = {}
    for case, args in {
            "bad on the last rank": ((0, 1, nranks) if COMM.rank == last else (1, 1, nranks), {}),
            "shape differs on rank 0": ((nranks, 1, 1) if COMM.rank == 0 else (1, 1, nranks), {}),
            "order differs on rank 0": ((1, 1, nranks), {"space_fastest": COMM.rank == 0}),
    }.items():
        try:
            ProcessGrid(COMM, *args[0], **args[1]).free()
            got = ["accepted", ""]
        except Exception as exc:  # noqa: BLE001 - the test reads each rank's error
            got = [type(exc).__name__, str(exc)]
        out["divergent"][case] = COMM.gather(got)
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
