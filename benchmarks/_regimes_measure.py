"""bench_gpu_regimes.py's measurements: per call (PyTorch's layer call and launch floor,
braidpy's serial and batched steps) and whole gradients (serial and one-shot (2, 2))."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Dict, Optional

import numpy as np

import json
from dataclasses import asdict

from _regimes import (LAYER_CALLS, NCLASSES, PER_CALL_SHARE, SEED, TSTOP, Row, _us, repeated,
                      timed, warm)
from _gpu import sync

@contextlib.contextmanager
def braidpy_tf32(on: bool):
    """BRAIDPY_TF32 set for the block (read by braidpy at every cuDNN call), then restored."""
    from braidpy.nn.conv_backends import TF32_ENV

    old = os.environ.get(TF32_ENV)
    os.environ[TF32_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(TF32_ENV, None)
        else:
            os.environ[TF32_ENV] = old


def pattern(xp, shape, dtype, c, scale=1.0):
    """Deterministic data made on the device (no host copy): scale sin(c i)."""
    n = int(np.prod(shape))
    return (scale * xp.sin(c * xp.arange(n, dtype=xp.float64))).reshape(shape).astype(dtype)


def braidpy_calls(xp, row, backend, repeats):
    """Seconds of braidpy's serial step and batched forward / adjoint over m intervals."""
    from braidpy.nn import ConvLayer

    m, C, H, dt = row.intervals, row.channels, row.image, row.dtype
    layer = ConvLayer(C, 3, "tanh", backend=backend, xp=xp)
    U = pattern(xp, (m, row.batch, C, H, H), dt, 0.37)
    Wt = pattern(xp, (m, row.batch, C, H, H), dt, 0.53)
    Ks = pattern(xp, (m, C, C, 3, 3), dt, 0.71, 1 / (3 * C ** 0.5))
    bs = pattern(xp, (m, C), dt, 0.11, 0.1)
    hs = xp.full(m, TSTOP / row.layers, dtype=dt)
    h = TSTOP / row.layers

    def call(fn):
        return lambda: (fn(), sync(xp))

    out = {"step": timed(call(lambda: layer.forward(U[0], Ks[0], bs[0], h)), repeats),
           "forward_batched": timed(call(lambda: layer.forward_batched(U, Ks, bs, hs)),
                                    repeats),
           "adjoint_batched": timed(call(lambda: layer.adjoint_batched(Wt, U, Ks, bs, hs)),
                                    repeats)}
    out["kernels"] = layer.backend
    return out


_COUNTS: Dict[Any, Dict[str, int]] = {}


