"""``braidpy train --csv F`` and ``--plot F`` on a full disk under mpiexec, at 2 ranks
(tests/mpi_full_disk_driver.py): every rank exits with status 1 and the error that
ended its command names the option and the file; rank 0 prints it once.

The full disk is a file size limit set in each rank once MPI has started (a limit set
before, as ``ulimit -f`` does, breaks MPICH's start-up), with SIGXFSZ ignored: a write
past it fails with EFBIG, as a full disk's fails with ENOSPC (the serial tests in
test_reliability_inputs.py use the same limit). Covered: data-parallel training, where
rank 0's CSV row is reported to every rank in each step, and asynchronous EASGD, whose
workers report without waiting for each other (rank 0's failure reaches the others
through the centre).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_process import marked_pids, run_mpi
from test_mpi import MPIEXEC

HERE = Path(__file__).resolve().parent
LIMIT = 3000  # bytes: the CSV of 40 steps and any figure are larger
KILL_AFTER = 180
NRANKS = 2
TRAIN = ["train", "peaks", "--samples", "200", "--layers", "4", "--iterations", "40",
         "--mode", "serial", "-q"]
RUNS = {"data groups": ["--grid", "2,1,1"],
        "asynchronous EASGD": ["--grid", "2,1,1", "--optimizer", "easgd-async"]}


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("option", ["--csv", "--plot"])
def test_a_full_disk_under_mpi_stops_every_rank_naming_the_file(tmp_path, option, run):
    target = tmp_path / ("out.png" if option == "--plot" else "out.csv")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               BRAIDPY_TIMEOUT="60")
    cmd = [MPIEXEC, "-n", str(NRANKS), sys.executable, str(HERE / "mpi_full_disk_driver.py"),
           str(NRANKS), str(tmp_path), str(LIMIT), *TRAIN, *RUNS[run], option, str(target)]
    try:
        proc = run_mpi(cmd, timeout=KILL_AFTER, env=env)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{option} on a full disk ({run}) did not end within {KILL_AFTER} s:\n"
                    f"{(hung.stderr or '')[-3000:]}")
    assert not marked_pids(proc.mark), "ranks outlived their mpiexec"
    assert proc.returncode != 0, proc.stdout + proc.stderr
    said = f"{option} {target}: could not write it (File too large)"
    for rank in range(NRANKS):  # every rank ran in this launch, ended with status 1
        outcome = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert outcome["size"] == NRANKS and outcome["status"] == 1, (rank, outcome)
        assert len(outcome["errors"]) == 1 and said in outcome["errors"][0], (rank, outcome)
    assert proc.stderr.count(f"braidpy train: error: {said}") == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out"))
    if option == "--plot":  # the atomic write removed its temporary file
        assert left == [], left
    else:  # what was written before the full disk stays
        assert left == ["out.csv"] and 0 < target.stat().st_size <= LIMIT, left
        assert target.read_text().splitlines()[0].startswith("iteration"), target.read_text()
