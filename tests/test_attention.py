"""Module 12 (attention) as exported into the package.

The fused AttentionFunction against PyTorch's scaled_dot_product_attention (bool masks,
is_causal, fewer queries than keys), against its composed twin and finite differences;
fully masked rows; MultiHeadAttention against nn.MultiheadAttention with copied weights;
GroupedQueryAttention with RoPE against a torch implementation with repeat_interleave.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytorch.core.attention import AttentionFunction
from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.nn import (
    GroupedQueryAttention,
    MultiHeadAttention,
    RotaryEmbedding,
    attention_composed,
    attention_weights,
    causal_mask,
    scaled_dot_product_attention,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional


def qkv_arrays(B=2, H=3, T=5, S=5, D=4, Dv=None, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    shapes = ((B, H, T, D), (B, H, S, D), (B, H, S, Dv or D))
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def tensors(arrays, requires_grad=True):
    return [Tensor(a, dtype=a.dtype, requires_grad=requires_grad) for a in arrays]


def run_ours(fn, arrays, grad, **kwargs):
    q, k, v = tensors(arrays)
    out = fn(q, k, v, **kwargs)
    out.backward(grad)
    return out.data, [t.grad.data for t in (q, k, v)]


def run_torch(arrays, grad, **kwargs):
    q, k, v = (torch.tensor(a, requires_grad=True) for a in arrays)
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out.backward(torch.tensor(grad))
    return out.detach().numpy(), [t.grad.numpy() for t in (q, k, v)]


def assert_close(ours, theirs, atol):
    np.testing.assert_allclose(ours[0], theirs[0], atol=atol, rtol=1e-4)
    for name, a, b in zip("qkv", ours[1], theirs[1]):
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-4, err_msg=f"d{name}")


def random_mask(shape, seed, p=0.6):
    """A bool mask with at least one allowed key per row (torch gives NaN otherwise)."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < p
    mask[..., 0] = True
    return mask


# ---- against torch's scaled_dot_product_attention -----------------------------------------


@pytest.mark.parametrize("dtype, atol", [(np.float32, 2e-5), (np.float64, 1e-10)])
@pytest.mark.parametrize(
    "case", ["plain", "causal", "bool mask", "broadcast mask", "T<S causal", "Dv"]
)
def test_sdpa_matches_torch(case, dtype, atol):
    T, S, Dv = (3, 7, None) if case == "T<S causal" else (5, 5, 6 if case == "Dv" else None)
    arrays = qkv_arrays(T=T, S=S, Dv=Dv, seed=1, dtype=dtype)
    grad = np.random.default_rng(2).standard_normal((2, 3, T, Dv or 4)).astype(dtype)
    ours_kw, torch_kw = {}, {}
    if case == "causal":
        ours_kw, torch_kw = {"is_causal": True}, {"is_causal": True}
    elif case == "bool mask":
        mask = random_mask((2, 3, T, S), 3)
        ours_kw, torch_kw = {"mask": mask}, {"attn_mask": torch.tensor(mask)}
    elif case == "broadcast mask":
        mask = random_mask((2, 1, 1, S), 4)
        ours_kw, torch_kw = {"mask": Tensor(mask, dtype=bool)}, {"attn_mask": torch.tensor(mask)}
    elif case == "T<S causal":  # torch's is_causal is top-left aligned; ours is bottom-right
        ours_kw = {"is_causal": True}
        torch_kw = {"attn_mask": torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)}
    ours = run_ours(scaled_dot_product_attention, arrays, grad, **ours_kw)
    assert ours[0].dtype == dtype and all(g.dtype == dtype for g in ours[1])
    assert_close(ours, run_torch(arrays, grad, **torch_kw), atol)


