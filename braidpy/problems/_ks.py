"""The Kuramoto-Sivashinsky equation, a chaotic PDE: fourth-order finite differences on a
periodic grid and the two-stage Lobatto IIIC method with Newton, as XBraid's KS driver
(drivers/drive-KS-Delta) discretises it."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .._app import App
from ._base import Problem, scipy

__all__ = ["KuramotoSivashinsky", "KuramotoSivashinskySpectral"]

#: One Lyapunov time of the driver's KS setting: ln(10) / 0.1 (an error grows tenfold).
LYAPUNOV_TIME = math.log(10.0) / 0.1

#: Fourth-order central stencils (offsets -2..2, -2..2 and -3..3) of d/dx, d^2/dx^2 and
#: d^4/dx^4 on a unit grid, XBraid's drive-ks.cpp values.
D1 = (1.0 / 12, -2.0 / 3, 0.0, 2.0 / 3, -1.0 / 12)
D2 = (-1.0 / 12, 4.0 / 3, -5.0 / 2, 4.0 / 3, -1.0 / 12)
D4 = (-1.0 / 6, 2.0, -13.0 / 2, 28.0 / 3, -13.0 / 2, 2.0, -1.0 / 6)


def _circulant(stencil: Tuple[float, ...], n: int) -> Any:
    """The n x n periodic (circulant) CSR matrix of a centred stencil."""
    sp = scipy("sparse")
    half = len(stencil) // 2
    rows = np.repeat(np.arange(n), len(stencil))
    cols = (rows + np.tile(np.arange(len(stencil)) - half, n)) % n
    vals = np.tile(np.asarray(stencil, dtype=np.float64), n)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def _coefficients(theta: Optional[Tuple[float, float, float]]) -> Tuple[float, ...]:
    """(a11, a12, a21, a22) of the driver's two-stage theta family; None: Lobatto IIIC."""
    th_a, th_b, th_c = (0.0, 0.0, 1.0) if theta is None else theta
    th_cs = 1.0 - th_a - th_b - th_c
    return ((th_b + th_c) / 2, -th_c / 2, (th_a + th_b + th_c) / 2 + th_cs, (th_a + th_c) / 2)


