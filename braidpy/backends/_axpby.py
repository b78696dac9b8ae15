"""y <- a*x + b*y in place: the one order of operations every backend's sum uses."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["axpby"]


def axpby(a: float, x: Any, b: float, y: Any, overlaps: Callable[[Any, Any], bool],
          copy: Callable[[Any], Any]) -> None:
    """y <- a*x + b*y with in-place operators, skipping multiplications by 1 and 0
    (XBraid's examples round the same way). ``overlaps(x, y)`` says whether writing
    y changes x; then x is copied with ``copy`` before y is scaled."""
    if b == 1.0:
        if a == 0.0:
            return
        if a == 1.0:
            y += x
        elif a == -1.0:
            y -= x
        else:
            y += a * x
        return
    if a == 0.0:
        y *= b
        return
    ax = x if a == 1.0 else a * x
    if ax is x and overlaps(x, y):
        ax = copy(x)
    y *= b
    y += ax
