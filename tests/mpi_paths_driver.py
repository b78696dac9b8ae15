"""Ranks that take different paths through braidpy: one case per launch.

    mpiexec -n P python tests/mpi_paths_driver.py P OUT_DIR CASE

The last rank (the "odd" one) takes another path than its peers; every rank writes
OUT_DIR/rank<r>.json with its outcome (["ok"] or [error type, message]) before it
leaves. A rank that leaves through braidpy's exit notice writes its outcome first
("left"); what the exit hook prints goes to stderr, which the test reads.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402

import braidpy  # noqa: E402,F401 - as a program does on every rank, whichever path it takes

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
ODD = SIZE - 1
OPTIONS = dict(cfactor=2, max_levels=3, abs_tol=1e-10)


def write(out_dir, outcome):
    Path(out_dir, f"rank{RANK}.json").write_text(json.dumps(outcome))


def core():
    import braidpy
    from apps import Decay
    return braidpy.Core(Decay(), 0.0, 4.0, 64, comm=COMM, **OPTIONS)


def trainer():
    from train_cases import MGRIT, dense_problem
    from braidpy.train import TrainConfig, Trainer
    net, X, C = dense_problem(nlayers=8, batch=12)
    cfg = TrainConfig(mode="exact", optimizer="sgd", iterations=3, mgrit=MGRIT, seed=2)
    return Trainer(net, (X, C), None, cfg, comm=COMM)


def case_solve_once_more():
    c = core()
    c.solve()
    c.solve()
    if RANK == ODD:
        c.solve()  # once more than its peers, which have left


def case_solve_once_less():
    c = core()
    c.solve()
    if RANK != ODD:
        c.solve()  # the odd rank has left after one solve


def case_no_core():
    if RANK != ODD:
        core().solve()  # the odd rank never makes its Core and leaves


def case_no_core_blocked():
    if RANK != ODD:
        core().solve()
    else:  # never makes its Core: busy in its own code past the deadline
        time.sleep(float(os.environ["BRAIDPY_TIMEOUT"]) + 6)


def case_closed_alone():
    c = core()
    c.solve()
    if RANK == ODD:
        c.close()
    c.solve()


def case_early_exit():
    c = core()
    c.solve()
    if RANK == ODD:
        sys.exit(0)
    c.solve()


def case_serial_comm():
    import braidpy
    from apps import Decay
    comm = None if RANK == ODD else COMM
    braidpy.Core(Decay(), 0.0, 4.0, 64, comm=comm, **OPTIONS).solve()


def case_final_sweep_differs():
    core().solve(final_sweep=RANK != ODD)


def case_trainer_save_once_more(out_dir):
    t = trainer()
    t.step()
    if RANK == ODD:
        t.save(str(Path(out_dir, "extra.npz")))
    t.step()


def case_trainer_state_once_less():
    t = trainer()
    t.step()
    if RANK != ODD:
        t.state()
    t.run()


def layer_parallel():
    import torch
    from braidpy.torch import LayerParallel
    torch.manual_seed(3)
    blocks = [torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).double()
              for _ in range(8)]
    net = LayerParallel(blocks, tstop=1.0, comm=COMM, abs_tol=1e-12, cfactor=2)
    x = torch.ones(2, 3, dtype=torch.float64)
    net(x).sum().backward()  # forward #1, backward on every rank
    return net, x


def case_lp_skip_backward():
    net, x = layer_parallel()
    y = net(x)
    if RANK != ODD:
        y.sum().backward()  # the odd rank skips the backward of its forward #2
    net(x).sum().backward()


def case_lp_backward_twice():
    net, x = layer_parallel()
    y = net(x).sum()
    y.backward(retain_graph=True)
    if RANK == ODD:
        y.backward()  # a second backward of forward #2 on the odd rank only
    net(x).sum().backward()


def case_lp_skip_backward_and_leave():
    net, x = layer_parallel()
    y = net(x)
    if RANK != ODD:
        y.sum().backward()  # the odd rank skips it and leaves


def easgd(**options):
    from braidpy.train.easgd import AsyncEASGD
    return AsyncEASGD(COMM, **{"lr": 0.1, "rho": 0.5, "tau": 1, "momentum": 0.0, **options})


def easgd_train(opt, steps, size=3, stall=None):
    """The centre (rank 0) serves; a worker takes ``steps`` steps towards its own target
    in a session (``stall``: (step, seconds) it spends in its own code there)."""
    if opt.is_centre:
        return opt.serve(np.zeros(size))
    w = np.zeros(size)
    with opt.session():
        for step in range(steps):
            if stall is not None and step == stall[0]:
                time.sleep(stall[1])
            opt.step(w, 0.0, w - RANK)
    return w


def case_easgd_worker_leaves():
    opt = easgd()
    if RANK == ODD:  # steps outside a session, then leaves without telling the centre
        w = np.zeros(3)
        for _ in range(20):
            opt.step(w, 0.0, w - RANK)
        return
    easgd_train(opt, 600)


def case_easgd_step_once_more():
    opt = easgd()
    w = easgd_train(opt, 20)
    if RANK == ODD:  # one more step than its peers: the centre has stopped serving
        opt.step(w, 0.0, w - RANK)


def case_easgd_worker_busy():
    easgd_train(easgd(), 200, stall=(5, float(os.environ["BRAIDPY_TIMEOUT"]) + 4)
                if RANK == ODD else None)


def case_easgd_option_differs():
    easgd_train(easgd(tau=2 if RANK == ODD else 1), 20)


def case_easgd_centre_differs():
    easgd_train(easgd(centre=1 if RANK == ODD else 0), 20)


def case_easgd_size_differs():
    easgd_train(easgd(), 20, size=4 if RANK == ODD else 3)


def main():
    from mpi_world import expect_world
    expect_world(COMM, sys.argv[1])
    out_dir, name = sys.argv[2], sys.argv[3]
    case = globals()[f"case_{name}"]
    write(out_dir, ["left"])  # replaced below unless this rank leaves inside the case
    try:
        case(out_dir) if case.__code__.co_argcount else case()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the outcome is the test's subject
        write(out_dir, [type(exc).__name__, str(exc)])
        raise
    write(out_dir, ["ok"])


if __name__ == "__main__":
    main()
