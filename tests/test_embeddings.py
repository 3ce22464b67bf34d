"""Module 11 (embeddings) as exported into the package.

Lookups and their scatter-add gradient against PyTorch, positions (learned, sinusoidal,
rotary) against independent formulas, RoPE against the Hugging Face (Llama/Qwen) formula
written in torch, gradients by finite differences, and the error messages.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinytorch.core.autograd import gradcheck
from tinytorch.core.embeddings import EmbeddingFunction, RotaryFunction
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.nn import (
    Embedding,
    PositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    embedding,
    rotate_half,
    sinusoidal_encoding,
)


def torch_or_skip():
    return pytest.importorskip("torch")


def f64(array, requires_grad=True):
    array = np.asarray(array, dtype=np.float64)
    return Tensor(array, dtype=np.float64, requires_grad=requires_grad)


# ---- the lookup and its gradient --------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_shape", [(), (7,), (3, 5), (2, 3, 4)])
def test_lookup_and_gradient_match_torch(dtype, index_shape):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 5)).astype(dtype)
    ids = rng.integers(0, 6, index_shape)  # small table: many repeated ids
    weight = Tensor(table, dtype=dtype, requires_grad=True)
    out = embedding(ids, weight)
    grad = rng.standard_normal(out.shape).astype(dtype)
    out.backward(grad)

    w = torch.tensor(table, requires_grad=True)
    want = torch.nn.functional.embedding(torch.as_tensor(ids), w)
    want.backward(torch.as_tensor(grad))
    assert out.shape == tuple(want.shape) and out.dtype == dtype
    np.testing.assert_array_equal(out.data, want.detach().numpy())
    np.testing.assert_allclose(weight.grad.data, w.grad.numpy(), rtol=1e-6, atol=1e-6)
    assert weight.grad.dtype == dtype


def test_repeated_ids_accumulate_and_gradcheck():
    ids = np.array([[4, 1, 4], [4, 0, 1]])
    weight = f64(np.random.default_rng(1).standard_normal((5, 3)))
    assert gradcheck(lambda w: EmbeddingFunction.apply(w, indices=ids), [weight])
    weight.grad = None
    embedding(ids, weight).sum().backward()
    np.testing.assert_array_equal(weight.grad.data[:, 0], [1, 2, 0, 0, 3])


@settings(max_examples=30, deadline=None)
@given(vocab=st.integers(1, 40), dim=st.integers(1, 6),
       shape=st.lists(st.integers(0, 5), min_size=0, max_size=3), seed=st.integers(0, 2**16))
def test_scatter_add_equals_np_add_at(vocab, dim, shape, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, tuple(shape))
    weight = Tensor(rng.standard_normal((vocab, dim)).astype(np.float32), requires_grad=True)
    out = embedding(ids, weight)
    grad = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(grad)
    want = np.zeros((vocab, dim), dtype=np.float32)
    np.add.at(want, ids.reshape(-1), grad.reshape(-1, dim))
    np.testing.assert_allclose(weight.grad.data, want, rtol=1e-5, atol=1e-5)


def test_ids_are_a_parameter_not_an_input():
    weight = Tensor(np.ones((4, 2), dtype=np.float32), requires_grad=True)
    out = embedding([1, 2], weight)
    assert out._ctx.fn is EmbeddingFunction and len(out._ctx.parents) == 1
    assert np.array_equal(out._ctx.params["indices"], [1, 2])


# ---- the layer ---------------------------------------------------------------------------


def test_embedding_layer_init_like_torch_and_seeded():
    manual_seed(3)
    a = Embedding(2000, 32)
    manual_seed(3)
    b = Embedding(2000, 32)
    assert a.weight.dtype == np.float32 and a.weight.shape == (2000, 32)
    np.testing.assert_array_equal(a.weight.data, b.weight.data)
    assert abs(a.weight.data.mean()) < 0.02 and abs(a.weight.data.std() - 1.0) < 0.02
    assert [n for n, _ in a.named_parameters()] == ["weight"]
    assert repr(a) == "Embedding(2000, 32)"
    assert a.state_dict()["weight"].shape == (2000, 32)


@pytest.mark.parametrize("ids", [
    np.array([[1, 2], [3, 0]]), np.array([[1, 2], [3, 0]], dtype=np.int32),
    np.array([[1, 2], [3, 0]], dtype=np.uint8), [[1, 2], [3, 0]],
])
def test_embedding_layer_accepts_integer_ids_of_any_form(ids):
    emb = Embedding(4, 3)
    for form in (ids, Tensor(np.asarray(ids), dtype=np.asarray(ids).dtype)):
        out = emb(form)
        assert out.shape == (2, 2, 3)
        np.testing.assert_array_equal(out.data, emb.weight.data[np.asarray(ids)])


@pytest.mark.parametrize(
    "bad, ids", [(9, [[0, 9]]), (4, [4]), (-1, [3, -1]), (-7, np.array([-7, 99]))]
)
def test_out_of_range_ids_name_the_id_and_the_range(bad, ids):
    emb = Embedding(4, 3)
    with pytest.raises(IndexError) as info:
        emb(ids)
    assert str(bad) in str(info.value) and "[0, 4)" in str(info.value)
    with pytest.raises(IndexError):
        embedding(ids, emb.weight)


@pytest.mark.parametrize(
    "ids", [Tensor([1, 2]), np.array([0.0, 1.0]), [1.5], np.array([True, False])]
)
def test_non_integer_ids_raise_type_error_saying_integers(ids):
    with pytest.raises(TypeError, match="integer"):
        Embedding(4, 3)(ids)


@pytest.mark.parametrize("args", [(0, 3), (4, 0), (4.0, 3), (True, 3), (-1, 2)])
def test_embedding_sizes_are_validated(args):
    with pytest.raises(ValueError):
        Embedding(*args)


def test_embedding_layer_trains_its_rows():
    emb = Embedding(5, 2)
    (emb([0, 0, 3]) * 2.0).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.data[:, 0], [4, 0, 0, 2, 0])


# ---- learned and sinusoidal positions ----------------------------------------------------


def test_positional_embedding_rows_offsets_and_gradients():
    pos = PositionalEmbedding(10, 3)
    np.testing.assert_array_equal(pos(4).data, pos.weight.data[:4])
    np.testing.assert_array_equal(pos(2, offset=8).data, pos.weight.data[8:])
    assert pos(0).shape == (0, 3)
    pos(3, offset=2).sum().backward()
    np.testing.assert_array_equal(pos.weight.grad.data[:, 0], [0, 0, 1, 1, 1, 0, 0, 0, 0, 0])
    assert repr(pos) == "PositionalEmbedding(10, 3)"


@pytest.mark.parametrize("seq_len, offset", [(11, 0), (5, 6), (1, 10)])
def test_positional_embedding_past_max_len_names_both_numbers(seq_len, offset):
    with pytest.raises(ValueError) as info:
        PositionalEmbedding(10, 3)(seq_len, offset=offset)
    assert str(seq_len + offset) in str(info.value) and "10" in str(info.value)


def test_sinusoidal_matches_vaswani_formula():
    max_len, dim = 40, 10
    pe = sinusoidal_encoding(max_len, dim)
    assert pe.dtype == np.float32 and pe.shape == (max_len, dim)
    want = np.zeros((max_len, dim))
    for pos in range(max_len):
        for i in range(0, dim, 2):
            want[pos, i] = math.sin(pos / 10000 ** (i / dim))
            want[pos, i + 1] = math.cos(pos / 10000 ** (i / dim))
    np.testing.assert_allclose(pe, want, atol=1e-6)


def test_sinusoidal_is_accurate_at_large_positions_and_relative():
    pe = sinusoidal_encoding(6000, 16)
    assert abs(float(pe[5000, 0]) - math.sin(5000.0)) < 1e-6  # angles computed in float64
    dots = pe[:-7] @ pe[7:].T  # PE[p] . PE[p + 7] for every p on the diagonal
    np.testing.assert_allclose(np.diag(dots), np.diag(dots)[0], atol=1e-4)


def test_sinusoidal_layer_has_no_parameters():
    layer = SinusoidalPositionalEncoding(12, 4)
    assert list(layer.parameters()) == [] and layer.state_dict() == {}
    out = layer(3, offset=9)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.data, sinusoidal_encoding(12, 4)[9:12])
    with pytest.raises(ValueError):
        layer(4, offset=9)


# ---- rotary embeddings --------------------------------------------------------------------


def hf_rope(torch, x, positions, base=10000.0):
    """Hugging Face's Llama/Qwen RoPE, written out in torch (float64)."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def torch_rotate_half(t):
        x1, x2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    return x * cos + torch_rotate_half(x) * sin, cos, sin


