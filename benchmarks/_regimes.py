"""bench_gpu_regimes.py's rows and measurements: PyTorch's side (its best serial settings, the
same network and weights), braidpy's calls, the whole gradients (serial, one-shot (2, 2))."""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Optional
from unittest import mock

import numpy as np

from _gpu import free, sync
from _harness import best

TSTOP, NCLASSES, SEED = 2.0, 10, 20261201
PER_CALL_SHARE = 0.5  # of the budget, for the per-call pass (the rest: whole gradients)
LAYER_CALLS = 32  # layer calls of one timed PyTorch loop (fewer when N is smaller)


@dataclass
class Row:
    """A row DTYPE:C:N:BATCH, its cfactor and image side, and what was measured."""

    dtype: str
    channels: int
    layers: int
    batch: int
    cfactor: int
    image: int
    name: str = ""
    status: str = "pending"  # "measured", "per call only", "skipped"
    skip_reason: Optional[str] = None
    per_call: dict = field(default_factory=dict)
    gradient: dict = field(default_factory=dict)
    regime: Optional[dict] = None

    def __post_init__(self):
        self.name = f"{self.dtype}:{self.channels}:{self.layers}:{self.batch}"

    @property
    def intervals(self) -> int:
        return self.layers // self.cfactor

    def per_call_work(self) -> float:
        """Relative cost of the per-call pass (for ordering and estimates)."""
        itemsize = np.dtype(self.dtype).itemsize
        return self.batch * self.channels ** 2 * self.intervals * itemsize + 1e3


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def warm(fn):
    """(fn's value, seconds) of a warm-up call: plans, algorithms, pools."""
    start = time.perf_counter()
    return fn(), time.perf_counter() - start


def timed(fn, repeats, first=None):
    """Min over repeats of fn after a warm-up (``first``: its seconds), at most ~5 s of calls."""
    first = warm(fn)[1] if first is None else first
    return best(fn, max(1, min(repeats, int(5.0 / max(first, 1e-9)))))


def pattern(xp, shape, dtype, c, scale=1.0):
    """Deterministic data made by xp (on its device): scale sin(c i)."""
    n = int(np.prod(shape))
    return (scale * xp.sin(c * xp.arange(n, dtype=xp.float64))).reshape(shape).astype(dtype)


class TorchSide:
    """PyTorch's serial loop with its best settings: cudnn.benchmark, TF32 for float32."""

    def __init__(self, torch, device, tf32):
        self.torch, self.device, self.tf32 = torch, device, tf32
        torch.backends.cudnn.benchmark = True
        if device == "cpu":
            torch.set_num_threads(1)  # as braidpy's NumPy side; no spinning thread pool

    def settings(self, dtype):
        on = self.tf32 and dtype == "float32"
        self.torch.backends.cudnn.allow_tf32 = self.torch.backends.cuda.matmul.allow_tf32 = on
        return on

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def tensor(self, a, channels_last=False):
        t = self.torch.as_tensor(a, device=self.device)
        return t.contiguous(memory_format=self.torch.channels_last) if channels_last else t

    def free(self):
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def empty_launch(self, repeats, calls=200):
        """Seconds per launch of an in-place add on one element."""
        x = self.torch.zeros(1, device=self.device)

        def loop():
            for _ in range(calls):
                x.add_(1.0)
            self.sync()
        return timed(loop, repeats) / calls

    def layer(self, dtype, C, batch, side, calls, repeats, channels_last):
        """Seconds per serial layer call u + h tanh(conv2d(u, K, b)), no autograd."""
        torch, F, h = self.torch, self.torch.nn.functional, TSTOP / calls
        u, K = (self.tensor(pattern(np, shape, dtype, c, s), channels_last) for shape, c, s in
                (((batch, C, side, side), 0.37, 1.0), ((C, C, 3, 3), 0.71, 1 / (3 * C ** 0.5))))
        b = self.tensor(pattern(np, (C,), dtype, 0.11, 0.1))

        def loop():
            with torch.no_grad():
                v = u
                for _ in range(calls):
                    v = v + h * torch.tanh(F.conv2d(v, K, b, padding=1))
            self.sync()
        return timed(loop, repeats) / calls

    def network(self, net, params, X, Cl, channels_last):
        """braidpy's ResNet in PyTorch, its weights copied: a loss-and-gradient call."""
        torch, F, v = self.torch, self.torch.nn.functional, net.views(params)

        def leaf(a):
            return self.tensor(a, channels_last and a.ndim == 4).clone().requires_grad_()

        oK, ob, W, mu = (leaf(v[k]) for k in ("open_K", "open_b", "W", "mu"))
        Ks, bs = [leaf(K) for K in v["K"]], [leaf(b) for b in v["b"]]
        X, C = self.tensor(X, channels_last), self.tensor(Cl)

        def gradient():
            for p in [oK, ob, W, mu] + Ks + bs:
                p.grad = None
            u = torch.tanh(F.conv2d(X, oK, ob, padding=1))
            for K, b, h in zip(Ks, bs, net.steps.tolist()):
                u = u + h * torch.tanh(F.conv2d(u, K, b, padding=1))
            loss = -(C * torch.log_softmax(u.flatten(1) @ W.T + mu, dim=1)).sum() / u.shape[0]
            loss.backward()
            self.sync()
            return float(loss.detach())
        return gradient


