"""Does MGRIT beat the serial layer loop of a deep narrow ResNet on a GPU, forward and for
one gradient? And, by option, what do the GPU's conv, validation and fused dense calls cost?

Default: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, T = 2, batch 1 and 32,
on CuPy (without a GPU: NumPy). Forward: the serial loop vs braidpy.solve (--hierarchies,
F, step_stacked) for 2 iterations and to a 1e-8 relative drop, split by callback.
Gradient: ResNet.loss_and_gradient vs GradientSolver's one-shot (2, 2), new and reused
(split by part), and PyTorch's autograd through the same loop. Min over --repeats,
synchronized. --conv, --conv-net: _gpu_conv.py; --validation, --dense-fused, --overheads:
_gpu_calls.py.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import braidpy

from _gpu import (BATCH, CFACTOR, TSTOP, WIDTH, ResNet, array_module, best, gradient_times,
                  mgrit, serial, sync, timed, torch_cuda, torch_fwd_bwd, weights)
from _gpu_calls import dense_fused_rows, overheads, validation_rows
from _gpu_conv import conv_network, conv_steps


def forward(xp, n, batch, repeats, hierarchies):
    """Serial loop vs MGRIT (2 iterations; to a 1e-8 relative drop) per (levels, cfactor)."""
    K, b = weights(xp, n)
    u0 = xp.asarray(np.cos(np.arange(batch * WIDTH)).reshape(batch, WIDTH))
    mgrit(xp, K, b, u0, n)  # warm-up: kernels compiled, pools filled
    t_serial = best(lambda: serial(xp, K, b, u0, n), repeats)
    for levels, cf in hierarchies:
        h = dict(levels=levels, cfactor=cf)
        t_two = best(lambda: mgrit(xp, K, b, u0, n, **h), repeats)
        tol = dict(max_iter=100, abs_tol=0.0, rel_tol=1e-8, **h)
        iters = mgrit(xp, K, b, u0, n, **tol).iterations
        t_tol = best(lambda: mgrit(xp, K, b, u0, n, **tol), repeats)
        print(f"forward N={n} width {WIDTH} batch {batch}, {levels} levels cf {cf}: serial "
              f"{t_serial * 1e3:.1f} ms; MGRIT 2 iterations {t_two * 1e3:.1f} ms "
              f"({t_serial / t_two:.2f}x serial); to a 1e-8 relative drop ({iters} "
              f"iterations) {t_tol * 1e3:.1f} ms ({t_serial / t_tol:.2f}x serial)", flush=True)
        print("  " + time_split(xp, K, b, u0, n, **h), flush=True)


def time_split(xp, K, b, u0, n, **h):
    """Where 2 MGRIT iterations spend their time: host time inside the step callbacks
    (their launches, not synchronized) and the rest, with the core's operation counts."""
    spent = {"step": 0.0, "step_stacked": 0.0}

    def timed_method(name):
        def call(self, *a):
            start = time.perf_counter()
            getattr(ResNet, name)(self, *a)
            spent[name] += time.perf_counter() - start
        return call

    Timed = type("Timed", (ResNet,), {name: timed_method(name) for name in spent})
    start = time.perf_counter()
    c = mgrit(xp, K, b, u0, n, app=Timed, **h).counts
    total = time.perf_counter() - start
    rest = total - spent["step"] - spent["step_stacked"]
    return (f"time split of 2 iterations, {total * 1e3:.1f} ms: step {spent['step'] * 1e3:.1f}"
            f" ms ({c['step']} calls), step_stacked {spent['step_stacked'] * 1e3:.1f} ms "
            f"({c['step_batch']} calls), the rest {rest * 1e3:.1f} ms (clone {c['clone']}, "
            f"sum {c['sum']}, norm {c['norm']})")


