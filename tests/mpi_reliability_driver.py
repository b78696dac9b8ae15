"""Faults outside user callbacks, under mpiexec (see test_reliability_mpi.py).

    mpiexec -n P python tests/mpi_reliability_driver.py P OUT.json [SOAK_SOLVES]
    mpiexec -n P python tests/mpi_reliability_driver.py P OUT.json mismatch

Each case makes one rank misbehave where the solver is in its own code (a Ctrl-C in the
MPI adapter, a closed stdout under the progress output, a state of the wrong shape)
and records, per rank, what every solve came to; then it solves again on the same Core
and records whether that answer is right. The soak case repeats random faults.
Rank 0 writes the gathered outcomes as JSON.

With ``mismatch``, rank 1 alone is given another problem (an option, tstop, ntime, the
time grid, an invalid option), turns its next start cold (reset_guess, a failed
solution()), or raises an exception whose str() fails; each case prints its
name first, so a hang killed by the test's timeout names the case that hung.
"""

import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from apps import Decay  # noqa: E402
from mpi4py import MPI  # noqa: E402

import braidpy  # noqa: E402
from braidpy.parallel.agree import agreed, safe_text  # noqa: E402
from braidpy.parallel.interrupts import deferred_interrupts  # noqa: E402

COMM = MPI.COMM_WORLD
OPTIONS = dict(cfactor=2, abs_tol=1e-13, max_iter=30)
NTIME = 64


def victim(comm):
    """The misbehaving rank: a middle one of 4, the last of 2."""
    return min(2, comm.size - 1)


def reference_final():
    return braidpy.solve(Decay(), 0.0, 4.0, NTIME, **OPTIONS).final


def outcome(fn):
    """(kind, message) of fn(): 'ok' or the exception's type name."""
    try:
        fn()
        return ("ok", "")
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        return (type(exc).__name__, safe_text(exc))  # str() of a user's error may fail


def solve_twice(make_core, fault):
    """Outcome of a solve with `fault` armed, then of a clean solve on the same Core
    ('right' when its final value is the serial one)."""
    core = make_core()
    first = outcome(lambda: fault(core))
    result = []
    second = outcome(lambda: result.append(core.solve()))
    if second[0] == "ok":
        right = bool(np.array_equal(result[0].final, reference_final()))
        second = ("right" if right else "wrong", "")
    return [first, second]


class InterruptAfter:
    """Stands in for the Core's communicator on one rank: after the n-th call of one
    of `methods` returns, this process gets SIGINT (the handler runs at the next
    bytecode, inside braidpy's MPI adapter, not in a user callback)."""

    def __init__(self, comm, methods, n):
        self._comm, self._methods, self._left = comm, methods, n

    def __getattr__(self, name):
        attr = getattr(self._comm, name)
        if name not in self._methods:
            return attr

        def wrapped(*args, **kwargs):
            value = attr(*args, **kwargs)
            if name == "Improbe" and value is None:  # a sleeping receive's look that
                return value  # found nothing yet: not a probe of a message
            self._left -= 1
            if self._left == 0:
                os.kill(os.getpid(), signal.SIGINT)
            return value
        return wrapped


def interrupt_in_adapter(methods, n):
    def fault(core):
        if COMM.rank == victim(COMM):
            tcomm = core._tcomm  # test-only reach: the one seam a signal can hit
            tcomm.comm = InterruptAfter(tcomm.comm, methods, n)
        core.solve()
    return lambda: solve_twice(lambda: braidpy.Core(Decay(), 0.0, 4.0, NTIME, comm=COMM,
                                                     **OPTIONS), fault)


class ClosedStdout:
    """sys.stdout whose write fails once, after `after` lines were written."""

    def __init__(self, after):
        self.after, self.failed = after, False

    def write(self, text):
        if self.after <= 0 and not self.failed:
            self.failed = True
            raise OSError(5, "Input/output error (closed stdout)")
        self.after -= text.count("\n")
        return len(text)

    def flush(self):
        pass


def progress_output_fails(after):
    def case():
        saved = sys.stdout
        if COMM.rank == 0:
            sys.stdout = ClosedStdout(after)
        try:
            return solve_twice(lambda: braidpy.Core(Decay(), 0.0, 4.0, NTIME, comm=COMM,
                                                    print_level=1, **OPTIONS),
                               lambda core: core.solve())
        finally:
            sys.stdout = saved
    return case


