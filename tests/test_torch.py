"""braidpy.torch serially: LayerParallel against plain torch autograd and braidpy.nn,
batched against per-block relaxation, errors; the torch array backend."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_cases import (CASES, SEED, adam_peaks, dense_blocks, loss_weights,  # noqa: E402
                         rel, serial_reference)

import braidpy  # noqa: E402
from braidpy.backends import backend_for, wire  # noqa: E402
from braidpy.torch import LayerParallel  # noqa: E402


# --------------------------------------------------------------- exact gradients

@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_exact_gradients_equal_serial_autograd(kind):
    errors = CASES[kind](None)
    assert errors["output"] < 1e-12
    assert errors["dx"] < 1e-10 and errors["params"] < 1e-10, errors
    assert errors["path"] == "grouped" and errors["halo"] == []


@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("oneshot", [None, (2, 2)])
def test_numpy_states_equal_torch_states(monkeypatch, batch, oneshot):
    """CPU float inputs run on NumPy states sharing the tensors' memory (the core's own
    vector operations); torch tensors as states (what other devices take) give the same
    network to rounding, and the exact gradients equal serial autograd either way."""
    import braidpy.torch._layer_parallel as lp_module

    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    out = {}
    for kind in ("numpy", "torch"):
        if kind == "torch":
            monkeypatch.setattr(lp_module, "takes_host_states", lambda x: False)
        blocks = dense_blocks(32, 4)
        net = LayerParallel(blocks, 2.0, batch=batch, cfactor=4, max_levels=3,
                            abs_tol=1e-13, oneshot=oneshot)
        xg = x.clone().requires_grad_()
        y = net(xg)
        assert net.state_kind == kind
        (y * loss_weights(y)).sum().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        out[kind] = (y.detach(), xg.grad, grads)
        if oneshot is None:
            ref_out, ref_dx, ref_dp = serial_reference(blocks, 2.0, x)
            ref = torch.cat([g.reshape(-1) for per in ref_dp for g in per])
            assert rel(y.detach(), ref_out) < 1e-12
            assert rel(xg.grad, ref_dx) < 1e-10 and rel(grads, ref) < 1e-10
        net.close()
    for a, b in zip(out["numpy"], out["torch"]):
        assert rel(a, b) < 1e-13, rel(a, b)


def test_float32_states_stay_float32():
    blocks = dense_blocks(8, 4, dtype=torch.float32)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(SEED))
    ref_out, ref_dx, ref_dp = serial_reference(blocks, 1.0, x)
    net = LayerParallel(blocks, 1.0, abs_tol=1e-6, cfactor=2)
    xg = x.clone().requires_grad_()
    y = net(xg)
    assert y.dtype == torch.float32 and y.device == x.device
    (y * loss_weights(y)).sum().backward()
    assert xg.grad.dtype == torch.float32
    assert rel(y.detach(), ref_out) < 1e-5 and rel(xg.grad, ref_dx) < 1e-5
    assert rel(blocks[3][0].weight.grad, ref_dp[3][0]) < 1e-5


def test_a_block_factory_and_a_module_list_give_the_same_gradients():
    blocks = dense_blocks(8, 4)
    made = []

    def factory(n):
        made.append(n)
        return blocks[n]

    x = torch.randn(2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    grads = []
    for net in (LayerParallel(factory, 2.0, depth=8, abs_tol=1e-12),
                LayerParallel(torch.nn.ModuleList(blocks), 2.0, abs_tol=1e-12)):
        for b in blocks:
            b.zero_grad()
        net(x).sum().backward()
        grads.append([b[0].weight.grad.clone() for b in blocks])
        assert list(net.layers) == list(range(8))
        assert len(list(net.parameters())) == 16
    assert sorted(made) == list(range(8))
    state = net.state_dict()  # an ordinary module: its own blocks by layer index
    assert list(state)[:2] == ["blocks.0.0.weight", "blocks.0.0.bias"] and len(state) == 16
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_gradients_accumulate_like_torch():
    blocks = dense_blocks(4, 3)
    net = LayerParallel(blocks, 1.0, abs_tol=1e-12, cfactor=2)
    x = torch.ones(2, 3, dtype=torch.float64)
    net(x).sum().backward()
    once = blocks[1][0].weight.grad.clone()
    net(x).sum().backward()
    assert torch.allclose(blocks[1][0].weight.grad, 2 * once, rtol=1e-12, atol=0)


# --------------------------------------------------------------- one-shot

def test_oneshot_gradients_equal_braidpy_nn_oneshot():
    """Opening -> LayerParallel(one-shot) -> classifier against braidpy.nn's ResNet with
    LayerParallelEvaluator(oneshot) on the same weights, over three SGD steps (warm
    starts included)."""
    from braidpy.nn import ResNet
    from braidpy.train.evaluate import LayerParallelEvaluator

    N, q, T = 16, 4, 5.0
    X, C = braidpy.data.peaks(20, seed=SEED)
    net = ResNet((2,), 5, width=q, nlayers=N, tstop=T, activation="tanh", opening="dense")
    params = net.init_params(seed=SEED)
    mgrit = {"cfactor": 4, "max_levels": 2}
    ev = LayerParallelEvaluator(net, params, X, C, mgrit=mgrit, oneshot=(2, 1))
    v = net.views(params)
    t = lambda a: torch.tensor(np.array(a), dtype=torch.float64)  # noqa: E731
    opening = torch.nn.Sequential(torch.nn.Linear(2, q), torch.nn.Tanh()).double()
    classifier = torch.nn.Linear(q, 5).double()
    blocks = [torch.nn.Sequential(torch.nn.Linear(q, q), torch.nn.Tanh()).double()
              for _ in range(N)]
    with torch.no_grad():
        opening[0].weight.copy_(t(v["open_K"]))
        opening[0].bias.copy_(t(v["open_b"]))
        classifier.weight.copy_(t(v["W"]))
        classifier.bias.copy_(t(v["mu"]))
        for n, b in enumerate(blocks):
            b[0].weight.copy_(t(v["K"][n]))
            b[0].bias.copy_(t(v["b"][n]))
    lp = LayerParallel(blocks, T, oneshot=(2, 1), seq_soln=True, skip=False, **mgrit)
    every = list(opening.parameters()) + list(lp.parameters()) + list(classifier.parameters())
    opt = torch.optim.SGD(every, lr=0.5)
    Xt, Ct = t(X), t(C)
    for _ in range(3):
        loss_np, grad_np, _ = ev.gradient(params, X, C)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(classifier(lp(opening(Xt))), Ct)
        loss.backward()
        assert loss.item() == pytest.approx(loss_np, rel=1e-12)
        g = net.views(grad_np)
        assert rel(opening[0].weight.grad, t(g["open_K"])) < 1e-10
        assert rel(classifier.weight.grad, t(g["W"])) < 1e-10
        dK = torch.stack([b[0].weight.grad for b in blocks])
        assert rel(dK, t(g["K"])) < 1e-10
        db = torch.stack([b[0].bias.grad for b in blocks])
        assert rel(db, t(g["b"])) < 1e-10
        params -= 0.5 * grad_np
        opt.step()
    assert lp.last_forward.iterations == 2 and lp.last_backward.iterations == 1


def test_adam_on_peaks_decreases_the_loss():
    losses = adam_peaks(None)
    assert len(losses) == 20 and losses[-1] < 0.8 * losses[0]


# --------------------------------------------------------------- batched relaxation

def run(net, x):
    xg = x.clone().requires_grad_()
    y = net(xg)
    (y * loss_weights(y)).sum().backward()
    return y.detach(), xg.grad


@pytest.mark.parametrize("oneshot", [None, (2, 2)])
def test_batched_equals_per_block(oneshot):
    """Grouped calls, vmap and per-block calls give the same network to rounding."""
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    out = []
    for batch, grouped, path in ((True, True, "grouped"), (True, False, "vmap"),
                                 (False, True, "off")):
        blocks = dense_blocks(32, 4)
        net = LayerParallel(blocks, 2.0, batch=batch, grouped=grouped, cfactor=4,
                            max_levels=3, abs_tol=1e-12, oneshot=oneshot)
        y, dx = run(net, x)
        out.append((y, dx, torch.cat([p.grad.reshape(-1) for p in net.parameters()])))
        assert net.batch_path == path
        calls = net.batch_calls
        assert calls["per-block"] == 0
        if batch:
            assert calls[path] > 0 and sum(calls.values()) == calls[path], calls
        else:
            assert sum(calls.values()) == 0, calls
    for other in out[1:]:
        for a, b in zip(out[0], other):
            # To 1e-14 of the tensor's size: grouped, vmap and per-block matmuls may sum
            # in different orders (which one differs by CPU: 4e-16 seen on an entry of
            # 0.02 on one machine, bitwise equal on another).
            err = float((a - b).abs().max() / b.abs().max())
            assert err < 1e-14, err


class Branchy(torch.nn.Module):
    """Not vmap-able: Python control flow on a tensor's value."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3).double()

    def forward(self, x):
        if x.sum() > 1e9:
            return x
        return torch.tanh(self.lin(x))


