"""LayerParallel built differently on one rank, under mpiexec (test_torch_mismatch.py).

    mpiexec -n P python tests/mpi_torch_mismatch_driver.py P OUT.json

The last rank alone is given another tstop, oneshot, number of blocks or option, or an
invalid tstop; every rank records what building and running the network came to.
Rank 0 writes the outcomes as JSON.
"""

import json
import sys
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from braidpy.parallel.agree import safe_text  # noqa: E402
from braidpy.parallel.collectives import allgather_texts  # noqa: E402
from braidpy.torch import LayerParallel  # noqa: E402

COMM = MPI.COMM_WORLD

CASES = {
    "tstop": lambda kw: dict(kw, tstop=1.5),
    "oneshot": lambda kw: dict(kw, oneshot=(1, 1)),
    "depth": lambda kw: dict(kw, blocks=kw["blocks"][:6]),
    "option": lambda kw: dict(kw, cfactor=4),
    "invalid tstop": lambda kw: dict(kw, tstop=-1.0),
}


def run(case):
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).double()
              for _ in range(8)]
    kw = dict(blocks=blocks, tstop=1.0, abs_tol=1e-12, cfactor=2)
    if COMM.Get_rank() == COMM.Get_size() - 1:
        kw = CASES[case](kw)
    try:
        net = LayerParallel(kw.pop("blocks"), comm=COMM, **kw)
        net(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
        return ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        return [type(exc).__name__, safe_text(exc)]


def main():
    try:
        from mpi_world import expect_world

        expect_world(COMM, sys.argv[1])
        results = {}
        for case in CASES:
            if COMM.Get_rank() == 0:
                print("case", case, flush=True)
            results[case] = [json.loads(t) for t in
                             allgather_texts(COMM, json.dumps(run(case)))]
        results["size"] = COMM.Get_size()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
