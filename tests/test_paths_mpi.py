"""Ranks that take different paths through braidpy (braidpy.parallel.paths), at 2 and 4
ranks: the last rank calls solve once more or once less, never makes its Core (leaving,
or busy past the deadline), closes its Core alone, leaves early with exit code 0, passes
a serial communicator, calls solve with another final_sweep, or calls Trainer.save /
Trainer.state where its peers call another entry point. Every rank must end, under the
launch's kill timeout, with an error naming the rank and the call; each rank's error
text is asserted (the driver writes each rank's outcome; the exit hook's goes to stderr).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mpi_process import marked_pids, run_mpi
from test_mpi import MPIEXEC

from braidpy.parallel import paths

HERE = Path(__file__).resolve().parent
KILL_AFTER = 90  # seconds; each case ends in a few (interpreters starting included)
DEADLINE = 30  # BRAIDPY_TIMEOUT where the notices, not the deadline, must end the case
SHORT_DEADLINE = 6  # the case that ends at the deadline (ranks may start seconds apart)


def launch(tmp_path, nranks, case, deadline=DEADLINE):
    out = tmp_path / case
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", BRAIDPY_TIMEOUT=str(deadline))
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / "mpi_paths_driver.py"),
           str(nranks), str(out), case]
    start = time.monotonic()
    try:
        proc = run_mpi(cmd, timeout=KILL_AFTER, env=env)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{case} at {nranks} ranks did not end within {KILL_AFTER} s (hung; "
                    f"killed):\n{(hung.stderr or '')[-3000:]}")
    assert not marked_pids(proc.mark), "ranks outlived their mpiexec"
    outcomes = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nranks)]
    return proc, outcomes, time.monotonic() - start


@pytest.fixture(params=[2, 4])
def nranks(request):
    return request.param


def left_while_waiting(proc, outcomes, odd, waiting_in, did):
    """The odd rank left (exit code 0 of its own); every peer raised naming it and
    what it did; the odd rank's exit hook printed where its peers wait."""
    assert proc.returncode != 0
    for rank, outcome in enumerate(outcomes[:odd]):
        assert outcome[0] == "BraidError", (rank, outcome)
        assert f"rank {rank} waits in {waiting_in}" in outcome[1], outcome
        assert f"rank {odd} left the program (its braidpy calls: {did})" in outcome[1], \
            outcome
    assert f"rank {odd} left the program while other ranks wait for it (rank 0 waits " \
           f"in {waiting_in}" in proc.stderr, proc.stderr[-3000:]


def test_a_rank_calling_solve_once_more_is_told_its_peers_left(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "solve_once_more")
    odd = nranks - 1
    assert outcomes[odd][0] == "BraidError", outcomes
    assert f"rank {odd} waits in Core.solve (call #3 on this communicator)" in \
        outcomes[odd][1]
    assert f"left the program (its braidpy calls: making a Core x1 ({nranks} ranks), " \
           f"Core.solve x2 ({nranks} ranks))" in outcomes[odd][1]
    assert all(o == ["ok"] for o in outcomes[:odd]), outcomes
    for rank in range(odd):  # each peer's exit hook names the odd rank's call
        assert f"rank {rank} left the program while other ranks wait for it (rank {odd} " \
               f"waits in Core.solve (call #3 on this communicator))" in proc.stderr, \
            proc.stderr[-3000:]


def test_a_rank_calling_solve_once_less_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "solve_once_less")
    odd = nranks - 1
    assert outcomes[odd] == ["ok"]
    left_while_waiting(proc, outcomes, odd, "Core.solve (call #2 on this communicator)",
                       f"making a Core x1 ({nranks} ranks), Core.solve x1 ({nranks} ranks)")


def test_a_rank_leaving_with_exit_code_0_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "early_exit")
    odd = nranks - 1
    assert outcomes[odd] == ["left"]
    left_while_waiting(proc, outcomes, odd, "Core.solve (call #2 on this communicator)",
                       f"making a Core x1 ({nranks} ranks), Core.solve x1 ({nranks} ranks)")


def test_a_rank_that_never_makes_its_core_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "no_core")
    odd = nranks - 1
    left_while_waiting(proc, outcomes, odd, "making a Core (Core(...) or solve(...)) on a "
                       f"{nranks}-rank communicator", "none")


