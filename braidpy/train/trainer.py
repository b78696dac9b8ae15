"""The training loop: batches, optimizer steps, validation, early stopping, checkpoints."""

from __future__ import annotations

import difflib
import functools
import hashlib
import logging
import math
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from numbers import Integral
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

import numpy as np

from .._device import vector_norm
from .._limits import check_finite
from .._options import Options
from ..nn.network import SWEEP_WORKSPACE_MAX_BYTES, ResNet
from ..parallel.agree import agreed, agreement_point
from ..parallel.interrupts import deferred_interrupts
from ..parallel.collectives import gather_arrays
from ..parallel.comm import is_parallel, rank_size
from ..parallel.data import shard_of
from ..parallel.fingerprint import same_everywhere
from ..parallel.paths import Calls, entry
from ..parallel.grid import ProcessGrid
from . import checkpoint as _checkpoint
from .evaluate import (VALIDATION_SOLVES, LayerParallelEvaluator, SerialEvaluator,
                       training_options)
from .optim import ELASTIC, OPTIMIZERS, make_optimizer
from .progress import format_step, progress_bar, summary, summary_lines
from .quality import QUALITY_FLOOR, check_quality_options, gradient_cosine, next_iterations
from .reference import BlockedSerialEvaluator
from .regularize import Regularizer
from .sharded import (DataParallelEvaluator, WorkerShardEvaluator, check_training_grid,
                      shard_warm_state)
from .spatial_training import space_evaluator

__all__ = ["TrainConfig", "Trainer", "MODES", "RELAXATIONS", "DataMismatchError",
           "data_fingerprint", "network_spec", "resolve_mode"]

logger = logging.getLogger("braidpy.train")

MODES = ("auto", "serial", "exact", "oneshot")

SAME_TRAINING = ("every rank must be given the same network, data, TrainConfig, grid and "
                 "initial parameters")


def resolve_mode(mode: str, layers: int, space: int = 1) -> str:
    """The training mode that runs: 'auto' is 'serial' (exact backprop, the least work)
    where neither the layers nor the image rows are split (one layer rank, one space
    rank), else 'oneshot'; any other mode is itself.

    >>> resolve_mode("auto", 1), resolve_mode("auto", 4), resolve_mode("exact", 1)
    ('serial', 'oneshot', 'exact')
    """
    if mode != "auto":
        return mode
    return "serial" if layers == 1 and space == 1 else "oneshot"

#: TrainConfig.relax: the relaxation's name and MGRIT's ``nrelax`` (FC sweeps after the
#: first F sweep on every level but the coarsest; XBraid's convention).
RELAXATIONS: Dict[str, int] = {"F": 0, "FCF": 1, "FCFCF": 2}


_Config = TypeVar("_Config")


def _unknown_fields_named(cls: Type[_Config]) -> Type[_Config]:
    """Makes the dataclass's generated ``__init__`` name an unknown keyword with the closest
    field (``optimiser`` -> ``optimizer``), as ``braidpy.solve`` does for its options."""
    generated = cls.__init__
    names = [f.name for f in dataclass_fields(cls)]  # type: ignore[arg-type]

    @functools.wraps(generated)
    def __init__(self, *args, **kwargs):
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{cls.__name__}: unknown field {key!r}{hint}")
        generated(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]  # the generated one, wrapped
    return cls


