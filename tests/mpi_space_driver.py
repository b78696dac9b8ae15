"""Spatially split training under mpiexec (see test_space_training.py, space_cases.py).

    mpiexec -n P python tests/mpi_space_driver.py P OUT.json SAVE_PREFIX
    mpiexec -n 2 python tests/mpi_space_driver.py 2 OUT.json --channel

For every grid D x S x L of P ranks with S > 1 and S <= 4, each case of
space_cases.py; rank 0 writes {shape: {case: [record of world rank r, ...]}} as JSON.
With --channel (test_spatial.py), only space_cases.channel_case, on the world:
{"world": ..., "channel": [record of rank r, ...]}.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

import space_cases as sc  # noqa: E402
from braidpy.parallel import ProcessGrid  # noqa: E402

COMM = MPI.COMM_WORLD
GRIDS = {2: [(1, 2, 1)], 4: [(1, 2, 2), (2, 2, 1), (1, 4, 1)]}


def trace(*words):
    if os.environ.get("BRAIDPY_TRACE"):
        print(COMM.rank, f"{time.perf_counter():.2f}", *words, file=sys.stderr, flush=True)


def main():
    nranks = expect_world(COMM, sys.argv[1])
    path, prefix = sys.argv[2], sys.argv[3]
    result = {"world": [COMM.gather(COMM.Get_size()), COMM.gather(COMM.Get_rank())]}
    if prefix == "--channel":
        result["channel"] = COMM.gather(sc.channel_case(COMM))
        if COMM.rank == 0:
            Path(path).write_text(json.dumps(result))
        return
    for shape in GRIDS[nranks]:
        name = "x".join(map(str, shape))
        grid = ProcessGrid(COMM, *shape)
        cases = {}
        trace(name, "gradient")
        cases["gradient"] = sc.gradient_case(grid)
        trace(name, "train")
        cases["train"] = sc.training_case(grid)
        cases["save"] = sc.training_case(grid, checkpoint=f"{prefix}{name}.ckpt",
                                         iterations=2)
        for where in ("forward", "gradient_batched"):
            trace(name, where)
            cases[f"error/{where}"] = sc.error_case(grid, where, grid.size - 1)
        cases["after_errors"] = sc.gradient_case(grid)
        result[name] = {case: COMM.gather(value) for case, value in cases.items()}
        grid.free()
    # A dense network cannot split rows: every rank refuses the same way.
    grid = ProcessGrid(COMM, 1, nranks, 1)
    from hybrid_cases import dense
    from braidpy.train import Trainer
    net, X, C = dense(8)
    try:
        Trainer(net, (X, C), grid=grid)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    result["dense_refused"] = COMM.gather(refused)
    grid.free()
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
