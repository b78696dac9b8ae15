"""Regenerates xbraid_parity.json by running XBraid's own programs (not needed by the tests,
which read the JSON). Usage, with XBraid built as the json's "xbraid" entry says:

    python tests/data/make_xbraid_parity.py /path/to/xbraid > tests/data/xbraid_parity.json

Runs XBraid's examples/ex-02 and ex-06 (-periodic), and xbraid_drivers/parity_driver.c (a small program on
XBraid's ex-01 problem that sets what no shipped example sets: sync, nfmg, per-level
C-relaxation weights, periodic with those), compiled here against XBraid's libbraid.a with mpicc.

Each case keeps the exact command, the rank count, and the lines XBraid printed that the
tests compare: every `|| r_k ||`, the iteration and level counts and, for ex-02, the
discretization error at the final time, for ex-06 the value at t_0 from its output file.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "52178c8"
HERE = Path(__file__).resolve().parent
EX06 = [["-periodic"], ["-periodic", "-nt", "64", "-cf", "4", "-nu", "2"],
        ["-periodic", "-nt", "128", "-ml", "3", "-mi", "4"]]
# (driver arguments, rank counts)
DRIVER = [(["-sync", "-ml", "3", "-nt", "16"], (1, 2, 4)),
          (["-sync", "-ml", "4", "-nt", "32", "-skip", "0", "-fmg", "-CWt", "1.4"], (1, 2, 4)),
          (["-sync", "-ml", "1", "-nt", "8"], (1, 2)),
          (["-sync", "-ml", "3", "-nt", "2"], (1, 2)),
          (["-ml", "4", "-nt", "64", "-fmg"], (1, 2, 4)),
          (["-ml", "4", "-nt", "64", "-fmg", "-nfmg", "0"], (1, 2, 4)),
          (["-ml", "4", "-nt", "64", "-fmg", "-nfmg", "2", "-skip", "0"], (1, 2, 4)),
          (["-ml", "5", "-nt", "64", "-fmg", "-nfmg", "1", "-CWt", "1.2", "-CWtl", "1", "0.8"],
           (1, 2, 4)),
          (["-ml", "3", "-nt", "64", "-cf", "4", "-rcg", "-CWt", "1.3", "-CWtl", "2", "0.7"],
           (1, 2, 4)),
          (["-periodic", "-nt", "64", "-ml", "3"], (1, 2, 4)),
          (["-periodic", "-sync", "-nt", "64", "-ml", "4", "-skip", "0", "-fmg", "-CWt", "1.3"],
           (1, 2, 4)),
          (["-periodic", "-nt", "48", "-ml", "3", "-cf", "4", "-nu", "2"], (1, 2, 4)),
          (["-periodic", "-nt", "32", "-ml", "3", "-rcg", "-CWtl", "2", "0.8"], (1, 2, 4))]
EX02 = [[], ["-CWt", "1.3"], ["-CWt", "1.3", "-ml", "4", "-nu", "2"],
        ["-CWt", "0.7", "-ml", "3", "-cf", "4", "-fmg"], ["-CWt", "1.5", "-ml", "4", "-skip", "1"]]


def run(xbraid, program, args, nranks):
    cmd = ["mpiexec", "-n", str(nranks), str(Path(xbraid) / program), *args]
    with tempfile.TemporaryDirectory() as tmp:  # ex-02 writes its solution files here
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
    return cmd, out


def parse_driver(out, folder):
    syncs = {}
    lines = [line for path in sorted(Path(folder).glob("sync_*.txt"))
             for line in path.read_text().splitlines()]
    for line in lines:
        if line.startswith("sync rank "):
            w = line.split()
            f = dict(zip(w[1:19:2], w[2:19:2]))
            syncs.setdefault(f["rank"], []).append(dict(
                caller=int(f["caller"]), iteration=int(f["iter"]), level=int(f["level"]),
                nlevels=int(f["nlevels"]), done=int(f["done"]), ntime=int(f["ntime"]),
                lo=int(f["lo"]), hi=int(f["hi"]), rnorms=w[20:]))
    final = re.search(r"final u\(T\) = (\S+)", out)
    return dict(residuals={k: v for k, v in re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out)},
                iterations=int(re.search(r"^iterations (\d+)", out, re.M).group(1)),
                final=final.group(1) if final else None, syncs=syncs)


def parse(out):
    found = dict(
        residuals={k: v for k, v in re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out)},
        not_available=re.findall(r"\|\| r_(\d+) \|\| not available", out),
        iterations=int(re.search(r"^\s*iterations\s+= (\d+)", out, re.M).group(1)),
        nlevels=int(re.search(r"^\s*number of levels\s+= (\d+)", out, re.M).group(1)))
    error = re.search(r"Discretization error at final time:\s+(\S+)", out)
    if error:
        found["error"] = error.group(1)
    return found


def run_ex06(xbraid, args, nranks):
    """ex-06's printed lines, and u at index 0 from the file its access writes last
    (ex-06.out.0000.000: t, index, ntime, u, estimate, error)."""
    cmd = ["mpiexec", "-n", str(nranks), str(Path(xbraid) / "examples" / "ex-06"), *args]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
        first = (Path(tmp) / "ex-06.out.0000.000").read_text().split()
    found = parse(out)
    found["u0"] = first[3]
    return found


def main():
    xbraid = sys.argv[1]
    cases = []
    for args in EX06:
        for nranks in (1, 2, 4):
            cases.append(dict(id=" ".join(["ex-06", *args]) + f" @{nranks}", kind="ex06",
                              nranks=nranks, args=args,
                              command=" ".join(["mpiexec", "-n", str(nranks), "./ex-06", *args]),
                              **run_ex06(xbraid, args, nranks)))
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "parity_driver"
        subprocess.run(["mpicc", "-O2", f"-I{xbraid}/braid", str(HERE / "xbraid_drivers" /
                        "parity_driver.c"), "-o", str(driver), f"{xbraid}/braid/libbraid.a",
                        "-lm"], check=True)
        for args, ranks in DRIVER:
            for nranks in ranks:
                cmd = ["mpiexec", "-n", str(nranks), str(driver), *args]
                for old in Path(tmp).glob("sync_*.txt"):
                    old.unlink()
                out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                     check=True).stdout
                cases.append(dict(id=" ".join(["parity_driver", *args]) + f" @{nranks}",
                                  kind="driver", nranks=nranks, args=args,
                                  command=" ".join(["mpiexec", "-n", str(nranks),
                                                    "./parity_driver", *args]),
                                  **parse_driver(out, tmp)))
    for args in EX02:
        for nranks in (1, 2, 4):
            cmd, out = run(xbraid, "examples/ex-02", args, nranks)
            name = " ".join(["ex-02", *args]) + f" @{nranks}"
            cases.append(dict(id=name, kind="ex02", nranks=nranks, args=args,
                              command=" ".join(["mpiexec", "-n", str(nranks), "./ex-02", *args]),
                              **parse(out)))
    json.dump(dict(xbraid=f"XBraid {COMMIT} (github.com/XBraid/xbraid), examples built with "
                          "the PyPI mpich wheel's mpicc", cases=cases), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
