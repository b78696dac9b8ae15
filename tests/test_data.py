"""Tests for braidpy.data: peaks labels, loaders, IDX files, one-hot and batches."""

from __future__ import annotations

import gzip
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from braidpy import data

# The layer-parallel training paper's reference Peaks set (copied from the project's
# shared data; 5000 training + 200 validation points, one-hot labels).
PEAKS_DIR = Path(__file__).resolve().parent / "data" / "peaks"

SEED_A, SEED_B = 20190417, 7331


# --------------------------------------------------------------------------- peaks


def test_peaks_reference_loader_shapes() -> None:
    ref = data.load_peaks_reference(PEAKS_DIR)
    assert set(ref) == {"train", "validation"}
    for split, n in (("train", 5000), ("validation", 200)):
        X, Y = ref[split]
        assert X.shape == (n, 2) and Y.shape == (n, 5)
        assert X.dtype == np.float64 and Y.dtype == np.float64
        assert np.all(Y.sum(axis=1) == 1.0)
        assert np.all(np.abs(X) <= 3.0)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_peaks_label_reproduces_reference_exactly(split: str) -> None:
    X, Y = data.load_peaks_reference(PEAKS_DIR)[split]
    labels = data.peaks_label(X)
    mismatch = np.flatnonzero(labels != Y.argmax(axis=1))
    assert mismatch.size == 0, f"{mismatch.size} labels differ, first at rows {mismatch[:10]}"
    np.testing.assert_array_equal(data.one_hot(labels, 5), Y)


def test_peaks_label_edges_and_extremes() -> None:
    t = np.linspace(-3.0, 3.0, 256)
    values = data.peaks_function(t[:, None], t[None, :])
    imin = np.unravel_index(values.argmin(), values.shape)
    imax = np.unravel_index(values.argmax(), values.shape)
    grid_min = [[t[imin[0]], t[imin[1]]]]
    grid_max = [[t[imax[0]], t[imax[1]]]]
    assert data.peaks_label(grid_min).tolist() == [0]
    assert data.peaks_label(grid_max).tolist() == [4]
    # Every class occurs on the grid, class sizes come from equal-width value bins.
    points = np.stack(np.meshgrid(t, t, indexing="ij"), axis=-1).reshape(-1, 2)
    labels = data.peaks_label(points)
    edges = np.linspace(values.min(), values.max(), 6)
    expected = np.clip(np.digitize(values.ravel(), edges) - 1, 0, 4)
    np.testing.assert_array_equal(labels, expected)
    assert set(labels.tolist()) == {0, 1, 2, 3, 4}


def _points_on_interior_edges(edges: np.ndarray) -> dict[int, np.ndarray]:
    """For each interior edge e_k, points whose peaks value is exactly e_k, and points
    one float away whose value lies just below it (found by bisection along a line
    y = const, then a scan of the neighbouring floats of x, evaluated as peaks_label
    evaluates them: columns of an (n, 2) array)."""
    out: dict[int, np.ndarray] = {}
    xs = np.linspace(-3.0, 3.0, 601)
    for k in range(1, 5):
        for y in np.linspace(-2.9, 2.9, 59):
            fs = data.peaks_function(xs, y) - edges[k]
            for i in np.flatnonzero(np.sign(fs[:-1]) != np.sign(fs[1:]))[:2]:
                a, b, fa = xs[i], xs[i + 1], fs[i]
                while True:
                    m = 0.5 * (a + b)
                    if m in (a, b):
                        break
                    fm = float(data.peaks_function(m, y)) - edges[k]
                    if np.sign(fm) == np.sign(fa):
                        a, fa = m, fm
                    else:
                        b = m
                near = (np.array([m]).view(np.int64) + np.arange(-2000, 2001)).view(np.float64)
                X = np.column_stack([near, np.full_like(near, y)])
                v = data.peaks_function(X[:, 0], X[:, 1])
                on, below = X[v == edges[k]], X[(v < edges[k]) & (v > edges[k - 1])]
                if len(on) and len(below):
                    out[k] = np.concatenate([on[:3], below[-3:]])
                    break
            if k in out:
                break
    return out