def braidpy_tf32(on):
    """BRAIDPY_TF32 set for a with-block (read at every cuDNN call), then restored."""
    from braidpy.nn.conv_backends import TF32_ENV

    return mock.patch.dict(os.environ, {TF32_ENV: "1" if on else "0"})


def braidpy_calls(xp, row, backend, repeats):
    """Seconds of braidpy's serial step and batched forward / adjoint over m intervals."""
    from braidpy.nn import ConvLayer

    m, C, H, dt, h = row.intervals, row.channels, row.image, row.dtype, TSTOP / row.layers
    layer = ConvLayer(C, 3, "tanh", backend=backend, xp=xp)
    U, Wt = (pattern(xp, (m, row.batch, C, H, H), dt, c) for c in (0.37, 0.53))
    Ks = pattern(xp, (m, C, C, 3, 3), dt, 0.71, 1 / (3 * C ** 0.5))
    bs, hs = pattern(xp, (m, C), dt, 0.11, 0.1), xp.full(m, h, dtype=dt)
    calls = {"step": lambda: layer.forward(U[0], Ks[0], bs[0], h),
             "forward_batched": lambda: layer.forward_batched(U, Ks, bs, hs),
             "adjoint_batched": lambda: layer.adjoint_batched(Wt, U, Ks, bs, hs)}
    out = {k: timed(lambda f=f: (f(), sync(xp)), repeats) for k, f in calls.items()}
    return dict(out, kernels=layer.backend)


def layer_steps(p, a):
    """One-shot's layer steps, forward and adjoint, from its solvers' counts."""
    return sum(c["step"] + c["step_batch_items"] for c in (p, a))


