"""A spatial solver tolerance that tightens as MGRIT converges (XBraid's
braid_GetSpatialAccuracy)."""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["spatial_accuracy"]


def spatial_accuracy(rnorm: Optional[float], rnorm0: Optional[float], abs_tol: float,
                     loose_tol: float, tight_tol: float, *, level: int = 0,
                     previous: Optional[float] = None) -> float:
    """The tolerance for an inner (spatial) solve inside ``step``: ``loose_tol`` while
    MGRIT is far from converged, ``tight_tol`` near the end, in between log-linearly in
    the residual's progress (XBraid's ``braid_GetSpatialAccuracy``, braid.c).

    Parameters
    ----------
    rnorm : float or None
        The latest fine residual norm (``status.rnorm``; None or negative: none yet).
    rnorm0 : float or None
        The first fine residual norm of the solve (None or negative: none yet).
    abs_tol : float
        MGRIT's absolute halting tolerance (``status.tol``).
    loose_tol, tight_tol : float
        The inner tolerances at the start and near convergence (``tight_tol <=
        loose_tol``).
    level : int, optional
        The grid level of the step (``status.level``): coarse levels always get
        ``loose_tol``.
    previous : float or None, optional
        The tolerance this function last returned on the fine level: the fine-level
        tolerance never grows back above it (keep it in the app).

    Returns
    -------
    float
        ``loose_tol`` on a coarse level or without a residual history; else, with
        ``p = -log10(rnorm / rnorm0)`` and ``q = -log10(abs_tol / rnorm0)``: ``tight_tol``
        once ``p >= 7/8 q``, otherwise ``10**-s`` with
        ``s = (p / q) * (-log10(tight_tol) + log10(loose_tol)) - log10(loose_tol)``,
        but at most ``previous``.

    Notes
    -----
    XBraid also stores the fine-level value in its core and does not halt before the
    fine steps have received ``tight_tol``; braidpy's halting test does not depend on
    this function, which has no state.

    Examples
    --------
    >>> spatial_accuracy(None, None, 1e-9, 1e-2, 1e-10)
    0.01
    >>> spatial_accuracy(1e-2, 1.0, 1e-8, 1e-2, 1e-10)   # a quarter of the way (log10)
    0.0001
    >>> spatial_accuracy(1e-7, 1.0, 1e-8, 1e-2, 1e-10)   # 7/8 of the way: tight
    1e-10
    >>> spatial_accuracy(1e-2, 1.0, 1e-8, 1e-2, 1e-10, level=1)
    0.01
    """
    if level > 0 or rnorm0 is None or rnorm0 < 0.0:
        return loose_tol
    if rnorm is None or rnorm < 0.0:
        rnorm = rnorm0
    l_rnorm = -math.log10(rnorm / rnorm0)
    l_tol = -math.log10(abs_tol / rnorm0)
    l_loose = -math.log10(loose_tol)
    l_tight = -math.log10(tight_tol)
    if l_rnorm >= (7.0 / 8.0) * l_tol:
        return tight_tol
    out = math.pow(10, -((l_rnorm / l_tol) * (l_tight - l_loose) + l_loose))
    if previous is not None and previous > 0.0 and out > previous:
        out = previous
    return out
