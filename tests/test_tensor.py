"""Module 01's Tensor as a user of the package sees it."""

import numpy as np
import pytest

from tinytorch import ShapeError, Tensor
from tinytorch.core.tensor import Add, Function, MatMul, set_grad_enabled


def test_default_dtype_is_float32_and_explicit_dtype_is_kept():
    assert Tensor([1, 2, 3]).dtype == np.float32
    assert Tensor(np.random.default_rng(0).standard_normal(3)).dtype == np.float32
    assert Tensor([1, 2], dtype=np.float64).dtype == np.float64
    assert Tensor([1, 2], dtype=np.int64).dtype == np.int64


def test_no_float64_creep_from_numpy_scalars_and_constants():
    t = Tensor([1.0, 4.0])
    for result in (t / np.sqrt(64), t * np.float64(0.5), t + 1.5, Tensor([1.0]).exp() * 2.0,
                   t ** 0.5):
        assert result.dtype == np.float32


def test_constructor_does_not_copy_float32_arrays():
    a = np.ones(3, dtype=np.float32)
    assert np.shares_memory(Tensor(a).data, a)


def test_numpy_array_on_the_left_defers_to_tensor():
    out = np.ones(3, dtype=np.float32) + Tensor([1.0, 2.0, 3.0])
    assert isinstance(out, Tensor) and np.allclose(out.data, [2, 3, 4])


def test_arithmetic_matches_numpy_with_broadcasting():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 1, 3)).astype(np.float32)
    y = rng.standard_normal((5, 1)).astype(np.float32)
    a, b = Tensor(x), Tensor(y)
    for got, want in ((a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y)):
        assert got.shape == (4, 5, 3)
        np.testing.assert_allclose(got.data, want, rtol=1e-6)


def test_broadcast_error_names_both_shapes():
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(4,\)"):
        Tensor(np.ones((2, 3))) * Tensor(np.ones(4))


def test_matmul_is_vectorized_and_checks_inner_sizes():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).data, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match=r"\(3, 8, 16\).*\(8, 4\)"):
        Tensor(a) @ Tensor(np.ones((8, 4)))


def test_shape_ops_and_indexing():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(x)
    assert t.reshape(4, 6).shape == (4, 6)
    assert t.transpose().shape == (2, 4, 3)
    assert t.transpose(0, 1).shape == (3, 2, 4)
    assert t.permute(2, 1, 0).shape == (4, 3, 2)
    assert Tensor(x[0]).T.shape == (4, 3)
    np.testing.assert_array_equal(t[0, 1:, [0, 3]].data, x[0, 1:, [0, 3]])
    np.testing.assert_array_equal(t[x > 10].data, x[x > 10])
    with pytest.raises(ShapeError, match=r"\(2, 3, 4\)"):
        t.reshape(7, -1)


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
def test_reductions_match_numpy(name, axis):
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    for keepdims in (False, True):
        got = getattr(Tensor(x), name)(axis=axis, keepdims=keepdims)
        want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
        assert got.shape == np.shape(want) and got.dtype == np.float32
        np.testing.assert_allclose(got.data, want, rtol=1e-6)


def test_item_len_repr():
    assert Tensor([[3.0]]).item() == 3.0
    with pytest.raises(ValueError, match=r"\(2,\)"):
        Tensor([1.0, 2.0]).item()
    assert len(Tensor(np.zeros((5, 2)))) == 5
    assert repr(Tensor([1.0, 2.5])) == "Tensor([1. , 2.5])"
    assert repr(Tensor([1], dtype=np.int64)) == "Tensor([1], dtype=int64)"


def test_requires_grad_only_for_floats():
    with pytest.raises(TypeError, match="floating-point"):
        Tensor([1, 2], dtype=np.int64, requires_grad=True)


def test_records_parents_only_when_needed():
    a = Tensor([1.0], requires_grad=True)
    b = Tensor([2.0])
    assert (a + b)._ctx.fn is Add and (a + b)._ctx.parents == (a, b)
    assert (b + b)._ctx is None
    previous = set_grad_enabled(False)
    try:
        assert (a @ Tensor([[1.0]]).reshape(1))._ctx is None
    finally:
        set_grad_enabled(previous)
    c = a @ Tensor([3.0])
    assert c._ctx.fn is MatMul and c.requires_grad


def test_function_subclass_records_params():
    class Scale(Function):
        @staticmethod
        def forward(x, factor):
            return x * x.dtype.type(factor)

    out = Scale.apply(Tensor([2.0], requires_grad=True), factor=3)
    assert out.data.tolist() == [6.0] and out._ctx.params == {"factor": 3}


def test_fused_function_can_save_for_backward_only_when_recording():
    class Normalize(Function):
        saves_for_backward = True

        @staticmethod
        def forward(x):
            inv = 1.0 / np.sqrt((x * x).sum())
            return x * inv, inv

    x = Tensor([3.0, 4.0], requires_grad=True)
    out = Normalize.apply(x)
    np.testing.assert_allclose(out.data, [0.6, 0.8])
    assert out._ctx.saved == pytest.approx(0.2)
    assert Normalize.apply(Tensor([3.0, 4.0]))._ctx is None