def test_blocks_vmap_cannot_run_raise_the_vmap_error_not_a_silent_fallback():
    """The path is decided before the first call; vmap failing on a block (Python
    control flow on a value) propagates, with a note naming batch=False, which runs."""
    x = torch.ones(2, 3, dtype=torch.float64)
    torch.manual_seed(SEED)
    net = LayerParallel([Branchy() for _ in range(16)], 1.0, abs_tol=1e-12)
    assert net.batch_path == "vmap"
    with pytest.raises(RuntimeError, match="data-dependent control flow") as info:
        net(x)
    if hasattr(info.value, "add_note"):  # Python >= 3.11
        assert any("batch=False" in note for note in info.value.__notes__)
    assert net.batch_path == "vmap" and net.batch_calls["per-block"] == 0
    torch.manual_seed(SEED)
    blocks = [Branchy() for _ in range(16)]
    net = LayerParallel(blocks, 1.0, batch=False, abs_tol=1e-12)
    assert net.batch_path == "off"
    assert rel(net(x).detach(), serial_reference(blocks, 1.0, x)[0]) < 1e-9


class OnceInVmap(torch.nn.Module):
    """Fails once, the first time it runs inside a batched (vmapped) call after being
    armed: a retry block by block would succeed and hide the failure."""

    armed = False

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3).double()

    def forward(self, x):
        if OnceInVmap.armed and torch._C._functorch.is_batchedtensor(x):
            OnceInVmap.armed = False
            raise LookupError("block failed inside the batched call")
        return torch.tanh(self.lin(x))


