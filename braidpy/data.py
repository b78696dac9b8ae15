"""Small classification data sets and loaders for layer-parallel training examples."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

__all__ = [
    "PEAKS_CLASSES",
    "batches",
    "digits",
    "load_arrays",
    "load_idx",
    "load_peaks_reference",
    "mnist",
    "one_hot",
    "peaks",
    "peaks_function",
    "peaks_label",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Number of level sets (classes) in the peaks problem.
PEAKS_CLASSES = 5

# Reference grid of the peaks problem: 256 points in each direction on [-3, 3].
_PEAKS_LOW, _PEAKS_HIGH, _PEAKS_GRID = -3.0, 3.0, 256

_PEAKS_FILES = {
    "train": ("features_training.dat", "labels_training.dat"),
    "validation": ("features_validation.dat", "labels_validation.dat"),
}


# --------------------------------------------------------------------------- helpers


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


# --------------------------------------------------------------------------- peaks


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


# --------------------------------------------------------------------------- digits


def digits(
    validation_fraction: float = 0.2, seed: int = 1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Scikit-learn's bundled 8 x 8 handwritten digits, split for training.

    Needs scikit-learn (``load_digits`` ships the 1797 images with the package, no
    download).

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
        If scikit-learn is not installed.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction!r}")
    try:
        from sklearn.datasets import load_digits  # type: ignore[import]
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "braidpy.data.digits needs scikit-learn (pip install scikit-learn)"
        ) from err
    bunch = load_digits()
    X = np.asarray(bunch.images, dtype=np.float64)[:, None, :, :] / 16.0
    Y = one_hot(np.asarray(bunch.target), 10)
    order = np.random.default_rng(seed).permutation(X.shape[0])
    nval = int(round(validation_fraction * X.shape[0]))
    val, train = order[:nval], order[nval:]
    return {"train": (X[train], Y[train]), "validation": (X[val], Y[val])}


# --------------------------------------------------------------------------- IDX / MNIST

# IDX type codes (LeCun's MNIST page): unsigned byte, signed byte, short, int, float,
# double; multi-byte values are big-endian.
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def load_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format).

    The header is two zero bytes, a type code (``0x08`` ubyte, ``0x09`` byte,
    ``0x0B`` short, ``0x0C`` int, ``0x0D`` float, ``0x0E`` double), the number of
    dimensions, and then each dimension as a big-endian 32-bit integer; the data
    follow big-endian in C order. Files whose name ends in ``.gz`` are decompressed.

    Parameters
    ----------
    path : str or path
        The file.

    Returns
    -------
    ndarray
        Array of the stored shape, in native byte order.

    Raises
    ------
    ValueError
        If the header is malformed or the data size does not match it.
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in _IDX_DTYPES:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()} "
            "(expected 0x0000, a type code in 08 09 0B 0C 0D 0E, and the dimension count)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header announces {ndim} dimensions but is truncated")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: IDX shape {shape} needs {expected} data bytes, found {len(raw) - header}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _find_idx(folder: Path, name: str) -> Path:
    """Locate ``name`` or ``name.gz`` in ``folder``."""
    for candidate in (folder / name, folder / (name + ".gz")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"MNIST file {name!r} (or {name + '.gz'!r}) not found in {folder}")


def mnist(directory: PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Load MNIST from the standard IDX files.

    Parameters
    ----------
    directory : str or path
        Folder with ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each optionally
        gzipped (``.gz``). Nothing is downloaded.

    Returns
    -------
    dict
        ``{"train": (X, Y), "test": (X, Y)}``: ``X`` float64 of shape
        (n, 1, rows, cols) scaled from bytes to ``[0, 1]``; ``Y`` one-hot (n, 10).

    Raises
    ------
    FileNotFoundError
        If a file is missing.
    ValueError
        If a file is malformed or images and labels disagree in number.
    """
    folder = Path(directory)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, (iname, lname) in _MNIST_FILES.items():
        ipath, lpath = _find_idx(folder, iname), _find_idx(folder, lname)
        images, labels = load_idx(ipath), load_idx(lpath)
        if images.ndim != 3:
            raise ValueError(f"{ipath}: expected 3-D images, got shape {images.shape}")
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(
                f"{lpath}: expected {images.shape[0]} labels, got shape {labels.shape}"
            )
        X = images.astype(np.float64)[:, None, :, :] / 255.0
        out[split] = (X, one_hot(labels, 10))
    return out


# --------------------------------------------------------------------------- user arrays


