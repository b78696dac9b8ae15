"""``braidpy train --grid auto``: the process grid, and where the run checks its
gradients the one-shot setting, that the performance model predicts fastest.

Training fixes the network and the batch. The split of the P ranks into data x space x
layers is chosen among the grids training can run (``max_space``: 1 where spatial
splitting is not available for the network), together with the MGRIT setting (one-shot
m1, m2, relaxation, levels, cfactor) among the :class:`Setting` s given. One-shot
training that checks its gradient's quality (``--quality-check-every``) tries the
:data:`QUALIFIED` settings that agree with what the user fixed (and on networks of at
least :data:`DEEP_LAYERS` layers the multilevel :data:`QUALIFIED_DEEP` too); without the
checks the setting stays the user's, since no setting keeps the gradient-quality floor
on every network (docs/performance.md: the qualified ones kept it on Peaks with 256
layers and missed it on 8- to 32-layer conv networks, as did the defaults at 32 layers),
and a cheaper setting could cost accuracy unseen. Exact mode's iteration counts are not known
before training, so they are taken to be m1, m2 (stated in the choice).

Rank 0 reads the calibration file and decides; the choice reaches the other ranks as
a strict-JSON message (``Bcast`` of its bytes, no pickles), so every rank builds the
same grid even when only rank 0 can read the file, and a failure there reaches every
rank as the same error instead of leaving the others waiting in a collective.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..parallel.collectives import bcast_bytes
from ..parallel.comm import rank_size
from ..parallel.data import share_of
from ..train.optim import OPTIMIZERS
from ..train.reference import reference_blocks
from .calibration import Calibration, load_calibration
from .model import NetSpec, Prediction, Strategy, serial_seconds
from .plan import plan
from .schedule import NRELAX, RELAX_NAMES

__all__ = ["GridChoice", "Setting", "QUALIFIED", "QUALIFIED_DEEP", "DEEP_LAYERS",
           "qualified", "settings_to_try", "training_settings",
           "training_spec", "check_seconds", "trials_per_step", "decide_grid",
           "choose_grid"]

@dataclass(frozen=True)
class Setting:
    """A one-shot MGRIT setting of training: m1 state and m2 adjoint iterations per
    gradient, the relaxation ('F', 'FCF', 'FCFCF'), the most levels and the cfactor of
    every level."""

    m1: int
    m2: int
    relax: str
    levels: int
    cfactor: int

    def label(self) -> str:
        return (f"--m1 {self.m1} --m2 {self.m2} --relax {self.relax} --levels "
                f"{self.levels} --cf {self.cfactor}")


#: The one-shot settings that kept the gradient-quality floor's cosine (>= 0.99 to the
#: exact gradient at every one of 100 L-BFGS steps, at both seeds measured) on Peaks
#: with 256 layers (docs/performance.md, "braidpy train --grid auto"), fewest layer calls
#: first. Left out, having failed it: every m2 = 1 setting, (1, 2) F with cf 8 and
#: (1, 2) F with 3 levels. Not a guarantee elsewhere: --grid auto chooses among them
#: only for runs that check their gradients (training_settings).
QUALIFIED: Tuple[Setting, ...] = (
    Setting(1, 2, "F", 2, 4), Setting(2, 2, "F", 2, 8), Setting(2, 2, "F", 2, 4),
    Setting(1, 2, "FCF", 2, 4), Setting(2, 2, "FCF", 2, 4))


#: The depth from which :data:`QUALIFIED_DEEP` are qualified as well.
DEEP_LAYERS = 1024

#: Multilevel one-shot settings that kept the same floor (cosine >= 0.99 at every one of
#: 100 L-BFGS steps, and the loss after 20 and 100 steps at most 5 % above serial's) on
#: Peaks with 1024 layers and 5000 samples at both seeds measured (docs/performance.md,
#: "Deep networks"), fewest layer calls first. Fewer levels leave a long coarse solve,
#: sequential across layer ranks: at 1024 layers on 16 layer ranks these are the
#: settings the model predicts fast. Qualified only from DEEP_LAYERS layers on: on Peaks
#: with 256 layers (1, 2) F with 3 levels fell to a cosine of 0.77.
QUALIFIED_DEEP: Tuple[Setting, ...] = (
    Setting(1, 2, "F", 3, 8), Setting(1, 2, "F", 3, 4), Setting(1, 2, "F", 4, 4),
    Setting(2, 2, "F", 3, 8), Setting(2, 2, "F", 3, 4))


def qualified(nlayers: Optional[int] = None) -> Tuple[Setting, ...]:
    """The qualified settings for a network of ``nlayers`` layers (None: of any
    depth): :data:`QUALIFIED`, and from :data:`DEEP_LAYERS` layers on
    :data:`QUALIFIED_DEEP` after them.

    >>> len(qualified(256)), len(qualified(1024))
    (5, 10)
    """
    deep = nlayers is not None and nlayers >= DEEP_LAYERS
    return QUALIFIED + QUALIFIED_DEEP if deep else QUALIFIED


def settings_to_try(fixed: Mapping[str, Any], default: Setting,
                    nlayers: Optional[int] = None) -> List[Setting]:
    """The :func:`qualified` settings (for ``nlayers`` layers) that agree with ``fixed``
    ({field: value} of :class:`Setting` fields the user gave); where none does,
    ``default`` with ``fixed`` laid over it (the user's own setting, unqualified).

    >>> default = Setting(2, 2, "FCF", 2, 4)
    >>> [s.cfactor for s in settings_to_try({"m1": 2, "relax": "F"}, default)]
    [8, 4]
    >>> settings_to_try({"m1": 3}, default)
    [Setting(m1=3, m2=2, relax='FCF', levels=2, cfactor=4)]
    """
    unknown = set(fixed) - {f.name for f in dataclasses.fields(Setting)}
    if unknown:
        raise ValueError(f"not fields of a Setting: {', '.join(sorted(unknown))}")
    agree = [s for s in qualified(nlayers)
             if all(getattr(s, k) == v for k, v in fixed.items())]
    return agree or [dataclasses.replace(default, **fixed)]


def training_settings(mode: str, fixed: Mapping[str, Any], default: Setting, *,
                      checked: bool, nlayers: Optional[int] = None) -> List[Setting]:
    """The settings ``--grid auto`` tries for a training ``mode``: in one-shot training
    (modes 'oneshot' and 'auto') that ``checked`` its gradients' quality
    (``--quality-check-every``), :func:`settings_to_try` for a network of ``nlayers``
    layers; else ``default`` with ``fixed`` laid over it (the user's setting: nothing is
    qualified everywhere)."""
    if checked and mode in ("auto", "oneshot"):
        return settings_to_try(fixed, default, nlayers)
    return [dataclasses.replace(default, **fixed)]


@dataclass(frozen=True)
class GridChoice:
    """The chosen (data, space, layers), its predicted seconds per gradient, a line
    for the run's output, and the MGRIT setting it was predicted with."""

    shape: Tuple[int, int, int]
    seconds: float
    summary: str
    setting: Optional[Setting] = None


def training_spec(kind: str, input_shape: Sequence[int], width: int, nlayers: int,
                  samples: int, nclasses: int, kernel: Optional[int], params: int) -> NetSpec:
    """The model's description of a braidpy.nn ResNet trained on ``samples`` per step:
    a dense state of ``width`` numbers, or ``width`` channels of the image's size."""
    if kind == "dense":
        return NetSpec("dense", (int(width),), int(nlayers), int(samples),
                       features=int(math.prod(input_shape)), nclasses=int(nclasses),
                       params=int(params))
    h, w = (int(n) for n in tuple(input_shape)[-2:])
    return NetSpec("conv", (int(width), h, w), int(nlayers), int(samples),
                   kernel=int(kernel or 3), features=int(math.prod(input_shape)),
                   nclasses=int(nclasses), params=int(params))


def trials_per_step(optimizer: str) -> float:
    """Line-search trials the model prices per step of ``optimizer`` (a name of
    :data:`braidpy.train.optim.OPTIMIZERS`): 1 where it searches a line (L-BFGS tries
    at least one point a step; Peaks measured 1.04-1.06 on average,
    benchmarks/bench_work_ratio.py), else 0.

    >>> trials_per_step("lbfgs"), trials_per_step("adam")
    (1.0, 0.0)
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(sorted(OPTIMIZERS))}, "
                         f"got {optimizer!r}")
    return 1.0 if OPTIMIZERS[optimizer].needs_objective else 0.0


def check_seconds(spec: NetSpec, s: Strategy, cal: Calibration) -> float:
    """Predicted seconds of one gradient-quality check's exact gradient on the grid of
    ``s`` (:class:`braidpy.train.reference.BlockedSerialEvaluator`): a data group's
    share of the samples in blocks, the first layer rank's blocks (it has the most)
    each a serial gradient of its samples, their sum passed along the layer ranks
    holding blocks and broadcast, then averaged over the data groups."""
    shard = -(-spec.samples // s.data)  # the largest data group's
    blocks = reference_blocks(shard)
    mine = share_of(len(blocks), s.layers, 0)
    seconds = sum(serial_seconds(dataclasses.replace(spec, samples=len(blocks[b])), cal)
                  for b in mine)
    nbytes = 8.0 * (spec.nparams + 1)
    holders = min(len(blocks), s.layers)
    seconds += (holders - 1) * cal.p2p.seconds(nbytes)  # the chain through the holders
    seconds += math.ceil(math.log2(s.layers)) * cal.p2p.seconds(nbytes)  # its broadcast
    if s.data > 1:
        seconds += cal.allreduce.seconds(nbytes)
    return seconds


def _settings(settings: Optional[Sequence[Setting]], levels: Optional[int],
              cfactor: Optional[int], iterations: Optional[Tuple[int, int]],
              nrelax: int) -> List[Setting]:
    """``settings``, or the one setting of the older keywords (levels, cfactor,
    iterations, nrelax)."""
    if settings is not None:
        if not settings:
            raise ValueError("settings must name at least one Setting")
        return list(settings)
    if levels is None or cfactor is None or iterations is None:
        raise ValueError("give settings, or levels, cfactor and iterations")
    if nrelax not in RELAX_NAMES:
        raise ValueError(f"nrelax must be one of {sorted(RELAX_NAMES)}, got {nrelax!r}")
    return [Setting(int(iterations[0]), int(iterations[1]), RELAX_NAMES[nrelax], int(levels),
                    int(cfactor))]


def decide_grid(spec: NetSpec, nprocs: int, calibration: str, *, mode: str,
                levels: Optional[int] = None, cfactor: Optional[int] = None,
                iterations: Optional[Tuple[int, int]] = None, max_space: int = 1,
                nrelax: int = 1, settings: Optional[Sequence[Setting]] = None,
                grid: Optional[Tuple[int, int, int]] = None,
                check_every: int = 0, trials: float = 0.0) -> GridChoice:
    """The fastest grid of ``nprocs`` ranks, with the fastest of ``settings`` (or the
    one setting of levels, cfactor, iterations and nrelax), by the model (no
    communication: what rank 0 does for :func:`choose_grid`). ``grid``: only that
    (data, space, layers), i.e. the fastest setting for it. ``check_every``: the
    training checks the gradient's quality every that many steps where it runs MGRIT
    (0: never), which adds :func:`check_seconds` over it to those grids' time per
    step; the checks have no form for space ranks, so then ``max_space`` is 1.
    ``trials``: the optimizer's line-search trials per step (L-BFGS: 1; Adam, SGD: 0),
    priced on every grid as it runs them (:func:`braidpy.perf.model.predict`), so
    that grids are compared per step. ValueError when the file or no grid fits."""
    cal = load_calibration(calibration)
    if check_every:
        max_space = 1
    serial = mode == "serial"
    model_mode = "exact" if mode == "exact" else "oneshot"
    best: Optional[Tuple[float, Prediction, Setting, float]] = None
    checks_on: Dict[Tuple[int, int], float] = {}  # per (data, layers): any setting's
    for setting in _settings(settings, levels, cfactor, iterations, nrelax):
        # The Trainer runs its MGRIT setting on a single layer rank too, except in serial
        # mode (serial on every grid) and in mode 'auto' (serial where the layers and
        # rows are not split, one-shot elsewhere: braidpy.train.resolve_mode).
        result = plan(spec, nprocs, cal, levels=(setting.levels,),
                      cfactors=(setting.cfactor,), iterations=(setting.m1, setting.m2),
                      mode=model_mode, nrelax=NRELAX[setting.relax],
                      mgrit_on_one_rank=mode not in ("serial", "auto"), trials=trials)
        for p in result.ranked:
            s = p.strategy
            if s.space > max_space or (serial and s.layers > 1) or \
                    (grid is not None and (s.data, s.space, s.layers) != tuple(grid)):
                continue
            checks = 0.0
            if check_every and _runs_mgrit(mode, s):
                if (s.data, s.layers) not in checks_on:
                    checks_on[s.data, s.layers] = check_seconds(spec, s, cal) / check_every
                checks = checks_on[s.data, s.layers]
            if best is None or p.step_seconds + checks < best[0]:
                best = (p.step_seconds + checks, p, setting, result.serial_step)
    if best is None:
        only = "" if grid is None else f", grid {','.join(map(str, grid))}"
        checked = " (quality checks)" if check_every else ""
        raise ValueError(f"the performance model found no grid of {nprocs} ranks that "
                         f"training can run for this network (space at most {max_space}"
                         f"{checked}"
                         f"{', one layer rank in serial mode' if serial else ''}{only})")
    per_step, pred, setting, one_process = best
    s = pred.strategy
    assumed = " (exact mode: iterations assumed m1, m2)" if mode == "exact" else ""
    runs_mgrit = _runs_mgrit(mode, s)
    with_setting = f" with {setting.label()}" if runs_mgrit and settings is not None \
        and len(settings) > 1 else ""
    check_note = "" if per_step == pred.step_seconds else \
        f" and {(per_step - pred.step_seconds) * 1e3:.3g} ms per step for the quality checks"
    if trials:
        per = (f"{pred.seconds * 1e3:.4g} ms per gradient, {pred.step_seconds * 1e3:.4g} ms "
               f"per step with {trials:g} line-search trial(s), "
               f"{one_process / pred.step_seconds:.2f}x one process per step")
    else:
        per = (f"{pred.seconds * 1e3:.4g} ms per gradient, {one_process / pred.seconds:.2f}x "
               f"one process")
    summary = (f"--grid auto chose {s.data},{s.space},{s.layers}{with_setting}: predicted "
               f"{per}{assumed}{check_note}; calibration {calibration}")
    return GridChoice((s.data, s.space, s.layers), pred.seconds, summary, setting)


def _runs_mgrit(mode: str, s: Strategy) -> bool:
    """Whether training in ``mode`` runs MGRIT on the grid of ``s``: not in serial mode,
    nor in mode auto on a grid without layer or space ranks (serial backpropagation
    there: braidpy.train.resolve_mode)."""
    return mode != "serial" and not (mode == "auto" and s.layers == 1 and s.space == 1)


def choose_grid(spec: NetSpec, comm: Any, calibration: str, *, mode: str,
                levels: Optional[int] = None, cfactor: Optional[int] = None,
                iterations: Optional[Tuple[int, int]] = None, max_space: int = 1,
                nrelax: int = 1, settings: Optional[Sequence[Setting]] = None,
                check_every: int = 0, trials: float = 0.0) -> GridChoice:
    """The fastest grid (and setting) for ``comm``'s ranks (collective; see the module
    docstring and :func:`decide_grid`).

    Raises ValueError (the same message on every rank) when the calibration file
    cannot be used or no grid fits."""
    rank, nprocs = rank_size(comm)
    payload: Optional[bytes] = None
    if rank == 0:
        try:
            c = decide_grid(spec, nprocs, calibration, levels=levels, cfactor=cfactor,
                            mode=mode, iterations=iterations, max_space=max_space,
                            nrelax=nrelax, settings=settings, check_every=check_every,
                            trials=trials)
            assert c.setting is not None  # decide_grid names the setting it chose
            payload = json.dumps({"shape": list(c.shape), "seconds": c.seconds,
                                  "summary": c.summary,
                                  "setting": dataclasses.asdict(c.setting)}).encode()
        except (OSError, ValueError) as exc:
            payload = json.dumps({"error": str(exc)}).encode()
    got = json.loads(bcast_bytes(comm, payload, 0))
    if "error" in got:
        raise ValueError(got["error"] if rank == 0 else f"rank 0: {got['error']}")
    d, s, l = (int(n) for n in got["shape"])
    fields = got["setting"]
    setting = Setting(int(fields["m1"]), int(fields["m2"]), str(fields["relax"]),
                      int(fields["levels"]), int(fields["cfactor"]))
    return GridChoice((d, s, l), float(got["seconds"]), str(got["summary"]), setting)
