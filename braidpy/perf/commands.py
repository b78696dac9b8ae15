"""The ``braidpy calibrate`` and ``braidpy plan`` subcommands (added to braidpy.cli).

``--cores N`` means the same in both: the cores the run's ranks have, all hosts
together. ``calibrate`` measures a run on this machine (default: its cores; with more
ranks, on N of them), ``plan`` predicts the run it plans (default: a core per rank;
with more ranks than N, compute x ranks / N, a lower bound that is not validated).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, List

from .._limits import INDEX_MAX, INT_MAX, check_output_file, plain_number
from ..parallel.agree import agreed
from .calibrate import (DEFAULT_LAYERS, DEFAULT_SAMPLES, calibrate, calibrate_follower,
                        parse_layer)
from .calibration import load_calibration, save_calibration
from .model import NETWORKS, network_spec
from .plan import CLUSTERS, format_plan, plan
from .schedule import NRELAX, RELAX_NAMES

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = ("calibrate", "plan")


def _positive_int(text: str) -> int:
    try:
        value = int(plain_number(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def _positive_int_at_most(high: int, why: str) -> Any:
    """_positive_int with an upper bound (a huge -P would plan for hours)."""
    def convert(text: str) -> int:
        digits = text.strip().lstrip("+")
        if digits.isascii() and digits.isdigit() and (len(digits) > 30 or int(digits) > high):
            raise argparse.ArgumentTypeError(f"expected an int <= {high} ({why}), got "
                                             f"{text!r}")
        return _positive_int(text)
    return convert


def _finite_float(text: str, zero_ok: bool) -> float:
    """A finite number above 0 (or at least 0, ``zero_ok``), else the error naming it."""
    want = "a number >= 0" if zero_ok else "a number > 0"
    try:
        value = float(plain_number(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
    if not (value >= 0 if zero_ok else value > 0) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    return _finite_float(text, zero_ok=False)


def _nonnegative_float(text: str) -> float:
    return _finite_float(text, zero_ok=True)


def _layer(text: str) -> str:
    try:
        parse_layer(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _network(text: str) -> str:
    # Its numbers bounded before anything is built from them: sizes (width, channels,
    # H, W, kernel) are C ints, layers the core's int64 time points (braidpy.perf.plan
    # then bounds the prediction work they make).
    parts = text.split(":")
    if parts[0] in ("dense", "conv") and len(parts) >= 3:
        for number, high, what in ([(n, INT_MAX, "size") for n in parts[1].split("x")]
                                   + [(parts[2], INDEX_MAX - 1, "layer count")]
                                   + [(n, INT_MAX, "kernel") for n in parts[3:]]):
            digits = number.strip().lstrip("+")
            if digits.isascii() and digits.isdigit() and (len(digits) > 30 or int(digits) > high):
                raise argparse.ArgumentTypeError(
                    f"network {text!r}: {what} {number} is too large (at most {high})")
    try:
        network_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _numbers(values: Any) -> str:
    """A list default as the help shows it: ``16 256 4096``."""
    return " ".join(map(str, values))


#: The help of --cores, one meaning for both commands (see the module docstring).
CORES_HELP = "cores the run's ranks have, all hosts together"


def add_commands(commands: Any) -> None:
    """Add the subcommands to braidpy.cli's subparsers."""
    c = commands.add_parser(
        "calibrate", help="measure layer, callback and network costs for braidpy plan",
        description="Measure what the performance model needs on this machine: per-layer "
                    "step, adjoint and gradient costs (plain and batched, several sample "
                    "counts), the core's cost per callback and per solve, and (under "
                    "mpiexec with 2+ ranks) point-to-point and allreduce alpha-beta; with "
                    "one rank the network costs are written as assumed defaults, marked so."
                    " With more ranks than cores, everything across ranks is measured on as "
                    "many ranks as there are cores; ranks sharing cores are not measured. "
                    "Writes versioned JSON.")
    c.set_defaults(usage_error=c.error)
    c.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="where to write the calibration, JSON (required)")
    c.add_argument("--layer", action="append", type=_layer, metavar="SPEC",
                   help="a layer to measure, dense:WIDTH or conv:CxHxW[:K]; repeat for more "
                        f"(default {_numbers(DEFAULT_LAYERS)})")
    c.add_argument("--samples", type=_positive_int, nargs="+", metavar="N",
                   default=list(DEFAULT_SAMPLES), help="samples per state to measure at "
                   f"(default {_numbers(DEFAULT_SAMPLES)})")
    rows = [1, 4, 16]
    c.add_argument("--rows", type=_positive_int, nargs="+", metavar="R", default=rows,
                   help=f"states per batched call to measure at, 1: plain calls (default "
                        f"{_numbers(rows)})")
    c.add_argument("--repeats", type=_positive_int, default=5, metavar="R",
                   help="how often each cost is timed (default %(default)s)")
    c.add_argument("--cores", type=_positive_int, metavar="N",
                   help=f"{CORES_HELP}; under mpiexec with more ranks than N, the network "
                        f"and the gradients across ranks are measured on N of them while "
                        f"the others sleep, and nothing with ranks sharing cores (default: "
                        f"this machine's, {os.cpu_count() or 1}; give the total for ranks on "
                        f"several hosts)")
    c.add_argument("--device", default="cpu", metavar="cpu|cuda|cuda:N",
                   help="where the layers' numbers live: the host (CPU time) or a CUDA GPU "
                        "through CuPy (wall time, synchronized; messages include the copies "
                        "to and from the host) (default %(default)s)")
    _verbosity(c)

    p = commands.add_parser(
        "plan", help="rank data x space x layer splits and MGRIT settings by predicted time",
        description="Predict seconds per gradient for every factorization P = data x space "
                    "x layers and MGRIT setting from a calibration file, and print the best "
                    "with the parts of their critical path. Splits that need more memory "
                    "per rank than --memory are rejected.")
    p.set_defaults(usage_error=p.error)
    p.add_argument("--calibration", required=True, metavar="FILE",
                   help="the machine's costs, written by braidpy calibrate (required)")
    p.add_argument("--network", required=True, type=_network, metavar="SPEC",
                   help=f"{', '.join(NETWORKS)}, dense:WIDTH:LAYERS or conv:CxHxW:LAYERS[:K] "
                        f"(required)")
    p.add_argument("--batch", type=_positive_int_at_most(INDEX_MAX, "an int64 count"),
                   metavar="N",
                   help="samples per gradient (default: the named network's)")
    p.add_argument("-P", "--procs", required=True, metavar="N",
                   type=_positive_int_at_most(INT_MAX, "MPI counts ranks in a C int"),
                   help="processes (or GPUs) to split (required)")
    p.add_argument("--interconnect", choices=("calibrated",) + tuple(CLUSTERS),
                   default="calibrated", help="network costs: the calibration's or a "
                                              "documented cluster's (default %(default)s)")
    p.add_argument("--memory", type=_positive_float, metavar="GIB",
                   help="memory per rank in GiB (default: no limit)")
    levels, cfactors = [2, 3, 4], [2, 4, 8, 16]
    p.add_argument("--levels", type=_positive_int, nargs="+", default=levels, metavar="L",
                   help=f"MGRIT level counts to try (default {_numbers(levels)})")
    p.add_argument("--cfactors", type=_positive_int, nargs="+", default=cfactors,
                   metavar="C", help=f"coarsening factors to try (default {_numbers(cfactors)})")
    p.add_argument("--mode", choices=("oneshot", "exact"), default="oneshot",
                   help="one-shot gradients (--m1, --m2 iterations) or exact ones (solved to "
                        "tolerance; --m1, --m2 the iterations that takes) (default "
                        "%(default)s)")
    p.add_argument("--m1", type=_positive_int, default=2, metavar="M",
                   help="one-shot primal iterations (exact: assumed primal iterations) "
                        "(default %(default)s)")
    p.add_argument("--m2", type=_positive_int, default=2, metavar="M",
                   help="one-shot adjoint iterations (exact: assumed adjoint iterations) "
                        "(default %(default)s)")
    p.add_argument("--relax", choices=tuple(NRELAX), default="FCF",
                   help="the MGRIT settings' relaxation: F, FCF or FCFCF (braidpy train's "
                        "--relax) (default %(default)s)")
    p.add_argument("--cores", type=_positive_int, metavar="N",
                   help=f"{CORES_HELP}; with more ranks than N, compute x ranks / N: a "
                        f"lower bound, not validated (default: a core per rank)")
    p.add_argument("--trials", type=_nonnegative_float, default=0.0, metavar="K",
                   help="line-search trials per optimizer step (braidpy train's L-BFGS: "
                        "1; Adam, SGD: 0): also price each step, rank the splits by it "
                        "and give the speedups per step (default %(default)g: per "
                        "gradient)")
    p.add_argument("--top", type=_positive_int, default=5, metavar="K",
                   help="how many of the best splits to print (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the ranking as JSON")
    _verbosity(p)


