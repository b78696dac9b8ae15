"""Faults in training steps outside the solves, under mpiexec (test_training_faults.py).

    mpiexec -n P python tests/mpi_training_faults_driver.py P OUT.json

Every case trains a small network on P ranks while one rank (the victim) fails at one
place of a step that is not inside a solve: the regularizer, the optimizer's own work,
the line search between two evaluations, the elastic averaging's local part, the
quality check's exact gradient (serial backpropagation of blocks of samples shared
out over the layer ranks), validation, the step report, checkpointing, the stopping
rule; by raising, or by a
Ctrl-C (SIGINT to itself, which braidpy defers to its next agreement point). Rank 0
writes, per case and rank, what training came to and at which step it stopped. Each
case prints its name first, so a hang killed by the test's timeout names it.
"""

import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from braidpy.nn import ResNet  # noqa: E402
from braidpy.parallel import ProcessGrid  # noqa: E402
from braidpy.parallel.agree import agreed, safe_text  # noqa: E402
from braidpy.parallel.collectives import allgather_texts  # noqa: E402
from braidpy.train import TrainConfig, Trainer  # noqa: E402
from train_cases import reference_block_rows  # noqa: E402

COMM = MPI.COMM_WORLD
CASE_SECONDS = 20.0  # a case takes well under a second; past this it hung
FAIL_AT = 2  # the victim fails in its second step (or second call of the place)
MGRIT = dict(cfactor=2, max_levels=2, abs_tol=1e-10)


class Planted(Exception):
    """The fault a case plants (distinct from anything braidpy raises)."""


def victim():
    """The misbehaving rank: the last one (a middle one of 4 would be a data group's
    first layer rank; the last is a layer rank of the last group)."""
    return COMM.Get_size() - 1


def fire(kind):
    if kind == "error":
        raise Planted("planted fault")
    os.kill(os.getpid(), signal.SIGINT)  # deferred: the next agreement point delivers it


def failing_after(fn, kind, calls=FAIL_AT):
    """``fn`` that fires on its ``calls``-th call on the victim rank (once)."""
    count = [0]

    def wrapper(*args, **kwargs):
        count[0] += 1
        if COMM.Get_rank() == victim() and count[0] == calls:
            fire(kind)
        return fn(*args, **kwargs)
    return wrapper


def problem(samples=24, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(samples, 2))
    C = np.eye(3)[rng.integers(0, 3, size=samples)]
    return ResNet((2,), 3, width=4, nlayers=8, activation="tanh"), X, C


LAYOUTS = {
    # name: (grid shape or None for layers over every rank, mode, optimizer)
    "layers-lbfgs": (None, "oneshot", "lbfgs"),
    "layers-adam": (None, "oneshot", "adam"),
    "data-lbfgs": ("data", "serial", "lbfgs"),
    "easgd": ("data", "serial", "easgd"),
    "grid-oneshot": ("grid", "oneshot", "lbfgs"),
}

PLACES = ["regularizer", "optimizer", "line search", "elastic averaging", "quality check",
          "validation", "report", "checkpoint", "stopping rule"]


def applies(layout, place):
    optimizer = LAYOUTS[layout][2]
    if place == "line search":
        return optimizer == "lbfgs"
    if place == "elastic averaging":
        return optimizer == "easgd"
    if place == "quality check":
        return LAYOUTS[layout][1] == "oneshot"
    return True


