# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 13: Transformers
#
# ## Overview
#
# Every piece of a GPT is now on your shelf: tensors and their gradients (modules 01 and
# 06), linear layers (03), cross-entropy (04), AdamW and a training loop (07, 08), a
# tokenizer (10), token and position embeddings (11) and causal multi-head attention (12).
# This module adds the last three pieces, **normalization**, the **feed-forward network**
# and the **residual block**, and stacks them into the model of GPT-2 and nanoGPT (and, with
# RMSNorm and SwiGLU swapped in here and module 11's rotary positions, most of LLaMA):
#
# ```
#   token ids (B, T)
#       │ wte (token embedding) + wpe (position embedding)
#       ▼
#   x (B, T, C) ─► [block 1] ─► ... ─► [block n_layer] ─► ln_f ─► lm_head ─► (B, T, V)
#
#   one block (pre-norm):   x = x + attn(ln1(x))      # tokens exchange information
#                           x = x + mlp(ln2(x))       # each token is processed on its own
# ```
#
# Then you make the model **write**: `generate` feeds its own predictions back in, one token
# at a time, with temperature, top-k and nucleus (top-p) sampling. The milestone after this
# module trains your GPT on Tiny Shakespeare on a CPU, with your own framework, at a speed
# close to PyTorch's. That only works if the pieces are fast, so the norms here are **fused**
# operations: one `Function` with a hand-written derivative instead of a dozen small ones.
#
# **In numbers.** A GPT-2-sized model (768 wide, 12 blocks, 50,257 tokens, 1,024 positions, an
# untied head) has **163M** parameters, **85M** of them in the blocks (7.1M each). Per token,
# a block's MLP costs $16 d^2 \approx 9.4$M FLOPs at width $d = 768$ whatever the length $N$,
# while attention costs $4 N d$ FLOPs and keeps $N$ weights per head: its compute overtakes
# the MLP's only at $N = 4d = 3\,072$ tokens, but its $O(N^2)$ memory, 48 MiB per layer at
# $N = 1024$, fills the memory first.
#
# ## Learning objectives
#
# - Implement layer normalization and RMS normalization as fused operations, derive their
#   backward passes, and check them against their composed twins and finite differences.
# - Explain why pre-norm residual blocks train stably when stacked deep, and where the
#   parameters and FLOPs of a transformer block are.
# - Build a GPT from a config dataclass whose invariants are checked, with nanoGPT's
#   initialization (including the `1/sqrt(2 * n_layer)` scaling of residual projections) and
#   optional weight tying.
# - Count a model's parameters with a formula, and check the formula against a real model.
# - Sample text autoregressively with temperature, top-k and top-p, reproducibly per seed.
# - Measure when the attention matrices outgrow the weights as the context grows.
#
# ## What you build
#
# - `LayerNormFunction` and `RMSNormFunction` (fused, with `@derivative` rules beside them),
#   `layer_norm`, `rms_norm`, and the modules `LayerNorm(dim, eps=1e-5, bias=True)` and
#   `RMSNorm(dim, eps=1e-6)`.
# - `MLP(dim, hidden=4*dim, dropout=0.0, bias=True)` (GPT's GELU feed-forward, layers `fc`
#   and `proj`) and `SwiGLU(dim, hidden)` (LLaMA's, layers `gate_proj`, `up_proj`,
#   `down_proj`).
# - `TransformerBlock(config)`: the pre-norm block.
# - `GPTConfig` and `GPT(config)`: `forward(idx, targets=None) -> (logits, loss)`,
#   `generate(...)`, `num_parameters(exclude_embeddings=...)`; `gpt_parameter_count(config)`.
# - `sample_logits(...)`, the sampling step on its own, and `generate_ids(model, ...)`, the
#   loop behind `GPT.generate`.
# - `save_gpt`, `load_gpt` and `config_mismatches`: checkpoints that carry their config.
#
# ## What you are not building yet
#
# - **A KV cache.** `generate` recomputes the whole context for every new token. Module 18
#   caches the keys and values and measures the speed-up.
# - **Loading GPT-2's published weights.** The layer names follow nanoGPT so that it is a
#   renaming exercise: GPT-2's `h.{i}.ln_1`, `attn.c_attn`, `attn.c_proj`, `mlp.c_fc` and
#   `mlp.c_proj` are your `blocks.{i}.ln1`, `attn.qkv`, `attn.proj`, `mlp.fc` and
#   `mlp.proj` (Part 5 of the notebook has the full table, and says which of GPT-2's weights
#   are stored transposed). But the 124M-parameter model is too slow to be fun in NumPy.
# - **Mixed precision, gradient checkpointing, FlashAttention.** Module 17 fuses and
#   measures; here everything is float32, and every activation the backward pass needs is
#   kept until it runs.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp models.transformer
#| export
import math
import os
from dataclasses import asdict, dataclass, fields

import numpy as np

from tinytorch.core.activations import gelu, silu
from tinytorch.core.attention import MultiHeadAttention
from tinytorch.core.autograd import derivative, no_grad
from tinytorch.core.embeddings import Embedding, PositionalEmbedding
from tinytorch.core.layers import Dropout, Linear, Module, Parameter, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.tensor import Function, ShapeError, Tensor, default_generator
from tinytorch.core.training import CheckpointError, load_checkpoint, save_checkpoint

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tempfile
import time
import tracemalloc

from tinytorch.core.attention import scaled_dot_product_attention
from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import manual_seed
from tinytorch.testing import expect_error, explain, float64_inputs  # module 01's test helpers

# %% [markdown]
# ## Part 1: layer normalization
#
# Deep networks train badly when the scale of their activations drifts from layer to
# layer: a block whose inputs are ten times larger than at initialization produces
# gradients ten times larger, and the learning rate that suited one layer is wrong for the
# next. **Layer normalization** (Ba, Kiros and Hinton, 2016) rescales each token's vector
# to zero mean and unit variance over its **features**, then lets the model choose the
# scale and shift it wants back through two learned vectors, `weight` (gamma) and `bias`
# (beta):
#
# $$\mu = \frac1C \sum_i x_i \qquad \sigma^2 = \frac1C \sum_i (x_i - \mu)^2 \qquad
#   \hat x_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} \qquad
#   y_i = \gamma_i \hat x_i + \beta_i$$
#
# The statistics are taken over the **last axis** (the `C` features of one token), never
# over the batch: each token is normalized on its own, so the result does not depend on the
# other sequences in the batch, and training and generation behave the same (unlike batch
# normalization). The variance is the biased one (divide by `C`, not `C - 1`), as in
# PyTorch. `eps = 1e-5` keeps a constant row from dividing by zero.
#
# A worked row: `x = [1, 2, 3, 6]` has `mu = 3`, `sigma^2 = (4 + 1 + 0 + 9) / 4 = 3.5`, so
# `x_hat = [-1.069, -0.535, 0, 1.604]`: mean 0, variance 1.
#
# ### Why fuse it
#
# Written with Tensor operations (the **composed twin**, given below), layer norm is about
# nine recorded operations: a mean, a subtraction, a square, another mean, an addition, a
# power, a division, a multiplication and an addition, each keeping arrays alive for
# backward and each costing a pass over memory in both directions. One **fused** `Function`
# does the forward in a few NumPy passes and its derivative rule does the backward in a few
# more. To make that backward cheap, the forward **saves** `x_hat` and `rstd = 1/sqrt(var +
# eps)`: set `saves_for_backward = True` on the class and return `(out, (x_hat, rstd))`;
# `Function.apply` (module 01) keeps the second item in `ctx.saved` for the rule.
#
# ### The backward pass
#
# With `g` the gradient of `y` and `g_hat = g * gamma` the gradient of `x_hat`, the three
# gradients are (derived in every normalization paper; try it on paper, it is a page):
#
# $$\frac{\partial L}{\partial \beta} = \sum_{\text{rows}} g \qquad
#   \frac{\partial L}{\partial \gamma} = \sum_{\text{rows}} g \,\hat x \qquad
#   \frac{\partial L}{\partial x} = \text{rstd}\left(\hat g - \operatorname{mean}(\hat g) -
#       \hat x \operatorname{mean}(\hat g\, \hat x)\right)$$
#
# where the means are over the features (last axis, `keepdims=True`) and "rows" means every
# axis but the last. The two subtracted terms are what normalization takes away: moving all
# inputs of a row up together (the mean) or scaling them together (the `x_hat` direction)
# does not change `x_hat`, so the gradient has no component along those two directions.
#
# Return the parameter gradients already summed to shape `(C,)`: the engine could sum a
# `(B, T, C)` gradient down for you, but that array need never exist. The bias is optional,
# so the op has two inputs `(x, weight)` or three `(x, weight, bias)`, and the rule returns
# one gradient per input: check `len(ctx.parents)`, and skip the work for a parameter whose
# `ctx.parents[i].requires_grad` is False (return `None` in its place).
#
# **Cost.** Forward and backward are each a handful of passes over the `(B, T, C)`
# activations: $O(B T C)$ time, no matrix products. Memory: `x_hat` (one activation) plus one
# number per row. Two NumPy habits keep the passes few: update arrays you own in place
# (`x_hat *= rstd`, not `x_hat = x_hat * rstd`, which allocates a new activation), and
# compute a row-wise sum of products with `np.einsum("...i,...i->...", a, b)`, which never
# builds the product `a * b` (the variance, and `mean(g_hat * x_hat)`).

