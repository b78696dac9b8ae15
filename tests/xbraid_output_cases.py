"""XBraid's output-side settings on output_driver.c's problem (tests/data/xbraid_output.json,
made by tests/data/make_xbraid_output.py at 1, 2 and 4 processes): storage levels with a
step that reads ustop, and the residual history file of braid_WriteConvHistory.

Run serially by test_xbraid_output.py and under mpiexec by mpi_driver.py (suite "output")
at the rank count XBraid used.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
from mpi_world import assert_split
from xbraid_parity_cases import Ex01, driver_options

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_output.json").read_text())


def cases(nranks=None):
    return [c for c in DATA["cases"] if nranks is None or c["nranks"] == nranks]


class Ex01Res(Ex01):
    """output_driver.c with ``-res W``: the residual (1 + dt) ustop - u, and a step that
    solves (1 + dt) u_new = u + fstop only partly, from ustop: u_new = s + W (ustop - s)
    with s the exact solution."""

    def __init__(self, weight, **kw):
        super().__init__(record_syncs=False, **kw)
        self.weight = weight

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        s = (u[0] + (fstop[0] if fstop is not None else 0.0)) / (1.0 + t1 - t0)
        u[0] = s + self.weight * (ustop[0] - s)

    def residual(self, ustop, r, status):
        r[0] = (1.0 + status.t1 - status.t0) * ustop[0] - r[0]


def output_options(args):
    """(ntime, braidpy options, -res weight or None) for a case's driver arguments."""
    rest, extra, weight = [], {}, None
    k = 0
    while k < len(args):
        a = args[k]
        if a == "-storage":
            extra["storage"] = int(args[k + 1])
        elif a == "-rtol":  # XBraid's relative tolerance alone: no absolute test
            extra.update(rel_tol=float(args[k + 1]), abs_tol=0.0)
        elif a == "-timings":
            extra["timings"] = int(args[k + 1])
        elif a == "-res":
            weight = float(args[k + 1])
        elif a == "-convhist":
            pass
        else:
            rest.append(a)
            k += 1
            continue
        k += 2
    ntime, options = driver_options(rest)
    return ntime, {**options, **extra}, weight


def run_case(case, comm=None, batched=False):
    """What parity_driver prints for ``case`` and the residual history file's text."""
    ntime, options, weight = output_options(case["args"])
    app = Ex01Res(weight) if weight is not None else Ex01(record_syncs=False, batched=batched)
    with tempfile.TemporaryDirectory() as tmp:
        if comm is not None:  # one folder (rank 0's) on every rank: the options agree
            tmp = comm.bcast(tmp)
        if options.get("timings") == 2:  # every rank writes its timer file into tmp
            options["timer_file"] = str(Path(tmp) / "braid_timings")
        options["cycle_file"] = str(Path(tmp) / "braid.out.cycle")  # rank 0 writes it
        r = braidpy.solve(app, 0.0, 5.0, ntime, comm=comm, **options)
        if comm is not None:
            comm.barrier()
        timers = {p.name: p.read_text() for p in Path(tmp).glob("braid_timings_*.txt")}
        cycle = Path(options["cycle_file"])
        cycle_file = cycle.read_text() if cycle.exists() else None
        if comm is not None:
            comm.barrier()  # read before rank 0 removes the folder
    assert_split(comm, r.owned, len(r.times))
    final = f"{r.final[0]:.17e}" if r.final is not None else None
    if comm is not None:
        final = [f for f in comm.allgather(final) if f is not None][0]
        cycle_file = comm.bcast(cycle_file)  # rank 0 wrote it
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "convhist.txt"
        r.write_conv_history(path)
        convhist = path.read_text()
    return dict(iterations=r.iterations, final=final, convhist=convhist, timer_files=timers,
                cycle_file=cycle_file,
                residuals={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                               r.residuals)})


class Owners(Ex01):
    """Records, in its first sync, Status.proc for every index of every level (and one
    outside each end)."""

    def __init__(self):
        super().__init__(record_syncs=False)
        self.owners = None
        self.sync = self._owners

    def _owners(self, status):
        if self.owners is None:
            self.owners = [[status.proc(level, i) for i in range(-1, len(grid) + 1)]
                           for level, grid in enumerate(self.level_sizes(status))]

    @staticmethod
    def level_sizes(status):
        """Each level's points 0..n_l (n_l from the fine count and the cfactors)."""
        n, sizes = None, []
        for level in range(status.nlevels):
            n = OWNERS_NTIME if level == 0 else n // status.cfactor(level - 1)
            sizes.append(range(n + 1))
        return sizes


OWNERS_NTIME = 37


def run_owners(comm=None):
    app = Owners()
    braidpy.solve(app, 0.0, 5.0, OWNERS_NTIME, comm=comm, max_levels=3, cfactor=3, max_iter=2)
    return app.owners


def run_at(nranks, comm):
    out = {"owners": run_owners(comm)}
    for case in cases(nranks):
        out[case["id"]] = run_case(case, comm)
        if "-res" not in case["args"]:
            out[case["id"] + "/batched"] = run_case(case, comm, batched=True)
    return out
