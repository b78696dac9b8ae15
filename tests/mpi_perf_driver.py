"""Step counts of every rank for the cases of perf_cases.py (rank 0 writes JSON)."""

import json
import sys


def main(nranks, path):
    from mpi4py import MPI

    from mpi_world import expect_world
    from perf_cases import CASES, run_counts

    comm = MPI.COMM_WORLD
    expect_world(comm, nranks)
    out = {}
    for name, fields, iterations in CASES:
        for final_sweep in (True, False):  # False: a line-search trial's solve
            counts, owned, calls = run_counts(fields, iterations, comm, final_sweep)
            key = name if final_sweep else name + ":trial"
            out[key] = comm.gather({"counts": counts, "owned": owned, "calls": calls},
                                   root=0)
    if comm.Get_rank() == 0:
        with open(path, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
