"""Evaluation where the model is: validation inside Trainer.step,
ResNet.evaluate/accuracy/predict/probabilities and ``braidpy evaluate``/``predict`` run
batch by batch on the parameters' device and bring back only scalars and class ids.

On array-api-strict's Device("device1") an array cannot become a NumPy array; the
``leaks`` fixture also refuses every DLPack export and move off device1 except inside
Placement.to_host (the one named host copy, counted), and counts scalar conversions.
Batched results equal unbatched ones: accuracy and class ids exactly; the loss (a sum
of per-batch sums) and the probabilities (BLAS's matmul need not give a row the same
bits in a product of another row count) to a relative 1e-12, and bitwise where one batch
holds every sample."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import braidpy.nn.network as network
from braidpy import _device
from braidpy.nn.layers import classifier_logits, classifier_loss

xp = pytest.importorskip("array_api_strict")
if tuple(int(p) for p in xp.__version__.split(".")[:2]) < (2, 1):
    pytest.skip("array-api-strict >= 2.1 (its second device)", allow_module_level=True)

from array_api_strict._array_object import Array  # noqa: E402
from cli_runner import in_process  # noqa: E402
from evaluation_cases import network as make_network  # noqa: E402
from evaluation_cases import tiny_checkpoint, validating_trainer  # noqa: E402

DEVICE1 = xp.Device("device1")
ON_DEVICE1 = dict(xp=xp, device=DEVICE1)
ROOT = Path(__file__).resolve().parents[1]
#: Batched vs unbatched loss and probabilities: sums in another order, BLAS blocking.
RTOL = 1e-12


class Leaks:
    """What left device1 (see the module docstring)."""

    def __init__(self):
        self.to_host = 0  # Placement.to_host calls
        self.scalars = 0  # float(), int(), bool(), operator.index() of device arrays
        self._inside = 0

    @contextlib.contextmanager
    def allowed(self):
        """A block where arrays may leave (the test's own host copies)."""
        self._inside += 1
        try:
            yield
        finally:
            self._inside -= 1

    def check(self, what):
        if not self._inside:
            raise AssertionError(f"{what}: an array left device1")


@pytest.fixture
def leaks(monkeypatch):
    seen = Leaks()
    dlpack, to_device = Array.__dlpack__, Array.to_device

    def export(self, *args, **kwargs):
        seen.check("__dlpack__")
        return dlpack(self, *args, **kwargs)

    def move(self, device, /, stream=None):
        if device != DEVICE1:
            seen.check(f"to_device({device!r})")
        return to_device(self, device, stream=stream)

    monkeypatch.setattr(Array, "__dlpack__", export)
    monkeypatch.setattr(Array, "to_device", move)
    for name in ("__float__", "__int__", "__bool__", "__index__"):
        def scalar(self, _original=getattr(Array, name)):
            seen.scalars += 1
            return _original(self)
        monkeypatch.setattr(Array, name, scalar)
    to_host = _device.Placement.to_host

    def counted(self, a):
        seen.to_host += 1
        with seen.allowed():
            return to_host(self, a)

    monkeypatch.setattr(_device.Placement, "to_host", counted)
    return seen


def host(a, leaks=None):
    """A host copy of a device1 array (the test's own), after checking where it was."""
    assert a.device == DEVICE1, a.device
    with leaks.allowed() if leaks is not None else contextlib.nullcontext():
        return np.from_dlpack(a).copy()


def batches_of(monkeypatch, net, size):
    """Make the default evaluation batch of ``net`` hold ``size`` samples."""
    monkeypatch.setattr(network, "EVALUATION_STATE_BYTES", 8 * net.features * size)
    assert net.evaluation_batch() == size


# ---------------------------------------------------------------- batches


def test_batches_cover_the_samples_once_in_order():
    net = make_network("dense")[0]
    cut = net.evaluation_batches
    assert cut(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]  # a remainder batch
    assert cut(5, 5) == cut(5, 9) == [slice(0, 5)]  # a batch larger than the data
    assert cut(1, 3) == [slice(0, 1)] and cut(0, 3) == [slice(0, 0)]
    assert cut(3) == [slice(0, 3)]  # the default: every sample of a small set at once
    with pytest.raises(ValueError, match="no samples"):
        net.accuracy(net.init_params(seed=1), np.zeros((0, 2)), np.zeros((0, 3)))


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "4"])
def test_a_bad_batch_size_is_refused_naming_it(bad):
    net = make_network("dense")[0]
    with pytest.raises(ValueError, match=f"batch_size must be an int >= 1 .*got {bad!r}"):
        net.evaluation_batch(bad)


