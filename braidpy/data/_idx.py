"""IDX files (the MNIST format) and the MNIST data set."""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .._limits import check_memory, shape_bytes
from ._files import PathLike, _finite
from ._helpers import one_hot

__all__ = ["MNIST_FILES", "load_idx", "mnist", "save_idx"]

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

#: The four MNIST file names :func:`mnist` reads (each may also be gzipped, ``.gz``).
MNIST_FILES = tuple(name for pair in _MNIST_FILES.values() for name in pair)

# The type code of each storable dtype (native or big-endian alike).
_IDX_CODES = {dtype.newbyteorder("="): code for code, dtype in _IDX_DTYPES.items()}


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
        If the header is malformed, the data size does not match it, a gzipped file is
        corrupt (each naming the file), or the data would not fit in memory
        (:class:`braidpy._limits.LimitError`).
    """
    path = Path(path)
    gz = path.name.endswith(".gz")
    try:
        with (gzip.open if gz else open)(path, "rb") as fh:
            return _read_idx(fh, path, gz)
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or truncated gzip stream
        raise ValueError(f"{path}: not a readable {'gzipped ' if gz else ''}IDX file "
                         f"({exc})") from exc


def _read_idx(fh: Any, path: Path, gz: bool) -> np.ndarray:
    """The IDX file open in ``fh``: its header first, then exactly the data the shape
    announces, checked against the file's size (or, gzipped, against what decompresses)
    and the memory available before they are read."""
    raw = fh.read(4)
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    zero, code, ndim = struct.unpack(">HBB", raw)
    if zero != 0 or code not in _IDX_DTYPES:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{raw.hex()} "
            "(expected 0x0000, a type code in 08 09 0B 0C 0D 0E, and the dimension count)"
        )
    dims = fh.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise ValueError(f"{path}: IDX header announces {ndim} dimensions but is truncated")
    shape = struct.unpack(f">{ndim}I", dims)
    dtype = _IDX_DTYPES[code]
    expected = shape_bytes(shape, dtype.itemsize)  # Python ints: no int64 overflow
    header = 4 + 4 * ndim
    if not gz:
        found = os.fstat(fh.fileno()).st_size - header
        if found != expected:
            raise ValueError(f"{path}: IDX shape {shape} needs {expected} data bytes, "
                             f"found {found}")
    check_memory(expected, f"{path} (IDX shape {shape})")
    data = fh.read(expected + 1) if gz else fh.read(expected)
    if len(data) != expected:
        raise ValueError(f"{path}: IDX shape {shape} needs {expected} data bytes, found "
                         f"{len(data)}{' or more' if len(data) > expected else ''}")
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def save_idx(path: PathLike, array: Any) -> Path:
    """Write an array as an IDX file (the MNIST format), the inverse of :func:`load_idx`.

    The type code follows the array's dtype: ``uint8`` 0x08, ``int8`` 0x09, ``int16``
    0x0B, ``int32`` 0x0C, ``float32`` 0x0D, ``float64`` 0x0E; the dimensions and the
    data are written big-endian, in C order. A name ending in ``.gz`` is gzipped (with
    no time stamp, so the same array gives the same bytes). Nothing is converted: give
    MNIST images and labels as ``uint8``, e.g. ``np.rint(255 * X).astype(np.uint8)``.

    Parameters
    ----------
    path : str or path
        The file to write (its folder must exist).
    array : ndarray
        At least one dimension, each below 2**32, of one of the six dtypes above.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        If the dtype has no IDX type code (the message names it and the six that do),
        or the array has no dimensions, more than 255, or one of 2**32 or more.

    Examples
    --------
    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> x = np.arange(6, dtype=np.uint8).reshape(2, 3)
    >>> back = load_idx(save_idx(os.path.join(folder, "x-idx2-ubyte.gz"), x))
    >>> back.dtype, back.tolist()
    (dtype('uint8'), [[0, 1, 2], [3, 4, 5]])
    """
    path = Path(path)
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{path}: save_idx needs a numpy array, got {type(array).__name__} "
                         f"(numpy would choose its dtype; give one, e.g. np.asarray(x, "
                         f"dtype=np.uint8))")
    code = _IDX_CODES.get(array.dtype.newbyteorder("="))
    if code is None or array.dtype.kind not in "iuf":
        names = ", ".join(str(d.newbyteorder("=")) for d in _IDX_DTYPES.values())
        raise ValueError(f"{path}: IDX files cannot hold dtype {array.dtype} "
                         f"(their types: {names}); convert the array, e.g. "
                         f"array.astype(np.uint8) for MNIST images and labels")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"{path}: an IDX file holds 1 to 255 dimensions, got an array of "
                         f"shape {array.shape}")
    if max(array.shape) >= 2**32:
        raise ValueError(f"{path}: IDX dimensions are 32-bit; shape {array.shape} has one "
                         f"of 2**32 or more")
    big = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder(">"))
    payload = struct.pack(f">HBB{array.ndim}I", 0, code, array.ndim, *array.shape)
    if path.name.endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                    filename="") as fh:
            fh.write(payload)
            fh.write(big.tobytes())
    else:
        with open(path, "wb") as fh:
            fh.write(payload)
            fh.write(big.tobytes())
    return path


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
        If a file is malformed, holds NaN or infinite pixels or labels outside 0-9, or
        images and labels disagree in number (each naming the file).
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
        _finite(ipath, images)
        try:
            Y = one_hot(labels, 10)
        except ValueError as err:  # e.g. label 200: MNIST has classes 0 to 9
            raise ValueError(f"{lpath}: {err}") from err
        check_memory(8 * images.size, f"{ipath} as float64")
        X = images.astype(np.float64)[:, None, :, :] / 255.0
        out[split] = (X, Y)
    return out
