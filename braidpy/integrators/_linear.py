"""The linear system ``M u' = A u + g(t)``: its checked operators, products and solves."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from .._extras import require
from ._factors import FactorCache

__all__ = ["LinearSystem"]

WHAT = "braidpy.integrators' implicit methods"


class LinearSystem:
    """``M u' = A u + g(t)`` with ``A`` (and ``M``) a SciPy sparse matrix or a dense array.

    Products and solves work on states stacked as rows, ``U`` of shape ``(m, n)``: the
    solver gets the right-hand sides as the columns of ``R.T`` (Fortran order, each
    right-hand side contiguous), one call for all of them. Sparse matrices are factorized
    by ``scipy.sparse.linalg.splu`` (CSC), dense ones by ``scipy.linalg.lu_factor``.

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
        self.factors = FactorCache(self._factorize, max_factorizations)

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
        if self.g is None:
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
            return self._splu((M - (coef * dt) * self.A).tocsc())
        M = np.eye(self.n, dtype=self.A.dtype) if self.M is None else self.M
        return self._lu_factor(M - (coef * dt) * self.A, check_finite=False)
