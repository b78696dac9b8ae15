"""braidpy.train: MGRIT gradients vs serial backprop, regularization, optimizers, the
training loop (monotone exact training, checkpoint and exact resume) and bad configs."""

import logging
import re

import numpy as np
import pytest
from train_cases import MGRIT, conv_problem, dense_problem, level_sizes, solve_calls

from braidpy import Options
from braidpy.train import (SGD, Adam, LayerParallelEvaluator, LBFGS, Regularizer,
                           SerialEvaluator, TrainConfig, Trainer, load_checkpoint,
                           make_optimizer)


@pytest.mark.parametrize("problem", [dense_problem, conv_problem])
def test_exact_mgrit_gradient_equals_serial_backprop(problem):
    net, X, C = problem()
    p = net.init_params(seed=5, scale=1.0)
    ref_loss, ref_grad = SerialEvaluator(net).gradient(p, X, C)[:2]
    ev = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=MGRIT)
    loss, grad, stats = ev.gradient(p, X, C)
    assert stats["primal_iterations"] > 1 and stats["adjoint_iterations"] > 1  # real MGRIT
    assert loss == pytest.approx(ref_loss, rel=1e-11)
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=1e-10 * np.abs(ref_grad).max())


@pytest.mark.parametrize("problem", [dense_problem, conv_problem])
def test_one_level_gradient_is_serial_backprop_bitwise(problem):
    net, X, C = problem()
    p = net.init_params(seed=5, scale=1.0)
    ref_loss, ref_grad = net.loss_and_gradient(p, X, C)
    ev = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=dict(max_levels=1))
    loss, grad, _ = ev.gradient(p, X, C)
    assert loss == ref_loss
    np.testing.assert_array_equal(grad, ref_grad)


def test_oneshot_gradient_tends_to_exact_with_more_iterations():
    net, X, C = dense_problem(nlayers=32)
    p = net.init_params(seed=5, scale=1.0)
    ref = net.loss_and_gradient(p, X, C)[1]
    q = p + 0.3 * np.random.default_rng(0).standard_normal(p.size)  # move off the start
    errors = []
    for m in (1, 2, 4):
        ev = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=dict(cfactor=2, max_levels=3),
                                    oneshot=(m, m))
        ev.gradient(q, X, C)          # warm states for q (seq_soln start)
        ev.gradient(p, X, C)          # one-shot gradient at p from q's states
        grad = ev.gradient(p, X, C)[1]  # and once more: closer
        errors.append(np.linalg.norm(grad - ref))
    assert errors[0] > errors[1] > errors[2]


def test_accuracy_and_loss_agree_with_serial():
    net, X, C = dense_problem()
    p = net.init_params(seed=1, scale=1.0)
    ev = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=MGRIT)
    assert ev.accuracy(p, X, C) == net.accuracy(p, X, C)
    assert ev.loss(p, X, C) == pytest.approx(net.loss(p, X, C), rel=1e-11)


def test_validation_is_the_exact_forward_pass_unless_mgrit_is_asked_for():
    """validation 'sequential' (the default) propagates layer by layer: the serial
    accuracy exactly, whatever MGRIT's tolerance; 'mgrit' solves to that tolerance (here
    a loose one, whose final states are off enough to change some predictions)."""
    net, X, C = dense_problem(nlayers=16, batch=300)
    p = net.init_params(seed=5, scale=1.0)
    loose = dict(cfactor=4, max_levels=2, abs_tol=1e6)
    exact = net.accuracy(p, X, C)
    sequential = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=loose)
    assert sequential.accuracy(p, X, C) == exact
    mgrit = LayerParallelEvaluator(net, p.copy(), X, C, mgrit=loose, validation="mgrit")
    assert mgrit.accuracy(p, X, C) != exact
    with pytest.raises(ValueError, match="validation must be one of sequential, mgrit, got "
                                         "'fast'"):
        LayerParallelEvaluator(net, p.copy(), X, C, validation="fast")
    with pytest.raises(ValueError, match="validation_solve must be one of sequential, mgrit"):
        TrainConfig(validation_solve="exact")