def test_a_block_failing_inside_a_vmapped_call_surfaces_its_exception():
    torch.manual_seed(SEED)
    net = LayerParallel([OnceInVmap() for _ in range(16)], 1.0, abs_tol=1e-12)
    assert net.batch_path == "vmap"
    x = torch.ones(2, 3, dtype=torch.float64)
    OnceInVmap.armed = True
    try:
        with pytest.raises(LookupError, match="block failed inside the batched call"):
            net(x)
    finally:
        OnceInVmap.armed = False
    assert net.batch_path == "vmap" and net.batch_calls["per-block"] == 0
    y = net(x)  # the path stays the one decided up front
    assert net.batch_path == "vmap" and net.batch_calls["per-block"] == 0
    assert net.batch_calls["vmap"] > 0 and y.shape == (2, 3)


def test_a_bug_in_the_grouped_call_propagates(monkeypatch):
    """The grouped path's own code raising (a library bug) is not hidden behind a
    per-block retry: the exception reaches the caller, the path stays grouped."""
    from braidpy.torch import _grouped

    original, fuse = _grouped.GroupedCall.__call__, [1]

    def buggy(self, P, U):
        if fuse[0]:
            fuse[0] -= 1
            raise IndexError("grouped call bug")
        return original(self, P, U)

    monkeypatch.setattr(_grouped.GroupedCall, "__call__", buggy)
    net = LayerParallel(dense_blocks(16, 3), 1.0, abs_tol=1e-12)
    assert net.batch_path == "grouped"
    x = torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(IndexError, match="grouped call bug"):
        net(x)
    assert fuse == [0] and net.batch_path == "grouped"
    assert net.batch_calls["per-block"] == 0
    net(x)
    assert net.batch_calls["grouped"] > 0 and net.batch_calls["per-block"] == 0


