"""The gradient-quality checks of training (TrainConfig.quality_check_every,
braidpy.train.quality): the cosine against serial backpropagation, exact gradients on
steps below the floor, one more one-shot iteration after them, and checkpoints that keep
the raised counts. Rank-count independence: tests/train_cases.py
("train_oneshot_quality_checks", run at 1, 2, 4 ranks by tests/test_train_mpi.py)."""

import logging

import array_api_strict as xps
import numpy as np
import pytest

from braidpy import data
from braidpy.nn import ResNet
from braidpy.train import TrainConfig, Trainer
from braidpy.train.quality import (MAX_ONESHOT_ITERATIONS, QUALITY_FLOOR, gradient_cosine,
                                   next_iterations)


def peaks_problem(nlayers=32, samples=120):
    X, C = data.peaks(samples, 1)
    return ResNet(X.shape[1:], C.shape[1], width=8, nlayers=nlayers), X, C


def config(**kw):
    base = dict(mode="oneshot", m1=1, m2=1, relax="F", iterations=6, validate_every=0)
    return TrainConfig(**{**base, **kw})


# ------------------------------------------------------------------ the pieces
def test_cosine_matches_the_definition_on_numpy_and_another_namespace():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(50), rng.standard_normal(50)
    want = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert gradient_cosine(a, b) == pytest.approx(want, rel=1e-13)
    dev = xps.Device("device1")
    got = gradient_cosine(xps.asarray(a, device=dev), xps.asarray(b, device=dev))
    assert got == pytest.approx(want, rel=1e-13)
    assert gradient_cosine(a, a) == pytest.approx(1.0, abs=1e-15)
    assert gradient_cosine(a, -a) == pytest.approx(-1.0, abs=1e-15)
    assert gradient_cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert gradient_cosine(np.zeros(3), np.ones(3)) == 0.0


def test_iterations_rise_adjoint_first_up_to_the_cap():
    ladder, pair = [(1, 1)], (1, 1)
    for _ in range(4 * MAX_ONESHOT_ITERATIONS):  # bounded: a broken ladder must not hang
        if (pair := next_iterations(*pair)) is None:
            break
        ladder.append(pair)
    assert ladder[:5] == [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]
    assert ladder[-1] == (MAX_ONESHOT_ITERATIONS, MAX_ONESHOT_ITERATIONS)
    assert all(b[0] + b[1] == a[0] + a[1] + 1 for a, b in zip(ladder, ladder[1:]))
    assert next_iterations(1, 4) == (2, 4)  # an adjoint already ahead: the state catches up