def test_regularizer_gradient_matches_finite_differences():
    net, _, _ = dense_problem(nlayers=7)
    reg = Regularizer(net, tikhonov=0.3, ddt=0.7, classifier=0.2)
    p = net.init_params(seed=3) + 0.1
    value, grad = reg(p)
    d = np.random.default_rng(4).standard_normal(p.size)
    eps = 1e-6
    fd = (reg(p + eps * d)[0] - reg(p - eps * d)[0]) / (2 * eps)
    assert fd == pytest.approx(grad @ d, rel=1e-7)
    # the ddt term couples neighbours only: constant-in-time layers cost nothing
    q = np.zeros_like(p)
    net.views(q)["K"][...] = 1.0
    only_ddt = Regularizer(net, ddt=1.0)
    assert only_ddt(q)[0] == 0.0
    net.views(q)["K"][3] = 2.0
    h = net.steps[0]
    assert only_ddt(q)[0] == pytest.approx(2 * 0.5 * 16 / h)  # two jumps of 16 entries


def test_regularizer_rejects_bad_weights():
    net, _, _ = dense_problem()
    with pytest.raises(ValueError, match="ddt must be a number >= 0, got -1"):
        Regularizer(net, ddt=-1)


@pytest.mark.parametrize("opt", [SGD(lr=0.1, momentum=0.5), Adam(lr=0.1), LBFGS()])
def test_optimizers_minimize_a_quadratic(opt):
    A = np.diag([1.0, 4.0, 9.0])
    f = lambda x: 0.5 * x @ A @ x  # noqa: E731
    x = np.array([1.0, -2.0, 0.5])
    for _ in range(300 if opt.name != "lbfgs" else 20):
        opt.step(x, f(x), A @ x, f)
    assert np.linalg.norm(x) < 1e-3


def test_lbfgs_armijo_backtracks_and_state_roundtrips():
    f = lambda x: float(np.sum(x ** 4))  # noqa: E731
    g = lambda x: 4 * x ** 3  # noqa: E731
    x = np.array([3.0, -2.0])
    opt = LBFGS(lr=1.0)
    info = opt.step(x, f(np.array([3.0, -2.0])), g(np.array([3.0, -2.0])), f)
    assert info["trials"] > 1 and info["step_size"] < 1  # a full gradient step overshoots
    assert f(x) < f(np.array([3.0, -2.0]))
    clone = LBFGS(lr=1.0)
    clone.load_state_dict(opt.state_dict())
    x2 = x.copy()
    opt.step(x, f(x), g(x), f)
    clone.step(x2, f(x2), g(x2), f)
    np.testing.assert_array_equal(x, x2)


def _two_loop(pairs, g):
    """Nocedal & Wright's Algorithm 7.4: -H g over the pairs (s, y), oldest first,
    H_0 = (s'y / y'y) I of the newest; every product as written there."""
    q, alphas = g.copy(), []
    for s, y in reversed(pairs):
        rho = 1.0 / float(y @ s)
        a = rho * float(s @ q)
        q = q - a * y
        alphas.append((rho, a))
    if pairs:
        s, y = pairs[-1]
        q = q * (float(s @ y) / float(y @ y))
    for (s, y), (rho, a) in zip(pairs, reversed(alphas)):
        q = q + (a - rho * float(y @ q)) * s
    return -q


def test_lbfgs_direction_is_the_two_loop_recursion_bit_for_bit():
    """Over more steps than its memory, through a state round trip: the pairs the
    optimizer keeps and its direction, against the recursion computed afresh."""
    rng = np.random.default_rng(4)
    A = np.diag(rng.uniform(0.5, 20.0, 300))
    f = lambda x: 0.5 * float(x @ A @ x)  # noqa: E731
    x = rng.standard_normal(300)
    opt = LBFGS(lr=1.0, memory=3)
    for k in range(9):
        if k == 5:
            clone = LBFGS(lr=1.0, memory=3)
            clone.load_state_dict(opt.state_dict())
            opt = clone
        g = A @ x
        pairs = list(zip(opt.s, opt.y))
        if opt.prev_params is not None:
            pairs = (pairs + [(x - opt.prev_params, g - opt.prev_grad)])[-3:]
        opt.step(x, f(x), g, f)
        assert len(opt.s) == len(pairs) == min(k, 3)
        assert all(np.array_equal(a, s) and np.array_equal(b, y)
                   for a, b, (s, y) in zip(opt.s, opt.y, pairs))
        assert np.array_equal(opt._direction(g), _two_loop(pairs, g)), k


