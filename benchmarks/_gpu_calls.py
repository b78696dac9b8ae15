"""bench_gpu.py --validation, --dense-fused and --overheads: seconds per validation against
per training step on the GPU; the fused dense kernels against the array-API arithmetic
per call; where the host time of small-state GPU runs goes."""

from __future__ import annotations

import time

import numpy as np

from _gpu import CFACTOR, TSTOP, WIDTH, ResNet, mgrit, per_call, timed, weights
from _gpu_conv import conv_pieces

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
    """Trainer on ``device`` (quick presets): seconds per training step against per
    validation (the first apart) and per ResNet.evaluate (device "cpu": for the test)."""
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
    """Peaks' dense step (width 8, batch 5000, smooth_relu, single and stacked over 16) per
    call: braidpy._cuda's fused kernels vs the array-API arithmetic."""
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
            tf, ta = (timed(xp, lambda: [run(steps) for _ in range(calls)], repeats) / calls
                      for steps in (dense.GPU_STEPS, api))
            print(f"{np.dtype(dtype).name:8} {name:28} {tf * 1e6:8.1f}us {ta * 1e6:8.1f}us "
                  f"{ta / tf:6.2f}")


def overheads(xp, calls):
    """Per-call host costs on CuPy; the core's vector operations; braidpy.nn's dense calls
    against the same operations inline; the grouped cuDNN conv step's pieces."""
    def us(fn):
        return f"{per_call(xp, fn, calls) * 1e6:8.2f}"

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
    core_ops(xp)
    print("braidpy.nn dense layer calls (width 8, tanh unless named), microseconds per call:")
    for name, fn in dense_layer_calls(xp).items():
        fn()
        print(f"  {name:45s} {us(fn)}", flush=True)
    if xp is not np:
        conv_pieces(xp, calls)


class NoopSteps(ResNet):
    """bench_gpu.py's ResNet with steps that do nothing: only the core's work is left."""

    def step(self, u, t0, t1, status):
        return None

    def step_stacked(self, U, t0s, t1s, status):
        return None

    def call(self):  # (--overheads: a no-op Python method)
        return None


def core_ops(xp, n=4096):
    """Per-operation cost of the core's clone/sum/norm: 2 iterations, no-op steps."""
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


def dense_layer_calls(xp, m=64):
    """braidpy.nn's dense layer calls and the same operations inline with xp."""
    from braidpy.nn import DenseLayer

    rng = np.random.default_rng(2)
    layer, smooth = DenseLayer(WIDTH, "tanh"), DenseLayer(WIDTH, "smooth_relu")
    U, W = (xp.asarray(rng.standard_normal((m, 1, WIDTH))) for _ in range(2))
    Ks = xp.asarray(rng.standard_normal((m, WIDTH, WIDTH)) / WIDTH)
    bs = xp.asarray(rng.standard_normal((m, WIDTH)))
    hs = xp.asarray(np.full(m, 1 / 2048))
    u, K, b, h3 = U[0], Ks[0], bs[0], xp.reshape(hs, (m, 1, 1))
    return {"DenseLayer.forward, one state": lambda: layer.forward(u, K, b, 0.01),
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