class WrongShape(Decay):
    """On the victim rank, one step returns a state of another shape."""

    def __init__(self, comm, **kw):
        super().__init__(**kw)
        self.mine, self.armed = comm.rank == victim(comm), True

    def step(self, u, t0, t1, status):
        if self.mine and self.armed and status.level == 0 and status.iteration == 1:
            self.armed = False
            return np.zeros(3)
        super().step(u, t0, t1, status)


class WrongShapeReceived(Decay):
    """On the victim rank, one received state unpacks to another shape."""

    def __init__(self, comm, **kw):
        super().__init__(**kw)
        self.mine, self.armed = comm.rank == victim(comm), True

    def bufunpack(self, buf):
        u = super().bufunpack(buf)
        if self.mine and self.armed:
            self.armed = False
            return np.concatenate([u, u])
        return u


class Watched(Decay):
    """Records the last MGRIT iteration each rank's steps saw; the victim raises in its
    first step of iteration `fail_at`."""

    def __init__(self, comm, fail_at):
        super().__init__()
        self.mine, self.fail_at, self.last = comm.rank == victim(comm), fail_at, -1

    def step(self, u, t0, t1, status):
        self.last = max(self.last, status.iteration)
        if self.mine and status.iteration == self.fail_at:
            raise ZeroDivisionError("failed on purpose")
        super().step(u, t0, t1, status)


def within_one_cycle(fail_at=2):
    """(outcome, the last iteration this rank's steps saw) for a failure in iteration
    `fail_at` on the victim rank."""
    app = Watched(COMM, fail_at)
    got = outcome(lambda: braidpy.solve(app, 0.0, 4.0, NTIME, comm=COMM, **OPTIONS))
    return [got, app.last]


def wrong_shape(app_class):
    return lambda: solve_twice(lambda: braidpy.Core(app_class(COMM), 0.0, 4.0, NTIME,
                                                    comm=COMM, **OPTIONS),
                               lambda core: core.solve())


# ------------------------------------------------------------------------ the soak

EXCEPTIONS = {"ValueError": ValueError, "ZeroDivisionError": ZeroDivisionError,
              "MemoryError": MemoryError, "KeyboardInterrupt": KeyboardInterrupt}
CALLBACKS = ("init", "step", "clone", "sum", "norm", "access", "bufpack", "bufunpack")


class Faulty(Decay):
    """Decay with every callback in Python; the plan makes the n-th call of one of
    them raise, or send this process SIGINT (at once, or from a thread a moment later)."""

    def __init__(self):
        super().__init__()
        self.plan = None  # (callback, n, kind)
        self.killers = []

    def _hit(self, name):
        if self.plan is None or self.plan[0] != name:
            return
        callback, n, kind = self.plan
        if n > 1:
            self.plan = (callback, n - 1, kind)
            return
        self.plan = None
        if kind == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
        elif kind == "sigint_later":
            # Aimed at the main thread: Python 3.11 may delay a signal that a kernel hands
            # to another thread until the main thread next switches threads.
            killer = threading.Timer(random.uniform(0.0, 0.003), signal.pthread_kill,
                                     (threading.main_thread().ident, signal.SIGINT))
            killer.start()
            self.killers.append(killer)
        else:
            raise EXCEPTIONS[kind](f"{name} failed on purpose")

    def init(self, t):
        self._hit("init")
        return super().init(t)

    def step(self, u, t0, t1, status):
        self._hit("step")
        super().step(u, t0, t1, status)

    def clone(self, u):
        self._hit("clone")
        return u.copy()

    def sum(self, a, x, b, y):
        self._hit("sum")
        y *= b
        y += a * x

    def norm(self, u):
        self._hit("norm")
        return float(np.sqrt(np.dot(u, u)))

    def access(self, u, status):
        self._hit("access")

    def bufpack(self, u):
        self._hit("bufpack")
        return u.tobytes()

    def bufunpack(self, buf):
        self._hit("bufunpack")
        return np.frombuffer(buf, dtype=np.float64).copy()


def agree_round():
    with agreed(COMM, "soak round"):
        pass


