"""Array backends (braidpy.backends) and the message header (braidpy.backends.wire)."""

import builtins
import contextlib
import gc
import importlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import braidpy
from braidpy import backends
from braidpy.backends import NUMPY, Backend, backend_for, backend_for_namespace, wire
from braidpy.backends import numpy as np_backend
from mpi_process import run_mpi

xp = pytest.importorskip("array_api_strict")

SEED = 20261121
RNG = np.random.default_rng(SEED)
HERE = Path(__file__).resolve().parent
CPU = xp.Device("CPU_DEVICE")
DEVICE1 = xp.Device("device1")
DEVICES = [CPU, DEVICE1]
DTYPE_NAMES = list(wire.DTYPES.values())


def host(u):
    """Explicit host copy of an array-api-strict array (works on every device)."""
    return np.from_dlpack(u).copy()


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def sample(name, shape):
    """Values of every kind a dtype has (signs, extremes, nan/inf/-0.0 for floats)."""
    dt = np.dtype(name)
    n = int(np.prod(shape))
    if dt.kind == "b":
        flat = RNG.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        flat = RNG.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        flat[:2] = [info.min, info.max][: min(n, 2)]
    else:
        real = np.finfo(dt).dtype
        flat = (RNG.standard_normal(n) * 1e3).astype(real)
        special = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=real)[: n]
        flat[: len(special)] = special
        if dt.kind == "c":
            flat = flat + 1j * RNG.standard_normal(n).astype(real)
            flat = flat.astype(dt)
    return flat.reshape(shape)


class Fresh(braidpy.App):
    def init(self, t):
        return np.zeros(2)

    def step(self, u, t0, t1, status):
        pass


# ------------------------------------------------------------------ numpy backend


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (-1.0, 1.0), (1.0, -1.0), (2.5, -0.5), (0.0, 3.0),
                                  (1.0, 0.0), (-3.0, 2.0)])
def test_sum_matches_reference_bitwise(a, b):
    x, y = RNG.standard_normal(7), RNG.standard_normal(7)
    want = a * x + b * y
    Fresh().sum(a, x, b, y)
    assert np.array_equal(y, want)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (2.0, -1.0), (1.0, -1.0), (0.5, 0.25)])
def test_sum_with_x_is_y(a, b):
    x = RNG.standard_normal(5)
    want = a * x + b * x
    Fresh().sum(a, x, b, x)
    assert np.array_equal(x, want)


@pytest.mark.parametrize("a, b", [(2.0, 3.0), (1.0, 3.0), (1.0, -1.0), (1.0, 0.0)])
def test_sum_with_overlapping_views(a, b):
    base = np.arange(6.0)
    x, y = base[1:5], base[0:4]
    want = a * x + b * y
    Fresh().sum(a, x, b, y)
    assert np.array_equal(y, want)


def test_clone_is_independent():
    u = RNG.standard_normal((3, 4))
    v = Fresh().clone(u)
    v += 1
    assert not np.array_equal(u, v)


@pytest.mark.parametrize("u", [np.array([3.0]), np.array([3.0, 4.0]),
                               np.array([[1.0, 2.0], [2.0, 4.0]]),
                               np.array([3 + 4j])])
def test_norm_is_euclidean(u):
    assert Fresh().norm(u) == pytest.approx(np.linalg.norm(u.ravel()), rel=1e-15)


def test_norm_rounds_like_vdot_and_the_scalar_formula():
    u = RNG.standard_normal(1000)
    assert np_backend.norm(u) == float(np.sqrt(np.vdot(u, u)))
    assert np_backend.norm(u.reshape(10, 100)) == float(np.sqrt(np.vdot(u, u)))
    assert np_backend.norm(np.array([-0.3])) == (0.3 * 0.3) ** 0.5


def test_non_arrays_get_a_clear_error():
    with pytest.raises(TypeError, match=r"got builtins\.list; override clone"):
        Fresh().clone([1.0, 2.0])


def test_numpy_scalars_are_rejected_with_advice():
    with pytest.raises(TypeError, match="1-element array"):
        Fresh().sum(1.0, np.float64(1.0), 2.0, np.float64(2.0))


