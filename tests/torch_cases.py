"""Cases of braidpy.torch run serially (tests/test_torch.py) and under mpiexec
(tests/mpi_torch_driver.py): each takes a communicator (None: serial) and returns
JSON-able results, the same on every rank unless it says otherwise."""

import numpy as np
import torch

from braidpy.data import peaks
from braidpy.torch import LayerParallel

SEED = 2317  # one seed for the weights of every case (not a magic 0 or 42)
torch.set_num_threads(1)  # tiny tensors: threads only contend on a shared machine


def dense_blocks(depth, width, dtype=torch.float64, seed=SEED):
    torch.manual_seed(seed)
    return [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).to(dtype)
            for _ in range(depth)]


def conv_blocks(depth, channels, dtype=torch.float64, seed=SEED):
    torch.manual_seed(seed)
    return [torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1),
                                torch.nn.Tanh()).to(dtype) for _ in range(depth)]


def serial_reference(blocks, tstop, x):
    """Plain torch autograd through the same blocks: (output, dL/dx, [dL/dparams per
    block]) for L = sum(output * weights) with fixed weights."""
    h = tstop / len(blocks)
    x = x.detach().clone().requires_grad_()
    u = x
    for b in blocks:
        u = u + h * b(u)
    loss = (u * loss_weights(u)).sum()
    params = [p for b in blocks for p in b.parameters()]
    grads = torch.autograd.grad(loss, [x] + params)
    out, per = grads[1:], []
    for b in blocks:
        k = len(list(b.parameters()))
        per.append(list(out[:k]))
        out = out[k:]
    return u.detach(), grads[0], per


def loss_weights(u):
    g = torch.Generator().manual_seed(SEED)  # drawn on the host: the same on every device
    return torch.randn(u.shape, generator=g, dtype=u.dtype).to(u.device)


def rel(a, b):
    return float((a - b).norm() / b.norm())


def exact_case(comm, kind, depth, **options):
    """LayerParallel's exact-mode output and gradients against serial autograd: the
    largest relative errors on this rank (and the layers it owns)."""
    from mpi_world import assert_split

    if kind == "dense":
        blocks, x = dense_blocks(depth, 4), torch.randn(3, 4, dtype=torch.float64,
                                                          generator=torch.Generator().manual_seed(5))
    else:
        blocks = conv_blocks(depth, 2)
        x = torch.randn(2, 2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref_out, ref_dx, ref_dp = serial_reference(blocks, 1.0, x)
    net = LayerParallel(blocks, 1.0, comm=comm, abs_tol=1e-13, **options)
    assert_split(comm, net.layers, depth, "layers")
    xg = x.clone().requires_grad_()
    y = net(xg)
    (y * loss_weights(y)).sum().backward()
    errors = {"output": rel(y.detach(), ref_out), "dx": rel(xg.grad, ref_dx), "params": 0.0}
    for n in net.layers:
        for p, r in zip(blocks[n].parameters(), ref_dp[n]):
            errors["params"] = max(errors["params"], rel(p.grad, r))
    errors["nparams"] = sum(p.numel() for p in net.parameters())
    errors["path"] = net.batch_path
    errors["states"] = net.state_kind
    errors["halo"] = net.halo_layers
    errors["iterations"] = [net.last_forward.iterations, net.last_backward.iterations]
    net.close()
    return errors


class Failing(torch.nn.Module):
    """A block that raises on its first call when ``armed``."""

    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(width, width).double()
        self.armed = False

    def forward(self, x):
        if self.armed:
            raise ZeroDivisionError("block 13 divided by zero")
        return torch.tanh(self.lin(x))


def failing_case(comm):
    """A block failing on the last rank: (this rank's exception type, message, whether
    it owns the failing layer)."""
    torch.manual_seed(SEED)
    depth = 16
    blocks = [Failing(4) for _ in range(depth)]
    net = LayerParallel(blocks, 1.0, comm=comm, abs_tol=1e-10, batch=False)
    x = torch.ones(2, 4, dtype=torch.float64)
    net(x)  # the probe and a clean solve first
    blocks[13].armed = True
    try:
        net(x)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out = [type(exc).__name__, str(exc), 13 in net.layers]
    else:
        out = ["none", "", 13 in net.layers]
    blocks[13].armed = False
    y = net(x)  # still usable afterwards
    out.append(bool(torch.isfinite(y).all()))
    net.close()
    return out


def adam_peaks(comm, steps=20, depth=8, width=4, oneshot=None):
    """Adam on Peaks through opening -> LayerParallel -> classifier: the losses."""
    X, labels = peaks(40, seed=SEED)
    X = torch.as_tensor(X, dtype=torch.float64)
    y = torch.as_tensor(labels.argmax(axis=1) if labels.ndim == 2 else labels,
                        dtype=torch.long)
    torch.manual_seed(SEED)
    opening = torch.nn.Sequential(torch.nn.Linear(2, width), torch.nn.Tanh()).double()
    classifier = torch.nn.Linear(width, 5).double()
    blocks = dense_blocks(depth, width, seed=SEED + 1)
    net = LayerParallel(blocks, 5.0, comm=comm, abs_tol=1e-11, cfactor=2, oneshot=oneshot,
                        **({} if oneshot is None else {"seq_soln": True, "skip": False}))
    params = list(opening.parameters()) + list(net.parameters()) + list(classifier.parameters())
    opt = torch.optim.Adam(params, lr=0.01)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(classifier(net(opening(X))), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    net.close()
    return losses


def torch_states_case(comm):
    """The dense case with torch tensors as the core's states (what CUDA inputs take):
    rank messages go through braidpy.backends.torch instead of NumPy's."""
    import braidpy.torch._layer_parallel as lp_module

    original = lp_module.takes_host_states
    lp_module.takes_host_states = lambda x: False
    try:
        return exact_case(comm, "dense", 16, max_levels=3)
    finally:
        lp_module.takes_host_states = original


def bfloat16_case(comm):
    """bfloat16 layer states on several ranks, which no message carries: refused when
    LayerParallel is built, from a list of blocks or from a factory (called for this
    rank's layers only), and a bfloat16 input at the forward call ([type, message] of
    each)."""
    out = []
    blocks = dense_blocks(4, 2, dtype=torch.bfloat16)
    for given in (blocks, lambda n: blocks[n]):
        try:
            LayerParallel(given, 1.0, depth=4, comm=comm).close()
            out.append(["none", ""])
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out.append([type(exc).__name__, str(exc)])
    net = LayerParallel(dense_blocks(4, 2, dtype=torch.float32), 1.0, comm=comm)
    try:
        net(torch.ones(2, 2, dtype=torch.bfloat16))
        out.append(["none", ""])
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.append([type(exc).__name__, str(exc)])
    net.close()
    return out


CASES = {
    "bfloat16": bfloat16_case,
    "dense": lambda comm: exact_case(comm, "dense", 16, max_levels=3),
    "dense-torch-states": torch_states_case,
    "conv": lambda comm: exact_case(comm, "conv", 8),
    "failing": failing_case,
    "adam": adam_peaks,
}


def losses_close(a, b):
    return bool(np.allclose(a, b, rtol=1e-12, atol=0))
