"""braidpy.parallel.fingerprint (every rank was given the same problem) and the
describing of exceptions that refuse to be described.

Here, in one process: the canonical encoding, the digest, and the whole exchange of
:func:`same_everywhere` over an in-process communicator of threads (so the messages
and the ranks' agreement are checked without mpiexec). Under mpiexec at 2 and 4 ranks,
through braidpy.solve and Core: tests/test_reliability_mpi.py.
"""

import dataclasses
import math
import threading

import numpy as np
import pytest
from apps import Decay

import braidpy
from braidpy._errors import BraidError, RankMismatchError
from braidpy.parallel import same_everywhere
from braidpy.parallel.agree import Agreement, describe, safe_text
from braidpy.parallel.fingerprint import display, encode, fingerprint

# ------------------------------------------------------------------ an in-process world


class ThreadComm:
    """The few mpi4py calls braidpy's collectives make, between threads: rank r of a
    world of threads that meet at a barrier (which times out instead of hanging)."""

    def __init__(self, world, rank):
        self.world, self.rank = world, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.world["size"]

    def Get_attr(self, keyval):
        # Stands for a communicator whose ranks already agreed to wait in MPI's blocking
        # collectives (braidpy.parallel.comm.sleeps_in_collectives).
        return False

    def _exchange(self, item):
        w = self.world
        w["calls"][self.rank] += 1
        w["slots"][self.rank] = item
        w["barrier"].wait()
        got = list(w["slots"])
        w["barrier"].wait()
        return got

    def Allgather(self, send, recv):
        for r, row in enumerate(self._exchange(np.array(send, copy=True))):
            recv[r] = row.reshape(recv[r].shape)

    def Allgatherv(self, send, recv):
        buf, counts, displs = recv[0], recv[1], recv[2]
        for r, part in enumerate(self._exchange(np.array(send[0], copy=True))):
            buf[displs[r]:displs[r] + counts[r]] = part


def on_ranks(size, fn):
    """fn(comm, rank) on `size` threads; per rank, ("ok", value) or the exception.
    Also returns how many exchanges each rank made."""
    world = {"size": size, "slots": [None] * size, "calls": [0] * size,
             "barrier": threading.Barrier(size, timeout=20)}
    out = [None] * size

    def body(rank):
        try:
            out[rank] = ("ok", fn(ThreadComm(world, rank), rank))
        except BaseException as exc:  # noqa: BLE001 - every outcome is reported
            out[rank] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not any(isinstance(o, threading.BrokenBarrierError) for o in out), out
    return out, world["calls"]


FIELDS = {"tstart": 0.0, "tstop": 5.0, "ntime": 256, "times": None, "cfactor": 2,
          "nrelax": {"default": 1, 0: 2}, "tnorm": math.inf, "storage": "C"}

# ------------------------------------------------------------------------- encoding


def test_equal_values_encode_equally_however_written():
    assert encode(2) == encode(2.0) == encode(np.int32(2)) == encode(np.float64(2.0))
    assert encode(0.0) == encode(-0.0)
    assert encode([1, (2, 3)]) == encode((1, [2, 3]))
    assert encode({"a": 1, 0: 2}) == encode({0: 2, "a": 1})
    assert encode(np.arange(3.0)) == encode(np.arange(3.0).copy())
    assert encode(math.nan) == encode(float("nan"))


def test_different_values_encode_differently():
    distinct = [None, True, False, 1, 1.5, "1", b"1", [1], (1, 2), {1: 1}, {"1": 1},
                np.arange(3.0), np.arange(3), np.arange(4.0), math.inf, -math.inf, "",
                [], {}, [None], 5.0 + 2**-50]
    codes = [encode(v) for v in distinct]
    assert len(set(codes)) == len(codes)
    assert encode(np.linspace(0, 1, 5)) != encode(np.linspace(0, 1, 5) ** 1.1)


def test_the_digest_depends_on_names_order_and_values():
    base = fingerprint(FIELDS)
    assert len(base) == 16 and base == fingerprint(dict(FIELDS))
    assert base != fingerprint({**FIELDS, "tstop": 6.0})
    assert base != fingerprint({("t" + k if k == "ntime" else k): v for k, v in FIELDS.items()})
    assert base != fingerprint(dict(reversed(list(FIELDS.items()))))


