"""Communicators and collectives of braidpy runs.

Everything that crosses between ranks lives here, and every message is a typed buffer
(mpi4py's uppercase calls on NumPy arrays): no pickle and no module name ever travels,
so nothing a peer sends can choose what code runs.

- :mod:`.comm`: the world communicator and ``(rank, size)`` of any communicator;
  MPI (mpi4py) is imported only when a communicator with more than one rank is used.
- :mod:`.agree`: :func:`agreed`, the one "agree across ranks, then re-raise" step.
- :mod:`.fingerprint`: :func:`same_everywhere`, one collective that checks every rank
  was given the same problem (grid, options, layout) and names the first difference.
- :mod:`.collectives`: typed broadcasts, gathers and the rank-ordered sum.
- :mod:`.layers`: the layer (time) decomposition: ownership ranges and their mirror.
- :mod:`.timecomm`: the adapter the compiled core sends packed vectors through.
- :mod:`.interrupts`: Ctrl-C delivered at agreement points, so every rank stops together.
- :mod:`.grid`: :class:`ProcessGrid`, the data × space × layers split of hybrid-parallel
  training.
- :mod:`.data`: data parallelism: batch shards and the bucketed, overlapped gradient
  average over the data communicator.
- :mod:`.spatial`: spatial parallelism: convolutions on bands of image rows with halo
  exchange.
"""

from .agree import agreed
from .comm import rank_size, world
from .fingerprint import same_everywhere
from .grid import ProcessGrid
from .interrupts import deferred_interrupts

__all__ = ["agreed", "rank_size", "world", "ProcessGrid", "deferred_interrupts",
           "same_everywhere"]