class KuramotoSivashinsky(Problem):
    """The Kuramoto-Sivashinsky equation ``u_t = -u_xx - u_xxxx - u u_x`` on the periodic
    interval ``[0, length)``, ``u(x, 0) = sin(2 pi x / length)``: chaotic for long
    intervals (``length = 64``: its largest Lyapunov exponent is about 0.1, so an error
    grows tenfold in one Lyapunov time ``ln(10) / 0.1``).

    Discretisation as XBraid's KS driver (``drivers/drive-KS-Delta/drive-ks.cpp``):
    ``nx`` points ``x_i = i dx``, ``dx = length / nx``; fourth-order central differences,
    periodic, ``f(u) = -L u - u * (Dx u)`` with ``Dx`` the stencil
    ``(1/12, -2/3, 0, 2/3, -1/12) / dx`` and ``L = D2 / dx^2 + D4 / dx^4``, ``D2 =
    (-1/12, 4/3, -5/2, 4/3, -1/12)``, ``D4 = (-1/6, 2, -13/2, 28/3, -13/2, 2, -1/6)``; in
    time the two-stage Lobatto IIIC method (order 2, L-stable),
    ``k_1 = dt f(u + k_1/2 - k_2/2)``, ``k_2 = dt f(u + k_1/2 + k_2/2)``,
    ``u_new = u + (k_1 + k_2) / 2``, the stages solved by Newton's method with the exact
    Jacobian ``-(L + diag(Dx u) + diag(u) Dx)`` (dense block solves, batched).

    Two apps:

    * ``app()``: the state is ``u`` (``nx`` values); each step starts Newton from
      ``k_1 = k_2 = dt f(u)`` and iterates until the update's max-norm is at most
      ``newton_tol`` (default 1e-12, at most ``newton_max_iter`` = 20 iterations, else
      RuntimeError), so a step is a function of ``u`` alone; ``step_stacked`` steps many
      states at once, row for row as ``step`` does (batched = unbatched, bitwise). For
      Delta correction (``delta_rank > 0``) it has ``init_basis`` (the driver's Fourier
      modes), ``inner_prod`` (the dot product) and a ``step`` that replaces each basis
      vector by the step's exact derivative at ``u`` applied to it (the linearised
      stage equations at the converged stages, one block solve).
    * ``xbraid_app(theta=False)``: XBraid's driver step for step, for comparing MGRIT
      iterations with it digit for digit. Its state is ``nx + 2 nx`` values, ``u``
      followed by the stage values ``k_1, k_2`` of the step that produced it (Newton's
      warm start; sums and messages carry them, the norm ``|u|_2 / sqrt(nx)`` does not);
      Newton runs at most ``newton_iters`` (default 3) iterations, stopping when the
      last update's max-norm is at most ``sqrt(nx) 1e-10``, from the stage values stored
      at ``ustop`` -- except for a step onto a C-point below the coarsest level, which
      starts from ``k_2 = dt f(ustop)``, ``k_1 = 2 (ustop - u) - k_2`` and leaves the
      stored stage values as they were. It reads ``ustop``, so it is an app with a user
      residual (``ustop - Phi(u)``, XBraid's own default) and runs with ``batch=False``;
      :meth:`xbraid_options` gives braidpy the driver's solver settings (``storage=0``
      among them). ``theta=True`` is the driver's ``-theta``: on coarse levels, stage
      coefficients fitted to ``cf`` fine steps.

    ``reference(times)`` is a sequential solve of the semi-discrete system by SciPy's
    ``solve_ivp`` (Radau with the Jacobian, rtol = atol = 1e-11): no time-stepping
    error; ``sequential(ntime)`` steps ``app()`` from tstart to tstop.

    Parameters
    ----------
    nx : int, optional
        Grid points (default 64, the driver's).
    length : float, optional
        The period (default 64).
    lyapunov_times : float, optional
        ``tstop`` in Lyapunov times (the driver's ``-tf``, default 4: ``tstop = 92.1``).
    ntime : int, optional
        Time steps (the driver's ``-nt``, default 2048).
    newton_tol, newton_max_iter : optional
        ``app()``'s Newton stopping rule (default 1e-12, 20).
    newton_iters : int, optional
        ``xbraid_app()``'s most Newton iterations (the driver's ``-niters``, default 3).

    Examples
    --------
    >>> from braidpy.problems import KuramotoSivashinsky
    >>> p = KuramotoSivashinsky(nx=32, length=32.0, lyapunov_times=0.1, ntime=16)
    >>> r = p.solve(max_levels=2, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - p.sequential()[-1]).max() < 1e-8)
    True
    """

    method = "lobatto_iiic"
    methods: Tuple[str, ...] = ("lobatto_iiic",)

    def __init__(self, nx: int = 64, length: float = 64.0, *, lyapunov_times: float = 4.0,
                 ntime: int = 2048, newton_tol: float = 1e-12, newton_max_iter: int = 20,
                 newton_iters: int = 3):
        if isinstance(nx, bool) or not isinstance(nx, (int, np.integer)) or nx < 7:
            raise ValueError(f"KuramotoSivashinsky: nx must be an int >= 7 (the stencil's "
                             f"width), got {nx!r}")
        length = float(length)
        if not (math.isfinite(length) and length > 0.0):
            raise ValueError(f"KuramotoSivashinsky: length must be > 0, got {length!r}")
        for name, v in (("newton_max_iter", newton_max_iter), ("newton_iters", newton_iters)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"KuramotoSivashinsky: {name} must be an int >= 1, "
                                 f"got {v!r}")
        if not float(newton_tol) > 0.0:
            raise ValueError(f"KuramotoSivashinsky: newton_tol must be > 0, got "
                             f"{newton_tol!r}")
        self.nx, self.length = int(nx), length
        self.dx = length / self.nx
        dx = self.dx
        self.Dx = (_circulant(D1, self.nx) * (1 / dx)).tocsr()
        self.L = (_circulant(D2, self.nx) * (1 / (dx * dx))
                  + _circulant(D4, self.nx) * (1 / (dx * dx * dx * dx))).tocsr()
        self._Ld, self._Dxd = self.L.toarray(), self.Dx.toarray()
        # x_i = i * step as Eigen's LinSpaced(nx, 0, length - length/nx), then 2 pi / length
        step = (length - length / self.nx) / (self.nx - 1)
        self.x = np.arange(self.nx) * step
        self.x[-1] = length - length / self.nx
        self.u0 = np.sin(self.x * (2 * math.pi / length))
        self.newton_tol, self.newton_max_iter = float(newton_tol), int(newton_max_iter)
        self.newton_iters = int(newton_iters)
        self.lyapunov_times = float(lyapunov_times)
        self._set_grid(0.0, self.lyapunov_times * LYAPUNOV_TIME, ntime)

    # -- the semi-discrete system ------------------------------------------------------
    def rhs(self, t: Any, u: np.ndarray) -> np.ndarray:
        """``f(u) = -L u - u * (Dx u)`` for a state ``(nx,)`` or stacked states ``(m, nx)``
        (each row as alone: sparse products, row-wise sums)."""
        if u.ndim == 1:
            return -(self.L @ u) - u * (self.Dx @ u)
        U = np.ascontiguousarray(u.T)
        return np.ascontiguousarray((-(self.L @ U) - U * (self.Dx @ U)).T)

    def jacobian(self, t: Any, u: np.ndarray) -> np.ndarray:
        """``df/du = -(L + diag(Dx u) + diag(u) Dx)``, dense; stacked ``(m, nx, nx)`` for
        stacked states."""
        U = np.atleast_2d(u)
        dxu = self.rhs_dx(U)
        J = -(self._Ld[None] + U[:, :, None] * self._Dxd[None])
        idx = np.arange(self.nx)
        J[:, idx, idx] -= dxu
        return J[0] if u.ndim == 1 else J

    def rhs_dx(self, U: np.ndarray) -> np.ndarray:
        """``Dx u`` for stacked states ``(m, nx)``, row by row as a single product."""
        return np.ascontiguousarray((self.Dx @ np.ascontiguousarray(U.T)).T)

    # -- the time step -----------------------------------------------------------------
    def _newton(self, U: np.ndarray, K: np.ndarray, dt: np.ndarray, coef: Tuple[float, ...],
                max_iter: int, tol: float, strict: bool) -> np.ndarray:
        """Newton for the stage values ``K`` (m, 2, nx) of the steps from ``U`` (m, nx),
        in place; each row stops on its own (max |update| <= tol after an update)."""
        a11, a12, a21, a22 = coef
        m, n = U.shape
        eye = np.eye(n)
        active = np.ones(m, dtype=bool)
        P: Any = None
        for i in range(max_iter):
            if i > 0:
                active &= ~(np.abs(P).max(axis=(1, 2)) <= tol)
                if not active.any():
                    break
            rows = np.flatnonzero(active)
            Ua, Ka, dta = U[rows], K[rows], dt[rows, None]
            U1 = Ua + a11 * Ka[:, 0] + a12 * Ka[:, 1]
            U2 = Ua + a21 * Ka[:, 0] + a22 * Ka[:, 1]
            R = np.concatenate([Ka[:, 0] - dta * self.rhs(None, U1),
                                Ka[:, 1] - dta * self.rhs(None, U2)], axis=1)
            B1 = dta[:, :, None] * self.jacobian(None, U1)
            B2 = dta[:, :, None] * self.jacobian(None, U2)
            A = np.empty((len(rows), 2 * n, 2 * n))
            A[:, :n, :n] = eye - a11 * B1
            A[:, :n, n:] = -a12 * B1
            A[:, n:, :n] = -a21 * B2
            A[:, n:, n:] = eye - a22 * B2
            Pa = np.linalg.solve(A, R[:, :, None])[:, :, 0].reshape(len(rows), 2, n)
            K[rows] = Ka - Pa
            if P is None:
                P = np.zeros_like(K)
            P[rows] = Pa
        else:
            if strict and P is not None and not (np.abs(P[active]).max(initial=0.0) <= tol):
                raise RuntimeError(
                    f"KuramotoSivashinsky: Newton did not reach newton_tol = {tol:g} in "
                    f"{max_iter} iterations (dt up to {float(dt.max()):g})")
        return K

    def _lobatto(self, U: np.ndarray, dt: np.ndarray, stages: bool = False) -> Any:
        """Lobatto IIIC steps of stacked states, Newton to ``newton_tol`` from
        ``k_1 = k_2 = dt f(u)`` (and the stage values ``K``, (m, 2, nx), if ``stages``)."""
        F = dt[:, None] * self.rhs(None, U)
        K = np.stack([F, F], axis=1)
        K = self._newton(U, K, dt, _coefficients(None), self.newton_max_iter,
                         self.newton_tol, strict=True)
        out = U + (K[:, 0] + K[:, 1]) / 2
        return (out, K) if stages else out

    def _tangent(self, u: np.ndarray, K: np.ndarray, dt: float, basis: Any) -> None:
        """Each ``psi`` in ``basis`` <- ``Phi'(u) psi``, in place: the Lobatto IIIC step
        linearised at its stages ``K`` (2, nx): ``(I - dt J A) dk = dt J psi``,
        ``psi + (dk_1 + dk_2) / 2``, J the stage Jacobians, one block solve for all."""
        a11, a12, a21, a22 = _coefficients(None)
        n = self.nx
        U1 = (u + a11 * K[0] + a12 * K[1])[None]
        U2 = (u + a21 * K[0] + a22 * K[1])[None]
        B1, B2 = dt * self.jacobian(None, U1)[0], dt * self.jacobian(None, U2)[0]
        A = np.empty((2 * n, 2 * n))
        A[:n, :n], A[:n, n:] = np.eye(n) - a11 * B1, -a12 * B1
        A[n:, :n], A[n:, n:] = -a21 * B2, np.eye(n) - a22 * B2
        Psi = np.stack([np.asarray(psi) for psi in basis], axis=1)
        dK = np.linalg.solve(A, np.concatenate([B1 @ Psi, B2 @ Psi]))
        new = Psi + (dK[:n] + dK[n:]) / 2
        for j, psi in enumerate(basis):
            psi[...] = new[:, j]

    def app(self, method: Optional[str] = None, **options: Any) -> Any:
        """An App stepping ``u`` by Lobatto IIIC with Newton to ``newton_tol``, batched."""
        if method is not None and method != "lobatto_iiic":
            raise ValueError(f"unknown method {method!r}; KuramotoSivashinsky has "
                             f"lobatto_iiic (and xbraid_app() for XBraid's driver)")
        if options:
            raise TypeError(f"KuramotoSivashinsky.app takes no options, got "
                            f"{sorted(options)}")
        return KSApp(self)

    def _app(self, name: str, options: Dict[str, Any]) -> Any:
        return self.app(name, **options)

    def xbraid_app(self, theta: bool = False) -> Any:
        """An App that is XBraid's KS driver step for step (class docstring); solve it
        with :meth:`xbraid_options`."""
        return XBraidKSApp(self, bool(theta))

    def xbraid_options(self, max_levels: int = 4, cfactor: int = 4, cfactor0: int = 4,
                       nrelax: int = 1, nrelax0: int = 1, tol: float = 1e-8,
                       max_iter: int = 25, theta: bool = False) -> Dict[str, Any]:
        """braidpy options of the driver run ``-ml max_levels -cf cfactor -cf0 cfactor0
        -nu nrelax -nu0 nrelax0 -tol tol -mi max_iter [-theta]`` with this problem's
        ``-nt`` and ``-tf``: the driver's level count (a coarsest step of at most 1.5,
        3 with theta), min_coarse, storage 0 (every point), 2-norm, absolute tolerance,
        no batching (the step reads ``ustop``)."""
        min_cg = math.ceil(self.tstop / (3.0 if theta else 1.5))
        cnt, levels = self.ntime // cfactor0, max_levels
        for i in range(1, max_levels):
            cnt //= cfactor
            if cnt < min_cg:
                levels = i + 1
                break
        return dict(max_levels=levels, min_coarse=min_cg, cfactor={"default": cfactor,
                    0: cfactor0}, nrelax={"default": nrelax, 0: nrelax0, levels - 1: 1},
                    abs_tol=tol, max_iter=max_iter, tnorm=2, storage=0, skip=True,
                    batch=False)

    # -- references --------------------------------------------------------------------
    def sequential(self, ntime: Optional[int] = None) -> np.ndarray:
        """``app()``'s steps from tstart to tstop on ``ntime`` (default ``self.ntime``)
        uniform steps: all ``ntime + 1`` states."""
        ntime = self.ntime if ntime is None else int(ntime)
        ts = np.linspace(self.tstart, self.tstop, ntime + 1)
        out = np.empty((ntime + 1, self.nx))
        out[0] = self.u0
        for i in range(ntime):
            out[i + 1] = self._lobatto(out[i][None], np.array([ts[i + 1] - ts[i]]))[0]
        return out

    def reference(self, times: Any) -> np.ndarray:
        """``solve_ivp`` (Radau, dense Jacobian, rtol = atol = 1e-11) at ``times``."""
        solve_ivp = scipy("integrate").solve_ivp
        times = np.asarray(times, dtype=np.float64)
        ts = np.unique(np.concatenate([[self.tstart], times]))
        sol = solve_ivp(self.rhs, (self.tstart, float(ts[-1])), self.u0, method="Radau",
                        jac=self.jacobian, t_eval=ts, rtol=1e-11, atol=1e-11)
        if not sol.success:
            raise RuntimeError(f"KuramotoSivashinsky.reference: solve_ivp failed: "
                               f"{sol.message}")
        return sol.y.T[np.searchsorted(ts, times)]

    def __repr__(self) -> str:
        return (f"KuramotoSivashinsky(nx={self.nx!r}, length={self.length!r}, "
                f"lyapunov_times={self.lyapunov_times!r}, ntime={self.ntime!r})")


