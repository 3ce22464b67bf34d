"""Module 09 (convolutions) as exported into the package.

Conv2d, MaxPool2d, AvgPool2d and Flatten against PyTorch with copied weights (forward and
every gradient, over shapes, strides, paddings, channel counts and rectangular kernels),
max-pool ties resolved as PyTorch does, central finite differences in float64 for every
gradient, im2col/col2im as adjoints, float32 kept, and the errors for bad input.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytorch.core.autograd import gradcheck
from tinytorch.core.convolutions import (
    AvgPool2dFunction,
    Conv2dFunction,
    MaxPool2dFunction,
    col2im,
    conv2d_loop,
    im2col,
)
from tinytorch.core.tensor import ShapeError, Tensor, manual_seed
from tinytorch.nn import AvgPool2d, Conv2d, Flatten, MaxPool2d

torch = pytest.importorskip("torch")
F = torch.nn.functional

CONV_CASES = [  # (N, C, H, W), C_out, kernel, stride, padding, bias
    ((2, 1, 8, 8), 4, 3, 1, 1, True),
    ((3, 3, 7, 6), 5, 3, 2, 0, True),
    ((2, 4, 9, 9), 2, 5, 1, 2, False),
    ((1, 2, 6, 7), 3, (3, 2), (2, 1), (1, 0), True),
    ((2, 16, 4, 4), 32, 3, 1, 1, True),
    ((1, 3, 5, 5), 2, 1, 1, 0, True),
    ((2, 2, 10, 8), 3, (2, 4), 3, (0, 2), False),
]


def conv_pair(shape, C_out, k, s, p, bias, seed=0, dtype=np.float32):
    """Our Conv2d and torch's nn.Conv2d with the same weights, and an input array."""
    manual_seed(seed)
    ours = Conv2d(shape[1], C_out, k, stride=s, padding=p, bias=bias)
    theirs = torch.nn.Conv2d(shape[1], C_out, k, stride=s, padding=p, bias=bias).to(
        torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.data))
        if bias:
            theirs.bias.copy_(torch.from_numpy(ours.bias.data))
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return ours, theirs, x


