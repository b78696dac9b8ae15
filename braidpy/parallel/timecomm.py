"""Time communicator adapter: moves packed vectors with mpi4py for the core.

mpi4py is imported only when a communicator with more than one rank is used,
so serial runs need no MPI at all.
"""

from __future__ import annotations

import numpy as np

from .comm import mpi

__all__ = ["TimeComm"]


class TimeComm:
    """What the compiled core calls: post, receive, finish, allreduce.

    Messages between two ranks are matched in order; a poisoned message (a
    rank whose callback failed) travels with tag + 1 and no payload.
    """

    def __init__(self, comm):
        self.MPI = mpi()  # the ImportError naming braidpy[mpi] when mpi4py is missing
        self.comm = comm.Dup()  # our messages never meet the user's
        self._pending = []

    def post(self, dest: int, tag: int, buf) -> None:
        MPI = self.MPI
        data: object
        if buf is None:
            data, tag = b"", tag + 1
        else:
            data = buf if isinstance(buf, (bytes, bytearray)) else memoryview(buf).cast("B")
        self._pending.append((self.comm.Isend([data, MPI.BYTE], dest, tag), data))

    def receive(self, src: int, tag: int):
        MPI = self.MPI
        status = MPI.Status()
        self.comm.Probe(src, MPI.ANY_TAG, status)
        got, nbytes = status.Get_tag(), status.Get_count(MPI.BYTE)
        buf = bytearray(nbytes)
        self.comm.Recv([buf, MPI.BYTE], src, got)
        if got == tag + 1:
            return None
        if got != tag:
            raise RuntimeError(f"braidpy message protocol error: expected tag {tag}, got {got}")
        return buf

    def finish(self) -> None:
        if self._pending:
            self.MPI.Request.Waitall([req for req, _ in self._pending])
            self._pending.clear()

    def allreduce(self, values, is_max: bool):
        send = np.asarray(values, dtype=np.float64)
        recv = np.empty_like(send)
        self.comm.Allreduce(send, recv, op=self.MPI.MAX if is_max else self.MPI.SUM)
        return recv.tolist()

    def free(self) -> None:
        """Completes pending sends and frees the duplicate (no-op after MPI_Finalize)."""
        try:
            if self.MPI.Is_finalized() or self.comm == self.MPI.COMM_NULL:
                return
            self.finish()
            self.comm.Free()
        except Exception:  # noqa: BLE001 - called from __del__, maybe at shutdown
            pass
