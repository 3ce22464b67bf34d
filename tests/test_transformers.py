"""Module 13 (models.transformer): fused norms, MLPs, the block and GPT, checked against
their composed twins, finite differences and PyTorch modules with the same weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tinytorch.core.autograd import gradcheck, no_grad  # noqa: E402
from tinytorch.core.tensor import Tensor, manual_seed  # noqa: E402
from tinytorch.core.training import CheckpointError, save_checkpoint  # noqa: E402
from tinytorch.models.transformer import (  # noqa: E402
    GPT,
    MLP,
    GPTConfig,
    LayerNorm,
    LayerNormFunction,
    RMSNorm,
    SwiGLU,
    TransformerBlock,
    config_mismatches,
    gpt_parameter_count,
    layer_norm,
    layer_norm_composed,
    load_gpt,
    read_gpt_config,
    rms_norm,
    rms_norm_composed,
    sample_logits,
    save_gpt,
    swiglu_hidden,
)
from torch_reference import (  # noqa: E402  (the one PyTorch twin of our GPT)
    TorchBlock,
    TorchGPT,
    TorchMLP,
    TorchRMSNorm,
    TorchSwiGLU,
    copy_to_tinytorch,
    copy_to_torch,
    init_like_nanogpt_,
    torch_gpt_from,
)

RNG = np.random.default_rng(1234)


def f32(*shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32)


def f64_tensor(*shape, shift=0.0):
    return Tensor(RNG.standard_normal(shape) + shift, dtype=np.float64, requires_grad=True)


def copy_weights(ours, theirs):
    """Copy our parameters into the torch twin by name; every name must exist in both."""
    copy_to_torch(ours, theirs)


def compare_grads(ours, theirs, rtol=2e-4, atol=2e-5):
    theirs_named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.dtype == np.float32, f"{name}.grad is {p.grad.dtype}"
        want = theirs_named[name].grad.numpy()
        scale = np.abs(want).max() + 1e-12
        err = np.abs(p.grad.data - want).max() / scale
        assert err < rtol or np.abs(p.grad.data - want).max() < atol, (
            f"{name}: gradient differs from PyTorch by {err:.2e} (relative to its max)"
        )


def run_both(ours, theirs, x, weight=None):
    """Forward both on x (float32), backward from the same random weights; return outputs."""
    weight = f32(*ours_shape(ours, x)) if weight is None else weight
    xo = Tensor(x, requires_grad=True)
    yo = ours(xo)
    (yo * Tensor(weight)).sum().backward()
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = theirs(xt)
    (yt * torch.from_numpy(weight)).sum().backward()
    return yo, yt, xo, xt


def ours_shape(module, x):
    with no_grad():
        return module(Tensor(x)).shape


# ---- the fused norms ----------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_gradcheck_float64(bias):
    x = f64_tensor(3, 4, 6)
    w = f64_tensor(6, shift=1.0)
    b = f64_tensor(6)
    if bias:
        assert gradcheck(lambda x, w, b: layer_norm(x, w, b), [x, w, b])
    else:
        assert gradcheck(lambda x, w: layer_norm(x, w), [x, w])


def test_rms_norm_gradcheck_float64():
    assert gradcheck(lambda x, w: rms_norm(x, w), [f64_tensor(2, 5, 7), f64_tensor(7, shift=1.0)])


@pytest.mark.parametrize("which", ["layer", "rms"])
def test_fused_norms_match_composed_twins_forward_and_backward(which):
    x = f32(4, 5, 16, scale=3.0, shift=2.0)
    w, b = f32(16, shift=1.0), f32(16)
    g = f32(4, 5, 16)
    results = []
    for fused in (True, False):
        xt = Tensor(x, requires_grad=True)
        wt = Tensor(w, requires_grad=True)
        bt = Tensor(b, requires_grad=True)
        if which == "layer":
            y = layer_norm(xt, wt, bt) if fused else layer_norm_composed(xt, wt, bt)
            params = (xt, wt, bt)
        else:
            y = rms_norm(xt, wt) if fused else rms_norm_composed(xt, wt)
            params = (xt, wt)
        (y * Tensor(g)).sum().backward()
        assert y.dtype == np.float32
        results.append((y.data, [p.grad.data for p in params]))
    (y1, g1), (y2, g2) = results
    np.testing.assert_allclose(y1, y2, rtol=1e-5, atol=1e-5)
    for a, b_ in zip(g1, g2):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b_, rtol=1e-4, atol=1e-4)


def test_fused_layer_norm_is_one_recorded_op():
    x = Tensor(f32(2, 3, 8), requires_grad=True)
    y = LayerNorm(8)(x)
    assert y._ctx.fn is LayerNormFunction
    assert all(p is x or p.ndim == 1 for p in y._ctx.parents)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_matches_torch(bias):
    ours = LayerNorm(24, bias=bias)
    ours.weight.data[...] = f32(24, shift=1.0)
    if bias:
        ours.bias.data[...] = f32(24)
    theirs = nn.LayerNorm(24, eps=1e-5, bias=bias)
    copy_weights(ours, theirs)
    x = f32(3, 7, 24, scale=4.0, shift=-1.0)
    yo, yt, xo, xt = run_both(ours, theirs, x)
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        yo.data, F.layer_norm(torch.from_numpy(x), (24,), torch.from_numpy(ours.weight.data),
                              torch.from_numpy(ours.bias.data) if bias else None).numpy(),
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    compare_grads(ours, theirs)


def test_rms_norm_matches_torch_formula_and_builtin():
    ours = RMSNorm(24)
    ours.weight.data[...] = f32(24, shift=1.0)
    theirs = TorchRMSNorm(24)
    copy_weights(ours, theirs)
    x = f32(2, 9, 24, scale=2.0, shift=0.5)
    yo, yt, xo, xt = run_both(ours, theirs, x)
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    builtin = F.rms_norm(torch.from_numpy(x), (24,), torch.from_numpy(ours.weight.data), eps=1e-6)
    np.testing.assert_allclose(yo.data, builtin.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    compare_grads(ours, theirs)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), width=st.integers(1, 9),
       which=st.sampled_from(["layer", "rms"]))
def test_norms_any_leading_shape_match_torch(shape, width, which):
    rng = np.random.default_rng(sum(shape) * 31 + width)
    x = rng.standard_normal((*shape, width)).astype(np.float32) * 2
    w = (rng.standard_normal(width) + 1).astype(np.float32)
    g = rng.standard_normal((*shape, width)).astype(np.float32)
    xo, wo = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    if which == "layer":
        yo, yt = layer_norm(xo, wo), F.layer_norm(xt, (width,), wt)
    else:
        yo, yt = rms_norm(xo, wo), F.rms_norm(xt, (width,), wt, eps=1e-6)
    (yo * Tensor(g)).sum().backward()
    (yt * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(wo.grad.data, wt.grad.numpy(), rtol=1e-3, atol=1e-3)
    assert xo.grad.shape == x.shape and wo.grad.shape == (width,)


def test_norm_rejects_wrong_width():
    with pytest.raises(ValueError, match="last axis"):
        LayerNorm(8)(Tensor(f32(2, 5)))


# ---- feed-forward networks ------------------------------------------------------------------
@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("bias", [True, False])
def test_mlp_matches_torch(approximate, bias):
    manual_seed(3)
    ours = MLP(16, bias=bias, approximate=approximate)
    theirs = TorchMLP(16, 64, bias=bias, approximate=approximate)
    copy_weights(ours, theirs)
    yo, yt, xo, xt = run_both(ours, theirs, f32(2, 5, 16))
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    compare_grads(ours, theirs)


def test_swiglu_matches_torch():
    manual_seed(4)
    ours = SwiGLU(16, 40)
    theirs = TorchSwiGLU(16, 40)
    copy_weights(ours, theirs)
    yo, yt, xo, xt = run_both(ours, theirs, f32(3, 4, 16))
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    compare_grads(ours, theirs)
    assert SwiGLU(12).gate_proj.out_features == swiglu_hidden(12) == 32


# ---- the block and the model ----------------------------------------------------------------
@pytest.mark.parametrize("variant", [
    dict(bias=True), dict(bias=False), dict(norm="rmsnorm", mlp="swiglu"),
    dict(gelu_approximate="none"),
])
def test_transformer_block_matches_torch(variant):
    manual_seed(5)
    config = GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=4, n_embd=32, **variant)
    ours = TransformerBlock(config)
    for name, p in ours.named_parameters():  # not the identity norms of initialization
        p.data[...] = f32(*p.shape, scale=0.3, shift=1.0 if name.startswith("ln") else 0.0)
    theirs = TorchBlock(config)
    copy_weights(ours, theirs)
    yo, yt, xo, xt = run_both(ours, theirs, f32(2, 8, 32))
    np.testing.assert_allclose(yo.data, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xo.grad.data, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    compare_grads(ours, theirs)


@pytest.mark.parametrize("variant", [
    dict(), dict(bias=True, tie_weights=False), dict(norm="rmsnorm", mlp="swiglu"),
])
def test_gpt_matches_torch_forward_loss_and_every_gradient(variant):
    manual_seed(6)
    config = GPTConfig(vocab_size=23, block_size=12, n_layer=3, n_head=2, n_embd=16, **variant)
    ours = GPT(config)
    theirs = TorchGPT(config)
    copy_weights(ours, theirs)
    rng = np.random.default_rng(7)
    idx, targets = rng.integers(0, 23, size=(4, 12)), rng.integers(0, 23, size=(4, 12))
    logits, loss = ours(idx, targets)
    loss.backward()
    t_logits, t_loss = theirs(torch.from_numpy(idx), torch.from_numpy(targets))
    t_loss.backward()
    assert logits.dtype == np.float32 and loss.dtype == np.float32
    np.testing.assert_allclose(logits.data, t_logits.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert abs(loss.item() - t_loss.item()) < 1e-5
    compare_grads(ours, theirs)
    if config.tie_weights:
        assert ours.lm_head.weight is ours.wte.weight
        assert sum(1 for _ in ours.parameters()) == len(dict(theirs.named_parameters()))


def test_torch_twin_copies_both_ways_and_its_fused_attention_agrees():
    """The shared twin (torch_reference): weights go PyTorch -> TinyTorch too, tied ones stay
    tied, the SDPA path gives the written-out path's logits, mismatched names are named."""
    manual_seed(8)
    config = GPTConfig(vocab_size=17, block_size=8, n_layer=2, n_head=2, n_embd=16)
    theirs = init_like_nanogpt_(TorchGPT(config), torch.Generator().manual_seed(3))
    ours = copy_to_tinytorch(theirs, GPT(config))
    assert ours.lm_head.weight is ours.wte.weight
    np.testing.assert_array_equal(ours.wte.weight.data, theirs.wte.weight.detach().numpy())
    assert ours.wte.weight.data.dtype == np.float32
    idx = np.random.default_rng(2).integers(0, 17, size=(3, 8))
    with no_grad():
        logits, _ = ours(idx)
    sdpa = torch_gpt_from(ours, attention="sdpa")
    with torch.no_grad():
        for twin in (theirs, sdpa):
            np.testing.assert_allclose(twin(torch.from_numpy(idx))[0].numpy(), logits.data,
                                       rtol=1e-4, atol=1e-5)
    std = float(theirs.blocks[0].attn.proj.weight.detach().std())
    assert abs(std - 0.02 / math.sqrt(4)) < 0.004, std
    with pytest.raises(ValueError, match=r"only in PyTorch \['blocks\.1\."):
        copy_to_torch(GPT(GPTConfig(**{**config.to_dict(), "n_layer": 1})), theirs)
    with pytest.raises(ValueError, match=r"wte.weight: TinyTorch \(18, 16\), PyTorch \(17, 16\)"):
        copy_to_torch(GPT(GPTConfig(**{**config.to_dict(), "vocab_size": 18})), theirs)
    with pytest.raises(ValueError, match="no dropout"):
        TorchGPT({**config.to_dict(), "dropout": 0.1})


