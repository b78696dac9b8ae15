"""The EASGD cases shared by mpi_easgd_driver.py and test_easgd.py (no MPI here)."""

import numpy as np

CASES = {"plain_tau1": dict(tau=1, momentum=0.0, steps=1000),
         "plain_tau3": dict(tau=3, momentum=0.0, steps=60),
         "momentum_tau2": dict(tau=2, momentum=0.5, steps=60)}


def target(rank):
    """The minimiser of rank ``rank``'s objective 0.5 * |W - c_rank|^2."""
    return (rank + 1.0) * np.array([1.0, -2.0, 0.5])