# %% nbgrader={"grade": false, "grade_id": "composed-norms", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def layer_norm_composed(x, weight, bias=None, eps=1e-5):
    """Layer norm from Tensor operations: the slow twin the fused op is checked against."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centered = x - mean  # (..., C)
    var = (centered * centered).mean(axis=-1, keepdims=True)  # (..., 1)
    y = centered / (var + eps) ** 0.5 * weight  # (..., C)
    return y + bias if bias is not None else y


def rms_norm_composed(x, weight, eps=1e-6):
    """RMS norm from Tensor operations: the slow twin the fused op is checked against."""
    ms = (x * x).mean(axis=-1, keepdims=True)  # (..., 1)
    return x / (ms + eps) ** 0.5 * weight  # (..., C)


# %% nbgrader={"grade": false, "grade_id": "layernorm-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class LayerNormFunction(Function):
    """y = (x - mean) / sqrt(var + eps) * weight (+ bias), over the last axis"""

    saves_for_backward = True  # forward returns (out, (x_hat, rstd)); see Function.apply

    @staticmethod
    def forward(x, weight, *bias, eps=1e-5):
        ### BEGIN SOLUTION
        dtype = x.dtype.type
        inv_c = dtype(1.0 / x.shape[-1])
        mean = np.add.reduce(x, axis=-1, keepdims=True)  # (..., 1)
        mean *= inv_c
        x_hat = x - mean  # (..., C), a new array: ours to overwrite
        var = np.einsum("...i,...i->...", x_hat, x_hat)[..., None]  # (..., 1), no temporary
        var *= inv_c
        var += dtype(eps)
        rstd = np.reciprocal(np.sqrt(var, out=var), out=var)  # (..., 1)
        x_hat *= rstd
        out = x_hat * weight  # (..., C)
        if bias:
            out += bias[0]
        return out, (x_hat, rstd)
        ### END SOLUTION


@derivative(LayerNormFunction)
def layer_norm_backward(ctx, grad):
    """d layer_norm: rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)), g_hat = g * w"""
    ### BEGIN SOLUTION
    x_hat, rstd = ctx.saved
    weight = ctx.inputs[1]
    c = x_hat.shape[-1]
    inv_c = x_hat.dtype.type(1.0 / c)
    g_hat = grad * weight  # (..., C)
    mean_g = np.add.reduce(g_hat, axis=-1, keepdims=True)  # (..., 1)
    mean_g *= inv_c
    mean_gx = np.einsum("...i,...i->...", g_hat, x_hat)[..., None]  # (..., 1)
    mean_gx *= inv_c
    g_hat -= mean_g
    g_hat -= x_hat * mean_gx
    g_hat *= rstd  # now dL/dx
    grad_weight = grad_bias = None
    if ctx.parents[1].requires_grad:
        grad_weight = np.einsum("ij,ij->j", grad.reshape(-1, c), x_hat.reshape(-1, c))  # (C,)
    if len(ctx.parents) == 3 and ctx.parents[2].requires_grad:
        grad_bias = np.add.reduce(grad.reshape(-1, c), axis=0)  # (C,)
    grads = (g_hat, grad_weight)
    return grads + (grad_bias,) if len(ctx.parents) == 3 else grads
    ### END SOLUTION


# %% [markdown]
# The function and the module that call the op are given. Note how `bias=None` is handled:
# the op gets two inputs instead of three, so there is no fake zero bias to differentiate.

# %% nbgrader={"grade": false, "grade_id": "layernorm-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def _check_norm_input(x, weight, name):
    if x.ndim == 0 or x.shape[-1] != weight.shape[0]:
        raise ShapeError(
            f"{name}({weight.shape[0]}) got an input of shape {x.shape}: it normalizes the "
            f"last axis, which must have {weight.shape[0]} features. Was the norm built with "
            "the model's width (n_embd)?"
        )


def layer_norm(x, weight, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (one fused op).

    >>> x = Tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])  # each row on its own
    >>> y = layer_norm(x, Tensor(np.ones(3, dtype=np.float32)))
    >>> y.data.round(3)
    array([[-1.225,  0.   ,  1.225],
           [-1.225,  0.   ,  1.225]], dtype=float32)
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    _check_norm_input(x, weight, "LayerNorm")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return LayerNormFunction.apply(*inputs, eps=eps)


class LayerNorm(Module):
    """Normalize each row over its last axis, then scale by `weight` and shift by `bias`.

    As in PyTorch, `normalized_shape` may be a tuple: the last len(normalized_shape) axes
    are normalized together, and weight and bias have that shape. With
    `elementwise_affine=False` there is no weight and no bias (both are None).

    >>> norm = LayerNorm(4)
    >>> print(norm)
    LayerNorm(4, eps=1e-05, bias=True)
    >>> norm.weight.shape, norm.bias.shape
    ((4,), (4,))
    >>> y = norm(Tensor(np.random.default_rng(0).standard_normal((2, 3, 4)) * 5 + 7))
    >>> y.shape, y.dtype
    ((2, 3, 4), dtype('float32'))
    >>> bool(np.abs(y.data.mean(axis=-1)).max() < 1e-5)  # every row centred
    True
    >>> LayerNorm((2, 3)).weight.shape  # the last two axes normalized together
    (2, 3)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.dim, self.eps = int(np.prod(self.normalized_shape)), float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = self.bias = None
        if self.elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, dtype=np.float32))
            if bias:
                self.bias = Parameter(np.zeros(self.normalized_shape, dtype=np.float32))

    def forward(self, x):
        x = x if isinstance(x, Tensor) else Tensor(x)
        k = len(self.normalized_shape)
        if k > 1 and (x.ndim < k or x.shape[x.ndim - k:] != self.normalized_shape):
            raise ShapeError(
                f"LayerNorm({self.normalized_shape}) got an input of shape {x.shape}: its last "
                f"{k} axes must be {self.normalized_shape}"
            )
        if self.weight is None:
            weight = Tensor(np.ones(self.dim, dtype=x.dtype))  # a constant: no parameter
        else:
            weight = self.weight if k == 1 else self.weight.reshape(self.dim)
        bias = self.bias if self.bias is None or k == 1 else self.bias.reshape(self.dim)
        if k == 1:
            return layer_norm(x, weight, bias, self.eps)
        flat = x.reshape(*x.shape[: x.ndim - k], self.dim)  # (..., prod(normalized_shape))
        return layer_norm(flat, weight, bias, self.eps).reshape(x.shape)

    def extra_repr(self):
        shape = self.dim if len(self.normalized_shape) == 1 else self.normalized_shape
        affine = "" if self.elementwise_affine else ", elementwise_affine=False"
        return f"{shape}, eps={self.eps}{affine}, bias={self.bias is not None}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_layer_norm", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_layer_norm():
    """Each row gets mean 0 and variance 1 over its features; matches the composed twin."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 3, 8)) * 5 + 3).astype(np.float32)
    ln = LayerNorm(8)
    y = ln(Tensor(x))
    assert y.shape == x.shape, (
        f"LayerNorm(8) on {x.shape} gave {y.shape}: the shape must not change"
    )
    assert y.dtype == np.float32, (
        f"LayerNorm of float32 gave {y.dtype}: build eps and 1 with x.dtype.type(...)"
    )
    mean = y.data.mean(axis=-1)
    var = y.data.var(axis=-1)
    assert np.abs(mean).max() < 1e-5, (
        f"Mean should be ~0, got {mean.flat[np.abs(mean).argmax()]:.3g}: the statistics were "
        "taken over the wrong axis; normalize over the features, axis=-1, keepdims=True"
    )
    assert np.abs(var - 1).max() < 1e-3, (
        f"Variance should be ~1, got {var.flat[np.abs(var - 1).argmax()]:.4g}: divide by "
        "sqrt(var + eps) with the biased variance (mean of squared deviations, over axis=-1)"
    )
    row = layer_norm(Tensor([[1.0, 2.0, 3.0, 6.0]]), Tensor(np.ones(4, np.float32)), eps=0.0)
    assert np.allclose(row.data, [[-1.069045, -0.534522, 0.0, 1.603567]], atol=1e-5), (
        f"layer_norm([1, 2, 3, 6]) gave {row.data}, expected [-1.069, -0.535, 0, 1.604] "
        "(mean 3, variance 3.5: divide by C, not C - 1)"
    )
    w = Tensor(rng.standard_normal(8).astype(np.float32))
    b = Tensor(rng.standard_normal(8).astype(np.float32))
    fused = layer_norm(Tensor(x), w, b).data
    composed = layer_norm_composed(Tensor(x), w, b).data
    assert np.allclose(fused, composed, atol=1e-5), (
        f"fused layer norm differs from the composed twin by {np.abs(fused - composed).max():.3g}: "
        "y = x_hat * weight + bias, with weight and bias of shape (C,)"
    )
    nobias = layer_norm(Tensor(x), w).data
    assert np.allclose(nobias, layer_norm_composed(Tensor(x), w).data, atol=1e-5), (
        "layer_norm without a bias should be x_hat * weight (the op gets only two inputs)"
    )
    out = LayerNormFunction.apply(Tensor(x, requires_grad=True), w, b, eps=1e-5)
    saved = out._ctx.saved
    assert isinstance(saved, tuple) and len(saved) == 2, (
        "forward should return (out, (x_hat, rstd)) so that backward can reuse them"
    )

    def check_normalized(x, w, b, eps):
        """layer_norm(x, w, b, eps) against the formula in float64; x's dtype kept."""
        dtype = x.dtype
        got = layer_norm(Tensor(x, dtype=dtype), Tensor(w, dtype=dtype),
                         None if b is None else Tensor(b, dtype=dtype), eps=eps)
        x64 = x.astype(np.float64)
        want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + eps) * w
        want = want if b is None else want + b
        assert got.shape == x.shape and got.dtype == dtype, (
            f"layer_norm of {dtype} {x.shape} gave {got.dtype} {got.shape}: shape and dtype stay"
        )
        tol = 1e-10 if dtype == np.float64 else 2e-5
        assert np.allclose(got.data, want, rtol=tol, atol=tol), (
            f"layer_norm (eps={eps:g}, {'no bias' if b is None else 'with a bias'}) differs from "
            f"(x - mean) / sqrt(var + eps) * weight + bias by up to "
            f"{np.nanmax(np.abs(got.data - want)):.3g}: statistics over the last axis, the "
            "biased variance, eps added inside the square root (the eps you are given)"
        )

    check_normalized(x, w.data, b.data, 1e-5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1301)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    hidden_cases(check_normalized, {
        "a large epsilon": (normal(3, 6), normal(6), normal(6), 0.5),
        "constant rows": (np.full((2, 5), 2.5, dtype=np.float32), normal(5), normal(5), 1e-5),
        "a single feature": (normal(4, 1), normal(1), normal(1), 1e-5),
        "float64 input": (normal(2, 3, 7, dtype=np.float64), normal(7, dtype=np.float64),
                          normal(7, dtype=np.float64), 1e-5),
        "a vector": (normal(9), normal(9), normal(9), 1e-5),
        "many rows without a bias": (normal(50, 3), normal(3), None, 1e-5),
        "values a thousand times larger": (normal(4, 8) * 1000, normal(8), normal(8), 1e-5),
    })
    ### END HIDDEN TESTS


test_unit_layer_norm()


# %% nbgrader={"grade": true, "grade_id": "test_unit_layer_norm_backward", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_layer_norm_backward():
    """The fused rule passes gradcheck and gives weight and bias their gradients."""
    rng = np.random.default_rng(1)
    x, w, b = float64_inputs(rng, (2, 3, 5), (5,), (5,))
    w.data += 1.0  # weights around 1, as after initialization
    rule = ("Input 0 is x: dx = rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat)) "
            "with g_hat = grad * weight; input 1 is weight: sum of grad * x_hat over every "
            "axis but the last; input 2 is bias: the sum of grad over those axes")
    cases = [  # (what, fn, inputs)
        ("layer_norm(x, weight, bias)", lambda x, w, b: layer_norm(x, w, b), [x, w, b]),
        ("layer_norm(x, weight), no bias", lambda x, w: layer_norm(x, w), [x, w]),
    ]
    for what, fn, inputs in cases:
        explain(f"the derivative rule of {what}", lambda: gradcheck(fn, inputs), rule)
    x32 = Tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    ln = LayerNorm(6)
    (ln(x32) * Tensor(rng.standard_normal((4, 6)).astype(np.float32))).sum().backward()
    assert ln.weight.grad is not None and ln.bias.grad is not None, (
        "LayerNorm's weight and bias got no gradient: the rule must return one gradient per "
        "input, (dx, dweight, dbias), and the op must take weight and bias as inputs"
    )
    assert ln.weight.grad.shape == (6,) and ln.bias.grad.shape == (6,), (
        f"parameter gradients have shapes {ln.weight.grad.shape}, {ln.bias.grad.shape}, "
        "expected (6,)"
    )
    assert x32.grad.dtype == np.float32 and ln.weight.grad.dtype == np.float32, (
        "gradients of a float32 layer norm must be float32"
    )
    assert abs(float(x32.grad.data.sum(axis=-1).max())) < 1e-4, (
        "each row of dL/dx should sum to ~0 (shifting a whole row does not change x_hat): "
        "did you forget to subtract mean(g_hat)?"
    )

    def check_rule(shape, bias, learned, eps, seed):
        """The rule against central differences for x of `shape` (weight and bias learned or
        constants), and in float32: parameter gradients of shape (C,), rows of dx summing to 0."""
        rng = np.random.default_rng(seed)
        c = shape[-1]
        x = float64_inputs(rng, shape)
        w = Tensor(rng.standard_normal(c) + 1.0, dtype=np.float64, requires_grad=learned)
        b = None
        if bias:
            b = Tensor(rng.standard_normal(c), dtype=np.float64, requires_grad=learned)
        inputs = [x] + ([w] + ([b] if bias else []) if learned else [])

        def fn(x, *params):  # params: the learned weight (and bias), else the constants
            return layer_norm(x, *(params if learned else (w, b)), eps=eps)

        explain(f"the derivative rule of layer_norm on x {shape}, eps {eps:g}",
                lambda: gradcheck(fn, inputs), rule)
        x32 = Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        ln = LayerNorm(c, eps=eps, bias=bias)
        (ln(x32) * Tensor(rng.standard_normal(shape).astype(np.float32))).sum().backward()
        grads = [ln.weight.grad] + ([ln.bias.grad] if bias else [])
        assert all(g is not None and g.shape == (c,) for g in grads), (
            f"LayerNorm({c})'s parameters should get gradients of shape ({c},), got "
            f"{[None if g is None else g.shape for g in grads]}"
        )
        assert x32.grad.dtype == np.float32, "gradients of a float32 layer norm must be float32"
        assert np.abs(x32.grad.data.sum(axis=-1)).max() < 1e-4, (
            "each row of dL/dx should sum to ~0: did you forget to subtract mean(g_hat)?"
        )

    check_rule((2, 3, 5), True, True, 1e-5, 1)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_rule, {
        "a vector": ((6,), True, True, 1e-5, 11),
        "many rows of two features": ((12, 2), True, True, 1e-5, 12),
        "a large epsilon": ((3, 4), True, True, 0.7, 13),
        "constant weight and bias": ((2, 2, 5), True, False, 1e-5, 14),
        "four axes without a bias": ((2, 1, 3, 4), False, True, 1e-5, 15),
    })
    ### END HIDDEN TESTS


test_unit_layer_norm_backward()

# %% [markdown]
# ## Part 2: RMS normalization
#
# LLaMA, Mistral and most models since 2023 use **RMSNorm** (Zhang and Sennrich, 2019): drop
# the mean subtraction and the bias, and divide by the root mean square:
#
# $$\text{rstd} = \frac{1}{\sqrt{\operatorname{mean}(x^2) + \epsilon}} \qquad
#   y = x \cdot \text{rstd} \cdot \gamma$$
#
# It is cheaper (no mean, no bias), and in practice re-centering turned out not to matter.
# Its backward is layer norm's without the mean term:
#
# $$\frac{\partial L}{\partial x} =
#   \text{rstd}\left(\hat g - \hat x\,\operatorname{mean}(\hat g\,\hat x)\right),
#   \qquad \hat x = x \cdot \text{rstd},\ \hat g = g\,\gamma, \qquad
#   \frac{\partial L}{\partial \gamma} = \sum_{\text{rows}} g\,\hat x$$
#
# The default `eps` is `1e-6` (LLaMA's). Same recipe as before: save `(x_hat, rstd)`.

# %% nbgrader={"grade": false, "grade_id": "rmsnorm-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class RMSNormFunction(Function):
    """y = x / sqrt(mean(x**2) + eps) * weight, over the last axis"""

    saves_for_backward = True

    @staticmethod
    def forward(x, weight, eps=1e-6):
        ### BEGIN SOLUTION
        dtype = x.dtype.type
        ms = np.einsum("...i,...i->...", x, x)[..., None]  # (..., 1), sum of squares
        ms *= dtype(1.0 / x.shape[-1])
        ms += dtype(eps)
        rstd = np.reciprocal(np.sqrt(ms, out=ms), out=ms)  # (..., 1)
        x_hat = x * rstd  # (..., C)
        return x_hat * weight, (x_hat, rstd)
        ### END SOLUTION


