"""bench_gpu.py --conv and --conv-net: a conv ResNet step's calls by backend (grouped cuDNN,
per interval, streams, im2col, cuda-direct, PyTorch), and its one-shot gradient vs serial."""

from __future__ import annotations

import os

import numpy as np

from _gpu import BATCH, TSTOP, _torch_residual_fwd_bwd, best, sync, torch_cuda


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
