"""benchmarks/bench_gpu_regimes.py: the regime rule on synthetic measurements, and the
script end to end in its CPU form (--device cpu --small): tables, JSON, budget, no torch,
no CuPy."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu_regimes.py"
#: Run the script with torch unimportable (``import torch`` raises ImportError).
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.fixture(scope="module")
def regimes():
    spec = importlib.util.spec_from_file_location("bench_gpu_regimes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    path = list(sys.path)  # the script puts benchmarks/ first, for its siblings
    spec.loader.exec_module(module)
    yield module
    sys.path[:] = path
    del sys.modules[spec.name]


def run(*args, no_torch=False):
    head = [sys.executable, "-W", "error"] + (["-c", NO_TORCH] if no_torch else [])
    return subprocess.run(head + [str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


# ------------------------------------------------------------------ the rule


def test_launch_bound_layers_batched_win(regimes):
    # A 20 us layer call over a 15 us floor; 32 intervals in one 40 us call: 1.25 us each,
    # a gain of 16 over the serial call, more than the 2.5x extra layer steps.
    r = regimes.classify(20e-6, 15e-6, 40e-6, 32, 2.5)
    assert (r.bound, r.wins, r.basis) == ("launch-bound", True, "predicted")
    assert r.gain == pytest.approx(16.0)
    assert "20.0 us" in r.reason and "15.0 us" in r.reason and "pays for" in r.reason


def test_compute_bound_layers_cannot_hide_the_extra_work(regimes):
    # A 4 ms layer call (267x the floor); the batched call costs 3 ms per interval.
    r = regimes.classify(4e-3, 15e-6, 32 * 3e-3, 32, 2.5)
    assert (r.bound, r.wins) == ("compute-bound", False)
    assert r.gain == pytest.approx(4 / 3)
    assert r.reason.startswith("compute-bound:") and "cannot be hidden" in r.reason


def test_launch_factor_is_the_boundary(regimes):
    floor = 15e-6
    just_under = regimes.classify(regimes.LAUNCH_FACTOR * floor * 0.99, floor, 1e-3, 4, 2.0)
    at = regimes.classify(regimes.LAUNCH_FACTOR * floor, floor, 1e-3, 4, 2.0)
    assert just_under.bound == "launch-bound"
    assert at.bound == "compute-bound"


def test_gain_against_the_work_ratio_decides_the_prediction(regimes):
    # gain = 1e-3 / (8e-3 / 16) = 2: wins against W 1.9, not against W 2.1.
    assert regimes.classify(1e-3, 1e-5, 8e-3, 16, 1.9).wins
    assert not regimes.classify(1e-3, 1e-5, 8e-3, 16, 2.1).wins


def test_a_measured_whole_gradient_overrides_the_prediction(regimes):
    predicted = regimes.classify(20e-6, 15e-6, 40e-6, 32, 2.5)
    measured = regimes.classify(20e-6, 15e-6, 40e-6, 32, 2.5, measured_speedup=0.8)
    assert predicted.wins and not measured.wins and measured.basis == "measured"
    assert "0.80x serial" in measured.reason and "against the per-call prediction" in \
        measured.reason
    agreed = regimes.classify(20e-6, 15e-6, 40e-6, 32, 2.5, measured_speedup=1.7)
    assert agreed.wins and "against" not in agreed.reason


@pytest.mark.parametrize("bad", [dict(layer_s=0.0), dict(floor_s=float("nan")),
                                 dict(batched_s=-1.0), dict(work_ratio=None)])
def test_classify_names_the_bad_measurement(regimes, bad):
    args = dict(layer_s=1e-3, floor_s=1e-5, batched_s=1e-3, intervals=4, work_ratio=2.0)
    args.update(bad)
    (name, value), = bad.items()
    with pytest.raises(ValueError, match=f"{name} must be a positive number, got {value}"):
        regimes.classify(**args)
    with pytest.raises(ValueError, match="intervals must be >= 1, got 0"):
        regimes.classify(1e-3, 1e-5, 1e-3, 0, 2.0)


def test_growth_exponent(regimes):
    assert regimes.growth_exponent([1, 10, 100], [3e-6, 3e-5, 3e-4]) == pytest.approx(1.0)
    assert regimes.growth_exponent([1, 10, 100], [3e-6] * 3) == pytest.approx(0.0, abs=1e-12)
    assert regimes.growth_exponent([8, 8], [1e-3, 2e-3]) is None


def test_auto_cfactor_is_the_power_of_two_nearest_sqrt_n(regimes):
    assert [regimes.auto_cfactor(n) for n in (16, 256, 1024)] == [4, 16, 32]


# ------------------------------------------------------------------ the script


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """One --device cpu --small run: (completed process, its JSON)."""
    path = tmp_path_factory.mktemp("regimes") / "rows.json"
    done = run("--device", "cpu", "--small", "--json", path)
    assert done.returncode == 0, done.stderr
    return done, json.loads(path.read_text())


def test_small_run_prints_the_tables_and_the_map(small):
    done, report = small
    out = done.stdout
    assert "serial reference: PyTorch" in out
    for title in ("Per call (serial reference", "Whole gradient", "Regime map (rule:"):
        assert title in out
    names = [row["name"] for row in report["rows"]]
    assert sorted(names) == sorted(["float64:2:16:1", "float64:2:16:4", "float32:2:16:1",
                                    "float32:2:16:4"])
    for name in names:  # each row once on the map, with its verdict and reason
        line = next(t for t in out.splitlines() if t.startswith(f"  {name} "))
        assert ("WINS" in line or "loses" in line) and "bound:" in line
    assert "skipped: none" in out


def test_small_run_json_fields(small):
    _, report = small
    meta = report["meta"]
    assert meta["launch_factor"] == 2.0 and meta["torch_missing"] is None
    assert meta["empty_launch"] > 0
    for row in report["rows"]:
        assert row["status"] == "measured", row
        pc, g, regime = row["per_call"], row["gradient"], row["regime"]
        for key in ("serial_layer", "floor", "step", "forward_batched", "adjoint_batched",
                    "torch_layer"):
            assert pc[key] > 0, key
        assert pc["torch_format"] in ("nchw", "channels_last")
        assert row["intervals"] == row["layers"] // row["cfactor"]
        assert pc["gain"] == pytest.approx(pc["serial_layer"] * row["intervals"]
                                           / pc["forward_batched"])
        for key in ("torch", "braidpy_serial", "oneshot", "serial"):
            assert g[key] > 0, key
        assert g["speedup"] == pytest.approx(g["torch"] / g["oneshot"])
        # The host's count of the layer steps is the solver's own.
        assert g["work_ratio"] == pytest.approx(pc["work_ratio"])
        # Same network, same weights, same batch: PyTorch's loss is braidpy's.
        tol = 1e-12 if row["dtype"] == "float64" else 1e-5
        assert g["loss_difference"] < tol
        assert regime["basis"] == "measured"
        assert regime["bound"] in ("launch-bound", "compute-bound")
        assert regime["wins"] == (g["speedup"] > 1)


def test_a_spent_budget_skips_every_row_saying_so(tmp_path):
    path = tmp_path / "rows.json"
    done = run("--device", "cpu", "--small", "--budget", "0.001", "--json", path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 4
    for row in rows:
        assert row["status"] == "skipped" and "--budget 0.001 s" in row["skip_reason"]
        assert f"skipped {row['name']}: per call: estimated" in done.stdout
    assert "0 measured in full" in done.stdout


def test_without_torch_the_serial_reference_is_braidpys(tmp_path):
    path = tmp_path / "rows.json"
    done = run("--device", "cpu", "--small", "--rows", "float64:*:*:4", "--json", path,
               no_torch=True)
    assert done.returncode == 0, done.stderr
    assert "PyTorch columns skipped: PyTorch is not installed" in done.stdout
    report = json.loads(path.read_text())
    assert "not installed" in report["meta"]["torch_missing"]
    (row,) = report["rows"]
    assert row["status"] == "measured" and "torch" not in row["gradient"]
    assert row["gradient"]["speedup"] == pytest.approx(row["gradient"]["braidpy_serial"]
                                                       / row["gradient"]["oneshot"])


def test_the_gpu_form_without_cupy_exits_with_a_message():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here: the GPU form would run")
    done = run("--device", "cuda")
    assert done.returncode == 1
    assert "--device cuda needs CuPy and a GPU" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args,words", [
    (["--rows", "float16:*"], "--rows 'float16:*' matches no row"),
    (["--budget", "-1"], "--budget must be >= 0 seconds, got -1.0"),
    (["--channels", "0"], "--channels must be positive, got 0"),
    (["--cfactor", "16"], "cfactor 16 leaves fewer than 2 intervals of N = 16"),
    (["--backends", "bogus"], "unknown conv kernel backend 'bogus'"),
])
def test_bad_options_are_named(regimes, capsys, args, words):
    with pytest.raises(SystemExit) as exc:
        regimes.make_rows(regimes.parse_args(["--device", "cpu", "--small", *args]))
    # argparse's errors (status 2) go to stderr; the script's own are the exit message.
    message = capsys.readouterr().err if exc.value.code == 2 else str(exc.value.code)
    assert words in message


def test_budget_refusals_say_what_was_estimated_and_left(regimes):
    assert regimes.Budget(0).refuses(1e9) is None  # 0: no limit
    why = regimes.Budget(10).refuses(100.0)
    assert why.startswith("estimated 150.0 s (with x1.5 margin) >") and "--budget 10 s" in why
    assert regimes.Budget(10).refuses(1.0) is None
    assert "the per-call pass may use 50%" in regimes.Budget(10).refuses(4.0, share=0.5)


def test_rows_with_per_call_numbers_only_are_mapped_by_prediction(regimes, capsys):
    row = regimes.Row("float32", 8, 256, 1, 16, 28)
    row.status = "per call only"
    row.per_call = dict(serial_layer=20e-6, floor=15e-6, step=30e-6, forward_batched=40e-6,
                        adjoint_batched=80e-6, gain=8.0, work_ratio=3.2, torch_format="nchw",
                        braidpy_backend="cudnn", braidpy_tf32=True)
    skipped = regimes.Row("float64", 64, 1024, 128, 32, 28)
    skipped.status = "skipped"
    regimes.report([row, skipped], {}, "PyTorch")
    out = capsys.readouterr().out
    assert "float32:8:256:1        WINS  (predicted): launch-bound:" in out
    assert "cudnn+tf32" in out
    assert "per call only: float32:8:256:1; skipped: float64:64:1024:128" in out
    assert row.regime["basis"] == "predicted" and row.regime["work_ratio"] == 3.2
