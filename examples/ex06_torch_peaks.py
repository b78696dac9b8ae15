"""Example 6: a 64-layer MLP ResNet on Peaks in PyTorch, its layers solved by MGRIT.

The network of example 4 written as ordinary torch modules: a dense opening layer
(2 -> width, tanh), ``--layers`` residual blocks tanh(Linear(width, width)) run by
:class:`braidpy.torch.LayerParallel` (x <- x + h F_n(x), h = T / layers), and a linear
classifier with softmax cross entropy. The loop is plain torch: ``torch.optim.Adam``,
``loss.backward()``, ``opt.step()``; the backward pass is adjoint MGRIT. Every rank runs
the same lines; the layers are split over the ranks, and the losses are the same with
any number of ranks (to rounding).

Run it serially::

    python examples/ex06_torch_peaks.py
    python examples/ex06_torch_peaks.py --oneshot 2 1

or with the layers split over MPI ranks::

    mpiexec -n 2 python examples/ex06_torch_peaks.py
    mpiexec -n 4 python examples/ex06_torch_peaks.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from braidpy.data import peaks
from braidpy.parallel import world
from braidpy.torch import LayerParallel

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--layers", type=int, default=64, help="residual blocks")
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--T", type=float, default=5.0, help="final layer time")
    p.add_argument("--samples", type=int, default=500, help="training points")
    p.add_argument("--steps", type=int, default=100, help="Adam steps (full batch)")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--max-levels", type=int, default=2)
    p.add_argument("--tol", type=float, default=1e-9, help="MGRIT abs_tol (exact mode)")
    p.add_argument("--oneshot", type=int, nargs=2, metavar=("M1", "M2"),
                   help="one-shot: M1 forward and M2 adjoint iterations per step")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--every", type=int, default=10, help="print every this many steps")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list:
    """Train; returns the losses (every rank)."""
    args = parse_args(argv)
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    torch.set_num_threads(1)
    X, C = peaks(args.samples + 500, seed=args.seed)
    X = torch.as_tensor(X, dtype=torch.float64)
    y = torch.as_tensor(C.argmax(axis=1))
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(args.seed))
    train, val = order[:args.samples], order[args.samples:]

    torch.manual_seed(args.seed)  # the same weights on every rank
    q = args.width
    opening = torch.nn.Sequential(torch.nn.Linear(2, q), torch.nn.Tanh()).double()
    blocks = [torch.nn.Sequential(torch.nn.Linear(q, q), torch.nn.Tanh()).double()
              for _ in range(args.layers)]
    classifier = torch.nn.Linear(q, 5).double()
    mode = {} if args.oneshot is None else {"oneshot": tuple(args.oneshot), "seq_soln": True,
                                            "skip": False}
    body = LayerParallel(blocks, args.T, comm=comm, cfactor=args.cfactor,
                         max_levels=args.max_levels, abs_tol=args.tol, **mode)
    del blocks  # each rank keeps only the blocks it needs
    params = [*opening.parameters(), *body.parameters(), *classifier.parameters()]
    opt = torch.optim.Adam(params, lr=args.lr)
    if rank == 0:
        print(f"Peaks: {args.layers} layers of width {q} on {1 if comm is None else comm.Get_size()}"
              f" rank(s), {'one-shot ' + str(tuple(args.oneshot)) if args.oneshot else 'exact'}"
              f" MGRIT, batch path {body.batch_path}")
    losses, start = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(classifier(body(opening(X[train]))), y[train])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0 and (step % args.every == 0 or step == 1):
            print(f"step {step:4d}  loss {loss.item():.6f}  MGRIT iterations "
                  f"{body.last_forward.iterations} / {body.last_backward.iterations}")
    with torch.no_grad():
        hits = (classifier(body(opening(X[val]))).argmax(dim=1) == y[val]).double().mean()
    if rank == 0:
        print(f"final loss {losses[-1]:.6f}, validation accuracy {float(hits):.3f}, "
              f"{time.perf_counter() - start:.1f} s")
    body.close()
    return losses


if __name__ == "__main__":
    main()
