"""braidpy train --grid auto: the grid the performance model predicts fastest, with
made-up calibrations whose best grid is known, and on the command line under MPI."""

import json
import sys

import pytest
from mpi_launch import MPIEXEC
from test_perf_model import made_up

from braidpy.perf import Calibration, CostFit, LayerCosts, Link

from braidpy.perf import save_calibration
from braidpy.perf.auto import choose_grid, decide_grid, training_spec
from mpi_process import run_mpi


def dense_spec(samples, nlayers=32):
    return training_spec("dense", (2,), 4, nlayers, samples, 5, None, 0)


def test_training_spec_describes_the_network():
    dense = training_spec("dense", (2,), 8, 32, 100, 5, None, 1234)
    assert (dense.kind, dense.shape, dense.nlayers, dense.samples, dense.features,
            dense.nparams) == ("dense", (8,), 32, 100, 2, 1234)
    conv = training_spec("conv", (1, 8, 8), 4, 16, 50, 10, 3, 999)
    assert (conv.kind, conv.shape, conv.kernel, conv.features, conv.nclasses) == \
        ("conv", (4, 8, 8), 3, 64, 10)


def per_sample(seconds):
    """Dense layer calls costing ``seconds`` per sample, nothing else costs anything."""
    fit = CostFit(0.0, seconds)
    layers = (LayerCosts("dense-w4", "dense", (4,), 1,
                         {"fwd": fit, "adj": fit, "grad": fit, "vec": CostFit(0.0, 0.0)}),)
    free = Link(0.0, 0.0, "assumed: test")
    return Calibration(layers, 0.0, free, free, solve_s=0.0)


def test_costs_per_sample_and_free_messages_choose_data_groups(tmp_path):
    # Splitting the batch divides all the work with no MGRIT overhead: data wins.
    path = tmp_path / "cal.json"
    save_calibration(per_sample(1e-6), str(path))
    for p in (2, 4):
        choice = decide_grid(dense_spec(64), p, str(path), levels=2, cfactor=4,
                             mode="oneshot", iterations=(2, 2))
        assert choice.shape == (p, 1, 1), choice.summary


def test_one_layer_rank_is_predicted_with_the_mgrit_setting_training_runs(tmp_path):
    # The Trainer runs its MGRIT setting on a single layer rank too (not serial
    # propagation, which serial mode alone uses): the choice is predicted as run.
    from braidpy.perf import load_calibration
    from braidpy.perf.model import Strategy, predict
    from braidpy.perf.schedule import Cycle

    path = tmp_path / "cal.json"
    save_calibration(per_sample(1e-6), str(path))
    cal = load_calibration(str(path))
    spec = dense_spec(64)
    choice = decide_grid(spec, 2, str(path), levels=2, cfactor=4, mode="oneshot",
                         iterations=(2, 2))
    assert choice.shape == (2, 1, 1)
    mgrit = Strategy(2, 1, 1, Cycle(ntime=32, max_levels=2, cfactor=4), (2, 2))
    serial = Strategy(2, 1, 1, Cycle(ntime=32, max_levels=1), (1, 1))
    assert choice.seconds == pytest.approx(predict(spec, mgrit, cal).seconds, rel=1e-12)
    assert predict(spec, serial, cal).seconds < 0.9 * choice.seconds
    chosen_serial = decide_grid(spec, 2, str(path), levels=2, cfactor=4, mode="serial",
                                iterations=(2, 2))
    assert chosen_serial.seconds == pytest.approx(predict(spec, serial, cal).seconds,
                                                  rel=1e-12)


