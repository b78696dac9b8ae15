"""Ranks that take different paths: entry agreements, exit notices and a deadline.

MPI gives no guarantee when one rank calls a collective its peers never call: they wait
forever. braidpy's collective entry points (``Core`` creation, ``Core.solve``,
``Trainer.step``, ``run``, ``save``, ``state``, ``LayerParallel``'s forward and backward)
make that visible:

- **Entry agreement.** Each entry point opens with one exchange over its communicator
  carrying the entry point's name and the object's call counter (how many entry calls
  this rank made on that ``Core`` or ``Trainer``). Ranks that arrive from different
  calls, or from different counts of calls, all raise :class:`braidpy.BraidError`
  naming each rank's call and count. A ``solve`` folds its cold-start agreement into
  this exchange, so it costs no extra collective.
- **Deadline.** The exchange is non-blocking and braidpy waits for it with a deadline
  of ``BRAIDPY_TIMEOUT`` seconds (default :data:`DEFAULT_TIMEOUT`). A rank stalled
  there for a moment tells its peers where it waits; past the deadline it names the
  ranks it is missing and what each was last seen doing, tells its peers it gave up
  (they raise at once) and raises.
- **Exit notice.** A process that used braidpy over several ranks tells those ranks
  when it leaves (an ``atexit`` hook), with the calls it made. A peer waiting for it
  raises at once, naming it; the leaving rank hears back which call its peers wait in,
  prints that error and leaves with exit code 1.

These notices travel as small JSON texts (never pickle) on ``MPI.COMM_WORLD`` with one
reserved tag (:data:`NOTICE_TAG`). What is not covered (docs/errors.md): a rank blocked
inside user code or inside an MPI call outside braidpy never answers; braidpy's peers
then raise at the deadline, but that rank stays blocked until the job is stopped.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._errors import BraidError
from .comm import Backoff, complete, mpi, rank_size, sleeping_backoff, sleeping_waits

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_VARIABLE", "NOTICE_TAG", "timeout_seconds",
           "entry", "note_call", "wait", "world_ranks", "announce_failure", "departed",
           "last_seen", "Calls"]

TIMEOUT_VARIABLE = "BRAIDPY_TIMEOUT"
#: Seconds braidpy waits for the other ranks at an entry point: generous, since a peer may
#: legitimately still be computing (a long validation, a checkpoint on a slow disk).
DEFAULT_TIMEOUT = 600.0
#: The tag of braidpy's notices on MPI.COMM_WORLD (below 32768, the least MPI allows).
NOTICE_TAG = 32109
# How long a leaving process waits to hear from its peers (each either leaves as well or
# says which call it waits in); a peer busy in user code does not answer.
EXIT_GRACE = 2.0

# The entry points, by code on the wire.
NAMES = ("", "making a Core", "Core.solve", "Trainer.step", "Trainer.run", "Trainer.save",
         "Trainer.state", "LayerParallel.forward", "LayerParallel.backward")
_CODE = {name: code for code, name in enumerate(NAMES)}

_cached_timeout: Tuple[Optional[str], float] = (None, DEFAULT_TIMEOUT)


def timeout_seconds(environ: Optional[Dict[str, str]] = None) -> float:
    """The deadline of braidpy's waits for other ranks: ``BRAIDPY_TIMEOUT`` seconds (a
    number > 0; "inf" waits for ever), :data:`DEFAULT_TIMEOUT` when unset or empty.

    >>> timeout_seconds({"BRAIDPY_TIMEOUT": "30"}), timeout_seconds({})
    (30.0, 600.0)
    >>> timeout_seconds({"BRAIDPY_TIMEOUT": "0"})
    Traceback (most recent call last):
    ...
    ValueError: BRAIDPY_TIMEOUT must be a number of seconds > 0 (or inf), got '0'
    """
    global _cached_timeout
    text = (os.environ if environ is None else environ).get(TIMEOUT_VARIABLE, "")
    if environ is None and text == _cached_timeout[0]:
        return _cached_timeout[1]
    value = DEFAULT_TIMEOUT
    if text.strip():
        try:
            value = float(text) if text.strip().isascii() else math.nan
        except ValueError:
            value = math.nan
        if not value > 0:  # NaN, zero, negative
            raise ValueError(f"{TIMEOUT_VARIABLE} must be a number of seconds > 0 (or inf), "
                             f"got {text!r}")
    if environ is None:
        _cached_timeout = (text, value)
    return value


# ------------------------------------------------------------------ this process
_did: Counter = Counter()  # (entry point, "serial" | "N ranks") -> calls, for notices
_peers: set = set()  # COMM_WORLD ranks this process shared a braidpy communicator with
_left: Dict[int, str] = {}  # world rank -> what it did before it left
_failed: Dict[int, Tuple[Tuple[int, ...], str]] = {}  # world rank -> (members, why)
_waiting: Dict[int, Dict[str, Any]] = {}  # world rank -> the wait it announced
_hook = False


def note_call(name: str, size: int) -> None:
    """Counts an entry call of this process (told to its peers when it leaves)."""
    _did[(name, "serial" if size == 1 else f"{size} ranks")] += 1


def _did_text() -> str:
    if not _did:
        return "none"
    return ", ".join(f"{name} x{n} ({where})" for (name, where), n in _did.items())


def world_ranks(comm: Any) -> Optional[Tuple[int, ...]]:
    """The COMM_WORLD ranks of ``comm``'s members (None: serial, or not translatable)."""
    _, size = rank_size(comm)
    if size == 1:
        return None
    from .agree import _world_numbers  # (agree imports this module's users)
    ranks = _world_numbers(comm, size)
    return None if ranks is None else tuple(ranks)


