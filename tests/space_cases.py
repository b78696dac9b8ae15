"""Spatially split training cases (issue 16, item 4), run serially in-process and on every
grid D x S x L with S > 1 of tests/mpi_space_driver.py. Each case takes a ProcessGrid and
returns this rank's plain JSON data; the driver gathers them over the world."""

import hashlib
import time

import numpy as np

# 5 x 6 images: bands of 3+2 rows on 2 space ranks, 2+1+1+1 on 4
from hybrid_cases import conv  # noqa: F401 - also used by test_space_training

from braidpy.train import TrainConfig, Trainer

# Tight enough that MGRIT reaches rounding: the split image must give the whole image's
# gradient to rounding.
EXACT = dict(cfactor=2, max_levels=3, abs_tol=1e-14)
ONESHOT = dict(cfactor=2, max_levels=2, abs_tol=1e-9)


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()


def _space(trainer):
    """The SpaceParallelEvaluator under the data-parallel one (None at space 1)."""
    inner = getattr(trainer.evaluator, "inner", None)
    return inner if hasattr(inner, "channel") else None


def gradient_case(grid):
    """Loss, gradient and MGRIT residuals of one batch, exact mode."""
    net, X, C = conv()
    p = net.init_params(seed=5, scale=1.0)
    cfg = TrainConfig(mode="exact", optimizer="sgd", mgrit=EXACT)
    trainer = Trainer(net, (X, C), None, cfg, grid=grid, params=p.copy())
    loss, grad, stats = trainer.evaluator.gradient(p, X, C)
    space = _space(trainer)
    rows = space.channel.mine if space is not None else range(0, X.shape[2])
    inner = space.inner if space is not None else trainer.evaluator.inner
    owned = inner.solver.primal_core.owned
    return {"loss": loss, "grad": np.asarray(grad).tolist(), "digest": digest(grad),
            "rows": [rows.start, rows.stop], "owned": [owned.start, owned.stop],
            "coords": list(grid.coords), "primal": stats["primal_residuals"],
            "adjoint": stats["adjoint_residuals"]}


def training_case(grid, checkpoint=None, iterations=3):
    net, X, C = conv(batch=12)
    cfg = TrainConfig(mode="oneshot", optimizer="adam", batch_size=4, shuffle=True,
                      iterations=iterations, mgrit=ONESHOT, seed=2, tikhonov=1e-3,
                      checkpoint=checkpoint, checkpoint_every=100)
    trainer = Trainer(net, (X, C), (X[:7], C[:7]), cfg, grid=grid)
    history = trainer.run()
    keys = ("loss", "objective", "val_accuracy")
    return {"history": [[r.get(k) for k in keys] for r in history],
            "params": trainer.params.tolist(), "digest": digest(trainer.params),
            "coords": list(grid.coords)}


def resume_serially(checkpoint, iterations):
    """A single process continues a checkpoint of training_case."""
    net, X, C = conv(batch=12)
    cfg = TrainConfig(mode="oneshot", optimizer="adam", batch_size=4, shuffle=True,
                      iterations=iterations, mgrit=ONESHOT, seed=2, tikhonov=1e-3,
                      checkpoint_every=100)
    trainer = Trainer(net, (X, C), (X[:7], C[:7]), cfg)
    trainer.resume(checkpoint)
    history = trainer.run()
    return [[r.get(k) for k in ("loss", "objective", "val_accuracy")] for r in history]


class Boom(ZeroDivisionError):
    pass


def error_case(grid, where, victim):
    """Train with the band layer's ``where`` failing on world rank ``victim`` at its
    third call; (type, message, step, seconds) here."""
    net, X, C = conv(batch=12)
    cfg = TrainConfig(mode="exact", optimizer="adam", batch_size=4, iterations=4,
                      mgrit=EXACT)
    trainer = Trainer(net, (X, C), None, cfg, grid=grid)
    if grid.rank == victim:
        layer = _space(trainer).inner.app.layer
        original, calls = getattr(layer, where), [0]

        def failing(*args):
            calls[0] += 1
            if calls[0] == 3:
                raise Boom(f"{where} failed")
            return original(*args)
        setattr(layer, where, failing)
    start = time.perf_counter()
    try:
        trainer.run()
        outcome = ["none", "", trainer.iteration]
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        outcome = [type(exc).__name__, str(exc), trainer.iteration]
    outcome.append(time.perf_counter() - start)
    return outcome
