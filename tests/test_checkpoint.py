"""Checkpoint files (braidpy.train.checkpoint): arrays plus a JSON header, no pickle,
atomic writes, and the data fingerprint that stops a resume on other data."""

import io
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
from train_cases import dense_problem

from braidpy.train import (CheckpointError, DataMismatchError, TrainConfig, Trainer,
                           checkpoint, load_checkpoint, save_checkpoint)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_round_trip_keeps_values_types_and_bits(tmp_path):
    state = {"iteration": 7, "x": 0.1 + 0.2, "tiny": 5e-324, "nan": float("nan"),
             "inf": [float("inf"), float("-inf")], "shape": (3, 4), "none": None,
             "flag": True, "numpy": np.float64(1 / 3), "int64": np.int64(2**62),
             "warm": {8: np.arange(6.0).reshape(2, 3), 16: np.zeros((0, 2))},
             "order": np.array([3, 1, 2], dtype=np.int64),
             "rng": np.random.default_rng(11).bit_generator.state,
             "history": [{"loss": 1.25, "residuals": [1e-3, 1e-9]}]}
    save_checkpoint(tmp_path / "c.npz", state)
    back = load_checkpoint(tmp_path / "c.npz")
    assert back["x"] == 0.1 + 0.2 and back["tiny"] == 5e-324 and np.isnan(back["nan"])
    assert back["inf"] == [float("inf"), float("-inf")] and back["shape"] == (3, 4)
    assert back["none"] is None and back["flag"] is True and back["numpy"] == 1 / 3
    assert back["int64"] == 2**62 and back["rng"] == state["rng"]
    assert sorted(back["warm"]) == [8, 16]
    np.testing.assert_array_equal(back["warm"][8], state["warm"][8])
    assert back["order"].dtype == np.int64 and back["history"] == state["history"]
    # The format: a zip whose first member is a strict-JSON header; arrays as .npy files.
    with zipfile.ZipFile(tmp_path / "c.npz") as zf:
        names = zf.namelist()
        header = json.loads(zf.read("header.json"), parse_constant=pytest.fail)
    assert names[0] == "header.json" and all(n.endswith(".npy") for n in names[1:])
    assert (header["format"], header["version"]) == ("braidpy-train-checkpoint", 2)
    assert header["order"] == {"__array__": "a2"} and header["nan"] == {"__float__": "nan"}
    assert sorted(np.load(tmp_path / "c.npz", allow_pickle=False).files) == sorted(
        ["header.json"] + [n[:-4] for n in names[1:]])


class RunsCode:
    """Unpickling this creates the marker file: what a crafted checkpoint could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_crafted_pickle_checkpoint_is_refused_without_running_it(tmp_path, protocol):
    marker = tmp_path / "pwned"
    path = tmp_path / "old.ckpt"
    path.write_bytes(pickle.dumps({"format": "braidpy-train-checkpoint-1",
                                   "state": RunsCode(marker)}, protocol=protocol))
    with pickle_forbidden():
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(path)
    assert not marker.exists()
    if protocol >= 2:  # pickles that announce themselves get the explanation
        assert "pickle" in str(info.value) and "arbitrary code" in str(info.value)
    assert str(path) in str(info.value)


def test_object_array_in_a_checkpoint_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("header.json", json.dumps({"format": "braidpy-train-checkpoint",
                                               "version": 2, "params": {"__array__": "a0"}}))
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array([RunsCode(marker)], dtype=object),
                                  allow_pickle=True)
        zf.writestr("a0.npy", buf.getvalue())
    with pickle_forbidden():
        with pytest.raises(CheckpointError, match="unreadable checkpoint"):
            load_checkpoint(path)
    assert not marker.exists()


class pickle_forbidden:
    """Any unpickling inside the block fails the test."""

    def __enter__(self):
        self.saved = pickle.loads, pickle.load, pickle.Unpickler
        pickle.loads = pickle.load = pickle.Unpickler = self.fail  # type: ignore[assignment]

    def __exit__(self, *exc):
        pickle.loads, pickle.load, pickle.Unpickler = self.saved

    @staticmethod
    def fail(*args, **kwargs):
        pytest.fail("a checkpoint was unpickled")


@pytest.mark.parametrize("content, match", [
    (b"", "not a zip archive"),
    (b"PK\x03\x04 truncated", "not a braidpy checkpoint"),
])
def test_junk_is_refused(tmp_path, content, match):
    (tmp_path / "junk").write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(tmp_path / "junk")


def test_other_formats_and_versions_are_refused(tmp_path):
    save_checkpoint(tmp_path / "c.npz", {"params": np.ones(2)})
    for member, match in (({"format": "other"}, "format 'other'"),
                          ({"version": 3}, "version 3; this braidpy reads version 2"),
                          ({"params": {"__array__": "a9"}}, "missing array 'a9'")):
        header = {**checkpoint.read_header(tmp_path / "c.npz"), **member}
        with zipfile.ZipFile(tmp_path / "c.npz") as src, \
                zipfile.ZipFile(tmp_path / "d.npz", "w") as dst:
            dst.writestr("header.json", json.dumps(header))
            dst.writestr("a0.npy", src.read("a0.npy"))
        with pytest.raises(CheckpointError, match=match):
            load_checkpoint(tmp_path / "d.npz")


SAVER = """
import sys
import numpy as np
from braidpy.train import save_checkpoint
k = 0
while True:
    k += 1
    save_checkpoint(sys.argv[1], {"k": k, "a": np.full(1_000_000, float(k)),
                                  "b": [np.full(1000, k)] * 8})
    if k == 1:
        print("saved", flush=True)
