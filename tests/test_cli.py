"""The command line (braidpy.cli, python -m braidpy): options, logs, plots, resume, MPI."""

import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from test_mpi import MPIEXEC

from braidpy.cli import build_parser
from braidpy.train.progress import Progress, format_step

# Tiny runs: 100 peaks points, 8 layers (two MGRIT levels with cf 4), 3 steps.
TINY = ["--samples", "100", "--validation-samples", "50", "--layers", "8", "--iterations", "3"]
ENV = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")


def cli(*args, nranks=1, cwd=None, timeout=120):
    cmd = [sys.executable, "-m", "braidpy", *map(str, args)]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV,
                          cwd=cwd)


def ok(*args, **kwargs):
    proc = cli(*args, **kwargs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def read_log(path):
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # strict JSON: no NaN literals
    assert [r["event"] for r in records] == ["header"] + ["step"] * (len(records) - 2) + ["end"]
    return records[0], records[1:-1], records[-1]


def progress_lines(proc):
    return re.findall(r"^step \d+/\d+", proc.stderr, flags=re.MULTILINE)


def steps_without_time(records):
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in records]


# ------------------------------------------------------------------ parsing and errors


def test_help_lists_the_options():
    proc = ok("train", "--help")
    for option in ("--width", "--layers", "--mode", "--m1", "--levels", "--cf", "--tol",
                   "--optimizer", "--tikhonov", "--ddt", "--classifier-reg", "--patience",
                   "--target-accuracy", "--checkpoint", "--resume", "--log", "--plot",
                   "--quiet", "peaks|digits|FILE"):
        assert option in proc.stdout, option
    assert "train" in ok("--help").stdout


def test_defaults_are_the_papers_peaks_setup():
    args = build_parser().parse_args(["train", "peaks"])
    assert (args.width, args.T, args.activation, args.optimizer) == (8, 5.0, "smooth_relu",
                                                                      "lbfgs")
    assert (args.mode, args.m1, args.m2, args.levels, args.cf) == ("oneshot", 2, 2, 2, 4)