@derivative(RMSNormFunction)
def rms_norm_backward(ctx, grad):
    """d rms_norm: rstd * (g_hat - x_hat * mean(g_hat * x_hat)), g_hat = g * w"""
    ### BEGIN SOLUTION
    x_hat, rstd = ctx.saved
    weight = ctx.inputs[1]
    c = x_hat.shape[-1]
    g_hat = grad * weight  # (..., C)
    mean_gx = np.einsum("...i,...i->...", g_hat, x_hat)[..., None]  # (..., 1)
    mean_gx *= x_hat.dtype.type(1.0 / c)
    g_hat -= x_hat * mean_gx
    g_hat *= rstd
    grad_weight = None
    if ctx.parents[1].requires_grad:
        grad_weight = np.einsum("ij,ij->j", grad.reshape(-1, c), x_hat.reshape(-1, c))  # (C,)
    return g_hat, grad_weight
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "rmsnorm-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def rms_norm(x, weight, eps=1e-6):
    """x / sqrt(mean(x**2) + eps) * weight over the last axis (one fused op).

    eps=None is PyTorch's default: the machine epsilon of x's dtype (1.19e-7 for float32).

    >>> x = Tensor([[3.0, 4.0], [-6.0, 8.0]])  # root mean squares 3.536 and 7.071
    >>> rms_norm(x, Tensor(np.ones(2, dtype=np.float32))).data.round(4)
    array([[ 0.8485,  1.1314],
           [-0.8485,  1.1314]], dtype=float32)
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    _check_norm_input(x, weight, "RMSNorm")
    if eps is None:
        eps = float(np.finfo(x.dtype).eps)
    return RMSNormFunction.apply(x, weight, eps=eps)


class RMSNorm(Module):
    """Divide each row by its root mean square, then scale by `weight` (LLaMA's norm).

    The default eps=1e-6 is LLaMA's (and Hugging Face's LlamaRMSNorm's), which the models
    of this course follow and are compared with. PyTorch's torch.nn.RMSNorm defaults to
    eps=None, the machine epsilon of the input's dtype (1.19e-7 for float32): pass
    eps=None for that.

    >>> norm = RMSNorm(4)
    >>> print(norm)
    RMSNorm(4, eps=1e-06)
    >>> y = norm(Tensor(np.random.default_rng(0).standard_normal((2, 4)) * 10))
    >>> y.shape, y.dtype
    ((2, 4), dtype('float32'))
    >>> print(np.sqrt((y.data ** 2).mean(axis=-1)).round(4).tolist())  # root mean square 1
    [1.0, 1.0]
    """

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.dim, self.eps = int(dim), None if eps is None else float(eps)
        self.weight = Parameter(np.ones(self.dim, dtype=np.float32))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_rms_norm", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_rms_norm():
    """RMSNorm gives rows of root mean square 1, matches its twin, and passes gradcheck."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 5, 8)) * 4 + 1).astype(np.float32)
    y = RMSNorm(8)(Tensor(x))
    assert y.shape == x.shape and y.dtype == np.float32, (
        f"RMSNorm(8) on float32 {x.shape} gave {y.dtype} {y.shape}: shape and dtype must stay"
    )
    rms = np.sqrt((y.data ** 2).mean(axis=-1))
    assert np.abs(rms - 1).max() < 1e-3, (
        f"each row's root mean square should be ~1, got {rms.flat[np.abs(rms - 1).argmax()]:.4g}: "
        "divide by sqrt(mean(x**2, axis=-1, keepdims=True) + eps), and do NOT subtract the mean"
    )
    assert np.abs(y.data.mean(axis=-1)).max() > 1e-2, (
        "RMSNorm output rows have mean ~0: RMSNorm does not center the rows (that is LayerNorm)"
    )
    w = Tensor(rng.standard_normal(8).astype(np.float32))
    fused, composed = rms_norm(Tensor(x), w).data, rms_norm_composed(Tensor(x), w).data
    assert np.allclose(fused, composed, atol=1e-5), (
        f"fused RMSNorm differs from the composed twin by {np.abs(fused - composed).max():.3g}"
    )
    x64, w64 = float64_inputs(rng, (2, 4, 5), (5,))
    w64.data += 1.0
    explain("RMSNorm's derivative rule",
            lambda: gradcheck(lambda x, w: rms_norm(x, w), [x64, w64]),
            "dx = rstd * (g_hat - x_hat * mean(g_hat * x_hat)), dweight = sum of grad * x_hat "
            "over rows")
    norm = RMSNorm(5)
    norm(Tensor(rng.standard_normal((4, 5)).astype(np.float32))).sum().backward()
    assert norm.weight.grad is not None and norm.weight.grad.shape == (5,), (
        "RMSNorm.weight got no gradient of shape (5,): return (dx, dweight) from the rule"
    )

    def check_rms(x, w, eps, seed):
        """rms_norm(x, w, eps) against x / sqrt(mean(x**2) + eps) * w in float64, x's dtype
        kept; its rule against central differences on a float64 copy of x's shape."""
        dtype = x.dtype
        got = rms_norm(Tensor(x, dtype=dtype), Tensor(w, dtype=dtype), eps)
        x64 = x.astype(np.float64)
        want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w
        assert got.shape == x.shape and got.dtype == dtype, (
            f"rms_norm of {dtype} {x.shape} gave {got.dtype} {got.shape}: shape and dtype stay"
        )
        tol = 1e-10 if dtype == np.float64 else 2e-5
        assert np.allclose(got.data, want, rtol=tol, atol=tol), (
            f"rms_norm (eps={eps:g}) differs from x / sqrt(mean(x**2) + eps) * weight by up to "
            f"{np.nanmax(np.abs(got.data - want)):.3g}: the mean of squares over the last axis, "
            "no mean subtracted, eps (the one you are given) inside the square root"
        )
        rng = np.random.default_rng(seed)
        x64, w64 = float64_inputs(rng, x.shape, (x.shape[-1],))
        w64.data += 1.0
        explain(f"RMSNorm's derivative rule on x {x.shape}, eps {eps:g}",
                lambda: gradcheck(lambda x, w: rms_norm(x, w, eps), [x64, w64]),
                "dx = rstd * (g_hat - x_hat * mean(g_hat * x_hat)), dweight = sum of grad * "
                "x_hat over rows")

    check_rms(x, w.data, 1e-6, 2)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1303)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    hidden_cases(check_rms, {
        "a large epsilon": (normal(3, 4), normal(4), 0.3, 21),
        "rows of zeros": (np.zeros((2, 6), dtype=np.float32), normal(6), 1e-6, 22),
        "a single feature": (normal(5, 1), normal(1), 1e-6, 23),
        "float64 input": (normal(2, 2, 5, dtype=np.float64), normal(5, dtype=np.float64), 1e-6, 24),
        "a vector": (normal(7), normal(7), 1e-6, 25),
        "tiny values where eps dominates": (normal(3, 8) * 1e-4, normal(8), 1e-6, 26),
    })
    ### END HIDDEN TESTS


test_unit_rms_norm()

# %% [markdown]
# ## Part 3: the feed-forward network
#
# Attention moves information **between** tokens. The feed-forward network (MLP) then
# processes each token **on its own**: widen to `hidden = 4 * C`, apply a non-linearity,
# project back to `C`. Two thirds of a GPT block's parameters and FLOPs are here (Part 6
# counts them).
#
# ```
#   GPT-2 / nanoGPT MLP                    LLaMA SwiGLU
#   x ─ fc (C→4C) ─ gelu ─ proj (4C→C)     x ─┬─ gate_proj (C→H) ─ silu ─┐
#                                             │                          * ─ down_proj (H→C)
#                                             └─ up_proj   (C→H) ────────┘
# ```
#
# **Names.** We call the two layers of the GPT MLP `fc` and `proj`, matching module 12's
# attention (`qkv`, `proj`). nanoGPT and the Hugging Face GPT-2 checkpoint call them `c_fc`
# and `c_proj` (and attention's `c_attn`, `c_proj`); loading those weights is a renaming (see
# the table in Part 5). SwiGLU keeps LLaMA's names, `gate_proj`, `up_proj`, `down_proj`.
#
# **GELU, exact or tanh.** GPT-2 was trained with the tanh approximation of GELU, nanoGPT
# uses the exact (erf) form; the two differ by less than 1e-3 and train the same. In NumPy
# the tanh form is several times cheaper (one `tanh` against a rational approximation of
# `erfc` with a dozen passes), so `MLP` takes `approximate="tanh"` by default and a GPT can
# choose with `GPTConfig.gelu_approximate`.
#
# **SwiGLU** (Shazeer, 2020) multiplies two projections, one through SiLU: `down(silu(gate(x))
# * up(x))`. It has three matrices, so to keep the parameter count of a 4C MLP the hidden
# size is about `8C/3` (LLaMA rounds it up to a multiple of 256; we round to a multiple of 8).
# LLaMA's projections have no bias, and neither do ours by default.
#
# **Rows, not sequences.** Because the MLP treats every token on its own, it can flatten
# `(B, T, C)` into `(B*T, C)` rows first and reshape back at the end (both views, no copy).
# Each `Linear` is then one matrix product on a tall matrix; on `(B, T, C)`, `np.matmul`
# runs one product per sequence, which measured about 25% slower for these sizes.
#
# `dropout` (after the output projection, as in nanoGPT) is off at 0.0 and in `eval()` mode.

# %% nbgrader={"grade": false, "grade_id": "mlp", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def swiglu_hidden(dim):
    """LLaMA's hidden size for a SwiGLU that matches a 4*dim MLP: 8*dim/3, up to a multiple
    of 8.

    >>> swiglu_hidden(8), swiglu_hidden(128), swiglu_hidden(768)
    (24, 344, 2048)
    """
    return 8 * ((8 * dim // 3 + 7) // 8)


class MLP(Module):
    """GPT's feed-forward network: proj(gelu(fc(x))), widening to `hidden` (4 * dim) and back.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> mlp = MLP(8)
    >>> print(mlp)
    MLP(
      (fc): Linear(in_features=8, out_features=32, bias=True)
      (proj): Linear(in_features=32, out_features=8, bias=True)
      (dropout): Dropout(p=0.0)
    )
    >>> y = mlp(Tensor(np.random.default_rng(0).standard_normal((2, 5, 8))))
    >>> y.shape, y.dtype, mlp.num_parameters()
    ((2, 5, 8), dtype('float32'), 552)
    """

    def __init__(self, dim, hidden=None, dropout=0.0, bias=True, approximate="tanh"):
        super().__init__()
        hidden = 4 * dim if hidden is None else hidden
        self.approximate = approximate
        self.fc = Linear(dim, hidden, bias=bias)
        self.proj = Linear(hidden, dim, bias=bias)
        self.dropout = Dropout(dropout)

    @classmethod
    def from_linears(cls, fc, proj, approximate="tanh"):
        """The MLP around existing layers (a checkpoint's, module 18), without the random
        weights the constructor would draw (given)."""
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.approximate, layer.fc, layer.proj, layer.dropout = approximate, fc, proj, Dropout(0.0)
        return layer

    def forward(self, x):
        ### BEGIN SOLUTION
        rows = x.reshape(-1, x.shape[-1])  # (B*T, C): every token on its own
        h = gelu(self.fc(rows), approximate=self.approximate)  # (B*T, 4C)
        return self.dropout(self.proj(h)).reshape(x.shape)  # (B, T, C)
        ### END SOLUTION


class SwiGLU(Module):
    """LLaMA's feed-forward network: down_proj(silu(gate_proj(x)) * up_proj(x)).

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> ffn = SwiGLU(8)  # hidden = swiglu_hidden(8) = 24, no biases
    >>> print(ffn)
    SwiGLU(
      (gate_proj): Linear(in_features=8, out_features=24, bias=False)
      (up_proj): Linear(in_features=8, out_features=24, bias=False)
      (down_proj): Linear(in_features=24, out_features=8, bias=False)
      (dropout): Dropout(p=0.0)
    )
    >>> y = ffn(Tensor(np.random.default_rng(0).standard_normal((2, 5, 8))))
    >>> y.shape, y.dtype, ffn.num_parameters()
    ((2, 5, 8), dtype('float32'), 576)
    """

    def __init__(self, dim, hidden=None, dropout=0.0, bias=False):
        super().__init__()
        hidden = swiglu_hidden(dim) if hidden is None else hidden
        self.gate_proj = Linear(dim, hidden, bias=bias)
        self.up_proj = Linear(dim, hidden, bias=bias)
        self.down_proj = Linear(hidden, dim, bias=bias)
        self.dropout = Dropout(dropout)

    @classmethod
    def from_linears(cls, gate_proj, up_proj, down_proj):
        """The SwiGLU around existing layers (a checkpoint's, module 18), without the random
        weights the constructor would draw (given)."""
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.gate_proj, layer.up_proj, layer.down_proj = gate_proj, up_proj, down_proj
        layer.dropout = Dropout(0.0)
        return layer

    def forward(self, x):
        ### BEGIN SOLUTION
        rows = x.reshape(-1, x.shape[-1])  # (B*T, C)
        h = silu(self.gate_proj(rows)) * self.up_proj(rows)  # (B*T, H)
        return self.dropout(self.down_proj(h)).reshape(x.shape)  # (B, T, C)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_mlp", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_mlp():
    """MLP is proj(gelu(fc(x))) and SwiGLU is down(silu(gate(x)) * up(x)), shape-preserving."""
    manual_seed(0)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    mlp = MLP(8)
    assert mlp.fc.out_features == 32 and mlp.proj.in_features == 32, (
        f"MLP(8) should widen to 4 * 8 = 32 features, got fc -> {mlp.fc.out_features}"
    )
    y = mlp(Tensor(x))
    assert y.shape == (2, 5, 8), f"MLP(8) on (2, 5, 8) gave {y.shape}: project back to dim"
    h = x @ mlp.fc.weight.data.T + mlp.fc.bias.data
    k = math.sqrt(2 / math.pi)
    h = 0.5 * h * (1 + np.tanh(k * (h + 0.044715 * h**3)))
    want = h @ mlp.proj.weight.data.T + mlp.proj.bias.data
    assert np.allclose(y.data, want, atol=1e-5), (
        "MLP output differs from proj(gelu(fc(x))) (GELU in its tanh form by default) by up "
        f"to {np.abs(y.data - want).max():.3g}: is the activation between the two layers, and "
        "are both layers used?"
    )
    glu = SwiGLU(8, 16)
    z = glu(Tensor(x))
    gate = x @ glu.gate_proj.weight.data.T
    up = x @ glu.up_proj.weight.data.T
    want = (gate / (1 + np.exp(-gate)) * up) @ glu.down_proj.weight.data.T
    assert z.shape == (2, 5, 8), f"SwiGLU(8, 16) on (2, 5, 8) gave {z.shape}"
    swapped = (up / (1 + np.exp(-up)) * gate) @ glu.down_proj.weight.data.T
    assert np.allclose(z.data, want, atol=1e-5), (
        "SwiGLU output differs from down_proj(silu(gate_proj(x)) * up_proj(x)) by up to "
        f"{np.abs(z.data - want).max():.3g}"
        + (": silu was applied to up_proj; it goes on gate_proj's output"
           if np.allclose(z.data, swapped, atol=1e-5) else
           ": silu goes on the gate only, and the product is element-wise")
    )
    z.sum().backward()
    missing = [n for n, p in glu.named_parameters() if p.grad is None]
    assert not missing, f"these SwiGLU parameters got no gradient: {missing}"
    assert swiglu_hidden(768) == 2048, (
        f"swiglu_hidden(768) should be 2048, got {swiglu_hidden(768)}"
    )

    def gelu_formula(h, approximate):
        if approximate == "tanh":
            return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        return 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))

    def check_mlp(dim, hidden, bias, approximate, shape, seed):
        """MLP(dim, hidden, bias=, approximate=) on x of `shape` against NumPy's
        proj(gelu(fc(x))); every parameter learns."""
        manual_seed(seed)
        layer = MLP(dim, hidden, bias=bias, approximate=approximate)
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        y = layer(Tensor(x))
        h = x.astype(np.float64) @ layer.fc.weight.data.T
        h = gelu_formula(h + layer.fc.bias.data if bias else h, approximate)
        want = h @ layer.proj.weight.data.T + (layer.proj.bias.data if bias else 0)
        assert y.shape == shape and y.dtype == np.float32, (
            f"MLP({dim}, {hidden}) on float32 {shape} gave {y.dtype} {y.shape}"
        )
        assert np.allclose(y.data, want, atol=1e-5), (
            f"MLP (approximate={approximate!r}, bias={bias}) differs from proj(gelu(fc(x))) by "
            f"up to {np.abs(y.data - want).max():.3g}: use the layer's approximate setting, both "
            "layers, and work on rows x.reshape(-1, C) reshaped back to x's shape"
        )
        y.sum().backward()
        missing = [n for n, p in layer.named_parameters() if p.grad is None]
        assert not missing, f"these MLP parameters got no gradient: {missing}"

    def check_swiglu(dim, hidden, bias, shape, seed):
        """SwiGLU(dim, hidden, bias=) on x of `shape` against NumPy's
        down(silu(gate(x)) * up(x)); every parameter learns."""
        manual_seed(seed)
        layer = SwiGLU(dim, hidden, bias=bias)
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float64)

        def project(linear, a):
            return a @ linear.weight.data.T + (linear.bias.data if bias else 0)

        gate, up = project(layer.gate_proj, x), project(layer.up_proj, x)
        want = project(layer.down_proj, gate / (1 + np.exp(-gate)) * up)
        z = layer(Tensor(x.astype(np.float32)))
        assert z.shape == shape and z.dtype == np.float32, (
            f"SwiGLU({dim}, {hidden}) on float32 {shape} gave {z.dtype} {z.shape}"
        )
        assert np.allclose(z.data, want, atol=1e-5), (
            f"SwiGLU (bias={bias}) differs from down_proj(silu(gate_proj(x)) * up_proj(x)) by up "
            f"to {np.abs(z.data - want).max():.3g}"
        )
        z.sum().backward()
        missing = [n for n, p in layer.named_parameters() if p.grad is None]
        assert not missing, f"these SwiGLU parameters got no gradient: {missing}"

    check_mlp(8, None, True, "tanh", (2, 5, 8), 0)
    check_swiglu(8, 16, False, (2, 5, 8), 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_mlp, {
        "exact GELU": (6, None, True, "none", (3, 6), 1),
        "no biases": (4, 12, False, "tanh", (2, 3, 4), 2),
        "a narrow hidden layer": (10, 3, True, "tanh", (4, 10), 3),
        "a single vector": (5, None, True, "tanh", (5,), 4),
        "four axes": (4, 8, True, "none", (2, 1, 3, 4), 5),
    })
    hidden_cases(check_swiglu, {
        "with biases": (6, 10, True, (2, 3, 6), 6),
        "the default hidden width": (12, None, False, (3, 12), 7),
        "a single vector": (8, 5, False, (8,), 8),
        "a narrow hidden layer with biases": (7, 2, True, (2, 2, 2, 7), 9),
    })
    ### END HIDDEN TESTS


