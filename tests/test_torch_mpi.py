"""braidpy.torch at 2 and 4 ranks (tests/mpi_torch_driver.py) against serial torch.

One mpiexec launch of 4 ranks runs every case on all 4 and on each half (2 ranks)."""

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_mpi import MPIEXEC  # noqa: E402
from torch_cases import adam_peaks  # noqa: E402
from mpi_process import run_mpi

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch") / "torch-4.json"
    env = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", "4", sys.executable, str(HERE / "mpi_torch_driver.py"), str(out), "4"]
    proc = run_mpi(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    ranks = json.loads(out.read_text())
    assert len(ranks) == 4
    return ranks


@pytest.fixture(scope="module")
def serial_losses():
    losses = adam_peaks(None)
    assert losses[-1] < losses[0]
    return losses


@pytest.mark.parametrize("nranks", [2, 4])
def test_layer_parallel_under_mpi(nranks, launched, serial_losses):
    groups = [launched] if nranks == 4 else [launched[:2], launched[2:]]
    for group in groups:
        results = [rank[str(nranks)] for rank in group]
        for r, res in enumerate(results):
            # Exact-mode gradients equal serial autograd through the same blocks.
            # CPU inputs on NumPy states; forced torch states (CUDA's kind) likewise.
            for kind, states in (("dense", "numpy"), ("conv", "numpy"),
                                 ("dense-torch-states", "torch")):
                e = res[kind]
                assert e["output"] < 1e-12 and e["dx"] < 1e-10 and e["params"] < 1e-10, \
                    (r, kind, e)
                assert e["path"] == "grouped" and e["states"] == states, (r, kind, e)
            # A block failing on one rank: its exception there, BraidError elsewhere.
            name, message, owns, usable = res["failing"]
            if owns:
                assert (name, message) == ("ZeroDivisionError", "block 13 divided by zero")
            else:
                assert name == "BraidError" and "ZeroDivisionError" in message, \
                    (r, name, message)
            assert usable
            # bfloat16 states (no message carries them): refused by name up front.
            built, made, called = res["bfloat16"]
            assert built[0] == "TypeError" and "block 0's 0.weight has dtype " \
                "torch.bfloat16; LayerParallel on several ranks sends" in built[1], built
            # a factory is called for the rank's own layers: each names its first one
            assert made[0] == "TypeError" and "0.weight has dtype torch.bfloat16; " \
                "LayerParallel on several ranks sends" in made[1], made
            assert called[0] == "TypeError" and "LayerParallel.forward: x has dtype " \
                "torch.bfloat16" in called[1], called
            # Adam on Peaks: the same losses as the serial run, to rounding.
            assert res["adam"] == pytest.approx(serial_losses, rel=1e-11, abs=0), r
        assert sum(res["failing"][2] for res in results) == 1
        # Layers really split: parameters per rank add up to the whole network's, and
        # coarse steps used blocks of other ranks (sent as halos).
        assert sum(res["dense"]["nparams"] for res in results) == 16 * (16 + 4)
        assert any(res["dense"]["halo"] for res in results)