@pytest.mark.parametrize("args, message", [
    (["train", "peaks", "--activation", "sigmoid"], "invalid choice: 'sigmoid'"),
    (["train", "peaks", "--width", "1", "--opening", "replicate"], "width (1)"),
    (["train", "peaks", "--width", "1", "--opening", "zero-pad"], "width (1)"),
    (["train", "peaks", "--resume"], "--resume needs --checkpoint"),
    (["train", "peaks", "--layers", "0"], "--layers: must be >= 1, got 0"),
    (["train", "peaks", "--cf", "1"], "--cf: must be >= 2, got 1"),
    (["train", "peaks", "--lr", "-1"], "--lr: must be > 0, got -1"),
    (["train", "peaks", "--tol", "abc"], "--tol: expected a number, got 'abc'"),
    (["train", "peaks", "--mode", "fast"], "invalid choice: 'fast'"),
    (["train", "peaks", "--target-accuracy", "95"], "--target-accuracy: must be in (0, 1]"),
    (["train", "nosuchfile.npy"], "'nosuchfile.npy' is neither peaks nor digits"),
    (["train", "peaks", "--labels", "y.csv"], "--labels does not apply"),
    (["train", "peaks", "--momentum", "0.5"], "--momentum applies to --optimizer sgd"),
    (["train", "peaks", "--data", "no/such/dir"], "no/such/dir"),
    (["train", "peaks", "--kernel", "2"], "kernel must be odd"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_bad_options_exit_2_naming_the_value(args, message):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_features_file_without_labels(tmp_path):
    np.save(tmp_path / "X.npy", np.zeros((10, 3)))
    proc = cli("train", tmp_path / "X.npy")
    assert proc.returncode == 2 and "needs --labels" in proc.stderr


def test_resume_with_other_settings_is_a_usage_error(tmp_path):
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, "--checkpoint", ck, "--quiet")
    proc = cli("train", "peaks", *TINY, "--checkpoint", ck, "--resume", "--lr", "0.5")
    assert proc.returncode == 2 and "other settings: lr" in proc.stderr, proc.stderr


@pytest.mark.parametrize("nranks, extra", [
    (1, []), (2, []),
    (1, ["--mode", "serial", "--iterations", "2"]),  # a non-finite loss at the last step
])
def test_failure_in_training_prints_once_and_exits_1(nranks, extra):
    proc = cli("train", "peaks", *TINY, "--optimizer", "sgd", "--lr", "1e200", *extra,
               nranks=nranks)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("braidpy train: error:") == 1, proc.stderr
    assert "diverge" in proc.stderr and "Traceback" not in proc.stderr


def test_checkpoint_write_failure_stops_every_rank(tmp_path):
    # Rank 0 fails to write (the checkpoint's temporary file is a directory): rank 1 must
    # not wait for it in the next MGRIT solve.
    (tmp_path / "run.ckpt.tmp").mkdir()
    proc = cli("train", "peaks", *TINY, "--checkpoint", tmp_path / "run.ckpt",
               "--checkpoint-every", "1", nranks=2)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("error: checkpoint") == 1, proc.stderr


# ------------------------------------------------------------------ runs and files


def test_serial_run_writes_a_json_lines_log(tmp_path):
    log = tmp_path / "out" / "log.jsonl"
    proc = ok("train", "peaks", *TINY, "--log", log)
    header, steps, end = read_log(log)
    assert header["config"]["mode"] == "oneshot" and header["config"]["iterations"] == 3
    assert header["network"]["layers"] == 8 and "8 x dense 8" in header["architecture"]
    assert (header["train_samples"], header["validation_samples"], header["ranks"]) == (100, 50, 1)
    assert [r["iteration"] for r in steps] == [1, 2, 3]
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert all(r["steps"] > 0 for r in steps)
    assert all(r["primal_iterations"] == r["adjoint_iterations"] == 2 for r in steps)
    assert all(0 <= r["val_accuracy"] <= 1 for r in steps)
    assert end["stop_reason"] == "iterations" and end["steps"] == 3
    assert end["step_calls"] == sum(r["steps"] for r in steps)
    # Not a terminal: one plain progress line per step on stderr, the summary on stdout.
    assert progress_lines(proc) == ["step 1/3", "step 2/3", "step 3/3"]
    assert "\r" not in proc.stderr
    assert "best validation accuracy" in proc.stdout


def test_quiet_prints_nothing(tmp_path):
    proc = ok("train", "peaks", *TINY, "--quiet")
    assert proc.stdout == proc.stderr == ""


@pytest.mark.parametrize("mode, figures", [
    ("oneshot", {"training.png", "mgrit_residuals.png", "mgrit_iterations.png"}),
    ("serial", {"training.png"}),
])
def test_plot_writes_pngs(tmp_path, mode, figures):
    ok("train", "peaks", *TINY, "--mode", mode, "--plot", tmp_path / "plots", "--quiet")
    written = {p.name for p in (tmp_path / "plots").iterdir()}
    assert written == figures
    assert all((tmp_path / "plots" / name).stat().st_size > 1000 for name in figures)


def test_features_file_dense_and_conv(tmp_path):
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 40)
    np.savetxt(tmp_path / "y.csv", labels, fmt="%d")
    np.save(tmp_path / "vectors.npy", rng.standard_normal((40, 3)) + labels[:, None])
    np.save(tmp_path / "images.npy", rng.standard_normal((40, 2, 4, 4)))
    for features, extra, kind in (("vectors.npy", ["--opening", "zero-pad", "--width", "4"],
                                   "dense"), ("images.npy", ["--layers", "4"], "conv")):
        ok("train", tmp_path / features, "--labels", tmp_path / "y.csv", "--iterations", "2",
           "--validation-fraction", "0.25", "--log", tmp_path / "log.jsonl", *extra)
        header, steps, _ = read_log(tmp_path / "log.jsonl")
        assert header["network"]["kind"] == kind and header["network"]["kernels"] == "numpy"
        assert (header["train_samples"], header["validation_samples"]) == (30, 10)
        assert len(steps) == 2


def test_peaks_reference_data():
    proc = ok("train", "peaks", "--data", "tests/data/peaks", "--layers", "4",
              "--iterations", "1", "--mode", "serial",
              cwd=os.path.dirname(os.path.dirname(__file__)))
    assert "5000 training / 200 validation" in proc.stderr


@pytest.mark.parametrize("extra", [[], ["--optimizer", "adam", "--batch", "30", "--shuffle"]])
def test_resume_continues_to_the_same_history(tmp_path, extra):
    six = [*TINY[:-1], "6", *extra]
    ok("train", "peaks", *six, "--log", tmp_path / "full.jsonl", "--quiet")
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, *extra, "--checkpoint", ck, "--quiet")
    proc = ok("train", "peaks", *six, "--checkpoint", ck, "--resume",
              "--log", tmp_path / "resumed.jsonl")
    assert "resumed from" in proc.stderr and progress_lines(proc) == ["step 4/6", "step 5/6",
                                                                      "step 6/6"]
    header, resumed, end = read_log(tmp_path / "resumed.jsonl")
    _, full, _ = read_log(tmp_path / "full.jsonl")
    assert header["resumed_at"] == 3 and end["steps"] == 6
    assert steps_without_time(resumed) == steps_without_time(full)


