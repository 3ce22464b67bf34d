"""PyTorch spellings a PyTorch user expects (issue #15), checked against torch itself."""

import numpy as np
import pytest

from tinytorch.core.activations import LogSoftmax, Softmax, log_softmax, softmax
from tinytorch.core.tensor import Tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_take_dim_and_keepdim(name, dim, keepdim):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    t = torch.from_numpy(x)
    if dim is None:
        want = getattr(t, name)()
        if keepdim:
            want = want.reshape((1,) * x.ndim)
    elif name == "max":
        want = t.amax(dim=dim, keepdim=keepdim)
    else:
        want = getattr(t, name)(dim=dim, keepdim=keepdim)
    torch_style = getattr(Tensor(x), name)(dim=dim, keepdim=keepdim)
    numpy_style = getattr(Tensor(x), name)(axis=dim, keepdims=keepdim)
    for got in (torch_style, numpy_style):
        assert got.shape == tuple(want.shape) and got.dtype == np.float32
        np.testing.assert_allclose(got.data, want.numpy(), rtol=1e-6, atol=1e-6)


def test_reduction_dim_positional_and_gradient():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    a = Tensor(x, requires_grad=True)
    a.sum(1, keepdim=True).sum().backward()
    np.testing.assert_array_equal(a.grad.data, np.ones_like(x))


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reduction_both_spellings_is_a_type_error(name):
    t = Tensor(np.ones((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="both axis=0 and dim=1"):
        getattr(t, name)(axis=0, dim=1)
    with pytest.raises(TypeError, match="both keepdims=True and keepdim=False"):
        getattr(t, name)(dim=0, keepdims=True, keepdim=False)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_takes_dim(dim):
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    t = torch.from_numpy(x)
    for ours, theirs, cls, tcls in (
        (softmax, F.softmax, Softmax, torch.nn.Softmax),
        (log_softmax, F.log_softmax, LogSoftmax, torch.nn.LogSoftmax),
    ):
        want = theirs(t, dim=dim).numpy()
        for got in (ours(Tensor(x), dim=dim), ours(Tensor(x), axis=dim), cls(dim=dim)(Tensor(x))):
            np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cls(dim)(Tensor(x)).data, tcls(dim)(t).numpy(), atol=1e-6)
    # the default stays the last axis
    np.testing.assert_allclose(softmax(Tensor(x)).data, F.softmax(t, dim=-1).numpy(), atol=1e-6)


def test_softmax_both_spellings_is_a_type_error():
    x = Tensor(np.ones((2, 3), dtype=np.float32))
    for call in (
        lambda: softmax(x, axis=0, dim=1),
        lambda: log_softmax(x, axis=0, dim=1),
        lambda: Softmax(axis=0, dim=1),
        lambda: LogSoftmax(axis=0, dim=1),
    ):
        with pytest.raises(TypeError, match="both axis=0 and dim=1"):
            call()