def test_blocks_drawing_random_numbers_take_the_per_block_path_decided_up_front(monkeypatch):
    """A dropout (vmap refuses random numbers) sends the blocks one by one, decided at
    construction: the batched call is never attempted."""
    from braidpy.torch._app import BlocksApp

    def never(*args):
        raise AssertionError("a batched call was attempted")

    monkeypatch.setattr(BlocksApp, "_fv", never)
    torch.manual_seed(SEED)
    blocks = [torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(),
                                  torch.nn.Dropout(0.25)).double() for _ in range(8)]
    net = LayerParallel(blocks, 1.0, abs_tol=1e-12)
    assert net.batch_path == "per-block"
    assert "2 (Dropout) draws random numbers" in net.batch_path_reason
    assert net.batch_calls == {"grouped": 0, "vmap": 0, "per-block": 0}
    net.eval()  # dropout off: deterministic, the serial network's output
    for b in blocks:
        b.eval()
    x = torch.ones(2, 3, dtype=torch.float64)
    ref, _, _ = serial_reference(blocks, 1.0, x)
    assert rel(net(x).detach(), ref) < 1e-9
    assert net.batch_calls["per-block"] > 0 and net.batch_path == "per-block"


def test_blocks_of_different_kinds_take_the_per_block_path(monkeypatch):
    from braidpy.torch._app import BlocksApp

    def never(*args):
        raise AssertionError("a batched call was attempted")

    monkeypatch.setattr(BlocksApp, "_fv", never)  # decided up front: never tried
    torch.manual_seed(SEED)
    blocks = [torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).double()
              if n % 2 else torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()).double()
              for n in range(8)]
    net = LayerParallel(blocks, 1.0)
    assert net.batch_path == "per-block" and "differs" in net.batch_path_reason
    x = torch.ones(2, 3, dtype=torch.float64)
    ref, _, _ = serial_reference(blocks, 1.0, x)
    assert rel(net(x).detach(), ref) < 1e-9
    assert net.batch_calls["per-block"] > 0 and net.batch_path == "per-block"


# --------------------------------------------------------------- errors

class Raising(torch.nn.Module):
    def forward(self, x):
        raise KeyError("no such feature")


def test_a_failing_block_raises_its_own_exception():
    blocks = dense_blocks(8, 3)
    blocks[5] = Raising()
    net = LayerParallel(blocks, 1.0, batch=False)
    with pytest.raises(KeyError, match="no such feature"):
        net(torch.ones(2, 3, dtype=torch.float64))