def test_end_aligned_causal_mask_matches_torch_causal_lower_right():
    bias = pytest.importorskip("torch.nn.attention.bias")
    for T, S in ((1, 6), (3, 6), (6, 6)):
        lower_right = bias.causal_lower_right(T, S)._materialize().numpy()
        np.testing.assert_array_equal(causal_mask(T, S), lower_right)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 3), T=st.integers(1, 6), extra=st.integers(0, 4),
       D=st.integers(1, 6), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_sdpa_matches_torch_on_random_shapes(B, H, T, extra, D, causal, seed):
    S = T + extra
    arrays = qkv_arrays(B, H, T, S, D, seed=seed, dtype=np.float64)
    grad = np.random.default_rng(seed + 1).standard_normal((B, H, T, D))
    lower_right = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    torch_kw = {"attn_mask": lower_right} if causal else {}
    ours = run_ours(scaled_dot_product_attention, arrays, grad, is_causal=causal)
    assert_close(ours, run_torch(arrays, grad, **torch_kw), 1e-10)


# ---- fused against composed, finite differences ---------------------------------------


def fully_masked_mask():
    mask = causal_mask(4, 6) & np.array([True, True, False, True, True, False])
    mask = np.broadcast_to(mask, (2, 3, 4, 6)).copy()
    mask[0, 1, 2] = False  # one query sees nothing
    mask[1, :, 0] = False  # one query position hidden in every head
    return mask


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"mask": "fully masked"},
                                    {"mask": "fully masked", "is_causal": True}])
def test_fused_equals_composed_in_values_and_gradients(kwargs):
    kwargs = {k: (fully_masked_mask() if v == "fully masked" else v) for k, v in kwargs.items()}
    arrays = qkv_arrays(T=4, S=6, seed=5)
    grad = np.random.default_rng(6).standard_normal((2, 3, 4, 4)).astype(np.float32)
    fused = run_ours(scaled_dot_product_attention, arrays, grad, **kwargs)
    composed = run_ours(attention_composed, arrays, grad, **kwargs)
    assert_close(fused, composed, 1e-5)


def test_gradcheck_fused_with_masks_and_broadcast_heads():
    q, k, v = tensors(qkv_arrays(B=1, H=2, T=4, S=6, D=3, seed=7, dtype=np.float64))
    mask = fully_masked_mask()[:1, :2]
    assert gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask), [q, k, v])
    def causal(q, k, v):
        return scaled_dot_product_attention(q, k, v, is_causal=True)

    assert gradcheck(causal, [q, k, v])
    # one key/value head shared by grouped query heads, as GroupedQueryAttention does
    q5 = Tensor(np.random.default_rng(8).standard_normal((1, 2, 3, 4, 3)), dtype=np.float64,
                requires_grad=True)
    k5 = Tensor(k.data[:, :, None], dtype=np.float64, requires_grad=True)
    v5 = Tensor(v.data[:, :, None], dtype=np.float64, requires_grad=True)
    assert gradcheck(causal, [q5, k5, v5])


def test_fully_masked_rows_give_zero_output_and_zero_gradient_never_nan():
    mask = fully_masked_mask()
    arrays = qkv_arrays(T=4, S=6, seed=9)
    grad = np.ones((2, 3, 4, 4), dtype=np.float32)
    for fn in (scaled_dot_product_attention, attention_composed):
        out, grads = run_ours(fn, arrays, grad, mask=mask)
        assert not np.isnan(out).any() and not any(np.isnan(g).any() for g in grads)
        np.testing.assert_array_equal(out[0, 1, 2], 0)
        np.testing.assert_array_equal(out[1, :, 0], 0)
        np.testing.assert_array_equal(grads[0][0, 1, 2], 0)  # dq of the blind query
        np.testing.assert_array_equal(grads[0][1, :, 0], 0)
    everything = np.zeros((2, 3, 4, 6), dtype=bool)
    out, grads = run_ours(scaled_dot_product_attention, arrays, grad, mask=everything)
    assert not out.any() and not any(g.any() for g in grads)


