"""Partial differential equations by the method of lines: 1D advection (upwind, periodic),
the 1D and 2D heat equations (central differences, homogeneous Dirichlet), and the
Allen-Cahn equation (periodic, Newton)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Tuple

import numpy as np

from .. import integrators as ig
from ._base import LinearProblem, OdeProblem, scipy

__all__ = ["Advection1D", "Heat1D", "Heat2D", "AllenCahn"]


def _count(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return int(value)


def _second_difference(n: int, h: float) -> Any:
    """The n x n matrix of ``(u_{i-1} - 2 u_i + u_{i+1}) / h^2`` with zero boundary values."""
    sp = scipy("sparse")
    return sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1],
                    format="csr") / (h * h)


class Advection1D(LinearProblem):
    """Linear advection ``u_t + c u_x = 0`` on ``[x_start, x_end)``, periodic, with
    ``u(x, 0) = exp(-x^2)``.

    Discretisation as PyMGRIT's Advection1D application: ``nx`` equidistant points from
    ``x_start`` to ``x_end``, the last dropped (it is the first, by periodicity), so
    ``nx - 1`` unknowns with ``dx = (x_end - x_start) / (nx - 1)``; first-order upwind
    differences for ``c > 0``, ``u_t = -c (u_i - u_{i-1}) / dx`` with ``u_{-1} = u_{nx-2}``
    (the periodic wrap), and backward Euler in time (``"backward_euler"``, the default).

    ``reference`` is the exact solution ``u0(x - c t)`` (wrapped into the interval): it
    carries the upwind scheme's O(dx) error; ``semidiscrete_reference`` is the exact
    solution of the semi-discrete system, for the time-stepping error alone.

    Parameters
    ----------
    c : float, optional
        The speed (default 1; > 0, the upwind direction).
    x_start, x_end : float, optional
        The periodic interval (default [-1, 1]).
    nx : int, optional
        Points including both ends (default 129: 128 unknowns).
    method : str, optional
        ``"backward_euler"``, ``"crank_nicolson"``, ``"implicit_midpoint"``, ``"sdirk2"``,
        ``"sdirk3"``, ``"forward_euler"``, ``"rk4"`` (explicit ones: mind the CFL limit on
        the coarse levels).
    tstart, tstop, ntime : optional
        The default time grid (0, 2, 128; ``c dt / dx = 1``).

    Examples
    --------
    >>> from braidpy.problems import Advection1D
    >>> p = Advection1D()
    >>> r = p.solve(cfactor=4, max_levels=3, abs_tol=1e-10)
    >>> bool(abs(r.final - p.semidiscrete_reference([p.tstop])[0]).max() < 0.1)
    True
    """

    exact = True

    def __init__(self, c: float = 1.0, x_start: float = -1.0, x_end: float = 1.0,
                 nx: int = 129, *, method: str = "backward_euler", tstart: float = 0.0,
                 tstop: float = 2.0, ntime: int = 128):
        sp = scipy("sparse")
        self.c = float(c)
        if not self.c > 0.0:
            raise ValueError(f"Advection1D: c must be > 0 (the upwind side is x - dx), got "
                             f"{c!r}")
        nx = _count("nx", nx, 3)
        self.x_start, self.x_end = float(x_start), float(x_end)
        self.x = np.linspace(self.x_start, self.x_end, nx)[:-1]
        self.nx = nx - 1
        self.dx = float(self.x[1] - self.x[0])
        n = self.nx
        fac = self.c / self.dx
        upwind = sp.diags([-np.ones(n), np.ones(n - 1)], [0, -1], format="lil")
        upwind[0, n - 1] = 1.0  # u_{-1} is u_{n-1}: the periodic wrap
        self.A = (fac * upwind).tocsr()
        self.u0 = np.exp(-self.x ** 2)
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def reference(self, times: Any) -> np.ndarray:
        """The exact solution ``exp(-s^2)``, ``s = x - c t`` wrapped into the interval."""
        t = np.asarray(times, dtype=np.float64).reshape(-1, 1)
        length = self.x_end - self.x_start
        s = np.mod(self.x - self.c * (t - self.tstart) - self.x_start, length) + self.x_start
        return np.exp(-s ** 2)


class Heat1D(LinearProblem):
    """The heat equation ``u_t - a u_xx = b(x, t)`` on ``[x_start, x_end]`` with
    homogeneous Dirichlet boundary values.

    Discretisation as PyMGRIT's Heat1D application: ``nx`` equidistant points including
    the two boundary points, ``nx - 2`` unknowns, second-order central differences
    (``a (u_{i-1} - 2 u_i + u_{i+1}) / dx^2``), and backward Euler in time (the default),
    ``(I - dt a D2) u1 = u0 + dt b(x, t1)``. The defaults are those of the manufactured
    solution ``u = sin(pi x) cos(t)`` on [0, 2], ``a = 1``, ``nx = 1001``,
    ``b = -sin(pi x) (sin t - a pi^2 cos t)``, with 64 steps on [0, 2].

    Parameters
    ----------
    a : float, optional
        The diffusivity (default 1).
    x_start, x_end : float, optional
        The interval (default [0, 2]).
    nx : int, optional
        Points including both boundary points (default 1001).
    init_cond : callable, optional
        ``init_cond(x)``, the initial value on the interior points (default ``sin(pi x)``).
    rhs : callable, optional
        ``rhs(x, t)``, the source ``b``: the manufactured one above when ``init_cond``,
        ``rhs`` and ``exact`` are all left out, else none (zero) unless given.
    exact : callable, optional
        ``exact(x, t)``, the exact solution, if known (default ``sin(pi x) cos(t)`` when
        ``init_cond`` and ``rhs`` are the defaults). Without it ``reference`` is
        ``semidiscrete_reference``.
    method : str, optional
        ``"backward_euler"`` (default), ``"crank_nicolson"``, ``"forward_euler"``,
        ``"implicit_midpoint"``, ``"sdirk2"``, ``"sdirk3"``, ``"rk4"``.
    tstart, tstop, ntime : optional
        The default time grid (0, 2, 64).

    Examples
    --------
    >>> from braidpy.problems import Heat1D
    >>> p = Heat1D(nx=65)
    >>> r = p.solve(cfactor=4, max_levels=3, abs_tol=1e-10)
    >>> bool(abs(r.final - p.reference([p.tstop])[0]).max() < 0.05)
    True
    """

    def __init__(self, a: float = 1.0, x_start: float = 0.0, x_end: float = 2.0,
                 nx: int = 1001, *, init_cond: Optional[Callable[..., Any]] = None,
                 rhs: Optional[Callable[..., Any]] = None,
                 exact: Optional[Callable[..., Any]] = None, method: str = "backward_euler",
                 tstart: float = 0.0, tstop: float = 2.0, ntime: int = 64):
        self.a = float(a)
        nx = _count("nx", nx, 3)
        self.x_start, self.x_end = float(x_start), float(x_end)
        self.x = np.linspace(self.x_start, self.x_end, nx)[1:-1]
        self.nx = nx - 2
        self.dx = float((self.x_end - self.x_start) / (nx - 1))
        self.A = (self.a * _second_difference(self.nx, self.dx)).tocsr()
        a_, x = self.a, self.x
        manufactured = init_cond is None and rhs is None and exact is None
        if manufactured:
            def exact(x: Any, t: float) -> Any:
                return np.sin(math.pi * x) * np.cos(t)

            def rhs(x: Any, t: float) -> Any:
                return -np.sin(math.pi * x) * (math.sin(t) - a_ * math.pi ** 2 * math.cos(t))
        self._exact = exact
        init = init_cond or (lambda x: np.sin(math.pi * x))
        self.u0 = np.array(init(x), dtype=np.float64).reshape(self.nx)
        source = rhs
        if manufactured:  # rhs's values, its profile computed once (SeparableForcing)
            self.g = ig.SeparableForcing(
                -np.sin(math.pi * x), lambda t: math.sin(t) - a_ * math.pi ** 2 * math.cos(t))
        elif source is not None:
            self.g = lambda t: np.asarray(source(x, t), dtype=np.float64)
        self.exact = exact is not None
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def reference(self, times: Any) -> np.ndarray:
        """``exact(x, t)`` at the interior points if known, else
        ``semidiscrete_reference``."""
        if self._exact is None:
            return self.semidiscrete_reference(times)
        return np.array([self._exact(self.x, float(t)) for t in np.ravel(times)])


class Heat2D(LinearProblem):
    """The heat equation ``u_t - a (u_xx + u_yy) = b(x, y, t)`` on
    ``[x_start, x_end] x [y_start, y_end]`` with homogeneous Dirichlet boundary values.

    Discretisation as PyMGRIT's Heat2D application: an ``nx`` by ``ny`` grid including
    the boundary points, the five-point Laplacian, and backward Euler (``"BE"``), forward
    Euler (``"FE"``) or Crank-Nicolson (``"CN"``) in time. The state is the interior
    values, ``(nx - 2) * (ny - 2)`` of them with the x index the slower one (PyMGRIT's
    ``(nx, ny)`` array, flattened, without its boundary rows and columns); ``grid(u)``
    puts them back into the ``(nx, ny)`` array with the boundary zeros. Defaults: the
    manufactured solution ``u = sin(pi x) sin(pi y) cos(t)`` on the unit square,
    ``a = 1``, 33 x 33 points, 64 steps on [0, 1].

    Parameters
    ----------
    a : float, optional
    x_start, x_end, y_start, y_end : float, optional
    nx, ny : int, optional
    init_cond : callable, optional
        ``init_cond(x, y)`` with ``x`` a column and ``y`` a row (broadcast to the grid).
    rhs : callable, optional
        ``rhs(x, y, t)``, the source, broadcast the same way: the manufactured one when
        ``init_cond``, ``rhs`` and ``exact`` are all left out, else none unless given.
    exact : callable, optional
        ``exact(x, y, t)``; the default one with the default ``init_cond`` and ``rhs``.
    method : str, optional
        ``"backward_euler"`` (default), ``"forward_euler"``, ``"crank_nicolson"``,
        ``"sdirk2"``, ``"sdirk3"``, ...
    tstart, tstop, ntime : optional

    Examples
    --------
    >>> from braidpy.problems import Heat2D
    >>> p = Heat2D(nx=17, ny=17, method="CN")
    >>> r = p.solve(cfactor=4, max_levels=3, abs_tol=1e-10)
    >>> bool(abs(r.final - p.reference([p.tstop])[0]).max() < 0.01)
    True
    """

    def __init__(self, a: float = 1.0, x_start: float = 0.0, x_end: float = 1.0,
                 y_start: float = 0.0, y_end: float = 1.0, nx: int = 33, ny: int = 33, *,
                 init_cond: Optional[Callable[..., Any]] = None,
                 rhs: Optional[Callable[..., Any]] = None,
                 exact: Optional[Callable[..., Any]] = None, method: str = "backward_euler",
                 tstart: float = 0.0, tstop: float = 1.0, ntime: int = 64):
        sp = scipy("sparse")
        self.a = float(a)
        nx, ny = _count("nx", nx, 3), _count("ny", ny, 3)
        self.nx, self.ny = nx, ny
        self.x = np.linspace(float(x_start), float(x_end), nx)
        self.y = np.linspace(float(y_start), float(y_end), ny)
        self.dx, self.dy = float(self.x[1] - self.x[0]), float(self.y[1] - self.y[0])
        mx, my = nx - 2, ny - 2
        self.A = (self.a * (sp.kron(_second_difference(mx, self.dx), sp.identity(my))
                            + sp.kron(sp.identity(mx), _second_difference(my, self.dy)))).tocsr()
        xi, yi = self.x[1:-1, None], self.y[None, 1:-1]
        a_ = self.a
        manufactured = init_cond is None and rhs is None and exact is None
        if manufactured:
            def exact(x: Any, y: Any, t: float) -> Any:
                return np.sin(math.pi * x) * np.sin(math.pi * y) * np.cos(t)

            def rhs(x: Any, y: Any, t: float) -> Any:
                return (-np.sin(math.pi * x) * np.sin(math.pi * y)
                        * (math.sin(t) - 2.0 * a_ * math.pi ** 2 * math.cos(t)))
        self._exact = exact
        init = init_cond or (lambda x, y: np.sin(math.pi * x) * np.sin(math.pi * y))
        shape = (mx, my)
        self.u0 = np.broadcast_to(np.asarray(init(xi, yi), dtype=np.float64),
                                  shape).ravel().copy()
        source = rhs
        if manufactured:  # rhs's values, its profile computed once (SeparableForcing)
            profile = (-np.sin(math.pi * xi) * np.sin(math.pi * yi)).ravel()
            self.g = ig.SeparableForcing(
                profile, lambda t: math.sin(t) - 2.0 * a_ * math.pi ** 2 * math.cos(t))
        elif source is not None:
            self.g = lambda t: np.broadcast_to(np.asarray(source(xi, yi, t), dtype=np.float64),
                                               shape).ravel().copy()
        self.exact = exact is not None
        self.method = method
        self._set_grid(tstart, tstop, ntime)

    def grid(self, u: Any) -> np.ndarray:
        """The state ``u`` (interior values) as the ``(nx, ny)`` grid with its boundary."""
        out = np.zeros((self.nx, self.ny))
        out[1:-1, 1:-1] = np.asarray(u).reshape(self.nx - 2, self.ny - 2)
        return out

    def reference(self, times: Any) -> np.ndarray:
        """``exact(x, y, t)`` at the interior points if known, else
        ``semidiscrete_reference``."""
        if self._exact is None:
            return self.semidiscrete_reference(times)
        xi, yi = self.x[1:-1, None], self.y[None, 1:-1]
        shape = (self.nx - 2, self.ny - 2)
        return np.array([np.broadcast_to(self._exact(xi, yi, float(t)), shape).ravel()
                         for t in np.ravel(times)])


class AllenCahn(OdeProblem):
    """The Allen-Cahn equation ``u_t = Δu + u (1 - u^nu) / eps^2`` on the periodic square
    ``[-1/2, 1/2]^2``, ``u(x, 0) = tanh((R0 - |x|) / (sqrt(2) eps))``: a circle of
    radius ``R0`` that shrinks, in the sharp-interface limit, as ``R(t)^2 = R0^2 - 2t``.

    Discretisation as PyMGRIT's AllenCahn application: ``nx`` by ``nx`` unknowns,
    ``dx = 1 / nx``, the periodic five-point Laplacian, and backward Euler with Newton's
    method (PyMGRIT's ``"IMPL"``, the default; its Newton tolerance 1e-12 and at most 100
    iterations: the coarse levels' long steps from a poor guess need many) with the exact
    sparse Jacobian ``Δ + diag(1 - (nu + 1) u^nu) / eps^2`` (a
    :class:`~braidpy.integrators.ConstantPlusDiagonal`); SDIRK2 and SDIRK3 too.
    PyMGRIT's parameters ``eps = 0.04``, ``nu = 2``, ``R0 = 0.25``; the initial value is
    evaluated at ``numpy.linspace(-0.5, 0.5, nx)`` as PyMGRIT does. PyMGRIT's ``"IMEX"``
    and ``"CN"`` steps are not provided. The default grid (32 x 32, 64 steps on
    [0, 0.02]) is small enough for the tests.

    ``reference`` is a sequential solve by ``solve_ivp`` (Radau with the sparse Jacobian,
    rtol = atol = 1e-10): the semi-discrete solution; ``radius(u)`` is PyMGRIT's
    measure of the circle, ``sqrt(#{u >= 0} / pi) dx``, to compare with
    :meth:`exact_radius`.

    Examples
    --------
    >>> from braidpy.problems import AllenCahn
    >>> p = AllenCahn(nx=16, ntime=16)
    >>> r = p.solve(max_levels=2, cfactor=4, abs_tol=1e-9)
    >>> bool(abs(p.radius(r.final) - p.exact_radius(p.tstop)) < 2 * p.dx)
    True
    """

    methods: Tuple[str, ...] = ("backward_euler", "sdirk2", "sdirk3")
    stiff = True

    def __init__(self, nx: int = 32, eps: float = 0.04, nu: int = 2, radius: float = 0.25, *,
                 newton_tol: float = 1e-12, newton_max_iter: int = 100,
                 method: str = "backward_euler",
                 tstart: float = 0.0, tstop: float = 0.02, ntime: int = 64):
        sp = scipy("sparse")
        self.nx = _count("nx", nx, 3)
        self.eps, self.nu, self.radius0 = float(eps), int(nu), float(radius)
        self.dx = 1.0 / self.nx
        n = self.nx
        wrap = sp.diags([np.ones(n - 1), -2.0 * np.ones(n), np.ones(n - 1)], [-1, 0, 1],
                        format="lil")
        wrap[0, n - 1] = wrap[n - 1, 0] = 1.0
        D2 = wrap.tocsr() / self.dx ** 2
        self.A = (sp.kron(D2, sp.identity(n)) + sp.kron(sp.identity(n), D2)).tocsr()
        x = np.linspace(-0.5, 0.5, n)
        r = np.sqrt(x[:, None] ** 2 + x[None, :] ** 2)
        self.u0 = np.tanh((self.radius0 - r) / (math.sqrt(2.0) * self.eps)).ravel()
        self.newton_tol, self.newton_max_iter = float(newton_tol), newton_max_iter
        self.method = method
        self._set_grid(tstart, tstop, ntime)
        from ..integrators import ConstantPlusDiagonal

        self._jacobian = ConstantPlusDiagonal(self.A, self._reaction_derivative)

    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        """``Δu + u (1 - u^nu) / eps^2`` for a state ``(n,)`` or stacked states ``(m, n)``."""
        lap = np.ascontiguousarray((self.A @ np.atleast_2d(u).T).T).reshape(u.shape)
        return lap + u * (1.0 - u ** self.nu) / self.eps ** 2

    def jacobian(self, t: float, u: np.ndarray) -> Any:
        """``Δ + diag(1 - (nu + 1) u^nu) / eps^2``, sparse (CSC, every call on the pattern
        of ``Δ``: only the diagonal values change)."""
        return self._jacobian(t, u)

    def _reaction_derivative(self, t: Any, u: np.ndarray) -> np.ndarray:
        """``(1 - (nu + 1) u^nu) / eps^2``, elementwise: the Jacobian's diagonal part."""
        return (1.0 - (self.nu + 1) * u ** self.nu) / self.eps ** 2

    def _app(self, name: str, options: Any) -> Any:
        from .. import integrators as ig

        options.setdefault("jacobian", self._jacobian)
        options.setdefault("newton_tol", self.newton_tol)
        options.setdefault("newton_max_iter", self.newton_max_iter)
        return ig.NonlinearSDIRK(self.rhs, self.u0, name, vectorized=True, **options)

    def reference(self, times: Any) -> np.ndarray:
        """A sequential ``solve_ivp`` solve (Radau, sparse Jacobian, rtol = atol = 1e-10)."""
        solve_ivp = scipy("integrate").solve_ivp
        times = np.asarray(times, dtype=np.float64)
        ts = np.unique(np.concatenate([[self.tstart], times]))
        sol = solve_ivp(self.rhs, (self.tstart, float(ts[-1])), self.u0, method="Radau",
                        jac=lambda t, u: self.jacobian(t, u).tocsc(), t_eval=ts, rtol=1e-10,
                        atol=1e-10)
        return sol.y.T[np.searchsorted(ts, times)]

    def radius(self, u: Any) -> float:
        """The circle's radius as PyMGRIT measures it: ``sqrt(#{u >= 0} / pi) dx``."""
        return float(math.sqrt(np.count_nonzero(np.asarray(u) >= 0.0) / math.pi) * self.dx)

    def exact_radius(self, t: float) -> float:
        """The sharp-interface radius ``sqrt(max(R0^2 - 2 t, 0))``."""
        return math.sqrt(max(self.radius0 ** 2 - 2.0 * (float(t) - self.tstart), 0.0))
