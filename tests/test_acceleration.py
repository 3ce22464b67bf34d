"""Module 17's fast kernels against the plain ones, the kernel tables, and the run-time switches.

Every fast kernel is checked three ways: its values against the plain rule or op it replaces
(float32), its gradients by central differences in float64 (gradcheck, with the kernel
switched on in its table), and, for attention, against PyTorch's autograd.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytorch.core.activations import GELUFunction, gelu
from tinytorch.core.attention import AttentionFunction, scaled_dot_product_attention
from tinytorch.core.autograd import (
    DERIVATIVES, KERNELS, cross_entropy_backward, gelu_backward, gradcheck, kernel,
)
from tinytorch.core.layers import Parameter
from tinytorch.core.losses import CrossEntropyFunction, cross_entropy
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf import acceleration as acc


def f32(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def f64(*shape, seed=0, scale=1.0):
    data = np.random.default_rng(seed).standard_normal(shape) * scale
    return Tensor(data, dtype=np.float64, requires_grad=True)


@pytest.fixture(autouse=True)
def plain_afterwards():
    """Every test starts and ends with the plain framework."""
    assert acc.active_kernels() == ()
    yield
    acc.use_fast_kernels(False)


# ---- the tables and the switches -----------------------------------------------------------
def test_tables_start_plain_and_switch_both_ways():
    assert KERNELS == {} and kernel(AttentionFunction) is AttentionFunction
    assert DERIVATIVES[GELUFunction] is gelu_backward
    names = acc.use_fast_kernels(True)
    assert set(names) == {"gelu_backward_inplace", "cross_entropy_backward_inplace",
                          "attention_keep_probs"}
    assert DERIVATIVES[GELUFunction] is acc.gelu_backward_inplace
    assert DERIVATIVES[CrossEntropyFunction] is acc.cross_entropy_backward_inplace
    assert kernel(AttentionFunction) is acc.AttentionKeepFunction
    assert acc.use_fast_kernels(True) == names  # idempotent: the plain rules are still known
    assert acc.use_fast_kernels(False) == ()
    assert DERIVATIVES[GELUFunction] is gelu_backward
    assert DERIVATIVES[CrossEntropyFunction] is cross_entropy_backward
    assert KERNELS == {}


def test_context_manager_restores_the_previous_state():
    with acc.fast_kernels() as names:
        assert names == acc.active_kernels() and len(names) == 3
        with acc.fast_kernels(False) as inner:
            assert inner == () and kernel(AttentionFunction) is AttentionFunction
        assert acc.active_kernels() == names
    assert acc.active_kernels() == ()
    with pytest.raises(RuntimeError):
        with acc.fast_kernels():
            raise RuntimeError("boom")
    assert acc.active_kernels() == ()


def test_bad_switch_argument_is_named():
    with pytest.raises(TypeError, match="True or False"):
        acc.use_fast_kernels("yes")


def test_a_rule_registered_by_someone_else_is_put_back():
    def custom(ctx, grad):
        return gelu_backward(ctx, grad)

    DERIVATIVES[GELUFunction] = custom
    try:
        acc.use_fast_kernels(True)
        acc.use_fast_kernels(False)
        assert DERIVATIVES[GELUFunction] is custom
    finally:
        DERIVATIVES[GELUFunction] = gelu_backward


# ---- each kernel against the plain one -------------------------------------------------------
def _backward_of(fn, x, **kw):
    out = fn(x, **kw)
    out.backward(Tensor(f32(*out.shape, seed=99)))
    return out.data, x.grad.data


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_kernel_matches_plain_and_gradcheck(approximate):
    x = Tensor(f32(64, 48, seed=1, scale=3.0), requires_grad=True)
    y0, g0 = _backward_of(gelu, x, approximate=approximate)
    x.grad = None
    with acc.fast_kernels():
        y1, g1 = _backward_of(gelu, x, approximate=approximate)
        gradcheck(lambda t: gelu(t, approximate=approximate), [f64(4, 5, seed=2, scale=2.0)])
    assert g1.dtype == np.float32
    np.testing.assert_array_equal(y0, y1)
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_kernel_matches_plain_and_gradcheck(reduction):
    target = np.random.default_rng(3).integers(0, 11, 20)
    target[[2, 9]] = -100

    def run():
        logits = Tensor(f32(20, 11, seed=4, scale=2.0), requires_grad=True)
        loss = cross_entropy(logits, target, reduction=reduction)
        loss.backward(Tensor(f32(20, seed=5)) if reduction == "none" else None)
        return loss.data, logits.grad.data

    l0, g0 = run()
    with acc.fast_kernels():
        l1, g1 = run()
        gradcheck(lambda z: cross_entropy(z, target, reduction=reduction).sum(),
                  [f64(20, 11, seed=6)])
    np.testing.assert_array_equal(l0, l1)
    assert g1.dtype == np.float32
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-7)
    assert np.all(g1[[2, 9]] == 0)


def _attention(q, k, v, **kw):
    ts = [Tensor(a, dtype=a.dtype, requires_grad=True) for a in (q, k, v)]
    out = scaled_dot_product_attention(*ts, **kw)
    out.backward(Tensor(f32(*out.shape, seed=7).astype(q.dtype), dtype=q.dtype))
    return out.data, [t.grad.data for t in ts]


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"mask": "padding"}])
def test_attention_keep_matches_recompute(kw):
    q, k, v = f32(2, 3, 7, 4, seed=8), f32(2, 3, 7, 4, seed=9), f32(2, 3, 7, 5, seed=10)
    if kw.get("mask") == "padding":
        mask = np.ones((2, 1, 1, 7), dtype=bool)
        mask[1, ..., 4:] = False
        kw = {"mask": mask}
    o0, g0 = _attention(q, k, v, **kw)
    with acc.fast_kernels():
        o1, g1 = _attention(q, k, v, **kw)
    np.testing.assert_allclose(o1, o0, atol=1e-6)
    for a, b in zip(g1, g0):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_attention_keep_with_dropout_matches_the_plain_op():
    """Same drop pattern through both ops (the draw is a parameter of the record)."""
    q, k, v = f32(1, 2, 6, 4, seed=11), f32(1, 2, 6, 4, seed=12), f32(1, 2, 6, 4, seed=13)
    drop = (np.random.default_rng(14).random((1, 2, 6, 6)) > 0.3).astype(np.float32) / 0.7
    drop = drop.astype(np.float32)
    keep = np.tril(np.ones((6, 6), dtype=bool))
    results = []
    for fn in (AttentionFunction, acc.AttentionKeepFunction):
        ts = [Tensor(a, requires_grad=True) for a in (q, k, v)]
        out = fn.apply(*ts, keep=keep, drop=drop)
        out.sum().backward()
        results.append((out.data, [t.grad.data for t in ts]))
    (o0, g0), (o1, g1) = results
    np.testing.assert_allclose(o1, o0, atol=1e-6)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_attention_keep_gradcheck_float64():
    q, k, v = f64(1, 2, 5, 3, seed=15), f64(1, 2, 5, 3, seed=16), f64(1, 2, 5, 3, seed=17)
    with acc.fast_kernels():
        gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True),
                  [q, k, v])


def test_attention_keep_against_pytorch():
    torch = pytest.importorskip("torch")
    q, k, v = f32(2, 2, 6, 4, seed=18), f32(2, 2, 6, 4, seed=19), f32(2, 2, 6, 4, seed=20)
    with acc.fast_kernels():
        out, grads = _attention(q, k, v, is_causal=True)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ref.backward(torch.tensor(f32(*ref.shape, seed=7)))
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-5)
    for ours, theirs in zip(grads, (tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 2), H=st.integers(1, 3), T=st.integers(1, 6), S=st.integers(1, 6),
       D=st.integers(1, 4), seed=st.integers(0, 1000))
def test_attention_keep_property_shapes(B, H, T, S, D, seed):
    q, k, v = f32(B, H, T, D, seed=seed), f32(B, H, S, D, seed=seed + 1), f32(B, H, S, D,
                                                                               seed=seed + 2)
    o0, g0 = _attention(q, k, v, is_causal=T <= S)
    with acc.fast_kernels():
        o1, g1 = _attention(q, k, v, is_causal=T <= S)
    np.testing.assert_allclose(o1, o0, atol=1e-5)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_row_sums_is_sum():
    a = f32(3, 4, 9, 17, seed=21)
    got = acc.row_sums(a)
    assert got.shape == (3, 4, 9, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, a.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)


# ---- the fused optimizer --------------------------------------------------------------------
def _train(cls, steps=4):
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=16,
                          bias=True))
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = cls([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
              lr=1e-2, betas=(0.9, 0.99))
    ids = np.random.default_rng(1).integers(0, 13, (2, 9))
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
    return model, opt


def test_fused_adamw_is_adamw_to_the_bit():
    m0, o0 = _train(AdamW)
    m1, o1 = _train(acc.FusedAdamW)
    for (name, a), (_, b) in zip(m0.named_parameters(), m1.named_parameters()):
        assert b.dtype == np.float32
        np.testing.assert_array_equal(a.data, b.data, err_msg=name)
    s0, s1 = o0.state_dict(), o1.state_dict()
    assert sorted(s0) == sorted(s1)
    for key in s0:
        np.testing.assert_array_equal(np.asarray(s0[key]), np.asarray(s1[key]), err_msg=key)


def test_fused_adamw_resumes_adamw_state_exactly():
    """A state saved by AdamW, loaded into FusedAdamW, continues exactly as AdamW would."""
    def params():
        return [Parameter(f32(6, 4, seed=30)), Parameter(f32(4, seed=31))]

    def grads(step, ps):
        for i, p in enumerate(ps):
            p.grad = Tensor(f32(*p.shape, seed=40 + 10 * step + i))

    first = params()
    plain = AdamW(first, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    for step in range(2):
        grads(step, first)
        plain.step()
    second = [Parameter(p.data.copy()) for p in first]
    fused = acc.FusedAdamW(second, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    fused.load_state_dict(plain.state_dict())
    for step in range(2, 4):
        grads(step, first)
        grads(step, second)
        plain.step()
        fused.step()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.data, b.data)
    wrong = acc.FusedAdamW([Parameter(np.zeros(3, dtype=np.float32))])
    with pytest.raises(ValueError):  # a state of another model is refused, as module 07 does
        wrong.load_state_dict(plain.state_dict())


def test_full_step_same_with_and_without_kernels():
    def step(on):
        manual_seed(3)
        model = GPT(GPTConfig(vocab_size=19, block_size=12, n_layer=2, n_head=2, n_embd=24))
        ids = np.random.default_rng(4).integers(0, 19, (3, 13))
        with acc.fast_kernels(on):
            _, loss = model(ids[:, :-1], ids[:, 1:])
            loss.backward()
        return loss.item(), {n: p.grad.data for n, p in model.named_parameters()}

    l0, g0 = step(False)
    l1, g1 = step(True)
    assert abs(l0 - l1) < 1e-6
    for name in g0:
        np.testing.assert_allclose(g1[name], g0[name], rtol=1e-4, atol=1e-6, err_msg=name)


# ---- machine settings ---------------------------------------------------------------------
def test_blas_threads_round_trip():
    before = acc.blas_threads()
    if before is None:
        pytest.skip("NumPy's BLAS is not the bundled OpenBLAS")
    try:
        assert acc.set_blas_threads(1) is True and acc.blas_threads() == 1
    finally:
        acc.set_blas_threads(before)
    assert acc.blas_threads() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_set_blas_threads_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="positive integer"):
        acc.set_blas_threads(bad)


def test_keep_freed_memory_reports_what_it_did():
    import sys

    result = acc.keep_freed_memory()
    assert isinstance(result, bool)
    if sys.platform.startswith("linux"):
        assert result is True
