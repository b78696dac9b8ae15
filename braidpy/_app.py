"""The user contract: subclass App and provide init and step."""

from __future__ import annotations

from typing import Any

from . import backends
from .backends import Backend

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
        vector types). With ``Options(refine=True)`` a fine-level step may ask for its
        interval to be refined: ``status.set_rfactor(r)`` (r equal intervals) or
        ``status.set_refinement_dt_values(r, dts)`` (XBraid's StepStatusSetRFactor and
        StatusSetRefinementDtValues; docs/conventions.md, "Temporal refinement").

    Optional, with defaults for array states
    ----------------------------------------
    The defaults work for NumPy arrays and any array array-api-compat supports
    (``__array_namespace__``, CuPy, PyTorch, ...); override all of them for other types.

    clone(u) -> vector
        An independent copy.
    sum(a, x, b, y)
        ``y <- a*x + b*y`` in place; ``x`` may be ``y``.
    norm(u) -> float
        The spatial norm (default: Euclidean).
    bufpack(u) -> bytes-like
        Serialise for MPI.
    bufunpack(buf) -> vector
        The inverse of ``bufpack``.
    access(u, status)
        Observe the solution (default: nothing).

    Optional, no default (not called, and costs nothing, unless defined)
    --------------------------------------------------------------------
    sync(status)
        XBraid's ``braid_SetSync``: called on every rank, at the same points, for
        "global" work between cycles (an all-rank reduction, adapting the app). Once
        after a cold start's initial guess (``status.phase == "init"``, iteration 0;
        not on a warm restart), then at the top of every iteration k after its cycle
        (``status.phase == "cycle"``, ``status.iteration == k``), before the
        progress line and the halting test: ``status.rnorms()`` already holds r_k
        when iteration k computed one. ``status`` also answers ``level`` (0),
        ``nlevels``, ``done`` (False), ``tol``, ``rnorm``, ``cfactor(level)``,
        ``owned(level)`` (this rank's indices, XBraid's GetTIUL) and
        ``times(level)``. An exception in sync on any rank stops the solve on
        every rank (as any callback's). Not called by the adjoint's solve.

    Optional, spatial coarsening (both or neither; App defines neither)
    -------------------------------------------------------------------
    coarsen(u, status) -> vector     u on the next coarser level (a new vector)
    refine(e, status) -> vector      correction e on the next finer level (a new vector)

    XBraid's braid_SetSpatialCoarsen/Refine: states of each level have their own size.
    ``coarsen`` gets a state of level ``status.level``, ``refine`` a correction of level
    ``status.level + 1``; ``status`` also has ``f_tprior``, ``f_tstop``, ``c_tprior``
    and ``c_tstop`` (docs/quickstart.md, "Spatial coarsening"; docs/conventions.md for
    where they are called). ``braidpy.testing.check_coarsen_refine`` checks them.

    Array states: backends and messages
    -----------------------------------
    The defaults delegate to ``braidpy.backends``: ``numpy`` for NumPy arrays,
    ``array_api`` (through array-api-compat) for the others, each working in the
    array's own namespace and on its own device. ``bufpack`` writes a fixed binary
    header (magic, version, dtype code, device kind, shape: ``braidpy.backends.wire``)
    and the data, copied to host memory; dtypes bool, int8-int64, uint8-uint64,
    float16/32/64 and complex64/128 with at most 32 axes. ``bufunpack`` validates
    every header field and the length (ValueError naming the bad field) and builds the
    array on the receiving rank's own terms; no module or type name crosses the wire,
    so a message never chooses what code runs. What a rank builds is set on the App:

    array_namespace = None
        The array namespace (module) of received states: ``array_api_strict``,
        ``cupy``, ``torch``, ... None means NumPy. Set it when your states are not
        NumPy arrays and you run on more than one rank.
    array_device = None
        The device received states are placed on, one of ``array_namespace``'s
        devices (None: its default device). Set it on the instance in ``__init__``
        for one device per rank.

    The default ``bufpack`` raises TypeError for a state that ``bufunpack`` would not
    rebuild in the same namespace on the same device (so a missing
    ``array_namespace`` shows on the sending rank, not as mixed arrays later), and
    ``bufunpack`` raises ValueError for data from another kind of device (a CUDA
    array received where NumPy arrays are built, say).

    Optional, a user residual (XBraid's ``braid_SetResidual``; docs/conventions.md)
    -------------------------------------------------------------------------------
    residual(ustop, r, status)
        Overwrite ``r`` (the value at ``status.t0``) with ``A(ustop, r)``, the residual
        of the step from ``status.t0`` to ``status.t1`` whose result is ``ustop``: zero
        when ``ustop`` is the exact step of ``r``. XBraid's sign: backward Euler for
        ``u' = L u`` has ``A(u1, u0) = (I - dt L) u1 - u0``. In place, or return a new
        vector. With it, the FAS restriction, the residual norm and the coarse right-hand
        sides use ``residual`` instead of ``u_c - step(u_{c-1})``, and ``step`` must take
        the right-hand side: ``step(u, t0, t1, status, fstop=None, ustop=None)`` solves
        ``A(u_new, u) = fstop`` (``fstop`` None: zero; it is None on the fine level),
        instead of braidpy adding it after the step. ``ustop`` (optional parameter) is
        the best value at ``t1`` the solver holds, a read-only initial guess for
        implicit solvers; it may be ``u`` itself. Batched, such an app's
        ``step_stacked(U, t0s, t1s, status, fstop=None, ustop=None)`` gets ``fstop``
        and ``ustop`` stacked like ``U`` (row k for state ``U[k]``; ``fstop`` None
        where it is None); a list-based ``step_batch`` is refused (or pass
        ``batch=False``). Not supported by ``braidpy.adjoint``.
    full_residual(ustop, r, status)
        The residual of ``full_rnorm=True`` (XBraid's ``braid_SetFullRNormRes``); the
        same contract as ``residual``, which serves when this is absent.

    Optional, Delta correction (``Options.delta_rank > 0``; docs/conventions.md)
    ----------------------------------------------------------------------------
    init_basis(t, index) -> vector
        XBraid's ``init_basis``: a new basis vector number ``index`` (0 .. delta_rank-1)
        at time ``t``, for each state ``init`` makes; the vectors of one ``t`` must be
        linearly independent (braidpy orthonormalizes them with ``inner_prod``).
    inner_prod(u, v) -> float
        An inner product of two vectors (the projection onto the basis, Gram-Schmidt).

    With them, ``step`` also propagates the basis: ``status.basis`` lists the basis
    vectors at ``t0`` (empty when this step need not propagate them), and the step must
    replace each ``psi`` by ``J psi``, where ``J`` is the Jacobian of this step at the
    state it starts from (take it before updating ``u``): in place, or by
    ``status.set_basis(k, new_vector)``. ``braidpy.finite_difference_jvp`` approximates
    ``J psi`` where no Jacobian is at hand. ``access`` sees ``status.basis`` too and,
    in the final access at fine C-points with ``lyapunov_exponents=True``, the local
    Lyapunov exponents ``status.lyapunov_exponents``. Not with ``residual``, spatial
    coarsening, ``refine``, ``periodic`` or ``braidpy.adjoint``; batched steps are not
    used.

    Optional, batched stepping (docs/batching.md; used unless ``batch=False``)
    ---------------------------------------------------------------------------
    step_stacked(U, t0s, t1s, status)
        Array apps: advance the m states stacked in ``U`` (shape ``(m, *state shape)``),
        row k from ``t0s[k]`` to ``t1s[k]`` (float64 NumPy arrays of length m), in
        place or by returning a new array of U's shape. ``status.fine_indices`` and
        ``status.indices`` (int64 arrays) give each row's t0 index on the fine grid
        and on ``status.level``; all rows are on one level. Row k must come out as
        ``step`` would compute it, bit for bit if you want batched and unbatched
        runs to agree exactly.
    step_stacked_into(U, out, t0s, t1s, status)
        Optional, with ``step_stacked``: the same steps written into ``out`` (fresh
        memory of U's shape), ``U`` left as it is (for float64 NumPy states it may be a
        read-only, strided view of braidpy's states); return None. For float64 NumPy
        states with the default ``clone`` the core then starts its sweeps from the
        C-points where they lie and writes the states it keeps where it keeps them,
        instead of copying them.
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
    array_namespace: Any = None
    array_device: Any = None

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
            U = backends.stack(us)
            r = kernel(U, t0s, t1s, status)
            if r is not None:
                U = r
            for k, u in enumerate(us):
                u[...] = U[k, ...]  # (the array API wants the trailing ...)
            return None
        r = kernel(us, t0s, t1s, status)
        if r is not None and r is not us:
            us[...] = r
        return None

    def clone(self, u: Any) -> Any:
        return backends.backend_for(u, "clone").clone(u)

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:
        backends.backend_for(y, "sum").sum(a, x, b, y)

    def norm(self, u: Any) -> float:
        return backends.backend_for(u, "norm").norm(u)

    def access(self, u: Any, status: Any) -> None:
        return None

    def bufpack(self, u: Any) -> Any:
        backend = backends.backend_for(u, "bufpack")
        if backend is backends.NUMPY and self.array_namespace is None and self.array_device is None:
            return backend.pack(u)  # the common case: NumPy on both sides
        if _uses_default(self, "bufunpack"):
            _check_same_kind(self, backend, _receiving_backend(self))
        return backend.pack(u)

    def bufunpack(self, buf: Any) -> Any:
        return _receiving_backend(self).unpack(buf)


def _uses_default(app: App, name: str) -> bool:
    """Whether app keeps App's own method ``name`` (as the compiled core checks it)."""
    return (getattr(type(app), name, None) is getattr(App, name)
            and name not in getattr(app, "__dict__", {}))


def _receiving_backend(app: App) -> Backend:
    """The backend bufunpack builds with: app.array_namespace on app.array_device."""
    xp, device = app.array_namespace, app.array_device
    if xp is None and device is None:
        return backends.NUMPY
    slots = getattr(app, "__dict__", None)
    cached = slots.get("_braidpy_receiver") if slots is not None else None
    if cached is not None and cached[0] is xp and cached[1] is device:
        return cached[2]
    backend = backends.backend_for_namespace(xp, device)
    if slots is not None:
        slots["_braidpy_receiver"] = (xp, device, backend)
    return backend


def _check_same_kind(app: App, sent: Backend, receiver: Backend) -> None:
    if sent.name != receiver.name or sent.device != receiver.device:
        xp = app.array_namespace
        raise TypeError(
            f"bufpack: the state is an array of {sent.name} on {sent.device!r}, but the "
            f"default bufunpack builds arrays of {receiver.name} on {receiver.device!r} "
            f"(array_namespace = {getattr(xp, '__name__', xp)!r}, array_device = "
            f"{app.array_device!r}); set array_namespace and array_device on your App "
            f"class to your states' namespace and device")
