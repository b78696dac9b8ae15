"""XBraid's spatial-coarsening runs under mpiexec (see test_spatial_coarsen.py).

    mpiexec -n P python tests/mpi_spatial_coarsen_driver.py P OUT.json

Every case of spatial_cases.py that XBraid ran on P ranks, through braidpy on P ranks
(with and without the batched step; -sc 1 with
array-api-strict states too); rank 0 writes the results as JSON.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402
from mpi_world import expect_world  # noqa: E402

COMM = MPI.COMM_WORLD


class Broken(Exception):
    pass


def failures():
    """(exception type, message) of a solve whose coarsen (then refine) raises on the last
    rank at its 5th call, on every rank."""
    import spatial_cases as s
    import braidpy

    got = {}
    for which in ("coarsen", "refine"):
        app = s.Advection(64, 1)
        inner = getattr(app, which)
        calls = [0]

        def failing(u, status, inner=inner, which=which):
            calls[0] += 1
            if COMM.rank == COMM.size - 1 and calls[0] == 5:
                raise Broken(f"{which} failed on purpose")
            return inner(u, status)

        setattr(app, which, failing)
        try:
            braidpy.solve(app, 0.0, 5.0, 128, comm=COMM, **s.burgers_options())
            got[which] = ("ok", "")
        except Exception as exc:  # noqa: BLE001 - reported
            got[which] = (type(exc).__name__, str(exc))
    return got


def main():
    nranks, path = int(sys.argv[1]), sys.argv[2]
    expect_world(COMM, nranks)
    import spatial_cases as s

    out = {}
    for c in s.CASES:
        if c["nranks"] == nranks:
            out[c["command"]] = s.run_case(c, COMM)
            out[c["command"] + " batched"] = s.run_case(c, COMM, batched=True)
            if c["example"] == "drive-burgers-1D" and c["sc"] == 1 and "options" not in c:
                out[c["command"] + " array-api-strict"] = s.run_strict(c, COMM)
    out["failures"] = COMM.gather(failures())
    # The final values live on the last rank: gather them to rank 0.
    fails = out.pop("failures")
    finals = COMM.gather({k: v.pop("final") for k, v in out.items()})
    out["failures"] = fails
    for k, v in out.items():
        if k == "failures":
            continue
        v["final"] = next((f[k] for f in finals[::-1] if f[k] is not None), None) \
            if COMM.rank == 0 else None
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
