"""Limits on what braidpy accepts from a user, a file or a peer, checked before anything
is allocated, and the one safe way its writers open their output files.

Sizes (a time grid's ``ntime``, an IDX or ``.npy`` shape, a JSON header's nesting and
integers, a command line's counts) are compared with the compiled core's integer types
and with an estimate of the memory they need; a refusal is a :class:`LimitError` (a
``ValueError``) that names the option or file and the limit. Output targets
(checkpoints, logs, CSV, figures, calibrations) must be regular files or absent:
:func:`check_output_file` refuses devices, folders, FIFOs and symbolic links, and
:func:`open_output` / :func:`write_atomically` open them without following a link.

The limits come from the core (``csrc/core``, read-only here): its counts and options
are C ``int`` (:data:`INT_MAX`), its time indices ``braid::Index = std::int64_t``
(:data:`INDEX_MAX`), and every rank keeps the whole fine time grid (and the coarse
ones) as ``std::vector<double>``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import stat
import struct
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence

import numpy as np

__all__ = ["INT_MAX", "INDEX_MAX", "GRID_BYTES_PER_POINT", "JSON_MAX_DEPTH",
           "JSON_MAX_INT_DIGITS", "LimitError", "OutputPathError", "available_memory",
           "check_memory", "check_count", "count_argument", "check_ntime", "shape_bytes",
           "check_npy_header", "check_finite", "training_bytes", "check_training_size",
           "loads_json", "plain_number", "check_output_file", "open_output", "write_atomically",
           "OutputWriteError", "OutputFile"]

#: The core's counts and options: C ``int`` (csrc/core/options.hpp, the MPI rank count).
INT_MAX = 2**31 - 1
#: The core's time indices: ``braid::Index`` = ``std::int64_t`` (csrc/core/interfaces.hpp).
INDEX_MAX = 2**63 - 1
#: Bytes braidpy holds per fine time point while it builds a Core, on every rank: the
#: grid in NumPy (8) and as the Python list handed to the core (8 + a 24-byte float
#: object), the core's copy of it and of the coarse grids (8 + 8), its state slots on
#: every level (8 + 24 / cfactor), and temporaries (rounded up).
GRID_BYTES_PER_POINT = 96
#: Deepest nesting of arrays and objects a JSON file braidpy reads may have (a
#: checkpoint header needs about 8; Python's decoder recurses and would raise
#: RecursionError, naming nothing, near 1000).
JSON_MAX_DEPTH = 100
#: Most digits of a JSON integer (2**128, a random generator's 128-bit state, has 39);
#: Python parses longer ones in quadratic time, and refuses those over 4300 digits.
JSON_MAX_INT_DIGITS = 40


class LimitError(ValueError):
    """A size beyond what braidpy (or this machine) can hold; the message names the option
    or file and the limit."""


class OutputPathError(OSError, ValueError):
    """An output target that is not a regular file or absent (a device, a folder, a FIFO,
    a symbolic link); an ``OSError`` and a ``ValueError`` (a bad argument)."""


class OutputWriteError(OSError):
    """A file braidpy writes could not be written to the end (a full disk, a file size
    limit, an I/O error). The message names the option or kind of file, the file, the
    system's reason and what was kept; ``errno`` is the system's."""

    def __init__(self, what: str, path: Any, exc: OSError, kept: str):
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"{what} {path}: could not write it ({reason}); {kept}")
        self.errno, self.strerror, self.filename = exc.errno, exc.strerror, str(path)
        self.what, self.reason, self.kept = what, exc, kept

    def named(self, what: str) -> "OutputWriteError":
        """The same failure named by ``what`` (a command-line option)."""
        return OutputWriteError(what, self.filename, self.reason, self.kept)

    def __str__(self) -> str:
        return str(self.args[0])


# ------------------------------------------------------------------ memory


def _meminfo_available() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _cgroup_available() -> Optional[int]:
    """What the cgroup (v2, then v1) still allows this process, or None."""
    for limit_file, usage_file in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file, encoding="ascii") as f:
                text = f.read().strip()
            if text == "max":
                return None
            limit = int(text)
            with open(usage_file, encoding="ascii") as f:
                used = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit >= 2**60:  # v1's "no limit"
            return None
        return max(limit - used, 0)
    return None


def _address_space_available() -> Optional[int]:
    """What ``ulimit -v`` (RLIMIT_AS) still allows this process, or None."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", encoding="ascii") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(soft - used, 0)
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        return None