def test_auto_mode_is_predicted_as_it_runs_and_the_relaxation_is_modelled(tmp_path):
    """Mode 'auto': grids without layer or space ranks predicted as serial propagation
    (what braidpy.train.resolve_mode runs), the others with the MGRIT setting and its
    relaxation: F-relaxation (nrelax 0) predicts the schedule's fewer calls."""
    from braidpy.perf import load_calibration
    from braidpy.perf.model import Strategy, predict
    from braidpy.perf.schedule import Cycle

    per = tmp_path / "per-sample.json"
    save_calibration(per_sample(1e-6), str(per))  # data groups win
    data = decide_grid(dense_spec(64), 2, str(per), levels=2, cfactor=4, mode="auto",
                       iterations=(2, 2))
    serial = Strategy(2, 1, 1, Cycle(ntime=32, max_levels=1), (1, 1))
    assert data.shape == (2, 1, 1)
    assert data.seconds == pytest.approx(
        predict(dense_spec(64), serial, load_calibration(str(per))).seconds, rel=1e-12)
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))  # layer ranks win
    cal, spec = load_calibration(str(path)), dense_spec(64, nlayers=256)
    for nrelax in (0, 1):
        layers = decide_grid(spec, 4, str(path), levels=2, cfactor=8, mode="auto",
                             iterations=(2, 2), nrelax=nrelax)
        assert layers.shape[2] > 1, layers.summary
        run = Strategy(*layers.shape, Cycle(ntime=256, max_levels=2, cfactor=8,
                                            nrelax=nrelax, batched=True), (2, 2))
        assert layers.seconds == pytest.approx(predict(spec, run, cal).seconds, rel=1e-12)
    f, fcf = (decide_grid(spec, 4, str(path), levels=2, cfactor=8, mode="auto",
                          iterations=(2, 2), nrelax=n).seconds for n in (0, 1))
    assert f < 0.9 * fcf


def test_costs_per_call_choose_layer_ranks(tmp_path):
    # A call costs the same for any batch: data groups save nothing, layer ranks do.
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    one = choose_grid(dense_spec(64), None, str(path), levels=2, cfactor=4,
                      mode="oneshot", iterations=(2, 2))
    assert one.shape == (1, 1, 1)  # one rank: the only grid
    choice = decide_grid(dense_spec(64, nlayers=256), 4, str(path), levels=2, cfactor=8,
                         mode="oneshot", iterations=(2, 2))
    # 1x1x4 and 2x1x2 tie (the coarse grid dominates both); 4x1x1 is 2.4x slower.
    assert choice.shape in ((1, 1, 4), (2, 1, 2)), choice.summary
    assert "predicted 215 ms per gradient, 2.40x one process" in choice.summary


def test_one_sample_cannot_be_split_over_data_groups(tmp_path):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    choice = decide_grid(dense_spec(1), 2, str(path), levels=2, cfactor=4,
                         mode="oneshot", iterations=(2, 2))
    assert choice.shape == (1, 1, 2)


def test_serial_mode_keeps_one_layer_rank_and_space_stays_within_the_limit(tmp_path):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    serial = decide_grid(dense_spec(64), 4, str(path), levels=2, cfactor=4,
                         mode="serial", iterations=(2, 2))
    assert serial.shape == (4, 1, 1)
    conv = training_spec("conv", (1, 8, 8), 2, 32, 64, 10, 3, 0)
    for p in (2, 4):
        assert decide_grid(conv, p, str(path), levels=2, cfactor=4, mode="oneshot",
                           iterations=(2, 2)).shape[1] == 1


def test_exact_mode_says_its_iterations_are_assumed(tmp_path):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    choice = decide_grid(dense_spec(64), 2, str(path), levels=2, cfactor=4,
                         mode="exact", iterations=(3, 3))
    assert "iterations assumed" in choice.summary


def test_bad_calibration_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="calibration file '.*none.json' not found"):
        choose_grid(dense_spec(64), None, str(tmp_path / "none.json"), levels=2, cfactor=4,
                    mode="oneshot", iterations=(2, 2))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(ValueError, match="is not JSON"):
        choose_grid(dense_spec(64), None, str(bad), levels=2, cfactor=4, mode="oneshot",
                    iterations=(2, 2))


def run_train(nranks, *args, timeout=240):
    cmd = [MPIEXEC, "-n", str(nranks), sys.executable, "-m", "braidpy", "train", "peaks",
           "--samples", "200", "--iterations", "2", "-v", *map(str, args)]
    return run_mpi(cmd, capture_output=True, text=True, timeout=timeout)


