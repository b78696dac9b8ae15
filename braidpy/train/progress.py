"""Training progress for people (a progress bar or plain lines) and machines (JSON
lines, CSV).

:class:`Progress` shows one line per optimizer step: on a terminal a ``tqdm`` bar
redrawn in place (tqdm is optional: without it, plain lines), elsewhere (a file, a pipe,
a batch job's log) a plain line per step, so that logs stay readable.
:func:`progress_bar` is the bar alone, through ``tqdm.auto`` (a widget in notebooks).
:class:`JsonLog` writes a header record, one record per step and an end record, each a
line of strict JSON (non-finite numbers become the strings "nan", "inf", "-inf");
:class:`CsvLog` one row of scalar metrics per step. All write only what they are given:
the caller decides which rank writes. :func:`wait_until_read` lets a pipe's reader catch
up, so that what is written to another stream afterwards arrives after it.

Examples
--------
>>> import io
>>> out = io.StringIO()
>>> bar = Progress(total=3, stream=out)
>>> bar.update({"iteration": 1, "loss": 0.5, "val_accuracy": 0.75, "seconds": 0.1})
>>> out.getvalue()
'step 1/3  loss 5.0000e-01  val 75.00%  0.10 s\\n'
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import sys
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, TextIO

import numpy as np

from .._limits import open_output

__all__ = ["CsvLog", "JsonLog", "Progress", "format_step", "progress_bar", "summary",
           "to_json", "wait_until_read"]

STOP_REASONS = {
    "iterations": "reached the step limit",
    "target accuracy": "reached the target validation accuracy",
    "no improvement": "validation accuracy stopped improving (patience)",
    "diverged": "the objective is not finite (diverged)",
}


def _number(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}e}" if math.isfinite(x) else str(x)


def format_step(record: Mapping[str, Any], total: int, compact: bool = False) -> str:
    """One step in a line: step/total, loss, validation accuracy, MGRIT iterations with
    the last residual of the state and adjoint solves (layer-parallel modes), the
    cosine to the exact gradient where it was checked (``*``: below the floor, the
    exact gradient taken), seconds.
    ``compact`` fits 80 columns (for the terminal bar)."""
    parts = [f"{record['iteration']}/{total}" if compact else
             f"step {record['iteration']}/{total}",
             f"loss {_number(record['loss'], 3 if compact else 4)}"]
    if "val_accuracy" in record:
        parts.append(f"val {100 * record['val_accuracy']:.{1 if compact else 2}f}%")
    for key, name in (("primal", "state"), ("adjoint", "adjoint")):
        if f"{key}_iterations" in record:
            res = record.get(f"{key}_residuals") or [math.nan]
            parts.append(f"{name} {record[f'{key}_iterations']} it "
                         f"{'' if compact else 'r '}{res[-1]:.1e}")
    if "gradient_cosine" in record:  # a quality check (braidpy.train.quality)
        parts.append(f"cos {record['gradient_cosine']:.6f}"
                     + ("*" if record.get("exact_gradient_used") else ""))
    parts.append(f"{record['seconds']:.2f} s")
    return (" " if compact else "  ").join(parts)


def _tqdm(auto: bool) -> Any:
    """tqdm's class (``tqdm.auto``'s when ``auto``), or None when tqdm is not installed."""
    try:
        if auto:
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class _Bar:
    """A tqdm bar over optimizer steps with the step's numbers as its postfix."""

    def __init__(self, tqdm: Any, total: int, initial: int = 0, stream: Any = None):
        self.total = total
        self._bar = tqdm(total=total, initial=initial, file=stream, unit="step",
                         dynamic_ncols=True, leave=True)

    def update(self, record: Mapping[str, Any]) -> None:
        self._bar.set_postfix_str(format_step(record, self.total, compact=True).split(" ", 1)[1],
                                  refresh=False)
        self._bar.update(max(0, record["iteration"] - self._bar.n))

    def write(self, text: str) -> None:
        self._bar.write(text, file=self._bar.fp)

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, initial: int = 0) -> Optional[_Bar]:
    """A ``tqdm.auto`` bar over ``total`` optimizer steps (a widget in a notebook, text on
    a terminal), or None when tqdm is not installed. ``update(record)`` per step,
    ``close()`` at the end."""
    tqdm = _tqdm(auto=True)
    return None if tqdm is None else _Bar(tqdm, total, initial)


