"""Do this machine's cores scale: do k processes of the same NumPy work at once each run
as fast as one? (VM cores may be hyperthreads or shared.)

Timed: steps u += h tanh(u K) on 1000 x 8 in k processes started together, one BLAS
thread each, against one process's time (scaling.py runs it at its most ranks).

    python benchmarks/cpu_scaling.py [--processes 1 2 4 8] [--steps 4000]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import statistics
import time


def work(steps: int, start, out) -> None:
    import numpy as np

    rng = np.random.default_rng(os.getpid())
    u, K = rng.standard_normal((1000, 8)), rng.standard_normal((8, 8)) / 8
    start.wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        u += 0.01 * np.tanh(u @ K)
    out.put(time.perf_counter() - t0)


def run(k: int, steps: int) -> list:
    """Seconds of each of k forked processes doing ``steps`` steps at once."""
    try:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(1)
    except ImportError:
        limits = contextlib.nullcontext()
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=work, args=(steps, start, out)) for _ in range(k)]
    with limits:
        for p in procs:
            p.start()
        time.sleep(0.2)
        start.set()
        times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return times


def check(k: int, steps: int, one: float = 0.0) -> dict:
    """k processes at once: seconds each (mean, max) and the mean over ``one`` process's
    time (unless given: this run's for k = 1, else measured here)."""
    many = run(k, steps)
    one = one or statistics.mean(many if k == 1 else run(1, steps))
    return {"processes": k, "steps": steps, "one_seconds": one,
            "each_seconds_mean": statistics.mean(many), "each_seconds_max": max(many),
            "ratio": statistics.mean(many) / one}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--steps", type=int, default=4000)
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # numpy is imported in the children
    print(f"{os.cpu_count()} cores reported; {args.steps} steps of u += h tanh(u K), "
          f"u 1000x8, per process")
    one = 0.0
    for k in args.processes:
        c = check(k, args.steps, one)
        one = c["one_seconds"]
        print(f"  {k:3d} processes at once: {c['each_seconds_mean'] * 1e3:8.1f} ms each (max "
              f"{c['each_seconds_max'] * 1e3:.1f}); {c['ratio']:.2f}x one process's time",
              flush=True)


if __name__ == "__main__":
    main()