test_unit_mlp()

# %% [markdown]
# ## Part 4: the GPT config and the pre-norm block
#
# A model file in the nanoGPT manner starts with a **config dataclass**: every size in one
# place, with its invariants checked when the config is made, so that a bad combination
# fails on the first line with a message instead of deep inside a reshape. `GPTConfig`'s
# defaults are the small character-level model of the milestone (nanoGPT's CPU run).
#
# | field | meaning | milestone |
# |---|---|---|
# | `vocab_size` | number of token ids | 65 characters |
# | `block_size` | longest context (positions) | 64 |
# | `n_layer`, `n_head`, `n_embd` | blocks, heads per attention, width `C` | 4, 4, 128 |
# | `dropout` | dropout probability (embeddings, attention, MLP) | 0.0 |
# | `bias` | biases in Linear layers and LayerNorms | False (nanoGPT) |
# | `tie_weights` | the LM head reuses the token embedding matrix | True (nanoGPT) |
# | `norm`, `mlp` | `"layernorm"`/`"rmsnorm"`, `"gelu"`/`"swiglu"` | GPT-2's |
# | `gelu_approximate` | `"tanh"` (GPT-2) or `"none"` (exact erf) | tanh |
#
# The invariants: every size a positive integer; `n_embd % n_head == 0` (each head gets
# `n_embd // n_head` features); `0 <= dropout < 1`; the string options among their choices.
# `__post_init__` collects **every** violation and raises one `ValueError` listing them all.
#
# ### Pre-norm
#
# The original transformer normalized **after** each residual addition (post-norm:
# `x = ln(x + f(x))`). GPT-2 moved the norm **inside** the branch (pre-norm):
#
# ```
#   x = x + attn(ln1(x))
#   x = x + mlp(ln2(x))
# ```
#
# so the residual stream `x` is a clean sum: each block adds its contribution and nothing
# rescales what came before. Gradients flow from the loss straight down the additions to
# the first layer (the derivative of `x + f(x)` with respect to `x` includes the identity),
# which is why pre-norm stacks of 12, 48 or 96 blocks train without the careful learning-rate
# warm-up post-norm needs. The price is that `x` grows with depth, which is why GPT-2 adds a
# final norm `ln_f` before the LM head, and why the residual projections are initialized
# smaller (Part 5).
#
# The attention is causal: token `t` may look at tokens `0..t` only, so that every position
# of a training sequence is a next-token prediction (`is_causal=True` in module 12's
# attention).

# %% nbgrader={"grade": false, "grade_id": "config-checks", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
_NORMS = ("layernorm", "rmsnorm")
_MLPS = ("gelu", "swiglu")
_CHOICES = (("norm", _NORMS), ("mlp", _MLPS), ("gelu_approximate", ("tanh", "none")))


def _positive_int(value):
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 1


def gpt_config_problems(config):
    """Every broken invariant of a GPTConfig, one sentence each with the fix; [] if none.

    >>> gpt_config_problems(GPTConfig())
    []
    >>> from types import SimpleNamespace  # GPTConfig itself refuses these fields
    >>> broken = SimpleNamespace(**(GPTConfig().to_dict() | {"dropout": 1.5, "bias": "no"}))
    >>> for problem in gpt_config_problems(broken):
    ...     print(problem)
    dropout must be a probability in [0, 1), got 1.5
    bias must be True or False, got 'no'
    """
    problems = [f"{name} must be a positive integer, got {getattr(config, name)!r}"
                for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")
                if not _positive_int(getattr(config, name))]
    if not problems and config.n_embd % config.n_head:
        divisors = [h for h in range(1, min(config.n_embd, 16) + 1) if config.n_embd % h == 0]
        problems.append(f"n_embd ({config.n_embd}) must be divisible by n_head ({config.n_head}): "
                        f"each head gets n_embd // n_head features; try n_head in {divisors}")
    p = config.dropout
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        problems.append(f"dropout must be a probability in [0, 1), got {p!r}")
    problems += [f"{name} must be True or False, got {getattr(config, name)!r}"
                 for name in ("bias", "tie_weights") if not isinstance(getattr(config, name), bool)]
    problems += [f"{name} must be one of {choices}, got {getattr(config, name)!r}"
                 for name, choices in _CHOICES if getattr(config, name) not in choices]
    return problems


# %% [markdown]
# `gpt_config_problems` above is given: it checks each invariant and returns one sentence per
# broken one. Your `__post_init__` runs it and raises **one** `ValueError` that lists them
# all (so a user fixes every mistake in one go, not one per run); `head_dim` is the width of
# one attention head.

# %% nbgrader={"grade": false, "grade_id": "config", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
@dataclass
class GPTConfig:
    """The sizes of a GPT; defaults are nanoGPT's character-level CPU model.

    >>> config = GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=16)
    >>> config.head_dim, config.norm, config.mlp
    (8, 'layernorm', 'gelu')
    >>> GPTConfig.from_dict(config.to_dict()) == config
    True
    >>> try:
    ...     GPTConfig(n_layer=0, norm="batchnorm")
    ... except ValueError as error:
    ...     print(error)
    invalid GPTConfig:
      - n_layer must be a positive integer, got 0
      - norm must be one of ('layernorm', 'rmsnorm'), got 'batchnorm'
    """

    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False
    tie_weights: bool = True
    norm: str = "layernorm"
    mlp: str = "gelu"
    gelu_approximate: str = "tanh"

    def __post_init__(self):
        ### BEGIN SOLUTION
        problems = gpt_config_problems(self)
        if problems:
            raise ValueError("invalid GPTConfig:\n  - " + "\n  - ".join(problems))
        ### END SOLUTION

    @property
    def head_dim(self):
        ### BEGIN SOLUTION
        return self.n_embd // self.n_head
        ### END SOLUTION

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, values):
        """A config from a dict such as to_dict() gave; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}; the fields are {sorted(known)}")
        return cls(**values)


def make_norm(config):
    """The norm the config asks for, at the model's width.

    >>> print(make_norm(GPTConfig(n_embd=16, bias=True)))
    LayerNorm(16, eps=1e-05, bias=True)
    >>> print(make_norm(GPTConfig(n_embd=16, norm="rmsnorm")))
    RMSNorm(16, eps=1e-06)
    """
    if config.norm == "rmsnorm":
        return RMSNorm(config.n_embd)
    return LayerNorm(config.n_embd, bias=config.bias)


def make_mlp(config):
    """The feed-forward network the config asks for.

    >>> type(make_mlp(GPTConfig(n_embd=16))).__name__
    'MLP'
    >>> ffn = make_mlp(GPTConfig(n_embd=16, mlp="swiglu"))
    >>> type(ffn).__name__, ffn.gate_proj.weight.shape
    ('SwiGLU', (48, 16))
    """
    if config.mlp == "swiglu":
        return SwiGLU(config.n_embd, dropout=config.dropout, bias=config.bias)
    return MLP(config.n_embd, dropout=config.dropout, bias=config.bias,
               approximate=config.gelu_approximate)


class TransformerBlock(Module):
    """Pre-norm block: x + attn(ln1(x)), then + mlp(ln2(x)); causal attention.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> block = TransformerBlock(GPTConfig(n_layer=1, n_head=2, n_embd=16))
    >>> [name for name, _ in block.named_modules() if name.count(".") == 0 and name]
    ['ln1', 'attn', 'ln2', 'mlp']
    >>> x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    >>> y = block(Tensor(x))
    >>> y.shape, y.dtype
    ((2, 5, 16), dtype('float32'))
    >>> x[:, 4] = 0  # change the last token: the outputs before it stay the same
    >>> bool(np.allclose(block(Tensor(x)).data[:, :4], y.data[:, :4]))
    True
    """

    def __init__(self, config):
        super().__init__()
        self.ln1 = make_norm(config)
        self.attn = MultiHeadAttention(config.n_embd, config.n_head, bias=config.bias,
                                       dropout=config.dropout)
        self.ln2 = make_norm(config)
        self.mlp = make_mlp(config)

    def forward(self, x):
        ### BEGIN SOLUTION
        x = x + self.attn(self.ln1(x), is_causal=True)  # (B, T, C)
        x = x + self.mlp(self.ln2(x))  # (B, T, C)
        return x
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_config", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_config():
    """GPTConfig rejects impossible sizes, listing every problem at once."""
    config = GPTConfig()
    assert (config.n_layer, config.n_head, config.n_embd, config.block_size) == (4, 4, 128, 64)
    assert config.head_dim == 32, (
        f"head_dim of 128 wide, 4 heads should be 32, got {config.head_dim}: n_embd // n_head"
    )
    listing = ("raise one ValueError listing every line of gpt_config_problems(self), not just "
               "the first")
    cases = [  # (fields, words the one ValueError must hold, fix)
        ({"n_embd": 100, "n_head": 3}, ["n_head", "100"],
         "100 features cannot be split into 3 heads: " + listing),
        ({"n_layer": 0, "dropout": 1.5, "norm": "batchnorm"}, ["n_layer", "dropout", "norm"],
         listing),
        ({"block_size": 64.0}, ["block_size"], "sizes are integers: " + listing),
    ]
    for overrides, words, fix in cases:
        expect_error(f"GPTConfig({overrides})", lambda: GPTConfig(**overrides), ValueError, words,
                     fix)
    assert GPTConfig.from_dict(config.to_dict()) == config, "to_dict/from_dict must round-trip"

    def check_refused(fields):
        """GPTConfig(**fields) raises one ValueError holding every problem of the fields."""
        from types import SimpleNamespace

        values = GPTConfig().to_dict() | fields  # the defaults, then the fields given
        problems = gpt_config_problems(SimpleNamespace(**values))
        expect_error(f"GPTConfig({fields})", lambda: GPTConfig(**fields), ValueError, problems,
                     listing)

    def check_head_dim(fields, want):
        """A valid config is made, and its head_dim is n_embd // n_head."""
        got = GPTConfig(**fields).head_dim
        assert got == want, f"GPTConfig({fields}).head_dim should be {want}, got {got}"

    check_refused({"n_embd": 100, "n_head": 3})
    check_head_dim({}, 32)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_refused, {
        "several sizes wrong at once": {"vocab_size": 0, "n_head": -2, "n_embd": 2.5},
        "a flag given as a word": {"bias": "yes"},
        "a size given as a boolean": {"n_layer": True},
        "heads that do not divide the width, and an unknown MLP": {"n_embd": 30, "n_head": 4,
                                                                  "mlp": "relu"},
        "a dropout of exactly one": {"dropout": 1.0},
        "every option unknown": {"norm": "batch", "mlp": "moe", "gelu_approximate": "erf",
                                 "tie_weights": None},
    })
    hidden_cases(check_head_dim, {
        "many heads": ({"n_embd": 64, "n_head": 8}, 8),
        "a single head": ({"n_embd": 24, "n_head": 1}, 24),
        "as many heads as channels": ({"n_embd": 6, "n_head": 6}, 1),
    })
    ### END HIDDEN TESTS