def test_numpy_scalar_state_fails_the_solve_clearly():
    class Scalar(braidpy.App):
        def init(self, t):
            return np.float64(1.0)

        def step(self, u, t0, t1, status):
            return u / 2

    with pytest.raises(TypeError, match="NumPy scalar"):
        braidpy.solve(Scalar(), 0.0, 1.0, 8, cfactor=2)


def test_step_batch_stacks_with_the_backend():
    class Stacked(Fresh):
        def step_stacked(self, U, t0s, t1s, status):
            U *= 2.0

    us = [np.arange(3.0), np.ones(3)]
    Stacked().step_batch(us, np.zeros(2), np.ones(2), None)
    assert np.array_equal(us[0], 2 * np.arange(3.0)) and np.array_equal(us[1], 2 * np.ones(3))


# ------------------------------------------------------------------ backend selection


def test_backends_satisfy_the_protocol():
    assert isinstance(NUMPY, Backend)
    assert isinstance(backend_for(xp.ones(2, device=DEVICE1)), Backend)
    assert backend_for(np.zeros(1)) is NUMPY
    assert backend_for(np.zeros(4).view(np.memmap)) is NUMPY  # subclasses too


@pytest.mark.parametrize("device", DEVICES)
def test_backend_for_an_array_api_array_keeps_namespace_and_device(device):
    b = backend_for(xp.ones(2, device=device))
    assert b.name == "array_api_strict" and b.device == device and b.device_kind == wire.CPU


def test_backend_for_namespace():
    assert backend_for_namespace(None) is NUMPY and backend_for_namespace(np) is NUMPY
    assert backend_for_namespace(np, "cpu") is NUMPY
    with pytest.raises(ValueError, match="array_device"):
        backend_for_namespace(None, DEVICE1)
    b = backend_for_namespace(xp, DEVICE1)
    assert b.name == "array_api_strict" and b.device == DEVICE1
    assert backend_for_namespace(xp).device == CPU
    with pytest.raises(TypeError, match="array_namespace must be an array namespace"):
        backend_for_namespace("numpy")
    with pytest.raises(TypeError, match="array_namespace must be an array namespace"):
        backend_for_namespace(xp, "no such device")


def test_importing_braidpy_imports_no_optional_array_library():
    code = ("import sys, braidpy, braidpy.backends, braidpy.backends.cupy, "
            "braidpy.backends.array_api; "
            "print(sorted(m for m in ('cupy', 'torch', 'array_api_strict', 'jax') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONWARNINGS="error"))
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ CuPy, with a stand-in


@pytest.fixture
def fake_cp(monkeypatch):
    """tests/fake_cupy.py as the module ``cupy`` (NumPy behind arrays that refuse
    ``__array__``; pinned blocks are bytearrays that it records)."""
    import fake_cupy

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(fake_cupy, "__name__", "cupy")
    for log in (fake_cupy.pinned_allocations, fake_cupy.gets, fake_cupy.sets):
        log.clear()
    return fake_cupy


def cupy_backend(fake_cp, device=0):
    from braidpy.backends.cupy import CupyBackend

    return CupyBackend(fake_cp.cuda.Device(device))  # its own free list of pinned blocks


def in_pinned_block(fake_cp, a):
    return any(np.shares_memory(a, np.frombuffer(b, dtype=np.uint8))
               for b in fake_cp.pinned_allocations)


def test_importing_the_cupy_backend_imports_no_cupy():
    code = ("import sys, braidpy.backends.cupy as c, numpy as np, braidpy.backends as b; "
            "b.backend_for(np.zeros(1)); print(c.is_cupy_array(np.zeros(1)), "
            "'cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONWARNINGS="error"))
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 3, 4)])
def test_cupy_round_trip_is_bitwise_through_pinned_memory(fake_cp, name, shape):
    u0 = sample(name, shape)
    u = fake_cp.asarray(u0)
    backend = cupy_backend(fake_cp)
    buf = backend.pack(u)
    assert bytes(buf[:4]) == wire.MAGIC and buf[6] == wire.CUDA == 2
    assert wire.decode(buf).device_kind == wire.CUDA and wire.decode(buf).shape == shape
    assert in_pinned_block(fake_cp, buf)  # the message itself lies in pinned memory
    if u0.size:  # get(out=) wrote the payload there
        head = 8 + 8 * len(shape)
        assert fake_cp.gets[-1] == (buf.ctypes.data + head, len(buf) - head)
    back = backend.unpack(bytearray(buf))
    assert isinstance(back, fake_cp.ndarray) and back.dtype == u0.dtype
    assert same_bits(fake_cp.host(back), u0)


