"""Builds and runs the C++ tests: the MGRIT core (no Python inside the core), the CUDA
kernels' arithmetic (csrc/cuda/kernels.hpp) compiled for the host, and the cuDNN
convolutions' host logic (csrc/cuda/conv_plan.hpp)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The C++ tests built once (no Python, no CUDA: the kernels' host twins)."""
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (pip install cmake)"
    out = tmp_path_factory.mktemp("cpp")
    subprocess.run([cmake, str(ROOT), "-DBRAIDPY_BUILD_TESTS=ON", "-DBRAIDPY_BUILD_PYTHON=OFF",
                    "-DBRAIDPY_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release"], cwd=out, check=True,
                   capture_output=True)
    subprocess.run([cmake, "--build", ".", "--target", "core_test", "kernels_test", "conv_plan_test",
                    "-j", "2"],
                   cwd=out, check=True, capture_output=True)
    return out


def run(build, name):
    proc = subprocess.run([str(build / name)], capture_output=True, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
    return proc.stdout


def test_core_builds_and_passes_without_python(build):
    assert run(build, "core_test").count("ok  ") == 13


def test_cuda_kernels_arithmetic_passes_on_the_host(build):
    out = run(build, "kernels_test")
    assert out.count("ok  ") == 690
    for kernel in ("axpby<double>", "axpby<float>", "gather<double>", "gather<float>",
                   "dense elements<double>", "dense elements<float>",
                   "dense finish<double> slope act 3 stacked",
                   "dense finish<float> step act 1 single",
                   "row norm<double>", "row norm<float>", "(x is y)", "zero row",
                   "conv wide<double>", "conv tiled<float>", "conv family of",
                   "conv wgrad grouped<double>", "conv wgrad grouped<float>",
                   "conv wgrad family"):
        assert kernel in out, kernel


def test_cudnn_conv_plan_passes_on_the_host(build):
    out = run(build, "conv_plan_test")
    assert out.count("ok  ") == 73
    for what in ("nchw(2, 3, 4, 5) strides", "even k refused", "grouped filter descriptor",
                 "tensor-op math (1) with tf32", "tf32 is part of the plan cache's key",
                 "benchmark is part of the plan cache's key",
                 "grouped forward == per-interval", "grouped backward data == per-interval",
                 "grouped backward filter == per-interval", "grouped bias gradient",
                 "least recently used", "1024"):
        assert what in out, what
