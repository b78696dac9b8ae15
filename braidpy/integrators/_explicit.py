"""Explicit Runge-Kutta steps from a Butcher tableau, as a braidpy App (batched too)."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np

from ._initial import Guess, InitialValueApp
from ._tableau import ButcherTableau, tableau as named_tableau

__all__ = ["ExplicitRK"]


def _nonzero(weights: Any) -> List[Tuple[int, float]]:
    return [(j, float(w)) for j, w in enumerate(np.asarray(weights).tolist()) if w != 0.0]


class ExplicitRK(InitialValueApp):
    """``u' = f(t, u)`` stepped by an explicit Runge-Kutta method: an MGRIT-ready App.

    One step of size ``h = t1 - t0`` computes the stages
    ``k_i = f(t0 + c_i h, u + h sum_{j<i} A_ij k_j)`` and ``u <- u + h sum_i b_i k_i``
    (in place). Each level of MGRIT steps with its own ``h`` (the coarse levels' are
    multiples of the fine one); an explicit method must be stable at the coarsest
    level's step size too, or MGRIT diverges.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u)`` returns ``f(t, u)``, an array of ``u``'s shape; it must not modify
        ``u``. With ``vectorized=True`` it must also accept stacked states: ``U`` of shape
        ``(m, *u.shape)`` with ``t`` a float64 array of shape ``(m, 1, ..., 1)`` (one time
        per row, broadcastable over the rows), and return an array of ``U``'s shape.
    u0 : array_like
        The initial value at ``tstart`` (copied; any shape with at least one axis).
    tableau : ButcherTableau or str, optional
        An explicit tableau (``A`` strictly lower triangular) or a built-in name:
        ``"forward_euler"``, ``"heun"``, ``"ssprk3"``, ``"rk4"`` (default),
        ``"heun_euler"``, ``"bogacki_shampine"``.
    vectorized : bool, optional
        Whether ``rhs`` takes stacked states (see above). Then ``step_stacked`` makes one
        ``rhs`` call per stage for all rows; otherwise it steps row by row.
    guess : {"u0", "zeros"} or callable, optional
        The initial guess away from ``tstart`` (default: a copy of ``u0``).

    Notes
    -----
    ``step_stacked`` forms every stage by the same elementwise operations, in the same
    order, as ``step``; so row k of it equals ``step`` of row k bit for bit whenever
    ``rhs`` of stacked states equals ``rhs`` of each row bit for bit (elementwise
    arithmetic does; a matrix product of the stack need not round as one of a single
    row, and NumPy's vectorized ``sin``/``exp`` need not round as the ``math`` module's).

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import ExplicitRK
    >>> app = ExplicitRK(lambda t, u: -u, np.ones(1), "rk4", vectorized=True)
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - np.exp(-1.0)) < 1e-9)
    True
    """

    def __init__(self, rhs: Callable[..., Any], u0: Any, tableau: Any = "rk4", *,
                 vectorized: bool = False, guess: Guess = "u0"):
        if not callable(rhs):
            raise TypeError(f"ExplicitRK: rhs must be a callable rhs(t, u), got {rhs!r}")
        tab = named_tableau(tableau)
        if not tab.explicit:
            raise ValueError(f"ExplicitRK: the tableau {tab.name!r} is not explicit (A must be "
                             f"strictly lower triangular), A = {tab.A.tolist()}")
        if not isinstance(vectorized, bool):
            raise TypeError(f"ExplicitRK: vectorized must be True or False, got {vectorized!r}")
        super().__init__(u0, guess)
        self.rhs = rhs
        self.tableau: ButcherTableau = tab
        self.vectorized = vectorized
        self._rows = [_nonzero(tab.A[i, :i]) for i in range(tab.stages)]
        self._c = [float(c) for c in tab.c.tolist()]
        self._b = _nonzero(tab.b)
        self._e = None if tab.b_hat is None else _nonzero(tab.b - tab.b_hat)

    # --- the braidpy contract --------------------------------------------------------------

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """One step of the method from ``t0`` to ``t1``, in place."""
        t0 = float(t0)
        h = float(t1) - t0
        ks = self._stages(u, t0, h)
        for i, w in self._b:
            u += (h * w) * ks[i]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Row k of ``U`` one step from ``t0s[k]`` to ``t1s[k]``, in place: one ``rhs``
        call per stage for all rows when ``vectorized``, else ``step`` row by row."""
        if not self.vectorized:
            for k in range(len(U)):
                self.step(U[k], float(t0s[k]), float(t1s[k]), status)
            return
        H, T0 = self._columns(U, t1s - t0s), self._columns(U, t0s)
        ks = self._stages(U, T0, H)
        for i, w in self._b:
            U += (H * w).astype(self._real(U), copy=False) * ks[i]

    # --- the error estimate of an embedded pair --------------------------------------------

    def error_estimate(self, u: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """The embedded pair's estimate of the local error of the step from ``u``
        (``h sum_i (b_i - b_hat_i) k_i``: the method's result minus the embedded one's);
        ``u`` is left as it is.

        For a tableau with ``b_hat`` only (``"heun_euler"``, ``"bogacki_shampine"``). It
        is the quantity a step-size controller or temporal refinement would use; MGRIT's
        solve itself does not call it.

        Examples
        --------
        >>> import numpy as np
        >>> app = ExplicitRK(lambda t, u: -u, np.ones(1), "bogacki_shampine")
        >>> e = app.error_estimate(np.ones(1), 0.0, 0.1)
        >>> bool(0 < abs(e[0]) < 1e-4)
        True
        """
        if self._e is None:
            raise ValueError(f"error_estimate: the tableau {self.tableau.name!r} has no "
                             f"embedded weights b_hat")
        t0 = float(t0)
        h = float(t1) - t0
        ks = self._stages(u, t0, h)
        err = np.zeros_like(ks[0])
        for i, w in self._e:
            err += (h * w) * ks[i]
        return err

    # --- stages ----------------------------------------------------------------------------

    def _stages(self, u: np.ndarray, t0: Any, h: Any) -> List[np.ndarray]:
        """The stage derivatives k_i from u (a state, or stacked rows with column t0, h)."""
        stacked = isinstance(h, np.ndarray)
        real = self._real(u) if stacked else None
        ks: List[np.ndarray] = []
        for i, row in enumerate(self._rows):
            if row:
                y = u.copy()
                for j, a in row:
                    y += ((h * a).astype(real, copy=False) if stacked else h * a) * ks[j]
            else:
                y = u
            ks.append(self._call(t0 + self._c[i] * h, y, u))
        return ks

    def _call(self, t: Any, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        k = self.rhs(t, y)
        if not isinstance(k, np.ndarray) or k.shape != y.shape:
            shape = getattr(k, "shape", None)
            raise ValueError(f"ExplicitRK: rhs(t, u) returned {type(k).__name__} of shape "
                             f"{shape} for a state of shape {y.shape}; it must return an "
                             f"array of the state's shape")
        if np.may_share_memory(k, u):  # the update of u must not change a stage
            k = k.copy()
        return k

    @staticmethod
    def _columns(U: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Per-row values shaped to broadcast over the rows of U: (m, 1, ..., 1)."""
        return np.asarray(values, dtype=np.float64).reshape((len(U),) + (1,) * (U.ndim - 1))

    @staticmethod
    def _real(U: np.ndarray) -> Any:
        return np.finfo(U.dtype).dtype