def soak(solves):
    """`solves` solves on one Core; before each, every rank draws the same fault (or
    none) from one seeded generator. Per solve: each rank's outcome and seconds."""
    plan_rng = random.Random(20261125)
    app = Faulty()
    core = braidpy.Core(app, 0.0, 4.0, NTIME, comm=COMM, **OPTIONS)
    expected = reference_final()
    records = []
    for _ in range(solves):
        rank = plan_rng.randrange(COMM.size)
        kind = plan_rng.choice(["none"] + list(EXCEPTIONS) + ["sigint", "sigint_later"])
        plan = None if kind == "none" else (plan_rng.choice(CALLBACKS),
                                            plan_rng.randint(1, 40), kind)
        app.plan = plan if COMM.rank == rank else None
        start = time.perf_counter()
        late = ("ok", "")
        with deferred_interrupts():
            result = []
            first = outcome(lambda: result.append(core.solve()))
            for killer in app.killers:  # a SIGINT sent from a thread has arrived by now
                killer.join()
            app.killers.clear()
            # A signal that came after the solve's last agreement is delivered here.
            late = outcome(agree_round)
        seconds = time.perf_counter() - start
        if first[0] == "ok":  # a warm restart may differ from a cold solve in the last bits
            right = np.allclose(result[0].final, expected, rtol=0.0, atol=1e-11)
            first = ("right" if right else "wrong", "")
        records.append({"rank": rank, "kind": kind, "plan": plan and list(plan),
                        "outcome": list(first), "late": list(late), "seconds": seconds})
    return records


# ---------------------------------------------------------- one rank given another problem

MISMATCH_RANK = 1  # the rank that differs (a middle one of 4, the last of 2)
PROBLEM = (0.0, 5.0, 256)  # tstart, tstop, ntime of the original reproducers
#: case -> (what rank 1 alone changes: solve() arguments, or the option to give it)
MISMATCHES = {
    "cfactor": {"cfactor": 8},
    "max_iter": {"max_iter": 3},
    "skip": {"skip": False},
    "max_levels": {"max_levels": 2},
    "tnorm": {"tnorm": 1},
    "tstop": {"tstop": 6.0},
    "ntime": {"ntime": 260},
    "times": {"times": "stretched"},
    "cfactor_invalid": {"cfactor": 1},  # refused on rank 1 only, before any message
}


class Oops(Exception):
    """An exception whose str() fails."""

    def __str__(self):
        raise RuntimeError("no str")


class RaisesOops(Decay):
    """Rank 1 raises Oops in its first step of iteration 1 (once)."""

    def __init__(self, comm):
        super().__init__()
        self.armed = comm.rank == MISMATCH_RANK

    def step(self, u, t0, t1, status):
        if self.armed and status.iteration == 1:
            self.armed = False
            raise Oops()
        super().step(u, t0, t1, status)


def mismatch_reference():
    return braidpy.solve(Decay(), *PROBLEM).final


def record(fn):
    """What fn() came to on this rank: outcome, and for an exception its field/values
    (RankMismatchError), notes, and whether its traceback reaches a step()."""
    try:
        value = fn()
        return {"outcome": ["ok", ""], "value": np.asarray(value).tolist()}
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        frames = traceback.extract_tb(exc.__traceback__)
        return {"outcome": [type(exc).__name__, safe_text(exc)],
                "field": getattr(exc, "field", None),
                "values": list(getattr(exc, "values", ()) or ()),
                "notes": [safe_text(n) for n in getattr(exc, "__notes__", [])],
                "in_step": any(f.name == "step" for f in frames)}


def then_clean():
    """After a case: a clean solve on the same communicator gives the serial answer."""
    got = record(lambda: braidpy.solve(Decay(), *PROBLEM, comm=COMM).final)
    if got["outcome"][0] != "ok":
        return got["outcome"]
    return ["right" if np.array_equal(got["value"], mismatch_reference()) else "wrong", ""]


