"""One side of bench_vs_torchbraid.py: times one-shot forward+backward of one network.

Run by the driver, never by hand (though it works by hand):

    python _worker_torch.py --side braidpy --layers 1024 --batch 1 ...
    mpiexec -n 2 /path/to/tb-venv/bin/python _worker_torch.py --side torchbraid ...

Sides: ``serial`` (plain torch autograd through the blocks), ``braidpy``
(braidpy.torch.LayerParallel, this interpreter) and ``torchbraid``
(torchbraid.LayerParallel, run with the torchbraid virtualenv's interpreter).
Every side builds the same network from the same seed: N blocks
F_n(x) = tanh(Linear_n(x)), width W, float64, x <- x + (T/N) F_n(x), T = 2; loss
sum(y * wts). Both layer-parallel sides: cfactor C, 2 levels, F-relaxation,
``--iters`` (m1, m2) MGRIT iterations per forward / backward, warm-started from the
previous call. Two untimed warm-up calls, then ``--repeats`` timed calls of
zero_grad + forward + backward: process CPU time and wall time, under MPI the
slowest rank's (between barriers). ``--check`` adds, outside the timings, the
gradient of the last timed call and of a converged solve (abs_tol 1e-12, up to
50 iterations) against plain autograd on the same blocks (relative 2-norm error
over all parameters). Rank 0 prints one line ``RESULT <json>``.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import torch

SEED = 1291
T_FINAL = 2.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=["serial", "braidpy", "torchbraid"], required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--cfactor", type=int, default=16)
    p.add_argument("--iters", type=int, nargs=2, default=[2, 2], metavar=("M1", "M2"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", action="store_true")
    p.add_argument("--mpi", action="store_true", help="run on MPI.COMM_WORLD")
    return p.parse_args(argv)


def blocks_of(n: int, width: int) -> list:
    """The network's blocks, identical on every side and rank (same seed, same order)."""
    torch.manual_seed(SEED)
    return [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).double()
            for _ in range(n)]


def data(batch: int, width: int):
    x = torch.randn(batch, width, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(SEED))
    wts = torch.randn(batch, width, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(SEED + 1))
    return x, wts


def serial_gradient(blocks, x, wts) -> torch.Tensor:
    """Plain autograd through the blocks: all parameters' gradients, flattened."""
    for b in blocks:
        b.zero_grad()
    u, h = x, T_FINAL / len(blocks)
    for b in blocks:
        u = u + h * b(u)
    (u * wts).sum().backward()
    return torch.cat([p.grad.flatten() for b in blocks for p in b.parameters()])


class Serial:
    def __init__(self, args, comm, blocks):
        self.blocks, self.h = blocks, T_FINAL / len(blocks)

    def step(self, x, wts):
        for b in self.blocks:
            b.zero_grad()
        u = x
        for b in self.blocks:
            u = u + self.h * b(u)
        (u * wts).sum().backward()

    def gradient(self):  # {layer index: flat gradient} of this rank's own layers
        return {i: torch.cat([p.grad.flatten() for p in b.parameters()])
                for i, b in enumerate(self.blocks)}

    def close(self):
        pass


class Braidpy:
    def __init__(self, args, comm, blocks, converged=False):
        from braidpy.torch import LayerParallel

        common = dict(cfactor=args.cfactor, max_levels=2, nrelax=0)
        if converged:
            common.update(abs_tol=1e-12, max_iter=50)
        else:
            common["oneshot"] = tuple(args.iters)
        self.net = LayerParallel(blocks, T_FINAL, comm=comm, **common)

    def step(self, x, wts):
        self.net.zero_grad()
        (self.net(x) * wts).sum().backward()

    def gradient(self):
        return {int(k): torch.cat([p.grad.flatten() for p in b.parameters()])
                for k, b in self.net.blocks.items()}

    def close(self):
        self.net.close()


