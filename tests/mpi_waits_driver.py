"""Runs solves, gradients, trainings and the error cases under mpiexec with the wait of
``BRAIDPY_WAIT`` (see test_waits.py) and writes one JSON file (rank 0).

    BRAIDPY_WAIT=sleep mpiexec -n P python tests/mpi_waits_driver.py P OUT.json [quick]

The results are compared across wait modes: they must be bitwise the same. ``quick``:
the wait modes and a few solves only.
"""

import json
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD


def run(quick):
    from mpi_cases import HISTORY_CASES
    from mpi_error_cases import outcomes
    import hybrid_cases as hc
    from train_cases import CASES

    from braidpy.parallel import ProcessGrid
    from braidpy.parallel.collectives import gather_arrays, ordered_sum
    from braidpy.parallel.comm import sleeps_in_collectives, wait_mode

    out = {"modes": COMM.allgather(wait_mode()),
           "collectives_sleep": COMM.allgather(sleeps_in_collectives(COMM))}
    names = ["decay_cf2", "gradient_decay"] if quick else list(HISTORY_CASES)
    out["histories"] = {name: HISTORY_CASES[name](COMM) for name in names}
    if quick:
        return out
    out["training"] = {name: case(COMM) for name, case in CASES.items()}
    # Data x layers: the gradient exchange of the data groups (GradientAverager).
    grid = ProcessGrid(COMM, data=2)
    out["hybrid"] = {"gradient": COMM.allgather(hc.gradient_case(grid, "dense_uneven")),
                     "train": COMM.allgather(hc.training_case(grid, "oneshot_adam"))}
    grid.free()
    # Point-to-point helpers (Probe/Send): a rank-ordered sum and a gather.
    rank = COMM.Get_rank()
    summed = ordered_sum([[rank + 0.1, 1.0 / (rank + 3)]], COMM)
    gathered = gather_arrays(COMM, {rank: [float(rank)] * 3})
    out["p2p"] = {"sum": summed.tolist(), "gathered": None if gathered is None else
                  {str(k): v.tolist() for k, v in sorted(gathered.items())}}
    out["errors"] = outcomes(COMM)
    return out


def main():
    try:
        from mpi_world import expect_world

        expect_world(COMM, sys.argv[1])
        result = run(sys.argv[3:] == ["quick"])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
