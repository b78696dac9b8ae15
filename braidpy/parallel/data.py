"""Data parallelism: each data group trains on a shard of the batch, and gradients are
averaged over the data communicator.

The gradient lives in one contiguous buffer, as in the single-buffer layout of You,
Buluç and Demmel, "Scaling deep learning on GPU and Knights Landing clusters", SC 2017.
It is reduced in fixed buckets with non-blocking ``Iallreduce``. A bucket is
started as soon as the part of the gradient it covers is final, so communication
overlaps the rest of the backward work (Gibiansky, "Bringing HPC techniques to deep
learning", blog post, 2017). The bucket boundaries depend
only on the buffer size and the bucket size, so a given grid gives the same bits run to
run. MPI's own collective is used: ``benchmarks/bench_allreduce.py`` measured it ahead
of a hand-written ring at every size.

>>> import numpy as np
>>> avg = GradientAverager(None, 5)
>>> avg.add(0, np.arange(3.0)); avg.add(3, np.array([3.0, 4.0]))
>>> avg.finish()
array([0., 1., 2., 3., 4.])
>>> shard_of(10, 3, 1)
range(4, 7)
"""

from __future__ import annotations

from typing import Any, List

import numpy as np

from .comm import complete_all, mpi, rank_size

__all__ = ["GradientAverager", "shard_of", "share_of"]


def shard_of(nsamples: int, ngroups: int, group: int) -> range:
    """The samples of data group ``group`` out of ``ngroups`` for a batch of
    ``nsamples``: contiguous, sizes differing by at most one, the larger ones first."""
    if ngroups < 1 or not 0 <= group < ngroups:
        raise ValueError(f"group {group!r} is not one of {ngroups!r} data groups")
    if nsamples < ngroups:
        raise ValueError(f"a batch of {nsamples} samples cannot feed {ngroups} data groups "
                         f"(each needs at least one)")
    return share_of(nsamples, ngroups, group)


def share_of(count: int, parts: int, part: int) -> range:
    """Part ``part``'s share of ``count`` items split into ``parts``: contiguous, in
    part order, sizes differing by at most one, the larger ones first; parts beyond
    the count get an empty share (where :func:`shard_of` refuses them).

    >>> [share_of(5, 3, p) for p in range(3)], share_of(1, 2, 1)
    ([range(0, 2), range(2, 4), range(4, 5)], range(1, 1))
    """
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"part {part!r} is not one of {parts!r} parts")
    base, extra = divmod(count, parts)
    lo = part * base + min(part, extra)
    return range(lo, lo + base + (1 if part < extra else 0))


class GradientAverager:
    """Average a flat gradient of ``size`` entries over ``comm`` (the data communicator).

    Call :meth:`add` with each finished piece (any order, pieces must not overlap) and
    :meth:`finish` once; it returns the average over the ranks. Every rank must add the
    same pieces: the buckets they start are collectives.

    Parameters
    ----------
    comm : mpi4py communicator or None
        The data communicator (None or one rank: no communication, the sum is the value).
    size : int
        Entries of the gradient.
    bucket : int
        Entries per reduction (default 2**16, 512 KB of float64). A bucket is sent once
        all its entries were added.
    dtype : NumPy dtype
        Of the buffer (default float64).

    Notes
    -----
    The result is the plain mean over ranks. For shards of unequal size, scale each
    rank's pieces by ``P * n_r / N`` (its samples over the mean) before :meth:`add`; the
    mean is then the sample-weighted average.
    """

    def __init__(self, comm: Any, size: int, *, bucket: int = 2**16,
                 dtype: Any = np.float64):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        if isinstance(bucket, bool) or not isinstance(bucket, (int, np.integer)) or bucket < 1:
            raise ValueError(f"bucket must be an int >= 1, got {bucket!r}")
        self.comm = comm
        self.rank, self.nranks = rank_size(comm)
        self.buffer = np.zeros(int(size), dtype=dtype)
        self.result = np.empty_like(self.buffer)
        self.bucket = int(bucket)
        nbuckets = -(-int(size) // self.bucket)
        self._missing = [min(self.bucket, int(size) - b * self.bucket) for b in range(nbuckets)]
        self._requests: List[Any] = []
        self._started = [False] * nbuckets

    def add(self, start: int, values: np.ndarray) -> None:
        """``buffer[start:start + len(values)] = values``; starts every bucket that this
        completes (in bucket order, so that all ranks start them in the same order)."""
        values = np.asarray(values, dtype=self.buffer.dtype).ravel()
        stop = start + values.size
        if start < 0 or stop > self.buffer.size:
            raise ValueError(f"piece [{start}, {stop}) is outside the gradient of "
                             f"{self.buffer.size} entries")
        self.buffer[start:stop] = values
        first, last = start // self.bucket, (stop - 1) // self.bucket if stop > start else -1
        for b in range(first, last + 1):
            lo = max(start, b * self.bucket)
            hi = min(stop, (b + 1) * self.bucket)
            self._missing[b] -= hi - lo
            if self._missing[b] < 0:
                raise ValueError(f"piece [{start}, {stop}) overlaps one added before")
        self._start_ready()

    def _start_ready(self) -> None:
        # Strictly in bucket order: bucket b waits until 0..b-1 have started, so the
        # ranks post their collectives in one order even if pieces come in another.
        for b, started in enumerate(self._started):
            if started:
                continue
            if self._missing[b] != 0:
                return
            self._started[b] = True
            if self.nranks > 1:
                lo, hi = b * self.bucket, min((b + 1) * self.bucket, self.buffer.size)
                MPI = mpi()
                self._requests.append(self.comm.Iallreduce(
                    self.buffer[lo:hi], self.result[lo:hi], op=MPI.SUM))

    def abandon(self) -> None:
        """After a failure agreed by every rank: wait for the buckets already started
        (every rank started them, so they complete) and start no more."""
        if self._requests:
            complete_all(self._requests)
        self._requests = []
        self._started = [True] * len(self._started)

    def finish(self) -> np.ndarray:
        """Wait for the reductions and return the mean over the ranks (a new array)."""
        if any(m != 0 for m in self._missing):
            raise ValueError(f"{sum(self._missing)} gradient entries were never added")
        if self.nranks == 1:
            return self.buffer.copy()
        complete_all(self._requests)
        self._requests = []
        return self.result / self.nranks
