"""The layer (time) decomposition: which rank owns which fine time indices.

The compiled core distributes the fine grid over the ranks of the time communicator in
XBraid's blocks; :attr:`braidpy.Core.owned` tells each rank its own. The adjoint runs
on the reversed grid with the mirrored layout, so that every primal state an adjoint
step needs is on the same rank (:func:`mirrored_ranges`, :func:`reversed_comm`).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from .collectives import allgather_ints
from .comm import rank_size

__all__ = ["all_ranges", "mirrored_ranges", "reversed_comm", "check_ranges"]

Range = Tuple[int, int]


def all_ranges(comm: Any, owned: range) -> List[Range]:
    """Every rank's owned fine indices as (lo, hi), in rank order (collective)."""
    rows = allgather_ints(comm, [owned.start, owned.stop - 1])
    return [(int(lo), int(hi)) for lo, hi in rows]


def mirrored_ranges(ranges: Sequence[Range], ntime: int) -> List[Range]:
    """The layout of the reversed grid s_m = -t_{N-m}: rank q owns the mirror image of
    the range of rank P-1-q.

    >>> mirrored_ranges([(0, 3), (4, 8)], 8)
    [(0, 4), (5, 8)]
    """
    return [(ntime - hi, ntime - lo) for lo, hi in reversed(list(ranges))]


def reversed_comm(comm: Any) -> Optional[Any]:
    """A new communicator with the ranks of ``comm`` in reverse order (None stays None);
    the caller frees it. Collective."""
    if comm is None:
        return None
    rank, size = rank_size(comm)
    return comm.Split(0, size - 1 - rank)


def check_ranges(ranges: Sequence[Range], ntime: int, size: int) -> List[Range]:
    """``ranges`` as a list of int pairs, or ValueError naming what is wrong: one (lo, hi)
    per rank, in rank order, contiguous, covering 0..ntime (an empty range is (lo, lo-1)).

    >>> check_ranges([(0, 2), (3, 4)], 4, 2)
    [(0, 2), (3, 4)]
    >>> check_ranges([(0, 2), (4, 4)], 4, 2)
    Traceback (most recent call last):
    ...
    ValueError: ownership: rank 1 starts at 4, expected 3 (ranges must be contiguous)
    """
    out = [(int(lo), int(hi)) for lo, hi in ranges]
    if len(out) != size:
        raise ValueError(f"ownership: {len(out)} ranges for {size} ranks")
    expect = 0
    for r, (lo, hi) in enumerate(out):
        if lo != expect:
            raise ValueError(f"ownership: rank {r} starts at {lo}, expected {expect} "
                             f"(ranges must be contiguous)")
        if hi < lo - 1:
            raise ValueError(f"ownership: rank {r} has the range ({lo}, {hi})")
        expect = hi + 1
    if expect != ntime + 1:
        raise ValueError(f"ownership: the ranges end at {expect - 1}, not at ntime={ntime}")
    return out