class KSApp(App):
    """``KuramotoSivashinsky.app()``: Lobatto IIIC with Newton to tolerance; the state
    is u; batched."""

    def __init__(self, problem: KuramotoSivashinsky):
        self.problem = problem

    def init(self, t: float) -> np.ndarray:
        return self.problem.u0.copy()

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        basis = getattr(status, "basis", None)
        if basis:  # Delta correction: psi <- Phi'(u) psi, at the converged stages
            new, K = self.problem._lobatto(u[None], np.array([t1 - t0]), stages=True)
            self.problem._tangent(u, K[0], t1 - t0, basis)
            u[:] = new[0]
        else:
            u[:] = self.problem._lobatto(u[None], np.array([t1 - t0]))[0]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> np.ndarray:
        return self.problem._lobatto(np.asarray(U), t1s - t0s)

    def init_basis(self, t: float, index: int) -> np.ndarray:
        """Basis vector ``index`` for Delta correction: XBraid's driver's Fourier mode
        (1 for index 0, then cos and sin of wave number 1, 2, ... by turns)."""
        p = self.problem
        if index == 0:
            return np.ones(p.nx) / p.nx
        x = p.x * (2 * math.pi / p.length)
        k = index // 2 if index % 2 == 0 else (index + 1) // 2
        return np.sin(k * x) if index % 2 == 0 else np.cos(k * x)

    def inner_prod(self, u: np.ndarray, v: np.ndarray) -> float:
        return float(np.dot(u, v))


