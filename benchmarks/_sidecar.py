"""Running another library's side of a benchmark in its own virtualenv and process.

bench_vs_pymgrit.py and bench_vs_torchbraid.py each time braidpy against a library that
cannot share braidpy's environment. Both find that library's virtualenv, launch a
worker script there (under that venv's own mpiexec for several ranks) and read the one
``RESULT {json}`` line the worker prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

HERE = Path(__file__).resolve().parent

#: One thread per process for every side (the machines are small and shared).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def venv_python(env_var: str, default: Path, setup_hint: str) -> Path:
    """The interpreter of the virtualenv named by ``env_var`` (else ``default``), or exit
    with ``setup_hint`` saying how to make it."""
    venv = Path(os.environ.get(env_var, default)).expanduser()
    python = venv / "bin" / "python"
    if not python.exists():
        sys.exit(f"no virtualenv at {venv}: run `{setup_hint}` (or set {env_var})")
    return python


def mpiexec_for(python: Path) -> str:
    """The mpiexec beside an interpreter (same MPI as its mpi4py), else the one on PATH."""
    beside = python.parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("mpiexec not found: install an MPI (e.g. pip install mpich)")
    return found


def run_for_result(cmd: Sequence[str], env: Mapping[str, str], timeout: float) -> dict:
    """Run a worker; the JSON of its last ``RESULT `` line (exit with its output if it
    failed or printed none)."""
    proc = subprocess.run(list(cmd), cwd=HERE, env=dict(env), capture_output=True, text=True,
                          timeout=timeout, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"worker failed ({' '.join(cmd)}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):])
