"""The GPU benchmarks' shared pieces (array module, synchronization, PyTorch, timers, the
dense ResNet), and bench_gpu.py --conv (a conv step's batched calls by backend and PyTorch's),
--conv-net (a conv ResNet's one-shot gradient vs serial) and --overheads' conv pieces."""

from __future__ import annotations

import importlib
import os
import warnings

import numpy as np

import braidpy

from _harness import best

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


def sync(xp):
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def free(xp):
    """CuPy's cached blocks back to the device."""
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def torch_for(device):
    """(torch, None) where PyTorch imports and sees the device, else (None, why)."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # noqa: BLE001 - a broken install counts as missing
        return None, f"PyTorch is not installed ({type(exc).__name__}: {exc})"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() False)"
    return torch, None


def torch_cuda():
    """torch, if it imports and sees a GPU (else None and a printed reason)."""
    torch, why = torch_for("cuda")
    if why:
        print(f"  (no PyTorch GPU reference: {why})")
    return torch


def timed(xp, fn, repeats, calls=1, warm=True):
    """Min seconds per call of fn over ``repeats`` loops of ``calls``, synchronized, after a
    warm-up call unless not ``warm``."""
    if warm:
        fn()
    sync(xp)
    return best(lambda: [fn() for _ in range(calls)], repeats, sync=lambda: sync(xp)) / calls


def weights(xp, n):
    k = np.arange(n * WIDTH * WIDTH, dtype=np.float64).reshape(n, WIDTH, WIDTH)
    K = 0.5 * np.sin(0.37 * k) / np.sqrt(WIDTH)
    b = 0.1 * np.cos(0.11 * np.arange(n * WIDTH)).reshape(n, WIDTH)
    return xp.asarray(K), xp.asarray(b)


class ResNet(braidpy.App):
    """u <- u + h tanh(u K_n^T + b_n), one state per time point; a stacked step per call."""

    def __init__(self, xp, K, b, u0):
        self.xp, self.K, self.b, self.u0, self._hs = xp, K, b, u0, {}

    def init(self, t):
        return self.u0.copy() if t == self.tstart else self.xp.zeros_like(self.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        u += (t1 - t0) * self.xp.tanh(u @ self.K[n].T + self.b[n])

    def step_stacked(self, U, t0s, t1s, status):
        s, hs = status.fine_slice, t1s - t0s
        if hs.tobytes() not in self._hs:  # the step sizes copied to the device once
            self._hs[hs.tobytes()] = self.xp.asarray(hs).reshape(-1, 1, 1)
        U += self._hs[hs.tobytes()] * self.xp.tanh(U @ self.K[s].transpose(0, 2, 1)
                                                   + self.b[s][:, None, :])


def serial(xp, K, b, u0, n):
    u, h = u0.copy(), TSTOP / n
    for k in range(n):
        u += h * xp.tanh(u @ K[k].T + b[k])
    sync(xp)
    return u


def mgrit(xp, K, b, u0, n, levels=2, cfactor=CFACTOR, app=ResNet, **stop):
    """braidpy.solve of the ResNet (or ``app``); max_iter 2 and abs_tol 0 unless given."""
    r = braidpy.solve(app(xp, K, b, u0), 0.0, TSTOP, n, max_levels=levels, cfactor=cfactor,
                      nrelax=0, access_level=0, **{"max_iter": 2, "abs_tol": 0.0, **stop})
    sync(xp)
    return r


def gradient_times(xp, net, X, C, cfactors, repeats):
    """({"serial": s, cf: s}, solver(cf)): loss_and_gradient vs a new one-shot (2, 2) solver's."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNetApp

    params = net.init_params(seed=7)
    app = ResNetApp(net, params, X, C)

    def solver(cf):
        return GradientSolver(app, 0.0, net.tstop, net.nlayers, oneshot=(2, 2),
                              primal=dict(max_levels=2, cfactor=cf, nrelax=0))

    t = {"serial": timed(xp, lambda: net.loss_and_gradient(params, X, C), repeats)}
    t.update({cf: timed(xp, lambda: solver(cf).evaluate(), repeats) for cf in cfactors})
    return t, solver


