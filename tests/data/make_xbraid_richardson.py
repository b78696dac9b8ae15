"""Regenerates xbraid_richardson.json by running XBraid's own programs (not needed by the
tests, which read the JSON). Usage, with XBraid built as the json's "xbraid" entry says:

    python tests/data/make_xbraid_richardson.py /path/to/xbraid > tests/data/xbraid_richardson.json

Runs XBraid's examples/ex-06 and ex-02 with -richardson (braid_SetRichardsonEstimation,
local order 2 for backward Euler, 3 for ex-06's SDIRK-23), ex-06 once without it, and
xbraid_drivers/richardson_driver.c (XBraid's ex-01 problem with Richardson extrapolation
and error estimates switched on from its command line, compiled here against XBraid's
libbraid.a with mpicc), each at 1, 2 and 4 ranks.

Each case keeps the exact command, the rank count and what the tests compare: every
`|| r_k ||` (in order: an iteration that refined prints twice), the iteration and level
counts and the final number of time steps; for ex-06 (-refinet: XBraid's refinement
driven by the error estimates) the final solution and error it
prints (%.20f), for ex-02 the discretization error at the final time; for the driver the
final value (%.17e) and every rank's estimate lines (the last iteration's step lines,
every sync line and the final access's lines).
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
HERE = Path(__file__).resolve().parent
RANKS = (1, 2, 4)
EX06 = [[], ["-richardson"], ["-richardson", "-nt", "64", "-cf", "4"],
        ["-richardson", "-nt", "100", "-cf", "3"], ["-richardson", "-ml", "2", "-nu", "2"],
        ["-richardson", "-time_discr", "2"], ["-refinet", "-max_tpts", "400"],
        ["-refinet", "-max_tpts", "400", "-richardson"],
        ["-nt", "19", "-time_discr", "2", "-refinet", "-max_tpts", "400", "-richardson"]]
EX02 = [["-richardson"], ["-richardson", "-ml", "3", "-nu", "2"],
        ["-richardson", "-ml", "4", "-cf", "4", "-fmg"], ["-richardson", "-skip", "1"]]
DRIVER = [["-rich", "-est", "-nt", "64", "-ml", "3"],
          ["-est", "-nt", "64", "-ml", "3"],
          ["-rich", "-est", "-nt", "50", "-ml", "3", "-cf", "3"],
          ["-rich", "-est", "-nt", "16", "-cf", "8", "-ml", "2", "-mc", "1"],
          ["-rich", "-est", "-res", "-nt", "32", "-ml", "3", "-mi", "12"],
          ["-rich", "-est", "-sc", "-nt", "32", "-ml", "3"],
          ["-rich", "-nt", "64", "-ml", "4", "-fmg", "-skip", "0", "-nu", "2", "-order", "3"]]


def residuals(out):
    return {k: v for k, v in re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out)}


def stats(out):
    return dict(iterations=int(re.search(r"^\s*iterations\s+= (\d+)", out, re.M).group(1)),
                nlevels=int(re.search(r"^\s*number of levels\s+= (\d+)", out, re.M).group(1)),
                ntime=int(re.search(r"^\s*time steps = (\d+)", out, re.M).group(1)),
                printed=re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out))


def estimate_lines(text):
    """A rank's estimate lines, shortened: the step lines of the last iteration that has
    any, each distinct line once in time order; every sync and final line."""
    lines = text.splitlines()
    steps = [line.split() for line in lines if line.startswith("step ")]
    last = max((int(w[1]) for w in steps), default=None)
    kept = sorted({" ".join(w) for w in steps if int(w[1]) == last},
                  key=lambda line: int(line.split()[2]))
    return kept + [line for line in lines if not line.startswith("step ")]


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout


def main():
    xbraid = Path(sys.argv[1])
    cases = []
    for args in EX06:
        for n in RANKS:
            with tempfile.TemporaryDirectory() as tmp:
                ex06 = str(xbraid / "examples" / "ex-06")
                out = run(["mpiexec", "-n", str(n), ex06, *args], tmp)
            final = r"Final Discretization error \(t,sol,err\):\s+(\S+) (\S+) (\S+)"
            t, sol, err = re.search(final, out).groups()
            cases.append(dict(id=" ".join(["ex-06", *args]) + f" @{n}", kind="ex06", nranks=n,
                              args=args, command=" ".join(["mpiexec", "-n", str(n), "./ex-06",
                                                           *args]),
                              residuals=residuals(out), **stats(out), sol=sol, err=err))
    for args in EX02:
        for n in RANKS:
            with tempfile.TemporaryDirectory() as tmp:
                out = run(["mpiexec", "-n", str(n), str(xbraid / "examples" / "ex-02"), *args], tmp)
            error = re.search(r"Discretization error at final time:\s+(\S+)", out).group(1)
            cases.append(dict(id=" ".join(["ex-02", *args]) + f" @{n}", kind="ex02", nranks=n,
                              args=args, command=" ".join(["mpiexec", "-n", str(n), "./ex-02",
                                                           *args]),
                              residuals=residuals(out), **stats(out), error=error))
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "richardson_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid",
                        str(HERE / "xbraid_drivers" / "richardson_driver.c"), "-o", str(driver),
                        f"{xbraid}/braid/libbraid.a", "-lm"], check=True)
        for args in DRIVER:
            for n in RANKS:
                for old in Path(tmp).glob("est_*.txt"):
                    old.unlink()
                out = run(["mpiexec", "-n", str(n), str(driver), *args], tmp)
                lines = {str(r): estimate_lines((Path(tmp) / f"est_{r}.txt").read_text())
                         for r in range(n)}
                cases.append(dict(
                    id=" ".join(["richardson_driver", *args]) + f" @{n}", kind="driver",
                    nranks=n, args=args,
                    command=" ".join(["mpiexec", "-n", str(n), "./richardson_driver", *args]),
                    residuals=residuals(out),
                    iterations=int(re.search(r"^iterations (\d+)", out, re.M).group(1)),
                    final=re.search(r"final u\(T\) = (\S+)", out).group(1), estimates=lines))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), examples built with "
                          "the PyPI mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
