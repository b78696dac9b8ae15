"""The world communicator and the (rank, size) of any communicator."""

from __future__ import annotations

from typing import Any, Optional, Tuple

__all__ = ["world", "rank_size"]


def world() -> Optional[Any]:
    """``MPI.COMM_WORLD`` when launched with several ranks, else None (serial).

    Pass the result as ``comm=`` to :func:`braidpy.solve`; a serial run works even
    without mpi4py installed.

    Examples
    --------
    >>> from braidpy.parallel import world
    >>> world() is None      # not under mpiexec
    True
    """
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


def rank_size(comm: Any) -> Tuple[int, int]:
    """(rank, size) of an mpi4py-like communicator; (0, 1) for None.

    >>> rank_size(None)
    (0, 1)
    >>> rank_size("COMM_WORLD")
    Traceback (most recent call last):
    ...
    TypeError: comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD) or None, got str
    """
    if comm is None:
        return 0, 1
    try:
        return int(comm.Get_rank()), int(comm.Get_size())
    except AttributeError:
        raise TypeError(
            f"comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD) or None, "
            f"got {type(comm).__name__}"
        ) from None


def is_parallel(comm: Any) -> bool:
    """True when ``comm`` has more than one rank (messages are needed)."""
    return rank_size(comm)[1] > 1
