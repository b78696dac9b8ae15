"""braidpy's cuDNN convolutions without a GPU: where cuDNN is looked for, the module
importing and reporting without it, every entry point's clear error, the descriptor
parameters braidpy computes (csrc/cuda/conv_plan.hpp) by hand, and, where
``BRAIDPY_CUDNN_LIBRARY`` names a libcudnn.so.9, cuDNN's own answers for the same
descriptors (descriptor calls and output sizes need no GPU; cudnnCreate does). The
numerics run on a GPU only: tests/test_gpu.py."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fake_cuda_array import FAKE_CUDA_ARRAY

import braidpy
from braidpy import _cudnn

ROOT = Path(__file__).resolve().parents[1]
REAL = os.environ.get(_cudnn.ENV, "")


def cuda_module():
    if importlib.util.find_spec("braidpy._cuda") is None:
        pytest.skip("braidpy._cuda was not compiled (BRAIDPY_CUDA=OFF or no nvcc)")
    from braidpy import _cuda

    return _cuda


def real_cudnn():
    """braidpy._cuda with the cuDNN of BRAIDPY_CUDNN_LIBRARY loaded, or a skip."""
    cuda = cuda_module()
    if not REAL:
        pytest.skip(f"{_cudnn.ENV} is not set: no cuDNN to compare with (e.g. pip install "
                    f"--target DIR nvidia-cudnn-cu13; {_cudnn.ENV}=DIR/nvidia/cudnn/lib)")
    info = cuda.cudnn_info()
    assert info["version"] is not None, info["error"]
    return cuda


class Fake:
    """Host memory presented as a CUDA array (the protocol only; no GPU involved)."""

    def __init__(self, host):
        self.host = host

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "strides": None,
                "data": (self.host.ctypes.data, False), "version": 3, "stream": 1}


def run_python(code, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# ------------------------------------------------------------------ where cuDNN is looked for

def test_candidates_follow_the_environment_variable(monkeypatch, tmp_path):
    lib = tmp_path / "libcudnn.so.9"
    monkeypatch.setenv(_cudnn.ENV, str(lib))
    assert _cudnn.candidates() == [str(lib)]
    monkeypatch.setenv(_cudnn.ENV, str(tmp_path))  # a directory: its libcudnn.so.9
    assert _cudnn.candidates() == [str(lib)]


def test_candidates_without_the_variable_end_with_the_system_loader(monkeypatch, tmp_path):
    monkeypatch.delenv(_cudnn.ENV, raising=False)
    assert _cudnn.candidates()[-1] == "libcudnn.so.9"
    # an nvidia-cudnn wheel's lib directory comes first
    (tmp_path / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "nvidia" or m.startswith("nvidia.")]:
        monkeypatch.delitem(sys.modules, name)
    found = _cudnn.candidates()
    assert found[0] == str(tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    assert found[-1] == "libcudnn.so.9"


# ------------------------------------------------------------------ without cuDNN

MISSING = """
import numpy as np, braidpy
from braidpy import _cuda
info = braidpy.cuda_info()
assert info["cudnn"] is None and info["cudnn_library"] is None, info
assert "/nonexistent/libcudnn.so.9" in info["cudnn_error"], info["cudnn_error"]
assert _cuda.cudnn_info()["version"] is None
""" + FAKE_CUDA_ARRAY + """x, w = Fake(np.zeros((1, 2, 3, 3))), Fake(np.zeros((2, 2, 3, 3)))
calls = {
    "conv_forward": lambda: _cuda.conv_forward(x, w, x, 1, 0, 0),
    "conv_backward_data": lambda: _cuda.conv_backward_data(w, x, x, 1, 0, 0),
    "conv_backward_filter": lambda: _cuda.conv_backward_filter(x, x, w, 1, 0, 0),
    "conv_backward_bias": lambda: _cuda.conv_backward_bias(x, Fake(np.zeros((1, 2, 1, 1)))),
    "conv_workspace": lambda: _cuda.conv_workspace(1, 2, 2, 3, 3, 3, 1, "float64"),
    "cudnn_describe": lambda: _cuda.cudnn_describe(1, 2, 2, 3, 3, 3, 1, "float64"),
}
for name, call in calls.items():
    try:
        call()
    except braidpy.CudnnError as e:
        assert e.code is None and isinstance(e, braidpy.CudaError), name
        assert str(e).startswith(name + ": cuDNN is not available"), str(e)
        assert "nvidia-cudnn-cu13" in str(e) and "BRAIDPY_CUDNN_LIBRARY" in str(e), str(e)
    else:
        raise AssertionError(name + " did not raise")