@pytest.mark.parametrize(
    "head_dim, base, offset", [(8, 10000.0, 0), (16, 10000.0, 37), (4, 500.0, 5)]
)
def test_rope_matches_hugging_face_formula_values_and_gradients(head_dim, base, offset):
    torch = torch_or_skip()
    rng = np.random.default_rng(head_dim)
    B, H, T = 2, 3, 7
    x = rng.standard_normal((B, H, T, head_dim))
    rope = RotaryEmbedding(head_dim, max_len=64, base=base)
    cos, sin = rope.cos_sin(T, offset)

    xt = torch.tensor(x, requires_grad=True)
    want, cos_t, sin_t = hf_rope(torch, xt, torch.arange(offset, offset + T), base)
    np.testing.assert_allclose(cos, cos_t.numpy(), atol=1e-6)
    np.testing.assert_allclose(sin, sin_t.numpy(), atol=1e-6)

    got = apply_rotary(f64(x), cos, sin)  # float64 input meets float32 tables
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.data, want.detach().numpy(), atol=1e-6)
    grad = rng.standard_normal(x.shape)
    xt_grad = torch.autograd.grad(want, xt, torch.tensor(grad))[0]
    ours = f64(x)
    apply_rotary(ours, cos, sin).backward(grad)
    np.testing.assert_allclose(ours.grad.data, xt_grad.numpy(), atol=1e-6)


