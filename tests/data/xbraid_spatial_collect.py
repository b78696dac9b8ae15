"""How tests/data/xbraid_spatial.json was made: XBraid (commit 52178c8) built in XB,
drive-burgers-1D built as the driver's header says; each command run in an empty folder
with MPICH's mpiexec, its printed residuals, iteration and level counts kept, and the
values its access wrote at the final time (%.14e).

    python xbraid_spatial_collect.py xbraid_spatial.json
"""

import glob
import json
import os
import re
import subprocess
import sys

XB = "/work/xbraid"  # XBraid's checkout, built


def run(exe, args, n, cwd):
    os.makedirs(cwd, exist_ok=True)
    for f in glob.glob(os.path.join(cwd, "*")): os.remove(f)
    cmd = ["mpiexec", "-n", str(n), exe] + args
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True).stdout
    res = re.findall(r"\|\| r_(\d+) \|\| = (\S+),", out)
    rec = dict(command=f"mpiexec -n {n} {os.path.relpath(exe, XB)} {' '.join(args)}",
               nranks=n,
               residuals=[v for _, v in res],
               iterations=int(re.search(r"^\s*iterations\s+= (\d+)", out, re.M).group(1)),
               levels=int(re.search(r"number of levels\s+= (\d+)", out).group(1)),
               printed=[l for l in out.splitlines() if "|| r_" in l])
    return rec, out


def main(path):
    cases = []
    burg = f"{XB}/drivers/drive-burgers-1D"
    for sc in (0, 1, 2):
        for n in (1, 2, 4):
            args = "-prob 0 -st 0 -nx 64 -nt 128 -ml 4".split() + (["-sc", str(sc)] if sc else [])
            cwd = f"/tmp/xbraid-spatial/b{sc}_{n}"
            rec, out = run(burg, args, n, cwd)
            fin = glob.glob(f"{cwd}/drive-burgers-1D.out.0000128.*")
            assert len(fin) == 1
            lines = open(fin[0]).read().split()
            rec["final"] = lines[6:]  # after the 6 header lines: %.14e values at t = 5
            rec.update(example="drive-burgers-1D", sc=sc, nspace=64, max_levels=4)
            cases.append(rec)
    for flag, option in (("-skip 1", {"skip": True}), ("-fmg 1", {"fmg": True})):
        for n in (1, 2, 4):
            args = f"-prob 0 -st 0 -nx 64 -nt 128 -ml 4 -sc 1 {flag}".split()
            cwd = f"/tmp/xbraid-spatial/b1{flag.replace(' ', '')}_{n}"
            rec, out = run(burg, args, n, cwd)
            fin = glob.glob(f"{cwd}/drive-burgers-1D.out.0000128.*")
            assert len(fin) == 1
            rec["final"] = open(fin[0]).read().split()[6:]
            rec.update(example="drive-burgers-1D", sc=1, nspace=64, max_levels=4, options=option)
            cases.append(rec)
    ex2 = f"{XB}/examples/ex-02"
    for n, (nspace, ml) in [(n, v) for v in ((33, 4), (17, 5)) for n in (1, 2, 4)]:
        args = (f"-nspace {nspace} -ml {ml} -sc" if nspace != 33 else "-ml 4 -sc").split()
        cwd = f"/tmp/xbraid-spatial/e_{n}_{nspace}"
        rec, out = run(ex2, args, n, cwd)
        fin = glob.glob(f"{cwd}/ex-02.out.0000064.*")
        rec["final_file"] = open(fin[0]).read().split() if fin else None
        rec["error_line"] = re.findall(r"Discretization error at final time:\s+(\S+)", out)
        rec.update(example="ex-02", sc=1, nspace=nspace, max_levels=ml)
        cases.append(rec)
    json.dump(dict(xbraid_commit="52178c8", cases=cases), open(path, "w"), indent=1)
    for c in cases: print(c["command"], c["iterations"], c["levels"], c["residuals"][-1])


if __name__ == "__main__":
    main(sys.argv[1])
