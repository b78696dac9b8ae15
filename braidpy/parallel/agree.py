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

The failing rank re-raises without leaving an exception <-> frame reference cycle
(``try: raise ... finally: del ...``): an object whose ``__del__`` frees a
communicator is then freed by reference counting at the same point on every rank,
never by a garbage collection that runs at different moments on different ranks (which
can hang MPI implementations whose communicator free synchronises).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, List, Literal, Optional, Sequence, Type

from .._errors import BraidError
from .collectives import allgather_texts
from .comm import rank_size
from .interrupts import take_interrupt

__all__ = ["agreed", "Agreement", "describe", "safe_text"]


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
    """

    def __init__(self, comm: Any, what: str, ranks: Optional[Sequence[int]] = None):
        self.comm = comm
        self.what = what
        self.rank, self.size = rank_size(comm)
        self.ranks = list(range(self.size)) if ranks is None else list(ranks)

    def _exchange(self, summary: Optional[str]) -> List[Optional[str]]:
        return allgather_texts(self.comm, summary)

    def _remote_failure(self, summaries: List[Optional[str]]) -> BraidError:
        where = [f"rank {self.ranks[r]}: {s}" for r, s in enumerate(summaries) if s is not None]
        return BraidError(f"{self.what} failed on another rank ({'; '.join(where)})")

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
        if error is None and summary is None:
            error = take_interrupt()
        if error is not None and summary is None:
            summary = f"{where} raised {describe(error)}" if where else describe(error)
        summaries = self._exchange(summary)
        if error is not None:
            self._note(error, where or self.what)
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
        # learn of it instead of waiting for this rank in their next collective.
        interrupt = take_interrupt() if error is None else None
        failure = error if error is not None else interrupt
        summaries = self._exchange(None if failure is None else describe(failure))
        if error is not None:
            self._note(error, self.what)
            return False
        if interrupt is not None:
            self._note(interrupt, self.what)
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