def test_peaks_label_value_exactly_on_an_interior_edge_goes_up() -> None:
    """The tie-break (bins [e_k, e_{k+1}), i.e. searchsorted side="right"): a point whose
    value equals an interior edge e_k exactly is class k, a point just below is k - 1."""
    t = np.linspace(-3.0, 3.0, 256)
    grid = data.peaks_function(t[:, None], t[None, :])
    edges = np.linspace(grid.min(), grid.max(), 6)
    found = _points_on_interior_edges(edges)
    assert sorted(found) == [1, 2, 3, 4], "no point found exactly on some edge"
    for k, X in found.items():
        values = data.peaks_function(X[:, 0], X[:, 1])
        assert np.count_nonzero(values == edges[k]) >= 1
        # The label by the documented rule, with plain comparisons.
        expected = [max(j for j in range(5) if j == 0 or v >= edges[j]) for v in values]
        assert expected[0] == k and expected[-1] == k - 1
        assert data.peaks_label(X).tolist() == expected, (k, X.tolist())


def test_peaks_label_rejects_bad_shape() -> None:
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        data.peaks_label(np.zeros((3, 3)))


@pytest.mark.parametrize("n", [0, 5, 250, 1000])
def test_peaks_balanced_and_consistent(n: int) -> None:
    X, Y = data.peaks(n, seed=SEED_A)
    assert X.shape == (n, 2) and Y.shape == (n, 5)
    assert X.dtype == np.float64 and Y.dtype == np.float64
    np.testing.assert_array_equal(Y.sum(axis=0), np.full(5, n / 5))
    np.testing.assert_array_equal(Y.argmax(axis=1), data.peaks_label(X))
    assert np.all((X >= -3.0) & (X <= 3.0))


def test_peaks_uneven_counts_differ_by_at_most_one() -> None:
    _, Y = data.peaks(13, seed=SEED_B)
    assert Y.sum(axis=0).tolist() == [3.0, 3.0, 3.0, 2.0, 2.0]


def test_peaks_deterministic_per_seed() -> None:
    Xa, Ya = data.peaks(100, seed=SEED_A)
    Xb, Yb = data.peaks(100, seed=SEED_A)
    Xc, _ = data.peaks(100, seed=SEED_B)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(Ya, Yb)
    assert not np.array_equal(Xa, Xc)


def test_peaks_rejects_bad_n() -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        data.peaks(-1, seed=SEED_A)


def test_load_peaks_reference_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="features_training.dat"):
        data.load_peaks_reference(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="features_training.dat"):
        data.load_peaks_reference(tmp_path)


def test_load_peaks_reference_not_one_hot(tmp_path: Path) -> None:
    for xname, yname in (
        ("features_training.dat", "labels_training.dat"),
        ("features_validation.dat", "labels_validation.dat"),
    ):
        np.savetxt(tmp_path / xname, np.zeros((2, 2)))
        np.savetxt(tmp_path / yname, np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]))
    with pytest.raises(ValueError, match="labels_training.dat: labels are not one-hot"):
        data.load_peaks_reference(tmp_path)


# --------------------------------------------------------------------------- digits


def test_digits_split() -> None:
    # scikit-learn is a test dependency: no importorskip, a missing install fails here.
    sets = data.digits(validation_fraction=0.25, seed=SEED_B)
    Xt, Yt = sets["train"]
    Xv, Yv = sets["validation"]
    assert Xt.shape[1:] == (1, 8, 8) and Xv.shape[1:] == (1, 8, 8)
    assert Xt.shape[0] + Xv.shape[0] == 1797
    assert Xv.shape[0] == round(0.25 * 1797)
    assert Yt.shape == (Xt.shape[0], 10) and Yv.shape == (Xv.shape[0], 10)
    assert Xt.min() >= 0.0 and Xt.max() == 1.0
    again = data.digits(validation_fraction=0.25, seed=SEED_B)
    np.testing.assert_array_equal(again["validation"][0], Xv)
    other = data.digits(validation_fraction=0.25, seed=SEED_A)
    assert not np.array_equal(other["validation"][0], Xv)
    with pytest.raises(ValueError, match="validation_fraction"):
        data.digits(validation_fraction=1.0)