def make_trainer(layout, checkpoint):
    shape, mode, optimizer = LAYOUTS[layout]
    net, X, C = problem()
    size = COMM.Get_size()
    grid = None
    if shape == "data":
        grid = ProcessGrid(COMM, data=size)
    elif shape == "grid":
        grid = ProcessGrid(COMM, data=2, layers=size // 2) if size >= 4 else \
            ProcessGrid(COMM, data=size)
    cfg = TrainConfig(mode=mode, optimizer=optimizer, iterations=4, validate_every=1,
                      lr=0.01 if optimizer == "adam" else 0.05, mgrit=MGRIT,
                      checkpoint=checkpoint, checkpoint_every=1, seed=1)
    comm = COMM if grid is None else None
    return Trainer(net, (X, C), (X[:12], C[:12]), cfg, comm=comm, grid=grid)


def plant(trainer, place, kind):
    """Arm the fault; returns the on_step callback (the report's place)."""
    if place == "regularizer":
        trainer.regularizer = failing_after(trainer.regularizer, kind)
    elif place == "optimizer":
        trainer.optimizer.step = failing_after(trainer.optimizer.step, kind)
    elif place == "line search":  # the optimizer's own work before an evaluation
        clean = trainer.optimizer.step

        def faulty(params, loss, grad, objective):
            return clean(params, loss, grad, failing_after(objective, kind, calls=1))
        trainer.optimizer.step = _on_step_number(faulty, clean, FAIL_AT)
    elif place == "elastic averaging":  # EASGD's local work before its reduction
        hook = trainer.optimizer.before_reduction
        trainer.optimizer.before_reduction = failing_after(hook, kind)
    elif place == "quality check":  # one block's serial backpropagation, on the victim
        trainer.quality_check_every = 1
        trainer.net.loss_and_gradient = failing_after(trainer.net.loss_and_gradient, kind)
    elif place == "validation":
        trainer._validation_data = failing_after(trainer._validation_data, kind)
    elif place == "checkpoint":  # a local part of the state, after its collectives
        trainer._data_shapes = failing_after(trainer._data_shapes, kind)
    elif place == "stopping rule":
        trainer.should_stop = failing_after(trainer.should_stop, kind)
    if place == "report":
        return failing_after(lambda record: None, kind)
    return None


def _on_step_number(faulty, clean, n):
    """The optimizer's step: ``faulty`` at the n-th call, ``clean`` otherwise."""
    count = [0]

    def step(*args):
        count[0] += 1
        return (faulty if count[0] == n else clean)(*args)
    return step


def run_case(layout, place, kind, tmp):
    checkpoint = str(tmp / f"{layout}-{place}-{kind}.ckpt".replace(" ", "_"))
    trainer = make_trainer(layout, checkpoint if place == "checkpoint" else None)
    on_step = plant(trainer, place, kind)
    start = time.monotonic()
    # Fail fast: a hang ends this process (mpiexec then stops the others) naming the
    # case, instead of waiting for the test's timeout.
    watchdog = threading.Timer(CASE_SECONDS, _hung, args=(f"{layout}/{place}/{kind}",))
    watchdog.daemon = True
    watchdog.start()
    try:
        with reference_block_rows(2):  # every layer rank has blocks of the 24 samples
            trainer.run(on_step=on_step)
        outcome = ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        outcome = [type(exc).__name__, safe_text(exc)]
    finally:
        watchdog.cancel()
    return {"outcome": outcome, "iteration": trainer.iteration,
            "seconds": time.monotonic() - start}


def _hung(name):
    print(f"HUNG: case {name} did not end within {CASE_SECONDS:g} s on rank "
          f"{COMM.Get_rank()}", file=sys.stderr, flush=True)
    os._exit(4)


#: Set-up cases: the victim rank alone is given something else.
SETUP = {
    "lr": lambda net, X, C, cfg, params: (net, X, C, dict(cfg, lr=0.02), params),
    "data": lambda net, X, C, cfg, params: (net, _nudged(X), C, cfg, params),
    "network": lambda net, X, C, cfg, params: (
        ResNet((2,), 3, width=4, nlayers=6, activation="tanh"), X, C, cfg, None),
    "initial parameters": lambda net, X, C, cfg, params: (net, X, C, cfg, params + 1e-12),
    "nan data": lambda net, X, C, cfg, params: (net, _nudged(X, np.nan), C, cfg, params),
}


def _nudged(X, value=None):
    X = X.copy()
    X[3, 1] = X[3, 1] + 1e-9 if value is None else value
    return X


def run_setup_case(name):
    """Build a data x layer trainer (layers only at 2 ranks) with the victim given
    something else; returns this rank's outcome."""
    net, X, C = problem()
    cfg = dict(mode="oneshot", optimizer="adam", iterations=2, mgrit=MGRIT, seed=1)
    params = net.init_params(1, 0.1)
    if COMM.Get_rank() == victim():
        net, X, C, cfg, params = SETUP[name](net, X, C, cfg, params)
    grid = ProcessGrid(COMM, data=2, layers=COMM.Get_size() // 2) if COMM.Get_size() >= 4 \
        else None
    try:
        trainer = Trainer(net, (X, C), None, TrainConfig(**cfg), params=params,
                          comm=COMM if grid is None else None, grid=grid)
        trainer.run()
        return ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        return [type(exc).__name__, safe_text(exc)]


def run_naming_case():
    """A failure in an agreement over a sub-communicator (the last two ranks, as a data
    group's layer ranks are): the others there name the failing rank as mpiexec
    numbers it, not by its rank in the sub-communicator."""
    sub = COMM.Split(COMM.Get_rank() // 2, COMM.Get_rank())
    try:
        with agreed(sub, "a block of the last two ranks"):
            if COMM.Get_rank() == victim():
                raise Planted("planted fault")
        return ["ok", ""]
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        return [type(exc).__name__, safe_text(exc)]
    finally:
        sub.Free()


def main():
    out = Path(sys.argv[2])
    try:
        from mpi_world import expect_world

        expect_world(COMM, sys.argv[1])
        results = {}
        for layout in LAYOUTS:
            for place in PLACES:
                if not applies(layout, place):
                    continue
                for kind in ("error", "sigint"):
                    name = f"{layout}/{place}/{kind}"
                    if COMM.Get_rank() == 0:
                        print("case", name, flush=True)
                    mine = run_case(layout, place, kind, out.parent)
                    # Texts only (no pickle): every rank's record to every rank.
                    every = allgather_texts(COMM, json.dumps(mine))
                    results[name] = [json.loads(t) for t in every]
        for name in SETUP:
            if COMM.Get_rank() == 0:
                print("set-up case", name, flush=True)
            every = allgather_texts(COMM, json.dumps(run_setup_case(name)))
            results[f"setup:{name}"] = [json.loads(t) for t in every]
        results["naming"] = [json.loads(t) for t in
                             allgather_texts(COMM, json.dumps(run_naming_case()))]
        results["size"] = COMM.Get_size()
        results["victim"] = victim()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(3)
    if COMM.Get_rank() == 0:
        out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