def test_grid_auto_on_the_command_line_under_mpi(tmp_path):
    path = tmp_path / "cal.json"
    save_calibration(per_sample(1e-6), str(path))  # the best for 2 ranks: 2 data groups
    log = tmp_path / "log.json"
    proc = run_train(2, "--grid", "auto", "--calibration", path, "--log", log)
    assert proc.returncode == 0, proc.stderr
    assert "--grid auto chose" in proc.stderr + proc.stdout
    header = json.loads(log.read_text().splitlines()[0])
    assert header["ranks"] == 2 and header["grid"] == [2, 1, 1]
    # A missing file: a usage error on every rank, no rank left waiting.
    proc = run_train(2, "--grid", "auto", "--calibration", tmp_path / "none.json", timeout=60)
    assert proc.returncode == 2 and "none.json' not found" in proc.stderr
    proc = run_train(2, "--grid", "auto", timeout=60)
    assert proc.returncode == 2 and "--grid auto needs --calibration FILE" in proc.stderr


# ------------------------------------------------------------ the MGRIT setting too
def test_settings_to_try_keep_what_the_user_fixed():
    from braidpy.perf.auto import QUALIFIED, Setting, settings_to_try

    default = Setting(2, 2, "FCF", 2, 4)
    assert settings_to_try({}, default) == list(QUALIFIED)
    assert all(s.m2 == 2 for s in QUALIFIED)  # every m2 = 1 setting failed the floor
    assert settings_to_try({"relax": "FCF"}, default) == [
        Setting(1, 2, "FCF", 2, 4), Setting(2, 2, "FCF", 2, 4)]
    assert settings_to_try({"cfactor": 8, "m1": 2}, default) == [Setting(2, 2, "F", 2, 8)]
    # Nothing qualified agrees: the user's own setting, the defaults filling the rest.
    assert settings_to_try({"m2": 1}, default) == [Setting(2, 1, "FCF", 2, 4)]
    with pytest.raises(ValueError, match="not fields of a Setting: cf"):
        settings_to_try({"cf": 4}, default)


def test_deep_networks_also_try_the_multilevel_settings():
    from braidpy.perf.auto import (DEEP_LAYERS, QUALIFIED, QUALIFIED_DEEP, Setting,
                                   settings_to_try, training_settings)

    default = Setting(2, 2, "FCF", 2, 4)
    assert DEEP_LAYERS == 1024
    assert all(s.levels >= 3 and s.m2 == 2 and s.relax == "F" for s in QUALIFIED_DEEP)
    assert settings_to_try({}, default, DEEP_LAYERS) == list(QUALIFIED + QUALIFIED_DEEP)
    assert settings_to_try({}, default, DEEP_LAYERS - 1) == list(QUALIFIED)
    assert settings_to_try({}, default) == list(QUALIFIED)  # depth unknown
    assert settings_to_try({"levels": 3, "m1": 1}, default, 2048) == [
        Setting(1, 2, "F", 3, 8), Setting(1, 2, "F", 3, 4)]
    # Below the depth a fixed --levels 3 has no qualified setting: the user's own.
    assert settings_to_try({"levels": 3, "m1": 1}, default, 256) == [
        Setting(1, 2, "FCF", 3, 4)]
    assert training_settings("oneshot", {}, default, checked=True, nlayers=1024) == \
        list(QUALIFIED + QUALIFIED_DEEP)
    assert training_settings("oneshot", {}, default, checked=False, nlayers=1024) == \
        [default]


