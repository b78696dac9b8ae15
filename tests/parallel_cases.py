"""braidpy.parallel's collectives and agreement under mpiexec (see test_parallel.py).

Each case runs on every rank and returns what rank 0 reports; outcomes that differ by
rank are gathered (with mpi4py's pickle-based gather: this is test code talking to
itself, not braidpy receiving a message).
"""

import time

import numpy as np
from mpi4py import MPI

from braidpy.parallel.agree import agreed
from braidpy.backends import wire
from braidpy.parallel.collectives import (allgather_texts, allgatherv, bcast_bytes,
                                          gather_arrays, ordered_sum, recv_array)
from braidpy.parallel.timecomm import TimeComm


class Boom(RuntimeError):
    pass


def _outcome(fn):
    try:
        fn()
        return ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        return [type(exc).__name__, str(exc)]


def texts(comm):
    r = comm.rank
    return allgather_texts(comm, None if r == 1 else f"rang {r} é")


def gathered_terms(comm):
    r = comm.rank
    values = allgatherv(comm, [0.1 * k for k in range(r)])
    index = allgatherv(comm, list(range(r)), np.int64)
    return [values.tolist(), index.tolist()]


def rank_ordered_sum(comm):
    # Rank r holds items r*3 .. r*3+2 of one global list; the sum must be added strictly
    # left to right: the same bits as the serial loop below, for any rank count.
    items = [np.array([0.1 * (3 * comm.rank + k), 1e16 * (-1) ** k]) for k in range(3)]
    total = ordered_sum(items, comm)
    ref = None
    for i in range(3 * comm.size):
        g = np.array([0.1 * i, 1e16 * (-1) ** (i % 3)])
        ref = g if ref is None else ref + g
    return [total.tolist(), bool(np.array_equal(total, ref))]


def held_sum(comm):
    # Only the first two ranks hold items (told by holders=2): the chain stops there and
    # the second broadcasts; every rank ends with the sum.
    holders = min(2, comm.size)
    items = [np.array([1.0 + comm.rank, 1e16])] if comm.rank < holders else []
    total = ordered_sum(items, comm, holders=2)
    return allgatherv(comm, total).tolist()  # every rank's


def scalar_sum(comm):
    # 0-d items stay 0-d through the messages (a 1-element array would be a planted bug).
    total = ordered_sum([0.5 * comm.rank], comm)
    return [list(total.shape), float(total)]


def gathered_arrays(comm):
    out = gather_arrays(comm, {10 + comm.rank: np.full((2, 3), float(comm.rank)),
                               100 + comm.rank: np.arange(comm.rank, dtype=np.int64)})
    if comm.rank != 0:
        return None
    return {str(k): [str(v.dtype), list(v.shape), v.ravel().tolist()] for k, v in out.items()}


def broadcast(comm):
    root = comm.size - 1
    return bcast_bytes(comm, b"\x00payload\xff" if comm.rank == root else None, root).hex()


def agreement_on_failure(comm):
    fail = comm.size - 1

    def body():
        with agreed(comm, "the test block"):
            if comm.rank == fail:
                raise Boom("failed on purpose")
    return _outcome(body)


def agreement_when_fine(comm):
    def body():
        with agreed(comm, "the test block"):
            pass
    return _outcome(body)


def forged_headers(comm):
    """Rank 0 sends messages a hostile peer could send; the last rank must reject each
    with ValueError (never import, never allocate absurd memory, never crash)."""
    if comm.size == 1:
        return []
    good = wire.encode(np.arange(6.0).reshape(2, 3))
    bad = [
        good[:5] + bytes([99]) + good[6:],                  # unknown dtype code
        good[:7] + bytes([200]) + good[8:],                 # too many dimensions
        good[:8] + (-3).to_bytes(8, "little", signed=True) + good[16:],  # negative dim
        good[:-8],                                          # payload too short
        b"numpy;<f8;3" + bytes(24),                         # the old, library-naming format
        good[:6],                                           # truncated header
    ]
    last = comm.size - 1
    outcomes = []
    for k, data in enumerate(bad):
        if comm.rank == 0:
            comm.Send([np.frombuffer(data, dtype=np.uint8), MPI.BYTE], dest=last, tag=500 + k)
        elif comm.rank == last:
            outcomes.append(_outcome(lambda k=k: recv_array(comm, 0, 500 + k)))
    return comm.bcast(outcomes, root=last)


def sends_advanced(comm):
    """Each rank posts two 1 MB states to its right neighbour (a rendezvous size for
    every MPI), receives its left neighbour's, then tests its own sends with
    TimeComm.advance until they complete: [completed in 10 s, received intact]."""
    tc = TimeComm(comm)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for tag in (10, 12):
        tc.post(right, tag, np.full(1 << 17, float(comm.rank + tag)))
    tc.advance()  # may or may not complete them: the receiver has not matched yet
    intact = all(np.array_equal(np.frombuffer(tc.receive(left, tag)),
                                np.full(1 << 17, float(left + tag))) for tag in (10, 12))
    deadline = time.monotonic() + 10.0
    while not tc.advance() and time.monotonic() < deadline:
        pass
    completed = tc.advance()
    tc.free()
    return [completed, intact]


PARALLEL_CASES = {
    "texts": texts, "gathered_terms": gathered_terms, "ordered_sum": rank_ordered_sum,
    "scalar_sum": scalar_sum, "held_sum": held_sum, "gathered_arrays": gathered_arrays, "broadcast": broadcast,
    "agreement_on_failure": lambda c: c.gather(agreement_on_failure(c)),
    "agreement_when_fine": lambda c: c.gather(agreement_when_fine(c)),
    "forged_headers": forged_headers,
    "sends_advanced": lambda c: c.gather(sends_advanced(c)),
    "size": lambda c: c.size,
}
