"""Spatially split training cases, run serially in-process and on every grid D x S x L
with S > 1 of tests/mpi_space_driver.py. Each case takes a ProcessGrid and
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


def channel_case(comm):
    """One SpaceChannel over ``comm`` (2 ranks) through five evaluations. In the first
    and the third, one sum completes, then rank 0 fails while rank 1 is in the next
    collective: a convolution's halo exchange (the first), a sum's exchange (the third);
    rank 1's messages to rank 0 and its receives from rank 0 are left pending, and the
    failure notes of both ranks cross. The evaluations after each, on the same channel,
    must take only their own messages. This rank's outcome of each evaluation."""
    from braidpy.nn.conv import conv2d
    from braidpy.parallel.spatial import conv2d_rows
    from braidpy.train.spatial_training import SpaceChannel

    rank = comm.Get_rank()
    rng = np.random.default_rng(20260)
    K = rng.standard_normal((2, 2, 3, 3))
    channel = SpaceChannel(comm, 6)
    record = {"rows": [channel.mine.start, channel.mine.stop]}

    def evaluation(scale, fail=None):
        image = rng.standard_normal((2, 2, 6, 5))  # the same draws on both ranks
        out = {"outcome": ["none", ""]}
        channel.begin()
        try:
            with channel.guard():
                out["sum"] = channel.sum([scale * (rank + 1)]).tolist()
                if fail and rank == 0:
                    raise Boom("rank 0 failed mid-way")
                if fail != "sum":
                    band = conv2d_rows(channel.band(image), K, channel)
                    out["conv_error"] = float(np.max(np.abs(band - channel.band(
                        conv2d(image, K)))))
                out["sum_after"] = channel.sum([scale * 10 * (rank + 1)]).tolist()
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            out["outcome"] = [type(exc).__name__, str(exc)]
        return out

    record["failed in a halo"] = evaluation(1.0, fail="conv")
    record["next"] = evaluation(2.0)
    record["failed in a sum"] = evaluation(3.0, fail="sum")
    record["after"] = evaluation(4.0)
    record["last"] = evaluation(5.0)
    channel.free()
    return record
