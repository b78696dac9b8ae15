"""Counts the collectives of one Core.solve and makes the final value's packing fail on
the rank that holds it; writes one JSON file (rank 0).

    mpiexec -n P python tests/mpi_collectives_driver.py P OUT.json

The counts come from a stand-in for the Core's own communicator that passes every call
on to MPI and counts the collective ones by kind.
"""

import json
import sys
import traceback
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import braidpy  # noqa: E402
from mpi_world import expect_world  # noqa: E402

COMM = MPI.COMM_WORLD
# The MPI calls that every rank of the communicator makes together, by kind.
KINDS = {"Allgather": "allgather", "Iallgather": "allgather", "Allgatherv": "allgatherv",
         "Iallgatherv": "allgatherv", "Allreduce": "allreduce", "Iallreduce": "allreduce",
         "Bcast": "bcast", "Ibcast": "bcast", "Barrier": "barrier", "Ibarrier": "barrier",
         "Dup": "dup", "Idup": "dup", "Gather": "gather", "Scatter": "scatter"}
NTIME = 96
OPTIONS = dict(cfactor=4, max_levels=3, abs_tol=1e-10, max_iter=30)


class Counting:
    """A communicator that counts the collective calls made on it."""

    def __init__(self, comm):
        self.comm = comm
        self.calls = Counter()

    def __getattr__(self, name):
        if name in KINDS:
            self.calls[KINDS[name]] += 1
        return getattr(self.comm, name)


class Decay(braidpy.App):
    """u' = -u with every callback in Python; bufpack counts its calls and can fail at
    its n-th."""

    def __init__(self):
        super().__init__()
        self.packs = 0
        self.fail_at = None

    def init(self, t):
        return np.ones(3) if t == self.tstart else np.zeros(3)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)

    def bufpack(self, u):
        self.packs += 1
        if self.packs == self.fail_at:
            raise ZeroDivisionError(f"bufpack call {self.packs} failed on purpose")
        return u.tobytes()

    def bufunpack(self, buf):
        return np.frombuffer(buf, dtype=np.float64).copy()


def outcome(run):
    try:
        return ["ok", run()]
    except Exception as error:  # noqa: BLE001 - recorded for the test to judge
        return [type(error).__name__, str(error), getattr(error, "__notes__", [])]


def counted_solve():
    """Collectives of the second solve (warm) and of a cold one, by kind."""
    core = braidpy.Core(Decay(), 0.0, 4.0, NTIME, comm=COMM, **OPTIONS)
    out = {}
    for name, before in (("cold", None), ("warm", None), ("cold_again", core.reset_guess)):
        if before is not None:
            before()
        counting = Counting(core._tcomm.comm) if core._tcomm is not None else None
        if counting is not None:
            core._tcomm.comm = counting
        try:
            result = core.solve()
        finally:
            if counting is not None:
                core._tcomm.comm = counting.comm
        out[name] = {"calls": dict(counting.calls) if counting else {},
                     "iterations": result.iterations, "owned": list(result.owned),
                     "final": None if result.final is None else result.final.tolist()}
    core.close()
    return out


def failing_pack():
    """The holder's last bufpack call of a solve packs the final value: counted on one
    Core, then made to fail on a second Core with the same problem. Afterwards the
    second Core solves again (nothing of the failed exchange is left behind)."""
    clean = Decay()
    core = braidpy.Core(clean, 0.0, 4.0, NTIME, comm=COMM, **OPTIONS)
    expected = core.solve().final
    core.close()
    holder = core.owned[-1] == NTIME
    app = Decay()
    app.fail_at = clean.packs if holder else None
    core = braidpy.Core(app, 0.0, 4.0, NTIME, comm=COMM, **OPTIONS)
    first = outcome(lambda: core.solve().final.tolist())
    app.fail_at = None
    again = outcome(lambda: core.solve().final.tolist())
    core.close()
    return {"holder": bool(holder), "first": first, "again": again,
            "expected": expected.tolist(), "packs": clean.packs}


def main():
    nranks = expect_world(COMM, sys.argv[1])
    out = {}
    for name, case in (("counts", counted_solve), ("failing_pack", failing_pack)):
        try:
            out[name] = case()
        except Exception:  # noqa: BLE001 - a driver bug: reported, not hidden
            out[name] = {"crashed": traceback.format_exc()}
    gathered = COMM.gather(out, root=0)
    if COMM.rank == 0:
        Path(sys.argv[2]).write_text(json.dumps({"nranks": nranks, "ranks": gathered}))


if __name__ == "__main__":
    main()
