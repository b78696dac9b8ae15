"""EASGD in training under mpiexec (see test_easgd_training.py).

    mpiexec -n P python tests/mpi_easgd_train_driver.py P OUT.json FOLDER

P = 2: synchronous EASGD on the grid 2x1x1 (serial mode), P = 4: on 2x1x2 (exact
MGRIT over two layer ranks): a run, the same run again, a run saved at step 2 and
resumed to the end, and a failure in one group's gradient. P = 3: asynchronous EASGD
on 3x1x1 (centre rank 2, workers 0 and 1), then a worker whose on_step fails. Rank 0
writes {case: [record of world rank r, ...]} as JSON.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

import easgd_training_cases as ec  # noqa: E402
from braidpy.parallel import ProcessGrid  # noqa: E402
from braidpy.train import TrainConfig  # noqa: E402

COMM = MPI.COMM_WORLD


def main():
    nranks = expect_world(COMM, sys.argv[1])
    path, folder = sys.argv[2], Path(sys.argv[3])
    out = {}
    if nranks in (2, 4):
        shape, mode = ((2, 1, 1), "serial") if nranks == 2 else ((2, 1, 2), "exact")
        grid = ProcessGrid(COMM, *shape)
        ckpt = str(folder / f"easgd-{nranks}.ckpt")
        out["run"] = ec.sync_case(grid, mode)
        out["again"] = ec.sync_case(grid, mode)
        out["saved"] = ec.sync_case(grid, mode, iterations=2, checkpoint=ckpt)
        out["resumed"] = ec.sync_case(grid, mode, resume=ckpt)
        out["divergent_resume"] = ec.divergent_resume_cases(grid, mode, ckpt, folder)
        out["failure"] = ec.failing_case(grid, "gradient", 1, ec.sync_config(mode))
    else:
        grid = ProcessGrid(COMM, 3, 1, 1)
        out["async"] = ec.async_case(grid)
        out["async_failure"] = ec.failing_case(grid, "on_step", 1, TrainConfig(**ec.ASYNC))
    out = {case: COMM.gather(value) for case, value in out.items()}
    grid.free()
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