print("ok", len(calls))
"""


def test_without_cudnn_the_module_imports_reports_none_and_every_entry_point_says_so():
    cuda_module()
    out = run_python(MISSING, BRAIDPY_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    assert out.strip() == "ok 6"


def test_cuda_info_reports_cudnn_keys():
    info = braidpy.cuda_info()
    assert {"cudnn", "cudnn_library", "cudnn_error"} <= set(info)
    assert (info["cudnn"] is None) == (info["cudnn_library"] is None)
    if info["compiled"] and info["cudnn"] is None:
        assert "cuDNN is not available" in info["cudnn_error"]


# ------------------------------------------------------------------ the host logic

def test_conv_plan_by_hand():
    cuda = cuda_module()
    p = cuda.conv_plan(2, 6, 6, 7, 5, 3, 2, "float64")
    assert p["x"] == ((2, 6, 7, 5), (210, 35, 5, 1))
    assert p["y"] == ((2, 6, 7, 5), (210, 35, 5, 1))
    assert p["w"] == (6, 3, 3, 3)                       # Cin per group
    assert p["conv"] == ((1, 1), (1, 1), (1, 1), 2)     # pad, stride, dilation, groups
    assert p["bias"] == ((1, 6, 1, 1), (6, 1, 1, 1))
    q = cuda.conv_plan(1, 4, 4, 1, 1, 7, 1, "float32")  # a 7 x 7 kernel on one pixel
    assert q["y"][0] == (1, 4, 1, 1) and q["conv"][0] == (3, 3)


@pytest.mark.parametrize("args,match", [
    ((1, 2, 2, 3, 3, 4, 1, "float64"), "kernel size k = 4 must be odd"),
    ((1, 6, 6, 3, 3, 3, 4, "float64"), "group count 4 must divide both channel counts 6"),
    ((0, 2, 2, 3, 3, 3, 1, "float64"), "every dimension must be positive"),
    ((1, 2, 2, 3, 3, 3, 1, "float16"), "dtype must be 'float64' or 'float32', got 'float16'"),
    ((1 << 20, 64, 64, 64, 64, 3, 1, "float32"), "32-bit"),
])
def test_conv_plan_refuses_by_name(args, match):
    cuda = cuda_module()
    with pytest.raises(ValueError, match=match):
        cuda.conv_plan(*args)


def test_entry_points_check_arrays_before_anything_else():
    cuda = cuda_module()
    x = Fake(np.zeros((1, 2, 3, 3)))
    with pytest.raises(TypeError, match="conv_forward: x must be a C-contiguous"):
        cuda.conv_forward(np.zeros((1, 2, 3, 3)), x, x, 1, 0, 0)
    with pytest.raises(ValueError, match=r"w has shape \(2, 2, 5, 5\) .* must be .* = "
                                         r"\(2, 1, 5, 5\)"):
        cuda.conv_forward(x, Fake(np.zeros((2, 2, 5, 5))), x, 2, 0, 0)
    with pytest.raises(ValueError, match="y has shape .* 'same' padding keeps batch, H and W"):
        cuda.conv_forward(x, Fake(np.zeros((2, 2, 3, 3))), Fake(np.zeros((1, 2, 4, 3))), 1, 0, 0)
    with pytest.raises(ValueError, match="one dtype"):
        cuda.conv_forward(x, Fake(np.zeros((2, 2, 3, 3), np.float32)), x, 1, 0, 0)
    with pytest.raises(ValueError, match=r"db must be \(1, 2, 1, 1\)"):
        cuda.conv_backward_bias(x, Fake(np.zeros((2, 2, 1, 1))))
    with pytest.raises(ValueError, match="db must be 4-D"):
        cuda.conv_backward_bias(x, Fake(np.zeros(2)))


# ------------------------------------------------------------------ against real cuDNN

PROBLEMS = [
    (2, 6, 6, 7, 5, 3, 2, "float64"),       # grouped over 2 intervals of 3 channels
    (32, 48, 48, 28, 28, 5, 6, "float32"),  # 6 intervals of 8 channels, MNIST size
    (1, 1, 1, 1, 1, 1, 1, "float64"),
    (4, 8, 8, 9, 13, 7, 1, "float64"),
    (3, 16, 16, 28, 28, 3, 16, "float32"),  # one channel per group
]


@pytest.mark.parametrize("args", PROBLEMS)
def test_descriptors_match_cudnns_own_answers(args):
    """conv_plan.hpp's parameters, set in cuDNN and read back; cuDNN's output size (2-D and
    N-d queries, with groups) equals the host logic's, which for 'same' padding is the
    input size."""
    cuda = real_cudnn()
    mine, theirs = cuda.conv_plan(*args), cuda.cudnn_describe(*args)
    for key in ("x", "bias", "w", "conv"):
        assert theirs[key] == mine[key], key
    assert theirs["out2d"] == theirs["out_nd"] == mine["y"][0]
    code = 1 if args[-1] == "float64" else 0  # CUDNN_DATA_DOUBLE / _FLOAT
    assert theirs["data_type"] == (code, code, code)
    assert theirs["mode"] == 1 and theirs["format"] == 0  # cross-correlation, NCHW


def test_real_cudnn_is_reported_and_without_a_gpu_gives_no_gpu_error():
    cuda = real_cudnn()
    info = braidpy.cuda_info()
    assert info["cudnn"] // 10000 == 9 and info["cudnn_library"] and info["cudnn_error"] is None
    if info["devices"] > 0:
        pytest.skip("a GPU is present: the no-GPU behaviour cannot be seen")
    x, w = Fake(np.zeros((1, 2, 3, 3))), Fake(np.zeros((2, 2, 3, 3)))
    for call in (lambda: cuda.conv_forward(x, w, x, 1, 0, 0),
                 lambda: cuda.conv_workspace(1, 2, 2, 3, 3, 3, 1, "float64")):
        with pytest.raises(braidpy.NoGPUError, match="no usable GPU") as err:
            call()
        assert err.value.code in (35, 100)
