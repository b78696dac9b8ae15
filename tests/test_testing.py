"""check_app: every rule passes for good apps and each broken app fails its own rule."""

import math
import re
import struct

import numpy as np
import pytest

import braidpy
from braidpy.backends import numpy as np_backend
from braidpy.testing import RULES, AppCheckError, CheckReport, check_app

SEED = 20261121


# ---------------------------------------------------------------- good apps


class Decay(braidpy.App):
    """u' = -u on a small vector, backward Euler; zero guess away from tstart."""

    def init(self, t):
        return np.linspace(1.0, 2.0, 5) if t == self.tstart else np.zeros(5)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)


class Rotation(braidpy.App):
    """A 2x2 rotation per step, complex-free but not diagonal; nonzero guess."""

    def init(self, t):
        return np.array([1.0, 0.0]) if t == self.tstart else np.array([0.3, -0.2])

    def step(self, u, t0, t1, status):
        h = t1 - t0
        c, s = math.cos(h), math.sin(h)
        u[:] = (c * u[0] - s * u[1], s * u[0] + c * u[1])


class ListVec:
    """An opaque vector: a Python list of floats inside an object."""

    def __init__(self, values):
        self.values = [float(v) for v in values]


class ListApp(braidpy.App):
    """Heat-like smoothing on a ListVec, with every vector operation overridden."""

    def init(self, t):
        return ListVec([1.0, 2.0, -1.0, 0.5] if t == self.tstart else [0.0] * 4)

    def step(self, u, t0, t1, status):
        h = t1 - t0
        v = u.values
        u.values = [v[i] + h * (v[i - 1] - 2.0 * v[i] + v[(i + 1) % len(v)])
                    for i in range(len(v))]

    def clone(self, u):
        return ListVec(u.values)

    def sum(self, a, x, b, y):
        y.values = [a * xi + b * yi for xi, yi in zip(x.values, y.values)]

    def norm(self, u):
        return math.sqrt(sum(v * v for v in u.values))

    def bufpack(self, u):
        return struct.pack(f"<{len(u.values)}d", *u.values)

    def bufunpack(self, buf):
        return ListVec(struct.unpack(f"<{len(buf) // 8}d", bytes(buf)))


class TupleStepApp(ListApp):
    """step returns a new vector instead of updating u (allowed)."""

    def step(self, u, t0, t1, status):
        return ListVec([v / (1.0 + (t1 - t0)) for v in u.values])


# ---------------------------------------------------------------- broken apps


class CloneIsSelf(Decay):
    def clone(self, u):
        return u


class ShallowClone(ListApp):
    def clone(self, u):
        c = ListVec([])
        c.values = u.values  # shares the list
        return c

    def sum(self, a, x, b, y):
        y.values[:] = [a * xi + b * yi for xi, yi in zip(x.values, y.values)]


class CachedClone(Decay):
    def clone(self, u):
        if not hasattr(self, "_scratch"):
            self._scratch = np.empty_like(u)
        self._scratch[...] = u
        return self._scratch


class AliasedSum(Decay):
    def sum(self, a, x, b, y):
        y *= b
        y += a * x


class FunctionalSum(Decay):
    def sum(self, a, x, b, y):
        return a * x + b * y


class SquaredNorm(Decay):
    def norm(self, u):
        return float(np.sum(u * u))


class SignedNorm(Decay):
    def norm(self, u):
        return float(np.sum(u))


class RaisingNorm(Decay):
    def norm(self, u):
        raise ValueError("norm is not implemented for this grid")


class DropsLastEntry(Decay):
    def bufunpack(self, buf):
        u = np_backend.unpack(buf)
        u[-1] = 0.0
        return u


class Float32Buffer(Decay):
    def bufpack(self, u):
        return u.astype(np.float32).tobytes()

    def bufunpack(self, buf):
        return np.frombuffer(buf, dtype=np.float32).astype(np.float64)


class ListBuffer(Decay):
    def bufpack(self, u):
        return u.tolist()


class NoisyStep(Decay):
    def __init__(self):
        self.rng = np.random.default_rng(SEED)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)
        u += 1e-6 * self.rng.standard_normal(u.shape)


class CachedStepResult(Decay):
    def step(self, u, t0, t1, status):
        if not hasattr(self, "_out"):
            self._out = np.empty_like(u)
        np.divide(u, 1.0 + (t1 - t0), out=self._out)
        return self._out