def test_cupy_states_round_trip_through_app_defaults(fake_cp):
    class CupyApp(Fresh):
        array_namespace = fake_cp

    app = CupyApp()
    u0 = sample("float64", (4, 3))
    buf = app.bufpack(fake_cp.asarray(u0))
    assert buf[6] == wire.CUDA and in_pinned_block(fake_cp, buf)
    back = app.bufunpack(bytearray(buf))
    assert isinstance(back, fake_cp.ndarray) and same_bits(fake_cp.host(back), u0)
    with pytest.raises(TypeError, match="set array_namespace and array_device"):
        Fresh().bufpack(fake_cp.asarray(u0))  # a CuPy state, a NumPy receiver


def test_cupy_unpack_lands_on_the_backends_device(fake_cp):
    backend = cupy_backend(fake_cp, device=1)
    back = backend.unpack(backend.pack(fake_cp.asarray(np.arange(3.0))))
    assert back.device.id == 1 and fake_cp.sets[-1][0] == 1


def test_a_cpu_senders_message_is_refused_by_the_cupy_receiver(fake_cp):
    with pytest.raises(ValueError, match=r"^braidpy message: the sender's array lived on a "
                                         r"CPU device \(device kind 1\).*cupy on <CUDA Device 0>"
                                         r".*places arrays on CUDA.*array_namespace"):
        cupy_backend(fake_cp).unpack(np_backend.pack(np.ones(3)))
    with pytest.raises(ValueError, match=r"lived on a CUDA device \(device kind 2\).*numpy"):
        np_backend.unpack(cupy_backend(fake_cp).pack(fake_cp.asarray(np.ones(3))))


def test_cupy_messages_in_flight_never_share_a_block(fake_cp):
    backend = cupy_backend(fake_cp)
    us = [np.full((5, 2), k, dtype=np.float64) for k in (1.0, 2.0, 3.0, 4.0)]
    m1 = backend.pack(fake_cp.asarray(us[0]))
    held = memoryview(backend.pack(fake_cp.asarray(us[1]))).cast("B")  # as TimeComm.post
    gc.collect()  # the message object is gone; the memoryview an Isend holds is not
    m3 = backend.pack(fake_cp.asarray(us[2]))
    m4 = backend.pack(fake_cp.asarray(us[3]))
    views = [m1, np.frombuffer(held, dtype=np.uint8), m3, m4]
    for i, a in enumerate(views):
        for b in views[i + 1:]:
            assert not np.shares_memory(a, b)
    for u, m in zip(us, views):
        assert same_bits(fake_cp.host(backend.unpack(m)), u)  # none was overwritten


def test_pinned_blocks_are_reused_after_release(fake_cp):
    backend = cupy_backend(fake_cp)
    u = fake_cp.asarray(np.arange(6.0))
    m = backend.pack(u)
    address = m.ctypes.data
    assert backend.blocks.allocated == 1 and backend.blocks.free_blocks() == 0
    del m
    gc.collect()
    assert backend.blocks.free_blocks() == 1
    again = backend.pack(u)
    assert again.ctypes.data == address and backend.blocks.allocated == 1
    other = backend.pack(fake_cp.asarray(np.arange(7.0)))  # another size: another block
    assert backend.blocks.allocated == 2 and not np.shares_memory(again, other)
    assert len(fake_cp.pinned_allocations) == 2


def test_backend_for_picks_the_cupy_backend(fake_cp):
    from braidpy.backends.cupy import CupyBackend

    u = fake_cp.asarray(np.ones(3))
    b = backend_for(u)
    assert isinstance(b, CupyBackend) and isinstance(b, Backend)
    assert b.name == "cupy" and b.device_kind == wire.CUDA and b.device.id == 0
    assert backend_for(u.copy()) is b
    assert backend_for_namespace(fake_cp) is b and backend_for_namespace(fake_cp, 0) is b
    assert backend_for_namespace(fake_cp, "cuda:1").device.id == 1
    assert backends.stack([u, u]).shape == (2, 3)
    with pytest.raises(TypeError, match="array_device for CuPy"):
        backend_for_namespace(fake_cp, "device1")


