"""Solver options: validated once, here, with errors that name the option."""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any, Dict, Mapping, Optional, Union

import numpy as np

from . import _core
from ._limits import INT_MAX

__all__ = ["Options"]

PerLevel = Union[int, Mapping[int, int]]
PerLevelWeight = Union[float, Mapping[int, float]]


@dataclasses.dataclass(frozen=True)
class Options:
    """MGRIT options (XBraid's names where XBraid has one).

    Attributes
    ----------
    max_levels : int
        Most levels in the hierarchy (1 = sequential time stepping). Default 30.
    min_coarse : int
        A level is created only if it has at least this many intervals. Default 2.
    cfactor : int or {level: int}
        Coarsening factor (>= 2); a dict overrides ``default_cfactor`` on the
        levels it names. Default 2.
    nrelax : int or {level: int}
        FC sweeps before restriction on each level: 0 = F, 1 = FCF, 2 = FCFCF.
        Default 1.
    crelax_weight : float or {level: float}
        Weight w of the C-relaxation (XBraid's ``braid_SetCRelaxWt``): each C-point
        becomes ``(1 - w) u_c + w Phi(u_{c-1})`` (weighted Jacobi; > 0, 1 = plain
        C-relaxation, over-relaxation with w > 1 often converges faster on diffusive
        problems). A dict sets levels by number, ``"default"`` the others. It
        applies wherever C-relaxation runs: the down-sweep's FC sweeps, the
        ``final_fc_relax`` sweep, and the coarsest level only with ``relax_only_cg``
        (a solved coarsest level is never weighted). Default 1.0.
    max_iter : int
        Most iterations (XBraid's count). Default 100.
    abs_tol : float
        Stop when the fine residual norm r_k < abs_tol. Default 1e-9.
    rel_tol : float
        Stop when r_k < rel_tol * (first computed norm); 0 disables. Default 0.
    tnorm : 1, 2 or inf
        Norm over time of the C-point residuals. Default 2.
    skip : bool
        No down-sweep in the first iteration of a cold start. Default True.
    fmg : bool
        F-cycles instead of V-cycles. Default False.
    fmg_vcycles : int
        V-cycles per level inside an F-cycle. Default 1.
    nfmg : int
        With ``fmg``: iteration ``nfmg`` is a V-cycle, every other iteration an
        F-cycle; -1 (the default): F-cycles throughout. This is XBraid's
        ``braid_SetNFMG`` as its code runs it (iteration k is an F-cycle iff
        ``nfmg != k``), not as its documentation words it ("nfmg F-cycles, then
        V-cycles"): braidpy keeps XBraid's iterations (docs/conventions.md). Needs
        ``fmg=True``.
    storage : "C", "final", "all" or int
        Store fine C-points only; also every fine point of the final sweep
        ("final": what :meth:`Core.stored` and the adjoint read, without copying
        F-points in every relaxation); or every fine point throughout ("all").
        An int is XBraid's ``braid_SetStorage`` number: -1 C-points only on every
        level (= "C"), 0 every point on every level, ``x > 0`` every point on the
        levels ``>= x`` (C-points only below; level 0 is then as "C"). Stored
        F-points change no value of the iteration: only the ``ustop`` a user
        residual's step gets on a level that stores them (XBraid's GetUInit), and
        what :meth:`Core.stored` can return ("all" keeps fine F-points only; coarse
        F-points' ``ustop`` is then the injected value, docs/conventions.md).
        Default "C".
    seq_soln : bool
        Initial guess = sequential solution (implies no skip). Default False.
    final_fc_relax : bool
        One more FC sweep before the final F-sweep. Default False.
    relax_only_cg : bool
        Relax the coarsest level (nrelax sweeps) instead of solving it. Default False.
    periodic : bool
        Time-periodic problem (XBraid's ``braid_SetPeriodic``): solve for u with
        u(tstop) = u(tstart) instead of from an initial value. ``init(tstart)`` is only
        a guess; the value at tstart is relaxed like any C-point (from the step that
        ends at tstop) and the coarsest level is relaxed (``nrelax`` of level
        ``max_levels - 1``), not solved. Needs one cfactor for all levels whose
        powers divide ``ntime`` on every level built, two levels or more, and no
        ``seq_soln``; ``Result.final`` (at tstop) equals the value at tstart.
        Default False.
    access_level : int
        0 never call access, 1 at the end, 2 also after each iteration (fine C-points),
        3 (XBraid's debugging level) also inside every sweep: each new F- and C-value of
        every FC-relaxation, restriction and interpolation on every level (coarse states
        too), each corrected fine C-point, and after each iteration an F-sweep over all
        fine points; ``status.caller`` names the sweep ("FCRelax", "FRestrict",
        "FInterp", "FAccess"). Not with ``periodic``. Default 1.
    print_level : int
        0 quiet, 1 one line per iteration on rank 0, 2 also the hierarchy, 3 also every
        fine C-point's residual norm after each restriction from the fine level
        (XBraid's ``  Braid:  time step: ..., rnorm: ...`` lines). Not with
        ``periodic``. Default 0.
    timings : bool or 0, 1, 2
        Time user callbacks and communication (Result.timings). 2 (XBraid's
        ``braid_SetTimings(core, 2)``) also writes every rank's timer file after each
        solve, ``{timer_file}_{rank:04d}.txt`` in XBraid's ``braid_PrintTimers`` layout
        (:meth:`Result.write_timers`). Default False.
    cycle_file : str or None
        Write XBraid's cycle file there after each solve, on rank 0 (``braid.out.cycle``,
        which XBraid writes at its default file I/O level 1, ``braid_SetFileIOLevel``):
        one line per level visited, ``level 0 iteration ntime rnorm tol`` (rnorm -1 before
        the iteration's norm; tol: ``abs_tol``, or ``rel_tol`` times the first norm).
        Written whole or not at all: a file that cannot be written (a full disk, a
        device, a path through a file) raises an ``OSError`` naming the option and the
        file on rank 0 and a :class:`braidpy.BraidError` quoting it on the other ranks.
        Default None (no file).
    timer_file : str
        Stem of the timer files of ``timings=2`` (XBraid's ``braid_SetTimerFile``),
        written as ``cycle_file`` is (a rank that cannot write its file stops every rank).
        Default "braid_timings".
    residual_computation : bool
        False: no global residual, run exactly max_iter iterations. Default True.
    batch : bool
        Use the app's batched step (``step_batch``/``step_stacked``) wherever steps
        are independent (docs/batching.md); False forces one ``step`` call per
        state. Apps without a batched step are unaffected. Default True.
    full_rnorm : bool
        Also measure the full fine residual norm each iteration (XBraid's
        ``braid_SetFullRNormRes``): the norm over every fine point ``i > 0``, F-points
        included, of the app's ``full_residual`` (else ``residual``) of the iterate,
        computed right after the restriction from the fine level. The halting test then
        uses it instead of the C-point norm; ``Result.full_residuals`` lists it and
        ``Result.final_full_residual`` holds one more after the last iteration. Needs
        ``App.residual`` or ``App.full_residual``. Default False.
    refine : bool
        Temporal refinement (XBraid's ``braid_SetRefine``): a fine-level step may ask
        for its interval to be split, ``status.set_rfactor(r)`` or
        ``status.set_refinement_dt_values(r, dts)``; at the top of each iteration
        (after its residual norm) braidpy rebuilds the fine grid from the latest
        requests, carries the solution over to it (each new C-point stepped from the
        nearest old point on its left), and runs that iteration again on the new grid
        without a halting test. ``Result.times`` is the final grid and
        ``Result.refinements`` the number of rebuilds. Not with
        ``periodic``, ``seq_soln``, ``cycle_file``, spatial coarsening or
        ``braidpy.adjoint`` (docs/conventions.md, "Temporal refinement"). Default False.
    max_refinements : int
        Most rebuilds of the fine grid (XBraid's ``braid_SetMaxRefinements``); once
        reached, refinement stops for good. Default 200 (XBraid's).
    tpoints_cutoff : int or None
        No more refinement once the fine grid has this many intervals or more
        (XBraid's ``braid_SetTPointsCutoff``); None: no cutoff. Default None.
    incr_max_levels : bool
        Each rebuild raises ``max_levels`` by one (XBraid's ``braid_SetIncrMaxLevels``).
        Default False.
    delta_rank : int
        Delta correction (XBraid's ``braid_SetDeltaCorrection(core, rank, init_basis,
        inner_prod)``; Vargas, Falgout, Guenther, Schroder, SISC 2023): every state carries
        ``delta_rank`` basis vectors, which the app's ``step`` propagates with the step's
        Jacobian (``status.basis``), and the coarse steps are corrected by the low-rank
        ``Delta = (J_fine - J_coarse) Psi Psi^T`` built from them: MGRIT then converges on
        chaotic problems where plain FAS stalls. Needs ``App.init_basis`` and
        ``App.inner_prod`` (docs/conventions.md, "Delta correction"). 0 (the default):
        off.
    delta_defer_level, delta_defer_iter : int
        XBraid's ``braid_SetDeferDelta(core, level, iter)``: from iteration
        ``delta_defer_iter`` on, the basis is propagated on the levels
        ``>= delta_defer_level`` and Delta corrects the steps of the coarser levels
        ``> delta_defer_level``; before, the iteration is plain FAS. Default 0, 0. Need
        ``delta_rank > 0``.
    lyapunov_estimate, lyapunov_relax, lyapunov_exponents : bool
        XBraid's ``braid_SetLyapunovEstimation(core, relax, cglv, exponents)``:
        ``lyapunov_estimate`` (cglv) propagates the basis in the coarsest solve and the
        interpolation, so that it converges to the backward Lyapunov vectors;
        ``lyapunov_relax`` also in FC-relaxation; ``lyapunov_exponents`` runs a final
        FC-relaxation that yields the local Lyapunov exponents at every fine C-point
        (``status.lyapunov_exponents`` in the final access) and their time average
        (``Result.lyapunov_exponents``). Default False (XBraid's defaults without the
        call). Need ``delta_rank > 0``.
    richardson : bool
        Richardson extrapolation on the fine level (XBraid's
        ``braid_SetRichardsonEstimation``, its ``richardson`` argument): from iteration 1
        on, each C-relaxed fine C-point becomes ``a u_c + b Phi(u_{c-cf})``, where the
        second term is one step of the app over the whole interval (t_{c-cf}, t_c) from
        the value before the sweep, ``a = DT^k / (DT^k - dtk)``, ``b = 1 - a``, ``k =
        local_order``, ``DT = t_c - t_{c-cf}``, ``dtk`` the sum of the interval's fine
        steps to the power k; the restriction from the fine level scales the coarse
        right-hand side by ``a`` and measures the residual norm on it
        (docs/conventions.md). For a stepper of local order k (global order k - 1) the
        fine C-point values gain one order of accuracy. Needs ``local_order``; excludes
        ``crelax_weight`` other than 1 and ``periodic``. Default False.
    est_error : bool
        Keep a Richardson error estimate per fine point (XBraid's ``est_error``): after
        each restriction from the fine level, every point of a fine interval carries
        ``||tau|| dtk / (DT^k - dtk)`` (``/ DT^k`` with ``richardson``), tau the
        interval's coarse right-hand side, point 0 the value 0. Read it with
        ``status.error_estimate()`` (step: at the step's end; access: at the point) and
        ``status.error_estimates()`` (this rank's points, e.g. in ``sync``), and from
        ``Result.error_estimates``. Needs ``local_order``; excludes ``crelax_weight``
        other than 1, ``periodic`` and ``full_rnorm``. Default False.
    local_order : int or None
        Local order k of the app's time stepper (>= 2; 2 for backward Euler), needed by
        ``richardson`` and ``est_error``. Default None.
    require_convergence : bool
        Raise :class:`braidpy.ConvergenceError` (on every rank) when a solve stops at
        ``max_iter`` without meeting its tolerance, instead of returning a Result with
        ``converged=False``. Default False.
    """

    max_levels: int = 30
    min_coarse: int = 2
    cfactor: PerLevel = 2
    nrelax: PerLevel = 1
    crelax_weight: PerLevelWeight = 1.0
    max_iter: int = 100
    abs_tol: float = 1e-9
    rel_tol: float = 0.0
    tnorm: Union[int, float] = 2
    skip: bool = True
    fmg: bool = False
    fmg_vcycles: int = 1
    nfmg: int = -1
    storage: str = "C"
    seq_soln: bool = False
    final_fc_relax: bool = False
    relax_only_cg: bool = False
    periodic: bool = False
    access_level: int = 1
    print_level: int = 0
    timings: Union[bool, int] = False
    timer_file: str = "braid_timings"
    cycle_file: Optional[str] = None
    residual_computation: bool = True
    batch: bool = True
    require_convergence: bool = False
    full_rnorm: bool = False
    refine: bool = False
    max_refinements: int = 200
    tpoints_cutoff: Optional[int] = None
    incr_max_levels: bool = False
    delta_rank: int = 0
    delta_defer_level: int = 0
    delta_defer_iter: int = 0
    lyapunov_estimate: bool = False
    lyapunov_relax: bool = False
    lyapunov_exponents: bool = False
    richardson: bool = False
    est_error: bool = False
    local_order: Optional[int] = None

    def __post_init__(self):
        _int(self, "max_levels", 1)
        _int(self, "min_coarse", 1)
        _per_level(self, "cfactor", 2)
        _per_level(self, "nrelax", 0)
        _per_level_weight(self, "crelax_weight")
        _int(self, "max_iter", 1)
        _nonneg(self, "abs_tol")
        _nonneg(self, "rel_tol")
        _tnorm(self)
        for name in ("skip", "fmg", "seq_soln", "final_fc_relax", "relax_only_cg", "periodic",
                     "residual_computation", "batch", "require_convergence",
                     "full_rnorm", "refine", "incr_max_levels", "lyapunov_estimate",
                     "lyapunov_relax", "lyapunov_exponents", "richardson", "est_error"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.timings, (bool, np.bool_)):
            if not _is_int(self.timings):
                raise TypeError(f"timings must be True, False, 0, 1 or 2, got {self.timings!r}")
            if not 0 <= self.timings <= 2:
                raise ValueError(f"timings must be True, False, 0, 1 or 2, got {self.timings!r}")
            _set(self, "timings", int(self.timings))
        if self.cycle_file is not None and (not isinstance(self.cycle_file, str)
                                            or not self.cycle_file):
            raise ValueError(f"cycle_file must be None or a non-empty str, got "
                             f"{self.cycle_file!r}")
        if not isinstance(self.timer_file, str) or not self.timer_file:
            raise ValueError(f"timer_file must be a non-empty str, got {self.timer_file!r}")
        _int(self, "max_refinements", 0)
        if self.tpoints_cutoff is not None:
            _int(self, "tpoints_cutoff", 0)
        if self.refine and self.periodic:
            raise ValueError("refine=True and periodic=True exclude each other: temporal "
                             "refinement of a periodic problem is not supported")
        if self.refine and self.seq_soln:
            raise ValueError("refine=True and seq_soln=True exclude each other (the refined "
                             "grid would need a new sequential solution; not supported)")
        if self.refine and self.cycle_file is not None:
            raise ValueError(f"refine=True with cycle_file={self.cycle_file!r} is not "
                             f"supported (the cycle file has no refinement column)")
        _int(self, "fmg_vcycles", 1)
        _int(self, "nfmg", -1)
        if self.nfmg != -1 and not self.fmg:
            raise ValueError(f"nfmg={self.nfmg} needs fmg=True (it picks which iteration of "
                             f"an F-cycle solve is a V-cycle)")
        if _is_int(self.storage):
            _set(self, "storage", _checked_int("storage", self.storage, -1))
        elif self.storage not in ("C", "final", "all"):
            raise ValueError(f"storage must be 'C', 'final', 'all' or an int >= -1 (XBraid's "
                             f"storage level), got {self.storage!r}")
        _int(self, "access_level", 0)
        if self.access_level > 3:
            raise ValueError(f"access_level must be 0, 1, 2 or 3, got {self.access_level!r}")
        _int(self, "print_level", 0)
        if self.print_level > 3:
            raise ValueError(f"print_level must be 0, 1, 2 or 3, got {self.print_level!r}")
        if self.refine and self.access_level == 3:  # XBraid also accesses inside FRefine
            raise ValueError("access_level=3 is not available with refine=True")
        if self.delta_rank and self.access_level == 3:  # its calls would carry no basis
            raise ValueError("access_level=3 is not available with delta_rank > 0")
        for name in ("access_level", "print_level"):  # XBraid's extrapolated C-values, norms
            if self.richardson and getattr(self, name) == 3:
                raise ValueError(f"{name}=3 is not available with richardson=True")
        _delta(self)
        _richardson(self)
        if self.periodic:
            for name in ("access_level", "print_level"):
                if getattr(self, name) == 3:  # XBraid's point 0 is braidpy's point ntime
                    raise ValueError(f"{name}=3 is not available with periodic=True")
            if self.seq_soln:
                raise ValueError("periodic=True and seq_soln=True exclude each other: a "
                                 "periodic problem has no sequential solution")
            default, levels = self.per_level("cfactor")
            if any(v != default for v in levels.values()):
                raise ValueError(f"periodic=True needs one cfactor for all levels (as "
                                 f"XBraid), got cfactor={self.cfactor!r}")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "Options":
        """Options from keyword arguments; unknown names raise with a suggestion.

        >>> Options.from_kwargs(cfactr=4)
        Traceback (most recent call last):
        ...
        ValueError: unknown option 'cfactr'; did you mean 'cfactor'?
        """
        _check_names(kwargs)
        return cls(**kwargs)

    @classmethod
    def coerce(cls, options: Union["Options", Mapping[str, Any], None] = None,
               **overrides: Any) -> "Options":
        """``options`` (an Options, a mapping of option names, or None for the
        defaults) with ``overrides`` applied: the one way options enter braidpy.

        >>> Options.coerce({"cfactor": 4}, max_levels=2).max_levels
        2
        """
        if options is None:
            return cls.from_kwargs(**overrides)
        if isinstance(options, Options):
            return options.replace(**overrides) if overrides else options
        if not isinstance(options, Mapping):
            raise TypeError(f"options must be braidpy.Options, a dict or None, got "
                            f"{type(options).__name__}")
        return cls.from_kwargs(**{**dict(options), **overrides})

    def replace(self, **changes: Any) -> "Options":
        """A copy with ``changes`` applied (validated; unknown names raise)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def changed(self) -> Dict[str, Any]:
        """The options that differ from their defaults, by name.

        >>> Options(cfactor=4).changed()
        {'cfactor': 4}
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}

    def per_level(self, name: str) -> tuple[Any, Dict[int, Any]]:
        """(default, overrides) of a per-level option (floats for ``crelax_weight``,
        ints for the others)."""
        value = getattr(self, name)
        kind = float if name == "crelax_weight" else int
        if isinstance(value, Mapping):
            default = value.get("default", Options.__dataclass_fields__[name].default)
            return kind(default), {int(k): kind(v) for k, v in value.items() if k != "default"}
        return kind(value), {}

    @property
    def stores_fine_f_points(self) -> bool:
        """Whether the fine level keeps its F-points ("all", "final" or storage 0)."""
        return self.storage in ("all", "final") or (_is_int(self.storage) and self.storage == 0)

    def to_core(self) -> _core.CoreOptions:
        """The compiled core's options object (a misspelled field raises AttributeError)."""
        cf, cf_level = self.per_level("cfactor")
        nr, nr_level = self.per_level("nrelax")
        cw, cw_level = self.per_level("crelax_weight")
        return _core.CoreOptions(
            max_levels=self.max_levels, min_coarse=self.min_coarse,
            cfactor=cf, cfactor_level=cf_level, nrelax=nr, nrelax_level=nr_level,
            crelax_weight=cw, crelax_weight_level=cw_level,
            max_iter=self.max_iter, abs_tol=float(self.abs_tol), rel_tol=float(self.rel_tol),
            tnorm=0 if self.tnorm not in (1, 2) else int(self.tnorm),
            skip=self.skip, fmg=self.fmg, nfmg=self.nfmg, fmg_vcycles=self.fmg_vcycles,
            store_all=self.stores_fine_f_points and self.storage != "final",
            store_final=self.storage == "final",
            storage=int(self.storage) if _is_int(self.storage) else -1,
            seq_soln=self.seq_soln,
            final_fc_relax=self.final_fc_relax, relax_only_cg=self.relax_only_cg,
            periodic=self.periodic,
            access_level=self.access_level, print_norms=self.print_level >= 3,
            residual_computation=self.residual_computation,
            timings=bool(self.timings), batch=self.batch, full_rnorm=self.full_rnorm,
            refine=self.refine, max_refinements=self.max_refinements,
            tpoints_cutoff=INT_MAX if self.tpoints_cutoff is None else self.tpoints_cutoff,
            incr_max_levels=self.incr_max_levels,
            delta_rank=self.delta_rank, delta_defer_level=self.delta_defer_level,
            delta_defer_iter=self.delta_defer_iter, lyapunov_estimate=self.lyapunov_estimate,
            lyapunov_relax=self.lyapunov_relax, lyapunov_exponents=self.lyapunov_exponents,
            richardson=self.richardson, est_error=self.est_error,
            local_order=self.local_order or 0,
        )


