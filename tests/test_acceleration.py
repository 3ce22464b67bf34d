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
    DERIVATIVES,
    KERNELS,
    add_backward,
    cross_entropy_backward,
    gelu_backward,
    gradcheck,
    kernel,
)
from tinytorch.core.layers import Parameter
from tinytorch.core.losses import CrossEntropyFunction, cross_entropy
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import Add, Function, Tensor, manual_seed
from tinytorch.models.transformer import GPT, GPTConfig, LayerNormFunction, layer_norm
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
NUMPY_NAMES = {"gelu_backward_inplace", "cross_entropy_backward_inplace", "attention_keep_probs",
               "gelu_tanh_kernel", "layer_norm_kernel", "add_backward_bias_blas"}
COMPILED_NAMES = {"layer_norm_compiled", "gelu_compiled", "attention_compiled",
                  "cross_entropy_compiled", "quantized_matmul_compiled", "matmul_rows_compiled",
                  "rms_norm_compiled", "rotary_compiled", "silu_compiled"}


def test_tables_start_plain_and_switch_both_ways():
    assert KERNELS == {} and kernel(AttentionFunction) is AttentionFunction
    assert DERIVATIVES[GELUFunction] is gelu_backward
    names = acc.use_fast_kernels(True, compiled=False)
    assert set(names) == NUMPY_NAMES
    assert kernel(GELUFunction) is acc.GELUTanhKernel
    assert kernel(LayerNormFunction) is acc.LayerNormKernel
    assert DERIVATIVES[Add] is acc.add_backward_bias_blas
    assert DERIVATIVES[GELUFunction] is acc.gelu_backward_inplace
    assert DERIVATIVES[CrossEntropyFunction] is acc.cross_entropy_backward_inplace
    assert kernel(AttentionFunction) is acc.AttentionKeepFunction
    assert acc.use_fast_kernels(True, compiled=False) == names  # idempotent
    assert acc.use_fast_kernels(False) == ()
    assert DERIVATIVES[GELUFunction] is gelu_backward
    assert DERIVATIVES[CrossEntropyFunction] is cross_entropy_backward
    assert DERIVATIVES[Add] is add_backward
    assert KERNELS == {}


def test_compiled_kernels_replace_the_numpy_ones_for_the_same_operation():
    names = acc.use_fast_kernels(True)  # compiled by default
    assert set(names) == COMPILED_NAMES | {"add_backward_bias_blas"}
    assert kernel(GELUFunction) is acc.GELUCompiled
    assert kernel(LayerNormFunction) is acc.LayerNormCompiled
    assert kernel(AttentionFunction) is acc.AttentionCompiled
    assert kernel(CrossEntropyFunction) is acc.CrossEntropyCompiled
    assert DERIVATIVES[GELUFunction] is gelu_backward  # the NumPy rule is not on
    # from the NumPy set to the compiled one and back: each switch leaves one consistent set
    assert set(acc.use_fast_kernels(True, compiled=False)) == NUMPY_NAMES
    assert set(acc.use_fast_kernels(True)) == set(names)
    assert acc.use_fast_kernels(False) == () and KERNELS == {}
    assert DERIVATIVES[GELUFunction] is gelu_backward and DERIVATIVES[Add] is add_backward


def test_context_manager_restores_the_previous_state():
    with acc.fast_kernels() as names:
        assert names == acc.active_kernels() and len(names) == len(acc.kernel_set())
        with acc.fast_kernels(False) as inner:
            assert inner == () and kernel(AttentionFunction) is AttentionFunction
        assert acc.active_kernels() == names
        with acc.fast_kernels(compiled=False) as numpy_only:
            assert set(numpy_only) == NUMPY_NAMES
            assert kernel(AttentionFunction) is acc.AttentionKeepFunction
        assert acc.active_kernels() == names and kernel(GELUFunction) is acc.GELUCompiled
    assert acc.active_kernels() == ()
    with pytest.raises(RuntimeError):
        with acc.fast_kernels():
            raise RuntimeError("boom")
    assert acc.active_kernels() == ()


def test_bad_switch_argument_is_named():
    with pytest.raises(TypeError, match="True or False"):
        acc.use_fast_kernels("yes")
    with pytest.raises(TypeError, match="True or False"):
        acc.use_fast_kernels(True, compiled=1)


