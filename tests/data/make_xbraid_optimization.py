"""Regenerates xbraid_ex01_optimization.json (not needed by the tests, which read the
JSON). Usage, XBraid built in /path/to/xbraid:

    python tests/data/make_xbraid_optimization.py /path/to/xbraid > tests/data/xbraid_ex01_optimization.json

Runs XBraid's examples/ex-01-optimization (adjoint with braid_SetPostprocessObjective and
_diff; it has no options) and xbraid_drivers/adjoint_driver.c (the same problem with the
tolerances on its command line: XBraid's defaults, and run to convergence) with mpiexec
-n 1, 2, 4, and keeps every printed objective and gradient norm.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
HERE = Path(__file__).resolve().parent
DRIVER = [["-oi", "2"], ["-tol", "1e-14", "-tola", "1e-14", "-mi", "100", "-oi", "3"]]


def main():
    xbraid = Path(sys.argv[1])
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "adjoint_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid",
                        str(HERE / "xbraid_drivers" / "adjoint_driver.c"), "-o", str(driver),
                        f"{xbraid}/braid/libbraid.a", "-lm"], check=True)
        for nranks in (1, 2, 4):
            mpi = ["mpiexec", "-n", str(nranks)]
            out = subprocess.run(mpi + [str(xbraid / "examples" / "ex-01-optimization")],
                                 cwd=tmp, capture_output=True, text=True, check=True).stdout
            lines = re.findall(r"^\s*(\d+): Objective = (\S+),  \|\| Gradient \|\| = (\S+)",
                               out, re.M)
            cases.append(dict(kind="ex-01-optimization", nranks=nranks, args=[],
                              command=f"mpiexec -n {nranks} ./ex-01-optimization",
                              iterations=[dict(k=int(k), objective=o, gnorm=g)
                                          for k, o, g in lines],
                              converged="Optimization has converged" in out))
            for args in DRIVER:
                out = subprocess.run(mpi + [str(driver), *args], cwd=tmp, capture_output=True,
                                     text=True, check=True).stdout
                lines = re.findall(r"^k (\d+) objective (\S+) gradient (\S+)", out, re.M)
                cases.append(dict(kind="adjoint_driver", nranks=nranks, args=args,
                                  command=" ".join(mpi + ["./adjoint_driver", *args]),
                                  iterations=[dict(k=int(k), objective=o, gradient=g)
                                              for k, o, g in lines]))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), built with the PyPI "
                          "mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