def test_masked_weights_are_exactly_zero():
    q, k, v = qkv_arrays(T=4, S=6, seed=10)
    mask = fully_masked_mask()
    w = attention_weights(q, k, mask=mask)
    assert w.dtype == np.float32 and not np.isnan(w).any()
    assert np.all(w[~mask] == 0.0)
    rows = mask.any(axis=-1)
    np.testing.assert_allclose(w.sum(-1)[rows], 1.0, atol=1e-6)
    assert np.all(w.sum(-1)[~rows] == 0)
    poisoned = v.copy()
    poisoned[:, :, [2, 5]] = 1e30  # keys 2 and 5 are masked for every query
    for fn in (scaled_dot_product_attention, attention_composed):
        clean = fn(Tensor(q), Tensor(k), Tensor(v), mask=mask).data
        dirty = fn(Tensor(q), Tensor(k), Tensor(poisoned), mask=mask).data
        np.testing.assert_array_equal(clean, dirty)


def test_fused_op_records_one_node_and_keeps_float32():
    q, k, v = tensors(qkv_arrays())
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out._ctx.fn is AttentionFunction and out._ctx.parents == (q, k, v)
    assert out.dtype == np.float32


def test_dropout_fused_equals_composed_with_the_same_seed():
    arrays = qkv_arrays(T=6, S=6, seed=11)
    grad = np.random.default_rng(12).standard_normal((2, 3, 6, 4)).astype(np.float32)
    manual_seed(5)
    fused = run_ours(scaled_dot_product_attention, arrays, grad, is_causal=True, dropout_p=0.3)
    manual_seed(5)
    composed = run_ours(attention_composed, arrays, grad, is_causal=True, dropout_p=0.3)
    assert_close(fused, composed, 1e-5)
    no_drop = run_ours(scaled_dot_product_attention, arrays, grad, is_causal=True)
    assert not np.allclose(fused[0], no_drop[0])
    q, k, v = tensors(qkv_arrays(B=1, H=1, T=3, S=3, D=2, seed=13, dtype=np.float64))
    drop = np.random.default_rng(0)  # gradcheck needs the same dropout draw on every call
    keep = (drop.random((1, 1, 3, 3)) >= 0.4) / 0.6
    def dropped(q, k, v):
        return AttentionFunction.apply(q, k, v, keep=None, drop=keep)

    assert gradcheck(dropped, [q, k, v])
    with pytest.raises(ValueError):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)


def test_sdpa_errors_name_shapes_and_mask_rules():
    q, k, v = tensors(qkv_arrays(T=3, S=5), requires_grad=False)
    with pytest.raises(ValueError) as info:
        scaled_dot_product_attention(q, k[..., :2], v)
    assert "(2, 3, 3, 4)" in str(info.value) and "(2, 3, 5, 2)" in str(info.value)
    with pytest.raises(ValueError):
        scaled_dot_product_attention(q, k, v[:, :, :4])
    with pytest.raises(ValueError):
        scaled_dot_product_attention(q, k[:2, :2], v[:2, :2])
    with pytest.raises(ValueError):
        scaled_dot_product_attention(Tensor(np.ones(4, dtype=np.float32)), k, v)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, mask=np.zeros((3, 5), dtype=np.float32))
    with pytest.raises(ValueError) as info:
        scaled_dot_product_attention(q, k, v, mask=np.ones((3, 4), dtype=bool))
    assert "(3, 4)" in str(info.value) and "(2, 3, 3, 5)" in str(info.value)
    with pytest.raises(ValueError):  # a mask may not enlarge the output
        scaled_dot_product_attention(q, k, v, mask=np.ones((4, 2, 3, 3, 5), dtype=bool))
    with pytest.raises(ValueError, match="T <= S"):
        causal_mask(5, 3)


def test_sdpa_accepts_arrays_and_leading_axes():
    q, k, v = qkv_arrays(T=3, S=5)
    out = scaled_dot_product_attention(q[0], k[0], v[0])  # (H, T, D) without a batch axis
    assert out.shape == (3, 3, 4)
    full = scaled_dot_product_attention(q, k, v).data
    np.testing.assert_allclose(out.data, full[0], atol=1e-6)


# ---- MultiHeadAttention against nn.MultiheadAttention ----------------------------------


