"""Layer-parallel gradients and training under mpiexec -n 1, 2, 4: the same numbers
(bitwise) as the serial in-process run."""

import json
import os
import sys

import pytest
from test_mpi import HERE, MPIEXEC, TIMEOUT
from train_cases import CASES
from mpi_process import run_mpi


@pytest.fixture(scope="module")
def serial():
    return {name: case(None) for name, case in CASES.items()}


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_training_independent_of_rank_count(nranks, serial, tmp_path):
    out = tmp_path / f"train-{nranks}.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / "mpi_train_driver.py"),
           str(out), str(nranks)]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    par = json.loads(out.read_text())
    assert sorted(par) == sorted(serial)
    for name in serial:
        assert par[name] == serial[name], f"{name} differs at {nranks} ranks"
