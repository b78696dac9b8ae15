"""Implicit steps of ``M u' = A u + g(t)``: theta methods and SDIRK, batched by solving many
right-hand sides at once."""

from __future__ import annotations

from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ._initial import Guess, InitialValueApp
from ._linear import LinearSystem
from ._tableau import ButcherTableau, tableau as named_tableau

__all__ = ["LinearImplicit", "ThetaMethod", "BackwardEuler", "CrankNicolson", "SDIRK",
           "default_rhs_per_solve"]

Rows = Union[slice, np.ndarray]


#: The cache a block of right-hand sides is sized for (typical x86 L1 data cache: 64 sets
#: of 8 lines of 64 bytes; half a 512 KB L2).
_LINE, _SETS, _WAYS, _BLOCK_BYTES = 64, 64, 8, 256 * 1024


def default_rhs_per_solve(n: int, itemsize: int = 8, most: int = 32) -> int:
    """The default block of ``step_stacked``: the most right-hand sides, up to ``most``,
    whose columns of ``n`` values of ``itemsize`` bytes fit in 256 KB (4 at least: a
    multi-column solve of large states still saves per-column work) and do not share an
    8-way L1 cache set more than 8 times.

    A sparse or banded solve sweeps every column of a block at the same row, so the
    columns' addresses differ by multiples of ``n * itemsize`` bytes. When that is a
    multiple of 4096 (``n = 512`` float64 values) every column maps to the same L1 set
    and more than 8 of them evict one another: SciPy's SuperLU then took 3.2 us per
    right-hand side for 8 columns and 10.6 for 32 (n = 512, bidiagonal; 5.2 at both for
    n = 999). Past the L2 cache, 32 columns of n = 3969 (the 2D heat equation on a 65 x 65
    grid) cost 15 % more each than 16 did.

    Examples
    --------
    >>> default_rhs_per_solve(999), default_rhs_per_solve(512), default_rhs_per_solve(3969)
    (32, 8, 8)
    """
    stride = n * itemsize
    m = 1
    while m < most and ((m + 1) * stride <= _BLOCK_BYTES or m < 4):  # 4 at least
        sets = [(j * stride // _LINE) % _SETS for j in range(m + 1)]
        if max(sets.count(x) for x in set(sets)) > _WAYS:
            break
        m += 1
    return m


class LinearImplicit(InitialValueApp):
    """Base of the implicit integrators of ``M u' = A u + g(t)``: init, grouping, blocks.

    A step is defined on a block of states stacked as rows that share one step size
    (``_advance``); ``step`` is that for one row, ``step_stacked`` groups the rows by
    their exact step size ``t1 - t0`` and advances each group in blocks of at most
    ``rhs_per_solve`` rows: every product with ``A`` or ``M`` and every solve is one call
    for the whole block, and the rows go through the same operations as in ``step``.
    Each distinct ``(dt, stage coefficient)`` gets one LU factorization, reused from
    then on (``system.factors``, a bounded cache).

    Whether row k of ``step_stacked`` equals ``step`` of row k bit for bit depends on the
    solver's multi-column path. Sparse products (CSR) treat the columns independently,
    and so does SuperLU's solve where the factors have no dense blocks (tridiagonal
    matrices, for one): then batched and unbatched runs agree exactly. Where SuperLU's
    factors have dense supernodes, and always for dense matrices (LAPACK, BLAS), several
    columns are computed by other kernels than one and differ by a few ulps (relative
    1e-15 measured); MGRIT's results then agree to rounding. ``rhs_per_solve=1`` makes
    every call one column, bitwise ``step``'s, at the cost of the shared solves.

    Parameters
    ----------
    A : scipy.sparse matrix or array_like
        The n x n operator.
    u0 : array_like
        The initial value, shape ``(n,)``.
    M : scipy.sparse matrix or array_like, optional
        The n x n mass matrix (default: the identity).
    g : callable, optional
        ``g(t)``: the forcing at a float time ``t``, an array of shape ``(n,)``.
    guess : {"u0", "zeros"} or callable, optional
        The initial guess away from ``tstart`` (default: a copy of ``u0``).
    max_factorizations : int, optional
        The most LU factorizations kept (default 64).
    rhs_per_solve : int, optional
        The most right-hand sides per solver call in ``step_stacked``. Default:
        :func:`default_rhs_per_solve` of the state size, at most 32 (below the sizes at
        which a threaded BLAS starts its threads; docs/batching.md), fewer where the
        block would not stay in cache.
    """

    def __init__(self, A: Any, u0: Any, *, M: Any = None,
                 g: Optional[Callable[[float], Any]] = None, guess: Guess = "u0",
                 max_factorizations: int = 64, rhs_per_solve: Optional[int] = None):
        self.system = LinearSystem(A, M, g, max_factorizations)
        super().__init__(u0, guess)
        n = self.system.n
        if self.u0.shape != (n,):
            raise ValueError(f"u0 must have shape {(n,)} (A is {n} x {n}), got shape "
                             f"{self.u0.shape}")
        if rhs_per_solve is None:
            rhs_per_solve = default_rhs_per_solve(n)
        if isinstance(rhs_per_solve, bool) or not isinstance(rhs_per_solve, int) \
                or rhs_per_solve < 1:
            raise ValueError(f"rhs_per_solve must be an int >= 1, got {rhs_per_solve!r}")
        self.rhs_per_solve = rhs_per_solve

    # --- the braidpy contract --------------------------------------------------------------

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """One step from ``t0`` to ``t1``, in place."""
        t0s, t1s = np.array([float(t0)]), np.array([float(t1)])
        u[...] = self._advance(u.reshape(1, -1), t0s, t1s, float(t1s[0] - t0s[0]))[0]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Row k of ``U`` one step from ``t0s[k]`` to ``t1s[k]``, in place: rows grouped by
        exact step size, one multi-right-hand-side solve per group, block and stage."""
        t0s = np.asarray(t0s, dtype=np.float64)
        t1s = np.asarray(t1s, dtype=np.float64)
        for dt, rows in self._groups(t1s - t0s):
            for part in self._blocks(rows):
                U[part] = self._advance(U[part], t0s[part], t1s[part], dt)

    # --- grouping ----------------------------------------------------------------------------

    @staticmethod
    def _groups(H: np.ndarray) -> List[Tuple[float, Rows]]:
        if (H == H[0]).all():  # one step size, the common case: no sort
            return [(float(H[0]), slice(0, H.size))]
        sizes, which = np.unique(H, return_inverse=True)
        return [(float(s), np.flatnonzero(which == j)) for j, s in enumerate(sizes.tolist())]

    def _blocks(self, rows: Rows) -> Iterator[Rows]:
        # ceil(count / rhs_per_solve) blocks whose sizes differ by one at most (16 rows,
        # at most 12 per block: 8 + 8, not 12 + 4)
        count = rows.stop - rows.start if isinstance(rows, slice) else rows.size
        nblocks = -(-count // self.rhs_per_solve)
        cuts = [count * i // nblocks for i in range(nblocks + 1)]
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if isinstance(rows, slice):
                yield slice(rows.start + lo, rows.start + hi)
            else:
                yield rows[lo:hi]

    def _advance(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                 h: float) -> np.ndarray:
        """The rows of U one step of size h (t0s, t1s per row), as a new array."""
        raise NotImplementedError


class ThetaMethod(LinearImplicit):
    """The theta method for ``M u' = A u + g(t)``:
    ``(M - theta h A) u1 = (M + (1 - theta) h A) u0 + h (theta g(t1) + (1 - theta) g(t0))``.

    ``theta = 1`` is backward Euler (order 1, L-stable), ``theta = 1/2`` Crank-Nicolson
    (order 2, A-stable but not L-stable: stiff modes are barely damped, which slows MGRIT
    on diffusive problems). One factorization of ``M - theta h A`` per step size.

    Parameters
    ----------
    A, u0 : see :class:`LinearImplicit`
    theta : float, optional
        In [0, 1]; default 1 (backward Euler).
    **options
        ``M``, ``g``, ``guess``, ``max_factorizations``, ``rhs_per_solve``
        (:class:`LinearImplicit`).

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import ThetaMethod
    >>> app = ThetaMethod(np.array([[-1.0]]), np.ones(1), theta=0.5)
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - np.exp(-1.0)) < 1e-4)
    True
    """

    def __init__(self, A: Any, u0: Any, theta: float = 1.0, **options: Any):
        if isinstance(theta, bool) or not isinstance(theta, (int, float, np.floating)) \
                or not 0.0 <= float(theta) <= 1.0:
            raise ValueError(f"theta must be a number in [0, 1], got {theta!r}")
        super().__init__(A, u0, **options)
        self.theta = float(theta)

    def _advance(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                 h: float) -> np.ndarray:
        system, theta = self.system, self.theta
        R = system.apply_M(U)
        if theta != 1.0:
            R += ((1.0 - theta) * h) * system.apply_A(U)
        if theta == 1.0:
            system.add_forcing(R, t1s, np.full(len(R), h))
        else:
            system.add_forcing(R, t1s, np.full(len(R), theta * h))
            system.add_forcing(R, t0s, np.full(len(R), (1.0 - theta) * h))
        return system.solve(h, theta, R)


class BackwardEuler(ThetaMethod):
    """Backward (implicit) Euler for ``M u' = A u + g(t)``: :class:`ThetaMethod` with
    ``theta = 1``. Order 1, L-stable.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> app = BackwardEuler(sp.diags([-1.0, -2.0]), np.ones(2))
    >>> u = app.init(app.tstart); app.step(u, 0.0, 0.5, None); u.tolist()
    [0.6666666666666666, 0.5]
    """

    def __init__(self, A: Any, u0: Any, **options: Any):
        super().__init__(A, u0, theta=1.0, **options)


class CrankNicolson(ThetaMethod):
    """Crank-Nicolson (the trapezoidal rule) for ``M u' = A u + g(t)``:
    :class:`ThetaMethod` with ``theta = 1/2``. Order 2, A-stable."""

    def __init__(self, A: Any, u0: Any, **options: Any):
        super().__init__(A, u0, theta=0.5, **options)


class SDIRK(LinearImplicit):
    """A singly diagonally implicit Runge-Kutta method for ``M u' = A u + g(t)``.

    Stage i solves ``(M - gamma h A) k_i = A (u + h sum_{j<i} A_ij k_j) + g(t0 + c_i h)``,
    and ``u1 = u + h sum_i b_i k_i``: one factorization of ``M - gamma h A`` per step
    size serves every stage.

    Parameters
    ----------
    A, u0 : see :class:`LinearImplicit`
    tableau : ButcherTableau or str, optional
        ``"sdirk2"`` (default; Alexander's two-stage method, gamma = 1 - 1/sqrt(2), order 2,
        L-stable), ``"sdirk3"`` (Alexander's three-stage method, order 3, L-stable), or a
        tableau whose ``A`` is lower triangular with one non-zero diagonal value.
    **options
        ``M``, ``g``, ``guess``, ``max_factorizations``, ``rhs_per_solve``
        (:class:`LinearImplicit`).

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import SDIRK
    >>> app = SDIRK(np.array([[-1.0]]), np.ones(1), "sdirk3")
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - np.exp(-1.0)) < 1e-6)
    True
    """

    def __init__(self, A: Any, u0: Any, tableau: Any = "sdirk2", **options: Any):
        tab = named_tableau(tableau)
        if not tab.singly_diagonally_implicit:
            raise ValueError(f"SDIRK: the tableau {tab.name!r} is not singly diagonally "
                             f"implicit (A lower triangular with one non-zero diagonal "
                             f"value), A = {tab.A.tolist()}")
        super().__init__(A, u0, **options)
        self.tableau: ButcherTableau = tab
        self._gamma = float(tab.A[0, 0])
        self._rows = [[(j, float(a)) for j, a in enumerate(tab.A[i, :i].tolist()) if a != 0.0]
                      for i in range(tab.stages)]
        self._c = [float(c) for c in tab.c.tolist()]
        self._b = [(i, float(b)) for i, b in enumerate(tab.b.tolist()) if b != 0.0]

    def _advance(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                 h: float) -> np.ndarray:
        system = self.system
        ones = np.ones(len(U))
        ks: List[np.ndarray] = []
        for i, row in enumerate(self._rows):
            if row:
                Y = U.copy()
                for j, a in row:
                    Y += (h * a) * ks[j]
            else:
                Y = U
            R = system.apply_A(Y)
            system.add_forcing(R, t0s + self._c[i] * h, ones)
            ks.append(system.solve(h, self._gamma, R))
        X = np.array(U, copy=True)
        for i, b in self._b:
            X += (h * b) * ks[i]
        return X
