"""Checkpoint files: the whole training state as NumPy arrays plus a JSON header.

A checkpoint is a zip archive in NumPy's ``.npz`` layout, written atomically:

* ``header.json``: UTF-8 JSON, first member of the archive — ``format``
  (``"braidpy-train-checkpoint"``), ``version`` (:data:`VERSION`), the ``braidpy``
  version that wrote it, and the training state: ``config`` (the :class:`TrainConfig`
  with every MGRIT option written out), ``architecture`` and ``nparams``, ``iteration``
  (the optimizer step), ``epoch``, ``position`` and ``order`` (the batch order),
  ``rng`` (the NumPy bit generator's state), ``optimizer`` (its state),
  ``data_fingerprint`` (of the training and validation data), ``history``, ``best``,
  ``stale`` and ``warm`` (the MGRIT states and adjoints at the fine C-points); with
  synchronous EASGD also ``easgd_groups`` (every data group's parameters and velocity;
  ``params`` is then the centre variable).
* ``a0.npy``, ``a1.npy``, …: every array of that state, in NumPy's ``.npy`` format. The
  header refers to them as ``{"__array__": "a0"}``.

The header is strict JSON; values JSON has no type for are tagged objects: an array
``{"__array__": name}``, a tuple ``{"__tuple__": [...]}``, a dict with keys that are not
strings ``{"__items__": [[key, value], ...]}`` and a non-finite float
``{"__float__": "nan" | "inf" | "-inf"}``. Finite floats are written with Python's
shortest round-tripping repr, so a resumed run continues bit for bit.

Reading never unpickles anything: arrays are loaded with ``allow_pickle=False`` and the
header with :func:`json.loads`, so a crafted file cannot run code. Checkpoints of
braidpy 0.x before this format (pickles) are refused with a message saying why.

:func:`save` writes a temporary file beside the target, flushes and fsyncs it, then
renames it over the target (and fsyncs the folder), so a process killed at any moment
leaves either the previous checkpoint or the new one, complete.

Examples
--------
>>> import os, tempfile
>>> import numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "run.ckpt")
>>> save(path, {"iteration": 3, "params": np.arange(3.0), "loss": float("nan")})
>>> state = load(path)
>>> state["iteration"], state["params"], state["loss"]
(3, array([0., 1., 2.]), nan)
>>> read_header(path)["params"]
{'__array__': 'a0'}
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

import numpy as np

__all__ = ["save", "load", "read_header", "FORMAT", "VERSION", "CheckpointError"]

#: The ``format`` field of every checkpoint header.
FORMAT = "braidpy-train-checkpoint"
#: The header's ``version``: 2 is arrays plus JSON (1 was a pickle, no longer read).
VERSION = 2
HEADER = "header.json"
_LEGACY_FORMAT = b"braidpy-train-checkpoint-1"
_TAGS = ("__array__", "__tuple__", "__items__", "__float__")


class CheckpointError(ValueError):
    """A file that is not a checkpoint this braidpy can read (the message says why)."""


# ------------------------------------------------------------------ encoding


def _encode(value: Any, arrays: Dict[str, np.ndarray]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else {"__float__": str(x)}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("checkpoint arrays cannot hold Python objects")
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {"__array__": name}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [_encode(v, arrays) for v in value]
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value) and not any(k in _TAGS for k in value):
            return {k: _encode(v, arrays) for k, v in value.items()}
        return {"__items__": [[_encode(k, arrays), _encode(v, arrays)]
                              for k, v in value.items()]}
    raise TypeError(f"cannot write a {type(value).__name__} to a checkpoint")


def _decode(value: Any, arrays: Any, where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays, where) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, inner), = value.items()
        if tag == "__array__":
            if not isinstance(inner, str) or f"{inner}.npy" not in arrays.zip.namelist():
                raise CheckpointError(f"{where}: the header refers to a missing array {inner!r}")
            return arrays[inner]
        if tag == "__tuple__":
            return tuple(_decode(v, arrays, where) for v in inner)
        if tag == "__items__":
            return {_decode(k, arrays, where): _decode(v, arrays, where) for k, v in inner}
        if tag == "__float__":
            if inner not in ("nan", "inf", "-inf"):
                raise CheckpointError(f"{where}: bad non-finite float {inner!r} in the header")
            return float(inner)
    return {k: _decode(v, arrays, where) for k, v in value.items()}


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------ files


def save(path: Any, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a temporary file ``path.tmp`` beside it,
    flushed and fsynced, then renamed over ``path``), so that a process killed while
    saving leaves the previous checkpoint intact. The parent folder is created."""
    from .. import __version__

    path = Path(path)
    arrays: Dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "version": VERSION, "braidpy": __version__,
              **_encode(dict(state), arrays)}
    text = json.dumps(header, allow_nan=False, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(HEADER, text.encode("utf-8"))
            for name, array in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array),
                                              allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_folder(path.parent)


def _open(path: Any) -> Tuple[Path, Dict[str, Any]]:
    """(path, raw header); refuses anything else, pickles first."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with open(path, "rb") as f:
        start = f.read(64)
    if not start.startswith(b"PK\x03\x04"):
        if start[:1] == b"\x80" or _LEGACY_FORMAT in start:
            raise CheckpointError(
                f"{path} is a pickle (a checkpoint of an older braidpy, or not one at all); "
                f"braidpy no longer reads pickled checkpoints because loading a pickle can "
                f"run arbitrary code. Checkpoints are now arrays plus a JSON header "
                f"(format {FORMAT} version {VERSION}); re-run the training to write one")
        raise CheckpointError(f"{path} is not a braidpy checkpoint (not a zip archive of "
                              f"arrays and a JSON header)")
    try:
        with zipfile.ZipFile(path) as zf:
            raw = zf.read(HEADER)
    except KeyError:
        raise CheckpointError(f"{path} is not a braidpy checkpoint (no {HEADER})") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(f"{path} is not a braidpy checkpoint ({exc})") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its {HEADER} is not valid JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a braidpy checkpoint (format "
                              f"{header.get('format') if isinstance(header, dict) else '?'!r})")
    if header.get("version") != VERSION:
        raise CheckpointError(f"{path} is a checkpoint of format version "
                              f"{header.get('version')!r}; this braidpy reads version {VERSION}")
    return path, header


def read_header(path: Any) -> Dict[str, Any]:
    """The JSON header of a checkpoint as written (arrays as ``{"__array__": name}``)."""
    return _open(path)[1]


def load(path: Any) -> Dict[str, Any]:
    """Read a checkpoint written by :func:`save`: the state with its arrays (no pickle).

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` (a
    ValueError) for anything that is not a checkpoint of this format, old pickles
    included.
    """
    path, header = _open(path)
    with np.load(path, allow_pickle=False) as archive:
        try:
            return _decode({k: v for k, v in header.items()
                            if k not in ("format", "version", "braidpy")}, archive, str(path))
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. an object array: named with the file
            raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from exc

