"""IDX files (the MNIST format) and the MNIST data set."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ._files import PathLike
from ._helpers import one_hot

__all__ = ["load_idx", "mnist"]

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
