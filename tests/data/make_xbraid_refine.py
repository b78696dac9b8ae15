"""Regenerates xbraid_refine.json by running XBraid's own examples/ex-01-refinement (not
needed by the tests, which read the JSON). Usage, with XBraid built at commit COMMIT:

    python tests/data/make_xbraid_refine.py /path/to/xbraid > tests/data/xbraid_refine.json

Each case keeps the exact command, the rank count, and what XBraid printed: every
`|| r_k ||` line in order (an iteration that refined prints its k twice), every
"Temporal refinement occurred, N time steps" line, the final number of time steps,
iterations, levels and refinements, and the value at the final time from the example's
access output file (ex-01-refinement.out.<index>.<rank>, "%.14e %.14e": t, u).
"""

import glob
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
ARGS = [["-refine", "1"], ["-refine", "2"], ["-refine", "3"], ["-refine", "4"],
        ["-refine", "1", "-fmg"], ["-refine", "4", "-MaxTotalRefine", "2"],
        ["-refine", "4", "-incMaxLvl", "-ml", "3"], ["-refine", "2", "-max_rfactor", "5"],
        ["-refine", "1", "-storage", "0"], ["-refine", "4", "-sync"]]
RANKS = (1, 2, 4)


def run(xbraid: Path, args, ranks):
    exe = xbraid / "examples" / "ex-01-refinement"
    cmd = ["mpiexec", "-n", str(ranks), str(exe), *args]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
        lines = [re.sub(r", wall time = .*", "", ln).strip() for ln in out.splitlines()
                 if ln.strip().startswith("Braid:")]

        def num(key):
            return int(re.search(r"^\s*" + key + r"\s*=\s*(\d+)", out, re.M).group(1))
        ntime = num("time steps")
        final_file = glob.glob(f"{tmp}/ex-01-refinement.out.{ntime:04d}.*")
        t, u = open(final_file[0]).read().split()
        syncs = re.search(r"num_syncs\s*=\s*(\d+)", out)
    return {
        "command": " ".join(["mpiexec", "-n", str(ranks), "ex-01-refinement", *args]),
        "args": args, "ranks": ranks, "lines": lines,
        "residuals": [[int(k), r] for k, r in re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out)],
        "refined": [int(n) for n in re.findall(r"refinement occurred, (\d+) time steps", out)],
        "ntime": ntime, "iterations": num("iterations"), "levels": num("number of levels"),
        "refinements": num("number of refinements"), "final_t": t, "final_u": u,
        "num_syncs": int(syncs.group(1)) if syncs else None,
    }


def main():
    xbraid = Path(sys.argv[1])
    cases = [run(xbraid, args, n) for args in ARGS for n in RANKS]
    print(json.dumps({"xbraid": f"XBraid {COMMIT}, examples/ex-01-refinement built with "
                                f"its Makefile (mpicc of the PyPI mpich wheel)",
                      "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
