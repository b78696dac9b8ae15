"""The world communicator, the (rank, size) of any communicator, and the one lazy MPI import.

mpi4py is optional (``pip install -e '.[mpi]'``): every module of braidpy that needs
``MPI`` gets it from :func:`mpi`, which is called only once a communicator with more
than one rank is in use, so serial runs never import it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from types import ModuleType
from typing import (Any, Callable, Dict, List, Mapping, MutableMapping, Optional,
                    Sequence, Tuple)

from .._extras import install_hint, require

__all__ = ["world", "rank_size", "mpi", "free_quietly", "launched_ranks", "local_ranks",
           "yield_when_oversubscribed", "WAIT_VARIABLE", "wait_mode", "sleeping_waits",
           "usable_cores", "Backoff", "sleeping_backoff", "sleep_until", "complete", "complete_all", "sleeps_in_collectives"]

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


def local_ranks(environ: Optional[Mapping[str, str]] = None) -> int:
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


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them off Linux)."""
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
    if local_ranks(env) <= (usable_cores() if cores is None else cores):
        return False
    added = False
    for name, value in MPICH_YIELD_SETTINGS.items():
        if name not in env:
            env[name] = value
            added = True
    return added


# ------------------------------------------------------------------ braidpy's own waits
WAIT_VARIABLE = "BRAIDPY_WAIT"
_WAIT_MODES = ("auto", "sleep", "mpi")
_cached_mode: Optional[str] = None


def wait_mode(environ: Optional[Mapping[str, str]] = None, cores: Optional[int] = None) -> str:
    """How braidpy waits for other ranks: ``"mpi"`` (MPI's blocking calls) or
    ``"sleep"`` (test, then sleep with :class:`Backoff`, so that a waiting rank gives
    its core to the rank it waits for).

    ``BRAIDPY_WAIT=sleep`` or ``mpi`` decides; unset, empty or ``auto``: ``"sleep"``
    when a launcher started more processes on this node (:func:`local_ranks`) than
    this process may use cores, else ``"mpi"``. Decided once per process (the first
    call without ``environ``).

    >>> wait_mode({"MPI_LOCALNRANKS": "4"}, cores=2), wait_mode({"MPI_LOCALNRANKS": "2"}, cores=2)
    ('sleep', 'mpi')
    >>> wait_mode({"MPI_LOCALNRANKS": "4", "BRAIDPY_WAIT": "mpi"}, cores=2)
    'mpi'
    >>> wait_mode({"BRAIDPY_WAIT": "spin"})
    Traceback (most recent call last):
    ...
    ValueError: BRAIDPY_WAIT must be one of auto, sleep, mpi, got 'spin'
    """
    global _cached_mode
    if environ is None and _cached_mode is not None:
        return _cached_mode
    env = os.environ if environ is None else environ
    text = env.get(WAIT_VARIABLE, "")
    choice = text.strip().lower() or "auto"
    if choice not in _WAIT_MODES:
        raise ValueError(f"{WAIT_VARIABLE} must be one of {', '.join(_WAIT_MODES)}, "
                         f"got {text!r}")
    if choice == "auto":
        choice = "sleep" if local_ranks(env) > (usable_cores() if cores is None
                                                else cores) else "mpi"
    if environ is None:
        _cached_mode = choice
    return choice


def sleeping_waits() -> bool:
    """Whether this process's braidpy waits sleep (:func:`wait_mode` is ``"sleep"``)."""
    return wait_mode() == "sleep"


class Backoff:
    """The pauses of a waiting loop: yield the core for the first ``yield_for`` seconds
    (a peer a moment behind), then sleep 50 us, doubling up to ``cap`` seconds between
    looks. Call it once per look that found nothing; it returns the seconds waited so far.

    Linux ends a sleep up to 50 us late (its default timer slack): on the project's
    2-core VM ``time.sleep(0)`` took 68 us and ``time.sleep(50e-6)`` 117 us (medians),
    so shorter pauses gain little; the cap bounds the latency a sleeping waiter adds.
    """

    __slots__ = ("start", "pause", "yield_for", "cap")

    def __init__(self, yield_for: float = 0.002, cap: float = 0.001):
        self.start = time.monotonic()
        self.pause = 0.0
        self.yield_for = yield_for
        self.cap = cap

    def __call__(self) -> float:
        waited = time.monotonic() - self.start
        if waited < self.yield_for:
            time.sleep(0.0)
        else:
            time.sleep(self.pause)
            self.pause = min(self.cap, self.pause * 2 + 50e-6)
        return waited


