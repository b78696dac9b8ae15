"""PETSc states and steppers: MGRIT over petsc4py ``Vec`` states (docs/petsc.md).

- :class:`VecApp`: the vector operations for PETSc ``Vec`` states (clone, sum, norm,
  messages through the Vec's local array, with the layouts of sender and receiver
  checked). Subclass it and write ``step``, or use one of the two steppers:
- :class:`TSApp`: each MGRIT step is a user-configured PETSc ``TS`` integrating over
  ``[t0, t1]`` (any TS type, one or several internal steps).
- :class:`KSPBackwardEuler`: backward Euler for ``M u' = A u + g(t)`` with PETSc
  matrices: ``(M - dt A) u1 = M u0 + dt g(t1)`` by a ``KSP``, the operator assembled
  once per step size.

Space-parallel x time-parallel: the Vecs live on a spatial communicator (the
``space_comm`` of a :class:`braidpy.parallel.ProcessGrid`), MGRIT runs over the time
communicator (``grid.layers_comm``, the ``comm=`` of :func:`braidpy.solve`). Every rank of
one time group holds the same part of the spatial grid, so a message carries only that
rank's local values, to the rank with the same part in the next time group.

petsc4py is an optional extra (``pip install -e ".[petsc]"``, docs/install.md); this
module imports without it, and making an app without it raises an ImportError that
names the package to install.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Optional, Union

import numpy as np

from ._app import App
from ._extras import require

__all__ = ["KSPBackwardEuler", "SolveError", "TSApp", "VecApp", "petsc4py_PETSc"]

#: The first word of every message: "braidpy PETSc Vec", version 1.
_MAGIC = 0x4250_5643_0001
_HEADER = 4  # int64 words: magic, global size, first owned index, local size


def petsc4py_PETSc() -> Any:
    """petsc4py's ``PETSc`` module, or an ImportError naming what to install.

    Where the program has not imported ``petsc4py.PETSc`` yet, MPI is initialized by
    mpi4py first (as the rest of braidpy has it), then PETSc with
    ``-no_signal_handler``: Python keeps its own signal handling (faulthandler, SIGPIPE
    ignored, SIGTERM's default). To give PETSc command-line options, call
    ``petsc4py.init(sys.argv)`` before making a braidpy.petsc app.

    >>> from braidpy.petsc import petsc4py_PETSc
    >>> petsc4py_PETSc().Vec  # doctest: +SKIP
    <class 'petsc4py.PETSc.Vec'>
    """
    import sys

    loaded = sys.modules.get("petsc4py.PETSc")
    if loaded is not None:
        return loaded
    try:
        petsc4py = require("petsc4py", "petsc", "braidpy.petsc")
    except ImportError as err:
        if getattr(err, "name", None) != "petsc4py":
            raise
        raise ImportError(
            f"{err}; pip builds petsc4py and PETSc from source with the mpicc on PATH, so "
            f"install the mpi extra first, and a BLAS/LAPACK (on Debian: apt-get install "
            f"liblapack-dev), then: PETSC_CONFIGURE_OPTIONS=\"--with-fc=0 --with-cxx=0 "
            f"--with-x=0 --with-cuda=0\" pip install 'petsc4py>=3.20' (docs/install.md, "
            f"PETSc)", name="petsc4py") from err.__cause__
    try:
        from mpi4py import MPI  # noqa: F401 - MPI initialized as braidpy initializes it
    except ImportError:
        pass
    petsc4py.init(["-no_signal_handler"])
    return require("petsc4py.PETSc", "petsc", "braidpy.petsc")


class SolveError(RuntimeError):
    """A PETSc solve inside a step did not converge.

    Raised by :class:`TSApp` and :class:`KSPBackwardEuler` on every rank of the spatial
    communicator (PETSc's converged reason is collective), so the solve stops on every
    rank: with this exception where the step failed, with :class:`braidpy.BraidError`
    naming it on the other time ranks.

    Attributes
    ----------
    solver : str
        ``"TS"`` or ``"KSP"``.
    reason : int
        PETSc's (negative) converged reason.
    reason_name : str
        Its name, e.g. ``"DIVERGED_NANORINF"``.
    t0, t1 : float
        The step that failed.
    """

    def __init__(self, solver: str, reason: int, reason_name: str, t0: float, t1: float):
        self.solver, self.reason, self.reason_name = solver, int(reason), reason_name
        self.t0, self.t1 = float(t0), float(t1)
        super().__init__(f"PETSc {solver} did not converge in the step from t = {t0!r} to "
                         f"{t1!r}: {solver}ConvergedReason {reason_name} ({int(reason)})")


def _reason_name(enum: Any, reason: int) -> str:
    for name in dir(enum):
        if not name.startswith("_") and getattr(enum, name) == reason:
            return name
    return str(reason)


class VecApp(App):
    """Base class of an App whose states are PETSc ``Vec``s (write ``step``).

    Parameters
    ----------
    u0 : petsc4py.PETSc.Vec
        The value at ``tstart`` (copied). Every state has its layout: the same global size
        and, on each rank, the same owned range.
    guess : str or callable, optional
        The initial guess away from ``tstart``: ``"copy"`` of ``u0`` (default),
        ``"zeros"``, or a callable ``guess(t)`` returning a Vec with the layout of ``u0``.
    norm_scale : float, optional
        Multiplies the 2-norm (default 1): ``sqrt(h**d)`` on a d-dimensional grid of
        spacing h gives the discrete L2 norm, so that a tolerance means the same on every
        spatial grid.

    Notes
    -----
    The vector operations are PETSc's, collective over the communicator of ``u0``:
    ``clone`` is ``u.copy()``; ``sum(a, x, b, y)`` is ``VecAXPBY`` (y = a x + b y);
    ``norm`` is the 2-norm of the whole Vec (all spatial ranks) times ``norm_scale``;
    ``bufpack`` writes a header (a magic word, the global size, the first owned index and
    the local size) and the local values of this rank, and ``bufunpack`` checks the header
    against its own layout (a ValueError naming both: the spatial splits of the time ranks
    disagree) and copies the values into a new Vec.

    Each rank of a spatial communicator takes the same MGRIT decisions, because every
    norm is the whole Vec's. A failure must be collective over the spatial communicator
    (PETSc's solver failures are: :class:`SolveError`); a Python exception raised on one
    spatial rank only leaves its spatial peers waiting in PETSc's next collective call.
    """

    def __init__(self, u0: Any, guess: Union[str, Callable[[float], Any]] = "copy",
                 norm_scale: float = 1.0):
        PETSc = petsc4py_PETSc()
        if not isinstance(u0, PETSc.Vec):
            raise TypeError(f"u0 must be a petsc4py.PETSc.Vec, got {type(u0).__name__}")
        if not (isinstance(guess, str) and guess in ("copy", "zeros")) and not callable(guess):
            raise ValueError(f"guess must be 'copy', 'zeros' or a callable guess(t), "
                             f"got {guess!r}")
        norm_scale = float(norm_scale)
        if not (math.isfinite(norm_scale) and norm_scale > 0):
            raise ValueError(f"norm_scale must be a finite number > 0, got {norm_scale!r}")
        self._PETSc = PETSc
        self.u0 = u0.copy()
        self.guess = guess
        self.norm_scale = norm_scale
        lo, hi = u0.getOwnershipRange()
        self._layout = (int(u0.getSize()), int(lo), int(hi - lo))
        self._dtype = np.dtype(PETSc.ScalarType)

    # --- initial values --------------------------------------------------------------

    def init(self, t: float) -> Any:
        if t == self.tstart or self.guess == "copy":
            return self.u0.copy()
        if self.guess == "zeros":
            u = self.u0.duplicate()
            u.zeroEntries()
            return u
        u = self.guess(t)  # type: ignore[operator]
        self._check_vec(u, "guess(t)")
        return u

    def _check_vec(self, u: Any, what: str) -> None:
        if not isinstance(u, self._PETSc.Vec):
            raise TypeError(f"{what} must return a petsc4py.PETSc.Vec, got {type(u).__name__}")
        lo, hi = u.getOwnershipRange()
        layout = (int(u.getSize()), int(lo), int(hi - lo))
        if layout != self._layout:
            raise ValueError(f"{what} returned a Vec of global size {layout[0]} owning "
                             f"[{layout[1]}, {layout[1] + layout[2]}) here; u0's layout is "
                             f"global size {self._layout[0]}, owning [{self._layout[1]}, "
                             f"{self._layout[1] + self._layout[2]})")

    # --- vector operations -----------------------------------------------------------

    def clone(self, u: Any) -> Any:
        return u.copy()

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:
        if x is y:
            y.scale(a + b)
        else:
            y.axpby(a, b, x)

    def norm(self, u: Any) -> float:
        return float(u.norm(self._PETSc.NormType.NORM_2)) * self.norm_scale

    def bufpack(self, u: Any) -> Any:
        local = u.getArray(readonly=True)
        n = local.shape[0]
        buf = np.empty(_HEADER * 8 + n * self._dtype.itemsize, dtype=np.uint8)
        lo, _ = u.getOwnershipRange()
        buf[:_HEADER * 8].view(np.int64)[:] = (_MAGIC, u.getSize(), lo, n)
        buf[_HEADER * 8:].view(self._dtype)[:] = local
        return buf

    def bufunpack(self, buf: Any) -> Any:
        raw = np.frombuffer(buf, dtype=np.uint8)
        if raw.nbytes < _HEADER * 8:
            raise ValueError(f"a PETSc Vec message of {raw.nbytes} bytes is shorter than "
                             f"its header ({_HEADER * 8} bytes)")
        magic, size, lo, n = (int(v) for v in raw[:_HEADER * 8].view(np.int64))
        if magic != _MAGIC:
            raise ValueError(f"not a braidpy PETSc Vec message (magic {magic:#x})")
        if (size, lo, n) != self._layout:
            raise ValueError(
                f"a PETSc Vec message of global size {size} for indices [{lo}, {lo + n}) "
                f"arrived where this rank holds [{self._layout[1]}, "
                f"{self._layout[1] + self._layout[2]}) of {self._layout[0]}: the time "
                f"ranks' spatial layouts disagree (use one spatial split per time group)")
        if raw.nbytes != _HEADER * 8 + n * self._dtype.itemsize:
            raise ValueError(f"a PETSc Vec message for {n} values of {self._dtype} has "
                             f"{raw.nbytes - _HEADER * 8} bytes of data")
        u = self.u0.duplicate()
        u.setArray(raw[_HEADER * 8:].view(self._dtype))
        return u


class TSApp(VecApp):
    """MGRIT whose step is a user-configured PETSc ``TS`` over ``[t0, t1]``.

    Parameters
    ----------
    ts : petsc4py.PETSc.TS
        Configured by you: type, right-hand side or implicit function and Jacobians, its
        SNES/KSP, adaptivity. Each step sets its time to ``t0``, its step size to
        ``(t1 - t0) / substeps``, its final time to ``t1`` (``ExactFinalTime.MATCHSTEP``,
        so the last internal step lands on ``t1``) and its step number to 0, then runs
        ``TSSolve`` on the state in place. ``TSApp`` sets ``TSSetErrorIfStepFails(ts,
        PETSC_FALSE)``, so that a failed step ends the solve with its reason. So the TS must not carry history between
        solves (one-step methods; multistep ones restart at every solve).
    u0 : petsc4py.PETSc.Vec
        The value at ``tstart``.
    substeps : int, optional
        Internal TS steps per MGRIT interval (default 1). With an adaptive TS it is the
        first trial step.
    max_steps : int, optional
        The most internal steps of one MGRIT step (default 10000): an adaptive TS that
        needs more fails the step.
    guess : str or callable, optional
        As for :class:`VecApp`.
    norm_scale : float, optional
        As for :class:`VecApp`.

    Notes
    -----
    A TS whose solve diverges (a negative converged reason), or that stops before
    ``t1``, raises :class:`SolveError`. Every step is a function of ``(u, t0, t1)``
    alone, so MGRIT converges to ``TSSolve`` run sequentially with the same steps.
    """

    def __init__(self, ts: Any, u0: Any, substeps: int = 1, max_steps: int = 10000,
                 guess: Union[str, Callable[[float], Any]] = "copy", norm_scale: float = 1.0):
        super().__init__(u0, guess=guess, norm_scale=norm_scale)
        if not isinstance(ts, self._PETSc.TS):
            raise TypeError(f"ts must be a petsc4py.PETSc.TS, got {type(ts).__name__}")
        for name, value, low in (("substeps", substeps, 1), ("max_steps", max_steps, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if max_steps < substeps:
            raise ValueError(f"max_steps ({max_steps}) must be >= substeps ({substeps})")
        self.ts, self.substeps, self.max_steps = ts, substeps, max_steps
        ts.setExactFinalTime(self._PETSc.TS.ExactFinalTime.MATCHSTEP)
        # a failed step ends TSSolve with a negative reason (raised here as SolveError)
        # instead of a PETSc error from inside TSStep
        ts.setErrorIfStepFails(False)
        #: Internal TS steps taken by this app, all MGRIT steps together.
        self.ts_steps = 0

    def step(self, u: Any, t0: float, t1: float, status: Any) -> None:
        ts = self.ts
        ts.setTime(t0)
        ts.setTimeStep((t1 - t0) / self.substeps)
        ts.setMaxTime(t1)
        ts.setStepNumber(0)
        ts.setMaxSteps(self.max_steps)
        ts.solve(u)
        self.ts_steps += ts.getStepNumber()
        reason = ts.getConvergedReason()
        if reason < 0:
            raise SolveError("TS", reason, _reason_name(self._PETSc.TS.ConvergedReason, reason),
                             t0, t1)
        reached = ts.getTime()
        if abs(reached - t1) > 1e-12 * max(1.0, abs(t1)):
            raise SolveError("TS", reason, f"stopped at t = {reached!r} ("
                             f"{_reason_name(self._PETSc.TS.ConvergedReason, reason)}; "
                             f"max_steps = {self.max_steps})", t0, t1)


class KSPBackwardEuler(VecApp):
    """Backward Euler for ``M u' = A u + g(t)`` with PETSc matrices, each step one KSP solve.

    One step from ``t0`` to ``t1`` (``dt = t1 - t0``) solves

    ``(M - dt A) u1 = M u0 + dt g(t1)``.

    The operator ``M - dt A`` and its KSP (with its preconditioner) are made once per
    exact step size and kept (``max_operators`` of them, least recently used dropped
    first), so a step is always the same function of ``(u0, t0, t1)``: MGRIT's levels
    each use their own step sizes.

    Parameters
    ----------
    A : petsc4py.PETSc.Mat
        The assembled spatial operator (on the states' communicator and layout).
    u0 : petsc4py.PETSc.Vec
        The value at ``tstart``.
    g : callable, optional
        ``g(t, out)`` writes the source at ``t`` into the Vec ``out`` (no source when
        None).
    M : petsc4py.PETSc.Mat, optional
        The mass matrix (the identity when None).
    ksp_type, pc_type : str, optional
        The KSP and PC types (default ``"cg"`` and ``"jacobi"``: ``M - dt A`` symmetric
        positive definite, as for diffusion; use ``"gmres"`` otherwise).
    rtol, atol : float, optional
        The KSP's tolerances (default 1e-12 and 1e-50): MGRIT converges to the sequential
        solution only to the accuracy of each step's solve.
    max_it : int, optional
        The KSP's iteration limit (default 10000).
    options_prefix : str, optional
        Prefix of PETSc options applied to every KSP after the arguments above
        (``KSPSetFromOptions``): ``options_prefix="heat_"`` and ``-heat_ksp_type gmres`` on
        the command line.
    max_operators : int, optional
        The most operators (with their KSPs) kept (default 64).
    guess : str or callable, optional
        As for :class:`VecApp`.
    norm_scale : float, optional
        As for :class:`VecApp`.

    Notes
    -----
    Each KSP starts from ``u0`` (a nonzero initial guess), the natural guess for a step.
    A KSP that does not converge (a negative converged reason: too many iterations, a
    NaN, a breakdown) raises :class:`SolveError`.
    """

    def __init__(self, A: Any, u0: Any, g: Optional[Callable[[float, Any], Any]] = None,
                 M: Any = None, ksp_type: str = "cg", pc_type: str = "jacobi",
                 rtol: float = 1e-12, atol: float = 1e-50, max_it: int = 10000,
                 options_prefix: Optional[str] = None, max_operators: int = 64,
                 guess: Union[str, Callable[[float], Any]] = "copy", norm_scale: float = 1.0):
        super().__init__(u0, guess=guess, norm_scale=norm_scale)
        PETSc = self._PETSc
        for name, mat in (("A", A), ("M", M)):
            if mat is None and name == "M":
                continue
            if not isinstance(mat, PETSc.Mat):
                raise TypeError(f"{name} must be a petsc4py.PETSc.Mat, got {type(mat).__name__}")
            rows, cols = mat.getSize()
            if (rows, cols) != (self._layout[0], self._layout[0]):
                raise ValueError(f"{name} is {rows} x {cols}; the states have "
                                 f"{self._layout[0]} entries")
        if g is not None and not callable(g):
            raise TypeError(f"g must be callable g(t, out) or None, got {type(g).__name__}")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name, value in (("max_it", max_it), ("max_operators", max_operators)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.A, self.M, self.g = A, M, g
        self.ksp_type, self.pc_type = ksp_type, pc_type
        self.rtol, self.atol, self.max_it = float(rtol), float(atol), max_it
        self.options_prefix, self.max_operators = options_prefix, max_operators
        self._ksps: "OrderedDict[float, Any]" = OrderedDict()
        #: How many operators were assembled (one per step size; a dropped one needed
        #: again counts twice).
        self.operators_made = 0
        #: KSP iterations, all steps together.
        self.ksp_iterations = 0
        self._rhs = u0.duplicate()
        self._src = u0.duplicate() if g is not None else None

    def operator(self, dt: float) -> Any:
        """The KSP whose operator is ``M - dt A``, assembled on first use for this exact
        ``dt``."""
        ksp = self._ksps.get(dt)
        if ksp is not None:
            self._ksps.move_to_end(dt)
            return ksp
        PETSc = self._PETSc
        B = self.A.copy()
        B.scale(-dt)
        if self.M is None:
            B.shift(1.0)
        else:
            B.axpy(1.0, self.M, PETSc.Mat.Structure.DIFFERENT_NONZERO_PATTERN)
        ksp = PETSc.KSP().create(comm=self.A.getComm())
        ksp.setOperators(B)
        ksp.setType(self.ksp_type)
        ksp.getPC().setType(self.pc_type)
        ksp.setTolerances(rtol=self.rtol, atol=self.atol, max_it=self.max_it)
        ksp.setInitialGuessNonzero(True)
        if self.options_prefix is not None:
            ksp.setOptionsPrefix(self.options_prefix)
            ksp.setFromOptions()
        ksp.setUp()
        self.operators_made += 1
        self._ksps[dt] = ksp
        if len(self._ksps) > self.max_operators:
            self._ksps.popitem(last=False)
        return ksp

    def step(self, u: Any, t0: float, t1: float, status: Any) -> None:
        dt = t1 - t0
        ksp = self.operator(dt)
        rhs = self._rhs
        if self.M is None:
            u.copy(rhs)
        else:
            self.M.mult(u, rhs)
        if self.g is not None:
            self.g(t1, self._src)
            rhs.axpy(dt, self._src)
        ksp.solve(rhs, u)
        self.ksp_iterations += ksp.getIterationNumber()
        reason = ksp.getConvergedReason()
        if reason < 0:
            raise SolveError("KSP", reason,
                             _reason_name(self._PETSc.KSP.ConvergedReason, reason), t0, t1)