def test_two_ranks_with_cupy_states_send_through_pinned_blocks(tmp_path, fake_cp):
    """A 2-rank solve with (stand-in) CuPy states: every message between the ranks is
    packed by CupyBackend into pinned blocks; the results equal the serial run's."""
    from backend_cases import run_cupy
    from test_mpi import MPIEXEC, TIMEOUT

    out = tmp_path / "cupy.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(HERE / "mpi_cupy_driver.py"), str(out),
           "2", "fake"]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    got = json.loads(out.read_text())
    assert got["size"] == 2
    par, ser = got["solve"], run_cupy(None, fake_cp)
    assert par["kinds"] == ser["kinds"] == ["fake_cupy"]  # states stayed (stand-in) CuPy
    assert all(n >= 1 for n in par["pinned_blocks"])  # both ranks sent through pinned blocks
    assert par["iterations"] == ser["iterations"] > 1
    np.testing.assert_allclose(par["residuals"], ser["residuals"], rtol=1e-12, atol=0)
    assert par["values"] == ser["values"] and par["final"] == ser["final"]


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (-1.0, 1.0), (2.5, -0.5), (0.0, 3.0),
                                  (1.0, 0.0), (-3.0, 2.0)])
def test_cupy_vector_operations_match_numpy_bitwise(fake_cp, a, b):
    x0, y0 = RNG.standard_normal(9), RNG.standard_normal(9)
    x, y = fake_cp.asarray(x0), fake_cp.asarray(y0)
    backend = cupy_backend(fake_cp)
    backend.sum(a, x, b, y)
    ref = y0.copy()
    np_backend.sum(a, x0, b, ref)
    assert same_bits(fake_cp.host(y), ref)
    backend.sum(a, x, b, x)  # x is y
    np_backend.sum(a, x0, b, x0)
    assert same_bits(fake_cp.host(x), x0)
    c = backend.clone(x)
    assert c is not x and same_bits(fake_cp.host(c), x0)
    assert backend.norm(x) == np_backend.norm(x0)


# ------------------------------------------------------------------ array-api-strict


@pytest.mark.parametrize("device", DEVICES)
def test_strict_clone_stays_on_its_device(device):
    u = xp.asarray([[1.0, 2.0], [3.0, 4.0]], device=device)
    v = Fresh().clone(u)
    assert v.device == device and v is not u
    v += 1.0
    assert host(u).tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a, b", [(1.0, 1.0), (-1.0, 1.0), (2.5, 1.0), (0.0, 1.0), (0.0, 3.0),
                                  (1.0, 0.0), (-3.0, 2.0), (1.0, -0.5)])
def test_strict_sum_matches_numpy_bitwise(device, a, b):
    x0, y0 = RNG.standard_normal(6), RNG.standard_normal(6)
    # copy=True: array-api-strict would otherwise wrap x0's memory and the NumPy
    # reference below would see the result it is meant to check.
    x, y = xp.asarray(x0, copy=True, device=device), xp.asarray(y0, copy=True, device=device)
    Fresh().sum(a, x, b, y)
    want = y0.copy()
    np_backend.sum(a, x0, b, want)
    assert y.device == device and same_bits(host(y), want)
    assert same_bits(host(y), a * x0 + b * y0)
    Fresh().sum(a, x, b, x)  # x is y
    want = x0.copy()
    np_backend.sum(a, want, b, want)
    assert same_bits(host(x), want) and same_bits(want, a * x0 + b * x0)


@pytest.mark.parametrize("device", DEVICES)
def test_strict_norm_and_stack(device):
    u0 = RNG.standard_normal((3, 2))
    u = xp.asarray(u0, device=device)
    assert Fresh().norm(u) == pytest.approx(np.linalg.norm(u0.ravel()), rel=1e-15)
    s = backends.stack([u, u])
    assert s.device == device and s.shape == (2, 3, 2)


