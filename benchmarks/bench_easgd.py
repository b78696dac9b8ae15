"""Does EASGD train digits as well and as fast as allreduce SGD and Adam with 4 workers,
and what share of a step is communication? (You, Buluç and Demmel, SC 2017.)

Conv ResNet (digits 8x8, 8 layers x 4), shuffled batches of 100 (25 per worker): ``sgd``
and ``adam`` on the grid 4 x 1 x 1, ``sync-easgd`` (SyncEASGD; the centre's accuracy),
``async-easgd`` (AsyncEASGD, one extra centre rank). Columns: validation accuracy after
each block of steps, wall time to there (slowest worker), communication share of a step.

    mpiexec -n 4 python benchmarks/bench_easgd.py [--steps S] [--quick] [--tau T]
    mpiexec -n 5 python benchmarks/bench_easgd.py --methods async-easgd [...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _harness import print_table
from mpi4py import MPI

from braidpy import data
from braidpy.nn import ResNet

WORKERS = 4


def setup(quick):
    split = data.digits(seed=1)
    net = ResNet((1, 8, 8), 10, width=4, nlayers=4 if quick else 8, tstop=5.0,
                 activation="smooth_relu", opening="conv", kernel=3)
    return net, split["train"], split["validation"]


def allreduce_run(comm, method, steps, every, quick, lr):
    """sgd or adam through the Trainer on the grid 4 x 1 x 1."""
    from braidpy.parallel import ProcessGrid
    from braidpy.train import TrainConfig, Trainer

    net, train, val = setup(quick)
    grid = ProcessGrid(comm, WORKERS, 1, 1)
    cfg = TrainConfig(mode="serial", optimizer=method, lr=lr, batch_size=100, shuffle=True,
                      iterations=steps, validate_every=every, seed=1, init_scale=0.1)
    points, wall, comm_time = [], 0.0, 0.0
    for r in Trainer(net, train, val, cfg, grid=grid).run():
        wall += r["seconds"] - r.get("validation_seconds", 0.0)
        comm_time += r["data_wait_seconds"] + r["data_agree_seconds"]
        if "val_accuracy" in r:
            points.append((r["iteration"], r["val_accuracy"], wall))
    grid.free()
    return points, comm_time / wall, None


def easgd_run(comm, method, steps, every, quick, lr, rho, tau, momentum):
    """SyncEASGD on 4 ranks, or AsyncEASGD on 4 workers and a centre (rank 0), over the
    Trainer's batch order (a new permutation per epoch, short last batches dropped)."""
    from braidpy.train.easgd import AsyncEASGD, SyncEASGD

    net, (Xt, Ct), (Xv, Cv) = setup(quick)
    params, rank, sync = net.init_params(1, 0.1), comm.Get_rank(), method == "sync-easgd"
    cls = SyncEASGD if sync else AsyncEASGD
    opt = cls(comm, lr=lr, rho=rho, tau=tau, momentum=momentum, **({} if sync else {"centre": 0}))
    worker = rank if sync else rank - 1
    rng, order, plan = np.random.default_rng(1), np.arange(0), []
    while len(plan) < steps:
        if len(order) < 100:
            order = rng.permutation(Xt.shape[0])
        plan.append(order[:100])
        order = order[100:]
    points, clock = [], {"wall": 0.0, "comm": 0.0}

    def timed_steps():
        for step, idx in enumerate(plan, start=1):
            start = time.perf_counter()
            rows = idx[worker * 25:worker * 25 + 25]
            loss, grad = net.loss_and_gradient(params, Xt[rows], Ct[rows])
            before = time.perf_counter()
            opt.step(params, loss, grad)
            clock["wall"] += time.perf_counter() - start
            clock["comm"] += time.perf_counter() - before
            if step % every == 0:  # sync: the centre; async: this worker's own
                acc = net.accuracy(opt.center if sync else params, Xv, Cv)
                points.append((step, acc, clock["wall"]))

    final = None
    if sync:
        timed_steps()
    elif opt.is_centre:
        final = net.accuracy(opt.serve(params), Xv, Cv)
    else:
        with opt.session():
            timed_steps()
    workers = comm if sync else comm.Split(0 if rank > 0 else MPI.UNDEFINED, rank)
    out, share = None, None
    if workers != MPI.COMM_NULL:  # the slowest worker's clock; the workers' mean accuracy
        out = [(step, workers.allreduce(acc) / WORKERS, workers.allreduce(t, op=MPI.MAX))
               for step, acc, t in points]
        share = workers.allreduce(clock["comm"] / clock["wall"], op=MPI.MAX)
    out, share = comm.bcast((out, share), root=0 if sync else 1)
    final = comm.bcast(final, root=0)
    if not sync:
        if workers != MPI.COMM_NULL:
            workers.Free()
        opt.close()
    return out, share, final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=40, help="steps between validations")
    parser.add_argument("--quick", action="store_true", help="4 layers, 40 steps")
    parser.add_argument("--methods", nargs="+", default=["sgd", "adam", "sync-easgd"],
                        choices=["sgd", "adam", "sync-easgd", "async-easgd"])
    parser.add_argument("--tau", type=int, default=1, help="EASGD communication period")
    parser.add_argument("--rho", type=float, default=1.0, help="EASGD elastic strength")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    steps = 40 if args.quick else args.steps
    every, rows = min(args.every, steps), []
    for method in args.methods:
        need = WORKERS + (method == "async-easgd")
        if comm.Get_size() != need:
            if comm.Get_rank() == 0:
                print(f"({method} needs mpiexec -n {need}; skipped)")
            continue
        if method in ("sgd", "adam"):
            lr = 0.1 if method == "sgd" else 0.02
            points, share, final = allreduce_run(comm, method, steps, every, args.quick, lr)
            label = f"{method} (allreduce, lr {lr:g})"
        else:
            points, share, final = easgd_run(comm, method, steps, every, args.quick, 0.1,
                                             args.rho, args.tau, 0.9)
            label = f"{method} (lr 0.1, rho {args.rho:g}, tau {args.tau}, mom 0.9)"
        for step, acc, t in points:
            rows.append([label, step, f"{100 * acc:.1f}%", f"{t:.2f}",
                         f"{100 * share:.0f}%" if step == points[-1][0] else ""])
        if final is not None:
            rows.append([label, "centre", f"{100 * final:.1f}%", "", ""])
    if comm.Get_rank() == 0:
        print(f"digits, {WORKERS} workers, batches of 100 (25 per worker), "
              f"{comm.Get_size()} ranks on this machine")
        print_table(["method", "step", "val acc", "wall s", "comm share"], rows,
                    "accuracy vs steps and time; communication share of a step")


if __name__ == "__main__":
    main()