def test_gpt_initialization_follows_nanogpt():
    manual_seed(0)
    config = GPTConfig(vocab_size=50, block_size=32, n_layer=6, n_head=4, n_embd=64, bias=True)
    model = GPT(config)
    params = dict(model.named_parameters())
    residual = 0.02 / math.sqrt(2 * 6)
    for name, p in params.items():
        assert p.dtype == np.float32, name
        if ".ln" in name or name.startswith("ln_f"):
            assert np.all(p.data == (1.0 if name.endswith("weight") else 0.0)), name
        elif name.endswith("bias"):
            assert np.all(p.data == 0), name
        elif name.endswith(("attn.proj.weight", "mlp.proj.weight")):
            assert abs(p.data.std() - residual) < 0.15 * residual, name
        else:
            assert abs(p.data.std() - 0.02) < 0.003, name
    manual_seed(0)
    again = GPT(config)
    pairs = zip(model.parameters(), again.parameters())
    assert all(np.array_equal(a.data, b.data) for a, b in pairs)


def test_gpt_input_errors():
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4))
    with pytest.raises(ValueError, match="block_size"):
        model(np.zeros((1, 5), dtype=np.int64))
    with pytest.raises(ValueError, match=r"\[5, 7\]"):
        model(np.array([[1, 5, 7]]))
    with pytest.raises(TypeError, match="integer"):
        model(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(np.zeros(3, dtype=np.int64))


def test_parameter_count_formula_and_lesson_example():
    example = GPTConfig(vocab_size=50_000, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                        bias=True, tie_weights=False)
    counts = gpt_parameter_count(example)
    assert counts["total"] == 162_642_432 and counts["blocks"] == 85_054_464
    config = GPTConfig(vocab_size=31, block_size=9, n_layer=2, n_head=2, n_embd=12, bias=True,
                       tie_weights=False)
    model = GPT(config)
    assert gpt_parameter_count(config)["total"] == model.num_parameters()
    embeddings = 31 * 12 + 9 * 12
    assert model.num_parameters(exclude_embeddings=True) == model.num_parameters() - embeddings
    tied = GPT(GPTConfig(vocab_size=31, block_size=9, n_layer=2, n_head=2, n_embd=12))
    assert tied.num_parameters(exclude_embeddings=True) == tied.num_parameters() - 9 * 12


# ---- configs --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    (dict(n_embd=130, n_head=4), ["n_embd", "n_head", "130"]),
    (dict(n_layer=0), ["n_layer"]),
    (dict(vocab_size=-1, block_size=2.5), ["vocab_size", "block_size"]),
    (dict(dropout=1.0), ["dropout"]),
    (dict(norm="batch", mlp="relu", gelu_approximate="exact"), ["norm", "mlp", "gelu_approximate"]),
    (dict(bias=1), ["bias"]),
])
def test_config_errors_list_every_problem(kwargs, words):
    with pytest.raises(ValueError) as info:
        GPTConfig(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_config_round_trip_and_unknown_fields():
    config = GPTConfig(n_layer=2, norm="rmsnorm")
    assert GPTConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="n_layers"):
        GPTConfig.from_dict({"n_layers": 2})


