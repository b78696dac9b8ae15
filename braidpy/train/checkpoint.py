"""Checkpoint files: the whole training state as NumPy arrays plus a JSON header.

A checkpoint is a zip archive in NumPy's ``.npz`` layout, written atomically:

* ``header.json``: UTF-8 JSON, first member of the archive — ``format``
  (``"braidpy-train-checkpoint"``), ``version`` (:data:`VERSION`), the ``braidpy``
  version that wrote it, and the training state: ``config`` (the :class:`TrainConfig`
  with every MGRIT option written out), ``architecture`` and ``nparams``, ``iteration``
  (the optimizer step), ``epoch``, ``position`` and ``order`` (the batch order),
  ``rng`` (the NumPy bit generator's state), ``optimizer`` (its state),
  ``data_fingerprint`` (of the training and validation data), ``history``, ``best``,
  ``stale`` and ``warm`` (the MGRIT states and adjoints at the fine C-points),
  ``network`` (the :class:`~braidpy.nn.ResNet`'s keyword arguments; ``tstop``, the final
  layer time, was ``T`` in files written before the rename: :func:`load` reads either
  and returns ``tstop``); with
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
import numbers
import zipfile
import zlib
from pathlib import Path
from typing import Any, Dict, Mapping, NoReturn, Tuple

import numpy as np

from .._limits import (INDEX_MAX, LimitError, check_memory, check_npz_headers, loads_json,
                       write_atomically)

__all__ = ["save", "load", "load_training", "read_header", "check_state",
           "check_training_state", "FORMAT", "VERSION", "CheckpointError"]

#: The ``format`` field of every checkpoint header.
FORMAT = "braidpy-train-checkpoint"
#: The header's ``version``: 2 is arrays plus JSON (1 was a pickle, no longer read).
VERSION = 2
HEADER = "header.json"
_LEGACY_FORMAT = b"braidpy-train-checkpoint-1"
_TAGS = ("__array__", "__tuple__", "__items__", "__float__")
#: Keys of the ``network`` object renamed after files were written with the old one
#: (old -> new): such files still load, and :func:`load` returns the new key.
RENAMED_NETWORK_KEYS = {"T": "tstop"}


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


# ------------------------------------------------------------------ files


def save(path: Any, state: Mapping[str, Any], *, what: str = "checkpoint") -> None:
    """Write ``state`` to ``path`` atomically (a temporary file ``path.tmp`` beside it,
    flushed and fsynced, then renamed over ``path``), so that a process killed while
    saving leaves the previous checkpoint intact. The parent folder is created.

    ``path`` must be a regular file or absent: a device (``/dev/full``), a folder or a
    symbolic link raises :class:`braidpy._limits.OutputPathError` (an OSError and a
    ValueError) before anything is written (see :func:`braidpy._limits.write_atomically`).
    A write that fails (a full disk, a file size limit) raises
    :class:`braidpy._limits.OutputWriteError` naming ``what`` (e.g. an option) and the
    file; the previous checkpoint is then the only file left."""
    from .. import __version__

    arrays: Dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "version": VERSION, "braidpy": __version__,
              **_encode(dict(state), arrays)}
    text = json.dumps(header, allow_nan=False, indent=1)

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(HEADER, text.encode("utf-8"))
            for name, array in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array),
                                              allow_pickle=False)

    write_atomically(path, what, write)


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
            # Sizes from the file are checked before anything they announce is read:
            # every member's declared (inflated) size, all of them together, and the
            # header's with what parsing it costs; then at most the declared size is
            # inflated, so an archive whose members inflate past what they declare
            # is refused after that many bytes.
            raw = _read_header_bytes(zf, path)
    except KeyError:
        raise CheckpointError(f"{path} is not a braidpy checkpoint (no {HEADER})") from None
    except LimitError as exc:
        raise CheckpointError(str(exc)) from None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise CheckpointError(f"{path} is not a braidpy checkpoint ({exc})") from exc
    try:
        # Nesting and integer length bounded (Python's decoder would raise
        # RecursionError, or parse an absurd integer for minutes).
        header = loads_json(raw.decode("utf-8"), f"{path} ({HEADER})")
    except LimitError as exc:
        raise CheckpointError(str(exc)) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its {HEADER} is not valid JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a braidpy checkpoint (format "
                              f"{header.get('format') if isinstance(header, dict) else '?'!r})")
    if header.get("version") != VERSION:
        raise CheckpointError(f"{path} is a checkpoint of format version "
                              f"{header.get('version')!r}; this braidpy reads version {VERSION}")
    return path, header


#: The most bytes a checkpoint's JSON header may declare (its history grows by a few
#: hundred bytes a step: 64 MiB holds some 100 000 steps).
HEADER_MAX_BYTES = 64 * 2**20
#: Memory the parsed header takes per byte of JSON text (Python objects), at most.
HEADER_PARSE_FACTOR = 12


def _read_header_bytes(zf: zipfile.ZipFile, path: Path) -> bytes:
    """The header's bytes, after checking the members' declared sizes (each, their sum,
    and the header's against :data:`HEADER_MAX_BYTES` and memory); inflated with a cap."""
    infos = zf.infolist()
    total = sum(max(int(info.file_size), 0) for info in infos)
    check_memory(total, f"{path} (its {len(infos)} members together inflate to {total} "
                        f"bytes)")
    info = zf.getinfo(HEADER)
    size = int(info.file_size)
    if size > HEADER_MAX_BYTES:
        raise LimitError(f"{path} ({HEADER}): declares {size} bytes; braidpy reads "
                         f"checkpoint headers of at most {HEADER_MAX_BYTES} bytes")
    check_memory(size * HEADER_PARSE_FACTOR, f"{path} ({HEADER}, {size} bytes of JSON)")
    with zf.open(info) as member:
        raw = member.read(size + 1)
    if len(raw) != size:
        raise zipfile.BadZipFile(f"{HEADER} holds {len(raw)} bytes, its entry declares "
                                 f"{size}")
    return raw


def read_header(path: Any) -> Dict[str, Any]:
    """The JSON header of a checkpoint as written (arrays as ``{"__array__": name}``)."""
    return _open(path)[1]


def load(path: Any) -> Dict[str, Any]:
    """Read a checkpoint written by :func:`save`: the state with its arrays (no pickle).

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` (a
    ValueError) for anything that is not a checkpoint of this format, old pickles
    included, and for a training state whose fields have the wrong type, lie out of
    range or contradict each other (:func:`check_state`; the message names the file
    and the field).
    """
    path, header = _open(path)
    _check_array_sizes(path)
    with np.load(path, allow_pickle=False) as archive:
        try:
            state = _decode({k: v for k, v in header.items()
                             if k not in ("format", "version", "braidpy")}, archive, str(path))
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. an object array: named with the file
            raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from exc
    check_state(state, str(path))
    _rename_network_keys(state)
    return state


def load_training(path: Any) -> Dict[str, Any]:
    """Read a training checkpoint (one :meth:`braidpy.train.Trainer.save` wrote): what
    :func:`load` reads, then :func:`check_training_state`. Every command that reads a
    checkpoint (``braidpy train --resume``, ``evaluate``, ``predict``) and
    :func:`braidpy.train.load_checkpoint` read through this one function, so a file
    one of them refuses, all refuse, with a :class:`CheckpointError` naming the file
    and the field."""
    state = load(path)
    check_training_state(state, str(path))
    return state


def _rename_network_keys(state: Dict[str, Any]) -> None:
    """Old files' ``network`` keys under their current names (checked: not both)."""
    net = state.get("network")
    if isinstance(net, dict):
        for old, new in RENAMED_NETWORK_KEYS.items():
            if old in net:
                net[new] = net.pop(old)


def _check_array_sizes(path: Path) -> None:
    """Every array's .npy header announces data the archive holds and memory can take,
    checked before NumPy allocates them."""
    try:
        with zipfile.ZipFile(path) as zf:
            check_npz_headers(zf, str(path))
    except LimitError as exc:
        raise CheckpointError(str(exc)) from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from exc


# ------------------------------------------------------------------ fields

#: The bit generators a checkpoint's ``rng`` may name (NumPy's own).
BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _shown(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}, dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Fields:
    """Checks of one state's fields, raising CheckpointError naming file and field."""

    def __init__(self, state: Mapping[str, Any], where: str):
        self.state, self.where = state, where

    def fail(self, field: str, rule: str, value: Any) -> NoReturn:
        raise CheckpointError(f"{self.where}: field {field!r} {rule}, got {_shown(value)}")

    def count(self, field: str, value: Any, low: int = 0, high: int = INDEX_MAX) -> None:
        if not _is_int(value):
            self.fail(field, "must be an int", value)
        if value < low:
            self.fail(field, f"must be an int >= {low}", value)
        if value > high:
            self.fail(field, f"must be an int <= {high}", value)

    def vector(self, field: str, value: Any, n: Any) -> None:
        if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.kind != "f":
            self.fail(field, "must be a 1-D float array", value)
        if _is_int(n) and value.shape != (n,):
            self.fail(field, f"must hold nparams = {n} numbers", value)
        if not np.all(np.isfinite(value)):
            i = int(np.argmin(np.isfinite(value)))
            self.fail(field, f"must be finite (entry {i} is {value[i]})", value)

    def kind(self, field: str, value: Any, types: Any, what: str) -> None:
        if not isinstance(value, types):
            self.fail(field, f"must be {what}", value)


def check_state(state: Mapping[str, Any], where: str = "checkpoint") -> None:
    """Validate the training-state fields a checkpoint holds (each one that is present):
    types and ranges (``iteration``, ``epoch``, ``position``, ``stale`` ints >= 0,
    ``nparams`` >= 1, ``params`` a finite float vector of ``nparams`` numbers, ``order``
    a permutation, ``rng`` a NumPy bit generator's state, ``best``, ``history``,
    ``network``, ``data``, ...), and, for a whole trainer state (``config``, ``params``,
    ``iteration`` and ``history`` present), their consistency: one history record per
    step, ``epoch``/``stale``/``best.iteration`` <= ``iteration``, ``position`` within
    ``order``, ``order`` as long as the training data. Raises CheckpointError naming
    ``where`` (the file) and the field.

    >>> check_state({"iteration": -5}, "c.npz")
    Traceback (most recent call last):
    ...
    braidpy.train.checkpoint.CheckpointError: c.npz: field 'iteration' must be an int >= 0, got -5
    """
    f = _Fields(state, where)
    get = state.get
    for field in ("iteration", "epoch", "position", "stale"):
        if field in state:
            f.count(field, state[field])
    if "nparams" in state:
        f.count("nparams", state["nparams"], 1)
    nparams = get("nparams")
    if "params" in state:
        f.vector("params", state["params"], nparams)
    for field, types, what in (("config", Mapping, "an object"),
                               ("optimizer", Mapping, "an object"),
                               ("warm", Mapping, "an object"),
                               ("history", list, "a list of step records"),
                               ("data_fingerprint", str, "a string"),
                               ("architecture", str, "a string")):
        if field in state:
            f.kind(field, state[field], types, what)
    for k, record in enumerate(get("history") or []):
        if not isinstance(record, Mapping):
            f.fail(f"history[{k}]", "must be an object (a step record)", record)
    if "order" in state and state["order"] is not None:
        order = state["order"]
        if not isinstance(order, np.ndarray) or order.ndim != 1 or order.dtype.kind not in "iu":
            f.fail("order", "must be a 1-D integer array (the batch order)", order)
        if order.size and order.min() < 0:
            f.fail("order", "must hold sample indices >= 0", order)
    oneshot = get("oneshot")
    if oneshot is not None and not (isinstance(oneshot, list) and len(oneshot) == 2 and
                                    all(_is_int(m) and 1 <= m <= INDEX_MAX for m in oneshot)):
        f.fail("oneshot", "must be null or a pair [m1, m2] of ints >= 1", oneshot)
    if "rng" in state:
        _check_rng(f, state["rng"])
    if "best" in state:
        _check_best(f, state["best"], nparams)
    if "data" in state:
        data = state["data"]
        f.kind("data", data, Mapping, "an object of array shapes")
        for name, shape in data.items():
            if not isinstance(shape, list) or not all(_is_int(d) and 0 <= d <= INDEX_MAX
                                                      for d in shape):
                f.fail(f"data.{name}", "must be a list of sizes >= 0", shape)
    if "network" in state:
        _check_network(f, state["network"])
    if all(k in state for k in ("config", "params", "iteration", "history")):
        _check_consistency(f, state)


def _check_rng(f: _Fields, rng: Any) -> None:
    if not isinstance(rng, Mapping) or rng.get("bit_generator") not in BIT_GENERATORS:
        f.fail("rng", f"must be the state of a NumPy bit generator "
                      f"({', '.join(BIT_GENERATORS)})", rng)
    try:  # NumPy validates the state itself (an allowed name chooses the class)
        getattr(np.random, rng["bit_generator"])().state = dict(rng)
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        f.fail("rng", f"is not a valid {rng['bit_generator']} state ({exc})", rng)


def _check_best(f: _Fields, best: Any, nparams: Any) -> None:
    f.kind("best", best, Mapping, "an object (accuracy, iteration, params)")
    acc, it, params = best.get("accuracy"), best.get("iteration"), best.get("params")
    if acc is not None and (not isinstance(acc, (int, float)) or isinstance(acc, bool)
                            or not 0.0 <= acc <= 1.0):
        f.fail("best.accuracy", "must be null or a number in [0, 1]", acc)
    if it is not None:
        f.count("best.iteration", it)
    if params is not None:
        f.vector("best.params", params, nparams)


def _check_network(f: _Fields, net: Any) -> None:
    f.kind("network", net, Mapping, "an object (the ResNet's arguments)")
    shape = net.get("input_shape")
    if "input_shape" in net and (not isinstance(shape, list) or len(shape) not in (1, 3)
                                 or not all(_is_int(d) and 1 <= d <= 2**31 - 1
                                            for d in shape)):
        f.fail("network.input_shape", "must be 1 or 3 sizes >= 1", shape)
    for name in ("nclasses", "width", "nlayers", "kernel"):
        if name in net:
            f.count(f"network.{name}", net[name], 1, 2**31 - 1)
    for old, new in RENAMED_NETWORK_KEYS.items():
        if old in net and new in net:
            f.fail(f"network.{old}", f"is the old name of 'network.{new}', which is there "
                                     f"too (a file holds one of them)", net[old])
    for name in ("tstop", "T"):  # the final layer time, under its current and old key
        tstop = net.get(name)
        if name in net and (isinstance(tstop, bool) or not isinstance(tstop, (int, float))
                            or not math.isfinite(tstop) or tstop <= 0):
            f.fail(f"network.{name}", "must be a finite number > 0", tstop)
    for name in ("activation", "opening"):
        if net.get(name) is not None and not isinstance(net[name], str):
            f.fail(f"network.{name}", "must be a string", net[name])
    width, nlayers = net.get("width"), net.get("nlayers")
    if _is_int(width) and _is_int(nlayers):  # before anyone builds it from these
        kernel = net.get("kernel", 1) if isinstance(shape, list) and len(shape) == 3 else 1
        try:
            check_memory(8 * nlayers * width * width * int(kernel) ** 2,
                         f"{f.where}: field 'network' ({nlayers} layers of width {width})")
        except LimitError as exc:
            raise CheckpointError(str(exc)) from None


def _check_consistency(f: _Fields, state: Mapping[str, Any]) -> None:
    iteration, history = state["iteration"], state["history"]
    if len(history) != iteration:
        f.fail("history", f"must hold one record per step, iteration = {iteration}",
               f"{len(history)} records")
    for field in ("epoch", "stale"):
        if _is_int(state.get(field)) and state[field] > iteration:
            f.fail(field, f"cannot exceed iteration = {iteration}", state[field])
    best = state.get("best")
    if isinstance(best, Mapping) and _is_int(best.get("iteration")) and \
            best["iteration"] > iteration:
        f.fail("best.iteration", f"cannot exceed iteration = {iteration}", best["iteration"])
    order, position = state.get("order"), state.get("position", 0)
    n = len(order) if isinstance(order, np.ndarray) else 0
    if _is_int(position) and position > n:
        f.fail("position", f"must lie within the batch order ({n} samples)", position)
    if isinstance(order, np.ndarray):
        if not np.array_equal(np.sort(order), np.arange(order.size)):
            f.fail("order", "must be a permutation of the sample indices", order)
        train = (state.get("data") or {}).get("train") if isinstance(state.get("data"),
                                                                    Mapping) else None
        if isinstance(train, list) and train and train[0] != order.size:
            f.fail("order", f"must order the {train[0]} training samples (field "
                            f"'data.train')", order)



# ------------------------------------------------------------------ a whole training state

#: The fields every training checkpoint holds (``oneshot`` and ``data`` are optional:
#: older files were written without them; ``easgd_groups`` comes with EASGD).
TRAINING_FIELDS = ("config", "nparams", "architecture", "iteration", "epoch", "position",
                   "order", "rng", "params", "optimizer", "history", "best", "stale",
                   "warm", "data_fingerprint", "network")
#: Each optimizer's state fields: vectors of one number per parameter (or null), lists
#: of such vectors, and counts.
OPTIMIZER_FIELDS = {
    "sgd": {"velocity": "vector"},
    "adam": {"m": "vector", "v": "vector", "t": "count"},
    "lbfgs": {"s": "vectors", "y": "vectors", "prev_params": "vector",
              "prev_grad": "vector"},
    "easgd": {"center": "vector", "velocity": "vector", "steps": "count"},
}


def check_training_state(state: Mapping[str, Any], where: str = "checkpoint") -> None:
    """Validate a whole training state (what :meth:`braidpy.train.Trainer.state` returns
    and a training checkpoint holds), raising :class:`CheckpointError` naming ``where``
    and the field: every field of :data:`TRAINING_FIELDS` present; the checks of
    :func:`check_state`; ``config`` a valid :class:`~braidpy.train.TrainConfig`;
    ``network`` complete, buildable, and the network ``architecture`` and ``nparams``
    describe; ``params``, ``best.params``, the optimizer's arrays and EASGD's groups
    float64 vectors of ``nparams`` finite numbers; the optimizer's state complete for
    ``config.optimizer``; ``warm`` the MGRIT states of this network (finite float64
    arrays, one per layer time in ``0..nlayers``).

    >>> check_training_state({"iteration": 0}, "c.npz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy.train.checkpoint.CheckpointError: c.npz: missing field 'config' (a training checkpoint holds ...
    """
    f = _Fields(state, where)
    if not isinstance(state, Mapping):
        f.fail("(top level)", "must be an object", state)
    missing = [k for k in TRAINING_FIELDS if k not in state]
    if missing:
        raise CheckpointError(
            f"{where}: missing field {missing[0]!r} (a training checkpoint holds "
            f"{', '.join(TRAINING_FIELDS)}){'' if len(missing) == 1 else f'; also missing: ' + ', '.join(repr(m) for m in missing[1:])}")
    check_state(state, where)
    nparams = state["nparams"]
    config = _check_config(f, state["config"])
    net = _check_network_builds(f, state)
    for field in ("params",):
        _float64(f, field, state[field])
    best = state["best"]
    for key in ("accuracy", "iteration", "params"):
        if key not in best:
            f.fail("best", f"must hold {key!r}", best)
    if best["params"] is not None:
        _float64(f, "best.params", best["params"])
    _check_optimizer_state(f, state["optimizer"], config.optimizer, nparams)
    groups = state.get("easgd_groups")
    if config.optimizer == "easgd" or groups is not None:
        _check_easgd_groups(f, groups, nparams)
    _check_warm(f, state["warm"], net)


def _float64(f: _Fields, field: str, value: Any) -> None:
    if not isinstance(value, np.ndarray) or value.dtype != np.float64:
        f.fail(field, "must be an array of float64 (the parameters' precision)", value)


def _check_config(f: _Fields, config: Mapping[str, Any]) -> Any:
    from .trainer import TrainConfig  # the dataclass validates its own fields

    if "optimizer" in config and config["optimizer"] == "easgd-async":
        f.fail("config.optimizer", "cannot be 'easgd-async' (no checkpoint resumes it)",
               config["optimizer"])
    from .._options import Options

    given = dict(config)
    mgrit = given.get("mgrit")
    try:
        if isinstance(mgrit, Mapping):  # written out whole: the trainer's own choices too
            Options.coerce(dict(mgrit))
            given["mgrit"] = {k: v for k, v in mgrit.items() if k not in ("skip", "seq_soln")}
        return TrainConfig(**given)
    except (TypeError, ValueError, OverflowError) as exc:
        text = str(exc)
        name = next((k for k in sorted(config, key=len, reverse=True)
                     if text.startswith(str(k)) or f"{k!r}" in text or f" {k} " in text
                     or f" {k}=" in text), None)
        raise CheckpointError(f"{f.where}: field 'config{'.' + name if name else ''}' is "
                              f"not a valid training setting ({text})") from None


def _check_network_builds(f: _Fields, state: Mapping[str, Any]) -> Any:
    from ..nn import ResNet

    spec = state["network"]
    names = ("input_shape", "nclasses", "width", "nlayers", "tstop", "activation",
             "opening", "opening_activation", "kernel")
    for name in names:
        if name not in spec and not (name == "tstop" and "T" in spec):
            f.fail("network", f"must hold {name!r} (it holds {', '.join(spec) or 'nothing'})",
                   dict(spec))
    extra = [k for k in spec if k not in names and k not in RENAMED_NETWORK_KEYS]
    if extra:
        f.fail(f"network.{extra[0]}", "is not an argument of the network", spec[extra[0]])
    args = {k: spec[k] for k in names if k in spec}
    if "tstop" not in args:
        args["tstop"] = spec["T"]
    try:
        net = ResNet(tuple(args.pop("input_shape")), args.pop("nclasses"), **args)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{f.where}: field 'network' does not describe a network "
                              f"({exc})") from None
    if net.nparams != state["nparams"]:
        f.fail("nparams", f"must be the network's parameter count ({net.nparams}, field "
                          f"'network')", state["nparams"])
    if net.describe() != state["architecture"]:
        f.fail("architecture", f"must describe the network of field 'network' "
                               f"({net.describe()!r})", state["architecture"])
    return net