class Progress:
    """Step lines on ``stream``: a tqdm bar updated in place on a TTY, plain lines
    otherwise (and on a TTY when tqdm is not installed).

    Parameters
    ----------
    total : int
        The step limit (the bar's 100 %).
    stream : file, default sys.stderr
    tty : bool, optional
        Force bar (True) or plain lines (False); default: ``stream.isatty()``.
    initial : int
        Steps already taken (a resumed run).
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None, tty: Optional[bool] = None,
                 initial: int = 0):
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty()) if tty is None else tty
        self.initial = initial
        self._bar: Optional[_Bar] = None
        self._tqdm = _tqdm(auto=False) if self.tty else None

    def message(self, text: str) -> None:
        """A line of its own (above a started bar)."""
        if self._bar is not None:
            self._bar.write(text)
        else:
            print(text, file=self.stream, flush=True)

    def update(self, record: Mapping[str, Any]) -> None:
        if self._tqdm is None:
            print(format_step(record, self.total), file=self.stream, flush=True)
            return
        if self._bar is None:
            self._bar = _Bar(self._tqdm, self.total, self.initial, self.stream)
        self._bar.update(record)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _unread_bytes(fd: int) -> Optional[int]:
    """Bytes written to the pipe ``fd`` that its reader has not taken yet (None: no pipe,
    or the platform cannot tell)."""
    try:
        import fcntl
        import termios
        from array import array

        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        count = array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count)
    except (ImportError, OSError):
        return None
    return count[0]


def wait_until_read(stream: Any, timeout: float = 1.0) -> bool:
    """Flush ``stream`` and, when it is a pipe, wait until its reader has taken all that
    was written to it, at most ``timeout`` seconds. True when it has (or ``stream`` is no
    pipe: a terminal or a file keeps the order itself), False after the timeout.

    Why: ``mpiexec`` (and any program that reads a child's stdout and stderr through two
    pipes) passes each pipe on as it reads it and keeps no order between them, so a step
    line on stderr written just before the summary on stdout could reach the terminal
    after the summary. Once the reader has taken the step lines, they are ahead of
    anything written to stdout afterwards.

    >>> import io
    >>> wait_until_read(io.StringIO())
    True
    """
    try:
        stream.flush()
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # no file behind it (io.StringIO)
        return True
    deadline = time.monotonic() + timeout
    while True:
        unread = _unread_bytes(fd)
        if not unread:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def summary(history: Sequence[Mapping[str, Any]], best: Mapping[str, Any],
            stop_reason: Optional[str]) -> Dict[str, Any]:
    """The end-of-run numbers: steps, stop reason, best validation accuracy, training
    seconds and layer step calls (the records' ``steps``), summed over the whole history
    (a resumed run includes the steps before the checkpoint)."""
    return {
        "steps": len(history),
        "stop_reason": stop_reason,
        "best_accuracy": best.get("accuracy"),
        "best_iteration": best.get("iteration"),
        "final_loss": history[-1]["loss"] if history else None,
        "seconds": float(sum(r.get("seconds", 0.0) for r in history)),
        "step_calls": int(sum(r.get("steps", 0) for r in history)),
    }


def summary_lines(s: Mapping[str, Any]) -> List[str]:
    """:func:`summary` in words."""
    why = STOP_REASONS.get(s["stop_reason"], str(s["stop_reason"]))
    lines = [f"stopped after {s['steps']} step{'' if s['steps'] == 1 else 's'}: {why}"]
    if s["best_accuracy"] is None:
        lines.append("best validation accuracy: - (no validation)")
    else:
        lines.append(f"best validation accuracy: {100 * s['best_accuracy']:.2f}% "
                     f"(step {s['best_iteration']})")
    if s["final_loss"] is not None:
        lines.append(f"final training loss: {_number(s['final_loss'])}")
    per = s["seconds"] / max(s["steps"], 1)
    lines.append(f"time: {s['seconds']:.2f} s in steps ({per:.3f} s per step)"
                 + (f", {s['wall_seconds']:.2f} s wall" if "wall_seconds" in s else ""))
    lines.append(f"layer step calls (all ranks, line searches included): {s['step_calls']}")
    return lines


def to_json(value: Any) -> Any:
    """Plain JSON values: NumPy scalars and arrays become numbers and lists, non-finite
    floats the strings 'nan', 'inf' and '-inf' (strict JSON has no such numbers)."""
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_json(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else str(x)
    return value


class JsonLog:
    """JSON-lines training log: ``{"event": "header", ...}``, then ``{"event": "step",
    ...}`` per step (the trainer's history record), then ``{"event": "end", ...}``.

    Every line is flushed and checked, so the file can be followed while training runs
    and a full disk stops the run with an error naming the file
    (:class:`braidpy._limits.OutputWriteError`); the last line is also fsynced. ``steps``
    are written right after the header: a resumed run rewrites the log from its
    checkpoint's history, so the file always matches the state that continues.
    ``path`` must be a regular file or absent (a device, folder or symbolic link raises
    :class:`braidpy._limits.OutputPathError`, its message starting with ``what``, e.g.
    an option's name); its folder is created.
    """

    def __init__(self, path: Any, header: Mapping[str, Any],
                 steps: Iterable[Mapping[str, Any]] = (), *, what: str = "log"):
        self._file = open_output(path, what)
        self._write({"event": "header", **header})
        for record in steps:
            self.step(record)

    def _write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(to_json(record), allow_nan=False) + "\n")
        self._file.flush()

    def step(self, record: Mapping[str, Any]) -> None:
        self._write({"event": "step", **record})

    def end(self, record: Mapping[str, Any]) -> None:
        """The last line, flushed and fsynced (a full disk is an error naming the log)."""
        self._write({"event": "end", **record})
        self._file.sync()

    def close(self) -> None:
        self._file.close()


#: The columns of :class:`CsvLog`, in order (a record's last residuals as single numbers).
CSV_COLUMNS = ("iteration", "epoch", "loss", "objective", "gradient_norm", "step_size",
               "line_search_trials", "primal_iterations", "primal_residual",
               "adjoint_iterations", "adjoint_residual", "steps", "val_accuracy",
               "seconds")


class CsvLog:
    """Per-step metrics as CSV: a header row of :data:`CSV_COLUMNS`, then one row per step
    (empty cells for what a step lacks, e.g. validation or MGRIT numbers in serial mode;
    floats with all their digits). Every row is flushed. ``path`` must be a regular file
    or absent (see :class:`JsonLog`)."""

    def __init__(self, path: Any, steps: Iterable[Mapping[str, Any]] = (), *,
                 what: str = "csv"):
        self._file = open_output(path, what, newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(CSV_COLUMNS)
        for record in steps:
            self.step(record)
        self._file.flush()

    def step(self, record: Mapping[str, Any]) -> None:
        row = dict(record)
        for key in ("primal", "adjoint"):
            res = record.get(f"{key}_residuals")
            row[f"{key}_residual"] = res[-1] if res else None
        self._writer.writerow(["" if row.get(c) is None else
                               repr(float(row[c])) if isinstance(row[c], float) else row[c]
                               for c in CSV_COLUMNS])
        self._file.flush()

    def close(self) -> None:
        """Flush, fsync and close (a full disk is an error naming the file)."""
        if not self._file.closed:
            try:
                self._file.sync()
            finally:
                self._file.close()
