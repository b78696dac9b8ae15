"""Optimizers on a flat parameter vector: SGD with momentum, Adam, L-BFGS with Armijo.

Each optimizer updates ``params`` in place in :meth:`step` and can save and restore
its whole state (:meth:`state_dict` / :meth:`load_state_dict`), so an interrupted
training run resumes exactly. They are deterministic: every rank running the same
optimizer on the same (replicated) numbers makes the same update.

They compute in the namespace of ``params`` (NumPy, CuPy, any array-API array): the
optimizer state lives on the parameters' device, and only scalars (step sizes, inner
products for L-BFGS) come back to the host. :meth:`state_dict` returns that state as
it is; :class:`braidpy.train.Trainer` copies it to the host for checkpoints.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .._device import namespace, vector_norm
from .._renamed import renamed_arguments
from .easgd import AsyncEASGD, SyncEASGD

__all__ = ["SGD", "Adam", "LBFGS", "make_optimizer", "OPTIMIZERS", "ELASTIC"]

Objective = Callable[[np.ndarray], float]


def _positive(name: str, value: Any, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and \
        np.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} "
                         f"number, got {value!r}")
    return float(value)


def _copy(a: Any) -> Any:
    """An independent copy of an array, on its device."""
    return a.copy() if isinstance(a, np.ndarray) else namespace(a).asarray(a, copy=True)


def _add_scaled(q: Any, c: float, v: Any, scratch: Any) -> None:
    """q += c * v in place: c * v is rounded first, as that expression is, but made in
    ``scratch`` (NumPy) instead of a new array each time."""
    if scratch is None:
        q += c * v
    else:
        np.multiply(v, c, out=scratch)
        q += scratch


def _loaded(a: Any) -> Any:
    """A state array from :meth:`load_state_dict`: float64 on its own device (host data,
    lists included, as NumPy arrays)."""
    if a is None:
        return None
    if isinstance(a, np.ndarray) or not hasattr(a, "shape"):
        return np.array(a, dtype=np.float64)
    xp = namespace(a)
    return xp.asarray(a, dtype=xp.float64, copy=True)


class _Shapes:
    """The arrays of one :meth:`load_state_dict`: each a vector of ``nparams`` numbers
    (when given; else as many as the first one), or a ValueError naming the field."""

    def __init__(self, optimizer: str, nparams: Optional[int]):
        self.optimizer, self.nparams = optimizer, nparams

    def __call__(self, a: Any, field: str) -> Any:
        a = _loaded(a)
        if a is None:
            return None
        shape = tuple(a.shape)
        if self.nparams is None and len(shape) == 1:
            self.nparams = shape[0]  # the others must agree with the first
        if shape != (self.nparams,):
            want = "a vector" if self.nparams is None else \
                f"{self.nparams} numbers (one per parameter)"
            raise ValueError(f"{self.optimizer} optimizer state: field {field!r} must hold "
                             f"{want}, got an array of shape {shape}")
        return a


def _zeros_like(a: Any) -> Any:
    return np.zeros_like(a) if isinstance(a, np.ndarray) else namespace(a).zeros_like(a)


class SGD:
    """Gradient descent with (heavy-ball) momentum: v <- beta v + g, p <- p - lr v."""

    name = "sgd"
    needs_objective = False

    def __init__(self, lr: float = 0.1, momentum: float = 0.9):
        self.lr = _positive("lr", lr)
        self.momentum = _positive("momentum", momentum, allow_zero=True)
        if self.momentum >= 1:
            raise ValueError(f"momentum must be < 1, got {momentum!r}")
        self.velocity: Optional[np.ndarray] = None

    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Objective] = None) -> Dict[str, Any]:
        if self.velocity is None:
            self.velocity = _zeros_like(params)
        self.velocity *= self.momentum
        self.velocity += grad
        params -= self.lr * self.velocity
        return {"step_size": self.lr, "trials": 0}

    def state_dict(self) -> Dict[str, Any]:
        return {"velocity": None if self.velocity is None else _copy(self.velocity)}

    def load_state_dict(self, state: Dict[str, Any], nparams: Optional[int] = None) -> None:
        """The state of :meth:`state_dict`; its arrays must hold ``nparams`` numbers
        (ValueError naming the field)."""
        self.velocity = _Shapes(self.name, nparams)(state.get("velocity"), "velocity")


class Adam:
    """Adam (Kingma and Ba, 2015) with bias correction."""

    name = "adam"
    needs_objective = False

    def __init__(self, lr: float = 1e-2, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        self.lr = _positive("lr", lr)
        self.beta1 = _positive("beta1", beta1, allow_zero=True)
        self.beta2 = _positive("beta2", beta2, allow_zero=True)
        for name, b in (("beta1", self.beta1), ("beta2", self.beta2)):
            if b >= 1:
                raise ValueError(f"{name} must be < 1, got {b!r}")
        self.eps = _positive("eps", eps)
        self.m: Optional[np.ndarray] = None
        self.v: Optional[np.ndarray] = None
        self.t = 0

    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Objective] = None) -> Dict[str, Any]:
        m = _zeros_like(params) if self.m is None else self.m
        v = _zeros_like(params) if self.v is None else self.v
        self.t += 1
        self.m = m = self.beta1 * m + (1 - self.beta1) * grad
        self.v = v = self.beta2 * v + (1 - self.beta2) * grad * grad
        mhat = m / (1 - self.beta1 ** self.t)
        vhat = v / (1 - self.beta2 ** self.t)
        sqrt = np.sqrt if isinstance(vhat, np.ndarray) else namespace(vhat).sqrt
        params -= self.lr * mhat / (sqrt(vhat) + self.eps)
        return {"step_size": self.lr, "trials": 0}

    def state_dict(self) -> Dict[str, Any]:
        return {"m": None if self.m is None else _copy(self.m),
                "v": None if self.v is None else _copy(self.v), "t": self.t}

    def load_state_dict(self, state: Dict[str, Any], nparams: Optional[int] = None) -> None:
        """The state of :meth:`state_dict`; its arrays must hold ``nparams`` numbers
        (ValueError naming the field)."""
        shapes = _Shapes(self.name, nparams)
        m, v = shapes(state.get("m"), "m"), shapes(state.get("v"), "v")
        t = state.get("t", 0)
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise ValueError(f"adam optimizer state: field 't' must be an int >= 0, got {t!r}")
        self.m, self.v, self.t = m, v, int(t)


class LBFGS:
    """Limited-memory BFGS with a backtracking Armijo line search.

    The direction is d = -H g from the two-loop recursion over the last ``memory``
    pairs (s, y) = (p_k - p_{k-1}, g_k - g_{k-1}), with H_0 = (s'y / y'y) I; pairs with
    s'y <= 1e-12 ‖s‖‖y‖ are skipped (curvature condition). The step p + a d starts at
    a = ``lr`` and is halved until f(p + a d) <= f(p) + c1 a g'd (at most
    ``max_backtracks`` times; then the smallest step is taken anyway, as the
    one-shot method of Günther et al. does with inexact objectives).
    """

    name = "lbfgs"
    needs_objective = True

    def __init__(self, lr: float = 1.0, memory: int = 10, c1: float = 1e-4,
                 max_backtracks: int = 20, shrink: float = 0.5):
        self.lr = _positive("lr", lr)
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
            raise ValueError(f"memory must be an int >= 1, got {memory!r}")
        self.memory = memory
        self.c1 = _positive("c1", c1)
        if isinstance(max_backtracks, bool) or not isinstance(max_backtracks, int) or \
                max_backtracks < 0:
            raise ValueError(f"max_backtracks must be an int >= 0, got {max_backtracks!r}")
        self.max_backtracks = max_backtracks
        self.shrink = _positive("shrink", shrink)
        if self.shrink >= 1:
            raise ValueError(f"shrink must be < 1, got {shrink!r}")
        self.s: List[np.ndarray] = []
        self.y: List[np.ndarray] = []
        self.prev_params: Optional[np.ndarray] = None
        self.prev_grad: Optional[np.ndarray] = None
        # s'y of each pair and y'y of the newest, kept from when the pair came: every
        # rank runs this replicated, so what it recomputed was serial time on all.
        self._sy: List[float] = []
        self._yy = 0.0

    def _direction(self, grad: np.ndarray) -> np.ndarray:
        q = _copy(grad)
        scratch = np.empty_like(q) if isinstance(q, np.ndarray) else None
        alphas = []
        for s, y, sy in zip(reversed(self.s), reversed(self.y), reversed(self._sy)):
            rho = 1.0 / sy
            a = rho * float(s @ q)
            _add_scaled(q, -a, y, scratch)
            alphas.append((rho, a))
        if self.s:
            q *= self._sy[-1] / self._yy
        for (s, y), (rho, a) in zip(zip(self.s, self.y), reversed(alphas)):
            b = rho * float(y @ q)
            _add_scaled(q, a - b, s, scratch)
        return -q

    def _remember(self, s: Any, y: Any, sy: float) -> None:
        """Add the pair (s, y) with its s'y, dropping the oldest past ``memory``."""
        self.s.append(s)
        self.y.append(y)
        self._sy.append(sy)
        self._yy = float(y @ y)
        if len(self.s) > self.memory:
            del self.s[0], self.y[0], self._sy[0]

    def step(self, params: np.ndarray, loss: float, grad: np.ndarray,
             objective: Optional[Objective] = None) -> Dict[str, Any]:
        if objective is None:
            raise ValueError("LBFGS.step needs the objective for its line search")
        if self.prev_params is not None:
            s = params - self.prev_params
            y = grad - self.prev_grad
            sy = float(s @ y)
            if sy > 1e-12 * (vector_norm(s) * vector_norm(y)):
                self._remember(s, y, sy)
        d = self._direction(grad)
        slope = float(grad @ d)
        if not slope < 0:  # not a descent direction: forget the memory
            self.s, self.y, self._sy = [], [], []
            d = -grad
            slope = -float(grad @ grad)
        self.prev_params = _copy(params)
        self.prev_grad = _copy(grad)
        base = _copy(params)
        a = self.lr
        trials = 0
        while True:
            params[...] = base + a * d
            trials += 1
            value = objective(params)
            if (math.isfinite(value) and value <= loss + self.c1 * a * slope) or \
                    trials > self.max_backtracks:
                break
            a *= self.shrink
        return {"step_size": a, "trials": trials, "trial_loss": value}

    def state_dict(self) -> Dict[str, Any]:
        return {"s": [_copy(s) for s in self.s], "y": [_copy(y) for y in self.y],
                "prev_params": None if self.prev_params is None else _copy(self.prev_params),
                "prev_grad": None if self.prev_grad is None else _copy(self.prev_grad)}

    def load_state_dict(self, state: Dict[str, Any], nparams: Optional[int] = None) -> None:
        """The state of :meth:`state_dict`; its arrays must hold ``nparams`` numbers and
        ``s``, ``y`` as many pairs (ValueError naming the field)."""
        shapes = _Shapes(self.name, nparams)
        s = [shapes(a, f"s[{i}]") for i, a in enumerate(state.get("s", []))]
        y = [shapes(a, f"y[{i}]") for i, a in enumerate(state.get("y", []))]
        if len(s) != len(y):
            raise ValueError(f"lbfgs optimizer state: fields 's' and 'y' must hold as many "
                             f"pairs, got {len(s)} and {len(y)}")
        prev_params = shapes(state.get("prev_params"), "prev_params")
        prev_grad = shapes(state.get("prev_grad"), "prev_grad")
        self.s, self.y, self._sy = [], [], []
        for si, yi in zip(s, y):
            self._remember(si, yi, float(si @ yi))
        self.prev_params, self.prev_grad = prev_params, prev_grad


