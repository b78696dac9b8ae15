"""Example 4: layer-parallel one-shot training of a ResNet on the Peaks level sets.

Builds on example 3 (gradients through MGRIT) with the flagship use of braidpy: a deep
residual network is a time stepper in layer time, so its forward pass, its
backpropagation and hence its training can be spread over MPI ranks by layers. The set-up
is test case 1 of Günther et al., "Layer-parallel training of deep residual neural
networks" (SIAM J. Math. Data Sci. 2020): points of [-3, 3]^2 classified into the five
level sets of MATLAB's ``peaks`` function by a ResNet of width 8 on layer time [0, 5] with
smoothed ReLU, a learned dense opening layer and a softmax classifier.

Training is simultaneous ("one-shot"): each optimizer step runs only m1 = 2 iterations of
the state MGRIT solve and m2 = 2 of the adjoint MGRIT solve, warm-started from the
previous step, and L-BFGS updates the weights with the resulting inexact gradient. The
script uses :class:`braidpy.train.Trainer` directly; ``braidpy train peaks`` is the same
run from the command line.

Run it serially::

    python examples/ex04_peaks_oneshot.py
    python examples/ex04_peaks_oneshot.py --layers 128 --samples 5000 --plot ex04_plots

or with the layers split over 4 MPI ranks (the same numbers, bitwise)::

    mpiexec -n 4 python examples/ex04_peaks_oneshot.py

``--device cuda`` trains on a GPU (CuPy): weights, states, gradients and the optimizer's
state stay on the device.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any, Dict

from braidpy import data, nn, train
from braidpy.parallel import world

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--samples", type=int, default=1000, help="training points (paper: 5000)")
    p.add_argument("--validation-samples", type=int, default=200, help="validation points")
    p.add_argument("--layers", type=int, default=32, help="residual layers N (paper: 1024)")
    p.add_argument("--iterations", type=int, default=50, help="optimizer steps")
    p.add_argument("--m1", type=int, default=2, help="state MGRIT iterations per step")
    p.add_argument("--m2", type=int, default=2, help="adjoint MGRIT iterations per step")
    p.add_argument("--cfactor", type=int, default=4, help="MGRIT coarsening factor")
    p.add_argument("--max-levels", type=int, default=2, help="most MGRIT levels")
    p.add_argument("--seed", type=int, default=1, help="data (seed, seed + 1) and weights")
    p.add_argument("--plot", metavar="DIR", help="write training figures here (matplotlib)")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda",
                   help="train on the CPU (NumPy) or a CUDA GPU (CuPy: pip install "
                        "'braidpy-mgrit[gpu]')")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> train.Trainer:
    """Train; returns the :class:`braidpy.train.Trainer` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()

    # Every rank holds the (small) data and a copy of all weights; MGRIT splits the layers.
    X, C = data.peaks(args.samples, seed=args.seed)
    Xv, Cv = data.peaks(args.validation_samples, seed=args.seed + 1)
    net = nn.ResNet((2,), data.PEAKS_CLASSES, width=8, nlayers=args.layers, tstop=5.0,
                    activation="smooth_relu", opening="dense", device=args.device)
    config = train.TrainConfig(mode="oneshot", m1=args.m1, m2=args.m2, optimizer="lbfgs",
                               mgrit={"cfactor": args.cfactor, "max_levels": args.max_levels},
                               iterations=args.iterations, seed=args.seed)
    trainer = train.Trainer(net, (X, C), (Xv, Cv), config, comm=comm)

    def report(r: Dict[str, Any]) -> None:
        if rank == 0:
            print(f"  {r['iteration']:4d}  {r['loss']:.6e}  {100 * r['val_accuracy']:6.2f}%  "
                  f"{r['primal_iterations']:2d} {r['primal_residuals'][-1]:.2e}  "
                  f"{r['adjoint_iterations']:2d} {r['adjoint_residuals'][-1]:.2e}", flush=True)

    if rank == 0:
        print(f"ex04: peaks, {args.samples} training / {args.validation_samples} validation "
              f"points, {size} MPI rank(s)\n  {net.describe()}\n  one-shot m1={args.m1}, "
              f"m2={args.m2}, L-BFGS; MGRIT cf {args.cfactor}, {args.max_levels} levels")
        print("  step  loss          val acc  state it/res    adjoint it/res")
    clock = time.perf_counter()
    trainer.run(on_step=report)
    seconds = time.perf_counter() - clock
    if rank != 0:
        return trainer

    # Layer-parallel validation solved MGRIT to tolerance; a plain serial forward pass with
    # the trained weights must classify the same way.
    serial = net.accuracy(trainer.params, net.placement.from_host(Xv),
                          net.placement.from_host(Cv))
    best = trainer.best
    print(f"  stopped: {trainer.stop_reason} after {trainer.iteration} steps, {seconds:.2f} s")
    print(f"  best validation accuracy {100 * best['accuracy']:.2f}% at step {best['iteration']}")
    print(f"  final validation accuracy: layer-parallel "
          f"{100 * trainer.history[-1]['val_accuracy']:.2f}%, serial forward {100 * serial:.2f}%")
    if args.plot:
        from braidpy.train.plots import plot_history

        for path in plot_history(trainer.history, args.plot, title=f"ex04: {net.describe()}"):
            print(f"  wrote {path}")
    return trainer


if __name__ == "__main__":
    main()
