"""Synchronous elastic averaging SGD over the data communicator (seed paper 003).

Each data group i keeps its own parameters W_i, and every rank also keeps a copy of
the centre variable W̄. Between communications a group takes plain local steps (SGD,
or momentum SGD). Every ``tau``-th step it also feels an elastic pull towards the
centre, and the centre moves towards the groups. These are paper 003's equations (1)
and (2), after Zhang, Choromanska and LeCun, "Deep learning with elastic averaging
SGD", NeurIPS 2015:

    W_i <- W_i - lr (g_i + rho (W_i - W̄))
    W̄   <- W̄ + lr rho sum_i (W_i - W̄)

With momentum mu (equations (5) and (6), "MEASGD") the local step becomes
``V_i <- mu V_i - lr g_i`` and ``W_i <- W_i + V_i - lr rho (W_i - W̄)``.

The sum over groups is one MPI allreduce of the flat parameters, and the centre
update is computed identically on every rank from it. So no rank is a master and the
result is deterministic. That is paper 003's "Sync EASGD" with the centre replicated
instead of held by a master. The optimizer follows braidpy.train's interface
(``step``, ``state_dict``, ``load_state_dict``), so a checkpoint resumes it exactly.

>>> import numpy as np
>>> opt = SyncEASGD(None, lr=0.5, rho=1.0, tau=1)
>>> w = np.array([2.0])
>>> info = opt.step(w, 0.0, w - 1.0)  # one group: the centre follows it
>>> w, opt.center
(array([1.5]), array([2.]))
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from ..parallel.comm import rank_size

__all__ = ["SyncEASGD"]


def _number(name: str, value: Any, low: float, low_open: bool, high: float = np.inf) -> float:
    ok = isinstance(value, (int, float, np.floating, np.integer)) and \
        not isinstance(value, bool) and np.isfinite(value) and \
        (value > low if low_open else value >= low) and value < high
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        upper = "" if high == np.inf else f" and < {high}"
        raise ValueError(f"{name} must be a number {bound}{upper}, got {value!r}")
    return float(value)


class SyncEASGD:
    """Synchronous EASGD (module docstring) over ``comm``, the data communicator.

    Parameters
    ----------
    comm : mpi4py communicator or None
        The data communicator (one group: the centre simply trails the parameters).
    lr : float
        Step size eta.
    rho : float
        Elastic strength; ``lr * rho * groups`` must stay below 1 for the centre update
        to be a contraction (the paper's stability condition).
    tau : int
        Communication period: the elastic pull and the allreduce every tau-th step.
    momentum : float
        mu of MEASGD (0: plain EASGD).
    """

    name = "easgd"
    needs_objective = False

    def __init__(self, comm: Any, lr: float = 0.05, rho: float = 1.0, tau: int = 1,
                 momentum: float = 0.0):
        self.comm = comm
        self.lr = _number("lr", lr, 0.0, True)
        self.rho = _number("rho", rho, 0.0, False)
        if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
            raise ValueError(f"tau must be an int >= 1, got {tau!r}")
        self.tau = int(tau)
        self.momentum = _number("momentum", momentum, 0.0, False, 1.0)
        _, self.groups = rank_size(comm)
        if self.lr * self.rho * self.groups >= 1.0:
            raise ValueError(f"lr * rho * groups = {self.lr * self.rho * self.groups:g} must "
                             f"be < 1 (the centre update would not contract)")
        self.center: Optional[np.ndarray] = None
        self.velocity: Optional[np.ndarray] = None
        self.steps = 0

    def _sum_over_groups(self, params: np.ndarray) -> np.ndarray:
        if self.groups == 1:
            return params.copy()
        from ..parallel.comm import mpi

        total = np.empty_like(params)
        self.comm.Allreduce(np.ascontiguousarray(params), total, op=mpi().SUM)
        return total

    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Callable[[np.ndarray], float]] = None) -> Dict[str, Any]:
        """One step of this group, in place (collective every tau-th step)."""
        if self.center is None:  # all groups start from the same parameters
            self.center = params.copy()
            self.velocity = np.zeros_like(params)
        assert self.velocity is not None
        self.steps += 1
        pull = self.steps % self.tau == 0
        if pull:
            # Both updates use W_i and W̄ from before this step (equations (1), (2)).
            elastic = self.rho * (params - self.center)
            total = self._sum_over_groups(params)
            center_move = self.lr * self.rho * (total - self.groups * self.center)
        if self.momentum > 0.0:
            self.velocity *= self.momentum
            self.velocity -= self.lr * grad
            params += self.velocity
        else:
            params -= self.lr * grad
        if pull:
            params -= self.lr * elastic
            self.center += center_move
        return {"step_size": self.lr, "trials": 0, "communicated": pull}

    def state_dict(self) -> Dict[str, Any]:
        return {"center": None if self.center is None else self.center.copy(),
                "velocity": None if self.velocity is None else self.velocity.copy(),
                "steps": self.steps}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        center, velocity = state.get("center"), state.get("velocity")
        self.center = None if center is None else np.array(center, dtype=np.float64)
        self.velocity = None if velocity is None else np.array(velocity, dtype=np.float64)
        self.steps = int(state.get("steps", 0))
