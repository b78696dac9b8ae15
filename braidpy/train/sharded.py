"""Data-parallel training on a :class:`~braidpy.parallel.ProcessGrid` (data × layers).

Every data group draws the same batch (same seed, same order) and evaluates its
:func:`~braidpy.parallel.data.shard_of` it over its layer communicator. The loss and the
gradient are then averaged over the data communicator, each group weighted by its
share of the batch, so that uneven shards give the gradient of the whole batch:

    g = sum_d (n_d / N) g_d,   g_d the mean-loss gradient of shard d (n_d samples).

:class:`AveragingRound` is one such average. Its pieces (the loss, the classifier's
gradient, each layer's, the opening's) are laid out in one contiguous buffer in the
order they become final, and :class:`~braidpy.parallel.data.GradientAverager` starts a
bucket (``Iallreduce``) once all its pieces are in (the single buffer of You, Buluç and
Demmel, "Scaling deep learning on GPU and Knights Landing clusters", SC 2017; the overlap
of the reduction with the remaining backward work of Gibiansky, "Bringing HPC techniques
to deep learning", blog post, 2017).

Failures. A rank whose work fails must not leave its data-group peers waiting in a
reduction. A round has agreement points over the whole grid (after the objective, after
the adjoint, after the opening's gradient); buckets are started only right after a
point, from pieces computed before it, so every bucket one rank starts is started by
all. A rank that fails joins the next point with its exception: every rank raises
there (the failing one its own exception, the others ``braidpy.BraidError``), and
the buckets already started are waited for.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Dict, Hashable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..parallel.agree import agreed
from ..parallel.collectives import allgatherv, allreduce_int, gather_arrays
from ..parallel.comm import rank_size
from ..parallel.data import GradientAverager, shard_of
from ..parallel.grid import ProcessGrid
from .spatial_training import check_space_grid

__all__ = ["AveragingRound", "DataParallelEvaluator", "WorkerShardEvaluator",
           "check_training_grid", "shard_warm_state"]

logger = logging.getLogger("braidpy.train")


def check_training_grid(grid: Any, net: Any = None, mode: str = "oneshot") -> ProcessGrid:
    """``grid`` if training can run on it, else a ValueError naming the grid and why.

    Space ranks (``grid.space > 1``) need a network whose image rows can be split
    (:func:`braidpy.train.spatial_training.check_space_grid`); without ``net`` only
    the grid itself is checked.
    """
    if not isinstance(grid, ProcessGrid):
        raise TypeError(f"grid must be a braidpy.parallel.ProcessGrid, got "
                        f"{type(grid).__name__}")
    if net is not None:
        check_space_grid(grid, net, mode)
    return grid


class AveragingRound:
    """The sample-weighted average of one gradient over the data communicator.

    Parameters
    ----------
    world : mpi4py communicator or None
        All ranks of the grid (agreement points).
    comm : mpi4py communicator or None
        The data communicator.
    weight : float
        ``D * n_d / N``: this group's samples over the mean group's. Pieces are scaled by
        it, so the plain mean over ranks is the sample-weighted mean.
    overlap : bool
        Start buckets as pieces come (True) or all at the end (False, for measuring).
    bucket : int
        Entries per reduction.
    """

    def __init__(self, world: Any, comm: Any, weight: float, *, overlap: bool = True,
                 bucket: int = 2**16):
        self.world, self.comm = world, comm
        self.weight = float(weight)
        self.overlap = overlap
        self.bucket = bucket
        self.offsets: Dict[Hashable, Tuple[int, int]] = {}
        self.averager: Optional[GradientAverager] = None
        self._staged: List[Tuple[int, np.ndarray]] = []
        self.failed = False
        self.wait_seconds = 0.0   # inside the reductions' waits
        self.agree_seconds = 0.0  # inside the agreement points

    def begin(self, layout: Sequence[Tuple[Hashable, int]]) -> None:
        """The pieces, ``(key, entries)``, in the order they will be added."""
        pos = 0
        for key, size in layout:
            self.offsets[key] = (pos, int(size))
            pos += int(size)
        self.averager = GradientAverager(self.comm, pos, bucket=self.bucket)

    def add(self, key: Hashable, values: Any) -> None:
        """This rank's piece ``key`` (a host array); weighted here."""
        assert self.averager is not None, "begin() first"
        lo, size = self.offsets[key]
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.size != size:
            raise ValueError(f"gradient piece {key!r} has {v.size} entries, not {size}")
        v = v * self.weight if self.weight != 1.0 else v
        if self.overlap:
            self.averager.add(lo, v)
        else:
            self._staged.append((lo, v.copy()))

    def point(self, what: str) -> None:
        """An agreement point over the grid: raises if any rank failed before it."""
        start = time.perf_counter()
        try:
            agreed(self.world, what).settle(None)
        except BaseException:
            self._abandon()
            raise
        finally:
            self.agree_seconds += time.perf_counter() - start

    @contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        """Run a block whose failure must reach every rank at the next point."""
        try:
            yield
        except BaseException as err:
            if self.failed:  # a point already told every rank
                raise
            try:
                agreed(self.world, what).settle(err)
            finally:
                self._abandon()

    def _abandon(self) -> None:
        self.failed = True
        if self.averager is not None:
            self.averager.abandon()

    def finish(self) -> Dict[Hashable, np.ndarray]:
        """Wait for the reductions; ``{key: averaged piece}`` (flat host arrays)."""
        assert self.averager is not None, "begin() first"
        for lo, v in self._staged:
            self.averager.add(lo, v)
        self._staged = []
        start = time.perf_counter()
        mean = self.averager.finish()
        self.wait_seconds += time.perf_counter() - start
        return {key: mean[lo:lo + size] for key, (lo, size) in self.offsets.items()}