def _delta(o: "Options") -> None:
    """Delta correction's options: counts >= 0, the others only with delta_rank > 0."""
    for name in ("delta_rank", "delta_defer_level", "delta_defer_iter"):
        _int(o, name, 0)
    if o.delta_rank == 0:
        for name in ("delta_defer_level", "delta_defer_iter", "lyapunov_estimate",
                     "lyapunov_relax", "lyapunov_exponents"):
            if getattr(o, name):
                raise ValueError(f"{name}={getattr(o, name)!r} needs Delta correction "
                                 f"(delta_rank > 0)")
    elif o.full_rnorm:
        raise ValueError(f"delta_rank={o.delta_rank} does not support full_rnorm=True (as "
                         f"XBraid's Delta correction, no full residual norm)")


def _check_names(kwargs: Mapping[str, Any]) -> None:
    fields = sorted(f.name for f in dataclasses.fields(Options))
    for key in kwargs:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown option {key!r}{hint}")


# The core's counts are C ints (braidpy._limits.INT_MAX): larger values are refused
# here, by name, instead of failing inside pybind11 with "Unable to cast Python instance".


def _is_int(v) -> bool:
    """Python and NumPy integers, not booleans."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _set(opts, name, value) -> None:
    object.__setattr__(opts, name, value)  # frozen: normalise in __post_init__ only


def _checked_int(where: str, v, minimum: int) -> int:
    if not _is_int(v):
        raise TypeError(f"{where} must be an int, got {v!r}")
    if v < minimum:
        raise ValueError(f"{where} must be >= {minimum}, got {v!r}")
    if v > INT_MAX:
        raise ValueError(f"{where} must be <= {INT_MAX}, got {v!r}")
    return int(v)


def _int(opts, name, minimum):
    _set(opts, name, _checked_int(name, getattr(opts, name), minimum))


def _nonneg(opts, name):
    v = getattr(opts, name)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not (v >= 0) \
            or math.isinf(v):
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    _set(opts, name, float(v) if not isinstance(v, int) else v)


def _tnorm(opts):
    v = opts.tnorm
    if _is_int(v) and v in (1, 2):
        _set(opts, "tnorm", int(v))
    elif isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_, numbers.Integral)) \
            and math.isinf(v) and v > 0:
        _set(opts, "tnorm", math.inf)
    else:
        raise ValueError(f"tnorm must be 1, 2 or math.inf, got {v!r}")


def _weight(where: str, v) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) \
            or not math.isfinite(float(v)) or not float(v) > 0:
        raise ValueError(f"{where} must be a finite number > 0, got {v!r}")
    return float(v)


def _per_level_weight(opts, name):
    v = getattr(opts, name)
    if not isinstance(v, Mapping):
        _set(opts, name, _weight(name, v))
        return
    out: Dict[Any, float] = {}
    for level, value in v.items():
        if level != "default" and (not _is_int(level) or level < 0 or level > INT_MAX):
            raise ValueError(f"{name} keys must be level numbers >= 0 or 'default', got {level!r}")
        out[level if level == "default" else int(level)] = _weight(f"{name}[{level!r}]", value)
    _set(opts, name, out)


def _per_level(opts, name, minimum):
    v = getattr(opts, name)
    if not isinstance(v, Mapping):
        _set(opts, name, _checked_int(name, v, minimum))
        return
    out: Dict[Any, int] = {}
    for level, value in v.items():
        if level != "default" and (not _is_int(level) or level < 0 or level > INT_MAX):
            raise ValueError(f"{name} keys must be level numbers >= 0 or 'default', got {level!r}")
        key = level if level == "default" else int(level)
        out[key] = _checked_int(f"{name}[{level!r}]", value, minimum)
    _set(opts, name, out)


def _richardson(opts) -> None:
    """richardson / est_error: local_order given, and the options XBraid refuses beside
    them (braid_SetRichardsonEstimation ignores them under a C-relaxation weight, and
    braid_SetCRelaxWt ignores the weight under Richardson) refused by name."""
    if opts.local_order is not None:
        _int(opts, "local_order", 2)
    used = [name for name in ("richardson", "est_error") if getattr(opts, name)]
    if not used:
        return
    what = " and ".join(f"{name}=True" for name in used)
    if opts.local_order is None:
        raise ValueError(f"{what} needs local_order, the local order of the time stepper "
                         f"(>= 2; 2 for backward Euler)")
    default, levels = opts.per_level("crelax_weight")
    if default != 1.0 or any(w != 1.0 for w in levels.values()):
        raise ValueError(f"{what} excludes a C-relaxation weight other than 1 (as in "
                         f"XBraid), got crelax_weight={opts.crelax_weight!r}")
    if opts.periodic:
        raise ValueError(f"{what} excludes periodic=True")
    if opts.delta_rank:
        raise ValueError(f"{what} excludes Delta correction (delta_rank={opts.delta_rank!r}; "
                         f"XBraid switches Richardson off when Delta correction is set)")
    if opts.est_error and opts.full_rnorm:
        raise ValueError("est_error=True excludes full_rnorm=True (XBraid estimates again in "
                         "a restriction after the last iteration of a full-residual solve)")
