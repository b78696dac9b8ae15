"""Does MGRIT beat the serial layer loop of a deep narrow ResNet on a GPU, forward and for
one gradient? And, by option, what do the GPU's conv, validation and fused dense calls cost?

Default: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, batch 1 and 32, on CuPy
(without a GPU: NumPy). Forward: the serial loop vs braidpy.solve per --hierarchies, 2
iterations and to a 1e-8 relative drop, split by callback. Gradient: loss_and_gradient vs
one-shot (2, 2), new and reused (split by part), and PyTorch's autograd. Min over
--repeats, synchronized. Options: --conv, --conv-net (_gpu.py); --validation (target <= 10
training steps); --dense-fused; --overheads: where small-state runs spend host time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import braidpy

from _gpu import (BATCH, CFACTOR, TSTOP, WIDTH, ResNet, array_module, best, conv_network,
                  conv_pieces, conv_steps, gradient_times, mgrit, serial, sync, timed, torch_cuda,
                  torch_fwd_bwd, weights)


def forward(xp, n, batch, repeats, hierarchies):
    """Serial loop vs MGRIT (2 iterations; to a 1e-8 relative drop) per hierarchy."""
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
    """2 MGRIT iterations' host time in the step callbacks (unsynchronized) and the rest."""
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
    """A reused one-shot gradient's parts (primal, objective, adjoint), synchronized."""
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


VALIDATION_TARGET = 10.0


def digits_source(source):
    """(train, validation, words) of scikit-learn's digits or digits28, else random images."""
    from braidpy import data

    try:
        sets = (data.digits if source == "digits" else data.digits28)(0.2, 1)
        return sets["train"], sets["validation"], f"scikit-learn's {source}"
    except ImportError as exc:
        side = 8 if source == "digits" else 28
        rng = np.random.default_rng(20261217)
        X = rng.uniform(0, 1, (1797, 1, side, side))
        C = np.eye(10)[rng.integers(0, 10, 1797)]
        return (X[359:], C[359:]), (X[:359], C[:359]), f"random {side}x{side} images ({exc})"


def validation_rows(xp, where, args, device="cuda"):
    """Trainer (quick presets): seconds per training step vs per validation and evaluate."""
    if xp is np and device == "cuda":
        print(f"validation: skipped, it needs CuPy and a GPU: {where.split('; ')[0]}")
        return
    from braidpy.nn import ResNet as Net
    from braidpy.train import TrainConfig, Trainer
    from braidpy.train.presets import NETWORK_KEYS, preset

    for source in args.validation_sources:
        settings = preset("quick", source)
        train, val, what = digits_source(source)
        for mode in args.validation_modes:
            net = Net(train[0].shape[1:], 10, device=device,
                      **{key: settings[key] for key in NETWORK_KEYS})
            config = TrainConfig(mode=mode, optimizer=settings["optimizer"], lr=settings["lr"],
                                 batch_size=settings["batch_size"], shuffle=True,
                                 iterations=args.validation_steps,
                                 validate_every=args.validate_every)
            trainer = Trainer(net, train, val, config)
            trainer.run()
            steps = [r["seconds"] - r.get("validation_seconds", 0.0) for r in trainer.history[1:]]
            checks = [r["validation_seconds"] for r in trainer.history if "validation_seconds" in r]
            step, check = float(np.median(steps)), float(np.median(checks[1:] or checks))
            Xv, Cv = (net.placement.from_host(a) for a in val)
            # ResNet.evaluate returns two scalars to the host: synchronized
            t_eval = timed(np, lambda: net.evaluate(trainer.params, Xv, Cv), args.repeats)
            ratio = check / step
            print(f"validation, {what}, {net.describe()}, mode {trainer.mode}, batches of "
                  f"{settings['batch_size']}: training step {step * 1e3:.1f} ms (median of "
                  f"{len(steps)}); validation of {val[0].shape[0]} samples in batches of "
                  f"{net.evaluation_batch()} {check * 1e3:.1f} ms (median of "
                  f"{max(len(checks) - 1, 1)}; the first {checks[0] * 1e3:.1f} ms = "
                  f"{checks[0] / step:.1f} steps), ResNet.evaluate {t_eval * 1e3:.1f} ms; "
                  f"validation / training step = {ratio:.1f} (target <= "
                  f"{VALIDATION_TARGET:g}: {'met' if ratio <= VALIDATION_TARGET else 'MISSED'})",
                  flush=True)


