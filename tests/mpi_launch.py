"""Launch a driver script under mpiexec and read the JSON its rank 0 writes.

Drivers take the rank count and the output path as their first two arguments (and
check the rank count with mpi_world.expect_world); a hang becomes a failure through the
timeout.
"""

import json
import os
import sys
from pathlib import Path

from test_mpi import MPIEXEC
from mpi_process import run_mpi

HERE = Path(__file__).resolve().parent


def launch(driver, nranks, out_dir, *args, timeout=240):
    """Run ``tests/<driver>`` on ``nranks`` ranks; its JSON output, parsed."""
    out = Path(out_dir) / f"{Path(driver).stem}-{nranks}.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, str(HERE / driver), str(nranks),
           str(out), *map(str, args)]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text())