OPTIMIZERS: Dict[str, Any] = {"sgd": SGD, "adam": Adam, "lbfgs": LBFGS,
                              "easgd": SyncEASGD, "easgd-async": AsyncEASGD}

#: The optimizers that couple data groups elastically instead of averaging their
#: gradients (You, Buluç and Demmel, "Scaling deep learning on GPU and Knights Landing
#: clusters", SC 2017): they take the data communicator as ``comm``.
ELASTIC = ("easgd", "easgd-async")


@renamed_arguments(now_keyword_only=("comm",))
def make_optimizer(name: str, *, comm: Any = None, **kwargs: Any):
    """An optimizer by name ('sgd', 'adam', 'lbfgs', 'easgd', 'easgd-async'); kwargs with
    value None are dropped. ``comm``: the data communicator of the elastic optimizers
    (:mod:`braidpy.train.easgd`); the others take none.

    >>> make_optimizer("easgd", lr=0.1, rho=2.0).rho
    2.0
    >>> make_optimizer("sgd", comm=object())
    Traceback (most recent call last):
    ...
    ValueError: optimizer 'sgd' takes no communicator (only easgd, easgd-async do)
    """
    key = str(name).lower()
    cls = OPTIMIZERS.get(key)
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if key in ELASTIC:
        kwargs["comm"] = comm
    elif comm is not None:
        raise ValueError(f"optimizer {name!r} takes no communicator (only "
                         f"{', '.join(ELASTIC)} do)")
    return cls(**kwargs)