def test_bad_inputs_are_clear_errors():
    net = LayerParallel(dense_blocks(8, 4), 1.0)
    with pytest.raises(TypeError, match="must be a torch.Tensor.*numpy"):
        net(np.ones((2, 4)))
    with pytest.raises(TypeError, match="floating-point"):
        net(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match="dtype torch.float32.*float64"):
        net(torch.ones(2, 4))
    with pytest.raises(ValueError, match="cannot take an input of shape \\(2, 5\\)"):
        net(torch.ones(2, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="x is on meta but block 0's 0.weight is on cpu"):
        net(torch.ones(2, 4, dtype=torch.float64, device="meta"))
    shrink = [torch.nn.Linear(4, 2).double() for _ in range(8)]
    with pytest.raises(ValueError, match="maps an input of shape \\(2, 4\\).*to \\(2, 2\\)"):
        LayerParallel(shrink, 1.0)(torch.ones(2, 4, dtype=torch.float64))
    y = net(torch.ones(2, 4, dtype=torch.float64))  # still works after the errors
    assert y.shape == (2, 4)


def test_backward_must_follow_its_own_forward():
    net = LayerParallel(dense_blocks(8, 4), 1.0)
    x = torch.ones(2, 4, dtype=torch.float64)
    first = net(x).sum()
    net(x)
    with pytest.raises(RuntimeError, match="earlier forward"):
        first.backward()


def test_constructor_arguments_are_checked():
    blocks = dense_blocks(4, 2)
    with pytest.raises(ValueError, match="depth= .* is required"):
        LayerParallel(lambda n: blocks[n], 1.0)
    with pytest.raises(ValueError, match="depth=5 but 4 blocks"):
        LayerParallel(blocks, 1.0, depth=5)
    with pytest.raises(ValueError, match="tstop must be a positive number"):
        LayerParallel(blocks, 0.0)
    with pytest.raises(TypeError, match="blocks\\[1\\] is a str"):
        LayerParallel([blocks[0], "x"], 1.0)
    with pytest.raises(TypeError, match="not a single module"):
        LayerParallel(blocks[0], 1.0)
    with pytest.raises(ValueError, match="max_level"):
        LayerParallel(blocks, 1.0, max_level=2)


@pytest.mark.parametrize("wrt", ["input", "parameters"])
def test_create_graph_through_layer_parallel_is_refused_not_silently_wrong(wrt):
    """A gradient penalty differentiates the gradient: LayerParallel's adjoint solve
    has no graph, so with create_graph=True its part was silently left out (parameter
    gradients off against autograd). Now refused by name; first derivatives still
    equal autograd's."""
    blocks = dense_blocks(4, 3)
    net = LayerParallel(blocks, 1.0, abs_tol=1e-13)
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7),
                    requires_grad=True)
    targets = [x] if wrt == "input" else list(net.parameters())
    with pytest.raises(RuntimeError, match="LayerParallel is differentiable once: .* "
                                           "create_graph=True .* is not supported"):
        torch.autograd.grad(net(x).pow(2).sum(), targets, create_graph=True)
    got = torch.autograd.grad(net(x).pow(2).sum(), targets)
    reference = _serial_copy(blocks, 1.0)
    want = torch.autograd.grad(reference(x).pow(2).sum(),
                               [x] if wrt == "input" else list(reference.parameters()))
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-8, atol=1e-10)


def _serial_copy(blocks, tstop):
    """Forward Euler through the same blocks in plain torch (autograd's reference)."""
    h = tstop / len(blocks)

    class Serial(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(blocks)

        def forward(self, u):
            for b in self.blocks:
                u = u + h * b(u)
            return u
    return Serial()


def test_no_grad_forward_runs_the_solve_only():
    blocks = dense_blocks(8, 4)
    net = LayerParallel(blocks, 1.0, abs_tol=1e-12)
    x = torch.ones(2, 4, dtype=torch.float64)
    with torch.no_grad():
        y = net(x)
    assert not y.requires_grad
    assert rel(y, serial_reference(blocks, 1.0, x)[0]) < 1e-12


# --------------------------------------------------------------- the array backend

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32])
def test_torch_backend_round_trips_messages(dtype):
    u = (torch.arange(12) - 3).reshape(3, 4).to(dtype)
    b = backend_for(u, "bufpack")
    assert b.name == "torch" and b.device == torch.device("cpu")
    buf = b.pack(u)
    assert bytes(buf[:4]) == wire.MAGIC and buf[6] == wire.CPU
    v = b.unpack(buf)
    assert v.dtype == dtype and torch.equal(u, v)
    with pytest.raises(ValueError, match="bad magic"):
        b.unpack(b"XXXX" + bytes(buf[4:]))


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
def test_torch_backend_refuses_wide_unsigned_messages(name):
    """torch's uint16/32/64 lack most operations: the wire table carries them (a NumPy
    rank may send one), but the torch backend neither builds nor sends such tensors."""
    b = backend_for(torch.zeros(2, dtype=torch.float64), "bufunpack")
    buf = wire.encode(np.arange(6, dtype=name).reshape(2, 3))  # a valid message
    assert wire.decode(buf).dtype_name == name
    with pytest.raises(ValueError, match=f"dtype {name} has no torch counterpart"):
        b.unpack(buf)
    with pytest.raises(TypeError, match=f"dtype torch.{name} cannot be sent between ranks"):
        b.pack(torch.zeros(3, dtype=getattr(torch, name)))
    # uint8 is carried both ways
    u8 = b.unpack(wire.encode(np.arange(6, dtype=np.uint8)))
    assert u8.dtype == torch.uint8 and u8.tolist() == list(range(6))
    assert torch.equal(b.unpack(b.pack(u8)), u8)


