"""Loss, gradient and accuracy of a ResNet: serially, or layer-parallel with MGRIT.

Both evaluators answer the same questions on every rank with the same numbers:

``gradient(params, X, C)`` -> (loss, flat gradient, stats)
``loss(params, X, C)`` -> loss (forward only, for line searches)
``accuracy(params, X, C)`` -> fraction classified correctly (validation: batch by batch
in the network's evaluation batches, on the parameters' device, one number back)

The parameters are replicated on every rank (a few hundred thousand numbers even for
thousands of layers), so the optimizer runs identically everywhere and regularization
terms coupling neighbouring layers need no messages. In layer-parallel mode each
rank computes the gradient blocks it owns (its layers; the opening on the first rank;
the classifier on the last) and one allreduce assembles them: every entry comes from
exactly one rank, so the sum is exact and the gradient is bitwise the same for any
number of ranks.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._device import placement_of
from .._options import Options
from .._renamed import renamed_arguments
from .._solver import Core
from ..adjoint import GradientSolver
from ..parallel.agree import Agreement
from ..parallel.collectives import allreduce_int, gather_arrays
from ..parallel.comm import rank_size
from ..parallel.data import share_of
from ..parallel.staging import allreduce_sum_anywhere
from ..nn.layers import classifier_sums
from ..nn.network import ResNet
from ..nn.resnet import ResNetApp

__all__ = ["SerialEvaluator", "LayerParallelEvaluator", "training_options", "TRAINING_DEFAULTS",
           "VALIDATION_SOLVES"]

#: How validation propagates (TrainConfig.validation_solve): layer by layer, or MGRIT.
VALIDATION_SOLVES = ("sequential", "mgrit")

#: MGRIT options of training that differ from braidpy.Options' defaults.
TRAINING_DEFAULTS: Dict[str, Any] = {"cfactor": 4, "max_levels": 2, "abs_tol": 1e-9}


def training_options(mgrit: Union[Options, Mapping[str, Any], None] = None) -> Options:
    """The MGRIT options of a training run, validated once.

    A mapping is laid over :data:`TRAINING_DEFAULTS`; an :class:`~braidpy.Options` is
    taken as it is. ``skip`` and ``seq_soln`` are the trainer's choice (a resumed run
    must continue exactly), so giving them is an error.

    >>> training_options({"cfactor": 8}).changed()
    {'max_levels': 2, 'cfactor': 8}
    >>> training_options({"skip": False})
    Traceback (most recent call last):
    ...
    ValueError: the MGRIT option 'skip' is chosen by the trainer; leave it out
    """
    if isinstance(mgrit, Options):
        options, given = mgrit, mgrit.changed()
    else:
        given = dict(mgrit or {})
        options = Options.coerce({**TRAINING_DEFAULTS, **given})
    for name in ("skip", "seq_soln"):
        if name in given:
            raise ValueError(f"the MGRIT option {name!r} is chosen by the trainer; "
                             f"leave it out")
    return options


def classifier_accuracy(u: Any, C: Any, W: Any, mu: Any) -> Any:
    """The samples of a validation batch classified correctly: a count on u's device,
    not brought back (the one module-level call after a validation solve, which
    tests/hybrid_cases.py replaces to fail there)."""
    return classifier_sums(u, C, W, mu, loss=False)[1]


def _steps(counts: Mapping[str, int]) -> int:
    """Layer steps of a solve: single calls plus the states of batched calls."""
    return counts.get("step", 0) + counts.get("step_batch_items", 0)


class SerialEvaluator:
    """Plain forward and backward propagation (no MGRIT): the reference.

    Under MPI every rank computes the same thing redundantly.
    """

    mode = "serial"

    @renamed_arguments(now_keyword_only=("comm",))
    def __init__(self, net: ResNet, *, comm: Any = None):
        self.net = net
        self.comm = comm
        self.step_calls = 0  # layer steps and adjoint steps (not validation)

    def gradient(self, params, X, C, average: Any = None
                 ) -> Tuple[float, np.ndarray, Dict[str, Any]]:
        """``average``: an :class:`~braidpy.train.sharded.AveragingRound` over the data
        groups (None: this batch alone)."""
        reused = self.net.forward_sweeps_reused
        if average is None:
            loss, grad = self.net.loss_and_gradient(params, X, C)
        else:
            with average.guarded("the serial gradient"):
                average.begin([("loss", 1), ("grad", self.net.nparams)])
                loss, grad = self.net.loss_and_gradient(params, X, C)
                where = placement_of(grad)
            average.point("the serial gradient")
            average.add("loss", [loss])
            average.add("grad", where.to_host(grad))
            mean = average.finish()
            loss, grad = float(mean["loss"][0]), where.from_host(mean["grad"])
        # N backward steps, and N forward ones unless the last loss's were reused
        steps = (2 - (self.net.forward_sweeps_reused - reused)) * self.net.nlayers
        self.step_calls += steps
        return loss, grad, {"steps": steps}

    def loss(self, params, X, C) -> float:
        """The loss, its forward states kept: the next gradient at these parameters
        (a line search's last trial) skips its forward sweep."""
        self.step_calls += self.net.nlayers
        return self.net.loss(params, X, C, keep_states=True)

    def accuracy(self, params, X, C) -> float:
        """The serial forward sweep in the network's evaluation batches, on the
        parameters' device (:meth:`braidpy.nn.ResNet.accuracy`)."""
        return self.net.accuracy(params, X, C)

    def warm_state(self) -> Dict[str, Any]:
        return {}

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        return None


class LayerParallelEvaluator:
    """Gradients by a primal and an adjoint MGRIT solve over the layers.

    Parameters
    ----------
    net : ResNet
    params : array
        The flat parameter vector the optimizer updates in place (held by reference).
        States, adjoints and gradients live on its device (e.g. a CuPy array: the GPU);
        only scalars come back to the host.
    X, C : arrays
        A first batch (sets the app up; :meth:`gradient` switches batches), on the
        parameters' device.
    comm : mpi4py communicator, optional
        Time (layer) communicator.
    mgrit : Options or dict, optional
        MGRIT options of both solves (see :func:`training_options`; a dict is laid
        over cfactor 4, max_levels 2, abs_tol 1e-9). ``skip`` is always False so that
        a resumed run continues exactly (a cold start from saved guesses then equals
        a warm start).
    oneshot : (m1, m2), optional
        Run exactly m1 primal and m2 adjoint iterations per gradient, warm-started
        (simultaneous training). None: solve both to tolerance ("exact" mode).
    make_app : callable, optional
        ``make_app(net, params, X, C)`` builds the MGRIT app of a batch (default
        :class:`~braidpy.nn.ResNetApp`; :mod:`braidpy.train.spatial_training` gives
        apps whose states are bands of image rows).
    validation : str
        How :meth:`accuracy` propagates: 'sequential' (the exact forward pass: the
        samples shared out over the ranks, each sweeping its share through every layer;
        one level across the ranks with another ``make_app``) or 'mgrit' (these options,
        to tolerance, from a cold start).
    """

    def __init__(self, net: ResNet, params: np.ndarray, X: Any, C: Any, *, comm: Any = None,
                 mgrit: Union[Options, Mapping[str, Any], None] = None,
                 oneshot: Optional[Tuple[int, int]] = None, make_app: Any = None,
                 validation: str = "sequential"):
        if validation not in VALIDATION_SOLVES:
            raise ValueError(f"validation must be one of {', '.join(VALIDATION_SOLVES)}, "
                             f"got {validation!r}")
        self.validation = validation
        self.net = net
        self.params = params
        self.placement = placement_of(params)
        self.comm = comm
        self.mode = "exact" if oneshot is None else "oneshot"
        self.oneshot = oneshot
        self.options = training_options(mgrit)
        if self.mode == "exact" and self.options.rel_tol:
            raise ValueError(
                "rel_tol is measured against each solve's first residual, which is tiny when "
                "training warm-starts from the previous step; give abs_tol instead")
        self.make_app = ResNetApp if make_app is None else make_app
        self.app = self.make_app(net, params, X, C)
        self.solver: Optional[GradientSolver] = None
        self._batch_shape = tuple(X.shape)
        self._validation: Dict[Tuple[int, ...], Tuple[ResNetApp, Core]] = {}
        self._evaluated = False
        self._resumed = False
        self._guesses_pending = False  # this rank's C-points kept by set_oneshot, unused yet
        self.step_calls = 0  # primal and adjoint step calls over all ranks (not validation)

    def _ensure_solver(self) -> GradientSolver:
        """Build the solvers at the first evaluation. A fresh one-shot run starts from
        the sequential solutions (XBraid's seq_soln: m1 = m2 = 2 iterations from a
        poor guess give useless gradients); a resumed run starts from its saved
        states instead, with skip off in both cases so that a cold start from
        saved states equals the warm start it replaces."""
        if self.solver is None:
            opts = self.options.replace(
                skip=False, seq_soln=self.mode == "oneshot" and not self._resumed)
            self.solver = GradientSolver(self.app, 0.0, self.net.tstop, self.net.nlayers,
                                         comm=self.comm, primal=opts, oneshot=self.oneshot)
            self._owner_of_first = 0 in self.solver.primal_core.owned
        return self.solver

    def set_oneshot(self, m1: int, m2: int) -> None:
        """Run m1 state and m2 adjoint iterations per gradient from the next one on
        (one-shot mode; on every rank alike). The solves continue from where they are:
        this rank's fine C-points of both become the guesses of a new solver's cold
        start, which equals the warm start it replaces (skip and seq_soln off), so only
        the iteration counts change."""
        if self.mode != "oneshot":
            raise ValueError(f"set_oneshot applies to one-shot mode, not {self.mode!r}")
        for name, m in (("m1", m1), ("m2", m2)):
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                raise ValueError(f"{name} must be an int >= 1, got {m!r}")
        solver = self.solver
        self.oneshot = (m1, m2)
        if solver is None:  # not built yet: it will be with these counts
            return
        if self._evaluated:
            self._keep_fine_c_points(solver)
            self._resumed, self._evaluated, self._guesses_pending = True, False, True
        solver.close()
        self.solver = None
        self._ensure_solver()  # (collective, as set_oneshot is)

    def _fine_c_points(self, solver: GradientSolver) -> Dict[str, Dict[int, Any]]:
        """This rank's fine C-point values of both solves ({'primal': {n: u},
        'adjoint': {n: w}}; the adjoint's under their primal index n), not copied."""
        N, out = self.net.nlayers, {}
        for key, core, mirror in (("primal", solver.primal_core, False),
                                  ("adjoint", solver.adjoint_core, True)):
            cf = core.level_info[0]["cfactor"]
            out[key] = {N - m if mirror else m: core.stored(m)
                        for m in core.owned if m % cf == 0 and m > 0}
        return out

    def _keep_fine_c_points(self, solver: GradientSolver) -> None:
        """This rank's fine C-points of both solves as the app's guesses (where
        :meth:`load_warm_state` puts a checkpoint's)."""
        clone, kept = self.app.clone, self._fine_c_points(solver)
        self.app.guesses = {n: clone(u) for n, u in kept["primal"].items()}
        self.app.adjoint_guesses = {n: clone(w) for n, w in kept["adjoint"].items()}

    # ---------------------------------------------------------------- helpers
    def _use(self, params, X, C) -> GradientSolver:
        if params is not self.params:
            self.params[...] = params
        if tuple(X.shape) != self._batch_shape:
            raise ValueError(f"batch shape {tuple(X.shape)} differs from the first batch's "
                             f"{self._batch_shape}: warm-started MGRIT states must keep their "
                             f"shape (use batches of one size)")
        solver = self._ensure_solver()
        self.app.set_batch(X, C)
        if self._evaluated and self._owner_of_first:
            solver.primal_core.set_initial_condition(self.app.initial_state())
        return solver

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        """The shape every batch must have (that of the first, or of resumed states)."""
        return self._batch_shape

    # -------------------------------------------------------------- interface
    def gradient(self, params, X, C, average: Any = None) -> Tuple[float, Any, Dict[str, Any]]:
        """``average``: an :class:`~braidpy.train.sharded.AveragingRound` over the data
        groups (None: this batch alone)."""
        if average is not None:
            loss, grad, result = self._averaged_gradient(params, X, C, average)
        else:
            loss, grad, result = self._gradient(params, X, C)
        stats: Dict[str, Any] = {
            "primal_iterations": result.primal.iterations,
            "adjoint_iterations": result.adjoint.iterations,
            "primal_residuals": list(result.primal.residuals),
            "adjoint_residuals": list(result.adjoint.residuals),
            "steps": _steps(result.primal.counts) + _steps(result.adjoint.counts),
        }
        stats["steps"] = allreduce_int(self.comm, stats["steps"])
        self.step_calls += stats["steps"]
        return loss, grad, stats

    def _gradient(self, params, X, C) -> Tuple[float, Any, Any]:
        solver = self._use(params, X, C)
        result = solver.evaluate()
        self._evaluated, self._guesses_pending = True, False
        net = self.net
        local = self.placement.zeros(net.nparams)
        g = net.views(local)
        for n, (dK, db) in result.gradients.items():
            g["K"][n, ...], g["b"][n, ...] = dK, db
        if result.initial_adjoint is not None:
            for name, value in self.app.opening_gradient(result.initial_adjoint).items():
                g[name][...] = value
        if net.nlayers in solver.primal_core.owned:
            g["W"][...] = self.app.classifier_grad["W"]
            g["mu"][...] = self.app.classifier_grad["mu"]
        return result.objective, allreduce_sum_anywhere(self.comm, local), result

    def _layout(self, solver: GradientSolver) -> List[Tuple[Any, int]]:
        """This rank's pieces of the gradient, in the order they become final: the
        loss, the classifier (after the objective), the layers from last to first
        (after the adjoint), the opening (last)."""
        net, owned = self.net, solver.primal_core.owned
        sizes = {name: sl.stop - sl.start for name, sl in net.slices().items()}
        N = net.nlayers
        layout: List[Tuple[Any, int]] = [("loss", 1)]
        if N in owned:
            layout += [("W", sizes["W"]), ("mu", sizes["mu"])]
        for n in reversed(range(max(owned.start - 1, 0), min(owned.stop - 1, N))):
            layout += [(("K", n), sizes["K"] // N), (("b", n), sizes["b"] // N)]
        if 0 in owned:
            layout += [(name, sizes[name]) for name in ("open_K", "open_b") if name in sizes]
        return layout

    def _averaged_gradient(self, params, X, C, average) -> Tuple[float, Any, Any]:
        """The gradient averaged over the data groups: pieces start reducing as they
        become final (see braidpy.train.sharded), then one sum over the layer ranks
        assembles them (every entry from one rank) with the loss of layer rank 0."""
        net, host = self.net, self.placement.to_host
        with average.guarded("the gradient"):
            solver = self._use(params, X, C)
            layout = self._layout(solver)
            average.begin(layout)
            owns_last = net.nlayers in solver.primal_core.owned

            def after_objective(objective: float) -> None:
                average.point("the primal solve")
                average.add("loss", [objective])
                if owns_last:
                    average.add("W", host(self.app.classifier_grad["W"]))
                    average.add("mu", host(self.app.classifier_grad["mu"]))

            result = solver.evaluate(after_objective)
            self._evaluated, self._guesses_pending = True, False
            average.point("the adjoint solve")
            for key, size in layout:
                if isinstance(key, tuple):
                    name, n = key
                    pair = result.gradients.get(n)
                    piece = None if pair is None else pair[0 if name == "K" else 1]
                    average.add(key, np.zeros(size) if piece is None else host(piece))
            opening: Dict[str, Any] = {}
            if result.initial_adjoint is not None:
                opening = self.app.opening_gradient(result.initial_adjoint)
        average.point("the opening's gradient")
        for name, value in opening.items():
            average.add(name, host(value))
        mean = average.finish()
        local = self.placement.zeros(net.nparams + 1)
        g = net.views(local[:net.nparams])
        for key, value in mean.items():
            if key == "loss":
                continue
            name, n = key if isinstance(key, tuple) else (key, None)
            block = g[name] if n is None else g[name][n, ...]
            block[...] = self.placement.from_host(value.reshape(block.shape))
        if rank_size(self.comm)[0] == 0:  # the loss once: the same bits on every rank
            local[net.nparams] = float(mean["loss"][0])
        total = allreduce_sum_anywhere(self.comm, local)
        return float(total[net.nparams]), total[:net.nparams], result

    def loss(self, params, X, C) -> float:
        solver = self._use(params, X, C)
        value = solver.objective()
        self._evaluated, self._guesses_pending = True, False
        self.step_calls += allreduce_int(self.comm, _steps(solver.primal_core.counts()))
        return value

    def accuracy(self, params, X, C) -> float:
        """Accuracy of the final states of a forward pass: sequential (the exact forward
        pass) or, with validation 'mgrit', MGRIT to tolerance started cold; either way
        the answer depends on the parameters only, and is the same on any number of
        ranks.

        Sequential with braidpy's own app: the samples are shared out over the layer
        ranks, each running the serial forward sweep of its share through the whole
        network (:meth:`_accuracy_by_samples`). Otherwise (MGRIT, or an app whose states
        are parts of the image, one level across the layer ranks) the samples go
        through in the network's evaluation batches
        (:meth:`braidpy.nn.ResNet.evaluation_batches`: bounded state memory), one solve
        each, on the parameters' device; the correct counts are added up there and one
        number comes back. A solver is built once per batch shape (the full batches and
        a shorter last one) and reused by every later validation."""
        if params is not self.params:
            self.params[...] = params
        if self.validation == "sequential" and self.make_app is ResNetApp:
            return self._accuracy_by_samples(X, C)
        v = self.net.views(self.params)
        correct: Any = 0
        for rows in self.net.evaluation_batches(int(X.shape[0])):
            Xb, Cb = X[rows.start:rows.stop, ...], C[rows.start:rows.stop, ...]
            app, core = self._validation_solver(Xb, Cb)
            app.set_batch(Xb, Cb)
            core.reset_guess()
            final = app.classifier_state(core.solve().final)
            correct = correct + classifier_accuracy(final, Cb, v["W"], v["mu"])
        return int(correct) / int(X.shape[0])

    def _accuracy_by_samples(self, X: Any, C: Any) -> float:
        """Sequential validation shared out over the layer ranks by samples: each rank
        sweeps its contiguous share (:func:`~braidpy.parallel.data.share_of`)
        through all the layers in the network's evaluation batches, and the counts of
        correct ones are added over the ranks (integers: the same on any number of
        ranks). A rank's share costs a serial forward pass of its samples, instead of
        every rank waiting its turn in a pass layer by layer across the ranks."""
        n = int(X.shape[0])
        rank, size = rank_size(self.comm)
        mine = share_of(n, size, rank)
        v = self.net.views(self.params)
        correct: Any = 0
        failure: Optional[BaseException] = None
        try:
            for rows in self.net.evaluation_batches(len(mine)) if len(mine) else []:
                lo, hi = mine.start + rows.start, mine.start + rows.stop
                final = self.net.forward(self.params, X[lo:hi, ...])
                correct = correct + classifier_accuracy(final, C[lo:hi, ...], v["W"],
                                                        v["mu"])
            correct = int(correct)
        except BaseException as error:  # noqa: BLE001 - a Ctrl-C too, as in agreed()
            failure, correct = error, 0
        # One exchange: no rank is left in the sum when one failed, and the counts travel
        # with the agreement (integers, summed alike on every rank).
        try:
            counts = Agreement(self.comm, "validation").settle_gathering(failure, [correct])
        finally:
            del failure  # no exception <-> frame cycle (braidpy.parallel.agree)
        return int(counts[:, 0].sum()) / n

    def _validation_solver(self, X: Any, C: Any) -> Tuple[Any, Core]:
        """The app and Core that validate batches of X's shape, built at first use."""
        key = tuple(X.shape)
        if key not in self._validation:
            app = self.make_app(self.net, self.params, X, C)
            if self.validation == "sequential":  # one level: propagation, no iterations
                opts = self.options.replace(max_levels=1)
            else:  # to tolerance, also in one-shot mode
                opts = self.options.replace(max_iter=Options().max_iter)
            core = Core(app, 0.0, self.net.tstop, self.net.nlayers, comm=self.comm, options=opts)
            self._validation[key] = (app, core)
        return self._validation[key]

    # ------------------------------------------------------------ warm states
    def warm_state(self) -> Dict[str, Any]:
        """The fine C-point states of both solves, gathered from all ranks
        ({'primal': {n: array}, 'adjoint': {n: array}}, complete on rank 0; collective)."""
        solver, host = self.solver, self.placement.to_host
        if self._evaluated and solver is not None:
            local = self._fine_c_points(solver)
        elif self._guesses_pending:  # set_oneshot kept them for a solve not run yet
            local = {"primal": self.app.guesses, "adjoint": self.app.adjoint_guesses}
        else:
            return {}
        out: Dict[str, Any] = {}
        for key in ("primal", "adjoint"):
            mine = {n: host(u) for n, u in local[key].items()}
            out[key] = gather_arrays(self.comm, mine, root=0) or {}
        out["batch_shape"] = self._batch_shape
        return out

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        """Start the next gradient cold from saved states (see :meth:`warm_state`)."""
        if not state:
            return
        if self.solver is not None:
            self.solver.reset()
        self._resumed = True
        self._evaluated = self._guesses_pending = False
        to_device = self.placement.tree_from_host
        self.app.guesses = {int(n): to_device(u) for n, u in state.get("primal", {}).items()}
        self.app.adjoint_guesses = {int(n): to_device(w)
                                    for n, w in state.get("adjoint", {}).items()}
        self._batch_shape = tuple(state.get("batch_shape", self._batch_shape))