class Torchbraid:
    """torchbraid.LayerParallel set up like braidpy's side.

    torchbraid builds each layer by calling ``layer_block()`` (no index), so the
    weights are copied afterwards from ``blocks`` (the same seed as every side).
    Its ODEBlock steps x + dt F(x) with dt = Tf / N.
    """

    def __init__(self, args, comm, blocks, converged=False):
        import torchbraid

        width = args.width
        iters = 50 if converged else None
        net = torchbraid.LayerParallel(
            comm, lambda: torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()),
            len(blocks), T_FINAL, max_fwd_levels=2, max_bwd_levels=2,
            max_iters=iters or args.iters[0])
        net.setPrintLevel(0)
        net.setCFactor(args.cfactor)
        net.setNumRelax(0)             # F-relaxation (its fine level always is)
        # skip stays off (torchbraid's default): XBraid's skip=1 would skip the first
        # down-cycle's relaxation of every warm-started call (braidpy skips only cold
        # starts), and the one-shot gradient would stop improving between calls.
        if converged:
            net.fwd_app.setAbsTol(1e-12)
            net.bwd_app.setAbsTol(1e-12)
        else:
            net.setFwdMaxIters(args.iters[0])
            net.setBwdMaxIters(args.iters[1])
        start = net.fwd_app.start_layer
        self.layers = range(start, start + len(net.layer_models))
        with torch.no_grad():
            for i, layer in zip(self.layers, net.layer_models):
                layer.layer.load_state_dict(blocks[i].state_dict())
        self.net = net

    def step(self, x, wts):
        self.net.zero_grad()
        (self.net(x) * wts).sum().backward()

    def gradient(self):
        return {i: torch.cat([p.grad.flatten() for p in layer.parameters()])
                for i, layer in zip(self.layers, self.net.layer_models)}

    def close(self):
        pass


SIDES = {"serial": Serial, "braidpy": Braidpy, "torchbraid": Torchbraid}


def gathered(comm, local: dict, n: int):
    """All layers' gradients in layer order on rank 0 (None elsewhere)."""
    parts = [local] if comm is None else comm.gather(local, root=0)
    if parts is None:
        return None
    merged = {}
    for part in parts:
        merged.update(part)
    assert sorted(merged) == list(range(n)), sorted(merged)[:5]
    return torch.cat([merged[i] for i in range(n)])


def timed(fn, comm) -> tuple:
    gc.collect()
    if comm is not None:
        comm.Barrier()
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if comm is not None:
        from mpi4py import MPI

        cpu, wall = comm.allreduce(cpu, op=MPI.MAX), comm.allreduce(wall, op=MPI.MAX)
    return cpu, wall


def rel_err(g, ref) -> float:
    return float((g - ref).norm() / ref.norm())


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    comm = None
    if args.mpi or args.side == "torchbraid":  # torchbraid always runs on a communicator
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if args.side == "torchbraid":
        # torchbraid allocates its initial states and rank 0's copy of the output with
        # the default dtype: float64 networks need it to be float64.
        torch.set_default_dtype(torch.float64)
    rank = 0 if comm is None else comm.Get_rank()
    blocks = blocks_of(args.layers, args.width)
    x, wts = data(args.batch, args.width)
    side = SIDES[args.side](args, comm, blocks)
    for _ in range(2):
        side.step(x, wts)
    cpu, wall = [], []
    for _ in range(args.repeats):
        c, w = timed(lambda: side.step(x, wts), comm)
        cpu.append(c)
        wall.append(w)
    result = {"cpu": cpu, "wall": wall, "ranks": 1 if comm is None else comm.Get_size(),
              "torch": torch.__version__}
    if args.side == "torchbraid":
        from importlib import metadata

        result["version"] = metadata.version("torchbraid")
    if args.check and args.side != "serial":
        oneshot = gathered(comm, side.gradient(), args.layers)
        side.close()
        exact = SIDES[args.side](args, comm, blocks, converged=True)
        exact.step(x, wts)
        conv = gathered(comm, exact.gradient(), args.layers)
        if rank == 0:
            ref = serial_gradient(blocks_of(args.layers, args.width), x, wts)
            result["err_oneshot"] = rel_err(oneshot, ref)
            result["err_converged"] = rel_err(conv, ref)
        exact.close()
    else:
        side.close()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
