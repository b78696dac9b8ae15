"""braidpy.spatial_accuracy against XBraid's braid_GetSpatialAccuracy.

tests/data/xbraid_spatial_accuracy.json holds, for every distinct step call of three
driver runs (tests/data/XBRAID_GOLDEN_NOTES.md), the inputs XBraid's function read from
its step status and the tolerance it returned (loose 1e-2, tight 1e-10); every result
must agree to the last bit.
"""

import json
from pathlib import Path

import pytest

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_spatial_accuracy.json").read_text())


def inputs(values):
    """(rnorm, rnorm0, tol, level, previous, result) as XBraid chooses them: the first
    norm (the second one if the first is missing), the last (else the one before)."""
    w = values.split()
    level = int(w[0])
    f0, f1, l0, l1, tol, old, out = map(float, w[1:])
    rnorm0 = f1 if f0 == -1.0 and f1 != -1.0 else f0
    rnorm = l0 if l1 == -1.0 and l0 != -1.0 else l1
    return (None if rnorm == -1.0 else rnorm, None if rnorm0 == -1.0 else rnorm0, tol, level,
            old, out)


def test_matches_xbraid():
    rows = DATA["rows"]
    assert len(rows) > 100
    results = set()
    for row in rows:
        rnorm, rnorm0, tol, level, previous, out = inputs(row["values"])
        got = braidpy.spatial_accuracy(rnorm, rnorm0, tol, DATA["loose_tol"],
                                       DATA["tight_tol"], level=level, previous=previous)
        assert got == out, row
        results.add(out)
    # every branch: loose, tight, interpolated, and capped by the previous value
    assert {1e-2, 1e-10} <= results and len(results) > 10


def test_never_grows_on_the_fine_level():
    loose = braidpy.spatial_accuracy(1e-1, 1.0, 1e-8, 1e-2, 1e-10)
    assert braidpy.spatial_accuracy(1e-1, 1.0, 1e-8, 1e-2, 1e-10, previous=loose / 2) == loose / 2
    assert braidpy.spatial_accuracy(1e-1, 1.0, 1e-8, 1e-2, 1e-10, level=1,
                                    previous=loose / 2) == 1e-2


@pytest.mark.parametrize("rnorm0", [None, -1.0])
def test_no_history_is_loose(rnorm0):
    assert braidpy.spatial_accuracy(None, rnorm0, 1e-8, 1e-3, 1e-12) == 1e-3
