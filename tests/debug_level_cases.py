"""XBraid's access level 3 and print level 3 cases of tests/data/xbraid_debug_levels.json
(parity_driver.c -access3 / -print3) run through braidpy: serially
(test_xbraid_debug_levels.py) and at XBraid's rank count (mpi_driver.py debug)."""

import contextlib
import io
import json
from pathlib import Path

from mpi_world import assert_split
from xbraid_parity_cases import Ex01, Ex01Res, driver_options

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_debug_levels.json").read_text())


def cases(nranks=None):
    return [c for c in DATA["cases"] if nranks is None or c["nranks"] == nranks]


def recording(cls):
    """cls (the driver's app) whose access records what the driver's access writes."""

    class Recorder(cls):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.accesses = []
            self.steps = []

        def record_step(self, status, index, t0, t1):
            self.steps.append(  # caller iteration level index ntime done t0 t1
                f"{status.caller_code} {status.iteration} {status.level} {index} "
                f"{status.ntime} {int(status.done)} {t0:.17e} {t1:.17e}")

        def step(self, u, t0, t1, status, **rhs):
            self.record_step(status, status.index, t0, t1)
            super().step(u, t0, t1, status, **rhs)

        def _step_stacked(self, U, t0s, t1s, status):
            for k in range(len(U)):
                self.record_step(status, int(status.indices[k]), float(t0s[k]),
                                 float(t1s[k]))
            super()._step_stacked(U, t0s, t1s, status)

        def access(self, u, status):
            rnorm = -1.0 if status.rnorm is None else status.rnorm
            self.accesses.append(  # caller iteration level index done t rnorm u
                f"{status.caller_code} {status.iteration} {status.level} {status.index} "
                f"{int(status.done)} {status.t:.17e} {rnorm:.17e} {float(u[0]):.17e}")

    return Recorder


def run_case(case, comm=None, batched=False):
    """What parity_driver shows for ``case``: the printed lines XBraid's file keeps, the
    iteration count and this rank's access lines (every rank's, with comm)."""
    args = [a for a in case["args"] if a not in ("-access3", "-print3", "-steps")]
    ntime, options = driver_options(args)
    options.update(access_level=3 if "-access3" in case["args"] else 1,
                   print_level=3 if "-print3" in case["args"] else 1)
    res = "-res" in args
    if res:
        options["batch"] = False
    app = recording(Ex01Res if res else Ex01)(record_syncs=False, batched=batched)
    if "-fullres" in args:  # the full residual norm with -res's residual
        app.full_residual = lambda ustop, r, status: Ex01Res.residual(app, ustop, r, status)
    if "-sc" in args:
        app.coarsen = lambda u, status: 0.75 * u
        app.refine = lambda e, status: e.copy()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        r = braidpy.solve(app, 0.0, 5.0, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    printed = [s for s in out.getvalue().splitlines()
               if s.startswith(("  Braid:  time step", "  Braid: || r_"))]
    accesses, steps = {"0": app.accesses}, {"0": app.steps}
    if comm is not None:
        accesses = {str(k): a for k, a in enumerate(comm.allgather(app.accesses))}
        steps = {str(k): a for k, a in enumerate(comm.allgather(app.steps))}
        printed = comm.allgather(printed)[0]
    if "-access3" not in case["args"]:
        accesses = {}
    if "-steps" not in case["args"]:
        steps = {}
    return dict(printed=printed, iterations=r.iterations, accesses=accesses, steps=steps)


def by_iteration(lines):
    """Step lines per iteration, each iteration's sorted: the calls each rank makes in an
    iteration, not their order (braidpy's sweeps visit a rank's chains its own way)."""
    out = {}
    for line in lines:
        out.setdefault(line.split()[1], []).append(line)
    return {k: sorted(v) for k, v in out.items()}


def segments(lines):
    """Access lines cut where the caller or the iteration changes, each segment sorted:
    the calls XBraid and braidpy make in each sweep, without the order inside a sweep
    (XBraid walks a rank's intervals from the right, braidpy its own way)."""
    out = []
    for line in lines:
        key = tuple(line.split()[:2])  # caller, iteration
        if not out or out[-1][0] != key:
            out.append((key, []))
        out[-1][1].append(line)
    return [(key, sorted(group)) for key, group in out]


# Output files no rank can write: a device, a path under a device (no folder there).
BAD_OUTPUTS = {"cycle_file /dev/full": dict(cycle_file="/dev/full"),
               "cycle_file under /dev/null": dict(cycle_file="/dev/null/braid.out.cycle"),
               "timer_file under /dev/null": dict(timings=2, timer_file="/dev/null/timers")}


def output_failures(comm=None):
    """What each rank raises when a solve's timer or cycle file cannot be written:
    {case: [(exception type, message) per rank]}."""
    out = {}
    for name, options in BAD_OUTPUTS.items():
        try:
            braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, comm=comm, max_levels=2,
                          **options)
            got = ("none", "")
        except Exception as exc:  # noqa: BLE001 - recorded for the test to judge
            got = (type(exc).__name__, str(exc))
        out[name] = [got] if comm is None else comm.allgather(got)
    return out


def run_at(nranks, comm):
    out = {"output failures": output_failures(comm)}
    for case in cases(nranks):
        out[case["id"]] = run_case(case, comm)
        if "-res" not in case["args"]:
            out[case["id"] + "/batched"] = run_case(case, comm, batched=True)
    return out
