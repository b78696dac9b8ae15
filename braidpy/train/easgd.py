"""Synchronous elastic averaging SGD over the data communicator (You, Buluç and Demmel,
"Scaling deep learning on GPU and Knights Landing clusters", SC 2017).

Each data group i keeps its own parameters W_i, and every rank also keeps a copy of
the centre variable W̄. Between communications a group takes plain local steps (SGD,
or momentum SGD). Every ``tau``-th step it also feels an elastic pull towards the
centre, and the centre moves towards the groups. These are equations (1) and (2) of
You et al. 2017, after Zhang, Choromanska and LeCun, "Deep learning with elastic averaging
SGD", NeurIPS 2015:

    W_i <- W_i - lr (g_i + rho (W_i - W̄))
    W̄   <- W̄ + lr rho sum_i (W_i - W̄)

With momentum mu (equations (5) and (6), "MEASGD") the local step becomes
``V_i <- mu V_i - lr g_i`` and ``W_i <- W_i + V_i - lr rho (W_i - W̄)``.

The sum over groups is one MPI allreduce of the flat parameters, and the centre
update is computed identically on every rank from it. So no rank is a master and the
result is deterministic. That is You et al.'s "Sync EASGD" with the centre replicated
instead of held by a master. The optimizer follows braidpy.train's interface
(``step``, ``state_dict``, ``load_state_dict``), so a checkpoint resumes it exactly.

>>> import numpy as np
>>> opt = SyncEASGD(None, lr=0.5, rho=1.0, tau=1)
>>> w = np.array([2.0])
>>> info = opt.step(w, 0.0, w - 1.0)  # one group: the centre follows it
>>> w, opt.center
(array([1.5]), array([2.]))
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .._errors import BraidError
from ..parallel import paths
from ..parallel.agree import describe
from ..parallel.comm import free_quietly, rank_size
from ..parallel.fingerprint import same_everywhere
from ..parallel.interrupts import take_interrupt

__all__ = ["SyncEASGD", "AsyncEASGD"]


def _number(name: str, value: Any, low: float, low_open: bool, high: float = np.inf) -> float:
    ok = isinstance(value, (int, float, np.floating, np.integer)) and \
        not isinstance(value, bool) and np.isfinite(value) and \
        (value > low if low_open else value >= low) and value < high
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        upper = "" if high == np.inf else f" and < {high}"
        raise ValueError(f"{name} must be a number {bound}{upper}, got {value!r}")
    return float(value)


def _elastic_options(lr: Any, rho: Any, tau: Any, momentum: Any) -> Tuple[float, float, int,
                                                                          float]:
    """(lr, rho, tau, momentum) checked, each error naming its value."""
    if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
        raise ValueError(f"tau must be an int >= 1, got {tau!r}")
    return (_number("lr", lr, 0.0, True), _number("rho", rho, 0.0, False), int(tau),
            _number("momentum", momentum, 0.0, False, 1.0))


def _local_step(params: np.ndarray, grad: np.ndarray, lr: float, momentum: float,
                velocity: np.ndarray) -> None:
    """A worker's own step, in place: SGD, or momentum SGD (equation (5))."""
    if momentum > 0.0:
        velocity *= momentum
        velocity -= lr * grad
        params += velocity
    else:
        params -= lr * grad


