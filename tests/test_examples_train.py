"""The training examples (ex04 peaks one-shot, ex05 digits conv) run serially and under MPI."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_mpi import MPIEXEC
from mpi_process import run_mpi

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "ex04_peaks_oneshot.py": ["--samples", "100", "--validation-samples", "50",
                              "--layers", "16", "--iterations", "3"],
    "ex05_digits_conv.py": ["--max-train", "60", "--batch", "30", "--layers", "8",
                            "--iterations", "3", "--validate-every", "3"],
}


def run(script, args, nranks=1):
    cmd = [sys.executable, str(ROOT / "examples" / script), *args]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def step_lines(out):
    """(step, loss, validation accuracy) of every step line: what must not depend on the
    rank count (residual norms are sums over ranks and may differ in the last bits)."""
    return re.findall(r"^\s+(\d+)\s.*?(\d\.\d{6}e[+-]\d+)\s+(\S+%|-)", out, flags=re.MULTILINE)


@pytest.mark.parametrize("script", sorted(TINY))
def test_example_serial_and_parallel_agree(script, tmp_path):
    serial = run(script, TINY[script] + ["--plot", str(tmp_path)])
    parallel = run(script, TINY[script], nranks=2)
    steps = step_lines(serial)
    assert [s[0] for s in steps] == ["1", "2", "3"], serial
    assert step_lines(parallel) == steps
    # The copies under mpiexec really formed one 2-rank world (the header says so).
    assert "1 MPI rank(s)" in serial and "2 MPI rank(s)" in parallel
    assert "stopped: iterations after 3 steps" in serial
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "mgrit_iterations.png", "mgrit_residuals.png", "training.png"]


def test_ex04_serial_forward_agrees_with_layer_parallel_validation():
    out = run("ex04_peaks_oneshot.py", TINY["ex04_peaks_oneshot.py"])
    found = re.search(r"layer-parallel (\S+)%, serial forward (\S+)%", out)
    assert found and found.group(1) == found.group(2), out


def test_ex05_refuses_layers_it_cannot_run_on_two_levels():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "ex05_digits_conv.py"),
                           "--layers", "4"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--layers 4 with coarsening factor 4 leaves a coarse grid of 1 interval" in \
        proc.stderr
    assert "--layers >= 8" in proc.stderr
