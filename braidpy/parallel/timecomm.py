"""Time communicator adapter: moves packed vectors with mpi4py for the core.

mpi4py is imported only when a communicator with more than one rank is used,
so serial runs need no MPI at all.
"""

from __future__ import annotations

import numpy as np

from .comm import (complete, complete_all, mpi, sleep_until, sleeping_waits,
                   sleeps_in_collectives)
from .paths import note_call, wait

__all__ = ["TimeComm"]

# Duplicates replaced by renew() while a send on them was still in flight.
_abandoned: list = []


class TimeComm:
    """What the compiled core calls: post, receive, advance, finish, allreduce.

    Messages between two ranks are matched in order; a poisoned message (a
    rank whose callback failed) travels with tag + 1 and no payload.
    """

    def __init__(self, comm, members=None):
        self.MPI = mpi()  # the ImportError naming the mpi extra when mpi4py is missing
        self._parent = comm
        self._pending = []
        # Our messages never meet the user's. Non-blocking, so that a rank that never
        # makes its Core is named within braidpy's deadline (braidpy.parallel.paths).
        note_call("making a Core", comm.Get_size())
        self.comm, request = comm.Idup()
        try:
            wait(request, members, "making a Core (Core(...) or solve(...)) on a "
                 f"{comm.Get_size()}-rank communicator")
        except BaseException:
            _abandoned.append((self.comm, []))  # never completed: not ours to free
            self.comm = self.MPI.COMM_NULL
            raise

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
        # A matched probe: the message is ours alone from here, so an exception before
        # the receive below can lose it but never leave it to a later receive.
        if sleeping_waits():  # more ranks than cores: sleep, leave the core to the sender
            message = sleep_until(lambda: self.comm.Improbe(src, MPI.ANY_TAG, status))
        else:
            message = self.comm.Mprobe(src, MPI.ANY_TAG, status)
        got, nbytes = status.Get_tag(), status.Get_count(MPI.BYTE)
        buf = bytearray(nbytes)
        message.Recv([buf, MPI.BYTE])
        if got == tag + 1:
            return None
        if got != tag:
            raise RuntimeError(f"braidpy message protocol error: expected tag {tag}, got {got}")
        return buf

    def advance(self) -> bool:
        """Tests the posted sends (the core calls it before each step while any is
        open): some MPIs move a large message only inside its sender's MPI calls (Open
        MPI's shared-memory rendezvous without single copy), and a step may be long.
        True when every posted send is complete."""
        if self._pending and self.MPI.Request.Testall([req for req, _ in self._pending]):
            self._pending.clear()
        return not self._pending

    def finish(self) -> None:
        if self._pending:
            complete_all([req for req, _ in self._pending])
            self._pending.clear()

    def allreduce(self, values, is_max: bool):
        send = np.asarray(values, dtype=np.float64)
        recv = np.empty_like(send)
        op = self.MPI.MAX if is_max else self.MPI.SUM
        if sleeps_in_collectives(self.comm):
            complete(self.comm.Iallreduce(send, recv, op=op), sleep=True)
        else:
            self.comm.Allreduce(send, recv, op=op)
        return recv.tolist()

    def renew(self) -> None:
        """Replace the duplicate by a fresh one (collective over the parent
        communicator), after a failed solve: whatever a broken exchange may have left
        behind on the old one can never be matched by a later solve."""
        old, pending = self.comm, self._pending
        self.comm, self._pending = self._parent.Dup(), []
        if all(req.Test() for req, _ in pending):
            old.Free()
        else:  # a send still in flight reads its buffer: keep both for good (rare)
            _abandoned.append((old, pending))

    def free(self) -> None:
        """Completes pending sends and frees the duplicate (no-op after MPI_Finalize)."""
        MPI = self.MPI
        if MPI.Is_finalized() or self.comm == MPI.COMM_NULL:
            return
        try:
            self.finish()
            self.comm.Free()
        except MPI.Exception:  # an MPI error while releasing (a peer that failed
            pass  # mid-send, say): the duplicate is released as far as MPI lets it
