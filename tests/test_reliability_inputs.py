"""Hostile inputs: sizes from a user, a file or a peer are bounded
before anything is allocated; no input gives a silently wrong answer; output files are
regular files or absent. Every case checks the error's type and that its message names
the option, file or field (docs/errors.md, "Inputs, sizes and files")."""

import io
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from apps import Decay
from train_cases import dense_problem

import braidpy
from braidpy import _limits
from braidpy._limits import LimitError, OutputPathError
from braidpy.data import load_arrays, load_idx, mnist, one_hot, peaks, save_idx
from braidpy.data._files import _read_array
from braidpy.perf import CalibrationError, load_calibration, save_calibration
from braidpy.perf.calibration import calibration_from_json
from braidpy.perf.model import network_spec
from braidpy.perf.plan import plan
from braidpy.train import CheckpointError, TrainConfig, Trainer, checkpoint
from braidpy.train.plots import plot_history
from braidpy.train.progress import CsvLog, JsonLog
from mpi_process import run_mpi

OPTIONS = dict(cfactor=2, abs_tol=1e-13, max_iter=30)
GiB = 2**30


@pytest.fixture
def one_gib(monkeypatch):
    """This process may allocate 1 GiB (whatever the machine has)."""
    monkeypatch.setattr(_limits, "available_memory", lambda: GiB)


# =============================================================================== sizes

def test_an_ntime_beyond_memory_is_refused_by_name_before_allocating(one_gib):
    start = time.perf_counter()
    with pytest.raises(LimitError) as info:  # was: 16 GiB allocated, then a hang
        braidpy.Core(Decay(), 0.0, 5.0, 2**31 + 5, **OPTIONS)
    assert time.perf_counter() - start < 1.0  # refused from the estimate, nothing made
    message = str(info.value)
    assert "ntime = 2147483653" in message and "memory" in message and "1 GiB" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("tstop, ntime, words", [
    (5.0, 2**64, "ntime must be <= 9223372036854775806"),  # the core's int64 index
    (1.0 + 1e-12, 2**20, "ntime = 1048576 needs 1048577 distinct times, but only 4505 "
                         "floating-point numbers lie between"),  # could not increase
])
def test_an_ntime_beyond_the_cores_index_or_float_spacing_is_refused(tstop, ntime, words):
    with pytest.raises(LimitError, match=words):
        braidpy.solve(Decay(), 1.0, tstop, ntime, **OPTIONS)
    assert braidpy.solve(Decay(), 1.0, 1.0 + 1e-12, 4000, max_levels=1).converged


def test_a_grid_that_fits_still_solves(one_gib):
    assert braidpy.solve(Decay(), 0.0, 4.0, 64, **OPTIONS).converged


def _idx(path, code, shape, payload=b""):
    path.write_bytes(struct.pack(f">HBB{len(shape)}I", 0, code, len(shape), *shape) + payload)
    return path


@pytest.mark.parametrize("shape", [(2**32 - 1,) * 3, (2**16,) * 4],
                         ids=["beyond-int64", "wraps-to-zero"])
def test_an_idx_shape_whose_size_overflows_int64_names_the_file(tmp_path, shape):
    path = _idx(tmp_path / "x-idx-ubyte", 0x08, shape, b"\0" * 16)
    with pytest.raises(ValueError) as info:
        load_idx(path)
    expected = int(np.prod(np.array(shape, dtype=object)))
    assert str(path) in str(info.value) and f"needs {expected} data bytes" in str(info.value)


def test_a_gzipped_idx_beyond_memory_is_refused_before_decompressing(tmp_path, one_gib):
    import gzip

    path = tmp_path / "x-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:  # a small file announcing 64 GiB
        f.write(struct.pack(">HBB3I", 0, 0x08, 3, 2**16, 2**10, 2**10))
    with pytest.raises(LimitError, match=r"x-idx3-ubyte\.gz \(IDX shape .*memory"):
        load_idx(path)


