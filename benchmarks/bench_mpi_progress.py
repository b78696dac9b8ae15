"""Does a message arrive while its sender computes outside MPI?

Under ``mpiexec -n 2``: rank 0 posts K Isends of n bytes, then computes for 50 ms
without entering MPI, then waits; rank 1 receives them as braidpy's time communicator
does (matched probe, then receive) and prints when the last arrived. If a protocol
needed the sender's progress (MPICH rendezvous, pipelined cells), the arrival would
come after the 50 ms; braidpy's 64 KB states (1000 samples of width 8) are the case
in question.

    mpiexec -n 2 python benchmarks/bench_mpi_progress.py [K ...]
"""

import sys
import time

import numpy as np
from mpi4py import MPI


def main(counts):
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for k in counts:
        for n in (512, 8000, 16384, 64000, 256000):
            arrived = []
            for _ in range(5):
                bufs = [np.zeros(max(n // 8, 1)) for _ in range(k)]
                comm.Barrier()
                t0 = time.perf_counter()
                if rank == 0:
                    reqs = [comm.Isend(b, dest=1, tag=3) for b in bufs]
                    while time.perf_counter() - t0 < 0.05:  # compute, no MPI call
                        pass
                    MPI.Request.Waitall(reqs)
                elif rank == 1:
                    for _ in range(k):
                        msg = comm.Mprobe(0, MPI.ANY_TAG)
                        msg.Recv(np.empty(max(n // 8, 1)))
                    arrived.append(time.perf_counter() - t0)
            if rank == 1:
                print(f"{k:3d} x {n:7d} B: last arrived after {np.median(arrived) * 1e3:6.2f} ms "
                      f"(the sender computes 50 ms)", flush=True)


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [1, 8, 40])
