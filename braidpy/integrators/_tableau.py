"""Butcher tableaus: the coefficients of a Runge-Kutta method, checked once when made."""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

__all__ = [
    "ButcherTableau",
    "FORWARD_EULER",
    "HEUN",
    "SSPRK3",
    "RK4",
    "HEUN_EULER",
    "BOGACKI_SHAMPINE",
    "DORMAND_PRINCE",
    "SDIRK2",
    "SDIRK3",
    "BACKWARD_EULER",
    "tableau",
]

#: How far sum(b) may be from 1 and c from the row sums of A (coefficients given as
#: floats, e.g. from an irrational gamma, carry a few ulps of rounding).
TOLERANCE = 1e-12


def _matrix(name: str, value: Any, shape: Optional[tuple] = None) -> np.ndarray:
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"ButcherTableau: {name} must be an array of real numbers, "
                        f"got {value!r}") from err
    if shape is not None and arr.shape != shape:
        raise ValueError(f"ButcherTableau: {name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"ButcherTableau: {name} has a non-finite entry: {arr.tolist()}")
    arr.setflags(write=False)
    return arr


class ButcherTableau:
    """The coefficients ``A`` (s x s), ``b`` and ``c`` (length s) of an s-stage
    Runge-Kutta method, and optionally the weights ``b_hat`` of an embedded method of
    lower order, whose difference from ``b`` estimates the local error.

    One step of size h from (t0, u) computes the stages
    ``k_i = f(t0 + c_i h, u + h sum_j A_ij k_j)`` and ``u1 = u + h sum_i b_i k_i``.

    Checked on construction: shapes, finite entries, consistency ``sum(b) == 1`` (and
    ``sum(b_hat) == 1``) and ``c_i == sum_j A_ij``, each to within ``1e-12``; a
    ``ValueError`` names the bad value. Whether the method is explicit (``A`` strictly
    lower triangular) or singly diagonally implicit is a property, checked by the
    integrators that need it.

    Parameters
    ----------
    A, b, c : array_like
        The tableau.
    b_hat : array_like, optional
        Weights of an embedded method (error estimate).
    order : int, optional
        The classical order of the method (for documentation and tests).
    name : str, optional

    Examples
    --------
    >>> t = ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5], [0, 1], order=2, name="Heun")
    >>> t.stages, t.explicit
    (2, True)
    >>> ButcherTableau([[0, 0], [1, 0]], [0.5, 0.6], [0, 1])
    Traceback (most recent call last):
    ...
    ValueError: ButcherTableau: the weights b must sum to 1 (consistency), got sum(b) = 1.1
    """

    def __init__(self, A: Any, b: Any, c: Any, b_hat: Any = None, *,
                 order: Optional[int] = None, embedded_order: Optional[int] = None,
                 name: str = "custom"):
        A = _matrix("A", A)
        if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
            raise ValueError(f"ButcherTableau: A must be a non-empty square matrix, got "
                             f"shape {A.shape}")
        s = A.shape[0]
        b = _matrix("b", b, (s,))
        c = _matrix("c", c, (s,))
        if abs(math.fsum(b.tolist()) - 1.0) > TOLERANCE:
            raise ValueError(f"ButcherTableau: the weights b must sum to 1 (consistency), "
                             f"got sum(b) = {math.fsum(b.tolist())!r}")
        if b_hat is not None:
            b_hat = _matrix("b_hat", b_hat, (s,))
            if abs(math.fsum(b_hat.tolist()) - 1.0) > TOLERANCE:
                raise ValueError(f"ButcherTableau: the embedded weights b_hat must sum to 1, "
                                 f"got sum(b_hat) = {math.fsum(b_hat.tolist())!r}")
        rows = np.array([math.fsum(row) for row in A.tolist()])
        bad = np.flatnonzero(np.abs(rows - c) > TOLERANCE)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"ButcherTableau: c[{i}] = {float(c[i])!r} must equal the sum of row {i} "
                             f"of A, {float(rows[i])!r}")
        for label, value in (("order", order), ("embedded_order", embedded_order)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"ButcherTableau: {label} must be a positive int, got "
                                 f"{value!r}")
        self.A, self.b, self.c, self.b_hat = A, b, c, b_hat
        self.order, self.embedded_order, self.name = order, embedded_order, str(name)

    @property
    def stages(self) -> int:
        """The number of stages s."""
        return int(self.A.shape[0])

    @property
    def explicit(self) -> bool:
        """Whether ``A`` is strictly lower triangular (each stage uses earlier ones only)."""
        return bool(np.all(np.triu(self.A) == 0.0))

    @property
    def singly_diagonally_implicit(self) -> bool:
        """Whether ``A`` is lower triangular with one non-zero value on its diagonal (SDIRK):
        each stage is one linear solve with the same matrix."""
        d = np.diag(self.A)
        return bool(np.all(np.triu(self.A, 1) == 0.0) and d[0] != 0.0 and np.all(d == d[0]))

    @property
    def embedded(self) -> bool:
        """Whether the tableau has embedded weights ``b_hat`` (an error estimate)."""
        return self.b_hat is not None

    def __repr__(self) -> str:
        return f"ButcherTableau(name={self.name!r}, stages={self.stages}, order={self.order})"


