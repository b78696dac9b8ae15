"""GPU: MGRIT vs the serial layer loop for a deep narrow ResNet, on CuPy if it can.

Network: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, T = 2, its own
weights per layer (a fixed deterministic pattern, no seed), batch 1 and 32.

Forward: a loop over the layers on CuPy ("serial") against
braidpy.solve with cfactor 64, 2 levels, F-relaxation, batched (step_stacked: one
batched matmul per step position), (a) 2 iterations (abs_tol 0: the forward of one-shot
training) and (b) to a 1e-8 relative residual drop.

Gradient: braidpy.nn.ResNet (dense, tanh, same width, depth, T; a dense opening and a
softmax classifier over 4 classes) on the device: the serial forward + backward
(``ResNet.loss_and_gradient``) against the one-shot (2, 2) gradient of
braidpy.GradientSolver (cfactor 64, 2 levels, F-relaxation); and PyTorch's
autograd through the same residual loop on the same GPU, when torch sees it (the
reference a user would pick instead).

Timings are min over repeats, synchronized, wall clock. Where CuPy or a GPU is missing
it says so and runs the same comparisons with NumPy, so that the script itself is
exercised everywhere.

Conv (--conv): the k-th step of m intervals of a conv ResNet (MNIST size, 8 channels,
batch 32, 3x3, tanh; float64 and float32), four ways: cuDNN as ONE grouped convolution
over the intervals (the "cudnn" backend's batched step), cuDNN interval by interval on
one stream, cuDNN interval by interval with the intervals split over S CUDA streams (one
per block of layers, seed paper 000), and the array-API im2col path; and the adjoint and
parameter-gradient calls, grouped cuDNN vs im2col vs braidpy's direct kernels
("cuda-direct": a step of every interval in one kernel). When torch sees the GPU, PyTorch's
references: its grouped conv2d with and without TF32, its whole step from braidpy's
layout, and its backward data + filter. Then wider layers
(--conv-channels, default 32 and 64): the same calls, cuDNN grouped vs cuda-direct only,
with the family of direct kernels the shape takes (braidpy.nn.conv_direct.kernel_family).
Each table names the cuDNN algorithms of its grouped step (forward, backward data,
backward filter) and whether they were measured: --cudnn-benchmark sets
BRAIDPY_CUDNN_BENCHMARK=1 (chosen by measurement at first use, not by cuDNN's heuristics).
Needs CuPy, a GPU and cuDNN; otherwise it says which is missing.

Conv network (--conv-net): a conv ResNet (28x28 input, 8 channels, N = 1024 layers,
batch 32 and 256, tanh, float64) on the device: serial forward + backward against the
one-shot (2, 2) gradient (2 levels, each --conv-cfactors), with the cuda-direct, cuDNN
and array-API im2col backends, and PyTorch's autograd through the same conv residual
loop.

Validation (--validation): ``braidpy.train.Trainer`` with the quick
preset's network and settings for scikit-learn's digits (8 conv layers of 4 channels, 8x8)
and digits28 (16 layers of 8 channels, 28x28) on ``device="cuda"``, serial and one-shot:
seconds per training step (median, the first step left out) against seconds per
validation (median of all but the first; the first, which compiles CuPy's kernels for
the classifier's argmax and count, printed apart) and per ``ResNet.evaluate`` of the
validation set, as a ratio with the target: a validation costs at most 10 training steps.
Needs CuPy and a GPU; otherwise it says so and skips (exit 0).

Fused dense steps (--dense-fused): per call, a dense step's kernels on
CuPy (Peaks' shape: width 8, batch 5000, smooth_relu, float64 and float32; single and
stacked over 16 intervals): braidpy._cuda's fused kernels (cuBLAS's product, then one
kernel) against the array-API arithmetic (about eleven launches), forward and
adjoint + gradient. Needs CuPy, a GPU and braidpy._cuda; otherwise it says so and skips.

Run: python benchmarks/bench_gpu.py [--layers N] [--batches 1 32] [--repeats R]
     [--conv [--intervals M] [--conv-channels C ...] [--cudnn-benchmark]]
     [--conv-net [--conv-layers N] [--conv-batches B ...]]
     [--validation [--validation-steps S] [--validate-every V]] [--dense-fused]
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
import warnings

import numpy as np

import braidpy

WIDTH, BATCH, TSTOP, CFACTOR = 8, 32, 2.0, 64


def array_module():
    """(xp, description): CuPy with a working device, else NumPy and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp = importlib.import_module("cupy")
            if cp.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
            float(cp.arange(2.0).sum())
        return cp, f"CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name']}"
    except Exception as exc:  # noqa: BLE001 - any failure means "no GPU here"
        return np, f"no GPU found ({type(exc).__name__}: {exc}); running the NumPy path"


