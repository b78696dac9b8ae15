"""braidpy.torch's grouped block calls (one torch call per layer for m blocks) against
the blocks called one by one, and the blocks that must not be grouped."""

import pytest

torch = pytest.importorskip("torch")

from torch.func import stack_module_state  # noqa: E402
from torch_cases import SEED, dense_blocks, rel  # noqa: E402

from braidpy.torch import LayerParallel  # noqa: E402
from braidpy.torch._grouped import grouped_call  # noqa: E402


def one_by_one(blocks, U):
    return torch.stack([b(u) for b, u in zip(blocks, U)])


def stacked(make, m, seed=SEED):
    torch.manual_seed(seed)
    blocks = [make().double() for _ in range(m)]
    params, _ = stack_module_state(blocks)
    return blocks, params


@pytest.mark.parametrize("make, shape", [
    (lambda: torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh()), (7, 3, 6)),
    (lambda: torch.nn.Sequential(torch.nn.Linear(6, 6, bias=False), torch.nn.ReLU(),
                                 torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.GELU())),
     (5, 2, 6)),
    (lambda: torch.nn.Linear(4, 4), (3, 2, 1, 4)),  # extra leading axes per block
    (lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3, padding=1), torch.nn.SiLU(),
                                 torch.nn.Conv2d(2, 3, (3, 5), padding=(1, 2))), (4, 2, 3, 6, 5)),
    (lambda: torch.nn.Conv2d(2, 2, 3, stride=2, dilation=1, padding=0), (3, 1, 2, 7, 7)),
])
def test_grouped_calls_equal_the_blocks_one_by_one(make, shape):
    blocks, params = stacked(make, shape[0])
    grouped, why = grouped_call(blocks[0])
    assert grouped is not None, why
    U = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert rel(grouped(params, U), one_by_one(blocks, U)) < 1e-14


def test_grouped_gradients_equal_the_blocks_one_by_one():
    blocks, params = stacked(lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3, padding=1),
                                                         torch.nn.Tanh()), 4)
    grouped, _ = grouped_call(blocks[0])
    U = torch.randn(4, 2, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 2, 2, 5, 5, dtype=torch.float64)
    P = {k: v.detach().requires_grad_() for k, v in params.items()}
    got = torch.autograd.grad((grouped(P, U) * W).sum(), [U] + list(P.values()))
    mine = [p for b in blocks for p in b.parameters()]
    ref = torch.autograd.grad((one_by_one(blocks, U) * W).sum(), [U] + mine)
    assert rel(got[0], ref[0]) < 1e-14
    for k, name in enumerate(P):  # stacked gradient k vs each block's gradient of it
        ref_rows = torch.stack([ref[1 + j * len(P) + k] for j in range(len(blocks))])
        assert rel(got[1 + k], ref_rows) < 1e-14, name


class Flagged(torch.nn.Module):
    """A forward that branches on an attribute: a recorded chain would keep one branch."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.flip = False

    def forward(self, x):
        return -self.lin(x) if self.flip else self.lin(x)


class MySequential(torch.nn.Sequential):
    pass


@pytest.mark.parametrize("block, reason", [
    (Flagged(), "Flagged is not nn.Sequential"),
    (torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)), "buffers"),
    (torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 3)), "0: Flatten"),
    (torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3, groups=2)), "0: a Conv2d with groups"),
    (torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3, padding="same")), "string padding"),
    (torch.nn.Sequential(torch.nn.PReLU()), "PReLU"),  # an activation with a parameter
    (MySequential(torch.nn.Linear(3, 3)), "MySequential"),
])
def test_blocks_that_are_not_plain_chains_are_not_grouped(block, reason):
    grouped, why = grouped_call(block)
    assert grouped is None and reason in why


def test_layer_parallel_says_why_it_uses_vmap_and_follows_block_attributes():
    torch.manual_seed(SEED)
    blocks = [Flagged().double() for _ in range(16)]
    net = LayerParallel(blocks, 1.0, abs_tol=1e-12)
    assert net.batch_path == "vmap" and "Flagged is not nn.Sequential" in net.batch_path_reason
    x = torch.ones(2, 3, dtype=torch.float64)
    before = net(x).detach()
    for b in blocks:
        b.flip = True
    after = net(x).detach()
    assert rel(before, after) > 1e-3  # the changed attribute is seen by the batched calls


def test_layer_parallel_checks_grouped():
    with pytest.raises(TypeError, match="grouped must be True or False, got 'yes'"):
        LayerParallel(dense_blocks(4, 3), 1.0, grouped="yes")
