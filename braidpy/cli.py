"""The ``braidpy`` command line: ``braidpy train peaks|digits|FILE [options]``.

Trains a ResNet serially or layer-parallel (exact MGRIT gradients or one-shot) with
:class:`braidpy.train.Trainer`, showing progress and optionally writing a JSON-lines log,
checkpoints and plots. The same command runs under ``mpiexec -n P``: the layers are
split over the ranks, every rank takes the same decisions, and only rank 0 prints and
writes files. Bad options exit with status 2 and a usage message naming the value; an
error during training prints one message and exits with status 1.

Examples
--------
>>> parser = build_parser()
>>> args = parser.parse_args(["train", "peaks", "--layers", "64"])
>>> args.layers, args.width, args.mode, args.optimizer
(64, 8, 'oneshot', 'lbfgs')
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from .nn import OPENINGS, ResNet, activation_names
from .parallel import world
from .parallel.collectives import bcast_bytes
from .train import MODES, OPTIMIZERS, TrainConfig, Trainer, training_options
from .train import checkpoint as _checkpoint
from .train.progress import JsonLog, Progress, summary, summary_lines

__all__ = ["build_parser", "main"]

SOURCES = ("peaks", "digits")

EPILOG = """\
examples:
  braidpy train peaks                                  one-shot, 32 layers, L-BFGS
  braidpy train peaks --layers 128 --plot out/ --log out/log.jsonl
  mpiexec -n 4 braidpy train peaks --layers 256 --mode exact --tol 1e-8
  braidpy train digits --layers 8 --batch 100 --shuffle --optimizer adam --validate-every 10
  braidpy train X.npy --labels y.csv --validation-fraction 0.1 --opening replicate
  braidpy train peaks --checkpoint run.ckpt --iterations 200 --resume
"""


# ------------------------------------------------------------------ ranks and errors


@functools.lru_cache(maxsize=None)
def _rank() -> int:
    comm = world()
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
    if comm is not None:  # every rank learns rank 0's message (empty: it went well)
        message = bcast_bytes(comm, None if message is None else message.encode(), 0).decode(
            "utf-8", "replace") or None
    if message is not None:
        raise _Failed(message) from error


class _Parser(argparse.ArgumentParser):
    """argparse that prints (help, usage errors) on rank 0 only."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if _rank() == 0:
            super()._print_message(message, file)


class _Trainer(Trainer):
    """Trainer whose checkpoint writes cannot strand the other ranks (see :func:`_on_root`)."""

    def save(self, path: str) -> None:
        state = self.state()  # collective: gathers the MGRIT states on rank 0
        _on_root(self.comm, lambda: _checkpoint.save(path, state), f"checkpoint {path}: ")


# ------------------------------------------------------------------ argument parsing


def _int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return convert


def _float_in(low: float, high: float = float("inf"), open_low: bool = False):
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value > low if open_low else value >= low) or not value <= high:
            where = f"in {'(' if open_low else '['}{low:g}, {high:g}]" if high < float("inf") \
                else f"{'>' if open_low else '>='} {low:g}"
            raise argparse.ArgumentTypeError(f"must be {where}, got {text}")
        return value
    return convert


POSITIVE = _float_in(0.0, open_low=True)
NONNEGATIVE = _float_in(0.0)