class Calls:
    """The entry-call counter of one Core or Trainer (its communicator's calls)."""

    __slots__ = ("total", "by_name", "members")

    def __init__(self, comm: Any = None):
        self.total = 0
        self.by_name: Counter = Counter()
        self.members = world_ranks(comm)

    def count(self, name: str) -> Tuple[int, int]:
        self.total += 1
        self.by_name[name] += 1
        return self.total, self.by_name[name]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def entry(comm: Any, calls: Calls, name: str, extra: Sequence[int] = (0, 0),
          labels: Optional[Sequence[int]] = None, hint: str = "",
          explain: Optional[Callable[[np.ndarray, List[Any]], str]] = None
          ) -> Optional[np.ndarray]:
    """The entry agreement of ``name`` over ``comm`` (module docstring): every rank's row
    ``[code, total calls, calls of name, *extra]`` (``extra``: two ints the caller
    agrees on as well), or BraidError on every rank when the ranks arrived from
    different calls. ``labels``: the numbers ranks are known by (default COMM_WORLD's);
    ``hint``: what the caller's users must do, added to that error; ``explain(rows,
    ranks)``: a sentence the caller reads from the rows (which rank missed which call),
    put before the rows in that error.
    Serially (``comm`` None or of one rank) the call is counted and None returned.
    """
    rank, size = rank_size(comm)
    total, mine = calls.count(name)
    note_call(name, size)
    if size == 1:
        return None
    row = np.array([_CODE[name], total, mine, *extra], dtype=np.int64)
    members = calls.members
    out = np.empty((size, row.size), dtype=np.int64)
    request = comm.Iallgather(row, out)
    what = f"{name} (call #{total} on this communicator)"
    wait(request, members, what, (name, total))
    if (out[:, :3] != out[0, :3]).any():
        who = list(labels) if labels is not None else \
            list(members) if members is not None else list(range(size))
        lines = [f"rank {who[r]} called {NAMES[int(c)] or '?'} (its {_ordinal(int(n))} "
                 f"{NAMES[int(c)] or 'call'}, call #{int(t)} on this communicator)"
                 for r, (c, t, n) in enumerate(out[:, :3].tolist())]
        said = explain(out, who) if explain is not None else ""
        raise BraidError("the ranks took different paths through braidpy: "
                         + (f"{said}: " if said else "") + "; ".join(lines)
                         + " (every rank must make the same braidpy calls on a "
                         "communicator, in the same order"
                         + (f"; {hint}" if hint else "") + ")")
    return out


# ------------------------------------------------------------------ the notices
def _register_hook() -> None:
    global _hook
    if not _hook:
        _hook = True
        atexit.register(_at_exit)



def _world():
    MPI = mpi()
    return MPI, MPI.COMM_WORLD


