"""Figures of a training history (needs matplotlib): loss, accuracy and MGRIT effort.

:func:`plot_history` takes the records of :attr:`braidpy.train.Trainer.history` (or a
JSON-lines log read back) and writes PNGs into a folder. Figures are drawn on Agg
canvases of their own, as in :mod:`braidpy.plotting`: no window, no global pyplot state.

Examples
--------
>>> import tempfile
>>> history = [{"iteration": k, "loss": 1.0 / k, "val_accuracy": 0.5 + 0.1 * k,
...             "primal_iterations": 2, "adjoint_iterations": 2,
...             "primal_residuals": [1e-2, 1e-4], "adjoint_residuals": [1e-3, 1e-5]}
...            for k in (1, 2, 3)]
>>> [p.name for p in plot_history(history, tempfile.mkdtemp())]
['training.png', 'mgrit_residuals.png', 'mgrit_iterations.png']
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from ..plotting import _new_figure, plot_residuals

__all__ = ["plot_history", "FIGURES"]

#: File names written by :func:`plot_history` (the MGRIT ones in layer-parallel modes only).
FIGURES = ("training.png", "mgrit_residuals.png", "mgrit_iterations.png")


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
    if title:
        fig.suptitle(title, fontsize="small")
    fig.savefig(path, dpi=120)


def _mgrit_iterations(history, path: Path, title: Optional[str]) -> None:
    from matplotlib.ticker import MaxNLocator

    fig = _new_figure(6.4, 4.0)
    ax = fig.add_subplot()
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
    if title:
        fig.suptitle(title, fontsize="small")
    fig.savefig(path, dpi=120)


def plot_history(history: Sequence[Mapping[str, Any]], directory: Any,
                 title: Optional[str] = None) -> List[Path]:
    """Write the training figures into ``directory`` (created if missing).

    * ``training.png``: training loss (and loss + regularization when they differ) and
      validation accuracy against the optimizer step;
    * ``mgrit_residuals.png``: residual norms of the last step's state and adjoint MGRIT
      solves (the trainer solves with ``skip=False``, so they start at r_0);
    * ``mgrit_iterations.png``: state and adjoint MGRIT iterations of every step.

    The MGRIT figures need layer-parallel records (modes 'exact' and 'oneshot').
    Returns the paths written.
    """
    if not history:
        raise ValueError("no training history to plot")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in FIGURES]
    _training(history, paths[0], title)
    last = history[-1]
    if "primal_residuals" not in last:
        return paths[:1]
    solves = [SimpleNamespace(residuals=last[f"{key}_residuals"],
                              residual_iterations=list(range(len(last[f"{key}_residuals"]))))
              for key in ("primal", "adjoint")]
    plot_residuals(solves, paths[1], labels=["state", "adjoint"],
                   title=f"MGRIT residuals at step {last['iteration']}")
    _mgrit_iterations(history, paths[2], title)
    return paths
