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
from cli_runner import in_process
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
    back = checkpoint.load(tmp_path / "c.npz")  # any state (a training one: load_checkpoint)
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
        state = checkpoint.load(path)  # complete and valid, never a torn write
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
    assert checkpoint.load(path)["k"] == 2 and not (tmp_path / "run.npz.tmp").exists()
    with pytest.raises(TypeError, match="cannot write a object"):
        save_checkpoint(path, {"k": object()})  # fails before a byte is written
    assert checkpoint.load(path)["k"] == 2 and not (tmp_path / "run.npz.tmp").exists()
    save_checkpoint(path, {"k": 3, "params": np.array([np.nan])})  # a diverged state
    with pytest.raises(CheckpointError, match="field 'params' must be finite"):
        checkpoint.load(path)  # is written, but refused on reading: never resumed


# ------------------------------------------------------------------ every reader validates

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real one-shot checkpoint (Adam: optimizer arrays; MGRIT warm states) and the
    data files the commands read: (checkpoint, X.npy, y.csv, trainer maker)."""
    folder = tmp_path_factory.mktemp("run")
    net, X, C = dense_problem(nlayers=4, batch=24)
    path = folder / "c.npz"

    def make(**overrides):
        cfg = dict(mode="oneshot", optimizer="adam", iterations=2, seed=5,
                   mgrit=dict(cfactor=2, max_levels=2), checkpoint=str(path))
        cfg.update(overrides)
        return Trainer(dense_problem(nlayers=4, batch=24)[0], (X, C), (X[:8], C[:8]),
                       TrainConfig(**cfg))
    make().run()
    np.save(folder / "X.npy", X)
    np.savetxt(folder / "y.csv", C.argmax(axis=1), fmt="%d")
    return path, folder / "X.npy", folder / "y.csv", make


def _edited(source, target, change):
    """``source`` with ``change(header, arrays)`` applied (arrays by name)."""
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


def _node(header, field):
    *path, last = field.split(".")
    node = header
    for part in path:
        node = node[part]
    return node, last


def _set(field, value):
    def change(header, arrays):
        node, last = _node(header, field)
        node[last] = value
    return change


def _drop(field):
    def change(header, arrays):
        node, last = _node(header, field)
        del node[last]
    return change


def _array(field, edit):
    def change(header, arrays):
        node, last = _node(header, field)
        ref = node[last]
        if "__items__" in ref:  # a dict of int keys (warm states): its first value
            ref = ref["__items__"][0][1]
        arrays[ref["__array__"]] = edit(arrays[ref["__array__"]].copy())
    return change


def _nan(a):
    a.reshape(-1)[1] = np.nan
    return a


EDITS = [
    (_array("params", _nan), "field 'params' must be finite"),
    (_array("params", lambda a: a.astype(np.float32)), "field 'params' must be an array of "
                                                       "float64"),
    (_set("network.activation", "relu"), "field 'architecture' must describe the network"),
    (_set("network.width", 5), "field 'nparams' must be the network's parameter count"),
    (_drop("network.kernel"), "field 'network' must hold 'kernel'"),
    (_set("network.depth", 3), "field 'network.depth' is not an argument of the network"),
    (_drop("history"), "missing field 'history'"),
    (_drop("config"), "missing field 'config'"),
    (_set("config.seed", "abc"), "field 'config.seed' is not a valid training setting"),
    (_set("config.seed", 10**30), "field 'config.seed' is not a valid training setting"),
    (_set("config.lr", -1.0), "field 'config.lr' is not a valid training setting"),
    (_set("optimizer", {}), "field 'optimizer' must hold 'm'"),
    (_array("optimizer.m", _nan), "field 'optimizer.m' must be finite"),
    (_set("optimizer.t", 0), "field 'optimizer.t' must be 0 exactly when"),
    (_array("warm.primal", lambda a: a[:, :3].copy()), "must have the shape of every other "
                                                       "state ((24, 3), field 'warm.primal"),
    (_array("warm.adjoint", _nan), "field 'warm.adjoint[2]' must be finite"),
    (_array("warm.primal", lambda a: a[:5].copy()), "field 'warm.primal[2]' must hold the "
                                                    "batch's 24 samples"),
]


def _evaluate(path, X, y, capsys):
    return in_process(capsys, "evaluate", path, X, "--labels", y, "--validation-fraction",
                      "0", "--split", "train")


def _predict(path, X, y, capsys):
    return in_process(capsys, "predict", path, X, "-o", path.parent / "ids.npy")


@pytest.mark.parametrize("change, words", EDITS,
                         ids=[w.split("'")[1] + "-" + str(k) for k, (_, w) in
                              enumerate(EDITS)])
def test_every_reader_refuses_an_edited_checkpoint_naming_file_and_field(run, tmp_path,
                                                                         capsys, change,
                                                                         words):
    """load_checkpoint, Trainer.resume, ``braidpy evaluate`` and ``braidpy predict`` read
    through one validation: an edit one of them refuses, all refuse, naming the file
    and the field (evaluate and predict exited 0 on most of these)."""
    path, X, y, make = run
    for command in (_evaluate, _predict):
        status, _, err = command(path, X, y, capsys)
        assert status == 0, err  # the real one is fine
    load_checkpoint(path)
    bad = _edited(path, tmp_path / "bad.npz", change)
    for read in (load_checkpoint, checkpoint.load_training, make().resume):
        with pytest.raises(CheckpointError) as info:
            read(bad)
        assert str(bad) in str(info.value) and words in str(info.value)
    for command in (_evaluate, _predict):
        status, out, err = command(bad, X, y, capsys)
        assert status == 2 and str(bad) in err and words in err, err
        assert "Traceback" not in err and not (tmp_path / "ids.npy").exists()


def test_easgd_group_parameters_are_checked_like_the_parameters(run):
    """Each data group's parameters and velocity: float64 vectors of nparams finite
    numbers (ints and NaN resumed before)."""
    state = load_checkpoint(run[0])
    params = state["params"]
    state["config"] = dict(state["config"], optimizer="easgd", lr=0.05)
    state["optimizer"] = {"center": params.copy(), "velocity": None, "steps": 2}
    state["easgd_groups"] = {"params": [params.copy(), params.copy()],
                             "velocity": [None, None]}
    checkpoint.check_training_state(state, "e.npz")  # a valid EASGD state
    for bad, words in ((params.astype(np.int64), "easgd_groups.params[1]' must be a 1-D "
                                                 "float array"),
                       (np.full_like(params, np.nan), "easgd_groups.params[1]' must be "
                                                      "finite"),
                       (params[:3], "easgd_groups.params[1]' must hold nparams")):
        state["easgd_groups"]["params"][1] = bad
        with pytest.raises(CheckpointError, match=words.replace("[", r"\[")
                           .replace("]", r"\]")):
            checkpoint.check_training_state(state, "e.npz")
    state["easgd_groups"] = None
    with pytest.raises(CheckpointError, match="field 'easgd_groups'"):
        checkpoint.check_training_state(state, "e.npz")


def test_an_archive_inflating_past_its_limits_is_refused_before_inflating(run, tmp_path,
                                                                           monkeypatch):
    """A small archive whose header inflates past 64 MiB, or whose members together
    inflate past memory, is refused from the sizes the zip declares, before anything
    is inflated (was: read until a raw MemoryError)."""
    import tracemalloc

    from braidpy import _limits

    header = checkpoint.read_header(run[0])
    text = json.dumps(header)[:-1] + " " * (80 * 2**20) + "}"
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header.json", text)
    del text
    assert bomb.stat().st_size < 2**20
    tracemalloc.start()
    try:
        for read in (load_checkpoint, checkpoint.read_header):
            with pytest.raises(CheckpointError, match=f"{bomb} \\(header.json\\): declares "
                                                      r"\d+ bytes; braidpy reads checkpoint "
                                                      r"headers of at most 67108864"):
                read(bomb)
        assert tracemalloc.get_traced_memory()[1] < 8 * 2**20
    finally:
        tracemalloc.stop()
    members = tmp_path / "members.npz"
    with zipfile.ZipFile(members, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header.json", json.dumps(header))
        for k in range(4):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.zeros(2**20 // 8 * 3))
            zf.writestr(f"z{k}.npy", buf.getvalue())
    monkeypatch.setattr(_limits, "available_memory", lambda: 10 * 2**20)
    with pytest.raises(CheckpointError, match=f"{members} \\(its 5 members together "
                                              f"inflate to"):
        load_checkpoint(members)


def test_the_json_nesting_check_takes_a_few_bytes_a_character():
    """The depth scan of a header (before it is parsed) used about 25 bytes a
    character: a 250 KB checkpoint whose header inflated to 160 MB took 4 GB. Now
    under 10 (the text without its strings, one byte a character, a block's sum)."""
    import tracemalloc

    from braidpy._limits import _json_depth

    text = '{"a": [' + ", ".join(['{"b": [1, 2, "x]]"]}'] * 400_000) + "]}"
    tracemalloc.start()
    try:
        assert _json_depth(text) == 4
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * len(text), peak
