"""tinytorch.core.activations against torch.nn.functional: values, dtypes, stability, errors."""

import math

import numpy as np
import pytest

from tinytorch.core.activations import (
    GELUFunction,
    LogSoftmaxFunction,
    SoftmaxFunction,
    erf,
    erfc,
    gelu,
    log_softmax,
    relu,
    sigmoid,
    silu,
    softmax,
    tanh,
)
from tinytorch.core.tensor import Tensor
from tinytorch.nn import GELU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh

torch = pytest.importorskip("torch")
F = torch.nn.functional

# name -> (ours, torch's), both called as f(x)
ELEMENTWISE = {
    "relu": (relu, F.relu),
    "sigmoid": (sigmoid, torch.sigmoid),
    "tanh": (tanh, torch.tanh),
    "silu": (silu, F.silu),
    "gelu": (gelu, F.gelu),
    "gelu_tanh": (lambda x: gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
}
# (rtol, atol) against torch; the exact GELU uses a fitted erfc (relative error ~1e-7).
TOL = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-14)}
TOL_GELU = {np.float32: (1e-5, 1e-6), np.float64: (2e-7, 1e-14)}
DTYPES = [np.float32, np.float64]
STABLE = dict(over="raise", invalid="raise", divide="raise")


def data(shape, dtype, scale=4.0, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def theirs(fn, x, **kwargs):
    return fn(torch.from_numpy(np.array(x)), **kwargs).numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_matches_torch(name, dtype):
    ours, ref = ELEMENTWISE[name]
    x = data((7, 11), dtype)
    got = ours(Tensor(x, dtype=dtype))
    assert isinstance(got, Tensor)
    assert got.shape == x.shape
    assert got.dtype == dtype, f"{name} turned {np.dtype(dtype)} into {got.dtype}"
    rtol, atol = (TOL_GELU if name == "gelu" else TOL)[dtype]
    np.testing.assert_allclose(got.data, theirs(ref, x), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_is_stable_at_extremes(name, dtype):
    ours, ref = ELEMENTWISE[name]
    x = np.array([-1000.0, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 1000.0], dtype=dtype)
    with np.errstate(**STABLE):
        got = ours(Tensor(x, dtype=dtype)).data
    assert np.all(np.isfinite(got)), f"{name} of +-1000 gave {got}"
    assert got.dtype == dtype
    np.testing.assert_allclose(got, theirs(ref, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_nan_propagates(name):
    ours, _ = ELEMENTWISE[name]
    out = ours(Tensor([np.nan, 1.0])).data
    assert np.isnan(out[0]) and np.isfinite(out[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((5, 7), -1), ((5, 7), 0), ((2, 3, 4), 1), ((9,), 0)])
def test_softmax_and_log_softmax_match_torch(shape, axis, dtype):
    x = data(shape, dtype, seed=1)
    rtol, atol = TOL[dtype]
    for ours, ref in ((softmax, F.softmax), (log_softmax, F.log_softmax)):
        got = ours(Tensor(x, dtype=dtype), axis=axis)
        assert got.dtype == dtype and got.shape == x.shape
        np.testing.assert_allclose(got.data, theirs(ref, x, dim=axis), rtol=rtol, atol=atol)
    probs = softmax(Tensor(x, dtype=dtype), axis=axis).data
    np.testing.assert_allclose(probs.sum(axis=axis), 1.0, rtol=0,
                               atol=10 * np.finfo(dtype).eps * x.shape[axis])


def test_softmax_default_axis_is_last():
    x = data((3, 4), np.float32)
    np.testing.assert_array_equal(softmax(Tensor(x)).data, softmax(Tensor(x), axis=-1).data)
    np.testing.assert_array_equal(log_softmax(Tensor(x)).data, log_softmax(Tensor(x), axis=1).data)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_softmax_is_stable_at_extremes(dtype):
    x = np.array([[1000.0, 1000.0, -1000.0], [-1000.0, 0.0, 1000.0], [-1000.0, -1000.0, -1000.0],
                  [0.0, -np.inf, 1.0]], dtype=dtype)
    with np.errstate(**STABLE):
        probs = softmax(Tensor(x, dtype=dtype)).data
        logp = log_softmax(Tensor(x, dtype=dtype)).data
    np.testing.assert_allclose(probs, theirs(F.softmax, x, dim=-1), atol=1e-7)
    np.testing.assert_allclose(logp, theirs(F.log_softmax, x, dim=-1), rtol=1e-6)
    assert np.all(np.isfinite(logp[:3])), "log_softmax must stay finite where softmax underflows"
    assert logp[3, 1] == -np.inf and probs[3, 1] == 0.0, "a -inf score (a mask) has probability 0"


def test_log_softmax_is_log_of_softmax_where_finite():
    x = data((6, 9), np.float64, scale=300.0, seed=2)
    probs = softmax(Tensor(x, dtype=np.float64)).data
    logp = log_softmax(Tensor(x, dtype=np.float64)).data
    finite = probs > np.finfo(np.float64).tiny  # normal numbers: log(p) is accurate
    assert (~finite).any(), "the test wants some underflowed probabilities"
    np.testing.assert_allclose(np.log(probs[finite]), logp[finite], rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(logp))


def test_softmax_does_not_modify_its_input():
    x = data((4, 5), np.float32)
    before = x.copy()
    softmax(Tensor(x))
    log_softmax(Tensor(x))
    SoftmaxFunction.forward(x, axis=0)
    LogSoftmaxFunction.forward(x, axis=0)
    np.testing.assert_array_equal(x, before)


def test_erf_and_erfc_accuracy():
    x = np.linspace(-8.0, 8.0, 4001)
    want = torch.special.erf(torch.from_numpy(x)).numpy()
    assert np.abs(erf(x) - want).max() < 1e-7
    z = np.linspace(0.0, 20.0, 4001)
    want_c = np.array([math.erfc(v) for v in z])
    assert (np.abs(erfc(z) - want_c) / want_c).max() < 1.2e-7, "erfc must be accurate in the tail"
    np.testing.assert_allclose(erfc(-z), 2.0 - want_c, rtol=1e-7)
    np.testing.assert_array_equal(erf(-x), -erf(x))
    for dtype in DTYPES:
        v = np.array([-3.0, 0.0, 0.5], dtype=dtype)
        assert erf(v).dtype == dtype and erfc(v).dtype == dtype
    with np.errstate(**STABLE):
        np.testing.assert_array_equal(erfc(np.array([-1e4, 1e4])), [2.0, 0.0])


def test_exact_gelu_is_accurate_in_the_negative_tail():
    # x * Phi(x) for x << 0 is tiny; 1 + erf(x/sqrt(2)) would cancel to 0 here.
    x = np.array([-6.0, -8.0, -10.0])
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    got = gelu(Tensor(x, dtype=np.float64)).data
    np.testing.assert_allclose(got, want, rtol=2e-7)


def test_gelu_approximate_is_validated():
    x = Tensor([1.0, 2.0])
    for bad in ("exact", "Tanh", None, True):
        with pytest.raises(ValueError, match="none.*tanh"):
            gelu(x, approximate=bad)
        with pytest.raises(ValueError, match="none.*tanh"):
            GELU(approximate=bad)
        with pytest.raises(ValueError, match="none.*tanh"):
            GELUFunction.forward(x.data, approximate=bad)


def test_accepts_lists_and_arrays():
    for fn in (relu, sigmoid, tanh, gelu, silu, softmax, log_softmax):
        out = fn([[-1.0, 0.5, 2.0]])
        assert isinstance(out, Tensor) and out.shape == (1, 3) and out.dtype == np.float32
        # A NumPy float64 array becomes a float32 Tensor, as Tensor(array) does.
        assert fn(np.array([-1.0, 0.5])).dtype == np.float32


def test_objects_call_their_functions():
    x = Tensor(data((3, 4), np.float32))
    pairs = [
        (ReLU(), relu(x)), (Sigmoid(), sigmoid(x)), (Tanh(), tanh(x)), (SiLU(), silu(x)),
        (GELU(), gelu(x)), (GELU("tanh"), gelu(x, approximate="tanh")),
        (Softmax(axis=0), softmax(x, axis=0)), (LogSoftmax(), log_softmax(x)),
    ]
    for layer, want in pairs:
        np.testing.assert_array_equal(layer(x).data, want.data)
        np.testing.assert_array_equal(layer.forward(x).data, want.data)
    assert [repr(m) for m in (ReLU(), Sigmoid(), Tanh(), SiLU(), GELU(), GELU("tanh"),
                              Softmax(), LogSoftmax(axis=0))] == [
        "ReLU()", "Sigmoid()", "Tanh()", "SiLU()", "GELU(approximate='none')",
        "GELU(approximate='tanh')", "Softmax(axis=-1)", "LogSoftmax(axis=0)",
    ]


def test_ops_record_their_parameters_for_autograd():
    x = Tensor(data((2, 3), np.float32), requires_grad=True)
    y = gelu(x, approximate="tanh")
    assert y._ctx.fn is GELUFunction and y._ctx.params == {"approximate": "tanh"}
    assert y._ctx.parents == (x,)
    s = softmax(x, axis=0)
    assert s._ctx.fn is SoftmaxFunction and s._ctx.params == {"axis": 0}
    assert relu(Tensor([1.0]))._ctx is None, "no record without requires_grad"
