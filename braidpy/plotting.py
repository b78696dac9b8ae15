"""Figures of MGRIT convergence histories and 1D space-time solutions (needs matplotlib).

matplotlib is imported only when a function here is called, and figures are
drawn on an Agg canvas of their own: nothing is displayed and the global
pyplot state and backend are left untouched, so these functions are safe in
batch jobs, under MPI and inside notebooks alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from numpy.typing import ArrayLike

from ._extras import require
from ._renamed import renamed_arguments

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from matplotlib.figure import Figure

__all__ = ["plot_residuals", "plot_solution_1d"]

PathLike = Union[str, "os.PathLike[str]"]


def _new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (never a pyplot window)."""
    require("matplotlib", "train", "braidpy's plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _is_number(v: Any) -> bool:
    return isinstance(v, (Real, np.number)) and not isinstance(v, bool)


def _one_history(item: Any, position: int) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, norms) of a Result-like object or a plain sequence of norms."""
    if hasattr(item, "residuals"):
        norms = np.asarray(item.residuals, dtype=float)
        ks = getattr(item, "residual_iterations", None)
        its = np.asarray(ks, dtype=float) if ks is not None else np.arange(1, norms.size + 1.0)
    else:
        norms = np.asarray(item, dtype=float)
        its = np.arange(1, norms.size + 1.0)
    if norms.ndim != 1 or its.shape != norms.shape:
        raise ValueError(
            f"history {position}: expected a braidpy Result or a 1-D sequence of residual "
            f"norms, got an array of shape {norms.shape}"
        )
    return its, norms


def _histories(results_or_histories: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Normalise the accepted inputs to a list of (iterations, norms)."""
    obj = results_or_histories
    if hasattr(obj, "residuals"):
        return [_one_history(obj, 0)]
    if isinstance(obj, np.ndarray):
        rows = [obj] if obj.ndim == 1 else list(obj)
        return [_one_history(row, i) for i, row in enumerate(rows)]
    items = list(obj)
    if not items or all(_is_number(v) for v in items):
        return [_one_history(items, 0)]
    return [_one_history(item, i) for i, item in enumerate(items)]


@renamed_arguments({"tol": "abs_tol"})
def plot_residuals(
    results_or_histories: Any,
    path: PathLike,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    *,
    abs_tol: float | None = None,
) -> Figure:
    """Plot residual norm against iteration (log scale) for one or several solves.

    Parameters
    ----------
    results_or_histories : Result, sequence of float, or a list of either
        One :class:`braidpy.Result` (its ``residuals`` are plotted against its
        ``residual_iterations``), one sequence of residual norms (numbered
        1, 2, ...), or a list mixing both kinds, one curve each.
    path : str or os.PathLike
        Where to write the figure; the format follows the extension (``.png``,
        ``.pdf``, ``.svg``, ...).
    labels : sequence of str, optional
        Legend entries, one per history. Without labels, several histories are
        called "run 0", "run 1", ... and a single one gets no legend.
    title : str, optional
        Figure title.
    abs_tol : float, optional
        Draw the halting tolerance (the solve's ``abs_tol``) as a dashed horizontal
        line. ``tol=`` is its deprecated old name.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, already saved to `path`.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    ValueError
        If the number of labels does not match the number of histories, or a
        history is not one-dimensional.

    Notes
    -----
    Norms that are zero, negative or not finite cannot be shown on a log scale
    and are left out of their curve. A solve run with
    ``residual_computation=False`` has an empty history and is drawn as an
    empty legend entry.

    Examples
    --------
    >>> import os, tempfile
    >>> from braidpy.plotting import plot_residuals
    >>> path = os.path.join(tempfile.mkdtemp(), "residuals.png")
    >>> fig = plot_residuals([[1e-1, 2e-3, 5e-5], [1e-1, 1e-2]], path,
    ...                      labels=["FCF", "F"], abs_tol=1e-4)
    >>> os.path.getsize(path) > 0
    True
    >>> [line.get_label() for line in fig.axes[0].get_lines()][:2]
    ['FCF', 'F']
    """
    hist = _histories(results_or_histories)
    if labels is not None:
        labels = [str(s) for s in labels]
        if len(labels) != len(hist):
            raise ValueError(f"got {len(labels)} labels for {len(hist)} residual histories")
    fig = _new_figure(6.4, 4.4)
    from matplotlib.ticker import MaxNLocator

    ax = fig.add_subplot()
    markers = "osD^v<>ph*"
    for n, (its, norms) in enumerate(hist):
        shown = np.isfinite(norms) & (norms > 0)
        label = labels[n] if labels is not None else (f"run {n}" if len(hist) > 1 else None)
        ax.semilogy(its[shown], norms[shown], marker=markers[n % len(markers)], markersize=4,
                    label=label)
    if abs_tol is not None and abs_tol > 0 and math.isfinite(abs_tol):
        ax.axhline(abs_tol, color="0.4", linestyle="--", linewidth=1,
                   label=f"tol = {abs_tol:.0e}")
    ax.set_yscale("log")
    ax.set_xlabel("iteration $k$")
    ax.set_ylabel(r"residual norm $\|r_k\|$")
    ax.grid(True, which="major", alpha=0.4)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.savefig(path, dpi=120)
    return fig