def test_optimizer_errors():
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        make_optimizer("rmsprop")
    with pytest.raises(ValueError, match="momentum must be < 1"):
        SGD(momentum=1.0)
    with pytest.raises(ValueError, match="lr must be a positive number, got -0.1"):
        Adam(lr=-0.1)
    with pytest.raises(ValueError, match="needs the objective"):
        LBFGS().step(np.zeros(2), 0.0, np.ones(2))


def small_trainer(tmp_path=None, **overrides):
    net, X, C = dense_problem(nlayers=16, batch=40)
    args = dict(mode="exact", optimizer="lbfgs", iterations=8, mgrit=MGRIT, seed=1,
                tikhonov=1e-4, ddt=1e-3, classifier_reg=1e-4)
    if tmp_path is not None:
        args.update(checkpoint=str(tmp_path / "ckpt.npz"), checkpoint_every=3)
    args.update(overrides)
    return Trainer(net, (X, C), (X[:15], C[:15]), TrainConfig(**args))


def test_exact_training_decreases_the_objective_monotonically():
    history = small_trainer(iterations=12).run()
    objective = [r["objective"] for r in history]
    assert all(b < a for a, b in zip(objective, objective[1:])), objective
    assert objective[-1] < 0.8 * objective[0]
    assert all(r["primal_iterations"] >= 1 and "val_accuracy" in r for r in history)


def test_serial_and_exact_training_agree():
    serial = small_trainer(mode="serial").run()
    exact = small_trainer().run()
    # zip() would stop at the shorter history (zip(strict=True) needs Python 3.10).
    assert len(serial) == len(exact) == 8, (len(serial), len(exact))
    for s, e in zip(serial, exact):
        assert e["objective"] == pytest.approx(s["objective"], rel=1e-8)


@pytest.mark.parametrize("mode,optimizer,batch", [("exact", "lbfgs", None),
                                                  ("oneshot", "lbfgs", None),
                                                  ("oneshot", "adam", 16),
                                                  ("serial", "sgd", 16)])
def test_killed_run_resumes_with_the_same_history(tmp_path, mode, optimizer, batch):
    extra = dict(mode=mode, optimizer=optimizer, batch_size=batch, shuffle=batch is not None)
    uninterrupted = small_trainer(**extra)
    full = uninterrupted.run()

    class Killed(Exception):
        pass

    def kill_after_4(record):
        if record["iteration"] == 4:
            raise Killed

    first = small_trainer(tmp_path, **extra)
    with pytest.raises(Killed):
        first.run(kill_after_4)
    assert load_checkpoint(tmp_path / "ckpt.npz")["iteration"] == 3
    resumed = small_trainer(tmp_path, **extra)
    resumed.resume(tmp_path / "ckpt.npz")
    history = resumed.run()
    timing = ("seconds", "validation_seconds")
    strip = lambda h: [{k: v for k, v in r.items() if k not in timing} for r in h]  # noqa: E731
    assert strip(history) == strip(full)
    np.testing.assert_array_equal(resumed.params, uninterrupted.params)


def test_resume_refuses_other_settings(tmp_path):
    t = small_trainer(tmp_path, iterations=3)
    t.run()
    other = small_trainer(tmp_path, iterations=3, ddt=0.5)
    with pytest.raises(ValueError, match="other settings: ddt"):
        other.resume(tmp_path / "ckpt.npz")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        other.resume(tmp_path / "missing.pkl")
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a braidpy checkpoint"):
        other.resume(tmp_path / "junk.pkl")


def test_stopping_rules():
    t = small_trainer(iterations=50, target_accuracy=0.2)
    t.run()
    assert t.stop_reason == "target accuracy" and t.iteration < 50
    t = small_trainer(iterations=50, optimizer="sgd", lr=1e-9, momentum=0.0, patience=2)
    t.run()
    assert t.stop_reason == "no improvement" and t.iteration == 3
    assert t.best["iteration"] == 1 and t.best["params"] is not None


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="parallel"), "unknown mode 'parallel'"),
    (dict(m1=0), "m1 must be an int >= 1, got 0"),
    (dict(batch_size=0), "batch_size must be a positive int or None, got 0"),
    (dict(target_accuracy=1.5), "target_accuracy must be in"),
    (dict(init_scale=float("inf")), "init_scale must be a finite number >= 0, got inf"),
])
def test_bad_configs_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_an_unknown_config_field_names_the_closest_one():
    with pytest.raises(TypeError, match="TrainConfig: unknown field 'optimiser'; did you "
                                        "mean 'optimizer'"):
        TrainConfig(optimiser="adam")
    with pytest.raises(TypeError, match="unknown field 'zzz'$"):
        TrainConfig(zzz=1)
    assert TrainConfig(optimizer="adam", iterations=3).optimizer == "adam"