@pytest.mark.parametrize("nlayers, nprocs", [(64, 4), (256, 4), (1024, 8)])
def test_the_fastest_setting_and_grid_are_chosen_together(tmp_path, nlayers, nprocs):
    from braidpy.perf.auto import QUALIFIED

    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    spec = dense_spec(64, nlayers=nlayers)
    choice = decide_grid(spec, nprocs, str(path), mode="oneshot", settings=QUALIFIED)
    each = {s: decide_grid(spec, nprocs, str(path), mode="oneshot", settings=[s])
            for s in QUALIFIED}
    best = min(each, key=lambda s: each[s].seconds)
    assert choice.seconds == each[best].seconds
    assert choice.setting == best and choice.shape == each[best].shape
    assert f"with {best.label()}" in choice.summary
    one = decide_grid(spec, nprocs, str(path), mode="oneshot", levels=2, cfactor=4,
                      iterations=(2, 2), nrelax=1)
    assert one.setting.relax == "FCF" and " with " not in one.summary


def test_without_quality_checks_grid_auto_keeps_the_setting():
    from braidpy.perf.auto import QUALIFIED, Setting, training_settings

    default = Setting(2, 2, "FCF", 2, 4)
    for mode in ("auto", "oneshot", "exact", "serial"):
        assert training_settings(mode, {"m1": 1}, default, checked=False) == \
            [Setting(1, 2, "FCF", 2, 4)]
    assert training_settings("exact", {}, default, checked=True) == [default]
    assert training_settings("oneshot", {}, default, checked=True) == list(QUALIFIED)


def test_grid_auto_chooses_the_setting_on_the_command_line_under_mpi(tmp_path):
    from braidpy.perf.auto import QUALIFIED, settings_to_try

    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))  # layer ranks win
    log = tmp_path / "log.json"
    # Without quality checks: the grid only, the MGRIT setting as given (and a hint).
    proc = run_train(2, "--grid", "auto", "--calibration", path, "--layers", 64,
                     "--relax", "F", "--log", log)
    assert proc.returncode == 0, proc.stderr
    config = json.loads(log.read_text().splitlines()[0])["config"]
    assert (config["m1"], config["m2"], config["relax"]) == (2, 2, "F")
    assert "--grid auto kept the MGRIT setting" in proc.stderr + proc.stdout
    proc = run_train(2, "--grid", "auto", "--calibration", path, "--layers", 64,
                     "--relax", "F", "--quality-check-every", 10, "--log", log)
    assert proc.returncode == 0, proc.stderr
    header = json.loads(log.read_text().splitlines()[0])
    spec = training_spec("dense", (2,), header["network"]["width"], 64, 200, 5, None, 0)
    fixed = settings_to_try({"relax": "F"}, QUALIFIED[0])
    want = decide_grid(spec, 2, str(path), mode="auto", settings=fixed, check_every=10)
    assert header["grid"] == list(want.shape) and want.shape[2] == 2
    assert "ms per step for the quality checks" in proc.stderr + proc.stdout
    s = want.setting
    config = header["config"]
    assert (config["m1"], config["m2"], config["relax"], config["cfactor"]) == \
        (s.m1, s.m2, "F", s.cfactor)
    assert f"with {s.label()}" in proc.stderr + proc.stdout


def test_a_fixed_grid_gets_its_fastest_setting(tmp_path):
    from braidpy.perf.auto import qualified

    path = tmp_path / "cal.json"
    save_calibration(per_sample(1e-6), str(path))  # data groups win overall
    spec = dense_spec(64, nlayers=1024)
    free = decide_grid(spec, 4, str(path), mode="oneshot", settings=qualified(1024))
    assert free.shape == (4, 1, 1)
    layers = decide_grid(spec, 4, str(path), mode="oneshot", settings=qualified(1024),
                         grid=(1, 1, 4))
    assert layers.shape == (1, 1, 4)
    each = {s: decide_grid(spec, 4, str(path), mode="oneshot", settings=[s],
                           grid=(1, 1, 4)) for s in qualified(1024)}
    assert layers.setting == min(each, key=lambda s: each[s].seconds)
    assert layers.seconds == min(c.seconds for c in each.values()) > free.seconds
    with pytest.raises(ValueError, match="grid 1,2,2"):  # a dense net has no space split
        decide_grid(spec, 4, str(path), mode="oneshot", settings=qualified(1024),
                    grid=(1, 2, 2))