def test_a_corrupt_gzip_names_the_file(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage garbage garbage")
    with pytest.raises(ValueError, match=f"{path}: not a readable gzipped IDX file"):
        load_idx(path)


def _mnist_folder(folder, labels=(1, 2, 3), images=None):
    folder.mkdir(exist_ok=True)
    images = np.zeros((3, 4, 4), np.uint8) if images is None else images
    for prefix in ("train", "t10k"):
        save_idx(folder / f"{prefix}-images-idx3-ubyte", images)
        save_idx(folder / f"{prefix}-labels-idx1-ubyte", np.array(labels, np.uint8))
    return folder


def test_an_mnist_label_out_of_range_names_the_labels_file(tmp_path):
    folder = _mnist_folder(tmp_path / "mnist", labels=(1, 200, 3))
    with pytest.raises(ValueError) as info:
        mnist(folder)
    assert str(folder / "train-labels-idx1-ubyte") in str(info.value)
    assert "label 200 is out of range for nclasses=10" in str(info.value)


def _npy_claiming(shape, data=b"\0" * 64):
    """A .npy file whose header claims ``shape`` (float64) but holds ``data`` only."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False,
                                                "shape": shape})
    return head.getvalue() + data


def test_a_npy_header_claiming_more_than_the_file_holds_names_the_file(tmp_path):
    path = tmp_path / "x.npy"
    path.write_bytes(_npy_claiming((10**6, 10**6)))
    with pytest.raises(ValueError, match=f"{path}: .*shape \\(1000000, 1000000\\)"):
        load_arrays(path, path)
    archive = tmp_path / "x.npz"  # in an archive NumPy allocated first: MemoryError
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("features.npy", _npy_claiming((10**6, 10**6)))
    with pytest.raises(LimitError, match=f"{archive} \\(array 'features'\\)"):
        _read_array(archive, None)


def test_generated_and_one_hot_sizes_beyond_memory_are_refused_by_name(one_gib):
    with pytest.raises(LimitError, match=r"peaks\(n=1000000000000\) needs about"):
        peaks(10**12)
    with pytest.raises(LimitError, match="one-hot labels of 1 samples and 1000000000001 "
                                         "classes"):
        one_hot([10**12])


def _checkpoint_with_header(path, text):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("header.json", text)
    return path


HEAD = '{"format": "braidpy-train-checkpoint", "version": 2, '


@pytest.mark.parametrize("body, words", [
    ('"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested 100001 deep; braidpy "
                                                    "reads at most 100"),
    ('"x": ' + "9" * 4000 + "}", "a JSON integer of 4000 digits; braidpy reads at most 40"),
    ('"x": 1e999}', "the JSON number 1e999 is beyond the float range"),
    ('"x": NaN}', "NaN is not a JSON number"),
], ids=["nested", "long-int", "overflow", "nan-token"])
def test_a_checkpoint_header_beyond_the_json_limits_names_the_file(tmp_path, body, words):
    path = _checkpoint_with_header(tmp_path / "c.npz", HEAD + body)
    with pytest.raises(CheckpointError) as info:  # was: RecursionError naming nothing
        checkpoint.load(path)
    assert f"{path} (header.json)" in str(info.value) and words in str(info.value)


def test_a_checkpoint_array_header_claiming_too_much_names_the_file(tmp_path):
    path = tmp_path / "c.npz"
    checkpoint.save(path, {"params": np.zeros(3)})
    with zipfile.ZipFile(path) as zf:
        header = zf.read("header.json")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("header.json", header)
        zf.writestr("a0.npy", _npy_claiming((10**7, 10**7)))
    with pytest.raises(CheckpointError, match=f"{path} \\(array 'a0'\\).*shape"):
        checkpoint.load(path)


def test_a_calibration_nested_too_deep_names_the_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(CalibrationError, match=f"calibration file '{path}': JSON nested "
                                               f"5000 deep"):
        load_calibration(str(path))


def test_the_reusable_checkers_for_the_command_line():
    import argparse

    convert = _limits.count_argument(1, 2**20, "a test limit")
    assert convert("64") == 64
    for text, words in (("1e12", "expected an integer, got '1e12'"), ("0", "must be >= 1"),
                        ("1" * 5000, "must be <= 1048576 (a test limit)"),
                        ("2000000", "must be <= 1048576 (a test limit), got 2000000")):
        with pytest.raises(argparse.ArgumentTypeError, match=words.replace("(", r"\(")
                           .replace(")", r"\)")):
            convert(text)
    with pytest.raises(LimitError, match=r"--layers must be <= 2147483647"):
        _limits.check_count(2**40, "--layers", low=1, high=_limits.INT_MAX)
    _limits.check_training_size(samples=100, state_numbers=8, nlayers=32, width=8)
    with pytest.raises(LimitError, match=r"the network \(5000 samples of 8 numbers, "
                                         r"1099511627776 layers"):
        _limits.check_training_size(samples=5000, state_numbers=8, nlayers=2**40, width=8)


def _cli(capsys, *args):
    from braidpy.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse: bad options
        status = exc.code
    return status, capsys.readouterr().err


@pytest.fixture
def calibration(tmp_path):
    from test_perf_model import made_up

    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    return path


@pytest.mark.parametrize("args, words", [
    (("-P", "1000000000000"), "-P/--procs: expected an int <= 2147483647"),
    (("-P", "1e12"), "-P/--procs: expected an int >= 1, got '1e12'"),
    (("-P", "4", "--network", "dense:99999999999:4"), "size 99999999999 is too large"),
    (("-P", "4", "--batch", "9" * 40), "--batch: expected an int <= 9223372036854775807"),
], ids=["P", "P-float", "width", "batch"])
def test_plan_refuses_huge_numbers_by_option(capsys, calibration, args, words):
    start = time.perf_counter()
    status, err = _cli(capsys, "plan", "--calibration", calibration,
                       "--network", "dense:4:64", *args)
    assert status == 2 and words in err
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("args, words", [
    (("-P", "4", "--network", "dense:4:1000000000000"), "for 1000000000000 layers"),
    (("-P", "4", "--m1", "100000000"), "100000002 iterations per gradient"),
    (("-P", "1396755360"), "P=1396755360 (153090 process grids)"),
], ids=["layers", "iterations", "P-with-many-divisors"])
def test_plan_refuses_work_it_cannot_finish_at_once(capsys, calibration, args, words):
    # Each of these ran for hours before (a loop over every number up to P, or a
    # simulation per layer and iteration).
    start = time.perf_counter()
    status, err = _cli(capsys, "plan", "--calibration", calibration,
                       *(("--network", "dense:4:64") if "--network" not in args else ()),
                       *args)
    assert status == 1 and words in err and "braidpy plan takes at most" in err
    assert time.perf_counter() - start < 10


# ========================================================== no silently wrong answer

class ViewClone(Decay):
    def clone(self, u):
        return u[:]


class ReshapeClone(Decay):
    def clone(self, u):
        return u.reshape(-1)


class CountsInit(Decay):
    def __init__(self):
        super().__init__()
        self.inits = 0

    def init(self, t):
        self.inits += 1
        return super().init(t)


class CopyingClone(CountsInit):
    def clone(self, u):
        return np.array(u, copy=True)


@pytest.mark.parametrize("app", [ViewClone(), ReshapeClone()], ids=["u[:]", "reshape"])
def test_a_clone_returning_a_view_is_named_before_the_solve(app):
    # Before: converged=True with final value 0.0 instead of 0.0081, serially.
    with pytest.raises(TypeError) as info:
        braidpy.solve(app, 0.0, 5.0, 64, cfactor=4)
    assert "clone(u) returned a numpy.ndarray that shares memory with u" in str(info.value)


def test_the_clone_check_costs_one_init_and_nothing_for_the_default_clone():
    app = CountsInit()  # App's own clone copies: not checked
    braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
    assert app.inits == 0
    app = CopyingClone()
    core = braidpy.Core(app, 0.0, 4.0, 64, **OPTIONS)
    assert app.inits == 1  # one init(tstart) when the Core is made, none per step
    np.testing.assert_allclose(core.solve().final,
                               braidpy.solve(Decay(), 0.0, 4.0, 64, **OPTIONS).final)


class FakeDevice:
    """An array on a device, seen only through the CUDA array interface."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,),
                                         "typestr": "<f8", "version": 3, "strides": None}