test_unit_config()


# %% nbgrader={"grade": true, "grade_id": "test_unit_block", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_block():
    """The block is pre-norm with residuals, causal, shape-preserving; all parameters learn."""
    manual_seed(0)
    config = GPTConfig(n_embd=16, n_head=2, block_size=8, bias=True)
    block = TransformerBlock(config)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 16)).astype(np.float32)
    y = block(Tensor(x))
    assert y.shape == (2, 6, 16), f"the block changed (2, 6, 16) into {y.shape}"
    a = block.attn(block.ln1(Tensor(x)), is_causal=True).data
    h = x + a
    want = h + block.mlp(block.ln2(Tensor(h))).data
    if not np.allclose(y.data, want, atol=1e-5):
        h_full = x + block.attn(block.ln1(Tensor(x))).data  # attention without the mask
        known = [  # (what a typical mistake computes, what it is)
            (h_full + block.mlp(block.ln2(Tensor(h_full))).data,
             "the attention is not causal: pass is_causal=True"),
            (block.mlp(block.ln2(Tensor(h))).data,
             "the MLP branch replaces x instead of being added: x = x + mlp(ln2(x))"),
            (a + block.mlp(block.ln2(Tensor(a))).data,
             "the attention branch replaces x instead of being added: x = x + attn(ln1(x))"),
        ]
        cause = next((what for out, what in known if np.allclose(y.data, out, atol=1e-5)),
                     "pre-norm (norm inside the branch), residual additions, causal attention")
        raise AssertionError(
            "the block should compute x = x + attn(ln1(x), is_causal=True); x = x + "
            f"mlp(ln2(x)); its output differs by up to {np.abs(y.data - want).max():.3g}: "
            + cause
        )
    x2 = x.copy()
    x2[:, 4:] += 10.0  # change the future
    y2 = block(Tensor(x2))
    assert np.allclose(y.data[:, :4], y2.data[:, :4], atol=1e-5), (
        "changing tokens 4.. changed the block's output at tokens 0..3: the attention must be "
        "causal (pass is_causal=True)"
    )
    y.sum().backward()
    missing = [n for n, p in block.named_parameters() if p.grad is None]
    assert not missing, f"these block parameters got no gradient: {missing}"

    def check_block(fields, shape, seed):
        """TransformerBlock(GPTConfig(**fields)) on x of `shape` equals its own parts wired
        pre-norm with residuals; the last token changes no earlier output; all parameters learn."""
        manual_seed(seed)
        block = TransformerBlock(GPTConfig(**fields))
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        y = block(Tensor(x))
        h = x + block.attn(block.ln1(Tensor(x)), is_causal=True).data
        want = h + block.mlp(block.ln2(Tensor(h))).data
        assert y.shape == shape and y.dtype == np.float32, (
            f"the block changed float32 {shape} into {y.dtype} {y.shape}"
        )
        assert np.allclose(y.data, want, atol=1e-5), (
            f"the block ({fields}) should compute x = x + attn(ln1(x), is_causal=True); x = x + "
            f"mlp(ln2(x)); its output differs by up to {np.abs(y.data - want).max():.3g}"
        )
        last = shape[1] - 1
        if last:
            changed = x.copy()
            changed[:, last] += 10.0
            again = block(Tensor(changed)).data
            assert np.allclose(again[:, :last], y.data[:, :last], atol=1e-5), (
                "changing the last token changed earlier outputs: pass is_causal=True"
            )
        y.sum().backward()
        missing = [n for n, p in block.named_parameters() if p.grad is None]
        assert not missing, f"these block parameters got no gradient: {missing}"

    check_block({"n_embd": 16, "n_head": 2, "block_size": 8, "bias": True}, (2, 6, 16), 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_block, {
        "RMSNorm and SwiGLU parts": ({"n_embd": 12, "n_head": 3, "norm": "rmsnorm",
                                      "mlp": "swiglu"}, (2, 4, 12), 1),
        "exact GELU without biases": ({"n_embd": 8, "n_head": 2, "gelu_approximate": "none"},
                                      (3, 5, 8), 2),
        "a single position": ({"n_embd": 16, "n_head": 4, "bias": True}, (3, 1, 16), 3),
        "a single head": ({"n_embd": 6, "n_head": 1, "bias": True}, (1, 7, 6), 4),
        "one long sequence": ({"n_embd": 8, "n_head": 2}, (1, 40, 8), 5),
    })
    ### END HIDDEN TESTS


test_unit_block()

# %% [markdown]
# ## Part 5: GPT
#
# The model, in the order data flows through it (shape comments use `B` batch, `T` time,
# `C` width, `V` vocabulary):
#
# 1. `wte = Embedding(V, C)`: token ids `(B, T)` to vectors `(B, T, C)`.
# 2. `wpe = PositionalEmbedding(block_size, C)`: one learned vector per position, `(T, C)`,
#    added to every sequence of the batch (broadcast).
# 3. `drop`, then the `n_layer` blocks, held in a `Sequential` named `blocks`.
# 4. `ln_f`, the final norm, then `lm_head = Linear(C, V, bias=False)`: logits `(B, T, V)`.
# 5. With `targets` `(B, T)`: the loss is the mean cross-entropy over all `B * T`
#    positions, each a next-token prediction (flatten to `(B*T, V)` and `(B*T,)`).
#
# `forward(idx, targets=None)` returns `(logits, loss)`, `loss` being `None` without
# targets. A sequence longer than `block_size` is an error here: there is no position
# embedding for it (`generate` crops instead, Part 7).
#
# ### Weight tying
#
# The token embedding maps id to vector; the LM head maps vector to a score per id. Press et
# al. (2017) showed that one matrix can do both: `lm_head.weight = wte.weight`. Both are
# `(V, C)`. That saves `V * C` parameters (38M of GPT-2's 124M) and helps small data sets.
# Module 03's registry yields a shared `Parameter` once, so the optimizer updates it once, and
# module 06's engine adds the gradients from its two uses.
#
# ### Initialization (nanoGPT's)
#
# Every `Linear` weight and both embeddings are drawn from `N(0, 0.02)`, biases are zero and
# norms start as the identity (`weight = 1`). Then the **residual projections**, the last
# layer of each branch (`attn.proj` and `mlp.proj`, or `mlp.down_proj`), are drawn from
# `N(0, 0.02 / sqrt(2 * n_layer))`. Why: the residual stream is a sum of `2 * n_layer`
# branch outputs. If each adds an independent contribution of variance `s^2`, the stream's
# variance grows to `2 n_layer s^2`; dividing each contribution's scale by
# `sqrt(2 * n_layer)` keeps the output at the scale of one branch however deep the model.
# Draw from the shared generator (`default_generator()`, seeded by `manual_seed`) in
# float32, in the order of `named_parameters()`, so that a seed gives one model.
#
# ### Names
#
# Names are those of nanoGPT with module 12's attention; a GPT-2 checkpoint loads by
# renaming (and transposing its `Conv1D` weights):
#
# | ours | nanoGPT (`transformer.` prefix) | Hugging Face GPT-2 |
# |---|---|---|
# | `wte`, `wpe` | `wte`, `wpe` | `wte`, `wpe` |
# | `blocks.{i}.ln1`, `.ln2` | `h.{i}.ln_1`, `.ln_2` | `h.{i}.ln_1`, `.ln_2` |
# | `blocks.{i}.attn.qkv`, `.attn.proj` | `attn.c_attn`, `attn.c_proj` | same, transposed |
# | `blocks.{i}.mlp.fc`, `.mlp.proj` | `mlp.c_fc`, `mlp.c_proj` | same, transposed |
# | `ln_f`, `lm_head` | `ln_f`, `lm_head` (no prefix) | `ln_f`, tied to `wte` |

# %% nbgrader={"grade": false, "grade_id": "gpt", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
_RESIDUAL_PROJECTIONS = ("attn.proj.weight", "mlp.proj.weight", "mlp.down_proj.weight")


class GPT(Module):
    """A decoder-only transformer language model (GPT-2 / nanoGPT).

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> config = GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=16)
    >>> model = GPT(config)
    >>> model.num_parameters()
    6512
    >>> idx = np.random.default_rng(0).integers(0, 10, size=(2, 8))  # (B, T) token ids
    >>> logits, loss = model(idx, targets=idx)
    >>> logits.shape, logits.dtype
    ((2, 8, 10), dtype('float32'))
    >>> bool(abs(loss.item() - np.log(10)) < 0.2)  # about log(V) at initialization
    True
    >>> model.generate(np.array([1, 2, 3]), max_new_tokens=4, seed=0).shape
    (7,)
    """

    def __init__(self, config):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT(config) takes a GPTConfig, got {type(config).__name__}")
        self.config = config
        ### BEGIN SOLUTION
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = PositionalEmbedding(config.block_size, config.n_embd)
        self.drop = Dropout(config.dropout)
        self.blocks = Sequential(*[TransformerBlock(config) for _ in range(config.n_layer)])
        self.ln_f = make_norm(config)
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        self._init_weights()
        ### END SOLUTION

    def _init_weights(self):
        """N(0, 0.02) weights, zero biases, residual projections / sqrt(2 * n_layer)."""
        ### BEGIN SOLUTION
        generator = default_generator()
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if isinstance(self._owner(name), (LayerNorm, RMSNorm)):
                continue  # weight 1, bias 0 already
            if name.endswith(".bias"):
                p.data[...] = 0.0
                continue
            std = residual_std if name.endswith(_RESIDUAL_PROJECTIONS) else 0.02
            p.data[...] = generator.standard_normal(p.shape, dtype=np.float32) * np.float32(std)
        ### END SOLUTION

    def _owner(self, name):
        """The module that holds the parameter called `name`."""
        module = self
        for part in name.split(".")[:-1]:
            module = module._modules[part]
        return module

    def _check_ids(self, idx, what):
        idx = np.asarray(idx.data if isinstance(idx, Tensor) else idx)
        if idx.size == 0:
            return idx.astype(np.int64)  # an empty list is float64 in NumPy; callers decide
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"{what} must be integer token ids, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            bad = sorted(set(idx[(idx < 0) | (idx >= self.config.vocab_size)].tolist()))[:10]
            raise ValueError(
                f"{what} holds ids {bad} outside the vocabulary [0, {self.config.vocab_size}): "
                "were they made by a tokenizer with a different vocabulary?"
            )
        return idx.astype(np.int64, copy=False)

    def hidden_states(self, idx):
        """The final normalized residual stream (B, T, C) for token ids (B, T)."""
        ### BEGIN SOLUTION
        idx = self._check_ids(idx, "idx")
        if idx.ndim != 2:
            raise ShapeError(f"GPT takes token ids of shape (B, T), got {idx.shape}; "
                             "for one sequence use ids.reshape(1, -1)")
        b, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(
                f"a sequence of {t} tokens is longer than block_size={self.config.block_size}: "
                "there is no position embedding for it. Crop the context to its last "
                f"{self.config.block_size} tokens (generate does)."
            )
        x = self.wte(idx) + self.wpe(t)  # (B, T, C) + (T, C) -> (B, T, C)
        x = self.drop(x)
        x = self.blocks(x)  # (B, T, C)
        return self.ln_f(x)  # (B, T, C)
        ### END SOLUTION

    def forward(self, idx, targets=None):
        """(logits (B, T, V), mean cross-entropy against `targets` (B, T), or None)."""
        ### BEGIN SOLUTION
        x = self.hidden_states(idx)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            b, t, v = logits.shape
            targets = self._check_ids(targets, "targets")
            if targets.shape != (b, t):
                raise ShapeError(f"targets have shape {targets.shape}, expected (B, T) = {(b, t)}")
            loss = cross_entropy(logits.reshape(b * t, v), targets.reshape(b * t))
        return logits, loss
        ### END SOLUTION

    def generate(self, prompt_ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 seed=None):
        """Continue `prompt_ids` by max_new_tokens sampled ids (Part 7: generate_ids)."""
        return generate_ids(self, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed)

    def num_parameters(self, exclude_embeddings=False):
        """Parameters, tied ones once. exclude_embeddings drops wpe, and wte unless tied
        (a tied wte is the LM head, so it stays counted, as in nanoGPT)."""
        total = super().num_parameters()
        if exclude_embeddings:
            total -= self.wpe.weight.size
            if not self.config.tie_weights:
                total -= self.wte.weight.size
        return total