def test_a_check_costs_a_serial_gradient_shared_by_up_to_16_layer_ranks():
    """braidpy.train.reference: blocks of at least 128 samples, at most 16; with costs
    per sample and free messages a check on L layer ranks costs serial / min(L, 16)
    (of the data group's shard); messages add the chain through the ranks holding
    blocks and the broadcast."""
    from braidpy.perf.auto import check_seconds
    from braidpy.perf.model import Strategy, serial_seconds
    from braidpy.perf.schedule import Cycle

    cal, spec = per_sample(1e-6), dense_spec(4096, nlayers=64)
    serial = serial_seconds(spec, cal)

    def on(d, l, c=cal, sp=spec):
        return check_seconds(sp, Strategy(d, 1, l, Cycle(ntime=64, max_levels=2)), c)

    for layers in (1, 2, 4, 8, 16, 32):
        assert on(1, layers) == pytest.approx(serial / min(layers, 16), rel=1e-9)
    assert on(2, 4) == pytest.approx(serial / 8, rel=1e-9)  # 2048 samples a group
    small = dense_spec(40, nlayers=64)  # one block: its one rank does all of it
    assert on(1, 8, sp=small) == pytest.approx(serial_seconds(small, cal), rel=1e-9)
    slow = Calibration(cal.layers, 0.0, Link(1e-3, 0.0, "assumed: test"),
                       Link(5e-3, 0.0, "assumed: test"), solve_s=0.0)
    assert on(1, 8, slow) - on(1, 8) == pytest.approx((7 + 3) * 1e-3, rel=1e-9)
    assert on(2, 8, slow) - on(2, 8) == pytest.approx((7 + 3) * 1e-3 + 5e-3, rel=1e-9)
    assert on(1, 32, slow) - on(1, 32) == pytest.approx((15 + 5) * 1e-3, rel=1e-9)


def test_quality_checks_count_in_the_choice_where_mgrit_runs(tmp_path):
    """Mode auto: data groups alone run serial backpropagation (no checks), layer
    ranks one-shot MGRIT (checked). Costs per call make each block of a check cost a
    whole serial gradient: checked every step, layer ranks lose; every 100, they win."""
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    spec = dense_spec(5000, nlayers=256)
    kw = dict(levels=2, cfactor=8, mode="auto", iterations=(1, 2), nrelax=0)
    unchecked = decide_grid(spec, 4, str(path), **kw)
    rare = decide_grid(spec, 4, str(path), check_every=100, **kw)
    often = decide_grid(spec, 4, str(path), check_every=1, **kw)
    assert unchecked.shape[2] > 1 and rare.shape == unchecked.shape, rare.summary
    assert "ms per step for the quality checks" in rare.summary
    assert "quality checks" not in unchecked.summary
    assert often.shape == (4, 1, 1), often.summary
    assert "quality checks" not in often.summary  # serial backpropagation: none


def test_checked_training_gets_no_space_ranks(tmp_path):
    """Quality checks have no form for space ranks (the Trainer refuses the pair)."""
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))
    spec = training_spec("conv", (1, 28, 28), 4, 32, 1, 10, 3, 0)
    kw = dict(mode="oneshot", levels=2, cfactor=4, iterations=(1, 2), max_space=14,
              grid=(1, 2, 1))
    assert decide_grid(spec, 2, str(path), **kw).shape == (1, 2, 1)
    with pytest.raises(ValueError, match=r"space at most 1 \(quality checks\)"):
        decide_grid(spec, 2, str(path), check_every=10, **kw)


