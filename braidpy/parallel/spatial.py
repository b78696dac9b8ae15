"""Spatial parallelism for convolutions: image rows split over the space communicator.

Dryden et al., "Improving strong-scaling of CNN training by exploiting finer-grained
parallelism" (IEEE IPDPS 2019), strong-scale large images by splitting them
spatially, each rank holding a band of rows and exchanging a halo of the kernel radius
r with its neighbours. This module does that for braidpy.nn's "same"-padded
cross-correlation (:func:`braidpy.nn.conv.conv2d` and its two VJPs).

- :func:`conv2d_rows`, forward, and :func:`conv2d_input_vjp_rows`, backward data. The r
  rows above and below the band travel by non-blocking send/receive. The band's
  interior, whose windows stay inside the band, is computed while they travel; the two
  boundary strips are computed once they have arrived. The outermost bands get zero
  halos, which is the zero padding of the whole image.
- :func:`conv2d_weight_vjp_rows`, backward filter: each band's part of the sum over
  pixels (computed with the forward halo: :func:`conv2d_weight_vjp_band`), then a sum
  over the space communicator.
- :func:`rows_with_halo`: the rows around a band of an image every rank holds (the
  input data), for a convolution of the band without messages.

:class:`RowSplit`'s :attr:`~RowSplit.tags` and :meth:`~RowSplit.wait` are the halo's
message tags and wait; :class:`braidpy.train.spatial_training.SpaceChannel` varies the
tags per evaluation and stops waiting when a space peer reports a failure.

Each result equals the single-process computation up to the order of the
floating-point sums: the convolutions of interior rows are bitwise equal, and the filter
gradient is summed over bands and then over ranks.

>>> import numpy as np
>>> x = np.arange(2 * 1 * 6 * 5, dtype=float).reshape(2, 1, 6, 5)
>>> K = np.ones((1, 1, 3, 3))
>>> split = RowSplit(None, 6)
>>> from braidpy.nn.conv import conv2d
>>> bool(np.array_equal(conv2d_rows(x, K, split), conv2d(x, K)))
True
"""

from __future__ import annotations

from typing import Any, List

import numpy as np

from ..nn.conv import conv2d, conv2d_input_vjp, conv2d_weight_vjp
from .collectives import allgatherv
from .comm import mpi, rank_size

__all__ = ["RowSplit", "conv2d_rows", "conv2d_input_vjp_rows", "conv2d_weight_vjp_rows",
           "conv2d_weight_vjp_band", "rows_with_halo", "rows_extended", "zero_rows"]

_TAG_UP, _TAG_DOWN = 31, 32  # a band's top rows travel up, its bottom rows down


class RowSplit:
    """Rows ``0..height-1`` of an image split into contiguous bands over ``comm`` (the
    space communicator): rank s holds ``rows[s]``, sizes differing by at most one.

    >>> RowSplit(None, 5).rows
    [range(0, 5)]
    """

    def __init__(self, comm: Any, height: int):
        self.comm = comm
        self.rank, self.size = rank_size(comm)
        if isinstance(height, bool) or not isinstance(height, (int, np.integer)) or \
                height < self.size:
            raise ValueError(f"height must be an int >= the {self.size} space ranks, "
                             f"got {height!r}")
        base, extra = divmod(int(height), self.size)
        starts = [s * base + min(s, extra) for s in range(self.size + 1)]
        self.height = int(height)
        self.rows: List[range] = [range(starts[s], starts[s + 1]) for s in range(self.size)]

    @property
    def tags(self) -> tuple:
        """The MPI tags of halo rows travelling up and down (a subclass may vary them,
        e.g. per evaluation, so that a message left over from a failed one never matches)."""
        return (_TAG_UP, _TAG_DOWN)

    def wait(self, requests: List[Any], keep: Any = ()) -> None:
        """Wait for this rank's halo sends and receives (``keep``: their buffers, which a
        subclass that stops waiting early must keep alive)."""
        mpi().Request.Waitall(requests)

    @property
    def mine(self) -> range:
        """This rank's rows."""
        return self.rows[self.rank]

    def band(self, image: np.ndarray) -> np.ndarray:
        """This rank's rows of a whole (batch, C, H, W) image (a view)."""
        return image[:, :, self.mine.start:self.mine.stop]

    def gather(self, band: np.ndarray) -> np.ndarray:
        """The whole image from every rank's band (collective; for tests and output)."""
        band = np.asarray(band, dtype=np.float64)
        if self.size == 1:
            return band.copy()
        # Rows last, so that every rank's band is one contiguous run of the gathered data.
        flat = allgatherv(self.comm, np.moveaxis(band, 2, 0))
        n, c, _, w = band.shape
        return np.moveaxis(flat.reshape(self.height, n, c, w), 0, 2).copy()