def test_strict_step_batch_stacks_and_writes_back_on_the_device():
    class Stacked(Fresh):
        def step_stacked(self, U, t0s, t1s, status):
            assert U.device == DEVICE1 and U.shape == (2, 3)
            U *= 2.0

    us = [xp.ones(3, device=DEVICE1), xp.asarray([1.0, 2.0, 3.0], device=DEVICE1)]
    Stacked().step_batch(us, np.zeros(2), np.ones(2), None)
    assert [u.device for u in us] == [DEVICE1, DEVICE1]
    assert host(us[0]).tolist() == [2.0] * 3 and host(us[1]).tolist() == [2.0, 4.0, 6.0]


def test_mixing_devices_fails_loudly():
    x, y = xp.ones(3, device=CPU), xp.ones(3, device=DEVICE1)
    with pytest.raises(ValueError, match="different devices"):
        Fresh().sum(1.0, x, 2.0, y)
    with pytest.raises(ValueError, match="same device"):
        backends.stack([x, y])
    with pytest.raises(RuntimeError, match="device1"):  # the silent host copy we never make
        np.asarray(y)


def strict_app(device):
    class StrictApp(Fresh):
        array_namespace = xp
        array_device = device

    return StrictApp()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [n for n in DTYPE_NAMES if hasattr(xp, n)])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 0, 3), (3, 4)])
def test_strict_round_trip_on_the_receiving_device(device, name, shape):
    u0 = sample(name, shape)
    app = strict_app(device)
    u = xp.asarray(u0, device=device)
    buf = app.bufpack(u)
    assert bytes(buf[:4]) == wire.MAGIC and buf[6] == wire.CPU
    back = app.bufunpack(bytearray(buf))
    assert back.device == device and back.dtype == u.dtype and same_bits(host(back), u0)


def test_strict_unpack_ignores_where_the_sender_was():
    # Both ranks build on their own device: a CPU_DEVICE sender, a device1 receiver.
    buf = strict_app(CPU).bufpack(xp.asarray([1.0, 2.0]))
    back = strict_app(DEVICE1).bufunpack(buf)
    assert back.device == DEVICE1 and host(back).tolist() == [1.0, 2.0]


def test_strict_state_without_array_namespace_fails_on_the_sender():
    with pytest.raises(TypeError, match="set array_namespace and array_device"):
        Fresh().bufpack(xp.ones(2))
    with pytest.raises(TypeError, match=r"Device\('device1'\).*CPU_DEVICE"):
        strict_app(None).bufpack(xp.ones(2, device=DEVICE1))
    with pytest.raises(TypeError, match="builds arrays of array_api_strict"):
        strict_app(DEVICE1).bufpack(np.ones(2))


def test_an_overridden_bufunpack_is_not_second_guessed():
    class Own(Fresh):
        def bufunpack(self, buf):
            return xp.asarray(np_backend.unpack(buf))

    app = Own()
    assert host(app.bufunpack(app.bufpack(xp.ones(2)))).tolist() == [1.0, 1.0]


def test_serial_solve_keeps_strict_states_on_their_device():
    from backend_cases import run_strict

    out = run_strict(None)
    assert out["devices"] == out["final_devices"] == [str(DEVICE1)]
    assert out["residuals"][-1] < 1e-12


