"""How much faster than a serial NumPy loop is batched relaxation on a deep narrow ResNet,
forward and for one gradient? (one process)

Network (_apps_resnet.py): N layers u <- u + h tanh(u K_n^T + b_n), width 8, batch 1 or
32, random trained-scale weights, T = 2. Serial: a NumPy loop (gradient: keep the states,
then backpropagate). braidpy: braidpy.solve, cf 64, 2 levels, F-relaxation,
access_level 0, (a) max_iter 2, abs_tol 0 (one-shot's forward) and (b) rel_tol 1e-8;
"batched" uses step_stacked, "unbatched" batch=False. Gradient: GradientSolver, (a)
oneshot=(2, 2) cold, (b) exact to 1e-8. For the lean app and braidpy.nn.ResNetApp.
Tables: forward, gradient, a sweep of (a) over N = 256 ... 16384 at batch 1, and
braidpy's own cost per call with a do-nothing kernel. Each timing covers building and
solving; min (median) over repeats; ratio = serial / braidpy (> 1: braidpy faster).

Run: python benchmarks/bench_batched.py [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
from _apps_resnet import TSTOP, ResNet, ResNetWeights, nn_resnet, serial_forward, serial_gradient
from _harness import min_median, print_table

import braidpy
from braidpy.adjoint import GradientSolver
from braidpy.nn import ResNetApp


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, default=4096)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--cfactor", type=int, default=64)
    p.add_argument("--max-levels", type=int, default=2)
    p.add_argument("--nrelax", type=int, default=0)
    p.add_argument("--sweep", type=int, nargs="+",
                   default=[256, 512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--apps", nargs="+", default=["lean", "ResNetApp"],
                   choices=["lean", "ResNetApp"])
    p.add_argument("--tables", nargs="+", default=["overhead", "forward", "gradient", "sweep"],
                   choices=["overhead", "forward", "gradient", "sweep"])
    p.add_argument("--quick", action="store_true", help="smoke run: N 512, 1 repeat")
    a = p.parse_args(argv)
    if a.quick:
        a.ntime, a.repeats, a.sweep, a.cfactor = 512, 1, [256, 512], 16
    return a


def timed(fn, repeats):
    """(min, median, last result) of fn() over repeats."""
    times, out = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    lo, med = min_median(times)
    return lo, med, out


def ms(lo, med):
    return f"{lo * 1e3:.2f} ({med * 1e3:.2f})"


def mgrit_opts(args, mode):
    base = dict(cfactor=args.cfactor, max_levels=args.max_levels, nrelax=args.nrelax)
    if mode == "a":
        return dict(base, max_iter=2, abs_tol=0.0)
    return dict(base, rel_tol=1e-8, abs_tol=0.0, max_iter=100)


def make_app(w, app, nn=None):
    """The lean benchmark app, or braidpy.nn.ResNetApp on the same network."""
    if app == "lean":
        return ResNet(w)
    net, params, X, C = nn
    return ResNetApp(net, params, X, C)


def forward(args, w, mode, batched, app="lean", nn=None):
    return braidpy.solve(make_app(w, app, nn), 0.0, TSTOP, w.ntime, access_level=0,
                         batch=batched, **mgrit_opts(args, mode))


def gradient(args, w, mode, batched, app="lean", nn=None):
    opts = dict(mgrit_opts(args, "b"), batch=batched)
    oneshot = (2, 2) if mode == "a" else None
    gs = GradientSolver(make_app(w, app, nn), 0.0, TSTOP, w.ntime, primal=opts, oneshot=oneshot)
    return gs.evaluate()


def forward_table(args):
    rows = []
    for batch in args.batches:
        w = ResNetWeights(args.ntime, width=args.width, batch=batch)
        nn = nn_resnet(w)
        net, params, X, _ = nn
        s_lo, s_med, ref = timed(lambda w=w: serial_forward(w), args.repeats)
        n_lo, n_med, _ = timed(lambda net=net, p=params, X=X: net.forward(p, X), args.repeats)
        for app in args.apps:
            for mode, label in (("a", "2 iterations"), ("b", "rel. drop 1e-8")):
                def run(batched, w=w, mode=mode, app=app, nn=nn):
                    return forward(args, w, mode, batched, app, nn)

                u_lo, u_med, ru = timed(lambda: run(False), args.repeats)
                b_lo, b_med, rb = timed(lambda: run(True), args.repeats)
                same = np.array_equal(ru.final, rb.final)
                err = float(np.abs(rb.final - ref).max())
                rows.append([batch, app, label, ms(s_lo, s_med),
                             ms(n_lo, n_med) if app != "lean" else "-", ms(u_lo, u_med),
                             ms(b_lo, b_med), f"{s_lo / b_lo:.2f}x ({s_med / b_med:.2f}x)",
                             f"{u_lo / b_lo:.1f}x", rb.iterations, f"{err:.1e}",
                             "yes" if same else "NO"])
    print_table(["batch", "app", "MGRIT", "serial ms", "nn serial ms", "unbatched ms",
                 "batched ms", "serial/batched", "unbatched/batched", "iterations",
                 "max|u_N - serial|", "batched == unbatched"], rows,
                title=f"Forward propagation, N {args.ntime}, width {args.width}, cfactor "
                      f"{args.cfactor}, {args.max_levels} levels, nrelax {args.nrelax}; ms: min "
                      f"(median) of {args.repeats}; serial: plain NumPy loop; nn serial: "
                      f"braidpy.nn.ResNet.forward")


def _nn_grads(nn, result):
    """braidpy.nn's serial gradient and the per-layer (dK, db) of a GradientSolver result."""
    net, params, X, C = nn
    _, g = net.loss_and_gradient(params, X, C)
    v = net.views(g)
    return v["K"], v["b"]