class XBraidKSApp(App):
    """``KuramotoSivashinsky.xbraid_app()``: XBraid's KS driver step for step; the state
    is ``[u, k_1, k_2]``, the step reads ``ustop`` (a user residual app)."""

    def __init__(self, problem: KuramotoSivashinsky, theta: bool):
        self.problem, self.theta = problem, theta
        self._n = problem.nx
        self._tol = math.sqrt(problem.nx) * 1e-10

    def init(self, t: float) -> np.ndarray:
        out = np.zeros(3 * self._n)
        out[:self._n] = self.problem.u0
        return out

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any,
             fstop: Any = None, ustop: Any = None) -> None:
        aliased = ustop is None or ustop is u
        new = self._stepped(u, u.copy() if aliased else ustop, t1 - t0, status, aliased)
        if fstop is not None:  # XBraid adds the FAS right-hand side after the step
            new = 1.0 * fstop + 1.0 * new
        u[:] = new

    def residual(self, ustop: np.ndarray, r: np.ndarray, status: Any) -> None:
        """XBraid's default residual ``ustop - Phi(r)``, Phi started from ustop's stages."""
        r[:] = 1.0 * ustop + -1.0 * self._stepped(r, ustop, status.t1 - status.t0, status)

    def norm(self, u: np.ndarray) -> float:
        n = self._n
        return float(math.sqrt(float(np.dot(u[:n], u[:n]))) / math.sqrt(n))

    def _stepped(self, u: np.ndarray, ustop: np.ndarray, dt: float, status: Any,
                 aliased: bool = False) -> np.ndarray:
        """Phi(u), a new vector: the driver's Step with ustop's stage values;
        ``aliased``: ustop is u itself (the new stage values are then kept)."""
        p, n = self.problem, self._n
        level, nlevels = status.level, status.nlevels
        cf = status.cfactor(level) if level < nlevels - 1 else 0
        use_guess = level == nlevels - 1 or (status.index + 1) % cf != 0
        if use_guess:
            K = ustop[n:].reshape(1, 2, n).copy()
        else:
            s = ustop[:n]
            k2 = dt * p.rhs(None, s)
            K = np.stack([2 * (s - u[:n]) - k2, k2])[None]
        coef = _coefficients(None)
        if self.theta and level > 0:
            total = 1.0  # fine steps per coarse step: cfactor0 * cfactor^(level - 1)
            for lv in range(level):
                total *= status.cfactor(lv)
            th = (total - math.sqrt(3 * total * total + 6) / 3) / total
            coef = _coefficients((th, th, 2.0 / 3 + 1 / (3 * total * total) - th))
        K = p._newton(u[None, :n], K, np.array([dt]), coef, p.newton_iters, self._tol,
                      strict=False)
        out = np.empty(3 * n)
        out[:n] = u[:n] + (K[0, 0] + K[0, 1]) / 2
        out[n:] = K[0].ravel() if use_guess or aliased else ustop[n:]
        return out


