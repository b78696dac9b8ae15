"""Exact gradients for the gradient-quality checks (``TrainConfig.quality_check_every``),
split over the layer ranks by samples.

A check compares MGRIT's gradient with serial backpropagation's. Computing that
serially on every layer rank at once costs each rank one whole serial gradient: on 16
layer ranks, where a one-shot gradient takes about a sixteenth of the serial time
times its work ratio, a check every 10 steps would add about a third to each step.
The gradient is a mean over samples, so the layer ranks can share it out by samples
instead: the batch is cut into fixed blocks (:func:`reference_blocks`, from the
number of samples alone), each rank backpropagates its blocks through the whole
network, and the block gradients, weighted by their share of the samples, are added
in block order (:func:`braidpy.parallel.collectives.ordered_sum`). The bits do not
depend on the number of layer ranks; they differ from one serial gradient of the
whole batch by rounding (a different order of the sums over samples).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._device import placement_of
from ..nn.network import ResNet
from ..parallel.agree import agreed
from ..parallel.collectives import ordered_sum
from ..parallel.comm import rank_size
from ..parallel.data import share_of

__all__ = ["BlockedSerialEvaluator", "MAX_BLOCKS", "MIN_BLOCK_ROWS", "reference_blocks"]

#: Most blocks a batch is cut into: up to this many layer ranks share a check.
MAX_BLOCKS = 16
#: Fewest samples a block holds (smaller batches make fewer blocks, down to one). A
#: block's serial gradient has a fixed cost (the calls, the opening, the classifier)
#: of about what 30 samples cost on Peaks; with 128 or more it stays under a fourth.
MIN_BLOCK_ROWS = 128


def reference_blocks(nsamples: int, max_blocks: Optional[int] = None,
                     min_rows: Optional[int] = None) -> List[range]:
    """The blocks of samples a batch of ``nsamples`` is cut into: contiguous, in
    order, sizes differing by at most one, as many as ``min_rows`` samples each allow
    (default :data:`MIN_BLOCK_ROWS`) up to ``max_blocks`` (default
    :data:`MAX_BLOCKS`), at least one. They depend on nothing else.

    >>> reference_blocks(400)
    [range(0, 134), range(134, 267), range(267, 400)]
    >>> reference_blocks(200)
    [range(0, 200)]
    """
    max_blocks = MAX_BLOCKS if max_blocks is None else max_blocks
    min_rows = MIN_BLOCK_ROWS if min_rows is None else min_rows
    for name, value in (("nsamples", nsamples), ("max_blocks", max_blocks),
                        ("min_rows", min_rows)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    count = max(1, min(int(max_blocks), int(nsamples) // int(min_rows)))
    return [share_of(int(nsamples), count, b) for b in range(count)]


class BlockedSerialEvaluator:
    """Serial backpropagation of fixed blocks of samples (:func:`reference_blocks`),
    shared out over the layer ranks and added in block order: the exact gradient of
    the whole batch, the same bits on every rank and for any number of ranks.

    Only :meth:`gradient` (what a quality check needs). ``step_calls`` counts one
    serial gradient's 2 N layer steps per gradient, however the samples are split.

    Parameters
    ----------
    net : ResNet
    comm : mpi4py communicator, optional
        The layer communicator (collective over it).
    max_blocks, min_rows : int, optional
        The block rule (:func:`reference_blocks`; default: the module's constants as
        they are when the evaluator is made).
    """

    mode = "serial"

    def __init__(self, net: ResNet, *, comm: Any = None, max_blocks: Optional[int] = None,
                 min_rows: Optional[int] = None):
        self.net = net
        self.comm = comm
        self.max_blocks = MAX_BLOCKS if max_blocks is None else max_blocks
        self.min_rows = MIN_BLOCK_ROWS if min_rows is None else min_rows
        reference_blocks(1, self.max_blocks, self.min_rows)  # a bad rule fails here
        self.step_calls = 0

    def blocks(self, nsamples: int) -> List[range]:
        """The blocks of a batch of ``nsamples``."""
        return reference_blocks(nsamples, self.max_blocks, self.min_rows)

    def _local_sums(self, params: Any, X: Any, C: Any, blocks: List[range]
                    ) -> List[np.ndarray]:
        """``[loss, gradient]`` of each of this rank's ``blocks``, weighted by the
        block's share of the samples, as host vectors in block order."""
        rank, size = rank_size(self.comm)
        out = []
        for b in share_of(len(blocks), size, rank):
            rows = blocks[b]
            loss, grad = self.net.loss_and_gradient(params, X[rows.start:rows.stop],
                                                    C[rows.start:rows.stop])
            share = len(rows) / X.shape[0]
            item = np.empty(1 + self.net.nparams)
            item[0] = loss * share
            item[1:] = placement_of(grad).to_host(grad)
            item[1:] *= share
            out.append(item)
        return out

    def gradient(self, params: Any, X: Any, C: Any, average: Any = None
                 ) -> Tuple[float, Any, Dict[str, Any]]:
        """(loss, gradient, stats) of the batch; ``average``: an
        :class:`~braidpy.train.sharded.AveragingRound` over the data groups (None: this
        batch alone). Collective over the layer ranks."""
        what = "the exact gradient of the quality check"
        blocks = self.blocks(X.shape[0])
        if average is None:
            with agreed(self.comm, what):  # no rank left in the sum when one failed
                local = self._local_sums(params, X, C, blocks)
        else:
            with average.guarded(what):
                average.begin([("loss", 1), ("grad", self.net.nparams)])
                local = self._local_sums(params, X, C, blocks)
            average.point(what)
        # Through the ranks that hold blocks (a small batch: one block, one rank).
        total = ordered_sum(local, self.comm, holders=len(blocks))
        assert total is not None  # every batch has a block
        loss, grad = float(total[0]), total[1:]
        if average is not None:
            average.add("loss", [loss])
            average.add("grad", grad)
            mean = average.finish()
            loss, grad = float(mean["loss"][0]), mean["grad"]
        self.step_calls += 2 * self.net.nlayers
        return loss, placement_of(params).from_host(grad), {"steps": 2 * self.net.nlayers}
