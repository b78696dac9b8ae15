"""Serial reliability: contract violations caught at the gateway, a Core
guarded against concurrent and re-entrant use, Ctrl-C handled without breaking a Core.
The parallel cases are in test_reliability_mpi.py."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from apps import Decay

import braidpy
from braidpy.parallel.interrupts import deferred_interrupts, interrupt_pending

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = dict(cfactor=2, abs_tol=1e-13, max_iter=30)


def reference():
    return braidpy.solve(Decay(), 0.0, 4.0, 64, **OPTIONS).final


def assert_right(core):
    """The Core still solves, cold, to the serial answer."""
    core.reset_guess()
    np.testing.assert_array_equal(core.solve().final, reference())


# ----------------------------------------------------------------- contract violations

class SharedInit(Decay):
    """init hands out one array for every C-point."""

    def __init__(self):
        super().__init__()
        self.u = np.array([0.3])

    def init(self, t):
        return np.array([1.0]) if t == self.tstart else self.u


class GrowingInit(Decay):
    def init(self, t):
        return np.zeros(2) if t > 2.0 else super().init(t)


class OtherDtypeInit(Decay):
    def init(self, t):
        return np.zeros(1, dtype=np.float32) if t > 2.0 else super().init(t)


class ReturnsOtherShape(Decay):
    def step(self, u, t0, t1, status):
        if status.iteration == 1:
            return np.zeros(2)
        super().step(u, t0, t1, status)


class ReturnsList(Decay):
    def step(self, u, t0, t1, status):
        return [float(u[0]) / (1.0 - self.lam * (t1 - t0))]


class CloneOtherShape(Decay):
    def clone(self, u):
        return np.concatenate([u, u])


@pytest.mark.parametrize("app, kind, words", [
    (SharedInit(), TypeError, "init(t) returned the same object as an earlier init call"),
    (GrowingInit(), ValueError, "init(t) returned numpy.ndarray of shape (2,)"),
    (OtherDtypeInit(), TypeError, "dtype float32"),
    (ReturnsOtherShape(), ValueError, "step(u, t0, t1, status) returned numpy.ndarray of "
                                      "shape (2,), dtype float64; this Core's states are "
                                      "numpy.ndarray of shape (1,)"),
    (ReturnsList(), TypeError, "step(u, t0, t1, status) returned list"),
    (CloneOtherShape(), ValueError, "clone(u) returned numpy.ndarray of shape (2,)"),
], ids=["shared-init", "init-shape", "init-dtype", "step-shape", "step-type", "clone-shape"])
def test_a_state_that_breaks_the_contract_is_a_clear_error(app, kind, words):
    core = braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
    with pytest.raises(kind) as info:
        core.solve()
    assert words in str(info.value)


def test_states_of_non_array_types_are_checked_by_type():
    from apps import Box, OpaqueDecay

    class Drifts(OpaqueDecay):
        def step(self, u, t0, t1, status):
            if status.iteration == 1:
                return [0.0, 0.0]
            return super().step(u, t0, t1, status)

    with pytest.raises(TypeError, match=r"returned list; this Core's states are .*Box"):
        braidpy.solve(Drifts(), 0.0, 1.0, 16, cfactor=2, max_iter=5)
    assert Box  # the type the states were learnt from


def test_batched_step_returning_another_shape_is_refused():
    class Stacked(Decay):
        def step_stacked(self, U, t0s, t1s, status):
            return np.zeros((U.shape[0], 2))

    with pytest.raises(ValueError, match=r"step_stacked\(U, t0s, t1s, status\) returned an "
                                         r"array of shape \(\d+, 2\) for a stack of shape"):
        braidpy.solve(Stacked(), 0.0, 4.0, 64, batch=True, **OPTIONS)


def test_a_step_returning_a_new_state_of_the_same_kind_is_fine():
    class NewStates(Decay):
        def step(self, u, t0, t1, status):
            return u / (1.0 - self.lam * (t1 - t0))

    np.testing.assert_allclose(braidpy.solve(NewStates(), 0.0, 4.0, 64, **OPTIONS).final,
                               reference(), rtol=1e-13)


# ----------------------------------------------------------- one Core, one call at a time

def test_a_core_refuses_a_solve_from_another_thread_while_solving():
    seen = []

    class Meddling(Decay):
        def __init__(self):
            super().__init__()
            self.core = None

        def step(self, u, t0, t1, status):
            if not seen:
                other = threading.Thread(target=lambda: seen.append(_outcome(self.core.solve)))
                other.start()
                other.join()
            super().step(u, t0, t1, status)

    app = Meddling()
    core = app.core = braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
    np.testing.assert_array_equal(core.solve().final, reference())
    assert seen[0][0] is RuntimeError and "busy" in seen[0][1], seen
    assert_right(core)


def _outcome(fn):
    try:
        fn()
        return (None, "")
    except Exception as exc:  # noqa: BLE001
        return (type(exc), str(exc))


def test_a_callback_calling_back_into_its_core_is_a_clear_error():
    class Reentrant(Decay):
        def __init__(self, call):
            super().__init__()
            self.call, self.core, self.armed = call, None, True

        def step(self, u, t0, t1, status):
            if self.armed:
                self.armed = False
                self.call(self.core)
            super().step(u, t0, t1, status)

    calls = [lambda c: c.solve(), lambda c: c.solution(index=0), lambda c: c.stored(0),
             lambda c: c.reset_guess(), lambda c: c.set_initial_condition(np.ones(1))]
    for call in calls:
        app = Reentrant(call)
        core = app.core = braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
        with pytest.raises(RuntimeError, match="busy") as info:
            core.solve()
        assert any("step" in note for note in getattr(info.value, "__notes__", [])) or \
            "busy" in str(info.value)
        assert_right(core)


def test_separate_cores_in_threads_give_the_serial_answers():
    expected = reference()
    results = {}

    def work(k):
        core = braidpy.Core(Decay(), 0.0, 4.0, 64, **OPTIONS)
        results[k] = [core.solve().final.copy() for _ in range(20)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]
    for finals in results.values():
        np.testing.assert_array_equal(finals[0], expected)
        for f in finals[1:]:  # warm restarts: converged, within the tolerance
            np.testing.assert_allclose(f, expected, rtol=0, atol=1e-12)


STRESS = textwrap.dedent("""
    import json, sys, threading
    import numpy as np
    sys.path[:0] = [{tests!r}, {root!r}]
    import braidpy
    from apps import Decay

    class Slow(Decay):
        def step(self, u, t0, t1, status):
            sum(range(50))  # Python work: threads switch inside callbacks
            super().step(u, t0, t1, status)

    core = braidpy.Core(Slow(), 0.0, 4.0, 256, cfactor=2, abs_tol=1e-13, max_iter=30)
    expected = braidpy.solve(Decay(), 0.0, 4.0, 256, cfactor=2, abs_tol=1e-13).final
    outcomes = []

    def hammer():
        for _ in range(15):
            try:
                final = core.solve().final
                outcomes.append("right" if np.allclose(final, expected, rtol=0, atol=1e-12)
                                else "wrong")
            except RuntimeError as exc:
                outcomes.append("busy" if "busy" in str(exc) else repr(exc))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(outcomes))