def _verbosity(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="library log messages on stderr: -v INFO, -vv DEBUG (default: "
                        "warnings only)")


def run(args: argparse.Namespace) -> int:
    """Run ``calibrate`` or ``plan``; errors propagate to braidpy.cli (status 1)."""
    return _calibrate(args) if args.command == "calibrate" else _plan(args)


def _world() -> Any:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def _calibrate(args: argparse.Namespace) -> int:
    from .._device import placement

    # Every rank resolves the device first (the same environment fails alike on every
    # rank, before any collective).
    where = placement(args.device)
    comm = _world()
    rank = 0 if comm is None else comm.Get_rank()
    # Rank 0's output must be a file braidpy may write (not a device, folder or link):
    # checked before minutes of measuring, and every rank learns the outcome.
    with agreed(comm, "checking -o"):
        if rank == 0:
            check_output_file(args.output, "-o")
    layers: List[str] = args.layer or list(DEFAULT_LAYERS)
    say = (lambda m: print(f"braidpy calibrate: {m}", file=sys.stderr, flush=True)) \
        if rank == 0 and not args.quiet else None
    if rank == 0:
        cal = calibrate(layers, comm=comm, samples=args.samples, rows=args.rows,
                        repeats=args.repeats, log=say, device=where, cores=args.cores)
        save_calibration(cal, args.output, what="-o")
        if not args.quiet:
            print(f"wrote {args.output}: {len(cal.layers)} layers; network "
                  f"p2p {cal.p2p.source}, allreduce {cal.allreduce.source}")
    else:  # the other ranks: the communication part, and gradients across the ranks
        calibrate_follower(comm, layers, repeats=args.repeats, device=where,
                           cores=args.cores)
    return 0