def _check_optimizer_state(f: _Fields, opt: Mapping[str, Any], name: str,
                           nparams: int) -> None:
    fields = OPTIMIZER_FIELDS.get(name)
    if fields is None:
        return
    for key, kind in fields.items():
        field = f"optimizer.{key}"
        if key not in opt:
            f.fail("optimizer", f"must hold {key!r} (the {name} optimizer's state: "
                                f"{', '.join(fields)})", dict(opt))
        value = opt[key]
        if kind == "count":
            f.count(field, value)
        elif kind == "vector":
            if value is not None:
                f.vector(field, value, nparams)
                _float64(f, field, value)
        else:
            if not isinstance(value, list):
                f.fail(field, "must be a list of vectors", value)
            for i, v in enumerate(value):
                f.vector(f"{field}[{i}]", v, nparams)
                _float64(f, f"{field}[{i}]", v)
    extra = [k for k in opt if k not in fields]
    if extra:
        f.fail(f"optimizer.{extra[0]}", f"is not part of the {name} optimizer's state",
               opt[extra[0]])
    if name == "lbfgs" and len(opt["s"]) != len(opt["y"]):
        f.fail("optimizer.y", f"must hold as many pairs as 'optimizer.s' ({len(opt['s'])})",
               f"{len(opt['y'])} vectors")
    if name == "adam" and (opt["m"] is None) != (opt["t"] == 0):
        f.fail("optimizer.t", "must be 0 exactly when 'optimizer.m' is null (no step "
                              "taken)", opt["t"])