def _check_band(fn: str, x: np.ndarray, split: RowSplit) -> None:
    if x.ndim != 4 or x.shape[2] != len(split.mine):
        raise ValueError(f"{fn}: this rank's band has shape {x.shape}; it must be (batch, C, "
                         f"{len(split.mine)}, W), rows {split.mine.start}..{split.mine.stop - 1}"
                         f" of {split.height}")


class _Halo:
    """The r rows above and below this rank's band, exchanged without blocking. ``x``
    is (..., C, rows, W): one image batch, or several (a leading interval axis)."""

    def __init__(self, x: np.ndarray, r: int, split: RowSplit):
        shape = x.shape[:-2] + (r, x.shape[-1])
        self.above = np.zeros(shape, dtype=x.dtype)  # zero: the image's padding
        self.below = np.zeros(shape, dtype=x.dtype)
        self._requests: List[Any] = []
        self._split = split
        self._keep: tuple = ()
        s, comm = split.rank, split.comm
        if r == 0 or split.size == 1:
            return
        thinnest = min(len(rows) for rows in split.rows)
        if thinnest < r:  # every rank sees the same split: all raise together
            raise ValueError(f"bands of {thinnest} rows are thinner than the halo of {r} "
                             f"rows: use fewer space ranks for {split.height} rows")
        MPI = mpi()
        up, down = split.tags
        send_up = np.ascontiguousarray(x[..., :r, :])
        send_down = np.ascontiguousarray(x[..., -r:, :])
        self._keep = (send_up, send_down, self.above, self.below)  # alive until done
        if s > 0:
            self._requests += [comm.Isend([send_up, MPI.DOUBLE], s - 1, up),
                               comm.Irecv([self.above, MPI.DOUBLE], s - 1, down)]
        if s < split.size - 1:
            self._requests += [comm.Isend([send_down, MPI.DOUBLE], s + 1, down),
                               comm.Irecv([self.below, MPI.DOUBLE], s + 1, up)]

    def wait(self) -> None:
        requests, keep = self.take_requests()
        if requests:
            self._split.wait(requests, keep)

    def take_requests(self) -> tuple:
        """(the pending requests, the buffers they use), for the caller to wait on; the
        halo then counts as waited for."""
        requests, self._requests = self._requests, []
        return requests, self._keep

    def extended(self, x: np.ndarray) -> np.ndarray:
        """x with its halo rows above and below (waits for them)."""
        self.wait()
        return np.concatenate([self.above, x, self.below], axis=-2)


def rows_extended(x: np.ndarray, r: int, split: RowSplit, *more: Any) -> Any:
    """This rank's band ``x`` (..., C, rows, W) with the r rows of its neighbours' bands
    above and below (zero beyond the image), for a "same" correlation of the band whose
    rows r..-r are the whole image's (collective over ``split.comm``; every band must
    have at least r rows).

    ``more``: further (band, radius) pairs, whose halos travel at the same time (every
    rank posts them in the same order, and MPI keeps messages of one sender and tag in
    order); then the extended bands are returned as a list, ``x``'s first."""
    bands = [(np.ascontiguousarray(x, dtype=np.float64), r)] + \
        [(np.ascontiguousarray(b, dtype=np.float64), int(rb)) for b, rb in more]
    halos = [_Halo(b, rb, split) for b, rb in bands]
    # One wait for all of them: a wait that stops early (a failed space peer) then
    # keeps every pending buffer alive, not only the first halo's.
    requests, keep = [], []
    for h in halos:
        reqs, kept = h.take_requests()
        requests += reqs
        keep.append(kept)
    if requests:
        split.wait(requests, tuple(keep))
    out = [np.concatenate([h.above, b, h.below], axis=-2) for h, (b, _) in zip(halos, bands)]
    return out if more else out[0]


def zero_rows(x: Any, r: int) -> np.ndarray:
    """``x`` (..., rows, W) with r zero rows above and below."""
    pad = [(0, 0)] * (np.ndim(x) - 2) + [(r, r), (0, 0)]
    return np.pad(np.asarray(x, dtype=np.float64), pad)


