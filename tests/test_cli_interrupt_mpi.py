"""Ctrl-C on one rank of `mpiexec -n P braidpy train`: every
rank ends, the interrupted one with status 130, the others naming it; whether the
signal lands in a solve, between solves, or in the set-up before the first step."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from mpi_process import MARK, kill_launch, marked_pids
from test_mpi import MPIEXEC

TRAIN = ["train", "peaks", "--samples", "200", "--validation-samples", "50", "--layers",
         "16", "--iterations", "100000", "--quiet"]


def rank_pids(mark, nranks):
    """{rank: pid} of the launch's Python ranks (PMI_RANK in their environment)."""
    found = {}
    for pid in marked_pids(mark):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # gone
            continue
        ranks = [v for v in env if v.startswith(b"PMI_RANK=")]
        if ranks and b"braidpy" in cmdline:
            found[int(ranks[0].split(b"=")[1])] = pid
    return found if len(found) == nranks else {}


def _maps(pid):
    try:
        return Path(f"/proc/{pid}/maps").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(sys.platform != "linux", reason="/proc and POSIX signals")
@pytest.mark.parametrize("nranks, victim, when", [(2, 1, "training"), (4, 2, "training"),
                                                  (2, 1, "set-up")])
def test_ctrl_c_on_one_rank_ends_every_rank(tmp_path, nranks, victim, when):
    log = tmp_path / "run.jsonl"
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1", **{MARK: mark})
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, "-m", "braidpy", *TRAIN,
           "--log", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        pids = {}
        while not pids:  # every rank started (and imported braidpy: it is in its argv)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks did not start within 120 s"
            pids = rank_pids(mark, nranks)
            time.sleep(0.02)
        if when == "training":  # a step was logged: in or between solves from here on
            while not (log.exists() and '"event": "step"' in log.read_text()):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no training step within 120 s"
                time.sleep(0.05)
        else:  # MPI is starting on the victim (mpi4py loaded libmpi): deep in the set-up
            while b"libmpi" not in _maps(pids[victim]):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "MPI did not start within 120 s"
                time.sleep(0.002)
        os.kill(pids[victim], signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            kill_launch(proc, mark)
            out, err = proc.communicate()
            pytest.fail(f"a rank hung after Ctrl-C on rank {victim}:\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            kill_launch(proc, mark)
    assert proc.returncode != 0, (out, err)
    # Rank 0 prints once: the interrupted rank's KeyboardInterrupt, by its number (or,
    # when the victim is rank 0 itself, "interrupted").
    assert f"rank {victim}: " in err and "KeyboardInterrupt" in err, err
    assert "Traceback" not in err, err
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert "summary" not in events  # it stopped; it did not run to the end
