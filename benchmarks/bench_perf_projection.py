"""What speedups does the performance model project for the published configurations?
No timing: the model's, from a calibration of this machine. Günther et al., SIAM J. Math.
Data Sci. 2, 2020, Table 1 (Peaks, MNIST; N = 256 ... 2048 on N/4 cores, exact, one-shot
(2, 2) beside it); Kirby et al., IEEE HPEC 2020 (a 4096-layer conv ResNet on 4 ... 64
assumed V100s over 25 Gb/s Ethernet, against serial and model partitioning).

    python benchmarks/bench_perf_projection.py --calibration FILE [--iterations 6 6]
"""

from __future__ import annotations

import argparse
import dataclasses

from braidpy.perf import (CLUSTERS, Calibration, CostFit, LayerCosts, NetSpec, Strategy,
                          load_calibration, predict)
from braidpy.perf.calibration import layer_flops
from braidpy.perf.schedule import Cycle

# Günther et al. 2020, Table 1 (speedup of one gradient, N/4 cores) and Table 2 (training).
TABLE1 = {"peaks": {256: 1.5, 512: 2.5, 1024: 4.3, 2048: 7.7},
          "mnist": {256: 3.4, 512: 4.8, 1024: 10.5, 2048: 16.0}}
TABLE2 = {"peaks": (1024, 6.0), "mnist": (512, 8.5)}
# Kirby et al. 2020, sec. IV-D/E: up to 3.5x over serial (3 M parameters, training), and
# 1.3x (4 GPUs) / 10.2x (64 GPUs) over model partitioning (the 2 B parameter net).
KIRBY = {"serial": 3.5, "partitioned": {4: 1.3, 64: 10.2}}


def speedup_row(net, P, cycle, its, mode, cal, link):
    """(serial s, layer-parallel s) of one gradient on P ranks."""
    par = predict(net, Strategy(1, 1, P, cycle, its, mode), cal, p2p=link, small=link)
    ser = predict(net, Strategy(1, 1, 1, Cycle(ntime=net.nlayers, max_levels=1,
                                               batched=True), (1, 1)), cal)
    return ser.seconds, par.seconds


def gpu_calibration(cal: Calibration, tflops: float, launch: float) -> Calibration:
    """An assumed GPU: every call costs launch + multiply-adds / rate."""
    shape, k = (50, 28, 28), 7
    per_sample = layer_flops("conv", shape, k) * 2 / (tflops * 1e12)
    costs = {"fwd": CostFit(launch, per_sample), "adj": CostFit(launch, 2 * per_sample),
             "grad": CostFit(launch, per_sample), "vec": CostFit(launch / 4, 0.0)}
    layer = LayerCosts("conv-c50-28x28-k7 (assumed V100)", "conv", shape, k, costs)
    return dataclasses.replace(cal, layers=(layer,), callback_s=5e-6, solve_s=1e-4)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", required=True)
    p.add_argument("--iterations", type=int, nargs=2, default=[6, 6],
                   metavar=("PRIMAL", "ADJOINT"),
                   help="MGRIT iterations per exact gradient (Günther et al.'s 1e-5 drop)")
    p.add_argument("--network", choices=tuple(CLUSTERS), default="infiniband-100g")
    p.add_argument("--gpu-tflops", type=float, default=4.0)
    p.add_argument("--gpu-launch", type=float, default=20e-6, help="seconds per GPU call")
    args = p.parse_args(argv)
    cal, link = load_calibration(args.calibration), CLUSTERS[args.network]
    its = tuple(args.iterations)
    print(f"Günther et al. 2020, Table 1: one gradient, N/4 cores, cf 4, exact "
          f"({its[0]}/{its[1]} iterations), {args.network}")
    print(f"{'case':6s} {'N':>5s} {'P':>4s} {'serial s':>9s} {'parallel s':>11s} "
          f"{'speedup':>8s} {'paper':>6s}   {'one-shot m2/2':>13s}")
    for name, net0 in (("peaks", NetSpec("dense", (8,), 1, 5000, features=2, nclasses=5)),
                       ("mnist", NetSpec("conv", (8, 28, 28), 1, 500, kernel=3,
                                         features=784, nclasses=10))):
        for N, paper in TABLE1[name].items():
            net = dataclasses.replace(net0, nlayers=N)
            cyc = Cycle(ntime=N, max_levels=30, cfactor=4, batched=True)
            ser, par = speedup_row(net, N // 4, cyc, its, "exact", cal, link)
            _, one = speedup_row(net, N // 4, cyc, (2, 2), "oneshot", cal, link)
            print(f"{name:6s} {N:5d} {N // 4:4d} {ser:9.3f} {par:11.3f} {ser / par:7.1f}x "
                  f"{paper:5.1f}x   {ser / one:12.1f}x", flush=True)
    for name, (N, paper) in TABLE2.items():
        print(f"Günther et al. 2020, Table 2 ({name}, N {N}, {N // 4} cores): training "
              f"speedup {paper}x (one-shot m2/2 per gradient: see the last column)")

    gcal, eth = gpu_calibration(cal, args.gpu_tflops, args.gpu_launch), CLUSTERS["ethernet-25g"]
    # The paper states 50 channels and 7x7 kernels (the compute) and 3,248,524
    # parameters (the gradient allreduce), which 50x50x7x7 kernels cannot both be.
    net = NetSpec("conv", (50, 28, 28), 4096, 1, kernel=7, features=784, nclasses=10,
                  params=3_248_524)
    print(f"\nKirby et al. 2020: conv 50x28x28 k7, 4096 layers, 1 image, assumed V100 "
          f"({args.gpu_tflops} TFLOP/s, {args.gpu_launch * 1e6:.0f} us per call), "
          f"ethernet-25g, two MGRIT cycles each way, the best of levels x cfactor; "
          f"{net.nparams} parameters (the paper's count)")
    print(f"{'GPUs':>4s} {'MGRIT':>12s} {'serial s':>9s} {'MGRIT s':>9s} {'vs serial':>10s} "
          f"{'partitioned s':>14s} {'vs partitioned':>15s}")
    for P in (4, 8, 16, 32, 64):
        rows = [(speedup_row(net, P, Cycle(ntime=4096, max_levels=L, cfactor=cf, batched=True),
                             (2, 2), "oneshot", gcal, eth), f"L{L} cf{cf}")
                for L in (2, 3, 4, 6, 30) for cf in (4, 8, 16, 32)]
        (ser, par), label = min(rows, key=lambda row: row[0][1])  # the fastest MGRIT
        # Model partitioned: serial propagation, the state crossing P - 1 links each way.
        part = ser + 2 * (P - 1) * eth.seconds(8.0 * net.numbers)
        print(f"{P:4d} {label:>12s} {ser:9.4f} {par:9.4f} {ser / par:9.2f}x {part:14.4f} "
              f"{part / par:14.2f}x", flush=True)
    print(f"Kirby et al. 2020: up to {KIRBY['serial']}x over serial; over model "
          f"partitioning (2 B parameter net) {KIRBY['partitioned'][4]}x at 4 and "
          f"{KIRBY['partitioned'][64]}x at 64 GPUs")


if __name__ == "__main__":
    main()