def _send(targets, message: Dict[str, Any]) -> list:
    MPI, world = _world()
    me = world.Get_rank()
    data = json.dumps(message).encode()
    return [world.Isend([data, MPI.BYTE], dest=int(r), tag=NOTICE_TAG)
            for r in sorted(set(targets)) if r != me]


def _drain() -> None:
    """Takes every notice that has arrived (non-blocking)."""
    MPI, world = _world()
    status = MPI.Status()
    while world.Iprobe(MPI.ANY_SOURCE, NOTICE_TAG, status):
        source = status.Get_source()
        buf = bytearray(status.Get_count(MPI.BYTE))
        world.Recv([buf, MPI.BYTE], source=source, tag=NOTICE_TAG)
        try:
            notice = json.loads(buf.decode("utf-8", "replace"))
            kind = notice["kind"]
        except (ValueError, KeyError, TypeError):
            continue  # not braidpy's: a user's message with our tag is dropped
        if kind == "leave":
            _left[source] = str(notice.get("did", ""))
        elif kind in ("failed", "gave up"):
            _failed[source] = (tuple(notice.get("members") or ()), str(notice.get("why", "")))
        elif kind == "wait":
            _waiting[source] = notice
        elif kind == "done":
            _waiting.pop(source, None)


def announce_failure(members: Optional[Sequence[int]], why: str) -> None:
    """Tells the other ranks of a communicator (``members``, COMM_WORLD ranks) that this
    rank will not join their next exchange, and why; a peer waiting there raises with
    ``why``. Nothing when serial."""
    if members:
        for request in _send(members, {"kind": "failed", "members": list(members),
                                       "why": why}):
            request.Free()


def departed(ranks: Sequence[int]) -> Dict[int, str]:
    """Of ``ranks`` (COMM_WORLD ranks), those that told this process they left the
    program or failed, each with what it said (non-blocking: takes the notices that
    have arrived). For a rank that serves peers by messages of its own (asynchronous
    EASGD's centre) instead of waiting in :func:`wait`."""
    _drain()
    me = _world()[1].Get_rank()
    out = {}
    for r in ranks:
        if r in _failed and r != me and (not _failed[r][0] or me in _failed[r][0]):
            out[r] = _failed[r][1]
        elif r in _left and r != me:
            out[r] = f"rank {r} left the program (its braidpy calls: {_left[r]})"
    return out


def last_seen(r: int) -> str:
    """What COMM_WORLD rank ``r`` was last seen waiting in (its notices), for messages."""
    seen = _waiting.get(r)
    return f"rank {r} waits in {seen.get('what', '?')}" if seen is not None else \
        f"rank {r} is in no braidpy wait (busy or blocked in user code, in an MPI call " \
        f"outside braidpy, or it never made this call)"


def _problem(members: Tuple[int, ...], me: int) -> Optional[str]:
    """Why the wait of a communicator of ``members`` cannot end, if a notice says so."""
    for r in members:  # a failure first: it says more than the exit that followed it
        if r in _failed and r != me:
            among, why = _failed[r]
            if not among or me in among:
                return why
    for r in members:
        if r in _left and r != me:
            return f"rank {r} left the program (its braidpy calls: {_left[r]})"
    return None


def _missing(members: Tuple[int, ...], me: int, key: Tuple[str, int]) -> List[str]:
    out = []
    for r in members:
        if r == me:
            continue
        seen = _waiting.get(r)
        if seen is None:
            out.append(f"rank {r} is in no braidpy wait (busy or blocked in user code, in "
                       f"an MPI call outside braidpy, or it never made this call)")
        elif tuple(seen.get("members") or ()) != members or \
                (seen.get("name"), seen.get("total")) != key:
            out.append(f"rank {r} waits in {seen.get('what', '?')}")
    return out


