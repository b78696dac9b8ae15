"""benchmarks/bench_work_ratio.py: the gradient-quality measurement on mini-batches (each
step's cosine against the exact gradient of that step's batch), the digits source of
`braidpy train`'s quick preset, and Peaks as before; seconds in all."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from braidpy.train import TrainConfig, Trainer

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_work_ratio.py"
SEED = 3  # any seed: the properties hold for every one


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_work_ratio", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    path, threads = list(sys.path), os.environ.get("OMP_NUM_THREADS")
    spec.loader.exec_module(module)  # (puts benchmarks/ first, sets OMP_NUM_THREADS)
    yield module
    sys.path[:] = path
    if threads is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = threads


@pytest.fixture(scope="module")
def digits(bench):
    """(X, C, net, training fields) of `braidpy train digits`'s quick preset."""
    args = argparse.Namespace(source="digits", layers=None, width=None, batch=None,
                              optimizer=None, lr=None, samples=None, seed=SEED)
    X, C, net, training, _ = bench.problem(args)
    return X, C, net, training


def run(*args):
    return subprocess.run([sys.executable, "-W", "error", str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def json_after_tables(stdout):
    return json.loads(stdout[stdout.index("\n{\n"):])


def test_digits_source_is_the_quick_preset(digits):
    X, C, net, training = digits
    assert X.shape[1:] == (1, 8, 8) and (net.nlayers, net.width) == (8, 4)
    assert training == dict(optimizer="adam", lr=0.02, batch_size=100, shuffle=True,
                            seed=SEED)


def test_serial_cosines_are_one_against_each_steps_batch(bench, digits):
    # Serial backprop is the exact gradient of the step's batch: its cosine is 1 at every
    # step only if the reference is that batch's gradient (the whole set's is not).
    X, C, net, training = digits
    r = bench.run_setting("serial", net, X, C, 4, keep=True, training=training)
    q = bench.quality(r, net, X, C)
    assert q["cosine"] == pytest.approx([1.0] * 4, abs=1e-12)
    # The recorded rows are the Trainer's draws: shuffled batches of 100, one per step.
    again = Trainer(net, (X, C), None, TrainConfig(mode="serial", **training))
    for rows in r["batches"]:
        np.testing.assert_array_equal(rows, again._next_batch_indices())
    assert len({tuple(np.sort(rows)) for rows in r["batches"]}) == 4
    # The exact losses are the whole training set's, before and after each step.
    assert q["exact_loss"][0] == pytest.approx(net.loss(r["params"][0], X, C), rel=1e-12)
    assert len(q["exact_loss"]) == 5


def test_oneshot_cosines_on_batches(bench, digits):
    # The first one-shot gradient is exact (a sequential starting guess); later ones lag
    # the weights and the batch changes under the warm start, so they are not.
    X, C, net, training = digits
    r = bench.run_setting("os12-F", net, X, C, 3, keep=True, training=training)
    cos = bench.quality(r, net, X, C)["cosine"]
    assert cos[0] == pytest.approx(1.0, abs=1e-12)
    assert 0.99 < min(cos[1:]) < 1 - 1e-9


def test_command_line_digits(bench):
    p = run("--source", "digits", "--quick", "--settings", "serial", "os12-F", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert "digits, conv 8 layers x 4 channels, 1438 training images, adam lr 0.02, " \
        "shuffled batches of 100, seed 1, 5 steps" in p.stdout
    out = json_after_tables(p.stdout)
    assert (out["source"], out["layers"], out["batch_size"], out["shuffle"]) == \
        ("digits", 8, 100, True)
    serial, oneshot = out["results"]["serial"], out["results"]["os12-F"]
    assert serial["cosine"] == pytest.approx([1.0] * 5, abs=1e-12)
    assert serial["loss_calls"] is None  # Adam: no line search
    assert oneshot["gradient_calls"] == oneshot["gradient_calls_formula"] == 48
    assert oneshot["floor"] is True


def test_command_line_peaks_as_before(bench):
    p = run("--quick", "--settings", "serial", "os12-F", "--json", "-")
    assert p.returncode == 0, p.stderr
    assert "Peaks, 32 layers x 8, 200 samples, lbfgs, full batch, seed 1" in p.stdout
    out = json_after_tables(p.stdout)
    assert (out["source"], out["samples"], out["optimizer"], out["batch_size"]) == \
        ("peaks", 200, "lbfgs", None)
    r = out["results"]["os12-F"]
    assert r["loss_calls"] == r["loss_calls_formula"] == 48  # L-BFGS's line search
    assert out["results"]["serial"]["cosine"] == pytest.approx([1.0] * 5, abs=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--source", "digits", "--samples", "300"], "--samples 300: only --source peaks"),
    (["--source", "digits", "--batch", "0"], "'0' is not a positive integer"),
    (["--layers", "many"], "'many' is not a positive integer"),
])
def test_bad_options_are_named(args, message):
    p = run(*args)
    assert p.returncode == 2 and message in p.stderr, p.stderr