_TORCH_NETS: dict = {}


def torch_fwd_bwd(torch, key, kshape, scale, ushape, layer):
    """PyTorch autograd, float64 on the GPU: u <- u + h tanh(layer(u, K_n, b_n)), then |u|^2's
    backward (weights and input made once per key)."""
    n = kshape[0]
    if key not in _TORCH_NETS:
        gen = torch.Generator().manual_seed(7)
        K = (torch.randn(kshape, generator=gen, dtype=torch.float64) / scale).cuda()
        b = torch.zeros(n, kshape[1], dtype=torch.float64, device="cuda", requires_grad=True)
        u0 = torch.randn(ushape, generator=gen, dtype=torch.float64).cuda()
        _TORCH_NETS[key] = (K.requires_grad_(), b, u0)
    K, b, u = _TORCH_NETS[key]
    K.grad = b.grad = None
    for k in range(n):
        u = u + TSTOP / n * torch.tanh(layer(u, K[k], b[k]))
    (u * u).sum().backward()
    torch.cuda.synchronize()


def conv_arrays(xp, m, C, H, dtype, seed, kscale, adjoint=True):
    """U, W (None unless ``adjoint``), K, b, h of m intervals, batch BATCH, C x H x H."""
    rng = np.random.default_rng(seed)

    def draw(shape, scale=1.0):
        return xp.asarray(scale * rng.standard_normal(shape), dtype=dtype)

    U, W = draw((m, BATCH, C, H, H)), draw((m, BATCH, C, H, H)) if adjoint else None
    Ks, bs = draw((m, C, C, 3, 3), 1 / kscale), draw((m, C), 0.1)
    return U, W, Ks, bs, xp.asarray(np.full(m, 1.0 / m), dtype=dtype)


def batched_calls(layer, U, Wt, Ks, bs, hs):
    return {"forward": lambda: layer.forward_batched(U, Ks, bs, hs),
            "adjoint": lambda: layer.adjoint_batched(Wt, U, Ks, bs, hs),
            "gradient": lambda: layer.gradient_batched(Wt, U, Ks, bs, hs)}


def conv_steps(xp, args):
    """--conv: per call, m intervals' steps (8 channels: every backend, PyTorch; then wider)."""
    from braidpy.nn import ConvLayer
    from braidpy.nn.conv_backends import BENCHMARK_ENV, STREAMS_ENV, cudnn_unavailable
    from braidpy.nn.conv_direct import kernel_family

    why = cudnn_unavailable() if xp is not np else "no GPU"
    if why is not None:
        print(f"conv: the cuDNN comparison needs CuPy, a GPU and cuDNN: {why}")
        return
    m, H = args.intervals, 28
    os.environ[STREAMS_ENV] = str(args.streams)
    if args.cudnn_benchmark:
        os.environ[BENCHMARK_ENV] = "1"
    torch = torch_cuda()
    for C in [8] + list(args.conv_channels):
        # wider layers: per interval, streams and im2col add little; im2col grows with C
        names = {"cudnn": "cuDNN grouped", "cuda-direct": "cuda-direct"}
        if C == 8:
            names["array-api"] = "array-API im2col"
        layers = {name: ConvLayer(C, 3, "tanh", backend=name) for name in names}
        for dtype in ("float64", "float32"):
            data = conv_arrays(xp, m, C, H, dtype, *((20261125, 9) if C == 8 else
                                                      (20261201, 3 * C)))
            U, _, Ks, bs, hs = data
            cases = {f"{call}, {label}": fn for name, label in names.items()
                     for call, fn in batched_calls(layers[name], *data).items()}
            family = kernel_family(U.shape, Ks.shape, dtype)
            what = f" (cuda-direct: the {family} kernels)"
            if C == 8:
                streams = ConvLayer(C, 3, "tanh", backend="cudnn-streams")
                cases["forward, cuDNN per interval"] = lambda: [layers["cudnn"].forward(
                    U[k], Ks[k], bs[k], hs[k]) for k in range(m)]
                cases[f"forward, cuDNN per interval, {args.streams} streams"] = \
                    batched_calls(streams, *data)["forward"]
                if torch is not None:
                    cases.update(torch_conv_cases(torch, *data, m, C, H))
            times = {name: timed(xp, fn, args.repeats) for name, fn in cases.items()}
            if torch is not None:
                torch.backends.cudnn.allow_tf32 = True  # PyTorch's default again
            base = times["forward, cuDNN grouped"]
            print(f"conv calls over {m} intervals, batch {BATCH}, {C} channels, {H}x{H}, 3x3, "
                  f"tanh, {dtype}{what}; {grouped_plan(m, C, H, dtype)}:")
            for name, t in times.items():
                print(f"  {name:50s} {t * 1e3:9.3f} ms  ({t / base:.2f}x grouped forward)",
                      flush=True)


