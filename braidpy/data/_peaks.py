"""The Peaks level-set classification problem: labels, a generator and the reference data."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from .._limits import check_memory
from ._files import PathLike, _read_text
from ._helpers import _check_one_hot, one_hot

__all__ = ["PEAKS_CLASSES", "peaks_function", "peaks_label", "peaks", "load_peaks_reference"]

#: Number of level sets (classes) in the peaks problem.
PEAKS_CLASSES = 5

# Reference grid of the peaks problem: 256 points in each direction on [-3, 3].
_PEAKS_LOW, _PEAKS_HIGH, _PEAKS_GRID = -3.0, 3.0, 256

_PEAKS_FILES = {
    "train": ("features_training.dat", "labels_training.dat"),
    "validation": ("features_validation.dat", "labels_validation.dat"),
}


def peaks_function(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Evaluate MATLAB's ``peaks`` function.

    ``f(x, y) = 3 (1 - x)^2 exp(-x^2 - (y + 1)^2)
    - 10 (x / 5 - x^3 - y^5) exp(-x^2 - y^2) - exp(-(x + 1)^2 - y^2) / 3``.

    Parameters
    ----------
    x, y : array_like
        Coordinates (broadcast together).

    Returns
    -------
    ndarray
        Function values.

    Examples
    --------
    >>> round(float(peaks_function(0.0, 0.0)), 6)
    0.981012
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return (
        3.0 * (1.0 - x) ** 2 * np.exp(-(x**2) - (y + 1.0) ** 2)
        - 10.0 * (x / 5.0 - x**3 - y**5) * np.exp(-(x**2) - y**2)
        - np.exp(-((x + 1.0) ** 2) - y**2) / 3.0
    )


def _peaks_range() -> tuple[float, float]:
    """Minimum and maximum of peaks on the 256 x 256 reference grid."""
    t = np.linspace(_PEAKS_LOW, _PEAKS_HIGH, _PEAKS_GRID)
    values = peaks_function(t[:, None], t[None, :])
    return float(values.min()), float(values.max())


def peaks_label(X: np.ndarray) -> np.ndarray:
    """Level-set class of points for the peaks problem.

    The peaks problem (Günther et al., "Layer-parallel training of deep residual
    neural networks", SIAM J. Math. Data Sci. 2020, test case 1, after Haber and
    Ruthotto 2017) classifies points of ``[-3, 3]^2`` into five level sets of
    :func:`peaks_function`. The convention, which reproduces every label of the
    reference data set (see :func:`load_peaks_reference`), is:

    * ``fmin`` and ``fmax`` are the minimum and maximum of the function on the
      ``256 x 256`` grid ``linspace(-3, 3, 256)`` in both directions;
    * the edges are ``linspace(fmin, fmax, 6)``: five bins of equal width;
    * bins are half-open, ``[e_k, e_{k+1})``, so a value on an interior edge goes
      to the upper class; values below ``fmin`` go to class 0, values at or above
      ``fmax`` to class 4.

    Parameters
    ----------
    X : array_like, shape (n, 2)
        Points ``(x, y)``.

    Returns
    -------
    ndarray of int64, shape (n,)
        Class ids ``0, ..., 4`` (lowest function values are class 0).

    Examples
    --------
    >>> peaks_label([[0.0, 0.0], [0.0, 1.6], [0.25, -1.6]]).tolist()
    [2, 4, 0]
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"X must have shape (n, 2), got {X.shape}")
    fmin, fmax = _peaks_range()
    edges = np.linspace(fmin, fmax, PEAKS_CLASSES + 1)
    values = peaks_function(X[:, 0], X[:, 1])
    return np.searchsorted(edges[1:-1], values, side="right").astype(np.int64)


def peaks(n: int, seed: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Generate a balanced peaks level-set classification data set.

    Points are drawn uniformly in ``[-3, 3]^2`` with
    ``numpy.random.default_rng(seed)`` and kept by rejection sampling until every
    class holds its share; shares differ by at most one (equal when `n` is a
    multiple of 5). Labels come from :func:`peaks_label`.

    Parameters
    ----------
    n : int
        Number of points (non-negative).
    seed : int, optional
        Random seed; the same seed gives the same data set.

    Returns
    -------
    X : ndarray of float64, shape (n, 2)
        Points, grouped by class (class 0 first), as in the reference files.
    Y : ndarray of float64, shape (n, 5)
        One-hot labels.

    Notes
    -----
    The reference data of Günther et al. uses nodes of the ``256 x 256`` grid
    (drawn with repetition); this generator samples the square continuously.

    Examples
    --------
    >>> X, Y = peaks(10, seed=7)
    >>> X.shape, Y.shape
    ((10, 2), (10, 5))
    >>> Y.sum(axis=0).tolist()
    [2.0, 2.0, 2.0, 2.0, 2.0]
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    # Rejection sampling draws chunks of 8 n points (2 coordinates, a label and the
    # function's temporaries): refused by name before they are allocated.
    check_memory(512 * n + 2**20, f"peaks(n={n})")
    rng = np.random.default_rng(seed)
    want = np.full(PEAKS_CLASSES, n // PEAKS_CLASSES)
    want[: n % PEAKS_CLASSES] += 1
    kept: list[list[np.ndarray]] = [[] for _ in range(PEAKS_CLASSES)]
    have = np.zeros(PEAKS_CLASSES, dtype=np.int64)
    chunk = max(1024, 8 * n)
    while np.any(have < want):
        points = rng.uniform(_PEAKS_LOW, _PEAKS_HIGH, size=(chunk, 2))
        labels = peaks_label(points)
        for c in range(PEAKS_CLASSES):
            take = points[labels == c][: want[c] - have[c]]
            kept[c].append(take)
            have[c] += take.shape[0]
    X = np.concatenate([np.empty((0, 2))] + [p for group in kept for p in group])
    Y = one_hot(np.repeat(np.arange(PEAKS_CLASSES), want), PEAKS_CLASSES)
    return X, Y


def load_peaks_reference(directory: PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read the reference peaks data set of Günther et al.

    Parameters
    ----------
    directory : str or path
        Folder holding ``features_training.dat``, ``labels_training.dat``,
        ``features_validation.dat`` and ``labels_validation.dat`` (whitespace
        separated text: two coordinates, respectively five one-hot entries, a row).

    Returns
    -------
    dict
        ``{"train": (X, Y), "validation": (X, Y)}`` with ``X`` of shape (n, 2) and
        one-hot ``Y`` of shape (n, 5), both float64.

    Raises
    ------
    FileNotFoundError
        If the folder or one of the files is missing.
    ValueError
        If a file has the wrong shape or the labels are not one-hot.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"peaks reference folder {str(folder)!r} does not exist; it must hold "
            + ", ".join(name for pair in _PEAKS_FILES.values() for name in pair)
        )
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, (xname, yname) in _PEAKS_FILES.items():
        X = _read_text(folder / xname)
        Y = _read_text(folder / yname)
        if X.ndim != 2 or X.shape[1] != 2:
            raise ValueError(f"{folder / xname}: expected 2 columns, got shape {X.shape}")
        _check_one_hot(Y, folder / yname)
        if Y.shape[1] != PEAKS_CLASSES:
            raise ValueError(f"{folder / yname}: expected 5 columns, got shape {Y.shape}")
        if X.shape[0] != Y.shape[0]:
            raise ValueError(
                f"{folder / xname} has {X.shape[0]} rows but {folder / yname} has {Y.shape[0]}"
            )
        out[split] = (X, Y)
    return out
