"""Is braidpy.torch's one-shot layer-parallel gradient faster than plain torch
forward+backward through the same blocks, and than torchbraid's?

N blocks x <- x + (T/N) tanh(Linear_n(x)), width 8, float64, T = 2, loss sum(y * wts);
LayerParallel one-shot (2, 2), warm, cf 16, 2 levels, F-relaxation: "grouped", "vmap"
(grouped=False), --per-block (batch=False). Timed: zero_grad + forward + backward after two
warm-ups, process CPU time (--clock wall; cuda: wall after a synchronize), min (median),
sides alternated. --torchbraid: serial, braidpy and torchbraid.LayerParallel (its venv,
$BRAIDPY_TORCHBRAID_VENV; max iters 2, skip 0), each in a fresh one-thread process, the
slowest rank; --check: gradient errors against autograd (one-shot and converged to 1e-12).

    python benchmarks/bench_torch.py [--layers 1024 4096] [--batches 1 32] [--repeats R]
        [--per-block] [--clock cpu|wall] [--device cpu|cuda] [--quick]
    bash benchmarks/setup_torchbraid_env.sh TORCHBRAID_SRC XBRAID_SRC   (once)
    python benchmarks/bench_torch.py --torchbraid [--ranks 1 2] [--rounds K] [--check]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import torch
from _harness import alternate, min_median, print_table, seconds
from _sidecar import (HERE, THREAD_ENV, alternating, mpiexec_for, result_line, run_for_result,
                      venv_python)

SEED, T_FINAL, ONESHOT = 1291, 2.0, (2, 2)
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
VENV = Path.home() / ".cache" / "braidpy" / "torchbraid-venv"


def blocks_of(n, width, device="cpu"):
    """The network's blocks, the same on every side and rank (one seed, one order)."""
    torch.manual_seed(SEED)
    return [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).double()
            .to(device) for _ in range(n)]


def data(batch, width, device="cpu"):
    """The input x and the loss weights wts."""
    return [torch.randn(batch, width, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(SEED + k)).to(device)
            for k in (0, 1)]


def flat_grad(module):
    return torch.cat([p.grad.flatten() for p in module.parameters()])


class Serial:
    """Plain autograd through the blocks (a Python loop + loss.backward())."""

    def __init__(self, blocks, args=None, comm=None, converged=False):
        self.blocks = blocks

    def step(self, x, wts):
        for b in self.blocks:
            b.zero_grad()
        u, h = x, T_FINAL / len(self.blocks)
        for b in self.blocks:
            u = u + h * b(u)
        (u * wts).sum().backward()

    def gradient(self):  # {layer index: flat gradient} of this rank's own layers
        return {i: flat_grad(b) for i, b in enumerate(self.blocks)}

    def close(self):
        pass


class Braidpy(Serial):
    """braidpy.torch.LayerParallel; ``kw``: grouped=False (vmap), batch=False (per block)."""

    def __init__(self, blocks, args, comm=None, converged=False, **kw):
        from braidpy.torch import LayerParallel

        kw.update(cfactor=args.cfactor, max_levels=2, nrelax=0)
        kw.update(dict(abs_tol=1e-12, max_iter=50) if converged else dict(oneshot=ONESHOT))
        self.net = LayerParallel(blocks, T_FINAL, comm=comm, **kw)

    def step(self, x, wts):
        self.net.zero_grad()
        (self.net(x) * wts).sum().backward()

    def gradient(self):
        return {int(k): flat_grad(b) for k, b in self.net.blocks.items()}

    def close(self):
        self.net.close()


class Torchbraid(Braidpy):
    """torchbraid.LayerParallel set up as braidpy's side. It builds each layer by calling
    ``layer_block()`` (no index), so the weights are copied from ``blocks`` afterwards; its
    ODEBlock steps x + dt F(x) with dt = T / N."""

    def __init__(self, blocks, args, comm, converged=False):
        import torchbraid

        width = args.width
        net = torchbraid.LayerParallel(
            comm, lambda: torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()),
            len(blocks), T_FINAL, max_fwd_levels=2, max_bwd_levels=2,
            max_iters=50 if converged else ONESHOT[0])
        net.setPrintLevel(0)
        net.setCFactor(args.cfactor)
        net.setNumRelax(0)  # F-relaxation (its fine level always is)
        # skip stays off (torchbraid's default): XBraid's skip=1 would skip the first
        # down-cycle's relaxation of every warm-started call (braidpy skips only cold
        # starts), and the one-shot gradient would stop improving between calls.
        if converged:
            net.fwd_app.setAbsTol(1e-12)
            net.bwd_app.setAbsTol(1e-12)
        else:
            net.setFwdMaxIters(ONESHOT[0])
            net.setBwdMaxIters(ONESHOT[1])
        start = net.fwd_app.start_layer
        self.layers = range(start, start + len(net.layer_models))
        with torch.no_grad():
            for i, layer in zip(self.layers, net.layer_models):
                layer.layer.load_state_dict(blocks[i].state_dict())
        self.net = net

    def gradient(self):
        return {i: flat_grad(layer) for i, layer in zip(self.layers, self.net.layer_models)}

    def close(self):
        pass