@pytest.mark.skipif(sys.platform == "win32", reason="mpiexec")
def test_two_ranks_with_strict_states_match_serial(tmp_path):
    from backend_cases import run_strict, run_strict_adjoint
    from test_mpi import MPIEXEC, TIMEOUT

    out = tmp_path / "strict.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(HERE / "mpi_backends_driver.py"), str(out),
           "2"]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    got = json.loads(out.read_text())
    assert got["size"] == 2  # the ranks really ran together
    par, ser = got["solve"], run_strict(None)
    # The adjoint's vectors cross ranks on device1 as well (the reversed app builds
    # received vectors like the user's app); bitwise the serial objective and gradient.
    assert got["adjoint"] == run_strict_adjoint(None)
    assert got["adjoint"]["adjoint_iterations"] > 1
    assert par["devices"] == par["final_devices"] == [str(DEVICE1)]
    assert par["iterations"] == ser["iterations"]
    np.testing.assert_allclose(par["residuals"], ser["residuals"], rtol=1e-12, atol=0)
    assert par["values"] == ser["values"] and par["final"] == ser["final"]
    # Layer-parallel training on device1 at 2 ranks: states cross ranks and the gradient
    # is summed over them (through host memory) without leaving the device anywhere else;
    # the NumPy run on one rank gives the same numbers.
    train, host = got["training"], run_strict_training_on_numpy()
    assert train["device"] == str(DEVICE1)
    np.testing.assert_allclose(train["history"], host["history"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(train["params"], host["params"], rtol=1e-12, atol=1e-15)


def run_strict_training_on_numpy():
    from backend_cases import strict_training

    trainer = strict_training(None, device=False)
    keys = ("loss", "objective", "gradient_norm", "step_size", "val_accuracy")
    return dict(history=[[r[k] for k in keys] for r in trainer.history],
                params=trainer.params.tolist())


# ------------------------------------------------------------------ the wire format


def test_header_layout_is_exactly_as_documented():
    u = np.arange(6.0).reshape(2, 3)
    buf = bytes(np_backend.pack(u))
    assert buf[:4] == b"BRPY" and buf[4] == 1 and buf[5] == 12 and buf[6] == 1 and buf[7] == 2
    assert struct.unpack_from("<2q", buf, 8) == (2, 3)
    assert buf[24:] == u.astype("<f8").tobytes() and len(buf) == 24 + 48
    assert b"numpy" not in buf and b"pickle" not in buf


def test_dtype_codes_are_fixed():
    assert wire.DTYPES == {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64",
                           6: "uint8", 7: "uint16", 8: "uint32", 9: "uint64",
                           10: "float16", 11: "float32", 12: "float64",
                           13: "complex64", 14: "complex128"}
    assert wire.DEVICE_KINDS[1] == "CPU" and wire.DEVICE_KINDS[2] == "CUDA"


def layouts(u):
    """u as given, non-contiguous (every other element / transposed) and big-endian."""
    yield u
    if u.ndim >= 1 and u.shape[0] > 1:
        wide = np.repeat(u, 2, axis=0)[::2]
        assert not wide.flags.c_contiguous or u.size == 0
        assert np.array_equal(wide, u, equal_nan=u.dtype.kind in "fc")
        yield wide
    if u.ndim >= 2:
        yield np.ascontiguousarray(u.T).T  # Fortran order
    if u.dtype.itemsize > 1:
        yield u.astype(u.dtype.newbyteorder(">"))


@pytest.mark.parametrize("name", DTYPE_NAMES)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (3, 4), (2, 0, 3), (2, 3, 1, 2)])
def test_numpy_round_trip_is_bitwise_for_every_dtype(name, shape):
    u0 = sample(name, shape)
    for u in layouts(u0):
        buf = Fresh().bufpack(u)
        assert buf[5] == [c for c, n in wire.DTYPES.items() if n == name][0]
        back = Fresh().bufunpack(bytearray(buf))
        assert type(back) is np.ndarray and back.flags.c_contiguous and back.flags.writeable
        assert same_bits(back, u0)  # the native dtype, whatever u's byte order
        assert bytes(np_backend.pack(back)) == bytes(buf)  # and back to the same message


def test_unpack_accepts_any_bytes_like():
    buf = np_backend.pack(np.arange(4.0))
    for b in (bytes(buf), bytearray(buf), memoryview(buf), np.frombuffer(buf, np.uint8),
              np.frombuffer(buf, np.uint8)[None, :], memoryview(bytes(buf)).cast("c")):
        assert np.array_equal(np_backend.unpack(b), np.arange(4.0))


def test_unpacked_array_owns_its_data():
    buf = bytearray(np_backend.pack(np.arange(3.0)))
    back = np_backend.unpack(buf)
    buf[-8:] = bytes(8)
    assert back.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("u, what", [(np.array([object()]), "object"),
                                     (np.array(["ab"]), "<U2"),
                                     (np.zeros(2, dtype="datetime64[s]"), "datetime64"),
                                     (np.zeros(2, dtype=[("a", "f8")]), r"\[\('a', '<f8'\)\]"),
                                     (np.zeros(2, dtype=np.longdouble), "float128|longdouble")])
def test_dtypes_outside_the_table_are_refused_by_the_sender(u, what):
    if u.dtype == np.longdouble and np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("longdouble is float64 here")
    with pytest.raises(TypeError, match=rf"dtype ({what}).*cannot be sent.*override"):
        np_backend.pack(u)


