"""Implicit steps of ``u' = f(t, u)`` with Newton's method: SDIRK and backward Euler, batched
row by row."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .._extras import require
from ._initial import Guess, InitialValueApp
from ._tableau import ButcherTableau, tableau as named_tableau

__all__ = ["ConstantPlusDiagonal", "NewtonError", "NonlinearSDIRK", "NonlinearBackwardEuler"]

WHAT = "braidpy.integrators' nonlinear implicit methods with a sparse Jacobian"


class NewtonError(ArithmeticError):
    """Newton's method did not solve a stage equation within ``newton_max_iter``
    iterations; the message names the step (``t0``, ``t1``), the stage and the residual.

    Attributes
    ----------
    t0, t1 : float
        The step.
    stage : int
        The stage (0-based).
    residual : float
        The max-norm of the stage equation's residual after the last iteration.
    """

    def __init__(self, message: str, t0: float, t1: float, stage: int, residual: float):
        super().__init__(message)
        self.t0, self.t1, self.stage, self.residual = t0, t1, stage, residual


class ConstantPlusDiagonal:
    """A Jacobian ``J(t, u) = A + diag(d(t, u))``: a constant sparse matrix plus a diagonal
    that depends on the state, as for ``u' = A u + r(t, u)`` with a pointwise reaction
    ``r`` (``d = dr/du``). Given as ``jacobian`` to :class:`NonlinearSDIRK`, it lets Newton
    evaluate ``d`` for all rows of a stack in one call and write each row's
    ``I - gamma h J`` into ``A``'s pattern, with no sparse matrix built per iteration.

    Parameters
    ----------
    A : scipy.sparse matrix or array_like
        The constant part, n x n (kept in CSC with its whole diagonal stored).
    diagonal : callable
        ``diagonal(t, U)`` returns ``d`` for stacked states ``U`` of shape ``(m, n)`` and
        times ``t`` of shape ``(m, 1)``, an array of shape ``(m, n)``. It must act row by
        row (elementwise arithmetic does), so that a row of a stack gets what the row
        alone gets, bit for bit.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from braidpy.integrators import ConstantPlusDiagonal
    >>> J = ConstantPlusDiagonal(sp.diags([1.0, 1.0], [-1, 1], shape=(3, 3)),
    ...                          lambda t, U: -3.0 * U ** 2)
    >>> J(0.0, np.array([1.0, 0.0, 2.0])).toarray()
    array([[ -3.,   1.,   0.],
           [  1.,   0.,   1.],
           [  0.,   1., -12.]])
    """

    def __init__(self, A: Any, diagonal: Callable[..., Any]):
        sparse = require("scipy.sparse", "integrators", WHAT)
        if not callable(diagonal):
            raise TypeError(f"ConstantPlusDiagonal: diagonal must be a callable "
                            f"diagonal(t, U), got {diagonal!r}")
        try:
            C = sparse.csc_matrix(A, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"ConstantPlusDiagonal: A must be a matrix (SciPy sparse or "
                            f"array_like), got {A!r}") from err
        if C.ndim != 2 or C.shape[0] != C.shape[1]:
            raise ValueError(f"ConstantPlusDiagonal: A must be square, got shape {C.shape}")
        n = C.shape[0]
        coo = C.tocoo()  # the whole diagonal stored: explicit zeros where A has none
        idx = np.arange(n)
        C = sparse.csc_matrix((np.concatenate([coo.data, np.zeros(n)]),
                               (np.concatenate([coo.row, idx]), np.concatenate([coo.col, idx]))),
                              shape=(n, n))
        C.sum_duplicates()
        C.sort_indices()
        self.A, self.diagonal, self.n = C, diagonal, n
        cols = np.repeat(idx, np.diff(C.indptr))
        self.positions = np.flatnonzero(C.indices == cols)
        self._pattern: Optional["_Pattern"] = None

    def diagonals(self, T: np.ndarray, U: np.ndarray) -> np.ndarray:
        """``d`` of every row of ``U`` (times ``T`` of shape ``(m, 1)``), checked."""
        D = self.diagonal(T, U)
        if not isinstance(D, np.ndarray) or D.shape != U.shape:
            raise ValueError(f"ConstantPlusDiagonal: diagonal(t, U) returned "
                             f"{type(D).__name__} of shape {getattr(D, 'shape', None)} for "
                             f"states of shape {U.shape}; it must be of the states' shape")
        return D

    def values(self, d: np.ndarray) -> np.ndarray:
        """The CSC values of ``A + diag(d)`` on ``A``'s pattern."""
        data = self.A.data.copy()
        data[self.positions] += d
        return data

    def __call__(self, t: float, u: np.ndarray) -> Any:
        """``J(t, u)`` at one state, a CSC matrix on ``A``'s pattern."""
        u = np.asarray(u, dtype=np.float64)
        d = self.diagonals(np.array([[float(t)]]), u.reshape(1, -1))[0]
        sparse = require("scipy.sparse", "integrators", WHAT)
        return sparse.csc_matrix((self.values(d), self.A.indices, self.A.indptr),
                                 shape=self.A.shape)

    def pattern(self) -> "_Pattern":
        if self._pattern is None:
            self._pattern = _Pattern(self.A, require("scipy.sparse", "integrators", WHAT))
        return self._pattern


