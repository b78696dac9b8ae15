"""Does MGRIT beat the serial layer loop of a deep narrow ResNet on a GPU, forward and for
one gradient? And, by option, what do the GPU's conv, validation and fused dense calls cost?

Default: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, T = 2, fixed weights,
batch 1 and 32, on CuPy. Forward: the serial loop vs braidpy.solve (cf 64, 2 levels, F,
step_stacked; --hierarchies) for (a) 2 iterations, abs_tol 0 and (b) a 1e-8 relative
drop, with the time split by callback. Gradient: braidpy.nn.ResNet's serial
loss_and_gradient vs GradientSolver's one-shot (2, 2) (new and reused solver, split by
part), and PyTorch's autograd through the same loop when torch sees the GPU. Min over
repeats, synchronized. Without CuPy or a GPU it says so and runs the NumPy path.

--conv (_gpu_conv.py): the k-th step of m intervals of a conv ResNet (8 channels, 28x28,
batch 32, 3x3, tanh; float64 and float32): one grouped cuDNN convolution vs interval by
interval vs S streams vs im2col; adjoint and gradient calls, grouped cuDNN vs im2col vs
cuda-direct; PyTorch's references (grouped conv2d with and without TF32, whole step,
backward data + filter); then --conv-channels (32, 64): cuDNN grouped vs cuda-direct and
the direct kernel family; the cuDNN algorithms named (--cudnn-benchmark: measured).
--conv-net (_gpu_conv.py): a conv ResNet (28x28, 8 channels, N 1024, batch 32 and 256)
serial fwd+bwd vs the one-shot (2, 2) gradient per --conv-cfactors and backend
(cuda-direct, cudnn, array-api), and PyTorch's autograd.
--validation (_gpu_calls.py): Trainer on device="cuda", digits and digits28 quick
presets, serial and one-shot: seconds per step vs per validation (first apart) and per
ResNet.evaluate; target <= 10 steps per validation.
--overheads (_gpu_overheads.py): where small-state runs spend their host time: per-call
host costs on CuPy, the core's vector operations, braidpy.nn's dense calls against the
same operations inline, the pieces of the grouped cuDNN conv step.
--dense-fused (_gpu_calls.py): Peaks' dense step (width 8, batch 5000, smooth_relu,
float64/32, single and stacked over 16): braidpy._cuda's fused kernels vs the array-API
arithmetic, forward and adjoint + gradient.

Run: python benchmarks/bench_gpu.py [--layers N] [--batches 1 32] [--repeats R]
     [--conv [--intervals M] [--conv-channels C ...] [--cudnn-benchmark]]
     [--conv-net [--conv-layers N] [--conv-batches B ...]]
     [--validation [--validation-steps S] [--validate-every V]] [--dense-fused]
     [--overheads [--calls 2000]]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import braidpy

from _gpu import (BATCH, CFACTOR, TSTOP, WIDTH, ResNet, _torch_residual_fwd_bwd,  # noqa: F401
                  array_module, best, mgrit, serial, sync, torch_cuda, weights)
from _gpu_calls import dense_fused_rows, validation_rows  # noqa: F401 - tests import it here
from _gpu_conv import conv_network, conv_steps
from _gpu_overheads import overheads


def forward(xp, n, batch, repeats, hierarchies=((2, CFACTOR),)):
    """Serial loop vs MGRIT (2 iterations; to a 1e-8 relative drop), one batch size,
    for each (levels, cfactor)."""
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
    (their launches, not synchronized) and the rest (the core, its vector operations on
    the device paths, waiting for the device), with the core's operation counts."""
    spent = {"step": 0.0, "step_stacked": 0.0}

    class Timed(ResNet):
        def step(self, *a):
            start = time.perf_counter()
            super().step(*a)
            spent["step"] += time.perf_counter() - start

        def step_stacked(self, *a):
            start = time.perf_counter()
            super().step_stacked(*a)
            spent["step_stacked"] += time.perf_counter() - start

    stop = {"max_iter": 2, "abs_tol": 0.0}
    start = time.perf_counter()
    r = braidpy.solve(Timed(xp, K, b, u0), 0.0, TSTOP, n, max_levels=h.get("levels", 2),
                      cfactor=h.get("cfactor", CFACTOR), nrelax=0, access_level=0, **stop)
    sync(xp)
    total = time.perf_counter() - start
    c = r.counts
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

    nclasses = 4
    device = None if xp is np else "cuda"
    net = Net((WIDTH,), nclasses, width=WIDTH, nlayers=n, tstop=TSTOP, activation="tanh",
              device=device)
    params = net.init_params(seed=7)
    rng = np.random.default_rng(8)
    X = xp.asarray(rng.standard_normal((batch, WIDTH)))
    C = xp.asarray(np.eye(nclasses)[rng.integers(0, nclasses, batch)])

    def serial_grad():
        _, g = net.loss_and_gradient(params, X, C)
        sync(xp)
        return g

    app = ResNetApp(net, params, X, C)

    def solver():
        return GradientSolver(app, 0.0, net.tstop, n, oneshot=(2, 2),
                              primal=dict(max_levels=2, cfactor=CFACTOR, nrelax=0))

    def oneshot_grad():  # a new solver each time: its set-up (4096 states) included
        g = solver().evaluate()
        sync(xp)
        return g

    reused = solver()  # as training uses it: built once, warm-started at every step

    def oneshot_reused():
        g = reused.evaluate()
        sync(xp)
        return g

    oneshot_grad()  # warm-up
    oneshot_reused()
    t_serial = best(serial_grad, repeats)
    t_oneshot = best(oneshot_grad, repeats)
    t_reused = best(oneshot_reused, repeats)
    split = gradient_split(xp, reused)
    reused.close()
    line = (f"gradient N={n} width {WIDTH} batch {batch}: serial fwd+bwd "
            f"{t_serial * 1e3:.1f} ms; one-shot (2,2) new solver {t_oneshot * 1e3:.1f} ms "
            f"({t_serial / t_oneshot:.2f}x serial), solver reused as in training "
            f"{t_reused * 1e3:.1f} ms ({t_serial / t_reused:.2f}x serial)")
    line += "\n  " + split
    torch = torch_cuda() if xp is not np else None
    if torch is not None:
        t_torch = best(lambda: _torch_fwd_bwd(torch, n, batch), repeats)
        line += (f"; PyTorch serial fwd+bwd {t_torch * 1e3:.1f} ms "
                 f"({t_torch / t_oneshot:.2f}x one-shot)")
    print(line, flush=True)