def test_dataclasses_encode_by_their_fields():
    @dataclasses.dataclass(frozen=True)
    class Layout:
        depth: int
        widths: tuple

    assert encode(Layout(4, (8, 8))) == encode(Layout(4, [8, 8]))
    assert encode(Layout(4, (8, 8))) != encode(Layout(4, (8, 9)))


def test_display_is_short_and_never_raises():
    class NoRepr:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert display(NoRepr()) == "NoRepr"
    assert len(display("x" * 1000)) <= 120
    assert display(np.linspace(0.0, 5.0, 257)).startswith(
        "array of shape (257,) float64 from 0.0 to 5.0 (sha256 ")
    assert display(True) == "True" and display(np.float64(6.0)) == "6.0"

# ------------------------------------------------------------------- the exchange


def test_serially_nothing_is_exchanged_and_an_error_is_raised_as_it_is():
    same_everywhere(None, FIELDS)
    error = ValueError("bad")
    with pytest.raises(ValueError) as info:
        same_everywhere(None, None, error=error)
    assert info.value is error


def test_equal_fields_cost_one_exchange():
    out, calls = on_ranks(4, lambda comm, rank: same_everywhere(comm, dict(FIELDS)))
    assert out == [("ok", None)] * 4
    assert calls == [1] * 4  # one Allgather of a 24-byte digest, nothing else


def test_one_rank_that_differs_is_named_on_every_rank_with_each_value():
    def case(comm, rank):
        fields = dict(FIELDS)
        if rank == 2:
            fields["cfactor"] = 8
            fields["storage"] = "all"  # a later difference is not the one named
        same_everywhere(comm, fields, "the problem", hint="give the same options",
                        ranks=[10, 11, 12, 13])
    out, _ = on_ranks(4, case)
    assert all(isinstance(e, RankMismatchError) and isinstance(e, ValueError) for e in out)
    messages = {str(e) for e in out}
    assert messages == {"the ranks disagree on the problem: cfactor is 2 on ranks 10, 11 "
                        "and 13; 8 on rank 12 (give the same options)"}
    assert all(e.field == "cfactor" and e.values == ("2", "2", "8", "2") for e in out)


def test_a_field_only_some_ranks_have_is_named():
    def case(comm, rank):
        same_everywhere(comm, {**FIELDS, **({"extra": 1} if rank == 1 else {})})
    out, _ = on_ranks(2, case)
    assert all(isinstance(e, RankMismatchError) for e in out)
    assert out[0].field == "extra" and out[0].values == ("(not given)", "1")


def test_a_failure_to_build_the_fields_on_one_rank_stops_every_rank():
    def case(comm, rank):
        error = ValueError("cfactor must be >= 2, got 1") if rank == 1 else None
        same_everywhere(comm, None if error else FIELDS, "the problem", error=error)
    out, _ = on_ranks(3, case)
    assert type(out[1]) is ValueError and str(out[1]) == "cfactor must be >= 2, got 1"
    assert "raised in checking the problem on rank 1 of 3" in out[1].__notes__[0]
    for rank in (0, 2):
        assert isinstance(out[rank], BraidError), out[rank]
        assert "rank 1: ValueError: cfactor must be >= 2, got 1" in str(out[rank])

# ----------------------------------------------------------- describing an exception


class Oops(Exception):
    def __str__(self):
        raise RuntimeError("no str")


class NotAString(Exception):
    def __str__(self):
        return 42


class NoNotes(Exception):
    def add_note(self, note):
        raise RuntimeError("no notes")


def test_describing_an_exception_never_raises():
    assert describe(Oops()) == "Oops"
    assert describe(NotAString()) == "NotAString"
    assert describe(ValueError("bad")) == "ValueError: bad"
    assert safe_text(Oops()) == "Oops" and safe_text(Oops(), repr) == "Oops()"

    class Interrupting(Exception):
        def __str__(self):
            raise KeyboardInterrupt

    assert describe(Interrupting()) == "Interrupting"