class NonlinearSDIRK(InitialValueApp):
    """``u' = f(t, u)`` stepped by a singly diagonally implicit Runge-Kutta method, each
    stage solved by Newton's method: an MGRIT-ready App.

    Stage i of a step of size ``h`` from ``(t0, u)`` solves for ``Y_i``

        ``G(Y) = Y - gamma h f(t0 + c_i h, Y) - z_i = 0``,  ``z_i = u + h sum_{j<i} A_ij k_j``,

    with ``k_i = (Y_i - z_i) / (gamma h)`` (the stage derivative, recovered without
    another call of ``f``), and ``u1 = u + h sum_i b_i k_i``. Newton starts from
    ``Y = z_i`` and updates ``Y <- Y - (I - gamma h J(t_i, Y))^{-1} G(Y)`` until
    ``max|G(Y)| <= newton_tol * (1 + max|z_i|)``; the Jacobian ``J = df/du`` is evaluated
    afresh at every iteration (full Newton, quadratic convergence). Without a converged
    stage after ``newton_max_iter`` updates, or with a singular ``I - gamma h J``, the step
    raises :class:`NewtonError`, naming ``t0``, ``t1``, the stage and the residual.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u)`` returns ``f(t, u)`` for a state ``u`` of shape ``(n,)``. With
        ``vectorized=True`` it must also take stacked states ``U`` of shape ``(m, n)`` with
        ``t`` a float64 array of shape ``(m, 1)``, as for :class:`ExplicitRK`.
    u0 : array_like
        The initial value at ``tstart``, shape ``(n,)``.
    tableau : ButcherTableau or str, optional
        ``"sdirk2"`` (default), ``"sdirk3"``, ``"backward_euler"``, or any tableau whose
        ``A`` is lower triangular with one non-zero diagonal value.
    jacobian : callable or ConstantPlusDiagonal, optional
        ``jacobian(t, u)`` returns ``df/du`` at one state, an n x n SciPy sparse matrix or
        dense array; a :class:`ConstantPlusDiagonal` for ``A + diag(d(t, u))`` (all rows'
        ``d`` from one call). Default: forward differences, one ``rhs`` evaluation per column
        (``n`` extra calls per Newton iteration; with ``vectorized`` one call per column
        for all rows), increments ``sqrt(eps) * max(1, |u_j|)``.
    newton_tol : float, optional
        The tolerance of the scaled residual above (default 1e-10).
    newton_max_iter : int, optional
        The most Newton updates per stage (default 20).
    vectorized : bool, optional
        Whether ``rhs`` takes stacked states (see above).
    guess : {"u0", "zeros"} or callable, optional
        The initial guess away from ``tstart`` (default: a copy of ``u0``).

    Notes
    -----
    ``step_stacked`` runs Newton on every row at once: the residuals of all rows still
    iterating come from one ``rhs`` call when ``vectorized`` (row by row otherwise), each
    row has its own Jacobian and its own linear solve (LAPACK's ``gesv`` through
    ``numpy.linalg.solve`` for dense Jacobians, SuperLU's ``splu`` for sparse ones), and a
    row stops updating once it meets the tolerance. So every row takes the iterations it
    would take alone and comes out as ``step`` computes it, bit for bit whenever ``rhs``
    of the stack is ``rhs`` of each row bit for bit (elementwise arithmetic is). No
    block-diagonal solve of all rows together is made: its pivoting and ordering would
    differ from one row's, and the rows would agree with ``step`` to rounding only.

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import NonlinearSDIRK
    >>> app = NonlinearSDIRK(lambda t, u: -u * u, np.ones(1), "sdirk3",
    ...                      jacobian=lambda t, u: np.diag(-2.0 * u))
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - 0.5) < 1e-6)    # u(t) = 1 / (1 + t)
    True
    """

    def __init__(self, rhs: Callable[..., Any], u0: Any, tableau: Any = "sdirk2", *,
                 jacobian: Optional[Callable[..., Any]] = None, newton_tol: float = 1e-10,
                 newton_max_iter: int = 20, vectorized: bool = False, guess: Guess = "u0"):
        if not callable(rhs):
            raise TypeError(f"{type(self).__name__}: rhs must be a callable rhs(t, u), "
                            f"got {rhs!r}")
        if jacobian is not None and not callable(jacobian):
            raise TypeError(f"{type(self).__name__}: jacobian must be a callable "
                            f"jacobian(t, u) or None, got {jacobian!r}")
        tab = named_tableau(tableau)
        if not tab.singly_diagonally_implicit:
            raise ValueError(f"{type(self).__name__}: the tableau {tab.name!r} is not singly "
                             f"diagonally implicit (A lower triangular with one non-zero "
                             f"diagonal value), A = {tab.A.tolist()}")
        if isinstance(newton_tol, bool) or not isinstance(newton_tol, (int, float)) \
                or not 0.0 < float(newton_tol) < 1.0:
            raise ValueError(f"newton_tol must be a number in (0, 1), got {newton_tol!r}")
        if isinstance(newton_max_iter, bool) or not isinstance(newton_max_iter, int) \
                or newton_max_iter < 1:
            raise ValueError(f"newton_max_iter must be an int >= 1, got {newton_max_iter!r}")
        if not isinstance(vectorized, bool):
            raise TypeError(f"{type(self).__name__}: vectorized must be True or False, got "
                            f"{vectorized!r}")
        super().__init__(u0, guess)
        if self.u0.ndim != 1 or self.u0.dtype.kind != "f":
            raise ValueError(f"{type(self).__name__}: u0 must be a real vector of shape (n,), "
                             f"got shape {self.u0.shape} and dtype {self.u0.dtype}")
        if isinstance(jacobian, ConstantPlusDiagonal) and jacobian.n != self.u0.size:
            raise ValueError(f"{type(self).__name__}: the jacobian's A is {jacobian.n} x "
                             f"{jacobian.n}; the state has {self.u0.size} values")
        self.rhs, self.jacobian = rhs, jacobian
        self.tableau: ButcherTableau = tab
        self.newton_tol, self.newton_max_iter = float(newton_tol), newton_max_iter
        self.vectorized = vectorized
        self._gamma = float(tab.A[0, 0])
        self._rows = [[(j, float(a)) for j, a in enumerate(tab.A[i, :i].tolist()) if a != 0.0]
                      for i in range(tab.stages)]
        self._c = [float(c) for c in tab.c.tolist()]
        self._b = [(i, float(b)) for i, b in enumerate(tab.b.tolist()) if b != 0.0]
        #: Newton updates made, over all stages and rows (a measure of the work).
        self.newton_iterations = 0
        self._pattern: Optional[_Pattern] = None

    # --- the braidpy contract --------------------------------------------------------------

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """One step from ``t0`` to ``t1``, in place."""
        t0s, t1s = np.array([float(t0)]), np.array([float(t1)])
        u[...] = self._advance(u.reshape(1, -1), t0s, t1s)[0]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Row k of ``U`` one step from ``t0s[k]`` to ``t1s[k]``, in place: Newton on all
        rows at once, each row to its own convergence."""
        U[...] = self._advance(U, np.asarray(t0s, dtype=np.float64),
                               np.asarray(t1s, dtype=np.float64))

    # --- stages ----------------------------------------------------------------------------

    def _advance(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray) -> np.ndarray:
        H = (t1s - t0s).reshape(-1, 1)
        T0 = t0s.reshape(-1, 1)
        gh = self._gamma * H
        ks: List[np.ndarray] = []
        for i, row in enumerate(self._rows):
            Z = U.copy()
            for j, a in row:
                Z += (H * a) * ks[j]
            Y = self._newton(Z, T0 + self._c[i] * H, gh, t0s, t1s, i)
            ks.append((Y - Z) / gh)
        X = np.array(U, copy=True)
        for i, b in self._b:
            X += (H * b) * ks[i]
        return X

    def _newton(self, Z: np.ndarray, T: np.ndarray, gh: np.ndarray, t0s: np.ndarray,
                t1s: np.ndarray, stage: int) -> np.ndarray:
        """Solve Y - gh f(T, Y) = Z for each row (T, gh columns of shape (m, 1))."""
        Y = Z.copy()
        scale = self.newton_tol * (1.0 + np.max(np.abs(Z), axis=1))
        active = np.arange(len(Y))
        for it in range(self.newton_max_iter + 1):
            G = Y[active] - gh[active] * self._f(T[active], Y[active]) - Z[active]
            res = np.max(np.abs(G), axis=1)
            going = ~(res <= scale[active])
            active, G = active[going], G[going]
            if active.size == 0:
                return Y
            if it == self.newton_max_iter:
                break
            split = self.jacobian if isinstance(self.jacobian, ConstantPlusDiagonal) else None
            D = None if split is None else split.diagonals(T[active], Y[active])
            for i, (k, g, r) in enumerate(zip(active.tolist(), G, res[going].tolist())):
                try:
                    if split is not None and D is not None:
                        Y[k] -= self._solve_split(split, D[i], float(gh[k, 0]), g)
                    else:
                        Y[k] -= self._solve(self._jac(float(T[k, 0]), Y[k]),
                                            float(gh[k, 0]), g)
                except (np.linalg.LinAlgError, RuntimeError) as err:
                    raise NewtonError(
                        f"Newton's method failed in the step from t0 = {float(t0s[k])!r} to "
                        f"t1 = {float(t1s[k])!r} (stage {stage}): the matrix I - gamma h J "
                        f"is singular ({err}) at iteration {it + 1}, residual max|G| = "
                        f"{r:.3e}; a smaller step may help", float(t0s[k]), float(t1s[k]),
                        stage, r) from err
            self.newton_iterations += int(active.size)
        k = int(active[0])
        r = float(res[going][0])
        raise NewtonError(
            f"Newton's method did not converge in the step from t0 = {float(t0s[k])!r} to "
            f"t1 = {float(t1s[k])!r} (stage {stage}): residual max|G| = {r:.3e} after "
            f"{self.newton_max_iter} iterations, tolerance {float(scale[k]):.3e} "
            f"(newton_tol {self.newton_tol:g}); a smaller step, a better jacobian or a "
            f"larger newton_max_iter may help", float(t0s[k]), float(t1s[k]), stage, r)

    def _f(self, T: np.ndarray, Y: np.ndarray) -> np.ndarray:
        if self.vectorized:
            F = self.rhs(T, Y)
        else:
            F = np.array([self._checked(self.rhs(float(t), y), y) for t, y in zip(T[:, 0], Y)])
        return self._checked(F, Y)

    def _checked(self, F: Any, Y: np.ndarray) -> np.ndarray:
        if not isinstance(F, np.ndarray) or F.shape != Y.shape:
            raise ValueError(f"{type(self).__name__}: rhs(t, u) returned {type(F).__name__} "
                             f"of shape {getattr(F, 'shape', None)} for a state of shape "
                             f"{Y.shape}; it must return an array of the state's shape")
        return F

    def _jac(self, t: float, y: np.ndarray) -> Any:
        n = y.size
        if self.jacobian is not None:
            J = self.jacobian(t, y)
            if getattr(J, "shape", None) != (n, n):
                raise ValueError(f"{type(self).__name__}: jacobian(t, u) returned "
                                 f"{type(J).__name__} of shape {getattr(J, 'shape', None)}; "
                                 f"it must be {n} x {n}")
            return J
        # forward differences, one column per call (or all columns in one stacked call)
        steps = np.sqrt(np.finfo(np.float64).eps) * np.maximum(1.0, np.abs(y))
        P = y + np.diag(steps)  # row j: y with its j-th entry moved
        f0 = self._f(np.array([[t]]), y.reshape(1, -1))[0]
        F = self._f(np.full((n, 1), t), P)
        return ((F - f0) / ((P - y).diagonal()).reshape(-1, 1)).T

    def _solve(self, J: Any, gh: float, g: np.ndarray) -> np.ndarray:
        """(I - gh J)^{-1} g."""
        n = g.size
        if isinstance(J, np.ndarray):
            return np.linalg.solve(np.eye(n) - gh * J, g)
        sparse = require("scipy.sparse", "integrators", WHAT)
        if not sparse.issparse(J):
            J = np.asarray(J, dtype=np.float64)
            return np.linalg.solve(np.eye(n) - gh * J, g)
        M, pat = self._shifted(J, gh, sparse)
        if pat.band is not None and M is pat.matrix:
            return pat.band.solve(M.data, g)
        splu = require("scipy.sparse.linalg", "integrators", WHAT).splu
        return splu(M, permc_spec=pat.ordering).solve(g)

    def _solve_split(self, split: ConstantPlusDiagonal, d: np.ndarray, gh: float,
                     g: np.ndarray) -> np.ndarray:
        """(I - gh (A + diag(d)))^{-1} g, written into A's pattern as :meth:`_shifted`
        writes a Jacobian on a kept pattern (the same values, bit for bit)."""
        pat = split.pattern()
        M = pat.matrix
        np.multiply(split.values(d), -gh, out=M.data)
        M.data[pat.diagonal] += 1.0
        if pat.band is not None:
            return pat.band.solve(M.data, g)
        splu = require("scipy.sparse.linalg", "integrators", WHAT).splu
        return splu(M, permc_spec=pat.ordering).solve(g)

    def _shifted(self, J: Any, gh: float, sparse: Any) -> Tuple[Any, "_Pattern"]:
        """``I - gh J`` as a CSC matrix, and what is known of its pattern.

        The pattern of the last Jacobian is kept: a Jacobian on the same pattern (the same
        index arrays, or equal ones) with its diagonal stored gets ``I - gh J`` written in
        place, ``-gh J_ij`` then ``+ 1`` on the diagonal, into one CSC matrix on that
        pattern, without sparse arithmetic. The ordering depends on the pattern alone: the
        minimum degree ordering of ``B + B^T`` (``MMD_AT_PLUS_A``) for a symmetric pattern
        (about half COLAMD's fill-in on the five-point Laplacian), else COLAMD.
        """
        n = J.shape[0]
        if J.format != "csc":
            J = J.tocsc()
        if not J.has_canonical_format:
            J = J.copy()
            J.sum_duplicates()
        pat = self._pattern
        if pat is None or not (pat.indptr is J.indptr and pat.indices is J.indices) and not (
                np.array_equal(pat.indptr, J.indptr) and np.array_equal(pat.indices, J.indices)):
            pat = self._pattern = _Pattern(J, sparse)
        if pat.diagonal is None:  # a diagonal entry not stored: the pattern grows
            return (sparse.identity(n, format="csc") - gh * J).tocsc(), pat
        M = pat.matrix
        np.multiply(J.data, -gh, out=M.data)
        M.data[pat.diagonal] += 1.0
        return M, pat


class _Pattern:
    """A CSC Jacobian's sparsity pattern: where its diagonal is stored (None if not all of
    it is), SuperLU's ordering for ``I - gh J``, a CSC matrix on the pattern to write
    ``I - gh J`` into, and a :class:`_Band` solver where the pattern is narrow enough."""

    def __init__(self, J: Any, sparse: Any):
        n = J.shape[0]
        self.indptr, self.indices = J.indptr, J.indices
        cols = np.repeat(np.arange(n), np.diff(J.indptr))
        on = np.flatnonzero(J.indices == cols)
        self.diagonal: Optional[np.ndarray] = on if on.size == n else None
        ones = sparse.csc_matrix((np.ones(J.indices.size), J.indices, J.indptr),
                                 shape=(n, n))
        ones = (ones + sparse.identity(n, format="csc")).tocsr()
        ones.data[:] = 1.0
        self.ordering = "MMD_AT_PLUS_A" if (ones != ones.T).nnz == 0 else "COLAMD"
        self.matrix = sparse.csc_matrix((np.zeros(J.indices.size), J.indices.copy(),
                                         J.indptr.copy()), shape=(n, n))
        self.matrix.has_canonical_format = True
        self.band = None if self.diagonal is None else _Band.of(J.indices, cols, ones, n)


class _Band:
    """LAPACK's banded LU with partial pivoting (``gbsv``) of matrices on one CSC pattern,
    rows and columns renumbered by reverse Cuthill-McKee (on ``B + B^T``), for patterns
    whose bandwidths then satisfy ``kl + ku <= LIMIT``. On the periodic five-point
    Laplacian's pattern (``kl = ku = 2 nx - 1``), measured on a loaded 2-core AMD EPYC VM
    (2026-12-08), factorization and solve against SuperLU's (``MMD_AT_PLUS_A``): 35 us
    vs 545 us at 12 x 12, 94 vs 756 at 16 x 16, 183 vs 1907 at 20 x 20, 1061 vs 2870 at
    24 x 24 (``kl + ku = 94``); about even at 32 x 32 (126). One matrix, one right-hand
    side per call: a row's arithmetic is its own."""

    #: The widest band (``kl + ku``) solved as one; wider patterns go to SuperLU.
    LIMIT = 96

    def __init__(self, perm: np.ndarray, kl: int, ku: int, positions: np.ndarray, n: int):
        from scipy.linalg import get_lapack_funcs

        self.perm, self.kl, self.ku, self.positions, self.n = perm, kl, ku, positions, n
        self.rows = 2 * kl + ku + 1
        self._gbsv = get_lapack_funcs("gbsv", (np.zeros(1),))

    @classmethod
    def of(cls, indices: np.ndarray, cols: np.ndarray, pattern: Any,
           n: int) -> Optional["_Band"]:
        """The banded solver for the pattern ``(indices[e], cols[e])`` (``pattern``: its
        CSR 0/1 matrix with the diagonal), or None if the band is wider than ``LIMIT``."""
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        perm = np.asarray(reverse_cuthill_mckee(pattern, symmetric_mode=False), dtype=np.intp)
        new = np.empty(n, dtype=np.intp)
        new[perm] = np.arange(n)
        i, j = new[indices], new[cols]
        kl, ku = int(max(0, np.max(i - j))), int(max(0, np.max(j - i)))
        if kl + ku > cls.LIMIT:
            return None
        # A[i, j] at ab[kl + ku + i - j, j], ab of 2 kl + ku + 1 rows in Fortran order
        return cls(perm, kl, ku, (kl + ku + i - j) + j * (2 * kl + ku + 1), n)

    def solve(self, data: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The solution of ``B x = g``, ``B`` the matrix of CSC values ``data``."""
        flat = np.zeros(self.rows * self.n)
        flat[self.positions] = data
        ab = flat.reshape((self.rows, self.n), order="F")
        _, _, x, info = self._gbsv(self.kl, self.ku, ab, g[self.perm], overwrite_ab=True,
                                   overwrite_b=True)
        if info > 0:
            raise np.linalg.LinAlgError(f"U[{info - 1}, {info - 1}] of the banded LU is "
                                        f"exactly zero")
        out = np.empty(self.n)
        out[self.perm] = x
        return out


class NonlinearBackwardEuler(NonlinearSDIRK):
    """Backward Euler for ``u' = f(t, u)``, ``u1 = u + h f(t1, u1)`` solved by Newton's
    method: :class:`NonlinearSDIRK` with the one-stage tableau ``A = [[1]]``. Order 1,
    L-stable.

    Examples
    --------
    >>> import numpy as np
    >>> app = NonlinearBackwardEuler(lambda t, u: -u * u, np.ones(1))
    >>> u = app.init(0.0); app.step(u, 0.0, 2.0, None); round(float(u[0]), 12)   # u + 2u^2 = 1
    0.5
    """

    def __init__(self, rhs: Callable[..., Any], u0: Any, **options: Any):
        super().__init__(rhs, u0, "backward_euler", **options)
