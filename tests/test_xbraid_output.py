"""Storage levels and the residual history file against XBraid's own output, at 1, 2
and 4 ranks.

tests/data/xbraid_output.json holds what tests/data/xbraid_drivers/output_driver.c
(XBraid's ex-01 problem) printed with braid_SetStorage(core, S) and a user residual whose
step reads ustop (-res W: it solves only partly, from ustop), and the text of the file
braid_WriteConvHistory wrote for each run (tests/data/make_xbraid_output.py made it).
Stored F-points change what ustop is, so each storage level has its own history;
braidpy's ``storage=S`` must print the same residuals to all 7 digits, the same
iteration count and final value, and ``Result.write_conv_history`` must write the same
file byte for byte.
"""

import re

import pytest
from test_mpi import run_driver
from xbraid_output_cases import OWNERS_NTIME, cases, output_options, run_case, run_owners

import braidpy


def layout(text):
    """A timer file with its times blanked: the lines, names and number formats."""
    return re.sub(r"\d\.\d{3}e[+-]\d{2}", "#.###e+##", text)


def assert_same_history_file(got, expected, where, exact):
    """Byte for byte; across ranks (``exact=False``) a residual line may differ in its
    15th digit, where the norm's last bit can go (MPI's sum over ranks)."""
    if exact:
        assert got == expected, where
        return
    got_lines, lines = got.splitlines(), expected.splitlines()
    assert len(got_lines) == len(lines), where
    for g, e in zip(got_lines, lines):
        if g != e:  # the same words but numbers, which agree to their 15th digit
            gw, ew = g.split(), e.split()
            assert len(gw) == len(ew) and not g.startswith("#"), (where, g, e)
            for a, b in zip(gw, ew):
                if a != b:
                    assert "e" in b and abs(float(a) - float(b)) <= 1.5e-14 * abs(float(b)), \
                        (where, g, e)


def assert_as_printed(got, case):
    assert got["iterations"] == case["iterations"], case["id"]
    assert got["residuals"] == case["residuals"], case["id"]
    assert got["final"] == case["final"], case["id"]
    assert_same_history_file(got["convhist"], case["convhist"], case["id"],
                             exact=case["nranks"] <= 2)
    assert_same_history_file(got["cycle_file"], case["cycle_file"], case["id"] + " (cycle)",
                             exact=case["nranks"] <= 2)
    expected = case.get("timer_files", {})
    assert sorted(got["timer_files"]) == sorted(expected), case["id"]
    for name, text in expected.items():
        assert layout(got["timer_files"][name]) == layout(text), case["id"]


def test_reference_tells_the_storage_levels_apart():
    histories = {}
    for case in cases(1):
        _, options, weight = output_options(case["args"])
        if weight == 0.3:
            histories[options["storage"]] = case["residuals"]
    assert sorted(histories) == [-1, 0, 1, 2, 3]
    # Level 3 is the coarsest of 4: storing it changes nothing (its F-sweep reads ustop
    # = v either way); every other level gives its own history.
    assert histories[3] == histories[-1]
    assert len({str(h) for h in histories.values()}) == 4


@pytest.mark.parametrize("case", cases(1), ids=lambda c: c["id"])
def test_serial(case):
    assert_as_printed(run_case(case), case)
    if "-res" not in case["args"]:
        assert_as_printed(run_case(case, batched=True), case)


@pytest.mark.parametrize("nranks", [2, 4])
def test_at_its_rank_count(nranks, tmp_path):
    expected = cases(nranks)
    got = run_driver(nranks, "output", tmp_path)
    assert got.pop("owners") == xbraid_owners(nranks)
    assert sorted(got) == sorted([c["id"] + s for c in expected
                                  for s in ("", "/batched") if s == "" or "-res" not in c["args"]])
    for case in expected:
        assert_as_printed(got[case["id"]], case)
        if "-res" not in case["args"]:
            assert_as_printed(got[case["id"] + "/batched"], case)


def xbraid_owners(nranks, ntime=OWNERS_NTIME, cfactor=3, nlevels=3):
    """XBraid's braid_StatusGetProc (distribution.c): a level's index maps to the fine
    grid, then the block distribution of the ntime + 1 fine points; -1 outside."""
    npoints, out = ntime + 1, []
    for level in range(nlevels):
        n = ntime // cfactor ** level
        row = []
        for i in range(-1, n + 2):
            fine = i * cfactor ** level
            if not 0 <= fine < npoints:
                row.append(-1)
                continue
            quo, rem = divmod(npoints, nranks)
            p, q = fine // (quo + 1), (fine - rem * (quo + 1)) // quo
            row.append(p if p < rem else rem + q)
        out.append(row)
    return out


def test_status_proc_serial():
    assert run_owners() == xbraid_owners(1)


def test_storage_spellings():
    assert braidpy.Options(storage=-1).to_core().store_all is False
    assert braidpy.Options(storage=0).to_core().store_all is True
    assert braidpy.Options(storage=0).to_core().storage == 0
    assert braidpy.Options(storage=2).to_core().store_all is False
    assert braidpy.Options(storage=2).to_core().storage == 2
    assert braidpy.Options(storage="all").to_core().storage == -1
    for bad in (-2, "some", 1.5, True):
        with pytest.raises((ValueError, TypeError), match="storage"):
            braidpy.Options(storage=bad)


def test_storage_zero_keeps_fine_f_points():
    from xbraid_parity_cases import Ex01

    core = braidpy.Core(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3, storage=0)
    core.solve()
    assert core.stored(3) is not None
    core = braidpy.Core(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3, storage=1)
    core.solve()
    assert core.stored(3) is None


def test_timings_levels_and_timer_file(tmp_path, monkeypatch):
    from xbraid_parity_cases import Ex01

    with pytest.raises(ValueError, match="timings must be"):
        braidpy.Options(timings=3)
    with pytest.raises(TypeError, match="timings must be"):
        braidpy.Options(timings="yes")
    with pytest.raises(ValueError, match="timer_file"):
        braidpy.Options(timer_file="")
    monkeypatch.chdir(tmp_path)
    r = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3, timings=1)
    assert r.timings["step"] > 0 and not list(tmp_path.iterdir())  # level 1: no file
    r = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3, timings=2)
    text = (tmp_path / "braid_timings_0000.txt").read_text()
    assert text == r.timers(0) and f"   step             {r.timings['step']:1.3e}\n" in text
    untimed = braidpy.solve(Ex01(record_syncs=False), 0.0, 5.0, 16, max_levels=3)
    with pytest.raises(ValueError, match="timings=True"):
        untimed.timers()