# %% nbgrader={"grade": true, "grade_id": "test_unit_gpt_forward", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_gpt_forward():
    """GPT maps ids (B, T) to logits (B, T, V) and a loss near log(V) at initialization."""
    manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = GPT(config)
    rng = np.random.default_rng(5)
    idx, targets = rng.integers(0, 11, size=(3, 8)), rng.integers(0, 11, size=(3, 8))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 8, 11), (
        f"logits should be (B, T, V) = (3, 8, 11), got {logits.shape}"
    )
    assert logits.dtype == np.float32, f"logits are {logits.dtype}: keep float32 everywhere"
    assert loss is not None and loss.shape == (), "with targets, forward returns a scalar loss"
    assert abs(loss.item() - math.log(11)) < 0.1, (
        f"the loss at initialization is {loss.item():.3f}, expected ~log(11) = {math.log(11):.3f}: "
        "with N(0, 0.02) weights the logits are ~0 and every token is about equally likely. "
        "A much larger loss suggests a missing init (Linear's default scale) or a wrong "
        "target shift"
    )
    assert model(idx)[1] is None, "without targets, forward returns (logits, None)"
    assert model.lm_head.weight is model.wte.weight, (
        "tie_weights=True: lm_head.weight must BE wte.weight (assign the Parameter)"
    )
    stds = {n: float(p.data.std()) for n, p in model.named_parameters()}
    assert abs(stds["wte.weight"] - 0.02) < 0.005, (
        f"wte std is {stds['wte.weight']:.4f}, expected 0.02"
    )
    residual = 0.02 / math.sqrt(2 * 2)
    assert abs(stds["blocks.0.mlp.proj.weight"] - residual) < 0.003, (
        f"mlp.proj weight std is {stds['blocks.0.mlp.proj.weight']:.4f}, expected "
        f"0.02 / sqrt(2 * n_layer) = {residual:.4f}: scale the residual projections"
    )
    assert abs(stds["blocks.0.mlp.fc.weight"] - 0.02) < 0.003, (
        f"mlp.fc weight std is {stds['blocks.0.mlp.fc.weight']:.4f}, expected 0.02"
    )
    assert np.all(model.blocks[0].ln1.weight.data == 1), "norm weights must start at 1"
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"these parameters got no gradient: {missing}"
    logits2, _ = model(np.concatenate([idx[:, :5], (idx[:, 5:] + 1) % 11], axis=1))
    assert np.allclose(logits.data[:, :5], logits2.data[:, :5], atol=1e-5), (
        "changing tokens 5.. changed the logits of positions 0..4: the model must be causal"
    )
    try:
        model(np.zeros((1, 9), dtype=np.int64))
    except ValueError as error:
        assert "block_size" in str(error), f"the error should mention block_size: {error}"
    else:
        raise AssertionError("a sequence longer than block_size must raise ValueError")

    def check_gpt(fields, batch, length, seed):
        """GPT(GPTConfig(**fields)) on random ids: float32 logits (B, T, V); the loss is the
        cross-entropy of those logits (worked in NumPy) and near log(V); nanoGPT's init; the
        head tied only when asked; causal; every parameter learns; too long is refused."""
        manual_seed(seed)
        config = GPTConfig(**fields)
        model = GPT(config)
        V = config.vocab_size
        rng = np.random.default_rng(seed)
        idx, targets = rng.integers(0, V, size=(2, batch, length))
        logits, loss = model(idx, targets)
        assert logits.shape == (batch, length, V) and logits.dtype == np.float32, (
            f"logits should be float32 (B, T, V) = {(batch, length, V)}, got {logits.dtype} "
            f"{logits.shape}"
        )
        z = logits.data.astype(np.float64).reshape(-1, V)
        z = z - z.max(-1, keepdims=True)
        z -= np.log(np.exp(z).sum(-1, keepdims=True))  # log-probabilities
        want = -z[np.arange(len(z)), targets.ravel()].mean()
        assert loss is not None and loss.shape == () and abs(loss.item() - want) < 1e-4, (
            f"the loss should be the mean cross-entropy of the logits over all B * T positions, "
            f"{want:.5f}, got {None if loss is None else loss.item()}"
        )
        assert abs(want - math.log(V)) < 0.1, (
            f"the loss at initialization is {want:.3f}, expected ~log({V}) = {math.log(V):.3f}"
        )
        tied = model.lm_head.weight is model.wte.weight
        assert tied == config.tie_weights, (
            f"tie_weights={config.tie_weights}: lm_head.weight "
            + ("must BE wte.weight" if config.tie_weights else "must be its own Parameter")
        )
        residual = 0.02 / math.sqrt(2 * config.n_layer)
        for name, p in model.named_parameters():
            if isinstance(model._owner(name), (LayerNorm, RMSNorm)):
                start = 1.0 if name.endswith("weight") else 0.0
                assert np.all(p.data == start), f"{name} must start at {start:g}"
            elif name.endswith(".bias"):
                assert np.all(p.data == 0), f"{name} must start at 0"
            elif p.size >= 256:
                std = residual if name.endswith(_RESIDUAL_PROJECTIONS) else 0.02
                got = float(p.data.std())
                assert abs(got - std) < 0.2 * std, (
                    f"{name} has std {got:.4f}, expected {std:.4f}"
                    + (": scale the residual projections by 1/sqrt(2 * n_layer)"
                       if std == residual else "")
                )
        loss.backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, f"these parameters got no gradient: {missing}"
        if length > 1:
            again, _ = model(np.concatenate([idx[:, :-1], (idx[:, -1:] + 1) % V], axis=1))
            assert np.allclose(again.data[:, :-1], logits.data[:, :-1], atol=1e-5), (
                "changing the last token changed earlier logits: the model must be causal"
            )
        expect_error(f"a sequence of {config.block_size + 1} tokens for block_size "
                     f"{config.block_size}",
                     lambda: model(np.zeros((1, config.block_size + 1), dtype=np.int64)),
                     ValueError, ["block_size"], "compare T with block_size and say so")

    check_gpt({"vocab_size": 11, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16},
              3, 8, 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    small = {"vocab_size": 20, "block_size": 6, "n_layer": 1, "n_head": 2, "n_embd": 16}
    hidden_cases(check_gpt, {
        "an untied head": (small | {"tie_weights": False}, 2, 5, 1),
        "RMSNorm, SwiGLU and biases": (small | {"norm": "rmsnorm", "mlp": "swiglu",
                                                "bias": True}, 2, 6, 2),
        "a single position": (small, 4, 1, 3),
        "a single sequence filling the context": (small | {"block_size": 12}, 1, 12, 4),
        "a deeper, wider model": ({"vocab_size": 30, "block_size": 8, "n_layer": 6,
                                   "n_head": 4, "n_embd": 32}, 2, 7, 5),
    })
    ### END HIDDEN TESTS


test_unit_gpt_forward()

# %% [markdown]
# ## Part 6: counting parameters
#
# Where are a GPT's parameters? With `C = n_embd`, `V` the vocabulary, `P` the positions and
# `L` blocks (with biases, LayerNorm and the GELU MLP):
#
# | piece | parameters |
# |---|---|
# | token embedding | `V C` |
# | position embedding | `P C` |
# | one block: 2 LayerNorms | `2 (2C)` |
# | attention `qkv` and `proj` | `(3C^2 + 3C) + (C^2 + C)` |
# | MLP `fc` and `proj` | `(4C^2 + 4C) + (4C^2 + C)` |
# | one block, total | `12 C^2 + 13 C` |
# | final norm | `2C` |
# | LM head (untied, no bias) | `V C` |
#
# For the lesson's example, 768 wide, 12 blocks, a 50,000-token vocabulary, 1,024
# positions and a separate head, that is 38.4M + 0.8M + 12 x 7.09M + 38.4M, about
# **163M** parameters, of which **85M** are in the blocks. (GPT-2 small is this model with
# 50,257 tokens and a tied head: 124M.) The blocks hold the compute: a token costs about
# `2 * 12 C^2` multiply-adds per block, while an embedding lookup costs nothing, and the head
# costs `2 V C`. Note the `C^2`: doubling the width quadruples a block.
#
# Write `gpt_parameter_count(config)` from this table, generalized: no biases when
# `bias=False`, RMSNorm (a weight, no bias), SwiGLU (three `C x H` matrices with
# `H = swiglu_hidden(C)`), and no head when tied. The test checks it against `num_parameters()`
# of real models, every option combination, so the formula cannot drift from the code.

# %% nbgrader={"grade": false, "grade_id": "param-count", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def gpt_parameter_count(config):
    """Parameters of GPT(config) by formula: a dict of the pieces and their "total".

    >>> counts = gpt_parameter_count(GPTConfig())  # nanoGPT's character-level model
    >>> counts["per_block"], counts["lm_head"], counts["total"]  # the head is tied to wte
    (196864, 0, 804096)
    >>> gpt_parameter_count(GPTConfig(tie_weights=False))["lm_head"]
    8320
    """
    ### BEGIN SOLUTION
    c, v = config.n_embd, config.vocab_size
    b = 1 if config.bias else 0
    norm = c if config.norm == "rmsnorm" else c * (1 + b)
    attention = (3 * c * c + b * 3 * c) + (c * c + b * c)
    if config.mlp == "swiglu":
        h = swiglu_hidden(c)
        mlp = 3 * c * h + b * (2 * h + c)
    else:
        h = 4 * c
        mlp = (c * h + b * h) + (h * c + b * c)
    per_block = 2 * norm + attention + mlp
    counts = {
        "token_embedding": v * c,
        "position_embedding": config.block_size * c,
        "per_block": per_block,
        "blocks": config.n_layer * per_block,
        "final_norm": norm,
        "lm_head": 0 if config.tie_weights else v * c,
    }
    counts["total"] = (counts["token_embedding"] + counts["position_embedding"]
                       + counts["blocks"] + counts["final_norm"] + counts["lm_head"])
    return counts
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_param_count", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_param_count():
    """The formula equals the real count for every option, and gives 163M for the example."""
    for bias in (True, False):
        for tie in (True, False):
            for norm, mlp in (("layernorm", "gelu"), ("rmsnorm", "swiglu")):
                config = GPTConfig(vocab_size=13, block_size=7, n_layer=2, n_head=2, n_embd=8,
                                   bias=bias, tie_weights=tie, norm=norm, mlp=mlp)
                model = GPT(config)
                counted = gpt_parameter_count(config)
                real = model.num_parameters()
                assert counted["total"] == real, (
                    f"gpt_parameter_count gives {counted['total']:,} but the model has {real:,} "
                    f"(bias={bias}, tie_weights={tie}, {norm}, {mlp}): check the biases (only "
                    "with bias=True), RMSNorm's single vector, and that a tied head adds nothing"
                )
                block = sum(p.size for p in model.blocks[0].parameters())
                assert counted["per_block"] == block, (
                    f"per_block is {counted['per_block']} but a real block has {block} "
                    f"(bias={bias}, {norm}, {mlp})"
                )
    example = GPTConfig(vocab_size=50_000, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                        bias=True, tie_weights=False)
    counts = gpt_parameter_count(example)
    assert counts["per_block"] == 12 * 768**2 + 13 * 768, (
        f"one 768-wide block should have 12 C^2 + 13 C = {12 * 768**2 + 13 * 768:,} parameters, "
        f"got {counts['per_block']:,}"
    )
    assert round(counts["total"] / 1e6) == 163 and round(counts["blocks"] / 1e6) == 85, (
        f"the example should have ~163M parameters (~85M in blocks), got "
        f"{counts['total'] / 1e6:.1f}M ({counts['blocks'] / 1e6:.1f}M)"
    )

    def check_count(fields):
        """gpt_parameter_count(GPTConfig(**fields)) against a real GPT, piece by piece."""
        config = GPTConfig(**fields)
        model = GPT(config)
        counted = gpt_parameter_count(config)
        real = {
            "token_embedding": model.wte.weight.size,
            "position_embedding": model.wpe.weight.size,
            "per_block": sum(p.size for p in model.blocks[0].parameters()),
            "blocks": sum(p.size for p in model.blocks.parameters()),
            "final_norm": sum(p.size for p in model.ln_f.parameters()),
            "lm_head": 0 if config.tie_weights else model.lm_head.weight.size,
            "total": model.num_parameters(),
        }
        wrong = {k: (counted.get(k), v) for k, v in real.items() if counted.get(k) != v}
        assert not wrong, (
            f"gpt_parameter_count({fields}) disagrees with the model (piece: (formula, real)): "
            f"{wrong}: biases only with bias=True, RMSNorm one vector and LayerNorm two, SwiGLU "
            "three C x swiglu_hidden(C) matrices, a tied head adds nothing"
        )

    check_count({"vocab_size": 13, "block_size": 7, "n_layer": 2, "n_head": 2, "n_embd": 8})
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    base = {"vocab_size": 17, "block_size": 5, "n_layer": 2, "n_head": 2, "n_embd": 12}
    hidden_cases(check_count, {
        "LayerNorm with SwiGLU and biases": base | {"mlp": "swiglu", "bias": True},
        "RMSNorm with GELU": base | {"norm": "rmsnorm"},
        "LayerNorm with SwiGLU, an untied head and no biases": base | {"mlp": "swiglu",
                                                                        "tie_weights": False},
        "RMSNorm with GELU, biases and an untied head": base | {"norm": "rmsnorm", "bias": True,
                                                                 "tie_weights": False},
        "a wider, deeper model": {"vocab_size": 50, "block_size": 20, "n_layer": 3,
                                  "n_head": 5, "n_embd": 40, "mlp": "swiglu", "bias": True},
        "a single layer and head": {"vocab_size": 3, "block_size": 2, "n_layer": 1,
                                    "n_head": 1, "n_embd": 4, "bias": True},
    })
    ### END HIDDEN TESTS


test_unit_param_count()

# %% [markdown]
# ## Part 7: generating text
#
# A language model gives, at every position, a distribution over the next token. To
# **generate**, take the logits at the last position, pick a token, append it, and run the
# model again on the longer sequence, `max_new_tokens` times. Three details:
#
# - **Cropping.** The model has `block_size` positions. Once the sequence is longer, feed
#   only its last `block_size` tokens: the model forgets older text. The returned ids still
#   hold the whole sequence.
# - **No graph.** Generation needs no gradients: run under `no_grad()` (nothing is recorded,
#   memory stays flat) and in `eval()` mode (dropout off), and put the model's mode back.
#   We also skip the LM head on all positions but the last.
# - **Reproducible.** `seed=` makes a private `np.random.Generator`, so the same seed gives
#   the same text whatever else used the shared generator; without a seed, draws come from
#   the shared generator (so `manual_seed` controls them).
#
# `GPT.generate(...)` (Part 5) calls `generate_ids(model, ...)`, which you write here, with
# `sample_logits(logits, temperature, top_k, top_p, rng)`, which picks one id per row of `(B, V)`
# logits:
#
# 1. **Temperature** divides the logits: below 1 sharpens the distribution (safer, more
#    repetitive text), above 1 flattens it. `temperature=0` means greedy: the `argmax`.
# 2. **Top-k** keeps the `k` largest logits and sets the others to `-inf`.
# 3. **Top-p** (nucleus sampling, Holtzman et al. 2019) keeps the smallest set of most likely
#    tokens whose probabilities add up to at least `p`; the most likely token always stays.
# 4. Softmax (in float64: the probabilities must sum to 1 exactly enough for sampling), then
#    draw by inverting the cumulative distribution with one uniform number per row.

# %% nbgrader={"grade": false, "grade_id": "generate", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def sample_logits(logits, temperature=1.0, top_k=None, top_p=None, rng=None):
    """One token id per row of `logits` (B, V): temperature, then top-k, then top-p.

    >>> logits = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])
    >>> sample_logits(logits, temperature=0).tolist()  # greedy: the largest logit
    [1, 2]
    >>> rng = np.random.default_rng(0)
    >>> sorted({int(sample_logits(logits[0], top_k=2, rng=rng)) for _ in range(50)})
    [1, 2]
    """
    logits = np.asarray(logits.data if isinstance(logits, Tensor) else logits, dtype=np.float64)
    if logits.ndim == 1:
        return sample_logits(logits[None], temperature, top_k, top_p, rng)[0]
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")
    rng = default_generator() if rng is None else rng
    ### BEGIN SOLUTION
    if temperature == 0:
        return logits.argmax(axis=-1)
    logits = logits / temperature  # (B, V)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.partition(logits, -int(top_k), axis=-1)[:, -int(top_k), None]  # (B, 1)
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)  # (B, V)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")  # (B, V), most likely first
        sorted_probs = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of the tokens ahead
        drop = np.zeros_like(probs, dtype=bool)
        np.put_along_axis(drop, order, before >= top_p, axis=-1)
        probs = np.where(drop, 0.0, probs)
        probs /= probs.sum(axis=-1, keepdims=True)
    cdf = np.cumsum(probs, axis=-1)  # (B, V)
    u = rng.random(len(probs))[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=-1), probs.shape[-1] - 1)
    ### END SOLUTION