def build_parser() -> argparse.ArgumentParser:
    """The ``braidpy`` argument parser (one sub-command, ``train``)."""
    parser = _Parser(prog="braidpy", description="braidpy: parallel-in-time (MGRIT) "
                     "integration and layer-parallel ResNet training.")
    parser.add_argument("--version", action="version", version=f"braidpy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = commands.add_parser(
        "train", help="train a ResNet, serially or layer-parallel with MGRIT",
        description="Train a ResNet classifier with layer-parallel MGRIT (one-shot or exact\n"
                    "gradients) or serial backpropagation. Runs serially or under\n"
                    "`mpiexec -n P braidpy train ...` (layers split over the ranks).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(usage_error=p.error)  # errors found after parsing show this usage line
    p.add_argument("source", metavar="peaks|digits|FILE",
                   help="data: the Peaks level sets, scikit-learn's 8x8 digits, or a "
                        "features file (.npy or text, one sample per row) with --labels")

    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="DIR", help="peaks: read the reference files "
                   "(features_training.dat, ...) from DIR instead of generating points")
    g.add_argument("--samples", type=_int_at_least(1), metavar="N",
                   help="peaks: generated training points (default 5000)")
    g.add_argument("--validation-samples", type=_int_at_least(0), metavar="N",
                   help="peaks: generated validation points (default 200)")
    g.add_argument("--labels", metavar="FILE", help="FILE source: class ids or one-hot rows")
    g.add_argument("--delimiter", default=",", metavar="SEP",
                   help="FILE source: column separator of text files; 'space' for any "
                        "whitespace (default ',')")
    g.add_argument("--validation-fraction", type=_float_in(0.0, 1.0), default=0.2,
                   metavar="F", help="digits and FILE: share held out for validation, split "
                   "with --seed (default 0.2)")

    g = p.add_argument_group("network")
    g.add_argument("--width", type=_int_at_least(1), default=8, metavar="Q",
                   help="width (dense) or channels (conv) (default 8)")
    g.add_argument("--layers", type=_int_at_least(1), default=32, metavar="N",
                   help="residual layers = MGRIT time steps (default 32)")
    g.add_argument("--T", type=POSITIVE, default=5.0, help="final layer time (default 5)")
    g.add_argument("--activation", choices=activation_names(), default="smooth_relu",
                   help="default smooth_relu")
    g.add_argument("--opening", choices=OPENINGS,
                   help="input layer (default dense for vectors, conv for images)")
    g.add_argument("--kernel", type=_int_at_least(1), default=3, metavar="K",
                   help="odd convolution kernel size (default 3)")
    g.add_argument("--init-scale", type=NONNEGATIVE, default=0.1, metavar="S",
                   help="scale of the initial layer weights (default 0.1)")

    g = p.add_argument_group("layer parallelism")
    g.add_argument("--mode", choices=MODES, default="oneshot",
                   help="serial backpropagation, exact MGRIT gradients, or one-shot "
                        "(m1 state and m2 adjoint iterations per step; default)")
    g.add_argument("--m1", type=_int_at_least(1), default=2, metavar="M",
                   help="one-shot state iterations (default 2)")
    g.add_argument("--m2", type=_int_at_least(1), default=2, metavar="M",
                   help="one-shot adjoint iterations (default 2)")
    g.add_argument("--levels", type=_int_at_least(1), default=2, metavar="L",
                   help="most MGRIT levels (default 2)")
    g.add_argument("--cf", type=_int_at_least(2), default=4, metavar="C",
                   help="coarsening factor (default 4)")
    g.add_argument("--tol", type=POSITIVE, default=1e-9, metavar="TOL",
                   help="absolute MGRIT tolerance (exact mode, validation) (default 1e-9)")

    g = p.add_argument_group("optimization")
    g.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="lbfgs",
                   help="L-BFGS with Armijo backtracking (default), Adam or SGD")
    g.add_argument("--lr", type=POSITIVE, help="(initial) step size (default: lbfgs 1, "
                   "adam 0.01, sgd 0.1)")
    g.add_argument("--momentum", type=_float_in(0.0, 1.0), metavar="B",
                   help="sgd momentum (default 0.9)")
    g.add_argument("--batch", type=_int_at_least(1), metavar="N",
                   help="samples per step (default: all)")
    g.add_argument("--shuffle", action="store_true",
                   help="new random batch order every epoch (with --batch)")
    g.add_argument("--iterations", type=_int_at_least(1), default=100, metavar="N",
                   help="most optimizer steps (default 100)")
    g.add_argument("--seed", type=_int_at_least(0), default=1, metavar="S",
                   help="data, initialization and shuffling (default 1)")
    g.add_argument("--tikhonov", type=NONNEGATIVE, default=0.0, metavar="G",
                   help="weight of the layers' Tikhonov term (default 0)")
    g.add_argument("--ddt", type=NONNEGATIVE, default=0.0, metavar="G",
                   help="weight of the smoothness-in-layer-time term (default 0)")
    g.add_argument("--classifier-reg", type=NONNEGATIVE, default=0.0, metavar="G",
                   help="weight of the classifier/opening Tikhonov term (default 0)")

    g = p.add_argument_group("stopping")
    g.add_argument("--validate-every", type=_int_at_least(0), default=1, metavar="K",
                   help="steps between validations, 0: never (default 1)")
    g.add_argument("--patience", type=_int_at_least(0), default=0, metavar="K",
                   help="stop after this many validations without improvement (default 0: "
                        "never)")
    g.add_argument("--target-accuracy", type=_float_in(0.0, 1.0, open_low=True), metavar="A",
                   help="stop at this validation accuracy, a fraction (e.g. 0.95)")

    g = p.add_argument_group("output")
    g.add_argument("--checkpoint", metavar="FILE", help="save the training state here")
    g.add_argument("--checkpoint-every", type=_int_at_least(1), default=10, metavar="K",
                   help="steps between checkpoints (and one at the end) (default 10)")
    g.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint (same settings; may raise --iterations)")
    g.add_argument("--log", metavar="FILE", help="JSON lines: a header with the config and "
                   "architecture, one record per step, an end record")
    g.add_argument("--plot", metavar="DIR", help="write PNGs of loss/accuracy and MGRIT "
                   "convergence here (needs matplotlib)")
    g.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return parser


