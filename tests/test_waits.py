"""braidpy's own waits for other ranks (braidpy.parallel.comm): MPI's blocking calls, or
tests with sleeps between them when a node runs more ranks than it has cores."""

import json
import os
import sys
from pathlib import Path

import pytest
from mpi_process import run_mpi
from test_mpi import MPIEXEC, TIMEOUT, check_error_outcomes

from braidpy.parallel import comm as comm_module
from braidpy.parallel.comm import Backoff, wait_mode

HERE = Path(__file__).resolve().parent

# (launcher environment, usable cores, expected mode)
DECISIONS = [
    ({"MPI_LOCALNRANKS": "4"}, 2, "sleep"),          # the demo: 4 ranks, 2 cores
    ({"MPI_LOCALNRANKS": "2"}, 2, "mpi"),            # one core per rank
    ({"MPI_LOCALNRANKS": "3"}, 2, "sleep"),
    ({"MPI_LOCALNRANKS": "2", "PMI_SIZE": "8"}, 2, "mpi"),  # 8 ranks over 4 nodes
    ({"PMI_SIZE": "4"}, 2, "sleep"),                 # no local count: all on this node
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "16"}, 16, "mpi"),
    ({}, 1, "mpi"),                                  # not under a launcher
    # The user's choice wins over the count, either way.
    ({"MPI_LOCALNRANKS": "4", "BRAIDPY_WAIT": "mpi"}, 2, "mpi"),
    ({"MPI_LOCALNRANKS": "2", "BRAIDPY_WAIT": "sleep"}, 2, "sleep"),
    ({"MPI_LOCALNRANKS": "4", "BRAIDPY_WAIT": " MPI "}, 2, "mpi"),
    ({"MPI_LOCALNRANKS": "4", "BRAIDPY_WAIT": "auto"}, 2, "sleep"),
    ({"MPI_LOCALNRANKS": "4", "BRAIDPY_WAIT": ""}, 2, "sleep"),
]


@pytest.mark.parametrize("env, cores, expected", DECISIONS)
def test_wait_mode_decision(env, cores, expected):
    assert wait_mode(env, cores=cores) == expected


@pytest.mark.parametrize("bad", ["spin", "yes", "0"])
def test_a_bad_wait_mode_names_the_value(bad):
    with pytest.raises(ValueError, match=f"BRAIDPY_WAIT must be one of auto, sleep, mpi, "
                                         f"got '{bad}'"):
        wait_mode({"BRAIDPY_WAIT": bad})


def test_the_mode_is_decided_once_per_process(monkeypatch):
    monkeypatch.setattr(comm_module, "_cached_mode", None)
    monkeypatch.setenv("BRAIDPY_WAIT", "sleep")
    assert wait_mode() == "sleep" and comm_module.sleeping_waits()
    monkeypatch.setenv("BRAIDPY_WAIT", "mpi")
    assert wait_mode() == "sleep"  # kept: every wait of the process waits the same way


def test_backoff_yields_then_sleeps_longer_up_to_its_cap(monkeypatch):
    clock = [100.0]
    slept = []  # (seconds waited when it paused, pause)
    monkeypatch.setattr(comm_module.time, "monotonic", lambda: clock[0])

    def sleep(seconds):
        slept.append((clock[0] - 100.0, seconds))
        clock[0] += max(seconds, 2.0**-12)  # each look costs at least 0.24 ms

    monkeypatch.setattr(comm_module.time, "sleep", sleep)
    pause = Backoff(yield_for=0.002, cap=0.001)
    for _ in range(30):
        pause()
    first = next(i for i, (_, s) in enumerate(slept) if s > 0)
    assert all(s == 0.0 for _, s in slept[:first])  # yields (sleep(0)) ...
    assert slept[first - 1][0] >= 0.002 > slept[first - 2][0]  # ... for the first 2 ms
    pauses = [s for _, s in slept[first:]]
    assert pauses[:4] == pytest.approx([50e-6, 150e-6, 350e-6, 750e-6])
    assert set(pauses[4:]) == {0.001}