def test_device_arrays_are_compared_by_their_memory():
    from braidpy._solver import _extent

    assert _extent(FakeDevice(4096, 4)) == ("cuda", 4096, 4128)
    a, view, other = _extent(FakeDevice(4096, 4)), _extent(FakeDevice(4104, 2)), \
        _extent(FakeDevice(8192, 4))
    assert a[1] < view[2] and view[1] < a[2]  # overlaps
    assert not (a[1] < other[2] and other[1] < a[2])


def _made_up_json():
    from test_perf_model import made_up

    return made_up(step=1e-3).to_json()


@pytest.mark.parametrize("value, words", [
    (float("nan"), "seconds must be a finite number > 0, got nan"),
    (-5.0, "seconds must be a finite number > 0, got -5.0"),
    (0.0, "seconds must be a finite number > 0, got 0.0"),
])
def test_plan_refuses_non_finite_or_non_positive_calibration_points(tmp_path, capsys, value,
                                                                    words):
    data = _made_up_json()
    data["layers"][0]["costs"]["fwd"]["points"] = [[1, 10, value], [1, 1000, 1e-3]]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))  # NaN as the JSON token Python writes
    status, err = _cli(capsys, "plan", "--calibration", path, "--network", "dense:4:64",
                       "-P", "2")
    assert status == 1  # was: "nan s/gradient" / "-980 s/gradient", status 0
    assert f"field layers[0].costs.fwd.points[0] {words}" in err and str(path) in err


def test_plan_refuses_a_calibration_that_predicts_no_positive_time():
    from braidpy.perf import Calibration, CostFit, LayerCosts, Link

    nan = CostFit(float("nan"), 0.0)
    layer = LayerCosts("dense-w4", "dense", (4,), 1,
                       {"fwd": nan, "adj": nan, "grad": nan, "vec": CostFit(0.0, 0.0)})
    free = Link(0.0, 0.0, "assumed: test")
    with pytest.raises(ValueError, match=r"predicts nan s/gradient for 1x1x2 .*costs must "
                                         r"be finite"):
        plan(network_spec("dense:4:16"), 2, Calibration((layer,), 0.0, free, free))


def test_non_finite_data_are_refused_with_the_file_and_the_first_bad_row(tmp_path):
    X = np.ones((5, 3))
    X[3, 1] = np.nan
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "y.csv").write_text("0\n1\n0\n1\n0\n")
    with pytest.raises(ValueError, match=f"{tmp_path / 'x.npy'}: sample 3 \\(row 4 of its "
                                         f"data\\) holds nan"):
        load_arrays(tmp_path / "x.npy", tmp_path / "y.csv")
    (tmp_path / "x.csv").write_text("1,2\n3,inf\n")  # what braidpy predict reads
    with pytest.raises(ValueError, match=f"{tmp_path / 'x.csv'}: sample 1 .* holds inf"):
        _read_array(tmp_path / "x.csv", ",")
    images = np.zeros((3, 4, 4), np.float32)
    images[2, 0, 0] = np.inf
    folder = _mnist_folder(tmp_path / "mnist", images=images)
    with pytest.raises(ValueError, match=f"{folder / 'train-images-idx3-ubyte'}: sample 2 "):
        mnist(folder)