def test_class_id_labels_train_as_their_one_hot_labels():
    net, X, C = dense_problem()
    ids = C.argmax(axis=1)
    config = TrainConfig(iterations=3)
    by_ids = Trainer(net, (X, ids), (X[:10], ids[:10]), config).run()
    one_hot = Trainer(net, (X, C), (X[:10], C[:10]), config).run()
    assert [r["loss"] for r in by_ids] == [r["loss"] for r in one_hot]
    assert [r["val_accuracy"] for r in by_ids] == [r["val_accuracy"] for r in one_hot]
    for bad, named in [(ids + net.nclasses, f"not an integer in 0..{net.nclasses - 1} "),
                       (ids - 1.0, r"class id -?\d\.0 "),
                       (ids * 0.5 + 0.25, r"class id \d\.\d+ "),
                       (ids.astype(bool), "class ids must be integers, got dtype bool")]:
        with pytest.raises(ValueError, match=named):
            Trainer(net, (X, bad), config=config)


def test_bad_training_inputs_are_named():
    net, X, C = dense_problem()
    with pytest.raises(ValueError, match="X has 24 samples but C has 23"):
        Trainer(net, (X, C[:-1]))
    with pytest.raises(ValueError, match=r"data samples have shape \(3,\)"):
        Trainer(net, (np.zeros((4, 3)), C[:4]))
    with pytest.raises(ValueError, match="give abs_tol instead"):
        Trainer(net, (X, C), config=TrainConfig(mode="exact", mgrit=dict(rel_tol=1e-6)))
    with pytest.raises(ValueError, match="'seq_soln' is chosen by the trainer"):
        Trainer(net, (X, C), config=TrainConfig(mgrit=dict(seq_soln=True)))
    with pytest.raises(ValueError, match=r"params must have shape"):
        Trainer(net, (X, C), params=np.zeros(3))


@pytest.mark.parametrize("problem", [dense_problem, conv_problem])
def test_batched_relaxation_gives_the_same_gradient_bitwise(problem):
    net, X, C = problem(nlayers=32)
    p = net.init_params(seed=5, scale=1.0)
    out = []
    for batch in (True, False):
        ev = LayerParallelEvaluator(net, p.copy(), X, C,
                                    mgrit=dict(cfactor=4, max_levels=2, abs_tol=1e-12,
                                               batch=batch))
        loss, grad, stats = ev.gradient(p, X, C)
        assert ev.solver.primal_core.batched is batch
        out.append((loss, grad, stats["steps"]))
    assert out[0][0] == out[1][0] and out[0][2] == out[1][2]
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_divergence_is_the_stop_reason_even_on_the_last_step():
    t = small_trainer(mode="serial", optimizer="sgd", lr=1e200, momentum=0.0, iterations=2)
    with np.errstate(all="ignore"):
        t.run()
    assert t.stop_reason == "diverged"


def test_bad_mgrit_options_fail_at_construction():
    net, X, C = dense_problem()
    with pytest.raises(ValueError, match="cfactr"):
        Trainer(net, (X, C), config=TrainConfig(mgrit=dict(cfactr=4)))


def test_resume_accepts_defaults_written_out(tmp_path):
    t = small_trainer(tmp_path, iterations=3, mgrit={})
    t.run()
    same = small_trainer(tmp_path, iterations=5, mgrit=dict(cfactor=4, max_levels=2,
                                                            abs_tol=1e-9))
    same.resume(tmp_path / "ckpt.npz")
    assert same.iteration == 3


def test_failed_checkpoint_write_raises(tmp_path):
    (tmp_path / "ckpt.npz.tmp").mkdir()  # the temporary file cannot be created
    t = small_trainer(tmp_path, iterations=3)
    with pytest.raises(OSError):
        t.run()


def test_training_logs_steps_at_debug_and_the_summary_at_info(caplog, capsys):
    with caplog.at_level(logging.INFO, logger="braidpy"):
        small_trainer(iterations=2).run()
    messages = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert [m for m in messages if m[1] == logging.DEBUG] == []
    (name, level, text), = messages
    assert (name, level) == ("braidpy.train", logging.INFO)
    assert text.startswith("stopped after 2 steps: reached the step limit; best validation")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="braidpy"):
        small_trainer(iterations=2).run()
    steps = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG
             and r.name == "braidpy.train"]
    assert len(steps) == 2 and steps[0].startswith("step 1/2  loss ")
    assert "state" in steps[0] and " it r " in steps[0]  # the MGRIT residuals of the step
    assert capsys.readouterr() == ("", "")  # the library prints nothing


