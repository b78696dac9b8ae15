"""The numbered examples run serially and under mpiexec with the same results."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_mpi import MPIEXEC

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = {
    "ex01_scalar_ode.py": ["--ntime", "512"],
    "ex02_heat1d.py": ["--nspace", "65", "--ntime", "128"],
}


def run(nranks, script, args):
    cmd = [sys.executable, str(ROOT / "examples" / script), *args]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def history(out):
    iterations = re.search(r"iterations: (\d+)", out).group(1)
    return iterations, re.findall(r"\|\| r_\d+ \|\| = \S+", out)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_serial_and_parallel_agree(script, tmp_path):
    plots = {"ex01_scalar_ode.py": ["--plot", str(tmp_path / "res.png")],
             "ex02_heat1d.py": ["--plot-solution", str(tmp_path / "sol.png"),
                                "--plot-residuals", str(tmp_path / "res.png")]}[script]
    serial = run(1, script, EXAMPLES[script] + plots)
    parallel = run(2, script, EXAMPLES[script])
    assert history(serial) == history(parallel)
    assert int(history(serial)[0]) > 1 and len(history(serial)[1]) > 1
    assert "|MGRIT - sequential|" in serial or "sequential" in serial
    for png in tmp_path.glob("*.png"):
        assert png.stat().st_size > 1000
    assert len(list(tmp_path.glob("*.png"))) == len(plots) // 2