@_unknown_fields_named
@dataclass
class TrainConfig:
    """How to train; every field has a default.

    Parameters
    ----------
    mode : str
        'auto' (the default: 'serial' where the layers are not split over ranks, else
        'oneshot'; see :func:`resolve_mode`), 'serial' (plain forward/backward),
        'exact' (layer-parallel MGRIT to tolerance) or 'oneshot' (m1 state and m2
        adjoint MGRIT iterations per step). The mode that runs is ``Trainer.mode``.
    m1, m2 : int
        Iterations of one-shot mode.
    relax : str or None
        Relaxation of every MGRIT level but the coarsest, in the state, adjoint and
        validation solves: 'F' (F-relaxation only, the least work), 'FCF' (the
        default) or 'FCFCF' (``nrelax`` 0, 1, 2). None: ``mgrit``'s ``nrelax`` (default
        1, FCF). After construction it names the relaxation in effect (None where
        ``mgrit`` sets ``nrelax`` per level).
    cfactor : int, sequence of int, dict or None
        Coarsening factor (>= 2) of the same solves: one for every level, one per level
        from level 0 (``(8, 4)``: level 0 cf 8, level 1 and deeper cf 4; the last value
        applies to the deeper levels), or ``{level: cf}`` as braidpy.Options takes it
        (the levels it does not name take its ``"default"``, else braidpy.Options' 2).
        None: ``mgrit``'s (training default 4). After construction it holds the
        cfactor in effect, in braidpy.Options' form (an int, or a dict with the key
        ``"default"`` for the levels it does not name).
    mgrit : Options or dict
        MGRIT options of the state, adjoint and validation solves: a
        braidpy.Options, or a dict laid over the training defaults cfactor 4,
        max_levels 2, abs_tol 1e-9 (see braidpy.train.training_options); becomes
        an Options, validated here once, with ``relax`` and ``cfactor`` applied.
        Giving the relaxation or the cfactor both here (``nrelax``, ``cfactor``: a key
        of the dict, or a field of the Options that differs from braidpy.Options'
        default) and in ``relax``/``cfactor`` is allowed only when they agree;
        otherwise ValueError names both.
    optimizer : str
        'lbfgs', 'adam', 'sgd', or the elastic averaging SGD of You, Buluç and Demmel
        ("Scaling deep learning on GPU and Knights Landing clusters", SC 2017) over the
        data groups of a grid: 'easgd' (synchronous, deterministic) or 'easgd-async' (a
        centre rank and workers; see :mod:`braidpy.train.easgd` and docs/parallel.md);
        lr, momentum, memory, rho, tau as they apply (None: the optimizer's default).
    rho, tau : float, int or None
        EASGD's elastic strength (> 0) and communication period (>= 1); only with the
        optimizers 'easgd' and 'easgd-async'.
    batch_size : int or None
        Samples per step (None: the whole training set, as in the paper). A
        short last batch of an epoch is dropped (warm-started states keep one shape).
    shuffle : bool
        Draw batches in a new random order each epoch (seeded).
    iterations : int
        Optimizer steps to take in all.
    tikhonov, ddt, classifier_reg : float
        Regularization weights (see braidpy.train.Regularizer).
    seed : int
        Parameter initialization and shuffling.
    init_scale : float
        Scale of the initial residual-layer weights.
    validate_every : int
        Steps between validations, and the last step validates too (0: never).
    validation_solve : str
        How validation propagates the images through the layers: 'sequential' (the
        default; the exact forward pass, the validation samples shared out over the
        layer ranks, each sweeping its share through every layer; the same counts on
        any rank count) or 'mgrit' (the training's MGRIT setting solved to tolerance
        from a cold start: several times the work, kept for comparison).
    patience : int
        Stop after this many validations without a better accuracy (0: never).
    target_accuracy : float or None
        Stop once the validation accuracy reaches this (None: never).
    checkpoint : str or None
        File to save the whole training state to; checkpoint_every steps.
    quality_check_every : int
        Every this many steps (0: never, the default), compare the MGRIT gradient with
        the exact one at the same parameters (serial backpropagation: on every layer
        rank at once where a rank holds all N + 1 states within
        ``braidpy.nn.network.SWEEP_WORKSPACE_MAX_BYTES``, else one MGRIT level, layer
        by layer through the layer ranks) and record the cosine in the step's
        ``gradient_cosine``. Below ``quality_floor`` the step uses the exact gradient
        and one-shot mode takes one more iteration from then on
        (:mod:`braidpy.train.quality`). A check costs about one serial gradient (no
        faster with more layer ranks) and the memory of its states. Modes oneshot and
        exact; not with EASGD or space ranks.
    quality_floor : float
        The cosine a checked gradient must reach (docs/performance.md's floor, 0.99).
    """

    mode: str = "auto"
    m1: int = 2
    m2: int = 2
    relax: Optional[str] = None  # the name in effect after __post_init__
    cfactor: Any = None  # the cfactor in effect (Options' form) after __post_init__
    mgrit: Any = field(default_factory=dict)  # an Options after __post_init__
    optimizer: str = "lbfgs"
    lr: Optional[float] = None
    momentum: Optional[float] = None
    memory: Optional[int] = None
    rho: Optional[float] = None
    tau: Optional[int] = None
    batch_size: Optional[int] = None
    shuffle: bool = False
    iterations: int = 100
    tikhonov: float = 0.0
    ddt: float = 0.0
    classifier_reg: float = 0.0
    seed: int = 1
    init_scale: float = 0.1
    validate_every: int = 1
    validation_solve: str = "sequential"
    patience: int = 0
    target_accuracy: Optional[float] = None
    checkpoint: Optional[str] = None
    checkpoint_every: int = 10
    quality_check_every: int = 0
    quality_floor: float = QUALITY_FLOOR

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        for name in ("m1", "m2", "iterations", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path (str or os.PathLike) or None, "
                            f"got {self.checkpoint!r}")
        if self.checkpoint is not None:
            self.checkpoint = os.fspath(self.checkpoint)  # a str (written to checkpoints)
            if isinstance(self.checkpoint, bytes) or not self.checkpoint:
                raise ValueError(f"checkpoint must be a non-empty file path, got "
                                 f"{self.checkpoint!r}")
        for name in ("validate_every", "patience", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.seed > SEED_MAX:
            raise ValueError(f"seed must be an int <= {SEED_MAX} (int64), got {self.seed!r}")
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or
                                            not isinstance(self.batch_size, int) or
                                            self.batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {self.batch_size!r}")
        if isinstance(self.init_scale, bool) or \
                not isinstance(self.init_scale, (int, float, np.floating)) or \
                not np.isfinite(self.init_scale) or self.init_scale < 0:
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")
        self._check_optimizer()
        check_quality_options(self.quality_check_every, self.quality_floor)
        if self.quality_check_every and self.mode == "serial":
            raise ValueError(f"quality_check_every={self.quality_check_every} checks MGRIT "
                             f"gradients, but mode 'serial' computes exact ones; use mode "
                             f"oneshot, exact or auto, or leave it 0")
        if self.quality_check_every and self.optimizer in ELASTIC:
            raise ValueError(f"quality_check_every applies to gradients averaged over the "
                             f"data groups, not to optimizer {self.optimizer!r}'s per-group "
                             f"ones; leave it 0")
        if self.validation_solve not in VALIDATION_SOLVES:
            raise ValueError(f"validation_solve must be one of "
                             f"{', '.join(VALIDATION_SOLVES)}, got {self.validation_solve!r}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy!r}")
        self.mgrit: Options = self._mgrit_options()
        if self.mode == "exact" and self.mgrit.rel_tol:
            raise ValueError(
                "rel_tol is measured against each solve's first residual, which is tiny when "
                "training warm-starts from the previous step; give abs_tol instead")

    def _mgrit_options(self) -> Options:
        """``mgrit`` as training options with ``relax`` and ``cfactor`` applied (refused
        where ``mgrit`` gives another value); sets both fields to the values in effect."""
        given = self.mgrit
        options = training_options(given)
        changes: Dict[str, Any] = {}
        if self.relax is not None:
            if not isinstance(self.relax, str) or self.relax not in RELAXATIONS:
                raise ValueError(f"relax must be one of {', '.join(RELAXATIONS)}, got "
                                 f"{self.relax!r}")
            changes["nrelax"] = RELAXATIONS[self.relax]
        if self.cfactor is not None:
            changes["cfactor"] = _cfactor_option(self.cfactor)
        for name, value in changes.items():
            if _given(given, name) and _levels(options, name) != \
                    _levels(Options(**{name: value}), name):
                field_name = "relax" if name == "nrelax" else "cfactor"
                raise ValueError(
                    f"{field_name}={getattr(self, field_name)!r} contradicts the MGRIT "
                    f"option {name}={getattr(options, name)!r} given in mgrit; give it in "
                    f"one place")
        if changes:
            options = options.replace(**changes)
        default, levels = _levels(options, "nrelax")
        names = {n: name for name, n in RELAXATIONS.items()}
        self.relax = names.get(default) if not levels else None
        self.cfactor = _per_level_value(*_levels(options, "cfactor"))
        return options

    def _check_optimizer(self) -> None:
        """The optimizer's name and the options that only some optimizers take."""
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of "
                             f"{', '.join(OPTIMIZERS)}")
        elastic = self.optimizer in ELASTIC
        for name in ("rho", "tau"):
            if getattr(self, name) is not None and not elastic:
                raise ValueError(f"{name} applies to the optimizers {' and '.join(ELASTIC)}, "
                                 f"not {self.optimizer!r}")
        if self.lr is not None and (isinstance(self.lr, bool) or
                                    not isinstance(self.lr, (int, float, np.floating)) or
                                    not np.isfinite(self.lr) or self.lr <= 0):
            raise ValueError(f"lr must be None or a finite number > 0, got {self.lr!r}")
        if self.momentum is not None:
            if self.optimizer not in ("sgd",) + tuple(ELASTIC):
                raise ValueError(f"momentum applies to the optimizers sgd, "
                                 f"{', '.join(ELASTIC)}, not {self.optimizer!r}")
            m = self.momentum
            if isinstance(m, bool) or not isinstance(m, (int, float, np.floating)) or \
                    not np.isfinite(m) or not 0 <= m < 1:
                raise ValueError(f"momentum must be None or a number in [0, 1), got {m!r}")
        rho, tau = self.rho, self.tau
        if rho is not None and (isinstance(rho, bool) or
                                not isinstance(rho, (int, float, np.floating)) or
                                not np.isfinite(rho) or rho <= 0):
            raise ValueError(f"rho must be a number > 0, got {rho!r}")
        if tau is not None and (isinstance(tau, bool) or not isinstance(tau, int) or tau < 1):
            raise ValueError(f"tau must be an int >= 1, got {tau!r}")
        if self.memory is not None and self.optimizer != "lbfgs":
            raise ValueError(f"memory applies to the optimizer lbfgs, not {self.optimizer!r}")
        if self.optimizer == "easgd-async" and self.checkpoint:
            raise ValueError("optimizer 'easgd-async' cannot write checkpoints: its updates "
                             "depend on the order messages reach the centre, so no checkpoint "
                             "resumes it exactly; leave checkpoint out or use 'easgd'")


