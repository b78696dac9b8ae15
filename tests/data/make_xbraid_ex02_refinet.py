r"""Regenerates xbraid_ex02_refinet.json by running XBraid's own ex-02 (not needed by the
tests, which read the JSON). Usage, with XBraid built as the json's "xbraid" entry says:

    python tests/data/make_xbraid_ex02_refinet.py /path/to/xbraid \
        > tests/data/xbraid_ex02_refinet.json

Runs examples/ex-02 (the 1D heat equation, backward Euler) with -refinet TOL: error
estimates on (braid_SetRichardsonEstimation with est_error 1, local order 2), refinement
on (braid_SetRefine, braid_SetTPointsCutoff 10000), and a step that asks each fine
interval to be split into ceil(sqrt(estimate / TOL)) pieces once an estimate exists.
Each option set runs at 1, 2 and 4 ranks.

Each case keeps the exact command, the rank count and what the tests compare: every
`|| r_k ||` in printed order (an iteration that refined prints twice), the grid sizes of
the "Temporal refinement occurred, N time steps" lines, the iteration, level and
refinement counts, the final number of time steps and the discretization error at the
final time (%1.4e); and, from the files ex-02's final access writes
(ex-02.out.<index>.<rank>), the time of every point of the final grid and the solution
at the final time (both %.14e).
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
RANKS = (1, 2, 4)
CASES = [["-ntime", "8", "-refinet", "1e-2"],
         ["-refinet", "1e-3"],
         ["-ntime", "8", "-refinet", "1e-2", "-richardson"],
         ["-ntime", "16", "-refinet", "1e-3", "-ml", "3", "-fmg"],
         ["-ntime", "32", "-refinet", "1e-3", "-ml", "4", "-cf", "4", "-mc", "2"],
         ["-ntime", "8", "-refinet", "1e-2", "-nu", "2", "-skip", "1"],
         ["-ntime", "8", "-refinet", "1e-2", "-res"],
         ["-ntime", "16", "-refinet", "3e-3", "-res", "-ml", "3", "-fmg", "-cf", "4"]]


def parse(out):
    stat = {name: int(re.search(rf"^\s*{label}\s+= (\d+)", out, re.M).group(1))
            for name, label in (("iterations", "iterations"), ("nlevels", "number of levels"),
                                ("refinements", "number of refinements"))}
    return dict(printed=re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out),
                grids=[int(n) for n in
                       re.findall(r"Temporal refinement occurred, (\d+) time steps", out)],
                ntime=int(re.search(r"^\s*time steps = (\d+)", out, re.M).group(1)),
                error=re.search(r"Discretization error at final time:\s+(\S+)", out).group(1),
                **stat)


def solution_files(tmp, ntime):
    """The final grid's times by index, and the values at the last point."""
    times, final = {}, None
    for path in Path(tmp).glob("ex-02.out.*"):
        index = int(path.name.split(".")[2])
        lines = path.read_text().split()
        times[index] = lines[3]
        if index == ntime:
            final = lines[7:]
    assert sorted(times) == list(range(ntime + 1))
    return [times[i] for i in range(ntime + 1)], final


def main():
    ex02 = str(Path(sys.argv[1]) / "examples" / "ex-02")
    cases = []
    for args in CASES:
        for n in RANKS:
            with tempfile.TemporaryDirectory() as tmp:
                out = subprocess.run(["mpiexec", "-n", str(n), ex02, *args], cwd=tmp,
                                     capture_output=True, text=True, check=True).stdout
                got = parse(out)
                times, final = solution_files(tmp, got["ntime"])
            cases.append(dict(id=" ".join(["ex-02", *args]) + f" @{n}", nranks=n, args=args,
                              command=" ".join(["mpiexec", "-n", str(n), "./ex-02", *args]),
                              **got, times=times, final=final))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), examples built with "
                          "the PyPI mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