def plot_solution_1d(
    x: ArrayLike,
    times: ArrayLike,
    U: ArrayLike,
    path: PathLike,
    title: str | None = None,
    *,
    nsnapshots: int = 5,
) -> Figure:
    """Plot a 1D-in-space solution as a space-time image beside a few time snapshots.

    Parameters
    ----------
    x : array_like, shape (nx,)
        Spatial grid points, increasing.
    times : array_like, shape (nt,)
        Time points, increasing (for instance ``Result.times``).
    U : array_like, shape (nt, nx)
        ``U[i, j]`` is the solution at ``times[i]`` and ``x[j]``.
    path : str or os.PathLike
        Where to write the figure; the format follows the extension.
    title : str, optional
        Figure title.
    nsnapshots : int, optional
        How many time slices to draw on the right, evenly spaced from the first
        time to the last. Default 5.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, already saved to `path`.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    ValueError
        If the shapes of `x`, `times` and `U` do not agree or `nsnapshots` < 1.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from braidpy.plotting import plot_solution_1d
    >>> x = np.linspace(0.0, np.pi, 33)
    >>> t = np.linspace(0.0, 2.0, 17)
    >>> U = np.sin(x)[None, :] * np.cos(t)[:, None]
    >>> path = os.path.join(tempfile.mkdtemp(), "solution.png")
    >>> fig = plot_solution_1d(x, t, U, path, title="sin(x) cos(t)")
    >>> os.path.getsize(path) > 0
    True
    """
    xs = np.asarray(x, dtype=float)
    ts = np.asarray(times, dtype=float)
    values = np.asarray(U)
    if xs.ndim != 1 or ts.ndim != 1:
        raise ValueError(f"x and times must be 1-D, got shapes {xs.shape} and {ts.shape}")
    if values.shape != (ts.size, xs.size):
        raise ValueError(f"U must have shape (len(times), len(x)) = {(ts.size, xs.size)}, "
                         f"got {values.shape}")
    if isinstance(nsnapshots, bool) or not isinstance(nsnapshots, (int, np.integer)) \
            or nsnapshots < 1:
        raise ValueError(f"nsnapshots must be an int >= 1, got {nsnapshots!r}")
    if np.iscomplexobj(values):
        values = np.abs(values)
    values = values.astype(float, copy=False)

    fig = _new_figure(12.0, 4.4)
    ax_img, ax_cut = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1.0]})
    image = ax_img.pcolormesh(xs, ts, values, shading="nearest", cmap="viridis", rasterized=True)
    fig.colorbar(image, ax=ax_img, label="$u$")
    ax_img.set_xlabel("$x$")
    ax_img.set_ylabel("$t$")
    ax_img.set_title("space-time solution")

    count = min(nsnapshots, ts.size)
    rows = np.unique(np.round(np.linspace(0, ts.size - 1, count)).astype(int))
    colors = [f"C{n % 10}" for n in range(rows.size)]
    for row, color in zip(rows, colors):
        ax_cut.plot(xs, values[row], color=color, label=f"t = {ts[row]:.4g}")
        ax_img.axhline(ts[row], color=color, linewidth=1.2, linestyle="--")
    ax_cut.set_xlabel("$x$")
    ax_cut.set_ylabel("$u$")
    ax_cut.set_title("snapshots")
    ax_cut.grid(True, alpha=0.4)
    ax_cut.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
    return fig
