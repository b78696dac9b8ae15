"""Faults outside user callbacks at 2 and 4 ranks: every rank ends, together, and the
Core solves correctly afterwards (the soak test). Ranks given different problems, and an
exception whose str() fails, end with a clear error on every rank.

The driver is tests/mpi_reliability_driver.py; a hang is turned into a failure by the
timeout of :func:`launch`, which kills mpiexec's process group and every rank it
started.
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

HERE = Path(__file__).resolve().parent
SOAK_SOLVES = 200
SOLVE_SECONDS = 10.0  # "within one cycle": a solve here takes milliseconds
MISMATCH_SECONDS = 120  # 11 cases of milliseconds each, and 4 interpreters starting


def launch(driver, nranks, out_dir, *args, timeout=240):
    """Run ``tests/<driver>`` on ``nranks`` ranks and read the JSON its rank 0 writes;
    past ``timeout`` seconds every process of the launch is killed and the test fails
    (a hang), showing the driver's last output."""
    out = Path(out_dir) / f"{Path(driver).stem}-{nranks}-{args[0] if args else ''}.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / driver), str(nranks),
           str(out), *map(str, args)]
    start = time.monotonic()
    try:
        proc = run_mpi(cmd, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{cmd} did not end within {timeout} s (hung; killed):\n"
                    f"{(hung.output or '')[-3000:]}\n{(hung.stderr or '')[-3000:]}")
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    assert not marked_pids(proc.mark), "ranks outlived their mpiexec"
    result = json.loads(out.read_text())
    result["launch_seconds"] = time.monotonic() - start
    return result


