"""Figures of a training history (needs matplotlib): loss, accuracy and MGRIT effort.

:func:`plot_history` takes the records of :attr:`braidpy.train.Trainer.history` (or a
JSON-lines log read back) and writes one figure to a file (``--plot FILE`` of the
command line) or three PNGs into a folder. Figures are drawn on Agg canvases of their
own, as in :mod:`braidpy.plotting`: no window, no global pyplot state.

Examples
--------
>>> import tempfile
>>> history = [{"iteration": k, "loss": 1.0 / k, "val_accuracy": 0.5 + 0.1 * k,
...             "primal_iterations": 2, "adjoint_iterations": 2,
...             "primal_residuals": [1e-2, 1e-4], "adjoint_residuals": [1e-3, 1e-5]}
...            for k in (1, 2, 3)]
>>> [p.name for p in plot_history(history, tempfile.mkdtemp())]
['training.png', 'mgrit_residuals.png', 'mgrit_iterations.png']
>>> [p.name for p in plot_history(history, tempfile.mkdtemp() + "/run.pdf")]
['run.pdf']
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, List, Mapping, Optional, Sequence, cast

import numpy as np

from .._limits import OutputPathError, check_output_file, write_atomically
from ..plotting import _new_figure, plot_residuals

__all__ = ["plot_history", "check_figure_path", "FIGURES", "FORMATS"]

#: File names written by :func:`plot_history` into a folder (the MGRIT ones in
#: layer-parallel modes only).
FIGURES = ("training.png", "mgrit_residuals.png", "mgrit_iterations.png")

#: File types of a single-file figure (matplotlib's Agg, PDF and SVG writers).
FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps")


def check_figure_path(path: Any) -> Path:
    """``path`` as a figure file that :func:`plot_history` can write, or a ValueError
    saying why not (a folder, no or an unknown file type, a device or a symbolic link:
    :func:`braidpy._limits.check_output_file`). Writes nothing."""
    path = Path(path)
    if path.is_dir():
        raise ValueError("is a directory; name the figure file, e.g. training.png")
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"unknown figure type {path.suffix or '(none)'!r}; give a file "
                         f"ending in {', '.join(FORMATS)}")
    try:
        check_output_file(path, "plot")
    except OutputPathError as exc:  # the reason alone, as above (callers name the path)
        raise OutputPathError(str(exc).replace(f"plot {path}: ", "", 1)) from None
    return path


def _save(fig: Any, path: Path) -> None:
    """The figure written atomically to ``path`` (a regular file or absent, never
    through a link), in the format of its suffix."""
    write_atomically(path, "plot", lambda f: fig.savefig(f, format=path.suffix[1:].lower(),
                                                         dpi=120))


def _residuals_panel(ax, last) -> None:
    for key, label in (("primal", "state"), ("adjoint", "adjoint")):
        res = np.asarray(last.get(f"{key}_residuals") or [], dtype=float)
        ax.semilogy(np.arange(res.size), res, marker="o", markersize=3, label=label)
    ax.set_xlabel("MGRIT iteration")
    ax.set_ylabel("residual norm")
    ax.set_title(f"MGRIT residuals at step {last['iteration']}", fontsize="small")
    ax.grid(True, which="major", alpha=0.4)
    ax.legend()


def _single_figure(history, path: Path, title: Optional[str]) -> None:
    mgrit = "primal_residuals" in history[-1]
    fig = _new_figure(10.0, 8.0 if mgrit else 4.0)
    axes = fig.subplots(2 if mgrit else 1, 2, squeeze=False)
    ax_loss, ax_acc = axes[0]
    _loss_and_accuracy(history, ax_loss, ax_acc)
    if mgrit:
        _residuals_panel(axes[1][0], history[-1])
        _iterations_panel(axes[1][1], history)
    if title:
        fig.suptitle(title, fontsize="small")
    _save(fig, path)


def _iterations_panel(ax, history: Sequence[Mapping[str, Any]]) -> None:
    """State and adjoint MGRIT iterations per gradient, against the step."""
    from matplotlib.ticker import MaxNLocator

    for key, label, marker in (("primal_iterations", "state", "o"),
                               ("adjoint_iterations", "adjoint", "s")):
        its, counts = _column(history, key)
        ax.plot(its, counts, marker=marker, markersize=3, linestyle="-", label=label)
    _steps_axis(ax)
    ax.set_ylabel("MGRIT iterations per gradient")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.4)
    ax.legend()


def _column(history: Sequence[Mapping[str, Any]], key: str):
    """(iterations, values) of the records that have ``key``."""
    rows = [(r["iteration"], r[key]) for r in history if key in r]
    its = np.array([k for k, _ in rows], dtype=float)
    values = np.array([v for _, v in rows], dtype=float)  # "nan" strings of a log parse too
    return its, values


def _steps_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _training(history, path: Path, title: Optional[str]) -> None:
    fig = _new_figure(10.0, 4.0)
    ax_loss, ax_acc = fig.subplots(1, 2)
    _loss_and_accuracy(history, ax_loss, ax_acc)
    if title:
        fig.suptitle(title, fontsize="small")
    _save(fig, path)


def _loss_and_accuracy(history, ax_loss, ax_acc) -> None:
    for key, label in (("loss", "loss"), ("objective", "loss + regularization")):
        its, values = _column(history, key)
        if key == "objective" and np.array_equal(values, _column(history, "loss")[1]):
            continue  # no regularization: the same curve twice
        ax_loss.semilogy(its, values, label=label)
    _steps_axis(ax_loss)
    ax_loss.set_ylabel("training loss")
    ax_loss.grid(True, which="major", alpha=0.4)
    ax_loss.legend()
    its, acc = _column(history, "val_accuracy")
    ax_acc.plot(its, 100 * acc, marker="o" if its.size < 30 else None, markersize=3)
    _steps_axis(ax_acc)
    ax_acc.set_ylabel("validation accuracy [%]")
    ax_acc.grid(True, alpha=0.4)
    if not its.size:
        ax_acc.set_title("no validation")


def _mgrit_iterations(history, path: Path, title: Optional[str]) -> None:
    fig = _new_figure(6.4, 4.0)
    _iterations_panel(fig.add_subplot(), history)
    if title:
        fig.suptitle(title, fontsize="small")
    _save(fig, path)


def plot_history(history: Sequence[Mapping[str, Any]], directory: Any,
                 title: Optional[str] = None) -> List[Path]:
    """Write the training figures to a file or into a folder.

    ``directory`` ending in a figure type (:data:`FORMATS`, e.g. ``run.png``) names one
    file (its folder is created): loss and validation accuracy, and in layer-parallel
    modes the last step's MGRIT residuals and every step's MGRIT iterations, in one
    figure. Otherwise it is a folder (created if missing) that receives

    * ``training.png``: training loss (and loss + regularization when they differ) and
      validation accuracy against the optimizer step;
    * ``mgrit_residuals.png``: residual norms of the last step's state and adjoint MGRIT
      solves (the trainer solves with ``skip=False``, so they start at r_0);
    * ``mgrit_iterations.png``: state and adjoint MGRIT iterations of every step.

    The MGRIT figures need layer-parallel records (modes 'exact' and 'oneshot').
    Each figure is written atomically to a regular file (an existing device, folder or
    symbolic link in its place raises :class:`braidpy._limits.OutputPathError`).
    Returns the paths written.
    """
    if not history:
        raise ValueError("no training history to plot")
    if Path(directory).suffix.lower() in FORMATS and not Path(directory).is_dir():
        check_output_file(directory, "plot")  # a device or link: named with its path
        path = check_figure_path(directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        _single_figure(history, path, title)
        return [path]
    folder = Path(directory)
    if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
        raise OutputPathError(f"plot {folder}: exists and is not a folder; give a folder "
                              f"or a figure file ending in {', '.join(FORMATS)}")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in FIGURES]
    _training(history, paths[0], title)
    last = history[-1]
    if "primal_residuals" not in last:
        return paths[:1]
    solves = [SimpleNamespace(residuals=last[f"{key}_residuals"],
                              residual_iterations=list(range(len(last[f"{key}_residuals"]))))
              for key in ("primal", "adjoint")]
    write_atomically(paths[1], "plot", lambda f: plot_residuals(
        solves, cast(Any, f), labels=["state", "adjoint"],  # a file object: png
        title=f"MGRIT residuals at step {last['iteration']}"))
    _mgrit_iterations(history, paths[2], title)
    return paths
