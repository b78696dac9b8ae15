"""braidpy.perf.allocator: glibc's allocator set to keep freed memory.

Each check runs in a fresh interpreter: the setting is per process and would otherwise
leak into the rest of the test session."""

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from braidpy.perf import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# System seconds of 100 allocations and frees of a 4 MiB array (each written once:
# a page fault per 4 KiB page where glibc gave the memory back to the kernel).
PROBE = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from braidpy.perf.allocator import keep_freed_memory
    out = keep_freed_memory() if sys.argv[1] == "keep" else (False, "default")
    np.ones((64, 1000, 8)); np.ones((64, 1000, 8))  # warm-up
    t = os.times().system
    for _ in range(100):
        a = np.ones((64, 1000, 8))   # 4 MiB
        b = np.ones((64, 1000, 8))
        del a, b
    print(json.dumps([out[0], out[1], os.times().system - t]))
""")


# Minor page faults of writing a 96 MiB array the second time, after the first was
# freed: above glibc's highest mmap threshold (32 MiB), such a block is mapped afresh and
# faulted in again unless mmap is off for single requests (M_MMAP_MAX 0).
LARGE_PROBE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from braidpy.perf.allocator import keep_freed_memory
    out = keep_freed_memory() if sys.argv[1] == "keep" else (False, "default")

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    counts = []
    for _ in range(2):
        before = faults()
        a = np.ones(12 * 2 ** 20)   # 96 MiB, every page written
        counts.append(faults() - before)
        del a
    print(json.dumps([out[0], out[1], counts]))
""")


def _applies(applied, what):
    """Nothing when the setting applied; on glibc, where it must apply, a failure naming
    why it did not; elsewhere (musl, say) a skip."""
    if applied:
        return
    if platform.libc_ver()[0] == "glibc":
        pytest.fail(f"glibc {platform.libc_ver()[1]}, but the allocator setting did not "
                    f"apply: {what}")
    pytest.skip(what)


def _probe(mode, probe=PROBE):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True,
                         text=True, env=env, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_glibc_constants():
    # malloc.h: #define M_TRIM_THRESHOLD -1, #define M_MMAP_THRESHOLD -3
    assert allocator.M_TRIM_THRESHOLD == -1
    assert allocator.M_MMAP_THRESHOLD == -3
    assert allocator.M_MMAP_MAX == -4
    assert allocator.MMAP_LIMIT == 32 * 2 ** 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_keeps_large_temporaries_without_page_faults():
    applied, what, kept = _probe("keep")
    _applies(applied, what)
    assert "trim threshold 1073741824 B" in what
    _, _, default = _probe("default")
    # 200 x 4 MiB written: ~200k page faults returned (tens of ms of system time) when
    # glibc trims or unmaps them; none when kept. Clock ticks are 10 ms.
    if default < 0.02:
        pytest.skip(f"this allocator does not return the memory ({default:.3f} s)")
    assert kept <= 0.5 * default, (kept, default)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_keeps_blocks_above_the_highest_mmap_threshold():
    applied, what, kept = _probe("keep", LARGE_PROBE)
    _applies(applied, what)
    assert what.endswith(", mmap max 0"), what
    _, _, default = _probe("default", LARGE_PROBE)
    # Written once, the block is faulted in (4 KiB or 2 MiB pages); freed and taken
    # again, glibc's own mmap gives fresh pages while the heap gives the same ones.
    assert default[0] >= 40 and default[1] >= default[0] // 2, default
    assert kept[0] >= 40 and kept[1] <= kept[0] // 10, (kept, default)


@pytest.mark.parametrize("name", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                  "MALLOC_MMAP_MAX_"])
def test_environment_wins_and_once_per_process(monkeypatch, name):
    monkeypatch.setattr(allocator, "_state", {"done": None})
    for other in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "1000")
    assert allocator.keep_freed_memory() == (
        False, f"left to {name} from the environment")
    monkeypatch.delenv(name)
    # Remembered: the environment's answer stands for this process.
    assert allocator.keep_freed_memory()[0] is False


def test_a_setting_that_does_not_apply_on_glibc_fails_the_checks(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("glibc", "2.39"))
    with pytest.raises(pytest.fail.Exception, match="did not apply: not applied: no"):
        _applies(False, "not applied: no glibc mallopt (test)")
    _applies(True, "trim threshold 1073741824 B")
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    with pytest.raises(pytest.skip.Exception):
        _applies(False, "not applied: no glibc mallopt (test)")
