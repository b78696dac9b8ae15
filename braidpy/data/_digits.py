"""Scikit-learn's bundled 8 x 8 handwritten digits (imported lazily)."""

from __future__ import annotations

import numpy as np

from .._extras import require
from ._helpers import one_hot

__all__ = ["digits"]


def digits(
    validation_fraction: float = 0.2, seed: int = 1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Scikit-learn's bundled 8 x 8 handwritten digits, split for training.

    Needs scikit-learn (``pip install 'braidpy[train]'``; ``load_digits`` ships the 1797
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
        If scikit-learn is not installed (the message names ``braidpy[train]``).
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