def test_a_rule_registered_by_someone_else_is_put_back():
    def custom(ctx, grad):
        return gelu_backward(ctx, grad)

    DERIVATIVES[GELUFunction] = custom
    try:
        for compiled in (False, True, False):
            acc.use_fast_kernels(True, compiled=compiled)
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
@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_gelu_kernel_matches_plain_and_gradcheck(approximate, compiled):
    x = Tensor(f32(64, 48, seed=1, scale=3.0), requires_grad=True)
    y0, g0 = _backward_of(gelu, x, approximate=approximate)
    x.grad = None
    with acc.fast_kernels(compiled=compiled):
        y1, g1 = _backward_of(gelu, x, approximate=approximate)
        gradcheck(lambda t: gelu(t, approximate=approximate), [f64(4, 5, seed=2, scale=2.0)])
    assert g1.dtype == np.float32
    # the tanh form's forward is a kernel's now: equal up to float32 rounding
    np.testing.assert_allclose(y1, y0, rtol=1e-6, atol=2e-6)
    # 1 - tanh(u)^2 loses digits to cancellation where tanh(u) is near -1 or 1, in both; a
    # tanh one ulp away moves the slope by up to x (1 - t^2)' ~ 2e-6 at |x| ~ 5
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=3e-6 if compiled else 1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_cross_entropy_kernel_matches_plain_and_gradcheck(reduction, compiled):
    target = np.random.default_rng(3).integers(0, 11, 20)
    target[[2, 9]] = -100

    def run():
        logits = Tensor(f32(20, 11, seed=4, scale=2.0), requires_grad=True)
        loss = cross_entropy(logits, target, reduction=reduction)
        loss.backward(Tensor(f32(20, seed=5)) if reduction == "none" else None)
        return loss.data, logits.grad.data

    l0, g0 = run()
    with acc.fast_kernels(compiled=compiled):
        l1, g1 = run()
        gradcheck(lambda z: cross_entropy(z, target, reduction=reduction).sum(),
                  [f64(20, 11, seed=6)])
    if compiled:  # its own log-sum-exp: equal up to float32 rounding
        np.testing.assert_allclose(l1, l0, rtol=1e-6)
    else:
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
@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_attention_keep_matches_recompute(kw, compiled):
    q, k, v = f32(2, 3, 7, 4, seed=8), f32(2, 3, 7, 4, seed=9), f32(2, 3, 7, 5, seed=10)
    if kw.get("mask") == "padding":
        mask = np.ones((2, 1, 1, 7), dtype=bool)
        mask[1, ..., 4:] = False
        kw = {"mask": mask}
    o0, g0 = _attention(q, k, v, **kw)
    with acc.fast_kernels(compiled=compiled):
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


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_attention_keep_gradcheck_float64(compiled):
    q, k, v = f64(1, 2, 5, 3, seed=15), f64(1, 2, 5, 3, seed=16), f64(1, 2, 5, 3, seed=17)
    with acc.fast_kernels(compiled=compiled):
        gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True),
                  [q, k, v])


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_attention_keep_against_pytorch(compiled):
    torch = pytest.importorskip("torch")
    q, k, v = f32(2, 2, 6, 4, seed=18), f32(2, 2, 6, 4, seed=19), f32(2, 2, 6, 4, seed=20)
    with acc.fast_kernels(compiled=compiled):
        out, grads = _attention(q, k, v, is_causal=True)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ref.backward(torch.tensor(f32(*ref.shape, seed=7)))
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-5)
    for ours, theirs in zip(grads, (tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 2), H=st.integers(1, 3), T=st.integers(1, 6), S=st.integers(1, 6),
       D=st.integers(1, 4), seed=st.integers(0, 1000))
def test_attention_keep_property_shapes(B, H, T, S, D, seed, compiled):
    q, k, v = f32(B, H, T, D, seed=seed), f32(B, H, S, D, seed=seed + 1), f32(B, H, S, D,
                                                                               seed=seed + 2)
    o0, g0 = _attention(q, k, v, is_causal=T <= S)
    with acc.fast_kernels(compiled=compiled):
        o1, g1 = _attention(q, k, v, is_causal=T <= S)
    np.testing.assert_allclose(o1, o0, atol=1e-5)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_row_sums_is_sum():
    a = f32(3, 4, 9, 17, seed=21)
    got = acc.row_sums(a)
    assert got.shape == (3, 4, 9, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, a.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)