def test_progress_bar_on_request(capsys):
    pytest.importorskip("tqdm")
    small_trainer(iterations=2).run(progress=True)
    err = capsys.readouterr().err
    assert "2/2" in err and "loss" in err


# ------------------------------------------------------------ relaxation and cfactor


def _steps(counts):
    return counts.get("step", 0) + counts.get("step_batch_items", 0)


def test_the_call_formula_by_hand():
    """The formula of train_cases.solve_calls on two small cases counted by hand:
    32 layers, cf 4, 2 levels (8 C-intervals), one iteration. F: restriction's F sweep
    24, residual 8, coarse right-hand side 8, coarse solve 8; final F sweep 24. FCF adds
    one FC sweep of 32."""
    assert solve_calls(32, 1, 2, [4], nrelax=0) == 24 + 8 + 8 + 8 + 24 == 72
    assert solve_calls(32, 1, 2, [4], nrelax=1) == 72 + 32
    # 3 levels, cf 4 then 2 (32, 8, 4 intervals), F: level 0 24 + 8 + 8, level 1 4 + 4
    # + 4, coarse 4, interpolation's F sweep on level 1 4, final 24
    assert level_sizes(32, 3, [4, 2]) == [32, 8, 4]
    assert solve_calls(32, 1, 3, [4, 2], nrelax=0) == 40 + 12 + 4 + 4 + 24 == 84


@pytest.mark.parametrize("relax, nrelax", [("F", 0), ("FCF", 1), ("FCFCF", 2)])
@pytest.mark.parametrize("cfactor, levels", [(4, 2), ((4, 2), 3), (8, 3)])
def test_relax_and_cfactor_reach_the_state_and_adjoint_solves(relax, nrelax, cfactor,
                                                              levels):
    """TrainConfig.relax and .cfactor become the Options of both MGRIT solves, and their
    layer calls are the formula's (m1 = 2 state, m2 = 3 adjoint iterations; after the
    first gradient, whose solves also start from the sequential solution)."""
    net, X, C = dense_problem(nlayers=32)
    cfg = TrainConfig(mode="oneshot", m1=2, m2=3, relax=relax, cfactor=cfactor,
                      mgrit=dict(max_levels=levels))
    trainer = Trainer(net, (X, C), None, cfg)
    ev = trainer.evaluator
    ev.gradient(trainer.params, X, C)
    _, _, stats = ev.gradient(trainer.params + 0.01, X, C)
    cfs = list(cfactor) if isinstance(cfactor, tuple) else [cfactor]
    sizes = level_sizes(32, levels, cfs)
    for core, m in ((ev.solver.primal_core, 2), (ev.solver.adjoint_core, 3)):
        assert core.options.per_level("nrelax") == (nrelax, {})
        assert [lv["cfactor"] for lv in core.level_info][:-1] == cfs[:len(sizes) - 1] + \
            [cfs[-1]] * max(len(sizes) - 1 - len(cfs), 0)
        assert _steps(core.counts()) == solve_calls(32, m, levels, cfs, nrelax)
    assert stats["steps"] == solve_calls(32, 2, levels, cfs, nrelax) + \
        solve_calls(32, 3, levels, cfs, nrelax)
    # each FC sweep costs every level above the coarsest its n_l calls, per iteration
    f_only = solve_calls(32, 2, levels, cfs, 0) + solve_calls(32, 3, levels, cfs, 0)
    assert stats["steps"] - f_only == nrelax * (2 + 3) * sum(sizes[:-1])


@pytest.mark.parametrize("relax, cfactor, levels", [("F", 4, 2), ("F", (4, 2), 3),
                                                    ("FCFCF", (2, 4), 3)])
