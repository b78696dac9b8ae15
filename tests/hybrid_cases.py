"""Data x layers training cases, run serially in-process and on every grid of
tests/mpi_hybrid_driver.py. Each case takes a ProcessGrid and returns this rank's plain
JSON data; the driver gathers them over the world."""

import hashlib
import time

import numpy as np
from train_cases import reference_block_rows

from braidpy.nn import ResNet
from braidpy.parallel.data import shard_of
from braidpy.train import TrainConfig, Trainer, evaluate

classifier_accuracy = evaluate.classifier_accuracy

# Tight enough that each layer group's MGRIT reaches rounding: then a split batch must
# give the concatenated batch's gradient to rounding.
EXACT = dict(cfactor=2, max_levels=3, abs_tol=1e-14)
ONESHOT = dict(cfactor=2, max_levels=2, abs_tol=1e-9)


def dense(batch, nlayers=16, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(batch, 2))
    C = np.eye(3)[rng.integers(0, 3, size=batch)]
    return ResNet((2,), 3, width=4, nlayers=nlayers, tstop=2.0, activation="tanh"), X, C


def conv(batch=5, nlayers=8, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch, 1, 5, 6))
    C = np.eye(4)[rng.integers(0, 4, size=batch)]
    net = ResNet((1, 5, 6), 4, width=3, nlayers=nlayers, tstop=1.0, activation="smooth_relu",
                 opening="conv", kernel=3)
    return net, X, C


PROBLEMS = {"dense_even": lambda: dense(24), "dense_uneven": lambda: dense(23),
            "conv_uneven": conv}


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()


def gradient_case(grid, name, overlap=True):
    """Loss and gradient of the whole batch, evaluated shard-wise on ``grid``."""
    net, X, C = PROBLEMS[name]()
    p = net.init_params(seed=5, scale=1.0)
    cfg = TrainConfig(mode="exact", optimizer="sgd", mgrit=EXACT)
    trainer = Trainer(net, (X, C), None, cfg, grid=grid, params=p.copy())
    trainer.evaluator.overlap = overlap
    trainer.evaluator.bucket = 16  # several buckets, started in order as pieces come
    loss, grad, _ = trainer.evaluator.gradient(p, X, C)
    owned = trainer.evaluator.inner.solver.primal_core.owned
    rows = shard_of(X.shape[0], grid.data, grid.coords[0])
    return {"loss": loss, "grad": np.asarray(grad).tolist(), "digest": digest(grad),
            "owned": [owned.start, owned.stop], "shard": [rows.start, rows.stop],
            "coords": list(grid.coords)}


TRAININGS = {
    "oneshot_adam": dict(mode="oneshot", optimizer="adam", batch_size=10, shuffle=True,
                         iterations=5, mgrit=ONESHOT),
    "exact_lbfgs": dict(mode="exact", optimizer="lbfgs", iterations=3, mgrit=EXACT),
    "serial_sgd": dict(mode="serial", optimizer="sgd", batch_size=9, iterations=4, lr=0.5),
    # Every step checked against a floor no inexact gradient meets: serial_sgd's steps.
    "oneshot_sgd_checked": dict(mode="oneshot", optimizer="sgd", batch_size=9, iterations=4,
                                lr=0.5, m1=1, m2=1, relax="F", mgrit=ONESHOT,
                                quality_check_every=1, quality_floor=1.0),
}


def training_case(grid, name, resume=None, iterations=None, checkpoint=None):
    net, X, C = dense(30)
    kw = dict(TRAININGS[name])
    if iterations is not None:
        kw["iterations"] = iterations
    cfg = TrainConfig(seed=2, tikhonov=1e-3, ddt=1e-2, classifier_reg=1e-3,
                      checkpoint=checkpoint, checkpoint_every=100, **kw)
    trainer = Trainer(net, (X, C), (X[:11], C[:11]), cfg, grid=grid)
    if resume is not None:
        trainer.resume(resume)
    with reference_block_rows(2):  # checks' exact gradients: a data group's 2-5 samples in
        history = trainer.run()   # blocks of 2 or more, over its layer ranks
    keys = ("loss", "objective", "val_accuracy")
    return {"history": [[r.get(k) for k in keys] for r in history],
            "steps": [r["steps"] for r in history],
            "params": trainer.params.tolist(), "digest": digest(trainer.params),
            "coords": list(grid.coords)}


class Boom(ZeroDivisionError):
    pass


def error_case(grid, where, victim):
    """Train with a failure planted on world rank ``victim``; (type, message, step) here."""
    net, X, C = dense(30)
    cfg = TrainConfig(mode="exact", optimizer="adam", batch_size=10, iterations=6,
                      mgrit=EXACT, validate_every=1)
    trainer = Trainer(net, (X, C), (X[:11], C[:11]), cfg, grid=grid)
    mine = grid.rank == victim
    on_step = None
    if where == "on_step":
        def on_step(record):
            if mine and record["iteration"] == 2:
                raise Boom("on_step failed")
    elif where == "adjoint" and mine:
        inner = trainer.evaluator.inner
        calls = [0]

        def failing(*args, **kwargs):
            calls[0] += 1
            raise Boom("step_gradient_batch failed")
        inner.app.step_gradient_batch = failing
    elif where == "validation" and mine:  # after the validation solve, on this rank
        def failing_accuracy(*args):
            raise Boom("accuracy failed")
        evaluate.classifier_accuracy = failing_accuracy
    try:
        return run_recording_failure(trainer, on_step)
    finally:
        evaluate.classifier_accuracy = classifier_accuracy


def run_recording_failure(trainer, on_step=None):
    """trainer.run(on_step) as [exception name or "none", message, steps done, seconds]."""
    start = time.perf_counter()
    try:
        trainer.run(on_step)
        outcome = ["none", "", trainer.iteration]
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        outcome = [type(exc).__name__, str(exc), trainer.iteration]
    return outcome + [time.perf_counter() - start]


def grids(res):
    """(grid shape, cases) of a driver's results, keyed "DxSxL"."""
    for name, cases in res.items():
        if "x" in name:
            yield tuple(map(int, name.split("x"))), cases