def mismatch_case(change):
    tstart, tstop, ntime = PROBLEM
    options = {}
    times = None
    if COMM.rank == MISMATCH_RANK:
        change = dict(change)
        tstop = change.pop("tstop", tstop)
        ntime = change.pop("ntime", ntime)
        if change.pop("times", None):  # a grid of the same ends, points moved
            times = tstart + (tstop - tstart) * np.linspace(0.0, 1.0, ntime + 1) ** 1.1
        options = change
    out = record(lambda: braidpy.solve(Decay(), tstart, tstop, ntime, comm=COMM,
                                       times=times, **options).final)
    out["after"] = then_clean()
    return out


def cold_start_on_one_rank(make_cold):
    """A second solve on one Core after `make_cold(core, app)` on rank 1 alone made that
    rank's next start cold. Per rank: the outcome of that solve, its iterations, its init
    calls, and whether its value is the serial one; the first (cold) solve's iterations."""
    app = FailingClone()
    core = braidpy.Core(app, *PROBLEM, comm=COMM)
    first = core.solve()
    out = {"first_iterations": first.iterations, "first_init": first.counts["init"]}
    if COMM.rank == MISMATCH_RANK:
        out["local"] = record(lambda: make_cold(core, app))["outcome"]
    results = []
    out.update(record(lambda: results.append(core.solve())))
    if results:
        r = results[0]
        out.update(iterations=r.iterations, init=r.counts["init"],
                   after=["right" if np.array_equal(r.final, mismatch_reference()) else "wrong",
                          ""])
    return out


class FailingClone(Decay):
    """Decay whose clone raises once when armed (a failed solution() on one rank)."""

    armed = False

    def clone(self, u):
        if self.armed:
            self.armed = False
            raise ValueError("clone failed on purpose")
        return u.copy()


def reset_on_one_rank():
    return cold_start_on_one_rank(lambda core, app: core.reset_guess())


def solution_fails_on_one_rank():
    # Rank 1's compiled core discards its stored solution when solution() fails there.
    def fail(core, app):
        app.armed = True
        core.solution(index=core.owned[-1])
    return cold_start_on_one_rank(fail)


def unprintable_error():
    """Rank 1's step raises Oops (str() fails); then a clean solve on the same Core."""
    core = braidpy.Core(RaisesOops(COMM), *PROBLEM, comm=COMM)
    out = record(lambda: core.solve().final)
    again = record(lambda: core.solve().final)
    out["after"] = ["right" if again["outcome"][0] == "ok" and np.array_equal(
        again["value"], mismatch_reference()) else "wrong", again["outcome"][1]]
    return out


def mismatch_main(nranks, path):
    cases = {name: (lambda change=change: mismatch_case(change))
             for name, change in MISMATCHES.items()}
    cases["reset_guess"] = reset_on_one_rank
    cases["solution_fails"] = solution_fails_on_one_rank
    cases["unprintable_error"] = unprintable_error
    core = braidpy.Core(Decay(), *PROBLEM, comm=COMM)
    out = {"size": COMM.Get_size(), "owned": COMM.gather(list(core.owned)), "cases": {}}
    for name, case in cases.items():
        if COMM.rank == 0:
            print(f"case {name}", flush=True)  # the last one printed is the one that hung
        out["cases"][name] = COMM.gather(case())
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


def main():
    nranks, path = int(sys.argv[1]), sys.argv[2]
    assert COMM.Get_size() == nranks, f"expected {nranks} ranks, got {COMM.Get_size()}"
    if len(sys.argv) > 3 and sys.argv[3] == "mismatch":
        return mismatch_main(nranks, path)
    solves = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    cases = {
        # Between a probe and its receive (a rank's third incoming message).
        "sigint_after_probe": interrupt_in_adapter(("Probe", "Mprobe", "Improbe"), 3),
        # Right after a halting-test reduction (the second iteration's).
        "sigint_after_allreduce": interrupt_in_adapter(("Allreduce", "Iallreduce"), 2),
        "progress_output_fails": progress_output_fails(after=2),
        "wrong_shape_step": wrong_shape(WrongShape),
        "wrong_shape_received": wrong_shape(WrongShapeReceived),
        "within_one_cycle": within_one_cycle,
    }
    out = {"size": COMM.Get_size(), "owned": COMM.gather(
        list(braidpy.Core(Decay(), 0.0, 4.0, NTIME, comm=COMM, **OPTIONS).owned))}
    for name, case in cases.items():
        out[name] = COMM.gather(case())
    out["soak"] = COMM.gather(soak(solves))
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