def test_oneshot_gradient_with_relax_and_cfactor_converges_to_serial_backprop(
        relax, cfactor, levels):
    """One-shot (1, 1) gradients at fixed parameters, each warm-started from the last,
    iterate MGRIT on the state and the adjoint: from the states of other parameters they
    converge to serial backpropagation's gradient (the independent reference)."""
    net, X, C = dense_problem(nlayers=32)
    p = net.init_params(seed=5, scale=1.0)
    q = p + 0.3 * np.random.default_rng(7).standard_normal(p.size)
    ref_loss, ref = net.loss_and_gradient(p, X, C)
    cfg = TrainConfig(mode="oneshot", m1=1, m2=1, relax=relax, cfactor=cfactor,
                      mgrit=dict(max_levels=levels))
    ev = Trainer(net, (X, C), None, cfg, params=q.copy()).evaluator
    ev.gradient(q, X, C)  # the states of q
    errors = []
    for _ in range(30):
        loss, grad, _ = ev.gradient(p, X, C)
        errors.append(np.linalg.norm(grad - ref) / np.linalg.norm(ref))
    assert errors[0] > 1e-4  # q's states give a poor first gradient at p ...
    assert errors[-1] < 1e-11 and loss == pytest.approx(ref_loss, rel=1e-12)  # ... then exact
    np.testing.assert_allclose(grad, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_relax_and_cfactor_are_validated_and_recorded():
    cfg = TrainConfig(relax="F", cfactor=(8, 4), mgrit=dict(max_levels=3))
    assert (cfg.mgrit.nrelax, cfg.mgrit.cfactor) == (0, {0: 8, "default": 4})
    assert (cfg.relax, cfg.cfactor) == ("F", {0: 8, "default": 4})  # in effect
    default = TrainConfig()
    assert (default.relax, default.cfactor, default.mgrit.nrelax) == ("FCF", 4, 1)
    # mgrit alone still works, and the fields then say what it chose
    cfg = TrainConfig(mgrit=dict(nrelax=2, cfactor=8))
    assert (cfg.relax, cfg.cfactor) == ("FCFCF", 8)
    assert TrainConfig(mgrit=dict(nrelax={0: 0})).relax is None  # per level: see mgrit
    # given in both places: fine when they agree, however written
    cfg = TrainConfig(relax="F", cfactor=[4, 4], mgrit=dict(nrelax=0, cfactor={"default": 4}))
    assert (cfg.mgrit.nrelax, cfg.mgrit.cfactor) == (0, 4)
    assert TrainConfig(cfactor=8, mgrit=Options(max_levels=2)).mgrit.cfactor == 8


@pytest.mark.parametrize("kwargs, match", [
    (dict(relax="fcf"), "relax must be one of F, FCF, FCFCF, got 'fcf'"),
    (dict(relax=0), "relax must be one of F, FCF, FCFCF, got 0"),
    (dict(cfactor=1), r"cfactor must be an int >= 2, .* got 1$"),
    (dict(cfactor=(8, 1)), r"cfactor must be an int >= 2, .* got \(8, 1\)"),
    (dict(cfactor=[]), r"cfactor must be .* got \[\]"),
    (dict(cfactor="8,4"), r"cfactor must be .* got '8,4'"),
    (dict(cfactor={0: 1}), r"cfactor \{0: 1\}: cfactor\[0\] must be >= 2, got 1"),
    (dict(relax="F", mgrit=dict(nrelax=1)),
     "relax='F' contradicts the MGRIT option nrelax=1 given in mgrit; give it in one place"),
    (dict(cfactor=8, mgrit=dict(cfactor=4)),
     "cfactor=8 contradicts the MGRIT option cfactor=4 given in mgrit"),
    (dict(cfactor=(8, 4), mgrit=Options(cfactor=8)),
     r"cfactor=\(8, 4\) contradicts the MGRIT option cfactor=8"),
])
def test_bad_or_conflicting_relax_and_cfactor_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_checkpoints_record_relax_and_cfactor_and_old_ones_still_resume(tmp_path):
    kw = dict(mode="oneshot", relax="F", cfactor=(4, 2), mgrit=dict(max_levels=3))
    small_trainer(tmp_path, iterations=3, **kw).run()
    state = load_checkpoint(tmp_path / "ckpt.npz")
    assert (state["config"]["relax"], state["config"]["cfactor"]) == ("F", {0: 4, "default": 2})
    assert state["config"]["mgrit"]["nrelax"] == 0
    same = small_trainer(tmp_path, iterations=5, **kw)
    same.resume(tmp_path / "ckpt.npz")
    assert same.iteration == 3
    other = small_trainer(tmp_path, iterations=5, **dict(kw, relax="FCF"))
    with pytest.raises(ValueError, match="other settings: mgrit, relax"):
        other.resume(tmp_path / "ckpt.npz")
    # a checkpoint of a braidpy before these fields: its mgrit options decide
    for key in ("relax", "cfactor"):
        del state["config"][key]
    old = small_trainer(iterations=5, **kw)
    old.load_state(state)
    assert old.iteration == 3
    state["config"]["mgrit"]["nrelax"] = 1
    with pytest.raises(ValueError, match="other settings: mgrit"):
        small_trainer(iterations=5, **kw).load_state(state)


@pytest.mark.parametrize("every", [1, 10])
def test_a_diverged_run_keeps_the_last_good_checkpoint(tmp_path, every):
    t = small_trainer(tmp_path, mode="serial", optimizer="sgd", lr=1e200, momentum=0.0,
                      iterations=5, checkpoint_every=every)
    with np.errstate(all="ignore"):
        t.run()
    assert t.stop_reason == "diverged" and not np.isfinite(t.history[-1]["objective"])
    if every > len(t.history):  # no good step was due a checkpoint: none is written
        assert not (tmp_path / "ckpt.npz").exists()
        return
    state = load_checkpoint(tmp_path / "ckpt.npz")
    assert state["iteration"] == len(t.history) - 1  # the step before the divergence
    assert np.isfinite(state["params"]).all()
    assert all(np.isfinite(r["objective"]) for r in state["history"])


@pytest.mark.parametrize("where, words", [
    ("X", "training features: sample 7 (row 8 of its data) holds nan"),
    ("C", "training labels: sample 7 (row 8 of its data) holds nan"),
    ("VX", "validation features: sample 7"),
    ("VC", "validation labels: sample 7"),
])
def test_non_finite_training_data_are_refused_naming_the_first_bad_sample(where, words):
    net, X, C = dense_problem(nlayers=4, batch=24)
    X, C = X.copy(), C.copy()
    VX, VC = X[:10].copy(), C[:10].copy()
    {"X": X, "C": C, "VX": VX, "VC": VC}[where][7, 0] = np.nan
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Trainer(net, (X, C), (VX, VC), TrainConfig(mode="serial", iterations=1))


def test_load_state_checks_its_fields_by_name():
    from braidpy.train import CheckpointError

    t = small_trainer(mode="serial", iterations=1)
    t.run()
    state = t.state()
    state["iteration"] = -5
    fresh = small_trainer(mode="serial", iterations=2)
    with pytest.raises(CheckpointError, match="state: field 'iteration' must be an int >= 0"):
        fresh.load_state(state)
    state = t.state()
    state["params"] = np.full_like(state["params"], np.nan)
    with pytest.raises(CheckpointError, match="field 'params'"):
        fresh.load_state(state)


@pytest.mark.parametrize("name, field, state", [
    ("sgd", "velocity", {"velocity": np.zeros(5)}),
    ("adam", "v", {"m": np.zeros(7), "v": np.zeros(6), "t": 1}),
    ("adam", "m", {"m": np.zeros((7, 1)), "v": None, "t": 1}),
    ("lbfgs", "y[1]", {"s": [np.zeros(7)] * 2, "y": [np.zeros(7), np.zeros(3)],
                       "prev_params": None, "prev_grad": None}),
    ("lbfgs", "prev_grad", {"s": [], "y": [], "prev_params": np.zeros(7),
                            "prev_grad": np.zeros(8)}),
])
def test_optimizer_state_arrays_must_match_the_parameter_count(name, field, state):
    with pytest.raises(ValueError, match=rf"{name} optimizer state: field '{re.escape(field)}'"
                                         r" must hold"):
        make_optimizer(name).load_state_dict(state, nparams=7)
    ok = make_optimizer(name)
    ok.load_state_dict(make_optimizer(name).state_dict(), nparams=7)  # a fresh state


def test_resume_refuses_an_optimizer_state_of_another_size(tmp_path):
    t = small_trainer(tmp_path, mode="serial", optimizer="adam", iterations=3)
    t.run()
    state = t.state()
    state["optimizer"]["m"] = np.zeros(3)
    fresh = small_trainer(mode="serial", optimizer="adam", iterations=5)
    with pytest.raises(ValueError, match="state: field 'optimizer.m' must hold nparams = "
                                         f"{t.net.nparams} numbers"):
        fresh.load_state(state)
    assert fresh.iteration == 0