@pytest.mark.parametrize("kind", [Oops, NotAString, NoNotes])
def test_the_failing_rank_reraises_its_own_exception_and_the_others_name_its_type(kind):
    def case(comm, rank):
        agreement = Agreement(comm, "solve")
        agreement.settle(kind() if rank == 1 else None, "step")
    out, _ = on_ranks(3, case)
    assert type(out[1]) is kind
    for rank in (0, 2):
        assert isinstance(out[rank], BraidError)
        assert str(out[rank]) == \
            f"solve failed on another rank (rank 1: step raised {kind.__name__})"


def test_the_block_form_describes_an_unprintable_exception_too():
    def case(comm, rank):
        with Agreement(comm, "objective evaluation"):
            if rank == 0:
                raise Oops()
    out, _ = on_ranks(2, case)
    assert type(out[0]) is Oops
    assert str(out[1]) == "objective evaluation failed on another rank (rank 0: Oops)"

# ---------------------------------------------------------------- the Core's side


def test_a_cores_options_are_fixed_once_it_is_made():
    # The ranks checked at creation that their options agree; a later assignment on one
    # rank would go unchecked (and the compiled core never saw it anyway).
    core = braidpy.Core(Decay(), 0.0, 1.0, 16, cfactor=4)
    assert core.options.cfactor == 4
    with pytest.raises(AttributeError):
        core.options = braidpy.Options()


def test_serial_argument_errors_are_unchanged():
    with pytest.raises(ValueError, match="cfactor must be >= 2, got 1"):
        braidpy.Core(Decay(), 0.0, 1.0, 16, cfactor=1)
    with pytest.raises(ValueError, match="tstop must be greater than tstart"):
        braidpy.solve(Decay(), 1.0, 0.0, 16)
    with pytest.raises(TypeError, match="must implement init"):
        braidpy.Core(braidpy.App(), 0.0, 1.0, 16)


def test_per_level_options_written_differently_are_one_setting():
    from braidpy._errors import ErrorLabels
    from braidpy._solver import _problem_fields

    def fields(**kw):
        return _problem_fields(0.0, 1.0, 16, None, braidpy.Options(**kw), None, ErrorLabels())
    assert fingerprint(fields(cfactor=4)) == fingerprint(fields(cfactor={"default": 4, 1: 4}))
    assert fingerprint(fields(cfactor=4)) != fingerprint(fields(cfactor={"default": 4, 1: 2}))
    assert fingerprint(fields(abs_tol=0)) == fingerprint(fields(abs_tol=0.0))


# ------------------------------------------------- both sides of each check


def test_arrays_of_one_content_but_another_shape_encode_differently():
    flat = np.zeros(6)
    assert encode(flat.reshape(2, 3)) != encode(flat.reshape(3, 2))
    assert encode(flat.reshape(2, 3)) != encode(flat)
    assert encode(np.zeros((2, 3))) == encode(np.zeros((2, 3)))

    def case(comm, rank):
        same_everywhere(comm, {**FIELDS, "times": flat.reshape((2, 3) if rank else (3, 2))})
    out, _ = on_ranks(2, case)
    assert all(isinstance(e, RankMismatchError) and e.field == "times" for e in out), out


def test_long_values_that_differ_past_their_display_are_named_and_told_apart():
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert display(long_a) == display(long_b)  # the display alone cannot tell them apart

    def case(comm, rank):
        same_everywhere(comm, {**FIELDS, "storage": long_b if rank == 1 else long_a})
    out, _ = on_ranks(3, case)
    assert all(isinstance(e, RankMismatchError) for e in out), out
    assert {e.field for e in out} == {"storage"}
    message = str(out[0])
    assert message.count(" on rank") == 2 and "on ranks 0 and 2" in message, message
    assert out[0].values[0] != out[0].values[1], out[0].values  # two texts, not one
    assert out[0].values[0] == out[0].values[2]


def test_an_agreement_point_delivers_a_pending_ctrl_c():
    import signal

    from braidpy.parallel.agree import agreement_point
    from braidpy.parallel.interrupts import (deferred_interrupts, interrupt_pending,
                                             postpone_interrupt)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with deferred_interrupts():
            agreement_point(None, "before the reduction")  # nothing pending: returns
            postpone_interrupt()
            assert interrupt_pending()
            with pytest.raises(KeyboardInterrupt):
                agreement_point(None, "before the reduction")
            assert not interrupt_pending()  # delivered once, not again at the block's end
    finally:
        signal.signal(signal.SIGINT, saved)