def available_memory() -> Optional[int]:
    """Bytes this process can still allocate, as far as the system says (the least of
    MemAvailable, the cgroup's limit and ``ulimit -v``), or None when unknown."""
    known = [v for v in (_meminfo_available(), _cgroup_available(),
                         _address_space_available()) if v is not None]
    return min(known) if known else None


def _size(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} bytes"


def check_memory(nbytes: int, what: str, hint: str = "") -> None:
    """LimitError when ``nbytes`` (an estimate made before allocating) exceed the memory
    this process can still allocate. ``what`` names the option or file.

    >>> check_memory(1024, "ntime = 10")
    >>> check_memory(2**80, "ntime = 2**77")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy._limits.LimitError: ntime = 2**77 needs about 1.1e+12 TiB of memory, more than...
    """
    available = available_memory()
    if available is not None and nbytes > available:
        raise LimitError(f"{what} needs about {_size(nbytes)} of memory, more than the "
                         f"{_size(available)} this process can allocate here"
                         + (f"; {hint}" if hint else ""))


# ------------------------------------------------------------------ counts


def _is_int(v: Any) -> bool:
    import numbers

    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def check_count(value: Any, name: str, *, low: int = 0, high: int = INDEX_MAX) -> int:
    """``value`` as an int in ``[low, high]``, or a TypeError / LimitError naming ``name``
    and the bound.

    >>> check_count(5, "layers", low=1)
    5
    >>> check_count(2**40, "-P", low=1, high=INT_MAX)
    Traceback (most recent call last):
    ...
    braidpy._limits.LimitError: -P must be <= 2147483647, got 1099511627776
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r}")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if value > high:
        raise LimitError(f"{name} must be <= {high}, got {value}")
    return value


def plain_number(text: str) -> str:
    """``text`` if it is a number written in ASCII (Python's ``int()`` and ``float()``
    also take other scripts' digits, ``٣`` for 3, full-width ``１``, and ``1_000``), else
    a ValueError naming it; for the command line's converters.

    >>> plain_number("2.5e3")
    '2.5e3'
    >>> plain_number("٣")
    Traceback (most recent call last):
    ...
    ValueError: expected a number in ASCII digits, got '٣'
    """
    if not text.isascii() or "_" in text:
        raise ValueError(f"expected a number in ASCII digits, got {text!r}")
    return text


def count_argument(low: int = 1, high: int = INT_MAX, why: str = ""
                   ) -> Callable[[str], int]:
    """An argparse ``type=`` converter: an integer in ``[low, high]`` written in digits.
    Its messages are braidpy.cli's (argparse puts the option's name before them), and
    the upper bound's says ``why``.

    >>> count_argument(1, 2**20)("64")
    64
    >>> count_argument(1, 2**20, "the core's limit")("2000000")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be <= 1048576 (the core's limit), got 2000000
    >>> count_argument(1, 2**20)("1e12")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer, got '1e12'
    """
    def convert(text: str) -> int:
        digits = text.strip()
        digits = digits[1:] if digits[:1] in "+-" else digits
        if not (digits.isascii() and digits.isdigit()):  # not ٣ (int() takes it)
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        if len(digits) > 30 or int(text) > high:  # int() of 4300+ digits would raise
            raise argparse.ArgumentTypeError(f"must be <= {high}{f' ({why})' if why else ''}"
                                             f", got {text.strip()}")
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return convert


def check_ntime(ntime: Any, tstart: float, tstop: float, name: str = "ntime", *,
                uniform: bool = True) -> int:
    """``ntime`` checked before a time grid is made: an int in 1 .. INDEX_MAX - 1 (its
    ntime + 1 points are indexed by the core's int64), for which tstart..tstop holds
    ntime + 1 distinct floating-point numbers (else the times of a ``uniform`` grid could
    not increase; the core checks the grid it gets exactly), and whose grid (about
    :data:`GRID_BYTES_PER_POINT` bytes a point on every rank) fits in memory. The caller
    has checked tstart < tstop, both finite."""
    if isinstance(ntime, bool) or not _is_int(ntime) or ntime < 1:
        raise ValueError(f"{name} must be an int >= 1, got {ntime!r}")
    ntime = int(ntime)
    if ntime > INDEX_MAX - 1:
        raise LimitError(f"{name} must be <= {INDEX_MAX - 1} (the core indexes the "
                         f"{name} + 1 time points with int64), got {ntime}")
    doubles = _ordinal(float(tstop)) - _ordinal(float(tstart)) + 1
    if uniform and ntime + 1 > doubles:
        raise LimitError(f"{name} = {ntime} needs {ntime + 1} distinct times, but only "
                         f"{doubles} floating-point numbers lie between tstart={tstart!r} "
                         f"and tstop={tstop!r}")
    check_memory(GRID_BYTES_PER_POINT * (ntime + 1), f"{name} = {ntime}",
                 f"every rank holds the time grid, about {GRID_BYTES_PER_POINT} bytes per "
                 f"time point besides the states")
    return ntime


def _ordinal(x: float) -> int:
    """The position of a double among all doubles (monotone: consecutive doubles differ
    by 1), from its bits."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF)


def shape_bytes(shape: Sequence[int], itemsize: int) -> int:
    """Bytes of an array of ``shape``, in Python integers (no int64 overflow)."""
    return math.prod(int(d) for d in shape) * int(itemsize)


def check_npy_header(f: IO[bytes], available: int, where: str) -> int:
    """Read a ``.npy`` header from ``f`` (positioned at its start) and check that the
    data it announces are present (``available`` bytes in the file or archive member)
    and fit in memory, before NumPy allocates them. Returns the data's size in bytes."""
    from numpy.lib import format as npformat

    start = f.tell()
    try:
        version = npformat.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = npformat.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = npformat.read_array_header_2_0(f)
        else:
            return 0  # another version: NumPy's own reader decides (and names its error)
    except (ValueError, EOFError, OSError):
        return 0  # not an .npy header: NumPy's reader raises, the caller names the file
    header = f.tell() - start
    need = shape_bytes(shape, dtype.itemsize)
    if need > available - header:
        raise LimitError(f"{where}: its header announces an array of shape {tuple(shape)} "
                         f"({dtype}), {need} bytes, but it holds {max(available - header, 0)}")
    check_memory(need, where)
    return need


def check_npz_headers(zf: Any, where: str) -> None:
    """check_npy_header for every array of an open ``zipfile.ZipFile`` (an .npz archive
    or a checkpoint): each announces data its member holds and memory can take."""
    for info in zf.infolist():
        if info.filename.endswith(".npy"):
            with zf.open(info) as member:
                check_npy_header(member, info.file_size,
                                 f"{where} (array {info.filename[:-4]!r})")


def check_finite(data: Any, where: str) -> Any:
    """``data`` (an array whose first axis indexes samples), or a ValueError naming
    ``where`` (a file, an argument) and the first sample holding NaN or an infinity:
    such inputs would train, evaluate or predict nonsense (training would report them
    as a diverged MGRIT solve). Integer arrays pass unread.

    >>> check_finite(np.array([[1.0, 2.0], [np.nan, 0.0]]), "x.npy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: x.npy: sample 1 (row 2 of its data) holds nan; braidpy needs finite numbers...
    """
    a = np.asarray(data)
    if a.dtype.kind not in "fc" or a.size == 0:
        return data
    ok = np.isfinite(a)
    if ok.all():
        return data
    if a.ndim == 0:
        raise ValueError(f"{where}: holds {a[()]}; braidpy needs finite numbers")
    rows = ok.reshape(a.shape[0], -1).all(axis=1)
    i = int(np.argmin(rows))
    bad = a[i][~ok[i]] if a.ndim > 1 else a[i:i + 1]
    raise ValueError(f"{where}: sample {i} (row {i + 1} of its data) holds "
                     f"{bad.ravel()[0]}; braidpy needs finite numbers (NaN or infinity "
                     f"would train and predict nonsense)")


def training_bytes(samples: int, state_numbers: int, nlayers: int, width: int,
                   nparams: Optional[int] = None) -> int:
    """A lower bound on the memory of training a ResNet: the states of every layer of a
    batch of ``samples`` (forward and adjoint, float64), and the parameters with their
    gradient and optimizer state (``nparams``, or ``nlayers * (width**2 + width)``)."""
    params = nparams if nparams is not None else int(nlayers) * (int(width) ** 2 + int(width))
    states = 2 * int(samples) * int(state_numbers) * (int(nlayers) + 1)
    return 8 * (states + 4 * params)


def check_training_size(*, samples: int, state_numbers: int, nlayers: int, width: int,
                        nparams: Optional[int] = None, what: str = "the network") -> None:
    """LimitError, naming ``what`` and the sizes, when :func:`training_bytes` of them
    exceeds this process's memory; call it after parsing the sizes, before loading data.

    >>> check_training_size(samples=100, state_numbers=8, nlayers=32, width=8)
    >>> check_training_size(samples=5000, state_numbers=2**20, nlayers=2**20,
    ...                     width=2**10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy._limits.LimitError: the network (5000 samples of 1048576 numbers, ...
    """
    nbytes = training_bytes(samples, state_numbers, nlayers, width, nparams)
    check_memory(nbytes, f"{what} ({samples} samples of {state_numbers} numbers, "
                         f"{nlayers} layers of width {width})",
                 "use fewer samples per batch, layers or a smaller width, or more ranks")


# ------------------------------------------------------------------ JSON

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _json_depth(text: str) -> int:
    """Deepest nesting of ``[`` and ``{`` outside strings (a linear scan)."""
    # Memory: the text without its strings, one byte a character for the steps, and a
    # running sum a block at a time (a whole int64 sum took 25 bytes a character).
    bare = _STRING.sub('""', text).encode("utf-8", "replace")
    if not bare:
        return 0
    a = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(a, (ord("["), ord("{"))).view(np.int8)
    step -= np.isin(a, (ord("]"), ord("}"))).view(np.int8)
    deepest, level, block = 0, 0, 1 << 20
    for start in range(0, step.size, block):
        running = np.cumsum(step[start:start + block], dtype=np.int64)
        deepest = max(deepest, level + int(running.max()))
        level += int(running[-1])
    return deepest


def loads_json(text: str, where: str, *, constants: bool = False) -> Any:
    """``json.loads(text)`` with limits, errors naming ``where`` (the file): nesting at
    most :data:`JSON_MAX_DEPTH`, integers of at most :data:`JSON_MAX_INT_DIGITS` digits,
    no number that overflows to infinity, and (unless ``constants``) none of the
    non-standard ``NaN``/``Infinity`` tokens. Raises LimitError for a limit,
    ``json.JSONDecodeError`` (a ValueError) for text that is not JSON.

    >>> loads_json('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> loads_json("[" * 200 + "]" * 200, "x.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy._limits.LimitError: x.json: JSON nested 200 deep; braidpy reads at most 100
    """
    depth = _json_depth(text)
    if depth > JSON_MAX_DEPTH:
        raise LimitError(f"{where}: JSON nested {depth} deep; braidpy reads at most "
                         f"{JSON_MAX_DEPTH}")

    def parse_int(s: str) -> int:
        if len(s.lstrip("-")) > JSON_MAX_INT_DIGITS:
            raise LimitError(f"{where}: a JSON integer of {len(s.lstrip('-'))} digits; "
                             f"braidpy reads at most {JSON_MAX_INT_DIGITS}")
        return int(s)

    def parse_float(s: str) -> float:
        x = float(s)
        if not math.isfinite(x):
            raise LimitError(f"{where}: the JSON number {s[:40]}{'...' if len(s) > 40 else ''}"
                             f" is beyond the float range")
        return x

    def parse_constant(s: str) -> float:
        if not constants:
            raise LimitError(f"{where}: {s} is not a JSON number (the file must be strict "
                             f"JSON)")
        return float(s)

    return json.loads(text, parse_int=parse_int, parse_float=parse_float,
                      parse_constant=parse_constant)


# ------------------------------------------------------------------ output files

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))