def test_too_many_axes_are_refused_by_the_sender():
    with pytest.raises(ValueError, match="at most 32"):
        np_backend.pack(np.zeros((1,) * 33))


def valid():
    return bytearray(np_backend.pack(np.arange(6.0).reshape(2, 3)))


def forged(**fields):
    """A header with the given fields (valid ones by default) and a payload."""
    f = dict(magic=b"BRPY", version=1, code=12, kind=1, shape=(2, 3), ndim=None, payload=None)
    f.update(fields)
    shape = f["shape"]
    ndim = len(shape) if f["ndim"] is None else f["ndim"]
    payload = f["payload"]
    if payload is None:
        payload = bytes(8 * int(np.prod([max(d, 0) for d in shape])))
    return (f["magic"] + bytes([f["version"], f["code"], f["kind"], ndim])
            + struct.pack(f"<{len(shape)}q", *shape) + payload)


FORGED = {
    "empty": (b"", r"truncated header: 0 bytes"),
    "truncated fixed part": (bytes(valid()[:5]), r"truncated header: 5 bytes"),
    "wrong magic": (forged(magic=b"BRPZ"), r"bad magic b'BRPZ'"),
    "old text header": (struct.pack("<H", 21) + b"numpy;<f8;3" + bytes(24), r"bad magic"),
    "unsupported version": (forged(version=2), r"unsupported version 2"),
    "unknown dtype code": (forged(code=77), r"unknown dtype code 77"),
    "dtype code 0": (forged(code=0), r"unknown dtype code 0"),
    "unknown device kind": (forged(kind=99), r"unknown device kind 99"),
    "huge ndim": (forged(ndim=200), r"ndim 200 exceeds the limit 32"),
    "ndim past the limit": (forged(shape=(1,) * 33), r"ndim 33 exceeds"),
    "truncated shape": (forged(ndim=5, payload=b""), r"truncated header: ndim 5 needs 48"),
    "negative dim": (forged(shape=(2, -3)), r"negative dimension -3 \(axis 1\)"),
    "most negative dim": (forged(shape=(-2**63,)), r"negative dimension"),
    "payload too short": (forged(payload=bytes(47)), r"payload length 47 bytes .*\(48 bytes\)"),
    "payload too long": (forged(payload=bytes(49)), r"payload length 49 bytes .*\(48 bytes\)"),
    "payload missing": (forged(payload=b"")[:24], r"payload length 0"),
    "overflowing shape": (forged(shape=(2**62, 2**62), payload=b""), r"too large"),
    "overflowing empty shape": (forged(shape=(0, 2**62, 2**62), payload=b""), r"too large"),
    "product wraps to the payload": (forged(shape=(2**61, 2**3), payload=b""), r"too large"),
    "data from a GPU": (forged(kind=2), r"CUDA device \(device kind 2\).*array_namespace"),
}


