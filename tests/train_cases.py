"""Training cases run serially in-process and under mpiexec (tests/mpi_train_driver.py);
every case returns plain JSON data that must be identical for any rank count."""

from contextlib import contextmanager

import numpy as np
from mpi_world import assert_split

from braidpy.nn import ResNet
from braidpy.parallel.data import share_of
from braidpy.train import LayerParallelEvaluator, TrainConfig, Trainer, reference


def dense_problem(nlayers=16, batch=24, seed=3, activation="tanh"):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(batch, 2))
    C = np.eye(3)[rng.integers(0, 3, size=batch)]
    net = ResNet((2,), 3, width=4, nlayers=nlayers, tstop=2.0, activation=activation)
    return net, X, C


def conv_problem(nlayers=8, batch=5, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch, 1, 5, 6))
    C = np.eye(4)[rng.integers(0, 4, size=batch)]
    net = ResNet((1, 5, 6), 4, width=3, nlayers=nlayers, tstop=1.0, activation="smooth_relu",
                 opening="conv", kernel=3)
    return net, X, C


MGRIT = dict(cfactor=2, max_levels=3, abs_tol=1e-12)


def level_sizes(ntime, max_levels, cfactors, min_coarse=2):
    """Intervals per level (XBRAID_CONVENTIONS §1); ``cfactors`` per level from level 0,
    the last one for the deeper levels."""
    n = [ntime]
    while len(n) < max_levels:
        cf = cfactors[min(len(n) - 1, len(cfactors) - 1)]
        if n[-1] // cf < min_coarse:
            break
        n.append(n[-1] // cf)
    return n


def solve_calls(ntime, iterations, max_levels, cfactors, nrelax):
    """Layer step calls of one MGRIT solve without skip (XBRAID_CONVENTIONS §2, §4, §6).

    A V-cycle does, on every level l above the coarsest (n_l intervals, n_{l+1} of
    them C-intervals): nrelax FC sweeps (an F sweep steps the n_l - n_{l+1} F-points,
    a C sweep the n_{l+1} C-points: n_l calls), restriction's F sweep (n_l - n_{l+1}),
    the fine residual at the C-points (n_{l+1} steps) and the coarse right-hand side
    (n_{l+1} coarse steps); then the coarsest level's sequential solve (n_{L-1}) and
    interpolation's F sweep on levels L-2 ... 1. After the cycles, the final F sweep
    of level 0 fills its F-points (n_0 - n_1). The primal and the adjoint solve alike.
    """
    n = level_sizes(ntime, max_levels, cfactors)
    L = len(n)
    cycle = sum(nrelax * n[l] + (n[l] - n[l + 1]) + 2 * n[l + 1] for l in range(L - 1))
    cycle += n[-1] + sum(n[l] - n[l + 1] for l in range(1, L - 1))
    return iterations * cycle + (n[0] - n[1])


def _gradient_case(problem, comm, oneshot=None):
    net, X, C = problem()
    p = net.init_params(seed=5, scale=1.0)
    ev = LayerParallelEvaluator(net, p.copy(), X, C, comm=comm, mgrit=MGRIT, oneshot=oneshot)
    loss, grad, stats = ev.gradient(p, X, C)
    assert_split(comm, ev.solver.primal_core.owned, net.nlayers + 1, "layers")
    return {"loss": loss, "grad": grad.tolist(), "primal": stats["primal_iterations"],
            "adjoint": stats["adjoint_iterations"]}


@contextmanager
def reference_block_rows(rows):
    """Quality checks made meanwhile cut their batches into blocks of at least ``rows``
    samples (braidpy.train.reference.MIN_BLOCK_ROWS): small test batches then make
    several blocks, shared out over the ranks."""
    before = reference.MIN_BLOCK_ROWS
    reference.MIN_BLOCK_ROWS = rows
    try:
        yield
    finally:
        reference.MIN_BLOCK_ROWS = before


def _blocked_reference_case(comm):
    """The quality checks' exact gradient: 30 samples in 7 blocks shared out over the
    layer ranks, each block backpropagated by exactly one rank; the same bits on any
    number of ranks."""
    net, X, C = dense_problem(nlayers=16, batch=30)
    p = net.init_params(seed=5, scale=1.0)
    ev = reference.BlockedSerialEvaluator(net, comm=comm, min_rows=4)
    starts = [rows.start for rows in ev.blocks(X.shape[0])]
    seen = []
    whole = net.loss_and_gradient

    def recording(params, Xb, Cb):
        seen.append(starts.index(int(np.flatnonzero((X == Xb[0]).all(axis=1))[0])))
        return whole(params, Xb, Cb)

    net.loss_and_gradient = recording
    loss, grad, stats = ev.gradient(p, X, C)
    assert_split(comm, seen, len(starts), "blocks")
    return {"loss": loss, "grad": grad.tolist(), "blocks": len(starts), "steps": stats["steps"]}


def _validation_case(comm):
    """Sequential validation shares the samples out over the layer ranks, each sweeping
    its share through every layer: the count of one process's serial forward pass."""
    net, X, C = dense_problem(nlayers=16, batch=30)
    p = net.init_params(seed=5, scale=1.0)
    ev = LayerParallelEvaluator(net, p.copy(), X[:8], C[:8], comm=comm, mgrit=MGRIT)
    seen = []
    forward = net.forward

    def recording(params, Xb, keep=False):
        seen.extend(int(np.flatnonzero((X == row).all(axis=1))[0]) for row in Xb)
        return forward(params, Xb, keep)

    net.forward = recording
    acc = ev.accuracy(p, X, C)
    net.forward = forward
    assert_split(comm, seen, X.shape[0], "validation samples")
    assert acc == net.accuracy(p, X, C) and 0 < acc < 1, acc
    return {"accuracy": acc}


def _training_case(mode, optimizer, comm, inspect=None, **extra):
    net, X, C = dense_problem(nlayers=16, batch=30)
    cfg = TrainConfig(mode=mode, optimizer=optimizer, iterations=4, mgrit=MGRIT, seed=2,
                      tikhonov=1e-3, ddt=1e-2, classifier_reg=1e-3, **extra)
    trainer = Trainer(net, (X, C), (X[:10], C[:10]), cfg, comm=comm)
    seen = _count_calls(net, "loss_and_gradient") if inspect else None
    history = trainer.run()
    if inspect:
        inspect(comm, history, seen)
    assert_split(comm, trainer.evaluator.solver.primal_core.owned, net.nlayers + 1, "layers")
    keys = ("loss", "objective", "gradient_norm", "step_size", "val_accuracy",
            "gradient_cosine", "exact_gradient_used", "oneshot")
    return {"history": [[r.get(k) for k in keys] for r in history],
            "params": trainer.params.tolist()}


def _count_calls(obj, name):
    """Counts the calls of ``obj.name`` from now on (in the returned list's first item)."""
    calls, method = [0], getattr(obj, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return method(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


def _blocks_shared_over_the_layer_ranks(comm, history, seen):
    """Each rank backpropagated its own share of the 7 blocks in each check, not all of
    them (the bits alone cannot tell: every rank's sum is the same)."""
    checks = sum("gradient_cosine" in r for r in history)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    counts = [seen[0]] if comm is None else comm.allgather(seen[0])
    want = [checks * len(share_of(7, size, r)) for r in range(size)]
    assert checks == 2 and counts == want, (rank, counts, want)


def _checks_in_blocks(comm):
    """Quality checks whose exact gradients come in 7 blocks of the 30 samples, each
    rank backpropagating its share of the blocks."""
    with reference_block_rows(4):
        return _training_case("oneshot", "lbfgs", comm, m1=1, m2=1, relax="F",
                              quality_check_every=2, quality_floor=0.99999999,
                              inspect=_blocks_shared_over_the_layer_ranks)


def _kept_slopes_case(comm):
    """One-shot training of a smooth_relu network, whose adjoint keeps the activation's
    slopes (braidpy.nn.dense.SlopeCache), and the same training with none kept: the
    same bits, on every rank."""
    runs, counts = [], None
    for keep in (True, False):
        net, X, C = dense_problem(nlayers=16, batch=30, activation="smooth_relu")
        if not keep:
            net.layer.slope_cache = lambda nlayers: None
        cfg = TrainConfig(mode="oneshot", optimizer="lbfgs", iterations=4, mgrit=MGRIT,
                          seed=2, m1=1, m2=2, relax="F")
        trainer = Trainer(net, (X, C), None, cfg, comm=comm)
        history = trainer.run()
        runs.append({"loss": [r["loss"] for r in history], "params": trainer.params.tolist()})
        if keep:
            slopes = trainer.evaluator.app.slope_cache
            counts = [slopes.kept > 0, slopes.given > 0]
    assert_split(comm, trainer.evaluator.solver.primal_core.owned, net.nlayers + 1, "layers")
    assert runs[0] == runs[1], "kept slopes changed the training"
    return {**runs[0], "kept and given on this rank": counts}


CASES = {
    "dense_gradient": lambda comm: _gradient_case(dense_problem, comm),
    "conv_gradient": lambda comm: _gradient_case(conv_problem, comm),
    "dense_oneshot_gradient": lambda comm: _gradient_case(dense_problem, comm, oneshot=(1, 1)),
    "train_exact_lbfgs": lambda comm: _training_case("exact", "lbfgs", comm),
    "train_oneshot_lbfgs": lambda comm: _training_case("oneshot", "lbfgs", comm),
    "train_oneshot_adam_batches": lambda comm: _training_case(
        "oneshot", "adam", comm, batch_size=10, shuffle=True),
    # A floor this high fails on most checks: exact gradients and raised iterations.
    "train_oneshot_quality_checks": lambda comm: _training_case(
        "oneshot", "lbfgs", comm, m1=1, m2=1, relax="F", quality_check_every=2,
        quality_floor=0.99999999),
    "blocked_reference_gradient": _blocked_reference_case,
    "validation_by_samples": _validation_case,
    "train_oneshot_quality_checks_blocked": lambda comm: _checks_in_blocks(comm),
    "train_oneshot_kept_slopes": _kept_slopes_case,
}
