"""The public Core facade: options in one object, stored values, typed results."""

import numpy as np
import pytest
from apps import Decay, serial_trajectory

import braidpy
from braidpy import ErrorLabels, Options


def test_misspelled_option_in_a_dict_names_it_and_suggests():
    with pytest.raises(ValueError, match=r"unknown option 'cfactr'; did you mean 'cfactor'\?"):
        braidpy.Core(Decay(), 0.0, 1.0, 16, options={"cfactr": 4})
    with pytest.raises(ValueError, match=r"unknown option 'max_iters'; did you mean 'max_iter'"):
        braidpy.solve(Decay(), 0.0, 1.0, 16, max_iters=3)
    with pytest.raises(ValueError, match="unknown option 'storag'"):
        Options().replace(storag="all")
    with pytest.raises(TypeError, match="braidpy.Options, a dict or None"):
        Options.coerce(["cfactor", 4])


def test_options_object_and_keywords_combine():
    base = Options(cfactor=4, max_levels=2)
    core = braidpy.Core(Decay(), 0.0, 1.0, 64, options=base, abs_tol=1e-12)
    assert core.options == base.replace(abs_tol=1e-12)
    assert core.options.changed() == {"cfactor": 4, "max_levels": 2, "abs_tol": 1e-12}
    assert core.level_info[0]["cfactor"] == 4 and core.nlevels == 2


def test_storage_final_keeps_every_point_of_the_last_sweep():
    n = 32
    ref = serial_trajectory(Decay(), 0.0, 1.0, n)
    for storage, f_points_kept in (("C", False), ("final", True), ("all", True)):
        core = braidpy.Core(Decay(), 0.0, 1.0, n, cfactor=4, abs_tol=1e-13, storage=storage)
        core.solve()
        assert (core.stored(5) is not None) == f_points_kept, storage
        assert np.array_equal(core.stored(8), core.solution(index=8))
        if f_points_kept:
            block = core.stored_block(0, n + 1)
            assert block.shape == (n + 1, 1)
            assert np.allclose(block[:, 0], [u[0] for u in ref], rtol=0, atol=1e-12)
            assert np.array_equal(core.stored_block(6, 0, -2)[:, 0], block[6:0:-2, 0])
        else:
            assert core.stored_block(0, n + 1) is None  # F-points missing


def test_result_refuses_after_its_core_solved_again():
    core = braidpy.Core(Decay(), 0.0, 1.0, 16, cfactor=2)
    first = core.solve()
    u = first.solution(index=3)
    assert np.array_equal(u, core.solution(index=3))
    second = core.solve()
    assert np.array_equal(second.solution(index=3), u)  # converged both times
    with pytest.raises(ValueError, match="earlier solve of its Core"):
        first.solution(index=3)


def test_result_is_plain_values():
    r = braidpy.solve(Decay(), 0.0, 1.0, 16, cfactor=2)
    assert r.counts["step"] > 0 and isinstance(r.counts, dict)
    assert r.level_info[0]["n"] == 16 and r.levels == len(r.level_info)
    assert list(r.owned) == list(range(17))


def test_counts_and_initial_condition():
    core = braidpy.Core(Decay(), 0.0, 1.0, 16, cfactor=2, abs_tol=1e-14)
    r = core.solve()
    assert core.counts() == r.counts
    u0 = np.array([2.0])
    core.set_initial_condition(u0)
    u0[0] = 99.0  # copied: later changes do not leak in
    r2 = core.solve()
    assert np.allclose(r2.final, 2.0 * r.final, rtol=1e-12)


def test_labels_must_match_the_communicator():
    with pytest.raises(ValueError, match="labels.ranks has 2 entries for 1 ranks"):
        braidpy.Core(Decay(), 0.0, 1.0, 16, labels=ErrorLabels(ranks=(1, 0)))


def test_no_private_reaches_across_modules():
    """No module of braidpy reads another object's private ``_solver`` (the compiled
    solver is the Core's own) and no underscore keyword crosses a call."""
    import re
    from pathlib import Path

    root = Path(braidpy.__file__).parent
    solver_use = re.compile(r"\._solver\.")
    underscore_kwarg = re.compile(r"[(,]\s*_[a-z]\w*\s*=[^=]")
    hits = []
    for p in root.rglob("*.py"):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if solver_use.search(line) and p.name != "_solver.py":
                hits.append(f"{p.name}:{n}: {line.strip()}")
            if underscore_kwarg.search(line):
                hits.append(f"{p.name}:{n}: {line.strip()}")
    assert hits == [], hits


def test_result_says_whether_it_converged():
    done = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, abs_tol=1e-12)
    assert (done.converged, done.stop_reason) == (True, "tolerance")
    assert done.iterations < 100 and done.residuals[-1] < 1e-12
    cut = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, abs_tol=1e-14, max_iter=2)
    assert (cut.converged, cut.stop_reason) == (False, "max_iter")
    assert cut.iterations == 2 and cut.residuals[-1] >= 1e-14
    relative = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, abs_tol=0.0, rel_tol=1e-3)
    assert relative.converged and relative.residuals[-1] < 1e-3 * relative.residuals[0]
    serial = braidpy.solve(Decay(), 0.0, 1.0, 64, max_levels=1)
    assert (serial.converged, serial.stop_reason) == (True, "sequential")
    blind = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, residual_computation=False,
                          max_iter=3)
    assert (blind.converged, blind.stop_reason) == (False, "max_iter")


def test_require_convergence_raises_instead_of_returning():
    with pytest.raises(braidpy.ConvergenceError, match=r"2 iterations .* abs_tol=1e-14") as e:
        braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, abs_tol=1e-14, max_iter=2,
                      require_convergence=True)
    assert e.value.iterations == 2 and e.value.residual >= 1e-14
    ok = braidpy.solve(Decay(), 0.0, 1.0, 64, cfactor=2, abs_tol=1e-12,
                       require_convergence=True)
    assert ok.converged
