"""The linear system ``M u' = A u + g(t)``: its checked operators, products and solves."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .._extras import require
from ._factors import FactorCache

__all__ = ["LinearSystem", "SeparableForcing"]

WHAT = "braidpy.integrators' implicit methods"


class SeparableForcing:
    """A forcing ``g(t) = amplitude(t) * profile``: a fixed spatial profile times a scalar
    function of time.

    Calling it gives ``g(t)`` as any forcing callable does. :class:`LinearSystem` also
    recognizes it: the profile is computed once, not at every step, and a block of
    stacked states gets its forcing in a few array operations instead of one call per
    row. Each row's values are those of ``scale * (amplitude(t) * profile)``, the same
    operations in the same order as for one state, so batched and unbatched steps
    still agree bit for bit.

    Parameters
    ----------
    profile : array_like
        The spatial factor, shape ``(n,)`` (copied, float64).
    amplitude : callable
        ``amplitude(t)``: a Python float for a float ``t``.

    Examples
    --------
    >>> import math, numpy as np
    >>> g = SeparableForcing(np.array([1.0, 2.0]), math.cos)
    >>> g(0.0).tolist()
    [1.0, 2.0]
    """

    def __init__(self, profile: Any, amplitude: Callable[[float], float]):
        self.profile = np.array(profile, dtype=np.float64)
        if self.profile.ndim != 1:
            raise ValueError(f"SeparableForcing: profile must be one-dimensional, got shape "
                             f"{self.profile.shape}")
        if not callable(amplitude):
            raise TypeError(f"SeparableForcing: amplitude must be a callable amplitude(t), "
                            f"got {amplitude!r}")
        self.amplitude = amplitude

    def __call__(self, t: float) -> np.ndarray:
        return self._value(float(t)) * self.profile

    def _value(self, t: float) -> float:
        a = self.amplitude(t)
        if not isinstance(a, (int, float, np.floating)) or isinstance(a, bool):
            raise ValueError(f"SeparableForcing: amplitude({t!r}) returned {a!r}; it must "
                             f"return a real number")
        return float(a)


class LinearSystem:
    """``M u' = A u + g(t)`` with ``A`` (and ``M``) a SciPy sparse matrix or a dense array.

    Products and solves work on states stacked as rows, ``U`` of shape ``(m, n)``: the
    solver gets the right-hand sides as the columns of ``R.T`` (Fortran order, each
    right-hand side contiguous), one call for all of them. Sparse matrices are factorized
    by ``scipy.sparse.linalg.splu`` (CSC), dense ones by ``scipy.linalg.lu_factor``.
    SuperLU's column ordering is the minimum degree ordering of ``B + B^T``
    (``MMD_AT_PLUS_A``) when ``M - coef dt A`` has a symmetric sparsity pattern (the
    Laplacians: about half COLAMD's fill-in on the 2D five-point stencil), else COLAMD.
    A :class:`SeparableForcing` ``g`` is applied to a block of rows at once.

    Parameters
    ----------
    A : scipy.sparse matrix or array_like
        Square, n x n.
    M : scipy.sparse matrix or array_like, optional
        The mass matrix, n x n (default: the identity).
    g : callable, optional
        ``g(t)`` returns the forcing at time ``t`` (a float), an array of shape ``(n,)``.
    max_factorizations : int, optional
        The most factorizations of ``M - coef dt A`` kept at once (default 64).
    """

    def __init__(self, A: Any, M: Any = None, g: Optional[Callable[[float], Any]] = None,
                 max_factorizations: int = 64):
        sparse = require("scipy.sparse", "integrators", WHAT)
        self._splu = require("scipy.sparse.linalg", "integrators", WHAT).splu
        linalg = require("scipy.linalg", "integrators", WHAT)
        self._lu_factor, self._lu_solve = linalg.lu_factor, linalg.lu_solve
        self._sparse = sparse
        self.sparse = bool(sparse.issparse(A))
        self.A = self._operator("A", A, sparse, None)
        self.n = int(self.A.shape[0])
        self.M = None if M is None else self._operator("M", M, sparse, self.n)
        if g is not None and not callable(g):
            raise TypeError(f"g must be a callable g(t) or None, got {g!r}")
        self.g = g
        if isinstance(g, SeparableForcing) and g.profile.shape != (self.n,):
            raise ValueError(f"g's profile must have shape {(self.n,)} (A is {self.n} x "
                             f"{self.n}), got shape {g.profile.shape}")
        self.factors = FactorCache(self._factorize, max_factorizations)
        self.ordering = "COLAMD"
        if self.sparse:
            pattern = abs(self.A) if self.M is None else abs(self.A) + abs(self.M)
            pattern = (pattern + sparse.identity(self.n, format="csr")).tocsr()
            pattern.data[:] = 1.0
            if (pattern != pattern.T).nnz == 0:
                self.ordering = "MMD_AT_PLUS_A"

    def _operator(self, name: str, value: Any, sparse: Any, n: Optional[int]) -> Any:
        if callable(value) and not sparse.issparse(value):
            raise TypeError(f"{name} must be a matrix (SciPy sparse or array_like), got "
                            f"{value!r}")
        if sparse.issparse(value):
            mat = sparse.csr_matrix(value)  # row-wise products: the same order every call
            data = mat.data
        else:
            try:
                mat = np.array(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"{name} must be a matrix, got {value!r}") from err
            if mat.dtype.kind in "biu":
                mat = mat.astype(np.float64)
            if mat.dtype.kind not in "fc":
                raise TypeError(f"{name} must be a matrix of numbers, got dtype {mat.dtype}")
            data = mat
        if mat.ndim != 2 or mat.shape[0] != mat.shape[1] or mat.shape[0] == 0:
            raise ValueError(f"{name} must be a non-empty square matrix, got shape {mat.shape}")
        if n is not None and mat.shape != (n, n):
            raise ValueError(f"{name} must have A's shape {(n, n)}, got shape {mat.shape}")
        if not np.all(np.isfinite(data)):
            raise ValueError(f"{name} has non-finite entries")
        if self.sparse and not sparse.issparse(mat):
            mat = sparse.csr_matrix(mat)
        elif not self.sparse and sparse.issparse(mat):
            mat = mat.toarray()
        return mat

    # --- products and forcing, rows in and rows out ----------------------------------------

    def apply_A(self, Y: np.ndarray) -> np.ndarray:
        """``A y`` for each row ``y`` of ``Y`` (a new C-ordered array of Y's shape)."""
        return np.ascontiguousarray((self.A @ Y.T).T)

    def apply_M(self, Y: np.ndarray) -> np.ndarray:
        """``M y`` for each row (a copy of ``Y`` when ``M`` is the identity)."""
        if self.M is None:
            return Y.copy()
        return np.ascontiguousarray((self.M @ Y.T).T)

    def add_forcing(self, R: np.ndarray, times: np.ndarray, scale: np.ndarray) -> None:
        """``R[k] += scale[k] * g(times[k])`` for each row (nothing without ``g``)."""
        g = self.g
        if g is None:
            return
        if isinstance(g, SeparableForcing):
            # Row k: scale[k] * (amplitude(t_k) * profile), as forcing() and one row.
            amplitude = g.amplitude
            try:
                values = np.array([amplitude(t) for t in times.tolist()], dtype=np.float64)
            except (TypeError, ValueError):
                values = np.empty(0)
            if values.shape != times.shape:  # not one number per time: name the bad one
                values = np.array([g._value(t) for t in times.tolist()])
            F = np.multiply.outer(values, g.profile)
            F *= scale[:, None]
            R += F
            return
        for k, (t, s) in enumerate(zip(times.tolist(), scale.tolist())):
            R[k] += s * self.forcing(t)

    def forcing(self, t: float) -> np.ndarray:
        """``g(t)``, checked to be an array of shape ``(n,)``."""
        f = self.g(t)  # type: ignore[misc]
        if not isinstance(f, np.ndarray) or f.shape != (self.n,):
            raise ValueError(f"g({t!r}) returned {type(f).__name__} of shape "
                             f"{getattr(f, 'shape', None)}; it must return an array of "
                             f"shape {(self.n,)}")
        return f

    # --- solves -----------------------------------------------------------------------------

    def solve(self, dt: float, coef: float, R: np.ndarray) -> np.ndarray:
        """Solve ``(M - coef dt A) x = r`` for each row ``r`` of ``R``: one solver call with
        the rows as right-hand-side columns; the solutions as rows."""
        lu = self.factors.get(dt, coef)
        if self.sparse:
            X = lu.solve(R.T)
        else:
            X = self._lu_solve(lu, R.T, check_finite=False)
        return X.T

    def _factorize(self, dt: float, coef: float) -> Any:
        if self.sparse:
            M = (self._sparse.identity(self.n, format="csr", dtype=self.A.dtype)
                 if self.M is None else self.M)
            return self._splu((M - (coef * dt) * self.A).tocsc(), permc_spec=self.ordering)
        M = np.eye(self.n, dtype=self.A.dtype) if self.M is None else self.M
        return self._lu_factor(M - (coef * dt) * self.A, check_finite=False)
