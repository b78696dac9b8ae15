"""Layer-parallel training of ResNets: serial reference, exact MGRIT and one-shot.

Quick use::

    from braidpy import data, nn, train
    Xt, Ct = data.peaks(1000, seed=1); Xv, Cv = data.peaks(200, seed=2)
    net = nn.ResNet((2,), 5, width=8, nlayers=32, tstop=5.0, activation="smooth_relu")
    trainer = train.Trainer(net, (Xt, Ct), (Xv, Cv), train.TrainConfig(mode="oneshot"))
    history = trainer.run()

See :class:`TrainConfig` for the settings and ``docs/training.md`` for the method.
"""

from __future__ import annotations

from .checkpoint import CheckpointError
from .checkpoint import load_training as load_checkpoint
from .checkpoint import save as save_checkpoint
from .evaluate import TRAINING_DEFAULTS, LayerParallelEvaluator, SerialEvaluator, training_options
from .optim import LBFGS, OPTIMIZERS, SGD, Adam, make_optimizer
from .regularize import Regularizer
from .trainer import (MODES, DataMismatchError, TrainConfig, Trainer, data_fingerprint,
                      resolve_mode)

__all__ = ["Adam", "CheckpointError", "DataMismatchError", "LBFGS", "LayerParallelEvaluator",
           "MODES", "OPTIMIZERS", "Regularizer", "SGD", "SerialEvaluator", "TRAINING_DEFAULTS",
           "TrainConfig", "Trainer", "data_fingerprint", "load_checkpoint", "make_optimizer",
           "resolve_mode", "save_checkpoint", "training_options"]
