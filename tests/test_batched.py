"""Batched relaxation (App.step_batch / step_stacked): same results as unbatched."""

import numpy as np
import pytest
from apps import BatchedDecay, Decay, DenseResNet
from batched_cases import BATCHED_CASES

import braidpy


def assert_batched_equals_unbatched(case, where):
    on, off = case["True"], case["False"]
    on, off = dict(on), dict(off)
    on.pop("batched_calls"), off.pop("batched_calls")
    assert on == off, where  # bitwise: values, residual histories, iterations


@pytest.mark.parametrize("name", sorted(BATCHED_CASES))
def test_batched_equals_unbatched(name):
    case = BATCHED_CASES[name](None)
    assert_batched_equals_unbatched(case, name)
    if name not in ("decay_one_level", "warm_restart"):
        assert case["True"]["batched_calls"] > 0, "the batched path was not taken"
    assert case["False"]["batched_calls"] == 0