def generate_ids(model, prompt_ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 seed=None):
    """Extend `prompt_ids` ((T,) or (B, T)) by max_new_tokens sampled ids; same shape kind.

    The context fed to the model is cropped to its last block_size tokens.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8))
    >>> ids = generate_ids(model, np.array([1, 2, 3]), max_new_tokens=6, seed=0)
    >>> ids.shape, ids[:3].tolist()  # longer than block_size: the context is cropped
    ((9,), [1, 2, 3])
    >>> generate_ids(model, np.array([[1], [2]]), max_new_tokens=2, temperature=0).shape
    (2, 3)
    >>> bool(np.array_equal(ids, generate_ids(model, np.array([1, 2, 3]), 6, seed=0)))
    True
    """
    ids = model._check_ids(prompt_ids, "prompt_ids")
    single = ids.ndim == 1
    ids = ids[None] if single else ids
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise ValueError(
            f"prompt_ids must be a non-empty sequence (T,) or batch (B, T) of ids, got shape "
            f"{np.shape(prompt_ids)}: the model needs at least one token to continue"
        )
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens}")
    rng = np.random.default_rng(seed) if seed is not None else default_generator()
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            ### BEGIN SOLUTION
            for _ in range(int(max_new_tokens)):
                context = ids[:, -model.config.block_size:]  # (B, <= block_size)
                last = model.hidden_states(context)[:, -1, :]  # (B, C)
                logits = model.lm_head(last)  # (B, V)
                next_ids = sample_logits(logits, temperature, top_k, top_p, rng)  # (B,)
                ids = np.concatenate([ids, next_ids[:, None].astype(np.int64)], axis=1)
            ### END SOLUTION
    finally:
        model.train(was_training)
    return ids[0] if single else ids


# %% nbgrader={"grade": true, "grade_id": "test_unit_sampling", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_sampling():
    """Temperature 0 is greedy, top-k/top-p never pick excluded ids, seeds reproduce."""
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    assert sample_logits(logits, temperature=0).tolist() == [0], (
        "temperature=0 must take the argmax"
    )
    rng = np.random.default_rng(0)
    picks = np.array([sample_logits(logits, rng=rng)[0] for _ in range(4000)])
    freq = np.bincount(picks, minlength=4) / len(picks)
    assert np.allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03), (
        f"sampling frequencies {freq.round(3)} should match softmax(logits) = "
        "[0.5, 0.3, 0.15, 0.05]: draw by inverting the cumulative distribution"
    )
    picks = {int(sample_logits(logits, top_k=2, rng=rng)[0]) for _ in range(300)}
    assert picks == {0, 1}, (
        f"top_k=2 must only ever pick ids 0 and 1 (probabilities 0.5 and 0.3), picked "
        f"{sorted(picks)} in 300 draws"
        + (": fewer than k ids were kept; the k-th largest logit is "
           "np.partition(logits, -k, axis=-1)[:, -k], and logits equal to it stay"
           if len(picks) < 2 else
           ": keep the k largest logits and set the others to -inf before the softmax")
    )
    picks = {int(sample_logits(logits, top_p=0.7, rng=rng)[0]) for _ in range(300)}
    assert picks == {0, 1}, (
        f"top_p=0.7 keeps the smallest set reaching 0.7 (0.5 + 0.3), picked {sorted(picks)}"
    )
    picks = {int(sample_logits(logits, top_p=0.4, rng=rng)[0]) for _ in range(100)}
    assert picks == {0}, f"top_p=0.4 keeps only the most likely id, picked {sorted(picks)}"
    cold = np.bincount([sample_logits(logits, temperature=0.3, rng=rng)[0] for _ in range(2000)],
                       minlength=4) / 2000
    assert cold[0] > 0.75, f"temperature 0.3 should sharpen towards id 0, got frequencies {cold}"
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=1, n_head=1, n_embd=8))
    a = model.generate([1, 2], 10, seed=3)
    b = model.generate([1, 2], 10, seed=3)
    assert a.shape == (12,) and a[:2].tolist() == [1, 2], (
        f"generate([1, 2], 10) should return the prompt followed by 10 new ids, got {a}"
    )
    assert np.array_equal(a, b), "the same seed must generate the same ids"
    assert model.training, "generate must put the model back in training mode"
    batch = model.generate(np.array([[1, 2, 3, 4, 5, 6]]), 3, seed=1)
    assert batch.shape == (1, 9), (
        f"a prompt longer than block_size=4 is cropped for the model but kept in the output: "
        f"expected shape (1, 9), got {batch.shape}"
    )
    greedy = model.generate([1, 2], 5, temperature=0)
    assert np.array_equal(greedy, model.generate([1, 2], 5, temperature=0)), (
        "greedy decoding (temperature=0) must be deterministic"
    )

    def check_choices(probs, settings, allowed, draws):
        """Over `draws` samples of each row of log(probs) with `settings`, row b picks exactly
        the ids of allowed[b] (each of them, and nothing else)."""
        logits = np.log(np.asarray(probs, dtype=np.float64))
        rng = np.random.default_rng(draws)
        picks = np.array([sample_logits(logits, rng=rng, **settings) for _ in range(draws)])
        assert picks.shape == (draws, len(logits)), (
            f"sample_logits of ({len(logits)}, V) logits should give one id per row, got shape "
            f"{picks.shape[1:]}"
        )
        for b, want in enumerate(allowed):
            seen = set(picks[:, b].tolist())
            assert seen == set(want), (
                f"{settings}: row {b} with probabilities {np.round(probs[b], 3).tolist()} should "
                f"pick exactly ids {sorted(want)}, picked {sorted(seen)} in {draws} draws: "
                "temperature first, then top-k (ties with the k-th logit stay), then top-p (the "
                "smallest set of most likely ids reaching p, after top-k), each row on its own"
            )

    def check_frequencies(probs, temperature, want, draws):
        """Sampling frequencies at `temperature` match `want` (worked by hand) within 0.03."""
        logits = np.log(np.asarray([probs], dtype=np.float64))
        rng = np.random.default_rng(draws)
        picks = [sample_logits(logits, temperature, rng=rng)[0] for _ in range(draws)]
        freq = np.bincount(picks, minlength=len(probs)) / draws
        assert np.allclose(freq, want, atol=0.03), (
            f"temperature {temperature}: frequencies {freq.round(3)} should match "
            f"{np.round(want, 3)}, softmax(logits / temperature)"
        )

    def check_generate(prompt, n, seed):
        """generate(prompt, n) keeps the prompt, adds n ids of the vocabulary, repeats per seed,
        and leaves the model in training mode."""
        out = model.generate(prompt, n, seed=seed)
        prompt = np.asarray(prompt)
        assert out.shape == prompt.shape[:-1] + (prompt.shape[-1] + n,), (
            f"generate with a prompt of shape {prompt.shape} and {n} new tokens should return "
            f"shape {prompt.shape[:-1] + (prompt.shape[-1] + n,)}, got {np.shape(out)}"
        )
        assert np.array_equal(out[..., :prompt.shape[-1]], prompt), "the prompt must be kept"
        assert out.min() >= 0 and out.max() < 7, f"ids outside the vocabulary: {out}"
        assert np.array_equal(out, model.generate(prompt, n, seed=seed)), (
            "the same seed must generate the same ids"
        )
        assert model.training, "generate must put the model back in training mode"

    check_choices(np.array([[0.5, 0.3, 0.15, 0.05]]), {"top_k": 2}, [{0, 1}], 300)
    check_frequencies([0.5, 0.3, 0.15, 0.05], 1.0, [0.5, 0.3, 0.15, 0.05], 4000)
    check_generate([1, 2], 10, 3)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rows = np.array([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5], [0.1, 0.6, 0.2, 0.1]])
    hidden_cases(check_choices, {
        "a batch of rows with top-p": (rows, {"top_p": 0.7}, [{0, 1}, {3, 2}, {1, 2}], 400),
        "a batch of rows with top-k": (rows, {"top_k": 1}, [{0}, {3}, {1}], 50),
        "greedy on a batch of rows": (rows, {"temperature": 0}, [{0}, {3}, {1}], 20),
        "ties at the k-th largest logit": (np.array([[0.4, 0.2, 0.2, 0.2]]), {"top_k": 2},
                                           [{0, 1, 2, 3}], 400),
        "top-k larger than the vocabulary": (rows[:1], {"top_k": 10}, [{0, 1, 2, 3}], 600),
        "top-p of one keeps every id": (rows[:1], {"top_p": 1.0}, [{0, 1, 2, 3}], 600),
        "top-k before top-p": (np.array([[0.4, 0.3, 0.2, 0.1]]), {"top_k": 3, "top_p": 0.75},
                               [{0, 1}], 400),
        "a cold temperature with top-p": (np.array([[0.3, 0.28, 0.22, 0.2]]),
                                          {"temperature": 0.1, "top_p": 0.5}, [{0}], 100),
    })
    hot = np.sqrt([0.5, 0.3, 0.15, 0.05])
    cold = np.array([0.5, 0.3, 0.15, 0.05]) ** 4
    hidden_cases(check_frequencies, {
        "a hot temperature flattens": ([0.5, 0.3, 0.15, 0.05], 2.0, hot / hot.sum(), 4000),
        "a cold temperature sharpens": ([0.5, 0.3, 0.15, 0.05], 0.25, cold / cold.sum(), 3000),
        "a uniform distribution": ([0.2] * 5, 1.0, [0.2] * 5, 4000),
    })
    hidden_cases(check_generate, {
        "a batch of prompts": (np.array([[1, 2], [3, 4], [6, 0]]), 4, 5),
        "no new tokens": ([3, 3, 3], 0, 6),
        "a run far past the context": ([0, 1, 2, 3], 12, 7),
        "a single token prompt": ([6], 3, 8),
    })
    ### END HIDDEN TESTS


test_unit_sampling()

# %% [markdown]
# ## Part 8: checkpoints that know their model
#
# Module 08's `save_checkpoint` stores weights, optimizer state and a JSON `extra` safely
# (`.npz`, no pickle). A GPT checkpoint must also record the **config**, or nobody can
# rebuild the model to load it into. `save_gpt` puts `config.to_dict()` in the metadata;
# `load_gpt(path)` rebuilds `GPT(config)` from it and loads the weights.
#
# When the caller also passes the config it expects (a script's command-line sizes, say)
# and it differs from the saved one, the useful error lists **every** differing field with
# both values, not the first shape mismatch deep in `load_state_dict`.
# `config_mismatches(saved, wanted)` returns those lines.

# %% nbgrader={"grade": false, "grade_id": "checkpoints", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def config_mismatches(saved, wanted):
    """Lines "field: checkpoint X, requested Y" for each field where two configs differ.

    >>> config_mismatches(GPTConfig(n_layer=4), {"n_layer": 6, "n_embd": 128})
    ['n_layer: checkpoint 4, requested 6']
    """
    ### BEGIN SOLUTION
    saved = saved.to_dict() if isinstance(saved, GPTConfig) else dict(saved)
    wanted = wanted.to_dict() if isinstance(wanted, GPTConfig) else dict(wanted)
    return [f"{name}: checkpoint {saved.get(name)!r}, requested {wanted[name]!r}"
            for name in wanted if saved.get(name) != wanted[name]]
    ### END SOLUTION