class RaisingStep(Decay):
    def step(self, u, t0, t1, status):
        raise RuntimeError(f"solver did not converge on [{t0}, {t1}]")


class InitNone(Decay):
    def init(self, t):
        return None if t == self.tstart else np.zeros(5)


class InitCached(Decay):
    guess = np.zeros(5)

    def init(self, t):
        return np.ones(5) if t == self.tstart else self.guess


class AccessScales(Decay):
    def access(self, u, status):
        u *= 2.0


BROKEN = [
    (CloneIsSelf, "clone independence", r"clone\(u\) returned u itself"),
    (ShallowClone, "clone independence", r"changed u too.*copy"),
    (CachedClone, "clone independence", r"two calls of clone\(u\) returned the same object"),
    (AliasedSum, "sum aliasing", r"x and y the same object.*\(a\+b\)\*x"),
    (FunctionalSum, "sum identity", r"y should equal x.*braidpy ignores sum's return value"),
    (SquaredNorm, "norm scaling", r"norm\(2\*u\) = .*\|2\|\*norm\(u\)"),
    (SignedNorm, "norm scaling", r"norm\(-0\.5\*u\) returned -3\.75; a norm must be >= 0"),
    (RaisingNorm, "norm scaling",
     r"norm\(init\(tstart\)\) raised ValueError: norm is not implemented for this grid"),
    (DropsLastEntry, "buffer round trip", r"bufunpack\(bufpack\(u\)\) differs from u"),
    (Float32Buffer, "buffer round trip", r"differs from u.*rtol = 1e-12"),
    (ListBuffer, "buffer round trip", r"list, which does not support the buffer protocol"),
    (NoisyStep, "step determinism", r"two clones of the same vector stepped .* differ"),
    (CachedStepResult, "step determinism", r"returned the same object for two different"),
    (RaisingStep, "step determinism",
     r"step\(u, 0, 0\.125, status\) raised RuntimeError: solver did not converge"),
    (InitNone, "init", r"init\(0\) returned None; it must return a new vector"),
    (InitCached, "init", r"returned the same object"),
    (AccessScales, "access", r"access\(u, status\) changed u"),
]


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("app_type", [Decay, Rotation, ListApp])
def test_good_apps_pass_every_rule(app_type):
    report = check_app(app_type())
    assert isinstance(report, CheckReport)
    assert report.ok
    assert report.passed == list(RULES)
    assert report.failed == [] and report.skipped == [] and report.errors == {}
    assert str(report).splitlines()[0] == f"check_app({app_type.__name__}): all 10 rules passed"


def test_good_app_passes_on_other_grids_and_tolerances():
    for kwargs in ({"ntime": 1}, {"ntime": 2}, {"tstart": -3.0, "tstop": 7.5, "ntime": 1000},
                   {"rtol": 0.0}):
        assert check_app(Rotation(), **kwargs).ok, kwargs


def test_step_returning_a_new_vector_passes_with_a_note():
    report = check_app(TupleStepApp())
    assert report.ok
    notes = [text for rule, text in report.notes if rule == "step in place"]
    assert len(notes) == 1 and "returns a new vector" in notes[0]


@pytest.mark.parametrize("app_type, rule, message", BROKEN, ids=[c[0].__name__ for c in BROKEN])
def test_each_broken_app_fails_exactly_its_rule(app_type, rule, message):
    report = check_app(app_type(), raise_on_failure=False)
    assert not report.ok
    assert [r for r, _ in report.failed] == [rule], str(report)
    (why,) = [text for r, text in report.failed]
    assert re.search(message, why), why
    # Rules that were not failed were either passed or skipped because of this failure.
    assert set(report.passed) | {r for r, _ in report.skipped} | {rule} == set(RULES)
    for skipped_rule, text in report.skipped:
        assert f"'{rule}' failed" in text, (skipped_rule, text)


@pytest.mark.parametrize("app_type, rule, message", BROKEN, ids=[c[0].__name__ for c in BROKEN])
def test_broken_apps_raise_an_assertion_naming_the_rule(app_type, rule, message):
    with pytest.raises(AppCheckError, match=f"1 rule failed \\('{rule}'\\)") as info:
        check_app(app_type())
    assert isinstance(info.value, AssertionError)
    assert info.value.report.failed[0][0] == rule


