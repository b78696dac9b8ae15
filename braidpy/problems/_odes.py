"""Ordinary differential equations: Dahlquist's test equation, the Brusselator, the
Arenstorf orbit and the Lorenz system."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..integrators._adaptive import check_tolerances
from ._base import LinearProblem, OdeProblem, scipy

__all__ = ["Dahlquist", "Brusselator", "ArenstorfOrbit", "Lorenz"]


class Dahlquist(LinearProblem):
    """Dahlquist's test equation ``u' = lambda u``, ``u(tstart) = u0``.

    Exact solution ``u0 exp(lambda (t - tstart))``. PyMGRIT's Dahlquist application:
    ``lambda = -1``, ``u(0) = 1``, methods backward Euler (``"BE"``), forward Euler
    (``"FE"``), the trapezoidal rule (``"TR"``: Crank-Nicolson) and the implicit midpoint
    rule (``"MR"``). The default grid, 100 steps on [0, 5], is braidpy's choice.

    Parameters
    ----------
    lam : float, optional
        lambda (default -1).
    u0 : float, optional
        The initial value (default 1).
    method : str, optional
        The default method of ``app()``: ``"backward_euler"`` (default), ``"forward_euler"``,
        ``"crank_nicolson"``, ``"implicit_midpoint"``, ``"sdirk2"``, ``"sdirk3"``, ``"rk4"``
        (or PyMGRIT's ``"BE"``, ``"FE"``, ``"TR"``, ``"MR"``).
    tstart, tstop, ntime : optional
        The default time grid (0, 5, 100).

    Examples
    --------
    >>> from braidpy.problems import Dahlquist
    >>> p = Dahlquist()
    >>> r = p.solve(cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - p.reference([p.tstop])[0, 0]) < 1e-2)
    True
    """

    exact = True

    def __init__(self, lam: float = -1.0, u0: float = 1.0, *, method: str = "backward_euler",
                 tstart: float = 0.0, tstop: float = 5.0, ntime: int = 100):
        sp = scipy("sparse")
        self.lam = float(lam)
        self.u0 = np.array([float(u0)])
        self.A = sp.csr_matrix(np.array([[self.lam]]))
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def reference(self, times: Any) -> np.ndarray:
        """The exact solution ``u0 exp(lambda (t - tstart))``, shape ``(len(times), 1)``."""
        t = np.asarray(times, dtype=np.float64).reshape(-1, 1)
        return self.u0 * np.exp(self.lam * (t - self.tstart))


class Brusselator(OdeProblem):
    """The Brusselator ``x' = A + x^2 y - (B + 1) x``, ``y' = B x - x^2 y``.

    As PyMGRIT's Brusselator application: ``A = 1``, ``B = 3``, ``(x, y)(0) = (0, 1)``,
    stepped by the classic RK4 (``"rk4"``, the default method). Default grid: 640 steps on
    [0, 12]. No closed form: ``reference`` is SciPy's ``solve_ivp`` (DOP853, rtol = atol =
    1e-12).

    Parameters
    ----------
    a, b : float, optional
        ``A`` and ``B`` (1 and 3).
    u0 : array_like, optional
        ``(x, y)`` at ``tstart`` (default ``(0, 1)``).
    method : str, optional
        ``"rk4"`` (default), ``"forward_euler"``, ``"heun"``, ``"ssprk3"``, or the Newton
        methods ``"backward_euler"``, ``"sdirk2"``, ``"sdirk3"``.
    tstart, tstop, ntime : optional
        The default time grid (0, 12, 640).

    Examples
    --------
    >>> from braidpy.problems import Brusselator
    >>> p = Brusselator(tstop=2.0, ntime=128)
    >>> r = p.solve(max_levels=3, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - p.reference([2.0])[0]).max() < 1e-6)
    True
    """

    def __init__(self, a: float = 1.0, b: float = 3.0, u0: Any = (0.0, 1.0), *,
                 method: str = "rk4", tstart: float = 0.0, tstop: float = 12.0,
                 ntime: int = 640):
        self.a, self.b = float(a), float(b)
        self.u0 = np.array(u0, dtype=np.float64).reshape(2)
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        x, y = u[..., 0], u[..., 1]
        xxy = x * x * y
        return np.stack([self.a + xxy - (self.b + 1.0) * x, self.b * x - xxy], axis=-1)

    def jacobian(self, t: float, u: np.ndarray) -> np.ndarray:
        x, y = float(u[0]), float(u[1])
        return np.array([[2.0 * x * y - (self.b + 1.0), x * x], [self.b - 2.0 * x * y, -x * x]])


class ArenstorfOrbit(OdeProblem):
    """The Arenstorf orbit: a satellite in the rotating frame of the earth (mass ``b``)
    and moon (mass ``a``),

        ``x'' = x + 2 y' - b (x + a) / D1 - a (x - b) / D2``,
        ``y'' = y - 2 x' - b y / D1 - a y / D2``,

    ``D1 = ((x + a)^2 + y^2)^(3/2)``, ``D2 = ((x - b)^2 + y^2)^(3/2)``, as a first-order
    system for ``u = (x, y, x', y')``. PyMGRIT's parameters: ``a = 0.012277471``,
    ``b = 1 - a``, ``u(0) = (0.994, 0, 0, -2.00158510637908)``; the orbit is periodic with
    period ``T = 17.0652165601579625588917206249`` (Hairer, Norsett and Wanner, *Solving
    ODEs I*, Sec. II.0), the default ``tstop``.

    Two ways to step it:

    - ``method="rk4"`` (the default; also ``"forward_euler"``, ``"heun"``, ``"ssprk3"``
      and the Newton methods): one step of a fixed method per time step. The orbit
      passes close to the moon, where a fixed step must be small: RK4's error at ``T`` was
      1.8 with 10000 steps, 0.46 with 20000 and 0.023 with 40000 (the default ``ntime``).
    - ``method="rk45"`` (or ``"rk23"``): PyMGRIT's stepper. Every time step ``[t0, t1]``
      is integrated by Dormand-Prince 5(4) with step-size control
      (``braidpy.integrators.AdaptiveRK``: the error norm, controller and first step of
      Hairer, Norsett and Wanner, Sec. II.4, as SciPy's ``solve_ivp(method="RK45")``,
      which PyMGRIT calls over each step) to ``rtol`` and ``atol``, by default
      ``solve_ivp``'s (and so PyMGRIT's) ``1e-3`` and ``1e-6``. The accuracy is then set
      by the tolerances rather than by ``ntime``; with ``rtol = 1e-10``, ``atol = 1e-12``
      and 64 steps the orbit closes to 6e-7.

    ``reference`` is ``solve_ivp`` (DOP853, rtol = atol = 1e-12), which closes the orbit
    to 1e-9.

    Parameters
    ----------
    a : float, optional
        The moon's mass (0.012277471); the earth's is ``1 - a``.
    u0 : array_like, optional
        ``(x, y, x', y')`` at ``tstart``.
    method : str, optional
        ``"rk4"`` (default), ``"rk45"``, ``"rk23"``, ``"forward_euler"``, ``"heun"``,
        ``"ssprk3"``, ``"backward_euler"``, ``"sdirk2"``, ``"sdirk3"``.
    rtol, atol : float, optional
        The tolerances of ``"rk45"`` and ``"rk23"`` (1e-3 and 1e-6).
    tstart, tstop, ntime : optional
        The default time grid (0, ``T``, 40000).

    Examples
    --------
    >>> from braidpy.problems import ArenstorfOrbit
    >>> p = ArenstorfOrbit(tstop=1.0, ntime=4096)
    >>> r = p.solve(max_levels=3, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - p.reference([1.0])[0]).max() < 1e-5)
    True
    >>> q = ArenstorfOrbit(method="rk45", rtol=1e-8, atol=1e-10, tstop=1.0, ntime=64)
    >>> r = q.solve(max_levels=3, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - q.reference([1.0])[0]).max() < 1e-6)
    True
    """

    PERIOD = 17.0652165601579625588917206249

    def __init__(self, a: float = 0.012277471, u0: Any = (0.994, 0.0, 0.0, -2.00158510637908),
                 *, method: str = "rk4", rtol: float = 1e-3, atol: float = 1e-6,
                 tstart: float = 0.0, tstop: float = PERIOD, ntime: int = 40000):
        self.rtol, self.atol = check_tolerances(rtol, atol)
        self.a = float(a)
        self.b = 1.0 - self.a
        self.u0 = np.array(u0, dtype=np.float64).reshape(4)
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        a, b = self.a, self.b
        x, y, vx, vy = u[..., 0], u[..., 1], u[..., 2], u[..., 3]
        xa, xb, yy = x + a, x - b, y ** 2
        d1 = (xa ** 2 + yy) ** 1.5
        d2 = (xb ** 2 + yy) ** 1.5
        f = np.empty(np.shape(u), dtype=np.result_type(u, 1.0))
        f[..., 0], f[..., 1] = vx, vy
        f[..., 2] = x + 2.0 * vy - b * xa / d1 - a * xb / d2
        f[..., 3] = y - 2.0 * vx - b * y / d1 - a * y / d2
        return f

    def jacobian(self, t: float, u: np.ndarray) -> np.ndarray:
        a, b = self.a, self.b
        x, y = float(u[0]), float(u[1])
        J = np.zeros((4, 4))
        J[0, 2] = J[1, 3] = 1.0
        J[2, 3], J[3, 2] = 2.0, -2.0
        for m, px in ((b, x + a), (a, x - b)):  # the pull of each body: -m p / r^3
            r2 = px * px + y * y
            r3, r5 = r2 ** 1.5, r2 ** 2.5
            J[2, 0] -= m * (1.0 / r3 - 3.0 * px * px / r5)
            J[2, 1] -= m * (-3.0 * px * y / r5)
            J[3, 0] -= m * (-3.0 * px * y / r5)
            J[3, 1] -= m * (1.0 / r3 - 3.0 * y * y / r5)
        J[2, 0] += 1.0
        J[3, 1] += 1.0
        return J


class Lorenz(OdeProblem):
    """The Lorenz system ``x' = sigma (y - x)``, ``y' = x (rho - z) - y``,
    ``z' = x y - beta z``.

    As XBraid's example 7 (examples/ex-07.c): ``sigma = 10``, ``rho = 28``,
    ``beta = 8/3``, ``u(0) = (9.614521163788712, 17.519127090401067, 13.94230712158098)``
    (a point near the attractor), forward Euler (the default method) with 2048 steps on
    ``[0, 4 ln(10) / 0.9]`` (four Lyapunov times: the leading exponent is about 0.9, so
    a perturbation grows by about 10^4). Chaotic: the time-stepping error grows at that
    rate too, so the forward Euler solution differs from the exact one by O(1) at the
    end; ``reference`` (``solve_ivp``, DOP853, rtol = atol = 1e-12) is meaningful on
    short intervals only.

    Examples
    --------
    >>> from braidpy.problems import Lorenz
    >>> p = Lorenz(tstop=0.5, ntime=512, method="rk4")
    >>> r = p.solve(max_levels=3, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - p.reference([0.5])[0]).max() < 1e-4)
    True
    """

    def __init__(self, sigma: float = 10.0, rho: float = 28.0, beta: float = 8.0 / 3.0,
                 u0: Any = (9.614521163788712, 17.519127090401067, 13.94230712158098), *,
                 method: str = "forward_euler", tstart: float = 0.0,
                 tstop: float = 4.0 * math.log(10.0) / 0.9, ntime: int = 2048):
        self.sigma, self.rho, self.beta = float(sigma), float(rho), float(beta)
        self.u0 = np.array(u0, dtype=np.float64).reshape(3)
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        x, y, z = u[..., 0], u[..., 1], u[..., 2]
        return np.stack([self.sigma * (y - x), x * (self.rho - z) - y, x * y - self.beta * z],
                        axis=-1)

    def jacobian(self, t: float, u: np.ndarray) -> np.ndarray:
        x, y, z = (float(v) for v in u)
        return np.array([[-self.sigma, self.sigma, 0.0], [self.rho - z, -1.0, -x],
                         [y, x, -self.beta]])


