"""The ``braidpy`` command line: ``braidpy train``, ``braidpy evaluate``, ``braidpy predict``.

``braidpy train peaks|digits|digits28|mnist|FILE [options]`` trains a ResNet serially or layer-parallel
(exact MGRIT gradients or one-shot) with :class:`braidpy.train.Trainer`, showing
progress and optionally writing JSON-lines and CSV logs, checkpoints and a plot.
``braidpy evaluate CHECKPOINT DATA`` reports the loss and accuracy of a checkpoint's
weights on a data set; ``braidpy predict CHECKPOINT INPUT -o OUT`` writes the predicted
classes of the samples in INPUT; both compute on ``--device`` in batches of
``--batch-size`` samples. Training runs under ``mpiexec -n P`` too: the layers are
split over the ranks, every rank takes the same decisions, and only rank 0 prints and
writes files.

Defaults come from the library (:mod:`braidpy.train.presets`): ResNet's and
TrainConfig's defaults with the preset (``--preset quick``, the default, or ``paper``)
for the data source on top; an option given on the command line wins.

Bad options exit with status 2 and a usage message naming the value; an error during
training prints one message and exits with status 1.

``braidpy calibrate -o FILE`` and ``braidpy plan --calibration FILE ...`` measure this
machine and rank process grids by predicted time per gradient (:mod:`braidpy.perf`).

Examples
--------
>>> args = resolve(build_parser().parse_args(["train", "peaks", "--layers", "64"]))
>>> args.layers, args.width, args.mode, args.optimizer
(64, 8, 'auto', 'lbfgs')
>>> args = resolve(build_parser().parse_args(["train", "digits"]))
>>> args.layers, args.width, args.optimizer, args.batch
(8, 4, 'adam', 100)
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import math
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from ._extras import install_hint
from .nn import OPENINGS, ResNet, activation_names
from .nn.network import EVALUATION_STATE_BYTES
from ._device import placement
from .parallel import ProcessGrid, world
from .parallel.comm import launched_ranks, local_ranks, sleeping_waits, usable_cores
from .parallel.interrupts import deferred_interrupts
from .parallel.collectives import allgather_texts
from .perf import commands as _perf_commands
from .perf.allocator import keep_freed_memory
from .perf.auto import (Setting, choose_grid, training_settings, training_spec,
                        trials_per_step)
from .train import MODES, OPTIMIZERS, TrainConfig, Trainer, resolve_mode
from .train.trainer import RELAXATIONS
from .train.optim import ELASTIC
from .train import checkpoint as _checkpoint
from .train.presets import PRESETS, preset
from .train.sharded import check_training_grid
from .train.spatial_training import max_space
from .train.progress import CsvLog, JsonLog, Progress, summary, summary_lines, wait_until_read
from ._limits import (INDEX_MAX, INT_MAX, LimitError, OutputPathError, OutputWriteError,
                      check_output_file, check_training_size, count_argument,
                      plain_number, write_atomically)

__all__ = ["build_parser", "main", "resolve"]

logger = logging.getLogger("braidpy.cli")

SOURCES = ("peaks", "digits", "digits28", "mnist")

EPILOG = """\
examples:
  braidpy train peaks                                  32 layers, L-BFGS (serial backprop;
                                                       one-shot under mpiexec -n P)
  braidpy train digits                                 8-layer conv net, Adam, < 1 min
  braidpy train digits --preset paper                  32 layers, full-batch L-BFGS
  braidpy train mnist --data DIR                       MNIST IDX files in DIR (none downloaded)
  braidpy train digits28                               the digits at MNIST's 28x28 size
  braidpy train peaks --layers 128 --plot out/training.png --log out/log.jsonl
  mpiexec -n 4 braidpy train peaks --layers 256 --mode exact --abs-tol 1e-8
  mpiexec -n 2 braidpy train digits --grid 2,1,1 --optimizer easgd --rho 1 --tau 2
  braidpy train X.npy --labels y.csv --validation-fraction 0.1 --opening replicate
  braidpy train peaks --checkpoint run.ckpt --iterations 200 --resume
  braidpy evaluate run.ckpt peaks
  braidpy evaluate mnist.ckpt mnist --data DIR         the t10k images (--split validation)
  braidpy predict run.ckpt X.npy -o classes.csv
"""

#: The train options a first run needs and their one-line help in `braidpy train --help`
#: (argparse dests; None: the option's own help); --help-all shows every option in full.
TRAIN_BRIEF: Dict[str, Optional[str]] = {
    "help": None, "help_all": None,
    "source": "the data: a built-in set or a features file",
    "preset": "quick (default; seconds to a minute) or paper",
    "data": "mnist: the folder of its IDX files",
    "labels": "FILE source: class ids or one-hot rows",
    "validation_fraction": "share held out for validation (default 0.2)",
    "width": "width or channels (default 8; digits: 4)",
    "layers": "residual layers (default 32; digits: 8)",
    "device": "cpu (default) or cuda[:N] (CuPy, the gpu extra)",
    "grid": "data x space x layer ranks (default 1,1,P), or auto",
    "calibration": "with --grid auto: from braidpy calibrate -o FILE",
    "mode": "how the gradient is computed (default auto)",
    "optimizer": "(default lbfgs; digits, mnist, digits28: adam)",
    "lr": "(initial) step size (default: the optimizer's)",
    "batch": "samples per step (default all; digits: 100)",
    "iterations": "most optimizer steps (default 100; digits: 40)",
    "seed": "data, initialization and shuffling (default 1)",
    "validate_every": "steps between validations, 0: never",
    "checkpoint": "save the training state to FILE",
    "resume": "continue from --checkpoint",
    "log": "JSON lines: the config, one record per step",
    "plot": "a figure of loss, accuracy and MGRIT residuals",
    "quiet": "print nothing but errors",
    "verbose": "library log messages: -v summaries, -vv every step",
}

BRIEF_EPILOG = """\
examples:
  braidpy train peaks                   32 layers, L-BFGS (one-shot under mpiexec -n P)
  braidpy train digits                  8-layer conv net, Adam, < 1 min
  mpiexec -n 4 braidpy train peaks --iterations 60 --samples 1000
  braidpy train X.npy --labels y.csv --validation-fraction 0.1 --opening replicate
  braidpy train peaks --checkpoint run.ckpt --iterations 200 --resume