""")


def test_four_threads_hammering_one_core_never_crash_it():
    # Before the guard: exit 139 (segmentation fault) in 6 of 6 runs. In a subprocess so
    # that a crash fails this test instead of killing the test run.
    code = STRESS.format(tests=str(ROOT / "tests"), root=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = json.loads(proc.stdout)
    assert len(outcomes) == 4 * 15 and set(outcomes) <= {"right", "busy"}, outcomes
    assert "right" in outcomes


# ---------------------------------------------------------------- Ctrl-C (serial)

class InterruptedAt(Decay):
    """Sends this process SIGINT during the n-th step (handled inside that callback)."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def step(self, u, t0, t1, status):
        self.n -= 1
        if self.n == 0:
            os.kill(os.getpid(), signal.SIGINT)
        super().step(u, t0, t1, status)


def test_ctrl_c_in_a_callback_raises_keyboard_interrupt_and_spares_the_core():
    app = InterruptedAt(40)
    core = braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
    with pytest.raises(KeyboardInterrupt):
        core.solve()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert_right(core)


def test_ctrl_c_outside_a_callback_is_delivered_at_the_next_agreement():
    core = braidpy.Core(Decay(), 0.0, 4.0, 64, **OPTIONS)
    reached = []
    with pytest.raises(KeyboardInterrupt) as info:
        with deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)  # before the solve: pending, not raised
            reached.append(interrupt_pending())
            core.solve()  # stops at its first agreement point
    assert reached == [True]
    assert any(entry.path.name == "_solver.py" for entry in info.traceback)
    assert not interrupt_pending()
    assert_right(core)


def test_a_pending_ctrl_c_is_raised_when_the_block_ends():
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            x = sum(range(1000))  # bytecode runs: the handler has run, nothing raised
    assert x == 499500
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_of_the_users_own_is_left_alone():
    got = []
    saved = signal.signal(signal.SIGINT, lambda *a: got.append("mine"))
    try:
        app = InterruptedAt(10)
        np.testing.assert_array_equal(
            braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS).solve().final, reference())
        assert got == ["mine"]
    finally:
        signal.signal(signal.SIGINT, saved)


def test_the_progress_output_failing_is_the_solves_error():
    class Closed:
        def write(self, text):
            raise OSError(5, "Input/output error")

        def flush(self):
            pass

    core = braidpy.Core(Decay(), 0.0, 4.0, 64, print_level=1, **OPTIONS)
    saved, sys.stdout = sys.stdout, Closed()
    try:
        with pytest.raises(OSError, match="Input/output error"):
            core.solve()
    finally:
        sys.stdout = saved
    assert_right(core)


def test_the_solver_logs_residuals_and_a_summary_at_debug(caplog, capsys):
    with caplog.at_level("DEBUG", logger="braidpy"):
        result = braidpy.solve(Decay(), 0.0, 4.0, 64, **OPTIONS)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "braidpy.solver"]
    assert all(level == "DEBUG" for level, _ in lines)
    messages = [m for _, m in lines]
    assert len(messages) == result.iterations + 1
    assert messages[-2] == f"iteration {result.iterations - 1}: residual " \
                           f"{result.residuals[-1]:.6e}"
    assert messages[-1] == (f"solve: {result.iterations} iterations, {result.levels} "
                            f"levels, last residual {result.residuals[-1]:.3e}")
    assert capsys.readouterr().out == ""  # print_level=0 prints nothing