def test_the_sleeping_backoff_sleeps_at_once_and_briefly():
    pause = comm_module.sleeping_backoff()
    assert pause.yield_for == 0.0 and 50e-6 <= pause.cap <= 0.001


def _run(mode, nranks, tmp_path):
    out = tmp_path / f"waits-{mode}-{nranks}.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1", BRAIDPY_WAIT=mode)
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / "mpi_waits_driver.py"),
           str(nranks), str(out)]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def by_mode(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("waits")
    return {mode: _run(mode, 4, tmp) for mode in ("mpi", "sleep")}


def test_every_rank_waited_as_told(by_mode):
    assert by_mode["sleep"]["modes"] == ["sleep"] * 4
    assert by_mode["sleep"]["collectives_sleep"] == [True] * 4
    assert by_mode["mpi"]["modes"] == ["mpi"] * 4
    assert by_mode["mpi"]["collectives_sleep"] == [False] * 4


@pytest.mark.parametrize("part", ["histories", "training", "hybrid", "p2p", "errors"])
def test_sleeping_waits_give_the_bits_of_blocking_ones(by_mode, part):
    assert by_mode["sleep"][part] == by_mode["mpi"][part]


@pytest.mark.parametrize("mode", ["mpi", "sleep"])
def test_the_error_contract_holds_with_either_wait(by_mode, mode):
    check_error_outcomes(by_mode[mode]["errors"], 4)


def test_ranks_that_disagree_on_the_mode_agree_per_communicator(tmp_path):
    # Rank 0 sleeps, the others block: a blocking collective never matches a
    # non-blocking one, so the communicator's ranks agree (all sleep) or this hangs.
    out = tmp_path / "mixed.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    env.pop("BRAIDPY_WAIT", None)
    script = HERE / "mpi_waits_driver.py"
    cmd = [MPIEXEC, "-n", "1", "-env", "BRAIDPY_WAIT", "sleep", sys.executable, str(script),
           "3", str(out), "quick", ":", "-n", "2", "-env", "BRAIDPY_WAIT", "mpi",
           sys.executable, str(script), "3", str(out), "quick"]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=120, env=env)  # a hang: red
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    res = json.loads(out.read_text())
    assert res["modes"] == ["sleep", "mpi", "mpi"]
    assert res["collectives_sleep"] == [True, True, True]


@pytest.mark.parametrize("mode", ["sleep", "mpi"])
def test_the_training_command_says_when_waits_sleep(mode):
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1", BRAIDPY_WAIT=mode)
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "braidpy", "train", "peaks",
           "--iterations", "1", "--samples", "40", "--validation-samples", "10"]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    header = next(line for line in (proc.stdout + proc.stderr).splitlines()
                  if line.startswith("braidpy train:"))
    assert "2 rank(s)" in header, header
    assert ("; waiting ranks sleep (BRAIDPY_WAIT; 2 ranks on this node's" in header) == \
        (mode == "sleep"), header


class _Pending:
    """A request that never completes by itself (``done`` completes it)."""

    def __init__(self):
        self.done = False

    def Test(self):
        return self.done


def test_a_wait_that_raises_keeps_its_request_until_it_completes(monkeypatch):
    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(comm_module, "_in_flight", [])
    monkeypatch.setattr(comm_module.time, "sleep", interrupted)
    first, second = _Pending(), _Pending()
    with pytest.raises(KeyboardInterrupt):
        comm_module.complete(first, sleep=True)
    assert comm_module._in_flight == [first]  # MPI may still write into its buffers
    first.done = True
    with pytest.raises(KeyboardInterrupt):
        comm_module.complete(second, sleep=True)
    assert comm_module._in_flight == [second]  # the completed one was let go