def oneshot_counts(layers: int, cfactor: int) -> Dict[str, int]:
    """Callback counts of a warm-started one-shot (2, 2) gradient of N layers, as training
    makes them (they depend on N, cfactor and the MGRIT settings only, so a width-1 dense
    net on the host counts them; the first, cold call makes fewer)."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    key = (layers, cfactor)
    if key not in _COUNTS:
        net = Net((1,), 2, width=1, nlayers=layers, tstop=TSTOP, activation="tanh")
        app = ResNetApp(net, net.init_params(seed=SEED), np.ones((1, 1)), np.eye(2)[:1])
        solver = GradientSolver(app, 0.0, TSTOP, layers, oneshot=(2, 2),
                                primal=dict(max_levels=2, cfactor=cfactor, nrelax=0))
        solver.evaluate()
        solver.evaluate()
        p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
        solver.close()
        _COUNTS[key] = {"primal_steps": p["step"], "primal_batched_calls": p["step_batch"],
                        "primal_batched_items": p["step_batch_items"],
                        "adjoint_steps": a["step"], "adjoint_batched_calls": a["step_batch"],
                        "adjoint_batched_items": a["step_batch_items"],
                        "core_operations": sum(p[k] + a[k] for k in ("clone", "sum", "norm"))}
    return _COUNTS[key]


def work_ratio(counts, layers):
    """W: one-shot's layer steps (forward and adjoint) over serial's 2N."""
    steps = (counts["primal_steps"] + counts["primal_batched_items"] + counts["adjoint_steps"]
             + counts["adjoint_batched_items"])
    return steps / (2 * layers)


def estimate_gradient(row, counts, calls, torch_layer):
    """Seconds of one whole-gradient row (warm-up and repeats of all three sides), from
    the per-call numbers: a backward costs about two forwards; the core's clone, sum and
    norm about 10 us each."""
    m, N = row.intervals, row.layers
    step, fwd, adj = calls["step"], calls["forward_batched"], calls["adjoint_batched"]
    oneshot = ((counts["primal_steps"] + 2 * counts["adjoint_steps"]) * step
               + counts["primal_batched_items"] / m * fwd
               + counts["adjoint_batched_items"] / m * adj + N / m * adj
               + 10e-6 * counts["core_operations"])
    serial = 3 * N * step + (3 * N * torch_layer if torch_layer else 0.0)
    return oneshot + serial


def per_call_pass(rows, xp, side, args, budget, meta):
    """Per-call numbers of each row that fits (cheapest first), else a skip line."""
    done: Dict[Any, float] = {}  # PyTorch's per-layer calls, per (dtype, C, batch)
    last = None  # (work, seconds) of the last row's pass
    for row in sorted(rows, key=Row.per_call_work):
        need = 0.2 if last is None else last[1] * row.per_call_work() / last[0]
        why = budget.refuses(need, PER_CALL_SHARE)
        if why:
            skip(row, f"per call: {why}")
            continue
        start = time.perf_counter()
        try:
            measure_calls(row, xp, side, args, done, meta)
        except Exception as exc:  # noqa: BLE001 - one row's failure is reported, not fatal
            skip(row, f"per call failed: {type(exc).__name__}: {exc}")
            free(xp)
            continue
        last = (row.per_call_work(), time.perf_counter() - start)
        row.status = "per call only"
        pc = row.per_call
        print(f"per call {row.name}: serial layer {_us(pc['serial_layer'])}, floor "
              f"{_us(pc['floor'])}, braidpy batched forward {_us(pc['forward_batched'])} over "
              f"{row.intervals} intervals ({kernels_label(pc)}), gain {pc['gain']:.2f}, W "
              f"{pc['work_ratio']:.2f} [{budget.elapsed():.0f} s]", flush=True)
        save(args, meta, rows)


def measure_calls(row, xp, side, args, done, meta):
    pc, tf32 = row.per_call, args.tf32 and row.dtype == "float32"
    calls = min(LAYER_CALLS, row.layers)
    if side is not None:
        pc["torch_tf32"] = side.settings(row.dtype)
        floor_key = ("floor", row.dtype)
        if floor_key not in done:
            done[floor_key] = side.layer(row.dtype, 1, 1, 1, calls, args.repeats, False)
        pc["floor"] = done[floor_key]
        key = (row.dtype, row.channels, row.batch)
        if key not in done:
            done[key] = attempts({fmt: (lambda fmt=fmt: side.layer(
                row.dtype, row.channels, row.batch, row.image, calls, args.repeats,
                fmt == "channels_last")) for fmt in ("nchw", "channels_last")}, row.name)
        formats, pc["torch_failed"] = done[key]
        pc["torch_layer_formats"] = formats
        pc["torch_format"] = min(formats, key=formats.get)
        pc["torch_layer"] = formats[pc["torch_format"]]
    pc["braidpy_tf32"] = tf32  # (it changes only cuDNN's calls)
    with braidpy_tf32(tf32):
        by_backend, pc["braidpy_failed"] = attempts({
            backend: (lambda backend=backend: braidpy_calls(xp, row, backend, args.repeats))
            for backend in args.backends}, row.name, lambda: free(xp))
    pc["braidpy_backends"] = by_backend
    pc["braidpy_backend"] = min(by_backend, key=lambda b: by_backend[b]["forward_batched"]
                                + by_backend[b]["adjoint_batched"])
    pc.update({k: by_backend[pc["braidpy_backend"]][k]
               for k in ("step", "forward_batched", "adjoint_batched")})
    if side is None:  # braidpy's own serial loop is the reference
        if ("floor", row.dtype) not in done:
            floor_row = Row(row.dtype, 1, row.layers, 1, row.cfactor, 1)
            done[("floor", row.dtype)] = braidpy_calls(xp, floor_row, pc["braidpy_backend"],
                                                       args.repeats)["step"]
        pc["floor"] = done[("floor", row.dtype)]
    pc["serial_layer"] = pc.get("torch_layer", pc["step"])
    counts = oneshot_counts(row.layers, row.cfactor)
    pc["work_ratio"] = work_ratio(counts, row.layers)
    pc["gain"] = pc["serial_layer"] / (pc["forward_batched"] / row.intervals)


def attempts(runs, label, after=lambda: None):
    """({name: value} of the runs that returned, {name: why} of those that raised); at
    least one must return (else the first failure is raised again). ``after`` runs after
    each (a failed layout or backend leaves the others to compare)."""
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


def gradient_pass(rows, xp, side, args, budget, meta):
    """Whole gradients of the rows with per-call numbers, cheapest estimate first."""
    ready = [r for r in rows if r.status == "per call only"]
    est = {r.name: estimate_gradient(r, oneshot_counts(r.layers, r.cfactor), r.per_call,
                                     r.per_call.get("torch_layer")) * (1 + args.repeats)
           for r in ready}
    for row in sorted(ready, key=lambda r: est[r.name]):
        row.gradient["estimate"] = est[row.name]
        free(xp)  # both libraries' caches back to the device before its free memory is read
        if side is not None:
            side.free()
        why = budget.refuses(est[row.name]) or memory_refuses(xp, row)
        if why:
            print(f"skipped {row.name} (whole gradient): {why}", flush=True)
            row.gradient["skipped"] = why
            continue
        try:
            measure_gradient(row, xp, side, args)
            row.status = "measured"
            g = row.gradient
            print(f"gradient {row.name}: serial {_us(g['serial'])}, one-shot (2,2) "
                  f"{_us(g['oneshot'])}: {g['speedup']:.2f}x [{budget.elapsed():.0f} s]",
                  flush=True)
        except Exception as exc:  # noqa: BLE001 - reported with the row
            row.gradient["skipped"] = f"failed: {type(exc).__name__}: {exc}"
            print(f"skipped {row.name} (whole gradient): {row.gradient['skipped']}", flush=True)
        save(args, meta, rows)


def memory_refuses(xp, row) -> Optional[str]:
    """Why the row's whole gradient would not fit the GPU's free memory, or None: braidpy
    keeps about 4 states per layer (primal, adjoint, work), PyTorch's autograd about 3."""
    if xp is np:
        return None
    need = 4 * (row.layers + 1) * row.state_bytes()
    free_bytes = xp.cuda.runtime.memGetInfo()[0]
    if need <= 0.85 * free_bytes:
        return None
    return f"needs ~{need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} GiB free"