def _radius(K: np.ndarray) -> int:
    return (K.shape[-1] - 1) // 2


def _correlate_rows(fn: str, x: np.ndarray, K: np.ndarray, split: RowSplit, op) -> np.ndarray:
    """op (a "same" correlation) applied to the whole image, for this rank's band."""
    _check_band(fn, x, split)
    x = np.ascontiguousarray(x, dtype=np.float64)
    r, m = _radius(K), x.shape[2]
    halo = _Halo(x, r, split)
    if r == 0:
        return op(x, K)
    if m < 2 * r:  # a band thinner than the kernel: wait, then one extended block
        return op(halo.extended(x), K)[:, :, r:-r]
    out = op(x, K)  # rows r..m-r-1 are final already; the halos are on their way
    halo.wait()
    top = op(np.concatenate([halo.above, x[:, :, :2 * r]], axis=2), K)
    bottom = op(np.concatenate([x[:, :, -2 * r:], halo.below], axis=2), K)
    out[:, :, :r] = top[:, :, r:2 * r]
    out[:, :, m - r:] = bottom[:, :, r:2 * r]
    return out


def conv2d_rows(x: np.ndarray, K: np.ndarray, split: RowSplit) -> np.ndarray:
    """This rank's rows of ``conv2d(image, K)``, from this rank's rows ``x`` of the
    image (collective over ``split.comm``)."""
    return _correlate_rows("conv2d_rows", x, K, split, conv2d)


def conv2d_input_vjp_rows(g: np.ndarray, K: np.ndarray, split: RowSplit) -> np.ndarray:
    """This rank's rows of ``conv2d_input_vjp(G, K)`` for the image-sized G whose rows
    here are ``g`` (collective)."""
    return _correlate_rows("conv2d_input_vjp_rows", g, K, split, conv2d_input_vjp)


def conv2d_weight_vjp_band(g: np.ndarray, x: np.ndarray, k: int,
                           split: RowSplit) -> np.ndarray:
    """This band's part of ``conv2d_weight_vjp(G, X, k)``: the sum over this rank's
    output pixels only (collective for the halo of ``x``; no sum over ranks). Summed
    over the space communicator it is the whole image's filter gradient."""
    _check_band("conv2d_weight_vjp_band", x, split)
    _check_band("conv2d_weight_vjp_band", g, split)
    x = np.ascontiguousarray(x, dtype=np.float64)
    r = (int(k) - 1) // 2
    ext = _Halo(x, r, split).extended(x)
    # g is zero on the halo rows: only this band's output pixels count here.
    gext = np.zeros(g.shape[:2] + ext.shape[2:], dtype=np.float64)
    gext[:, :, r:r + g.shape[2]] = g
    return conv2d_weight_vjp(gext, ext, k)


def conv2d_weight_vjp_rows(g: np.ndarray, x: np.ndarray, k: int,
                           split: RowSplit) -> np.ndarray:
    """``conv2d_weight_vjp(G, X, k)`` of the whole image, on every rank, from this rank's
    rows ``g`` and ``x`` (collective: a sum over the space communicator)."""
    part = conv2d_weight_vjp_band(g, x, k, split)
    if split.size == 1:
        return part
    part = np.ascontiguousarray(part)
    total = np.empty(part.shape, dtype=np.float64)
    split.comm.Allreduce(part, total, op=mpi().SUM)
    return total



def rows_with_halo(image: Any, rows: range, r: int) -> Any:
    """Rows ``rows.start - r .. rows.stop + r - 1`` of a whole (batch, C, H, W) image that
    this rank holds entirely (the input data), zero beyond the image: what a "same"
    correlation of radius r needs for those rows, with no messages. A "same"
    correlation of the result, cropped by r rows at each end, is the image's for
    ``rows``.

    >>> x = np.arange(4.0).reshape(1, 1, 4, 1)
    >>> rows_with_halo(x, range(0, 2), 1)[0, 0, :, 0].tolist()
    [0.0, 0.0, 1.0, 2.0]
    """
    n, c, h, w = image.shape
    lo, hi = rows.start - r, rows.stop + r
    out = np.zeros((n, c, hi - lo, w), dtype=np.result_type(image, np.float64))
    a, b = max(lo, 0), min(hi, h)
    out[:, :, a - lo:b - lo] = image[:, :, a:b]
    return out
