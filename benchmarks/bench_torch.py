"""Is braidpy.torch's LayerParallel one-shot gradient faster than plain torch
forward+backward through the same blocks? (one process)

N blocks x <- x + h tanh(Linear_n(x)), width 8, float64, T = 2, torch's default init
(fixed seed); loss = sum(output * fixed weights). Serial: a Python loop + loss.backward().
LayerParallel: one-shot (2, 2), warm, cf 16, 2 levels, F-relaxation; "grouped" (one
torch call per layer over stacked parameters), "vmap" (grouped=False), --per-block
(batch=False). One forward + backward from zeroed gradients after two warm-ups, process
CPU time (--clock wall: elapsed); sides alternate within each repeat; min (median).
--device cuda: on the GPU, wall clock after synchronize. ratio = serial / LayerParallel.

Run: python benchmarks/bench_torch.py [--layers 1024 4096] [--batches 1 32] [--repeats R]
     [--per-block] [--cfactor C] [--clock cpu|wall] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch
from _harness import min_median, print_table, seconds

from braidpy.torch import LayerParallel

SEED = 1291


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cfactor", type=int, default=16)
    p.add_argument("--per-block", action="store_true",
                   help="also time LayerParallel with batch=False")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                   help="cpu: this process's CPU time (default; with one torch thread it "
                        "equals the wall time on an idle machine and ignores other jobs' "
                        "load), wall: elapsed time")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda (wall clock)")
    p.add_argument("--quick", action="store_true", help="smoke run: N 256, 1 repeat")
    return p.parse_args(argv)


def blocks_of(n, width, device="cpu"):
    torch.manual_seed(SEED)
    return [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).double()
            .to(device) for _ in range(n)]


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def timed(fn, clock, device):
    start = clock()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return clock() - start


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def main(argv=None):
    args = parse_args(argv)
    if args.quick:
        args.layers, args.repeats = [256], 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        args.clock = "wall"  # the CPU clock misses the GPU's work
    rows = []
    for n in args.layers:
        for batch in args.batches:
            blocks = blocks_of(n, args.width, device)
            h = 2.0 / n
            x = torch.randn(batch, args.width, dtype=torch.float64,
                            generator=torch.Generator().manual_seed(SEED)).to(device)
            wts = torch.randn(batch, args.width, dtype=torch.float64,
                              generator=torch.Generator().manual_seed(SEED + 1)).to(device)

            def serial():
                for b in blocks:
                    b.zero_grad()
                u = x
                for b in blocks:
                    u = u + h * b(u)
                (u * wts).sum().backward()

            sides = {"serial": serial}
            common = dict(oneshot=(2, 2), max_levels=2, cfactor=args.cfactor, nrelax=0)
            nets = {"grouped": LayerParallel(blocks, 2.0, **common),
                    "vmap": LayerParallel(blocks, 2.0, grouped=False, **common)}
            if args.per_block:
                nets["per-block"] = LayerParallel(blocks, 2.0, batch=False, **common)
            for name, net in nets.items():
                def run(net=net):
                    net.zero_grad()
                    (net(x) * wts).sum().backward()
                sides[name] = run
            times = {name: [] for name in sides}
            for fn in sides.values():  # warm-up (and the one-shot warm start)
                fn()
                fn()
            for _ in range(args.repeats):
                for name, fn in sides.items():
                    times[name].append(timed(fn, CLOCKS[args.clock], device))
            stats = {name: min_median(t) for name, t in times.items()}
            for name in nets:
                mn, md = stats[name]
                rows.append([n, batch, name, f"{seconds(stats['serial'][0])} "
                             f"[{seconds(stats['serial'][1])}]", f"{seconds(mn)} [{seconds(md)}]",
                             f"{stats['serial'][0] / mn:.2f}x", nets[name].batch_path])
            for net in nets.values():
                net.close()
    print_table(["N", "batch", "LayerParallel", "serial torch fwd+bwd",
                 "LayerParallel one-shot (2,2)", "serial / LP", "path"], rows,
                title=f"torch {torch.__version__} on {device_name(device)}, "
                      f"{torch.get_num_threads()} thread(s), "
                      f"{args.clock} time, width "
                      f"{args.width}, float64, cfactor {args.cfactor}, 2 levels, F-relaxation")


if __name__ == "__main__":
    main()