def test_a_rank_passing_a_serial_communicator_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "serial_comm")
    odd = nranks - 1
    assert outcomes[odd] == ["ok"]
    left_while_waiting(proc, outcomes, odd, "making a Core (Core(...) or solve(...)) on a "
                       f"{nranks}-rank communicator",
                       "making a Core x1 (serial), Core.solve x1 (serial)")


def test_a_rank_busy_elsewhere_past_the_deadline_is_named_by_every_waiting_rank(
        tmp_path, nranks):
    proc, outcomes, seconds = launch(tmp_path, nranks, "no_core_blocked", SHORT_DEADLINE)
    odd = nranks - 1
    assert proc.returncode != 0
    for rank, outcome in enumerate(outcomes[:odd]):
        assert outcome[0] == "BraidError", (rank, outcome)
        text = outcome[1]
        # this rank's own deadline, or a peer's that gave up first (then both are named)
        assert f"waited {SHORT_DEADLINE} s (BRAIDPY_TIMEOUT) in making a Core" in text, text
        assert f"rank {rank} wait" in text, text
        assert f"rank {odd} is in no braidpy wait" in text, text
        for other in range(odd):  # the ranks that did join are not named as missing
            assert f"rank {other} is in no braidpy wait" not in text, text


def test_a_rank_that_closed_its_core_alone_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "closed_alone")
    odd = nranks - 1
    assert outcomes[odd][0] == "RuntimeError" and "Core was closed" in outcomes[odd][1]
    for rank, outcome in enumerate(outcomes[:odd]):
        assert outcome[0] == "BraidError", outcome
        assert f"rank {rank} waits in Core.solve (call #2 on this communicator)" in \
            outcome[1], outcome
        assert f"rank {odd} called Core.solve on a Core it had closed (Core.close())" in \
            outcome[1], outcome


def test_final_sweep_differing_on_one_rank_is_one_clear_error_everywhere(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "final_sweep_differs")
    odd = nranks - 1
    for outcome in outcomes:
        assert outcome[0] == "ValueError", outcomes
        assert f"final_sweep=False on rank {odd}" in outcome[1]
        assert "final_sweep=True on rank 0" in outcome[1]


@pytest.mark.parametrize("case, calls", [
    ("trainer_save_once_more", ("rank 0 called Trainer.step (its 2nd Trainer.step, call #2",
                                "rank {odd} called Trainer.save (its 1st Trainer.save, "
                                "call #2")),
    ("trainer_state_once_less", ("rank 0 called Trainer.state (its 1st Trainer.state, "
                                 "call #2", "rank {odd} called Trainer.run (its 1st "
                                 "Trainer.run, call #2")),
])
def test_trainer_entry_points_taken_out_of_step_name_both_calls(tmp_path, nranks, case,
                                                                calls):
    proc, outcomes, _ = launch(tmp_path, nranks, case)
    odd = nranks - 1
    assert proc.returncode != 0
    for outcome in outcomes:
        assert outcome[0] == "BraidError", outcomes
        assert outcome[1].startswith("the ranks took different paths through braidpy"), outcome
        for call in calls:
            assert call.format(odd=odd) in outcome[1], outcome


@pytest.mark.parametrize("text", ["0", "-1", "nan", "soon", "١٠"])
def test_braidpy_timeout_is_validated(text):
    with pytest.raises(ValueError, match=rf"BRAIDPY_TIMEOUT must be a number of seconds "
                                         rf"> 0 \(or inf\), got '{text}'"):
        paths.timeout_seconds({"BRAIDPY_TIMEOUT": text})
    assert paths.timeout_seconds({"BRAIDPY_TIMEOUT": "2.5"}) == 2.5
    assert paths.timeout_seconds({"BRAIDPY_TIMEOUT": "inf"}) == float("inf")
    assert paths.timeout_seconds({}) == paths.DEFAULT_TIMEOUT


def test_serial_entry_points_count_calls_without_messages():
    calls = paths.Calls(None)
    assert paths.entry(None, calls, "Core.solve", (1, 0)) is None
    assert paths.entry(None, calls, "Trainer.save") is None
    assert paths.entry(None, calls, "Core.solve", (0, 1)) is None
    assert calls.total == 3 and calls.by_name == {"Core.solve": 2, "Trainer.save": 1}
