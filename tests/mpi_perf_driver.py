"""Step counts of every rank for the cases of perf_cases.py (rank 0 writes JSON)."""

import json
import sys

from mpi4py import MPI

from mpi_world import expect_world
from perf_cases import CASES, run_counts

comm = MPI.COMM_WORLD
expect_world(comm, sys.argv[1])
out = {}
for name, fields, iterations in CASES:
    counts, owned = run_counts(fields, iterations, comm)
    rows = comm.gather({"counts": counts, "owned": owned}, root=0)
    out[name] = rows
if comm.Get_rank() == 0:
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
