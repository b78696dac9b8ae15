"""Which collective should data-parallel gradients use: MPI_Allreduce, or the ring allreduce
of Gibiansky ("Bringing HPC techniques to deep learning", 2017), with its model
T = 2(P-1)/P K/B + 2(P-1) alpha?

Buffers of 1 KB ... 64 MB (float32 SUM): alpha and B from ping-pong between ranks 0 and 1;
MPI's Allreduce; a ring (reduce-scatter, allgather with Sendrecv); the model. Min over
repeats of the slowest rank's time; every sum checked.

    mpiexec -n P python benchmarks/bench_allreduce.py [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _harness import print_table
from _sidecar import slowest
from mpi4py import MPI

SIZES_KB = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536]


def ping_pong(comm, nbytes, repeats):
    """One-way time between ranks 0 and 1 (half the round trip), min over repeats."""
    buf, rank, best = np.zeros(max(1, nbytes), dtype=np.uint8), comm.Get_rank(), np.inf
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        if rank == 0:
            comm.Send(buf, 1, 7)
            comm.Recv(buf, 1, 7)
        elif rank == 1:
            comm.Recv(buf, 0, 7)
            comm.Send(buf, 0, 7)
        best = min(best, (time.perf_counter() - start) / 2)
    return comm.bcast(best, root=0)


def ring_allreduce(comm, send, recv):
    """recv <- sum over ranks of send: reduce-scatter then allgather around the ring."""
    p, r = comm.Get_size(), comm.Get_rank()
    recv[...] = send
    bounds = [(c[0], c[-1] + 1) if c.size else (0, 0)
              for c in np.array_split(np.arange(recv.size), p)]
    right, left = (r + 1) % p, (r - 1) % p
    scratch = np.empty(max(hi - lo for lo, hi in bounds), dtype=recv.dtype)
    for step in range(p - 1):  # reduce-scatter: chunk (r - step - 1) ends summed on r
        (lo_s, hi_s), (lo_r, hi_r) = bounds[(r - step) % p], bounds[(r - step - 1) % p]
        comm.Sendrecv(recv[lo_s:hi_s], right, 11, scratch[:hi_r - lo_r], left, 11)
        recv[lo_r:hi_r] += scratch[:hi_r - lo_r]
    for step in range(p - 1):  # allgather: pass the summed chunks around
        (lo_s, hi_s), (lo_r, hi_r) = bounds[(r - step + 1) % p], bounds[(r - step) % p]
        comm.Sendrecv(recv[lo_s:hi_s], right, 12, recv[lo_r:hi_r], left, 12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="sizes up to 1 MB, 2 repeats")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p, rank = comm.Get_size(), comm.Get_rank()
    if p < 2:
        sys.exit("run under mpiexec -n 2 (or more): an allreduce of one rank moves nothing")
    sizes = [k for k in SIZES_KB if not args.quick or k <= 1024]
    repeats = 2 if args.quick else args.repeats
    ts = [ping_pong(comm, k * 1024, repeats) for k in sizes]
    bandwidth = 1024 * (sizes[-1] - sizes[-2]) / max(ts[-1] - ts[-2], 1e-12)
    alpha = max(ts[0] - 1024 * sizes[0] / bandwidth, 0.0)
    rows = []
    for kb in sizes:
        pattern = (1 + np.arange(kb * 256) % 7).astype(np.float32)  # a misplaced chunk shows
        send, recv = (rank + 1) * pattern, np.empty_like(pattern)
        expected = p * (p + 1) / 2 * pattern
        t = {}
        for name, fn in (("MPI", lambda: comm.Allreduce(send, recv, op=MPI.SUM)),
                         ("ring", lambda: ring_allreduce(comm, send, recv))):
            t[name] = min(slowest(comm, fn)[0] for _ in range(repeats))
            if not np.array_equal(recv, expected):
                sys.exit(f"wrong sum at {kb} KB: {name}")
        model = 2 * (p - 1) / p * (kb * 1024) / bandwidth + 2 * (p - 1) * alpha
        rows.append([f"{kb} KB", f"{t['MPI'] * 1e6:.1f}", f"{t['ring'] * 1e6:.1f}",
                     f"{model * 1e6:.1f}", f"{t['ring'] / t['MPI']:.2f}",
                     f"{t['MPI'] / model:.2f}"])
    if rank == 0:
        print(f"P = {p} ranks; ping-pong fit: alpha = {alpha * 1e6:.2f} us, "
              f"B = {bandwidth / 1e9:.2f} GB/s; min over {repeats} repeats")
        print_table(["buffer", "MPI us", "ring us", "model us", "ring/MPI", "MPI/model"],
                    rows, "allreduce (float32 SUM): MPI_Allreduce vs Gibiansky's ring "
                          "and its model 2(P-1)/P K/B + 2(P-1) alpha")


if __name__ == "__main__":
    main()