def _tiny_run(tmp_path, capsys):
    """A checkpoint of one serial step on 6 samples of x.npy / y.npy: (X, its path)."""
    X, C = np.ones((6, 2)), np.eye(3)[[0, 1, 2, 0, 1, 2]]
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", C)
    ckpt = tmp_path / "run.ckpt"
    status, err = _cli(capsys, "train", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                       "--mode", "serial", "--iterations", "1", "--layers", "2", "--width",
                       "2", "--validation-fraction", "0", "--checkpoint", ckpt, "-q")
    assert status == 0, err
    return X, ckpt


def test_predict_and_evaluate_refuse_non_finite_inputs(tmp_path, capsys):
    X, ckpt = _tiny_run(tmp_path, capsys)
    X[4, 0] = np.nan
    np.save(tmp_path / "bad.npy", X)
    status, err = _cli(capsys, "predict", ckpt, tmp_path / "bad.npy",
                       "-o", tmp_path / "out.npy")
    assert status == 2 and f"{tmp_path / 'bad.npy'}: sample 4" in err  # was: class ids
    assert not (tmp_path / "out.npy").exists()
    status, err = _cli(capsys, "evaluate", ckpt, tmp_path / "bad.npy",
                       "--labels", tmp_path / "y.npy", "--validation-fraction", "0")
    assert status == 2 and f"{tmp_path / 'bad.npy'}: sample 4" in err


# --------------------------------------------------------------- checkpoint fields

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real training checkpoint (serial, 3 steps, shuffled batches, validation)."""
    net, X, C = dense_problem(nlayers=4, batch=24)
    path = tmp_path_factory.mktemp("ckpt") / "c.npz"
    cfg = TrainConfig(mode="serial", iterations=3, seed=3, batch_size=8, checkpoint=str(path))
    Trainer(net, (X, C), (X[:8], C[:8]), cfg).run()
    return path, net, X, C, cfg


def _tampered(source, target, change):
    """``source`` with ``change(header, arrays)`` applied (arrays by name, as arrays)."""
    with zipfile.ZipFile(source) as zf:
        header = json.loads(zf.read("header.json"))
        arrays = {n[:-4]: np.load(io.BytesIO(zf.read(n))) for n in zf.namelist()
                  if n.endswith(".npy")}
    change(header, arrays)
    with zipfile.ZipFile(target, "w") as zf:
        zf.writestr("header.json", json.dumps(header))
        for name, a in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, a, allow_pickle=False)
            zf.writestr(f"{name}.npy", buf.getvalue())
    return target


def _set(field, value):
    def change(header, arrays):
        node, *rest = field.split(".")
        if rest:
            header[node][rest[0]] = value
        else:
            header[field] = value
    return change


def _array(field, edit):
    def change(header, arrays):
        node = header
        for part in field.split("."):
            node = node[part]
        arrays[node["__array__"]] = edit(arrays[node["__array__"]].copy())
    return change


def _nan_at(i):
    def edit(a):
        a[i] = np.nan
        return a
    return edit


CORRUPTIONS = [
    (_set("iteration", -5), "field 'iteration' must be an int >= 0, got -5"),
    (_set("iteration", "3"), "field 'iteration' must be an int, got '3'"),
    (_set("iteration", 7), "field 'history' must hold one record per step, iteration = 7"),
    (_set("epoch", 99), "field 'epoch' cannot exceed iteration = 3, got 99"),
    (_set("stale", -1), "field 'stale' must be an int >= 0"),
    (_set("position", 10**6), "field 'position' must lie within the batch order (24 "
                              "samples)"),
    (_set("nparams", 5), "field 'params' must hold nparams = 5 numbers"),
    (_array("params", _nan_at(7)), "field 'params' must be finite (entry 7 is nan)"),
    (_array("best.params", _nan_at(0)), "field 'best.params' must be finite"),
    (_array("order", np.zeros_like), "field 'order' must be a permutation"),
    (_array("order", lambda a: a.astype(np.float64)), "field 'order' must be a 1-D integer "
                                                      "array"),
    (_set("data.train", [99, 2]), "field 'order' must order the 99 training samples"),
    (_set("rng.bit_generator", "os.system"), "field 'rng' must be the state of a NumPy bit "
                                             "generator"),
    (_set("rng.state", {"state": -1, "inc": "x"}), "field 'rng' is not a valid PCG64 state"),
    (_set("best.accuracy", 2.0), "field 'best.accuracy' must be null or a number in [0, 1]"),
    (_set("best.iteration", 9), "field 'best.iteration' cannot exceed iteration = 3"),
    (_set("history", [1, 2, 3]), "field 'history[0]' must be an object"),
    (_set("network.width", "4"), "field 'network.width' must be an int, got '4'"),
    (_set("network.tstop", -2.0), "field 'network.tstop' must be a finite number > 0"),
    (_set("network.nlayers", 2**40), "field 'network.nlayers' must be an int <= 2147483647"),
    (_set("network.nlayers", 2**30), "field 'network' (1073741824 layers of width 4) "
                                     "needs about"),
    (_set("config", [1]), "field 'config' must be an object"),
]


@pytest.mark.parametrize("change, words", CORRUPTIONS,
                         ids=[w.split("'")[1] + "-" + str(k) for k, (_, w) in
                              enumerate(CORRUPTIONS)])
def test_checkpoint_fields_are_validated_naming_the_file_and_field(trained, tmp_path, change,
                                                                   words, one_gib):
    path, net, X, C, cfg = trained
    checkpoint.load(path)  # the real one is fine
    bad = _tampered(path, tmp_path / "bad.npz", change)
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(bad)
    assert f"{bad}: field" in str(info.value) and words in str(info.value)
    with pytest.raises(CheckpointError, match=words.split(",")[0].replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        Trainer(net, (X, C), (X[:8], C[:8]), cfg).resume(bad)  # was: resumed silently


# ------------------------------------------------------------ Core: closed, cold

def test_a_closed_core_refuses_to_solve_by_name():
    core = braidpy.Core(Decay(), 0.0, 4.0, 64, **OPTIONS)
    core.solve()
    core.close()
    with pytest.raises(RuntimeError, match=r"Core was closed \(Core.close\(\)"):
        core.solve()


MPI_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from mpi4py import MPI
    sys.path.insert(0, sys.argv[3])
    from apps import Decay
    from mpi_world import expect_world
    import braidpy

    comm = MPI.COMM_WORLD
    expect_world(comm, sys.argv[1])
    out = {}

    def outcome(what, fn):
        try:
            fn()
            out[what] = "ok"
        except Exception as exc:
            out[what] = [type(exc).__name__, str(exc)]

    core = braidpy.Core(Decay(), 0.0, 4.0, 64, comm=comm, cfactor=2)
    core.solve()
    core.close()
    outcome("closed", core.solve)  # was: "Invalid communicator, error stack: ..."

    class ViewOnRank1(Decay):
        def clone(self, u):
            return u[:] if comm.rank == 1 else u.copy()

    outcome("view", lambda: braidpy.Core(ViewOnRank1(), 0.0, 4.0, 64, comm=comm, cfactor=2))
    outcome("after", lambda: braidpy.solve(Decay(), 0.0, 4.0, 64, comm=comm, cfactor=2))
    everyone = comm.gather(out, root=0)
    if comm.rank == 0:
        with open(sys.argv[2], "w") as f:
            json.dump(everyone, f)
""")