def test_digits_without_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="needs scikit-learn"):
        data.digits()


def test_import_needs_numpy_only() -> None:
    code = "import sys, braidpy.data; print('sklearn' in sys.modules)"
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- IDX / MNIST


def write_idx(path: Path, array: np.ndarray, code: int) -> None:
    """Write ``array`` as an IDX file (gzip when the name ends in .gz)."""
    big = array.astype(array.dtype.newbyteorder(">"))
    header = struct.pack(">HBB", 0, code, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + big.tobytes()
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb") as fh:
            fh.write(payload)
    else:
        path.write_bytes(payload)


IDX_CASES = [
    (0x08, "u1"),
    (0x09, "i1"),
    (0x0B, "i2"),
    (0x0C, "i4"),
    (0x0D, "f4"),
    (0x0E, "f8"),
]


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize(("code", "dtype"), IDX_CASES)
def test_idx_round_trip(tmp_path: Path, code: int, dtype: str, suffix: str) -> None:
    rng = np.random.default_rng(SEED_A)
    array = (
        rng.uniform(-100, 100, size=(3, 4, 5))
        if dtype[0] in "if"
        else rng.uniform(0, 255, size=(3, 4, 5))
    ).astype(dtype)
    path = tmp_path / f"a.idx{suffix}"
    write_idx(path, array, code)
    back = data.load_idx(path)
    assert back.shape == array.shape
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, array)


def test_idx_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.idx"
    path.write_bytes(struct.pack(">HBBI", 0x1F8B, 0x08, 1, 2) + b"\x00\x01")
    with pytest.raises(ValueError, match="bad IDX magic number"):
        data.load_idx(path)
    path.write_bytes(struct.pack(">HBBI", 0, 0x07, 1, 2) + b"\x00\x01")
    with pytest.raises(ValueError, match="bad IDX magic number"):
        data.load_idx(path)


def test_idx_size_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "short.idx"
    path.write_bytes(struct.pack(">HBBI", 0, 0x08, 1, 5) + b"\x00\x01")
    with pytest.raises(ValueError, match="needs 5 data bytes, found 2"):
        data.load_idx(path)


def test_gzipped_idx_size_mismatch_either_way(tmp_path: Path) -> None:
    # Gzipped, the data's size is known only by decompressing: exactly the announced
    # bytes are read, and one more tells of a longer file.
    for payload, found in ((b"\x00\x01", "found 2"), (b"\x00" * 9, "found 6 or more")):
        path = tmp_path / "x-idx1-ubyte.gz"
        with gzip.open(path, "wb") as f:
            f.write(struct.pack(">HBBI", 0, 0x08, 1, 5) + payload)
        with pytest.raises(ValueError, match=f"{path}: IDX shape \\(5,\\) needs 5 data "
                                             f"bytes, {found}"):
            data.load_idx(path)


def test_mnist_small_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED_B)
    sizes = {"train": 6, "t10k": 4}
    labels = {}
    for prefix, n in sizes.items():
        images = rng.integers(0, 256, size=(n, 28, 28)).astype(np.uint8)
        images[0, 0, 0] = 255
        labels[prefix] = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images, 0x08)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", labels[prefix], 0x08)
    sets = data.mnist(tmp_path)
    assert set(sets) == {"train", "test"}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        X, Y = sets[split]
        assert X.shape == (sizes[prefix], 1, 28, 28) and X.dtype == np.float64
        assert X.min() >= 0.0 and X.max() == 1.0
        np.testing.assert_array_equal(Y.argmax(axis=1), labels[prefix])
        assert Y.shape == (sizes[prefix], 10)


