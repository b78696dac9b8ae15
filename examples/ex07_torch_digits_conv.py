"""Example 7: a convolutional ResNet on the 8x8 digits in PyTorch, layer-parallel.

Example 5's network as torch modules: a 3x3 convolution opens the 1-channel images to
``--channels`` channels, ``--layers`` residual blocks tanh(conv3x3(x)) run by
:class:`braidpy.torch.LayerParallel`, and a linear classifier reads every feature.
Mini-batches of ``--batch`` images (shuffled each epoch with one seed, so every rank
sees the same batches) and ``torch.optim.Adam``. Needs scikit-learn (the digits).

Run it serially::

    python examples/ex07_torch_digits_conv.py

or with the layers split over MPI ranks::

    mpiexec -n 2 python examples/ex07_torch_digits_conv.py
    mpiexec -n 4 python examples/ex07_torch_digits_conv.py --layers 16
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from braidpy.data import digits
from braidpy.parallel import world
from braidpy.torch import LayerParallel

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--T", type=float, default=2.0, help="final layer time")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-train", type=int, default=1000, help="training images used")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--tol", type=float, default=1e-8, help="MGRIT abs_tol")
    p.add_argument("--seed", type=int, default=2024)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list:
    """Train; returns the losses (every rank)."""
    args = parse_args(argv)
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    torch.set_num_threads(1)
    sets = digits(seed=args.seed)
    (Xtr, Ctr), (Xva, Cva) = sets["train"], sets["validation"]
    Xtr, ytr = torch.as_tensor(Xtr[:args.max_train]), torch.as_tensor(Ctr[:args.max_train].argmax(1))
    Xva, yva = torch.as_tensor(Xva), torch.as_tensor(Cva.argmax(1))
    c = args.channels
    torch.manual_seed(args.seed)
    opening = torch.nn.Sequential(torch.nn.Conv2d(1, c, 3, padding=1), torch.nn.Tanh()).double()
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(c * 64, 10)).double()

    def block(n: int) -> torch.nn.Module:
        # Each rank builds only the blocks it needs, so block n's weights must not depend
        # on which blocks were built before it: its own seed, the global RNG left alone.
        with torch.random.fork_rng():
            torch.manual_seed(args.seed + 1 + n)
            return torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1),
                                       torch.nn.Tanh()).double()

    body = LayerParallel(block, args.T, comm=comm, depth=args.layers, abs_tol=args.tol, cfactor=2)
    opt = torch.optim.Adam([*opening.parameters(), *body.parameters(),
                            *classifier.parameters()], lr=args.lr)
    if rank == 0:
        print(f"digits: {args.layers} conv layers, {c} channels, "
              f"{1 if comm is None else comm.Get_size()} rank(s), batch path {body.batch_path}")
    losses, start = [], time.perf_counter()
    shuffle = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        order = torch.randperm(len(Xtr), generator=shuffle)
        for k in range(0, len(order) - args.batch + 1, args.batch):
            idx = order[k:k + args.batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(classifier(body(opening(Xtr[idx]))),
                                                     ytr[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with torch.no_grad():
            acc = (classifier(body(opening(Xva))).argmax(1) == yva).double().mean()
        if rank == 0:
            print(f"epoch {epoch + 1}: last loss {losses[-1]:.4f}, validation accuracy "
                  f"{float(acc):.3f}")
    if rank == 0:
        print(f"{len(losses)} steps in {time.perf_counter() - start:.1f} s")
    body.close()
    return losses


if __name__ == "__main__":
    main()
