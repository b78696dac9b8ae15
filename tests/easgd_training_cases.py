"""EASGD in training: cases run under mpiexec by
tests/mpi_easgd_train_driver.py, and the NumPy reference of test_easgd_training.py."""


import numpy as np
from hybrid_cases import EXACT, dense, run_recording_failure

from braidpy.parallel.data import shard_of
from braidpy.train import TrainConfig, Trainer

# lr * rho * 2 groups = 0.1 < 1; tau 2 and momentum: equations (5), (6) of You, Buluç and
# Demmel, "Scaling deep learning on GPU and Knights Landing clusters", SC 2017.
SYNC = dict(optimizer="easgd", lr=0.1, rho=0.5, tau=2, momentum=0.5, batch_size=10,
            iterations=5, seed=2, validate_every=1)
ASYNC = dict(optimizer="easgd-async", lr=0.2, rho=0.5, tau=1, momentum=0.0, batch_size=30,
             iterations=25, seed=2, validate_every=5, mode="serial")


def problem():
    net, X, C = dense(30)
    return net, (X, C), (X[:11], C[:11])


def sync_config(mode, **kw):
    mgrit = EXACT if mode == "exact" else {}
    return TrainConfig(mode=mode, mgrit=mgrit, **{**SYNC, **kw})


def sync_case(grid, mode, iterations=None, checkpoint=None, resume=None):
    net, train, val = problem()
    kw = {} if iterations is None else {"iterations": iterations}
    if checkpoint:
        kw.update(checkpoint=checkpoint, checkpoint_every=100)
    trainer = Trainer(net, train, val, sync_config(mode, **kw), grid=grid)
    if resume:
        trainer.resume(resume)
    trainer.run()
    return {"coords": list(grid.coords),
            "history": [[r["loss"], r["objective"], r["gradient_norm"], r["val_accuracy"]]
                        for r in trainer.history],
            "params": trainer.params.tolist(), "center": trainer.model_params.tolist()}


class Boom(ZeroDivisionError):
    pass


def failing_case(grid, where, victim, config):
    """Train with a failure planted on world rank ``victim`` (on_step) or data group
    ``victim`` (gradient): (type, message, step, seconds) on this rank."""
    net, train, val = problem()
    trainer = Trainer(net, train, val, config, grid=grid)
    # A failing gradient fails in a whole data group (its layer ranks together; a
    # failure inside one layer solve is the core's business, test_hybrid.py).
    mine = grid.rank == victim if where == "on_step" else grid.coords[0] == victim
    on_step = None
    if where == "on_step" and mine:
        def on_step(record):
            if record["iteration"] == 3:
                raise Boom("on_step failed")
    elif where == "gradient" and mine:  # inside the second step's gradient
        target, name = (trainer.net, "loss_and_gradient") if config.mode == "serial" else \
            (trainer.evaluator.inner.app, "step_gradient_batch")
        original = getattr(target, name)

        def failing(*args, **kwargs):
            if trainer.iteration >= 1:
                raise Boom("gradient failed")
            return original(*args, **kwargs)
        setattr(target, name, failing)
    return run_recording_failure(trainer, on_step)


def async_case(grid):
    net, train, val = problem()
    trainer = Trainer(net, train, val, TrainConfig(**ASYNC), grid=grid)
    trainer.run()
    opt = trainer.optimizer
    return {"coords": list(grid.coords), "centre": bool(trainer.is_centre),
            "losses": [r["loss"] for r in trainer.history],
            "accuracies": [r.get("val_accuracy") for r in trainer.history],
            "served": list(opt.served), "params": trainer.params.tolist(),
            "center": trainer.model_params.tolist()}


# ------------------------------------------------------------------ the NumPy reference


def reference(net, p0, X, C, Xv, Cv, groups, *, lr, rho, tau, momentum, batch, steps):
    """(M)EASGD of You et al. 2017, equations (1)-(2) and (5)-(6), over every group's
    shard of each batch (batches in order, a short last one dropped), gradients by serial
    backpropagation (ResNet.loss_and_gradient); no regularization. Returns the losses
    (sample-weighted mean over the groups, each at its own W_i), the validation
    accuracies at the centre, the groups' W_i and the centre."""
    n = X.shape[0]
    W = [p0.copy() for _ in range(groups)]
    V = [np.zeros_like(p0) for _ in range(groups)]
    center = p0.copy()
    losses, accuracies, pos = [], [], 0
    for t in range(1, steps + 1):
        if pos + batch > n:
            pos = 0
        idx = np.arange(pos, pos + batch)
        pos += batch
        loss, grads = 0.0, []
        for d in range(groups):
            rows = idx[shard_of(batch, groups, d).start:shard_of(batch, groups, d).stop]
            value, g = net.loss_and_gradient(W[d], X[rows], C[rows])
            loss += len(rows) / batch * value
            grads.append(g)
        losses.append(loss)
        pull = t % tau == 0
        diffs = [W[d] - center for d in range(groups)]
        for d in range(groups):
            V[d] = momentum * V[d] - lr * grads[d]
            W[d] = W[d] + V[d] - (lr * rho * diffs[d] if pull else 0.0)
        if pull:
            center = center + lr * rho * sum(diffs)
        accuracies.append(net.accuracy(center, Xv, Cv))
    return losses, accuracies, W, center


def divergent_resume_cases(grid, mode, saved, folder):
    """Resuming where the ranks' checkpoints differ: (type, message) on this rank for a
    rank that reads another file, and for a file whose last data group's parameters
    were edited to the wrong length (only that group's ranks can see it)."""
    from braidpy.train import checkpoint

    other = str(folder / f"easgd-{grid.size}-other.ckpt")
    edited = str(folder / f"easgd-{grid.size}-edited.ckpt")
    if grid.rank == 0:
        state = checkpoint.load_training(saved)
        state["params"] = np.asarray(state["params"]) + 1e-3  # still valid, another file
        checkpoint.save(other, state)
        state = checkpoint.load_training(saved)
        state["easgd_groups"]["params"][-1] = state["easgd_groups"]["params"][-1][:-1]
        checkpoint.save(edited, state)
    grid.comm.Barrier()
    out = {}
    for case, path in (("another file on the last rank",
                        other if grid.rank == grid.size - 1 else saved),
                       ("one group's part edited", edited)):
        net, train, val = problem()
        trainer = Trainer(net, train, val, sync_config(mode), grid=grid)
        try:
            trainer.resume(path)
            out[case] = ["none", ""]
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            out[case] = [type(exc).__name__, str(exc)]
    return out
