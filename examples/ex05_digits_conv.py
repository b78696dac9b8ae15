"""Example 5: a convolutional ResNet on scikit-learn's 8x8 digits, trained layer-parallel.

Builds on example 4 with images: the state of each layer is a batch of 8-channel 8x8
feature maps, a residual layer is u <- u + h * act(conv3x3(u) + b), a learned 3x3
convolution opens the 1-channel input to the 8 channels and the classifier reads all
8 * 8 * 8 state entries. This mirrors the MNIST test case of Günther et al. (2020) at a
size a laptop trains in under a minute: the 1797 bundled digit images (no download),
80 % for training and 20 % for validation.

Convolutional layers cost far more per sample than the dense Peaks layers, so this
example uses mini-batches (shuffled each epoch) and Adam instead of full-batch L-BFGS, and
validates every few steps. ``--mode`` picks one-shot (default), exact MGRIT gradients or
serial backpropagation; all three give the same first steps, and the layer-parallel modes
give the same numbers on any number of ranks. Needs scikit-learn.

Run it serially::

    python examples/ex05_digits_conv.py
    python examples/ex05_digits_conv.py --layers 16 --iterations 200 --plot ex05_plots

or with the layers split over MPI ranks::

    mpiexec -n 2 python examples/ex05_digits_conv.py

``--device cuda`` trains on a GPU (CuPy, ``pip install 'braidpy-mgrit[gpu]'``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any, Dict

import numpy as np

from braidpy import data, nn, train
from braidpy.parallel import world

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--layers", type=int, default=8, help="residual layers N")
    p.add_argument("--channels", type=int, default=8, help="channels of every layer")
    p.add_argument("--kernel", type=int, default=3, help="odd convolution kernel size")
    p.add_argument("--mode", choices=train.MODES, default="oneshot",
                   help="one-shot, exact MGRIT gradients or serial backpropagation")
    p.add_argument("--batch", type=int, default=100, help="images per step")
    p.add_argument("--iterations", type=int, default=40, help="optimizer steps")
    p.add_argument("--lr", type=float, default=0.01, help="Adam step size")
    p.add_argument("--validate-every", type=int, default=10, help="steps between validations")
    p.add_argument("--max-train", type=int, default=None,
                   help="use only this many training images (quick runs)")
    p.add_argument("--seed", type=int, default=1, help="split, weights and batch order")
    p.add_argument("--cf", type=int, default=4, help="MGRIT coarsening factor")
    p.add_argument("--plot", metavar="DIR", help="write training figures here (matplotlib)")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda",
                   help="train on the CPU (NumPy) or a CUDA GPU (CuPy: pip install "
                        "'braidpy-mgrit[gpu]')")
    args = p.parse_args(argv)
    if args.mode != "serial" and args.layers // args.cf < 2:
        p.error(f"--layers {args.layers} with coarsening factor {args.cf} leaves a coarse "
                f"grid of {args.layers // args.cf} interval(s), so MGRIT would run on one "
                f"level (a serial sweep), not two; use --layers >= {2 * args.cf}, a smaller "
                f"--cf, or --mode serial")
    return args


def main(argv: Sequence[str] | None = None) -> train.Trainer:
    """Train; returns the :class:`braidpy.train.Trainer` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()

    digits = data.digits(validation_fraction=0.2, seed=args.seed)
    X, C = digits["train"]
    X, C = X[:args.max_train], C[:args.max_train]
    Xv, Cv = digits["validation"]
    net = nn.ResNet(X.shape[1:], 10, width=args.channels, nlayers=args.layers, tstop=5.0,
                    activation="smooth_relu", opening="conv", kernel=args.kernel,
                    device=args.device)
    config = train.TrainConfig(mode=args.mode, optimizer="adam", lr=args.lr,
                               batch_size=args.batch, shuffle=True,
                               iterations=args.iterations, seed=args.seed,
                               validate_every=args.validate_every,
                               mgrit={"cfactor": args.cf, "max_levels": 2})
    trainer = train.Trainer(net, (X, C), (Xv, Cv), config, comm=comm)

    def report(r: Dict[str, Any]) -> None:
        if rank != 0:
            return
        val = f"{100 * r['val_accuracy']:6.2f}%" if "val_accuracy" in r else "      -"
        mgrit = (f"  {r['primal_iterations']:2d} {r['primal_residuals'][-1]:.2e}  "
                 f"{r['adjoint_iterations']:2d} {r['adjoint_residuals'][-1]:.2e}"
                 if "primal_iterations" in r else "")
        print(f"  {r['iteration']:4d}  {r['epoch']:3d}  {r['loss']:.6e}  {val}{mgrit}",
              flush=True)

    if rank == 0:
        print(f"ex05: digits, {X.shape[0]} training / {Xv.shape[0]} validation images "
              f"(1 x 8 x 8), {size} MPI rank(s)\n  {net.describe()}\n  mode {args.mode}, "
              f"Adam lr {args.lr}, batches of {args.batch}")
        print("  step  epoch  loss          val acc" +
              ("  state it/res    adjoint it/res" if args.mode != "serial" else ""))
    clock = time.perf_counter()
    trainer.run(on_step=report)
    seconds = time.perf_counter() - clock
    if rank != 0:
        return trainer

    best = trainer.best
    predicted = net.placement.to_host(net.predict(trainer.params, net.placement.from_host(Xv)))
    confusion = np.zeros((10, 10), dtype=int)
    np.add.at(confusion, (np.argmax(Cv, axis=1), predicted), 1)
    print(f"  stopped: {trainer.stop_reason} after {trainer.iteration} steps, {seconds:.2f} s")
    if best["accuracy"] is not None:
        print(f"  best validation accuracy {100 * best['accuracy']:.2f}% at step "
              f"{best['iteration']}")
    print("  validation confusion matrix of the final weights (rows: true digit):")
    for digit, row in enumerate(confusion):
        print(f"    {digit}: " + " ".join(f"{n:3d}" for n in row))
    if args.plot:
        from braidpy.train.plots import plot_history

        for path in plot_history(trainer.history, args.plot, title=f"ex05: {net.describe()}"):
            print(f"  wrote {path}")
    return trainer


if __name__ == "__main__":
    main()
