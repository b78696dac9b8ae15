"""An app with array-api-strict states on a non-default device, run serially (test_backends.py)
and at 2 ranks (mpi_backends_driver.py): received states must land on that device."""

import numpy as np
from mpi_world import assert_split

import braidpy


def strict_decay_app():
    import array_api_strict as xp

    device = xp.Device("device1")

    class StrictDecay(braidpy.App):
        """u' = -rates * u on array-api-strict's "device1"; any state on another device
        (a receive that ignored array_device, a silent host copy) fails the next step."""

        array_namespace = xp
        array_device = device

        def __init__(self):
            self.rates = xp.asarray([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]], device=device)

        def init(self, t):
            return xp.ones((2, 3), dtype=xp.float64, device=device)

        def step(self, u, t0, t1, status):
            u /= 1.0 + (t1 - t0) * self.rates

    return StrictDecay()


def _host(u):
    """Explicit host copy of a state for comparisons (never np.asarray on device1)."""
    return np.from_dlpack(u).tolist()


def run_strict(comm):
    """Iterations, residuals, every owned value and the final value, plus the devices
    the states were on; gathered in time order on every rank."""
    result = braidpy.solve(strict_decay_app(), 0.0, 2.0, 32, comm=comm, cfactor=2,
                           abs_tol=1e-12, max_iter=20)
    assert_split(comm, result.owned, len(result.times))
    local = [(i, _host(result.solution(index=i)), str(result.solution(index=i).device))
             for i in result.owned]
    parts = [local] if comm is None else comm.allgather(local)
    rows = sorted(x for p in parts for x in p)
    finals = [str(result.final.device)] if comm is None else comm.allgather(
        str(result.final.device))
    return dict(iterations=result.iterations, residuals=result.residuals,
                values=[v for _, v, _ in rows], devices=sorted({d for _, _, d in rows}),
                final=_host(result.final), final_devices=sorted(set(finals)))


def strict_decay_adjoint_app():
    """StrictDecay with the adjoint callbacks: J = |u_N|^2 / 2, gradient by the rates."""
    import array_api_strict as xp

    base = type(strict_decay_app())

    class StrictDecayAdjoint(base):
        def step_adjoint(self, w, u, t0, t1, status):
            w /= 1.0 + (t1 - t0) * self.rates

        def step_gradient(self, w, u, t0, t1, status):
            dt = t1 - t0
            g = -dt * u * w / (1.0 + dt * self.rates) ** 2
            return np.from_dlpack(g)  # the parameters' gradient lives on the host

        def terminal_objective(self, u):
            return 0.5 * float(xp.sum(u * u))

        def terminal_gradient(self, u):
            return xp.asarray(u, copy=True)

    return StrictDecayAdjoint()


def run_strict_adjoint(comm):
    """Objective and total gradient of the adjoint run (adjoint vectors cross ranks on
    device1 too), on every rank."""
    from braidpy.adjoint import gradient

    g = gradient(strict_decay_adjoint_app(), 0.0, 2.0, 32, comm=comm,
                 primal=dict(cfactor=2, abs_tol=1e-13, max_iter=30))
    return dict(objective=g.objective, total=g.total().tolist(),
                adjoint_iterations=g.adjoint.iterations)


def strict_training(comm, device=True, mode="exact", optimizer="lbfgs", iterations=3,
                    checkpoint=None):
    """A short training run of a dense ResNet: on array-api-strict's "device1" (where any
    host copy or mixed-device operation fails) or, device=False, on NumPy. Returns the
    trainer."""
    import array_api_strict as xp

    from braidpy.nn import ResNet
    from braidpy.train import TrainConfig, Trainer

    rng = np.random.default_rng(20261213)
    X, C = rng.uniform(-3, 3, (12, 2)), np.eye(3)[rng.integers(0, 3, 12)]
    Xv, Cv = rng.uniform(-3, 3, (6, 2)), np.eye(3)[rng.integers(0, 3, 6)]
    where = dict(xp=xp, device=xp.Device("device1")) if device else {}
    net = ResNet((2,), 3, width=4, nlayers=16, tstop=2.0, **where)
    config = TrainConfig(mode=mode, optimizer=optimizer, iterations=iterations, batch_size=6,
                         shuffle=True, tikhonov=1e-3, ddt=1e-3, classifier_reg=1e-4,
                         mgrit=dict(cfactor=4, abs_tol=1e-12), checkpoint=checkpoint,
                         checkpoint_every=2)
    trainer = Trainer(net, (X, C), (Xv, Cv), config, comm=comm)
    trainer.run()
    return trainer


def run_strict_training(comm):
    """strict_training's history numbers and final parameters (host copies, JSON values)."""
    trainer = strict_training(comm)
    keys = ("loss", "objective", "gradient_norm", "step_size", "val_accuracy")
    return dict(history=[[r[k] for k in keys] for r in trainer.history],
                params=trainer.state()["params"].tolist(),
                device=str(trainer.params.device))


def cupy_decay_app(cp):
    """u' = -rates * u with CuPy states (real CuPy, or tests/fake_cupy.py as ``cupy``);
    the receiving rank builds CuPy arrays (array_namespace), so every message between
    ranks is packed and unpacked by braidpy.backends.cupy.CupyBackend."""

    class CupyDecay(braidpy.App):
        array_namespace = cp

        def __init__(self):
            self.rates = cp.asarray(np.array([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]]))

        def init(self, t):
            return cp.asarray(np.ones((2, 3)))

        def step(self, u, t0, t1, status):
            u /= 1.0 + (t1 - t0) * self.rates

    return CupyDecay()


def run_cupy(comm, cp):
    """Iterations, residuals, every owned value (host copies, time order), the final
    value, and per rank how many pinned blocks the CuPy backend took for messages."""
    from braidpy.backends import backend_for_namespace

    result = braidpy.solve(cupy_decay_app(cp), 0.0, 2.0, 32, comm=comm, cfactor=2,
                           abs_tol=1e-12, max_iter=20)
    assert_split(comm, result.owned, len(result.times))
    local = [(i, result.solution(index=i).get().tolist(),
              type(result.solution(index=i)).__module__.partition(".")[0])
             for i in result.owned]
    parts = [local] if comm is None else comm.allgather(local)
    rows = sorted(x for p in parts for x in p)
    blocks = backend_for_namespace(cp).blocks.allocated
    return dict(iterations=result.iterations, residuals=result.residuals,
                values=[v for _, v, _ in rows], kinds=sorted({k for _, _, k in rows}),
                final=result.final.get().tolist(),
                pinned_blocks=[blocks] if comm is None else comm.allgather(blocks))


def peaks_training(where=None, iterations=5):
    """A short one-shot Adam training on Peaks (dense ResNet, mini-batches, shuffled),
    on the host or where ``where`` (ResNet's xp=/device= keywords) puts it: (the losses,
    the final parameters as a host array). The GPU suite runs it on CUDA, test_device on
    array-api-strict's second device; both compare with the host run."""
    from braidpy.data import peaks
    from braidpy.nn import ResNet
    from braidpy.train import TrainConfig, Trainer

    X, C = peaks(200, seed=20261126)
    net = ResNet((2,), C.shape[1], width=8, nlayers=16, tstop=5.0, **(where or {}))
    config = TrainConfig(mode="oneshot", optimizer="adam", iterations=iterations,
                         batch_size=50, shuffle=True, mgrit=dict(cfactor=4, abs_tol=1e-12))
    trainer = Trainer(net, (X, C), None, config)
    trainer.run()
    return [r["loss"] for r in trainer.history], np.asarray(trainer.state()["params"])
