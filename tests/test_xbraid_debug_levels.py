"""Access level 3 and print level 3 against XBraid (tests/data/xbraid_debug_levels.json,
made by tests/data/make_xbraid_debug_levels.py from xbraid_drivers/parity_driver.c
-access3 / -print3 at 1, 2 and 4 ranks).

Every access call is compared: its calling function, iteration, level, index, done, time,
the status's residual norm and the value (all to 17 digits), sweep by sweep in XBraid's
order of sweeps (inside one sweep XBraid walks a rank's intervals from the right and
braidpy its own way, so each sweep's calls are compared as a set). Print level 3's
per-C-point norms and the residual lines around them are compared as printed.
"""

import contextlib
import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from debug_level_cases import (BAD_OUTPUTS, by_iteration, cases, output_failures, run_case,
                               segments)
from test_mpi import run_driver
from xbraid_parity_cases import Ex01

import braidpy


def assert_xbraid(got, case):
    # braidpy's residual lines end at the norm (XBraid's add its conv factor and time)
    want = [line.split(", conv")[0].split(", wall")[0] for line in case["printed"]]
    if "-print3" in case["args"]:
        assert got["printed"] == want
    assert got["iterations"] == case["iterations"]
    assert sorted(got["accesses"]) == sorted(case["accesses"])
    for rank, lines in case["accesses"].items():
        assert segments(got["accesses"][rank]) == segments(lines), f"rank {rank}"
    assert sorted(got["steps"]) == sorted(case["steps"])
    for rank, lines in case["steps"].items():
        if "-fullres" in case["args"]:  # XBraid restricts once more after its final full
            # norm (drive.c), a sweep whose values nothing reads; braidpy leaves it out
            last = str(case["iterations"])
            lines = [s for s in lines if not (s.split()[1] == last and
                                              s.split()[0] in ("1", "10", "11"))]
        assert by_iteration(got["steps"][rank]) == by_iteration(lines), f"rank {rank}"


@pytest.mark.parametrize("case,batched", [(c, b) for c in cases(1) for b in (False, True)
                                          if not (b and "-res" in c["args"])],
                         ids=lambda v: v["id"] if isinstance(v, dict) else str(v))
def test_serial(case, batched):  # (a user residual runs unbatched)
    assert_xbraid(run_case(case, batched=batched), case)


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    expected = cases(nranks)
    got = run_driver(nranks, "debug", tmp_path)
    assert_output_failures(got.pop("output failures"), nranks)
    assert sorted(got) == sorted([c["id"] + s for c in expected for s in ("", "/batched")
                                  if not (s and "-res" in c["args"])])
    for case in expected:
        assert_xbraid(got[case["id"]], case)
        if "-res" not in case["args"]:
            assert_xbraid(got[case["id"] + "/batched"], case)


def test_the_reference_covers_every_sweep_and_the_uneven_count():
    callers = {line.split()[0] for c in cases() for lines in c["accesses"].values()
               for line in lines}
    assert callers == {"0", "1", "3", "6"}  # FInterp, FRestrict, FAccess, FCRelax
    levels = {line.split()[2] for c in cases() for lines in c["accesses"].values()
              for line in lines}
    assert {"0", "1", "2", "3"} <= levels
    # -nt 21 -cf 4: XBraid prints ceil(21/4) + 1 norms, the last (time step 24) 0
    callers = {line.split()[0] for c in cases() for lines in c["steps"].values()
               for line in lines}  # and FASResidual, Residual, ComputeFullRNorm in steps
    assert callers == {"0", "1", "3", "6", "9", "10", "11"}
    [case] = [c for c in cases(1) if "21" in c["args"]]
    assert case["printed"][6] == "  Braid:  time step:     24, rnorm: 0.00e+00"


def test_level_3_changes_no_value():
    quiet = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 32, max_levels=3,
                          abs_tol=1e-12)
    with contextlib.redirect_stdout(io.StringIO()):
        loud = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 32, max_levels=3,
                             abs_tol=1e-12, access_level=3, print_level=3)
    assert loud.residuals == quiet.residuals
    assert np.array_equal(loud.final, quiet.final)


@pytest.mark.parametrize("name", ["access_level", "print_level"])
def test_level_3_refused_with_periodic(name):
    with pytest.raises(ValueError, match=f"{name}=3 is not available with periodic"):
        braidpy.Options(periodic=True, **{name: 3})
    with pytest.raises(ValueError, match=f"{name} must be 0, 1, 2 or 3, got 4"):
        braidpy.Options(**{name: 4})


def test_access_level_3_refused_with_temporal_refinement():
    with pytest.raises(ValueError, match="access_level=3 is not available with refine=True"):
        braidpy.Options(refine=True, access_level=3)


def test_a_failing_access_at_level_3_is_raised():
    class Fails(Ex01):
        def access(self, u, status):
            if status.caller == "FRestrict" and status.level == 1:
                raise ZeroDivisionError("planted")

    with pytest.raises(ZeroDivisionError, match="planted"):
        braidpy.solve(Fails(record_syncs=False), 0.0, 5.0, 16, max_levels=3, access_level=3)