def _check_easgd_groups(f: _Fields, groups: Any, nparams: int) -> None:
    if not isinstance(groups, Mapping) or not isinstance(groups.get("params"), list) or \
            not isinstance(groups.get("velocity"), list) or not groups["params"] or \
            len(groups["params"]) != len(groups["velocity"]):
        f.fail("easgd_groups", "must be an object of two equally long lists 'params' and "
                               "'velocity' (one entry per data group)", groups)
    for g, (p, v) in enumerate(zip(groups["params"], groups["velocity"])):
        f.vector(f"easgd_groups.params[{g}]", p, nparams)
        _float64(f, f"easgd_groups.params[{g}]", p)
        if v is not None:
            f.vector(f"easgd_groups.velocity[{g}]", v, nparams)
            _float64(f, f"easgd_groups.velocity[{g}]", v)


def _check_warm(f: _Fields, warm: Mapping[str, Any], net: Any) -> None:
    if not warm:
        return
    if "data_groups" in warm:
        groups = warm["data_groups"]
        if not isinstance(groups, list) or not groups:
            f.fail("warm.data_groups", "must be a list of the data groups' states", groups)
        for g, group in enumerate(groups):
            if not isinstance(group, Mapping):
                f.fail(f"warm.data_groups[{g}]", "must be an object", group)
            _check_warm_group(f, group, net, f"warm.data_groups[{g}]")
        return
    _check_warm_group(f, warm, net, "warm")