def test_callback_exception_is_reported_not_propagated():
    report = check_app(RaisingNorm(), raise_on_failure=False)
    assert isinstance(report.errors["norm scaling"], ValueError)
    assert report.passed == ["init"]  # everything else needs a norm
    with pytest.raises(AppCheckError) as info:
        check_app(RaisingNorm())
    message = str(info.value)
    assert "ValueError: norm is not implemented for this grid" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_init_failure_skips_the_rest():
    report = check_app(InitNone(), raise_on_failure=False)
    assert report.passed == []
    assert [r for r, _ in report.skipped] == list(RULES[1:])
    assert "not checked because 'init' failed" in str(report)


def test_error_message_names_every_failed_rule():
    class TwoBugs(AliasedSum):
        def bufunpack(self, buf):
            return np.zeros(5)

    with pytest.raises(AppCheckError) as info:
        check_app(TwoBugs())
    first = str(info.value).splitlines()[0]
    assert "2 rules failed ('sum aliasing', 'buffer round trip')" in first
    lines = str(info.value).splitlines()
    assert any(line.lstrip().startswith("FAILED   sum aliasing:") for line in lines)
    assert any(line.lstrip().startswith("FAILED   buffer round trip:") for line in lines)


def test_step_that_rebinds_u_is_noted_not_failed():
    class Rebinds(Decay):
        def step(self, u, t0, t1, status):
            u = u / (1.0 + (t1 - t0))  # the bug being detected

    report = check_app(Rebinds())
    assert report.ok
    notes = [text for rule, text in report.notes if rule == "step in place"]
    assert notes and all("returned None and left u unchanged" in text for text in notes)
    assert "note     step in place:" in str(report)


def test_bufpack_returning_a_view_is_noted():
    class ViewBuffer(Decay):
        def bufpack(self, u):
            return u  # numpy arrays support the buffer protocol, but this aliases u

        def bufunpack(self, buf):
            return np.frombuffer(buf, dtype=np.float64).copy()

    report = check_app(ViewBuffer())
    assert report.ok
    assert any("view of u's memory" in text for rule, text in report.notes
               if rule == "buffer round trip")


def test_numpy_scalar_vectors_are_caught():
    # np.float64 passes braidpy's default is_array, but `y *= b` cannot work in place.
    class Scalar(braidpy.App):
        def init(self, t):
            return np.float64(1.0) if t == self.tstart else np.float64(0.0)

        def step(self, u, t0, t1, status):
            return u / (1.0 + (t1 - t0))

    report = check_app(Scalar(), raise_on_failure=False)
    assert not report.ok


def test_missing_callbacks_are_reported_per_rule():
    class Duck:
        """Not an App: no bufpack/bufunpack/access."""

        def init(self, t):
            return np.ones(2)

        def step(self, u, t0, t1, status):
            u *= 0.5

        clone = staticmethod(np_backend.clone)
        sum = staticmethod(np_backend.sum)
        norm = staticmethod(np_backend.norm)

    report = check_app(Duck(), raise_on_failure=False)
    assert [r for r, _ in report.failed] == ["buffer round trip", "access"]
    assert "the app has no callable bufpack()" in dict(report.failed)["buffer round trip"]


def test_status_stand_in_is_read_only_and_complete():
    seen = []

    class Recorder(Decay):
        def step(self, u, t0, t1, status):
            seen.append(status)
            super().step(u, t0, t1, status)

        def access(self, u, status):
            seen.append(status)

    assert check_app(Recorder(), tstart=1.0, tstop=2.0, ntime=4).ok
    fields = ("t", "t0", "t1", "level", "index", "fine_index", "iteration", "nlevels", "done",
              "tol", "rnorm", "phase")
    for status in seen:
        for name in fields:
            getattr(status, name)
        with pytest.raises(AttributeError):
            status.t0 = 0.0
    steps = [s for s in seen if s.phase == "relax"]
    assert {(s.t0, s.t1, s.index) for s in steps} == {(1.0, 1.25, 0), (1.5, 1.75, 2)}
    assert seen[-1].phase == "final" and seen[-1].done


