"""Module 06 (autograd) as a user of the package sees it.

Gradients are checked three ways: central differences in float64 (`gradcheck`), PyTorch's
autograd on the same inputs, and hypothesis-generated broadcasting shapes. Then the engine:
deep graphs, reused nodes, freeing, no_grad, detach, float32 discipline and every error.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tinytorch import (
    DERIVATIVES,
    GradcheckError,
    Tensor,
    derivative,
    enable_grad,
    gradcheck,
    no_grad,
)
from tinytorch.core.activations import gelu, log_softmax, relu, sigmoid, silu, softmax, tanh
from tinytorch.core.autograd import backward, topological_order, unbroadcast
from tinytorch.core.losses import binary_cross_entropy_with_logits, cross_entropy, mse_loss
from tinytorch.core.tensor import Function, ShapeError, is_grad_enabled

try:  # property tests run only where hypothesis is installed
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import mutually_broadcastable_shapes
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    given = None


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


# ---- one table of operations, used by every comparison below -----------------------------
# name, TinyTorch function, PyTorch function (given the torch module), input shapes,
# domain of each input ("n": normal, "p": positive and away from 0, "nz": normal away from 0)


CASES = [
    # element-wise, with broadcasting
    ("add", lambda a, b: a + b, lambda T: lambda a, b: a + b, [(3, 4), (3, 4)], "nn"),
    ("add_bcast_row", lambda a, b: a + b, lambda T: lambda a, b: a + b, [(3, 4), (4,)], "nn"),
    ("add_bcast_both", lambda a, b: a + b, lambda T: lambda a, b: a + b, [(2, 1, 3), (4, 1)], "nn"),
    ("add_scalar_tensor", lambda a, b: a + b, lambda T: lambda a, b: a + b, [(), (3,)], "nn"),
    ("add_const", lambda a: 2.5 + a, lambda T: lambda a: 2.5 + a, [(2, 3)], "n"),
    ("sub_bcast", lambda a, b: a - b, lambda T: lambda a, b: a - b, [(2, 3), (2, 1)], "nn"),
    ("rsub_const", lambda a: 1.0 - a, lambda T: lambda a: 1.0 - a, [(3,)], "n"),
    ("mul", lambda a, b: a * b, lambda T: lambda a, b: a * b, [(2, 3), (2, 3)], "nn"),
    ("mul_bcast", lambda a, b: a * b, lambda T: lambda a, b: a * b, [(4, 1, 3), (2, 1)], "nn"),
    ("mul_self", lambda a: a * a, lambda T: lambda a: a * a, [(5,)], "n"),
    ("div", lambda a, b: a / b, lambda T: lambda a, b: a / b, [(2, 3), (2, 3)], "np"),
    ("div_bcast", lambda a, b: a / b, lambda T: lambda a, b: a / b, [(2, 3), (3,)], "np"),
    ("rdiv_const", lambda a: 1.0 / a, lambda T: lambda a: 1.0 / a, [(4,)], "p"),
    ("neg", lambda a: -a, lambda T: lambda a: -a, [(2, 3)], "n"),
    ("pow2", lambda a: a ** 2, lambda T: lambda a: a ** 2, [(2, 3)], "n"),
    ("pow3", lambda a: a ** 3, lambda T: lambda a: a ** 3, [(2, 3)], "n"),
    ("pow_half", lambda a: a ** 0.5, lambda T: lambda a: a ** 0.5, [(2, 3)], "p"),
    ("pow_neg", lambda a: a ** -1.5, lambda T: lambda a: a ** -1.5, [(2, 3)], "p"),
    ("exp", lambda a: a.exp(), lambda T: lambda a: a.exp(), [(2, 3)], "n"),
    ("log", lambda a: a.log(), lambda T: lambda a: a.log(), [(2, 3)], "p"),
    # matrix products, as np.matmul
    ("matmul", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(3, 4), (4, 5)], "nn"),
    ("matmul_batched", lambda a, b: a @ b,
     lambda T: lambda a, b: a @ b, [(2, 3, 4), (2, 4, 5)], "nn"),
    ("matmul_bcast_b", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(2, 3, 4), (4, 5)], "nn"),
    ("matmul_bcast_a", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(3, 4), (2, 4, 5)], "nn"),
    ("matmul_bcast_4d", lambda a, b: a @ b,
     lambda T: lambda a, b: a @ b, [(2, 1, 3, 4), (3, 4, 2)], "nn"),
    ("matmul_vec_mat", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(4,), (4, 3)], "nn"),
    ("matmul_mat_vec", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(2, 3, 4), (4,)], "nn"),
    ("matmul_vec_batch", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(4,), (2, 4, 3)], "nn"),
    ("matmul_dot", lambda a, b: a @ b, lambda T: lambda a, b: a @ b, [(4,), (4,)], "nn"),
    # shapes
    ("reshape", lambda a: a.reshape(4, 6), lambda T: lambda a: a.reshape(4, 6), [(2, 3, 4)], "n"),
    ("reshape_infer", lambda a: a.reshape(-1), lambda T: lambda a: a.reshape(-1), [(2, 3, 4)], "n"),
    ("transpose", lambda a: a.transpose(),
     lambda T: lambda a: a.transpose(-2, -1), [(2, 3, 4)], "n"),
    ("transpose_0_2", lambda a: a.transpose(0, 2),
     lambda T: lambda a: a.transpose(0, 2), [(2, 3, 4)], "n"),
    ("permute", lambda a: a.permute(2, 0, 1),
     lambda T: lambda a: a.permute(2, 0, 1), [(2, 3, 4)], "n"),
    ("permute_neg", lambda a: a.permute(-1, 0, -2),
     lambda T: lambda a: a.permute(-1, 0, -2), [(2, 3, 4)], "n"),
    ("T", lambda a: a.T, lambda T: lambda a: a.permute(*range(a.ndim - 1, -1, -1)), [(3, 4)], "n"),
    # indexing
    ("getitem_int", lambda a: a[1], lambda T: lambda a: a[1], [(3, 4)], "n"),
    ("getitem_slices", lambda a: a[:, 1:, ::2],
     lambda T: lambda a: a[:, 1:, ::2], [(2, 3, 4)], "n"),
    ("getitem_neg_step", lambda a: a[::-1, 1], lambda T: lambda a: a.flip(0)[:, 1], [(3, 4)], "n"),
    ("getitem_none_ellipsis", lambda a: a[None, ..., 2],
     lambda T: lambda a: a[None, ..., 2], [(2, 3, 4)], "n"),
    ("getitem_repeats", lambda a: a[np.array([2, 0, 2, 2])],
     lambda T: lambda a: a[T.tensor([2, 0, 2, 2])], [(3, 4)], "n"),
    ("getitem_list", lambda a: a[[1, 1, 0]], lambda T: lambda a: a[[1, 1, 0]], [(3, 4)], "n"),
    ("getitem_2d_repeats", lambda a: a[np.array([[0, 1], [1, 1]])],
     lambda T: lambda a: a[T.tensor([[0, 1], [1, 1]])], [(3, 4)], "n"),
    ("getitem_mixed", lambda a: a[:, np.array([3, 0, 3])],
     lambda T: lambda a: a[:, T.tensor([3, 0, 3])], [(2, 4)], "n"),
    ("getitem_pairs", lambda a: a[np.array([0, 1, 0]), np.array([2, 2, 2])],
     lambda T: lambda a: a[T.tensor([0, 1, 0]), T.tensor([2, 2, 2])], [(2, 3)], "n"),
    ("getitem_tensor_index", lambda a: a[Tensor(np.array([1, 1]), dtype=np.int64)],
     lambda T: lambda a: a[T.tensor([1, 1])], [(3, 2)], "n"),
    ("getitem_mask", lambda a: a[np.array([True, False, True])],
     lambda T: lambda a: a[T.tensor([True, False, True])], [(3, 2)], "n"),
    # reductions
    ("sum_all", lambda a: a.sum(), lambda T: lambda a: a.sum(), [(2, 3, 4)], "n"),
    ("sum_axis0", lambda a: a.sum(axis=0), lambda T: lambda a: a.sum(dim=0), [(2, 3, 4)], "n"),
    ("sum_neg_keep", lambda a: a.sum(axis=-1, keepdims=True),
     lambda T: lambda a: a.sum(dim=-1, keepdim=True), [(2, 3, 4)], "n"),
    ("sum_tuple", lambda a: a.sum(axis=(0, 2)),
     lambda T: lambda a: a.sum(dim=(0, 2)), [(2, 3, 4)], "n"),
    ("sum_tuple_neg_keep", lambda a: a.sum(axis=(-1, 0), keepdims=True),
     lambda T: lambda a: a.sum(dim=(-1, 0), keepdim=True), [(2, 3, 4)], "n"),
    ("sum_0d", lambda a: a.sum(), lambda T: lambda a: a.sum(), [()], "n"),
    ("mean_all", lambda a: a.mean(), lambda T: lambda a: a.mean(), [(2, 3, 4)], "n"),
    ("mean_axis1", lambda a: a.mean(axis=1), lambda T: lambda a: a.mean(dim=1), [(2, 3, 4)], "n"),
    ("mean_tuple_keep", lambda a: a.mean(axis=(0, -1), keepdims=True),
     lambda T: lambda a: a.mean(dim=(0, -1), keepdim=True), [(2, 3, 4)], "n"),
    ("max_all", lambda a: a.max(), lambda T: lambda a: T.amax(a), [(2, 3, 4)], "n"),
    ("max_axis", lambda a: a.max(axis=1), lambda T: lambda a: T.amax(a, dim=1), [(2, 3, 4)], "n"),
    ("max_neg_keep", lambda a: a.max(axis=-1, keepdims=True),
     lambda T: lambda a: T.amax(a, dim=-1, keepdim=True), [(2, 3, 4)], "n"),
    ("max_tuple", lambda a: a.max(axis=(0, 2)),
     lambda T: lambda a: T.amax(a, dim=(0, 2)), [(2, 3, 4)], "n"),
    # activations (module 02)
    ("relu", relu, lambda T: T.relu, [(3, 5)], "nz"),
    ("sigmoid", sigmoid, lambda T: T.sigmoid, [(3, 5)], "n"),
    ("tanh", tanh, lambda T: T.tanh, [(3, 5)], "n"),
    ("gelu", lambda a: gelu(a), lambda T: lambda a: T.nn.functional.gelu(a), [(3, 5)], "n"),
    ("gelu_tanh", lambda a: gelu(a, approximate="tanh"),
     lambda T: lambda a: T.nn.functional.gelu(a, approximate="tanh"), [(3, 5)], "n"),
    ("silu", silu, lambda T: T.nn.functional.silu, [(3, 5)], "n"),
    ("softmax", lambda a: softmax(a), lambda T: lambda a: T.softmax(a, -1), [(3, 5)], "n"),
    ("softmax_axis0", lambda a: softmax(a, axis=0),
     lambda T: lambda a: T.softmax(a, 0), [(3, 5)], "n"),
    ("softmax_3d", lambda a: softmax(a, axis=1),
     lambda T: lambda a: T.softmax(a, 1), [(2, 3, 4)], "n"),
    ("log_softmax", lambda a: log_softmax(a),
     lambda T: lambda a: T.log_softmax(a, -1), [(3, 5)], "n"),
    ("log_softmax_axis0", lambda a: log_softmax(a, axis=0),
     lambda T: lambda a: T.log_softmax(a, 0), [(3, 5)], "n"),
    # losses (module 04) and a composite
    ("mse", lambda a, b: mse_loss(a, b),
     lambda T: T.nn.functional.mse_loss, [(4, 3), (4, 3)], "nn"),
    ("mlp", lambda x, w, b: relu(x @ w + b).sum(axis=1).mean(),
     lambda T: lambda x, w, b: T.relu(x @ w + b).sum(dim=1).mean(), [(4, 3), (3, 5), (5,)], "nnn"),
]

CASE_IDS = [c[0] for c in CASES]


def make_arrays(shapes, domains, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, domain in zip(shapes, domains):
        a = rng.standard_normal(shape)
        if domain == "p":
            a = np.abs(a) + 0.5
        elif domain == "nz":
            a = np.where(np.abs(a) < 0.1, a + np.sign(a + 1e-12) * 0.2, a)
        arrays.append(np.asarray(a, dtype=dtype))
    return arrays


def leaves(arrays, dtype=np.float64):
    return [Tensor(a, dtype=dtype, requires_grad=True) for a in arrays]


# ---- 1. central differences in float64 ----------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradcheck_every_op(case):
    name, fn, _, shapes, domains = case
    inputs = leaves(make_arrays(shapes, domains, seed=len(name)))
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_cross_entropy(reduction):
    logits = Tensor(np.random.default_rng(0).standard_normal((5, 4)), dtype=np.float64,
                    requires_grad=True)
    target = np.array([0, 3, -100, 1, 3])
    assert gradcheck(lambda x: cross_entropy(x, target, reduction=reduction), [logits])
    other = np.array([0, 3, 2, 1, 3])
    assert gradcheck(lambda x: cross_entropy(x, other, ignore_index=2, reduction=reduction),
                     [logits])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_bce_with_logits(reduction):
    rng = np.random.default_rng(1)
    logits = Tensor(rng.standard_normal((3, 4)) * 3, dtype=np.float64, requires_grad=True)
    labels = rng.uniform(size=(3, 4))  # soft labels work too
    assert gradcheck(lambda x: binary_cross_entropy_with_logits(x, labels, reduction=reduction),
                     [logits])


def test_gradcheck_cross_entropy_with_target_as_an_input():
    """The rule also accepts the target as a second (integer, non-differentiable) input."""
    from tinytorch.core.losses import CrossEntropyFunction

    logits = Tensor(np.random.default_rng(2).standard_normal((4, 3)), dtype=np.float64,
                    requires_grad=True)
    target = Tensor(np.array([2, 0, 1, 1]), dtype=np.int64)
    fn = lambda x: CrossEntropyFunction.apply(x, target, ignore_index=-100, reduction="mean")  # noqa: E731
    assert gradcheck(fn, [logits])


# ---- 2. PyTorch's autograd on the same inputs ---------------------------------------------
def torch_grads(torch, torch_fn, arrays, weights):
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = torch_fn(*tensors)
    out.backward(torch.tensor(weights, dtype=out.dtype))
    return [t.grad.numpy() for t in tensors]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_op_matches_pytorch(case, torch):
    name, fn, torch_fn, shapes, domains = case
    arrays = make_arrays(shapes, domains, seed=100 + len(name))
    tensors = leaves(arrays)
    out = fn(*tensors)
    weights = np.random.default_rng(7).standard_normal(out.shape)
    backward(out, weights)
    want = torch_grads(torch, torch_fn(torch), arrays, weights)
    # module 02's erfc is a fitted formula (error about 1e-7); PyTorch's erf is exact
    atol = 1e-7 if name == "gelu" else 1e-9
    for i, (t, w) in enumerate(zip(tensors, want)):
        assert t.grad.shape == t.shape == w.shape, f"{name}: input {i} grad shape {t.grad.shape}"
        np.testing.assert_allclose(t.grad.data, w, rtol=1e-7, atol=atol, err_msg=f"{name} {i}")
    # float32: the same values to float32 precision, and float32 gradients
    tensors32 = leaves([a.astype(np.float32) for a in arrays], np.float32)
    out32 = fn(*tensors32)
    assert out32.dtype == np.float32, f"{name}: forward left float32"
    backward(out32, weights.astype(np.float32))
    for i, (t, w) in enumerate(zip(tensors32, want)):
        assert t.grad.dtype == np.float32, f"{name}: float32 input {i} got {t.grad.dtype}"
        np.testing.assert_allclose(t.grad.data, w, rtol=2e-4, atol=2e-5, err_msg=f"{name} f32 {i}")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_matches_pytorch(torch, reduction, ignore_index, dtype):
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((6, 5)) * 3).astype(dtype)
    target = np.array([1, 4, ignore_index, 0, 1, 2])  # with ignore_index=1, three rows are skipped
    ours = Tensor(logits, dtype=dtype, requires_grad=True)
    loss = cross_entropy(ours, target, ignore_index=ignore_index, reduction=reduction)
    weights = rng.standard_normal(loss.shape).astype(dtype)
    backward(loss, weights)
    theirs = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(
        theirs, torch.tensor(target), ignore_index=ignore_index, reduction=reduction
    )
    ref.backward(torch.tensor(weights))
    tol = dict(rtol=1e-7, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(loss.data, ref.detach().numpy(), **tol)
    np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), **tol)
    assert ours.grad.dtype == dtype


def test_cross_entropy_with_every_row_ignored_matches_pytorch(torch):
    logits = np.random.default_rng(9).standard_normal((2, 3))
    ours = Tensor(logits, dtype=np.float64, requires_grad=True)
    loss = cross_entropy(ours, np.array([-100, -100]))
    loss.backward()
    theirs = torch.tensor(logits, requires_grad=True)
    torch.nn.functional.cross_entropy(theirs, torch.tensor([-100, -100])).backward()
    assert np.isnan(loss.item())
    np.testing.assert_array_equal(ours.grad.data, theirs.grad.numpy())  # zeros in both


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_matches_pytorch(torch, reduction):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((4, 3)) * 4
    labels = (rng.uniform(size=(4, 3)) > 0.5).astype(np.float64)
    ours = Tensor(logits, dtype=np.float64, requires_grad=True)
    loss = binary_cross_entropy_with_logits(ours, labels, reduction=reduction)
    weights = rng.standard_normal(loss.shape)
    backward(loss, weights)
    theirs = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.binary_cross_entropy_with_logits(
        theirs, torch.tensor(labels), reduction=reduction
    )
    ref.backward(torch.tensor(weights))
    np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_with_ties_shares_like_torch_amax(torch, axis, keepdims):
    data = np.array([[3.0, 1.0, 3.0], [2.0, 2.0, 2.0], [0.0, 5.0, -1.0]])
    ours = Tensor(data, dtype=np.float64, requires_grad=True)
    out = ours.max(axis=axis, keepdims=keepdims)
    weights = np.arange(1, out.size + 1, dtype=np.float64).reshape(out.shape)
    backward(out, weights)
    theirs = torch.tensor(data, requires_grad=True)
    dim = () if axis is None else axis
    ref = torch.amax(theirs, dim=dim, keepdim=keepdims)
    ref.backward(torch.tensor(weights))
    np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy())
    # the gradient is shared, so the total is kept
    assert np.isclose(ours.grad.data.sum(), weights.sum())


# ---- 3. hypothesis: broadcasting shapes ------------------------------------------------
if given is not None:

    @settings(max_examples=40, deadline=None)
    @given(
        shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3),
        op=st.sampled_from(["add", "sub", "mul", "div"]),
        seed=st.integers(0, 2**16),
    )
    def test_broadcast_gradients_have_input_shapes_and_match_torch(shapes, op, seed):
        torch = pytest.importorskip("torch")
        a_shape, b_shape = shapes.input_shapes
        rng = np.random.default_rng(seed)
        a = rng.standard_normal(a_shape)
        b = rng.standard_normal(b_shape)
        if op == "div":
            b = np.abs(b) + 0.5
        fns = {
            "add": lambda x, y: x + y, "sub": lambda x, y: x - y,
            "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
        }
        x = Tensor(a, dtype=np.float64, requires_grad=True)
        y = Tensor(b, dtype=np.float64, requires_grad=True)
        out = fns[op](x, y)
        assert out.shape == shapes.result_shape
        weights = rng.standard_normal(out.shape)
        backward(out, weights)
        assert x.grad.shape == a_shape and y.grad.shape == b_shape
        tx = torch.tensor(a, requires_grad=True)
        ty = torch.tensor(b, requires_grad=True)
        fns[op](tx, ty).backward(torch.tensor(weights))
        np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(y.grad.data, ty.grad.numpy(), rtol=1e-9, atol=1e-12)

    @settings(max_examples=30, deadline=None)
    @given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3))
    def test_unbroadcast_inverts_broadcasting(shapes):
        small, _ = shapes.input_shapes
        grad = np.ones(shapes.result_shape, dtype=np.float32)
        reduced = unbroadcast(grad, small)
        assert reduced.shape == small and reduced.dtype == np.float32
        copies = int(np.prod(shapes.result_shape)) // max(int(np.prod(small)), 1)
        if int(np.prod(small)) > 0:
            assert np.all(reduced == copies)

else:  # pragma: no cover

    def test_hypothesis_property_tests():
        pytest.importorskip("hypothesis")


# ---- the engine -------------------------------------------------------------------------
def test_chain_of_10000_ops_has_no_recursion_error():
    x = Tensor([0.5, -1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.sum().backward()  # through Tensor.backward, as users call it
    np.testing.assert_allclose(x.grad.data, 1.0001 ** 10_000, rtol=1e-3)


def test_topological_order_puts_every_node_after_its_parents():
    rng = np.random.default_rng(5)
    nodes = [Tensor(rng.standard_normal(2), requires_grad=True) for _ in range(3)]
    for _ in range(60):  # a random DAG with many shared nodes
        a, b = rng.choice(len(nodes), size=2)
        nodes.append(nodes[a] * 0.5 + nodes[b])
    root = nodes[-1].sum()
    order = topological_order(root)
    position = {id(n): i for i, n in enumerate(order)}
    assert len(position) == len(order), "a node appears twice"
    assert order[-1] is root
    for n in order:
        if n._ctx is not None:
            for p in n._ctx.parents:
                if p.requires_grad:
                    assert position[id(p)] < position[id(n)]


def test_reused_nodes_accumulate():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x * x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 3 * x.data ** 2)
    # a diamond: h feeds two branches that meet again
    w = Tensor([2.0, -1.0, 0.5], requires_grad=True)
    h = w.exp()
    out = (h.log() * h + h / 2.0).sum()
    backward(out)
    want = (w.data + 1) * np.exp(w.data) + np.exp(w.data) / 2
    np.testing.assert_allclose(w.grad.data, want, rtol=1e-6)
    # the same leaf used by many ops
    v = Tensor([1.0], requires_grad=True)
    total = v
    for _ in range(99):
        total = total + v
    backward(total.sum())
    assert v.grad.item() == 100.0


def test_leaf_grad_accumulates_across_calls_and_interior_nodes_get_none():
    x = Tensor([1.0, 2.0], requires_grad=True)
    hidden = x * 3.0
    loss = hidden.sum()
    backward(loss, retain_graph=True)
    backward(loss)
    np.testing.assert_allclose(x.grad.data, [6.0, 6.0])
    assert hidden.grad is None and loss.grad is None
    assert isinstance(x.grad, Tensor) and x.grad.shape == x.shape and x.grad.dtype == x.dtype


def test_backward_on_a_leaf_and_on_a_one_element_tensor():
    leaf = Tensor(2.0, requires_grad=True)
    leaf.backward()
    assert leaf.grad.item() == 1.0
    one = Tensor([3.0], requires_grad=True)
    (one * 2.0).backward()  # shape (1,): the implicit gradient 1 is allowed
    assert one.grad.data.tolist() == [2.0]


def test_leaf_gradients_are_private_writable_copies():
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = Tensor([3.0, 4.0], requires_grad=True)
    start = np.array([1.0, 1.0], dtype=np.float32)
    backward(a + b, start)  # Add hands the same array to both parents
    assert not np.shares_memory(a.grad.data, b.grad.data)
    assert not np.shares_memory(a.grad.data, start)
    a.grad.data *= 0.5  # optimizers and gradient clipping write in place
    assert b.grad.data.tolist() == [1.0, 1.0] and start.tolist() == [1.0, 1.0]
    c = Tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    c.sum().backward()  # Sum's gradient is a read-only broadcast view
    c.grad.data += 1.0


def test_float32_stays_float32_even_with_a_float64_partner():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = Tensor([0.5, 0.25], dtype=np.float64, requires_grad=True)
    backward((x * y).sum())
    assert x.grad.dtype == np.float32 and y.grad.dtype == np.float64


def test_graph_is_freed_after_backward_unless_retained():
    x = Tensor(np.ones(100, dtype=np.float32), requires_grad=True)
    hidden = x.exp()
    alive = weakref.ref(hidden)
    loss = (hidden * 2.0).sum()
    del hidden
    backward(loss, retain_graph=True)
    gc.collect()
    assert alive() is not None
    backward(loss, retain_graph=True)
    np.testing.assert_allclose(x.grad.data, 4 * np.e, rtol=1e-6)
    backward(loss)
    gc.collect()
    assert alive() is None, "the graph still holds the intermediate tensor"
    assert loss._ctx.inputs is None and loss._ctx.output is None
    with pytest.raises(RuntimeError, match="retain_graph"):
        backward(loss)


def test_a_tensor_from_a_freed_graph_cannot_be_backpropagated_again():
    x = Tensor([1.0, 2.0], requires_grad=True)
    state = x * 2.0
    backward(state.sum())
    with pytest.raises(RuntimeError, match="detach"):
        backward((state * x).sum())  # state's own graph was freed
    before = x.grad.data.copy()
    backward((state.detach() * x).sum())
    np.testing.assert_allclose(x.grad.data, before + state.data)


def test_detach_stops_gradients_and_shares_data():
    x = Tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2.0).detach()
    assert not d.requires_grad and d._ctx is None
    backward((d * x).sum())
    np.testing.assert_allclose(x.grad.data, [2.0, 4.0])
    assert np.shares_memory(x.detach().data, x.data)


def test_no_grad_records_nothing_and_restores_state():
    w = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        y = w * 2.0 + 1.0
        assert not is_grad_enabled()
    assert y._ctx is None and not y.requires_grad and is_grad_enabled()
    with pytest.raises(ZeroDivisionError):
        with no_grad():
            1 / 0  # noqa: B018 (an error raised inside the block)
    assert is_grad_enabled()
    with no_grad():
        with enable_grad():
            assert (w * 2.0)._ctx is not None
        with no_grad():
            pass
        assert not is_grad_enabled()
    assert is_grad_enabled()
    guard = no_grad()
    with guard:
        with guard:  # the same object, entered twice
            pass
        assert not is_grad_enabled()
    assert is_grad_enabled()


def test_no_grad_as_a_decorator_with_and_without_parentheses():
    w = Tensor([1.0], requires_grad=True)

    @no_grad()
    def f(x):
        return x * w

    @no_grad
    def g(x):
        """Docstring kept."""
        return x * w

    assert f(Tensor([2.0]))._ctx is None and g(Tensor([2.0]))._ctx is None
    assert g.__doc__ == "Docstring kept." and is_grad_enabled()
    with pytest.raises(ZeroDivisionError):
        no_grad()(lambda: 1 / 0)()
    assert is_grad_enabled()


def test_top_level_exports():
    import tinytorch

    names = ("no_grad", "enable_grad", "gradcheck", "GradcheckError", "derivative", "DERIVATIVES")
    for name in names + ("backward",):
        assert hasattr(tinytorch, name), name


# ---- errors ------------------------------------------------------------------------------
def test_non_scalar_backward_says_what_to_pass():
    t = Tensor(np.ones((2, 3)), requires_grad=True) * 2.0
    with pytest.raises(RuntimeError) as info:
        t.backward()
    text = str(info.value)
    assert "(2, 3)" in text and "np.ones((2, 3))" in text and ".sum()" in text


def test_wrong_starting_gradient_shape_names_both_shapes():
    t = Tensor(np.ones((2, 3)), requires_grad=True) * 2.0
    with pytest.raises(ShapeError, match=r"\(3,\).*\(2, 3\)"):
        t.backward(Tensor(np.ones(3)))
    t.backward(Tensor(np.ones((2, 3))))  # a Tensor gradient of the right shape is fine


def test_backward_without_requires_grad_is_explained():
    with pytest.raises(RuntimeError, match="requires_grad=True"):
        Tensor([1.0, 2.0]).sum().backward()
    w = Tensor([1.0], requires_grad=True)
    with no_grad():
        loss = (w * 2.0).sum()
    with pytest.raises(RuntimeError, match="no_grad"):
        loss.backward()
    with pytest.raises(TypeError):
        backward(np.ones(3))


class _Cube(Function):
    @staticmethod
    def forward(a):
        return a * a * a


def test_missing_rule_names_the_class_and_the_decorator_and_changes_nothing():
    x = Tensor([2.0], requires_grad=True)
    loss = (_Cube.apply(x) + x).sum()
    with pytest.raises(RuntimeError, match=r"(?s)_Cube.*@derivative\(_Cube\)"):
        loss.backward()
    assert x.grad is None, "a failed backward must not leave partial gradients"


@pytest.fixture
def cube_rule():
    """Register a rule for _Cube for one test, as a later module would."""
    yield lambda rule: derivative(_Cube)(rule)
    DERIVATIVES.pop(_Cube, None)


def test_a_later_module_can_register_a_rule_and_check_it(cube_rule):
    @cube_rule
    def cube_backward(ctx, grad):
        (a,) = ctx.inputs
        return (grad * 3 * a * a,)

    x = Tensor(np.random.default_rng(6).standard_normal((2, 3)), np.float64, requires_grad=True)
    assert gradcheck(lambda t: _Cube.apply(t), [x])
    assert DERIVATIVES[_Cube] is cube_backward


def test_rule_with_wrong_gradient_shape_is_caught_naming_the_op(cube_rule):
    cube_rule(lambda ctx, grad: (grad[..., :1],))
    with pytest.raises(ShapeError, match=r"_Cube.*\(2, 1\).*\(2, 3\)"):
        _Cube.apply(Tensor(np.ones((2, 3)), requires_grad=True)).sum().backward()


def test_rule_returning_a_bare_array_is_explained(cube_rule):
    cube_rule(lambda ctx, grad: grad * 3)
    with pytest.raises(TypeError, match=r"_Cube.*tuple"):
        _Cube.apply(Tensor(np.ones(3), requires_grad=True)).sum().backward()


def test_derivative_rejects_non_functions():
    with pytest.raises(TypeError, match="Function subclass"):
        derivative(len)


def test_unbroadcast_errors_name_op_and_shapes():
    with pytest.raises(ShapeError, match=r"MatMul.*\(4, 3\).*\(4, 2\)"):
        unbroadcast(np.ones((4, 3)), (4, 2), "MatMul")
    assert unbroadcast(np.float32(2.0), ()).shape == ()


# ---- gradcheck itself ----------------------------------------------------------------------
def test_gradcheck_refuses_float32_and_explains():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(lambda x: x * 2.0, [Tensor([1.0, 2.0], requires_grad=True)])
    with pytest.raises(TypeError, match="Tensor"):
        gradcheck(lambda x: x, [np.ones(2)])
    with pytest.raises(ValueError, match="requires grad"):
        gradcheck(lambda x: x * 2.0, [Tensor([1.0], dtype=np.float64)])


def test_gradcheck_reports_input_element_and_both_values(cube_rule):
    cube_rule(lambda ctx, grad: (grad * ctx.inputs[0] * ctx.inputs[0],))  # forgot the 3
    a = Tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    b = Tensor([[0.5, -1.0, 2.0]], dtype=np.float64, requires_grad=True)
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda a, b: a.sum() * 0.0 + _Cube.apply(b), [a, b])
    text = str(info.value)
    assert "input 1" in text and "element (0, " in text
    assert "analytic" in text and "numerical" in text


def test_gradcheck_uses_a_projection_not_a_plain_sum(cube_rule):
    """Softmax rows sum to 1: a plain sum would accept a rule that returns zeros."""
    cube_rule(lambda ctx, grad: (np.zeros_like(grad),))
    x = Tensor(np.random.default_rng(8).standard_normal((2, 3)), np.float64, requires_grad=True)
    with pytest.raises(GradcheckError):
        gradcheck(lambda t: softmax(_Cube.apply(t)), [x])


def test_gradcheck_leaves_grads_and_data_as_found():
    x = Tensor([0.3, 0.7], dtype=np.float64, requires_grad=True)
    x.grad = Tensor(np.array([5.0, 5.0]), dtype=np.float64)
    before = x.data.copy()
    assert gradcheck(lambda t: (t * t).exp(), [x])
    assert x.grad.data.tolist() == [5.0, 5.0]
    np.testing.assert_array_equal(x.data, before)
    assert is_grad_enabled()
