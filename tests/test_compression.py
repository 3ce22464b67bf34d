"""Module 16 (compression): pruning that stays pruned, CSR, structured pruning, distillation."""

from __future__ import annotations

import numpy as np
import pytest

from tinytorch.core.autograd import gradcheck, no_grad
from tinytorch.core.optimizers import SGD, AdamW
from tinytorch.core.tensor import ShapeError, Tensor, manual_seed
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf.compression import (
    CSRMatrix,
    HeadPrunedAttention,
    distillation_loss,
    magnitude_mask,
    prunable_weights,
    prune_heads,
    prune_magnitude,
    prune_mlp_neurons,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support:UserWarning")


def gpt(**overrides):
    manual_seed(0)
    sizes = dict(vocab_size=24, block_size=8, n_layer=2, n_head=4, n_embd=32)
    return GPT(GPTConfig(**dict(sizes, **overrides)))


def ids(shape=(3, 8), vocab=24, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape)


@pytest.mark.parametrize("amount", [1.0, -0.01, 1.2, float("nan"), None, True])
def test_amounts_outside_zero_one_are_a_clear_error(amount):
    w = np.ones((4, 4), dtype=np.float32)
    for call in (lambda: magnitude_mask(w, amount), lambda: prune_magnitude(gpt(), amount),
                 lambda: prune_mlp_neurons(gpt(), amount), lambda: prune_heads(gpt(), amount)):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            call()


def test_per_layer_pruning_removes_exactly_the_smallest():
    model = gpt()
    masks = prune_magnitude(model, 0.3)
    for name, w in prunable_weights(model):
        pruned = w.data == 0
        assert pruned.sum() == int(0.3 * w.size), name
    original = gpt()  # the same weights, unpruned
    for (name, w), (_, w0) in zip(prunable_weights(model), prunable_weights(original)):
        gone, kept = np.abs(w0.data[w.data == 0]), np.abs(w0.data[w.data != 0])
        assert gone.max() <= kept.min(), name
    assert masks.sparsity() == pytest.approx(0.3, abs=1e-3)


def test_global_pruning_uses_one_threshold_across_layers():
    model = gpt()
    model.blocks[1].mlp.proj.weight.data *= 20
    original = {n: w.data.copy() for n, w in prunable_weights(model)}
    masks = prune_magnitude(model, 0.6, scope="global")
    gone = np.concatenate([np.abs(original[n][w.data == 0]) for n, w in prunable_weights(model)])
    kept = np.concatenate([np.abs(original[n][w.data != 0]) for n, w in prunable_weights(model)])
    assert gone.max() <= kept.min()
    assert masks.sparsity() == pytest.approx(0.6, abs=1e-3)
    per = masks.layer_sparsity()
    assert per["blocks.1.mlp.proj.weight"] < 0.1 < 0.6 < max(per.values())
    assert "lm_head.weight" not in per  # the tied head (the embedding) is skipped


@pytest.mark.parametrize("make", [
    lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: SGD(ps, lr=0.1, momentum=0.9),
])
def test_masks_survive_optimizer_steps(make):
    model = gpt()
    x = ids()
    optimizer = make(list(model.parameters()))
    for _ in range(2):  # momentum on every weight before pruning
        optimizer.zero_grad()
        model(x, x)[1].backward()
        optimizer.step()
    masks = prune_magnitude(model, 0.5)
    masked = masks.wrap(optimizer)
    start = [p.data.copy() for p, _ in masks.items()]
    for _ in range(4):
        masked.zero_grad()
        model(x, x)[1].backward()
        masked.step()
    for (p, mask), before in zip(masks.items(), start):
        assert np.count_nonzero(p.data[~mask]) == 0
        assert np.abs(p.data[mask] - before[mask]).max() > 0
    assert masks.sparsity() == pytest.approx(0.5, abs=1e-3)
    # Without the wrapper the same optimizer does revive them: the test above is not vacuous.
    optimizer.zero_grad()
    model(x, x)[1].backward()
    optimizer.step()
    assert masks.sparsity() < 0.5


@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_csr_layout_equals_torch_and_bytes_are_measured(density):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((37, 53)).astype(np.float32)
    w[rng.random(w.shape) >= density] = 0.0
    w[-1] = 0.0  # an empty last row
    csr = CSRMatrix.from_dense(w)
    ref = torch.from_numpy(w).to_sparse_csr()
    np.testing.assert_array_equal(csr.indptr, ref.crow_indices().numpy())
    np.testing.assert_array_equal(csr.indices, ref.col_indices().numpy())
    np.testing.assert_array_equal(csr.data, ref.values().numpy())
    nnz = np.count_nonzero(w)
    assert csr.nbytes == csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes
    assert csr.nbytes == 8 * nnz + 4 * 38
    np.testing.assert_array_equal(csr.to_dense(), w)
    x = rng.standard_normal((6, 53)).astype(np.float32)
    np.testing.assert_allclose(csr.matmul_t(x), x @ w.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="53"):
        csr.matmul_t(np.ones((2, 52), dtype=np.float32))


@pytest.mark.parametrize("overrides", [{"bias": True}, {"mlp": "swiglu"}])
def test_structured_mlp_pruning_equals_zeroed_neurons(overrides):
    model, zeroed = gpt(**overrides), gpt(**overrides)
    sizes = prune_mlp_neurons(model, 0.25)
    x = ids()
    for i in range(2):
        name = f"blocks.{i}.mlp"
        big, small = zeroed.blocks[i].mlp, model.blocks[i].mlp
        out_big = big.proj if hasattr(big, "proj") else big.down_proj
        out_small = small.proj if hasattr(small, "proj") else small.down_proj
        hidden, kept = sizes[name]
        assert kept == hidden - hidden // 4 and out_small.weight.shape == (32, kept)
        cols = [np.flatnonzero((out_big.weight.data.T == c).all(axis=1))[0]
                for c in out_small.weight.data.T]
        out_big.weight.data[:, np.setdiff1d(np.arange(hidden), cols)] = 0.0
    with no_grad():
        np.testing.assert_allclose(model(x)[0].data, zeroed(x)[0].data, atol=1e-5)
    assert model.num_parameters() < zeroed.num_parameters()


def test_head_pruning_equals_silenced_heads_and_still_trains():
    model, silenced = gpt(bias=True), gpt(bias=True)
    assert prune_heads(model, 0.5) == {"blocks.0.attn": (4, 2), "blocks.1.attn": (4, 2)}
    x = ids()
    for i in range(2):
        a, b = silenced.blocks[i].attn, model.blocks[i].attn
        assert isinstance(b, HeadPrunedAttention) and b.qkv.weight.shape == (48, 32)
        kept = [np.flatnonzero((a.proj.weight.data.T == c).all(axis=1))[0]
                for c in b.proj.weight.data.T]
        heads = sorted({k // 8 for k in kept})
        assert len(heads) == 2 and kept == [h * 8 + d for h in heads for d in range(8)]
        a.proj.weight.data[:, np.setdiff1d(np.arange(32), kept)] = 0.0
    with no_grad():
        np.testing.assert_allclose(model(x)[0].data, silenced(x)[0].data, atol=1e-5)
    _, loss = model(x, x)
    loss.backward()
    attn = model.blocks[0].attn
    assert attn.qkv.weight.grad.shape == (48, 32) and attn.proj.weight.grad.shape == (32, 16)


def test_distillation_loss_equals_torch_value_and_gradient():
    rng = np.random.default_rng(0)
    s = rng.standard_normal((2, 5, 11))
    t = rng.standard_normal((2, 5, 11)) * 3
    y = rng.integers(0, 11, (2, 5))
    T, alpha = 2.5, 0.7
    student = Tensor(s, dtype=np.float64, requires_grad=True)
    loss = distillation_loss(student, t, y, temperature=T, alpha=alpha)
    loss.backward()

    ts = torch.tensor(s.reshape(-1, 11), requires_grad=True)
    tt_ = torch.tensor(t.reshape(-1, 11))
    soft = torch.nn.functional.kl_div(torch.log_softmax(ts / T, -1), torch.softmax(tt_ / T, -1),
                                      reduction="batchmean") * T * T
    hard = torch.nn.functional.cross_entropy(ts, torch.tensor(y.reshape(-1)))
    ref = alpha * soft + (1 - alpha) * hard
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-12)
    np.testing.assert_allclose(student.grad.data.reshape(-1, 11), ts.grad.numpy(), atol=1e-12)


def test_distillation_gradient_by_finite_differences():
    rng = np.random.default_rng(1)
    t = rng.standard_normal((4, 6))
    y = rng.integers(0, 6, 4)
    for T, alpha in ((1.0, 1.0), (4.0, 0.5)):
        s = Tensor(rng.standard_normal((4, 6)), dtype=np.float64, requires_grad=True)
        assert gradcheck(lambda z: distillation_loss(z, t, y, temperature=T, alpha=alpha), [s])


def test_distillation_bad_input():
    with pytest.raises(ShapeError, match=r"\(2, 5\).*\(2, 6\)"):
        distillation_loss(Tensor(np.zeros((2, 5))), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(Tensor(np.zeros((2, 5))), np.zeros((2, 5)), temperature=0)
    with pytest.raises(ValueError, match="alpha"):
        distillation_loss(Tensor(np.zeros((2, 5))), np.zeros((2, 5)), alpha=1.5)
