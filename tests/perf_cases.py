"""Shared cases of the performance-model tests: MGRIT settings whose step calls the
schedule model (braidpy.perf.schedule) must count exactly as a real solve does."""

import braidpy
from braidpy.perf.schedule import Cycle

from apps import BatchedDecay, Decay

# (name, Cycle fields, iterations): every phase of the cycle at least once.
CASES = [
    ("2lev-cf2", dict(ntime=16, max_levels=2, cfactor=2), 3),
    ("2lev-cf4-skip", dict(ntime=16, max_levels=2, cfactor=4, skip=True), 3),
    ("3lev-cf2", dict(ntime=24, max_levels=3, cfactor=2), 2),
    ("3lev-cf3-skip", dict(ntime=27, max_levels=3, cfactor=3, skip=True), 2),
    ("3lev-F-relax", dict(ntime=32, max_levels=3, cfactor=2, nrelax=0), 2),
    ("4lev-FCFCF", dict(ntime=37, max_levels=4, cfactor=2, nrelax=2), 2),
    ("fmg", dict(ntime=32, max_levels=4, cfactor=2, fmg=True), 2),
    ("fmg-skip", dict(ntime=30, max_levels=3, cfactor=2, fmg=True, skip=True), 2),
    ("percf", dict(ntime=40, max_levels=3, cfactor={0: 4, 1: 2}), 2),
    ("seq-soln", dict(ntime=20, max_levels=2, cfactor=4, seq_soln=True), 2),
    ("2lev-cf4-batched", dict(ntime=32, max_levels=2, cfactor=4, batched=True), 2),
    ("3lev-batched-skip", dict(ntime=27, max_levels=3, cfactor=3, skip=True,
                               batched=True), 2),
    ("fmg-batched", dict(ntime=33, max_levels=3, cfactor=2, fmg=True, batched=True), 2),
]

_OPTS = ("max_levels", "cfactor", "nrelax", "skip", "fmg", "seq_soln")


def options_of(fields, iterations):
    opts = {k: v for k, v in fields.items() if k in _OPTS}
    opts.update(max_iter=iterations, abs_tol=0.0, batch=bool(fields.get("batched")),
                skip=bool(fields.get("skip", False)))
    return opts


class _Calls:
    """Records each step call as (batched, states, level): the order the core made them
    in."""

    def step(self, u, t0, t1, status):
        self.calls.append((False, 1, status.level))
        return super().step(u, t0, t1, status)

    def step_stacked(self, U, t0s, t1s, status):
        self.calls.append((True, int(U.shape[0]), status.level))
        return super().step_stacked(U, t0s, t1s, status)


class RecordingDecay(_Calls, Decay):
    calls: list


class RecordingBatchedDecay(_Calls, BatchedDecay):
    calls: list


def run_counts(fields, iterations, comm=None, final_sweep=True):
    """Step counts of this rank in a real solve (``final_sweep``: as Core.solve's):
    (counts, owned range, calls in order as [batched, states, level])."""
    app = RecordingBatchedDecay() if fields.get("batched") else RecordingDecay()
    app.calls = []
    core = braidpy.Core(app, 0.0, 1.0, fields["ntime"], comm=comm,
                        options=options_of(fields, iterations))
    core.solve(final_sweep=final_sweep)
    c = core.counts()
    out = {k: int(c.get(k, 0)) for k in ("step", "step_batch", "step_batch_items")}
    owned = core.owned
    core.close()
    return out, (owned.start, owned.stop - 1), [list(c) for c in app.calls]


def model_counts(fields, iterations, nranks, final_sweep=True):
    from braidpy.perf.schedule import program_counts, solve_program
    progs = solve_program(Cycle(**fields), nranks, iterations, cold=True,
                          final_sweep=final_sweep)
    return [{k: program_counts(p).get(k, 0) for k in ("step", "step_batch",
                                                      "step_batch_items")}
            for p in progs]


def model_calls(fields, iterations, nranks, final_sweep=True):
    """Each rank's step calls in the order the model's simulation runs them, as
    [batched, states, level] (what run_counts records from the core)."""
    from braidpy.perf.schedule import simulate, solve_program
    progs = solve_program(Cycle(**fields), nranks, iterations, cold=True,
                          final_sweep=final_sweep)
    tl = simulate(progs, lambda op: 1.0 if op.kind == "step" else 0.0, lambda op: 0.0,
                  lambda op, n: 0.0, record=True)
    calls = [[] for _ in range(nranks)]
    for e in tl.events:  # each rank's in program order
        if e.op.kind == "step":
            calls[e.rank].append([e.op.batch, e.op.rows, e.op.level])
    return calls