def _check_warm_group(f: _Fields, warm: Mapping[str, Any], net: Any, where: str) -> None:
    shape = warm.get("batch_shape")
    if shape is not None and (not isinstance(shape, (tuple, list)) or not shape or
                              not all(_is_int(d) and 1 <= d <= INDEX_MAX for d in shape)):
        f.fail(f"{where}.batch_shape", "must be null or a tuple of sizes >= 1", shape)
    extra = [k for k in warm if k not in ("primal", "adjoint", "batch_shape")]
    if extra:
        f.fail(f"{where}.{extra[0]}", "is not part of the MGRIT states", warm[extra[0]])
    first: Any = None
    for key in ("primal", "adjoint"):
        states = warm.get(key, {})
        if not isinstance(states, Mapping):
            f.fail(f"{where}.{key}", "must map layer times to states", states)
        for n, u in states.items():
            field = f"{where}.{key}[{n!r}]"
            if not _is_int(n) or not 0 <= n <= net.nlayers:
                f.fail(field, f"must be keyed by a layer time in 0..{net.nlayers}", n)
            if not isinstance(u, np.ndarray) or u.dtype != np.float64:
                f.fail(field, "must be an array of float64", u)
            if u.ndim < 1:
                f.fail(field, "must hold one state per sample (an array of 1 or more "
                              "dimensions)", u)
            if shape is not None and u.shape[0] != shape[0]:
                f.fail(field, f"must hold the batch's {shape[0]} samples (field "
                              f"'{where}.batch_shape')", u)
            if first is None:
                first = (field, u.shape)
            elif u.shape != first[1]:
                f.fail(field, f"must have the shape of every other state ({first[1]}, "
                              f"field {first[0]!r})", u)
            if not np.all(np.isfinite(u)):
                f.fail(field, "must be finite", u)