def test_rope_matches_transformers_llama_when_installed():
    torch = torch_or_skip()
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 2, 3, 5, 8)).astype(np.float32)
    rope = RotaryEmbedding(8, max_len=16)
    cos, sin = rope.cos_sin(5, offset=4)
    q_hf, k_hf = llama.apply_rotary_pos_emb(
        torch.tensor(q), torch.tensor(k), torch.tensor(cos)[None], torch.tensor(sin)[None]
    )
    np.testing.assert_allclose(apply_rotary(Tensor(q), cos, sin).data, q_hf.numpy(), atol=1e-6)
    np.testing.assert_allclose(apply_rotary(Tensor(k), cos, sin).data, k_hf.numpy(), atol=1e-6)


def test_rope_offset_equals_position_in_full_sequence():
    rng = np.random.default_rng(0)
    rope = RotaryEmbedding(8, max_len=32)
    x = Tensor(rng.standard_normal((1, 2, 10, 8)).astype(np.float32))
    full = rope(x).data
    for k in (0, 3, 9):
        alone = rope(x[:, :, k:k + 1], offset=k).data
        np.testing.assert_allclose(alone, full[:, :, k:k + 1], atol=1e-6)


def test_rope_scores_depend_only_on_distance():
    rng = np.random.default_rng(1)
    rope = RotaryEmbedding(16, max_len=256)
    q = np.broadcast_to(rng.standard_normal(16).astype(np.float32), (200, 16))
    k = np.broadcast_to(rng.standard_normal(16).astype(np.float32), (200, 16))
    rq, rk = rope(Tensor(q.copy())).data, rope(Tensor(k.copy())).data
    scores = [float(rq[m] @ rk[m + 5]) for m in range(0, 190, 17)]
    np.testing.assert_allclose(scores, scores[0], atol=1e-4)


def test_rope_gradcheck_and_float32():
    rope = RotaryEmbedding(6, max_len=8)
    cos, sin = rope.cos_sin(5, offset=2)
    assert cos.dtype == np.float32 and sin.dtype == np.float32 and cos.shape == (5, 6)
    x = f64(np.random.default_rng(2).standard_normal((2, 5, 6)))
    assert gradcheck(lambda t: RotaryFunction.apply(t, cos=cos, sin=sin), [x])
    x32 = Tensor(np.ones((1, 5, 6), dtype=np.float32), requires_grad=True)
    out = apply_rotary(x32, cos, sin)
    out.backward(np.ones(out.shape, dtype=np.float32))
    assert out.dtype == np.float32 and x32.grad.dtype == np.float32


def test_rotate_half_is_minus_its_adjoint_and_does_not_copy_views_wrongly():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 4, 8))
    assert np.isclose(np.sum(rotate_half(a) * b), -np.sum(a * rotate_half(b)))
    np.testing.assert_array_equal(rotate_half(rotate_half(a)), -a)
    view = np.arange(16.0).reshape(2, 8)[:, ::-1]  # a non-contiguous input
    want = np.concatenate((-view[:, 4:], view[:, :4]), -1)
    np.testing.assert_array_equal(rotate_half(view), want)
    with pytest.raises(TypeError, match="apply_rotary"):
        rotate_half(Tensor(a))
    with pytest.raises(ValueError):
        rotate_half(np.ones((2, 3)))


@pytest.mark.parametrize("head_dim", [0, 3, 7, 2.0])
def test_rotary_head_dim_must_be_even(head_dim):
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(head_dim)


def test_rotary_errors_name_shapes_and_lengths():
    rope = RotaryEmbedding(8, max_len=16)
    with pytest.raises(ValueError) as info:
        rope.cos_sin(10, offset=7)
    assert "17" in str(info.value) and "16" in str(info.value)
    cos, sin = rope.cos_sin(4)
    with pytest.raises(ValueError) as info:
        apply_rotary(Tensor(np.ones((1, 5, 8), dtype=np.float32)), cos, sin)
    assert "(1, 5, 8)" in str(info.value) and "(4, 8)" in str(info.value)
    with pytest.raises(ValueError):
        apply_rotary(Tensor(np.ones((1, 4, 6), dtype=np.float32)), cos, sin)
