"""LayerParallel: a stack of residual blocks as one nn.Module, solved by MGRIT over layers."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from .._options import Options
from .._renamed import renamed_arguments, renamed_attribute
from .._result import Result
from ..adjoint import GradientSolver
from ..parallel.agree import agreed
from ..parallel.collectives import bcast_bytes
from ..parallel.comm import rank_size
from ..parallel.fingerprint import same_everywhere
from ..parallel.paths import Calls, entry
from ._app import BlocksApp
from ._host import HostBlocksApp, takes_host_states
from ._halo import HaloPlan, needed_layers, own_layers

__all__ = ["LayerParallel", "DEFAULTS"]

#: Input shapes (with dtype and device) whose solvers and warm starts are kept.
SOLVERS_KEPT = 4

#: MGRIT options of LayerParallel that differ from braidpy.Options' defaults.
DEFAULTS: Dict[str, Any] = {"cfactor": 4, "max_levels": 2, "abs_tol": 1e-9}

Blocks = Union[Sequence[torch.nn.Module], Callable[[int], torch.nn.Module]]


class LayerParallel(torch.nn.Module):
    """Residual blocks run as layer time steps, x <- x + h F_n(x), by MGRIT over layers.

    Parameters
    ----------
    blocks : sequence of nn.Module, or callable n -> nn.Module
        Block n computes F_n(x), a tensor of x's shape (a function of x with its own
        parameters: no in-place changes of x, no randomness, no state kept between
        calls; see docs/torch.md). With a sequence of ``depth`` blocks every rank
        keeps only the blocks it needs and registers only its own; with a factory,
        ``depth`` is required and the factory is called only for the blocks this rank
        needs (the same n must give the same architecture on every rank).
    tstop : float
        Final layer time (as in :func:`braidpy.solve`); the step is h = tstop / depth.
        The old keyword ``t_final`` still works, with a DeprecationWarning.
    comm : mpi4py communicator, optional
        The ranks the layers are split over (None: serial). Keyword-only, as everywhere
        in braidpy; passed by position (the old third argument) it still works, with a
        DeprecationWarning.
    depth : int, optional
        Number of layers; required with a factory, checked against a sequence.
    oneshot : (int, int), optional
        Run exactly m1 MGRIT iterations in each forward and m2 adjoint iterations in
        each backward, both warm-started from the previous call ("one-shot" training).
        None (default): both solves run to the tolerance ("exact" mode).
    adjoint : Options or dict, optional
        MGRIT options of the adjoint solve (default: the forward's).
    grouped : bool, optional
        With batched relaxation, run blocks made only of layers with a grouped form
        (``nn.Linear``, ``nn.Conv2d``, elementwise activations and arithmetic) as one
        torch call per layer over the stacked parameters (default True); False, or a
        block with other layers, uses ``torch.func.vmap``.
    **options
        MGRIT options of the forward solve (:class:`braidpy.Options`), laid over
        :data:`DEFAULTS` (cfactor 4, max_levels 2, abs_tol 1e-9). ``batch=False``
        turns batched relaxation off.

    Attributes
    ----------
    blocks : nn.ModuleDict
        This rank's own blocks, keyed by their layer index (as a string): the steps
        into the time points this rank owns. ``parameters()`` are theirs.
    layers : range
        The layer indices of :attr:`blocks`.
    tstop : float
        The final layer time (``t_final`` is its deprecated name).
    batch_path : str
        How batched relaxation runs: ``"grouped"`` (one torch call per layer of the
        block over the stacked block parameters: ``baddbmm`` for ``nn.Linear``, a
        grouped convolution for ``nn.Conv2d``), ``"vmap"`` (one ``torch.func.vmap``
        per batched call; :attr:`batch_path_reason` says why not grouped),
        ``"per-block"`` (one call per block, for blocks of different kinds or with
        dropout; the reason says why) or ``"off"``; decided once, when built.

    Notes
    -----
    ``forward(x)`` returns the last layer's output on every rank (sent from the rank
    owning the last layer), so the loss and ``loss.backward()`` are the same code on
    every rank, and every rank must call them (forward and backward are collective);
    give every rank the same ``x``. ``backward`` runs the adjoint MGRIT solve (each
    adjoint step a ``torch.func.vjp`` of the block) and writes the own blocks'
    gradients into their ``.grad``; the gradient with respect to ``x`` is sent to
    every rank. Each backward belongs to the latest forward.

    Examples
    --------
    >>> import torch
    >>> from braidpy.torch import LayerParallel
    >>> torch.manual_seed(7)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).double()
    ...           for _ in range(16)]
    >>> net = LayerParallel(blocks, tstop=1.0, abs_tol=1e-12)
    >>> x = torch.randn(3, 4, dtype=torch.float64)
    >>> y = net(x)
    >>> y.shape
    torch.Size([3, 4])
    >>> y.square().sum().backward()
    >>> blocks[0][0].weight.grad.shape
    torch.Size([4, 4])
    """

    t_final = renamed_attribute("t_final", "tstop")

    @renamed_arguments({"t_final": "tstop"}, now_keyword_only=("comm",))
    def __init__(self, blocks: Blocks, tstop: float, *, comm: Any = None,
                 depth: Optional[int] = None, oneshot: Optional[Tuple[int, int]] = None,
                 adjoint: Union[Options, Mapping[str, Any], None] = None,
                 grouped: bool = True, **options: Any):
        super().__init__()
        # Arguments checked locally, then compared across the ranks in one collective
        # (a difference, or a bad argument on one rank, stops every rank here, named in
        # LayerParallel's terms rather than as the Cores' ntime or max_iter).
        failure: Optional[BaseException] = None
        try:
            nblocks, get_block = _blocks_and_depth(blocks, depth)
            if isinstance(tstop, bool) or not isinstance(tstop, (int, float)) or \
                    not tstop > 0 or tstop == float("inf"):
                raise ValueError(f"tstop must be a positive number, got {tstop!r}")
            opts = Options.coerce({**DEFAULTS, **options})
            if rank_size(comm)[1] > 1 and isinstance(blocks, (list, tuple,
                                                              torch.nn.ModuleList)):
                for n, block in enumerate(blocks):
                    for name, p in block.named_parameters():
                        _check_sendable(p.dtype, f"block {n}'s {name}")
            fields = {"depth": nblocks, "tstop": float(tstop), "oneshot": oneshot,
                      "options": opts, "adjoint": adjoint, "grouped": grouped}
        except Exception as exc:  # noqa: BLE001 - re-raised here by the check
            failure, fields = exc, None
        same_everywhere(comm, fields, "the LayerParallel set-up", error=failure,
                        hint="every rank must build LayerParallel with the same number "
                             "of blocks, tstop, oneshot, grouped and options")
        del failure
        depth = nblocks
        self.depth = depth
        self.tstop = float(tstop)
        self.comm = comm
        self.mode = "exact" if oneshot is None else "oneshot"
        self.rank, self.size = rank_size(comm)
        if not isinstance(grouped, bool):
            raise TypeError(f"grouped must be True or False, got {grouped!r}")
        self._app = BlocksApp(batch=opts.batch, grouped=grouped)
        # CPU float inputs: NumPy states sharing the tensors' memory (the core's own
        # vector operations); other devices and dtypes: torch tensors as states.
        self._host_app = HostBlocksApp(self._app)
        self._gs_options: Dict[str, Any] = dict(primal=opts, adjoint=adjoint, oneshot=oneshot)
        self._gradient_solver = self._new_solver(host=True)
        # One solver (and warm start) per input signature; the first is built here to
        # learn the layer split, and given to the first signature seen.
        self._solvers: "OrderedDict[Tuple[Any, ...], GradientSolver]" = OrderedDict()
        self._unused: Optional[GradientSolver] = self._gradient_solver
        self._warm: set = set()
        primal, adj = self._gradient_solver.primal_core, self._gradient_solver.adjoint_core
        owned = primal.owned
        self.layers = own_layers(owned, depth)
        needed = needed_layers(primal.level_info, adj.level_info, owned, depth)
        self._wire = None if self.size == 1 else comm.Dup()
        # forward and backward open with an entry agreement over the wire (see
        # braidpy.parallel.paths): a rank that skips a backward, or calls one twice,
        # meets its peers' other call there and every rank raises, naming it.
        self._calls = Calls(self._wire)
        self._backwards = 0  # backward calls since the latest forward
        self._halo = HaloPlan(self._wire, self.layers, needed)
        self.blocks = torch.nn.ModuleDict()
        # A factory is called here, for this rank's layers only: a failure, or a dtype
        # the messages cannot carry, stops every rank at construction.
        with agreed(comm, "building LayerParallel's blocks"):
            for n in self.layers:
                self.blocks[str(n)] = get_block(n)
            halo = {n: get_block(n) for n in self._halo.halo}
            if self.size > 1:
                for n, m in [*((n, self.blocks[str(n)]) for n in self.layers),
                             *halo.items()]:
                    for name, p in m.named_parameters():
                        _check_sendable(p.dtype, f"block {n}'s {name}")
        for n, m in halo.items():
            m.requires_grad_(False)
        self._app.own = self.layers
        self._app.modules = {**{n: self.blocks[str(n)] for n in self.layers}, **halo}
        self._halo_modules = halo  # not registered: their parameters are the owners'
        # The own parameters by layer, looked up once (named_parameters walks modules).
        self._named = {n: list(self.blocks[str(n)].named_parameters()) for n in self.layers}
        self._param_list = [p for n in self.layers for _, p in self._named[n]]
        self._block_buffers: Dict[int, Dict[str, torch.Tensor]] = {
            n: dict(m.named_buffers()) for n, m in self._app.modules.items()}
        self._halo_shapes = {n: [(k, tuple(p.shape)) for k, p in m.named_parameters()]
                             for n, m in halo.items()}
        self._app.check_batchable()
        self._first = 0 in owned
        self._signature: Optional[Tuple[Any, ...]] = None
        self._owned = owned
        self._primal: Optional[Result] = None
        self._generation = 0
        self.last_forward: Optional[Result] = None
        self.last_backward: Optional[Result] = None

    # ------------------------------------------------------------ reports
    @property
    def batch_path(self) -> str:
        return self._app.path

    @property
    def batch_path_reason(self) -> str:
        return self._app.path_reason

    @property
    def state_kind(self) -> str:
        """What the MGRIT core holds as layer states for the latest input: ``"numpy"``
        (float64/float32 CPU inputs: NumPy arrays sharing memory with the tensors, so
        the core runs its own vector operations) or ``"torch"`` (other devices and
        dtypes: the tensors, with torch vector operations)."""
        return "numpy" if self._host else "torch"

    @property
    def batch_calls(self) -> Dict[str, int]:
        """Batched calls so far, by path (``{"grouped": i, "vmap": k, "per-block": j}``)."""
        return dict(self._app.calls)

    @property
    def halo_layers(self) -> List[int]:
        """Layers this rank steps with but does not own (their parameters come from
        their owners before each forward)."""
        return sorted(self._halo_modules)

    def extra_repr(self) -> str:
        return (f"depth={self.depth}, tstop={self.tstop:g}, mode={self.mode}, "
                f"layers={self.layers.start}..{self.layers.stop - 1} of rank "
                f"{self.rank}/{self.size}")

    # ------------------------------------------------------------ forward
    def _own_params(self) -> List[Any]:
        return self._param_list

    def _check_input(self, x: Any) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"LayerParallel.forward: x must be a torch.Tensor, got "
                            f"{type(x).__module__}.{type(x).__qualname__}")
        if not x.is_floating_point():
            raise TypeError(f"LayerParallel.forward: x must be a floating-point tensor, got "
                            f"dtype {x.dtype}")
        if self.size > 1:
            _check_sendable(x.dtype, "LayerParallel.forward: x")
        for n in self.layers:
            for name, p in self._named[n]:
                if p.device != x.device:
                    raise ValueError(f"LayerParallel.forward: x is on {x.device} but block "
                                     f"{n}'s {name} is on {p.device}; move the input or the "
                                     f"module so that they share a device")
                if p.dtype != x.dtype:
                    raise TypeError(f"LayerParallel.forward: x has dtype {x.dtype} but block "
                                    f"{n}'s {name} has {p.dtype}; convert one of them")

    def _probe(self, x: torch.Tensor) -> None:
        """Evaluate this rank's first block on x once per input signature: a block that
        cannot take x, or does not keep its shape, is a clear error on every rank."""
        signature = (tuple(x.shape), x.dtype, x.device)
        if signature == self._signature:
            return
        if signature in self._solvers:
            self._solvers.move_to_end(signature)
            self._gradient_solver, self._signature = self._solvers[signature], signature
            return
        with agreed(self._wire, "checking the input"):
            n = self.layers.start if len(self.layers) else min(self._app.modules)
            try:
                with torch.no_grad():
                    y = self._app.modules[n](x)
            except Exception as exc:
                raise ValueError(f"LayerParallel.forward: block {n} cannot take an input of "
                                 f"shape {tuple(x.shape)}: {type(exc).__name__}: {exc}") from exc
            if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype:
                got = (f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor)
                       else type(y).__name__)
                raise ValueError(f"LayerParallel.forward: block {n} maps an input of shape "
                                 f"{tuple(x.shape)} {x.dtype} to {got}; a residual block must "
                                 f"return a tensor of its input's shape and dtype")
        # A new shape: its own solver (a braidpy Core keeps one state shape), so that
        # the warm starts of other shapes (training batches, say) stay as they are.
        host = takes_host_states(x)
        solver, self._unused = self._unused, None
        if solver is not None and (solver.app is self._host_app) != host:
            solver.close()  # built for the other kind of states (collective, like forward)
            solver = None
        if solver is None:
            solver = self._new_solver(host)
            if solver.primal_core.owned != self._owned:  # pragma: no cover - invariant
                raise RuntimeError("braidpy.torch: a new solver split the layers differently")
        self._solvers[signature] = solver
        if len(self._solvers) > SOLVERS_KEPT:  # the same on every rank: collective close
            old_signature, old = self._solvers.popitem(last=False)
            self._warm.discard(old_signature)
            old.close()
        self._gradient_solver, self._signature = solver, signature

    def _new_solver(self, host: bool) -> GradientSolver:
        app = self._host_app if host else self._app
        return GradientSolver(app, 0.0, self.tstop, self.depth, comm=self.comm,
                              **self._gs_options)

    @property
    def _host(self) -> bool:
        """Whether the current solver's states are NumPy views (see :mod:`._host`)."""
        return self._gradient_solver.app is self._host_app

    def _refresh_params(self, device: torch.device) -> None:
        app = self._app
        own = {n: {k: p.detach() for k, p in self._named[n]} for n in self.layers}
        app.set_device(device)
        halo = self._halo.exchange(own, app.backend, self._halo_shapes)
        app.params = {**own, **halo}
        app.buffers = self._block_buffers
        app.restack()

    # MGRIT over the layers (the C++ core, messages between ranks) is opaque to
    # torch.compile: a graph break here, so compiled models run it eagerly.
    @torch.compiler.disable
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The output of the last layer, on every rank (collective).

        Under :func:`torch.compile` this call is a graph break: the layers before and
        after it are compiled, the MGRIT solve runs as it does eagerly."""
        self._check_input(x)
        forwards = self._calls.by_name["LayerParallel.forward"]
        entry(self._wire, self._calls, "LayerParallel.forward", (forwards, self._backwards),
              hint=_PATHS_HINT, explain=_explain_paths)
        self._backwards = 0
        params = self._own_params()
        if torch.is_grad_enabled():
            anchor = torch.zeros((), dtype=x.dtype, device=x.device, requires_grad=True)
            return _Solve.apply(self, x, anchor, *params)
        return self._forward_solve(x)

    def _forward_solve(self, x: torch.Tensor) -> torch.Tensor:
        self._probe(x)
        self._refresh_params(x.device)
        app = self._app
        app.x = x.detach()
        if self._signature in self._warm and self._first:
            x0 = self._host_app.state_of(app.x) if self._host else app.x
            self._gradient_solver.primal_core.set_initial_condition(x0)
        self._generation += 1
        self._primal = None
        self._primal = self._gradient_solver.solve_primal()
        self._warm.add(self._signature)
        self.last_forward = self._primal
        final = self._primal.final
        return self._host_app.tensor_of(final) if self._host else final

    # ------------------------------------------------------------ backward
    def _backward_solve(self, generation: int, grad_out: torch.Tensor,
                        want_x: bool) -> Tuple[Optional[torch.Tensor], List[torch.Tensor]]:
        forwards = self._calls.by_name["LayerParallel.forward"]
        entry(self._wire, self._calls, "LayerParallel.backward", (forwards, self._backwards),
              hint=_PATHS_HINT, explain=_explain_paths)
        self._backwards += 1
        if generation != self._generation or self._primal is None:
            raise RuntimeError("LayerParallel: this backward belongs to an earlier forward; "
                               "the layer states are those of the latest forward (call "
                               "backward before the next forward)")
        app = self._app
        app.grad_out = grad_out.detach().contiguous()
        app.grads = {}
        g = self._gradient_solver.solve_adjoint(self._primal)
        self.last_backward = g.adjoint
        found = {**g.gradients, **app.grads}
        grads: List[torch.Tensor] = []
        for n in self.layers:
            gn = found.get(n, {})
            for name, p in self._named[n]:
                grads.append(gn[name] if name in gn else torch.zeros_like(p))
        w0 = g.initial_adjoint
        if self._host:
            w0 = self._host_app.tensor_of(w0)
        dx = self._broadcast_from_first(w0) if want_x else None
        return dx, grads

    def _broadcast_from_first(self, w0: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """w0 (on the rank owning t_0, rank 0) on every rank."""
        if self._wire is None:
            return w0  # type: ignore[return-value]
        backend = self._app.backend
        packed = None
        with agreed(self._wire, "packing the input gradient"):
            if self.rank == 0:
                packed = bytes(memoryview(backend.pack(w0)).cast("B"))
        data = bcast_bytes(self._wire, packed, 0)
        with agreed(self._wire, "unpacking the input gradient"):
            return w0 if self.rank == 0 else backend.unpack(bytearray(data))

    def close(self) -> None:
        """Release the communicators now (also done by garbage collection)."""
        solvers = list(getattr(self, "_solvers", {}).values())
        unused = getattr(self, "_unused", None)
        for solver in solvers + ([unused] if unused is not None else []):
            solver.close()
        wire, self._wire = getattr(self, "_wire", None), None
        if wire is not None:
            try:
                from mpi4py import MPI

                if not MPI.Is_finalized():
                    wire.Free()
            except Exception:  # noqa: BLE001 - maybe at interpreter shutdown
                pass

    def __del__(self) -> None:
        self.close()


class _Solve(torch.autograd.Function):
    """forward: the forward MGRIT solve; backward: the adjoint MGRIT solve."""

    @staticmethod
    def forward(ctx: Any, lp: LayerParallel, x: torch.Tensor, anchor: torch.Tensor,
                *params: torch.Tensor) -> torch.Tensor:
        out = lp._forward_solve(x)
        ctx.lp = lp
        ctx.generation = lp._generation
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        # The adjoint solve's gradients carry no graph of their own: with create_graph
        # (a gradient penalty, Hessian-vector products) they would count as constants
        # and the second derivative would silently miss this module's part.
        if torch.is_grad_enabled():
            raise RuntimeError(
                "LayerParallel is differentiable once: its backward is an adjoint MGRIT "
                "solve, whose gradients cannot themselves be differentiated, so "
                "create_graph=True (double backward: a gradient penalty, Hessian-vector "
                "products) is not supported through it; compute such terms on a serial "
                "copy of the blocks")
        lp: LayerParallel = ctx.lp
        dx, grads = lp._backward_solve(ctx.generation, grad_out, ctx.needs_input_grad[1])
        grads_out = [g if need else None for g, need in zip(grads, ctx.needs_input_grad[3:])]
        return (None, dx, None, *grads_out)


_PATHS_HINT = ("LayerParallel's forward and backward are collective: every rank calls "
               "backward() once after a forward whose output its peers differentiate")


def _explain_paths(rows: Any, ranks: List[Any]) -> str:
    """Which rank skipped or repeated a backward, read from the entry rows
    ``[code, total, calls of name, forwards before, backwards since the latest forward]``
    of ranks meeting at LayerParallel's forward and backward."""
    from ..parallel.paths import NAMES

    names = [NAMES[int(c)] if 0 <= int(c) < len(NAMES) else "" for c in rows[:, 0]]
    if set(names) != {"LayerParallel.forward", "LayerParallel.backward"}:
        return ""
    said = []
    for r, (name, (f, b)) in enumerate(zip(names, rows[:, 3:5].tolist())):
        if name == "LayerParallel.forward" and b == 0 and f > 0:
            said.append(f"rank {ranks[r]} skipped backward() after its forward #{f} (it "
                        f"called forward #{f + 1} while other ranks called backward)")
        elif name == "LayerParallel.backward" and b > 0:
            said.append(f"rank {ranks[r]} called backward() {_times(b + 1)} after its "
                        f"forward #{f} (other ranks called forward #{f + 1})")
    return "; ".join(said)