def copied_torch_mha(ours, bias):
    C = ours.embed_dim
    theirs = torch.nn.MultiheadAttention(C, ours.num_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.tensor(ours.qkv.weight.data))
        theirs.out_proj.weight.copy_(torch.tensor(ours.proj.weight.data))
        if bias:
            theirs.in_proj_bias.copy_(torch.tensor(ours.qkv.bias.data))
            theirs.out_proj.bias.copy_(torch.tensor(ours.proj.bias.data))
    return theirs


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_multihead_matches_torch_forward_and_every_gradient(bias, masking):
    manual_seed(0)
    ours = MultiHeadAttention(16, 4, bias=bias)
    theirs = copied_torch_mha(ours, bias)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 7, 16)).astype(np.float32)
    grad = rng.standard_normal((3, 7, 16)).astype(np.float32)
    kwargs, torch_kwargs = {}, {}
    if masking == "causal":
        kwargs = {"is_causal": True}
        torch_kwargs = {"attn_mask": torch.tensor(~causal_mask(7))}  # torch: True = masked out
    elif masking == "padding":
        keep = np.ones((3, 7), dtype=bool)
        keep[1, 5:] = False
        kwargs = {"mask": keep[:, None, None, :]}
        torch_kwargs = {"key_padding_mask": torch.tensor(~keep)}

    xt = torch.tensor(x, requires_grad=True)
    want, _ = theirs(xt, xt, xt, need_weights=False, **torch_kwargs)
    want.backward(torch.tensor(grad))
    xs = Tensor(x, requires_grad=True)
    out = ours(xs, **kwargs)
    out.backward(grad)

    np.testing.assert_allclose(out.data, want.detach().numpy(), atol=2e-5)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=2e-5)
    pairs = [("qkv.weight", theirs.in_proj_weight), ("proj.weight", theirs.out_proj.weight)]
    if bias:
        pairs += [("qkv.bias", theirs.in_proj_bias), ("proj.bias", theirs.out_proj.bias)]
    params = dict(ours.named_parameters())
    assert set(params) == {name for name, _ in pairs}
    for name, theirs_p in pairs:
        assert params[name].grad.dtype == np.float32
        np.testing.assert_allclose(params[name].grad.data, theirs_p.grad.numpy(), atol=5e-5,
                                   err_msg=name)


def test_multihead_dropout_only_in_training():
    manual_seed(2)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = Tensor(np.random.default_rng(3).standard_normal((2, 5, 8)).astype(np.float32))
    a, b = mha(x, is_causal=True).data, mha(x, is_causal=True).data
    assert not np.allclose(a, b)
    mha.eval()
    c, d = mha(x, is_causal=True).data, mha(x, is_causal=True).data
    np.testing.assert_array_equal(c, d)
    mha.dropout, mha.resid_dropout.p = 0.0, 0.0
    mha.train()
    np.testing.assert_allclose(mha(x, is_causal=True).data, c, atol=1e-6)
    assert "dropout=0.5" in repr(MultiHeadAttention(8, 2, dropout=0.5))


def test_multihead_errors():
    with pytest.raises(ValueError) as info:
        MultiHeadAttention(10, 3)
    assert "10" in str(info.value) and "3" in str(info.value)
    for args in ((0, 1), (8, 0), (8.0, 2)):
        with pytest.raises(ValueError):
            MultiHeadAttention(*args)
    mha = MultiHeadAttention(8, 2)
    for shape in ((2, 5, 6), (5, 8), (1, 2, 5, 8)):
        with pytest.raises(ValueError) as info:
            mha(Tensor(np.zeros(shape, dtype=np.float32)))
        assert str(shape) in str(info.value)


# ---- GroupedQueryAttention against a torch implementation ------------------------------


