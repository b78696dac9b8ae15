"""Builds and runs the C++ tests of the MGRIT core (no Python inside the core)."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_core_builds_and_passes_without_python(tmp_path):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (pip install cmake)"
    subprocess.run([cmake, str(ROOT), "-DBRAIDPY_BUILD_TESTS=ON", "-DBRAIDPY_BUILD_PYTHON=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([cmake, "--build", ".", "--target", "core_test", "-j", "2"], cwd=tmp_path,
                   check=True, capture_output=True)
    proc = subprocess.run([str(tmp_path / "core_test")], capture_output=True, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and proc.stdout.count("ok  ") == 8