SIDES = {"serial": Serial, "braidpy": Braidpy, "torchbraid": Torchbraid}


def gathered(comm, local, n):
    """All layers' gradients in layer order on rank 0 (None elsewhere)."""
    parts = [local] if comm is None else comm.gather(local, root=0)
    if parts is None:
        return None
    merged = {i: g for part in parts for i, g in part.items()}
    assert sorted(merged) == list(range(n)), sorted(merged)[:5]
    return torch.cat([merged[i] for i in range(n)])


def worker(args) -> None:
    """One side in this process (--torchbraid's child): --repeats timed calls, CPU and wall
    time, under MPI the slowest rank's between barriers; rank 0 prints ``RESULT {json}``."""
    torch.set_num_threads(1)
    comm = None
    if args.mpi or args.side == "torchbraid":  # torchbraid always runs on a communicator
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if args.side == "torchbraid":
        # torchbraid allocates its initial states and rank 0's copy of the output with
        # the default dtype: float64 networks need it to be float64.
        torch.set_default_dtype(torch.float64)
    rank, n = 0 if comm is None else comm.Get_rank(), args.layers[0]
    blocks, (x, wts) = blocks_of(n, args.width), data(args.batches[0], args.width)
    side = SIDES[args.side](blocks, args, comm)
    side.step(x, wts)
    side.step(x, wts)
    result = {"cpu": [], "wall": [], "ranks": 1 if comm is None else comm.Get_size(),
              "torch": torch.__version__}
    for _ in range(args.repeats):
        gc.collect()
        if comm is not None:
            comm.Barrier()
        c0, w0 = time.process_time(), time.perf_counter()
        side.step(x, wts)
        for clock, t in (("cpu", time.process_time() - c0), ("wall", time.perf_counter() - w0)):
            result[clock].append(t if comm is None else comm.allreduce(t, op=MPI.MAX))
    if args.side == "torchbraid":
        from importlib import metadata

        result["version"] = metadata.version("torchbraid")
    if args.check and args.side != "serial":
        oneshot = gathered(comm, side.gradient(), n)
        side.close()
        side = SIDES[args.side](blocks, args, comm, converged=True)
        side.step(x, wts)
        converged = gathered(comm, side.gradient(), n)
        if rank == 0:
            ref = Serial(blocks_of(n, args.width))
            ref.step(x, wts)
            ref = gathered(None, ref.gradient(), n)
            result["err_oneshot"] = float((oneshot - ref).norm() / ref.norm())
            result["err_converged"] = float((converged - ref).norm() / ref.norm())
    side.close()
    if rank == 0:
        result_line(result)