def _check_initial_params(params: Any) -> None:
    """Initial parameters given to :class:`Trainer`: real floating-point numbers, all
    finite (NaN would train as "MGRIT diverged" at the first step); a ValueError naming
    ``params`` and the first bad entry otherwise."""
    kind = getattr(getattr(params, "dtype", None), "kind", None)
    if kind != "f":
        raise ValueError(f"params must be an array of floating-point numbers, got dtype "
                         f"{getattr(params, 'dtype', None)}")
    host = np.asarray(params.get() if hasattr(params, "get") and
                      not isinstance(params, np.ndarray) else params)
    finite = np.isfinite(host)
    if not finite.all():
        i = int(np.argmin(finite))
        raise ValueError(f"params must be finite: entry {i} is {host[i]}")


#: The largest ``seed`` (NumPy seeds with any int; checkpoints and the command line keep
#: it within int64).
SEED_MAX = 2**63 - 1


def _cfactor_option(value: Any) -> Any:
    """TrainConfig.cfactor in braidpy.Options' form: an int, or a dict of levels with
    ``"default"`` for the others (a sequence gives levels 0, 1, ... and its last value
    the deeper levels); ValueError naming the value when it is none of these."""
    if isinstance(value, Mapping):
        try:
            return _per_level_value(*_levels(Options(cfactor=dict(value)), "cfactor"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cfactor {value!r}: {exc}") from None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, Integral) or
                         v < 2 for v in values):
        raise ValueError(f"cfactor must be an int >= 2, a sequence of them (levels 0, 1, "
                         f"...; the last for the deeper levels) or a {{level: int}} dict, "
                         f"got {value!r}")
    return _per_level_value(int(values[-1]), {level: int(v) for level, v in
                                              enumerate(values[:-1])})


def _per_level_value(default: int, levels: Mapping[int, int]) -> Any:
    """A per-level option in braidpy.Options' form, the levels that differ from the
    default only: an int, or ``{level: value, ..., "default": default}``."""
    levels = {level: v for level, v in levels.items() if v != default}
    return {**levels, "default": default} if levels else default


def _levels(options: Options, name: str) -> Tuple[int, Dict[int, int]]:
    """A per-level option as (default, the levels that differ from it): equal settings
    compare equal however they were written (4 and {"default": 4, 1: 4})."""
    default, levels = options.per_level(name)
    return default, {level: v for level, v in levels.items() if v != default}


def _given(options: Any, name: str) -> bool:
    """Whether ``TrainConfig.mgrit`` sets option ``name`` (a key of a dict, or a field of
    an Options that differs from braidpy.Options' default)."""
    if isinstance(options, Options):
        return name in options.changed()
    return isinstance(options, Mapping) and name in options


def network_spec(net: ResNet) -> Dict[str, Any]:
    """The ResNet's constructor arguments (JSON values): ``ResNet(**spec)`` rebuilds it."""
    return {"input_shape": list(net.input_shape), "nclasses": net.nclasses,
            "width": net.width, "nlayers": net.nlayers, "tstop": net.tstop,
            "activation": net.activation_name, "opening": net.opening,
            "opening_activation": net.opening_activation, "kernel": net.kernel}


class DataMismatchError(ValueError):
    """A checkpoint written for other training or validation data than the trainer's."""


def data_fingerprint(train: Tuple[np.ndarray, np.ndarray],
                     validation: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> str:
    """A short hash of the training and validation data (shapes, dtypes and bytes):
    ``"sha256:"`` and 16 hex digits. Checkpoints record it so that resuming on other data
    is noticed.

    >>> X, C = np.zeros((2, 3)), np.eye(2)
    >>> data_fingerprint((X, C)) == data_fingerprint((X.copy(), C.copy()))
    True
    >>> data_fingerprint((X, C)) == data_fingerprint((X + 1, C))
    False
    """
    h = hashlib.sha256()
    for name, pair in (("train", train), ("validation", validation)):
        h.update(name.encode())
        for a in (() if pair is None else pair):
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
    return "sha256:" + h.hexdigest()[:16]


def _check_pair(what: str, data: Any, nclasses: int) -> Tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{what} must be a pair (X, C) of samples and labels (one-hot, or "
                         f"class ids)")
    X = np.asarray(data[0], dtype=np.float64)
    C = _one_hot(what, np.asarray(data[1]), nclasses)
    if X.shape[0] != C.shape[0]:
        raise ValueError(f"{what}: X has {X.shape[0]} samples but C has {C.shape[0]} labels")
    if X.shape[0] == 0:
        raise ValueError(f"{what} is empty")
    return X, C


def _one_hot(what: str, labels: np.ndarray, nclasses: int) -> np.ndarray:
    """float64 one-hot labels: as given when 2-D, else built from integer class ids."""
    if labels.ndim != 1:
        return np.asarray(labels, dtype=np.float64)
    if labels.dtype == bool or not (np.issubdtype(labels.dtype, np.integer)
                                    or np.issubdtype(labels.dtype, np.floating)):
        raise ValueError(f"{what}: class ids must be integers, got dtype {labels.dtype}")
    ids = labels.astype(np.float64, copy=False)
    bad = ~np.isfinite(ids) | (ids != np.floor(ids)) | (ids < 0) | (ids >= nclasses)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what}: class id {labels[k].item()!r} (sample {k}) is not an integer in "
                         f"0..{nclasses - 1} (the network has {nclasses} classes)")
    out = np.zeros((labels.shape[0], nclasses))
    out[np.arange(labels.shape[0]), ids.astype(np.int64)] = 1.0
    return out


