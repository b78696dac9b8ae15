"""The PyTorch examples (ex06 Peaks MLP, ex07 digits conv) run serially and under
mpiexec -n 2 and -n 4, with the same losses (to their printed digits) on every run."""

import re

import pytest
from test_examples_train import run

pytest.importorskip("torch")

TINY = {
    "ex06_torch_peaks.py": (["--layers", "16", "--samples", "100", "--steps", "3",
                             "--every", "1"], r"loss (\d+\.\d{6})"),
    "ex07_torch_digits_conv.py": (["--layers", "8", "--max-train", "60", "--batch", "30",
                                   "--epochs", "2"], r"last loss (\d+\.\d{4}), validation "
                                                     r"accuracy (\d\.\d{3})"),
}


def numbers(out, pattern):
    found = re.findall(pattern, out)
    assert found, out
    return found


@pytest.mark.parametrize("script", sorted(TINY))
def test_torch_example_serial_and_parallel_agree(script):
    args, pattern = TINY[script]
    serial = run(script, args)
    assert "1 rank(s)" in serial and "batch path grouped" in serial, serial
    first, *_, last = numbers(serial, pattern)
    assert float(last[0] if isinstance(last, tuple) else last) < \
        float(first[0] if isinstance(first, tuple) else first), serial  # it trains
    for nranks in (2, 4):
        out = run(script, args, nranks)
        assert f"on {nranks} rank(s)" in out or f"{nranks} rank(s)" in out, out
        assert numbers(out, pattern) == numbers(serial, pattern), (nranks, out, serial)