@pytest.mark.parametrize("mode", ["oneshot", "exact", "serial"])
def test_two_ranks_log_the_same_losses_as_one(tmp_path, mode):
    logs = {}
    for n in (1, 2):
        logs[n] = tmp_path / f"{n}.jsonl"
        ok("train", "peaks", *TINY, "--layers", "16", "--mode", mode, "--log", logs[n],
           "--quiet", nranks=n)
    (h1, s1, e1), (h2, s2, e2) = read_log(logs[1]), read_log(logs[2])
    assert (h1["ranks"], h2["ranks"]) == (1, 2)
    for key in ("loss", "objective", "gradient_norm", "val_accuracy", "step_size", "steps",
                "primal_iterations", "adjoint_iterations"):
        assert [r.get(key) for r in s2] == [r.get(key) for r in s1], key  # bitwise
    assert len(s1) == len(s2) > 0
    for key in ("primal_residuals", "adjoint_residuals"):  # norms summed per rank first
        for a, b in zip(s1, s2):
            np.testing.assert_allclose(b.get(key, []), a.get(key, []), rtol=1e-10, atol=1e-30)
    assert e1["best_accuracy"] == e2["best_accuracy"]


# ------------------------------------------------------------------ progress and script


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_redraws_one_line():
    out = FakeTerminal()
    bar = Progress(total=4, stream=out)
    record = {"iteration": 2, "loss": 0.25, "val_accuracy": 0.5, "seconds": 0.5,
              "primal_iterations": 2, "primal_residuals": [1e-3, 2e-4],
              "adjoint_iterations": 2, "adjoint_residuals": [3e-3]}
    bar.update(record)
    bar.update(dict(record, iteration=4))
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "[#####.....] 2/4 loss 2.500e-01 val 50.0% state 2 it 2.0e-04" in text
    assert "[##########] 4/4" in text
    assert "state 2 it r 2.0e-04" in format_step(record, 4)


def test_console_script():
    script = shutil.which("braidpy")
    if script is None:
        pytest.skip("the braidpy console script is not on PATH (pip install -e . installs it)")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "train" in proc.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interrupted_run_exits_130(tmp_path):
    """SIGINT (Ctrl-C) during training: one message on stderr and exit status 130."""
    import signal
    import time

    log = tmp_path / "run.jsonl"
    args = [*TINY[:-2], "--iterations", "100000", "--log", str(log), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "braidpy", "train", "peaks", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and '"event": "step"' in log.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no training step within 60 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "braidpy train: interrupted" in err and "Traceback" not in err, err