# ---- the softmax without the row max ---------------------------------------------------------
@pytest.fixture
def max_first_calls(monkeypatch):
    """How often attention_probs_fast handed a call to module 12's max-first softmax."""
    from tinytorch.core.attention import _attention_probs

    calls = []

    def counted(q, k, keep=None):
        calls.append(q.shape)
        return _attention_probs(q, k, keep)

    monkeypatch.setattr(acc, "_attention_probs", counted)
    return calls


def _module12_probs(q, k, keep=None):
    from tinytorch.core.attention import _attention_probs

    return _attention_probs(q, k, keep)


@pytest.mark.parametrize("mask", [None, "causal", "padding"])
def test_probs_skip_the_max_for_ordinary_scores(mask, max_first_calls):
    q, k = f32(2, 3, 8, 16, seed=40), f32(2, 3, 8, 16, seed=41)
    keep = None
    if mask == "causal":
        keep = np.tril(np.ones((8, 8), dtype=bool))
    elif mask == "padding":  # batch 1 hides its last three keys
        keep = np.ones((2, 1, 1, 8), dtype=bool)
        keep[1, ..., 5:] = False
    got = acc.attention_probs_fast(q, k, keep)
    assert max_first_calls == [], "ordinary scores took the max-first path"
    np.testing.assert_allclose(got, _module12_probs(q, k, keep), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scale", [60.0, -60.0])
def test_probs_fall_back_when_exp_leaves_float_range(scale, max_first_calls):
    # scores of about +-170 (scale * 8 / sqrt(8)): exp overflows (+), or every weight of a row
    # underflows (-)
    q = np.full((1, 1, 4, 8), scale, dtype=np.float32)
    k = np.ones((1, 1, 4, 8), dtype=np.float32)
    k[..., 0, :] *= 1.01  # one key slightly ahead, so the answer is not uniform for +scale
    with np.errstate(over="raise", invalid="raise"):  # no overflow escapes, no NaN is made
        got = acc.attention_probs_fast(q, k)
    assert len(max_first_calls) == 1, "scores far outside exp's range must take the max-first path"
    np.testing.assert_array_equal(got, _module12_probs(q, k))
    assert np.isfinite(got).all() and np.allclose(got.sum(-1), 1)


def test_fully_masked_rows_stay_zero_without_the_fallback(max_first_calls):
    q, k = f32(1, 2, 4, 8, seed=42), f32(1, 2, 4, 8, seed=43)
    keep = np.ones((4, 4), dtype=bool)
    keep[2] = False  # query 2 may see nothing
    got = acc.attention_probs_fast(q, k, keep)
    assert max_first_calls == []
    assert (got[..., 2, :] == 0).all()
    np.testing.assert_allclose(got, _module12_probs(q, k, keep), rtol=1e-6, atol=1e-7)


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
    def step(on, compiled=True):
        manual_seed(3)
        model = GPT(GPTConfig(vocab_size=19, block_size=12, n_layer=2, n_head=2, n_embd=24))
        ids = np.random.default_rng(4).integers(0, 19, (3, 13))
        with acc.fast_kernels(on, compiled=compiled):
            _, loss = model(ids[:, :-1], ids[:, 1:])
            loss.backward()
        return loss.item(), {n: p.grad.data for n, p in model.named_parameters()}

    l0, g0 = step(False)
    for compiled in (True, False):
        l1, g1 = step(True, compiled)
        assert abs(l0 - l1) < 1e-5, (compiled, l0, l1)
        for name in g0:
            np.testing.assert_allclose(g1[name], g0[name], rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name}, compiled={compiled}")


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


# ---- forwards swapped through Function.apply's lookup -----------------------------------
def test_function_apply_runs_the_registered_kernel_and_only_while_registered():
    class Twice(Function):
        @staticmethod
        def forward(a):
            return a * 2

    class TwiceFast(Twice):
        @staticmethod
        def forward(a):
            return np.add(a, a)

    x = Tensor(f32(3), requires_grad=True)
    assert Twice.apply(x)._ctx.fn is Twice
    KERNELS[Twice] = TwiceFast
    try:
        out = Twice.apply(x)
        assert out._ctx.fn is TwiceFast and np.array_equal(out.data, x.data * 2)
    finally:
        del KERNELS[Twice]
    assert Twice.apply(x)._ctx.fn is Twice


def _plain_and_fast(table, key, fast, fn, leaves, seed):
    weights = None
    results = []
    for on in (False, True):
        for t in leaves:
            t.grad = None
        old = table.get(key)
        if on:
            table[key] = fast
        try:
            out = fn()
            if weights is None:
                weights = Tensor(f32(*out.shape, seed=seed).astype(out.dtype), dtype=out.dtype)
            (out * weights).sum().backward()
        finally:
            if old is None:
                table.pop(key, None)
            else:
                table[key] = old
        results.append((out, [t.grad.data for t in leaves]))
    return results


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_tanh_kernel_matches_module_02_and_06(approximate):
    x = Tensor(f32(64, 96, seed=80, scale=3.0), requires_grad=True)
    before = x.data.copy()
    (want, want_g), (got, got_g) = _plain_and_fast(
        KERNELS, GELUFunction, acc.GELUTanhKernel, lambda: gelu(x, approximate=approximate),
        [x], seed=81)
    assert got._ctx is None or got._ctx.fn is acc.GELUTanhKernel
    assert got.dtype == np.float32 and got_g[0].dtype == np.float32
    assert np.allclose(got.data, want.data, rtol=1e-6, atol=1e-6)
    assert np.allclose(got_g[0], want_g[0], rtol=1e-5, atol=1e-6)
    assert np.array_equal(x.data, before)
    x64 = f64(4, 5, seed=82, scale=2.0)
    KERNELS[GELUFunction] = acc.GELUTanhKernel
    try:
        gradcheck(lambda t: gelu(t, approximate=approximate), [x64])
    finally:
        del KERNELS[GELUFunction]


def test_gelu_tanh_kernel_saves_tanh_only_for_the_tanh_form():
    x = Tensor(f32(8, 16, seed=83), requires_grad=True)
    ctx = acc.GELUTanhKernel.apply(x, approximate="tanh")._ctx
    assert ctx.saved.shape == (8, 16) and ctx.saved.dtype == np.float32
    assert acc.GELUTanhKernel.apply(x, approximate="none")._ctx.saved is None


@pytest.mark.parametrize("shape,bias", [((2, 7, 16), True), ((9, 16), False)])
def test_layer_norm_kernel_matches_module_13(shape, bias):
    x = Tensor(f32(*shape, seed=84, scale=2.0) + 1.5, requires_grad=True)
    w = Tensor(f32(16, seed=85), requires_grad=True)
    b = Tensor(f32(16, seed=86), requires_grad=True) if bias else None
    leaves = [x, w] + ([b] if bias else [])
    (want, want_g), (got, got_g) = _plain_and_fast(
        KERNELS, LayerNormFunction, acc.LayerNormKernel, lambda: layer_norm(x, w, b), leaves,
        seed=87)
    assert got._ctx.fn is acc.LayerNormKernel and got.shape == shape
    assert got.dtype == np.float32 and np.allclose(got.data, want.data, atol=1e-5)
    for g1, g0 in zip(got_g, want_g):
        assert g1.dtype == np.float32 and g1.shape == g0.shape
        assert np.allclose(g1, g0, rtol=1e-4, atol=1e-5)
    x64, w64, b64 = f64(2, 3, 5, seed=88), f64(5, seed=89), f64(5, seed=90)
    KERNELS[LayerNormFunction] = acc.LayerNormKernel
    try:
        gradcheck(lambda t, u, v: layer_norm(t, u, v), [x64, w64, b64])
        gradcheck(lambda t, u: layer_norm(t, u), [x64, w64])
    finally:
        del KERNELS[LayerNormFunction]


@pytest.mark.parametrize("a_shape,b_shape", [((12, 7), (7,)), ((3, 4, 7), (7,)), ((5, 7), (5, 7)),
                                             ((1, 7), (7,)), ((7,), (6, 7))])
def test_add_bias_rule_matches_module_06(a_shape, b_shape):
    a = Tensor(f32(*a_shape, seed=91), requires_grad=True)
    b = Tensor(f32(*b_shape, seed=92), requires_grad=True)
    (want, want_g), (got, got_g) = _plain_and_fast(
        DERIVATIVES, Add, acc.add_backward_bias_blas, lambda: a + b, [a, b], seed=93)
    assert np.array_equal(got.data, want.data)
    for g1, g0 in zip(got_g, want_g):
        assert g1.dtype == np.float32 and g1.shape == g0.shape
        assert np.allclose(g1, g0, rtol=1e-5, atol=1e-6)
    DERIVATIVES[Add] = acc.add_backward_bias_blas
    try:
        gradcheck(lambda t, v: t + v, [f64(6, 4, seed=94), f64(4, seed=95)])
    finally:
        DERIVATIVES[Add] = add_backward