def in_process(args) -> None:
    """serial, grouped, vmap (and per-block) in this process, alternating."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        args.clock = "wall"  # the CPU clock misses the GPU's work
    clock, rows = CLOCKS[args.clock], []

    def measure(fn):
        start = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return clock() - start

    for n in args.layers:
        for batch in args.batches:
            blocks, (x, wts) = blocks_of(n, args.width, device), data(batch, args.width, device)
            sides = {"serial": Serial(blocks), "grouped": Braidpy(blocks, args),
                     "vmap": Braidpy(blocks, args, grouped=False)}
            if args.per_block:
                sides["per-block"] = Braidpy(blocks, args, batch=False)
            fns = {name: (lambda s=s: s.step(x, wts)) for name, s in sides.items()}
            alternate(fns, 2)  # warm-up (and the one-shot warm start)
            times = alternate(fns, args.repeats, measure)
            s_lo, s_med = min_median(times["serial"])
            for name, side in list(sides.items())[1:]:
                lo, med = min_median(times[name])
                rows.append([n, batch, name, f"{seconds(s_lo)} [{seconds(s_med)}]",
                             f"{seconds(lo)} [{seconds(med)}]", f"{s_lo / lo:.2f}x",
                             side.net.batch_path])
                side.close()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print_table(["N", "batch", "LayerParallel", "serial torch fwd+bwd",
                 "LayerParallel one-shot (2,2)", "serial / LP", "path"], rows,
                title=f"torch {torch.__version__} on {where}, {torch.get_num_threads()} "
                      f"thread(s), {args.clock} time, width {args.width}, float64, cfactor "
                      f"{args.cfactor}, 2 levels, F-relaxation")


def against_torchbraid(args) -> None:
    """serial, braidpy and torchbraid, each (N, batch, ranks, side) in a fresh process."""
    tb_python = venv_python("BRAIDPY_TORCHBRAID_VENV", VENV, f"bash "
                            f"{HERE / 'setup_torchbraid_env.sh'} TORCHBRAID_SRC XBRAID_SRC")
    sides = ["serial", "braidpy", "torchbraid"]  # serial: once per (N, batch), one process
    plan = [((n, batch, ranks), sides[1:] if j else sides) for n in args.layers
            for batch in args.batches for j, ranks in enumerate(args.ranks)]

    def run(key, side, _):
        n, batch, ranks = key
        python = tb_python if side == "torchbraid" else Path(sys.executable)
        cmd = [str(python), str(HERE / "bench_torch.py"), "--side", side, "--layers", str(n),
               "--batches", str(batch), "--cfactor", str(args.cfactor), "--repeats",
               str(args.repeats)] + (["--check"] if args.check else [])
        if ranks > 1 and side != "serial":
            cmd = [mpiexec_for(python), "-n", str(ranks), *cmd, "--mpi"]
        env = dict(os.environ, **THREAD_ENV)
        if side != "torchbraid":  # braidpy from this checkout, whatever the path
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                              env.get("PYTHONPATH")]))
        return run_for_result(cmd, env, args.timeout)

    results = alternating(plan, args.rounds, run, ["cpu", "wall"])
    rows = []
    for (n, batch, ranks), _ in plan:
        serial = min_median(results[(n, batch, args.ranks[0], "serial")][args.clock])
        b_lo = min_median(results[(n, batch, ranks, "braidpy")][args.clock])[0]
        for side in ("braidpy", "torchbraid"):
            r = results[(n, batch, ranks, side)]
            lo, med = min_median(r[args.clock])
            rows.append([n, batch, ranks, side, f"{seconds(lo)} [{seconds(med)}]",
                         f"{seconds(serial[0])} [{seconds(serial[1])}]",
                         f"{serial[0] / lo:.2f}x", f"{lo / b_lo:.2f}x" if side != "braidpy"
                         else ""] + ([f"{r['err_oneshot']:.1e}", f"{r['err_converged']:.1e}"]
                                     if args.check else []))
    some = next(iter(results.values()))
    version = next((r["version"] for r in results.values() if "version" in r), "?")
    print_table(["N", "batch", "ranks", "side", "one-shot (2,2) fwd+bwd", "serial torch",
                 "serial / side", "torchbraid / braidpy"]
                + (["grad err one-shot", "grad err converged"] if args.check else []), rows,
                title=f"{args.clock} time, min [median] of {args.rounds} x {args.repeats} "
                      f"calls; torch {some['torch']}, torchbraid {version}, 1 torch thread "
                      f"per rank; width 8, float64, cfactor {args.cfactor}, 2 levels, "
                      f"F-relaxation")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3, help="timed calls (per process)")
    p.add_argument("--cfactor", type=int, default=16)
    p.add_argument("--per-block", action="store_true",
                   help="also time LayerParallel with batch=False")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                   help="cpu: process CPU time (one thread: the wall time of an idle "
                        "machine, other jobs' load left out), wall: elapsed")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda (wall clock)")
    p.add_argument("--quick", action="store_true", help="smoke run: N 256, batch 1, 1 repeat")
    p.add_argument("--torchbraid", action="store_true",
                   help="serial, braidpy and torchbraid, each in a fresh process")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="with --torchbraid")
    p.add_argument("--rounds", type=int, default=1, help="with --torchbraid: processes per side")
    p.add_argument("--check", action="store_true", help="with --torchbraid: gradient errors "
                   "against autograd (one-shot and converged)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    p.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    p.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.batches, args.ranks, args.repeats = [256], [1], [1], 1
    if args.side:
        worker(args)
    elif args.torchbraid:
        against_torchbraid(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