def save_gpt(path, model, optimizer=None, step=0, extra=None):
    """Module 08's checkpoint plus the model's config (and your JSON `extra`).

    >>> import tempfile
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8))
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "gpt.npz")
    >>> save_gpt(path, model, step=100, extra={"dataset": "shakespeare"})
    >>> os.listdir(folder.name)
    ['gpt.npz']
    >>> folder.cleanup()
    """
    save_checkpoint(path, model, optimizer, step=step,
                    extra={"gpt_config": model.config.to_dict(), "user": extra})


def read_gpt_config(path):
    """The GPTConfig saved in a checkpoint by save_gpt (without loading the weights).

    >>> import tempfile
    >>> config = GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8)
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "gpt.npz")
    >>> save_gpt(path, GPT(config))
    >>> read_gpt_config(path) == config
    True
    >>> folder.cleanup()
    """
    from tinytorch.core.training import read_checkpoint_meta

    meta = read_checkpoint_meta(path)
    extra = meta.get("extra")
    if not isinstance(extra, dict) or "gpt_config" not in extra:
        raise CheckpointError(
            f"{os.fspath(path)!r} is a TinyTorch checkpoint but holds no GPT config: was it "
            "saved with save_gpt?"
        )
    return GPTConfig.from_dict(extra["gpt_config"])


def load_gpt(path, config=None, **overrides):
    """(model, step, extra) from a save_gpt checkpoint.

    `config` (a GPTConfig, or field=value overrides) is what the caller expects; any
    field that differs from the checkpoint's is listed in one CheckpointError.

    >>> import tempfile
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8))
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "gpt.npz")
    >>> save_gpt(path, model, step=100, extra={"dataset": "shakespeare"})
    >>> loaded, step, extra = load_gpt(path)
    >>> step, extra, bool(np.array_equal(loaded.wte.weight.data, model.wte.weight.data))
    (100, {'dataset': 'shakespeare'}, True)
    >>> try:
    ...     load_gpt(path, n_layer=2, n_embd=8)
    ... except CheckpointError as error:
    ...     print(str(error).splitlines()[1].strip())
    n_layer: checkpoint 1, requested 2
    >>> folder.cleanup()
    """
    saved = read_gpt_config(path)
    wanted = dict(config.to_dict() if config is not None else {}, **overrides)
    problems = config_mismatches(saved, wanted)
    if problems:
        raise CheckpointError(
            f"{os.fspath(path)!r} was saved with a different model configuration:\n  "
            + "\n  ".join(problems)
            + "\nLeave out the sizes to use the checkpoint's, or train a new model."
        )
    model = GPT(saved)
    step, extra = load_checkpoint(path, model)
    return model, step, extra.get("user")


# %% nbgrader={"grade": true, "grade_id": "test_unit_checkpoints", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_checkpoints():
    """A saved GPT comes back identical; a mismatching config is refused with every difference."""
    manual_seed(1)
    config = GPTConfig(vocab_size=9, block_size=6, n_layer=1, n_head=2, n_embd=8)
    model = GPT(config)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "gpt.npz")
        save_gpt(path, model, step=7, extra={"note": "hi"})
        loaded, step, extra = load_gpt(path)
        assert loaded.config == config and step == 7 and extra == {"note": "hi"}, (
            f"load_gpt should give back the config, step 7 and the extra, got "
            f"{loaded.config}, {step}, {extra}"
        )
        idx = np.array([[1, 2, 3]])
        assert np.array_equal(loaded(idx)[0].data, model(idx)[0].data), "loaded weights differ"
        try:
            load_gpt(path, n_layer=2, n_embd=16)
        except CheckpointError as error:
            text = str(error)
            assert "n_layer" in text and "n_embd" in text and "16" in text, (
                f"the error should list every mismatch (n_layer and n_embd) with values: {text}"
            )
        else:
            raise AssertionError("load_gpt with a different n_layer must raise CheckpointError")
    same = GPTConfig(vocab_size=9, block_size=6, n_layer=1, n_head=2, n_embd=8)
    lines = config_mismatches(config, same)
    assert lines == [], f"equal configs should have no mismatches, got {lines}"

    def check_round_trip(fields, step, extra, seed):
        """save_gpt then load_gpt gives back the config, step, extra and every weight."""
        manual_seed(seed)
        model = GPT(GPTConfig(**fields))
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "gpt.npz")
            save_gpt(path, model, step=step, extra=extra)
            loaded, got_step, got_extra = load_gpt(path)
        assert (loaded.config, got_step, got_extra) == (model.config, step, extra), (
            f"load_gpt should give back the config, step {step} and extra {extra!r}, got "
            f"{loaded.config}, {got_step}, {got_extra!r}"
        )
        saved = dict(model.named_parameters())
        differ = [n for n, p in loaded.named_parameters()
                  if not np.array_equal(p.data, saved[n].data)]
        assert not differ, f"these weights differ after loading: {differ}"

    def check_refused(fields, overrides):
        """load_gpt(path, **overrides) raises a CheckpointError naming every differing field
        with the value asked for."""
        model = GPT(GPTConfig(**fields))
        differing = sorted(k for k, v in overrides.items() if model.config.to_dict()[k] != v)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "gpt.npz")
            save_gpt(path, model)
            words = differing + [repr(overrides[k]) for k in differing]
            expect_error(f"load_gpt with {overrides} for a checkpoint of {fields}",
                         lambda: load_gpt(path, **overrides), CheckpointError, words,
                         "list every field that differs, with the checkpoint's value and the "
                         "requested one (config_mismatches)")

    def check_mismatches(saved, wanted):
        """config_mismatches gives one line per differing field, naming it, and none else."""
        as_dict = [c.to_dict() if isinstance(c, GPTConfig) else dict(c) for c in (saved, wanted)]
        differing = {k for k, v in as_dict[1].items() if as_dict[0].get(k) != v}
        lines = config_mismatches(saved, wanted)
        named = {line.split(":")[0] for line in lines}
        assert len(lines) == len(differing) and named == differing, (
            f"config_mismatches should give one line for each of {sorted(differing)}, got {lines}"
        )

    small = {"vocab_size": 9, "block_size": 6, "n_layer": 1, "n_head": 2, "n_embd": 8}
    check_round_trip(small, 7, {"note": "hi"}, 1)
    check_refused(small, {"n_layer": 2, "n_embd": 16})
    check_mismatches(config, same)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_round_trip, {
        "RMSNorm, SwiGLU and an untied head": (small | {"norm": "rmsnorm", "mlp": "swiglu",
                                                        "tie_weights": False}, 3, None, 2),
        "a nested extra at step zero": (small | {"bias": True}, 0,
                                        {"runs": [1, 2], "opts": {"lr": 0.5}}, 3),
        "exact GELU and dropout": (small | {"gelu_approximate": "none", "dropout": 0.1}, 12,
                                   "a note", 4),
    })
    hidden_cases(check_refused, {
        "a different norm and MLP": (small, {"norm": "rmsnorm", "mlp": "swiglu"}),
        "one differing size among equal ones": (small, {"n_head": 2, "vocab_size": 10}),
        "a different dropout and head": (small, {"dropout": 0.2, "tie_weights": False}),
    })
    hidden_cases(check_mismatches, {
        "a config against every field as a dict": (GPTConfig(),
                                                   GPTConfig(n_layer=2, bias=True).to_dict()),
        "every size differs": (GPTConfig(), GPTConfig(vocab_size=3, block_size=2, n_layer=1,
                                                      n_head=1, n_embd=2)),
        "a requested subset of the fields": (GPTConfig(), {"n_embd": 64, "n_head": 4}),
    })
    ### END HIDDEN TESTS


test_unit_checkpoints()

# %% [markdown]
# ## Systems analysis: parameters, memory and time, measured on your machine
#
# **Parameters.** The formula of Part 6 for the lesson's example and for the milestone's
# model, and where the parameters are.

# %% nbgrader={"grade": false, "grade_id": "analysis-params", "locked": false, "schema_version": 3, "solution": false, "task": false}
def parameter_report():
    example = GPTConfig(vocab_size=50_000, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                        bias=True, tie_weights=False)
    tiny = GPTConfig()
    configs = (("768 wide, 12 blocks, 50k vocab", example), ("milestone (tinygpt)", tiny))
    for label, config in configs:
        c = gpt_parameter_count(config)
        print(f"{label:32s} total {c['total'] / 1e6:8.2f}M  blocks {c['blocks'] / 1e6:7.2f}M "
              f"({c['blocks'] / c['total']:.0%})  embeddings "
              f"{(c['token_embedding'] + c['position_embedding']) / 1e6:6.2f}M  head "
              f"{c['lm_head'] / 1e6:6.2f}M  float32 {c['total'] * 4 / 2**20:7.1f} MiB")


parameter_report()

# %% [markdown]
# **When do the attention matrices outgrow the weights?** Attention compares every token with
# every other: one layer's probabilities are `B * n_head * T * T` numbers, growing with the
# **square** of the context, while the weights do not grow at all. One layer's matrices are
# as large as all the weights when
#
# $$B\, n_\text{head}\, T^2 = N_\text{params}
#   \quad\Longrightarrow\quad T^* = \sqrt{N / (B\, n_\text{head})}.$$
#
# A fused attention can do one of two things with the probabilities. It can **keep** them
# for backward (as a composed softmax does): every layer's `(T, T)` matrices then stay alive
# until backward reaches that layer, `n_layer` of them at the peak, and the crossover comes
# `sqrt(n_layer)` times earlier. Or it can keep only `q`, `k`, `v` and **recompute** the
# probabilities in backward (FlashAttention's choice): one layer's matrices at a time, for a
# second `q @ k^T`. The report says which your module 12 does. Below: `T*` computed for the
# milestone's model at batch 1, then measured: the peak memory (tracemalloc) of one
# attention layer's forward and backward at growing `T`.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def attention_peak_bytes(b, h, t, d):
    """Peak bytes NumPy allocates during one causal attention's forward and backward."""
    rng = np.random.default_rng(0)
    q, k, v = (Tensor(rng.standard_normal((b, h, t, d), dtype=np.float32), requires_grad=True)
               for _ in range(3))
    grad = np.ones((b, h, t, d), dtype=np.float32)
    tracemalloc.start()
    out = scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
    out.backward(grad)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def memory_report():
    config = GPTConfig()
    n = gpt_parameter_count(config)["total"]
    weights = n * 4
    h, d = config.n_head, config.head_dim
    t_star = math.sqrt(n / (1 * h))
    from tinytorch.core.attention import AttentionFunction

    kept = getattr(AttentionFunction, "saves_for_backward", False)
    print(f"milestone model: {n:,} parameters = {weights / 2**20:.2f} MiB float32; batch 1, "
          f"{h} heads: computed crossover T* = sqrt(N / n_head) = {t_star:.0f} for one layer, "
          f"{t_star / math.sqrt(config.n_layer):.0f} for all {config.n_layer} layers' matrices")
    print("your module 12 " + ("keeps the probabilities for backward: all layers' matrices "
                               "are alive at the peak" if kept else
                               "recomputes the probabilities in backward: one layer's "
                               "matrices at a time"))
    print(f"{'T':>6s} {'one (T, T) x heads':>20s} {'measured attention peak':>24s} "
          f"{'/ weights':>10s}")
    for t in (128, 256, 512, 1024):
        matrix = 1 * h * t * t * 4
        peak = attention_peak_bytes(1, h, t, d)
        print(f"{t:6d} {matrix / 2**20:17.2f} MiB {peak / 2**20:21.2f} MiB {peak / weights:9.2f}x")


memory_report()

# %% [markdown]
# The computed matrix passes the weights near `T*`; the measured peak is a small multiple of
# it (the scores, the probabilities and their gradient exist together in backward), so in
# practice attention outgrows the weights somewhat earlier, and every doubling of the
# context quadruples it. At GPT-2's 1,024 positions (12 layers, 12 heads), an implementation
# that stores the probabilities of every layer keeps `12 * 12 * 1024^2 * 4` bytes = 576 MiB
# per sequence for backward, more than the 124M-parameter model itself (474 MiB).
# Recomputing them in backward (FlashAttention, which also never builds a whole `(T, T)`
# matrix at once) trades that memory for a second `q @ k^T`; the quadratic time remains,
# which is why long contexts are expensive.
#
# **Time.** One training step of the milestone's model on a batch of 12 sequences of 64
# tokens, split into forward, backward and the optimizer.

# %% nbgrader={"grade": false, "grade_id": "analysis-time", "locked": false, "schema_version": 3, "solution": false, "task": false}
def time_report(steps=2):
    from tinytorch.core.optimizers import AdamW

    manual_seed(0)
    model = GPT(GPTConfig())
    optimizer = AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    idx = np.random.default_rng(0).integers(0, 65, size=(12, 65))
    x, y = idx[:, :-1], idx[:, 1:]
    best = [float("inf")] * 3
    for _ in range(steps):
        t0 = time.perf_counter()
        _, loss = model(x, y)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        best = [min(b, s) for b, s in zip(best, (t1 - t0, t2 - t1, t3 - t2))]
    total = sum(best)
    print(f"one step: forward {best[0] * 1e3:.1f} ms, backward {best[1] * 1e3:.1f} ms, "
          f"AdamW {best[2] * 1e3:.1f} ms; {12 * 64 / total:,.0f} tokens/s")


time_report()

# %% [markdown]
# Backward costs about twice the forward (each matrix product has two gradient products).
# `benchmarks/gpt_step.py` in the course repository runs the same step in PyTorch for
# comparison.
#
# ## What comes next
#
# - **The `tinygpt` milestone**: `tito milestone run tinygpt` trains this model on Tiny
#   Shakespeare for 2,000 steps and writes Shakespeare-like text.
# - **Module 14 (profiling)** measures where the time of your GPT's step goes, op by op.
# - **Module 18 (KV caching)** makes `generate` fast: today every new token reruns the
#   whole context, $O(T^2)$ work per token; a cache of keys and values makes it $O(T)$.
