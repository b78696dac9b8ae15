"""The user contract: subclass App and provide init and step."""

from __future__ import annotations

from typing import Any

from . import _arrays

__all__ = ["App"]


class App:
    """Base class of a braidpy application (XBraid's "user-written routines").

    Required
    --------
    init(t) -> vector
        A new vector at time ``t``: the initial condition at ``t == self.tstart``,
        an initial guess elsewhere. Called only at fine C-points.
    step(u, t0, t1, status)
        Advance ``u`` from ``t0`` to ``t1`` in place. Returning ``u`` is harmless;
        returning a *different* object makes it the new state (for immutable
        vector types).

    Optional, with defaults for NumPy arrays and any array exposing
    ``__array_namespace__``/``__dlpack__`` (override all of them for other types)
    ---------------------------------------------------------------------------
    clone(u) -> vector               an independent copy
    sum(a, x, b, y)                  y <- a*x + b*y in place; x may be y
    norm(u) -> float                 spatial norm (default: Euclidean)
    bufpack(u) -> bytes-like         serialise for MPI
    bufunpack(buf) -> vector         inverse of bufpack
    access(u, status)                observe the solution (default: nothing)

    braidpy sets ``tstart``, ``tstop`` and ``ntime`` on the app before the first
    ``init`` call. ``status`` objects are read-only and only valid during the call.
    """

    tstart: float = 0.0
    tstop: float = 1.0
    ntime: int = 0

    def init(self, t: float) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement init(t)")

    def step(self, u: Any, t0: float, t1: float, status: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement step(u, t0, t1, status)")

    def clone(self, u: Any) -> Any:
        return _arrays.array_clone(u)

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:
        _arrays.array_sum(a, x, b, y)

    def norm(self, u: Any) -> float:
        return _arrays.array_norm(u)

    def access(self, u: Any, status: Any) -> None:
        return None

    def bufpack(self, u: Any) -> Any:
        return _arrays.array_pack(u)

    def bufunpack(self, buf: Any) -> Any:
        return _arrays.array_unpack(buf)
