"""The status object adjoint callbacks receive."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .. import _core

__all__ = ["AdjointStatus", "as_slice", "mirror_slice"]

# The core's status fields, in its order (one table in csrc/bindings/module.cpp);
# ``t`` is the time of access calls and running terms.
STATUS_FIELDS = tuple(_core.STATUS_FIELDS)


class AdjointStatus:
    """What adjoint callbacks are told, in forward time (read-only by convention).

    The fields of :class:`braidpy.Status`, with times and indices of the forward
    problem: t0, t1 (forward step), t (access/running terms), level, index and
    fine_index (both the forward fine index of t0), iteration, nlevels, done, tol,
    rnorm, phase ('init', 'relax', 'residual', 'final' or 'objective'); in batched
    calls also fine_indices and indices (int64 arrays, forward fine index of each t0;
    t0/t1/index/fine_index then describe the first item), fine_slice (the same
    indices as an evenly spaced slice, step possibly negative, or None) and
    batch_size (0 outside batched calls).
    """

    __slots__ = STATUS_FIELDS

    if TYPE_CHECKING:  # the fields are the slots: tell the type checker so
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self, **fields: Any):
        for name in self.__slots__:
            setattr(self, name, fields.pop(name, None))
        if fields:
            raise TypeError(f"AdjointStatus has no field {sorted(fields)[0]!r}")
        if self.batch_size is None:  # type: ignore[has-type]
            self.batch_size = 0

    def __repr__(self) -> str:
        return (f"<braidpy.AdjointStatus level={self.level} fine_index={self.fine_index} "
                f"iteration={self.iteration} phase={self.phase}>")


def as_slice(ns: np.ndarray) -> Optional[slice]:
    """ns (int array) as an evenly spaced slice (the step may be negative), else None.

    >>> as_slice(np.array([6, 4, 2, 0]))
    slice(6, None, -2)
    """
    m = len(ns)
    if m == 0:
        return None
    d = int(ns[1] - ns[0]) if m > 1 else 1
    if d == 0 or (m > 2 and not bool(np.all(np.diff(ns) == d))):
        return None
    stop = int(ns[-1]) + (1 if d > 0 else -1)
    return slice(int(ns[0]), stop if stop >= 0 else None, d)


def mirror_slice(sl: Optional[slice], top: int, m: int) -> Any:
    """as_slice(top - ms) for the m indices ms of the evenly spaced slice sl (the
    core's), without looking at the indices; False when sl is None or m < 2."""
    if sl is None or m < 2:
        return False
    first = top - sl.start
    step = -sl.step
    stop = first + (m - 1) * step - 1
    return slice(first, stop if stop >= 0 else None, step)
