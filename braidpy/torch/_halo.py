"""Which blocks a rank needs, who owns them, and the parameter messages between ranks.

A rank owns the blocks of the steps into its own time points (their gradients are
computed there). It also steps with a few blocks it does not own: coarse-level steps
that start left of its points, and the adjoint step of the first layer of its right
neighbour. Before every forward solve the owners send those blocks' current
parameters to the ranks that need them ("halo"), as typed byte buffers: each tensor
is one :mod:`braidpy.backends.wire` message (fixed ``BRPY`` header, then the data)
behind an 8-byte length; nothing else crosses.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Sequence, Set, Tuple

import numpy as np

from ..parallel.agree import agreed
from ..parallel.collectives import allgather_ints, allgatherv
from ..parallel.comm import mpi, rank_size

__all__ = ["own_layers", "needed_layers", "HaloPlan"]

_LEN = struct.Struct("<q")
_TAG = 4242


def own_layers(owned: range, depth: int) -> range:
    """Layers whose step ends at a time point this rank owns (their gradients are here)."""
    return range(max(owned.start - 1, 0), min(owned.stop - 1, depth))


def needed_layers(primal_levels: Sequence[Dict[str, Any]],
                  adjoint_levels: Sequence[Dict[str, Any]], owned: range,
                  depth: int) -> Set[int]:
    """Every layer this rank steps with: on each primal level, the step into each of its
    points (index i, stride s: layer (i-1) s); on each adjoint level the step into its
    reversed point i, i.e. forward layer N - i s; and its own layers."""
    needed = set(own_layers(owned, depth))
    for info in primal_levels:
        s = int(info["fine_stride"])
        needed.update((i - 1) * s for i in range(max(int(info["lo"]), 1), int(info["hi"]) + 1))
    for info in adjoint_levels:
        s = int(info["fine_stride"])
        needed.update(depth - i * s for i in range(max(int(info["lo"]), 1),
                                                   int(info["hi"]) + 1))
    return {n for n in needed if 0 <= n < depth}


class HaloPlan:
    """Who sends which blocks' parameters to whom before each forward solve.

    Built collectively from every rank's own range and needed set; :meth:`exchange`
    (collective) moves the tensors.
    """

    def __init__(self, comm: Any, own: range, needed: Set[int]):
        self.comm = comm
        self.rank, self.size = rank_size(comm)
        self.sends: List[Tuple[int, List[int]]] = []
        self.recvs: List[Tuple[int, List[int]]] = []
        if self.size == 1:
            return
        bounds = allgather_ints(comm, [own.start, own.stop])
        mine = sorted(needed - set(own))
        counts = allgather_ints(comm, [len(mine)])[:, 0]
        flat = allgatherv(comm, mine, np.int64).tolist()
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()

        def owner(n: int) -> int:
            for q, (lo, hi) in enumerate(bounds.tolist()):
                if lo <= n < hi:
                    return q
            raise RuntimeError(f"braidpy.torch: no rank owns layer {n}")

        for r in range(self.size):
            wants = flat[starts[r]:starts[r + 1]]
            by_owner: Dict[int, List[int]] = {}
            for n in wants:
                by_owner.setdefault(owner(n), []).append(n)
            for q, ns in sorted(by_owner.items()):
                if q == self.rank:
                    self.sends.append((r, ns))
                if r == self.rank:
                    self.recvs.append((q, ns))

    @property
    def halo(self) -> List[int]:
        """The layers this rank receives."""
        return sorted(n for _, ns in self.recvs for n in ns)

    def exchange(self, own_params: Dict[int, Dict[str, Any]], backend: Any,
                 names: Dict[int, List[Tuple[str, Tuple[int, ...]]]]
                 ) -> Dict[int, Dict[str, Any]]:
        """Send the own blocks others need, receive the halo blocks: {layer: {name:
        tensor}} on this rank's device. ``names[n]`` lists halo block n's parameter
        names and shapes (in its own order), to check each message against. Collective."""
        out: Dict[int, Dict[str, Any]] = {}
        payloads: List[Tuple[int, np.ndarray]] = []
        with agreed(self.comm, "packing layer parameters for other ranks"):
            for dest, ns in self.sends:
                parts: List[bytes] = []
                for n in ns:
                    for t in own_params[n].values():
                        msg = bytes(memoryview(backend.pack(t)).cast("B"))
                        parts += [_LEN.pack(len(msg)), msg]
                payloads.append((dest, np.frombuffer(b"".join(parts), dtype=np.uint8)))
        if self.size == 1:
            return out
        MPI = mpi()
        requests = [self.comm.Isend([buf, MPI.BYTE], dest=dest, tag=_TAG)
                    for dest, buf in payloads]
        received: List[Tuple[List[int], np.ndarray]] = []
        for source, ns in self.recvs:
            status = MPI.Status()
            self.comm.Probe(source=source, tag=_TAG, status=status)
            buf = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
            self.comm.Recv([buf, MPI.BYTE], source=source, tag=_TAG)
            received.append((ns, buf))
        MPI.Request.Waitall(requests)
        with agreed(self.comm, "unpacking layer parameters from other ranks"):
            for ns, buf in received:
                view, pos = memoryview(buf.data), 0
                for n in ns:
                    block: Dict[str, Any] = {}
                    for name, shape in names[n]:
                        if pos + _LEN.size > len(view):
                            raise ValueError(f"braidpy.torch: the parameters of layer {n} "
                                             f"from its owner are truncated")
                        (length,) = _LEN.unpack_from(view, pos)
                        pos += _LEN.size
                        if length < 0 or pos + length > len(view):
                            raise ValueError(f"braidpy.torch: bad parameter message length "
                                             f"{length} for layer {n}")
                        t = backend.unpack(view[pos:pos + length])
                        if tuple(t.shape) != tuple(shape):
                            raise ValueError(f"braidpy.torch: layer {n}'s {name} arrived with "
                                             f"shape {tuple(t.shape)}, this rank's copy of the "
                                             f"block has {tuple(shape)}")
                        block[name] = t
                        pos += length
                    out[n] = block
                if pos != len(view):
                    raise ValueError("braidpy.torch: parameter message has trailing bytes")
        return out