def gradient_split(xp, solver):
    """Where one reused one-shot gradient spends its time (synchronized between the
    parts): the primal solve, the objective, the adjoint solve with the gradients."""
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


def _torch_fwd_bwd(torch, n, batch):
    """PyTorch autograd through u <- u + h tanh(u K^T + b) on the GPU, float64."""
    _torch_residual_fwd_bwd(torch, (n, batch), (n, WIDTH, WIDTH), WIDTH ** 0.5,
                            (batch, WIDTH), lambda u, K, b: u @ K.T + b)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4096)
    p.add_argument("--batches", type=int, nargs="+", default=[1, BATCH])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hierarchies", nargs="+", default=[f"2:{CFACTOR}", "3:32"],
                   metavar="LEVELS:CF", help="forward: MGRIT hierarchies to time")
    p.add_argument("--forward-only", action="store_true", help="skip the gradient rows")
    p.add_argument("--conv", action="store_true", help="the cuDNN conv step comparison")
    p.add_argument("--intervals", type=int, default=64, help="--conv: intervals m")
    p.add_argument("--streams", type=int, default=4, help="--conv: streams (layer blocks)")
    p.add_argument("--conv-channels", type=int, nargs="*", default=[32, 64],
                   help="--conv: wider layers' channels, after the 8-channel rows (cuDNN "
                        "grouped vs cuda-direct); none to skip")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="--conv: cuDNN's algorithms chosen by measurement "
                        "(BRAIDPY_CUDNN_BENCHMARK=1) instead of its heuristics")
    p.add_argument("--conv-net", action="store_true",
                   help="a conv ResNet's one-shot gradient vs serial fwd+bwd, per backend")
    p.add_argument("--conv-layers", type=int, default=1024, help="--conv-net: layers")
    p.add_argument("--conv-batches", type=int, nargs="+", default=[32, 256])
    p.add_argument("--conv-backends", nargs="+", default=["cuda-direct", "cudnn", "array-api"],
                   help="--conv-net: the conv backends to time")
    p.add_argument("--conv-cfactors", type=int, nargs="+", default=[CFACTOR],
                   help="--conv-net: coarsening factors of the one-shot gradient (2 levels)")
    p.add_argument("--validation", action="store_true",
                   help="seconds per training step vs per validation on the GPU (target: "
                        "a validation costs <= 10 steps)")
    p.add_argument("--validation-sources", nargs="+", default=["digits", "digits28"],
                   choices=["digits", "digits28"], help="--validation: data (quick preset)")
    p.add_argument("--validation-modes", nargs="+", default=["serial", "oneshot"],
                   choices=["serial", "oneshot", "exact"], help="--validation: training modes")
    p.add_argument("--validation-steps", type=int, default=20,
                   help="--validation: training steps per run")
    p.add_argument("--validate-every", type=int, default=5,
                   help="--validation: steps between validations")
    p.add_argument("--dense-fused", action="store_true",
                   help="per call: fused dense GPU kernels vs the array-API arithmetic")
    p.add_argument("--overheads", action="store_true",
                   help="where small-state GPU runs spend their host time (a diagnostic)")
    p.add_argument("--calls", type=int, default=2000, help="--overheads: calls per timing")
    args = p.parse_args(argv)
    xp, where = array_module()
    info = braidpy.cuda_info()
    print(f"{where}\nbraidpy._cuda compiled: {info['compiled']}, devices: {info['devices']}, "
          f"cuDNN: {info['cudnn']}")
    if args.conv:
        conv_steps(xp, args)
        return
    if args.conv_net:
        conv_network(xp, args)
        return
    if args.validation:
        validation_rows(xp, where, args)
        return
    if args.dense_fused:
        dense_fused_rows(xp, where, args.repeats)
        return
    if args.overheads:
        overheads(xp, args.calls)
        return
    hierarchies = [tuple(int(v) for v in h.split(":")) for h in args.hierarchies]
    for batch in args.batches:
        forward(xp, args.layers, batch, args.repeats, hierarchies)
        if not args.forward_only:
            gradient(xp, args.layers, batch, args.repeats)


if __name__ == "__main__":
    main()
