"""Settings presets of the ``braidpy train`` command line, built on the library defaults.

The defaults live in one place each: the network's in :class:`braidpy.nn.ResNet`'s
signature (tstop = 5, smoothed ReLU, kernel 3: the paper's), the training's in
:class:`braidpy.train.TrainConfig` (mode auto, one-shot m1 = m2 = 2, L-BFGS, full batch, 100
steps, seed 1) and MGRIT's in :data:`braidpy.train.TRAINING_DEFAULTS` (cf 4, 2 levels,
abs_tol 1e-9; FCF relaxation, braidpy.Options' nrelax 1). A preset lays a few values
over them:

* ``"paper"``: the paper's Peaks setup for every data source — width 8, 32 layers and
  the library defaults. Paper scale: on digits about 15 s per step on 2 cores.
* ``"quick"`` (the command line's default): the same for ``peaks`` and data files; for
  ``digits`` a shallow conv net (8 layers of 4 channels) trained with Adam on shuffled
  batches of 100 for 40 steps, validated every 10 — under a minute on 2 shared cores,
  about 97 % validation accuracy. For the 28 x 28 sources ``mnist`` and ``digits28``:
  16 layers of 8 channels, Adam with lr 0.005 on shuffled batches of 64, 40 steps,
  validated every 10 (3-5 s a step on 2 shared cores; digits28 about 95 % at step 40).

Examples
--------
>>> s = preset("quick", "digits")
>>> s["nlayers"], s["width"], s["optimizer"], s["batch_size"], s["mode"]
(8, 4, 'adam', 100, 'auto')
>>> preset("paper", "digits")["nlayers"], preset("paper", "digits")["optimizer"]
(32, 'lbfgs')
>>> s = preset("quick", "mnist")
>>> s["nlayers"], s["width"], s["optimizer"], s["lr"], s["batch_size"], s["iterations"]
(16, 8, 'adam', 0.005, 64, 40)
>>> preset("quick", "digits28") == s
True
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from typing import Any, Dict

from ..nn import ResNet
from .evaluate import TRAINING_DEFAULTS
from .trainer import TrainConfig

__all__ = ["PRESETS", "NETWORK_KEYS", "library_defaults", "preset"]

#: The ResNet constructor arguments a preset sets.
NETWORK_KEYS = ("width", "nlayers", "tstop", "activation", "opening", "kernel")

# The quick preset of the 28 x 28 sources (mnist, digits28): a conv net of 16 layers of
# 8 channels, Adam on shuffled batches of 64, validated every 10 steps.
_MNIST_QUICK: Dict[str, Any] = {
    "width": 8, "nlayers": 16, "optimizer": "adam", "lr": 0.005, "batch_size": 64,
    "shuffle": True, "iterations": 40, "validate_every": 10}

#: Values laid over the library defaults, per preset and data source ("*": any source).
PRESETS: Dict[str, Dict[str, Dict[str, Any]]] = {
    "paper": {"*": {"width": 8, "nlayers": 32}},
    "quick": {
        "*": {"width": 8, "nlayers": 32},
        "digits": {"width": 4, "nlayers": 8, "optimizer": "adam", "lr": 0.02,
                   "batch_size": 100, "shuffle": True, "iterations": 40,
                   "validate_every": 10},
        "mnist": _MNIST_QUICK,
        "digits28": _MNIST_QUICK,
    },
}


def library_defaults() -> Dict[str, Any]:
    """Every default of the library by its library name: ResNet's keyword arguments,
    TrainConfig's fields and the MGRIT training defaults (cfactor, max_levels, abs_tol,
    and the relaxation ``relax``, 'FCF')."""
    out: Dict[str, Any] = {}
    for name, p in inspect.signature(ResNet.__init__).parameters.items():
        if name in NETWORK_KEYS and p.default is not inspect.Parameter.empty:
            out[name] = p.default
    for f in fields(TrainConfig):
        if f.name != "mgrit" and f.default is not MISSING:
            out[f.name] = f.default
    out.update({k: TRAINING_DEFAULTS[k] for k in ("cfactor", "max_levels", "abs_tol")})
    # TrainConfig.relax None means the MGRIT options' nrelax: FCF unless changed.
    out["relax"] = TrainConfig().relax
    return out


def preset(name: str, source: str) -> Dict[str, Any]:
    """All settings of preset ``name`` for the data source ``source`` ('peaks',
    'digits' or anything else for a file): the library defaults with the preset on top."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    out = library_defaults()
    out.update(PRESETS[name].get("*", {}))
    out.update(PRESETS[name].get(source, {}))
    return out