def test_the_default_batch_keeps_a_state_within_the_bound():
    from braidpy.nn import ResNet

    mnist = ResNet((1, 28, 28), 10, width=8, nlayers=2)
    assert mnist.evaluation_batch() == 668  # as the --batch-size help says
    assert 668 * 8 * 28 * 28 * 8 <= network.EVALUATION_STATE_BYTES < 669 * 8 * 28 * 28 * 8
    huge = ResNet((2,), 3, width=network.EVALUATION_STATE_BYTES, nlayers=1)
    assert huge.evaluation_batch() == 1  # at least one sample


# ---------------------------------------------------------------- ResNet, batched


@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("where", ["host", "device1"])
@pytest.mark.parametrize("batch", [1, 2, 4, 10, 11, 50])
def test_batched_evaluation_equals_one_pass(kind, where, batch, leaks):
    """Batches of 1, 2, 4 (a remainder of 3), 10 (of 1), all 11 and more than there are:
    the same answers as one forward pass over all samples with the unbatched formulas,
    on the host and on device1 (data given on the host: copied a batch at a time)."""
    net, p, X, C = make_network(kind)
    dnet, dp = make_network(kind, ON_DEVICE1 if where == "device1" else None)[:2]
    u = net.forward(p, X)  # the reference: one pass, the formulas of before
    v = net.views(p)
    z = classifier_logits(u, v["W"], v["mu"])
    want_ids = np.argmax(z, axis=1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    want_p = e / e.sum(axis=1, keepdims=True)
    want_loss = float(classifier_loss(u, C, v["W"], v["mu"]))
    want_acc = float(np.mean(want_ids == C.argmax(axis=1)))
    assert 0 < want_acc < 1

    loss, acc = dnet.evaluate(dp, X, C, batch)
    ids, prob = dnet.predict(dp, X, batch), dnet.probabilities(dp, X, batch)
    assert dnet.accuracy(dp, X, C, batch) == acc == want_acc
    if where == "device1":
        assert leaks.to_host == 0
        ids, prob = host(ids, leaks), host(prob, leaks)
    assert ids.shape == (11,) and prob.shape == (11, 3)
    np.testing.assert_array_equal(ids, want_ids)
    if where == "host" and batch >= 11:  # one batch: the very same operations
        assert loss == want_loss
        np.testing.assert_array_equal(prob, want_p)
    assert loss == pytest.approx(want_loss, rel=RTOL)
    np.testing.assert_allclose(prob, want_p, rtol=RTOL, atol=1e-300)


def test_device_evaluation_brings_back_scalars_once(leaks):
    """Three batches (4, 4, 3) on device1: evaluate brings back two scalars, accuracy
    one, predict none (its ids stay on the device); data already there or on the host."""
    net, p, X, C = make_network("conv", ON_DEVICE1)
    Xd = _device.placement(DEVICE1, xp).from_host(X)
    Cd = _device.placement(DEVICE1, xp).from_host(C)
    for data in ((X, C), (Xd, Cd)):
        before = leaks.scalars
        net.evaluate(p, *data, 4)
        assert leaks.scalars - before == 2
        before = leaks.scalars
        net.accuracy(p, *data, 4)
        assert leaks.scalars - before == 1
        before = leaks.scalars
        ids = net.predict(p, data[0], 4)
        assert leaks.scalars == before and ids.device == DEVICE1
    assert leaks.to_host == 0


# ---------------------------------------------------------------- validation in Trainer.step


@pytest.mark.parametrize("mode, validation", [("serial", "sequential"),
                                              ("oneshot", "sequential"), ("oneshot", "mgrit")])
def test_validation_in_trainer_step_on_device1_equals_numpy(mode, validation, monkeypatch,
                                                            leaks):
    """Validation of 7 samples in batches of 3 (3, 3, 1) at every step: the same
    accuracies as NumPy's unbatched validation, each brought back as one number, and
    nothing else leaves device1 during the steps (MGRIT's residual norms aside).
    'oneshot' validates with LayerParallelEvaluator's forward sweeps (no solver), or
    its MGRIT solves: one solver per batch shape, reused."""
    ref = validating_trainer(mode, validation=validation)
    ref.run()
    dev = validating_trainer(mode, ON_DEVICE1, validation=validation)
    batches_of(monkeypatch, dev.net, 3)
    evaluator = dev.evaluator
    counts = []
    accuracy = evaluator.accuracy

    def one_validation(*args):
        before = leaks.scalars
        value = accuracy(*args)
        counts.append(leaks.scalars - before)
        return value

    monkeypatch.setattr(evaluator, "accuracy", one_validation)
    dev.run()
    assert leaks.to_host == 0
    if validation == "sequential":  # MGRIT also brings back its residual norms
        assert counts == [1, 1]
    got = [r["val_accuracy"] for r in dev.history]
    want = [r["val_accuracy"] for r in ref.history]
    assert got == want and 0 < got[0] < 1
    for r, s in zip(dev.history, ref.history):
        assert r["loss"] == pytest.approx(s["loss"], rel=1e-12)
    if mode == "oneshot":  # full batches and the remainder; no solver for the sweeps
        assert sorted(evaluator._validation) == \
            ([(1, 2), (3, 2)] if validation == "mgrit" else [])


# ---------------------------------------------------------------- command line


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(checkpoint, samples file) of a 2-step Peaks run (in-process command line)."""
    from braidpy.cli import main

    def run(*args):
        try:
            return main([str(a) for a in args]), "", ""
        except SystemExit as exc:  # argparse
            return exc.code, "", ""

    return tiny_checkpoint(tmp_path_factory.mktemp("evaluation"), run)


def _json(capsys, *args):
    status, out, err = in_process(capsys, *args)
    assert status == 0, err
    return json.loads(out)


def test_evaluate_and_predict_batch_sizes_give_the_same_results(checkpoint, tmp_path, capsys):
    ckpt, samples = checkpoint
    data = ("peaks", "--samples", "40", "--validation-samples", "9")
    whole = _json(capsys, "evaluate", ckpt, *data, "--json")
    assert whole["device"] == "cpu" and whole["samples"] == 9
    for size in ("1", "4", "100"):
        got = _json(capsys, "evaluate", ckpt, *data, "--json", "--batch-size", size)
        assert got["batch_size"] == int(size) and got["accuracy"] == whole["accuracy"]
        assert got["loss"] == pytest.approx(whole["loss"], rel=RTOL)
        for probabilities in ([], ["--probabilities"]):
            out = tmp_path / f"{size}{len(probabilities)}.npy"
            status, _, err = in_process(capsys, "predict", ckpt, samples, "-o", out,
                                        "--batch-size", size, *probabilities)
            assert status == 0, err
    ids = np.load(tmp_path / "10.npy")
    for size in ("4", "100"):
        np.testing.assert_array_equal(np.load(tmp_path / f"{size}0.npy"), ids)
        np.testing.assert_allclose(np.load(tmp_path / f"{size}1.npy"),
                                   np.load(tmp_path / "11.npy"), rtol=RTOL)


@pytest.mark.parametrize("bad,words", [("0", "must be >= 1, got 0"),
                                       ("-3", "must be >= 1, got -3"),
                                       ("2.5", "expected an integer, got '2.5'"),
                                       ("many", "expected an integer, got 'many'")])
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_bad_batch_size_option_is_a_usage_error(checkpoint, tmp_path, capsys, bad, words,
                                                  command):
    ckpt, samples = checkpoint
    args = ["peaks"] if command == "evaluate" else [samples, "-o", tmp_path / "o.npy"]
    status, _, err = in_process(capsys, command, ckpt, *args, "--batch-size", bad)
    assert status == 2 and f"argument --batch-size: {words}" in err, err
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_device_options_are_checked_like_trains(checkpoint, tmp_path, capsys, command):
    ckpt, samples = checkpoint
    args = ["peaks"] if command == "evaluate" else [samples, "-o", tmp_path / "o.npy"]
    status, _, err = in_process(capsys, command, ckpt, *args, "--device", "tpu")
    assert status == 2 and "expected cpu, cuda or cuda:N, got 'tpu'" in err, err
    if importlib.util.find_spec("cupy") is None:  # the clean error of a missing CuPy
        status, _, err = in_process(capsys, command, ckpt, *args, "--device", "cuda")
        assert status == 2, err
        assert "--device cuda" in err and "[gpu] extra" in err, err
        assert "Traceback" not in err
    assert not (tmp_path / "o.npy").exists()


def test_evaluate_and_predict_run_on_the_device_they_are_given(checkpoint, tmp_path, capsys,
                                                               monkeypatch, leaks):
    """--device cuda with array-api-strict's device1 standing in for the GPU: the same
    results as on the host; evaluate brings back two scalars and no array, predict its
    ids or probabilities in one copy."""
    import braidpy.cli as cli

    monkeypatch.setattr(cli, "placement", lambda device: _device.placement(DEVICE1, xp)
                        if device == "cuda" else _device.placement(device))
    ckpt, samples = checkpoint
    data = ("peaks", "--samples", "40", "--validation-samples", "9", "--json")
    with leaks.allowed():
        want = _json(capsys, "evaluate", ckpt, *data, "--batch-size", "4")
    got = _json(capsys, "evaluate", ckpt, *data, "--batch-size", "4", "--device", "cuda")
    assert "device1" in got["device"] and leaks.to_host == 0
    assert got["accuracy"] == want["accuracy"]
    assert got["loss"] == pytest.approx(want["loss"], rel=RTOL)
    for probabilities in ([], ["--probabilities"]):
        out = {}
        for device in ("cpu", "cuda"):
            out[device] = tmp_path / f"{device}{len(probabilities)}.npy"
            before = leaks.to_host
            with leaks.allowed() if device == "cpu" else contextlib.nullcontext():
                status, _, err = in_process(capsys, "predict", ckpt, samples, "-o",
                                            out[device], "--device", device,
                                            "--batch-size", "5", *probabilities)
            assert status == 0, err
            assert leaks.to_host - before == 1  # the results, once
        if probabilities:
            np.testing.assert_allclose(np.load(out["cuda"]), np.load(out["cpu"]), rtol=RTOL)
        else:
            np.testing.assert_array_equal(np.load(out["cuda"]), np.load(out["cpu"]))


# ---------------------------------------------------------------- the GPU benchmark row


def test_the_validation_benchmark_skips_cleanly_without_a_gpu():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: the benchmark would run (tests/test_gpu.py times it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"),
                           "--validation"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "validation: skipped, it needs CuPy and a GPU" in proc.stdout, proc.stdout


def test_the_validation_benchmark_rows_run_on_the_host(capsys):
    """The GPU row's code, run on the host with device "cpu" (a GPU run of the
    benchmark runs it on CUDA): it trains, validates and prints the ratio with the target."""
    import argparse

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_gpu
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    args = argparse.Namespace(validation_sources=["digits"], validation_modes=["serial"],
                              validation_steps=2, validate_every=1, repeats=1)
    bench_gpu.validation_rows(np, "the host", args, device="cpu")
    out = capsys.readouterr().out
    assert "mode serial" in out and "validation of 359 samples in batches of 16384" in out
    assert "validation / training step = " in out and "(target <= 10: " in out