def grouped_plan(m, C, H, dtype):
    """The cuDNN algorithms of the grouped step over m intervals (its cached plan), in words."""
    from braidpy.nn.conv_backends import cudnn_plan

    plan = cudnn_plan((BATCH, m * C, H, H), m * C, 3, m, dtype)
    how = "measured" if all(plan["measured"]) else (
        "heuristic" if not any(plan["measured"]) else f"measured {plan['measured']}")
    return f"cuDNN grouped algorithms {plan['algorithms']} ({how})"


def torch_conv_cases(torch, U, Wt, Ks, bs, hs, m, C, H):
    """PyTorch's grouped conv (TF32 and not), whole step, backward data and filter, same shapes."""
    F, cudnn = torch.nn.functional, torch.backends.cudnn

    def as_torch(a):
        return torch.as_tensor(a, device="cuda")

    tU, tW = (as_torch(a.transpose(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H)) for a in (U, Wt))
    tK, tb = as_torch(Ks.reshape(m * C, C, 3, 3)), as_torch(bs.reshape(m * C))
    th, tU5 = as_torch(hs).reshape(m, 1, 1, 1, 1), as_torch(U)

    def conv(tf32):
        def run():
            cudnn.allow_tf32 = tf32
            return F.conv2d(tU, tK, padding=1, groups=m)
        return run

    def step():
        cudnn.allow_tf32 = False
        x = tU5.permute(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H)
        z = torch.tanh(F.conv2d(x, tK, tb, padding=1, groups=m))
        return tU5 + th * z.reshape(BATCH, m, C, H, H).permute(1, 0, 2, 3, 4)

    def gradient_convs():
        cudnn.allow_tf32 = False
        return (torch.nn.grad.conv2d_input(tU.shape, tK, tW, padding=1, groups=m),
                torch.nn.grad.conv2d_weight(tU, tK.shape, tW, padding=1, groups=m))

    return {"forward, PyTorch grouped conv2d (conv only, TF32 allowed)": conv(True),
            "forward, PyTorch grouped conv2d (conv only, no TF32)": conv(False),
            "forward, PyTorch whole step, braidpy's layout (no TF32)": step,
            "backward data + filter, PyTorch grouped (no TF32)": gradient_convs}