def test_status_ntime_and_caller_in_every_kind_of_call():
    seen = {}

    class Watch(Ex01):
        def step(self, u, t0, t1, status):
            seen.setdefault(("step", status.caller), status.ntime)
            super().step(u, t0, t1, status)

        def access(self, u, status):
            seen.setdefault(("access", status.caller), status.ntime)

        def _sync(self, status):
            seen.setdefault(("sync", status.caller), status.caller_code)

    app = Watch(record_syncs=True)
    braidpy.solve(app, 0.0, 5.0, 16, max_levels=3, access_level=2)
    assert seen.pop(("sync", "Drive_AfterInit")) == 7
    assert seen.pop(("sync", "Drive_TopCycle")) == 5
    assert seen == {(kind, c): 16 for kind, c in [
        ("step", "FInterp"), ("step", "FCRelax"), ("step", "FRestrict"),
        ("step", "FASResidual"), ("step", "Residual"), ("step", "FAccess"),
        ("access", "FAccess")]}


def test_running_objective_status_has_ntime():
    from apps import DecayRate

    from braidpy.adjoint import gradient

    seen = []

    class Watch(DecayRate):
        def _running_objective(self, u, t, status):
            seen.append((status.ntime, status.phase, status.caller))
            return super()._running_objective(u, t, status)

    gradient(Watch(running=True), 0.0, 2.0, 16)
    assert set(seen) == {(16, "objective", None)}


# ------------------------------------------------ timer and cycle files that cannot be written

def assert_output_failures(got, nranks):
    got = {case: [tuple(r) for r in ranks] for case, ranks in got.items()}  # JSON: lists
    assert sorted(got) == sorted(BAD_OUTPUTS)
    device = "cycle_file /dev/full: is a character device, not a regular file"
    assert got["cycle_file /dev/full"][0] == ("OutputPathError", device + "; braidpy writes "
                                              "regular files only")
    where = "cycle_file /dev/null/braid.out.cycle: cannot be checked (Not a directory)"
    assert got["cycle_file under /dev/null"][0] == ("OutputPathError", where)
    for case in ("cycle_file /dev/full", "cycle_file under /dev/null"):
        for kind, message in got[case][1:]:  # rank 0 writes it; the others are told
            assert kind == "BraidError"
            assert "writing the timer and cycle files failed on another rank" in message
            assert f"rank 0: OutputPathError: {got[case][0][1]}" in message
    assert got["timer_file under /dev/null"] == [
        ("OutputPathError", f"timer_file /dev/null/timers_{r:04d}.txt: cannot be checked "
                            f"(Not a directory)") for r in range(nranks)]


def test_unwritable_output_files_name_the_option_and_file():
    assert_output_failures(output_failures(), 1)


LIMITED = textwrap.dedent("""
    import resource, signal, sys
    sys.path.insert(0, sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))  # a write past 16 bytes: EFBIG
    import braidpy
    from xbraid_parity_cases import Ex01
    try:
        braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=2,
                      timings=2 if sys.argv[2] == "timer_file" else 0,
                      **{sys.argv[2]: sys.argv[3]})
    except OSError as exc:
        print(type(exc).__name__, exc)
""")


@pytest.mark.parametrize("option", ["cycle_file", "timer_file"])
def test_a_full_disk_names_the_option_and_file(tmp_path, option):
    """A write past a file size limit (EFBIG; a full disk's ENOSPC takes the same path)."""
    target = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", LIMITED, os.path.dirname(__file__), option,
                           str(target)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    name = target if option == "cycle_file" else f"{target}_0000.txt"
    assert proc.stdout.startswith(f"OutputWriteError {option} {name}: could not write it "
                                  f"(File too large); nothing was written"), proc.stdout
    assert [p.name for p in tmp_path.iterdir()] == []  # no half file, no .tmp


def test_refinement_calls_name_xbraid_s_callers():
    """Temporal refinement's steps are XBraid's FRefine (2), its sync after the new
    hierarchy FRefine_AfterInitHier (4)."""
    from refine_cases import Ex01Refinement

    seen = set()

    class Watch(Ex01Refinement):
        def step(self, u, t0, t1, status):
            seen.add(("step", status.phase, status.caller, status.caller_code))
            super().step(u, t0, t1, status)

        def sync(self, status):
            seen.add(("sync", status.phase, status.caller, status.caller_code))

    braidpy.solve(Watch(refine=4), 0.0, 5.0, 16, max_levels=2, refine=True)
    assert ("step", "refine", "FRefine", 2) in seen
    assert ("sync", "refine", "FRefine_AfterInitHier", 4) in seen
    assert {c for kind, phase, c, _ in seen if phase == "refine"} == \
        {"FRefine", "FRefine_AfterInitHier"}