class DataParallelEvaluator:
    """An evaluator (:mod:`braidpy.train.evaluate`) over the layer communicator of one
    data group, answering for the whole batch: gradient and loss are sample-weighted
    averages over the data groups, accuracy counts every group's share of the samples.

    Parameters
    ----------
    inner : SerialEvaluator or LayerParallelEvaluator
        Built on ``grid.layers_comm`` with a batch of this group's shard's shape.
    grid : ProcessGrid
        Any grid training can run (:func:`check_training_grid`); with space > 1,
        ``inner`` is a :class:`~braidpy.train.spatial_training.SpaceParallelEvaluator`.
    batch : int
        Samples of every batch (all groups together).
    overlap : bool
        Start reductions while backward work remains (default) or only at the end.
    bucket : int
        Entries per reduction.
    average : bool
        Average the gradient over the data groups (default). False (elastic averaging,
        :mod:`braidpy.train.easgd`): :meth:`gradient` returns this group's own shard
        loss and gradient, and its ``stats["shard_weight"]`` is the group's weight for
        :meth:`mean_over_groups`; the groups still agree over the whole grid after the
        gradient, so a failure in one group stops every rank there.
    """

    def __init__(self, inner: Any, grid: ProcessGrid, batch: int, *, overlap: bool = True,
                 bucket: int = 2**16, average: bool = True):
        check_training_grid(grid)
        self.average = bool(average)
        self.inner = inner
        self.batch = int(batch)
        self.grid = grid
        self.world = grid.comm if grid.size > 1 else None
        self.data_comm = grid.data_comm
        self.ngroups, self.group = grid.data, grid.coords[0]
        self.mode = inner.mode
        self.overlap, self.bucket = overlap, bucket
        self.step_calls = 0  # layer steps of every rank of the grid (not validation)

    def _count(self, before: int) -> None:
        """Add the layer steps all data groups took since ``before`` (collective)."""
        self.step_calls += allreduce_int(self.data_comm, self.inner.step_calls - before)

    def shard(self, nsamples: int) -> range:
        """This group's samples of a batch of ``nsamples``."""
        return shard_of(nsamples, self.ngroups, self.group)

    def _part(self, X: Any, C: Any) -> Tuple[Any, Any, float]:
        rows = self.shard(X.shape[0])
        weight = self.ngroups * len(rows) / X.shape[0]
        return X[rows.start:rows.stop], C[rows.start:rows.stop], weight

    def gradient(self, params: Any, X: Any, C: Any) -> Tuple[float, Any, Dict[str, Any]]:
        Xs, Cs, weight = self._part(X, C)
        if not self.average:  # this group's own shard: no reduction
            before = self.inner.step_calls
            with agreed(self.world, "the gradient"):
                loss, grad, stats = self.inner.gradient(params, Xs, Cs)
            self._count(before)
            stats["shard_weight"] = weight
            return loss, grad, stats
        rnd = AveragingRound(self.world, self.data_comm, weight, overlap=self.overlap,
                             bucket=self.bucket)
        before = self.inner.step_calls
        loss, grad, stats = self.inner.gradient(params, Xs, Cs, average=rnd)
        self._count(before)
        stats["data_wait_seconds"] = rnd.wait_seconds
        stats["data_agree_seconds"] = rnd.agree_seconds
        return loss, grad, stats

    def _mean(self, value: float, weight: float) -> float:
        """Weighted mean of one number per group, summed in group order (the same
        bits on every rank)."""
        values = allgatherv(self.data_comm, [weight * value], np.float64)
        total = 0.0
        for v in values.tolist():
            total += v
        return total / self.ngroups

    def mean_over_groups(self, values: Sequence[float],
                         weights: Optional[Sequence[float]] = None) -> List[float]:
        """``sum_d weights_d * values_d / D`` of each of ``values`` (one number per
        group each), summed in group order: the same bits on every rank (collective
        over the data communicator). With the ``shard_weight`` of :meth:`gradient` as
        weight, a loss becomes the sample-weighted mean over the batch."""
        w = np.ones(len(values)) if weights is None else np.asarray(weights, np.float64)
        mine = np.asarray(values, dtype=np.float64) * w
        every = allgatherv(self.data_comm, mine, np.float64).reshape(self.ngroups, -1)
        total = np.zeros(len(values))
        for row in every:
            total += row
        return (total / self.ngroups).tolist()

    def loss(self, params: Any, X: Any, C: Any) -> float:
        Xs, Cs, weight = self._part(X, C)
        before = self.inner.step_calls
        with agreed(self.world, "the objective of the line search"):
            value = self.inner.loss(params, Xs, Cs)
        self._count(before)
        return self._mean(value, weight)

    def accuracy(self, params: Any, X: Any, C: Any) -> float:
        rows = self.shard(X.shape[0])
        with agreed(self.world, "validation"):
            acc = self.inner.accuracy(params, X[rows.start:rows.stop], C[rows.start:rows.stop])
        correct = int(round(acc * len(rows)))
        return allreduce_int(self.data_comm, correct) / X.shape[0]

    def set_oneshot(self, m1: int, m2: int) -> None:
        """One-shot iterations from the next gradient on (every rank alike; see
        :meth:`braidpy.train.LayerParallelEvaluator.set_oneshot`)."""
        self.inner.set_oneshot(m1, m2)

    # ------------------------------------------------------------ warm states
    def warm_state(self) -> Dict[str, Any]:
        """Every data group's MGRIT states, ``{"data_groups": [state of group d]}``,
        complete on rank 0 of the grid (collective). One group: the inner state."""
        mine = self.inner.warm_state()
        if self.ngroups == 1:
            return mine
        layer_rank = rank_size(self.grid.layers_comm)[0]
        if layer_rank != 0:  # the inner state is complete on layer rank 0
            return {}
        nkeys = self.inner.net.nlayers + 1
        encoded = {(part * self.ngroups + self.group) * nkeys + int(n): a
                   for part, name in enumerate(("primal", "adjoint"))
                   for n, a in mine.get(name, {}).items()}
        got = gather_arrays(self.data_comm, encoded, root=0)
        if self.group != 0 or got is None or not mine:
            return {}
        groups: List[Dict[str, Any]] = [
            {"primal": {}, "adjoint": {},
             "batch_shape": (len(shard_of(self.batch, self.ngroups, d)),) +
             tuple(mine["batch_shape"][1:])} for d in range(self.ngroups)]
        for key, a in got.items():
            pg, n = divmod(key, nkeys)
            part, d = divmod(pg, self.ngroups)
            groups[d]["primal" if part == 0 else "adjoint"][n] = a
        return {"data_groups": groups}

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        """This group's share of a checkpoint's MGRIT states, whatever grid wrote them
        (:func:`shard_warm_state`); afresh if they do not fit (logged)."""
        if not state:
            return
        mine = shard_warm_state(state, self.ngroups, self.group,
                                getattr(self.inner, "batch_shape", None))
        if mine is not None:
            self.inner.load_warm_state(mine)