braidpy train --help-all shows every option (MGRIT levels, relaxation and coarsening,
one-shot iterations, regularization, EASGD, stopping, CSV logs) and more examples.
"""

#: Command-line option (argparse dest) -> library name of the setting. The defaults are
#: the library's (braidpy.train.presets), so they are not repeated here.
SETTINGS = {
    "width": "width", "layers": "nlayers", "tstop": "tstop", "activation": "activation",
    "opening": "opening", "kernel": "kernel", "init_scale": "init_scale", "mode": "mode",
    "m1": "m1", "m2": "m2", "levels": "max_levels", "cf": "cfactor", "relax": "relax",
    "abs_tol": "abs_tol",
    "optimizer": "optimizer", "lr": "lr", "momentum": "momentum", "rho": "rho", "tau": "tau",
    "batch": "batch_size",
    "shuffle": "shuffle", "iterations": "iterations", "seed": "seed",
    "tikhonov": "tikhonov", "ddt": "ddt", "classifier_reg": "classifier_reg",
    "validate_every": "validate_every", "validation_solve": "validation_solve",
    "patience": "patience", "target_accuracy": "target_accuracy", "checkpoint_every": "checkpoint_every",
    "quality_check_every": "quality_check_every", "quality_floor": "quality_floor",
}


# ------------------------------------------------------------------ ranks and errors


#: Prefixes of the environment variables MPI launchers set (MPICH/Hydra, PMI/PMIx,
#: Open MPI, MVAPICH2, Slurm). Without any of them the command runs serially and never
#: initialises MPI: initialising it costs time, and fails outright under some limits
#: (``ulimit -f``) before anything is done.
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "OMPI_", "MV2_", "MPI_LOCALNRANKS",
                      "SLURM_")


@functools.lru_cache(maxsize=None)
def _world() -> Any:
    """``braidpy.parallel.world()`` when an MPI launcher started this process, else None
    without importing MPI."""
    if not any(name.startswith(_LAUNCHER_PREFIXES) for name in os.environ):
        return None
    return world()


@functools.lru_cache(maxsize=None)
def _rank() -> int:
    comm = _world()
    return 0 if comm is None else comm.Get_rank()


class _Failed(Exception):
    """An error that every rank knows about (raised on all of them alike)."""


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, (OSError, ValueError, ImportError, _Failed)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _on_root(comm: Any, action: Callable[[], Any], what: str = "") -> None:
    """Run ``action`` on rank 0 only (files, terminal) and tell every rank how it went, so
    that a failure there stops all ranks at once instead of leaving them waiting."""
    message, error = None, None
    if _rank() == 0:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported to every rank
            message, error = what + _describe(exc), exc
    if comm is not None:  # every rank learns rank 0's message (None: it went well), in
        # one allgather of its length while it went well (braidpy.parallel.collectives)
        message = allgather_texts(comm, message)[0]
    if message is not None:
        raise _Failed(message) from error


class _Parser(argparse.ArgumentParser):
    """argparse that prints (help, usage errors) on rank 0 only, and a usage error as
    one line with a pointer to --help (a 20-line usage above the error hid it)."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if _rank() == 0:
            super()._print_message(message, file)

    def error(self, message: str) -> NoReturn:
        self._print_message(f"{self.prog}: error: {message}\n"
                            f"(options: {self.prog} --help)\n", sys.stderr)
        self.exit(2)

    def parse_args(  # type: ignore[override]  # argparse's overloads, one form used here
            self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        """argparse's, but an unknown option is reported by the subcommand that was given
        it (pointing at that subcommand's --help), with the closest option it knows."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            target = self._chosen_subcommand(parsed) or self
            target.error(f"unrecognized arguments: {' '.join(extras)}"
                         f"{target._closest_options(extras)}")
        return parsed

    def _chosen_subcommand(self, parsed: argparse.Namespace) -> Optional["_Parser"]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, _Parser):
                    return chosen._chosen_subcommand(parsed) or chosen
        return None

    def _closest_options(self, extras: Sequence[str]) -> str:
        import difflib

        known = [o for action in self._actions for o in action.option_strings
                 if o.startswith("--")]
        hints = []
        for word in extras:
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
                if close:
                    hints.append(f"{word.split('=', 1)[0]}: did you mean {close[0]}?")
        return f" ({'; '.join(hints)})" if hints else ""

    #: Options (argparse dests) the default --help shows; None: every option. A parser
    #: with a brief help also takes --help-all, which shows them all.
    brief: Optional[Dict[str, Optional[str]]] = None
    brief_epilog: Optional[str] = None
    brief_description: Optional[str] = None

    def format_help(self, full: bool = False) -> str:  # type: ignore[override]
        """argparse's help, or, for a parser with :attr:`brief` options and not
        ``full``, only those options and the short epilog."""
        if full or self.brief is None:
            return super().format_help()
        formatter = self._get_formatter()
        positionals = [str(a.metavar or a.dest) for a in self._actions if not a.option_strings]
        formatter.add_usage("%(prog)s " + " ".join(positionals) + " [options]",
                            self._actions, [])
        formatter.add_text(self.brief_description)
        for group in self._action_groups:
            shown = [copy.copy(a) for a in group._group_actions if a.dest in self.brief]
            for action in shown:
                action.help = self.brief[action.dest] or action.help
            if shown:
                formatter.start_section(group.title)
                formatter.add_arguments(shown)
                formatter.end_section()
        formatter.add_text(self.brief_epilog)
        return formatter.format_help()


class _HelpAll(argparse.Action):
    """--help-all: every option of the command, with its full list of examples."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help="show every option (--help shows the common ones)")

    def __call__(self, parser: Any, namespace: Any, values: Any,
                 option_string: Any = None) -> None:
        parser._print_message(parser.format_help(full=True), sys.stdout)
        parser.exit()


class _Trainer(Trainer):
    """Trainer whose checkpoint writes cannot strand the other ranks (see :func:`_on_root`)."""

    def save(self, path: str) -> None:
        state = self.state()  # collective: gathers the MGRIT states on rank 0

        def write() -> None:
            try:
                _checkpoint.save(path, state, what="--checkpoint")
            except (OutputPathError, OutputWriteError):
                raise  # named with the option and the file already
            except Exception as exc:  # noqa: BLE001 - named with the file, to every rank
                raise _Failed(f"--checkpoint {path}: {_describe(exc)}") from exc
        _on_root(self.comm, write)


# ------------------------------------------------------------------ argument parsing


#: The upper bounds' reasons, shown in the usage errors of count_argument.
INT_WHY = "the compiled core's C int"
INDEX_WHY = "the compiled core's int64 index"
SEED_WHY = "a signed 64-bit seed"


def _float_in(low: float, high: float = float("inf"), open_low: bool = False):
    def convert(text: str) -> float:
        try:
            value = float(plain_number(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if not (value > low if open_low else value >= low) or not value <= high:
            where = f"in {'(' if open_low else '['}{low:g}, {high:g}]" if high < float("inf") \
                else f"{'>' if open_low else '>='} {low:g}"
            raise argparse.ArgumentTypeError(f"must be {where}, got {text}")
        return value
    return convert


def _cfactors(text: str) -> Any:
    """--cf C (every level) or C0,C1,... (level 0, level 1, ...; the last value for the
    deeper levels): integers >= 2; an int, or a tuple for several."""
    parts = text.split(",")
    values = []
    for part in parts:
        try:
            value = int(plain_number(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer, or integers separated by commas (level 0 first), "
                f"got {text!r}") from None
        if value < 2:
            raise argparse.ArgumentTypeError(
                f"must be >= 2, got {value}" + (f" in {text!r}" if len(parts) > 1 else ""))
        values.append(value)
    return values[0] if len(values) == 1 else tuple(values)


def _level0(cf: Any) -> int:
    """Level 0's coarsening factor of a --cf value."""
    return cf if isinstance(cf, int) else cf[0]


def _device(text: str) -> str:
    """--device: cpu, cuda or cuda:N (whether CuPy and the GPU are there is checked later)."""
    if text == "cpu" or text == "cuda" or (text.startswith("cuda:") and text[5:].isascii() and
                                                  text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")


def _grid(text: str) -> Any:
    """--grid D,S,L: three positive integers (that D·S·L is the rank count, and S = 1,
    are checked when the grid is built), or auto (the performance model chooses)."""
    if text == "auto":
        return text
    parts = text.split(",")
    try:
        shape = tuple(int(plain_number(p)) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"expected D,S,L (data, space, layer ranks: three integers >= 1) or auto, "
            f"got {text!r}")
    return shape  # type: ignore[return-value]


POSITIVE = _float_in(0.0, open_low=True)
NONNEGATIVE = _float_in(0.0)


def _default(option: str) -> str:
    """The help's '(default ...)' of an option: the quick preset's value, with the
    sources that differ and the paper preset's value when it differs."""
    key = SETTINGS[option]
    base = preset("quick", "*")[key]
    show = lambda v: "none" if v is None else ("on" if v is True else "off" if v is False  # noqa: E731
                                                else f"{v:g}" if isinstance(v, float) else v)
    parts = [f"{show(base)}"]
    for source, label in (("digits", "digits"), ("mnist", "mnist, digits28")):
        v = preset("quick", source)[key]
        if v != base:
            parts.append(f"{label}: {show(v)}")
    paper = preset("paper", "digits")[key]
    if paper != preset("quick", "digits")[key]:
        parts.append(f"--preset paper: {show(paper)}")
    return "(default " + "; ".join(parts) + ")"


def _add_source_args(p: argparse.ArgumentParser) -> None:
    """The data-source options shared by train and evaluate."""
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="DIR", help="peaks: read the reference files "
                   "(features_training.dat, ...) from DIR instead of generating points; "
                   "mnist (needed): the folder of the four MNIST IDX files")
    g.add_argument("--samples", type=count_argument(1, INDEX_MAX, INDEX_WHY), metavar="N",
                   help="peaks: generated training points (default 5000); mnist: a "
                        "random subset of N training images, drawn with --seed (default "
                        "all)")
    g.add_argument("--validation-samples", type=count_argument(0, INDEX_MAX, INDEX_WHY),
                   metavar="N",
                   help="peaks: generated validation points (default 200); mnist: a "
                        "random subset of N t10k images, drawn with --seed (default all; "
                        "0: no validation)")
    g.add_argument("--labels", metavar="FILE", help="FILE source: class ids or one-hot rows")
    g.add_argument("--delimiter", default=",", metavar="SEP",
                   help="FILE source: column separator of text files; 'space' for any "
                        "whitespace (default ',')")
    g.add_argument("--validation-fraction", type=_float_in(0.0, 1.0), metavar="F",
                   help=f"digits, digits28 and FILE: share held out for validation, split "
                        f"with --seed (default {VALIDATION_FRACTION}; peaks and mnist "
                        f"refuse it: they have --validation-samples)")


def _add_evaluation_args(p: argparse.ArgumentParser) -> None:
    """Where and in what batches evaluate and predict run the forward sweep."""
    p.add_argument("--device", type=_device, default="cpu", metavar="cpu|cuda",
                   help="where to compute: cpu (NumPy) or cuda[:N] (CuPy, the gpu "
                        "extra); the samples go there a batch at a time and "
                        "only the results come back (default cpu)")
    p.add_argument("--batch-size", type=count_argument(1, INDEX_MAX, INDEX_WHY),
                   metavar="N",
                   help=f"samples per forward sweep (default: as many as keep one state "
                        f"of the batch within {EVALUATION_STATE_BYTES >> 20} MiB, e.g. 668 "
                        f"MNIST images of 8 channels); accuracy and class ids do not depend "
                        f"on it, the loss and probabilities only in their last digits")


def _add_verbosity(p: Any) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (no progress, no summary)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="library log messages on stderr: -v run summaries (INFO), -vv every "
                        "step and MGRIT iteration (DEBUG)")


def build_parser() -> argparse.ArgumentParser:
    """The ``braidpy`` argument parser (commands ``train``, ``evaluate``, ``predict``,
    ``calibrate``, ``plan``).

    Options that have library defaults parse to None when not given; :func:`resolve`
    fills them in from the preset."""
    parser = _Parser(prog="braidpy", description="braidpy: parallel-in-time (MGRIT) "
                     "integration and layer-parallel ResNet training.")
    parser.add_argument("--version", action="version", version=f"braidpy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = commands.add_parser(
        "train", help="train a ResNet, serially or layer-parallel with MGRIT",
        description="Train a ResNet classifier with layer-parallel MGRIT (one-shot or exact\n"
                    "gradients) or serial backpropagation. Runs serially or under\n"
                    "`mpiexec -n P braidpy train ...` (layers split over the ranks).\n"
                    "Defaults: the library's, with the preset for the data source on top.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(usage_error=p.error)  # errors found after parsing: exit 2, one line
    p.brief, p.brief_epilog = TRAIN_BRIEF, BRIEF_EPILOG
    p.brief_description = ("Train a ResNet classifier, serially or layer-parallel with "
                           "MGRIT\n(under `mpiexec -n P braidpy train ...`).")
    p.add_argument("--help-all", action=_HelpAll)
    p.add_argument("source", metavar="peaks|digits|digits28|mnist|FILE",
                   help="data: the Peaks level sets, scikit-learn's 8x8 digits, the same "
                        "digits scaled to 28x28, MNIST from its IDX files (--data DIR), or "
                        "a features file (.npy, one-array .npz, or text, one sample per "
                        "row) with --labels")
    p.add_argument("--preset", choices=tuple(PRESETS), default="quick",
                   help="quick: runs in seconds to a minute (digits: shallow conv net, "
                        "Adam; mnist, digits28: 16 layers of 8 channels, Adam); paper: the paper's setup (32 layers, width 8, full-batch "
                        "L-BFGS) for every source (default quick)")
    _add_source_args(p)

    g = p.add_argument_group("network")
    g.add_argument("--width", type=count_argument(1, INT_MAX, INT_WHY), metavar="Q",
                   help=f"width (dense) or channels (conv) {_default('width')}")
    g.add_argument("--layers", type=count_argument(1, INT_MAX, INT_WHY), metavar="N",
                   help=f"residual layers = MGRIT time steps {_default('layers')}")
    g.add_argument("--tstop", type=POSITIVE, metavar="T",
                   help=f"final layer time (h = T/N) {_default('tstop')}")
    # --T: the earlier spelling, kept working but not shown (tstop is the library's word).
    g.add_argument("--T", type=POSITIVE, dest="tstop", help=argparse.SUPPRESS)
    g.add_argument("--activation", choices=activation_names(), help=_default("activation"))
    g.add_argument("--opening", choices=OPENINGS,
                   help="input layer (default dense for vectors, conv for images)")
    g.add_argument("--kernel", type=count_argument(1, INT_MAX, INT_WHY), metavar="K",
                   help=f"odd convolution kernel size {_default('kernel')}")
    g.add_argument("--init-scale", type=NONNEGATIVE, metavar="S",
                   help=f"scale of the initial layer weights {_default('init_scale')}")
    g.add_argument("--device", type=_device, metavar="cpu|cuda",
                   help="where to train: cpu (NumPy) or cuda[:N] (CuPy, the gpu "
                        "extra) (default cpu)")

    g = p.add_argument_group("layer parallelism")
    g.add_argument("--grid", type=_grid, metavar="D,S,L",
                   help="under mpiexec -n P: D data groups (each trains on its shard of "
                        "every batch) x S space (bands of a conv network's image rows) x "
                        "L layer ranks, D*S*L = P "
                        "(default 1,1,P); auto: the fastest grid the performance model "
                        "predicts from --calibration")
    g.add_argument("--calibration", metavar="FILE",
                   help="with --grid auto: the machine's costs, from braidpy calibrate -o "
                        "FILE (docs/performance.md)")
    g.add_argument("--mode", choices=MODES,
                   help="auto (serial backpropagation on one layer rank, else one-shot), "
                        "serial backpropagation, exact MGRIT gradients, or one-shot "
                        f"(m1 state and m2 adjoint iterations per step) {_default('mode')}")
    g.add_argument("--m1", type=count_argument(1, INT_MAX, INT_WHY), metavar="M",
                   help=f"one-shot state iterations {_default('m1')}")
    g.add_argument("--m2", type=count_argument(1, INT_MAX, INT_WHY), metavar="M",
                   help=f"one-shot adjoint iterations {_default('m2')}")
    g.add_argument("--levels", type=count_argument(1, INT_MAX, INT_WHY), metavar="L",
                   help=f"most MGRIT levels {_default('levels')}")
    g.add_argument("--cf", type=_cfactors, metavar="C[,C1,...]",
                   help=f"coarsening factor of every level, or one per level from level 0 "
                        f"(8,4: level 0 cf 8, level 1 and deeper cf 4) {_default('cf')}")
    g.add_argument("--relax", choices=tuple(RELAXATIONS),
                   help="MGRIT relaxation of the state and adjoint solves: F (the least "
                        "work per iteration), FCF or FCFCF (nrelax 0, 1, 2) "
                        f"{_default('relax')}")
    g.add_argument("--abs-tol", type=POSITIVE, metavar="TOL",
                   help=f"absolute MGRIT tolerance (exact mode, validation; the library's "
                        f"abs_tol) {_default('abs_tol')}")
    # --tol: the earlier spelling, kept working but not shown (abs_tol is the library's word).
    g.add_argument("--tol", type=POSITIVE, dest="abs_tol", help=argparse.SUPPRESS)
    g.add_argument("--quality-check-every", type=count_argument(0, INT_MAX, INT_WHY),
                   metavar="K",
                   help="every K steps compare the MGRIT gradient with the exact one (a "
                        "serial sweep each way); below --quality-floor the step uses the "
                        "exact gradient and one-shot takes one more iteration from then on "
                        f"(0: never) {_default('quality_check_every')}")
    g.add_argument("--quality-floor", type=_float_in(0.0, 1.0, open_low=True), metavar="COS",
                   help="the cosine to the exact gradient a checked step must reach "
                        f"{_default('quality_floor')}")

    g = p.add_argument_group("optimization")
    g.add_argument("--optimizer", choices=tuple(OPTIMIZERS),
                   help="L-BFGS with Armijo backtracking, Adam, SGD, or elastic averaging "
                        "SGD over the data groups of --grid D,S,L (D >= 2): easgd "
                        "(synchronous, deterministic) or easgd-async (grid D,1,1: the last "
                        f"rank is the centre, the others workers) {_default('optimizer')}")
    g.add_argument("--lr", type=POSITIVE, help="(initial) step size (default: the "
                   "optimizer's, lbfgs 1, adam 0.01, sgd 0.1, easgd 0.05; digits: 0.02; "
                   "mnist, digits28: 0.005)")
    g.add_argument("--momentum", type=_float_in(0.0, 1.0), metavar="B",
                   help="sgd momentum (default 0.9); easgd momentum (MEASGD, default 0.9)")
    g.add_argument("--rho", type=POSITIVE, metavar="R",
                   help="easgd: elastic strength; lr * rho * D must be < 1 (default 1)")
    g.add_argument("--tau", type=count_argument(1, INT_MAX, INT_WHY), metavar="T",
                   help="easgd: steps between elastic pulls (communications) (default 1)")
    g.add_argument("--batch", type=count_argument(1, INT_MAX, INT_WHY), metavar="N",
                   help="samples per step (default all; digits: 100; mnist, "
                        "digits28: 64)")
    g.add_argument("--shuffle", action=argparse.BooleanOptionalAction,
                   help=f"new random batch order every epoch {_default('shuffle')}")
    g.add_argument("--iterations", type=count_argument(1, INT_MAX, INT_WHY), metavar="N",
                   help=f"most optimizer steps {_default('iterations')}")
    g.add_argument("--seed", type=count_argument(0, 2**63 - 1, SEED_WHY), metavar="S",
                   help=f"data, initialization and shuffling {_default('seed')}")
    g.add_argument("--tikhonov", type=NONNEGATIVE, metavar="G",
                   help=f"weight of the layers' Tikhonov term {_default('tikhonov')}")
    g.add_argument("--ddt", type=NONNEGATIVE, metavar="G",
                   help=f"weight of the smoothness-in-layer-time term {_default('ddt')}")
    g.add_argument("--classifier-reg", type=NONNEGATIVE, metavar="G",
                   help=f"weight of the classifier/opening Tikhonov term "
                        f"{_default('classifier_reg')}")

    g = p.add_argument_group("stopping")
    g.add_argument("--validate-every", type=count_argument(0, INT_MAX, INT_WHY), metavar="K",
                   help=f"steps between validations, 0: never {_default('validate_every')}")
    g.add_argument("--validation-solve", choices=("sequential", "mgrit"),
                   help="validation's forward pass: exact, the samples shared out over the "
                        "layer ranks (the least work) or MGRIT to --abs-tol (several times "
                        f"the work; for comparison) {_default('validation_solve')}")
    g.add_argument("--patience", type=count_argument(0, INT_MAX, INT_WHY), metavar="K",
                   help="stop after this many validations without improvement (default 0: "
                        "never)")
    g.add_argument("--target-accuracy", type=_float_in(0.0, 1.0, open_low=True), metavar="A",
                   help="stop at this validation accuracy, a fraction (e.g. 0.95)")

    g = p.add_argument_group("output")
    g.add_argument("--checkpoint", metavar="FILE", help="save the training state here "
                   "(arrays plus a JSON header; see docs/training.md)")
    g.add_argument("--checkpoint-every", type=count_argument(1, INT_MAX, INT_WHY), metavar="K",
                   help=f"steps between checkpoints (and one at the end) "
                        f"{_default('checkpoint_every')}")
    g.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint (same settings and data; may raise "
                        "--iterations)")
    g.add_argument("--resume-on-new-data", action="store_true",
                   help="with --resume: continue although the checkpoint was written for "
                        "other data (its data fingerprint differs)")
    g.add_argument("--log", metavar="FILE", help="JSON lines: a header with the config and "
                   "architecture, one record per step, an end record")
    g.add_argument("--csv", metavar="FILE", help="per-step metrics as CSV, one row per step")
    g.add_argument("--plot", metavar="FILE", help="write a figure of loss, accuracy and MGRIT "
                   "convergence to FILE (.png, .pdf, .svg; needs matplotlib)")
    _add_verbosity(g)

    e = commands.add_parser(
        "evaluate", help="loss and accuracy of a checkpoint's weights on a data set",
        description="Loss and accuracy of the weights in CHECKPOINT (written by `braidpy "
                    "train --checkpoint`) on a data set, by a serial forward sweep in "
                    "batches on --device. The data set is split as in training (the "
                    "checkpoint's --seed).")
    e.set_defaults(usage_error=e.error)
    e.add_argument("checkpoint", metavar="CHECKPOINT")
    e.add_argument("source", metavar="peaks|digits|digits28|mnist|FILE",
                   help="data, as for `braidpy train` (FILE with --labels, mnist with "
                        "--data DIR; mnist's validation split is the t10k images)")
    e.add_argument("--split", choices=("validation", "train", "all"), default="validation",
                   help="which part of the data (default validation)")
    e.add_argument("--best", action="store_true",
                   help="the best validated weights instead of the last ones")
    e.add_argument("--json", action="store_true", help="print the result as one JSON object")
    _add_evaluation_args(e)
    _add_source_args(e)
    _add_verbosity(e)

    r = commands.add_parser(
        "predict", help="predicted classes of new samples",
        description="Predicted class ids of the samples in INPUT (.npy, one-array .npz, or "
                    "text with one sample per row) with the weights in CHECKPOINT, written "
                    "to OUT (.npy, or text with one id per line).")
    r.set_defaults(usage_error=r.error)
    r.add_argument("checkpoint", metavar="CHECKPOINT")
    r.add_argument("input", metavar="INPUT")
    r.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="where to write the class ids (.npy, or text: .csv, .txt)")
    r.add_argument("--probabilities", action="store_true",
                   help="write the softmax class probabilities (one row per sample) instead")
    r.add_argument("--best", action="store_true",
                   help="the best validated weights instead of the last ones")
    r.add_argument("--delimiter", default=",", metavar="SEP",
                   help="column separator of a text INPUT; 'space' for any whitespace")
    _add_evaluation_args(r)
    _add_verbosity(r)
    _perf_commands.add_commands(commands)  # calibrate, plan (braidpy.perf)
    return parser


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options not given on the command line from the preset for the data
    source (:func:`braidpy.train.presets.preset`); returns ``args``."""
    if getattr(args, "command", None) != "train":
        return args
    source = args.source if args.source in SOURCES else "*"
    values = preset(args.preset, source)
    if args.optimizer is not None and args.optimizer != values["optimizer"]:
        # A preset's step size is tuned for its optimizer (digits: Adam's 0.02; EASGD
        # took it and reached 82% where its own 0.05 reaches 93%): another optimizer
        # takes its own default.
        values = {**values, "lr": None}
    # What the command line fixed (--grid auto chooses the rest of the MGRIT setting).
    args.given = frozenset(o for o in SETTINGS if getattr(args, o) is not None)
    for option, key in SETTINGS.items():
        if getattr(args, option) is None:
            setattr(args, option, values[key])
    return args


# ------------------------------------------------------------------ data and network

Pair = Tuple[np.ndarray, np.ndarray]


def _check_source_options(args: argparse.Namespace, error: Callable[[str], None]) -> None:
    """Options that only fit some data sources; a FILE source must exist."""
    source = args.source
    if source not in SOURCES and not Path(source).is_file():
        error(f"data source {source!r} is neither {' nor '.join(SOURCES)} nor an "
              f"existing file")
    subsets = source == "mnist" or (source == "peaks" and not args.data)
    for option, value, fits in (("--data", args.data, source in ("peaks", "mnist")),
                                ("--samples", args.samples, subsets),
                                ("--validation-samples", args.validation_samples, subsets),
                                ("--labels", args.labels, source not in SOURCES),
                                ("--validation-fraction", args.validation_fraction,
                                 source not in ("peaks", "mnist"))):
        if value is not None and not fits:
            error(f"{option} does not apply to data source {source!r}"
                  + (" with --data" if args.data and source == "peaks" else ""))
    if source not in SOURCES and args.labels is None:
        error(f"features file {source!r} needs --labels FILE")
    if source == "mnist":
        from .data import MNIST_FILES

        if args.data is None:
            error(f"data source 'mnist' needs --data DIR, a folder with the MNIST IDX files "
                  f"{', '.join(MNIST_FILES)} (each may be gzipped, .gz); braidpy downloads "
                  f"nothing. Without them, 'digits28' trains on generated 28x28 digits")
        if not Path(args.data).is_dir():
            error(f"--data {args.data}: no such folder (it should hold the MNIST IDX files "
                  f"{', '.join(MNIST_FILES)})")


def _check_train_options(args: argparse.Namespace, error: Callable[[str], None]) -> None:
    """Options of ``train`` that contradict each other or name unusable files."""
    if args.resume and not args.checkpoint:
        error("--resume needs --checkpoint FILE (the file to continue from)")
    if args.resume_on_new_data and not args.resume:
        error("--resume-on-new-data applies to --resume")
    for option in ("checkpoint", "log", "csv", "plot"):  # before any data are loaded
        path = getattr(args, option)
        if path:
            try:  # a device, folder, FIFO or link: refused by name (/dev/full was written)
                _check_output_kind(f"--{option}", path)
            except OutputPathError as exc:
                error(str(exc))
    if args.resume and not Path(args.checkpoint).is_file():
        error(f"--resume: no checkpoint file {args.checkpoint!r}")
    if args.momentum is not None and args.optimizer not in ("sgd",) + ELASTIC:
        error(f"--momentum applies to --optimizer sgd, easgd or easgd-async, not "
              f"{args.optimizer!r}")
    for option in ("rho", "tau"):
        if getattr(args, option) is not None and args.optimizer not in ELASTIC:
            error(f"--{option} applies to --optimizer easgd or easgd-async, not "
                  f"{args.optimizer!r}")
    if args.optimizer in ELASTIC and args.grid is None:
        error(f"--optimizer {args.optimizer} couples data groups: give --grid D,S,L with "
              f"D >= 2 data groups (under mpiexec -n P, D*S*L = P)")
    if args.optimizer == "easgd-async" and (args.checkpoint or args.resume):
        error(f"--{'resume' if args.resume else 'checkpoint'} with --optimizer easgd-async: "
              "asynchronous EASGD cannot resume exactly (its updates depend on the order "
              "messages reach the centre); use --optimizer easgd for checkpoints")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            error(f"--plot needs matplotlib ({install_hint('train')})")
        from .train.plots import check_figure_path

        try:
            check_figure_path(args.plot)
        except ValueError as exc:
            error(f"--plot {args.plot}: {exc}")


def _check_output_kind(option: str, path: str) -> Path:
    """:func:`braidpy._limits.check_output_file`: OutputPathError naming ``option`` for a
    device, folder, FIFO, socket or link; a parent that is a file is left to
    :func:`_check_writable`, whose message names it."""
    try:
        return check_output_file(path, option)
    except OutputPathError as exc:
        if isinstance(exc.__cause__, NotADirectoryError):
            return Path(path)
        raise


def _check_writable(option: str, path: str) -> None:
    """Make sure ``path`` can be written before training starts (raises OSError naming
    the option): its folder is created, a probe file is written there and removed, and
    ``path`` itself must be absent or a regular file: a device, folder, FIFO, socket or
    symbolic link raises :class:`OutputPathError` (an OSError) naming the option."""
    target = _check_output_kind(option, path)
    try:
        if target.is_dir():
            raise OSError(f"{path!r} is a directory; give a file name")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".probe"):
            pass
    except (FileExistsError, NotADirectoryError) as exc:
        raise OSError(f"{option} {path}: cannot write there: {exc.filename or 'a parent'} "
                      f"is a file, not a folder") from exc
    except OSError as exc:
        why = exc.strerror or str(exc)
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        raise OSError(f"{option} {path}: cannot write there: {why}{where}") from exc


def _split(X: np.ndarray, C: np.ndarray, fraction: float, seed: int) -> Tuple[Pair, Any]:
    """Random validation split (seeded, like braidpy.data.digits)."""
    order = np.random.default_rng(seed).permutation(X.shape[0])
    nval = int(round(fraction * X.shape[0]))
    if nval >= X.shape[0]:
        raise ValueError(f"--validation-fraction {fraction} leaves no training samples")
    train, val = order[nval:], order[:nval]
    return (X[train], C[train]), ((X[val], C[val]) if nval else None)


def _subset(pair: Pair, n: Optional[int], seed: int, option: str, what: str) -> Pair:
    """``n`` samples of ``pair`` drawn at random with ``seed`` (kept in file order), or
    all of them when ``n`` is None."""
    X, C = pair
    if n is None:
        return X, C
    if n > X.shape[0]:
        raise ValueError(f"{option} {n}: the {what} hold only {X.shape[0]} images")
    keep = np.sort(np.random.default_rng(seed).permutation(X.shape[0])[:n])
    return X[keep], C[keep]


def _mnist(args: argparse.Namespace) -> Tuple[Pair, Optional[Pair], str]:
    """MNIST from --data: the train files for training, t10k for validation, either
    subsampled by --samples / --validation-samples (seeded with --seed, --seed + 1)."""
    from . import data

    sets = data.mnist(args.data)
    train = _subset(sets["train"], args.samples, args.seed, "--samples", "training files")
    val: Optional[Pair] = _subset(sets["test"], args.validation_samples, args.seed + 1,
                                  "--validation-samples", "t10k files")
    if val is not None and val[0].shape[0] == 0:
        val = None
    return train, val, f"MNIST from {args.data}"


#: The share of a digits or FILE source held out for validation unless
#: --validation-fraction says otherwise.
VALIDATION_FRACTION = 0.2


def _fraction(args: argparse.Namespace) -> float:
    """--validation-fraction, or its default."""
    given = args.validation_fraction
    return VALIDATION_FRACTION if given is None else given


def load_source(args: argparse.Namespace) -> Tuple[Pair, Optional[Pair], str]:
    """(training pair, validation pair or None, description) of the data source."""
    from . import data

    if args.source == "peaks":
        if args.data:
            ref = data.load_peaks_reference(args.data)
            return ref["train"], ref["validation"], f"peaks reference data from {args.data}"
        train = data.peaks(args.samples or 5000, args.seed)
        nval = 200 if args.validation_samples is None else args.validation_samples
        val = data.peaks(nval, args.seed + 1) if nval else None
        return train, val, f"peaks (generated, seed {args.seed})"
    if args.source in ("digits", "digits28"):
        if _fraction(args) >= 1:
            raise ValueError("--validation-fraction must be < 1")
        loader = data.digits if args.source == "digits" else data.digits28
        d = loader(_fraction(args), args.seed)
        val = d["validation"] if d["validation"][0].shape[0] else None
        return d["train"], val, "scikit-learn digits" + (
            " scaled to 28x28" if args.source == "digits28" else "")
    if args.source == "mnist":
        return _mnist(args)
    # None = any whitespace (documented by load_arrays, though its hint says str).
    delimiter = None if args.delimiter == "space" else args.delimiter
    X, C = data.load_arrays(args.source, args.labels,
                            delimiter=delimiter)  # type: ignore[arg-type]
    if X.ndim not in (2, 4):
        raise ValueError(f"{args.source}: samples must be vectors (n, features) or images "
                         f"(n, C, H, W), got an array of shape {X.shape}")
    train, val = _split(X, C, _fraction(args), args.seed)
    return train, val, f"{args.source} with labels {args.labels}"


def make_network(args: argparse.Namespace, X: np.ndarray, C: np.ndarray) -> ResNet:
    """The ResNet for samples shaped like X (dense for vectors, conv for images)."""
    return ResNet(X.shape[1:], C.shape[1], width=args.width, nlayers=args.layers, tstop=args.tstop,
                  activation=args.activation, opening=args.opening, kernel=args.kernel,
                  device=getattr(args, "device", None))


def make_config(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of the options (MGRIT options for both solves)."""
    return TrainConfig(
        mode=args.mode, m1=args.m1, m2=args.m2,
        relax=args.relax, cfactor=args.cf,
        mgrit=dict(max_levels=args.levels, abs_tol=args.abs_tol),
        optimizer=args.optimizer, lr=args.lr, momentum=args.momentum, rho=args.rho,
        tau=args.tau, batch_size=args.batch,
        shuffle=args.shuffle, iterations=args.iterations, tikhonov=args.tikhonov,
        ddt=args.ddt, classifier_reg=args.classifier_reg, seed=args.seed,
        init_scale=args.init_scale, validate_every=args.validate_every,
        validation_solve=args.validation_solve, patience=args.patience, target_accuracy=args.target_accuracy,
        checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
        quality_check_every=args.quality_check_every, quality_floor=args.quality_floor)


def _one_level_warning(args: argparse.Namespace, mode: str) -> Optional[str]:
    """Why MGRIT cannot use --levels here (the coarse grid would be one interval);
    ``mode``: the mode that runs."""
    cf = _level0(args.cf)
    if mode == "serial" or args.levels < 2 or args.layers // cf >= 2:
        return None
    return (f"--layers {args.layers} with --cf {cf} leaves a coarse grid of "
            f"{max(args.layers // cf, 0)} interval(s), so MGRIT runs on one level "
            f"(a serial sweep), not --levels {args.levels}; use --layers >= {2 * cf} "
            f"or a smaller --cf")


#: The options that only MGRIT uses (the gradient modes exact and oneshot).
MGRIT_OPTIONS = ("--m1", "--m2", "--relax", "--cf", "--levels", "--abs-tol", "--tol",
                 "--validation-solve", "--quality-check-every", "--quality-floor")


def _unused_mgrit_warning(argv: Sequence[str], mode: str) -> Optional[str]:
    """The MGRIT options given on the command line of a run that uses none (serial
    backpropagation), or None."""
    if mode != "serial":
        return None
    given = [o for o in MGRIT_OPTIONS if any(a == o or a.startswith(o + "=") for a in argv)]
    if not given:
        return None
    return (f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect: this run "
            f"computes gradients by serial backpropagation (mode serial; mode auto picks it "
            f"where the layers are not split over ranks); MGRIT runs with several layer "
            f"ranks (mpiexec -n P) or --mode oneshot/exact")


# ------------------------------------------------------------------ the train command


def _network_info(net: ResNet) -> Dict[str, Any]:
    return {"kind": net.kind, "input_shape": list(net.input_shape), "classes": net.nclasses,
            "width": net.width, "layers": net.nlayers, "tstop": net.tstop,
            "activation": net.activation_name, "opening": net.opening,
            "kernels": net.backend, "device": net.placement.name,
            "kernel": net.kernel if net.kind == "conv" else None, "parameters": net.nparams}


def _setup(args: argparse.Namespace, comm: Any, error: Callable[[str], None]):
    """Data, network and trainer; any bad value becomes a usage error (status 2)."""
    _check_source_options(args, error)
    _check_train_options(args, error)
    try:
        train, val, what = load_source(args)
    except (OSError, ValueError, ImportError, EOFError) as exc:
        error(f"data source {args.source!r}: {_describe(exc)}")
    X = train[0]
    n = int(X.shape[0])
    try:  # before the network's parameters are allocated (--layers 10**9 hung here)
        check_training_size(samples=min(args.batch or n, n),
                            state_numbers=args.width * math.prod(X.shape[2:])
                            if X.ndim == 4 else args.width,
                            nlayers=args.layers, width=args.width,
                            what=f"--layers {args.layers} --width {args.width}")
    except LimitError as exc:
        error(str(exc))
    try:
        net = make_network(args, *train)
    except (ImportError, RuntimeError, ValueError) as exc:  # --device cuda without CuPy/GPU
        error(_describe(exc))
    if args.grid == "auto":
        args.grid = _auto_grid(args, net, train, comm, error)
    try:
        grid = None if args.grid is None else ProcessGrid(comm, *args.grid)
        if grid is not None:
            check_training_grid(grid, net, resolve_mode(args.mode, grid.layers, grid.space))
    except ValueError as exc:
        error(f"--grid {','.join(map(str, args.grid))}: {exc}")
    try:
        if grid is not None:
            trainer = _Trainer(net, train, val, make_config(args), grid=grid)
        else:
            trainer = _Trainer(net, train, val, make_config(args), comm=comm)
        if args.resume:
            trainer.resume(args.checkpoint, allow_new_data=args.resume_on_new_data)
    except (OSError, ValueError) as exc:
        error(_describe(exc))
    return trainer, what


def _auto_grid(args: argparse.Namespace, net: ResNet, train: Any, comm: Any,
               error: Callable[[str], None]) -> Tuple[int, int, int]:
    """--grid auto: the model's fastest grid for this network and batch; for one-shot
    training (modes oneshot, auto) that checks its gradients (--quality-check-every),
    with the fastest of the qualified MGRIT settings that agree with the options given
    (braidpy.perf.auto.training_settings), which it puts in ``args``."""
    if not args.calibration:
        error("--grid auto needs --calibration FILE (write one with: braidpy calibrate -o "
              "FILE)")
    if not isinstance(args.cf, int):
        error(f"--grid auto models one coarsening factor on every level; give --cf C, not "
              f"--cf {','.join(map(str, args.cf))}")
    samples = args.batch or int(train[0].shape[0])
    spec = training_spec(net.kind, net.input_shape, net.width, net.nlayers, samples,
                         net.nclasses, net.kernel if net.kind == "conv" else None,
                         net.nparams)
    fields = {"m1": "m1", "m2": "m2", "relax": "relax", "levels": "levels", "cf": "cfactor"}
    default = Setting(args.m1, args.m2, args.relax, args.levels, args.cf)
    fixed = {field: getattr(args, option) for option, field in fields.items()
             if option in getattr(args, "given", fields)}
    checked = bool(args.quality_check_every)
    settings = training_settings(args.mode, fixed, default, checked=checked,
                                 nlayers=net.nlayers)
    try:
        choice = choose_grid(spec, comm, args.calibration, mode=args.mode,
                             settings=settings, check_every=args.quality_check_every,
                             trials=trials_per_step(args.optimizer),
                             # conv networks split image rows (exact, oneshot)
                             max_space=max_space(net, args.mode))
    except ValueError as exc:
        error(f"--grid auto: {exc}")
    chosen = choice.setting
    if chosen is not None:
        args.m1, args.m2, args.relax, args.levels, args.cf = (
            chosen.m1, chosen.m2, chosen.relax, chosen.levels, chosen.cfactor)
    if comm is None or comm.Get_rank() == 0:
        logger.info("%s", choice.summary)
        if not checked and args.mode in ("auto", "oneshot") and len(fixed) < len(fields):
            logger.info("--grid auto kept the MGRIT setting: with --quality-check-every K "
                        "it also chooses among the settings that kept the gradient-quality "
                        "floor on Peaks, and the checks hold the floor on this network")
    return choice.shape


class _Outputs:
    """Rank 0's outputs of a run: progress, logs, plot, summary (see :func:`_on_root`)."""

    def __init__(self, args: argparse.Namespace, trainer: Trainer, header: Dict[str, Any]):
        self.args, self.trainer, self.header = args, trainer, header
        self.log: Optional[JsonLog] = None
        self.csv: Optional[CsvLog] = None
        self.progress: Optional[Progress] = None

    def check(self) -> None:
        """Every file the run will write can be written (before any training)."""
        for option in ("checkpoint", "plot", "log", "csv"):
            path = getattr(self.args, option)
            if path:
                _check_writable(f"--{option}", path)

    def start(self) -> None:
        args, h = self.args, self.header
        if args.log:
            try:
                Path(args.log).parent.mkdir(parents=True, exist_ok=True)
                self.log = JsonLog(args.log, h, self.trainer.history, what="--log")
            except OutputWriteError:
                raise
            except OSError as exc:
                raise OSError(f"--log {args.log}: {exc.strerror or exc}") from exc
        if args.csv:
            try:
                Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
                self.csv = CsvLog(args.csv, self.trainer.history, what="--csv")
            except OutputWriteError:
                raise
            except OSError as exc:
                raise OSError(f"--csv {args.csv}: {exc.strerror or exc}") from exc
        if not args.quiet:
            self.progress = Progress(self.trainer.config.iterations,
                                     initial=self.trainer.iteration)
            self.progress.message(
                f"braidpy train: {h['source']}, {h['train_samples']} training / "
                f"{h['validation_samples']} validation samples; {h['architecture']} "
                f"({h['network']['kernels']} kernels on {h['network']['device']}); mode "
                f"{h['mode']}, {h['ranks']} rank(s)"
                + (" (grid data {} x space {} x layers {})".format(*h["grid"])
                   if h["grid"] else "")
                + (f"; waiting ranks sleep (BRAIDPY_WAIT; {local_ranks()} ranks on this "
                   f"node's {usable_cores()} cores)"
                   if h["ranks"] > 1 and sleeping_waits() else ""))
            if args.resume:
                self.progress.message(f"resumed from {args.checkpoint} at step "
                                      f"{self.trainer.iteration}")

    def step(self, record: Dict[str, Any]) -> None:
        if self.log:
            self.log.step(record)
        if self.csv:
            self.csv.step(record)
        if self.progress:
            self.progress.update(record)

    def finish(self, result: Dict[str, Any]) -> None:
        if self.progress:
            self.progress.close()
        if self.args.plot:
            from .train.plots import plot_history

            try:
                plot_history(self.trainer.history, self.args.plot,
                             title=self.header["architecture"])
            except OutputWriteError as exc:
                raise exc.named("--plot") from exc.reason
        if self.log:
            self.log.end(result)
        if not self.args.quiet:
            # The step lines (stderr) reach the terminal before the summary (stdout) only
            # if their pipe is read first: mpiexec forwards the two apart, in no order.
            wait_until_read(sys.stderr)
            print("\n".join(summary_lines(result)), flush=True)

    def close(self) -> None:
        if self.progress:
            self.progress.close()
        for log in (self.log, self.csv):
            if log:
                log.close()


def _train(args: argparse.Namespace, argv: List[str]) -> int:
    started = time.perf_counter()
    # Training's large NumPy temporaries are reused instead of faulted in again on every
    # batched call (braidpy.perf.allocator: 7-12% per step for peaks and digits here).
    _, allocator = keep_freed_memory()
    comm = _world()
    resolve(args)
    trainer, what = _setup(args, comm, args.usage_error)
    net, cfg = trainer.net, trainer.config
    for warning in (_one_level_warning(args, trainer.mode),
                    _unused_mgrit_warning(argv, trainer.mode)):
        if warning:
            logger.warning("%s", warning)
    layer_ranks = trainer.grid.layers if trainer.grid is not None else \
        (1 if comm is None else comm.Get_size())
    if layer_ranks == 1 and trainer.mode != "serial":
        # Measured: MNIST's quick preset, one-shot 3.3 s a step vs 0.6 s serial backprop.
        logger.warning("one layer rank: --mode %s runs MGRIT iterations where --mode serial "
                       "computes the exact gradient with several times less work; the "
                       "layer-parallel modes pay with several layer ranks (mpiexec -n P)",
                       trainer.mode)
    header = {"braidpy": __version__, "argv": argv, "source": what,
              "preset": args.preset,
              "ranks": 1 if comm is None else comm.Get_size(),
              "grid": list(trainer.grid.shape) if trainer.grid is not None else None,
              "train_samples": int(trainer.X.shape[0]),
              "validation_samples": 0 if trainer.validation is None else
              int(trainer.validation[0].shape[0]),
              "architecture": net.describe(), "network": _network_info(net),
              "mode": trainer.mode + (f" (m1={cfg.m1}, m2={cfg.m2})"
                                      if trainer.mode == "oneshot" else ""),
              "config": asdict(cfg), "data_fingerprint": trainer.data_fingerprint,
              "resumed_from": args.checkpoint if args.resume else None,
              "resumed_at": trainer.iteration if args.resume else None,
              "allocator": allocator}
    outputs = _Outputs(args, trainer, header)
    try:
        _on_root(comm, outputs.check)
        _on_root(comm, outputs.start)
    except _Failed as exc:
        args.usage_error(str(exc))
    try:
        # Non-finite numbers are caught by the trainer ("diverged") and by MGRIT
        # (DivergenceError) and reported once; numpy's warnings would repeat per rank.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # Asynchronous EASGD workers report without waiting for each other.
            trainer.run(on_step=lambda record: _on_root(trainer.step_comm,
                                                        lambda: outputs.step(record)))
        result = summary(trainer.history, trainer.best, trainer.stop_reason)
        result["wall_seconds"] = time.perf_counter() - started
        _on_root(comm, lambda: outputs.finish(result))
        # Checked here too: the trainer names the step limit when the last step diverged.
        last = trainer.history[-1] if trainer.history else {}
        if last and not np.isfinite(last["objective"]):
            raise _Failed(f"training diverged: the objective is {last['objective']} at "
                          f"step {trainer.iteration}")
    finally:
        outputs.close()
    return 0


# ------------------------------------------------------------------ evaluate and predict


def _load_model(args: argparse.Namespace) -> Tuple[ResNet, Any, Dict[str, Any]]:
    """The network of a checkpoint on --device and its weights there (usage error if it
    is not a checkpoint, or --device cuda finds no CuPy or GPU)."""
    try:  # first: a missing CuPy or GPU is named before anything is read
        where = placement(args.device)
    except (ImportError, RuntimeError, ValueError) as exc:
        args.usage_error(_describe(exc))
    try:
        state = _checkpoint.load_training(args.checkpoint)
    except (OSError, ValueError) as exc:
        args.usage_error(f"checkpoint: {_describe(exc)}")
    spec: Dict[str, Any] = state.get("network") or {}
    if not isinstance(spec, dict) or not spec:
        args.usage_error(f"checkpoint {args.checkpoint}: no network description")
    try:
        net = ResNet(tuple(spec["input_shape"]), spec["nclasses"], width=spec["width"],
                     nlayers=spec["nlayers"], tstop=spec["tstop"], activation=spec["activation"],
                     opening=spec["opening"], opening_activation=spec["opening_activation"],
                     kernel=spec["kernel"], device=where)
    except (KeyError, TypeError, ValueError) as exc:
        args.usage_error(f"checkpoint {args.checkpoint}: bad network description ({exc})")
    params = state["params"]
    if args.best:
        if state.get("best", {}).get("params") is None:
            args.usage_error(f"checkpoint {args.checkpoint}: --best, but the run never "
                             f"validated")
        params = state["best"]["params"]
    if getattr(params, "shape", None) != (net.nparams,):
        args.usage_error(f"checkpoint {args.checkpoint}: {getattr(params, 'shape', None)} "
                         f"weights for a network of {net.nparams}")
    return net, net.placement.from_host(np.asarray(params, dtype=np.float64)), state


def _as_samples(args: argparse.Namespace, net: ResNet, X: np.ndarray, what: str
                ) -> np.ndarray:
    """``X`` as samples of the network's input shape: as they are; single-channel images
    without their channel axis (scikit-learn's digits images, (N, 8, 8), for a network
    that takes (N, 1, 8, 8)); or flat rows whose length is exactly the input's size (a
    text file holds only rows: the digits' CSV has (N, 64)). Else a usage error naming
    the shapes the network takes and ``what`` (the file)."""
    shape = tuple(net.input_shape)
    if tuple(X.shape[1:]) == shape:
        return X
    size = math.prod(shape)
    one_channel = len(shape) == 3 and shape[0] == 1
    if one_channel and tuple(X.shape[1:]) == shape[1:]:
        return X.reshape((X.shape[0],) + shape)
    if len(shape) == 1 or X.ndim != 2 or X.shape[1] != size:
        also = f", {shape[1:]} (one channel)" if one_channel else ""
        flat = f"{also} or flat rows of {size} numbers" if len(shape) > 1 else ""
        args.usage_error(f"{what}: samples of shape {tuple(X.shape[1:])}, but the "
                         f"checkpoint's network takes {shape}{flat}")
    return X.reshape((X.shape[0],) + shape)


def _weights_step(state: Dict[str, Any], best: bool) -> Any:
    """The training step whose weights are evaluated: the best one's with --best."""
    if best and isinstance(state.get("best"), dict) and "iteration" in state["best"]:
        return state["best"]["iteration"]
    return state.get("iteration")


def _evaluate(args: argparse.Namespace) -> int:
    net, params, state = _load_model(args)
    config = state.get("config", {})
    args.seed = int(config.get("seed", 1))  # the split of the training run
    _check_source_options(args, args.usage_error)
    try:
        train, val, what = load_source(args)
    except (OSError, ValueError, ImportError, EOFError) as exc:
        args.usage_error(f"data source {args.source!r}: {_describe(exc)}")
    if args.split == "validation" and val is None:
        args.usage_error(f"data source {args.source!r} has no validation samples "
                         f"(use --split train or all)")
    if args.split == "train" or val is None:
        X, C = train
    elif args.split == "validation":
        X, C = val
    else:
        X, C = np.concatenate([train[0], val[0]]), np.concatenate([train[1], val[1]])
    X = _as_samples(args, net, X, what)
    if C.shape[1] != net.nclasses:
        args.usage_error(f"{what}: {C.shape[1]} classes, but the checkpoint's network "
                         f"has {net.nclasses}")
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # One forward sweep per batch on the device; the samples go there a batch at a
        # time, the loss sum and the correct count come back once.
        loss, accuracy = net.evaluate(params, X, C, args.batch_size)
    result = {"checkpoint": str(args.checkpoint), "data": what, "split": args.split,
              "samples": int(X.shape[0]), "weights": "best" if args.best else "last",
              "iteration": _weights_step(state, args.best), "loss": loss,
              "accuracy": accuracy,
              "device": net.placement.name, "batch_size": net.evaluation_batch(args.batch_size)}
    if args.json:
        print(json.dumps(result, allow_nan=False))
    elif not args.quiet:
        print(f"{what}, {args.split} ({result['samples']} samples), {result['weights']} "
              f"weights of step {result['iteration']}: accuracy "
              f"{100 * result['accuracy']:.2f}%, loss {result['loss']:.6e}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from .data._files import _read_array

    net, params, _ = _load_model(args)
    out = Path(args.output)
    if out.suffix.lower() not in (".npy", ".csv", ".txt"):
        args.usage_error(f"-o {args.output}: give a .npy, .csv or .txt file")
    try:
        X = _read_array(Path(args.input), None if args.delimiter == "space" else args.delimiter)
    except (OSError, ValueError) as exc:
        args.usage_error(f"input: {_describe(exc)}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1 and net.input_shape == (1,):
        X = X[:, None]
    X = _as_samples(args, net, X, str(args.input))
    try:
        _check_writable("-o", args.output)
    except OSError as exc:
        args.usage_error(str(exc))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # Batch by batch on the device; the results come back in one copy at the end.
        if args.probabilities:
            values = net.placement.to_host(net.probabilities(params, X, args.batch_size))
        else:
            values = np.asarray(net.placement.to_host(net.predict(params, X, args.batch_size)),
                                dtype=np.int64)
    def write(f: Any) -> None:
        if out.suffix.lower() == ".npy":
            np.save(f, values)
        else:
            np.savetxt(f, values, fmt="%d" if values.dtype.kind == "i" else "%.17g",
                       delimiter=",")

    try:
        write_atomically(out, "-o", write)
    except OutputPathError as exc:  # replaced by a device or link since the check
        args.usage_error(str(exc))
    if not args.quiet:
        print(f"wrote {'probabilities' if args.probabilities else 'class ids'} of "
              f"{X.shape[0]} samples to {out}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ entry point


def _configure_logging(args: argparse.Namespace) -> logging.Handler:
    """The ``braidpy`` logger to stderr on rank 0: WARNING by default, ERROR with -q,
    INFO with -v, DEBUG with -vv. Returns the handler (removed at the end of main)."""
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO,
                                              logging.DEBUG)[min(args.verbose, 2)]
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if _rank() == 0 \
        else logging.NullHandler()
    handler.setFormatter(logging.Formatter("braidpy: %(levelname)s: %(message)s"
                                           if level > logging.INFO else "%(name)s: %(message)s"))
    root = logging.getLogger("braidpy")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    return handler


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:  # bare `braidpy`: what it can do
        parser.print_help()
        return 0
    args = parser.parse_args(argv)  # exits with status 2 on bad options
    try:
        # Under mpiexec, a Ctrl-C from here on (MPI starts below, with the logging's
        # rank) waits for the first agreement point, where every rank stops together,
        # instead of leaving the others in a collective.
        with deferred_interrupts() if launched_ranks() > 1 else nullcontext():
            return _run_command(args, argv)
    except KeyboardInterrupt:
        if _rank() == 0:
            print(f"\nbraidpy {args.command}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - one message, no traceback, status 1
        if _rank() == 0:
            print(f"braidpy {args.command}: error: {_describe(exc)}", file=sys.stderr,
                  flush=True)
        return 1


def _run_command(args: argparse.Namespace, argv: List[str]) -> int:
    root = logging.getLogger("braidpy")
    saved = root.level, root.propagate
    handler = _configure_logging(args)
    try:
        if args.command == "train":
            return _train(args, argv)
        if args.command in _perf_commands.COMMANDS:
            return _perf_commands.run(args)
        return _evaluate(args) if args.command == "evaluate" else _predict(args)
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        root.propagate = saved[1]