def test_mnist_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        data.mnist(tmp_path)


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize(("code", "dtype"), IDX_CASES)
def test_save_idx_writes_the_spec_bytes_and_round_trips(
    tmp_path: Path, code: int, dtype: str, suffix: str
) -> None:
    rng = np.random.default_rng(SEED_B)
    low = -100 if dtype[0] in "if" else 0
    # Three different sizes: a transposed or reordered axis changes the bytes.
    array = rng.uniform(low, 100, size=(3, 4, 5)).astype(dtype)
    for given in (array, array.astype(array.dtype.newbyteorder(">")), array[:, ::-1, :]):
        path = data.save_idx(tmp_path / f"s.idx{suffix}", given)
        assert path == tmp_path / f"s.idx{suffix}"
        ref = tmp_path / f"ref.idx{suffix}"
        write_idx(ref, np.asarray(given), code)  # the test's own writer of the spec
        opener = gzip.open if suffix else open
        with opener(path, "rb") as a, opener(ref, "rb") as b:
            assert a.read() == b.read()
        back = data.load_idx(path)
        assert back.dtype == np.dtype(dtype) and back.shape == given.shape
        np.testing.assert_array_equal(back, given)


def test_save_idx_one_dimension_and_repeatable_gzip(tmp_path: Path) -> None:
    labels = np.array([7, 0, 3], dtype=np.uint8)
    first = data.save_idx(tmp_path / "a-idx1-ubyte.gz", labels).read_bytes()
    assert data.save_idx(tmp_path / "a-idx1-ubyte.gz", labels).read_bytes() == first
    raw = gzip.decompress(first)
    assert raw == bytes([0, 0, 0x08, 1, 0, 0, 0, 3, 7, 0, 3])
    np.testing.assert_array_equal(data.load_idx(tmp_path / "a-idx1-ubyte.gz"), labels)


@pytest.mark.parametrize(("value", "message"), [
    (np.arange(3, dtype=np.int64), "cannot hold dtype int64"),
    (np.zeros(3, dtype=bool), "cannot hold dtype bool"),
    (np.zeros(3, dtype=np.complex128), "cannot hold dtype complex128"),
    (np.zeros(3, dtype=np.uint16), "cannot hold dtype uint16"),
    (np.array(5, dtype=np.uint8), "got an array of shape ()"),
    ([1, 2, 3], "needs a numpy array, got list"),
])
def test_save_idx_bad_input_names_the_value(tmp_path: Path, value, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        data.save_idx(tmp_path / "bad.idx", value)
    assert not (tmp_path / "bad.idx").exists()


def write_mnist_folder(folder: Path, ntrain: int = 60, ntest: int = 20):
    """A tiny MNIST folder from digits28 (train images gzipped); returns the arrays."""
    sets = data.digits28(validation_fraction=0.2, seed=SEED_A)
    written = {}
    for split, prefix, n in (("train", "train", ntrain), ("validation", "t10k", ntest)):
        X, Y = sets[split][0][:n], sets[split][1][:n]
        images = np.rint(255 * X[:, 0]).astype(np.uint8)
        labels = Y.argmax(axis=1).astype(np.uint8)
        suffix = ".gz" if prefix == "train" else ""
        data.save_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
        data.save_idx(folder / f"{prefix}-labels-idx1-ubyte", labels)
        written[prefix] = (images, labels)
    return written


def test_mnist_reads_what_save_idx_wrote(tmp_path: Path) -> None:
    written = write_mnist_folder(tmp_path)
    assert written["train"][0].shape == (60, 28, 28)
    assert written["t10k"][0].shape == (20, 28, 28)
    sets = data.mnist(tmp_path)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = written[prefix]
        X, Y = sets[split]
        assert X.shape == (images.shape[0], 1, 28, 28) and X.dtype == np.float64
        np.testing.assert_array_equal(X[:, 0], images / 255.0)
        np.testing.assert_array_equal(Y, data.one_hot(labels, 10))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n + (".gz" if n == "train-images-idx3-ubyte" else "") for n in data.MNIST_FILES)


