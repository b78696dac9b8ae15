"""User data sets from .npy, .npz or delimited text files, and the readers the loaders share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

from .._limits import check_finite, check_npy_header, check_npz_headers
from ._helpers import _check_one_hot, one_hot

__all__ = ["PathLike", "load_arrays"]

PathLike = Union[str, "os.PathLike[str]"]


def _read_text(path: Path, delimiter: Optional[str] = None) -> np.ndarray:
    """Read a numeric text table, raising errors that name the file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        data = np.loadtxt(path, delimiter=delimiter, ndmin=2, dtype=np.float64)
    except ValueError as err:
        raise ValueError(f"{path}: could not read numbers ({err})") from err
    return _finite(path, data)


def _finite(path: Path, data: np.ndarray) -> np.ndarray:
    """``data``, or a ValueError naming the file and the first sample (row) holding NaN
    or an infinity: such numbers would train, evaluate or predict nonsense."""
    return check_finite(data, str(path))


def _check_npy_sizes(path: Path) -> None:
    """The arrays an .npy file or .npz archive announces are present and fit in memory,
    checked from their headers before NumPy allocates them (a crafted shape would
    otherwise raise MemoryError naming nothing)."""
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                check_npz_headers(zf, str(path))
        else:
            with open(path, "rb") as f:
                check_npy_header(f, path.stat().st_size, str(path))
    except (zipfile.BadZipFile, OSError, EOFError):
        return  # unreadable: np.load raises, and the caller names the file


def _numeric(path: Path, data: np.ndarray) -> np.ndarray:
    if data.dtype == bool or not np.issubdtype(data.dtype, np.number):
        raise ValueError(f"{path}: non-numeric data (dtype {data.dtype})")
    if np.issubdtype(data.dtype, np.complexfloating):
        raise ValueError(f"{path}: complex data (dtype {data.dtype}) is not supported")
    return data


def _read_array(path: Path, delimiter: Optional[str]) -> np.ndarray:
    """Read a .npy file, a .npz archive holding one array, or a delimited text file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz"):
        kind = "an .npz archive" if suffix == ".npz" else "a .npy file"
        _check_npy_sizes(path)
        try:
            loaded = np.load(path, allow_pickle=False)
        except (ValueError, EOFError, OSError) as err:
            why = "the file is empty" if path.stat().st_size == 0 else str(err)
            raise ValueError(f"{path}: not a readable {suffix} file "
                             f"({why})") from err
        if isinstance(loaded, np.ndarray):
            return _finite(path, _numeric(path, loaded))
        with loaded:
            names = list(loaded.files)
            if len(names) != 1:
                raise ValueError(f"{path}: {kind} with {len(names)} arrays "
                                 f"({', '.join(names) or 'none'}); give a file with one array")
            try:
                data = loaded[names[0]]
            except ValueError as err:
                raise ValueError(f"{path}: array {names[0]!r} is not readable ({err})") from err
        return _finite(path, _numeric(path, data))
    return _read_text(path, delimiter)


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
        ``.npy`` file (any shape, first axis = samples), ``.npz`` archive holding one
        such array, or text file with one sample per row (read with `delimiter`).
    labels : str or path
        ``.npy``, one-array ``.npz`` or text file holding either integer class ids ``0, ..., C - 1``
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
        With the file name and the problem: non-numeric entries, NaN or infinite values
        (naming the first such sample), labels that are neither class ids nor one-hot,
        class ids out of range, sample counts that differ, or an array header announcing
        more data than the file holds or memory can (:class:`braidpy._limits.LimitError`).

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