class Trainer:
    """Trains a :class:`braidpy.nn.ResNet` serially or layer-parallel.

    Parameters
    ----------
    net : ResNet
    train : (X, C)
        Training samples and their labels: one-hot, shape (samples, classes), or
        integer class ids, shape (samples,).
    validation : (X, C), optional
    config : TrainConfig, optional
    comm : mpi4py communicator, optional
        Layer (time) communicator; every rank must call with the same arguments.
    params : array, optional
        Initial parameters (default: ``net.init_params(config.seed, config.init_scale)``).
    grid : braidpy.parallel.ProcessGrid, optional
        Data × space × layers parallel training (instead of ``comm``): each data group
        evaluates its shard of every batch over its layer communicator, and loss and
        gradient are averaged over the data groups weighted by shard size
        (:mod:`braidpy.train.sharded`). Validation shards the validation set likewise.
        With space > 1 (conv networks, modes exact and oneshot) each space rank holds a
        band of image rows of every state (:mod:`braidpy.train.spatial_training`).
        With the optimizer 'easgd' the groups do not average gradients: each steps on
        its own shard's gradient and the elastic term couples it to the centre variable
        (:mod:`braidpy.train.easgd`); with 'easgd-async' the grid is D x 1 x 1, its
        last rank is the centre and the others are workers, each on its own
        1/(D-1) of every batch.

    Notes
    -----
    After :meth:`run`, ``params`` holds the trained parameters, ``history`` one record per
    step and ``best`` the best validation accuracy with its parameters.

    Elastic averaging (optimizers 'easgd', 'easgd-async'): ``params`` are this data
    group's own W_i and :attr:`model_params` the centre W̄, the model that validation,
    ``best`` and the checkpoint's ``params`` use. A step's ``loss`` and ``objective``
    are the batch's mean over the groups (each shard at its own group's W_i, weighted
    by its samples) and ``gradient_norm`` the root mean square of the groups' gradient
    norms: the same numbers on every rank. Asynchronous workers report their own
    shard's numbers (no collectives between them), and ``model_params`` is the W̄ of
    their latest exchange until the run ends; then every rank holds the centre's
    final W̄.

    The network's :attr:`~braidpy.nn.ResNet.placement` (``ResNet(..., device="cuda")``)
    decides where training computes: the data are copied there once, and parameters,
    states, gradients and optimizer state stay there; each step brings back only scalars
    (loss, norms, step sizes, accuracy). ``X`` and ``C`` stay NumPy arrays on the host
    (the data fingerprint); :meth:`state` copies what a checkpoint needs to the host.
    """

    def __init__(self, net: ResNet, train: Tuple[Any, Any],
                 validation: Optional[Tuple[Any, Any]] = None,
                 config: Optional[TrainConfig] = None, *, comm: Any = None,
                 params: Optional[np.ndarray] = None, grid: Optional[ProcessGrid] = None):
        if grid is not None and comm is not None:
            raise ValueError("give either comm (layers only) or grid, not both")
        # Agreement, progress and checkpoints span every rank; solves the layer group.
        self.comm = comm if grid is None else (grid.comm if grid.size > 1 else None)
        # The local checks and set-up first, then one collective that every rank was
        # given the same training (a rank whose arguments failed the checks stops the
        # others there, instead of leaving them in the first solve).
        failure: Optional[BaseException] = None
        fields: Optional[Dict[str, Any]] = None
        try:
            self._check_arguments(net, train, validation, config, comm, grid, params)
            if is_parallel(self.comm):  # (only where there are ranks to compare with)
                fields = self._setup_fields()
        except Exception as exc:  # noqa: BLE001 - re-raised on this rank by the check
            failure, fields = exc, None
        same_everywhere(self.comm, fields, "the training set-up", hint=SAME_TRAINING,
                        error=failure)
        del failure
        self._build(net, grid, comm)
        # Entry calls, agreed at each entry point (braidpy.parallel.paths).
        self._calls = Calls(self.comm)
        self._step_calls = self._calls if self.step_comm is self.comm else \
            Calls(self.step_comm)

    def _check_arguments(self, net: ResNet, train: Tuple[Any, Any],
                         validation: Optional[Tuple[Any, Any]],
                         config: Optional[TrainConfig], comm: Any,
                         grid: Optional[ProcessGrid], params: Optional[np.ndarray]) -> None:
        """The local part of the constructor: arguments checked, nothing collective."""
        self.net = net
        self.config = config or TrainConfig()
        layer_ranks = grid.layers if grid is not None else (1 if comm is None else
                                                             comm.Get_size())
        #: The mode that runs (TrainConfig.mode 'auto' resolved for this grid).
        self.mode = resolve_mode(self.config.mode, layer_ranks,
                                 1 if grid is None else grid.space)
        if grid is not None:
            check_training_grid(grid, net, self.mode)
            if grid.space > 1 and self.config.quality_check_every:
                raise ValueError("quality_check_every is not available with space ranks "
                                 "(its exact gradient has no row-split form yet); leave it 0")
        self.grid = grid
        self.X, self.C = _check_pair("train", train, net.nclasses)
        net.check_data(self.X, self.C)
        self.validation = None
        if validation is not None:
            self.validation = _check_pair("validation", validation, net.nclasses)
            net.check_data(*self.validation)
        # NaN or infinite data would train nonsense and be reported as "MGRIT diverged".
        check_finite(self.X, "training features")
        check_finite(self.C, "training labels")
        if self.validation is not None:
            check_finite(self.validation[0], "validation features")
            check_finite(self.validation[1], "validation labels")
        cfg = self.config
        if params is None:
            params = net.init_params(cfg.seed, cfg.init_scale)
        elif getattr(params, "shape", None) != (net.nparams,):
            raise ValueError(f"params must have shape ({net.nparams},), got "
                             f"{getattr(params, 'shape', None)}")
        else:
            _check_initial_params(params)
        self._initial_params: Any = params  # on the host or the network's device
        self.data_fingerprint = data_fingerprint((self.X, self.C), self.validation)
        self.placement = net.placement
        self.elastic = cfg.optimizer in ELASTIC
        self.asynchronous = cfg.optimizer == "easgd-async"
        if self.elastic:
            self._check_elastic(grid, self.placement)

    def _setup_fields(self) -> Dict[str, Any]:
        """What must be the same on every rank (braidpy.parallel.fingerprint)."""
        config = {f"config.{key}": value for key, value in asdict(self.config).items()}
        return {"mode": self.mode, **config,
                "network": self.net.describe(), "nparams": self.net.nparams,
                "grid": None if self.grid is None else list(self.grid.shape),
                "data": self.data_fingerprint,
                "initial parameters": self.placement.to_host(self._initial_params)}

    def _build(self, net: ResNet, grid: Optional[ProcessGrid], comm: Any) -> None:
        """The collective part of the constructor (solvers, optimizer), once every
        rank's arguments agree."""
        cfg = self.config
        layers_comm = comm if grid is None else grid.layers_comm
        self._layers_comm = layers_comm
        params, self._initial_params = self._initial_params, None
        #: One-shot's (m1, m2) now: the config's, raised by the quality checks.
        self.oneshot: Optional[Tuple[int, int]] = \
            (cfg.m1, cfg.m2) if self.mode == "oneshot" else None
        # Serial backpropagation (mode auto on one layer rank) is exact: nothing to check.
        self.quality_check_every = 0 if self.mode == "serial" else cfg.quality_check_every
        self._reference: Any = None  # the exact gradient's evaluator, built at first check
        where = self.placement
        # Per-step agreement: every rank, except asynchronous workers (they never wait
        # for each other; the centre's protocol stops them all when one fails).
        self.step_comm = None if self.asynchronous else self.comm
        self.params = where.from_host(params)
        # The data on the device once; batches are gathered there (index arrays go over).
        self._device_data = None if where.is_host else (
            where.from_host(self.X), where.from_host(self.C))
        self._device_validation = None if where.is_host or self.validation is None else (
            where.from_host(self.validation[0]), where.from_host(self.validation[1]))
        self.optimizer = make_optimizer(cfg.optimizer, **self._optimizer_args())
        # Asynchronous EASGD: the grid's last rank is the centre (rank 0 a worker, which
        # prints); the workers split every batch among themselves.
        self.is_centre = self.asynchronous and self.optimizer.is_centre
        self.regularizer = Regularizer(net, cfg.tikhonov, cfg.ddt, cfg.classifier_reg)
        self.rng = np.random.default_rng(cfg.seed)
        self.iteration = 0
        self.epoch = 0
        self._order: Optional[np.ndarray] = None
        self._position = 0
        self.history: List[Dict[str, Any]] = []
        self.best: Dict[str, Any] = {"accuracy": None, "iteration": None, "params": None}
        self._stale = 0
        self.stop_reason: Optional[str] = None
        X0, C0 = self._peek_batch()
        if grid is not None:  # the solvers see one shard
            rows = shard_of(X0.shape[0], *self._shard())
            X0, C0 = X0[rows.start:rows.stop], C0[rows.start:rows.stop]
            if self.validation is not None and not self.asynchronous and \
                    self.validation[0].shape[0] < grid.data:
                raise ValueError(f"{self.validation[0].shape[0]} validation samples cannot "
                                 f"feed {grid.data} data groups (each needs at least one)")
        self.evaluator: Any
        if self.mode == "serial":
            self.evaluator = SerialEvaluator(net, comm=layers_comm)
        elif grid is not None and grid.space > 1:  # bands of image rows per space rank
            oneshot = (cfg.m1, cfg.m2) if self.mode == "oneshot" else None
            self.evaluator = space_evaluator(net, grid, self.params, X0, C0,
                                             mgrit=cfg.mgrit, oneshot=oneshot,
                                             validation=cfg.validation_solve)
        else:
            oneshot = (cfg.m1, cfg.m2) if self.mode == "oneshot" else None
            self.evaluator = LayerParallelEvaluator(net, self.params, X0, C0,
                                                    comm=layers_comm, mgrit=cfg.mgrit,
                                                    oneshot=oneshot,
                                                    validation=cfg.validation_solve)
        if self.asynchronous:
            self.evaluator = WorkerShardEvaluator(self.evaluator, *self._shard())
        elif grid is not None:
            self.evaluator = DataParallelEvaluator(self.evaluator, grid, self._batch_size(),
                                                   average=not self.elastic)

    def _check_elastic(self, grid: Optional[ProcessGrid], where: Any) -> None:
        """EASGD needs data groups to couple (and, asynchronously, one rank each)."""
        name = self.config.optimizer
        if grid is None or grid.data < 2:
            raise ValueError(
                f"optimizer {name!r} couples data groups elastically, but "
                + ("no grid was given" if grid is None else
                   f"the grid {'x'.join(map(str, grid.shape))} has data=1")
                + ": give a grid with data >= 2 (Trainer(grid=ProcessGrid(comm, D, S, L)), "
                  "command line --grid D,S,L), or use the optimizer 'sgd'")
        if self.asynchronous and (grid.space, grid.layers) != (1, 1):
            raise ValueError(
                f"optimizer 'easgd-async' runs one rank per data group (a centre and "
                f"{grid.data - 1} worker(s)), so the grid must be D x 1 x 1, got data "
                f"{grid.data} x space {grid.space} x layers {grid.layers}")
        if not where.is_host:
            raise ValueError(f"optimizer {name!r} runs on the host (the EASGD messages are "
                             f"NumPy arrays); train with device cpu")

    def _shard(self) -> Tuple[int, int]:
        """(shards of every batch, this rank's shard): one per data group, or one per
        asynchronous worker (the centre is given the first one's shape)."""
        assert self.grid is not None
        if self.asynchronous:
            workers = self.grid.data - 1
            return workers, min(self.grid.coords[0], workers - 1)
        return self.grid.data, self.grid.coords[0]

    def _optimizer_args(self) -> Dict[str, Any]:
        cfg = self.config
        args: Dict[str, Any] = {"lr": cfg.lr}
        if cfg.optimizer in ("sgd",) + ELASTIC:
            args["momentum"] = cfg.momentum
        if cfg.optimizer == "lbfgs":
            args["memory"] = cfg.memory
        if self.elastic:
            assert self.grid is not None
            args.update(rho=cfg.rho, tau=cfg.tau, comm=self.grid.data_comm)
            if self.asynchronous:
                args["centre"] = self.grid.data - 1
            else:  # its reduction, inside the step's agreement (see step)
                args["before_reduction"] = self._point
        return args

    @property
    def model_params(self) -> Any:
        """The parameters that stand for the model: the centre W̄ with EASGD (once
        there is one), else :attr:`params`."""
        center = getattr(self.optimizer, "center", None) if self.elastic else None
        return self.params if center is None else center

    @property
    def rank(self) -> int:
        return rank_size(self.comm)[0]

    # ---------------------------------------------------------------- batches
    def _new_epoch_order(self) -> np.ndarray:
        n = self.X.shape[0]
        return self.rng.permutation(n) if self.config.shuffle else np.arange(n)

    def _next_batch_indices(self) -> np.ndarray:
        n, size = self.X.shape[0], self._batch_size()
        if self._order is None or self._position >= n:
            if self._order is not None:
                self.epoch += 1
            self._order, self._position = self._new_epoch_order(), 0
        idx = self._order[self._position:self._position + size]
        self._position += size
        if self._position > n:  # drop a short last batch: MGRIT warm states keep their shape
            return self._next_batch_indices()
        return idx

    def _batch_size(self) -> int:
        """Samples per step: batch_size, or the whole training set (and at most it)."""
        n = self.X.shape[0]
        return min(self.config.batch_size or n, n)

    def _peek_batch(self):
        """A batch of the first batch's shape (sets the solvers up; draws nothing)."""
        size = self._batch_size()
        if self._device_data is not None:
            X, C = self._device_data
            return X[:size, ...], C[:size, ...]
        return self.X[:size], self.C[:size]

    def _batch(self, idx: np.ndarray) -> Tuple[Any, Any]:
        """Samples ``idx`` of the training data, on the network's device."""
        if self._device_data is None:
            return self.X[idx], self.C[idx]
        xp = self.placement.xp
        rows = xp.asarray(idx, device=self.placement.device)
        X, C = self._device_data
        return xp.take(X, rows, axis=0), xp.take(C, rows, axis=0)

    def _validation_data(self) -> Tuple[Any, Any]:
        assert self.validation is not None
        return self._device_validation or self.validation

    # ------------------------------------------------------------- objective
    def _objective(self, X, C) -> Callable[[np.ndarray], float]:
        def value(params: np.ndarray) -> float:
            # The optimizer's own work ran before this call: a rank that failed there
            # is met here, not in the solve's messages.
            self._point("the line search")
            with self._agreed("the objective of the line search"):
                return self.evaluator.loss(params, X, C) + self.regularizer(params)[0]
        return value

    def step(self) -> Dict[str, Any]:
        """One optimizer step on the next batch; returns its history record.

        Collective over the training ranks (except asynchronous EASGD workers). Its
        local work runs in agreements (:mod:`braidpy.parallel.agree`): an exception or a
        Ctrl-C on one rank anywhere in the step stops every rank within the step, the
        original error there and BraidError naming it elsewhere, instead of leaving the
        others waiting in the next solve or reduction.
        """
        entry(self.step_comm, self._step_calls, "Trainer.step")
        start = time.perf_counter()
        calls_before = self.evaluator.step_calls
        with self._agreed("preparing the training step"):
            idx = self._next_batch_indices()
            X, C = self._batch(idx)
            reg, reg_grad = self.regularizer(self.params)
        loss, grad, stats = self.evaluator.gradient(self.params, X, C)
        every = self.quality_check_every
        raised: Optional[Tuple[int, int]] = None
        if every and (self.iteration + 1) % every == 0:
            loss, grad, raised = self._check_quality(loss, grad, X, C, stats)
        with self._agreed("adding the regularization to the gradient"):
            total = loss + reg
            grad = grad + reg_grad
            gradient_norm = vector_norm(grad)
        if "shard_weight" in stats:  # synchronous EASGD: each group's own numbers
            loss, reg, square = self.evaluator.mean_over_groups(
                [loss, reg, gradient_norm ** 2], [stats.pop("shard_weight"), 1.0, 1.0])
            gradient_norm = math.sqrt(square)
        objective = self._objective(X, C) if self.optimizer.needs_objective else None
        with self._agreed("the optimizer step"):
            info = self.optimizer.step(self.params, total, grad, objective)
        if raised is not None:  # after this step's line search, which used its gradient's
            self.evaluator.set_oneshot(*raised)
            self.oneshot = raised
        self.iteration += 1
        record: Dict[str, Any] = {
            "iteration": self.iteration, "epoch": self.epoch, "loss": loss,
            "objective": loss + reg, "gradient_norm": gradient_norm,
            "step_size": info["step_size"], "line_search_trials": info["trials"],
        }
        record.update(stats)
        # All layer steps of this optimizer step, line search included.
        record["steps"] = self.evaluator.step_calls - calls_before
        cfg = self.config
        # Every validate_every-th step, and the last one (a run shorter than
        # validate_every would otherwise never validate).
        if self.validation is not None and cfg.validate_every and (
                self.iteration % cfg.validate_every == 0 or self.iteration == cfg.iterations):
            with self._agreed("validation"):
                before = time.perf_counter()
                acc = self._accuracy(self.model_params)
                record["val_accuracy"] = acc
                record["validation_seconds"] = time.perf_counter() - before
                if self.best["accuracy"] is None or acc > self.best["accuracy"]:
                    self.best = {"accuracy": acc, "iteration": self.iteration,
                                 "params": self.placement.copy(self.model_params)}
                    self._stale = 0
                else:
                    self._stale += 1
        record["seconds"] = time.perf_counter() - start
        self.history.append(record)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", format_step(record, cfg.iterations))
        return record

    # ---------------------------------------------------------- quality checks
    def _check_quality(self, loss: float, grad: Any, X: Any, C: Any,
                       stats: Dict[str, Any]) -> Tuple[float, Any, Optional[Tuple[int, int]]]:
        """The step's (loss, gradient) after comparing ``grad`` with the exact gradient
        (:mod:`braidpy.train.quality`): its own, or the exact one where the cosine is
        below the floor; and the one-shot iterations to take from the next step (None:
        unchanged)."""
        start = time.perf_counter()
        reference = self._reference_evaluator(X, C)
        before = reference.step_calls
        exact_loss, exact_grad, _ = reference.gradient(self.params, X, C)
        with self._agreed("the gradient-quality check"):
            cosine = gradient_cosine(grad, exact_grad)  # the same bits on every rank
            stats["gradient_cosine"] = cosine
            stats["quality_check_steps"] = reference.step_calls - before
            floor = self.config.quality_floor
            below = cosine < floor
            stats["exact_gradient_used"] = below
            raised = None
            if below:
                raised = next_iterations(*self.oneshot) if self.oneshot else None
                if raised is not None:
                    stats["oneshot"] = list(raised)
                if self.rank == 0:
                    logger.warning(
                        "step %d: cosine %.12g of the %s gradient to the exact one, below the "
                        "floor %s: the step uses the exact gradient; %s", self.iteration + 1,
                        cosine, self.mode, floor,
                        f"one-shot runs m1={raised[0]}, m2={raised[1]} from the next step"
                        if raised else "the iterations stay as they are (" +
                        ("at the most the check gives" if self.oneshot else
                         "exact mode: a smaller abs_tol would help") + ")")
            stats["quality_check_seconds"] = time.perf_counter() - start
        return (exact_loss, exact_grad, raised) if below else (loss, grad, None)

    def _reference_evaluator(self, X: Any, C: Any) -> Any:
        """Exact gradients for the quality checks, built at the first, averaged over the
        data groups of a grid like the training's: serial backpropagation of fixed
        blocks of samples shared out over the layer ranks
        (:class:`~braidpy.train.reference.BlockedSerialEvaluator`: about one serial
        gradient's time over the ranks sharing it) where a rank can hold a block's N + 1
        states (``SWEEP_WORKSPACE_MAX_BYTES``), else one MGRIT level, layer by layer
        through the layer ranks (each holding its share). The same bits on any number
        of layer ranks either way."""
        if self._reference is None:
            comm, grid, net = self._layers_comm, self.grid, self.net
            if grid is not None:
                rows = shard_of(X.shape[0], *self._shard())
                X, C = X[rows.start:rows.stop, ...], C[rows.start:rows.stop, ...]
            blocked = BlockedSerialEvaluator(net, comm=comm)
            block_rows = len(blocked.blocks(X.shape[0])[0])  # the largest block
            itemsize = np.dtype(getattr(self.params, "dtype", np.float64)).itemsize
            states = (net.nlayers + 1) * block_rows * math.prod(net.state_shape) * itemsize
            inner: Any = blocked if states <= SWEEP_WORKSPACE_MAX_BYTES else \
                LayerParallelEvaluator(net, self.params, X, C, comm=comm,
                                       mgrit=self.config.mgrit.replace(max_levels=1))
            self._reference = inner if grid is None else DataParallelEvaluator(
                inner, grid, self._batch_size())
        return self._reference

    def _agreed(self, what: str) -> Any:
        """An agreement over the training ranks (:attr:`step_comm`) for ``what``."""
        return agreed(self.step_comm, what)

    def _point(self, what: str) -> None:
        """Where the peers of a rank that failed in a guarded block's local work meet
        it, before a collective (:func:`braidpy.parallel.agree.agreement_point`)."""
        agreement_point(self.step_comm, what)

    def _accuracy(self, params: Any) -> float:
        """Validation accuracy at ``params``. The evaluators work on :attr:`params` in
        place (the MGRIT apps hold it), so other parameters (EASGD's centre) are
        copied in for the validation and this group's own put back after. The
        validation data are on the network's device (copied there once); the evaluators
        take them in the network's evaluation batches
        (:meth:`braidpy.nn.ResNet.evaluation_batches`) and bring back one number."""
        data = self._validation_data()
        if params is self.params:
            self._point("validation")
            return self.evaluator.accuracy(self.params, *data)
        own = self.placement.copy(self.params)
        self.params[...] = params
        try:
            self._point("validation")
            return self.evaluator.accuracy(self.params, *data)
        finally:
            self.params[...] = own

    def should_stop(self) -> Optional[str]:
        """Why training stops now, or None."""
        cfg = self.config
        last = self.history[-1] if self.history else {}
        if last and not np.isfinite(last["objective"]):
            return "diverged"
        if self.iteration >= cfg.iterations:
            return "iterations"
        if cfg.target_accuracy is not None and last.get("val_accuracy", -1) >= cfg.target_accuracy:
            return "target accuracy"
        if cfg.patience and self._stale >= cfg.patience:
            return "no improvement"
        return None

    def run(self, on_step: Optional[Callable[[Dict[str, Any]], None]] = None, *,
            progress: bool = False) -> List[Dict]:
        """Step until a stopping rule fires; ``on_step(record)`` after each step.

        Saves a checkpoint every ``checkpoint_every`` steps and at the end when
        ``config.checkpoint`` is set. ``progress=True`` shows a progress bar on rank 0
        (``tqdm.auto``: a widget in notebooks; nothing if tqdm is not installed). Logs
        each step at DEBUG and the run's summary at INFO on the ``braidpy.train`` logger.
        Returns the history.
        """
        entry(self.comm, self._calls, "Trainer.run")
        cfg = self.config
        bar = progress_bar(cfg.iterations, initial=self.iteration) \
            if progress and self.rank == 0 and not self.is_centre else None
        try:
            # Ctrl-C on one rank stops every rank at the next agreement point (in a
            # solve, or after the step's report below) instead of stranding the others.
            with deferred_interrupts():
                if self.is_centre:  # asynchronous EASGD's centre serves the workers
                    self.stop_reason = "served"
                    self.optimizer.serve(self.placement.to_host(self.params))
                else:
                    self._train(on_step, bar)
                if self.asynchronous:  # every rank takes the centre's final W̄
                    self._share_final_centre()
        finally:
            if bar is not None:
                bar.close()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", "; ".join(summary_lines(
                summary(self.history, self.best, self.stop_reason))))
        return self.history

    def _train(self, on_step: Optional[Callable[[Dict[str, Any]], None]], bar: Any) -> None:
        """The steps of :meth:`run` (an asynchronous worker's inside its session)."""
        cfg = self.config
        with self.optimizer.session() if self.asynchronous else nullcontext():
            self.stop_reason = self.should_stop() if self.history else None
            while self.stop_reason is None:
                # Whatever fails on one rank in a step (its own agreements inside
                # catch the rest) reaches the other ranks here.
                with self._agreed("the training step"):
                    record = self.step()
                    with self._agreed("reporting the training step"):
                        if bar is not None:
                            bar.update(record)
                        if on_step is not None:
                            on_step(record)
                    # A non-finite objective (every rank agrees on it) keeps the last
                    # good checkpoint: its parameters would be NaN.
                    finite = bool(np.isfinite(record["objective"]))
                    if cfg.checkpoint and finite and \
                            self.iteration % cfg.checkpoint_every == 0:
                        self.save(cfg.checkpoint)
                    self.stop_reason = self.should_stop()
            if cfg.checkpoint and self.stop_reason != "diverged" and \
                    self.iteration % cfg.checkpoint_every != 0:
                self.save(cfg.checkpoint)

    def _share_final_centre(self) -> None:
        """Asynchronous EASGD after every worker's session ended well: the centre's
        final W̄ to every rank (collective over the data communicator)."""
        assert self.grid is not None
        center = self.placement.to_host(self.model_params) if self.is_centre else \
            np.empty(self.net.nparams)
        center = np.ascontiguousarray(center, dtype=np.float64)
        self.grid.data_comm.Bcast(center, root=self.grid.data - 1)
        self.optimizer.center = center

    # ------------------------------------------------------------ checkpoints
    def state(self) -> Dict[str, Any]:
        """Everything needed to continue exactly (collective: call on every rank); the
        arrays as NumPy arrays on the host."""
        entry(self.comm, self._calls, "Trainer.state")
        # The collective parts first: local work that fails on one rank after them
        # reaches its peers at the save's agreement, not inside a gather.
        warm = self.evaluator.warm_state()
        groups = self._elastic_groups() if self.elastic else None
        host = self.placement.tree_to_host
        state = {
            "config": self._comparable_config(), "nparams": self.net.nparams,
            "architecture": self.net.describe(),
            "iteration": self.iteration, "epoch": self.epoch, "position": self._position,
            "order": None if self._order is None else self._order.copy(),
            "rng": self.rng.bit_generator.state,
            "params": self.placement.to_host(self.model_params),
            "optimizer": host(self.optimizer.state_dict()), "history": list(self.history),
            "best": host(dict(self.best)), "stale": self._stale,
            "warm": warm, "oneshot": None if self.oneshot is None else list(self.oneshot),
            "data_fingerprint": self.data_fingerprint,
            "data": self._data_shapes(),
            "network": network_spec(self.net),
        }
        if groups is not None:
            state["easgd_groups"] = groups
        return state

    def _elastic_groups(self) -> Dict[str, Any]:
        """Synchronous EASGD: every data group's own W_i and velocity, complete on rank
        0 (collective over the data communicator; ``params`` holds the centre)."""
        assert self.grid is not None
        velocity = self.optimizer.velocity
        mine = {0: self.placement.to_host(self.params),
                1: np.zeros(0) if velocity is None else self.placement.to_host(velocity)}
        d = self.grid.coords[0]
        got = gather_arrays(self.grid.data_comm, {2 * d + k: a for k, a in mine.items()},
                            root=0) or {}
        groups = range(self.grid.data)
        return {"params": [got.get(2 * g) for g in groups],
                "velocity": [None if velocity is None else got.get(2 * g + 1)
                             for g in groups]}

    def _data_shapes(self) -> Dict[str, Any]:
        """Sizes of the data, for messages about a checkpoint of other data."""
        out = {"train": list(self.X.shape)}
        if self.validation is not None:
            out["validation"] = list(self.validation[0].shape)
        return out

    def _comparable_config(self) -> Dict[str, Any]:
        """The config as plain values, the MGRIT options with every field written out,
        so that equal settings compare equal however they were given."""
        return asdict(self.config)

    def save(self, path: str) -> None:
        """Write a checkpoint (collective; rank 0 writes)."""
        # Every rank learns whether rank 0 wrote it (and whether every rank could
        # collect its part): a failed save must not leave the others waiting in the
        # next solve.
        entry(self.comm, self._calls, "Trainer.save")
        with agreed(self.comm, f"writing the checkpoint {path}"):
            state = self.state()
            if self.rank == 0:
                _checkpoint.save(path, state)

    def load_state(self, state: Mapping[str, Any], *, allow_new_data: bool = False) -> None:
        """Continue from a :meth:`state` (e.g. read by :func:`braidpy.train.load_checkpoint`).

        The state must come from the same data (its ``data_fingerprint``), else a
        :class:`DataMismatchError` names both fingerprints. ``allow_new_data=True``
        continues on this trainer's data anyway: weights, optimizer, step count and history
        carry over; the batch order starts a new epoch, the MGRIT states start afresh (as in a new run) and
        the best validation accuracy is forgotten (it was measured on other data).
        A field of the wrong type, out of range or contradicting another raises
        :class:`~braidpy.train.checkpoint.CheckpointError` naming it.

        Collective over the trainer's ranks: a state one rank refuses (e.g. its EASGD
        group's part edited) raises that rank's error there and a BraidError naming it
        on every other rank.
        """
        with agreed(self.comm, "loading the training state"):
            self._load_state(state, allow_new_data)

    def _load_state(self, state: Mapping[str, Any], allow_new_data: bool) -> None:
        _checkpoint.check_training_state(state, "state")
        if state.get("nparams") != self.net.nparams or \
                state.get("architecture") != self.net.describe():
            raise ValueError(f"checkpoint is for {state.get('architecture')!r}, not "
                             f"{self.net.describe()!r}")
        mine, theirs = self._comparable_config(), dict(state["config"])
        for key in ("iterations", "checkpoint", "checkpoint_every", "patience",
                    "target_accuracy", "validate_every", "validation_solve",
                    "quality_check_every", "quality_floor"):
            mine.pop(key, None)
            theirs.pop(key, None)
        for key in ("relax", "cfactor"):  # derived from mgrit, which is compared; older
            if key not in theirs:         # checkpoints were written without them
                mine.pop(key, None)
        if mine != theirs:
            diff = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise ValueError(f"checkpoint was written with other settings: {', '.join(diff)}")
        theirs_fp = state.get("data_fingerprint")
        new_data = theirs_fp != self.data_fingerprint
        if new_data and not allow_new_data:
            def sizes(shapes: Any) -> str:
                if not isinstance(shapes, Mapping):
                    return "sizes unknown"
                return ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in shapes.items())
            raise DataMismatchError(
                f"checkpoint was written for other data: its data fingerprint is {theirs_fp} "
                f"({sizes(state.get('data'))}), this run's is {self.data_fingerprint} "
                f"({sizes(self._data_shapes())}); to continue on the new data anyway, pass "
                f"allow_new_data=True (command line: --resume-on-new-data)")
        optimizer_state = self.placement.tree_from_host(state["optimizer"])
        # First: its arrays must hold one number per parameter (ValueError naming them).
        self.optimizer.load_state_dict(optimizer_state, nparams=int(self.params.size))
        self.params[...] = self.placement.from_host(self._own_params(state))
        self.iteration, self.epoch = int(state["iteration"]), int(state["epoch"])
        self._position = int(state["position"])
        self._order = None if state["order"] is None else np.array(state["order"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        if self.elastic:  # this group's own velocity (the state's is rank 0's)
            assert self.grid is not None
            velocity = state["easgd_groups"]["velocity"][self.grid.coords[0]]
            self.optimizer.velocity = None if velocity is None else \
                np.array(velocity, dtype=np.float64)
        logger.info("resumed at step %d (checkpoint data fingerprint %s)", self.iteration,
                    theirs_fp)
        self.history = list(state["history"])
        self.best = self.placement.tree_from_host(dict(state["best"]))
        self._stale = int(state["stale"])
        saved = state.get("oneshot")  # as the quality checks left it (older files: none)
        if self.oneshot is not None and saved is not None and tuple(saved) != self.oneshot:
            self.evaluator.set_oneshot(*saved)
            self.oneshot = (int(saved[0]), int(saved[1]))
        if not new_data:
            warm = state.get("warm") or {}
            if self.grid is None and "data_groups" in warm:  # written by data groups
                warm = shard_warm_state(warm, 1, 0, getattr(self.evaluator, "batch_shape",
                                                            None)) or {}
            self.evaluator.load_warm_state(warm)
        else:
            logger.warning("resuming on other data than the checkpoint's (fingerprint %s, "
                           "checkpoint %s): new batch order, MGRIT states from scratch",
                           self.data_fingerprint, theirs_fp)
            self._order, self._position = None, 0
            self.best = {"accuracy": None, "iteration": None, "params": None}
            self._stale = 0

    def _own_params(self, state: Mapping[str, Any]) -> Any:
        """The parameters this rank continues from: the checkpoint's, or with EASGD its
        data group's own W_i (the checkpoint's ``params`` are the centre)."""
        groups = state.get("easgd_groups")
        if not self.elastic:
            if groups is not None:
                raise ValueError("checkpoint was written by EASGD (one parameter vector per "
                                 "data group); resume it with the optimizer easgd")
            return state["params"]
        assert self.grid is not None
        if self.asynchronous:
            raise ValueError("optimizer 'easgd-async' cannot resume a checkpoint: its "
                             "updates depend on the order messages reach the centre")
        if groups is None or len(groups.get("params", [])) != self.grid.data:
            have = "none" if groups is None else len(groups.get("params", []))
            raise ValueError(f"checkpoint holds the parameters of {have} EASGD data "
                             f"group(s); this grid has {self.grid.data} (resume EASGD on a "
                             f"grid with the same number of data groups)")
        return groups["params"][self.grid.coords[0]]

    def resume(self, path: str, *, allow_new_data: bool = False) -> None:
        """Continue from the checkpoint file ``path`` (see :meth:`load_state`).

        Collective: every rank must resume the same file (its bytes are compared, so
        ranks reading different files, or copies that differ, are a RankMismatchError
        on every rank); a file one rank cannot read raises there and a BraidError on
        the others.
        """
        error: Optional[BaseException] = None
        try:
            state = _checkpoint.load_training(path)
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except Exception as exc:  # noqa: BLE001 - re-raised by same_everywhere below
            error = exc
        same_everywhere(self.comm, None if error is not None else
                        {"checkpoint contents (sha256)": digest}, "the checkpoint to resume",
                        error=error, hint="every rank must resume the same checkpoint file")
        self.load_state(state, allow_new_data=allow_new_data)