def test_digits28_is_digits_scaled_and_padded() -> None:
    small, big = data.digits(0.25, SEED_B), data.digits28(0.25, SEED_B)
    for split in ("train", "validation"):
        (x, y), (X, Y) = small[split], big[split]
        assert X.shape == (x.shape[0], 1, 28, 28) and X.dtype == np.float64
        np.testing.assert_array_equal(Y, y)
        for i, j in ((0, 0), (1, 6), (7, 3)):  # pixel (i, j) fills a 3 x 3 block
            block = X[:, 0, 2 + 3 * i:5 + 3 * i, 2 + 3 * j:5 + 3 * j]
            np.testing.assert_array_equal(block, np.broadcast_to(
                x[:, 0, i, j, None, None], block.shape))
        np.testing.assert_array_equal(X[:, :, 2:26, 2:26],
                                      np.kron(x, np.ones((3, 3))))  # the GPU run's recipe
        assert not X[:, :, :2].any() and not X[:, :, 26:].any()
        assert not X[:, :, :, :2].any() and not X[:, :, :, 26:].any()
    with pytest.raises(ValueError, match=r"8 x 8 images, got shape \(28, 28\)"):
        data.upscale28(np.zeros((28, 28)))


# --------------------------------------------------------------------------- user arrays


def test_load_arrays_npy_ids(tmp_path: Path) -> None:
    X = np.arange(12.0).reshape(4, 3)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", np.array([3, 0, 1, 3]))
    Xl, Yl = data.load_arrays(tmp_path / "x.npy", tmp_path / "y.npy")
    np.testing.assert_array_equal(Xl, X)
    np.testing.assert_array_equal(Yl, data.one_hot([3, 0, 1, 3], 4))
    _, Y6 = data.load_arrays(tmp_path / "x.npy", tmp_path / "y.npy", nclasses=6)
    assert Y6.shape == (4, 6)


def test_load_arrays_csv_one_hot_and_ids(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("0.5,1.5\n2.5,3.5\n4.5,5.5\n")
    (tmp_path / "onehot.csv").write_text("0,1\n1,0\n0,1\n")
    (tmp_path / "ids.csv").write_text("1\n0\n1\n")
    X, Y = data.load_arrays(tmp_path / "x.csv", tmp_path / "onehot.csv")
    assert X.shape == (3, 2) and X[2, 1] == 5.5
    np.testing.assert_array_equal(Y, data.one_hot([1, 0, 1]))
    _, Yids = data.load_arrays(tmp_path / "x.csv", tmp_path / "ids.csv")
    np.testing.assert_array_equal(Yids, Y)


def test_load_arrays_whitespace_and_image_npy(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("1 2 3\n4 5 6\n")
    (tmp_path / "y.txt").write_text("0\n1\n")
    X, _ = data.load_arrays(tmp_path / "x.txt", tmp_path / "y.txt", delimiter=None)
    assert X.shape == (2, 3)
    np.save(tmp_path / "img.npy", np.zeros((2, 1, 4, 4), dtype=np.float32))
    Xi, _ = data.load_arrays(tmp_path / "img.npy", tmp_path / "y.txt")
    assert Xi.shape == (2, 1, 4, 4) and Xi.dtype == np.float64


def test_load_arrays_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((3, 2)))
    np.save(tmp_path / "y4.npy", np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"shape mismatch: .*x\.npy has 3 samples.*y4\.npy has 4"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "y4.npy")

    (tmp_path / "words.csv").write_text("1,2\nred,3\n3,4\n")
    (tmp_path / "y.csv").write_text("0\n1\n1\n")
    with pytest.raises(ValueError, match=r"words\.csv: could not read numbers"):
        data.load_arrays(tmp_path / "words.csv", tmp_path / "y.csv")

    np.save(tmp_path / "strings.npy", np.array(["a", "b", "c"]))
    with pytest.raises(ValueError, match=r"strings\.npy: non-numeric data"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "strings.npy")

    np.save(tmp_path / "frac.npy", np.array([0.0, 1.5, 1.0]))
    with pytest.raises(ValueError, match=r"frac\.npy: labels must be whole numbers"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "frac.npy")

    np.save(tmp_path / "neg.npy", np.array([0, -1, 1]))
    with pytest.raises(ValueError, match=r"neg\.npy: labels must be non-negative"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "neg.npy")

    np.save(tmp_path / "big.npy", np.array([0, 5, 1]))
    with pytest.raises(ValueError, match=r"big\.npy: label 5 is out of range for nclasses=3"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "big.npy", nclasses=3)

    np.save(tmp_path / "soft.npy", np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"soft\.npy: labels are not one-hot"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "soft.npy")

    np.save(tmp_path / "hot.npy", np.eye(3))
    with pytest.raises(ValueError, match=r"hot\.npy: one-hot labels have 3 columns, nclasses=4"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "hot.npy", nclasses=4)

    with pytest.raises(FileNotFoundError, match=r"absent\.npy: file not found"):
        data.load_arrays(tmp_path / "absent.npy", tmp_path / "y.csv")


# --------------------------------------------------------------------------- one_hot, batches


def test_one_hot() -> None:
    Y = data.one_hot(np.array([1, 0, 2, 1]), 3)
    assert Y.dtype == np.float64 and Y.shape == (4, 3)
    np.testing.assert_array_equal(Y.argmax(axis=1), [1, 0, 2, 1])
    np.testing.assert_array_equal(Y.sum(axis=1), np.ones(4))
    np.testing.assert_array_equal(data.one_hot([2.0, 0.0]), [[0, 0, 1], [1, 0, 0]])
    assert data.one_hot(np.array([], dtype=int), 3).shape == (0, 3)
    with pytest.raises(ValueError, match="out of range"):
        data.one_hot([0, 3], 3)
    with pytest.raises(ValueError, match="1-D"):
        data.one_hot(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="non-negative"):
        data.one_hot([-1, 0])


def test_batches_in_order() -> None:
    X = np.arange(10.0).reshape(5, 2)
    Y = data.one_hot([0, 1, 2, 0, 1])
    got = list(data.batches(X, Y, 2))
    assert [xb.shape[0] for xb, _ in got] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([xb for xb, _ in got]), X)
    np.testing.assert_array_equal(np.concatenate([yb for _, yb in got]), Y)
    assert [xb.shape[0] for xb, _ in data.batches(X, Y, 2, drop_last=True)] == [2, 2]
    assert [xb.shape[0] for xb, _ in data.batches(X, Y, 10)] == [5]