class SyncEASGD:
    """Synchronous EASGD (module docstring) over ``comm``, the data communicator.

    Parameters
    ----------
    comm : mpi4py communicator or None
        The data communicator (one group: the centre simply trails the parameters).
    lr : float
        Step size eta.
    rho : float
        Elastic strength; ``lr * rho * groups`` must stay below 1 for the centre update
        to be a contraction (the paper's stability condition).
    tau : int
        Communication period: the elastic pull and the allreduce every tau-th step.
    momentum : float
        mu of MEASGD (0: plain EASGD). Default 0.9, You et al. 2017's rule of thumb for
        the momentum rate: plain EASGD at lr 0.05 reached 19% on digits in 40 steps
        of two groups, MEASGD 93%.
    before_reduction : callable, optional
        Called with a description before each allreduce: the trainer's agreement point
        (:func:`braidpy.parallel.agree.agreement_point`), where the other groups meet
        a rank that failed in its own work instead of waiting in the reduction.
    """

    name = "easgd"
    needs_objective = False

    def __init__(self, comm: Any, lr: float = 0.05, rho: float = 1.0, tau: int = 1,
                 momentum: float = 0.9,
                 before_reduction: Optional[Callable[[str], None]] = None):
        self.comm = comm
        self.before_reduction = before_reduction
        self.lr, self.rho, self.tau, self.momentum = _elastic_options(lr, rho, tau, momentum)
        _, self.groups = rank_size(comm)
        if self.lr * self.rho * self.groups >= 1.0:
            raise ValueError(f"lr * rho * groups = {self.lr * self.rho * self.groups:g} must "
                             f"be < 1 (the centre update would not contract; lr {self.lr:g}, "
                             f"rho {self.rho:g}, {self.groups} data group(s))")
        self.center: Optional[np.ndarray] = None
        self.velocity: Optional[np.ndarray] = None
        self.steps = 0

    def _sum_over_groups(self, params: np.ndarray) -> np.ndarray:
        if self.groups == 1:
            return params.copy()
        if self.before_reduction is not None:
            self.before_reduction("the elastic averaging")
        from ..parallel.comm import mpi

        total = np.empty_like(params)
        self.comm.Allreduce(np.ascontiguousarray(params), total, op=mpi().SUM)
        return total

    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Callable[[np.ndarray], float]] = None) -> Dict[str, Any]:
        """One step of this group, in place (collective every tau-th step)."""
        if self.center is None:  # all groups start from the same parameters
            self.center = params.copy()
            self.velocity = np.zeros_like(params)
        assert self.velocity is not None
        self.steps += 1
        pull = self.steps % self.tau == 0
        if pull:
            # Both updates use W_i and W̄ from before this step (equations (1), (2)).
            elastic = self.rho * (params - self.center)
            total = self._sum_over_groups(params)
            center_move = self.lr * self.rho * (total - self.groups * self.center)
        _local_step(params, grad, self.lr, self.momentum, self.velocity)
        if pull:
            params -= self.lr * elastic
            self.center += center_move
        return {"step_size": self.lr, "trials": 0, "communicated": pull}

    def state_dict(self) -> Dict[str, Any]:
        return {"center": None if self.center is None else self.center.copy(),
                "velocity": None if self.velocity is None else self.velocity.copy(),
                "steps": self.steps}

    def load_state_dict(self, state: Dict[str, Any], nparams: Optional[int] = None) -> None:
        """The state of :meth:`state_dict`: ``center`` and ``velocity`` vectors of
        ``nparams`` finite numbers (or None), ``steps`` an int >= 0; a ValueError names
        the field otherwise."""
        center = _state_vector(state.get("center"), "center", nparams)
        velocity = _state_vector(state.get("velocity"), "velocity", nparams)
        if center is not None and velocity is not None and center.shape != velocity.shape:
            raise ValueError(f"easgd optimizer state: fields 'center' and 'velocity' hold "
                             f"{center.size} and {velocity.size} numbers")
        steps = state.get("steps", 0)
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
            raise ValueError(f"easgd optimizer state: field 'steps' must be an int >= 0, "
                             f"got {steps!r}")
        self.center, self.velocity, self.steps = center, velocity, int(steps)


