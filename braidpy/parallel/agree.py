"""The one place where ranks agree that something failed, and every rank raises.

braidpy's error contract: when anything fails on one rank, every rank stops at the same
agreement point; the failing rank re-raises its own exception (traceback intact, with a
note saying where it happened) and every other rank raises :class:`braidpy.BraidError`
naming the failing ranks and their errors. Nobody is left waiting in a collective.

Two forms, both collective (every rank must reach them, in the same order):

- ``with agreed(comm, "objective evaluation"): ...`` runs the block, catches an
  ``Exception`` it raises, and agrees at the end of the block;
- ``agreed(comm, ...).settle(error)`` agrees on an exception object captured
  elsewhere (the compiled core hands back the one a callback raised).

Agreements nest. An error that every rank of a communicator already raised at one
agreement point (the original on the failing rank, BraidError elsewhere) is marked with
the ranks that agreed on it, and an enclosing agreement over the same ranks (or fewer)
lets it pass without exchanging again: the ranks that raised it inside do not meet
their peers once more. So a block of local work followed by collectives can be guarded
as one: a failure in the local work sends that rank to the block's exchange, and the
others meet it there, or at an :func:`agreement_point` placed before the collective
they were about to enter.

The failing rank re-raises without leaving an exception <-> frame reference cycle
(``try: raise ... finally: del ...``): an object whose ``__del__`` frees a
communicator is then freed by reference counting at the same point on every rank,
never by a garbage collection that runs at different moments on different ranks (which
can hang MPI implementations whose communicator free synchronises).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, FrozenSet, List, Literal, Optional, Sequence, Type

import numpy as np

from .._errors import BraidError
from .collectives import allgather_texts, allgather_texts_and_ints
from .comm import mpi, rank_size
from .interrupts import take_interrupt

__all__ = ["agreed", "agreement_point", "Agreement", "describe", "safe_text"]

# The attribute (in the exception's __dict__, which every exception has) naming the
# ranks that raised it together. Not a weak registry: built-in exceptions refuse weak
# references, and a strong one would keep the failing rank's frames (and a Core's
# communicator) alive longer than its peers'.
_AGREED_AMONG = "_braidpy_agreed_among"


def _world_numbers(comm: Any, size: int) -> Optional[List[int]]:
    """The COMM_WORLD rank of each rank of ``comm``, or None where MPI cannot translate
    them (a stand-in communicator in tests, a spawned world)."""
    try:
        MPI = mpi()
    except ImportError:  # a stand-in communicator without mpi4py
        return None
    try:
        group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    except AttributeError:  # a stand-in communicator: no groups
        return None
    except MPI.Exception:  # an intercommunicator, or MPI no longer running
        return None
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(size)), world)
    except MPI.Exception:  # processes outside COMM_WORLD (a spawned world)
        return None
    finally:
        group.Free()
        world.Free()
    if any(r == MPI.UNDEFINED for r in ranks):
        return None
    return [int(r) for r in ranks]


def _members(comm: Any) -> FrozenSet[Any]:
    """The processes of ``comm`` as COMM_WORLD ranks (empty for one rank: nothing to
    agree with); a communicator MPI cannot translate stands for itself."""
    _, size = rank_size(comm)
    if size == 1:
        return frozenset()
    ranks = _world_numbers(comm, size)
    return frozenset([("communicator", id(comm))]) if ranks is None else frozenset(ranks)


def _mark_agreed(error: BaseException, members: FrozenSet[Any]) -> None:
    try:
        vars(error)[_AGREED_AMONG] = members
    except Exception:  # noqa: BLE001 - an exception without a __dict__: not marked
        pass


def _agreed_among(error: BaseException) -> FrozenSet[Any]:
    try:
        among = vars(error).get(_AGREED_AMONG)
    except Exception:  # noqa: BLE001 - see _mark_agreed
        return frozenset()
    return among if isinstance(among, frozenset) else frozenset()


def _type_name(obj: Any) -> str:
    try:
        name = type(obj).__name__
    except BaseException:  # noqa: BLE001 - a metaclass of the user's; never raise here
        return "object"
    return name if isinstance(name, str) else "object"


def safe_text(obj: Any, how: Callable[[Any], str] = str) -> str:
    """``how(obj)`` (``str`` or ``repr``), or the type name of ``obj`` when that raises
    or returns something other than a string: describing a user's object must never
    raise, or the rank describing it would leave its peers waiting in a collective.

    >>> class Oops(Exception):
    ...     def __str__(self):
    ...         raise RuntimeError("no str")
    >>> safe_text(Oops()), safe_text(3, repr)
    ('Oops', '3')
    """
    try:
        text = how(obj)
    except BaseException:  # noqa: BLE001 - KeyboardInterrupt from a __str__ too
        return _type_name(obj)
    return text if isinstance(text, str) else _type_name(obj)


def describe(error: BaseException) -> str:
    """'ValueError: message', the one-line form ranks tell each other; never raises
    (an exception whose ``str()`` fails is described by its type name alone).

    >>> describe(ValueError("bad")), describe(KeyError())
    ('ValueError: bad', 'KeyError')
    """
    name = _type_name(error)
    try:
        text = str(error)
    except BaseException:  # noqa: BLE001 - see safe_text
        return name
    return f"{name}: {text}" if isinstance(text, str) and text else name


class Agreement:
    """A collective failure check over ``comm`` (see the module docstring).

    Parameters
    ----------
    comm : mpi4py communicator or None
    what : str
        What was being done, for the other ranks' message ("objective evaluation").
    ranks : sequence of int, optional
        The number each rank of ``comm`` is known by in messages (braidpy.adjoint runs
        on a reversed communicator and names ranks as the user's communicator does).
        Default: its rank in COMM_WORLD, the number mpiexec gave it, so that a failure
        in a sub-communicator (a data group's layer ranks) names the rank the user
        knows; looked up only when a message is written.
    """

    def __init__(self, comm: Any, what: str, ranks: Optional[Sequence[int]] = None):
        self.comm = comm
        self.what = what
        self.rank, self.size = rank_size(comm)
        self._ranks = None if ranks is None else list(ranks)

    @property
    def ranks(self) -> List[int]:
        if self._ranks is None:
            world = _world_numbers(self.comm, self.size) if self.size > 1 else None
            self._ranks = list(range(self.size)) if world is None else world
        return self._ranks

    def _exchange(self, summary: Optional[str]) -> List[Optional[str]]:
        return allgather_texts(self.comm, summary)

    def _remote_failure(self, summaries: List[Optional[str]]) -> BraidError:
        where = [f"rank {self.ranks[r]}: {s}" for r, s in enumerate(summaries) if s is not None]
        error = BraidError(f"{self.what} failed on another rank ({'; '.join(where)})")
        _mark_agreed(error, self._members())
        return error

    def _members(self) -> FrozenSet[Any]:
        return _members(self.comm)

    def _already_agreed(self, error: BaseException) -> bool:
        """True when every rank of this agreement already raised ``error`` (or its
        BraidError) together at an inner agreement point (module docstring)."""
        if self.size == 1:
            return False
        among = _agreed_among(error)
        return bool(among) and self._members() <= among

    def _note(self, error: BaseException, where: str) -> None:
        if self.size == 1:
            return
        try:  # an exception of the user's may refuse notes: the original still wins
            error.add_note(f"braidpy: raised in {where} on rank {self.ranks[self.rank]} "
                           f"of {self.size}; all ranks stopped")
        except BaseException:  # noqa: BLE001 - AttributeError before Python 3.11, or any
            pass

    def settle(self, error: Optional[BaseException], where: str = "",
               summary: Optional[str] = None) -> None:
        """Agree on ``error`` (this rank's failure, or None): returns when no rank failed,
        raises ``error`` here if it is not None, :class:`BraidError` otherwise.

        ``summary`` is what the other ranks are told (default: ``where`` and the error);
        a rank may also pass a summary with ``error=None`` to make every rank raise
        BraidError (a failure that has no Python exception here, e.g. a poisoned message).
        A deferred Ctrl-C (:mod:`braidpy.parallel.interrupts`) is this rank's failure
        when it has no other.
        """
        if error is not None and self._already_agreed(error):
            try:
                raise error
            finally:
                del error
        if error is None and summary is None:
            error = take_interrupt()
        if error is not None and summary is None:
            summary = f"{where} raised {describe(error)}" if where else describe(error)
        summaries = self._exchange(summary)
        try:
            self.conclude(error, summaries, where)
        finally:
            del error  # no exception <-> frame cycle (module docstring)

    def settle_gathering(self, error: Optional[BaseException], values: Sequence[int],
                         where: str = "") -> np.ndarray:
        """:meth:`settle`, whose exchange also carries this rank's ``values`` (ints, the
        same count on every rank; anything of that count when ``error`` is not None):
        every rank's values as rows of an int64 array once no rank failed. One
        collective where an agreement followed by a gather of the values takes two.
        """
        if error is not None and self._already_agreed(error):
            try:
                raise error
            finally:
                del error
        if error is None:
            error = take_interrupt()
        summary = None if error is None else \
            (f"{where} raised {describe(error)}" if where else describe(error))
        summaries, rows = allgather_texts_and_ints(self.comm, summary, values)
        try:
            self.conclude(error, summaries, where)
        finally:
            del error  # no exception <-> frame cycle (module docstring)
        return rows

    def conclude(self, error: Optional[BaseException], summaries: List[Optional[str]],
                 where: str = "") -> None:
        """Raise what :meth:`settle` raises once every rank's summary is known (None:
        that rank did not fail): ``error`` here if it is not None, :class:`BraidError`
        if another rank failed. For a collective that carries the summaries itself
        (a broadcast from the one rank that can fail there) in place of the exchange."""
        if error is not None:
            self._note(error, where or self.what)
            _mark_agreed(error, self._members())
            try:
                raise error
            finally:
                del error  # no exception <-> frame cycle (module docstring)
        if any(s is not None for s in summaries):
            raise self._remote_failure(summaries)

    # Context-manager form: the block's own exception propagates untouched (returning
    # False from __exit__ re-raises it without a frame of ours holding it).
    def __enter__(self) -> "Agreement":
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        # Any exception, KeyboardInterrupt included, is announced first: the peers must
        # learn of it instead of waiting for this rank in their next collective; unless
        # they all raised it together already, at an inner agreement point.
        if error is not None and self._already_agreed(error):
            return False
        interrupt = take_interrupt() if error is None else None
        failure = error if error is not None else interrupt
        summaries = self._exchange(None if failure is None else describe(failure))
        if error is not None:
            self._note(error, self.what)
            _mark_agreed(error, self._members())
            return False
        if interrupt is not None:
            self._note(interrupt, self.what)
            _mark_agreed(interrupt, self._members())
            try:
                raise interrupt
            finally:
                del interrupt, failure
        if any(s is not None for s in summaries):
            raise self._remote_failure(summaries)
        return False


def agreed(comm: Any, what: str, ranks: Optional[Sequence[int]] = None) -> Agreement:
    """An :class:`Agreement` over ``comm``: ``with agreed(comm, "what"): ...``.

    >>> with agreed(None, "a serial block"):
    ...     x = 1 + 1
    >>> with agreed(None, "a serial block"):
    ...     raise ValueError("bad")
    Traceback (most recent call last):
    ...
    ValueError: bad
    """
    return Agreement(comm, what, ranks)


def agreement_point(comm: Any, what: str, ranks: Optional[Sequence[int]] = None) -> None:
    """An agreement with nothing to run: raises if another rank failed before reaching
    it (or a Ctrl-C waits here). Placed before a collective inside a guarded block, it
    is where the peers of a rank that failed in the block's local work meet it.

    >>> agreement_point(None, "before the reduction")
    """
    Agreement(comm, what, ranks).settle(None)
