"""Regenerates xbraid_combos.json: XBraid's own programs run with two features at once
(not needed by the tests, which read the JSON). Usage, XBraid built in /path/to/xbraid
(drive-burgers-1D built as xbraid_spatial_collect.py says):

    python tests/data/make_xbraid_combos.py /path/to/xbraid > tests/data/xbraid_combos.json

The pairs: ex-02 with a user residual and spatial coarsening (-res -sc), weighted
C-relaxation and spatial coarsening (-CWt -sc), residual and weights (-res -CWt), all
three; drive-burgers-1D with -CWt and -sc 1; ex-01-expanded with -res -periodic (and
-sync, -fmg); xbraid_drivers/parity_driver.c with -res and -periodic, -CWt, -sync, -fmg,
and with -sc (a scalar coarsen 0.75 u whose refine is a copy) with -periodic, -res, -CWt,
-fullres (the full residual norm, printed as "Full || r_k ||").
Each case keeps the exact command, the rank count and what XBraid printed: every
`|| r_k ||`, the iteration count, the level count where printed, ex-02's discretization
error, drive-burgers-1D's values at the final time, the driver's final value and sync
calls.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_xbraid_parity import COMMIT, HERE, parse, parse_driver  # noqa: E402

EX02 = [["-res", "-sc", "-ml", "4"], ["-CWt", "1.3", "-sc", "-ml", "4"], ["-res", "-CWt", "1.3"],
        ["-res", "-CWt", "1.3", "-sc", "-ml", "4"],
        ["-CWt", "0.7", "-sc", "-ml", "4", "-nu", "2", "-skip", "1"]]
BURGERS = [["-prob", "0", "-st", "0", "-nx", "64", "-nt", "128", "-ml", "4", "-sc", "1",
            "-CWt", "1.3"]]
EX01X = [["-res", "-periodic", "-ntime", "64", "-ml", "3", "-skip", "0"],
         ["-res", "-periodic", "-sync", "-ntime", "64", "-ml", "3", "-skip", "0", "-fmg"]]
DRIVER = [["-res", "-periodic", "-nt", "64", "-ml", "3", "-CWt", "1.3"],
          ["-res", "-CWt", "1.3", "-ml", "4", "-nt", "64", "-skip", "0", "-sync"],
          ["-res", "-periodic", "-sync", "-nt", "64", "-ml", "4", "-skip", "0", "-fmg", "-CWt",
           "1.3"],
          ["-sc", "-periodic", "-nt", "64", "-ml", "3"],
          ["-sc", "-periodic", "-nt", "64", "-ml", "4", "-skip", "0", "-CWt", "1.3", "-sync"],
          ["-sc", "-res", "-ml", "4", "-nt", "64", "-fmg"],
          ["-sc", "-res", "-periodic", "-nt", "64", "-ml", "3"],
          ["-fullres", "-sc", "-ml", "3", "-nt", "64"],
          ["-fullres", "-sc", "-ml", "4", "-nt", "64", "-skip", "0", "-CWt", "1.3", "-sync"]]


def execute(cmd, cwd):
    for old in Path(cwd).glob("*"):
        old.unlink()
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout


def main():
    xbraid = Path(sys.argv[1])
    cases = []

    def add(kind, program, args, nranks, found):
        cases.append(dict(id=" ".join([program, *args]) + f" @{nranks}", kind=kind,
                          nranks=nranks, args=args,
                          command=" ".join(["mpiexec", "-n", str(nranks), "./" + program,
                                            *args]), **found))

    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as bindir:
        driver = Path(bindir) / "parity_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid", str(HERE / "xbraid_drivers" /
                        "parity_driver.c"), "-o", str(driver), f"{xbraid}/braid/libbraid.a",
                        "-lm"], check=True)
        for nranks in (1, 2, 4):
            mpi = ["mpiexec", "-n", str(nranks)]
            for args in EX02:
                add("ex02", "ex-02", args, nranks,
                    parse(execute(mpi + [str(xbraid / "examples" / "ex-02"), *args], tmp)))
            for args in BURGERS:
                found = parse(execute(mpi + [str(xbraid / "drivers" / "drive-burgers-1D"),
                                             *args], tmp))
                [last] = Path(tmp).glob("drive-burgers-1D.out.0000128.*")
                found["final"] = last.read_text().split()[6:]  # after its 6 header lines
                add("burgers", "drive-burgers-1D", args, nranks, found)
            for args in EX01X:
                add("ex01x", "ex-01-expanded", args, nranks,
                    parse(execute(mpi + [str(xbraid / "examples" / "ex-01-expanded"), *args],
                                  tmp)))
            for args in DRIVER:
                out = execute(mpi + [str(driver), *args], tmp)
                found = parse_driver(out, tmp)
                # "Braid: || r_k ||" and, with -fullres, "Braid: Full || r_k ||" apart
                found["residuals"] = dict(re.findall(r"Braid: \|\| r_(\d+) \|\| = (\S+),", out))
                if "-fullres" in args:
                    found["full"] = dict(re.findall(r"Full \|\| r_(\d+) \|\| = (\S+),", out))
                add("driver", "parity_driver", args, nranks, found)
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), examples built with "
                          "the PyPI mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