def test_app_time_attributes_are_set_during_the_check_and_restored():
    class Shifted(Decay):
        tstart = 10.0

    app = Shifted()
    assert check_app(app, tstart=2.0, tstop=3.0).ok  # init keys off self.tstart == 2.0
    assert (app.tstart, app.tstop, app.ntime) == (10.0, 1.0, 0)
    assert "tstart" not in vars(app)


def test_non_callback_exceptions_propagate():
    class Interrupted(Decay):
        def step(self, u, t0, t1, status):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_app(Interrupted())


@pytest.mark.parametrize("kwargs, match", [
    ({"tstart": 1.0, "tstop": 1.0}, "tstop must be greater than tstart"),
    ({"tstop": float("nan")}, "tstop must be a finite real number"),
    ({"ntime": 0}, "ntime must be an int >= 1"),
    ({"ntime": 2.0}, "ntime must be an int >= 1"),
    ({"rtol": -1e-3}, "rtol must be >= 0"),
])
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_app(Decay(), **kwargs)


def test_all_zero_vectors_pass_with_a_note():
    class Zero(Decay):
        def init(self, t):
            return np.zeros(3)

    report = check_app(Zero())
    assert report.ok
    assert any("norm 0" in text for rule, text in report.notes if rule == "init")


@pytest.mark.parametrize("convert, ok", [
    (float, True),
    (np.float32, True),
    (np.array, True),  # a 0-d array (like a CuPy norm) converts with float()
    (lambda v: np.array([v]), False),
    (complex, False),
    (lambda v: v > 0.0, False),
    (lambda v: math.inf, False),
    (lambda v: -v, False),
    (str, False),
], ids=["float", "float32", "0-d array", "1-d array", "complex", "bool", "inf", "negative",
        "str"])
def test_norm_return_types(convert, ok):
    class Returns(Decay):
        def norm(self, u):
            return convert(np.linalg.norm(u))

    report = check_app(Returns(), raise_on_failure=False)
    if ok:
        assert report.ok, str(report)
    else:
        assert [r for r, _ in report.failed] == ["norm scaling"]
        assert dict(report.failed)["norm scaling"].startswith("norm(init(tstart)) returned")


# ---------------------------------------------------------------- check_coarsen_refine
class _Halves(braidpy.App):
    """9 points coarsened to 5 by injection, refined by linear interpolation."""

    def init(self, t):
        return np.linspace(0.0, 1.0, 9) ** 2

    def step(self, u, t0, t1, status):
        u *= 0.5

    def coarsen(self, u, status):
        return u[::2].copy()

    def refine(self, u, status):
        return np.interp(np.linspace(0, 1, 2 * u.size - 1), np.linspace(0, 1, u.size), u)


def test_check_coarsen_refine_passes_a_correct_pair():
    from braidpy.testing import SPATIAL_RULES, check_coarsen_refine

    report = check_coarsen_refine(_Halves(), t=0.5, fdt=0.1, cdt=0.2)
    assert report.ok and report.passed == list(SPATIAL_RULES)
    assert [rule for rule, _ in report.notes] == ["coarsen", "refine"]


@pytest.mark.parametrize("rule, words, override", [
    ("coarsen", "returned its argument itself", dict(coarsen=lambda self, u, s: u)),
    ("coarsen", "changed its argument", dict(coarsen=lambda self, u, s: u.__imul__(2)[::2].copy())),
    ("coarsen", "must be deterministic",
     dict(coarsen=lambda self, u, s: u[::2] + np.random.default_rng().random(5))),
    ("coarsen", "returned None", dict(coarsen=lambda self, u, s: None)),
    ("refine", "has shape (5,)", dict(refine=lambda self, u, s: u.copy())),
    ("refine", "changed its argument", dict(refine=lambda self, u, s: np.repeat(u.__imul__(3), 2)[:-1])),
])
def test_check_coarsen_refine_names_what_is_wrong(rule, words, override):
    from braidpy.testing import check_coarsen_refine

    app = type("Bad", (_Halves,), override)()
    report = check_coarsen_refine(app, raise_on_failure=False)
    assert [r for r, _ in report.failed] == [rule] and words in report.failed[0][1]
    if rule == "coarsen":
        assert report.skipped == [("refine", "not checked because 'coarsen' failed")]
    with pytest.raises(AppCheckError, match=f"check_coarsen_refine\\(Bad\\): 1 rule failed"):
        check_coarsen_refine(app)
