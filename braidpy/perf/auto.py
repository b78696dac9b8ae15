"""``braidpy train --grid auto``: the process grid the performance model predicts fastest.

Training fixes the network, the batch, the MGRIT setting (levels, cfactor) and the
one-shot iterations; only the split of the P ranks into data x space x layers is
chosen, among the grids training can run (``max_space``: 1 where spatial splitting is
not available for the network). Exact mode's iteration counts are not known before
training, so they are taken to be the one-shot counts m1, m2 (stated in the choice).

Rank 0 reads the calibration file and decides; the choice reaches the other ranks as
a strict-JSON message (``Bcast`` of its bytes, no pickles), so every rank builds the
same grid even when only rank 0 can read the file, and a failure there reaches every
rank as the same error instead of leaving the others waiting in a collective.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from ..parallel.collectives import bcast_bytes
from ..parallel.comm import rank_size
from .calibration import load_calibration
from .model import NetSpec, Prediction
from .plan import plan

__all__ = ["GridChoice", "training_spec", "decide_grid", "choose_grid"]


@dataclass(frozen=True)
class GridChoice:
    """The chosen (data, space, layers), its predicted seconds per gradient, and a line
    for the run's output."""

    shape: Tuple[int, int, int]
    seconds: float
    summary: str


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


def decide_grid(spec: NetSpec, nprocs: int, calibration: str, *, levels: int, cfactor: int,
            mode: str, iterations: Tuple[int, int], max_space: int = 1,
            nrelax: int = 1) -> GridChoice:
    """The fastest grid of ``nprocs`` ranks by the model (no communication: what rank 0
    does for :func:`choose_grid`). ValueError when the file or no grid fits."""
    cal = load_calibration(calibration)
    serial = mode == "serial"
    model_mode = "exact" if mode == "exact" else "oneshot"
    # The Trainer runs its MGRIT setting on a single layer rank too, except in serial
    # mode (serial on every grid) and in mode 'auto' (serial where the layers and rows
    # are not split, one-shot elsewhere: braidpy.train.resolve_mode).
    result = plan(spec, nprocs, cal, levels=(levels,), cfactors=(cfactor,),
                  iterations=iterations, mode=model_mode, nrelax=nrelax,
                  mgrit_on_one_rank=mode not in ("serial", "auto"))
    usable = [p for p in result.ranked if p.strategy.space <= max_space
              and (not serial or p.strategy.layers == 1)]
    if not usable:
        raise ValueError(f"the performance model found no grid of {nprocs} ranks that "
                         f"training can run for this network (space at most {max_space}"
                         f"{', one layer rank in serial mode' if serial else ''})")
    best: Prediction = usable[0]
    s = best.strategy
    assumed = " (exact mode: iterations assumed m1, m2)" if mode == "exact" else ""
    summary = (f"--grid auto chose {s.data},{s.space},{s.layers}: predicted "
               f"{best.seconds * 1e3:.4g} ms per gradient, {result.serial / best.seconds:.2f}x "
               f"one process{assumed}; calibration {calibration}")
    return GridChoice((s.data, s.space, s.layers), best.seconds, summary)


def choose_grid(spec: NetSpec, comm: Any, calibration: str, *, levels: int, cfactor: int,
                mode: str, iterations: Tuple[int, int], max_space: int = 1,
                nrelax: int = 1) -> GridChoice:
    """The fastest grid for ``comm``'s ranks (collective; see the module docstring).

    Raises ValueError (the same message on every rank) when the calibration file
    cannot be used or no grid fits."""
    rank, nprocs = rank_size(comm)
    payload: Optional[bytes] = None
    if rank == 0:
        try:
            c = decide_grid(spec, nprocs, calibration, levels=levels, cfactor=cfactor,
                            mode=mode, iterations=iterations, max_space=max_space,
                            nrelax=nrelax)
            payload = json.dumps({"shape": list(c.shape), "seconds": c.seconds,
                                  "summary": c.summary}).encode()
        except (OSError, ValueError) as exc:
            payload = json.dumps({"error": str(exc)}).encode()
    got = json.loads(bcast_bytes(comm, payload, 0))
    if "error" in got:
        raise ValueError(got["error"] if rank == 0 else f"rank 0: {got['error']}")
    d, s, l = (int(n) for n in got["shape"])
    return GridChoice((d, s, l), float(got["seconds"]), str(got["summary"]))
