"""braidpy.nn.ResNet: architecture checks, parameter layout and the serial reference
gradient (finite differences), for dense and convolutional networks."""

import numpy as np
import pytest

from braidpy.nn import ResNet


def fd_check(net, X, C, seed=0, eps=1e-6):
    p = net.init_params(seed=seed)
    p += 0.05 * np.random.default_rng(seed + 1).standard_normal(p.size)  # nonzero biases
    loss, grad = net.loss_and_gradient(p, X, C)
    assert loss == pytest.approx(net.loss(p, X, C), rel=0, abs=0)
    d = np.random.default_rng(seed + 2).standard_normal(p.size)
    fd = (net.loss(p + eps * d, X, C) - net.loss(p - eps * d, X, C)) / (2 * eps)
    assert abs(fd - grad @ d) <= 1e-6 * max(1.0, abs(fd))
    # every block, separately (a wrong block could hide in the sum)
    for name, sl in net.slices().items():
        e = np.zeros(p.size)
        e[sl] = d[sl]
        fd = (net.loss(p + eps * e, X, C) - net.loss(p - eps * e, X, C)) / (2 * eps)
        assert abs(fd - grad @ e) <= 1e-6 * max(1.0, abs(fd)), name


@pytest.mark.parametrize("opening,act", [("dense", True), ("dense", False), ("replicate", True),
                                          ("zero-pad", True)])
@pytest.mark.parametrize("activation", ["tanh", "smooth_relu"])
def test_dense_network_gradient_matches_finite_differences(opening, act, activation):
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(7, 3))
    C = np.eye(4)[rng.integers(0, 4, size=7)]
    net = ResNet((3,), 4, width=5, nlayers=6, tstop=1.5, activation=activation, opening=opening,
                 opening_activation=act)
    fd_check(net, X, C)


@pytest.mark.parametrize("opening", ["conv", "replicate", "zero-pad"])
def test_conv_network_gradient_matches_finite_differences(opening):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3, 2, 5, 4))
    C = np.eye(3)[rng.integers(0, 3, size=3)]
    net = ResNet((2, 5, 4), 3, width=3, nlayers=4, tstop=1.0, activation="tanh", opening=opening,
                 kernel=3)
    fd_check(net, X, C)


def test_layout_and_views():
    net = ResNet((1, 8, 8), 10, width=4, nlayers=5, kernel=5)
    assert net.kind == "conv" and net.opening == "conv"
    p = np.arange(net.nparams, dtype=float)
    v = net.views(p)
    assert v["K"].shape == (5, 4, 4, 5, 5) and v["W"].shape == (10, 4 * 64)
    assert v["open_K"].shape == (4, 1, 5, 5)
    v["mu"][0] = -1.0
    assert p[net.slices()["mu"]][0] == -1.0  # views, not copies
    assert sum(s.stop - s.start for s in net.slices().values()) == net.nparams
    np.testing.assert_array_equal(net.times, (np.arange(6) / 5) * 5.0)  # default T = 5


@pytest.mark.parametrize("kwargs,match", [
    (dict(activation="sigmoid"), "sigmoid"),
    (dict(opening="replicate", width=1), r"features \(2\) <= width \(1\)"),
    (dict(opening="conv"), "does not fit a dense network"),
    (dict(opening="identity"), "unknown opening 'identity'"),
    (dict(nlayers=0), "nlayers must be a positive integer"),
    (dict(width=2.5), "width must be a positive integer"),
    (dict(tstop=-1.0), "tstop must be a positive number"),
])
def test_bad_architectures_are_named(kwargs, match):
    args = dict(width=4, nlayers=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ResNet((2,), 3, **args)


def test_conv_errors():
    with pytest.raises(ValueError, match="kernel must be odd"):
        ResNet((1, 4, 4), 2, width=2, nlayers=2, kernel=4)
    with pytest.raises(ValueError, match=r"input channels \(3\) <= width \(2\)"):
        ResNet((3, 4, 4), 2, width=2, nlayers=2, opening="zero-pad")
    with pytest.raises(ValueError, match="input_shape"):
        ResNet((4, 4), 2, width=2, nlayers=2)


def test_data_checks():
    net = ResNet((2,), 3, width=4, nlayers=3)
    with pytest.raises(ValueError, match=r"data samples have shape \(3,\)"):
        net.check_data(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="labels have shape"):
        net.check_data(np.zeros((5, 2)), np.zeros((5, 4)))
    with pytest.raises(ValueError, match="flat vector of"):
        net.views(np.zeros(3))
