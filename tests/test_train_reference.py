"""The quality checks' exact gradient in blocks of samples (braidpy.train.reference):
the block rule, the split over ranks, and the gradient against serial backpropagation
of the whole batch. At 1, 2 and 4 ranks: tests/train_cases.py
("blocked_reference_gradient", "train_oneshot_quality_checks_blocked"); a failing
block on one rank: tests/mpi_training_faults_driver.py ("quality check")."""

import numpy as np
import pytest

from braidpy import data
from braidpy.nn import ResNet
from braidpy.parallel.data import share_of
from braidpy.train.reference import (MAX_BLOCKS, MIN_BLOCK_ROWS, BlockedSerialEvaluator,
                                     reference_blocks)


def test_blocks_cover_the_batch_in_order_from_its_size_alone():
    assert (MAX_BLOCKS, MIN_BLOCK_ROWS) == (16, 128)
    for n in (1, 127, 128, 255, 256, 400, 2047, 2048, 2049, 5000):
        blocks = reference_blocks(n)
        assert [i for rows in blocks for i in rows] == list(range(n))
        sizes = [len(rows) for rows in blocks]
        assert len(blocks) == max(1, min(16, n // 128))
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert [len(r) for r in reference_blocks(400)] == [134, 133, 133]
    assert [len(r) for r in reference_blocks(100, min_rows=32)] == [34, 33, 33]
    assert len(reference_blocks(5000)) == 16
    assert reference_blocks(10, max_blocks=4, min_rows=2) == \
        [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]


@pytest.mark.parametrize("kw, message", [
    (dict(nsamples=0), "nsamples must be an int >= 1, got 0"),
    (dict(nsamples=10, max_blocks=0), "max_blocks must be an int >= 1, got 0"),
    (dict(nsamples=10, min_rows=2.5), "min_rows must be an int >= 1, got 2.5"),
    (dict(nsamples=10, min_rows=True), "min_rows must be an int >= 1, got True"),
])
def test_a_bad_block_rule_is_named(kw, message):
    with pytest.raises(ValueError, match=message):
        reference_blocks(**kw)


def test_a_bad_block_rule_fails_when_the_evaluator_is_made():
    net = ResNet((2,), 3, width=4, nlayers=4)
    with pytest.raises(ValueError, match="max_blocks must be an int >= 1, got -1"):
        BlockedSerialEvaluator(net, max_blocks=-1)
    with pytest.raises(ValueError, match="part 3 is not one of 3 parts"):
        share_of(10, 3, 3)


def test_ranks_share_the_blocks_contiguously_in_rank_order():
    for nblocks in range(1, 18):
        for size in range(1, 9):
            parts = [share_of(nblocks, size, r) for r in range(size)]
            assert [b for p in parts for b in p] == list(range(nblocks))
            counts = [len(p) for p in parts]
            assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("samples, nblocks", [(100, 3), (20, 1), (5000 // 8, 16)])
def test_the_gradient_is_serial_backpropagation_of_the_whole_batch(samples, nblocks):
    X, C = data.peaks(samples, 2)
    net = ResNet(X.shape[1:], C.shape[1], width=8, nlayers=24)
    p = net.init_params(3, 0.5)
    want_loss, want = net.loss_and_gradient(p, X, C)
    ev = BlockedSerialEvaluator(net, min_rows=32)
    assert len(ev.blocks(samples)) == nblocks
    loss, grad, stats = ev.gradient(p, X, C)
    assert stats["steps"] == ev.step_calls == 2 * 24
    if nblocks == 1:  # one block: serial backpropagation's own bits
        assert loss == want_loss and np.array_equal(grad, want)
    else:  # the sums over samples in another order: rounding
        assert loss == pytest.approx(want_loss, rel=1e-14)
        np.testing.assert_allclose(grad, want, rtol=0, atol=2e-15 * np.abs(want).max())
        assert not np.array_equal(grad, want)


def test_each_block_is_backpropagated_once_and_added_in_order():
    """The gradient is each block's serial gradient, weighted by its share of the
    samples, added left to right: bit for bit."""
    X, C = data.peaks(100, 2)
    net = ResNet(X.shape[1:], C.shape[1], width=8, nlayers=12)
    p = net.init_params(3, 0.5)
    want = None
    for rows in reference_blocks(100, min_rows=32):
        loss, g = net.loss_and_gradient(p, X[rows.start:rows.stop], C[rows.start:rows.stop])
        item = np.concatenate([[loss], g]) * (len(rows) / 100)
        want = item if want is None else want + item
    seen = []
    whole = net.loss_and_gradient

    def recording(params, Xb, Cb):
        seen.append(Xb.shape[0])
        return whole(params, Xb, Cb)

    net.loss_and_gradient = recording
    loss, grad, _ = BlockedSerialEvaluator(net, min_rows=32).gradient(p, X, C)
    assert seen == [34, 33, 33]
    assert loss == want[0] and np.array_equal(grad, want[1:])