def test_batches_shuffled_deterministic() -> None:
    X = np.arange(40.0).reshape(20, 2)
    Y = data.one_hot(np.arange(20) % 4)
    first = list(data.batches(X, Y, 6, shuffle=True, seed=SEED_A))
    again = list(data.batches(X, Y, 6, shuffle=True, seed=SEED_A))
    other = list(data.batches(X, Y, 6, shuffle=True, seed=SEED_B))
    for (xa, ya), (xb, yb) in zip(first, again):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    Xs = np.concatenate([xb for xb, _ in first])
    Ys = np.concatenate([yb for _, yb in first])
    assert not np.array_equal(Xs, X)
    # A permutation of the samples, with features and labels kept together.
    np.testing.assert_array_equal(np.sort(Xs[:, 0]), X[:, 0])
    np.testing.assert_array_equal(Ys.argmax(axis=1), (Xs[:, 0] / 2).astype(int) % 4)
    assert not np.array_equal(Xs, np.concatenate([xb for xb, _ in other]))


def test_batches_errors() -> None:
    X, Y = np.zeros((4, 2)), np.zeros((3, 2))
    with pytest.raises(ValueError, match="same number of samples"):
        next(data.batches(X, Y, 2))
    with pytest.raises(ValueError, match="positive integer"):
        next(data.batches(X, X, 0))


def test_load_arrays_drops_an_unlabelled_class(tmp_path):
    X = np.arange(12.0).reshape(6, 2)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", np.array([0, 3, 1, 0, 2, 3]))
    Xk, Y = data.load_arrays(tmp_path / "x.npy", tmp_path / "y.npy", unlabelled=0)
    np.testing.assert_array_equal(Xk, X[[1, 2, 4, 5]])
    assert Y.argmax(axis=1).tolist() == [2, 0, 1, 2] and Y.shape == (4, 3)
    np.save(tmp_path / "oh.npy", np.eye(3)[[0, 1, 2, 0, 1, 2]])
    with pytest.raises(ValueError, match="needs class-id labels"):
        data.load_arrays(tmp_path / "x.npy", tmp_path / "oh.npy", unlabelled=0)