# ---- generation -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_model():
    manual_seed(11)
    return GPT(GPTConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=16))


def test_generate_is_deterministic_per_seed_and_crops(small_model):
    a = small_model.generate([1, 2, 3], 20, seed=5)
    assert a.dtype == np.int64 and a.shape == (23,) and a[:3].tolist() == [1, 2, 3]
    assert np.array_equal(a, small_model.generate([1, 2, 3], 20, seed=5))
    assert not np.array_equal(a, small_model.generate([1, 2, 3], 20, seed=6))
    manual_seed(0)
    b = small_model.generate([1], 10)
    manual_seed(0)
    assert np.array_equal(b, small_model.generate([1], 10)), "no seed: the shared generator"
    long = list(range(13)) * 2  # 26 tokens > block_size 6: only the last 6 are seen
    out = small_model.generate(long, 4, temperature=0)
    assert out.shape == (30,) and out[:26].tolist() == long
    cropped = small_model.generate(long[-6:], 1, temperature=0)
    assert out[26] == cropped[6], "generation must depend only on the last block_size tokens"


def test_generate_batch_greedy_and_no_graph(small_model):
    prompts = np.array([[1, 2], [3, 4], [5, 6]])
    out = small_model.generate(prompts, 5, temperature=0)
    assert out.shape == (3, 7)
    for row, prompt in zip(out, prompts):
        assert np.array_equal(row, small_model.generate(prompt, 5, temperature=0))
    small_model.train()
    small_model.generate([1], 3, seed=0)
    assert small_model.training
    assert all(p.grad is None for p in small_model.parameters())
    small_model.eval()
    small_model.generate([1], 3, seed=0)
    assert not small_model.training
    small_model.train()