class WorkerShardEvaluator:
    """An evaluator on one worker's shard of every batch, with no collectives between
    workers (asynchronous EASGD: the workers step at their own pace). Validation and
    the objective see what they are given, whole.

    Parameters
    ----------
    inner : SerialEvaluator or LayerParallelEvaluator
        Built with a batch of this worker's shard's shape.
    nshards, index : int
        Every batch is split into ``nshards`` (:func:`~braidpy.parallel.data.shard_of`);
        this worker takes shard ``index``.
    """

    def __init__(self, inner: Any, nshards: int, index: int):
        self.inner, self.nshards, self.index = inner, int(nshards), int(index)
        self.mode = inner.mode

    @property
    def step_calls(self) -> int:
        return self.inner.step_calls

    def _part(self, X: Any, C: Any) -> Tuple[Any, Any]:
        rows = shard_of(X.shape[0], self.nshards, self.index)
        return X[rows.start:rows.stop], C[rows.start:rows.stop]

    def gradient(self, params: Any, X: Any, C: Any) -> Tuple[float, Any, Dict[str, Any]]:
        return self.inner.gradient(params, *self._part(X, C))

    def loss(self, params: Any, X: Any, C: Any) -> float:
        return self.inner.loss(params, *self._part(X, C))

    def accuracy(self, params: Any, X: Any, C: Any) -> float:
        return self.inner.accuracy(params, X, C)

    def warm_state(self) -> Dict[str, Any]:
        return self.inner.warm_state()

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        self.inner.load_warm_state(state)


