"""The world communicator, the (rank, size) of any communicator, and the one lazy MPI import.

mpi4py is optional (``pip install -e '.[mpi]'``): every module of braidpy that needs
``MPI`` gets it from :func:`mpi`, which is called only once a communicator with more
than one rank is in use, so serial runs never import it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Dict, MutableMapping, Optional, Tuple

from .._extras import install_hint, require

__all__ = ["world", "rank_size", "mpi", "free_quietly", "launched_ranks", "local_ranks",
           "yield_when_oversubscribed"]

# Set by MPI launchers in every process they start: MPICH/Hydra (the mpich wheel's
# mpiexec), Intel MPI and MVAPICH (PMI_SIZE), Open MPI, MVAPICH2.
_LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


# The processes a launcher started on this node: MPICH/Hydra, Open MPI, MVAPICH2.
_LAUNCHER_LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                  "MV2_COMM_WORLD_LOCAL_SIZE")

#: MPICH (ch4) settings that make a rank waiting without progress yield its core instead of
#: busy-polling: with more ranks than cores a polling rank takes the core from the rank it
#: waits for. 4 ranks of the Peaks demo on 2 cores ran their steps 3-5x faster with them.
MPICH_YIELD_SETTINGS: Dict[str, str] = {
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}


def local_ranks(environ: Optional[MutableMapping[str, str]] = None) -> int:
    """How many processes an MPI launcher started on this node (1: none or unknown);
    known before MPI is initialised.

    >>> local_ranks({"MPI_LOCALNRANKS": "4", "PMI_SIZE": "8"})
    4
    >>> local_ranks({"PMI_SIZE": "3"})  # a launcher that does not say: all of them
    3
    """
    env = os.environ if environ is None else environ
    for name in _LAUNCHER_LOCAL_SIZE_VARIABLES:
        try:
            return max(1, int(env[name]))
        except (KeyError, ValueError):
            continue
    for name in _LAUNCHER_SIZE_VARIABLES:
        try:
            return max(1, int(env[name]))
        except (KeyError, ValueError):
            continue
    return 1


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def yield_when_oversubscribed(environ: Optional[MutableMapping[str, str]] = None,
                              cores: Optional[int] = None) -> bool:
    """Sets :data:`MPICH_YIELD_SETTINGS` in the environment when a launcher started more
    processes on this node than this process may use cores, before MPI starts; a value
    the user set is kept. True: at least one setting was added.

    braidpy calls this when it is imported. It does nothing once ``mpi4py.MPI`` has been
    imported (MPI has read its settings by then), so a program that imports mpi4py first
    sets the variables itself (docs/install.md, "Running under MPI"). MPI libraries other
    than MPICH ignore these variables.

    >>> env = {"MPI_LOCALNRANKS": "4", "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "0"}
    >>> yield_when_oversubscribed(env, cores=2), env["MPIR_CVAR_CH4_PROGRESS_THROTTLE"]
    (True, '0')
    >>> env["MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT"]
    '1'
    >>> yield_when_oversubscribed({"MPI_LOCALNRANKS": "2"}, cores=2)
    False
    """
    env = os.environ if environ is None else environ
    if environ is None and "mpi4py.MPI" in sys.modules:
        return False
    if local_ranks(env) <= (_usable_cores() if cores is None else cores):
        return False
    added = False
    for name, value in MPICH_YIELD_SETTINGS.items():
        if name not in env:
            env[name] = value
            added = True
    return added


def mpi() -> ModuleType:
    """``mpi4py.MPI``, imported now; an ImportError naming the ``mpi`` extra without it."""
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
        (each would otherwise solve the whole problem alone); the message names the
        ``mpi`` extra and its packages.

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
    MPI = mpi()
    if MPI.Is_finalized():  # at shutdown, after MPI_Finalize: nothing to release
        return
    try:
        comm.Free()
    except MPI.Exception:  # an MPI error while releasing: released as far as MPI lets it
        pass
