"""What sharing the cores costs a gradient split over space ranks (``braidpy calibrate``
under ``mpiexec`` with more ranks than cores, conv layers).

:func:`braidpy.perf.calibrate.calibrate_in_solve_parallel` measures what ranks sharing
cores cost a layer-parallel gradient beyond the model's compute x ranks / cores
(``LayerCosts.oversubscription``). A space split costs more: its ranks exchange halo
rows at every step call, so a rank that reaches an exchange while its neighbour waits
for a core stalls once per call, where layer ranks meet once per sweep (on the 2-core
VM at 4 ranks: digits 1x4x1, 2x2x1 and 1x2x2 ran 1.21-1.33x the shared-compute model,
its layer-parallel grids 0.97-1.11x; docs/performance.md). So a conv layer gets a second
factor, measured on the same ResNet's one-shot gradient split over all the ranks' space
dimension (``LayerCosts.oversubscription_space``), which the model takes for every
strategy with space ranks.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .allocator import release_freed_memory
from .calibration import Calibration, LayerCosts

__all__ = ["calibrate_space_sharing", "WARMUP"]

#: Gradients run before timing (solvers built, the first cold solve).
WARMUP = 2


def calibrate_space_sharing(comm: Any, kind: str, shape: Sequence[int], kernel: int, *,
                            most: int, cal: Optional[Calibration] = None,
                            layer: Optional[LayerCosts] = None,
                            samples: Optional[int] = None, nlayers: int = 32,
                            repeats: int = 5) -> Optional[Tuple[float, float]]:
    """(ranks per core, the median wall time of a gradient split over all of ``comm``'s
    ranks in space over the model's with those ranks sharing ``most`` cores), or None
    where there is nothing to measure: fewer ranks than ``most`` + 1, a dense layer, or
    images too small for that many bands.

    Collective over ``comm``: every rank passes ``kind``, ``shape``, ``kernel`` and
    ``most`` (:func:`braidpy.perf.calibrate.busy_ranks`); rank 0 also ``cal``, the
    measured ``layer`` (its ``oversubscription`` factors are not applied) and its
    ``samples`` per gradient; every rank gets the result. A failure on any rank stops
    them all (``agreed``)."""
    from ..nn import ResNet
    from ..parallel import ProcessGrid
    from ..parallel.agree import agreed
    from ..train import TrainConfig, Trainer
    from ..train.spatial_training import max_space
    from .auto import training_spec
    from .model import Strategy, predict
    from .schedule import Cycle

    size = 1 if comm is None else comm.Get_size()
    if size <= most or kind != "conv":
        return None
    shape = tuple(int(x) for x in shape)
    net = ResNet(shape, 2, width=shape[0], nlayers=nlayers, kernel=kernel)
    if max_space(net, "oneshot") < size:
        return None
    count = np.array([samples or 0], dtype=np.int64)
    comm.Bcast(count, root=0)  # rank 0's, so that every rank runs the same gradients
    n = int(count[0])
    if n < 1:
        return None
    rng = np.random.default_rng(9)  # the same data on every rank
    X = rng.standard_normal((n,) + shape)
    C = np.eye(2)[rng.integers(0, 2, n)]
    release_freed_memory()  # as before the layer-parallel gradients (braidpy.perf.allocator)
    walls = []
    with agreed(comm, f"a gradient split over {size} space ranks"):
        grid = ProcessGrid(comm, 1, size, 1)
        try:
            config = TrainConfig(mode="oneshot", m1=1, m2=1, optimizer="sgd",
                                 mgrit=dict(cfactor=4, max_levels=2))
            trainer = Trainer(net, (X, C), None, config, grid=grid)
            evaluator, params = trainer.evaluator, trainer.params
            for k in range(WARMUP + max(repeats, 1)):
                params += 1e-4  # a new parameter, as after an optimizer step
                comm.Barrier()
                start = time.perf_counter()
                evaluator.gradient(params, X, C)
                wall = np.array([time.perf_counter() - start])
                comm.Allreduce(wall.copy(), wall, op=_max())  # the slowest rank's
                if k >= WARMUP:
                    walls.append(float(wall[0]))
        finally:
            grid.free()
    factor = np.full(1, np.nan)
    with agreed(comm, "the model of the space split"):
        if comm.Get_rank() == 0:
            assert cal is not None and layer is not None
            bare = dataclasses.replace(layer, oversubscription=None,
                                       oversubscription_space=None)
            spec = training_spec(kind, shape, shape[0], nlayers, n, 2, kernel,
                                 net.nparams)
            strategy = Strategy(1, size, 1, Cycle(ntime=nlayers, max_levels=2, cfactor=4,
                                                  batched=True), (1, 1), "oneshot")
            model = predict(spec, strategy, dataclasses.replace(cal, layers=(bare,),
                                                                nranks=size),
                            cores=most).seconds
            factor[0] = float(np.median(walls)) / model
    comm.Bcast(factor, root=0)
    return size / most, float(factor[0])


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