def shard_warm_state(state: Mapping[str, Any], ngroups: int, group: int,
                     shape: Any) -> Optional[Dict[str, Any]]:
    """Data group ``group``'s MGRIT states (of batch shape ``shape``) out of a
    checkpoint's ``warm`` of any grid; None (and a warning) if they do not fit.

    The same number of groups takes its own states back unchanged. Otherwise the
    groups' states are joined into the whole batch's and split again. A state's rows
    are samples, so the primal rows are simply concatenated. The adjoint of a mean loss
    scales with one over the samples it averages. So group d's rows count n_d/N in the
    whole batch's adjoint, and a new shard of n rows takes N/n of its rows.
    """
    groups = state.get("data_groups")
    groups = [state] if groups is None else list(groups)
    shape = None if shape is None else tuple(shape)
    if len(groups) == ngroups and tuple(groups[group].get("batch_shape", ())) == shape:
        return dict(groups[group])
    try:
        sizes = [int(g["batch_shape"][0]) for g in groups]
    except (KeyError, IndexError, TypeError):
        sizes = []
    total = sum(sizes)
    if not sizes or shape is None or total < ngroups or \
            (len(shard_of(total, ngroups, group)),) + tuple(groups[0]["batch_shape"][1:]) \
            != shape:
        logger.warning("the checkpoint's MGRIT states (%d data group(s)) do not fit this "
                       "grid's %d group(s) of batch shape %s: they start afresh",
                       len(groups), ngroups, shape)
        return None
    rows = shard_of(total, ngroups, group)
    out: Dict[str, Any] = {"primal": {}, "adjoint": {}, "batch_shape": shape}
    for n in groups[0].get("primal", {}):
        whole = np.concatenate([np.asarray(g["primal"][n]) for g in groups], axis=0)
        out["primal"][n] = whole[rows.start:rows.stop].copy()
    for n in groups[0].get("adjoint", {}):
        whole = np.concatenate([np.asarray(g["adjoint"][n]) * (size / total)
                                for g, size in zip(groups, sizes)], axis=0)
        out["adjoint"][n] = whole[rows.start:rows.stop] * (total / len(rows))
    return out
