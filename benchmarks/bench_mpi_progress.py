"""Does a message arrive while its sender computes outside MPI?

Under ``mpiexec -n 2``: rank 0 posts K Isends of n bytes, computes 50 ms without entering
MPI, then waits; rank 1 receives them as braidpy's time communicator does (matched probe,
then receive) and prints when the last arrived (median of 5). An arrival after the 50 ms
means the protocol needs the sender's progress; braidpy's 64 KB states are the case.

    mpiexec -n 2 python benchmarks/bench_mpi_progress.py [K ...]
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("counts", type=int, nargs="*", default=[1, 8, 40], metavar="K",
               help="messages in flight at once (default 1 8 40)")
comm = MPI.COMM_WORLD
for k in p.parse_args().counts:
    for n in (512, 8000, 16384, 64000, 256000):
        arrived = []
        for _ in range(5):
            bufs = [np.zeros(max(n // 8, 1)) for _ in range(k)]
            comm.Barrier()
            t0 = time.perf_counter()
            if comm.rank == 0:
                reqs = [comm.Isend(b, dest=1, tag=3) for b in bufs]
                while time.perf_counter() - t0 < 0.05:  # compute, no MPI call
                    pass
                MPI.Request.Waitall(reqs)
            elif comm.rank == 1:
                for _ in range(k):
                    comm.Mprobe(0, MPI.ANY_TAG).Recv(np.empty(max(n // 8, 1)))
                arrived.append(time.perf_counter() - t0)
        if comm.rank == 1:
            print(f"{k:3d} x {n:7d} B: last arrived after {np.median(arrived) * 1e3:6.2f} ms "
                  f"(the sender computes 50 ms)", flush=True)