@pytest.mark.parametrize("shape, C_out, k, s, p, bias", CONV_CASES)
def test_conv2d_forward_and_gradients_match_torch(shape, C_out, k, s, p, bias):
    ours, theirs, x = conv_pair(shape, C_out, k, s, p, bias)
    xt = torch.tensor(x, requires_grad=True)
    want = theirs(xt)
    g = np.random.default_rng(1).standard_normal(tuple(want.shape)).astype(np.float32)
    want.backward(torch.from_numpy(g))
    xs = Tensor(x, requires_grad=True)
    got = ours(xs)
    got.backward(g)
    assert got.shape == tuple(want.shape) and got.dtype == np.float32
    np.testing.assert_allclose(got.data, want.detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(),
                               atol=1e-4, rtol=1e-4)
    assert xs.grad.dtype == np.float32 and ours.weight.grad.dtype == np.float32
    if bias:
        np.testing.assert_allclose(ours.bias.grad.data, theirs.bias.grad.numpy(),
                                   atol=1e-4, rtol=1e-4)
        assert ours.bias.grad.dtype == np.float32
    assert np.allclose(got.data, conv2d_loop(x, ours.weight.data,
                                             ours.bias.data if bias else None, s, p), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(N=st.integers(1, 3), C=st.integers(1, 4), C_out=st.integers(1, 4), H=st.integers(3, 9),
       W=st.integers(3, 9), kh=st.integers(1, 3), kw=st.integers(1, 3), sh=st.integers(1, 3),
       sw=st.integers(1, 3), ph=st.integers(0, 1), pw=st.integers(0, 1), seed=st.integers(0, 99))
def test_conv2d_random_geometry_matches_torch(N, C, C_out, H, W, kh, kw, sh, sw, ph, pw, seed):
    ours, theirs, x = conv_pair((N, C, H, W), C_out, (kh, kw), (sh, sw), (ph, pw), True, seed)
    xt = torch.tensor(x, requires_grad=True)
    want = theirs(xt)
    want.sum().backward()
    xs = Tensor(x, requires_grad=True)
    got = ours(xs)
    got.sum().backward()
    np.testing.assert_allclose(got.data, want.detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(), atol=1e-4,
                               rtol=1e-4)


@pytest.mark.parametrize("shape, C_out, k, s, p, bias", CONV_CASES[:4] + CONV_CASES[5:])
def test_conv2d_gradients_match_central_differences_float64(shape, C_out, k, s, p, bias):
    rng = np.random.default_rng(2)
    manual_seed(2)
    layer = Conv2d(shape[1], C_out, k, stride=s, padding=p, bias=bias)
    x = Tensor(rng.standard_normal(shape), dtype=np.float64, requires_grad=True)
    w = Tensor(layer.weight.data.astype(np.float64), dtype=np.float64, requires_grad=True)
    inputs = [x, w]
    if bias:
        inputs.append(Tensor(rng.standard_normal(C_out), dtype=np.float64, requires_grad=True))
    kwargs = dict(stride=layer.stride, padding=layer.padding)
    assert gradcheck(lambda *t: Conv2dFunction.apply(*t, **kwargs), inputs)


def test_first_layer_input_gets_no_gradient_and_weights_still_do():
    manual_seed(0)
    layer = Conv2d(1, 3, 3, padding=1)
    x = Tensor(np.ones((2, 1, 5, 5), dtype=np.float32))
    layer(x).sum().backward()
    assert x.grad is None and layer.weight.grad is not None and layer.bias.grad is not None


def test_im2col_and_col2im_are_adjoint_and_match_sliding_windows():
    rng = np.random.default_rng(3)
    for shape, k, s, p in [((2, 3, 7, 6), (3, 2), (2, 1), (1, 1)),
                           ((1, 2, 5, 5), (5, 5), (1, 1), (0, 0)),
                           ((3, 1, 8, 8), (2, 2), (2, 2), (0, 0))]:
        x = rng.standard_normal(shape)
        cols = im2col(x, k, s, p)
        xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
        view = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
        # rows (n, i, j), columns (u, v, c)
        want = view.transpose(0, 2, 3, 4, 5, 1).reshape(cols.shape)
        np.testing.assert_array_equal(cols, want)
        c = rng.standard_normal(cols.shape)
        back = col2im(c, shape, k, s, p)
        assert back.shape == shape
        assert np.isclose(np.sum(cols * c), np.sum(x * back), rtol=1e-12)


POOL_CASES = [  # kernel, stride, padding
    (2, None, 0), (3, 2, 1), (3, 1, 1), ((2, 3), (1, 2), (1, 1)), (2, 1, 0), (3, 3, 0),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_pooling_forward_and_gradients_match_torch(kind, k, s, p):
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 8)).astype(np.float32)
    ours = (MaxPool2d if kind == "max" else AvgPool2d)(k, stride=s, padding=p)
    torch_fn = F.max_pool2d if kind == "max" else F.avg_pool2d
    xt = torch.tensor(x, requires_grad=True)
    want = torch_fn(xt, k, stride=s, padding=p)
    g = np.random.default_rng(5).standard_normal(tuple(want.shape)).astype(np.float32)
    want.backward(torch.from_numpy(g))
    xs = Tensor(x, requires_grad=True)
    got = ours(xs)
    got.backward(g)
    assert got.shape == tuple(want.shape) and got.dtype == np.float32
    np.testing.assert_allclose(got.data, want.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=1e-5)
    assert xs.grad.dtype == np.float32


@pytest.mark.parametrize("k, s, p", [(2, None, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)])
def test_max_pool_ties_go_to_the_first_maximum_as_in_torch(k, s, p):
    """Integer-valued inputs (and ReLU-style zeros) make many tied windows, overlapping ones too."""
    rng = np.random.default_rng(6)
    x = np.maximum(rng.integers(-2, 3, size=(2, 3, 6, 7)), 0).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    want = F.max_pool2d(xt, k, stride=s, padding=p)
    g = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    want.backward(torch.from_numpy(g))
    xs = Tensor(x, requires_grad=True)
    MaxPool2d(k, stride=s, padding=p)(xs).backward(g)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=1e-6)
    ones = Tensor(np.ones((1, 1, 4, 4), dtype=np.float32), requires_grad=True)
    MaxPool2d(2)(ones).sum().backward()
    assert np.array_equal(ones.grad.data[0, 0], [[1, 0, 1, 0], [0, 0, 0, 0]] * 2)