"""


def test_kill_9_while_saving_leaves_a_complete_checkpoint(tmp_path):
    path = tmp_path / "run.npz"
    draw = random.Random(2718)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], env=env,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "saved\n"
            time.sleep(draw.uniform(0.0, 0.4))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        state = load_checkpoint(path)  # complete and valid, never a torn write
        assert state["k"] >= 1
        assert np.all(state["a"] == state["k"]) and state["a"].shape == (1_000_000,)
        assert len(state["b"]) == 8 and all(np.all(b == state["k"]) for b in state["b"])


def trainer(X, C, tmp_path, **overrides):
    net = dense_problem(nlayers=8)[0]
    cfg = dict(mode="oneshot", iterations=3, mgrit=dict(cfactor=2, max_levels=2), seed=3,
               checkpoint=str(tmp_path / "c.npz"))
    cfg.update(overrides)
    return Trainer(net, (X, C), (X[:8], C[:8]), TrainConfig(**cfg))


def test_resume_on_other_data_names_both_fingerprints(tmp_path):
    _, X, C = dense_problem(nlayers=8, batch=24)
    first = trainer(X, C, tmp_path)
    first.run()
    for X2, C2 in ((X + 1e-12, C), (X, C[::-1]), (X[:20], C[:20])):
        other = trainer(X2, C2, tmp_path, iterations=5, checkpoint=None)
        with pytest.raises(DataMismatchError) as info:
            other.resume(tmp_path / "c.npz")
        message = str(info.value)
        assert first.data_fingerprint in message and other.data_fingerprint in message
        assert first.data_fingerprint != other.data_fingerprint
        assert "allow_new_data=True" in message and "--resume-on-new-data" in message
        other.resume(tmp_path / "c.npz", allow_new_data=True)  # on purpose: carries on
        assert other.iteration == 3 and other.best["accuracy"] is None
        history = other.run()
        assert len(history) == 5 and np.isfinite(history[-1]["loss"])
    same = trainer(X.copy(), C.copy(), tmp_path, iterations=5)
    same.resume(tmp_path / "c.npz")  # the same data in new arrays: no complaint
    assert same.best["accuracy"] is not None


def test_a_stale_temporary_file_is_replaced_and_a_failed_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "run.npz"
    save_checkpoint(path, {"k": 1})
    (tmp_path / "run.npz.tmp").write_bytes(b"left by a killed run")
    save_checkpoint(path, {"k": 2})
    assert load_checkpoint(path)["k"] == 2 and not (tmp_path / "run.npz.tmp").exists()
    with pytest.raises(TypeError, match="cannot write a object"):
        save_checkpoint(path, {"k": object()})  # fails before a byte is written
    assert load_checkpoint(path)["k"] == 2 and not (tmp_path / "run.npz.tmp").exists()
    save_checkpoint(path, {"k": 3, "params": np.array([np.nan])})  # a diverged state
    with pytest.raises(CheckpointError, match="field 'params' must be finite"):
        load_checkpoint(path)  # is written, but refused on reading: never resumed
