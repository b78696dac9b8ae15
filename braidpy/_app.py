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

    Optional, batched stepping (docs/batching.md; used unless ``batch=False``)
    ---------------------------------------------------------------------------
    step_stacked(U, t0s, t1s, status)
        Array apps: advance the m states stacked in ``U`` (shape (m, *state shape)),
        row k from ``t0s[k]`` to ``t1s[k]`` (float64 NumPy arrays of length m), in
        place or by returning a new array of U's shape. ``status.fine_indices`` and
        ``status.indices`` (int64 arrays) give each row's t0 index on the fine grid
        and on ``status.level``; all rows are on one level. Row k must come out as
        ``step`` would compute it, bit for bit if you want batched and unbatched
        runs to agree exactly.
    step_batch(us, t0s, t1s, status)
        The general hook the core calls. ``us`` is either a stacked array (when
        the core keeps the states in one array, which it does for float64 NumPy
        states with the default ``clone``) or a list of states. The default
        calls ``step_stacked`` (stacking a list and writing the rows back);
        override it for other vector types: advance each state in place, or
        return a list of new states (for a stacked ``us``: a new stacked array).

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

    def step_batch(self, us: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        kernel = getattr(self, "step_stacked", None)
        if kernel is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no batched step: define step_stacked(U, t0s, t1s, "
                f"status) or step_batch(us, t0s, t1s, status)")
        if isinstance(us, (list, tuple)):  # independent states: stack, step, write back
            U = _arrays.stack(us)
            r = kernel(U, t0s, t1s, status)
            if r is not None:
                U = r
            for k, u in enumerate(us):
                u[...] = U[k]
            return None
        r = kernel(us, t0s, t1s, status)
        if r is not None and r is not us:
            us[...] = r
        return None

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