@pytest.mark.parametrize("fn", [MaxPool2dFunction, AvgPool2dFunction])
@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_pooling_gradients_match_central_differences_float64(fn, k, s, p):
    layer = MaxPool2d(k, stride=s, padding=p)  # only for the normalized arguments
    x = Tensor(np.random.default_rng(7).standard_normal((2, 2, 6, 7)), dtype=np.float64,
               requires_grad=True)
    assert gradcheck(lambda t: fn.apply(t, kernel=layer.kernel_size, stride=layer.stride,
                                        padding=layer.padding), [x])


def test_max_pool_sends_the_gradient_to_the_nan_as_torch_does():
    """Issue #25: a NaN in a window makes the maximum NaN and takes its gradient, as in torch."""
    x = np.array([[[[1.0, np.nan], [0.5, 2.0]]]], dtype=np.float32)
    xt = torch.tensor(x, requires_grad=True)
    F.max_pool2d(xt, 2).sum().backward()
    assert xt.grad.numpy()[0, 0].tolist() == [[0, 1], [0, 0]], "torch itself changed"
    xs = Tensor(x, requires_grad=True)
    out = MaxPool2d(2)(xs)
    out.sum().backward()
    assert np.isnan(out.data).all(), f"the maximum of a window with a NaN is NaN, got {out.data}"
    assert xs.grad.data[0, 0].tolist() == [[0, 1], [0, 0]], (
        f"the gradient should go to the NaN, as torch sends it, got {xs.grad.data[0, 0]}: "
        "window > out is False against NaN, so record a NaN with | np.isnan(window)")


