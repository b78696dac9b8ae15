"""Regenerates xbraid_ks.json by running XBraid's Kuramoto-Sivashinsky driver (not needed
by the tests, which read the JSON). Usage:

    python tests/data/make_xbraid_ks.py /path/to/drive-ks > tests/data/xbraid_ks.json

The driver is XBraid's drivers/drive-KS-Delta/drive-ks.cpp with ks_lib.cpp (commit in
COMMIT), which needs Eigen 3.4 and UMFPACK (Debian: libeigen3-dev, libsuitesparse-dev;
its sources include "../Eigen/Dense", so a folder beside drive-KS-Delta must hold, or
link to, Eigen). Built without hypre:

    mpicxx -O2 -g -I<xbraid>/braid -Wno-deprecated-declarations -I/usr/include/suitesparse \\
        drive-ks.cpp ks_lib.cpp -o drive-ks <xbraid>/braid/libbraid.a -lumfpack -lm

Each case keeps the exact command, the rank count, the lines the tests compare (every
`|| r_k ||`, the iteration and level counts) and the final state u(tstop), which
``-getInit`` writes to drive-ks-init-nx<nx>.out with 17 significant digits.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
CASES = [["-nt", "256", "-tf", "1"],
         ["-nt", "128", "-tf", "1", "-ml", "2", "-nu0", "2"],
         ["-nt", "256", "-tf", "2", "-theta", "-cf", "2", "-ml", "5", "-tol", "1e-7"],
         ["-nt", "192", "-tf", "0.5", "-nx", "32", "-len", "32", "-cf0", "8", "-cf", "2",
          "-niters", "2"]]


def run(program, args, nranks):
    cmd = ["mpiexec", "-n", str(nranks), str(program), *args, "-getInit"]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
        final = next(Path(tmp).glob("drive-ks-init-nx*.out")).read_text()
    residuals = {m.group(1): m.group(2)
                 for m in re.finditer(r"\|\| r_(\d+) \|\| = (\S+),", out)}
    return dict(args=args, nranks=nranks,
                command=" ".join(["mpiexec", "-n", str(nranks), "./drive-ks", *args,
                                  "-getInit"]),
                residuals=residuals,
                iterations=int(re.search(r"^\s+iterations\s+= (\d+)", out, re.M).group(1)),
                nlevels=int(re.search(r"number of levels\s+= (\d+)", out).group(1)),
                final=[float(v) for v in final.strip().split(",")],
                output=out)


def main():
    program = Path(sys.argv[1]).resolve()
    cases = [run(program, args, n) for args in CASES for n in (1, 2, 4)]
    for k, c in enumerate(cases):
        c["id"] = f"ks{k // 3}-np{c['nranks']}"
    json.dump(dict(xbraid=f"XBraid {COMMIT}, drivers/drive-KS-Delta/drive-ks.cpp",
                   cases=cases), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