def measure_gradient(row, xp, side, args):
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    g, pc = row.gradient, row.per_call
    with braidpy_tf32(pc["braidpy_tf32"]):
        net = Net((1, row.image, row.image), NCLASSES, width=row.channels, nlayers=row.layers,
                  tstop=TSTOP, activation="tanh", device=None if xp is np else "cuda",
                  backend=pc["braidpy_backend"])
        rng = np.random.default_rng(SEED)
        params = net.init_params(seed=SEED).astype(row.dtype)
        X = net.placement.from_host(rng.standard_normal((row.batch, 1, row.image, row.image)),
                                    dtype=row.dtype)
        Cl = net.placement.from_host(np.eye(NCLASSES)[rng.integers(0, NCLASSES, row.batch)],
                                     dtype=row.dtype)
        if side is not None:
            side.settings(row.dtype)
            tnet = side.network(net, params, X, Cl, pc["torch_format"] == "channels_last")
            g["torch_loss"], first = warm(tnet.gradient)
            g["torch"] = repeated(tnet.gradient, args.repeats, first)
            del tnet
            side.free()

        def serial():
            loss, _ = net.loss_and_gradient(params, X, Cl)
            sync(xp)
            return loss

        g["braidpy_loss"], first = warm(serial)
        g["braidpy_serial"] = repeated(serial, args.repeats, first)
        app = ResNetApp(net, params, X, Cl)
        solver = GradientSolver(app, 0.0, net.tstop, row.layers, oneshot=(2, 2),
                                primal=dict(max_levels=2, cfactor=row.cfactor, nrelax=0))

        def oneshot():
            solver.evaluate()
            sync(xp)

        try:
            g["oneshot"] = timed(oneshot, args.repeats)
            p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
        finally:
            solver.close()
    steps = p["step"] + p["step_batch_items"] + a["step"] + a["step_batch_items"]
    g["work_ratio"] = steps / (2 * row.layers)
    g["serial"] = g.get("torch", g["braidpy_serial"])
    g["speedup"] = g["serial"] / g["oneshot"]
    if "torch_loss" in g:
        g["loss_difference"] = abs(g["torch_loss"] - g["braidpy_loss"]) / abs(g["braidpy_loss"])


def free(xp):
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def skip(row, why):
    row.status, row.skip_reason = "skipped", why
    print(f"skipped {row.name}: {why}", flush=True)


def kernels_label(pc):
    """The braidpy backend of a row, "+tf32" where its cuDNN convolutions used TF32."""
    tf32 = pc["braidpy_tf32"] and pc["braidpy_backend"].startswith("cudnn")
    return pc["braidpy_backend"] + ("+tf32" if tf32 else "")


def save(args, meta, rows):
    """--json's file, rewritten after every row (a run cut short keeps what it measured)."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta,
                       "rows": [dict(asdict(r), intervals=r.intervals) for r in rows]},
                      f, indent=1, default=float)