def test_under_mpi_a_closed_core_and_a_view_clone_on_one_rank_stop_every_rank(tmp_path):
    from test_mpi import MPIEXEC

    script, out = tmp_path / "driver.py", tmp_path / "out.json"
    script.write_text(MPI_SCRIPT)
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, str(script), "2", str(out),
                           str(Path(__file__).resolve().parent)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = json.loads(out.read_text())
    for rank in ranks:
        assert rank["closed"][0] == "RuntimeError" and "Core was closed" in rank["closed"][1]
        assert rank["after"] == "ok"  # nothing left waiting
    assert ranks[1]["view"][0] == "TypeError" and "clone(u) returned" in ranks[1]["view"][1]
    assert ranks[0]["view"][0] == "BraidError" and "rank 1" in ranks[0]["view"][1]


def test_a_failure_after_the_cores_solve_leaves_the_next_solve_cold(monkeypatch):
    core = braidpy.Core(Decay(), 0.0, 4.0, 64, **OPTIONS)
    core.solve()
    core.solve()  # warm: no init calls
    assert core.counts().get("init", 0) == 0

    def summary_fails():
        raise OSError("stdout is closed")

    monkeypatch.setattr(core, "_print_summary", summary_fails)
    with pytest.raises(OSError, match="stdout is closed"):
        core.solve()
    monkeypatch.undo()
    core.solve()
    assert core.counts()["init"] > 0  # cold, as after any failure
    strict = braidpy.Core(Decay(), 0.0, 4.0, 64, cfactor=2, abs_tol=1e-14, max_iter=2,
                          require_convergence=True)
    with pytest.raises(braidpy.ConvergenceError):
        strict.solve()
    with pytest.raises(braidpy.ConvergenceError):
        strict.solve()
    assert strict.counts()["init"] > 0


# ================================================================================ files

WRITERS = {
    "checkpoint": lambda p: checkpoint.save(p, {"iteration": 1}),
    "log": lambda p: JsonLog(p, {"x": 1}).close(),
    "csv": lambda p: CsvLog(p).close(),
    "plot": lambda p: plot_history([{"iteration": 1, "loss": 0.5}], p),
    "calibration file": lambda p: save_calibration(
        calibration_from_json(_made_up_json()), str(p)),
}


