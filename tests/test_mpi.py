"""Parallel runs (mpiexec -n 1, 2, 3, 4) against the serial in-process results."""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from batched_cases import BATCHED_CASES
from mpi_cases import HISTORY_CASES
from mpi_process import run_mpi

HERE = Path(__file__).resolve().parent

def find_mpiexec():
    """$BRAIDPY_TEST_MPIEXEC if set, else the mpiexec installed beside this interpreter
    (mpich wheel), else the one on PATH."""
    if os.environ.get("BRAIDPY_TEST_MPIEXEC"):
        return os.environ["BRAIDPY_TEST_MPIEXEC"]
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    assert found, "mpiexec not found: braidpy's install brings it (pip install mpich)"
    return found


MPIEXEC = find_mpiexec()
TIMEOUT = 300  # a hang fails the test instead of blocking the suite


def run_driver(nranks, suite, tmp_path):
    out = tmp_path / f"{suite}-{nranks}.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / "mpi_driver.py"), suite,
           str(out), str(nranks)]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def serial():
    return {name: case(None) for name, case in HISTORY_CASES.items()}


def assert_same(par, ser, where):
    if isinstance(ser, list) and ser and isinstance(ser[0], dict):  # gradient evaluations
        assert len(par) == len(ser), where
        for k, (p, s) in enumerate(zip(par, ser)):
            # Objective and summed gradient are added in time order: bitwise equal.
            assert p["objective"] == s["objective"], where
            assert p["total"] == s["total"], where
            assert p["gradients"] == s["gradients"], where
            assert p["initial_adjoint"] == s["initial_adjoint"], where
            assert_same(p["primal"], s["primal"], f"{where}/{k}/primal")
            assert_same(p["adjoint"], s["adjoint"], f"{where}/{k}/adjoint")
        return
    if isinstance(ser, dict) and "iterations" not in ser:
        for key in ser:
            assert_same(par[key], ser[key], f"{where}/{key}")
        return
    assert par["levels"] == ser["levels"], where
    assert par["iterations"] == ser["iterations"], where
    assert par["residual_iterations"] == ser["residual_iterations"], where
    np.testing.assert_allclose(par["residuals"], ser["residuals"], rtol=1e-12, atol=0,
                               err_msg=where)
    # Values do not depend on the rank count at all: bitwise equal.
    assert par["values"] == ser["values"], where
    assert par["final"] == ser["final"], where


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_histories_and_solutions_independent_of_rank_count(nranks, serial, tmp_path):
    par = run_driver(nranks, "histories", tmp_path)
    assert set(par) == set(serial)
    for name in serial:
        assert_same(par[name], serial[name], f"{name} with {nranks} ranks")


@pytest.fixture(scope="module")
def serial_batched():
    return {name: case(None) for name, case in BATCHED_CASES.items()}


def _strip(summary):
    return {k: v for k, v in summary.items() if k not in ("batched_calls", "into_calls")}


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_batched_equals_unbatched_under_mpi(nranks, serial_batched, tmp_path):
    par = run_driver(nranks, "batched", tmp_path)
    assert set(par) == set(serial_batched)
    for name, case in par.items():
        where = f"{name} with {nranks} ranks"
        # The batched path was taken in every solve (a one-level run has no batches).
        if name != "decay_one_level":
            assert case["True"]["batched_calls"] > 0, where
        assert case["False"]["batched_calls"] == 0, where
        if "_into" in name:  # the out-of-place hooks were used, and only when batching
            assert case["True"]["into_calls"] > 0 == case["False"]["into_calls"], where
        # Same rank count: batched and unbatched agree bitwise, residuals included.
        assert _strip(case["True"]) == _strip(case["False"]), where
        # And the batched values are those of the serial run.
        ser, got = _strip(serial_batched[name]["True"]), _strip(case["True"])
        if "values" in ser:
            assert got["values"] == ser["values"] and got["final"] == ser["final"], where
            assert got["iterations"] == ser["iterations"], where
            np.testing.assert_allclose(got["residuals"], ser["residuals"], rtol=1e-12, atol=0,
                                       err_msg=where)


def test_solvers_release_their_communicators(tmp_path):
    assert run_driver(2, "resources", tmp_path) == {"created": True}


@pytest.mark.parametrize("nranks", [2, 4])
def test_error_contract_under_mpi(nranks, tmp_path):
    check_error_outcomes(run_driver(nranks, "errors", tmp_path), nranks)


def check_error_outcomes(res, nranks):
    """The outcomes of mpi_error_cases.ERROR_CASES on every rank (``res``: case -> the
    ranks' (exception name, message)) are the error contract's."""
    fail_rank = 2 if nranks == 4 else 1
    for name, outcomes in res.items():
        kinds = [kind for kind, _ in outcomes]
        if name == "healthy_after_failures":
            assert kinds == ["ok"] * nranks, outcomes
        elif name == "not_converged":
            assert kinds == ["ConvergenceError"] * nranks, outcomes
        elif name.startswith("nan_residual"):
            assert kinds == ["DivergenceError"] * nranks, (name, outcomes)
            assert len({msg for _, msg in outcomes}) == 1
        elif name.startswith("bufpack_returns"):  # checked before MPI sees it: no hang
            kind, msg = outcomes[fail_rank]
            assert kind == "TypeError" and "bufpack must return a bytes-like" in msg, outcomes
            for rank, (kind, msg) in enumerate(outcomes):
                if rank != fail_rank:
                    assert kind == "BraidError" and f"rank {fail_rank}" in msg, (name, outcomes)
        else:
            assert kinds[fail_rank] == "Boom", (name, outcomes)
            for rank, (kind, msg) in enumerate(outcomes):
                if rank != fail_rank:
                    assert kind == "BraidError", (name, rank, outcomes)
                    assert f"rank {fail_rank}" in msg and "Boom" in msg, msg
