"""The few places that swallow an error swallow only the one they mean: MPI's when a
communicator is released or placed in COMM_WORLD, a stand-in communicator's missing
groups, an array that will not show its memory. Anything else (a bug) propagates."""

import numpy as np
import pytest

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

from braidpy._solver import _extent  # noqa: E402
from braidpy.parallel.agree import _world_numbers  # noqa: E402
from braidpy.parallel.comm import free_quietly  # noqa: E402
from braidpy.parallel.timecomm import TimeComm  # noqa: E402


class Releases:
    """A stand-in communicator whose Free raises ``error``."""

    def __init__(self, error):
        self.error, self.freed = error, 0

    def Free(self):
        self.freed += 1
        raise self.error


def test_placing_a_communicator_in_comm_world():
    assert _world_numbers(MPI.COMM_SELF, 1) == [MPI.COMM_WORLD.Get_rank()]

    class StandIn:  # no groups: not placed
        pass

    assert _world_numbers(StandIn(), 2) is None

    class Broken:
        def Get_group(self):
            raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        _world_numbers(Broken(), 2)


def test_free_quietly_swallows_mpi_errors_only():
    free_quietly(None)
    quiet = Releases(MPI.Exception(MPI.ERR_COMM))
    free_quietly(quiet)
    assert quiet.freed == 1
    with pytest.raises(ValueError, match="a bug"):
        free_quietly(Releases(ValueError("a bug")))


def test_a_time_communicator_releases_swallowing_mpi_errors_only():
    tc = TimeComm(MPI.COMM_SELF)
    tc.free()  # its own duplicate
    tc.comm = Releases(MPI.Exception(MPI.ERR_COMM))
    tc.free()
    tc.comm = Releases(RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        tc.free()


def test_an_array_that_will_not_show_its_memory_is_unknown_and_other_errors_propagate():
    class RequiresGrad:  # as a CUDA torch tensor that requires grad
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                               "requires grad")

    class OnDevice:
        def __dlpack__(self, **kwargs):
            raise BufferError("unsupported device")

        def __dlpack_device__(self):
            return (2, 0)

    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise KeyError("a bug")

    assert _extent(RequiresGrad()) is None
    assert _extent(OnDevice()) is None
    with pytest.raises(KeyError, match="a bug"):
        _extent(Broken())
    a = np.zeros(4)
    assert _extent(a)[0] == "host"
