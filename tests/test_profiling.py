"""Module 14 (tinytorch.perf.profiling): FLOPs against hand counts and PyTorch's counter,
bytes kept for backward, the 6ND rule, the report, bad input, and the timing helper."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tinytorch.core import layers as layers_module
from tinytorch.core import tensor as tensor_module
from tinytorch.core.activations import ReLU
from tinytorch.core.attention import scaled_dot_product_attention
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.optimizers import SGD
from tinytorch.core.tensor import Tensor, best_time, manual_seed, time_runs
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf.profiling import (
    ProfileError,
    Profiler,
    attention_flops,
    matmul_flops,
)


def no_listener_left():
    return not layers_module._call_observers and not tensor_module._op_observers


def gpt_forward_flops(c, B, T):
    """Module 13's GPT forward, op by op, by hand (FLOP conventions of module 14)."""
    C, V, H, L, n = c.n_embd, c.vocab_size, c.n_head, c.n_layer, B * T
    bias = int(c.bias)
    norm = (6 + bias) * n * C
    attention = B * H * (4 * T * T * (C // H) + 6 * T * T)
    linear = lambda k, m: 2 * n * k * m + bias * n * m  # noqa: E731
    block = (norm + linear(C, 3 * C) + attention + linear(C, C) + n * C
             + norm + linear(C, 4 * C) + 8 * n * 4 * C + linear(4 * C, C) + n * C)
    return n * C + L * block + norm + 2 * n * C * V  # wte + wpe, blocks, ln_f, lm_head


def small_gpt(**overrides):
    manual_seed(0)
    sizes = dict(vocab_size=40, block_size=32, n_layer=2, n_head=4, n_embd=32)
    sizes.update(overrides)
    return GPT(GPTConfig(**sizes))


def batch(model, B, T, seed=0):
    idx = np.random.default_rng(seed).integers(0, model.config.vocab_size, size=(B, T + 1))
    return idx[:, :-1], idx[:, 1:]


# ---- FLOPs -----------------------------------------------------------------------------
def test_linear_flops_hand_count_and_pytorch():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    manual_seed(0)
    layer = Linear(24, 40)
    x = np.random.default_rng(0).standard_normal((5, 7, 24)).astype(np.float32)
    profile = Profiler(depth=0, repeat=1).profile_forward_pass(layer, Tensor(x))
    assert profile.flops == 2 * 35 * 24 * 40 + 35 * 40  # product + bias
    reference = torch.nn.Linear(24, 40)
    with FlopCounterMode(display=False) as counter:
        reference(torch.from_numpy(x))
    # PyTorch counts the matrix product only (its bias add is fused into addmm)
    assert counter.get_total_flops() == profile.flops - 35 * 40


def test_attention_flops_hand_count_and_pytorch():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    B, H, T, S, D = 2, 3, 16, 16, 8
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((B, H, n, D)).astype(np.float32) for n in (T, S, S))
    want = B * H * (2 * T * S * D * 2 + 6 * T * S)
    assert attention_flops(q.shape, k.shape, v.shape) == want

    class Attend(layers_module.Module):
        def forward(self, q):
            return scaled_dot_product_attention(q, Tensor(k), Tensor(v), is_causal=True)

    profile = Profiler(depth=0, repeat=1).profile_forward_pass(Attend(), Tensor(q))
    assert profile.flops == want  # the causal mask saves nothing: the full (T, S) is computed
    with FlopCounterMode(display=False) as counter:
        tq, tk, tv = torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)
        torch.softmax(tq @ tk.transpose(-1, -2) / D**0.5, dim=-1) @ tv  # attention, composed
    assert counter.get_total_flops() == B * H * 2 * T * S * D * 2  # PyTorch counts the products
    assert no_listener_left()


@pytest.mark.parametrize("a, b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)),
                                  ((4,), (4, 3)), ((3, 4), (4,))])
def test_matmul_flops_equal_multiply_adds_of_numpy(a, b):
    out = np.matmul(np.ones(a), np.ones(b))  # every output is a sum of k ones
    k = a[-1]
    assert matmul_flops(a, b) == 2 * k * out.size
    assert np.all(out == k)


def test_whole_gpt_forward_matches_the_hand_count():
    for bias in (False, True):
        model = small_gpt(bias=bias)
        x, _ = batch(model, 3, 32)
        profile = Profiler(depth=3, repeat=1).profile_forward_pass(model, x)
        assert profile.flops == gpt_forward_flops(model.config, 3, 32), bias
        assert not profile.uncounted
        # the rows add up to the whole, and the attention row holds qkv, attention and proj
        assert sum(r.flops for r in profile.rows) == profile.flops
        c = model.config
        n = 3 * 32
        attn = profile.row("blocks.1.attn").flops
        assert attn == (2 * n * c.n_embd * 3 * c.n_embd + 2 * n * c.n_embd * c.n_embd
                        + int(bias) * n * 4 * c.n_embd
                        + 3 * c.n_head * (4 * 32 * 32 * c.head_dim + 6 * 32 * 32))


def test_training_step_is_close_to_6ND_on_the_milestone_model():
    manual_seed(0)
    config = GPTConfig()  # the tinygpt milestone's model
    model = GPT(config)
    x, y = batch(model, 2, config.block_size)
    step = Profiler(depth=1, repeat=1).profile_training_step(
        model, x, y, SGD(model.parameters(), lr=0.0))
    n = model.num_parameters(exclude_embeddings=True)
    tokens = x.size
    counted = step.flops + step.backward_flops
    ratio = counted / (6 * n * tokens)
    assert 1.0 < ratio < 1.25, ratio
    attention = 12 * config.n_layer * config.block_size * config.n_embd * tokens
    with_attention = 6 * n * tokens + attention
    assert abs(counted / with_attention - 1) < 0.08
    assert set(step.phases) == {"forward", "backward", "optimizer"}
    assert all(p.grad is not None for p in model.parameters())  # a real backward ran


