"""tinytorch.core.losses against torch.nn.functional: values, reductions, dtypes, errors."""

import math

import numpy as np
import pytest

from tinytorch.core.activations import log_softmax
from tinytorch.core.losses import BCEWithLogitsFunction, CrossEntropyFunction
from tinytorch.core.tensor import ShapeError, Tensor
from tinytorch.nn import (
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    MSELoss,
    binary_cross_entropy_with_logits,
    cross_entropy,
    mse_loss,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["float32", "float64"]
REDUCTIONS = ["mean", "sum", "none"]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-12)}
STABLE = dict(over="raise", invalid="raise", divide="raise")


def t(a):
    return torch.from_numpy(np.array(a))


def random_logits(n, c, dtype, scale=3.0, seed=0):
    return (np.random.default_rng(seed).standard_normal((n, c)) * scale).astype(dtype)


# ---- mean squared error -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(8,), (4, 3), (2, 3, 5)])
def test_mse_matches_torch(shape, reduction, dtype):
    rng = np.random.default_rng(0)
    pred = rng.standard_normal(shape).astype(dtype)
    target = rng.standard_normal(shape).astype(dtype)
    got = mse_loss(Tensor(pred, dtype=dtype), target, reduction=reduction)
    want = F.mse_loss(t(pred), t(target), reduction=reduction).numpy()
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got.data, want, **TOL[dtype])


def test_mse_converts_numpy_targets_to_the_prediction_dtype():
    pred = Tensor([1.0, 2.0])
    assert mse_loss(pred, np.array([0.0, 0.0])).dtype == np.float32  # float64 array target
    assert mse_loss(pred, [1, 2]).item() == 0.0  # a list of ints
    target = Tensor([0.5, 0.5])
    assert mse_loss(pred, target).item() == pytest.approx((0.25 + 2.25) / 2)


@pytest.mark.parametrize("pred_shape,target_shape", [((4, 1), (4,)), ((4,), (4, 1)), ((3, 2), (2,)),
                                                     ((5,), (4,))])
def test_mse_refuses_shapes_that_differ(pred_shape, target_shape):
    with pytest.raises(ShapeError) as info:
        mse_loss(Tensor(np.zeros(pred_shape)), np.zeros(target_shape))
    assert str(pred_shape) in str(info.value) and str(target_shape) in str(info.value)


def test_mse_composes_tensor_ops():
    pred = Tensor([1.0, 2.0], requires_grad=True)
    loss = mse_loss(pred, [0.0, 0.0])
    assert loss._ctx is not None and loss._ctx.fn.__name__ == "Mean", (
        "mse_loss is built from Tensor ops, the last one Mean"
    )


# ---- cross-entropy ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore", [None, -100, 3])
def test_cross_entropy_matches_torch(ignore, reduction, dtype):
    n, c = 16, 7
    logits = random_logits(n, c, dtype)
    target = np.random.default_rng(1).integers(0, c, size=n)
    kwargs = {}
    if ignore == -100:
        target[[1, 4, 5, 11]] = -100
    elif ignore == 3:
        kwargs["ignore_index"] = 3  # a real class index can be ignored too
    got = cross_entropy(Tensor(logits, dtype=dtype), target, reduction=reduction, **kwargs)
    want = F.cross_entropy(t(logits), t(target), reduction=reduction, **kwargs).numpy()
    assert got.dtype == dtype, f"{reduction}: float creep, {np.dtype(dtype)} became {got.dtype}"
    assert got.shape == want.shape
    np.testing.assert_allclose(got.data, want, **TOL[dtype])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_all_targets_ignored_matches_torch(reduction):
    logits = random_logits(4, 5, np.float32)
    target = np.full(4, -100)
    with np.errstate(**STABLE):
        got = cross_entropy(Tensor(logits), target, reduction=reduction).data
    want = F.cross_entropy(t(logits), t(target), reduction=reduction).numpy()
    np.testing.assert_array_equal(got, want)  # mean: nan (0 / 0); sum: 0; none: zeros
    assert got.dtype == np.float32