def _kinds(tmp_path):
    folder = tmp_path / "folder.png"
    folder.mkdir()
    real = tmp_path / "real.png"
    real.write_bytes(b"keep me")
    link = tmp_path / "link.png"
    link.symlink_to(real)
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    kinds = {"a folder": folder, "a symbolic link": link, "a FIFO": fifo}
    if os.path.exists("/dev/full"):
        kinds["a character device"] = Path("/dev/full")
    return kinds, real


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_refuses_devices_folders_fifos_and_links(tmp_path, writer):
    kinds, real = _kinds(tmp_path)
    if writer == "plot":  # a folder (even folder.png) receives the figures
        del kinds["a folder"]
    for kind, path in kinds.items():
        before = os.lstat(path)
        with pytest.raises(OutputPathError) as info:  # never hangs on the FIFO either
            WRITERS[writer](path)
        message = str(info.value)
        assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)
        assert str(path) in message and writer in message, message
        if writer == "plot" and path.suffix != ".png":  # /dev/full: a folder's place
            assert "exists and is not a folder" in message, message
        else:
            assert kind in message, message
        after = os.lstat(path)
        assert (stat.S_IFMT(after.st_mode), after.st_ino) == \
            (stat.S_IFMT(before.st_mode), before.st_ino)  # /dev/full is still the device
    assert real.read_bytes() == b"keep me"  # nothing written through the link


@pytest.mark.parametrize("writer", ["checkpoint", "plot", "calibration file"])
def test_atomic_writers_never_write_through_a_planted_temporary_link(tmp_path, writer):
    target, victim = tmp_path / "out.png", tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (tmp_path / "out.png.tmp").symlink_to(victim)
    WRITERS[writer](target)
    assert victim.read_bytes() == b"keep me" and target.stat().st_size > 0
    assert not (tmp_path / "out.png.tmp").exists()


def test_regular_files_and_new_paths_are_written_as_before(tmp_path):
    for name, write in WRITERS.items():
        path = tmp_path / "new" / f"{name.replace(' ', '_')}.png"
        path.parent.mkdir(exist_ok=True)
        write(path)  # absent
        write(path)  # an existing regular file, replaced
        assert path.is_file() and path.stat().st_size > 0


# --------------------------------------------------------------- the command line's sizes and files