def _state_vector(value: Any, field: str, nparams: Optional[int]) -> Optional[np.ndarray]:
    """A state field as a float64 vector (of ``nparams`` numbers when given), or None."""
    if value is None:
        return None
    try:
        a = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"easgd optimizer state: field {field!r} must hold numbers, got "
                         f"{type(value).__name__}") from None
    want = (nparams,) if nparams is not None else (a.size,)
    if a.ndim != 1 or a.shape != want:
        raise ValueError(f"easgd optimizer state: field {field!r} must hold a vector of "
                         f"{want[0]} numbers (one per parameter), got an array of shape "
                         f"{a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"easgd optimizer state: field {field!r} holds non-finite numbers")
    return a


# Tags of the asynchronous protocol (typed float64 buffers, UTF-8 bytes; no pickle).
_UPDATE, _REPLY, _DONE, _FAILED, _FINAL, _WHY = 41, 42, 43, 44, 45, 46
#: The longest failure description the protocol carries (bytes; longer is cut).
WHY_BYTES = 2000
#: How long the centre sleeps between polls for a message (seconds): the latency it
#: adds to an exchange, and how soon it sees a Ctrl-C.
POLL_SECONDS = 2e-4
#: Every this many polls without a message the centre reads braidpy's notices (a worker
#: that left the program) and checks each worker's silence against BRAIDPY_TIMEOUT.
NOTICE_POLLS = 50


class _Gone(Exception):
    """A worker that left the program (or failed) outside its session."""

    def __init__(self, worker: int, why: str):
        super().__init__(why)
        self.worker, self.why = worker, why


def _why_bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8", "replace")[:WHY_BYTES], dtype=np.uint8)


def _text(buf: np.ndarray) -> str:
    return buf.tobytes().decode("utf-8", "replace")


class AsyncEASGD:
    """Asynchronous EASGD with a centre rank served first come, first served (You et al.
    2017, "Async EASGD" and, with ``momentum``, "Async MEASGD").

    Every ``tau``-th step a worker sends its W_i to the centre rank, which replies with
    W̄ and then moves it, W̄ <- W̄ + lr rho (W_i - W̄), in the order the messages arrive.
    The worker then steps as in equation (1) (or (5)-(6)) with the W̄ it received.
    The result depends on that order, so runs are not bitwise repeatable.

    The centre rank calls :meth:`serve` (it returns the final W̄). The workers train
    inside ``with optimizer.session():``, calling :meth:`step`.

    Shutdown and failures: leaving the session sends "done"; an exception inside it
    sends "failed" with its description and is re-raised. After a failure, every later
    exchange is answered with "stop" and that description, and the worker raises
    :class:`braidpy.BraidError` naming the failed rank and its error. Workers that
    already finished learn it when they leave their session: the centre answers every
    "done" once all workers have ended. The centre raises the same BraidError. If the
    centre itself fails while serving (a Ctrl-C there included: it polls for messages,
    so it sees one at once), it keeps answering "stop" until every worker has ended and
    then raises its own exception; the workers raise BraidError naming the centre and
    its error. So no rank waits for a rank that has stopped.
    """

    name = "easgd-async"
    needs_objective = False

    def __init__(self, comm: Any, lr: float = 0.05, rho: float = 1.0, tau: int = 1,
                 momentum: float = 0.9, centre: int = 0):
        self.comm: Any = None  # our duplicate, once the arguments are checked
        self.rank, self.size = rank_size(comm)
        if self.size < 2:
            raise ValueError("AsyncEASGD needs a centre rank and at least one worker: a "
                             f"communicator of >= 2 ranks, got {self.size}")
        # Checked here, then compared across the ranks in one collective: a centre or an
        # option given differently on one rank (which left the workers waiting for a
        # centre that never serves) is one clear error on every rank.
        failure: Optional[BaseException] = None
        fields: Optional[Dict[str, Any]] = None
        try:
            if isinstance(centre, bool) or not isinstance(centre, (int, np.integer)) or \
                    not 0 <= centre < self.size:
                raise ValueError(f"centre must be a rank of the communicator "
                                 f"(0..{self.size - 1}), got {centre!r}")
            self.lr, self.rho, self.tau, self.momentum = _elastic_options(lr, rho, tau,
                                                                          momentum)
            if self.lr * self.rho >= 1.0:
                raise ValueError(f"lr * rho = {self.lr * self.rho:g} must be < 1")
            fields = {"centre": int(centre), "lr": self.lr, "rho": self.rho,
                      "tau": self.tau, "momentum": self.momentum}
        except Exception as exc:  # noqa: BLE001 - raised here by the check below
            failure = exc
        same_everywhere(comm, fields, "the asynchronous EASGD set-up", error=failure,
                        hint="every rank must make AsyncEASGD with the same centre, lr, "
                             "rho, tau and momentum")
        del failure
        self.centre = int(centre)
        # Our own duplicate: the protocol's tags never meet the user's messages.
        self.comm = comm.Dup()
        # COMM_WORLD ranks, for braidpy's notices (braidpy.parallel.paths): a worker's
        # waits for the centre end when the centre leaves or gives up, and the centre
        # learns of a worker that left without ending its session.
        self._world = paths.world_ranks(self.comm)
        self._stopped = False
        self.velocity: Optional[np.ndarray] = None
        # Workers: the W̄ of the latest exchange (None before the first); the centre:
        # the final W̄ once serve returns.
        self.center: Optional[np.ndarray] = None
        self.steps = 0
        self.exchanges = 0
        self.served: List[int] = []  # centre: the worker of each update, in order

    @property
    def is_centre(self) -> bool:
        return self.rank == self.centre

    def close(self) -> None:
        """Release the duplicate communicator (collective; also on garbage collection)."""
        comm, self.comm = getattr(self, "comm", None), None
        free_quietly(comm)

    def __del__(self):
        self.close()

    # ------------------------------------------------------------------ workers
    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Callable[[np.ndarray], float]] = None) -> Dict[str, Any]:
        """One step of this worker, in place (an exchange with the centre every tau-th)."""
        if self.is_centre:
            raise RuntimeError("the centre rank serves (AsyncEASGD.serve); it takes no steps")
        if self.velocity is None:
            self.velocity = np.zeros_like(params)
        self.steps += 1
        elastic = None
        if self.steps % self.tau == 0:
            self.center = self._exchange(params)
            elastic = self.rho * (params - self.center)
        _local_step(params, grad, self.lr, self.momentum, self.velocity)
        if elastic is not None:
            params -= self.lr * elastic
        return {"step_size": self.lr, "trials": 0, "communicated": elastic is not None}

    def _exchange(self, params: np.ndarray) -> np.ndarray:
        mine = np.ascontiguousarray(params, dtype=np.float64)
        what = f"an asynchronous EASGD exchange with the centre (its step {self.steps})"
        self._wait(self.comm.Isend(mine, self.centre, _UPDATE), what)
        reply = np.empty(mine.size + 1)
        self._wait(self.comm.Irecv(reply, self.centre, _REPLY), what)
        self.exchanges += 1
        if reply[0] != 0.0:
            self._stopped = True
            raise BraidError(self._stopped_by(int(reply[0]) - 1, self._receive_why()))
        return reply[1:].reshape(params.shape).copy()

    def _wait(self, request: Any, what: str, limit: Optional[float] = None) -> None:
        """Completes ``request`` (a message to or from the centre) under braidpy's
        notices and deadline (:func:`braidpy.parallel.paths.wait`): a centre that left
        the program or gave up, or that does not answer within ``BRAIDPY_TIMEOUT``
        seconds (``limit``), is a BraidError naming it instead of a wait for ever."""
        world = self._world
        members = None if world is None else (world[self.centre], world[self.rank])
        try:
            paths.wait(request, members, what, ("easgd", self.steps), limit)
        except BaseException:
            self._stopped = True  # the centre is gone or elsewhere: nothing to tell it
            try:
                request.Cancel()
                request.Free()
            except Exception:  # noqa: BLE001 - MPI may refuse; leaving anyway
                pass
            raise

    def _receive_why(self) -> str:
        """The failure description the centre sends after every "stop"."""
        from ..parallel.comm import mpi

        MPI = mpi()
        status = MPI.Status()
        self.comm.Probe(self.centre, _WHY, status)  # sent right after the "stop"
        buf = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
        self.comm.Recv([buf, MPI.BYTE], self.centre, _WHY)
        return _text(buf[:WHY_BYTES])

    def state_dict(self) -> Dict[str, Any]:
        """Refused: a run's numbers depend on the order the centre served the workers,
        so no saved state continues it exactly."""
        raise ValueError("asynchronous EASGD cannot be checkpointed: its updates depend on "
                         "the order messages reach the centre, so no saved state resumes "
                         "it exactly (use the optimizer easgd for checkpoints)")

    def load_state_dict(self, state: Dict[str, Any], nparams: Optional[int] = None) -> None:
        self.state_dict()  # raises

    @contextmanager
    def session(self) -> Iterator["AsyncEASGD"]:
        """A worker's training loop runs inside: it tells the centre when it ends, and
        how (see the class docstring)."""
        self._stopped = False
        try:
            yield self
        except BaseException as exc:
            if not self._stopped:  # tell the centre (and what failed); it stops the others
                self.comm.Send(_why_bytes(describe(exc)), self.centre, _FAILED)
            raise
        self.comm.Send(np.empty(0), self.centre, _DONE)
        final = np.empty(1)
        # The centre answers once every worker has ended: no deadline (the others may
        # train for long), but a centre that leaves or gives up ends this wait.
        self._wait(self.comm.Irecv(final, self.centre, _FINAL),
                   "the end of asynchronous EASGD (the centre answers when every worker "
                   "has ended)", math.inf)
        if final[0] != 0.0:
            raise BraidError(self._stopped_by(int(final[0]) - 1, self._receive_why()))

    def _stopped_by(self, rank: int, why: str) -> str:
        who = "the centre" if rank == self.centre else "worker"
        return f"training stopped: {who} rank {rank} failed (asynchronous EASGD): {why}"

    def _wait_for_message(self, MPI: Any, status: Any, active: set,
                          heard: Dict[int, float], failing: bool) -> None:
        """Probe without blocking in MPI: a Ctrl-C (deferred by braidpy, or Python's
        own) is acted on within a poll, not after the next message. Every
        :data:`NOTICE_POLLS` polls it also reads braidpy's notices: an active worker
        that left the program or failed outside its session raises :class:`_Gone`, and
        workers silent for ``BRAIDPY_TIMEOUT`` seconds are dropped, told, and (unless
        the centre is already ``failing``) a BraidError naming them is raised."""
        polls = 0
        while not self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
            interrupt = take_interrupt()
            if interrupt is not None:
                raise interrupt
            polls += 1
            if polls % NOTICE_POLLS == 0 and self._world is not None:
                self._check_workers(active, heard, failing)
            time.sleep(POLL_SECONDS)
        heard[status.Get_source()] = time.monotonic()

    def _check_workers(self, active: set, heard: Dict[int, float], failing: bool) -> None:
        assert self._world is not None
        world = self._world
        gone = paths.departed([world[w] for w in sorted(active)])
        for w in sorted(active):
            if world[w] in gone:
                raise _Gone(w, gone[world[w]])
        limit = paths.timeout_seconds()
        now = time.monotonic()
        silent = sorted(w for w in active if now - heard[w] > limit)
        if not silent:
            return
        seen = "; ".join(paths.last_seen(world[w]) for w in silent)
        text = (f"the asynchronous EASGD centre (rank {world[self.centre]}) heard nothing "
                f"for {limit:g} s ({paths.TIMEOUT_VARIABLE}) from worker rank(s) "
                f"{', '.join(str(world[w]) for w in silent)}: {seen}")
        paths.announce_failure([world[self.centre], *(world[w] for w in silent)],
                               f"the centre gave up: {text}")
        active.difference_update(silent)
        if not failing:
            raise BraidError(text)

    # ------------------------------------------------------------------- centre
    def serve(self, center: np.ndarray) -> np.ndarray:
        """Run the centre until every worker has ended; returns the final W̄ (a new
        array). Raises BraidError if a worker failed."""
        if not self.is_centre:
            raise RuntimeError(f"rank {self.rank} is a worker; the centre is rank "
                               f"{self.centre}")
        from ..parallel.comm import mpi

        MPI = mpi()
        center = np.array(center, dtype=np.float64)
        flat = center.reshape(-1)
        active = set(range(self.size)) - {self.centre}
        finished: List[int] = []
        failed: Optional[int] = None
        why = ""  # the failure's description, sent after every "stop"
        own_error: Optional[BaseException] = None
        incoming = np.empty(flat.size)
        reply = np.empty(flat.size + 1)
        status = MPI.Status()
        start = time.monotonic()
        heard = {w: start for w in active}  # when each worker was last heard from
        while active:
            owed: Optional[int] = None  # a worker waiting for this update's reply
            try:
                try:
                    self._wait_for_message(MPI, status, active, heard,
                                           own_error is not None)
                except _Gone as gone:  # left without ending its session: its failure
                    active.discard(gone.worker)
                    if failed is None:
                        failed, why = gone.worker, gone.why
                    continue
                source, tag = status.Get_source(), status.Get_tag()
                if tag == _UPDATE and status.Get_count(MPI.BYTE) != flat.nbytes:
                    # Another number of parameters than the centre's: that worker fails
                    # (its reply has its own size, so that it reads the stop).
                    count = status.Get_count(MPI.BYTE)
                    self.comm.Recv([np.empty(count, np.uint8), MPI.BYTE], source, _UPDATE)
                    active.discard(source)
                    if failed is None:
                        failed = source
                        why = (f"it sent {count // 8} parameters where the centre holds "
                               f"{flat.size} (every worker must train the same parameters)")
                    stop = np.zeros(count // 8 + 1)
                    stop[0] = failed + 1.0
                    self.comm.Send(stop, source, _REPLY)
                    self.comm.Send(_why_bytes(why), source, _WHY)
                elif tag == _UPDATE:
                    self.comm.Recv(incoming, source, _UPDATE)
                    owed = source
                    reply[0] = 0.0 if failed is None else failed + 1.0
                    reply[1:] = flat
                    self.comm.Send(reply, source, _REPLY)
                    owed = None
                    if failed is None:
                        flat += self.lr * self.rho * (incoming - flat)
                        self.exchanges += 1
                        self.served.append(source)
                    else:  # told to stop: it raises and ends
                        self.comm.Send(_why_bytes(why), source, _WHY)
                        active.discard(source)
                elif tag == _DONE:
                    self.comm.Recv(np.empty(0), source, tag)
                    active.discard(source)
                    finished.append(source)
                elif tag == _FAILED:
                    text = np.empty(status.Get_count(MPI.BYTE), np.uint8)
                    self.comm.Recv([text, MPI.BYTE], source, tag)
                    active.discard(source)
                    if failed is None:
                        failed, why = source, _text(text[:WHY_BYTES])
                else:
                    raise BraidError(f"asynchronous EASGD: unexpected message tag {tag} "
                                     f"from rank {source}")
            except BaseException as exc:  # noqa: BLE001 - re-raised once the workers know
                if own_error is not None:
                    raise
                # The centre failed: from now on every worker is answered "stop" (as after
                # a worker's failure), so none waits for a centre that has gone.
                own_error, failed = exc, self.centre
                why = describe(exc)
                if owed is not None:
                    reply[0] = failed + 1.0
                    self.comm.Send(reply, owed, _REPLY)
                    self.comm.Send(_why_bytes(why), owed, _WHY)
                    active.discard(owed)
        verdict = np.array([0.0 if failed is None else failed + 1.0])
        for worker in finished:
            self.comm.Send(verdict, worker, _FINAL)
            if failed is not None:
                self.comm.Send(_why_bytes(why), worker, _WHY)
        if own_error is not None:
            raise own_error
        if failed is not None:
            raise BraidError(self._stopped_by(failed, why))
        self.center = center
        return center