# ---- memory kept for backward ------------------------------------------------------------
def test_linear_keeps_its_input_and_two_outputs():
    manual_seed(0)
    layer = Linear(8, 16)
    x = Tensor(np.ones((10, 8), dtype=np.float32))
    profile = Profiler(depth=0, repeat=1).profile_forward_pass(layer, x)
    # MatMul keeps x and h = x @ W.T; Add keeps h + b; W, W.T (a view) and b are parameters
    assert profile.saved_bytes == 10 * 8 * 4 + 2 * 10 * 16 * 4


def test_kept_memory_is_linear_in_T_and_the_peak_has_a_T_squared_term():
    model = small_gpt(block_size=128)
    kept, peaks = [], []
    for t in (32, 64, 128):
        x, y = batch(model, 2, t)
        step = Profiler(depth=0, repeat=1).profile_training_step(
            model, x, y, SGD(model.parameters(), lr=0.0))
        kept.append(step.saved_bytes)
        peaks.append(step.peak_bytes)
    # recomputing attention in backward: only the (T, T) bool mask is quadratic in what is kept
    masks = [2 * t * t for t in (32, 64, 128)]  # one causal mask per layer
    linear = [k - m for k, m in zip(kept, masks)]
    assert linear[1] == pytest.approx(2 * linear[0], rel=0.02)
    assert linear[2] == pytest.approx(2 * linear[1], rel=0.02)
    # the peak grows faster than linearly: the (B, H, T, T) scores exist during the step
    assert peaks[2] - peaks[1] > 2.05 * (peaks[1] - peaks[0])


# ---- bad input ---------------------------------------------------------------------------
def test_wrong_input_shape_names_both_shapes():
    manual_seed(0)
    model = Sequential(Linear(8, 4), ReLU(), Linear(4, 2))
    with pytest.raises(ProfileError) as error:
        Profiler(repeat=1).profile_forward_pass(model, Tensor(np.ones((3, 5), np.float32)))
    text = str(error.value)
    assert "(3, 5)" in text and "(..., 8)" in text and "in_features=8" in text
    gpt = small_gpt(block_size=16)
    with pytest.raises(ProfileError, match=r"\(2, 20\).*block_size = 16"):
        Profiler(repeat=1).profile_training_step(
            gpt, np.zeros((2, 20), np.int64), np.zeros((2, 20), np.int64),
            SGD(gpt.parameters(), lr=0.1))
    with pytest.raises(ProfileError, match=r"\(16,\).*\(B, T\)"):
        Profiler(repeat=1).profile_forward_pass(gpt, np.zeros(16, np.int64))
    assert no_listener_left()


def test_training_step_without_a_loss_says_how_to_give_one():
    manual_seed(0)
    model = Sequential(Linear(4, 3))
    x = Tensor(np.ones((2, 4), np.float32))
    y = np.array([0, 2])
    with pytest.raises(ProfileError, match="loss_fn"):
        Profiler(repeat=1).profile_training_step(model, x, y, SGD(model.parameters(), lr=0.1))
    step = Profiler(repeat=1).profile_training_step(
        model, x, y, SGD(model.parameters(), lr=0.1), loss_fn=cross_entropy)
    assert step.row("(outside the model)").flops == 5 * 2 * 3  # the loss ran outside the model
    assert no_listener_left()


@pytest.mark.parametrize("kwargs", [{"depth": -1}, {"depth": 1.5}, {"repeat": 0}, {"warmup": 0}])
def test_bad_profiler_settings(kwargs):
    with pytest.raises(ValueError):
        Profiler(**kwargs)


def test_profiling_a_function_is_refused():
    with pytest.raises(TypeError, match="Module"):
        Profiler().profile_forward_pass(lambda x: x, np.ones(3))


# ---- the report --------------------------------------------------------------------------
def test_table_and_figure(tmp_path):
    from rich.console import Console

    model = small_gpt()
    x, _ = batch(model, 2, 16)
    profile = Profiler(depth=3, repeat=2).profile_forward_pass(model, x)
    console = Console(file=io.StringIO(), width=140)
    profile.show(console=console)
    text = console.file.getvalue()
    assert "blocks.0.attn" in text and "MultiHeadAttention" in text and "MFLOP" in text
    groups = profile.grouped()
    assert sum(g.flops for g in groups) == profile.flops
    assert {g.name for g in groups} >= {"MLP", "MultiHeadAttention", "LayerNorm"}
    path = profile.plot(tmp_path / "figures" / "profile.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(r.time >= 0 for r in profile.rows)


# ---- the timing helper (module 01) and the hook points ---------------------------------------
def test_time_runs_warms_up_and_repeats():
    calls = []
    runs = time_runs(lambda: calls.append(1), repeat=4, warmup=2)
    assert len(runs) == 4 and len(calls) == 6
    calls.clear()
    time_runs(lambda: calls.append(1), repeat=3, warmup=1, min_time=0.001)
    assert len(calls) > 3 + 1 + 1  # fast calls are repeated within a run
    assert best_time(lambda: None, repeat=3) >= 0


def test_hook_lists_are_empty_unless_a_profiler_runs():
    assert no_listener_left()
    model = Sequential(Linear(2, 2))
    Profiler(repeat=1).profile_forward_pass(model, Tensor(np.ones((1, 2), np.float32)))
    assert no_listener_left()
