"""bench_gpu.py --validation and --dense-fused: seconds per validation against per training
step on the GPU, and the fused dense kernels against the array-API arithmetic per call."""

from __future__ import annotations

import numpy as np

from _gpu import TSTOP, WIDTH, best, sync, weights

VALIDATION_TARGET = 10.0


def _digits_source(source):
    """(train, validation, words) of scikit-learn's digits (``source`` 'digits' or
    'digits28'), or random images of their shape where scikit-learn is missing."""
    from braidpy import data

    try:
        sets = (data.digits if source == "digits" else data.digits28)(0.2, 1)
        return sets["train"], sets["validation"], f"scikit-learn's {source}"
    except ImportError as exc:
        side = 8 if source == "digits" else 28
        rng = np.random.default_rng(20261217)
        X = rng.uniform(0, 1, (1797, 1, side, side))
        C = np.eye(10)[rng.integers(0, 10, 1797)]
        return ((X[359:], C[359:]), (X[:359], C[:359]),
                f"random {side}x{side} images ({exc})")


def validation_rows(xp, where, args, device="cuda"):
    """Seconds per training step against seconds per validation, on the GPU (see the
    module docstring); skips, saying why, without one. (``device`` "cpu": the same rows
    on the host, for the test that keeps this code running.)"""
    if xp is np and device == "cuda":
        print(f"validation: skipped, it needs CuPy and a GPU: {where.split('; ')[0]}")
        return
    from braidpy.nn import ResNet as Net
    from braidpy.train import TrainConfig, Trainer
    from braidpy.train.presets import NETWORK_KEYS, preset

    for source in args.validation_sources:
        settings = preset("quick", source)
        train, val, what = _digits_source(source)
        for mode in args.validation_modes:
            net = Net(train[0].shape[1:], 10, device=device,
                      **{key: settings[key] for key in NETWORK_KEYS})
            config = TrainConfig(mode=mode, optimizer=settings["optimizer"], lr=settings["lr"],
                                 batch_size=settings["batch_size"], shuffle=True,
                                 iterations=args.validation_steps,
                                 validate_every=args.validate_every)
            trainer = Trainer(net, train, val, config)
            trainer.run()
            history = trainer.history
            steps = [r["seconds"] - r.get("validation_seconds", 0.0) for r in history[1:]]
            checks = [r["validation_seconds"] for r in history if "validation_seconds" in r]
            step = float(np.median(steps))
            check = float(np.median(checks[1:] or checks))
            Xv, Cv = (net.placement.from_host(a) for a in val)

            def evaluate():
                net.evaluate(trainer.params, Xv, Cv)  # two scalars back: synchronized

            evaluate()
            t_eval = best(evaluate, args.repeats)
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
    """Seconds per call of the fused dense kernels against the array-API ones (module
    docstring); skips, saying why, without CuPy, a GPU or braidpy._cuda's kernels."""
    from braidpy.nn import dense

    why = dense.fused_unavailable() if xp is not np else where.split("; ")[0]
    if why is not None:
        print(f"dense-fused: skipped, it needs CuPy, a GPU and braidpy._cuda: {why}")
        return
    act, m, batch = "smooth_relu", 16, 5000
    print(f"dense step per call ({act}, width {WIDTH}, batch {batch}; stacked: {m} intervals)")
    print(f"{'dtype':8} {'call':28} {'fused':>10} {'array-api':>10} {'ratio':>6}")
    for dtype in (np.float64, np.float32):
        K, b = weights(np, m)
        W, U = (np.sin(np.arange(m * batch * WIDTH) * c).reshape(m, batch, WIDTH)
                for c in (0.37, 0.71))
        hs = np.full(m, TSTOP / 64)
        W, U, K, b, hs = (xp.asarray(a, dtype=dtype) for a in (W, U, K, b, hs))
        h = float(hs[0])
        cases = [
            ("forward", lambda f: f[0](U[0], K[0], b[0], h, act)),
            ("adjoint + gradient", lambda f: (f[1](W[0], U[0], K[0], b[0], h, act),
                                              f[2](W[0], U[0], K[0], b[0], h, act))),
            ("forward stacked", lambda f: f[3](U, K, b, hs, act)),
            ("adjoint + gradient stacked", lambda f: (f[4](W, U, K, b, hs, act),
                                                      f[5](W, U, K, b, hs, act))),
        ]
        fused, api = dense.GPU_STEPS, (dense._api_forward, dense._api_adjoint,
                                       dense._api_gradient, dense._api_forward_batched,
                                       dense._api_adjoint_batched, dense._api_gradient_batched)
        for name, run in cases:
            def per_call(steps):
                def loop():
                    for _ in range(calls):
                        run(steps)
                    sync(xp)
                loop()  # compiles CuPy's kernels, warms the pool
                return best(loop, repeats) / calls
            tf, ta = per_call(fused), per_call(api)
            print(f"{np.dtype(dtype).name:8} {name:28} {tf * 1e6:8.1f}us {ta * 1e6:8.1f}us "
                  f"{ta / tf:6.2f}")