def test_generate_greedy_matches_argmax_of_forward(small_model):
    ids = np.array([[4, 2, 9]])
    logits, _ = small_model(ids)
    nxt = small_model.generate(ids, 1, temperature=0)[0, -1]
    assert nxt == logits.data[0, -1].argmax()


def test_generate_errors(small_model):
    with pytest.raises(ValueError, match="non-empty"):
        small_model.generate([], 3)
    with pytest.raises(ValueError, match=r"\[13\]"):
        small_model.generate([1, 13], 3)
    with pytest.raises(ValueError, match="temperature"):
        small_model.generate([1], 3, temperature=-1)
    with pytest.raises(ValueError, match="top_k"):
        small_model.generate([1], 3, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        small_model.generate([1], 3, top_p=1.5)


def test_top_k_and_top_p_never_pick_excluded_ids():
    logits = np.log(np.array([[0.05, 0.4, 0.3, 0.2, 0.05], [0.6, 0.1, 0.1, 0.1, 0.1]]))
    rng = np.random.default_rng(0)
    k2 = np.array([sample_logits(logits, top_k=2, rng=rng) for _ in range(500)])
    assert set(k2[:, 0]) == {1, 2}
    assert set(k2[:, 1]) == {0, 1, 2, 3, 4}, "ties with the k-th largest logit are kept"
    p = np.array([sample_logits(logits, top_p=0.75, rng=rng) for _ in range(500)])
    assert set(p[:, 0]) == {1, 2, 3}  # 0.4 + 0.3 < 0.75 <= 0.4 + 0.3 + 0.2
    assert set(p[:, 1]) == {0, 1, 2}  # 0.6 + 0.1 < 0.75 <= 0.6 + 0.1 + 0.1 (stable order)
    k1 = np.array([sample_logits(logits, top_k=1, rng=rng) for _ in range(50)])
    assert (k1 == [1, 0]).all(), "top_k=1 is greedy"
    picks = [sample_logits(logits[0], top_k=3, rng=rng) for _ in range(6000)]
    counts = np.bincount(picks, minlength=5)
    np.testing.assert_allclose(counts[1:4] / 6000, np.array([0.4, 0.3, 0.2]) / 0.9, atol=0.03)


def test_temperature_sharpens_and_flattens():
    logits = np.log(np.array([0.7, 0.2, 0.1]))
    rng = np.random.default_rng(1)
    cold = np.bincount([sample_logits(logits, 0.25, rng=rng) for _ in range(2000)], minlength=3)
    hot = np.bincount([sample_logits(logits, 4.0, rng=rng) for _ in range(2000)], minlength=3)
    assert cold[0] / 2000 > 0.95 and hot[0] / 2000 < 0.5


# ---- checkpoints ----------------------------------------------------------------------------
def test_checkpoint_round_trip_and_config_mismatch(tmp_path):
    manual_seed(2)
    config = GPTConfig(vocab_size=9, block_size=6, n_layer=1, n_head=2, n_embd=8)
    model = GPT(config)
    path = tmp_path / "gpt.npz"
    save_gpt(path, model, step=3, extra={"chars": list("abcdefghi")})
    assert read_gpt_config(path) == config
    loaded, step, extra = load_gpt(path, config)
    assert step == 3 and extra["chars"][0] == "a"
    for a, b in zip(model.parameters(), loaded.parameters()):
        np.testing.assert_array_equal(a.data, b.data)
    assert loaded.lm_head.weight is loaded.wte.weight, "tying survives loading"
    with pytest.raises(CheckpointError) as info:
        load_gpt(path, GPTConfig(vocab_size=9, block_size=8, n_layer=2, n_head=2, n_embd=8))
    text = str(info.value)
    assert "block_size: checkpoint 6, requested 8" in text
    assert "n_layer: checkpoint 1, requested 2" in text
    assert "n_embd" not in text
    assert config_mismatches(config, {"n_head": 2}) == []


def test_checkpoint_without_config_is_refused(tmp_path):
    model = GPT(GPTConfig(vocab_size=9, block_size=6, n_layer=1, n_head=2, n_embd=8))
    path = tmp_path / "plain.npz"
    save_checkpoint(path, model)
    with pytest.raises(CheckpointError, match="save_gpt"):
        load_gpt(path)