def test_cross_entropy_equals_its_composed_twin():
    logits = random_logits(10, 6, np.float64, seed=3)
    target = np.random.default_rng(3).integers(0, 6, size=10)
    twin = -log_softmax(Tensor(logits, dtype=np.float64)).data[np.arange(10), target]
    got = cross_entropy(Tensor(logits, dtype=np.float64), target, reduction="none").data
    np.testing.assert_allclose(got, twin, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cross_entropy_is_stable_for_huge_logits(dtype):
    logits = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 0.0], [1e4, 1e4, -1e4]],
                      dtype=dtype)
    target = np.array([1, 1, 2])
    with np.errstate(**STABLE):
        got = cross_entropy(Tensor(logits, dtype=dtype), target, reduction="none").data
    want = F.cross_entropy(t(logits), t(target), reduction="none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("target", [
    [0, 2, 1], np.array([0, 2, 1], dtype=np.int32), np.array([0, 2, 1], dtype=np.uint8),
    Tensor([0, 2, 1]), Tensor([0, 2, 1], dtype=np.int64), np.array([0.0, 2.0, 1.0]),
], ids=["list", "int32", "uint8", "float32-tensor", "int64-tensor", "float64-array"])
def test_cross_entropy_accepts_class_indices_in_any_form(target):
    logits = random_logits(3, 4, np.float32)
    want = F.cross_entropy(t(logits), t([0, 2, 1])).item()
    got = cross_entropy(Tensor(logits), target)
    assert got.dtype == np.float32
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_cross_entropy_rejects_fractional_targets():
    logits = Tensor(random_logits(3, 4, np.float32))
    for bad in (np.array([0.0, 1.5, 2.0]), np.array([0.0, np.nan, 1.0]), Tensor([0.2, 0.3, 0.5])):
        with pytest.raises(ValueError, match="class indices"):
            cross_entropy(logits, bad)


def test_cross_entropy_sequence_logits_explain_the_reshape():
    logits = Tensor(np.zeros((4, 8, 65), dtype=np.float32))
    with pytest.raises(ShapeError) as info:
        cross_entropy(logits, np.zeros((4, 8), dtype=np.int64))
    text = str(info.value)
    assert "(4, 8, 65)" in text and "(B*T, C)" in text and "(B*T,)" in text
    assert "reshape(32, 65)" in text and "reshape(32)" in text
    # ... and the reshape it recommends works:
    loss = cross_entropy(logits.reshape(32, 65), np.zeros(32, dtype=np.int64))
    assert loss.item() == pytest.approx(math.log(65), rel=1e-6)


def test_cross_entropy_other_logit_ranks():
    with pytest.raises(ShapeError, match=r"\(5,\).*reshape\(1, -1\)"):
        cross_entropy(Tensor(np.zeros(5)), np.array([1]))
    with pytest.raises(ShapeError, match=r"\(\)"):
        cross_entropy(Tensor(0.0), np.array([0]))


@pytest.mark.parametrize("target_shape", [(4, 1), (3,), (5,), (2, 2)])
def test_cross_entropy_target_shape_errors_name_both_shapes(target_shape):
    with pytest.raises(ShapeError) as info:
        cross_entropy(Tensor(np.zeros((4, 3))), np.zeros(target_shape, dtype=np.int64))
    assert "(4, 3)" in str(info.value) and str(target_shape) in str(info.value)


def test_cross_entropy_one_hot_targets_get_a_hint():
    with pytest.raises(ShapeError, match="argmax"):
        cross_entropy(Tensor(np.zeros((4, 3))), np.eye(3)[[0, 1, 2, 0]])


@pytest.mark.parametrize("bad,shown", [
    ([0, 3, 1, 2], "[3]"), ([0, -1, 1, 2], "[-1]"), ([5, 3, -7, 1], "[-7, 3, 5]"),
    ([-100, 1, 2, 9], "[9]"),
])
def test_cross_entropy_out_of_range_targets_name_values_and_range(bad, shown):
    with pytest.raises(ValueError) as info:
        cross_entropy(Tensor(np.zeros((4, 3))), np.array(bad))
    assert shown in str(info.value) and "[0, 3)" in str(info.value)


def test_cross_entropy_ignored_values_are_not_range_checked():
    logits = Tensor(np.zeros((3, 3)))
    assert cross_entropy(logits, [7, 1, 2], ignore_index=7).item() == pytest.approx(math.log(3))
    assert cross_entropy(logits, [-100, 1, -100]).item() == pytest.approx(math.log(3))


def test_cross_entropy_rejects_unknown_reduction():
    with pytest.raises(ValueError, match="'avg'"):
        cross_entropy(Tensor(np.zeros((2, 3))), [0, 1], reduction="avg")


def test_cross_entropy_records_target_as_a_parameter():
    """The contract with module 06: one input (the logits); target etc. are parameters."""
    logits = Tensor(random_logits(3, 4, np.float32), requires_grad=True)
    loss = cross_entropy(logits, Tensor([0, 3, 1]), ignore_index=1, reduction="sum")
    ctx = loss._ctx
    assert ctx.fn is CrossEntropyFunction and ctx.parents == (logits,)
    assert set(ctx.params) == {"target", "ignore_index", "reduction"}
    assert ctx.params["target"].dtype == np.int64
    np.testing.assert_array_equal(ctx.params["target"], [0, 3, 1])
    assert ctx.params["ignore_index"] == 1 and ctx.params["reduction"] == "sum"


