"""Typed collectives: every message is a NumPy buffer (mpi4py's uppercase calls).

mpi4py's lowercase calls (``bcast``, ``allgather``, ``send``...) pickle their objects,
and unpickling what a peer sent can run any code; braidpy never uses them. Texts travel
as UTF-8 bytes, numbers as int64/float64 arrays, vectors as the bytes their app packed.
Arrays travel in the one wire format of :mod:`braidpy.backends.wire`, which the
receiver validates field by field. Every function here is collective over ``comm`` (or
local when ``comm`` is None or has one rank) and must be called by every rank in the
same order.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..backends import wire
from .comm import complete, mpi, rank_size, sleep_until, sleeping_waits, sleeps_in_collectives

__all__ = ["allgather_texts", "allgather_texts_and_ints", "allgather_ints", "allgatherv",
           "allgatherv_counted", "allreduce_sum", "allreduce_int",
           "bcast_bytes", "bcast_into", "send_array", "recv_array", "gather_arrays", "ordered_sum"]

_ARRAY_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))


def _mpi():
    return mpi()  # imported only here, when a collective spans several ranks


def allgather_ints(comm: Any, values: Sequence[int]) -> np.ndarray:
    """Every rank's ``values`` (the same length everywhere), as rows of an int64 array.

    >>> allgather_ints(None, [3, 4])
    array([[3, 4]])
    """
    mine = np.asarray(values, dtype=np.int64).reshape(1, -1)
    _, size = rank_size(comm)
    if size == 1:
        return mine
    out = np.empty((size, mine.shape[1]), dtype=np.int64)
    if sleeps_in_collectives(comm):
        complete(comm.Iallgather(mine, out), sleep=True)
    else:
        comm.Allgather(mine, out)
    return out


def allgatherv(comm: Any, values: Any, dtype: Any = np.float64) -> np.ndarray:
    """Every rank's 1-D array of ``dtype`` (float64 or int64; lengths may differ),
    concatenated in rank order.

    >>> allgatherv(None, [1.5, 2.5])
    array([1.5, 2.5])
    """
    dtype = np.dtype(dtype)
    if dtype not in _ARRAY_DTYPES:
        raise TypeError(f"allgatherv gathers float64 or int64, got {dtype}")
    mine = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
    _, size = rank_size(comm)
    if size == 1:
        return mine
    counts = [int(n) for n in allgather_ints(comm, [mine.size])[:, 0]]
    return allgatherv_counted(comm, mine, counts, dtype)


def allgatherv_counted(comm: Any, values: Any, counts: Sequence[int],
                       dtype: Any = np.float64) -> np.ndarray:
    """:func:`allgatherv` where every rank already knows every rank's length
    (``counts``, in rank order; gathered beforehand with other numbers): one collective.

    >>> allgatherv_counted(None, [7, 8], [2], np.int64)
    array([7, 8])
    """
    dtype = np.dtype(dtype)
    if dtype not in _ARRAY_DTYPES:
        raise TypeError(f"allgatherv gathers float64 or int64, got {dtype}")
    mine = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
    rank, size = rank_size(comm)
    counts = [int(n) for n in counts]
    if len(counts) != size or counts[rank] != mine.size:
        raise ValueError(f"allgatherv_counted: counts {counts} do not fit {size} rank(s) "
                         f"with {mine.size} value(s) on rank {rank}")
    if size == 1:
        return mine
    displs = [sum(counts[:r]) for r in range(size)]
    out = np.empty(sum(counts), dtype=dtype)
    if sleeps_in_collectives(comm):
        complete(comm.Iallgatherv(mine, [out, (counts, displs)]), sleep=True)
    else:
        comm.Allgatherv(mine, [out, (counts, displs)])
    return out


def allreduce_sum(comm: Any, local: np.ndarray) -> np.ndarray:
    """Elementwise sum of a float64 array over the ranks (``local`` itself when serial)."""
    if rank_size(comm)[1] == 1:
        return local
    MPI = _mpi()
    send = np.ascontiguousarray(local, dtype=np.float64)
    out = np.empty_like(send)
    _allreduce(comm, send, out, MPI.SUM)
    return out


def allreduce_int(comm: Any, value: int, op: str = "sum") -> int:
    """Sum (op='sum') or maximum (op='max') of an int over the ranks."""
    if op not in ("sum", "max"):
        raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
    if rank_size(comm)[1] == 1:
        return int(value)
    MPI = _mpi()
    send = np.array([value], dtype=np.int64)
    recv = np.empty_like(send)
    _allreduce(comm, send, recv, MPI.SUM if op == "sum" else MPI.MAX)
    return int(recv[0])


def _allreduce(comm: Any, send: np.ndarray, out: np.ndarray, op: Any) -> None:
    if sleeps_in_collectives(comm):
        complete(comm.Iallreduce(send, out, op=op), sleep=True)
    else:
        comm.Allreduce(send, out, op=op)


def allgather_texts(comm: Any, text: Optional[str]) -> List[Optional[str]]:
    """Every rank's text (None: nothing to say), in rank order.

    >>> allgather_texts(None, "ok")
    ['ok']
    """
    return allgather_texts_and_ints(comm, text, ())[0]


def allgather_texts_and_ints(comm: Any, text: Optional[str], values: Sequence[int]
                             ) -> Tuple[List[Optional[str]], np.ndarray]:
    """Every rank's text (None: nothing to say) and its ``values`` (the same count of
    ints everywhere, as rows of an int64 array), in rank order: one allgather while no
    rank has a text, where :func:`allgather_texts` and :func:`allgather_ints` take two.

    >>> allgather_texts_and_ints(None, None, [4, 5])
    ([None], array([[4, 5]]))
    """
    _, size = rank_size(comm)
    data = b"" if text is None else text.encode("utf-8", "replace")
    rows = allgather_ints(comm, [-1 if text is None else len(data), *values])
    if size == 1:
        return [None if text is None else data.decode("utf-8", "replace")], rows[:, 1:]
    lengths = rows[:, 0]
    if all(n < 0 for n in lengths):  # the common case of an agreement: nobody failed
        return [None] * size, rows[:, 1:]
    MPI = _mpi()
    counts = [max(int(n), 0) for n in lengths]
    displs = [sum(counts[:r]) for r in range(size)]
    buf = np.empty(sum(counts), dtype=np.uint8)
    send, recv = [np.frombuffer(data, dtype=np.uint8), MPI.BYTE], [buf, counts, displs, MPI.BYTE]
    if sleeps_in_collectives(comm):
        complete(comm.Iallgatherv(send, recv), sleep=True)
    else:
        comm.Allgatherv(send, recv)
    raw = buf.tobytes()
    return [None if lengths[r] < 0 else raw[displs[r]:displs[r] + counts[r]].decode(
        "utf-8", "replace") for r in range(size)], rows[:, 1:]


def bcast_bytes(comm: Any, data: Optional[bytes], root: int) -> bytes:
    """``data`` of rank ``root`` on every rank (the others pass None)."""
    rank, size = rank_size(comm)
    if size == 1:
        return b"" if data is None else bytes(data)
    MPI = _mpi()
    n = np.array([len(data) if rank == root and data is not None else 0], dtype=np.int64)
    sleep = sleeps_in_collectives(comm)
    _bcast(comm, n, root, sleep)
    buf = np.empty(int(n[0]), dtype=np.uint8)
    if rank == root and data is not None:
        buf[:] = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    _bcast(comm, [buf, MPI.BYTE], root, sleep)
    return buf.tobytes()


def bcast_into(comm: Any, buf: np.ndarray, root: int) -> np.ndarray:
    """Rank ``root``'s bytes in ``buf`` (a uint8 array, the same length on every rank,
    known beforehand): one broadcast, where :func:`bcast_bytes` sends the length first.

    >>> bcast_into(None, np.frombuffer(b"ab", dtype=np.uint8).copy(), 0).tobytes()
    b'ab'
    """
    if rank_size(comm)[1] > 1:
        _bcast(comm, [buf, _mpi().BYTE], root, sleeps_in_collectives(comm))
    return buf


def _bcast(comm: Any, buf: Any, root: int, sleep: bool) -> None:
    if sleep:
        complete(comm.Ibcast(buf, root=root), sleep=True)
    else:
        comm.Bcast(buf, root=root)


def send_array(comm: Any, a: Optional[np.ndarray], dest: int, tag: int) -> None:
    """Send a host array (or None) to ``dest`` in braidpy's wire format
    (:mod:`braidpy.backends.wire`); pairs with :func:`recv_array`."""
    data = b"" if a is None else wire.encode(np.asarray(a))
    message = [np.frombuffer(data, dtype=np.uint8), _mpi().BYTE]
    if sleeping_waits():  # a large message waits for its receiver: sleep meanwhile
        complete(comm.Isend(message, dest=dest, tag=tag), sleep=True)
    else:
        comm.Send(message, dest=dest, tag=tag)


def recv_array(comm: Any, source: int, tag: int) -> Optional[np.ndarray]:
    """The array (or None) that ``source`` sent with :func:`send_array`; a message that
    is not a valid wire message raises ValueError naming what is wrong."""
    MPI = _mpi()
    status = MPI.Status()
    if sleeping_waits():
        sleep_until(lambda: comm.Iprobe(source=source, tag=tag, status=status))
    else:
        comm.Probe(source=source, tag=tag, status=status)
    buf = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
    comm.Recv([buf, MPI.BYTE], source=source, tag=tag)
    return None if buf.size == 0 else wire.to_numpy(wire.decode(buf))


def _bcast_array(comm: Any, a: Optional[np.ndarray], root: int) -> Optional[np.ndarray]:
    rank, _ = rank_size(comm)
    data = wire.encode(np.asarray(a)) if rank == root and a is not None else None
    got = bcast_bytes(comm, data, root)
    return None if not got else wire.to_numpy(wire.decode(got))


def ordered_sum(items: Iterable[Any], comm: Any, holders: Optional[int] = None
                ) -> Optional[np.ndarray]:
    """Sum of array-likes held in rank order (rank r's items come after rank r-1's),
    added strictly left to right as float64: rank r continues the partial sum of rank
    r-1 and the last rank broadcasts it, so the bits do not depend on the number of
    ranks. None if there are no items anywhere.

    ``holders``: every rank knows that only ranks below it hold items (the others'
    ``items`` are empty); the partial sum then passes through those ranks alone, and
    the last of them broadcasts it.

    >>> ordered_sum([[1.0, 2.0], [0.5, 0.5]], None)
    array([1.5, 2.5])
    """
    rank, size = rank_size(comm)
    last = size - 1 if holders is None else min(size, int(holders)) - 1
    if last < 0:
        raise ValueError(f"holders must be an int >= 1, got {holders!r}")
    partial: Optional[np.ndarray] = None
    tag = 77
    if 0 < rank <= last:
        partial = recv_array(comm, rank - 1, tag)
    for item in items:
        if rank > last:
            raise ValueError(f"rank {rank} holds an item of the sum, beyond the "
                             f"{last + 1} holder(s) it was told of")
        g = np.asarray(item, dtype=np.float64)
        partial = g.copy() if partial is None else partial + g
    if rank < last:
        send_array(comm, partial, rank + 1, tag)
    return partial if size == 1 else _bcast_array(comm, partial, root=last)


def gather_arrays(comm: Any, arrays: Mapping[int, np.ndarray],
                  root: int = 0) -> Optional[Dict[int, np.ndarray]]:
    """Every rank's ``{key: host array}`` merged on ``root`` (None elsewhere).

    >>> gather_arrays(None, {2: [1.0]})
    {2: array([1.])}
    """
    rank, size = rank_size(comm)
    mine = {int(k): np.asarray(v) for k, v in arrays.items()}
    if size == 1:
        return mine
    tag = 78
    if rank != root:
        keys = np.array(sorted(mine), dtype=np.int64)
        send_array(comm, keys, root, tag)
        for k in keys.tolist():
            send_array(comm, mine[k], root, tag)
        return None
    out: Dict[int, np.ndarray] = {}
    for r in range(size):
        if r == root:
            out.update(mine)
            continue
        keys_r = recv_array(comm, r, tag)
        for k in ([] if keys_r is None else keys_r.tolist()):
            got = recv_array(comm, r, tag)
            if got is not None:
                out[int(k)] = got
    return out