#: Forward Euler, order 1.
FORWARD_EULER = ButcherTableau([[0.0]], [1.0], [0.0], order=1, name="forward_euler")
#: Heun's method (explicit trapezoidal rule), order 2.
HEUN = ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5], [0, 1], order=2, name="heun")
#: Shu and Osher's strong-stability-preserving RK3, order 3.
SSPRK3 = ButcherTableau([[0, 0, 0], [1, 0, 0], [0.25, 0.25, 0]], [1 / 6, 1 / 6, 2 / 3],
                        [0, 1, 0.5], order=3, name="ssprk3")
#: The classic fourth-order Runge-Kutta method.
RK4 = ButcherTableau([[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]],
                     [1 / 6, 1 / 3, 1 / 3, 1 / 6], [0, 0.5, 0.5, 1], order=4, name="rk4")
#: Heun's method with forward Euler embedded: order 2, error estimate of order 1.
HEUN_EULER = ButcherTableau([[0, 0], [1, 0]], [0.5, 0.5], [0, 1], [1.0, 0.0], order=2,
                            embedded_order=1, name="heun_euler")
#: Bogacki and Shampine's 3(2) pair (1989; MATLAB's ode23): order 3, estimate of order 2.
BOGACKI_SHAMPINE = ButcherTableau(
    [[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.75, 0, 0], [2 / 9, 1 / 3, 4 / 9, 0]],
    [2 / 9, 1 / 3, 4 / 9, 0.0], [0, 0.5, 0.75, 1.0], [7 / 24, 0.25, 1 / 3, 0.125],
    order=3, embedded_order=2, name="bogacki_shampine")
#: Dormand and Prince's 5(4) pair (J. Comput. Appl. Math. 6, 1980; Hairer, Norsett and
#: Wanner, *Solving ODEs I*, Table II.5.2; DOPRI5, MATLAB's ode45, SciPy's RK45): order 5,
#: estimate of order 4, seven stages of which the last is f at the new state (first same
#: as last: it is the next step's first stage).
DORMAND_PRINCE = ButcherTableau(
    [[0, 0, 0, 0, 0, 0, 0],
     [1 / 5, 0, 0, 0, 0, 0, 0],
     [3 / 40, 9 / 40, 0, 0, 0, 0, 0],
     [44 / 45, -56 / 15, 32 / 9, 0, 0, 0, 0],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729, 0, 0, 0],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656, 0, 0],
     [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0],
    [0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1],
    [5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40],
    order=5, embedded_order=4, name="dopri5")

# Alexander (1977), "Diagonally implicit Runge-Kutta methods for stiff O.D.E.'s",
# SIAM J. Numer. Anal. 14, Table 1 (2 stages) and Hairer & Wanner, Solving ODEs II,
# Sec. IV.6, eq. (6.18) (3 stages): L-stable, stiffly accurate (b = last row of A).
_G2 = 1.0 - 1.0 / math.sqrt(2.0)
#: Alexander's two-stage SDIRK, gamma = 1 - 1/sqrt(2): order 2, L-stable.
SDIRK2 = ButcherTableau([[_G2, 0.0], [1.0 - _G2, _G2]], [1.0 - _G2, _G2], [_G2, 1.0],
                        order=2, name="sdirk2")
# gamma: the root in (1/6, 1/2) of x^3 - 3x^2 + 3x/2 - 1/6 = 0 (to 30 digits
# 0.435866521508458999416019451194; this is the float nearest to it).
_G3 = 0.435866521508459
_T3 = (1.0 + _G3) / 2.0
_B1 = -(6.0 * _G3 * _G3 - 16.0 * _G3 + 1.0) / 4.0
_B2 = (6.0 * _G3 * _G3 - 20.0 * _G3 + 5.0) / 4.0
#: Alexander's three-stage SDIRK: order 3, L-stable.
SDIRK3 = ButcherTableau([[_G3, 0.0, 0.0], [_T3 - _G3, _G3, 0.0], [_B1, _B2, _G3]],
                        [_B1, _B2, _G3], [_G3, _T3, 1.0], order=3, name="sdirk3")

#: Backward Euler as a one-stage SDIRK (gamma = 1): order 1, L-stable.
BACKWARD_EULER = ButcherTableau([[1.0]], [1.0], [1.0], order=1, name="backward_euler")

_NAMED = {t.name: t for t in (FORWARD_EULER, HEUN, SSPRK3, RK4, HEUN_EULER, BOGACKI_SHAMPINE,
                              DORMAND_PRINCE, SDIRK2, SDIRK3, BACKWARD_EULER)}


def tableau(name: Any) -> ButcherTableau:
    """The built-in tableau called ``name`` (or ``name`` itself if it is a tableau).

    Names: ``forward_euler``, ``heun``, ``ssprk3``, ``rk4``, ``heun_euler``,
    ``bogacki_shampine``, ``dopri5`` (explicit); ``sdirk2``, ``sdirk3``,
    ``backward_euler`` (singly diagonally implicit).

    Examples
    --------
    >>> tableau("rk4").order
    4
    """
    if isinstance(name, ButcherTableau):
        return name
    try:
        return _NAMED[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown tableau {name!r}; the built-in ones are "
                         f"{', '.join(sorted(_NAMED))}") from None
