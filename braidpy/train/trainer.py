"""The training loop: batches, optimizer steps, validation, early stopping, checkpoints."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .._device import vector_norm
from .._options import Options
from ..nn.network import ResNet
from ..parallel.agree import agreed
from ..parallel.interrupts import deferred_interrupts
from ..parallel.comm import rank_size
from ..parallel.data import shard_of
from ..parallel.grid import ProcessGrid
from . import checkpoint as _checkpoint
from .evaluate import LayerParallelEvaluator, SerialEvaluator, training_options
from .optim import make_optimizer
from .progress import format_step, progress_bar, summary, summary_lines
from .regularize import Regularizer
from .sharded import DataParallelEvaluator, check_training_grid, shard_warm_state
from .spatial_training import space_evaluator

__all__ = ["TrainConfig", "Trainer", "MODES", "DataMismatchError", "data_fingerprint",
           "network_spec"]

logger = logging.getLogger("braidpy.train")

MODES = ("serial", "exact", "oneshot")


@dataclass
class TrainConfig:
    """How to train; every field has a default.

    Parameters
    ----------
    mode : str
        'serial' (plain forward/backward), 'exact' (layer-parallel MGRIT to
        tolerance) or 'oneshot' (m1 state and m2 adjoint MGRIT iterations per step).
    m1, m2 : int
        Iterations of one-shot mode.
    mgrit : Options or dict
        MGRIT options of the state, adjoint and validation solves: a
        braidpy.Options, or a dict laid over the training defaults cfactor 4,
        max_levels 2, abs_tol 1e-9 (see braidpy.train.training_options); becomes
        an Options, validated here once.
    optimizer : str
        'lbfgs', 'adam' or 'sgd'; lr, momentum, memory as they apply
        (None: the optimizer's default).
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
        Steps between validations (0: never).
    patience : int
        Stop after this many validations without a better accuracy (0: never).
    target_accuracy : float or None
        Stop once the validation accuracy reaches this (None: never).
    checkpoint : str or None
        File to save the whole training state to; checkpoint_every steps.
    """

    mode: str = "oneshot"
    m1: int = 2
    m2: int = 2
    mgrit: Any = field(default_factory=dict)  # an Options after __post_init__
    optimizer: str = "lbfgs"
    lr: Optional[float] = None
    momentum: Optional[float] = None
    memory: Optional[int] = None
    batch_size: Optional[int] = None
    shuffle: bool = False
    iterations: int = 100
    tikhonov: float = 0.0
    ddt: float = 0.0
    classifier_reg: float = 0.0
    seed: int = 1
    init_scale: float = 0.1
    validate_every: int = 1
    patience: int = 0
    target_accuracy: Optional[float] = None
    checkpoint: Optional[str] = None
    checkpoint_every: int = 10

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        for name in ("m1", "m2", "iterations", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("validate_every", "patience", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or
                                            not isinstance(self.batch_size, int) or
                                            self.batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {self.batch_size!r}")
        if isinstance(self.init_scale, bool) or \
                not isinstance(self.init_scale, (int, float, np.floating)) or \
                not np.isfinite(self.init_scale) or self.init_scale < 0:
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy!r}")
        self.mgrit: Options = training_options(self.mgrit)
        if self.mode == "exact" and self.mgrit.rel_tol:
            raise ValueError(
                "rel_tol is measured against each solve's first residual, which is tiny when "
                "training warm-starts from the previous step; give abs_tol instead")


def network_spec(net: ResNet) -> Dict[str, Any]:
    """The ResNet's constructor arguments (JSON values): ``ResNet(**spec)`` rebuilds it."""
    return {"input_shape": list(net.input_shape), "nclasses": net.nclasses,
            "width": net.width, "nlayers": net.nlayers, "T": net.T,
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


def _check_pair(what: str, data: Any) -> Tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{what} must be a pair (X, C) of samples and one-hot labels")
    X, C = np.asarray(data[0], dtype=np.float64), np.asarray(data[1], dtype=np.float64)
    if X.shape[0] != C.shape[0]:
        raise ValueError(f"{what}: X has {X.shape[0]} samples but C has {C.shape[0]} labels")
    if X.shape[0] == 0:
        raise ValueError(f"{what} is empty")
    return X, C


class Trainer:
    """Trains a :class:`braidpy.nn.ResNet` serially or layer-parallel.

    Parameters
    ----------
    net : ResNet
    train : (X, C)
        Training samples and one-hot labels.
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

    Notes
    -----
    After :meth:`run`, ``params`` holds the trained parameters, ``history`` one record per
    step and ``best`` the best validation accuracy with its parameters.

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
        self.net = net
        self.config = config or TrainConfig()
        if grid is not None:
            if comm is not None:
                raise ValueError("give either comm (layers only) or grid, not both")
            check_training_grid(grid, net, self.config.mode)
        self.grid = grid
        # Agreement, progress and checkpoints span every rank; solves the layer group.
        self.comm = comm if grid is None else (grid.comm if grid.size > 1 else None)
        layers_comm = comm if grid is None else grid.layers_comm
        self.X, self.C = _check_pair("train", train)
        net.check_data(self.X, self.C)
        self.validation = None
        if validation is not None:
            self.validation = _check_pair("validation", validation)
            net.check_data(*self.validation)
        cfg = self.config
        if params is None:
            params = net.init_params(cfg.seed, cfg.init_scale)
        elif getattr(params, "shape", None) != (net.nparams,):
            raise ValueError(f"params must have shape ({net.nparams},), got "
                             f"{getattr(params, 'shape', None)}")
        self.placement = where = net.placement
        self.params = where.from_host(params)
        # The data on the device once; batches are gathered there (index arrays go over).
        self._device_data = None if where.is_host else (
            where.from_host(self.X), where.from_host(self.C))
        self._device_validation = None if where.is_host or self.validation is None else (
            where.from_host(self.validation[0]), where.from_host(self.validation[1]))
        self.optimizer = make_optimizer(cfg.optimizer, **self._optimizer_args())
        self.regularizer = Regularizer(net, cfg.tikhonov, cfg.ddt, cfg.classifier_reg)
        self.rng = np.random.default_rng(cfg.seed)
        self.iteration = 0
        self.epoch = 0
        self._order: Optional[np.ndarray] = None
        self._position = 0
        self.history: List[Dict[str, Any]] = []
        self.best: Dict[str, Any] = {"accuracy": None, "iteration": None, "params": None}
        self._stale = 0
        self.data_fingerprint = data_fingerprint((self.X, self.C), self.validation)
        X0, C0 = self._peek_batch()
        if grid is not None:  # the solvers see one shard
            rows = shard_of(X0.shape[0], grid.data, grid.coords[0])
            X0, C0 = X0[rows.start:rows.stop], C0[rows.start:rows.stop]
            if self.validation is not None and self.validation[0].shape[0] < grid.data:
                raise ValueError(f"{self.validation[0].shape[0]} validation samples cannot "
                                 f"feed {grid.data} data groups (each needs at least one)")
        self.evaluator: Any
        if cfg.mode == "serial":
            self.evaluator = SerialEvaluator(net, layers_comm)
        elif grid is not None and grid.space > 1:  # bands of image rows per space rank
            oneshot = (cfg.m1, cfg.m2) if cfg.mode == "oneshot" else None
            self.evaluator = space_evaluator(net, grid, self.params, X0, C0,
                                             mgrit=cfg.mgrit, oneshot=oneshot)
        else:
            oneshot = (cfg.m1, cfg.m2) if cfg.mode == "oneshot" else None
            self.evaluator = LayerParallelEvaluator(net, self.params, X0, C0,
                                                    comm=layers_comm, mgrit=cfg.mgrit,
                                                    oneshot=oneshot)
        if grid is not None:
            batch = min(cfg.batch_size or self.X.shape[0], self.X.shape[0])
            self.evaluator = DataParallelEvaluator(self.evaluator, grid, batch)

    def _optimizer_args(self) -> Dict[str, Any]:
        cfg = self.config
        args: Dict[str, Any] = {"lr": cfg.lr}
        if cfg.optimizer == "sgd":
            args["momentum"] = cfg.momentum
        if cfg.optimizer == "lbfgs":
            args["memory"] = cfg.memory
        return args

    @property
    def rank(self) -> int:
        return rank_size(self.comm)[0]

    # ---------------------------------------------------------------- batches
    def _new_epoch_order(self) -> np.ndarray:
        n = self.X.shape[0]
        return self.rng.permutation(n) if self.config.shuffle else np.arange(n)

    def _next_batch_indices(self) -> np.ndarray:
        n = self.X.shape[0]
        size = min(self.config.batch_size or n, n)
        if self._order is None or self._position >= n:
            if self._order is not None:
                self.epoch += 1
            self._order, self._position = self._new_epoch_order(), 0
        idx = self._order[self._position:self._position + size]
        self._position += size
        if self._position > n:  # drop a short last batch: MGRIT warm states keep their shape
            return self._next_batch_indices()
        return idx

    def _peek_batch(self):
        """A batch of the first batch's shape (sets the solvers up; draws nothing)."""
        size = min(self.config.batch_size or self.X.shape[0], self.X.shape[0])
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
            return self.evaluator.loss(params, X, C) + self.regularizer(params)[0]
        return value

    def step(self) -> Dict[str, Any]:
        """One optimizer step on the next batch; returns its history record."""
        start = time.perf_counter()
        calls_before = self.evaluator.step_calls
        idx = self._next_batch_indices()
        X, C = self._batch(idx)
        loss, grad, stats = self.evaluator.gradient(self.params, X, C)
        reg, reg_grad = self.regularizer(self.params)
        total = loss + reg
        grad = grad + reg_grad
        objective = self._objective(X, C) if self.optimizer.needs_objective else None
        info = self.optimizer.step(self.params, total, grad, objective)
        self.iteration += 1
        record: Dict[str, Any] = {
            "iteration": self.iteration, "epoch": self.epoch, "loss": loss,
            "objective": total, "gradient_norm": vector_norm(grad),
            "step_size": info["step_size"], "line_search_trials": info["trials"],
        }
        record.update(stats)
        # All layer steps of this optimizer step, line search included.
        record["steps"] = self.evaluator.step_calls - calls_before
        cfg = self.config
        if self.validation is not None and cfg.validate_every and \
                self.iteration % cfg.validate_every == 0:
            before = time.perf_counter()
            acc = self.evaluator.accuracy(self.params, *self._validation_data())
            record["val_accuracy"] = acc
            record["validation_seconds"] = time.perf_counter() - before
            if self.best["accuracy"] is None or acc > self.best["accuracy"]:
                self.best = {"accuracy": acc, "iteration": self.iteration,
                             "params": self.placement.copy(self.params)}
                self._stale = 0
            else:
                self._stale += 1
        record["seconds"] = time.perf_counter() - start
        self.history.append(record)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", format_step(record, cfg.iterations))
        return record

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
        cfg = self.config
        bar = progress_bar(cfg.iterations, initial=self.iteration) \
            if progress and self.rank == 0 else None
        try:
            # Ctrl-C on one rank stops every rank at the next agreement point (in a
            # solve, or after the step's report below) instead of stranding the others.
            with deferred_interrupts():
                self.stop_reason = self.should_stop() if self.history else None
                while self.stop_reason is None:
                    record = self.step()
                    with agreed(self.comm, "reporting the training step"):
                        if bar is not None:
                            bar.update(record)
                        if on_step is not None:
                            on_step(record)
                    if cfg.checkpoint and self.iteration % cfg.checkpoint_every == 0:
                        self.save(cfg.checkpoint)
                    self.stop_reason = self.should_stop()
                if cfg.checkpoint and self.iteration % cfg.checkpoint_every != 0:
                    self.save(cfg.checkpoint)
        finally:
            if bar is not None:
                bar.close()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", "; ".join(summary_lines(
                summary(self.history, self.best, self.stop_reason))))
        return self.history

    # ------------------------------------------------------------ checkpoints
    def state(self) -> Dict[str, Any]:
        """Everything needed to continue exactly (collective: call on every rank); the
        arrays as NumPy arrays on the host."""
        host = self.placement.tree_to_host
        return {
            "config": self._comparable_config(), "nparams": self.net.nparams,
            "architecture": self.net.describe(),
            "iteration": self.iteration, "epoch": self.epoch, "position": self._position,
            "order": None if self._order is None else self._order.copy(),
            "rng": self.rng.bit_generator.state,
            "params": self.placement.to_host(self.params),
            "optimizer": host(self.optimizer.state_dict()), "history": list(self.history),
            "best": host(dict(self.best)), "stale": self._stale,
            "warm": self.evaluator.warm_state(),
            "data_fingerprint": self.data_fingerprint,
            "data": self._data_shapes(),
            "network": network_spec(self.net),
        }

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
        state = self.state()
        # Every rank learns whether rank 0 wrote it: a failed save must not leave the
        # others waiting in the next solve.
        with agreed(self.comm, f"writing the checkpoint {path}"):
            if self.rank == 0:
                _checkpoint.save(path, state)

    def load_state(self, state: Mapping[str, Any], *, allow_new_data: bool = False) -> None:
        """Continue from a :meth:`state` (e.g. read by :func:`braidpy.train.load_checkpoint`).

        The state must come from the same data (its ``data_fingerprint``), else a
        :class:`DataMismatchError` names both fingerprints. ``allow_new_data=True``
        continues on this trainer's data anyway: weights, optimizer, step count and history
        carry over; the batch order starts a new epoch, the MGRIT states start afresh (as in a new run) and
        the best validation accuracy is forgotten (it was measured on other data).
        """
        if state.get("nparams") != self.net.nparams or \
                state.get("architecture") != self.net.describe():
            raise ValueError(f"checkpoint is for {state.get('architecture')!r}, not "
                             f"{self.net.describe()!r}")
        mine, theirs = self._comparable_config(), dict(state["config"])
        for key in ("iterations", "checkpoint", "checkpoint_every", "patience",
                    "target_accuracy", "validate_every"):
            mine.pop(key, None)
            theirs.pop(key, None)
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
        self.params[...] = self.placement.from_host(state["params"])
        self.iteration, self.epoch = int(state["iteration"]), int(state["epoch"])
        self._position = int(state["position"])
        self._order = None if state["order"] is None else np.array(state["order"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        self.optimizer.load_state_dict(self.placement.tree_from_host(state["optimizer"]))
        logger.info("resumed at step %d (checkpoint data fingerprint %s)", self.iteration,
                    theirs_fp)
        self.history = list(state["history"])
        self.best = self.placement.tree_from_host(dict(state["best"]))
        self._stale = int(state["stale"])
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

    def resume(self, path: str, *, allow_new_data: bool = False) -> None:
        """Continue from the checkpoint file ``path`` (see :meth:`load_state`)."""
        self.load_state(_checkpoint.load(path), allow_new_data=allow_new_data)
