"""Regenerates xbraid_debug_levels.json: XBraid's access level 3 and print level 3 as
xbraid_drivers/parity_driver.c (-access3, -print3) shows them (not needed by the tests,
which read the JSON). Usage, XBraid built in /path/to/xbraid:

    python tests/data/make_xbraid_debug_levels.py /path/to/xbraid \\
        > tests/data/xbraid_debug_levels.json

Each case keeps the exact command, the rank count, every line XBraid printed that starts
with "  Braid:  time step" or "  Braid: || r_" (print level 3's per-C-point norms and the
residual lines around them), the iteration count, and every rank's access calls in the
order XBraid made them, each as "C K L I D T R V" (the driver's line "access caller C
iter K level L index I done D t T rnorm R u V" without its words), and with -steps every
rank's step calls as the step status shows them, "C K L I N D T0 T1" (caller, iteration,
level, index, ntpoints, done, tstart, tstop).
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_xbraid_parity import COMMIT, HERE  # noqa: E402

DRIVER = [["-access3", "-print3", "-ml", "3", "-nt", "16"],
          ["-access3", "-print3", "-ml", "3", "-nt", "21", "-cf", "4", "-skip", "0"],
          ["-access3", "-print3", "-ml", "4", "-nt", "16", "-fmg", "-CWt", "1.3", "-nu", "2"],
          ["-access3", "-ml", "3", "-nt", "16", "-res", "-skip", "0", "-mi", "4"],
          ["-access3", "-print3", "-ml", "3", "-nt", "16", "-sc", "-mi", "4"],
          ["-access3", "-print3", "-ml", "3", "-nt", "2"],
          ["-steps", "-ml", "3", "-nt", "16"],
          ["-steps", "-ml", "4", "-nt", "16", "-fmg", "-CWt", "1.3", "-skip", "0", "-mi", "3"],
          ["-steps", "-ml", "3", "-nt", "16", "-res", "-mi", "3"],
          ["-steps", "-ml", "3", "-nt", "16", "-fullres", "-mi", "3"]]


def main():
    xbraid = Path(sys.argv[1])
    cases = []
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as bindir:
        driver = Path(bindir) / "parity_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid", str(HERE / "xbraid_drivers" /
                        "parity_driver.c"), "-o", str(driver), f"{xbraid}/braid/libbraid.a",
                        "-lm"], check=True)
        for nranks in (1, 2, 4):
            for args in DRIVER:
                for old in Path(tmp).glob("*"):
                    old.unlink()
                out = subprocess.run(["mpiexec", "-n", str(nranks), str(driver), *args],
                                     cwd=tmp, capture_output=True, text=True,
                                     check=True).stdout
                lines = out.splitlines()
                printed = [s for s in lines if s.startswith(("  Braid:  time step",
                                                             "  Braid: || r_"))]
                [iterations] = [int(s.split()[1]) for s in lines if s.startswith("iterations")]
                def lines(stem):  # each rank's file, its lines without their words
                    return {str(r): [" ".join(line.split()[2::2]) for line in
                                     (Path(tmp) / f"{stem}_{r}.txt").read_text().splitlines()]
                            for r in range(nranks) if (Path(tmp) / f"{stem}_{r}.txt").exists()}

                cases.append(dict(
                    id=" ".join(["parity_driver", *args]) + f" @{nranks}", nranks=nranks,
                    args=args, command=" ".join(["mpiexec", "-n", str(nranks),
                                                 "./parity_driver", *args]),
                    printed=printed, iterations=iterations, accesses=lines("access"),
                    steps=lines("steps")))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), built with the PyPI "
                          "mpich wheel's mpicc", cases=cases), sys.stdout, indent=0)
    print()


if __name__ == "__main__":
    main()