@functools.lru_cache(maxsize=None)
def oneshot_counts(layers: int, cfactor: int) -> dict:
    """Callback counts of a warm one-shot (2, 2) gradient of N layers (a width-1 net's)."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet, ResNetApp

    net = ResNet((1,), 2, width=1, nlayers=layers, tstop=TSTOP, activation="tanh")
    app = ResNetApp(net, net.init_params(seed=SEED), np.ones((1, 1)), np.eye(2)[:1])
    solver = GradientSolver(app, 0.0, TSTOP, layers, oneshot=(2, 2),
                            primal=dict(max_levels=2, cfactor=cfactor, nrelax=0))
    solver.evaluate()
    solver.evaluate()  # warm-started, as in training (the first, cold call makes fewer)
    p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
    solver.close()
    return {"primal_steps": p["step"], "primal_batched_items": p["step_batch_items"],
            "adjoint_steps": a["step"], "adjoint_batched_items": a["step_batch_items"],
            "layer_steps": layer_steps(p, a),
            "core_operations": sum(p[k] + a[k] for k in ("clone", "sum", "norm"))}


def estimate_gradient(row):
    """Seconds of a row's whole gradient (all three sides) from its per-call numbers: a
    backward costs about two forwards; a core clone, sum or norm about 10 us."""
    c, pc, m, N = oneshot_counts(row.layers, row.cfactor), row.per_call, row.intervals, row.layers
    step, adj = pc["step"], pc["adjoint_batched"]
    oneshot = ((c["primal_steps"] + 2 * c["adjoint_steps"]) * step
               + c["primal_batched_items"] / m * pc["forward_batched"]
               + c["adjoint_batched_items"] / m * adj + N / m * adj
               + 10e-6 * c["core_operations"])
    return oneshot + 3 * N * (step + pc.get("torch_layer", 0.0))


def attempts(runs, label, after=lambda: None):
    """({name: value} of the runs that returned, {name: why} of those that raised); the first
    failure raised again if none returned; ``after`` runs after each."""
    values, failed, first = {}, {}, None
    for name, run in runs.items():
        try:
            values[name] = run()
        except Exception as exc:  # noqa: BLE001 - reported, the others still compared
            failed[name] = f"{type(exc).__name__}: {exc}"
            print(f"  ({label}: {name} failed: {failed[name]})", flush=True)
            first = first or exc
        after()
    if not values:
        raise first
    return values, failed


def measure_calls(row, xp, side, args, done):
    """The row's per-call numbers (``done``: PyTorch's calls and floors already timed)."""
    pc, calls, floor = row.per_call, min(LAYER_CALLS, row.layers), ("floor", row.dtype)
    if side is not None:
        pc["torch_tf32"] = side.settings(row.dtype)
        if floor not in done:
            done[floor] = side.layer(row.dtype, 1, 1, 1, calls, args.repeats, False)
        key = (row.dtype, row.channels, row.batch)
        if key not in done:
            done[key] = attempts({fmt: lambda fmt=fmt: side.layer(
                row.dtype, row.channels, row.batch, row.image, calls, args.repeats,
                fmt == "channels_last") for fmt in ("nchw", "channels_last")}, row.name)
        formats, pc["torch_failed"] = done[key]
        fmt = min(formats, key=formats.get)
        pc.update(torch_layer_formats=formats, torch_format=fmt, torch_layer=formats[fmt])
    pc["braidpy_tf32"] = args.tf32 and row.dtype == "float32"  # (it changes cuDNN's calls)
    with braidpy_tf32(pc["braidpy_tf32"]):
        by, pc["braidpy_failed"] = attempts({b: lambda b=b: braidpy_calls(
            xp, row, b, args.repeats) for b in args.backends}, row.name, lambda: free(xp))
    pc["braidpy_backends"] = by
    pc["braidpy_backend"] = chosen = min(
        by, key=lambda b: by[b]["forward_batched"] + by[b]["adjoint_batched"])
    pc.update({k: by[chosen][k] for k in ("step", "forward_batched", "adjoint_batched")})
    if floor not in done:  # no PyTorch: braidpy's own serial loop is the reference
        floor_row = Row(row.dtype, 1, row.layers, 1, row.cfactor, 1)
        done[floor] = braidpy_calls(xp, floor_row, chosen, args.repeats)["step"]
    pc["floor"] = done[floor]
    pc["serial_layer"] = pc.get("torch_layer", pc["step"])
    pc["work_ratio"] = oneshot_counts(row.layers, row.cfactor)["layer_steps"] / (2 * row.layers)
    pc["gain"] = pc["serial_layer"] / (pc["forward_batched"] / row.intervals)


def per_call_pass(rows, xp, side, args, budget, meta):
    """Per-call numbers of each row that fits (cheapest first), else a skip line."""
    done: dict = {}
    last = None  # (work, seconds) of the last row's pass
    for row in sorted(rows, key=Row.per_call_work):
        need = 0.2 if last is None else last[1] * row.per_call_work() / last[0]
        why, start = budget.refuses(need, PER_CALL_SHARE), time.perf_counter()
        why = why and f"per call: {why}"
        try:
            if not why:
                measure_calls(row, xp, side, args, done)
        except Exception as exc:  # noqa: BLE001 - one row's failure is reported, not fatal
            why = f"per call failed: {type(exc).__name__}: {exc}"
            free(xp)
        if why:
            row.status, row.skip_reason = "skipped", why
            print(f"skipped {row.name}: {why}", flush=True)
            continue
        last = (row.per_call_work(), time.perf_counter() - start)
        row.status, pc = "per call only", row.per_call
        print(f"per call {row.name}: serial layer {_us(pc['serial_layer'])}, floor "
              f"{_us(pc['floor'])}, braidpy batched forward {_us(pc['forward_batched'])} over "
              f"{row.intervals} intervals ({kernels_label(pc)}), gain {pc['gain']:.2f}, W "
              f"{pc['work_ratio']:.2f} [{budget.elapsed():.0f} s]", flush=True)
        save(args, meta, rows)


def gradient_pass(rows, xp, side, args, budget, meta):
    """Whole gradients of the rows with per-call numbers, cheapest estimate first."""
    ready = [r for r in rows if r.status == "per call only"]
    for r in ready:
        r.gradient["estimate"] = (1 + args.repeats) * estimate_gradient(r)
    for row in sorted(ready, key=lambda r: r.gradient["estimate"]):
        free(xp)  # both libraries' caches back to the device before its free memory is read
        if side is not None:
            side.free()
        why = budget.refuses(row.gradient["estimate"]) or memory_refuses(xp, row)
        try:
            if not why:
                measure_gradient(row, xp, side, args)
        except Exception as exc:  # noqa: BLE001 - reported with the row
            why = f"failed: {type(exc).__name__}: {exc}"
        if why:
            row.gradient["skipped"] = why
            print(f"skipped {row.name} (whole gradient): {why}", flush=True)
        else:
            row.status, g = "measured", row.gradient
            print(f"gradient {row.name}: serial {_us(g['serial'])}, one-shot (2,2) "
                  f"{_us(g['oneshot'])}: {g['speedup']:.2f}x [{budget.elapsed():.0f} s]",
                  flush=True)
        save(args, meta, rows)


def memory_refuses(xp, row):
    """Why the whole gradient (~4 states per layer) would not fit the GPU's memory, or None."""
    if xp is np:
        return None
    state = row.batch * row.channels * row.image ** 2 * np.dtype(row.dtype).itemsize
    need, free_bytes = 4 * (row.layers + 1) * state, xp.cuda.runtime.memGetInfo()[0]
    if need <= 0.85 * free_bytes:
        return None
    return f"needs ~{need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} GiB free"