def dense_fused_rows(xp, where, repeats, calls=50):
    """Peaks' dense step per call: braidpy._cuda's fused kernels vs the array-API's."""
    from braidpy.nn import dense

    why = dense.fused_unavailable() if xp is not np else where.split("; ")[0]
    if why is not None:
        print(f"dense-fused: skipped, it needs CuPy, a GPU and braidpy._cuda: {why}")
        return
    act, m, batch = "smooth_relu", 16, 5000
    print(f"dense step per call ({act}, width {WIDTH}, batch {batch}; stacked: {m} intervals)")
    print(f"{'dtype':8} {'call':28} {'fused':>10} {'array-api':>10} {'ratio':>6}")
    api = tuple(getattr(dense, f"_api_{call}{kind}") for kind in ("", "_batched")
                for call in ("forward", "adjoint", "gradient"))
    for dtype in (np.float64, np.float32):
        K, b = weights(np, m)
        W, U = (np.sin(np.arange(m * batch * WIDTH) * c).reshape(m, batch, WIDTH)
                for c in (0.37, 0.71))
        hs = np.full(m, TSTOP / 64)
        W, U, K, b, hs = (xp.asarray(a, dtype=dtype) for a in (W, U, K, b, hs))
        h = float(hs[0])
        cases = {"forward": lambda f: f[0](U[0], K[0], b[0], h, act),
                 "adjoint + gradient": lambda f: (f[1](W[0], U[0], K[0], b[0], h, act),
                                                  f[2](W[0], U[0], K[0], b[0], h, act)),
                 "forward stacked": lambda f: f[3](U, K, b, hs, act),
                 "adjoint + gradient stacked": lambda f: (f[4](W, U, K, b, hs, act),
                                                          f[5](W, U, K, b, hs, act))}
        for name, run in cases.items():
            tf, ta = (timed(xp, lambda: run(steps), repeats, calls)
                      for steps in (dense.GPU_STEPS, api))
            print(f"{np.dtype(dtype).name:8} {name:28} {tf * 1e6:8.1f}us {ta * 1e6:8.1f}us "
                  f"{ta / tf:6.2f}")


class NoopSteps(ResNet):
    """The ResNet with steps that do nothing: only the core's work is left."""

    def step(self, u, t0, t1, status):
        return None

    def step_stacked(self, U, t0s, t1s, status):
        return None

    def call(self):  # (--overheads: a no-op Python method)
        return None


def overheads(xp, calls, n=4096, m=64):
    """Host costs per call; the core's vector operations; dense calls vs inline; conv pieces."""
    from braidpy.nn import DenseLayer

    def us(fn):
        return f"{timed(xp, fn, 3, calls, warm=False) * 1e6:8.2f}"

    if xp is not np:
        from braidpy.backends.cupy import new_array

        x, y = xp.ones((1, WIDTH)), xp.ones((1, WIDTH))
        rows = {"CuPy y += x (8 numbers, one launch)": lambda: y.__iadd__(x),
                "x.__cuda_array_interface__": lambda: x.__cuda_array_interface__,
                "cupy.empty((1, 8))": lambda: xp.empty((1, WIDTH)),
                "braidpy.backends.cupy.new_array": lambda: new_array(x, (1, WIDTH)),
                "no-op Python method call": NoopSteps(xp, x, x, x).call}
        print("per-call host cost, microseconds:")
        for name, fn in rows.items():
            print(f"  {name:45s} {us(fn)}", flush=True)
    print(f"the core's vector operations, 2 MGRIT iterations, N={n}, cf {CFACTOR}, no-op steps:")
    for name, mod in (("NumPy", np), ("CuPy", xp)) if xp is not np else (("NumPy", np),):
        K, u0, runs = mod.zeros((1, WIDTH, WIDTH)), mod.ones((1, WIDTH)), []
        for _ in range(3):
            start = time.perf_counter()
            r = mgrit(mod, K, K[0], u0, n, app=NoopSteps, timings=True)
            runs.append((time.perf_counter() - start, r))
        wall, r = min(runs, key=lambda run: run[0])
        c, t = r.counts, r.timings
        cb = sum(v for k, v in t.items() if k not in ("total", "communication"))
        ops = c["clone"] + c["sum"] + c["norm"]
        print(f"  {name}: {wall * 1e3:.2f} ms, of which callbacks {cb * 1e3:.2f} ms; "
              f"{ops} operations (clone {c['clone']}, sum {c['sum']}, norm {c['norm']}) "
              f"+ {c['step'] + c['step_batch']} step calls: "
              f"{(wall - cb) / ops * 1e6:.2f} us per operation", flush=True)
    rng = np.random.default_rng(2)
    layer, smooth = DenseLayer(WIDTH, "tanh"), DenseLayer(WIDTH, "smooth_relu")
    U, W = (xp.asarray(rng.standard_normal((m, 1, WIDTH))) for _ in range(2))
    Ks = xp.asarray(rng.standard_normal((m, WIDTH, WIDTH)) / WIDTH)
    bs = xp.asarray(rng.standard_normal((m, WIDTH)))
    hs = xp.asarray(np.full(m, 1 / 2048))
    u, K, b, h3 = U[0], Ks[0], bs[0], xp.reshape(hs, (m, 1, 1))
    rows = {"DenseLayer.forward, one state": lambda: layer.forward(u, K, b, 0.01),
            "the same, smooth_relu (calibrate's default)": lambda: smooth.forward(u, K, b, 0.01),
            "inline u + h tanh(u K^T + b), one state": lambda: u + 0.01 * xp.tanh(u @ K.T + b),
            f"DenseLayer.forward_batched, {m} states":
            lambda: layer.forward_batched(U, Ks, bs, hs),
            f"inline forward, {m} states":
            lambda: U + h3 * xp.tanh(U @ xp.swapaxes(Ks, 1, 2) + bs[:, None, :]),
            f"DenseLayer.adjoint_batched, {m} states":
            lambda: layer.adjoint_batched(W, U, Ks, bs, hs),
            f"DenseLayer.gradient_batched, {m} states":
            lambda: layer.gradient_batched(W, U, Ks, bs, hs)}
    print("braidpy.nn dense layer calls (width 8, tanh unless named), microseconds per call:")
    for name, fn in rows.items():
        fn()
        print(f"  {name:45s} {us(fn)}", flush=True)
    if xp is not np:
        conv_pieces(xp, calls)


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
