"""Shared cases of batched evaluation (validation, evaluate, predict) for
tests/test_device_evaluation.py (NumPy and array-api-strict's second device) and
tests/test_gpu.py (CuPy): small networks and data, a short training run that validates,
and a checkpoint for the command line."""

from __future__ import annotations

import numpy as np

SEED = 20261217


def network(kind, where=None):
    """(ResNet, parameters, X, C): a dense or conv network on the host or where ``where``
    (ResNet's xp=/device= keywords) puts it, its parameters there (scale 3: classes of
    the samples differ), and 11 host samples with one-hot labels of 3 classes."""
    from braidpy.nn import ResNet

    rng = np.random.default_rng(SEED)
    if kind == "dense":
        net = ResNet((2,), 3, width=4, nlayers=8, tstop=2.0, **(where or {}))
        X = rng.uniform(-3, 3, (11, 2))
    else:
        net = ResNet((1, 5, 4), 3, width=2, nlayers=6, activation="tanh", **(where or {}))
        X = rng.standard_normal((11, 1, 5, 4))
    C = np.eye(3)[rng.integers(0, 3, X.shape[0])]
    return net, net.init_params(seed=SEED, scale=3.0), X, C


def validating_trainer(mode, where=None, iterations=2, validation="sequential"):
    """A trainer of a dense network that validates 7 samples at every step, and its
    host validation data; mode 'serial' (SerialEvaluator) or 'oneshot'
    (LayerParallelEvaluator's validation: forward sweeps of shares of the samples, or
    with ``validation`` 'mgrit' MGRIT solves). Not run yet."""
    from braidpy.nn import ResNet
    from braidpy.train import TrainConfig, Trainer

    rng = np.random.default_rng(SEED + 1)
    X, C = rng.uniform(-3, 3, (12, 2)), np.eye(3)[rng.integers(0, 3, 12)]
    Xv, Cv = rng.uniform(-3, 3, (7, 2)), np.eye(3)[rng.integers(0, 3, 7)]
    net = ResNet((2,), 3, width=4, nlayers=8, tstop=2.0, **(where or {}))
    config = TrainConfig(mode=mode, optimizer="adam", lr=0.05, iterations=iterations,
                         batch_size=6, init_scale=2.0, mgrit=dict(cfactor=4, abs_tol=1e-12),
                         validation_solve=validation)
    return Trainer(net, (X, C), (Xv, Cv), config)


def tiny_checkpoint(folder, run):
    """Train a dense network on 40 Peaks points for 2 steps through the command line
    (``run(*args) -> (status, out, err)``) with a checkpoint; returns (checkpoint path,
    samples file of 13 new points)."""
    from braidpy.data import peaks

    ckpt = folder / "run.ckpt"
    status, _, err = run("train", "peaks", "--samples", "40", "--validation-samples", "9",
                         "--layers", "4", "--iterations", "2", "--checkpoint", ckpt, "-q")
    assert status == 0, err
    X, _ = peaks(13, SEED)
    np.save(folder / "X.npy", X)
    return ckpt, folder / "X.npy"