def measure_gradient(row, xp, side, args):
    """PyTorch's serial fwd+bwd, braidpy's loss_and_gradient and reused one-shot (2, 2)."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet, ResNetApp

    g, pc = row.gradient, row.per_call
    with braidpy_tf32(pc["braidpy_tf32"]):
        net = ResNet((1, row.image, row.image), NCLASSES, width=row.channels, tstop=TSTOP,
                     nlayers=row.layers, activation="tanh", device=None if xp is np else "cuda",
                     backend=pc["braidpy_backend"])
        rng = np.random.default_rng(SEED)
        params = net.init_params(seed=SEED).astype(row.dtype)
        X, Cl = (net.placement.from_host(a, dtype=row.dtype) for a in (
            rng.standard_normal((row.batch, 1, row.image, row.image)),
            np.eye(NCLASSES)[rng.integers(0, NCLASSES, row.batch)]))
        if side is not None:
            side.settings(row.dtype)
            gradient = side.network(net, params, X, Cl, pc["torch_format"] == "channels_last")
            g["torch_loss"], first = warm(gradient)
            g["torch"] = timed(gradient, args.repeats, first)
            del gradient
            side.free()

        def serial():
            loss, _ = net.loss_and_gradient(params, X, Cl)
            sync(xp)
            return loss

        g["braidpy_loss"], first = warm(serial)
        g["braidpy_serial"] = timed(serial, args.repeats, first)
        solver = GradientSolver(ResNetApp(net, params, X, Cl), 0.0, net.tstop, row.layers,
                                oneshot=(2, 2),
                                primal=dict(max_levels=2, cfactor=row.cfactor, nrelax=0))
        try:
            g["oneshot"] = timed(lambda: (solver.evaluate(), sync(xp)), args.repeats)
            p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
        finally:
            solver.close()
    g["work_ratio"] = layer_steps(p, a) / (2 * row.layers)
    g["serial"] = g.get("torch", g["braidpy_serial"])
    g["speedup"] = g["serial"] / g["oneshot"]
    if "torch_loss" in g:
        g["loss_difference"] = abs(g["torch_loss"] - g["braidpy_loss"]) / abs(g["braidpy_loss"])


def kernels_label(pc):
    """The braidpy backend of a row, "+tf32" where its cuDNN convolutions used TF32."""
    tf32 = pc["braidpy_tf32"] and pc["braidpy_backend"].startswith("cudnn")
    return pc["braidpy_backend"] + ("+tf32" if tf32 else "")


def save(args, meta, rows):
    """--json's file, rewritten after every row (a run cut short keeps what it measured)."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [dict(asdict(r), intervals=r.intervals)
                                              for r in rows]}, f, indent=1, default=float)
