"""How much faster than a serial NumPy loop is batched relaxation on a deep narrow ResNet,
forward and for one gradient? (one process)

_apps_resnet.py's network, width 8, batch 1 or 32, against its NumPy loops; braidpy cf
64, 2 levels, F-relaxation, (a) 2 iterations / one-shot (2, 2) and (b) rel_tol 1e-8 /
exact, batched (step_stacked) or not, for the lean app and braidpy.nn.ResNetApp. Tables:
forward, gradient, a sweep of (a) over N, braidpy's cost per call with a do-nothing
kernel. Timed: building and solving, min (median); ratio = serial / braidpy.

Run: python benchmarks/bench_batched.py [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
from _apps_resnet import TSTOP, ResNet, ResNetWeights, nn_resnet, serial_forward, serial_gradient
from _harness import clock, ms, print_table, ratio

import braidpy
from braidpy.adjoint import GradientSolver
from braidpy.nn import ResNetApp


def timed(fn, repeats):
    """(seconds of each of repeats calls of fn, the last result)."""
    runs = [clock(fn) for _ in range(repeats)]
    return [r[0] for r in runs], runs[-1][2]


def mgrit_opts(args, mode):
    base = dict(cfactor=args.cfactor, max_levels=args.max_levels, nrelax=args.nrelax)
    if mode == "a":
        return dict(base, max_iter=2, abs_tol=0.0)
    return dict(base, rel_tol=1e-8, abs_tol=0.0, max_iter=100)


def make_app(w, app, nn):
    """The lean benchmark app, or braidpy.nn.ResNetApp on the same network."""
    return ResNet(w) if app == "lean" else ResNetApp(*nn)


def forward(args, w, mode, batched, app="lean", nn=None):
    return braidpy.solve(make_app(w, app, nn), 0.0, TSTOP, w.ntime, access_level=0,
                         batch=batched, **mgrit_opts(args, mode))


def gradient(args, w, mode, batched, app="lean", nn=None):
    gs = GradientSolver(make_app(w, app, nn), 0.0, TSTOP, w.ntime, oneshot=(2, 2)
                        if mode == "a" else None, primal=dict(mgrit_opts(args, "b"),
                                                              batch=batched))
    return gs.evaluate()


def forward_check(w, nn, app, ru, rb):
    """(iterations, max|u_N - serial|, batched == unbatched) of two forward Results."""
    err = float(np.abs(rb.final - serial_forward(w)).max())
    return rb.iterations, f"{err:.1e}", np.array_equal(ru.final, rb.final)


def gradient_check(w, nn, app, gu, gb):
    """(iterations p/a, relative gradient error, batched == unbatched) of two Gradients."""
    if app == "lean":
        _, dK, db = serial_gradient(w)
    else:
        net, params, X, C = nn
        views = net.views(net.loss_and_gradient(params, X, C)[1])
        dK, db = views["K"], views["b"]
    scale = max(np.abs(dK).max(), np.abs(db).max())
    err = max(max(np.abs(gb.gradients[n][0] - dK[n]).max(),
                  np.abs(gb.gradients[n][1] - db[n]).max()) for n in gb.gradients)
    same = all(np.array_equal(gb.gradients[n][k], gu.gradients[n][k])
               for n in gu.gradients for k in (0, 1))
    return f"{gb.primal.iterations}/{gb.adjoint.iterations}", f"{err / scale:.1e}", same


#: table -> (solve, serial of (w, nn), nn serial of nn, check, mode labels, headers, title)
TABLES = {
    "forward": (forward, serial_forward, lambda nn: nn[0].forward(nn[1], nn[2]), forward_check,
                ("2 iterations", "rel. drop 1e-8"),
                ["MGRIT", "serial ms", "nn serial ms", "iterations", "max|u_N - serial|"],
                "Forward propagation, N {N}, width {width}, cfactor {cf}, {levels} levels, "
                "nrelax {nrelax}; ms: min (median) of {repeats}; serial: plain NumPy loop; "
                "nn serial: braidpy.nn.ResNet.forward"),
    "gradient": (gradient, serial_gradient, lambda nn: nn[0].loss_and_gradient(*nn[1:]),
                 gradient_check, ("one-shot (2, 2)", "exact, rel. 1e-8"),
                 ["gradient", "serial fwd+bwd ms", "nn serial ms", "iterations p/a",
                  "rel. grad err"],
                 "One gradient (forward + adjoint), N {N}, width {width}; serial: plain NumPy "
                 "forward + backpropagation loop; nn serial: "
                 "braidpy.nn.ResNet.loss_and_gradient"),
}


def versus_serial(args, table):
    solve, serial, nn_serial, check, labels, heads, title = TABLES[table]
    rows = []
    for batch in args.batches:
        w = ResNetWeights(args.ntime, width=args.width, batch=batch)
        nn = nn_resnet(w)
        s_t, _ = timed(lambda: serial(w), args.repeats)
        n_t, _ = timed(lambda: nn_serial(nn), args.repeats)
        for app in args.apps:
            for mode, label in zip("ab", labels):
                u_t, ru = timed(lambda: solve(args, w, mode, False, app, nn), args.repeats)
                b_t, rb = timed(lambda: solve(args, w, mode, True, app, nn), args.repeats)
                its, err, same = check(w, nn, app, ru, rb)
                rows.append([batch, app, label, ms(s_t), ms(n_t) if app != "lean" else "-",
                             ms(u_t), ms(b_t), ratio(s_t, b_t), ratio(min(u_t), min(b_t), 1),
                             its, err, "yes" if same else "NO"])
    print_table(["batch", "app", heads[0], heads[1], heads[2], "unbatched ms", "batched ms",
                 "serial/batched", "unbatched/batched", heads[3], heads[4],
                 "batched == unbatched"], rows,
                title=title.format(N=args.ntime, width=args.width, cf=args.cfactor,
                                   levels=args.max_levels, nrelax=args.nrelax,
                                   repeats=args.repeats))


def sweep_table(args):
    rows = []
    for n in args.sweep:
        w = ResNetWeights(n, width=args.width, batch=1)
        s_t, _ = timed(lambda: serial_forward(w), args.repeats)
        b_t, r = timed(lambda: forward(args, w, "a", True), args.repeats)
        rows.append([n, ms(min(s_t)), ms(min(b_t)), ratio(min(s_t), min(b_t)),
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
    rows = []
    for batched in (False, True):
        t, r = timed(lambda: braidpy.solve(_Noop(), 0.0, 1.0, args.ntime, access_level=0,
                                           batch=batched, **mgrit_opts(args, "a")), args.repeats)
        states = r.counts["step"] + r.counts["step_batch_items"]
        calls = r.counts["step"] + r.counts["step_batch"]
        rows.append(["batched" if batched else "unbatched", ms(t), calls, states,
                     f"{min(t) / calls * 1e6:.2f}", f"{min(t) / states * 1e6:.3f}"])
    print_table(["path", "solve ms", "step + step_batch calls", "states stepped",
                 "us per call", "us per state step"], rows,
                title=f"braidpy's own cost with a do-nothing kernel, N {args.ntime}, 2 "
                      f"iterations (everything outside the user's kernel, incl. Python call "
                      f"costs)")


def main(argv=None):
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
    args = p.parse_args(argv)
    if args.quick:
        args.ntime, args.repeats, args.sweep, args.cfactor = 512, 1, [256, 512], 16
    for name in args.tables:
        if name in TABLES:
            versus_serial(args, name)
        else:
            dict(overhead=overhead_table, sweep=sweep_table)[name](args)


if __name__ == "__main__":
    main()