def gradient(xp, n, batch, repeats):
    """Serial forward+backward vs one-shot (2,2) MGRIT gradient (+ PyTorch's autograd)."""
    from braidpy.nn import ResNet as Net

    net = Net((WIDTH,), 4, width=WIDTH, nlayers=n, tstop=TSTOP, activation="tanh",
              device=None if xp is np else "cuda")
    rng = np.random.default_rng(8)
    X = xp.asarray(rng.standard_normal((batch, WIDTH)))
    C = xp.asarray(np.eye(4)[rng.integers(0, 4, batch)])
    t, solver = gradient_times(xp, net, X, C, [CFACTOR], repeats)
    reused = solver(CFACTOR)  # as training uses it: built once, warm-started at every step
    t_reused = timed(xp, reused.evaluate, repeats)
    split = gradient_split(xp, reused)
    reused.close()
    line = (f"gradient N={n} width {WIDTH} batch {batch}: serial fwd+bwd "
            f"{t['serial'] * 1e3:.1f} ms; one-shot (2,2) new solver {t[CFACTOR] * 1e3:.1f} ms "
            f"({t['serial'] / t[CFACTOR]:.2f}x serial), solver reused as in training "
            f"{t_reused * 1e3:.1f} ms ({t['serial'] / t_reused:.2f}x serial)\n  {split}")
    torch = torch_cuda() if xp is not np else None
    if torch is not None:
        t_torch = best(lambda: torch_fwd_bwd(torch, (n, batch), (n, WIDTH, WIDTH), WIDTH ** 0.5,
                                             (batch, WIDTH), lambda u, K, b: u @ K.T + b),
                       repeats)
        line += (f"; PyTorch serial fwd+bwd {t_torch * 1e3:.1f} ms "
                 f"({t_torch / t[CFACTOR]:.2f}x one-shot)")
    print(line, flush=True)


def gradient_split(xp, solver):
    """A reused one-shot gradient's parts, synchronized between them: the primal solve,
    the objective, the adjoint solve with the gradients."""
    marks = []

    def mark(*_):
        sync(xp)
        marks.append(time.perf_counter())

    mark()
    primal = solver.solve_primal()
    mark()
    solver.solve_adjoint(primal, after_objective=mark)
    mark()
    t0, t1, t2, t3 = marks
    return (f"reused one-shot gradient split: primal {(t1 - t0) * 1e3:.1f} ms, objective "
            f"{(t2 - t1) * 1e3:.1f} ms, adjoint and gradients {(t3 - t2) * 1e3:.1f} ms")


def main(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    for flag, words in (("--conv", "a conv step's calls per backend (then --conv-channels)"),
                       ("--cudnn-benchmark", "--conv: cuDNN's algorithms measured"),
                       ("--conv-net", "a conv ResNet's one-shot gradient vs serial"),
                       ("--validation", "seconds per validation vs per training step"),
                       ("--dense-fused", "fused dense kernels vs array-API, per call"),
                       ("--overheads", "where small-state runs spend host time")):
        p.add_argument(flag, action="store_true", help=words)
    for name, default in (("layers", 4096), ("repeats", 3), ("intervals", 64), ("streams", 4),
                          ("conv-layers", 1024), ("validation-steps", 20),
                          ("validate-every", 5), ("calls", 2000)):
        p.add_argument(f"--{name}", type=int, default=default)
    for name, default in (("batches", [1, BATCH]), ("conv-batches", [32, 256]),
                          ("conv-cfactors", [CFACTOR]), ("conv-channels", [32, 64])):
        p.add_argument(f"--{name}", type=int, nargs="*" if name == "conv-channels" else "+",
                       default=default)
    p.add_argument("--hierarchies", nargs="+", default=[f"2:{CFACTOR}", "3:32"],
                   metavar="LEVELS:CF")
    p.add_argument("--conv-backends", nargs="+", default=["cuda-direct", "cudnn", "array-api"])
    p.add_argument("--validation-sources", nargs="+", default=["digits", "digits28"],
                   choices=["digits", "digits28"])
    p.add_argument("--validation-modes", nargs="+", default=["serial", "oneshot"],
                   choices=["serial", "oneshot", "exact"])
    args = p.parse_args(argv)
    xp, where = array_module()
    info = braidpy.cuda_info()
    print(f"{where}\nbraidpy._cuda compiled: {info['compiled']}, devices: {info['devices']}, "
          f"cuDNN: {info['cudnn']}")
    if args.conv or args.conv_net:
        return (conv_steps if args.conv else conv_network)(xp, args)
    if args.validation:
        return validation_rows(xp, where, args)
    if args.dense_fused:
        return dense_fused_rows(xp, where, args.repeats)
    if args.overheads:
        return overheads(xp, args.calls)
    hierarchies = [tuple(int(v) for v in h.split(":")) for h in args.hierarchies]
    for batch in args.batches:
        forward(xp, args.layers, batch, args.repeats, hierarchies)
        gradient(xp, args.layers, batch, args.repeats)


if __name__ == "__main__":
    main()
