"""Labels and mini-batches: one-hot encoding, label checks and batch iteration."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from .._limits import check_memory

__all__ = ["one_hot", "batches"]


def one_hot(labels: np.ndarray, nclasses: Optional[int] = None) -> np.ndarray:
    """Turn integer class ids into one-hot rows.

    Parameters
    ----------
    labels : array_like of int, shape (n,)
        Class ids in ``0, ..., nclasses - 1``. Floats are accepted if they are whole
        numbers (as read from a text file).
    nclasses : int, optional
        Number of classes (columns). Defaults to ``max(labels) + 1``.

    Returns
    -------
    ndarray of float64, shape (n, nclasses)
        Row ``k`` is the standard basis vector ``e_{labels[k]}``.

    Raises
    ------
    ValueError
        If the labels are not a 1-D array of non-negative whole numbers below
        ``nclasses``.

    Examples
    --------
    >>> one_hot([2, 0, 1])
    array([[0., 0., 1.],
           [1., 0., 0.],
           [0., 1., 0.]])
    >>> one_hot([1], nclasses=4)
    array([[0., 1., 0., 0.]])
    """
    ids = _class_ids(np.asarray(labels), "labels")
    if nclasses is None:
        nclasses = int(ids.max()) + 1 if ids.size else 0
    nclasses = int(nclasses)
    if nclasses < 0:
        raise ValueError(f"nclasses must be non-negative, got {nclasses}")
    if ids.size and ids.max() >= nclasses:
        raise ValueError(f"label {int(ids.max())} is out of range for nclasses={nclasses}")
    check_memory(8 * ids.size * nclasses, f"one-hot labels of {ids.size} samples and "
                                          f"{nclasses} classes (the largest label + 1)")
    out = np.zeros((ids.size, nclasses), dtype=np.float64)
    out[np.arange(ids.size), ids] = 1.0
    return out


def _class_ids(labels: np.ndarray, what: str) -> np.ndarray:
    """Validate a 1-D array of class ids and return it as int64."""
    if labels.ndim != 1:
        raise ValueError(f"{what} must be 1-D class ids, got shape {labels.shape}")
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.number):
        raise ValueError(f"{what} must be numeric class ids, got dtype {labels.dtype}")
    if np.issubdtype(labels.dtype, np.complexfloating):
        raise ValueError(f"{what} must be real class ids, got dtype {labels.dtype}")
    if labels.size == 0:
        return labels.astype(np.int64)
    if not np.all(np.isfinite(labels)):
        raise ValueError(f"{what} contain NaN or infinite values")
    if np.any(labels != np.round(labels)):
        raise ValueError(f"{what} must be whole numbers (class ids)")
    if labels.min() < 0:
        raise ValueError(f"{what} must be non-negative, found {labels.min()}")
    return labels.astype(np.int64)


def _check_one_hot(Y: np.ndarray, path: Path) -> None:
    """Raise ValueError unless every row of ``Y`` is a standard basis vector."""
    ok = Y.ndim == 2 and np.all((Y == 0) | (Y == 1)) and np.all(np.count_nonzero(Y, axis=1) == 1)
    if not ok:
        raise ValueError(f"{path}: labels are not one-hot (each row needs exactly one 1)")


def batches(
    X: np.ndarray,
    Y: np.ndarray,
    batch_size: int,
    shuffle: bool = False,
    seed: Optional[int] = None,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Iterate over mini-batches of a data set.

    Parameters
    ----------
    X, Y : ndarray
        Features and labels; the first axis indexes samples and must agree.
    batch_size : int
        Samples per batch (positive). The last batch may be smaller.
    shuffle : bool, default False
        Visit the samples in a random order drawn from
        ``numpy.random.default_rng(seed)``; otherwise in their stored order.
    seed : int, optional
        Seed for the shuffle; the same seed gives the same batches.
    drop_last : bool, default False
        Skip a final batch that is smaller than `batch_size`.

    Yields
    ------
    (ndarray, ndarray)
        ``(X[idx], Y[idx])`` for consecutive index blocks ``idx``.

    Examples
    --------
    >>> X = np.arange(5.0)[:, None]
    >>> Y = one_hot([0, 1, 0, 1, 0])
    >>> [xb.ravel().tolist() for xb, _ in batches(X, Y, 2)]
    [[0.0, 1.0], [2.0, 3.0], [4.0]]
    >>> len(list(batches(X, Y, 2, drop_last=True)))
    2
    """
    X = np.asarray(X)
    Y = np.asarray(Y)
    if X.ndim == 0 or Y.ndim == 0 or X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of samples, got shapes {X.shape} and {Y.shape}"
        )
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    n = X.shape[0]
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        idx = order[start : start + batch_size]
        yield X[idx], Y[idx]
