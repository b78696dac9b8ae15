"""Stacked dense steps in cache-sized chunks of rows: the batched NumPy path of wide layers.

Layers of width up to braidpy.nn.dense.ROWS_MAX_WIDTH (relu, smooth_relu) take the
compiled one-pass kernels instead, which stream the rows with no product temporaries;
the chunks below serve the wider ones, whose product stays BLAS's.

MGRIT's batched relaxation hands the dense kernels m states at once (Peaks, 256 layers,
cfactor 4: m = 64 states of 1000 x 8 or 5000 x 8, 4 or 20 MB). Computed whole, the
product u @ K^T of all m rows is written out before the compiled pass reads it back, and
both fall out of the core's cache: on this project's 2-core EPYC VM (1 MiB of L2 per
core) a row of such a call cost about twice a row of a call over 4-16 rows (forward
25 against 13 us at 1000 x 8, the adjoint 40 against 16; isolated calls). So the rows
go through in chunks of about :data:`CHUNK_BYTES` of states, the product of a chunk
written into one scratch array that stays in cache, and the compiled pass finishing it
at once.

Each row's arithmetic is the unchunked kernel's (NumPy's stacked matmul is one BLAS
product per row; the compiled pass is elementwise; the bias sum runs along one row), so
the bits are the same. ``KT`` is the rows' K^T made contiguous, ``b`` and ``h`` the
biases and step sizes as the compiled pass reads them (see braidpy.nn.dense), ``code``
the activation's code of ``braidpy._core._host_dense``.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

import numpy as np

from .._core import _host_dense  # type: ignore[attr-defined]  # private submodule, not stubbed

#: Bytes of states per chunk: about the L2 cache of a core (1 MiB on the VM above; 512
#: KiB to 2 MiB on current x86 and ARM server cores). In one-shot training of Peaks there
#: (os12-F, CPU ms per step, min over runs on a shared host): at 5000 samples 330 with
#: 1 or 2 MiB, 352 with 512 KiB, 365 unchunked; at 1000 samples 66-71 with 1 MiB, 70-72
#: unchunked, 75 with 256 KiB and 82 with 64 KiB (one row: the calls' overhead shows).
CHUNK_BYTES = 1024 * 1024


def chunk_rows(U: Any) -> int:
    """Rows of the stacked U per chunk: about CHUNK_BYTES of states, at least one."""
    m = U.shape[0]
    row = U.nbytes // m if m else 1
    return max(1, CHUNK_BYTES // max(row, 1))


def _spans(m: int, c: int) -> Iterator[Tuple[int, int]]:
    for i in range(0, m, c):
        yield i, min(i + c, m)


def step(U: Any, KT: Any, b: Any, h: Any, code: int, out: Any) -> Any:
    """U + h * act(U @ K^T + b) row by row, into out (U itself: in place; None: a new
    array, whose chunks hold their own products)."""
    m, c = U.shape[0], chunk_rows(U)
    if out is U:
        Z = np.empty((c,) + U.shape[1:], U.dtype)
        for i, j in _spans(m, c):
            z = Z[:j - i]
            np.matmul(U[i:j], KT[i:j], out=z)
            _host_dense.dense_step_update(z, U[i:j], b[i:j], h[i:j], code)
        return U
    target = np.empty(U.shape, U.dtype) if out is None else out
    for i, j in _spans(m, c):
        t = target[i:j]
        np.matmul(U[i:j], KT[i:j], out=t)
        _host_dense.dense_step_finish(t, U[i:j], b[i:j], h[i:j], code)
    return target


def adjoint(W: Any, U: Any, KT: Any, Ks: Any, b: Any, h: Any, code: int, out: Any) -> Any:
    """W + (h W act'(U @ K^T + b)) @ K row by row, into out (W itself: in place, W + r
    being the same bits as r + W; None: a new array)."""
    m, c = U.shape[0], chunk_rows(U)
    Z = np.empty((c,) + U.shape[1:], U.dtype)
    if out is W:
        R = np.empty_like(Z)
        for i, j in _spans(m, c):
            z, r = Z[:j - i], R[:j - i]
            np.matmul(U[i:j], KT[i:j], out=z)
            _host_dense.dense_slope(z, W[i:j], b[i:j], h[i:j], code)
            np.matmul(z, Ks[i:j], out=r)
            W[i:j] += r
        return W
    target = np.empty(W.shape, W.dtype) if out is None else out
    for i, j in _spans(m, c):
        z, t = Z[:j - i], target[i:j]
        np.matmul(U[i:j], KT[i:j], out=z)
        _host_dense.dense_slope(z, W[i:j], b[i:j], h[i:j], code)
        np.matmul(z, Ks[i:j], out=t)
        t += W[i:j]
    return target


def gradient(W: Any, U: Any, KT: Any, b: Any, h: Any, code: int) -> Tuple[Any, Any]:
    """(g^T @ U, g summed over the batch) row by row, g = h W act'(U @ K^T + b)."""
    m, c = U.shape[0], chunk_rows(U)
    width = U.shape[-1]
    dK = np.empty((m, width, width), U.dtype)
    db = np.empty((m, width), U.dtype)
    Z = np.empty((c,) + U.shape[1:], U.dtype)
    for i, j in _spans(m, c):
        z = Z[:j - i]
        np.matmul(U[i:j], KT[i:j], out=z)
        _host_dense.dense_slope(z, W[i:j], b[i:j], h[i:j], code)
        np.matmul(np.swapaxes(z, -1, -2), U[i:j], out=dK[i:j])
        np.sum(z, axis=1, out=db[i:j])
    return dK, db
