"""Does MGRIT beat the serial layer loop of a deep narrow ResNet on a GPU, forward and for
one gradient? And, by option, what do the GPU's conv, validation and fused dense calls cost?

Default: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, T = 2, batch 1 and 32,
on CuPy. Forward: the serial loop vs braidpy.solve (2 levels cf 64 and 3 levels cf 32,
F, step_stacked) for 2 iterations and to a 1e-8 relative drop, the time split by
callback. Gradient: braidpy.nn.ResNet's serial loss_and_gradient vs GradientSolver's
one-shot (2, 2) (new and reused solver, split by part) and PyTorch's autograd through
the same loop. Min over --repeats, synchronized; without a GPU, the NumPy path.

--conv, --conv-net (_gpu_conv.py): a conv ResNet's (8 channels, 28x28, batch 32) batched
calls per backend (cuDNN grouped, per interval, streams, im2col, cuda-direct, PyTorch;
then --conv-channels); its one-shot gradient vs serial fwd+bwd per backend and cfactor.
--validation, --dense-fused, --overheads (_gpu_calls.py): seconds per validation vs per
training step on the GPU (target <= 10); the fused dense kernels vs the array-API
arithmetic; where small-state runs spend their host time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import braidpy

from _gpu import (BATCH, CFACTOR, TSTOP, WIDTH, ResNet, array_module, best, mgrit, serial,
                  sync, torch_cuda, torch_fwd_bwd, weights)
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
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    net = Net((WIDTH,), 4, width=WIDTH, nlayers=n, tstop=TSTOP, activation="tanh",
              device=None if xp is np else "cuda")
    params = net.init_params(seed=7)
    rng = np.random.default_rng(8)
    X = xp.asarray(rng.standard_normal((batch, WIDTH)))
    C = xp.asarray(np.eye(4)[rng.integers(0, 4, batch)])
    app = ResNetApp(net, params, X, C)

    def solver():
        return GradientSolver(app, 0.0, net.tstop, n, oneshot=(2, 2),
                              primal=dict(max_levels=2, cfactor=CFACTOR, nrelax=0))

    reused = solver()  # as training uses it: built once, warm-started at every step
    runs = {"serial": lambda: net.loss_and_gradient(params, X, C),
            "new": lambda: solver().evaluate(),  # its set-up (N states) included
            "reused": reused.evaluate}
    for warm_up in (runs["new"], runs["reused"]):
        warm_up()
    sync(xp)
    t = {k: best(fn, repeats, sync=lambda: sync(xp)) for k, fn in runs.items()}
    split = gradient_split(xp, reused)
    reused.close()
    line = (f"gradient N={n} width {WIDTH} batch {batch}: serial fwd+bwd "
            f"{t['serial'] * 1e3:.1f} ms; one-shot (2,2) new solver {t['new'] * 1e3:.1f} ms "
            f"({t['serial'] / t['new']:.2f}x serial), solver reused as in training "
            f"{t['reused'] * 1e3:.1f} ms ({t['serial'] / t['reused']:.2f}x serial)\n  {split}")
    torch = torch_cuda() if xp is not np else None
    if torch is not None:
        t_torch = best(lambda: torch_fwd_bwd(torch, (n, batch), (n, WIDTH, WIDTH), WIDTH ** 0.5,
                                             (batch, WIDTH), lambda u, K, b: u @ K.T + b),
                       repeats)
        line += (f"; PyTorch serial fwd+bwd {t_torch * 1e3:.1f} ms "
                 f"({t_torch / t['new']:.2f}x one-shot)")
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--layers", type=int, default=4096)
    add("--batches", type=int, nargs="+", default=[1, BATCH])
    add("--repeats", type=int, default=3)
    add("--hierarchies", nargs="+", default=[f"2:{CFACTOR}", "3:32"], metavar="LEVELS:CF",
        help="forward: MGRIT hierarchies to time")
    add("--conv", action="store_true", help="a conv step's calls per backend")
    add("--intervals", type=int, default=64, help="--conv: intervals m")
    add("--streams", type=int, default=4, help="--conv: streams (layer blocks)")
    add("--conv-channels", type=int, nargs="*", default=[32, 64],
        help="--conv: wider layers' channels (cuDNN grouped vs cuda-direct); none to skip")
    add("--cudnn-benchmark", action="store_true",
        help="--conv: cuDNN's algorithms measured (BRAIDPY_CUDNN_BENCHMARK=1)")
    add("--conv-net", action="store_true", help="a conv ResNet's one-shot gradient vs serial")
    add("--conv-layers", type=int, default=1024, help="--conv-net: layers")
    add("--conv-batches", type=int, nargs="+", default=[32, 256])
    add("--conv-backends", nargs="+", default=["cuda-direct", "cudnn", "array-api"])
    add("--conv-cfactors", type=int, nargs="+", default=[CFACTOR],
        help="--conv-net: coarsening factors of the one-shot gradient (2 levels)")
    add("--validation", action="store_true", help="seconds per validation vs per step")
    add("--validation-sources", nargs="+", default=["digits", "digits28"],
        choices=["digits", "digits28"], help="--validation: data (quick preset)")
    add("--validation-modes", nargs="+", default=["serial", "oneshot"],
        choices=["serial", "oneshot", "exact"], help="--validation: training modes")
    add("--validation-steps", type=int, default=20, help="--validation: steps per run")
    add("--validate-every", type=int, default=5, help="--validation: steps per validation")
    add("--dense-fused", action="store_true", help="fused dense kernels vs array-API, per call")
    add("--overheads", action="store_true", help="where small-state runs spend host time")
    add("--calls", type=int, default=2000, help="--overheads: calls per timing")
    args = p.parse_args(argv)
    xp, where = array_module()
    info = braidpy.cuda_info()
    print(f"{where}\nbraidpy._cuda compiled: {info['compiled']}, devices: {info['devices']}, "
          f"cuDNN: {info['cudnn']}")
    for flag, run in (("conv", conv_steps), ("conv_net", conv_network),
                      ("validation", lambda xp, args: validation_rows(xp, where, args)),
                      ("dense_fused", lambda xp, args: dense_fused_rows(xp, where, args.repeats)),
                      ("overheads", lambda xp, args: overheads(xp, args.calls))):
        if getattr(args, flag):
            return run(xp, args)
    hierarchies = [tuple(int(v) for v in h.split(":")) for h in args.hierarchies]
    for batch in args.batches:
        forward(xp, args.layers, batch, args.repeats, hierarchies)
        gradient(xp, args.layers, batch, args.repeats)


if __name__ == "__main__":
    main()