def _plan(args: argparse.Namespace) -> int:
    cal = load_calibration(args.calibration)
    net = network_spec(args.network, args.batch)
    link = None if args.interconnect == "calibrated" else CLUSTERS[args.interconnect]
    iterations = (args.m1, args.m2)
    result = plan(net, args.procs, cal, memory=None if args.memory is None else
                  args.memory * 2**30, network=link, cores=args.cores,
                  levels=args.levels, cfactors=args.cfactors, iterations=iterations,
                  mode=args.mode, nrelax=NRELAX[args.relax], trials=args.trials)
    if args.json:
        print(json.dumps({"serial_s": result.serial, "trials": result.trials,
                          "serial_step_s": result.serial_step, "ranked": [
            {"data": p.strategy.data, "space": p.strategy.space, "layers": p.strategy.layers,
             "max_levels": p.strategy.cycle.max_levels,
             "cfactor": p.strategy.cycle.cfactor_at(0),
             "relax": RELAX_NAMES.get(p.strategy.cycle.nrelax_at(0)), "seconds": p.seconds,
             "trial_seconds": p.trial_seconds, "step_seconds": p.step_seconds,
             "memory_bytes": p.memory, "parts": p.parts, "notes": p.notes}
            for p in result.ranked[:args.top]],
            "rejected": [[s.label(), why] for s, why in result.rejected]}, indent=1))
        return 0
    print(f"{args.network}: {net.kind} {'x'.join(map(str, net.shape))}, {net.nlayers} "
          f"layers, {net.samples} samples; P = {args.procs}; network: {args.interconnect}")
    print(format_plan(result, args.top))
    return 0