@pytest.fixture(scope="module", params=[2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_reliability_driver.py", nranks,
                          tmp_path_factory.mktemp("reliability"), SOAK_SOLVES, timeout=300)


def test_the_ranks_really_ran_together(run):
    nranks, res = run
    assert res["size"] == nranks
    owned = res["owned"]
    assert len(owned) == nranks and all(0 < len(o) < 65 for o in owned)
    assert sorted(i for o in owned for i in o) == list(range(65))


def expect_stopped_together(outcomes, victim, kind, where):
    """outcomes[r] = (type, message) of rank r's solve."""
    for rank, (got, message) in enumerate(outcomes):
        if rank == victim:
            assert got == kind, (rank, outcomes)
        else:
            assert got == "BraidError", (rank, outcomes)
            if where is None:  # a block's agreement: no callback named
                assert f"rank {victim}: {kind}" in message, message
            elif where == "any":  # a signal from a thread: it lands where it lands
                assert f"rank {victim}: " in message and kind in message, message
            else:
                assert f"rank {victim}: {where} raised {kind}" in message, message


@pytest.mark.parametrize("case", ["sigint_after_probe", "sigint_after_allreduce"])
def test_ctrl_c_inside_the_mpi_adapter_stops_every_rank_and_spares_the_core(run, case):
    nranks, res = run
    victim = min(2, nranks - 1)
    first = [solves[0] for solves in res[case]]
    expect_stopped_together(first, victim, "KeyboardInterrupt", "the solver")
    # The next solve on the same Core: no stale message, the serial answer.
    assert [solves[1][0] for solves in res[case]] == ["right"] * nranks


def test_a_failing_progress_output_on_rank_0_stops_every_rank(run):
    nranks, res = run
    first = [solves[0] for solves in res["progress_output_fails"]]
    expect_stopped_together(first, 0, "OSError", "progress output")
    assert [solves[1][0] for solves in res["progress_output_fails"]] == ["right"] * nranks


@pytest.mark.parametrize("case, where, shape", [("wrong_shape_step", "step", "(3,)"),
                                               ("wrong_shape_received", "bufunpack", "(2,)")])
def test_a_state_of_another_shape_is_named_where_it_happened(run, case, where, shape):
    # Before the check: silent at 2 ranks, blamed on another rank's sum at 4.
    nranks, res = run
    victim = min(2, nranks - 1)
    first = [solves[0] for solves in res[case]]
    expect_stopped_together(first, victim, "ValueError", where)
    assert f"shape {shape}" in first[victim][1] and "shape (1,)" in first[victim][1]
    assert [solves[1][0] for solves in res[case]] == ["right"] * nranks


def test_every_rank_stops_within_the_cycle_that_failed(run):
    # The victim raises in iteration 2: no rank may step in iteration 3 (a healthy solve
    # of this problem takes more than 3 iterations).
    nranks, res = run
    victim = min(2, nranks - 1)
    outcomes = [r[0] for r in res["within_one_cycle"]]
    expect_stopped_together(outcomes, victim, "ZeroDivisionError", "step")
    assert [r[1] for r in res["within_one_cycle"]] == [2] * nranks


def test_soak_random_faults_on_random_ranks(run):
    nranks, res = run
    per_rank = res["soak"]
    assert all(len(r) == SOAK_SOLVES for r in per_rank)
    seen = set()
    for k, records in enumerate(zip(*per_rank)):
        victim, kind = records[0]["rank"], records[0]["kind"]
        outcomes = [r["outcome"] for r in records]
        late = [r["late"] for r in records]
        assert max(r["seconds"] for r in records) < SOLVE_SECONDS, (k, records)
        kinds = [o[0] for o in outcomes]
        if all(o == "right" for o in kinds):
            # No fault, a fault planned past the last call, or a signal that came after
            # the solve's last agreement and was delivered by the next one.
            if any(x[0] != "ok" for x in late):
                assert kind == "sigint_later", (k, records)
                expect_stopped_together(late, victim, "KeyboardInterrupt", None)
                seen.add("late signal")
            else:
                seen.add("clean")
            continue
        assert "wrong" not in kinds and kind != "none", (k, records)
        assert all(x[0] == "ok" for x in late), (k, records)
        raised = "KeyboardInterrupt" if kind.startswith("sigint") else kind
        where = "any" if kind == "sigint_later" else records[0]["plan"][0]
        expect_stopped_together(outcomes, victim, raised, where)
        seen.add(kind)
    # The plan drew every kind of fault, and each stopped a solve at least once.
    assert {"clean", "ValueError", "ZeroDivisionError", "MemoryError", "KeyboardInterrupt",
            "sigint", "sigint_later"} <= seen, seen


# ----------------------------------------------------- ranks given different problems

MISMATCH_RANK = 1
#: case -> (field named, its value on the other ranks, on rank 1), as the message shows it
MISMATCHES = {
    "cfactor": ("cfactor", "2", "8"),
    "max_iter": ("max_iter", "100", "3"),
    "skip": ("skip", "True", "False"),
    "max_levels": ("max_levels", "30", "2"),
    "tnorm": ("tnorm", "2", "1"),
    "tstop": ("tstop", "5.0", "6.0"),
    "ntime": ("ntime", "256", "260"),
    "times": ("times", "None", "array of shape (257,) float64 from 0.0 to 5.0"),
}


@pytest.fixture(scope="module", params=[2, 4])
def mismatch(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_reliability_driver.py", nranks,
                          tmp_path_factory.mktemp("mismatch"), "mismatch",
                          timeout=MISMATCH_SECONDS)


def test_the_mismatch_ranks_really_ran_together(mismatch):
    nranks, res = mismatch
    assert res["size"] == nranks
    owned = res["owned"]
    assert len(owned) == nranks and all(0 < len(o) < 257 for o in owned)
    assert sorted(i for o in owned for i in o) == list(range(257))


def others(nranks):
    return [r for r in range(nranks) if r != MISMATCH_RANK]


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_ranks_given_different_problems_all_raise_one_clear_error(mismatch, case):
    # Before the check: a hang (every rank), a "message protocol error", an MPI abort,
    # or converged=True with the same wrong value everywhere (tstop, ntime).
    nranks, res = mismatch
    field, theirs, mine = MISMATCHES[case]
    records = res["cases"][case]
    assert len(records) == nranks
    rest = others(nranks)
    where = f"{theirs} on rank {rest[0]}" if len(rest) == 1 else \
        f"{theirs} on ranks {', '.join(map(str, rest[:-1]))} and {rest[-1]}"
    message = records[0]["outcome"][1]
    for rank, r in enumerate(records):
        assert r["outcome"][0] == "RankMismatchError", (rank, r)
        assert r["outcome"][1] == message, (rank, r)  # the same words on every rank
        assert r["field"] == field, (rank, r)
        assert r["values"][MISMATCH_RANK].startswith(mine), (rank, r)
        assert all(r["values"][q] == theirs for q in rest), (rank, r)
        # The clean solve that follows on the same communicator is right.
        assert r["after"][0] == "right", (rank, r)
    # Every rank names every rank's value: they really exchanged them.
    assert f"{field} is {where}; {mine}" in message, message
    assert f"on rank {MISMATCH_RANK}" in message, message


@pytest.mark.parametrize("case", ["reset_guess", "solution_fails"])
def test_a_cold_start_on_one_rank_makes_every_rank_start_cold(mismatch, case):
    # Before: the ranks ran different first cycles (skip on the cold rank only) and
    # stopped with "message protocol error: expected tag 58, got 2".
    nranks, res = mismatch
    records = res["cases"][case]
    if case == "solution_fails":  # solution() failed on rank 1 alone, with its own error
        assert records[MISMATCH_RANK]["local"] == ["ValueError", "clone failed on purpose"]
    for rank, r in enumerate(records):
        assert r["outcome"] == ["ok", ""], (rank, r)
        assert r["after"][0] == "right", (rank, r)
        # A cold start on every rank: init called again, the cold solve's iterations
        # (a warm restart from the converged solution takes fewer).
        assert r["init"] == r["first_init"] > 0, (rank, r)
        assert r["iterations"] == r["first_iterations"], (rank, r)


def test_an_option_refused_on_one_rank_stops_every_rank(mismatch):
    # Before: rank 1 raised ValueError alone and the others waited in MPI_Comm_dup.
    nranks, res = mismatch
    records = res["cases"]["cfactor_invalid"]
    for rank, r in enumerate(records):
        if rank == MISMATCH_RANK:
            assert r["outcome"] == ["ValueError", "cfactor must be >= 2, got 1"], r
            assert any(f"on rank {MISMATCH_RANK} of {nranks}" in n for n in r["notes"]), r
        else:
            assert r["outcome"][0] == "BraidError", (rank, r)
            assert f"rank {MISMATCH_RANK}: ValueError: cfactor must be >= 2" in \
                r["outcome"][1], (rank, r)
        assert r["after"][0] == "right", (rank, r)


def test_an_exception_whose_str_fails_is_reraised_and_named_by_its_type(mismatch):
    # Before: describing it raised RuntimeError("no str") on rank 1 before the agreement,
    # and every other rank waited for rank 1 forever.
    nranks, res = mismatch
    records = res["cases"]["unprintable_error"]
    for rank, r in enumerate(records):
        if rank == MISMATCH_RANK:
            assert r["outcome"][0] == "Oops", r  # the original, traceback through step()
            assert r["in_step"], r
            assert any(f"raised in step on rank {MISMATCH_RANK} of {nranks}" in n
                       for n in r["notes"]), r
        else:
            assert r["outcome"] == ["BraidError", f"solve failed on another rank (rank "
                                    f"{MISMATCH_RANK}: step raised Oops)"], (rank, r)
        assert r["after"][0] == "right", (rank, r)  # the Core solves again, correctly


def test_a_launch_past_its_timeout_leaves_no_rank_behind():
    """The test helpers' mpiexec runner (tests/mpi_process.py): a hung 2-rank command is
    killed with every rank it started (subprocess.run's timeout kills mpiexec alone)."""
    hang = "import time; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); time.sleep(600)"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        run_mpi([MPIEXEC, "-n", "2", sys.executable, "-c", hang], timeout=5)
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 10
    while marked_pids(hung.value.mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_pids(hung.value.mark), "ranks outlived the timeout"
