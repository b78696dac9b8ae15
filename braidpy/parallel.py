"""Communicators for braidpy runs (MPI only when there is more than one rank)."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["world"]


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