def test_grid_auto_on_a_deep_network_can_choose_more_levels_under_mpi(tmp_path):
    from braidpy.perf.auto import QUALIFIED_DEEP, qualified

    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-3), str(path))  # layer ranks win
    log = tmp_path / "log.json"
    proc = run_train(2, "--grid", "auto", "--calibration", path, "--layers", 1024,
                     "--samples", 20, "--iterations", 1, "--quality-check-every", 5,
                     "--log", log)
    assert proc.returncode == 0, proc.stderr
    header = json.loads(log.read_text().splitlines()[0])
    spec = training_spec("dense", (2,), header["network"]["width"], 1024, 20, 5, None, 0)
    want = decide_grid(spec, 2, str(path), mode="auto", settings=qualified(1024),
                       check_every=5)
    assert want.setting in QUALIFIED_DEEP  # the model prefers more levels here
    config = header["config"]
    assert header["grid"] == list(want.shape)
    assert (config["m1"], config["m2"], config["relax"], config["mgrit"]["max_levels"],
            config["cfactor"]) == (want.setting.m1, want.setting.m2, want.setting.relax,
                                   want.setting.levels, want.setting.cfactor)


def test_line_search_trials_are_priced_with_the_setting(tmp_path):
    # Adjoint calls cost 1.5x forward ones: m1 = 2, m2 = 1 is the cheaper gradient, but
    # each L-BFGS trial runs m1 state iterations, which makes m1 = 1, m2 = 2 the
    # cheaper step. Adam (no trials) keeps the cheaper gradient.
    from braidpy.perf.auto import Setting, trials_per_step

    fwd, adj = CostFit(0.0, 1e-6), CostFit(0.0, 1.5e-6)
    layers = (LayerCosts("dense-w4", "dense", (4,), 1,
                         {"fwd": fwd, "adj": adj, "grad": CostFit(0.0, 0.0),
                          "vec": CostFit(0.0, 0.0)}),)
    free = Link(0.0, 0.0, "assumed: test")
    path = tmp_path / "cal.json"
    save_calibration(Calibration(layers, 0.0, free, free, solve_s=0.0), str(path))
    a, b = Setting(2, 1, "F", 2, 4), Setting(1, 2, "F", 2, 4)
    spec = dense_spec(64)
    adam = decide_grid(spec, 2, str(path), mode="oneshot", settings=[a, b], grid=(1, 1, 2),
                       trials=trials_per_step("adam"))
    lbfgs = decide_grid(spec, 2, str(path), mode="oneshot", settings=[a, b],
                        grid=(1, 1, 2), trials=trials_per_step("lbfgs"))
    assert adam.setting == a and "per step" not in adam.summary, adam.summary
    assert lbfgs.setting == b, lbfgs.summary
    assert "per step with 1 line-search trial(s)" in lbfgs.summary
    with pytest.raises(ValueError, match="optimizer must be one of"):
        trials_per_step("newton")


def test_a_check_on_uneven_shares_is_priced_on_the_largest_by_hand():
    """4097 samples over 2 data groups: the larger group's 2049, in 16 blocks (129, then
    fifteen of 128); over 3 layer ranks the first holds 6 of them (the most). Messages:
    the chain through 3 holders (2), the broadcast over 3 ranks (ceil(log2 3) = 2
    rounds), the average over the groups."""
    import dataclasses

    from braidpy.perf.auto import check_seconds
    from braidpy.perf.model import Strategy, serial_seconds
    from braidpy.perf.schedule import Cycle

    cal, spec = per_sample(1e-6), dense_spec(4097, nlayers=64)
    s = Strategy(2, 1, 3, Cycle(ntime=64, max_levels=2))
    want = sum(serial_seconds(dataclasses.replace(spec, samples=n), cal)
               for n in [129] + [128] * 5)
    assert check_seconds(spec, s, cal) == pytest.approx(want, rel=1e-12)
    slow = Calibration(cal.layers, 0.0, Link(1e-3, 0.0, "assumed: test"),
                       Link(5e-3, 0.0, "assumed: test"), solve_s=0.0)
    assert check_seconds(spec, s, slow) - check_seconds(spec, s, cal) == pytest.approx(
        (2 + 2) * 1e-3 + 5e-3, rel=1e-9)
    six = Strategy(1, 1, 6, Cycle(ntime=64, max_levels=2))  # ceil(log2 6) = 3 rounds
    assert check_seconds(spec, six, slow) - check_seconds(spec, six, cal) == pytest.approx(
        (5 + 3) * 1e-3, rel=1e-9)
