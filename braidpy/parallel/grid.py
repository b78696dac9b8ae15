"""The process grid of hybrid-parallel training: data × space × layers.

Every rank of a communicator of ``P = data · space · layers`` ranks gets coordinates
``(d, s, l)`` and three sub-communicators:

- ``layers``: the ``layers`` ranks with the same ``(d, s)``. MGRIT runs over them, as
  ``comm=`` of a Core or GradientSolver.
- ``space``: the ``space`` ranks with the same ``(d, l)``. They share one image split
  by rows (halo exchange of spatially parallel convolutions: Dryden et al., "Improving
  strong-scaling of CNN training by exploiting finer-grained parallelism", IEEE IPDPS
  2019).
- ``data``: the ``data`` ranks with the same ``(s, l)``. They hold the same layers and
  image part of different samples, so gradients are averaged over them.

World rank ``r = (d · space + s) · layers + l``: the layer index varies fastest, so a
layer group, whose neighbours exchange a state every relaxation sweep, is a block of
consecutive ranks. Launchers place consecutive ranks on the same node.

``space_fastest=True`` numbers the ranks as XBraid's ``braid_SplitCommworld(comm, px,
...)`` does (braid.c: space communicator = the ranks with the same ``rank // px``, time
communicator = the ranks with the same ``rank % px``, both ordered by world rank):
``r = (d · layers + l) · space + s``, the space index varies fastest, a space group is
a block of consecutive ranks. With ``data=1`` and ``space=px`` the space and layer
communicators hold exactly the ranks of XBraid's ``comm_x`` and ``comm_t``, in the same
order.

A serial run (``comm`` None) is the grid ``1 × 1 × 1`` with no communicators.

>>> grid = ProcessGrid(None)
>>> grid.shape, grid.coords, grid.layers_comm is None
((1, 1, 1), (0, 0, 0), True)
>>> ProcessGrid(None, data=2)
Traceback (most recent call last):
...
ValueError: a grid of data=2 x space=1 x layers=1 = 2 ranks does not fit a communicator of 1 rank
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from .comm import free_quietly, rank_size
from .fingerprint import same_everywhere

__all__ = ["ProcessGrid"]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _checked_shape(data: Any, space: Any, layers: Any, space_fastest: Any,
                   size: int) -> Tuple[int, int, int, bool]:
    """The grid's sizes as ints, checked against the communicator's ``size``."""
    data, space = _positive("data", data), _positive("space", space)
    if not isinstance(space_fastest, (bool, np.bool_)):
        raise TypeError(f"space_fastest must be True or False, got {space_fastest!r}")
    if layers is None:
        layers = max(1, size // (data * space))
    layers = _positive("layers", layers)
    if data * space * layers != size:
        plural = "" if size == 1 else "s"
        raise ValueError(
            f"a grid of data={data} x space={space} x layers={layers} = "
            f"{data * space * layers} ranks does not fit a communicator of {size} "
            f"rank{plural}")
    return data, space, layers, bool(space_fastest)


class ProcessGrid:
    """Split ``comm`` into data, space and layer sub-communicators (module docstring).

    Parameters
    ----------
    comm : mpi4py communicator or None
        The ranks to arrange (None: serial).
    data, space : int
        Sizes of the data and space dimensions (default 1).
    layers : int, optional
        Size of the layer dimension; default: whatever ``data · space`` leaves.
    space_fastest : bool
        False (default): the layer index varies fastest, ``r = (d · space + s) · layers
        + l``. True: the space index varies fastest, ``r = (d · layers + l) · space + s``,
        XBraid's ``braid_SplitCommworld`` ordering.

    Raises
    ------
    ValueError
        If a size is not a positive int, or ``data · space · layers`` is not the
        communicator's size (the message names all four).
    braidpy.RankMismatchError
        On every rank, if the ranks pass different (valid) arguments.
    braidpy.BraidError
        On every other rank, when one rank's arguments are invalid (that rank raises
        its ValueError or TypeError).

    Notes
    -----
    Creating a grid is collective over ``comm`` (three ``Split`` calls); :meth:`free`
    releases the sub-communicators, as does garbage collection.
    """

    def __init__(self, comm: Any, data: int = 1, space: int = 1,
                 layers: Optional[int] = None, *, space_fastest: bool = False):
        rank, size = rank_size(comm)
        error: Optional[BaseException] = None
        try:
            data, space, layers, space_fastest = _checked_shape(data, space, layers,
                                                                space_fastest, size)
        except (TypeError, ValueError) as exc:
            error = exc
        if comm is not None and size > 1:
            # Agreed before the collective Splits: a bad argument on one rank raises on
            # every rank (its own error there, BraidError elsewhere), and valid but
            # different shapes are a RankMismatchError everywhere, not a hang in Split.
            shape = None if error is not None else {
                "data": data, "space": space, "layers": layers,
                "space_fastest": space_fastest}
            same_everywhere(comm, shape, "the process grid", error=error,
                            hint="every rank must pass the same ProcessGrid arguments")
        elif error is not None:
            raise error
        assert layers is not None
        self.comm = comm
        self.shape: Tuple[int, int, int] = (data, space, layers)
        self.rank, self.size = rank, size
        self.space_fastest = bool(space_fastest)
        d, rest = divmod(rank, space * layers)
        if self.space_fastest:
            l, s = divmod(rest, space)
        else:
            s, l = divmod(rest, layers)
        self.coords: Tuple[int, int, int] = (d, s, l)
        self.layers_comm: Any = None
        self.space_comm: Any = None
        self.data_comm: Any = None
        if comm is not None and size > 1:
            # Colour: the coordinates the group shares; key: the position along it
            # (in either ordering, the position along a group grows with the world rank).
            self.layers_comm = comm.Split(d * space + s, l)
            self.space_comm = comm.Split(d * layers + l, s)
            self.data_comm = comm.Split(s * layers + l, d)

    @property
    def data(self) -> int:
        """Size of the data dimension."""
        return self.shape[0]

    @property
    def space(self) -> int:
        """Size of the space dimension."""
        return self.shape[1]

    @property
    def layers(self) -> int:
        """Size of the layer dimension."""
        return self.shape[2]

    def world_rank(self, d: int, s: int, l: int) -> int:
        """The rank of ``comm`` at coordinates ``(d, s, l)``."""
        for name, value, n in (("d", d, self.data), ("s", s, self.space),
                               ("l", l, self.layers)):
            if not 0 <= value < n:
                raise ValueError(f"{name}={value!r} is outside 0..{n - 1}")
        if self.space_fastest:
            return (d * self.layers + l) * self.space + s
        return (d * self.space + s) * self.layers + l

    def describe(self) -> str:
        """'data 2 x space 1 x layers 2 (rank 3 at d=1, s=0, l=1)'."""
        d, s, l = self.coords
        return (f"data {self.data} x space {self.space} x layers {self.layers} "
                f"(rank {self.rank} at d={d}, s={s}, l={l})")

    def free(self) -> None:
        """Release the three sub-communicators (collective; the grid is unusable after)."""
        for name in ("layers_comm", "space_comm", "data_comm"):
            sub = getattr(self, name, None)
            setattr(self, name, None)
            free_quietly(sub)

    def __del__(self):
        self.free()

    def __repr__(self) -> str:
        return f"<braidpy.parallel.ProcessGrid {self.describe()}>"
