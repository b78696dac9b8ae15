"""Delta correction's app contract check and a finite-difference Jacobian-vector product."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

__all__ = ["check_delta", "finite_difference_jvp"]


def check_delta(app: Any, options: Any, residual: bool) -> None:
    """TypeError/ValueError naming what Delta correction (``options.delta_rank > 0``)
    needs from ``app`` or cannot combine with (XBraid supports none of these either)."""
    rank = options.delta_rank
    if rank == 0:
        return
    for name, signature in (("init_basis", "init_basis(t, index)"),
                            ("inner_prod", "inner_prod(u, v)")):
        if not callable(getattr(app, name, None)):
            raise TypeError(f"delta_rank={rank} needs {type(app).__name__}.{signature} "
                            f"(Delta correction's basis vectors and their inner product)")
    if residual:
        raise ValueError(f"delta_rank={rank} does not support a user residual "
                         f"({type(app).__name__}.residual), as XBraid's Delta correction")
    if callable(getattr(app, "coarsen", None)) or callable(getattr(app, "refine", None)):
        raise ValueError(f"delta_rank={rank} does not support spatial coarsening "
                         f"({type(app).__name__}.coarsen/refine), as XBraid's Delta "
                         f"correction")
    if options.periodic:
        raise ValueError(f"delta_rank={rank} does not support periodic=True")
    if options.refine:
        raise ValueError(f"delta_rank={rank} does not support refine=True (temporal "
                         f"refinement), as XBraid's Delta correction")


def finite_difference_jvp(step: Callable[[Any], Any], u: Any, v: Any,
                          eps: Optional[float] = None, *, norm: Optional[Callable] = None
                          ) -> Any:
    """The Jacobian of ``step`` at ``u`` applied to ``v``, by a one-sided difference.

    ``(step(u + h v) - step(u)) / h`` with ``h = eps * (1 + |u|) / |v|`` (``eps``
    defaults to the square root of float64's machine epsilon, about 1.5e-8). The
    error is ``O(h |v|^2 |step''|)`` (truncation) plus ``O(macheps |step(u)| / h)``
    (rounding): about ``sqrt(macheps) = 1.5e-8`` relative to ``|step'(u) v|`` for a
    smooth, well-scaled step, i.e. some 8 correct digits, never the 16 of an exact
    Jacobian. Delta correction tolerates that (the basis only spans the unstable
    directions), but a run with it does not reproduce one with the exact Jacobian bit
    for bit. ``step`` maps a state to the stepped state without changing its argument;
    ``u`` and ``v`` are arrays (anything with ``+``, ``-``, ``*`` by a float and, unless
    ``norm`` is given, NumPy's ``linalg.norm``). Two calls of ``step``.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[0.0, 1.0], [-1.0, 0.0]])
    >>> phi = lambda x: x + 0.1 * (A @ x) + 0.05 * x**2
    >>> u, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    >>> exact = v + 0.1 * (A @ v) + 0.1 * u * v
    >>> bool(np.allclose(finite_difference_jvp(phi, u, v), exact, rtol=1e-6))
    True
    """
    if norm is None:
        import numpy as np
        norm = np.linalg.norm
    nv = float(norm(v))
    if nv == 0.0:
        return v * 0.0
    if eps is None:
        eps = math.sqrt(2.0 ** -52)
    h = eps * (1.0 + float(norm(u))) / nv
    return (step(u + h * v) - step(u)) * (1.0 / h)
