"""The gradient-quality floor, checked while training (``TrainConfig.quality_check_every``).

A one-shot gradient comes from m1 state and m2 adjoint MGRIT iterations warm-started from
the previous step, so its error depends on the problem and grows as training moves on
(docs/performance.md, "Work per gradient at one rank": on Peaks every m2 = 1 setting fell
below a cosine of 0.99 to the exact gradient within 100 steps, after 50 good ones). A
setting measured good on one problem is not known to be good on another, so training can
measure it: every K-th step also computes the exact gradient at the same parameters
(serial forward and backward sweeps of blocks of the samples shared out over the layer
ranks, :mod:`braidpy.train.reference`; or one MGRIT level, layer by layer across the
layer ranks, where a block's states do not fit) and compares. Below the floor (the cosine 0.99 of docs/performance.md) the
step uses the exact gradient, and one-shot takes one more iteration from then on
(:func:`next_iterations`), so that the next steps meet the floor again.

The cosine is computed from gradients that are the same on every rank (assembled by an
allreduce), so every rank takes the same decision without a message.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from .._device import vector_norm

__all__ = ["QUALITY_FLOOR", "MAX_ONESHOT_ITERATIONS", "gradient_cosine", "next_iterations",
           "check_quality_options"]

#: The cosine to the exact gradient a training step must keep (docs/performance.md, "The
#: gradient-quality floor": the first-order decrease along a step is proportional to
#: the cosine, so 0.99 gives up at most 1 % of it).
QUALITY_FLOOR = 0.99

#: The most iterations :func:`next_iterations` gives either solve: a check that still
#: fails there keeps using the exact gradient on the steps it checks, and says so.
MAX_ONESHOT_ITERATIONS = 8


def gradient_cosine(g: Any, exact: Any) -> float:
    """cos(g, exact) as a Python float (1.0 when both are zero, 0.0 when one is); the
    arrays stay where they are (NumPy or another array API namespace), three scalars
    come back.

    >>> import numpy as np
    >>> round(gradient_cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0])), 12)
    0.707106781187
    """
    ng, ne = vector_norm(g), vector_norm(exact)
    if ng == 0.0 and ne == 0.0:
        return 1.0
    if ng == 0.0 or ne == 0.0:
        return 0.0
    dot = vector_norm(g + exact) ** 2 - vector_norm(g - exact) ** 2  # 4 g.e, any namespace
    return max(-1.0, min(1.0, dot / (4.0 * ng * ne)))


def next_iterations(m1: int, m2: int) -> Optional[Tuple[int, int]]:
    """The one-shot (m1, m2) to use after a step below the floor, or None at the top.

    The adjoint's iterations rise first, then the state's to match: the measurements of
    docs/performance.md found m2 deciding the gradient's quality (m2 = 2 kept the cosine
    above 0.998 whatever m1, every m2 = 1 setting fell below 0.99), and the adjoint's
    accuracy is bounded by the state it linearizes about.

    >>> next_iterations(1, 1), next_iterations(1, 2), next_iterations(2, 2)
    ((1, 2), (2, 2), (2, 3))
    >>> next_iterations(8, 8) is None
    True
    """
    if m2 <= m1 and m2 < MAX_ONESHOT_ITERATIONS:
        return m1, m2 + 1
    if m1 < m2:
        return m1 + 1, m2
    if m1 < MAX_ONESHOT_ITERATIONS:
        return m1 + 1, m2
    return None


def check_quality_options(every: Any, floor: Any) -> None:
    """``quality_check_every`` an int >= 0 and ``quality_floor`` a number in (0, 1];
    ValueError naming the bad one."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"quality_check_every must be an int >= 0 (0: never), got {every!r}")
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or \
            not math.isfinite(floor) or not 0 < floor <= 1:
        raise ValueError(f"quality_floor must be a number in (0, 1] (a cosine), got {floor!r}")