def _braidpy(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "braidpy", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_train_with_a_billion_layers_exits_2_at_once_naming_the_size():
    started = time.perf_counter()
    proc = _braidpy("train", "peaks", "--layers", "1000000000", timeout=60)  # hung before
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--layers 1000000000" in proc.stderr and "of memory, more than" in proc.stderr
    assert "train: error: " in proc.stderr and "Traceback" not in proc.stderr
    assert time.perf_counter() - started < 30


@pytest.mark.parametrize("option, value, words", [
    ("--layers", 2**31, "--layers: must be <= 2147483647 (the compiled core's C int)"),
    ("--width", 10**40, "--width: must be <= 2147483647"),
    ("--iterations", 2**31, "--iterations: must be <= 2147483647"),
    ("--checkpoint-every", 0, "--checkpoint-every: must be >= 1"),
    ("--patience", -1, "--patience: must be >= 0"),
    ("--samples", 2**63, "--samples: must be <= 9223372036854775807 (the compiled core's "
                         "int64 index)"),
    ("--validation-samples", 2**63, "--validation-samples: must be <= 9223372036854775807"),
    ("--seed", 2**63, "--seed: must be <= 9223372036854775807"),
    ("--batch", "1e9", "--batch: expected an integer, got '1e9'"),
])
def test_train_counts_beyond_the_cores_types_are_usage_errors(capsys, option, value, words):
    status, err = _cli(capsys, "train", "peaks", option, value)
    assert status == 2 and words in err, err


def test_an_output_device_is_refused_by_option_before_training():
    proc = _braidpy("train", "peaks", "--checkpoint", "/dev/full", "--iterations", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--checkpoint /dev/full: is a character device" in proc.stderr
    assert "step " not in proc.stderr  # no step was taken
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


@pytest.mark.parametrize("option", ["--checkpoint", "--log", "--csv", "--plot"])
def test_train_outputs_that_are_folders_links_or_devices_are_usage_errors(tmp_path, capsys,
                                                                          option):
    kinds, real = _kinds(tmp_path)
    for kind, path in kinds.items():
        if option == "--plot" and kind == "a folder":
            continue  # a folder receives the figures
        status, err = _cli(capsys, "train", "peaks", "--samples", "20",
                           "--validation-samples", "0", "--layers", "2", "--iterations",
                           "1", "--mode", "serial", "-q", option, path)
        assert status == 2 and f"{option} {path}: is {kind}" in err, (kind, err)
    assert real.read_bytes() == b"keep me"


def test_predict_refuses_a_link_and_writes_its_output_atomically(tmp_path, capsys):
    X, ckpt = _tiny_run(tmp_path, capsys)
    victim = tmp_path / "victim.csv"
    victim.write_text("keep me")
    (tmp_path / "out.csv").symlink_to(victim)
    status, err = _cli(capsys, "predict", ckpt, tmp_path / "x.npy", "-o", tmp_path / "out.csv")
    assert status == 2 and f"-o {tmp_path / 'out.csv'}: is a symbolic link" in err, err
    assert victim.read_text() == "keep me"
    (tmp_path / "new.csv.tmp").symlink_to(victim)  # a planted temporary link
    status, err = _cli(capsys, "predict", ckpt, tmp_path / "x.npy", "-o", tmp_path / "new.csv",
                       "-q")
    assert status == 0, err
    assert victim.read_text() == "keep me" and not (tmp_path / "new.csv.tmp").exists()
    assert len((tmp_path / "new.csv").read_text().splitlines()) == 6


# ----------------------------------------------------- a full disk, a file size limit

def _limited(size):
    """A child's set-up: files of at most ``size`` bytes, and a write past that is the
    error EFBIG (SIGXFSZ ignored), as a full disk's ENOSPC is."""
    import resource
    import signal

    def setup():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return setup


def _run_limited(size, argv, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env, preexec_fn=_limited(size))


LIMITED_WRITERS = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from test_reliability_inputs import WRITERS
    from braidpy._limits import OutputWriteError
    try:
        WRITERS[sys.argv[1]](sys.argv[2])
    except OutputWriteError as exc:
        print("OutputWriteError", exc)
    else:
        print("written")
""")

BIG = {"checkpoint": lambda p: checkpoint.save(p, {"iteration": 1, "a": np.zeros(4000)}),
       "log": lambda p: JsonLog(p, {"x": "y" * 6000}).close(),
       "csv": lambda p: CsvLog(p, [{"iteration": k, "loss": 0.1} for k in range(999)]).close()}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_on_a_full_disk_names_the_file_and_keeps_the_last_good_one(tmp_path,
                                                                                writer):
    """A write past a file size limit (EFBIG; a full disk's ENOSPC takes the same path)
    raises OutputWriteError naming the writer and the file; an atomic writer leaves
    exactly the previous good file (no FILE.tmp), a log the lines before."""
    script = tmp_path / "write.py"
    script.write_text(LIMITED_WRITERS)
    target = tmp_path / "out.png"
    WRITERS[writer](target)  # the previous good file
    before = target.read_bytes()
    (tmp_path / "write_big.py").write_text(LIMITED_WRITERS.replace("WRITERS[", "BIG[")
                                           .replace("import WRITERS", "import BIG"))
    for name, big in (("write.py", False), ("write_big.py", True)):
        if big and writer not in BIG:
            continue
        size = 16 if not big else len(before) + 200
        proc = _run_limited(size, [tmp_path / name, writer, target,
                                   os.path.dirname(__file__)])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("OutputWriteError"), proc.stdout + proc.stderr
        assert f"{writer} {target}: could not write it (File too large)" in proc.stdout
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == \
            ["out.png"]
        if writer in ("checkpoint", "plot", "calibration file"):
            assert "the previous file is kept" in proc.stdout
            assert target.read_bytes() == before
        else:
            assert "what was written before is kept" in proc.stdout
    if writer == "checkpoint":
        assert checkpoint.load(target) == {"iteration": 1}


@pytest.mark.parametrize("option", ["--log", "--csv", "--plot", "--checkpoint"])
def test_train_outputs_on_a_full_disk_stop_the_run_naming_the_option(tmp_path, option):
    """``braidpy train`` whose log, CSV, plot or checkpoint meets a full disk exits 1
    with one line naming the option and the file (it ran on, or said "[Errno 28]"). A
    serial run never initialises MPI (which aborted under ``ulimit -f`` before this)."""
    out = tmp_path / ("out.png" if option == "--plot" else "out")
    proc = _run_limited(3000, ["-m", "braidpy", "train", "peaks", "--samples", "200",
                               "--layers", "4", "--iterations", "40", "--mode", "serial",
                               "-q", option, out])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"braidpy train: error: {option} {out}: could not write it (File too large)" \
        in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "MPI" not in proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ([] if option in ("--checkpoint", "--plot") else ["out"]), left


def test_predict_output_on_a_full_disk_names_the_option(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    assert _braidpy("train", "peaks", "--samples", "200", "--layers", "4", "--iterations",
                    "1", "--mode", "serial", "-q", "--checkpoint", ckpt).returncode == 0
    np.save(tmp_path / "X.npy", np.random.default_rng(8).uniform(-3, 3, (2000, 2)))
    (tmp_path / "ids.npy").write_bytes(b"the previous output")
    proc = _run_limited(4096, ["-m", "braidpy", "predict", ckpt, tmp_path / "X.npy",
                               "-o", tmp_path / "ids.npy"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"-o {tmp_path / 'ids.npy'}: could not write it (" in proc.stderr, proc.stderr
    assert "); the previous file is kept" in proc.stderr  # NumPy's words: "2000 requested
    # and 496 written"
    assert (tmp_path / "ids.npy").read_bytes() == b"the previous output"
    assert not (tmp_path / "ids.npy.tmp").exists()


# ------------------------------------------------------ public API values at the boundary

def test_solution_refuses_a_time_or_index_that_is_no_grid_point_by_name():
    core = braidpy.Core(Decay(), 0.0, 4.0, 8, cfactor=2)
    result = core.solve()
    for get in (core.solution, result.solution):  # t=nan gave the value at t0
        for t in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"t={t} is not a point of the time grid"):
                get(t=t)
        with pytest.raises(TypeError, match="t must be a real number .* got 'a'"):
            get(t="a")
        with pytest.raises(TypeError, match="index must be an int .* got 2.0"):
            get(index=2.0)
    assert core.solution(index=2) == core.solution(t=1.0)


@pytest.mark.parametrize("times, words", [
    (["a", 1.0, 2.0, 3.0, 4.0], "entry 0 is 'a'"),
    ([0.0, "1.0", 2.0, 3.0, 4.0], "entry 1 is '1.0'"),  # text converted silently
    ([0.0, True, 2.0, 3.0, 4.0], "entry 1 is True"),
])
def test_times_that_are_not_numbers_are_named(times, words):
    with pytest.raises(TypeError, match=f"times must hold real numbers, got {words}"):
        braidpy.Core(Decay(), 0.0, 4.0, 4, times=times)


class ReadOnlyStep(Decay):
    def step(self, u, t0, t1, status):
        v = u / (1.0 - self.lam * (t1 - t0))
        v.flags.writeable = False
        return v


class ResizingStep(Decay):
    def step(self, u, t0, t1, status):
        u.resize((3,), refcheck=False)


@pytest.mark.parametrize("app, words", [
    (ReadOnlyStep, r"step\(u, t0, t1, status\) returned a read-only NumPy array"),
    (ResizingStep, r"step\(u, t0, t1, status\) changed the shape of u in place \(u is now "
                   r"numpy.ndarray of shape \(3,\)"),
])
def test_a_step_breaking_its_state_is_named_as_steps_fault(app, words):
    """Reported as a failure of ``sum`` ("output array is read-only") or a bare NumPy
    broadcast error before."""
    with pytest.raises(ValueError, match=words):
        braidpy.Core(app(), 0.0, 1.0, 8, cfactor=2).solve()


@pytest.mark.parametrize("field, value, words", [
    ("lr", -1.0, "lr must be None or a finite number > 0, got -1.0"),
    ("lr", float("nan"), "lr must be None or a finite number > 0, got nan"),
    ("momentum", 2.0, "momentum must be None or a number in [0, 1), got 2.0"),
    ("checkpoint", 5, "checkpoint must be a file path (str or os.PathLike) or None, got 5"),
    ("seed", 10**30, "seed must be an int <= 9223372036854775807"),
])
def test_train_config_values_are_checked_at_construction(field, value, words):
    extra = {"optimizer": "sgd"} if field == "momentum" else {}
    with pytest.raises((TypeError, ValueError)) as info:
        TrainConfig(**{field: value}, **extra)
    assert words in str(info.value)


def test_trainer_refuses_non_finite_initial_parameters_by_entry():
    net, X, C = dense_problem(nlayers=4)
    params = net.init_params(3, 0.1)
    params[5] = np.nan
    with pytest.raises(ValueError, match="params must be finite: entry 5 is nan"):
        Trainer(net, (X, C), config=TrainConfig(mode="serial"), params=params)
    with pytest.raises(ValueError, match="params must be an array of floating-point"):
        Trainer(net, (X, C), config=TrainConfig(mode="serial"),
                params=np.zeros(net.nparams, dtype=np.int64))


@pytest.mark.parametrize("args, option", [
    (["--iterations", "\u0663"], "--iterations"),  # Arabic-Indic 3: int() takes it
    (["--lr", "\u0661.\u0665"], "--lr"),
    (["--cf", "\uff12"], "--cf"),  # full-width 2
    (["--grid", "\u0661,1,1"], "--grid"),
    (["--validation-fraction", "0.3"], "--validation-fraction"),  # peaks: ignored before
])
def test_cli_numbers_in_other_scripts_and_options_a_source_ignores_are_usage_errors(
        capsys, args, option):
    from cli_runner import in_process

    status, _, err = in_process(capsys, "train", "peaks", *args)
    assert status == 2 and option in err, err
    assert args[1] in err or "does not apply to data source 'peaks'" in err


FULL_DISK_UNDER_MPI = textwrap.dedent("""
    import resource, signal, sys
    from mpi4py import MPI  # started before the limit: its shared memory is made
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE,
                       (3000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    from braidpy.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("option", ["--log", "--checkpoint"])
def test_under_mpi_a_full_disk_on_rank_0_stops_every_rank_naming_the_option(tmp_path,
                                                                          nranks, option):
    from test_mpi import MPIEXEC

    script = tmp_path / "limited.py"
    script.write_text(FULL_DISK_UNDER_MPI)
    out = tmp_path / "out"
    proc = run_mpi([MPIEXEC, "-n", str(nranks), sys.executable, str(script), "train",
                    "peaks", "--mode", "oneshot", "--samples", "100", "--validation-samples",
                    "50", "--layers", "8", "--iterations", "40", "-q", option, str(out)],
                   capture_output=True, text=True, timeout=120,
                   env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count(f"braidpy train: error: {option} {out}: could not write it "
                             f"(File too large)") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["limited.py"] + (["out"] if option == "--log" else [])