@pytest.mark.parametrize("kw, message", [
    (dict(quality_check_every=-1), "quality_check_every must be an int >= 0"),
    (dict(quality_check_every=True), "quality_check_every must be an int >= 0"),
    (dict(quality_check_every=2.0), "quality_check_every must be an int >= 0"),
    (dict(quality_floor=0.0), "quality_floor must be a number in (0, 1]"),
    (dict(quality_floor=1.5), "quality_floor must be a number in (0, 1]"),
    (dict(quality_floor=float("nan")), "quality_floor must be a number in (0, 1]"),
    (dict(quality_floor="0.99"), "quality_floor must be a number in (0, 1]"),
    (dict(mode="serial", quality_check_every=5), "mode 'serial' computes exact ones"),
    (dict(optimizer="easgd", quality_check_every=5), "per-group"),
])
def test_bad_quality_options_are_named(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        TrainConfig(**kw)


def test_defaults_check_nothing():
    cfg = TrainConfig()
    assert cfg.quality_check_every == 0 and cfg.quality_floor == QUALITY_FLOOR == 0.99


def test_mode_auto_on_one_layer_rank_has_nothing_to_check():
    net, X, C = peaks_problem(nlayers=8, samples=40)
    trainer = Trainer(net, (X, C), None, config(mode="auto", quality_check_every=1,
                                                iterations=2))
    assert trainer.mode == "serial" and trainer.quality_check_every == 0
    assert all("gradient_cosine" not in r for r in trainer.run())


# ------------------------------------------------------------------ in training
@pytest.mark.parametrize("fits", [True, False])
def test_reference_is_serial_backpropagation(monkeypatch, fits):
    """Serial backpropagation of fixed blocks of samples, added in block order, where a
    rank holds a block's states (within rounding of one serial gradient of the whole
    batch); else one MGRIT level through the layer ranks, with serial
    backpropagation's bits."""
    import braidpy.train.trainer as trainer_module
    from braidpy.train import reference as reference_module
    from braidpy.train.evaluate import LayerParallelEvaluator
    from braidpy.train.reference import BlockedSerialEvaluator

    monkeypatch.setattr(reference_module, "MIN_BLOCK_ROWS", 32)
    net, X, C = peaks_problem()
    if not fits:
        monkeypatch.setattr(trainer_module, "SWEEP_WORKSPACE_MAX_BYTES", 0)
    trainer = Trainer(net, (X, C), None, config(quality_check_every=1, iterations=2))
    trainer.run()
    reference = trainer._reference_evaluator(X, C)
    assert isinstance(reference, BlockedSerialEvaluator if fits else LayerParallelEvaluator)
    loss, grad, _ = reference.gradient(trainer.params, X, C)
    want_loss, want = net.loss_and_gradient(trainer.params, X, C)
    if fits:
        assert len(reference.blocks(X.shape[0])) == 3  # 120 samples, 32 at least each
        assert loss == pytest.approx(want_loss, rel=1e-14)
        np.testing.assert_allclose(grad, want, rtol=0, atol=1e-14 * np.abs(want).max())
    else:
        assert loss == want_loss and np.array_equal(grad, want)
        cache = reference.app.slope_cache  # the adjoint's kept activation slopes
        assert cache.kept > 0 and cache.given > 0


def test_cosines_are_measured_against_serial_backpropagation():
    net, X, C = peaks_problem()
    trainer = Trainer(net, (X, C), None, config(quality_check_every=2, quality_floor=0.5))
    ev = trainer.evaluator
    seen = []
    gradient = ev.gradient

    def spy(params, X_, C_, average=None):
        out = gradient(params, X_, C_)
        seen.append((np.array(params), np.array(out[1])))
        return out

    ev.gradient = spy
    history = trainer.run()
    checked = [r["iteration"] for r in history if "gradient_cosine" in r]
    assert checked == [2, 4, 6]
    for r in history:
        if "gradient_cosine" not in r:
            continue
        params, g = seen[r["iteration"] - 1]
        exact = net.loss_and_gradient(params, X, C)[1]
        want = g @ exact / (np.linalg.norm(g) * np.linalg.norm(exact))
        assert r["gradient_cosine"] == pytest.approx(want, abs=1e-12)
        assert r["exact_gradient_used"] is False and r["quality_check_steps"] == 2 * 32
    assert trainer.oneshot == (1, 1)  # above the floor: nothing raised


def test_steps_below_the_floor_take_the_exact_gradient_and_raise_the_iterations(caplog):
    """SGD (no line search) with every step checked against a floor no inexact gradient
    meets: training follows serial backpropagation's SGD, and the iterations climb."""
    net, X, C = peaks_problem()
    common = dict(optimizer="sgd", lr=0.05, iterations=5)
    with caplog.at_level(logging.WARNING, logger="braidpy.train"):
        checked = Trainer(net, (X, C), None, config(quality_check_every=1, quality_floor=1.0,
                                                    **common))
        history = checked.run()
    serial = Trainer(net, (X, C), None, config(mode="serial", **common))
    serial_history = serial.run()
    unchecked = Trainer(net, (X, C), None, config(**common))
    unchecked_history = unchecked.run()
    # A step below the floor reports the exact loss along with the exact gradient, not
    # the one-shot solve's loss, which differs visibly from it.
    below = [i for i, r in enumerate(history) if r["exact_gradient_used"]]
    assert len(below) >= 3
    for i in below:
        assert history[i]["loss"] == pytest.approx(serial_history[i]["loss"], rel=1e-12,
                                                   abs=0), history[i]["iteration"]
    assert any(abs(unchecked_history[i]["loss"] - serial_history[i]["loss"])
               > 1e-8 * abs(serial_history[i]["loss"]) for i in below)
    # Step 1 starts from the sequential solution (exact to rounding): whatever it used,
    # the runs agree to rounding, and the one-shot run without checks does not.
    scale = np.linalg.norm(serial.params - net.init_params(1, 0.1))
    assert np.linalg.norm(checked.params - serial.params) < 1e-12 * scale
    assert np.linalg.norm(unchecked.params - serial.params) > 1e-6 * scale
    raised = [tuple(r["oneshot"]) for r in history if r.get("exact_gradient_used")]
    assert len(raised) >= 3 and raised == [(1, 2), (2, 2), (2, 3), (3, 3), (3, 4)][:len(raised)]
    assert checked.oneshot == raised[-1]
    assert checked.evaluator.oneshot == raised[-1]
    assert any("below the floor 1.0" in m and f"m1={raised[-1][0]}, m2={raised[-1][1]}" in m
               for m in caplog.messages)


def test_raised_iterations_continue_the_solves_where_they_were():
    """set_oneshot to the same counts rebuilds the solver from this rank's C-points: the
    run is the same, bit for bit, as one that never rebuilt."""
    net, X, C = peaks_problem()
    straight = Trainer(net, (X, C), None, config(m2=2))
    straight.run()
    rebuilt = Trainer(net, (X, C), None, config(m2=2, iterations=3))
    rebuilt.run()
    old = rebuilt.evaluator.solver
    rebuilt.evaluator.set_oneshot(1, 2)
    assert rebuilt.evaluator.solver is not old  # a new solver, started from the C-points
    rebuilt.config.iterations = 6
    rebuilt.run()
    assert np.array_equal(rebuilt.params, straight.params)
    with pytest.raises(ValueError, match="m2 must be an int >= 1, got 0"):
        rebuilt.evaluator.set_oneshot(1, 0)


def test_a_checkpoint_keeps_the_raised_iterations(tmp_path):
    net, X, C = peaks_problem()
    path = str(tmp_path / "run.npz")
    kw = dict(quality_check_every=2, quality_floor=1.0, iterations=6)
    whole = Trainer(net, (X, C), None, config(**kw))
    whole.run()
    first = Trainer(net, (X, C), None, config(**{**kw, "iterations": 4}, checkpoint=path))
    first.run()
    assert first.oneshot != (1, 1)
    resumed = Trainer(net, (X, C), None, config(**kw))
    resumed.resume(path)
    assert resumed.oneshot == first.oneshot
    resumed.run()
    assert resumed.oneshot == whole.oneshot
    assert np.array_equal(resumed.params, whole.params)


# ------------------------------------------------------------------ the command line
def test_command_line_checks_and_shows_the_cosine(capsys):
    from cli_runner import in_process

    status, out, err = in_process(
        capsys, "train", "peaks", "--layers", 16, "--samples", 100, "--iterations", 4,
        "--mode", "oneshot", "--m1", 1, "--m2", 1, "--relax", "F", "--validate-every", 0,
        "--quality-check-every", 2, "--quality-floor", 1)
    assert status == 0, err
    lines = [line for line in (out + err).splitlines() if line.startswith("step ")]
    assert [("cos " in line) for line in lines] == [False, True, False, True]
    assert all("*" in line for line in lines if "cos " in line)  # floor 1: exact taken
    assert "below the floor 1.0" in err and "m1=1, m2=2 from the next step" in err


@pytest.mark.parametrize("args, message", [
    (("--quality-floor", 0), "argument --quality-floor: must be in (0, 1], got 0"),
    (("--quality-check-every", -2), "argument --quality-check-every"),
    (("--mode", "serial", "--quality-check-every", 3), "mode 'serial' computes exact ones"),
])
def test_command_line_refuses_bad_quality_options(capsys, args, message):
    from cli_runner import in_process

    status, _, err = in_process(capsys, "train", "peaks", "--iterations", 1, *args)
    assert status == 2 and message in err