def _read_text(path: Path, delimiter: Optional[str] = None) -> np.ndarray:
    """Read a numeric text table, raising errors that name the file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        return np.loadtxt(path, delimiter=delimiter, ndmin=2, dtype=np.float64)
    except ValueError as err:
        raise ValueError(f"{path}: could not read numbers ({err})") from err


def _read_array(path: Path, delimiter: Optional[str]) -> np.ndarray:
    """Read a .npy file or a delimited text file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    if path.suffix.lower() == ".npy":
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"{path}: not a readable .npy file ({err})") from err
        if data.dtype == bool or not np.issubdtype(data.dtype, np.number):
            raise ValueError(f"{path}: non-numeric data (dtype {data.dtype})")
        if np.issubdtype(data.dtype, np.complexfloating):
            raise ValueError(f"{path}: complex data (dtype {data.dtype}) is not supported")
        return data
    return _read_text(path, delimiter)


def _check_one_hot(Y: np.ndarray, path: Path) -> None:
    """Raise ValueError unless every row of ``Y`` is a standard basis vector."""
    ok = Y.ndim == 2 and np.all((Y == 0) | (Y == 1)) and np.all(np.count_nonzero(Y, axis=1) == 1)
    if not ok:
        raise ValueError(f"{path}: labels are not one-hot (each row needs exactly one 1)")


def load_arrays(
    features: PathLike,
    labels: PathLike,
    nclasses: Optional[int] = None,
    delimiter: Optional[str] = ",",
    unlabelled: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load a user data set from .npy or delimited text files.

    For example hyperspectral pixels: a features table with one row of bands per
    pixel, and a labels file with one class id per pixel.

    Parameters
    ----------
    features : str or path
        ``.npy`` file (any shape, first axis = samples) or text file with one sample
        per row (read with `delimiter`).
    labels : str or path
        ``.npy`` or text file holding either integer class ids ``0, ..., C - 1``
        (one per sample, a column or a flat array) or one-hot rows.
    nclasses : int, optional
        Number of classes; defaults to the number of one-hot columns or to
        ``max(id) + 1``.
    delimiter : str, default ","
        Column separator of text files (``None`` means any whitespace).
    unlabelled : int, optional
        A class id that marks unlabelled samples (Indian Pines uses 0): those samples
        are dropped and the ids above it move down by one, so classes stay
        ``0, ..., C - 1``. Only for class-id labels.

    Returns
    -------
    X : ndarray of float64
        Features, shape (n, ...).
    Y : ndarray of float64, shape (n, nclasses)
        One-hot labels.

    Raises
    ------
    FileNotFoundError
        If a file does not exist.
    ValueError
        With the file name and the problem: non-numeric entries, labels that are
        neither class ids nor one-hot, or sample counts that differ.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> np.save(folder / "x.npy", np.ones((3, 4)))
    >>> _ = (folder / "y.csv").write_text("0\\n2\\n1\\n")
    >>> X, Y = load_arrays(folder / "x.npy", folder / "y.csv")
    >>> X.shape, Y.argmax(axis=1).tolist()
    ((3, 4), [0, 2, 1])
    >>> X, Y = load_arrays(folder / "x.npy", folder / "y.csv", unlabelled=0)
    >>> X.shape, Y.argmax(axis=1).tolist()
    ((2, 4), [1, 0])
    """
    fpath, lpath = Path(features), Path(labels)
    X = _read_array(fpath, delimiter)
    if X.ndim == 0:
        raise ValueError(f"{fpath}: features must have a sample axis, got a scalar")
    if X.ndim == 1:
        X = X[:, None]
    L = _read_array(lpath, delimiter)
    if L.ndim == 2 and L.shape[1] == 1:
        L = L[:, 0]
    if unlabelled is not None:
        if L.ndim != 1:
            raise ValueError(f"{lpath}: unlabelled={unlabelled!r} needs class-id labels, "
                             f"got shape {L.shape}")
        if X.shape[0] != L.shape[0]:
            raise ValueError(f"shape mismatch: {fpath} has {X.shape[0]} samples but {lpath} "
                             f"has {L.shape[0]}")
        keep = L != unlabelled
        X, L = X[keep], np.where(L[keep] > unlabelled, L[keep] - 1, L[keep])
    if L.ndim == 1:
        try:
            Y = one_hot(L, nclasses)
        except ValueError as err:
            raise ValueError(f"{lpath}: {err}") from err
    elif L.ndim == 2:
        _check_one_hot(L, lpath)
        if nclasses is not None and L.shape[1] != nclasses:
            raise ValueError(
                f"{lpath}: one-hot labels have {L.shape[1]} columns, nclasses={nclasses}"
            )
        Y = L.astype(np.float64)
    else:
        raise ValueError(f"{lpath}: labels must be class ids or one-hot rows, got shape {L.shape}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"shape mismatch: {fpath} has {X.shape[0]} samples but {lpath} has {Y.shape[0]}"
        )
    return X.astype(np.float64), Y