def check_output_file(path: Any, what: str) -> Path:
    """``path`` as a file braidpy may write: absent, or an existing regular file. A
    device (``/dev/full``), a folder, a FIFO, a socket or a symbolic link (even one to a
    regular file: give the path it points to) raises :class:`OutputPathError` naming
    ``what`` (the option or the kind of file). Touches nothing.

    >>> check_output_file("/dev/null", "--log")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy._limits.OutputPathError: --log /dev/null: is a character device, not a regular file...
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise OutputPathError(f"{what} {path}: cannot be checked ({exc.strerror or exc})") \
            from exc
    if stat.S_ISLNK(st.st_mode):
        try:
            final = os.path.realpath(path)
        except OSError:
            final = "?"
        raise OutputPathError(f"{what} {path}: is a symbolic link (to {final}); braidpy "
                              f"does not write through links: give the final path")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise OutputPathError(f"{what} {path}: is {kind}, not a regular file; braidpy "
                              f"writes regular files only")
    return path


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _open_checked(path: Path, flags: int, what: str) -> int:
    """os.open without following a final link and without blocking on a FIFO; the file
    opened must be a regular file."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise OutputPathError(f"{what} {path}: cannot open it for writing "
                              f"({exc.strerror or exc})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputPathError(f"{what} {path}: is not a regular file; braidpy writes "
                                  f"regular files only")
        if _NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_output(path: Any, what: str, *, text: bool = True, newline: Optional[str] = None
                ) -> "OutputFile":
    """``path`` opened for writing (truncated) after :func:`check_output_file`, without
    following a link and never a device or a FIFO, even one put there after the check.
    Its folder is created. For files written as they grow (logs); whole files are
    written with :func:`write_atomically`. Returns an :class:`OutputFile`: every write
    is flushed and checked, a failure an :class:`OutputWriteError` naming ``what`` and
    the file."""
    path = check_output_file(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_checked(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what)
    if text:
        f: IO[Any] = os.fdopen(fd, "w", encoding="utf-8", newline=newline)
    else:
        f = os.fdopen(fd, "wb")
    return OutputFile(f, path, what)


class OutputFile:
    """A file written as it grows (a log): :meth:`write` writes and flushes, so a full
    disk or a file size limit is an :class:`OutputWriteError` at the write that met it
    (naming the option and the file, and that the lines before it are kept), never a
    run that carries on writing nothing; :meth:`sync` also fsyncs (at the end of a
    run). After a failure the file refuses further writes with the same error, and
    :meth:`close` releases it without raising again."""

    def __init__(self, f: IO[Any], path: Path, what: str):
        self._f, self.path, self.what = f, path, what
        self._failed: Optional[OutputWriteError] = None

    def _fail(self, exc: OSError) -> OutputWriteError:
        self._failed = OutputWriteError(self.what, self.path, exc,
                                        "what was written before is kept")
        return self._failed

    def write(self, data: Any) -> int:
        if self._failed is not None:
            raise self._failed
        try:
            n = self._f.write(data)
            self._f.flush()
        except OSError as exc:
            raise self._fail(exc) from exc
        return n

    def flush(self) -> None:
        self.write("" if isinstance(self._f, io.TextIOBase) else b"")

    def sync(self) -> None:
        """Flush and fsync (the lines are on the disk, or an OutputWriteError)."""
        self.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError as exc:
            raise self._fail(exc) from exc

    def close(self) -> None:
        if self._f.closed:
            return
        if self._failed is not None:
            try:
                self._f.close()
            except OSError:
                pass  # its error was raised at the write that met it
            return
        try:
            self._f.close()
        except OSError as exc:
            raise self._fail(exc) from exc

    @property
    def closed(self) -> bool:
        return self._f.closed

    def __enter__(self) -> "OutputFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_atomically(path: Any, what: str, write: Callable[[IO[bytes]], Any], *,
                     make_folder: bool = True) -> Path:
    """Write ``path`` atomically: :func:`check_output_file`, then ``write(f)`` into the
    temporary file ``path.tmp`` beside it (a stale one is removed first; created
    exclusively, never through a link), flushed and fsynced, renamed over ``path``, and
    the folder fsynced: a process killed at any moment leaves the previous file or the
    new one, complete. The folder is created (unless not ``make_folder``)."""
    path = check_output_file(path, what)
    if make_folder:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where a folder should be, a read-only place
            raise OutputPathError(f"{what} {path}: cannot make its folder "
                                  f"({exc.strerror or exc})") from exc
    tmp = path.with_name(path.name + ".tmp")
    try:
        if stat.S_ISREG(os.lstat(tmp).st_mode) or stat.S_ISLNK(os.lstat(tmp).st_mode):
            os.unlink(tmp)  # left by a killed run (or a link): removed, never followed
    except FileNotFoundError:
        pass
    kept = "the previous file is kept" if os.path.lexists(path) else "nothing was written"
    fd = _open_checked(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what)
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            check_output_file(path, what)  # still a file (or absent) right before the rename
            os.replace(tmp, path)
        except OutputPathError:
            raise
        except OSError as exc:  # a full disk, a file size limit: named, nothing half-made
            raise OutputWriteError(what, path, exc, kept) from exc
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(path.parent)
    return path


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