def weights(xp, n):
    k = np.arange(n * WIDTH * WIDTH, dtype=np.float64).reshape(n, WIDTH, WIDTH)
    K = 0.5 * np.sin(0.37 * k) / np.sqrt(WIDTH)
    b = 0.1 * np.cos(0.11 * np.arange(n * WIDTH)).reshape(n, WIDTH)
    return xp.asarray(K), xp.asarray(b)


class ResNet(braidpy.App):
    def __init__(self, xp, K, b, u0):
        self.xp, self.K, self.b, self.u0 = xp, K, b, u0

    def init(self, t):
        return self.u0.copy() if t == self.tstart else self.xp.zeros_like(self.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        u += (t1 - t0) * self.xp.tanh(u @ self.K[n].T + self.b[n])

    def step_stacked(self, U, t0s, t1s, status):
        s = status.fine_slice
        U += self._steps(t1s - t0s) * self.xp.tanh(U @ self.K[s].transpose(0, 2, 1)
                                                   + self.b[s][:, None, :])

    def _steps(self, hs):
        """hs as an (m, 1, 1) device array, copied to the device once per distinct set."""
        cache = self.__dict__.setdefault("_hs", {})
        key = hs.tobytes()
        if key not in cache:
            cache[key] = self.xp.asarray(hs).reshape(-1, 1, 1)
        return cache[key]


def sync(xp):
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def serial(xp, K, b, u0, n):
    u, h = u0.copy(), TSTOP / n
    for k in range(n):
        u += h * xp.tanh(u @ K[k].T + b[k])
    sync(xp)
    return u


def mgrit(xp, K, b, u0, n, levels=2, cfactor=CFACTOR, **stop):
    """braidpy.solve of the ResNet; ``stop``: max_iter 2 and abs_tol 0 unless given."""
    stop = {"max_iter": 2, "abs_tol": 0.0, **stop}
    r = braidpy.solve(ResNet(xp, K, b, u0), 0.0, TSTOP, n, max_levels=levels, cfactor=cfactor,
                      nrelax=0, access_level=0, **stop)
    sync(xp)
    return r


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def conv_steps(xp, args):
    """Grouped vs per-interval vs streams per layer block vs im2col (see the docstring)."""
    from braidpy.nn import ConvLayer
    from braidpy.nn.conv_backends import BENCHMARK_ENV, STREAMS_ENV, cudnn_unavailable

    why = cudnn_unavailable() if xp is not np else "no GPU"
    if why is not None:
        print(f"conv: the cuDNN comparison needs CuPy, a GPU and cuDNN: {why}")
        return
    m, C, H = args.intervals, 8, 28
    os.environ[STREAMS_ENV] = str(args.streams)
    if args.cudnn_benchmark:
        os.environ[BENCHMARK_ENV] = "1"
    cudnn, im2col = ConvLayer(C, 3, "tanh", backend="cudnn"), ConvLayer(C, 3, "tanh",
                                                                         backend="array-api")
    streams = ConvLayer(C, 3, "tanh", backend="cudnn-streams")
    direct = ConvLayer(C, 3, "tanh", backend="cuda-direct")
    torch = torch_cuda()
    for dtype in ("float64", "float32"):
        rng = np.random.default_rng(20261125)
        U = xp.asarray(rng.standard_normal((m, BATCH, C, H, H)), dtype=dtype)
        Wt = xp.asarray(rng.standard_normal((m, BATCH, C, H, H)), dtype=dtype)
        Ks = xp.asarray(rng.standard_normal((m, C, C, 3, 3)) / 9, dtype=dtype)
        bs = xp.asarray(0.1 * rng.standard_normal((m, C)), dtype=dtype)
        hs = xp.asarray(np.full(m, 1.0 / m), dtype=dtype)

        def per_interval():
            return [cudnn.forward(U[i], Ks[i], bs[i], hs[i]) for i in range(m)]

        cases = {"forward, cuDNN grouped (1 call)": lambda: cudnn.forward_batched(U, Ks, bs, hs),
                 "forward, cuDNN per interval": per_interval,
                 f"forward, cuDNN per interval, {args.streams} streams":
                     lambda: streams.forward_batched(U, Ks, bs, hs),
                 "forward, array-API im2col": lambda: im2col.forward_batched(U, Ks, bs, hs),
                 "adjoint, cuDNN grouped": lambda: cudnn.adjoint_batched(Wt, U, Ks, bs, hs),
                 "adjoint, array-API im2col": lambda: im2col.adjoint_batched(Wt, U, Ks, bs, hs),
                 "gradient, cuDNN grouped": lambda: cudnn.gradient_batched(Wt, U, Ks, bs, hs),
                 "gradient, array-API im2col":
                     lambda: im2col.gradient_batched(Wt, U, Ks, bs, hs),
                 "forward, cuda-direct (1 kernel)": lambda: direct.forward_batched(U, Ks, bs, hs),
                 "adjoint, cuda-direct": lambda: direct.adjoint_batched(Wt, U, Ks, bs, hs),
                 "gradient, cuda-direct": lambda: direct.gradient_batched(Wt, U, Ks, bs, hs)}
        if torch is not None:
            cases.update(_torch_conv_cases(torch, U, Wt, Ks, bs, hs, m, C, H))

        def timed(fn):
            fn()  # plans, algorithms and pools warmed
            sync(xp)
            return best(lambda: (fn(), sync(xp)), args.repeats)

        times = {name: timed(fn) for name, fn in cases.items()}
        if torch is not None:
            torch.backends.cudnn.allow_tf32 = True  # PyTorch's default again
        base = times["forward, cuDNN grouped (1 call)"]
        print(f"conv calls over {m} intervals, batch {BATCH}, {C} channels, {H}x{H}, 3x3, "
              f"tanh, {dtype}; {_grouped_plan(m, C, H, dtype)}:")
        for name, t in times.items():
            print(f"  {name:50s} {t * 1e3:9.3f} ms  ({t / base:.2f}x grouped forward)",
                  flush=True)
    for C in args.conv_channels:
        _wide_conv_rows(xp, args, m, C, H)


def _wide_conv_rows(xp, args, m, C, H):
    """--conv's wider layers: the same calls as the 8-channel rows
    (m intervals, batch BATCH, 3x3, tanh) with C channels, cuDNN grouped against
    cuda-direct only (per interval, streams and im2col add little here and im2col's
    columns grow with C), and the direct kernels' family for the shape."""
    from braidpy.nn import ConvLayer
    from braidpy.nn.conv_direct import kernel_family

    cudnn = ConvLayer(C, 3, "tanh", backend="cudnn")
    direct = ConvLayer(C, 3, "tanh", backend="cuda-direct")
    for dtype in ("float64", "float32"):
        rng = np.random.default_rng(20261201)
        U, Wt = (xp.asarray(rng.standard_normal((m, BATCH, C, H, H)), dtype=dtype)
                 for _ in range(2))
        Ks = xp.asarray(rng.standard_normal((m, C, C, 3, 3)) / (3 * C), dtype=dtype)
        bs = xp.asarray(0.1 * rng.standard_normal((m, C)), dtype=dtype)
        hs = xp.asarray(np.full(m, 1.0 / m), dtype=dtype)
        times = _wide_conv_times(xp, args, {"cuDNN grouped": cudnn, "cuda-direct": direct},
                                 Wt, U, Ks, bs, hs)
        base = times["forward, cuDNN grouped"]
        family = kernel_family(U.shape, Ks.shape, dtype)
        print(f"conv calls over {m} intervals, batch {BATCH}, {C} channels, {H}x{H}, 3x3, "
              f"tanh, {dtype} (cuda-direct: the {family} kernels); "
              f"{_grouped_plan(m, C, H, dtype)}:")
        for name, t in times.items():
            print(f"  {name:50s} {t * 1e3:9.3f} ms  ({t / base:.2f}x grouped forward)",
                  flush=True)


def _grouped_plan(m, C, H, dtype):
    """The cuDNN algorithms of the grouped step over m intervals (run already, so its
    plan is cached, measured under BRAIDPY_CUDNN_BENCHMARK=1), in words."""
    from braidpy.nn.conv_backends import cudnn_plan

    plan = cudnn_plan((BATCH, m * C, H, H), m * C, 3, m, dtype)
    how = "measured" if all(plan["measured"]) else (
        "heuristic" if not any(plan["measured"]) else f"measured {plan['measured']}")
    return f"cuDNN grouped algorithms {plan['algorithms']} ({how})"


def _wide_conv_times(xp, args, layers, Wt, U, Ks, bs, hs):
    """Seconds per forward, adjoint and gradient call of each named layer (warmed)."""
    def timed(fn):
        fn()  # kernels, plans and pools warmed
        sync(xp)
        return best(lambda: (fn(), sync(xp)), args.repeats)

    def calls(layer):
        return {"forward": lambda: layer.forward_batched(U, Ks, bs, hs),
                "adjoint": lambda: layer.adjoint_batched(Wt, U, Ks, bs, hs),
                "gradient": lambda: layer.gradient_batched(Wt, U, Ks, bs, hs)}

    return {f"{call}, {name}": timed(fn)
            for name, layer in layers.items() for call, fn in calls(layer).items()}


def _torch_conv_cases(torch, U, Wt, Ks, bs, hs, m, C, H, device="cuda"):
    """PyTorch's calls for the same shapes, as references (the conv target: "within
    1.5x of PyTorch"): the grouped conv alone with TF32 allowed (PyTorch's default for cuDNN
    convolutions) and not (braidpy's cuDNN calls use FMA math: like for like); the whole
    step u + h tanh(conv(u) + b) from braidpy's (m, batch, C, H, W) layout and back; and
    the gradient call's two convolutions (backward data and backward filter)."""
    F = torch.nn.functional
    tU = torch.as_tensor(U.transpose(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H),
                         device=device)
    tW = torch.as_tensor(Wt.transpose(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H),
                         device=device)
    tK = torch.as_tensor(Ks.reshape(m * C, C, 3, 3), device=device)
    tb = torch.as_tensor(bs.reshape(m * C), device=device)
    th = torch.as_tensor(hs, device=device).reshape(m, 1, 1, 1, 1)
    tU5 = torch.as_tensor(U, device=device)

    def conv(tf32):
        def run():
            torch.backends.cudnn.allow_tf32 = tf32
            return F.conv2d(tU, tK, padding=1, groups=m)
        return run

    def step():
        torch.backends.cudnn.allow_tf32 = False
        x = tU5.permute(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H)
        z = torch.tanh(F.conv2d(x, tK, tb, padding=1, groups=m))
        return tU5 + th * z.reshape(BATCH, m, C, H, H).permute(1, 0, 2, 3, 4)

    def gradient_convs():
        torch.backends.cudnn.allow_tf32 = False
        dx = torch.nn.grad.conv2d_input(tU.shape, tK, tW, padding=1, groups=m)
        dk = torch.nn.grad.conv2d_weight(tU, tK.shape, tW, padding=1, groups=m)
        return dx, dk

    return {"forward, PyTorch grouped conv2d (conv only, TF32 allowed)": conv(True),
            "forward, PyTorch grouped conv2d (conv only, no TF32)": conv(False),
            "forward, PyTorch whole step, braidpy's layout (no TF32)": step,
            "backward data + filter, PyTorch grouped (no TF32)": gradient_convs}


def conv_network(xp, args):
    """A conv ResNet (MNIST size): serial fwd+bwd vs one-shot (2,2), per conv backend."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    n, nclasses, C = args.conv_layers, 10, 8
    device = None if xp is np else "cuda"
    backends = args.conv_backends if xp is not np else ["numpy"]
    for batch in args.conv_batches:
        rng = np.random.default_rng(9)
        X = xp.asarray(rng.standard_normal((batch, 1, 28, 28)))
        Cl = xp.asarray(np.eye(nclasses)[rng.integers(0, nclasses, batch)])
        line = f"conv ResNet N={n}, {C} channels, 28x28, batch {batch}, float64:"
        for backend in backends:
            net = Net((1, 28, 28), nclasses, width=C, nlayers=n, tstop=TSTOP, activation="tanh",
                      device=device, backend=None if backend == "numpy" else backend)
            params = net.init_params(seed=7)
            app = ResNetApp(net, params, X, Cl)

            def serial_grad():
                net.loss_and_gradient(params, X, Cl)
                sync(xp)

            def oneshot_grad(cf):
                GradientSolver(app, 0.0, net.tstop, n, oneshot=(2, 2),
                               primal=dict(max_levels=2, cfactor=cf, nrelax=0)).evaluate()
                sync(xp)

            serial_grad()
            t_serial = best(serial_grad, args.repeats)
            line += f"\n  {backend}: serial fwd+bwd {t_serial * 1e3:.1f} ms"
            for cf in args.conv_cfactors:
                oneshot_grad(cf)
                t_oneshot = best(lambda: oneshot_grad(cf), args.repeats)
                line += (f"; one-shot (2,2) cf {cf} {t_oneshot * 1e3:.1f} ms "
                         f"({t_serial / t_oneshot:.2f}x serial)")
        torch = torch_cuda() if xp is not np else None
        if torch is not None:
            xp.get_default_memory_pool().free_all_blocks()  # CuPy's cache, for PyTorch
            t_torch = best(lambda: _torch_conv_fwd_bwd(torch, n, C, batch), args.repeats)
            line += f"\n  PyTorch serial fwd+bwd {t_torch * 1e3:.1f} ms"
        print(line, flush=True)


def _torch_conv_fwd_bwd(torch, n, C, batch):
    """PyTorch autograd through u <- u + h tanh(conv(u, K_n) + b_n), float64, on the GPU."""
    _torch_residual_fwd_bwd(
        torch, ("conv", n, batch), (n, C, C, 3, 3), 3 * C ** 0.5, (batch, C, 28, 28),
        lambda u, K, b: torch.nn.functional.conv2d(u, K, b, padding=1))


#: --validation's target: one validation costs at most this many training steps.
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


def torch_cuda():
    """torch, if it imports and sees a GPU (else None and a printed reason)."""
    try:
        torch = importlib.import_module("torch")
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        return torch
    except Exception as exc:  # noqa: BLE001 - the reference is optional
        print(f"  (no PyTorch GPU reference: {type(exc).__name__}: {exc})")
        return None


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


_TORCH_NETS = {}


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


def _torch_residual_fwd_bwd(torch, key, kshape, scale, ushape, layer):
    """u <- u + h tanh(layer(u, K_n, b_n)) over kshape[0] layers, then backward of
    |u|^2 (weights and input made once per key, fixed seed)."""
    n = kshape[0]
    if key not in _TORCH_NETS:
        gen = torch.Generator().manual_seed(7)
        K = (torch.randn(kshape, generator=gen, dtype=torch.float64) / scale).cuda()
        b = torch.zeros(n, kshape[1], dtype=torch.float64, device="cuda", requires_grad=True)
        u0 = torch.randn(ushape, generator=gen, dtype=torch.float64).cuda()
        _TORCH_NETS[key] = (K.requires_grad_(), b, u0)
    K, b, u0 = _TORCH_NETS[key]
    h = TSTOP / n
    K.grad = b.grad = None
    u = u0
    for k in range(n):
        u = u + h * torch.tanh(layer(u, K[k], b[k]))
    (u * u).sum().backward()
    torch.cuda.synchronize()


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
    hierarchies = [tuple(int(v) for v in h.split(":")) for h in args.hierarchies]
    for batch in args.batches:
        forward(xp, args.layers, batch, args.repeats, hierarchies)
        if not args.forward_only:
            gradient(xp, args.layers, batch, args.repeats)


if __name__ == "__main__":
    main()
