"""A bounded cache of LU factorizations, keyed by the exact step size and stage coefficient."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Tuple

__all__ = ["FactorCache"]


class FactorCache:
    """Factorizations of ``M - coef * dt * A``, one per ``(dt, coef)``, least recently used
    dropped first once ``maxsize`` are held.

    Keys are the exact floats: a factorization is reused only for the very step size it
    was made for, so a step is always the same function of ``(t0, t1)``. On a uniform
    time grid ``t1 - t0`` can take a few values per MGRIT level that differ in their last
    bits (the grid points are rounded), each with its own factorization: none where the
    step is a binary fraction (``tstop = 1``, ``ntime = 1024``), but on ``[0, pi]`` with
    cfactor 4, 7 levels (16384 steps) held 13, 11, ..., 3, 1 sizes from the finest to
    the coarsest level, 49 in all. ``maxsize`` bounds how many are kept.

    Parameters
    ----------
    factorize : callable
        ``factorize(dt, coef)`` returns the factorization for that key.
    maxsize : int, optional
        The most factorizations kept (default 64).
    """

    def __init__(self, factorize: Callable[[float, float], Any], maxsize: int = 64):
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"max_factorizations must be an int >= 1, got {maxsize!r}")
        self._factorize = factorize
        self.maxsize = maxsize
        self._held: "OrderedDict[Tuple[float, float], Any]" = OrderedDict()
        #: How many factorizations were made (a key dropped and needed again counts twice).
        self.made = 0

    def get(self, dt: float, coef: float) -> Any:
        """The factorization for ``(dt, coef)``, made on first use."""
        key = (dt, coef)
        lu = self._held.get(key)
        if lu is not None:
            self._held.move_to_end(key)
            return lu
        lu = self._factorize(dt, coef)
        self.made += 1
        self._held[key] = lu
        if len(self._held) > self.maxsize:
            self._held.popitem(last=False)
        return lu

    def keys(self) -> list:
        """The ``(dt, coef)`` keys held, least recently used first."""
        return list(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def clear(self) -> None:
        """Drop every factorization."""
        self._held.clear()
