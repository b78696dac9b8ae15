"""Ctrl-C under MPI: delivered where every rank can stop together.

Python raises ``KeyboardInterrupt`` at whatever bytecode the main thread is running
when SIGINT arrives. On one rank of a parallel solve that is fatal to the others: the
rank leaves in the middle of a cycle and its peers wait for it in their next receive or
collective forever. Inside :func:`deferred_interrupts` SIGINT is instead

- raised inside a user callback when one is running (the compiled core captures it
  like any callback error), or
- handed to the running solve, which stops on every rank at its next agreement point
  (within one cycle), or
- kept pending and raised by the next agreement (:mod:`braidpy.parallel.agree`), or
  when the outermost block ends.

So every rank ends together: the interrupted rank raises ``KeyboardInterrupt``, the
others :class:`braidpy.BraidError` naming it. Deferral works in the main thread only
(where Python runs signal handlers) and only replaces Python's default SIGINT handler:
a handler of your own is left alone.

>>> with deferred_interrupts():
...     interrupt_pending()
False
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional

__all__ = ["deferred_interrupts", "interrupt_pending", "take_interrupt", "routed_to",
           "postpone_interrupt"]

# A target decides what a SIGINT means while it is active: True = raise
# KeyboardInterrupt now (a callback is running), False = taken over (the target
# will stop at its own agreement point).
Target = Callable[[], bool]


class _Deferral:
    """Process-wide state; touched only by the main thread."""

    depth = 0
    pending = False
    saved: Any = None
    targets: List[Target] = []


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_sigint(signum: int, frame: Any) -> None:
    if _Deferral.targets:
        if _Deferral.targets[-1]():
            raise KeyboardInterrupt
        return
    _Deferral.pending = True


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Within the block, SIGINT waits for an agreement point (see the module docstring).

    Nested blocks are one block; a no-op outside the main thread or when SIGINT has
    a handler other than Python's default. A pending interrupt that no agreement took
    is raised when the outermost block ends without another exception.
    """
    if not _in_main_thread():
        yield
        return
    outermost = _Deferral.depth == 0
    if outermost:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield  # a handler of the user's own (or SIG_IGN): leave it alone
            return
        _Deferral.saved = signal.signal(signal.SIGINT, _on_sigint)
        _Deferral.pending = False
    _Deferral.depth += 1
    failed = True
    try:
        yield
        failed = False
    finally:
        _Deferral.depth -= 1
        if outermost:
            signal.signal(signal.SIGINT, _Deferral.saved)
            _Deferral.saved = None
            pending, _Deferral.pending = _Deferral.pending, False
            if pending and not failed:
                raise KeyboardInterrupt


@contextmanager
def routed_to(target: Target) -> Iterator[None]:
    """Within the block, a deferred SIGINT goes to ``target`` (a running solve)."""
    if not (_in_main_thread() and _Deferral.depth):
        yield
        return
    _Deferral.targets.append(target)
    try:
        yield
    finally:
        _Deferral.targets.pop()


def interrupt_pending() -> bool:
    """True when a deferred SIGINT waits for an agreement (main thread only)."""
    return _in_main_thread() and _Deferral.pending


def take_interrupt() -> Optional[KeyboardInterrupt]:
    """The pending interrupt as a ``KeyboardInterrupt`` to raise (and no longer
    pending), or None."""
    if not interrupt_pending():
        return None
    _Deferral.pending = False
    return KeyboardInterrupt()


def postpone_interrupt() -> None:
    """Make a SIGINT that a target took too late (after its last agreement point)
    pending again, for the next agreement (main thread, inside a deferral)."""
    if _in_main_thread() and _Deferral.depth:
        _Deferral.pending = True
    else:
        raise KeyboardInterrupt
