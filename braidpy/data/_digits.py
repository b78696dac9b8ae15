"""Scikit-learn's bundled 8 x 8 handwritten digits (imported lazily), and the same
digits at MNIST's 28 x 28 size."""

from __future__ import annotations

import numpy as np

from .._extras import require
from ._helpers import one_hot

__all__ = ["digits", "digits28", "upscale28"]


def digits(
    validation_fraction: float = 0.2, seed: int = 1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Scikit-learn's bundled 8 x 8 handwritten digits, split for training.

    Needs scikit-learn (``pip install -e '.[train]'``; ``load_digits`` ships the 1797
    images with the package, no download).

    Parameters
    ----------
    validation_fraction : float, default 0.2
        Share of the images put aside for validation, in ``[0, 1)``.
    seed : int, default 1
        Seed of the random permutation that splits the images; the same seed gives
        the same split.

    Returns
    -------
    dict
        ``{"train": (X, Y), "validation": (X, Y)}``: ``X`` of shape (n, 1, 8, 8),
        float64 in ``[0, 1]``; ``Y`` one-hot of shape (n, 10).

    Raises
    ------
    ImportError
        If scikit-learn is not installed (the message names the ``train`` extra).
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction!r}")
    datasets = require("sklearn.datasets", "train", "braidpy.data.digits")
    bunch = datasets.load_digits()
    X = np.asarray(bunch.images, dtype=np.float64)[:, None, :, :] / 16.0
    Y = one_hot(np.asarray(bunch.target), 10)
    order = np.random.default_rng(seed).permutation(X.shape[0])
    nval = int(round(validation_fraction * X.shape[0]))
    val, train = order[:nval], order[nval:]
    return {"train": (X[train], Y[train]), "validation": (X[val], Y[val])}


def upscale28(images: np.ndarray) -> np.ndarray:
    """8 x 8 images at MNIST's size: each pixel repeated 3 x 3 (24 x 24), then a zero
    border of 2 pixels (28 x 28), as MNIST centres its digits in a 20 x 20 box inside
    28 x 28.

    Parameters
    ----------
    images : ndarray, shape (..., 8, 8)

    Returns
    -------
    ndarray, shape (..., 28, 28)
        Same dtype; the pixel ``[i, j]`` of an image fills rows ``2 + 3i .. 4 + 3i`` and
        columns ``2 + 3j .. 4 + 3j``.

    Examples
    --------
    >>> x = np.zeros((8, 8)); x[0, 1] = 1.0
    >>> y = upscale28(x)
    >>> y.shape, np.argwhere(y).min(axis=0).tolist(), np.argwhere(y).max(axis=0).tolist()
    ((28, 28), [2, 5], [4, 7])
    """
    images = np.asarray(images)
    if images.shape[-2:] != (8, 8):
        raise ValueError(f"upscale28 needs 8 x 8 images, got shape {images.shape}")
    big = images.repeat(3, axis=-2).repeat(3, axis=-1)
    pad = [(0, 0)] * (images.ndim - 2) + [(2, 2), (2, 2)]
    return np.pad(big, pad)


def digits28(
    validation_fraction: float = 0.2, seed: int = 1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Scikit-learn's digits at MNIST's size, for MNIST-size networks without the files.

    The images and the split of :func:`digits` (same ``validation_fraction`` and
    ``seed``, same samples in the same order), each scaled 3 x and padded to 28 x 28 by
    :func:`upscale28`. Needs scikit-learn; nothing is downloaded.

    Returns
    -------
    dict
        ``{"train": (X, Y), "validation": (X, Y)}``: ``X`` of shape (n, 1, 28, 28),
        float64 in ``[0, 1]``; ``Y`` one-hot of shape (n, 10).
    """
    sets = digits(validation_fraction, seed)
    return {split: (upscale28(X), Y) for split, (X, Y) in sets.items()}