def gradient_table(args):
    rows = []
    for batch in args.batches:
        w = ResNetWeights(args.ntime, width=args.width, batch=batch)
        nn = nn_resnet(w)
        net, params, X, C = nn
        s_lo, s_med, _ = timed(lambda w=w: serial_gradient(w), args.repeats)
        n_lo, n_med, _ = timed(lambda net=net, p=params, X=X, C=C: net.loss_and_gradient(p, X, C),
                               args.repeats)
        for app in args.apps:
            if app == "lean":
                _, dK, db = serial_gradient(w)
            else:
                dK, db = _nn_grads(nn, None)
            scale = max(np.abs(dK).max(), np.abs(db).max())
            for mode, label in (("a", "one-shot (2, 2)"), ("b", "exact, rel. 1e-8")):
                def run(batched, w=w, mode=mode, app=app, nn=nn):
                    return gradient(args, w, mode, batched, app, nn)

                u_lo, u_med, gu = timed(lambda: run(False), args.repeats)
                b_lo, b_med, gb = timed(lambda: run(True), args.repeats)
                err = max(max(np.abs(gb.gradients[n][0] - dK[n]).max(),
                              np.abs(gb.gradients[n][1] - db[n]).max()) for n in gb.gradients)
                same = all(np.array_equal(gb.gradients[n][0], gu.gradients[n][0])
                           and np.array_equal(gb.gradients[n][1], gu.gradients[n][1])
                           for n in gu.gradients)
                rows.append([batch, app, label, ms(s_lo, s_med),
                             ms(n_lo, n_med) if app != "lean" else "-", ms(u_lo, u_med),
                             ms(b_lo, b_med), f"{s_lo / b_lo:.2f}x ({s_med / b_med:.2f}x)",
                             f"{u_lo / b_lo:.1f}x",
                             f"{gb.primal.iterations}/{gb.adjoint.iterations}",
                             f"{err / scale:.1e}", "yes" if same else "NO"])
    print_table(["batch", "app", "gradient", "serial fwd+bwd ms", "nn serial ms",
                 "unbatched ms", "batched ms", "serial/batched", "unbatched/batched",
                 "iterations p/a", "rel. grad err", "batched == unbatched"], rows,
                title=f"One gradient (forward + adjoint), N {args.ntime}, width {args.width}; "
                      f"serial: plain NumPy forward + backpropagation loop; nn serial: "
                      f"braidpy.nn.ResNet.loss_and_gradient")


def sweep_table(args):
    rows = []
    for n in args.sweep:
        w = ResNetWeights(n, width=args.width, batch=1)
        s_lo, _, _ = timed(lambda w=w: serial_forward(w), args.repeats)
        b_lo, _, r = timed(lambda w=w: forward(args, w, "a", True), args.repeats)
        rows.append([n, f"{s_lo * 1e3:.2f}", f"{b_lo * 1e3:.2f}", f"{s_lo / b_lo:.2f}x",
                     r.counts["step_batch"], r.counts["step"]])
    print_table(["N", "serial ms", "batched MGRIT ms", "serial/batched", "batched calls",
                 "single step calls"], rows,
                title=f"Sweep over N, forward, 2 iterations, batch 1 (min of {args.repeats})")


class _Noop(braidpy.App):
    def init(self, t):
        return np.zeros((1, 8))

    def step(self, u, t0, t1, status):
        pass

    def step_stacked(self, U, t0s, t1s, status):
        pass


def overhead_table(args):
    n = args.ntime
    rows = []
    for batched in (False, True):
        def run(batched=batched):
            return braidpy.solve(_Noop(), 0.0, 1.0, n, access_level=0, batch=batched,
                                 **mgrit_opts(args, "a"))

        lo, med, r = timed(run, args.repeats)
        states = r.counts["step"] + r.counts["step_batch_items"]
        calls = r.counts["step"] + r.counts["step_batch"]
        rows.append(["batched" if batched else "unbatched", ms(lo, med), calls, states,
                     f"{lo / calls * 1e6:.2f}", f"{lo / states * 1e6:.3f}"])
    print_table(["path", "solve ms", "step + step_batch calls", "states stepped",
                 "us per call", "us per state step"], rows,
                title=f"braidpy's own cost with a do-nothing kernel, N {n}, 2 iterations "
                      f"(everything outside the user's kernel, incl. Python call costs)")


def main(argv=None):
    args = parse_args(argv)
    tables = dict(overhead=overhead_table, forward=forward_table, gradient=gradient_table,
                  sweep=sweep_table)
    for name in args.tables:
        tables[name](args)


if __name__ == "__main__":
    main()
