"""The world communicator, the (rank, size) of any communicator, and the one lazy MPI import.

mpi4py is optional (``pip install 'braidpy-mgrit[mpi]'``): every module of braidpy that needs
``MPI`` gets it from :func:`mpi`, which is called only once a communicator with more
than one rank is in use, so serial runs never import it.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any, Optional, Tuple

from .._extras import install_hint, require

__all__ = ["world", "rank_size", "mpi", "free_quietly", "launched_ranks"]

# Set by MPI launchers in every process they start: MPICH/Hydra (the mpich wheel's
# mpiexec), Intel MPI and MVAPICH (PMI_SIZE), Open MPI, MVAPICH2.
_LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def mpi() -> ModuleType:
    """``mpi4py.MPI``, imported now; an ImportError naming ``braidpy-mgrit[mpi]`` without it."""
    try:
        return require("mpi4py.MPI", "mpi", "running braidpy on several MPI ranks")
    except RuntimeError as err:  # mpi4py is there, but no MPI library it can load
        raise ImportError(
            f"mpi4py could not load an MPI library ({err}); {install_hint('mpi')} brings "
            f"the mpich wheel, or install mpi4py against your system's MPI"
        ) from err


def _have_mpi4py() -> bool:
    try:
        return importlib.util.find_spec("mpi4py") is not None
    except (ImportError, ValueError):
        return False


def launched_ranks() -> int:
    """How many processes an MPI launcher started, from its environment (1: none);
    known before MPI is initialised.

    >>> launched_ranks() >= 1
    True
    """
    for name in _LAUNCHER_SIZE_VARIABLES:
        try:
            return max(1, int(os.environ[name]))
        except (KeyError, ValueError):
            continue
    return 1


def world() -> Optional[Any]:
    """``MPI.COMM_WORLD`` when launched with several ranks, else None (serial).

    Pass the result as ``comm=`` to :func:`braidpy.solve`; a serial run works even
    without mpi4py installed.

    Raises
    ------
    ImportError
        If an MPI launcher started several processes but mpi4py is not installed
        (each would otherwise solve the whole problem alone); the message names
        ``braidpy-mgrit[mpi]``.

    Examples
    --------
    >>> from braidpy.parallel import world
    >>> world() is None      # not under mpiexec
    True
    """
    try:
        MPI = mpi()
    except ImportError as err:
        nranks = launched_ranks()
        if nranks > 1:  # each process would otherwise solve the whole problem alone
            raise ImportError(f"this process is one of {nranks} that mpiexec started, "
                              f"but {err}", name="mpi4py") from err
        return None
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


def rank_size(comm: Any) -> Tuple[int, int]:
    """(rank, size) of an mpi4py-like communicator; (0, 1) for None.

    >>> rank_size(None)
    (0, 1)
    >>> rank_size("COMM_WORLD")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD) or None, got str...
    """
    if comm is None:
        return 0, 1
    try:
        return int(comm.Get_rank()), int(comm.Get_size())
    except AttributeError:
        hint = ""
        if not _have_mpi4py():
            hint = f" (mpi4py is not installed: {install_hint('mpi')})"
        raise TypeError(
            f"comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD) or None, "
            f"got {type(comm).__name__}{hint}"
        ) from None


def is_parallel(comm: Any) -> bool:
    """True when ``comm`` has more than one rank (messages are needed)."""
    return rank_size(comm)[1] > 1


def free_quietly(comm: Any) -> None:
    """``comm.Free()`` for a communicator braidpy made (None: nothing), ignoring the
    error it gives after MPI_Finalize, when objects are released at shutdown."""
    if comm is None:
        return
    try:
        comm.Free()
    except Exception:  # noqa: BLE001 - after MPI_Finalize at shutdown
        pass