def test_torch_backend_vector_operations():
    u = torch.tensor([3.0, 4.0], dtype=torch.float64)
    b = backend_for(u)
    assert b.norm(u) == 5.0
    c = b.clone(u)
    c += 1
    assert u.tolist() == [3.0, 4.0]
    b.sum(2.0, u, 3.0, u)  # x is y
    assert u.tolist() == [15.0, 20.0]
    b.sum(1.0, u, 0.5, u)  # x is y, and y is scaled before x is added
    assert u.tolist() == [22.5, 30.0]
    b.sum(1.0, u[:1], 0.5, u[1:])  # views of one storage: copied first
    assert u.tolist() == [22.5, 37.5]
    u = torch.tensor([15.0, 20.0], dtype=torch.float64)
    y = torch.ones(2, dtype=torch.float64)
    b.sum(-1.0, u, 0.5, y)
    assert y.tolist() == [-14.5, -19.5]
    assert b.stack([u, y]).shape == (2, 2)


def test_torch_states_in_a_plain_app_use_the_torch_backend():
    class Decay(braidpy.App):
        array_namespace = torch

        def init(self, t):
            return torch.ones(2, dtype=torch.float64) if t == 0 else torch.zeros(2,
                                                                              dtype=torch.float64)

        def step(self, u, t0, t1, status):
            u /= 1.0 + (t1 - t0)

    r = braidpy.solve(Decay(), 0.0, 1.0, 32, cfactor=4, abs_tol=1e-12)
    assert isinstance(r.final, torch.Tensor)
    assert abs(float(r.final[0]) - (1 + 1 / 32) ** -32) < 1e-10


def test_inputs_of_another_shape_get_their_own_solver():
    blocks = dense_blocks(8, 4)
    net = LayerParallel(blocks, 1.0, abs_tol=1e-12, oneshot=(1, 1))
    a = torch.ones(2, 4, dtype=torch.float64)
    b = torch.ones(5, 4, dtype=torch.float64)
    ya1 = net(a).detach()
    with torch.no_grad():
        yb = net(b)  # a validation-sized batch: a solver of its own
    ya2 = net(a).detach()  # continues a's warm start (one more iteration)
    assert yb.shape == (5, 4) and ya2.shape == (2, 4)
    fresh = LayerParallel(blocks, 1.0, abs_tol=1e-12, oneshot=(1, 1))
    fresh(a)
    assert torch.equal(fresh(a).detach(), ya2) and not torch.equal(ya1, ya2)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
# inductor's own import of torch.jit warns (torch's deprecation, not braidpy's)
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_a_compiled_model_around_layer_parallel_matches_eager(backend):
    """torch.compile over a model holding LayerParallel: the solve is a graph break, the
    layers around it are compiled; outputs and every gradient equal eager mode's."""
    blocks = dense_blocks(8, 4)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4, dtype=torch.float64),
                                LayerParallel(blocks, 1.0, abs_tol=1e-12, cfactor=2),
                                torch.nn.Linear(4, 2, dtype=torch.float64))
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    eager = model(x)
    eager.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, backend=backend)(x)
    compiled.sum().backward()
    assert torch.equal(compiled, eager)
    for p, g in zip(model.parameters(), grads):
        assert torch.allclose(p.grad, g, rtol=1e-12, atol=1e-14)