class KuramotoSivashinskySpectral(Problem):
    """The Kuramoto-Sivashinsky equation ``u_t = -u_xx - u_xxxx - u u_x`` on the periodic
    interval ``[0, length)``, pseudo-spectral in space and ETDRK4 in time (Kassam and
    Trefethen, SIAM J. Sci. Comput. 26, 2005), with :class:`KuramotoSivashinsky`'s
    defaults (``u(x, 0) = sin(2 pi x / length)``, 64 points on length 64, four
    Lyapunov times in 2048 steps).

    Space: Fourier collocation on ``nx`` points (``nx`` even), no dealiasing,
    ``u_hat' = (q^2 - q^4) u_hat - (i q / 2) FFT(u^2)`` with ``q = 2 pi k / length``
    (the Nyquist mode's ``q`` set to 0 in the derivative). Time: the fourth-order
    exponential Runge-Kutta method ETDRK4 (explicit; the linear part exact), its
    coefficients by Kassam and Trefethen's contour integrals (32 points), cached per
    step size. The state is ``u`` in physical space; ``step_stacked`` steps many states
    with one FFT per stage (batched = unbatched, bitwise). ``reference`` is ``solve_ivp``
    (DOP853, rtol = atol = 1e-12) on the Fourier coefficients.

    Examples
    --------
    >>> from braidpy.problems import KuramotoSivashinskySpectral
    >>> p = KuramotoSivashinskySpectral(nx=32, length=32.0, lyapunov_times=0.1, ntime=16)
    >>> r = p.solve(max_levels=2, cfactor=4, abs_tol=1e-10)
    >>> bool(abs(r.final - p.sequential()[-1]).max() < 1e-8)
    True
    """

    method = "etdrk4"
    methods: Tuple[str, ...] = ("etdrk4",)

    def __init__(self, nx: int = 64, length: float = 64.0, *, lyapunov_times: float = 4.0,
                 ntime: int = 2048):
        if isinstance(nx, bool) or not isinstance(nx, (int, np.integer)) or nx < 4 \
                or nx % 2:
            raise ValueError(f"KuramotoSivashinskySpectral: nx must be an even int >= 4, "
                             f"got {nx!r}")
        length = float(length)
        if not (math.isfinite(length) and length > 0.0):
            raise ValueError(f"KuramotoSivashinskySpectral: length must be > 0, got "
                             f"{length!r}")
        self.nx, self.length = int(nx), length
        self.dx = length / self.nx
        self.x = np.arange(self.nx) * self.dx
        self.u0 = np.sin(self.x * (2 * math.pi / length))
        q = 2 * math.pi / length * np.arange(self.nx // 2 + 1)
        self.linear = q ** 2 - q ** 4
        qd = q.copy()
        qd[-1] = 0.0  # the Nyquist mode has no first derivative
        self._g = -0.5j * qd
        self._coef: Dict[float, Tuple[np.ndarray, ...]] = {}
        self.lyapunov_times = float(lyapunov_times)
        self._set_grid(0.0, self.lyapunov_times * LYAPUNOV_TIME, ntime)

    def _coefficients(self, dt: float) -> Tuple[np.ndarray, ...]:
        """(E, E/2, Q, f1, f2, f3) of ETDRK4 for step size dt (contour integrals)."""
        c = self._coef.get(dt)
        if c is None:
            L = dt * self.linear
            r = np.exp(1j * math.pi * (np.arange(1, 33) - 0.5) / 32)
            LR = L[:, None] + r[None, :]
            eLR = np.exp(LR)
            Q = dt * np.real(np.mean((np.exp(LR / 2) - 1) / LR, axis=1))
            f1 = dt * np.real(np.mean((-4 - LR + eLR * (4 - 3 * LR + LR ** 2)) / LR ** 3, axis=1))
            f2 = dt * np.real(np.mean((2 + LR + eLR * (-2 + LR)) / LR ** 3, axis=1))
            f3 = dt * np.real(np.mean((-4 - 3 * LR - LR ** 2 + eLR * (4 - LR)) / LR ** 3,
                                      axis=1))
            c = (np.exp(L), np.exp(L / 2), Q, f1, f2, f3)
            self._coef[dt] = c
        return c

    def _nonlinear(self, v: np.ndarray) -> np.ndarray:
        u = np.fft.irfft(v, n=self.nx, axis=-1)
        return self._g * np.fft.rfft(u * u, axis=-1)

    def _etdrk4(self, U: np.ndarray, dts: np.ndarray) -> np.ndarray:
        """ETDRK4 steps of stacked states ``U`` (m, nx), row k by ``dts[k]``."""
        out = np.empty_like(U)
        for dt in np.unique(dts).tolist():
            rows = np.flatnonzero(dts == dt)
            E, E2, Q, f1, f2, f3 = self._coefficients(dt)
            v = np.fft.rfft(U[rows], axis=-1)
            Nv = self._nonlinear(v)
            a = E2 * v + Q * Nv
            Na = self._nonlinear(a)
            b = E2 * v + Q * Na
            Nb = self._nonlinear(b)
            c = E2 * a + Q * (2 * Nb - Nv)
            Nc = self._nonlinear(c)
            v = E * v + Nv * f1 + 2 * (Na + Nb) * f2 + Nc * f3
            out[rows] = np.fft.irfft(v, n=self.nx, axis=-1)
        return out

    def app(self, method: Optional[str] = None, **options: Any) -> Any:
        """An App stepping ``u`` by ETDRK4, batched."""
        if method is not None and method != "etdrk4":
            raise ValueError(f"unknown method {method!r}; KuramotoSivashinskySpectral has "
                             f"etdrk4")
        if options:
            raise TypeError(f"KuramotoSivashinskySpectral.app takes no options, got "
                            f"{sorted(options)}")
        return SpectralKSApp(self)

    def _app(self, name: str, options: Dict[str, Any]) -> Any:
        return self.app(name, **options)

    def sequential(self, ntime: Optional[int] = None) -> np.ndarray:
        """ETDRK4 from tstart to tstop on ``ntime`` (default ``self.ntime``) uniform
        steps: all ``ntime + 1`` states."""
        ntime = self.ntime if ntime is None else int(ntime)
        ts = np.linspace(self.tstart, self.tstop, ntime + 1)
        out = np.empty((ntime + 1, self.nx))
        out[0] = self.u0
        for i in range(ntime):
            out[i + 1] = self._etdrk4(out[i][None], np.array([ts[i + 1] - ts[i]]))[0]
        return out

    def reference(self, times: Any) -> np.ndarray:
        """``solve_ivp`` (DOP853, rtol = atol = 1e-12) of the Fourier coefficients'
        system, at ``times``."""
        solve_ivp = scipy("integrate").solve_ivp
        times = np.asarray(times, dtype=np.float64)
        ts = np.unique(np.concatenate([[self.tstart], times]))
        m = self.nx // 2 + 1

        def f(t: float, y: np.ndarray) -> np.ndarray:
            v = y[:m] + 1j * y[m:]
            d = self.linear * v + self._nonlinear(v)
            return np.concatenate([d.real, d.imag])

        v0 = np.fft.rfft(self.u0)
        sol = solve_ivp(f, (self.tstart, float(ts[-1])), np.concatenate([v0.real, v0.imag]),
                        method="DOP853", t_eval=ts, rtol=1e-12, atol=1e-12)
        if not sol.success:
            raise RuntimeError(f"KuramotoSivashinskySpectral.reference: solve_ivp failed: "
                               f"{sol.message}")
        v = sol.y[:m].T + 1j * sol.y[m:].T
        return np.fft.irfft(v, n=self.nx, axis=-1)[np.searchsorted(ts, times)]

    def __repr__(self) -> str:
        return (f"KuramotoSivashinskySpectral(nx={self.nx!r}, length={self.length!r}, "
                f"lyapunov_times={self.lyapunov_times!r}, ntime={self.ntime!r})")


class SpectralKSApp(App):
    """``KuramotoSivashinskySpectral.app()``: ETDRK4, the state is u; batched."""

    def __init__(self, problem: KuramotoSivashinskySpectral):
        self.problem = problem

    def init(self, t: float) -> np.ndarray:
        return self.problem.u0.copy()

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        u[:] = self.problem._etdrk4(u[None], np.array([t1 - t0]))[0]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> np.ndarray:
        return self.problem._etdrk4(np.asarray(U), t1s - t0s)