def sleeping_backoff() -> Backoff:
    """The pauses of braidpy's waits when ranks outnumber cores: no yielding phase (a
    yielding rank stays runnable and is scheduled again, taking the core from the rank
    it waits for), sleeps from the first look, at most :data:`SLEEP_CAP` seconds."""
    return Backoff(yield_for=0.0, cap=SLEEP_CAP)


#: The longest pause between two looks of a sleeping wait, in seconds. The Peaks demo at
#: 4 ranks on 2 cores (2026-12-08, a loaded VM) ran its steps about as fast with 50 or
#: 100 us and 1.2-1.4x slower with 500 us; an allreduce took 2.5x longer with 500 us.
SLEEP_CAP = 1e-4


def sleep_until(look: Callable[[], Any]) -> Any:
    """``look()`` until it returns something other than None or False, with
    :func:`sleeping_backoff` pauses between looks; returns that.

    >>> looks = iter([None, False, "done"])
    >>> sleep_until(lambda: next(looks))
    'done'
    """
    got = look()
    if got is None or got is False:
        pause = sleeping_backoff()
        while got is None or got is False:
            pause()
            got = look()
    return got


def complete(request: Any, sleep: Optional[bool] = None) -> None:
    """``request.Wait()``, or, when waits sleep (``sleep``; default
    :func:`sleeping_waits`), ``request.Test()`` until done (:func:`sleep_until`)."""
    if not (sleeping_waits() if sleep is None else sleep):
        request.Wait()
        return
    try:
        sleep_until(request.Test)
    except BaseException:  # a Ctrl-C, say: MPI may still write into the buffers
        _keep_in_flight([request])
        raise


def complete_all(requests: Sequence[Any], sleep: Optional[bool] = None) -> None:
    """``Request.Waitall(requests)``, or tests until all are done as :func:`complete`."""
    if not requests:
        return
    MPI = mpi()
    reqs: List[Any] = list(requests)
    if not (sleeping_waits() if sleep is None else sleep):
        MPI.Request.Waitall(reqs)
        return
    try:
        sleep_until(lambda: MPI.Request.Testall(reqs))
    except BaseException:
        _keep_in_flight(reqs)
        raise


# Requests a sleeping wait left when it raised, with the buffers they hold: kept until
# they complete (a blocking call never returns before then, so it cannot leave any).
_in_flight: List[Any] = []


def _keep_in_flight(requests: Sequence[Any]) -> None:
    _in_flight[:] = [r for r in _in_flight if not r.Test()]
    _in_flight.extend(requests)


_keyval: Optional[int] = None


def sleeps_in_collectives(comm: Any) -> bool:
    """Whether braidpy's collectives over ``comm`` wait by sleeping (non-blocking
    collective, then :func:`complete`) instead of MPI's blocking collective.

    A blocking collective never matches a non-blocking one, and oversubscription is
    decided per node, so the ranks of ``comm`` agree once (an ``Allreduce`` of
    :func:`sleeping_waits`, at braidpy's first collective over it: every rank makes
    that call) and the answer is kept on the communicator (an MPI attribute, which a
    ``Dup`` does not copy).
    """
    global _keyval
    MPI = mpi()
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval()
    agreed = comm.Get_attr(_keyval)
    if agreed is None:
        import numpy as np  # noqa: PLC0415 - numpy is needed only with MPI

        mine = np.array([1 if sleeping_waits() else 0], dtype=np.int64)
        anyone = np.empty_like(mine)
        comm.Allreduce(mine, anyone, op=MPI.MAX)
        agreed = bool(anyone[0])
        comm.Set_attr(_keyval, agreed)
    return bool(agreed)


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