def wait(request: Any, members: Optional[Tuple[int, ...]], what: str,
         key: Tuple[str, int] = ("", 0), limit: Optional[float] = None) -> None:
    """Completes ``request`` (a collective over a communicator of ``members``, or a
    message from one of them) or raises BraidError: when a member left or failed, or
    past the deadline (module docstring). ``what``: the call this rank waits in, for
    messages; ``limit``: the deadline in seconds (default :func:`timeout_seconds`;
    ``math.inf``: none, only the notices end the wait)."""
    if members is None:  # a communicator MPI cannot place in COMM_WORLD: no notices
        complete(request)
        return
    if not _peers.issuperset(members):  # this process now tells them when it leaves
        _register_hook()
        _peers.update(members)
    if request.Test():
        return
    if limit is None:
        limit = timeout_seconds()
    MPI, world = _world()
    me = world.Get_rank()
    start = time.monotonic()
    told: Optional[bool] = False  # None: told the leaving peer; True: told the waiters
    # Yield the core for the first milliseconds (peers a moment behind: MPI's own wait
    # would poll), then sleep longer, up to 1 ms between looks; with more ranks than
    # cores, short sleeps at once (the peer needs this core).
    pause = sleeping_backoff() if sleeping_waits() else Backoff()
    try:
        while True:
            _drain()
            problem = _problem(members, me)
            if problem is not None and _completes(request):
                return  # the peer finished this exchange before it left
            if problem is not None:
                if told is False:
                    told = None  # the peer that left hears where this rank waits
                    _tell_waiting(members, me, what, key)
                raise BraidError(f"rank {me} waits in {what} for a rank that will not join "
                                 f"it: {problem}")
            if request.Test():
                return
            waited = time.monotonic() - start
            if told is False and waited > min(1.0, limit / 4):
                told = True
                _tell_waiting(members, me, what, key)
            if waited > limit:
                missing = _missing(members, me, key)
                text = (f"rank {me} waited {limit:g} s ({TIMEOUT_VARIABLE}) in {what} for "
                        f"the other ranks of its communicator (COMM_WORLD ranks "
                        f"{', '.join(map(str, members))}): "
                        + ("; ".join(missing) or "each joined, but the exchange did not "
                           "complete"))
                for r in _send(members, {"kind": "gave up", "members": list(members),
                                         "why": f"rank {me} gave up: {text}"}):
                    r.Free()
                raise BraidError(text)
            pause()
    finally:
        if told:
            for r in _send(members, {"kind": "done"}):
                r.Free()


def _completes(request: Any, seconds: float = 0.2) -> bool:
    """Whether ``request`` completes within ``seconds``: a peer may complete its part of
    a collective and leave before this rank's part has progressed."""
    end = time.monotonic() + seconds
    while not request.Test():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def _tell_waiting(members: Tuple[int, ...], me: int, what: str, key: Tuple[str, int]) -> None:
    for r in _send(members, {"kind": "wait", "members": list(members), "what": what,
                             "name": key[0], "total": key[1]}):
        r.Free()


def _at_exit() -> None:
    """Tells the peers this process leaves; reports a peer still waiting for it."""
    if "mpi4py.MPI" not in sys.modules:  # a serial run: never imports MPI here
        return
    try:
        MPI, world = _world()
        if MPI.Is_finalized() or not MPI.Is_initialized() or world.Get_size() == 1:
            return
        me = world.Get_rank()
        # The ranks it shared braidpy communicators with; all of them when it made no
        # parallel braidpy call (it may have skipped its peers' first one).
        peers = (_peers or set(range(world.Get_size()))) - {me}
        if not peers:
            return
        requests = _send(peers, {"kind": "leave", "did": _did_text()})
        deadline = time.monotonic() + min(EXIT_GRACE, timeout_seconds())
        while time.monotonic() < deadline:
            _drain()
            if all(r in _left or r in _waiting or r in _failed for r in peers):
                break
            time.sleep(0.001)
        waiting = {r: n for r, n in _waiting.items() if r in peers
                   and me in (n.get("members") or ())}
        MPI.Request.Testall(requests)
    except Exception:  # noqa: BLE001 - leaving regardless: MPI may be unusable now
        return
    if not waiting:
        return
    lines = "; ".join(f"rank {r} waits in {n.get('what', '?')}"
                      for r, n in sorted(waiting.items()))
    sys.stderr.write(f"braidpy.BraidError: rank {me} left the program while other ranks "
                     f"wait for it ({lines}); its braidpy calls: {_did_text()}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        MPI.Finalize()
    finally:
        os._exit(1)


# At import: a process that leaves without ever calling braidpy over MPI (it skipped
# every collective call) still tells its peers. (mpi4py finalizes MPI after the atexit
# hooks; this one never imports MPI.)
_register_hook()
