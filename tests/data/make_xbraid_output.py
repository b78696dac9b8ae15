"""Regenerates xbraid_output.json by running tests/data/xbraid_drivers/output_driver.c
(compiled against XBraid's libbraid.a with mpicc) with the output-side settings: storage
(braid_SetStorage) with a step that reads ustop, and the residual history file that
braid_WriteConvHistory writes. Not needed by the tests, which read the JSON. Usage:

    python tests/data/make_xbraid_output.py /path/to/xbraid > tests/data/xbraid_output.json

Each case keeps the exact command, the rank count, XBraid's printed `|| r_k ||` lines,
the iteration count, the final value and the text of the file braid_WriteConvHistory
wrote (rank 0), and of XBraid's cycle file braid.out.cycle; with -timings 2 also every
rank's braid_PrintTimers file.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from make_xbraid_parity import COMMIT, HERE, parse_driver

RES = ["-ml", "4", "-nt", "32", "-res", "0.3"]
# (driver arguments, rank counts); every case also writes its residual history file.
DRIVER = [(RES + ["-storage", s], (1, 2, 4)) for s in ("-1", "0", "1", "2", "3")] + [
    (["-ml", "3", "-nt", "64", "-cf", "4", "-nu", "2", "-res", "0.5", "-storage", "1",
      "-fmg"], (1, 2, 4)),
    (["-ml", "3", "-nt", "48", "-cf", "4", "-skip", "0", "-res", "0.4", "-storage", "0"],
     (1, 2, 4)),
    (["-ml", "4", "-nt", "32", "-storage", "0"], (1, 2, 4)),
    (["-ml", "4", "-nt", "32", "-skip", "0"], (1, 2, 4)),
    (["-ml", "1", "-nt", "8"], (1, 2)),
    (["-ml", "3", "-nt", "16", "-timings", "2"], (1, 2)),
    (["-ml", "3", "-nt", "16", "-fmg"], (1, 2, 4)),
    (["-ml", "4", "-nt", "32", "-fmg", "-nfmg", "1"], (1, 2, 4)),
    (["-ml", "4", "-nt", "64", "-fmg", "-nfmg", "2", "-skip", "0"], (1, 2, 4)),
    (["-ml", "3", "-nt", "2"], (1, 2)),
    (["-ml", "4", "-nt", "32", "-rtol", "1e-4"], (1, 2, 4)),
    (["-ml", "3", "-nt", "32", "-skip", "0", "-rtol", "1e-3", "-fmg"], (1, 2, 4)),
]


def main():
    xbraid = sys.argv[1]
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "parity_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid", str(HERE / "xbraid_drivers" /
                        "output_driver.c"), "-o", str(driver), f"{xbraid}/braid/libbraid.a",
                        "-lm"], check=True)
        for args, ranks in DRIVER:
            args = args + ["-convhist", "convhist.txt"]
            for nranks in ranks:
                cmd = ["mpiexec", "-n", str(nranks), str(driver), *args]
                out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                     check=True).stdout
                found = parse_driver(out, tmp)
                found.pop("syncs")
                found["convhist"] = (Path(tmp) / "convhist.txt").read_text()
                found["cycle_file"] = (Path(tmp) / "braid.out.cycle").read_text()
                timers = sorted(Path(tmp).glob("braid_timings_*.txt"))
                if timers:  # -timings 2: every rank's timer file (times vary run to run)
                    found["timer_files"] = {p.name: p.read_text() for p in timers}
                    for p in timers:
                        p.unlink()
                cases.append(dict(id=" ".join(["parity_driver", *args]) + f" @{nranks}",
                                  kind="driver", nranks=nranks, args=args,
                                  command=" ".join(["mpiexec", "-n", str(nranks),
                                                    "./parity_driver", *args]), **found))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), output_driver.c built "
                          "with the PyPI mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