# ---- binary cross-entropy with logits -------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(9,), (4, 3), (2, 3, 2)])
def test_bce_with_logits_matches_torch(shape, reduction, dtype):
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal(shape) * 4).astype(dtype)
    target = rng.random(shape).astype(dtype)  # soft targets in [0, 1)
    target.flat[::2] = np.round(target.flat[::2])  # and some hard 0/1 labels
    got = binary_cross_entropy_with_logits(Tensor(logits, dtype=dtype), target, reduction=reduction)
    want = F.binary_cross_entropy_with_logits(t(logits), t(target), reduction=reduction).numpy()
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got.data, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bce_with_logits_is_stable_for_huge_logits(dtype):
    logits = np.array([1000.0, -1000.0, 1000.0, -1000.0, 50.0, -50.0, 0.0], dtype=dtype)
    target = np.array([0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 1.0], dtype=dtype)
    with np.errstate(**STABLE):
        got = binary_cross_entropy_with_logits(Tensor(logits, dtype=dtype), target,
                                               reduction="none").data
    want = F.binary_cross_entropy_with_logits(t(logits), t(target), reduction="none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_bce_with_logits_target_forms_and_dtype():
    logits = Tensor([0.5, -1.0, 2.0])
    want = F.binary_cross_entropy_with_logits(t(np.float32([0.5, -1.0, 2.0])),
                                              t(np.float32([1, 0, 1])))
    for target in ([1, 0, 1], np.array([1.0, 0.0, 1.0]), Tensor([1, 0, 1]),
                   np.array([True, False, True])):
        got = binary_cross_entropy_with_logits(logits, target)
        assert got.dtype == np.float32
        assert got.item() == pytest.approx(want.item(), rel=1e-6)


@pytest.mark.parametrize("target_shape", [(3,), (3, 2), (1, 3)])
def test_bce_with_logits_shape_errors_name_both_shapes(target_shape):
    with pytest.raises(ShapeError) as info:
        binary_cross_entropy_with_logits(Tensor(np.zeros((3, 1))), np.zeros(target_shape))
    assert "(3, 1)" in str(info.value) and str(target_shape) in str(info.value)


def test_bce_records_target_as_a_parameter():
    x = Tensor([0.5, -1.0], requires_grad=True)
    loss = binary_cross_entropy_with_logits(x, [1, 0], reduction="none")
    assert loss._ctx.fn is BCEWithLogitsFunction and loss._ctx.parents == (x,)
    assert loss._ctx.params["reduction"] == "none"
    assert loss._ctx.params["target"].dtype == np.float32


# ---- loss objects -------------------------------------------------------------------------

def test_loss_objects_call_their_functions():
    rng = np.random.default_rng(5)
    logits = Tensor(rng.standard_normal((5, 4)).astype(np.float32))
    labels = np.array([0, 3, -100, 2, 1])
    probs = rng.random((5, 4)).astype(np.float32)
    cases = [
        (MSELoss(), mse_loss(logits, probs)),
        (MSELoss(reduction="sum"), mse_loss(logits, probs, reduction="sum")),
        (BCEWithLogitsLoss(reduction="none"),
         binary_cross_entropy_with_logits(logits, probs, reduction="none")),
    ]
    for criterion, want in cases:
        np.testing.assert_array_equal(criterion(logits, probs).data, want.data)
        np.testing.assert_array_equal(criterion.forward(logits, probs).data, want.data)
    ce = CrossEntropyLoss(ignore_index=3, reduction="none")
    np.testing.assert_array_equal(
        ce(logits, labels.clip(0)).data,
        cross_entropy(logits, labels.clip(0), ignore_index=3, reduction="none").data,
    )
    np.testing.assert_array_equal(CrossEntropyLoss()(logits, labels).data,
                                  cross_entropy(logits, labels).data)


def test_loss_objects_repr_and_validation():
    assert repr(MSELoss()) == "MSELoss(reduction='mean')"
    assert repr(CrossEntropyLoss()) == "CrossEntropyLoss(ignore_index=-100, reduction='mean')"
    assert repr(CrossEntropyLoss(0, "sum")) == "CrossEntropyLoss(ignore_index=0, reduction='sum')"
    assert repr(BCEWithLogitsLoss(reduction="none")) == "BCEWithLogitsLoss(reduction='none')"
    for cls in (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss):
        with pytest.raises(ValueError, match="'elementwise_mean'"):
            cls(reduction="elementwise_mean")
