"""Does rank 0's kept heap slow a gradient on ranks that share cores? (issue 17)

Under ``mpiexec -n 4`` on a 2-core machine (MPICH's throttle set, as for any run with
more ranks than cores): the calibration's oversubscribed gradient (dense width 8, 32
layers, 1000 samples, two levels, cf 4, one-shot (1, 1)) is timed in fresh processes,
then after rank 0 alone ran ``braidpy calibrate``'s layer calls (up to 64 rows of 4000
samples, freed memory kept, as calibrate keeps it), then once more; with ``--trim``
every rank first gives its kept heap back (``release_freed_memory``, what calibrate now
does before such gradients). Each figure is the median of ``--repeats`` gradients in ms.

    MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT=1 \\
        mpiexec -n 4 python benchmarks/bench_calibration_heap.py [--trim]

Run it several times: the slow state comes in some sets of processes, not in all
(docs/performance.md, "The calibration's heap").
"""

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from braidpy.adjoint import GradientSolver
from braidpy.nn import ResNet, ResNetApp
from braidpy.perf.allocator import keep_freed_memory, release_freed_memory
from braidpy.perf.calibrate import calibrate_layer


def median_gradient_ms(comm, app, net, repeats):
    """The median wall time of ``repeats`` warm gradients across ``comm`` (slowest rank)."""
    solver = GradientSolver(app, 0.0, net.tstop, net.nlayers, oneshot=(1, 1),
                            primal={"max_levels": 2, "cfactor": 4}, comm=comm)
    try:
        solver.evaluate()
        walls = []
        for _ in range(repeats):
            comm.Barrier()
            start = time.perf_counter()
            solver.evaluate()
            wall = np.array([time.perf_counter() - start])
            comm.Allreduce(MPI.IN_PLACE, wall, op=MPI.MAX)
            walls.append(float(wall[0]) * 1e3)
    finally:
        solver.close()
    return statistics.median(walls)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trim", action="store_true", help="give the kept heap back first")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    keep_freed_memory()
    comm = MPI.COMM_WORLD
    net = ResNet((8,), 2, width=8, nlayers=32, kernel=1)
    rng = np.random.default_rng(9)
    X = rng.standard_normal((1000, 8))
    C = np.eye(2)[rng.integers(0, 2, 1000)]
    app = ResNetApp(net, net.init_params(seed=5, scale=0.1), X, C)
    fresh = median_gradient_ms(comm, app, net, args.repeats)
    if comm.Get_rank() == 0:
        calibrate_layer("dense", (8,), 1, samples=[16, 128, 1000, 4000],
                        rows=[1, 4, 16, 64], repeats=5)
    comm.Barrier()
    if args.trim:
        release_freed_memory()
    after = [median_gradient_ms(comm, app, net, args.repeats) for _ in range(2)]
    if comm.Get_rank() == 0:
        print(f"{comm.Get_size()} ranks, trim {args.trim}: fresh {fresh:.1f} ms; after "
              f"rank 0's layer calls {after[0]:.1f}, again {after[1]:.1f} ms")


if __name__ == "__main__":
    main()