def conv_network(xp, args):
    """--conv-net: serial fwd+bwd vs one-shot (2,2) per backend and cfactor, PyTorch's."""
    from braidpy.nn import ResNet

    n, C = args.conv_layers, 8
    for batch in args.conv_batches:
        rng = np.random.default_rng(9)
        X = xp.asarray(rng.standard_normal((batch, 1, 28, 28)))
        Cl = xp.asarray(np.eye(10)[rng.integers(0, 10, batch)])
        line = f"conv ResNet N={n}, {C} channels, 28x28, batch {batch}, float64:"
        for backend in args.conv_backends if xp is not np else ["numpy"]:
            net = ResNet((1, 28, 28), 10, width=C, nlayers=n, tstop=TSTOP, activation="tanh",
                         device=None if xp is np else "cuda",
                         backend=None if backend == "numpy" else backend)
            t, _ = gradient_times(xp, net, X, Cl, args.conv_cfactors, args.repeats)
            line += f"\n  {backend}: serial fwd+bwd {t['serial'] * 1e3:.1f} ms" + "".join(
                f"; one-shot (2,2) cf {cf} {t[cf] * 1e3:.1f} ms ({t['serial'] / t[cf]:.2f}x "
                f"serial)" for cf in args.conv_cfactors)
        torch = torch_cuda() if xp is not np else None
        if torch is not None:
            free(xp)  # CuPy's cache, for PyTorch
            t_torch = best(lambda: torch_fwd_bwd(
                torch, ("conv", n, batch), (n, C, C, 3, 3), 3 * C ** 0.5, (batch, C, 28, 28),
                lambda u, K, b: torch.nn.functional.conv2d(u, K, b, padding=1)), args.repeats)
            line += f"\n  PyTorch serial fwd+bwd {t_torch * 1e3:.1f} ms"
        print(line, flush=True)


M, C8, H28 = 64, 8, 28  # --overheads' conv pieces: intervals, channels, image side


def conv_pieces(xp, calls):
    """--overheads: the grouped cuDNN forward step's pieces (ms per call), PyTorch's conv."""
    from braidpy.nn import ConvLayer
    from braidpy.nn import conv_backends as cb
    from braidpy.nn.activations import get_activation

    why = cb.cudnn_unavailable()
    if why is not None:
        print(f"conv split: needs cuDNN: {why}")
        return
    torch, act = torch_cuda(), get_activation("tanh")
    layer = ConvLayer(C8, 3, "tanh", backend="cudnn")
    for dtype in ("float32", "float64"):
        U, _, Ks, bs, hs = conv_arrays(xp, M, C8, H28, dtype, 1, 9, adjoint=False)
        X = cb.pack_intervals(U)
        Kg = xp.reshape(Ks, (M * C8, C8, 3, 3))  # the grouped filter (a view)
        Y = cb.conv2d_cudnn(X, Kg, M)
        Z = cb.unpack_intervals(Y, M) + xp.reshape(bs, (M, 1, C8, 1, 1))
        A = act.value(Z)
        S = xp.reshape(hs, (M, 1, 1, 1, 1)) * A
        rows = {"pack_intervals (transposing copy)":
                lambda: xp.ascontiguousarray(cb.pack_intervals(U)),
                "grouped cudnn conv (incl. workspace, output)": lambda: cb.conv2d_cudnn(X, Kg, M),
                "unpack + bias":
                lambda: cb.unpack_intervals(Y, M) + xp.reshape(bs, (M, 1, C8, 1, 1)),
                "tanh": lambda: act.value(Z),
                "h * tanh": lambda: xp.reshape(hs, (M, 1, 1, 1, 1)) * A,
                "U + h tanh": lambda: U + S,
                "fused epilogue (the four above in one kernel)":
                lambda: cb.fused_epilogue(U, Y, bs, hs, act),
                "whole forward_batched (cudnn)": lambda: layer.forward_batched(U, Ks, bs, hs)}
        if torch is not None:
            tX, tK = torch.as_tensor(X, device="cuda"), torch.as_tensor(Kg, device="cuda")

            def torch_conv():
                torch.backends.cudnn.allow_tf32 = False
                return torch.nn.functional.conv2d(tX, tK, padding=1, groups=M)
            rows["PyTorch grouped conv2d alone (no TF32)"] = torch_conv
        print(f"conv step pieces, {M} intervals, batch {BATCH}, {C8} channels, {H28}x{H28}, "
              f"{dtype} (ms per call):")
        for name, fn in rows.items():  # each after a warm-up call
            t = timed(xp, fn, 3, max(calls // 100, 10))
            print(f"  {name:45s} {t * 1e3:8.3f}", flush=True)
        if torch is not None:
            torch.backends.cudnn.allow_tf32 = True
