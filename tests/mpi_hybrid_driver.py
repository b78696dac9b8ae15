"""Data x layers training under mpiexec (see test_hybrid.py and hybrid_cases.py).

    mpiexec -n P python tests/mpi_hybrid_driver.py P OUT.json CHECKPOINT SAVE_PREFIX

For every grid D x 1 x L of P ranks, each case of hybrid_cases.py; rank 0 writes
{shape: {case: [record of world rank r, ...]}} as JSON. CHECKPOINT is a checkpoint
written serially that every grid resumes; SAVE_PREFIX + shape is where each grid
saves one.
"""

import json
import time
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

import hybrid_cases as hc  # noqa: E402
from braidpy.parallel import ProcessGrid  # noqa: E402

COMM = MPI.COMM_WORLD


def trace(*words):
    if os.environ.get("BRAIDPY_TRACE"):
        print(COMM.rank, f"{time.perf_counter():.2f}", *words, file=sys.stderr, flush=True)


def run_cases(grid, checkpoint, save):
    out = {}
    for name in hc.PROBLEMS:
        trace(grid.shape, name)
        out[f"gradient/{name}"] = hc.gradient_case(grid, name)
    out["gradient/dense_uneven/no_overlap"] = hc.gradient_case(grid, "dense_uneven",
                                                               overlap=False)
    for name in hc.TRAININGS:
        trace(grid.shape, name)
        out[f"train/{name}"] = hc.training_case(grid, name)
        out[f"train/{name}/again"] = hc.training_case(grid, name)
    trace(grid.shape, "resume")
    out["resume"] = hc.training_case(grid, "oneshot_adam", resume=checkpoint)
    out["save"] = hc.training_case(grid, "oneshot_adam", iterations=3, checkpoint=save)
    out["resume_own"] = hc.training_case(grid, "oneshot_adam", resume=save)
    victim = grid.size - 1  # the last rank of the last data group
    for where in ("on_step", "adjoint", "validation"):
        trace(grid.shape, where)
        out[f"error/{where}"] = hc.error_case(grid, where, victim)
    # Still in step: a plain gradient after the failures.
    out["after_errors"] = hc.gradient_case(grid, "dense_even")
    return out


def main():
    nranks = expect_world(COMM, sys.argv[1])
    path, checkpoint, prefix = sys.argv[2], sys.argv[3], sys.argv[4]
    result = {}
    for data in [d for d in range(1, nranks + 1) if nranks % d == 0]:
        shape = (data, 1, nranks // data)
        name = "x".join(map(str, shape))
        grid = ProcessGrid(COMM, *shape)
        cases = run_cases(grid, checkpoint, f"{prefix}{name}.ckpt")
        result[name] = {case: COMM.gather(value) for case, value in cases.items()}
        grid.free()
    if nranks > 1:  # the Trainer refuses a grid with space > 1 for a dense network
        from braidpy.train import Trainer

        grid = ProcessGrid(COMM, 1, nranks, 1)
        net, X, C = hc.dense(8)
        try:
            Trainer(net, (X, C), grid=grid)
        except ValueError as exc:
            result["space_refused"] = str(exc)
        grid.free()
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
