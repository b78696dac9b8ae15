"""Regenerates xbraid_ex07_delta.json by running XBraid's examples/ex-07 (the Lorenz system
with Delta correction and Lyapunov estimates); the tests only read the JSON. Usage, with
XBraid (commit COMMIT) built in /path/to/xbraid:

    python tests/data/make_xbraid_delta.py /path/to/xbraid > tests/data/xbraid_ex07_delta.json

Each case keeps the exact command, the rank count, and what XBraid printed or wrote that the
tests compare: every `|| r_k ||` line, the iteration and level counts, the "Average Lyapunov
Exponents" line, and from the access output files (%.14e) the state and the Lyapunov
vectors at the final time (index ntime, written by the rank that owns it).
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
CASES = [[], ["-ml", "2"], ["-ml", "2", "-tstop", "1"], ["-ml", "2", "-tstop", "1", "-rank", "0"],
         ["-rank", "1", "-ml", "2"], ["-noLyap", "-ml", "2"],
         ["-fcfLyap", "-nu", "1", "-ml", "3", "-tstop", "2", "-ntime", "1024"],
         ["-defer-lvl", "1", "-defer-iter", "2", "-ml", "3"],
         ["-defer-iter", "3", "-ml", "2", "-cf", "4"]]
RANKS = (1, 2, 4)


def run(xbraid, args, nranks):
    cmd = ["mpiexec", "-n", str(nranks), str(Path(xbraid) / "examples" / "ex-07"), *args]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
        ntime = int(re.search(r"time steps = (\d+)", out).group(1))
        final, vectors = None, None
        for path in sorted(Path(tmp).glob("ex-07.out.*")):
            for line in path.read_text().splitlines():
                w = line.split()
                if w and int(w[0]) == ntime:
                    final = w[1:4]
        for path in sorted(Path(tmp).glob("ex-07-lv.out.*")):
            for line in path.read_text().splitlines():
                w = line.split()
                if w and int(w[0]) == ntime:
                    vals = w[1:]
                    vectors = [vals[4 * j + 1:4 * j + 4] for j in range(len(vals) // 4)]
    residuals = [line.strip() for line in out.splitlines() if "|| r_" in line]
    residuals = [re.sub(r", wall time = .*", "", line) for line in residuals]
    exps = re.search(r"Average Lyapunov Exponents: \[(.*)\]", out)
    return dict(command=" ".join(["ex-07", *args]), ranks=nranks,
                mpiexec=" ".join(cmd[:3]), residuals_printed=residuals,
                iterations=int(re.search(r"^\s*iterations\s+= (\d+)", out, re.M).group(1)),
                levels=int(re.search(r"number of levels\s+= (\d+)", out).group(1)),
                lyapunov_exponents=exps.group(1).split(", ") if exps else None,
                final=final, final_lyapunov_vectors=vectors)


def main():
    xbraid = sys.argv[1]
    cases = [run(xbraid, args, n) for args in CASES for n in RANKS]
    print(json.dumps(dict(
        source=f"XBraid {COMMIT} examples/ex-07.c (Lorenz, forward Euler, Delta correction), "
               f"built with the mpich wheel's mpicc; run in a fresh directory per case",
        commit=COMMIT, cases=cases), indent=1))


if __name__ == "__main__":
    main()
