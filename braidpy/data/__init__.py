"""Small classification data sets and loaders for layer-parallel training examples.

Split by responsibility: ``_peaks`` (the Peaks problem: labels, generator, reference
files), ``_digits`` (scikit-learn's bundled digits, and the same at 28 x 28), ``_idx`` (IDX files and MNIST),
``_files`` (user arrays from .npy or text files) and ``_helpers`` (one-hot labels and
mini-batches). Every public name is imported from here.
"""

from __future__ import annotations

from ._digits import digits, digits28, upscale28
from ._files import load_arrays
from ._helpers import batches, one_hot
from ._idx import MNIST_FILES, load_idx, mnist, save_idx
from ._peaks import PEAKS_CLASSES, load_peaks_reference, peaks, peaks_function, peaks_label

__all__ = [
    "MNIST_FILES",
    "PEAKS_CLASSES",
    "batches",
    "digits",
    "digits28",
    "load_arrays",
    "load_idx",
    "load_peaks_reference",
    "mnist",
    "one_hot",
    "peaks",
    "peaks_function",
    "peaks_label",
    "save_idx",
    "upscale28",
]