def _times(n: int) -> str:
    return {2: "twice", 3: "three times"}.get(n, f"{n} times")


#: Floating-point dtypes the layer states may have under MPI: those braidpy's messages
#: carry (bfloat16 has no NumPy or wire counterpart).
SENDABLE_DTYPES = (torch.float16, torch.float32, torch.float64)


def _check_sendable(dtype: Any, what: str) -> None:
    """A TypeError naming ``what`` when layer states of ``dtype`` cannot be sent
    between ranks (found here, not at the first message of the first solve)."""
    if dtype.is_floating_point and dtype not in SENDABLE_DTYPES:
        raise TypeError(f"{what} has dtype {dtype}; LayerParallel on several ranks sends "
                        f"layer states of float16, float32 or float64 only ({dtype} has no "
                        f"NumPy or message counterpart): convert the blocks and the input "
                        f"(e.g. .float()), or run on one rank")


def _blocks_and_depth(blocks: Blocks, depth: Optional[int]
                      ) -> Tuple[int, Callable[[int], torch.nn.Module]]:
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                              or depth < 1):
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    if isinstance(blocks, torch.nn.Module) and not isinstance(blocks, torch.nn.ModuleList):
        raise TypeError(f"blocks must be a list of modules (one per layer, a ModuleList "
                        f"too) or a factory n -> module, not a single module "
                        f"({type(blocks).__name__})")
    if isinstance(blocks, (list, tuple, torch.nn.ModuleList)):
        items = list(blocks)
        if not items:
            raise ValueError("blocks is empty")
        for n, b in enumerate(items):
            if not isinstance(b, torch.nn.Module):
                raise TypeError(f"blocks[{n}] is a {type(b).__name__}, not a torch.nn.Module")
        if depth is not None and depth != len(items):
            raise ValueError(f"depth={depth} but {len(items)} blocks were given")
        return len(items), items.__getitem__
    if callable(blocks):
        if depth is None:
            raise ValueError("with a block factory, depth= (the number of layers) is required")

        def make(n: int) -> torch.nn.Module:
            m = blocks(n)
            if not isinstance(m, torch.nn.Module):
                raise TypeError(f"the block factory returned a {type(m).__name__} for layer "
                                f"{n}, not a torch.nn.Module")
            return m
        return depth, make
    raise TypeError(f"blocks must be a list of modules or a factory n -> module, got "
                    f"{type(blocks).__name__}")
