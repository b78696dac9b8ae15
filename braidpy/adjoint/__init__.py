"""Adjoint MGRIT: objective and gradients of a time-stepping problem.

The primal problem is u_{n+1} = Phi_n(u_n; theta_n), n = 0..N-1, and the objective is

    J = sum_{i=0..N} f_i(u_i)  +  g(u_N)

(running terms f optional, terminal term g required). The adjoint variables solve,
backwards in time,

    w_N = dg/du(u_N) + df_N/du(u_N),     w_n = (dPhi_n/du)(u_n)^T w_{n+1} + df_n/du(u_n),

and the gradient with respect to the parameters of step n is
(dPhi_n/dtheta)(u_n)^T w_{n+1}. The adjoint system is linear in w; braidpy solves it
with the same MGRIT machinery on the reversed time grid, with the primal trajectory
(stored at every fine point on the rank that owns it) held fixed. Coarse levels use
the primal state at the coarse point and the coarse step size.

The app provides, beyond ``init`` and ``step``:

``step_adjoint(w, u, t0, t1, status)``
    w <- (dPhi/du)(u)^T w, the vector-Jacobian product of the step from t0 to t1,
    where u (read-only) is the primal state at t0. In place, or return a new w.
``step_gradient(w, u, t0, t1, status)``
    Return (dPhi/dtheta)(u)^T w for the parameters used by this step (any object, or
    None if you accumulate yourself). w and u are read-only.
``terminal_objective(u)`` -> float and ``terminal_gradient(u)`` -> vector
    g(u_N) and dg/du(u_N).
``running_objective(u, t, status)`` -> float and ``running_gradient(u, t, status)``
    Optional running terms f_i and df_i/du (vector or None for zero).
``postprocess_objective(total)`` -> float and ``postprocess_objective_diff(total)`` -> float
    Optional, both or neither (XBraid's ``braid_SetPostprocessObjective`` and
    ``_diff``): the objective becomes J = F(S) with S the sum above, F given by
    ``postprocess_objective`` and F'(S) by ``postprocess_objective_diff``; every adjoint
    source (terminal and running gradients) is multiplied by F'(S). A part of F that
    depends on the parameters directly (a regularization) is the caller's to add to the
    gradient, as XBraid's ``_diff`` writes it into the app's gradient.
    ``Gradient.objective_sum`` and ``Gradient.objective_diff`` are S and F'(S).
``adjoint_guess(n)`` -> vector or None
    Optional: the guess of w_n used when the adjoint solve starts cold (default
    zero); lets an interrupted one-shot optimization resume from saved adjoints.

Optional batched versions (array states; used unless the adjoint's ``batch=False``;
docs/batching.md):

``step_adjoint_batch(W, U, t0s, t1s, status)``
    m adjoint steps at once: W and U stacked ``(m, *state shape)``, row k from t0s[k] to
    t1s[k] (float64 arrays), ``status.fine_indices`` the forward fine index of each
    t0. Update W in place or return a new stacked array.
``step_adjoint_batch_into(W, U, out, t0s, t1s, status)`` (optional, with the above)
    The same steps written into ``out`` (fresh memory of W's shape), W left as it is;
    return None. Sweeps that keep every adjoint value (the final sweep, whose values
    the gradients read) then write them where they are kept instead of copying them
    (docs/batching.md, ``step_stacked_into``).
``step_gradient_batch(W, U, t0s, t1s, status)``
    The gradients of m steps at once (after the adjoint solve; the steps this rank
    owns, evenly spaced in each call: for large NumPy states one call per position in
    the level-0 intervals, or its chunks, see :func:`gradient_groups`): return a sequence
    of m per-step gradients (entries may be None), or None if you accumulate yourself.
    W and U are read-only.

``primal_solved()`` (optional)
    Called on every rank each time the objective of a primal solve is evaluated
    (:meth:`GradientSolver.evaluate`, ``objective``, ``solve_adjoint``), before any
    adjoint step that reads its states: forget what was cached from earlier primal
    states (:class:`braidpy.nn.ResNetApp` forgets its kept activation slopes).

Adjoint vectors use the app's clone/sum/norm/bufpack/bufunpack, so they must live in
the same space as the states.
"""

from ..parallel.collectives import ordered_sum
from .reversed import ReversedApp
from .solver import Gradient, GradientSolver, gradient, gradient_groups, interval_positions
from .status import AdjointStatus

__all__ = ["AdjointStatus", "Gradient", "GradientSolver", "ReversedApp", "gradient",
           "gradient_groups", "interval_positions", "ordered_sum"]