# ------------------------------------------------------------------ data and network

Pair = Tuple[np.ndarray, np.ndarray]


def _check_source_options(args: argparse.Namespace, error: Callable[[str], None]) -> None:
    """Options that only fit some data sources; a FILE source must exist."""
    source = args.source
    if source not in SOURCES and not Path(source).is_file():
        error(f"data source {source!r} is neither {' nor '.join(SOURCES)} nor an "
              f"existing file")
    for option, value, fits in (("--data", args.data, source == "peaks"),
                                ("--samples", args.samples, source == "peaks" and not args.data),
                                ("--validation-samples", args.validation_samples,
                                 source == "peaks" and not args.data),
                                ("--labels", args.labels, source not in SOURCES)):
        if value is not None and not fits:
            error(f"{option} does not apply to data source {source!r}"
                  + (" with --data" if args.data and source == "peaks" else ""))
    if source not in SOURCES and args.labels is None:
        error(f"features file {source!r} needs --labels FILE")
    if args.resume and not args.checkpoint:
        error("--resume needs --checkpoint FILE (the file to continue from)")
    if args.checkpoint and Path(args.checkpoint).is_dir():
        error(f"--checkpoint {args.checkpoint!r} is a directory; give a file name")
    if args.resume and not Path(args.checkpoint).is_file():
        error(f"--resume: no checkpoint file {args.checkpoint!r}")
    if args.momentum is not None and args.optimizer != "sgd":
        error(f"--momentum applies to --optimizer sgd, not {args.optimizer!r}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            error("--plot needs matplotlib (pip install 'braidpy[train]')")


def _split(X: np.ndarray, C: np.ndarray, fraction: float, seed: int) -> Tuple[Pair, Any]:
    """Random validation split (seeded, like braidpy.data.digits)."""
    order = np.random.default_rng(seed).permutation(X.shape[0])
    nval = int(round(fraction * X.shape[0]))
    if nval >= X.shape[0]:
        raise ValueError(f"--validation-fraction {fraction} leaves no training samples")
    train, val = order[nval:], order[:nval]
    return (X[train], C[train]), ((X[val], C[val]) if nval else None)


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
    if args.source == "digits":
        if args.validation_fraction >= 1:
            raise ValueError("--validation-fraction must be < 1")
        d = data.digits(args.validation_fraction, args.seed)
        val = d["validation"] if d["validation"][0].shape[0] else None
        return d["train"], val, "scikit-learn digits"
    # None = any whitespace (documented by load_arrays, though its hint says str).
    delimiter = None if args.delimiter == "space" else args.delimiter
    X, C = data.load_arrays(args.source, args.labels,
                            delimiter=delimiter)  # type: ignore[arg-type]
    if X.ndim not in (2, 4):
        raise ValueError(f"{args.source}: samples must be vectors (n, features) or images "
                         f"(n, C, H, W), got an array of shape {X.shape}")
    train, val = _split(X, C, args.validation_fraction, args.seed)
    return train, val, f"{args.source} with labels {args.labels}"


def make_network(args: argparse.Namespace, X: np.ndarray, C: np.ndarray) -> ResNet:
    """The ResNet for samples shaped like X (dense for vectors, conv for images)."""
    return ResNet(X.shape[1:], C.shape[1], width=args.width, nlayers=args.layers, T=args.T,
                  activation=args.activation, opening=args.opening, kernel=args.kernel)


def make_config(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of the options (MGRIT options for both solves)."""
    return TrainConfig(
        mode=args.mode, m1=args.m1, m2=args.m2,
        mgrit=training_options(dict(max_levels=args.levels, cfactor=args.cf, abs_tol=args.tol)),
        optimizer=args.optimizer, lr=args.lr, momentum=args.momentum, batch_size=args.batch,
        shuffle=args.shuffle, iterations=args.iterations, tikhonov=args.tikhonov,
        ddt=args.ddt, classifier_reg=args.classifier_reg, seed=args.seed,
        init_scale=args.init_scale, validate_every=args.validate_every,
        patience=args.patience, target_accuracy=args.target_accuracy,
        checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every)


# ------------------------------------------------------------------ the train command


def _network_info(net: ResNet) -> Dict[str, Any]:
    return {"kind": net.kind, "input_shape": list(net.input_shape), "classes": net.nclasses,
            "width": net.width, "layers": net.nlayers, "T": net.T,
            "activation": net.activation_name, "opening": net.opening,
            "kernels": net.backend,
            "kernel": net.kernel if net.kind == "conv" else None, "parameters": net.nparams}


def _setup(args: argparse.Namespace, comm: Any, error: Callable[[str], None]):
    """Data, network and trainer; any bad value becomes a usage error (status 2)."""
    _check_source_options(args, error)
    try:
        train, val, what = load_source(args)
    except (OSError, ValueError, ImportError) as exc:
        error(f"data source {args.source!r}: {_describe(exc)}")
    try:
        net = make_network(args, *train)
        trainer = _Trainer(net, train, val, make_config(args), comm=comm)
        if args.resume:
            trainer.resume(args.checkpoint)
    except (OSError, ValueError) as exc:
        error(_describe(exc))
    return trainer, what


class _Outputs:
    """Rank 0's outputs of a run: progress, log, plots, summary (see :func:`_on_root`)."""

    def __init__(self, args: argparse.Namespace, trainer: Trainer, header: Dict[str, Any]):
        self.args, self.trainer, self.header = args, trainer, header
        self.log: Optional[JsonLog] = None
        self.progress: Optional[Progress] = None

    def start(self) -> None:
        args, h = self.args, self.header
        if args.log:
            try:
                Path(args.log).parent.mkdir(parents=True, exist_ok=True)
                self.log = JsonLog(args.log, h, self.trainer.history)
            except OSError as exc:
                raise OSError(f"--log {args.log}: {exc.strerror or exc}") from exc
        if not args.quiet:
            self.progress = Progress(self.trainer.config.iterations)
            self.progress.message(
                f"braidpy train: {h['source']}, {h['train_samples']} training / "
                f"{h['validation_samples']} validation samples; {h['architecture']} "
                f"({h['network']['kernels']} kernels); mode {h['mode']}, {h['ranks']} rank(s)")
            if args.resume:
                self.progress.message(f"resumed from {args.checkpoint} at step "
                                      f"{self.trainer.iteration}")

    def step(self, record: Dict[str, Any]) -> None:
        if self.log:
            self.log.step(record)
        if self.progress:
            self.progress.update(record)

    def finish(self, result: Dict[str, Any]) -> None:
        if self.progress:
            self.progress.close()
        if self.args.plot:
            from .train.plots import plot_history

            plot_history(self.trainer.history, self.args.plot, title=self.header["architecture"])
        if self.log:
            self.log.end(result)
        if not self.args.quiet:
            print("\n".join(summary_lines(result)), flush=True)

    def close(self) -> None:
        if self.progress:
            self.progress.close()
        if self.log:
            self.log.close()


def _train(args: argparse.Namespace, argv: List[str]) -> int:
    started = time.perf_counter()
    comm = world()
    trainer, what = _setup(args, comm, args.usage_error)
    net, cfg = trainer.net, trainer.config
    header = {"braidpy": __version__, "argv": argv, "source": what,
              "ranks": 1 if comm is None else comm.Get_size(),
              "train_samples": int(trainer.X.shape[0]),
              "validation_samples": 0 if trainer.validation is None else
              int(trainer.validation[0].shape[0]),
              "architecture": net.describe(), "network": _network_info(net),
              "mode": cfg.mode + (f" (m1={cfg.m1}, m2={cfg.m2})" if cfg.mode == "oneshot"
                                  else ""),
              "config": asdict(cfg),
              "resumed_from": args.checkpoint if args.resume else None,
              "resumed_at": trainer.iteration if args.resume else None}
    outputs = _Outputs(args, trainer, header)
    try:
        _on_root(comm, outputs.start)
    except _Failed as exc:
        args.usage_error(str(exc))
    try:
        # Non-finite numbers are caught by the trainer ("diverged") and by MGRIT
        # (DivergenceError) and reported once; numpy's warnings would repeat per rank.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            trainer.run(on_step=lambda record: _on_root(comm, lambda: outputs.step(record)))
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on bad options
    try:
        return _train(args, argv)
    except KeyboardInterrupt:
        if _rank() == 0:
            print("\nbraidpy train: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - one message, no traceback, status 1
        if _rank() == 0:
            print(f"braidpy train: error: {_describe(exc)}", file=sys.stderr, flush=True)
        return 1
