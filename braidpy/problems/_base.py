"""The common shape of a ready problem: default time grid, an App per method, a reference."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from .. import integrators as ig
from .._extras import require

__all__ = ["Problem", "METHOD_ALIASES", "scipy"]


def scipy(module: str) -> Any:
    """``scipy.<module>``, or an ImportError naming the ``integrators`` extra."""
    return require(f"scipy.{module}", "integrators", "braidpy.problems")

#: PyMGRIT's method names (and short ones) for braidpy.integrators' names.
METHOD_ALIASES = {"be": "backward_euler", "fe": "forward_euler", "cn": "crank_nicolson",
                  "tr": "crank_nicolson", "mr": "implicit_midpoint"}

#: The implicit midpoint rule as a one-stage SDIRK (gamma = 1/2): order 2, A-stable.
IMPLICIT_MIDPOINT = ig.ButcherTableau([[0.5]], [1.0], [0.5], order=2, name="implicit_midpoint")

EXPLICIT = ("forward_euler", "heun", "ssprk3", "rk4")
#: Embedded pairs with step-size control inside every step (integrators.AdaptiveRK):
#: SciPy's names for Dormand-Prince 5(4) and Bogacki-Shampine 3(2).
ADAPTIVE = ("rk45", "rk23")
IMPLICIT = ("backward_euler", "crank_nicolson", "implicit_midpoint", "sdirk2", "sdirk3")


def method_name(method: Any, allowed: Sequence[str]) -> str:
    """The integrator name for ``method`` (PyMGRIT's upper-case names accepted)."""
    name = METHOD_ALIASES.get(str(method).lower(), str(method).lower()) \
        if isinstance(method, str) else method
    if name not in allowed:
        raise ValueError(f"unknown method {method!r}; this problem has "
                         f"{', '.join(allowed)} (or PyMGRIT's BE, FE, CN, TR, MR)")
    return name


class Problem:
    """A ready initial-value problem: its parameters, its default time grid, an App for a
    chosen method, and a reference solution.

    Attributes
    ----------
    tstart, tstop : float
        The time interval.
    ntime : int
        The default number of time steps.
    method : str
        The default method (``app()`` without an argument).
    methods : tuple of str
        The methods ``app`` accepts.
    u0 : numpy.ndarray
        The initial value.
    exact : bool
        Whether ``reference`` is the exact solution (else a tight ``solve_ivp`` solve).
    """

    tstart: float = 0.0
    tstop: float = 1.0
    ntime: int = 64
    method: str = "backward_euler"
    methods: Tuple[str, ...] = ()
    exact: bool = False
    u0: np.ndarray

    def _set_grid(self, tstart: float, tstop: float, ntime: int) -> None:
        tstart, tstop = float(tstart), float(tstop)
        if not (np.isfinite(tstart) and np.isfinite(tstop) and tstop > tstart):
            raise ValueError(f"{type(self).__name__}: need tstart < tstop, got {tstart!r}, "
                             f"{tstop!r}")
        if isinstance(ntime, bool) or not isinstance(ntime, (int, np.integer)) or ntime < 1:
            raise ValueError(f"{type(self).__name__}: ntime must be an int >= 1, got "
                             f"{ntime!r}")
        self.tstart, self.tstop, self.ntime = tstart, tstop, int(ntime)

    @property
    def times(self) -> np.ndarray:
        """The ``ntime + 1`` points of the default uniform grid."""
        return np.linspace(self.tstart, self.tstop, self.ntime + 1)

    def app(self, method: Optional[str] = None, **options: Any) -> Any:
        """An App that steps this problem with ``method`` (default ``self.method``);
        ``options`` go to the integrator (``guess``, ``newton_tol``, ...)."""
        return self._app(method_name(self.method if method is None else method,
                                     self.methods), options)

    def solve(self, method: Optional[str] = None, *, comm: Any = None,
              **options: Any) -> Any:
        """``braidpy.solve`` of ``app(method)`` on the default grid; ``options`` are
        braidpy's (``max_levels``, ``cfactor``, ``abs_tol``, ...)."""
        import braidpy

        return braidpy.solve(self.app(method), self.tstart, self.tstop, self.ntime,
                             comm=comm, **options)

    def reference(self, times: Any) -> np.ndarray:
        """The reference solution at ``times``, shape ``(len(times), *u0.shape)``."""
        raise NotImplementedError

    def _app(self, name: str, options: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(tstart={self.tstart!r}, tstop={self.tstop!r}, "
                f"ntime={self.ntime!r}, method={self.method!r})")


class OdeProblem(Problem):
    """``u' = f(t, u)`` with a vectorized ``f`` and its Jacobian: explicit Runge-Kutta
    methods, adaptive embedded pairs (``"rk45"``, ``"rk23"``: ``AdaptiveRK`` with the
    problem's ``rtol`` and ``atol`` unless ``app`` is given others) or Newton-SDIRK."""

    methods: Tuple[str, ...] = EXPLICIT + ADAPTIVE + ("backward_euler", "sdirk2", "sdirk3")
    stiff = False
    #: The tolerances of the adaptive methods (SciPy's solve_ivp defaults).
    rtol: float = 1e-3
    atol: Any = 1e-6

    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        """``f(t, u)`` for a state of shape ``(n,)`` or stacked states ``(m, n)``."""
        raise NotImplementedError

    def jacobian(self, t: float, u: np.ndarray) -> np.ndarray:
        """``df/du`` at one state, a dense n x n array."""
        raise NotImplementedError

    def _app(self, name: str, options: Dict[str, Any]) -> Any:
        if name in EXPLICIT:
            return ig.ExplicitRK(self.rhs, self.u0, name, vectorized=True, **options)
        if name in ADAPTIVE:
            options.setdefault("rtol", self.rtol)
            options.setdefault("atol", self.atol)
            return ig.AdaptiveRK(self.rhs, self.u0, name, vectorized=True, **options)
        options.setdefault("jacobian", self.jacobian)
        return ig.NonlinearSDIRK(self.rhs, self.u0, name, vectorized=True, **options)

    def reference(self, times: Any) -> np.ndarray:
        """A sequential solve by SciPy's ``solve_ivp`` (``DOP853``, or ``Radau`` with the
        Jacobian for stiff problems; rtol = atol = 1e-12) at ``times``."""
        solve_ivp = scipy("integrate").solve_ivp
        times = np.asarray(times, dtype=np.float64)
        ts = np.unique(np.concatenate([[self.tstart], times]))
        kw: Dict[str, Any] = dict(method="Radau", jac=self.jacobian) if self.stiff \
            else dict(method="DOP853")
        sol = solve_ivp(lambda t, u: self.rhs(t, u), (self.tstart, float(ts[-1])), self.u0,
                        t_eval=ts, rtol=1e-12, atol=1e-12, **kw)
        if not sol.success:
            raise RuntimeError(f"{type(self).__name__}.reference: solve_ivp failed: "
                               f"{sol.message}")
        return sol.y.T[np.searchsorted(ts, times)]


class LinearProblem(Problem):
    """``u' = A u + g(t)`` with a sparse ``A``: theta methods, SDIRK or explicit RK."""

    methods: Tuple[str, ...] = ("forward_euler", "rk4") + IMPLICIT
    A: Any
    g: Optional[Callable[[float], np.ndarray]] = None

    def _app(self, name: str, options: Dict[str, Any]) -> Any:
        A, g = self.A, self.g
        if name in EXPLICIT:
            def rhs(t: Any, U: np.ndarray) -> np.ndarray:
                F = np.ascontiguousarray((A @ U.T).T)
                if g is not None:
                    if np.ndim(t) == 0:
                        F += g(float(t))
                    else:
                        for k, tk in enumerate(np.ravel(t).tolist()):
                            F[k] += g(tk)
                return F
            return ig.ExplicitRK(rhs, self.u0, name, vectorized=True, **options)
        if name == "backward_euler":
            return ig.BackwardEuler(A, self.u0, g=g, **options)
        if name == "crank_nicolson":
            return ig.CrankNicolson(A, self.u0, g=g, **options)
        tab = IMPLICIT_MIDPOINT if name == "implicit_midpoint" else name
        return ig.SDIRK(A, self.u0, tab, g=g, **options)

    def semidiscrete_reference(self, times: Any) -> np.ndarray:
        """The exact solution of the ODE system ``u' = A u + g(t)`` (no time-stepping
        error, only the spatial one): ``expm_multiply`` without forcing, else SciPy's
        ``solve_ivp`` (``Radau`` with the sparse Jacobian ``A``, rtol = atol = 1e-12)."""
        times = np.asarray(times, dtype=np.float64)
        if self.g is None:
            expm_multiply = scipy("sparse.linalg").expm_multiply
            return np.array([expm_multiply((t - self.tstart) * self.A.tocsc(), self.u0)
                             for t in times.tolist()])
        solve_ivp = scipy("integrate").solve_ivp
        ts = np.unique(np.concatenate([[self.tstart], times]))
        A, g = self.A, self.g
        sol = solve_ivp(lambda t, u: A @ u + g(t), (self.tstart, float(ts[-1])), self.u0,
                        method="Radau", jac=A.tocsc(), t_eval=ts, rtol=1e-12, atol=1e-12)
        return sol.y.T[np.searchsorted(ts, times)]