def torch_gqa(gqa, x, rotary=None, offset=0, causal=True, mask=None):
    """Llama-style attention in torch: repeat_interleave the kv heads, HF RoPE."""
    B, T, C = x.shape
    H, Hkv, D = gqa.num_heads, gqa.num_kv_heads, gqa.head_dim
    w = {n: torch.tensor(p.data, requires_grad=True) for n, p in gqa.named_parameters()}
    q = (x @ w["q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
    k = (x @ w["k_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
    v = (x @ w["v_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
    if rotary is not None:
        inv_freq = 1.0 / (rotary.base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        freqs = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float(), emb.sin().float()

        def rot(t):
            return torch.cat((-t[..., D // 2:], t[..., : D // 2]), dim=-1)

        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    attn_mask = None if mask is None else torch.tensor(mask)
    is_causal = causal and mask is None
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    y = y.transpose(1, 2).reshape(B, T, H * D)
    return y @ w["o_proj.weight"].T, w


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 1), (4, 4), (6, 3)])
@pytest.mark.parametrize("use_rope", [False, True])
def test_gqa_matches_torch_with_repeat_interleave(heads, kv_heads, use_rope):
    manual_seed(4)
    C = 8 * heads
    gqa = GroupedQueryAttention(C, heads, kv_heads)
    rotary = RotaryEmbedding(8, max_len=32) if use_rope else None
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, C)).astype(np.float32)
    grad = rng.standard_normal((2, 6, C)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    want, w = torch_gqa(gqa, xt, rotary, offset=3)
    want.backward(torch.tensor(grad))
    xs = Tensor(x, requires_grad=True)
    out = gqa(xs, is_causal=True, rotary=rotary, offset=3)
    out.backward(grad)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.data, want.detach().numpy(), atol=3e-5)
    np.testing.assert_allclose(xs.grad.data, xt.grad.numpy(), atol=3e-5)
    for name, p in gqa.named_parameters():
        np.testing.assert_allclose(p.grad.data, w[name].grad.numpy(), atol=1e-4, err_msg=name)


@pytest.mark.parametrize("mask_shape", [(2, 4, 6, 6), (2, 1, 1, 6), (6, 6), (1, 4, 6, 6)])
def test_gqa_masks_of_every_broadcastable_shape(mask_shape):
    manual_seed(6)
    gqa = GroupedQueryAttention(16, 4, 2)
    x = np.random.default_rng(7).standard_normal((2, 6, 16)).astype(np.float32)
    mask = random_mask(mask_shape, 8) & causal_mask(6)
    want, _ = torch_gqa(gqa, torch.tensor(x), mask=np.broadcast_to(mask, (2, 4, 6, 6)).copy())
    out = gqa(Tensor(x), mask=mask)
    np.testing.assert_allclose(out.data, want.detach().numpy(), atol=3e-5)


def test_gqa_shares_kv_without_copying_and_errors():
    gqa = GroupedQueryAttention(16, 4, 1, bias=True)
    assert gqa.k_proj.weight.shape == (4, 16) and gqa.k_proj.bias.shape == (4,)
    assert [n for n, _ in gqa.named_parameters()] == [
        "q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
        "v_proj.weight", "v_proj.bias", "o_proj.weight", "o_proj.bias"]
    with pytest.raises(ValueError, match="multiple"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError):
        GroupedQueryAttention(18, 4, 2)
    with pytest.raises(ValueError):
        gqa(Tensor(np.zeros((2, 3, 8), dtype=np.float32)))
    with pytest.raises(ValueError):
        gqa(Tensor(np.zeros((2, 3, 16), dtype=np.float32)), mask=np.ones((2, 3, 3, 3), dtype=bool))


def test_attention_scale_is_built_in_the_input_dtype():
    q, k, v = tensors(qkv_arrays(D=64))
    out = scaled_dot_product_attention(q, k, v)
    out.backward(np.ones(out.shape, dtype=np.float32))
    assert out.dtype == np.float32 and q.grad.dtype == np.float32
    w = attention_weights(q, k)
    scores = q.data.astype(np.float64) @ np.swapaxes(k.data, -1, -2) / math.sqrt(64)
    want = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(w, want / want.sum(-1, keepdims=True), atol=1e-6)