@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_max_pool_with_nans_matches_torch(k, s, p):
    """NaNs scattered (two in a window, overlapping windows, beside padding): same NaN outputs,
    same values elsewhere, same gradients; the last NaN of a window wins, as in torch."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    x[rng.random(x.shape) < 0.15] = np.nan
    x[0, 0, :2, :2] = np.nan  # a window of NaNs only
    xt = torch.tensor(x, requires_grad=True)
    want = F.max_pool2d(xt, k, stride=s, padding=p)
    g = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    want.backward(torch.from_numpy(g))
    xs = Tensor(x, requires_grad=True)
    got = MaxPool2d(k, stride=s, padding=p)(xs)
    got.backward(g)
    np.testing.assert_array_equal(got.data, want.detach().numpy())  # NaN where torch has NaN
    assert np.isnan(got.data).any() and not np.isnan(got.data).all()
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=1e-6)
    assert xs.grad.dtype == np.float32


@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_max_pool_gradient_beside_nans_matches_central_differences_float64(k, s, p):
    """Where the derivative exists (a finite input, through the windows without a NaN), the
    gradient equals float64 central differences; windows with a NaN give their inputs 0."""
    layer = MaxPool2d(k, stride=s, padding=p)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 6, 7))
    x[rng.random(x.shape) < 0.1] = np.nan
    x[0, 1, 2, 3] = np.nan

    def pool(a):
        return MaxPool2dFunction.forward(a, kernel=layer.kernel_size, stride=layer.stride,
                                         padding=layer.padding)[0]

    out = pool(x)
    g = np.where(np.isnan(out), 0.0, rng.standard_normal(out.shape))  # NaN outputs left out
    finite = ~np.isnan(out)
    assert finite.any() and not finite.all()
    xs = Tensor(x, dtype=np.float64, requires_grad=True)
    layer(xs).backward(g)
    eps = 1e-6
    for i in zip(*np.nonzero(~np.isnan(x))):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        numeric = np.sum(g[finite] * (pool(up)[finite] - pool(down)[finite])) / (2 * eps)
        assert abs(xs.grad.data[i] - numeric) < 1e-6, (i, xs.grad.data[i], numeric)


def test_flatten_matches_torch_and_keeps_nchw_order():
    manual_seed(0)
    conv = Conv2d(2, 3, 3, padding=1)  # its output is channels-last in memory
    x = np.random.default_rng(8).standard_normal((4, 2, 3, 5)).astype(np.float32)
    y = conv(Tensor(x))
    flat = Flatten()(y)
    assert flat.shape == (4, 45)
    np.testing.assert_array_equal(flat.data, np.ascontiguousarray(y.data).reshape(4, 45))
    theirs = torch.nn.Flatten()(torch.from_numpy(y.data.copy())).numpy()
    np.testing.assert_array_equal(flat.data, theirs)


def test_lenet_of_the_milestone_matches_torch_loss_and_every_gradient():
    # The milestone script itself is under test; it imports _common beside it. The data it
    # trains on comes from tito.course.datasets.
    import tinytorch.nn as tnn
    from tito.course.architectures import lenet

    manual_seed(0)
    ours = lenet(tnn)
    theirs = lenet(torch.nn)
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.copy_(torch.from_numpy(dict(ours.named_parameters())[name].data))
    ours.eval()  # dropout off: the two frameworks would draw different masks
    theirs.eval()
    rng = np.random.default_rng(9)
    x = rng.random((16, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    loss = tnn.cross_entropy(ours(Tensor(x)), Tensor(y, dtype=np.int64))
    loss.backward()
    want = F.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
    want.backward()
    assert abs(loss.item() - want.item()) < 1e-5
    for name, p in theirs.named_parameters():
        got = dict(ours.named_parameters())[name].grad
        np.testing.assert_allclose(got.data, p.grad.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("bad, words", [
    ((3, 8, 8), ["(3, 8, 8)", "4-D", "x.reshape(1, 3, 8, 8)"]),
    ((2, 64), ["(2, 64)", "4-D"]),
    ((2, 1, 8, 8), ["(2, 1, 8, 8)", "in_channels=3", "1 channels"]),
    ((1, 3, 2, 2), ["(1, 3, 2, 2)", "3x3", "2x2"]),
])
def test_conv2d_bad_input_names_the_shapes(bad, words):
    layer = Conv2d(3, 4, 3)
    with pytest.raises(ShapeError) as info:
        layer(Tensor(np.zeros(bad, dtype=np.float32)))
    assert all(w in str(info.value) for w in words), str(info.value)


def test_padding_counts_toward_the_kernel_size_check():
    one_pixel = Tensor(np.zeros((1, 1, 1, 1), dtype=np.float32))
    assert Conv2d(1, 1, 3, padding=1)(one_pixel).shape == (1, 1, 1, 1)
    with pytest.raises(ShapeError, match=r"5x5 kernel is larger than the padded input 4x4"):
        Conv2d(1, 1, 5, padding=1)(Tensor(np.zeros((1, 1, 2, 2), dtype=np.float32)))
    with pytest.raises(ShapeError, match=r"\(1, 2, 1, 1\)"):
        MaxPool2d(2)(Tensor(np.zeros((1, 2, 1, 1), dtype=np.float32)))


@pytest.mark.parametrize("make", [
    lambda: Conv2d(1, 1, 3, stride=0), lambda: Conv2d(1, 1, 3, stride=(1, 0)),
    lambda: MaxPool2d(2, stride=0), lambda: AvgPool2d(2, stride=(0, 2)),
])
def test_stride_zero_is_refused_with_its_value(make):
    with pytest.raises(ValueError, match=r"stride must be >= 1 .* got .*0.*never moves"):
        make()


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="in_channels"):
        Conv2d(0, 1, 3)
    with pytest.raises(TypeError, match="kernel_size"):
        Conv2d(1, 1, 2.5)
    with pytest.raises(ValueError, match="padding"):
        Conv2d(1, 1, 3, padding=-1)
    with pytest.raises(ValueError, match="at most half the kernel"):
        MaxPool2d(2, padding=2)