@contextlib.contextmanager
def imports_refused(own_submodules=False):
    """Fails any import (even of a loaded module) inside the block, and checks that
    sys.modules did not change. own_submodules: let a library re-import its own,
    already loaded submodules (array-api-strict's asarray does `from ._array_object
    import Array` on every call)."""
    saved = builtins.__import__, importlib.import_module

    def refuse(*args, **kwargs):
        raise AssertionError(f"unpack tried to import {args[:1]}")

    def relative_only(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            refuse(name)
        return saved[0](name, globals, locals, fromlist, level)

    before = set(sys.modules)
    builtins.__import__ = relative_only if own_submodules else refuse
    importlib.import_module = refuse
    try:
        yield
    finally:
        builtins.__import__, importlib.import_module = saved
    assert set(sys.modules) == before


def strict_receiver():
    b = backend_for_namespace(xp, DEVICE1)
    b.unpack(np_backend.pack(np.zeros(1)))  # warm: the probe and namespace are resolved
    return b


@pytest.mark.parametrize("case", sorted(FORGED))
def test_forged_messages_raise_value_error_naming_the_field(case):
    buf, match = FORGED[case]
    app = Fresh()
    with pytest.raises(ValueError, match=r"^braidpy message: .*" + match):
        with imports_refused():
            app.bufunpack(bytearray(buf))


@pytest.mark.parametrize("case", sorted(FORGED))
def test_forged_messages_fail_the_array_api_receiver_too(case):
    receiver = strict_receiver()
    buf, match = FORGED[case]
    if case == "data from a GPU":
        match = r"CUDA device \(device kind 2\).*array_api_strict"
    with pytest.raises(ValueError, match=r"^braidpy message: .*" + match):
        with imports_refused(own_submodules=True):
            receiver.unpack(buf)


@pytest.mark.parametrize("case", sorted(c for c in FORGED if c != "data from a GPU"))
def test_forged_messages_fail_the_cupy_receiver_too(fake_cp, case):
    buf, match = FORGED[case]
    with pytest.raises(ValueError, match=r"^braidpy message: "):
        cupy_backend(fake_cp).unpack(buf)


def test_a_message_naming_a_module_imports_nothing(tmp_path, monkeypatch):
    """A probe: a header naming a planted module made a rank import it."""
    (tmp_path / "braidpy_planted_probe.py").write_text("import sys\nsys.planted = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    head = b"braidpy_planted_probe;<f8;2"
    for buf in (struct.pack("<H", len(head)) + head + bytes(16),
                forged()[:8] + head + bytes(16)):
        with pytest.raises(ValueError, match="braidpy message"):
            Fresh().bufunpack(bytearray(buf))
    assert "braidpy_planted_probe" not in sys.modules and not hasattr(sys, "planted")


def mutations(rng, base, count):
    """Random edits of a valid message: bit flips, byte sets, cuts, growth, splices."""
    for _ in range(count):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            op = int(rng.integers(0, 6))
            if op == 0 and b:
                i = int(rng.integers(0, len(b)))
                b[i] ^= 1 << int(rng.integers(0, 8))
            elif op == 1 and b:
                b[int(rng.integers(0, min(len(b), 32)))] = int(rng.integers(0, 256))
            elif op == 2:
                del b[int(rng.integers(0, len(b) + 1)):]
            elif op == 3:
                b += rng.bytes(int(rng.integers(1, 24)))
            elif op == 4:
                i = int(rng.integers(0, len(b) + 1))
                b[i:i] = rng.bytes(int(rng.integers(1, 9)))
            else:  # a plausible shape field
                if len(b) >= 16:
                    struct.pack_into("<q", b, 8, int(rng.choice([-1, 0, 1, 3, 2**31, 2**62,
                                                                 -2**63, 2**63 - 1])))
        yield bytes(b)


def random_messages(rng, count):
    for k in range(count):
        n = int(rng.integers(0, 80))
        b = bytearray(rng.bytes(n))
        if k % 2 and n >= 8:  # half of them get past the magic
            b[:5] = b"BRPY\x01"
            b[5] = int(rng.integers(0, 16))
            b[6] = 1
            b[7] = int(rng.integers(0, 5))
        yield bytes(b)


def fuzz_inputs():
    rng = np.random.default_rng(SEED)
    bases = [np_backend.pack(u) for u in (np.arange(6.0).reshape(2, 3), np.array(2.5),
                                          np.zeros(0, np.int8), np.ones((2, 2), np.complex64),
                                          np.array([True, False]))]
    yield from random_messages(rng, 3000)
    for base in bases:
        yield from mutations(rng, base, 700)


def test_fuzzed_messages_raise_value_error_or_round_trip():
    accepted = rejected = 0
    app = Fresh()
    for buf in fuzz_inputs():
        try:
            with imports_refused():
                back = app.bufunpack(bytearray(buf))
        except ValueError as exc:
            assert str(exc).startswith("braidpy message: "), (buf, exc)
            rejected += 1
            continue
        # What is accepted is exactly a message braidpy writes for that array.
        assert bytes(np_backend.pack(back)) == buf, buf
        accepted += 1
    assert rejected > 5000 and accepted > 100  # both paths exercised


def test_fuzzed_messages_on_the_array_api_receiver():
    receiver = strict_receiver()
    for k, buf in enumerate(fuzz_inputs()):
        if k % 3:
            continue
        try:
            with imports_refused(own_submodules=True):
                back = receiver.unpack(buf)
        except ValueError as exc:
            assert str(exc).startswith("braidpy message: "), (buf, exc)
            continue
        assert back.device == DEVICE1
        assert bytes(np_backend.pack(host(back))) == buf
