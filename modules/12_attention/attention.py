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
# # Module 12: Attention
#
# ## Overview
#
# A language model predicts the next token from the ones before it. Which earlier tokens
# matter changes from token to token: after "The cat that the dogs chased", the verb that
# comes next must agree with "cat", six tokens back, not with "dogs", one token back. A
# fixed window, or a recurrent state squeezed through one vector per step, handles this
# poorly. **Attention** lets every position look at every other position directly and
# decide, from the contents, how much of each to take.
#
# Each position produces three vectors from its embedding: a **query** ("what am I looking
# for?"), a **key** ("what do I contain?") and a **value** ("what do I pass on if chosen?").
# The score of position `i` for position `j` is the dot product of query `i` with key `j`.
# A softmax turns each row of scores into weights that sum to 1, and position `i`'s output
# is the weighted average of the values:
#
# $$\operatorname{Attention}(Q, K, V) =
# \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{D}}\right) V$$
#
# This module builds that formula twice: once from the operations you already have
# (matmul, softmax, masking by addition), and once as **one fused operation** with its own
# derivative, the way real frameworks do it. Then it splits the work across several
# **heads** (multi-head attention, the GPT layer) and shares keys and values between heads
# (grouped-query attention, the Llama layer, with the rotary embeddings of module 11).
#
# The price of looking everywhere is the **(T, T) table of weights**: its memory and time
# grow with the square of the sequence length. You will measure it.
#
# **In numbers.** In a GPT-2-sized layer (12 heads, $T = 1024$) the table of weights holds
# $12 \cdot 1024^2$ float32 numbers: 48 MiB per layer and sequence, 576 MiB for 12 layers,
# more than the 340 MB of those layers' weights. Double $T$ and it quadruples.
#
# ## Learning objectives
#
# - Derive why scores are divided by $\sqrt{D}$, and check it numerically.
# - Build causal and padding masks as boolean arrays (True = may attend, PyTorch's
#   convention), align a causal mask to the end of the keys for cached generation, and give
#   fully masked rows a zero output instead of NaN.
# - Write attention's backward pass by hand (`dV = P^T dO`, `dP = dO V^T`, the softmax
#   rule, `dQ`, `dK`), and check it against finite differences and the composed twin.
# - Trade recomputation for memory in backward, as FlashAttention does.
# - Split an embedding into heads with reshapes and permutes, without Python loops, and
#   share key/value heads with broadcasting instead of copies.
# - Measure attention's $O(T^2)$ memory and time on your machine.
#
# ## What you build
#
# - `causal_mask(T, S)`, and the mask handling shared by everything below.
# - `attention_composed(q, k, v, mask, is_causal)`: attention from Tensor operations.
# - `AttentionFunction` with its derivative beside it; `scaled_dot_product_attention(q, k,
#   v, mask=None, is_causal=False, dropout_p=0.0)` and `attention_weights(q, k, ...)`.
# - `MultiHeadAttention(embed_dim, num_heads, bias=True, dropout=0.0)`, in nanoGPT's layout:
#   one fused `qkv` projection and an output projection `proj`.
# - `GroupedQueryAttention(embed_dim, num_heads, num_kv_heads, bias=False, head_dim=None)`,
#   in Llama's layout (`q_proj`, `k_proj`, `v_proj`, `o_proj`), with optional rotary
#   embeddings and Qwen3's per-head norms.
# - Attention with a KV cache, in both layers: positions continue from the cache and the
#   causal mask is aligned to the end of the keys.
#
# ## What you are not building yet
#
# - **The transformer block.** Layer normalization, the MLP and residual connections
#   around attention are module 13, which assembles a GPT from your attention.
# - **The KV cache itself.** Generating text token by token recomputes keys and values of
#   the whole prefix unless they are cached. Your attention takes a cache (Part 7), aligns
#   the causal mask to the end of the keys and continues the positions; module 18 builds
#   the caches (dense and paged) and the server around them.
# - **Memory-efficient kernels.** FlashAttention never stores the (T, T) table, computing
#   the softmax block by block in fast on-chip memory. On NumPy you cannot write such a
#   kernel efficiently, but your fused backward uses one of its ideas: recompute instead of
#   store.
# - **Cross-attention, relative-position biases (ALiBi), sliding windows.** All are a
#   different `k`/`v` source or a different mask for the same function.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.attention
#| export
import math

import numpy as np

from tinytorch.core.activations import softmax
from tinytorch.core.autograd import derivative
from tinytorch.core.embeddings import apply_rotary
from tinytorch.core.layers import Dropout, Linear, Module
from tinytorch.core.tensor import Function, ShapeError, Tensor, default_generator

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.autograd import GradcheckError, gradcheck
from tinytorch.core.embeddings import RotaryEmbedding
from tinytorch.core.tensor import manual_seed

# %% [markdown]
# ## Part 1: scaled dot-product attention, by hand
#
# Shapes first, because attention is mostly bookkeeping of axes. With a batch of `B`
# sequences and `H` heads:
#
# ```
# q : (B, H, T, D)     T queries (the positions that ask)
# k : (B, H, S, D)     S keys    (the positions that can be looked at)
# v : (B, H, S, Dv)    S values  (usually Dv = D)
#
# scores  = q @ k^T / sqrt(D)      (B, H, T, S)   one score per (query, key) pair
# weights = softmax(scores, -1)    (B, H, T, S)   each row sums to 1
# out     = weights @ v            (B, H, T, Dv)  a weighted average of values per query
# ```
#
# In self-attention `S = T`: queries, keys and values all come from the same tokens. `S`
# and `T` differ when a model generates with a cache (one new query, all earlier keys) or
# attends to another sequence (a translation model's decoder reading its encoder).
#
# **Why divide by `sqrt(D)`?** If the components of `q` and `k` are independent with mean
# 0 and variance 1, the dot product `q . k` is a sum of `D` terms of variance 1, so its
# variance is `D`: with `D = 64` typical scores are around ±8. A softmax of numbers that
# far apart is almost one-hot: one weight near 1, the rest near 0, and the gradient of a
# saturated softmax is near zero, so training stalls. Dividing by `sqrt(D)` brings the
# scores back to variance 1 whatever the head size. The cell below measures it.

# %% nbgrader={"grade": false, "grade_id": "scale-demo", "locked": false, "schema_version": 3, "solution": false, "task": false}
def scale_demo(sizes=(16, 64, 256), n=4096):
    rng = np.random.default_rng(0)
    for d in sizes:
        q = rng.standard_normal((n, d)).astype(np.float32)
        k = rng.standard_normal((n, d)).astype(np.float32)
        dots = np.sum(q * k, axis=-1)
        scaled = dots / np.float32(math.sqrt(d))
        rows = softmax(Tensor(dots[:4096].reshape(64, 64)), axis=-1).data
        print(f"D={d:4}: std of q.k {dots.std():6.2f}, of q.k/sqrt(D) {scaled.std():5.2f}; "
              f"unscaled softmax rows put {rows.max(axis=-1).mean():.0%} on their top key")


scale_demo()

# %% [markdown]
# ## Part 2: masks
#
# A mask says which keys each query may look at. Everything in this module uses PyTorch's
# boolean convention for `scaled_dot_product_attention`: a boolean array broadcastable to
# `(B, H, T, S)` where **True means "may attend"**. (Careful: PyTorch's older
# `nn.MultiheadAttention` uses the opposite, True = masked out. Mixing them up raises no
# error and silently attends to exactly the wrong tokens.)
#
# **Causal masks.** A language model must not read the token it is predicting, so query
# `i` may only see keys `j <= i`: a lower-triangular mask. With a cache there are fewer
# queries than keys (`T < S`): the `T` queries are the *last* `T` positions of the `S`
# keys, so query `i` sits at position `i + S - T` and may see keys `j <= i + S - T`. The
# triangle is aligned to the **end** (bottom-right) of the keys:
#
# ```
# T = S = 4             T = 2, S = 4 (two new tokens, two cached)
# 1 0 0 0               1 1 1 0
# 1 1 0 0               1 1 1 1
# 1 1 1 0
# 1 1 1 1
# ```
#
# (PyTorch's `is_causal=True` aligns its triangle to the top-left instead, which is the
# same for `T = S` and wrong for a cache; its `torch.nn.attention.bias.causal_lower_right`
# matches yours.)
#
# **Padding masks.** Sequences of different lengths are padded to one length in a batch;
# a padding mask of shape `(B, 1, 1, S)` hides the padded keys of each sequence from every
# head and query. Masks combine with a logical AND: `mask & causal`.
#
# **Fully masked rows.** A query that may attend to nothing (a padded query position, or a
# padding mask combined with a causal one) has a row of scores with no allowed entry. A
# softmax of nothing is undefined; the textbook implementation (scores set to `-inf`)
# computes `-inf - (-inf) = NaN`, and one NaN spreads through the whole batch at the next
# matrix product. Our rule: such a row gets **all-zero weights**, so its output is zero
# and its gradient is zero.
#
# Write `causal_mask(T, S)` (a `(T, S)` boolean array) and `_keep_mask`, which turns the
# user's `mask` and `is_causal` into one boolean array broadcastable to the scores' shape,
# or `None` when nothing is masked. Check the mask: a `Tensor` or array of **bool** dtype
# (anything else is a `TypeError`: a float mask is ambiguous, additive in some libraries,
# multiplicative in others), whose shape broadcasts to the scores' shape without enlarging
# it (else a `ShapeError` naming both shapes).

# %% nbgrader={"grade": false, "grade_id": "masks", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def causal_mask(T, S=None):
    """(T, S) bool, True where query i may see key j: j <= i + S - T (aligned to the end).

    >>> causal_mask(3)
    array([[ True, False, False],
           [ True,  True, False],
           [ True,  True,  True]])
    >>> causal_mask(2, 4)  # 2 new queries after 2 cached keys: aligned to the end
    array([[ True,  True,  True, False],
           [ True,  True,  True,  True]])
    """
    ### BEGIN SOLUTION
    S = T if S is None else S
    if T > S:
        raise ValueError(
            f"causal_mask: {T} queries but only {S} keys; a causal mask aligned to the end "
            "of the keys needs T <= S"
        )
    return np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T)
    ### END SOLUTION


def _keep_mask(mask, is_causal, scores_shape):
    """One bool array (True = may attend) broadcastable to scores_shape, or None."""
    ### BEGIN SOLUTION
    keep = None
    if mask is not None:
        keep = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
        if keep.dtype != np.bool_:
            raise TypeError(
                f"attention mask must be boolean (True = may attend), got dtype {keep.dtype}. "
                "Build it with comparisons, e.g. ids != pad_id, or convert with mask.astype(bool)"
            )
        try:
            fits = np.broadcast_shapes(keep.shape, scores_shape) == tuple(scores_shape)
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(
                f"attention mask of shape {keep.shape} does not broadcast to the scores' "
                f"shape {tuple(scores_shape)} (B, H, T, S): use e.g. (T, S) for every "
                "sequence, or (B, 1, 1, S) to hide padded keys"
            )
    if is_causal:
        causal = causal_mask(scores_shape[-2], scores_shape[-1])
        keep = causal if keep is None else keep & causal
    return keep
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_masks", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_masks():
    """Causal masks are lower-triangular, aligned to the end of the keys; masks combine by AND."""
    square = causal_mask(4)
    assert square.dtype == np.bool_ and square.shape == (4, 4), (
        f"causal_mask(4) should be a (4, 4) bool array, got {square.dtype} {square.shape}"
    )
    assert np.array_equal(square, np.tril(np.ones((4, 4), dtype=bool))), (
        "causal_mask(4) should be lower-triangular (query i sees keys 0..i), got\n"
        f"{square.astype(int)}"
    )
    cached = causal_mask(2, 4)
    assert np.array_equal(cached, [[1, 1, 1, 0], [1, 1, 1, 1]]), (
        f"causal_mask(2, 4): the 2 queries are the LAST 2 of 4 positions, so query 0 sees "
        f"keys 0..2 and query 1 sees all 4 (j <= i + S - T), got\n{cached.astype(int)}"
    )
    assert _keep_mask(None, False, (2, 3, 4, 4)) is None, "no mask and not causal: return None"
    padding = np.array([True, True, False, True]).reshape(1, 1, 1, 4)
    both = _keep_mask(padding, True, (1, 2, 4, 4))
    assert np.array_equal(np.broadcast_to(both, (1, 2, 4, 4))[0, 1],
                          np.tril(np.ones((4, 4), dtype=bool)) & padding[0, 0]), (
        "a padding mask with is_causal=True should combine both with a logical AND"
    )
    for bad, kind in ((np.ones((4, 4), dtype=np.float32), TypeError),
                      (np.ones((3, 4), dtype=bool), ValueError)):
        try:
            _keep_mask(bad, False, (1, 2, 4, 4))
        except kind as error:
            if kind is ValueError:
                assert "(3, 4)" in str(error) and "(1, 2, 4, 4)" in str(error), (
                    f"the mask shape error should name both shapes: {error}"
                )
        else:
            raise AssertionError(
                f"a mask of dtype {bad.dtype} and shape {bad.shape} for scores (1, 2, 4, 4) "
                f"must raise {kind.__name__}"
            )

    def allowed(T, S):  # query i sits at position i + S - T: keys 0 .. i + S - T
        return np.array([[j <= i + S - T for j in range(S)] for i in range(T)], dtype=bool)

    def check_causal(T, S):
        """causal_mask(T, S) against the rule worked one entry at a time."""
        got = causal_mask(T, S)
        assert isinstance(got, np.ndarray) and got.dtype == np.bool_ and got.shape == (T, S), (
            f"causal_mask({T}, {S}) should be a ({T}, {S}) bool array, got "
            f"{getattr(got, 'dtype', type(got).__name__)} {np.shape(got)}"
        )
        assert np.array_equal(got, allowed(T, S)), (
            f"causal_mask({T}, {S}): query i may see keys j <= i + S - T (the triangle aligned "
            f"to the end of the keys), got\n{got.astype(int)}"
        )

    def check_combined(mask, is_causal, shape):
        """_keep_mask(mask, is_causal, shape) broadcasts to the scores' shape as mask AND the
        causal triangle; None when nothing is masked."""
        got = _keep_mask(mask, is_causal, shape)
        if mask is None and not is_causal:
            assert got is None, "no mask and not causal: return None"
            return
        want = np.ones(shape, dtype=bool)
        if mask is not None:
            want &= np.asarray(mask.data if isinstance(mask, Tensor) else mask)
        if is_causal:
            want &= allowed(*shape[-2:])
        assert got is not None and np.array_equal(np.broadcast_to(got, shape), want), (
            f"a mask of shape {np.shape(mask)} with is_causal={is_causal} for scores {shape} "
            "should combine both with a logical AND (True = may attend)"
        )

    def check_refused(mask, shape, kind):
        """A mask that is not bool raises TypeError; one that does not broadcast to the
        scores' shape raises ShapeError naming both shapes."""
        from tinytorch.testing import expect_error  # module 01's test helper

        words = [] if kind is TypeError else [str(np.shape(mask)), str(tuple(shape))]
        expect_error(f"_keep_mask with a {np.asarray(mask).dtype} mask {np.shape(mask)} for "
                     f"scores {shape}", lambda: _keep_mask(mask, False, shape), kind, words,
                     "a mask must be bool and broadcast to (B, H, T, S) without enlarging it")

    check_causal(4, 4)
    check_causal(2, 4)
    check_combined(padding, True, (1, 2, 4, 4))
    check_refused(np.ones((3, 4), dtype=bool), (1, 2, 4, 4), ValueError)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1201)
    hidden_cases(check_causal, {
        "one query over many keys": (1, 9),
        "a single position": (1, 1),
        "a larger square": (7, 7),
        "more keys than queries": (3, 8),
    })
    hidden_cases(check_combined, {
        "a padding mask per sequence, causal": (rng.random((2, 1, 1, 5)) > 0.3, True,
                                                (2, 3, 5, 5)),
        "a mask of the scores' full shape": (rng.random((2, 2, 3, 4)) > 0.5, False,
                                             (2, 2, 3, 4)),
        "causal alone with more keys than queries": (None, True, (1, 1, 2, 6)),
        "a per-query mask over heads, causal": (rng.random((3, 5)) > 0.4, True, (2, 2, 3, 5)),
        "a bool Tensor": (Tensor(rng.random((1, 1, 1, 4)) > 0.5, dtype=np.bool_), False,
                          (2, 1, 4, 4)),
        "nothing masked": (None, False, (1, 1, 3, 3)),
    })
    hidden_cases(check_refused, {
        "an integer mask": (np.ones((4, 4), dtype=np.int64), (1, 2, 4, 4), TypeError),
        "a float mask of the right shape": (np.ones((1, 2, 4, 4)), (1, 2, 4, 4), TypeError),
        "a mask with too many heads": (np.ones((1, 3, 4, 4), dtype=bool), (1, 2, 4, 4),
                                       ValueError),
        "a mask longer than the keys": (np.ones((4, 5), dtype=bool), (1, 2, 4, 4), ValueError),
        "a mask with an extra axis": (np.ones((2, 1, 2, 4, 4), dtype=bool), (1, 2, 4, 4),
                                      ValueError),
    })
    ### END HIDDEN TESTS


test_unit_masks()

# %% [markdown]
# ## Part 3: attention composed from operations you have
#
# Every step of the formula is an operation of modules 01 and 02, so attention needs no new
# derivative if you build it from them. Masking is the one trick: the operations have no
# "where", so a masked score is pushed down by **adding** a huge negative number,
# `np.finfo(dtype).min`, so that its `exp` underflows to exactly 0. A fully masked row is
# then a softmax of equal huge negatives, uniform weights over forbidden keys. Multiply the
# weights by the mask (as 0.0/1.0) afterwards: it does nothing to ordinary rows (their
# masked weights are already exactly 0) and zeroes the fully masked ones, in forward and
# in backward.
#
# ```
# scale  = 1 / sqrt(D), in q's dtype        # np.float32, not a Python float64
# scores = (q @ k.transpose(-2, -1)) * scale
# scores = scores + bias                    # bias = 0 where keep, finfo.min elsewhere
# probs  = softmax(scores, axis=-1) * keep  # keep as 0.0/1.0 in q's dtype
# out    = probs @ v
# ```
#
# `_check_qkv` below (given) checks the shapes and returns the scores' shape; `_dropout`
# (given) draws the attention-dropout mask of Part 4, from the same generator as module
# 03's `Dropout`. This version is the **twin** the fused operation is tested against, and
# it is correct; its cost is that the graph keeps every `(T, S)` intermediate (scores,
# scaled scores, biased scores, weights, masked weights) alive until backward. The systems
# analysis measures it.

# %% nbgrader={"grade": false, "grade_id": "shape-checks", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def _check_qkv(q, k, v):
    """The scores' shape (..., T, S), for q (..., T, D), k (..., S, D), v (..., S, Dv)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ShapeError(
                f"attention: {name} has shape {t.shape}; q, k and v need at least 2 axes, "
                "(..., T, D), usually (B, H, T, D)"
            )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit: q and k must share "
            "the last axis D, and k and v the number of keys S: (B, H, T, D), (B, H, S, D), "
            "(B, H, S, Dv)"
        )
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ShapeError(
            f"attention: the leading (batch, head) axes of q {q.shape}, k {k.shape} and "
            f"v {v.shape} do not broadcast"
        ) from None
    return tuple(lead) + (q.shape[-2], k.shape[-2])


def _dropout(p, shape, dtype):
    """None for p == 0, else a float array of 0 and 1/(1-p), drawn like module 03's Dropout."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout_p must be in [0, 1), got {p!r}")
    if p == 0:
        return None
    keep = default_generator().random(shape, dtype=np.float32) >= p
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


def _as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(x)


# %% nbgrader={"grade": false, "grade_id": "composed", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def attention_composed(q, k, v, mask=None, is_causal=False, dropout_p=0.0):
    """softmax(q @ k^T / sqrt(D) + mask) @ v from Tensor ops: the twin of the fused op.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (Tensor(rng.standard_normal((1, 2, 3, 4))) for _ in range(3))
    >>> composed = attention_composed(q, k, v, is_causal=True)
    >>> fused = scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> composed.shape, bool(np.allclose(composed.data, fused.data, atol=1e-6))
    ((1, 2, 3, 4), True)
    """
    q, k, v = _as_tensor(q), _as_tensor(k), _as_tensor(v)
    scores_shape = _check_qkv(q, k, v)
    keep = _keep_mask(mask, is_causal, scores_shape)
    ### BEGIN SOLUTION
    dtype = q.dtype
    scale = dtype.type(1.0 / math.sqrt(q.shape[-1]))
    scores = (q @ k.transpose(-2, -1)) * scale
    if keep is not None:
        bias = np.where(keep, dtype.type(0), np.finfo(dtype).min).astype(dtype)
        scores = scores + Tensor(bias, dtype=dtype)
    probs = softmax(scores, axis=-1)
    if keep is not None:
        probs = probs * Tensor(keep.astype(dtype), dtype=dtype)
    drop = _dropout(dropout_p, scores_shape, dtype)
    if drop is not None:
        probs = probs * Tensor(drop, dtype=dtype)
    return probs @ v
    ### END SOLUTION


# %% [markdown]
# ### Test: the composed version against loops
#
# The reference below computes attention one query at a time with plain NumPy.

# %% nbgrader={"grade": false, "grade_id": "reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
def reference_attention(q, k, v, keep=None):
    """Attention one (batch, head, query) at a time, in float64; keep (T, S) or None."""
    B, H, T, D = q.shape
    S = k.shape[2]
    out = np.zeros((B, H, T, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            for i in range(T):
                allowed = [j for j in range(S) if keep is None or keep[i, j]]
                if not allowed:
                    continue  # a fully masked row: zero output
                s = np.array([q[b, h, i] @ k[b, h, j] for j in allowed]) / math.sqrt(D)
                w = np.exp(s - s.max())
                w /= w.sum()
                out[b, h, i] = sum(wj * v[b, h, j] for wj, j in zip(w, allowed))
    return out


def random_qkv(B=2, H=3, T=5, S=5, D=4, dtype=np.float32, seed=0, requires_grad=False):
    rng = np.random.default_rng(seed)
    shapes = ((B, H, T, D), (B, H, S, D), (B, H, S, D))
    return [Tensor(rng.standard_normal(s).astype(dtype), dtype=dtype, requires_grad=requires_grad)
            for s in shapes]


# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_composed", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_attention_composed():
    """The composed attention matches loops, with and without masks, and stays float32."""
    q, k, v = random_qkv()
    out = attention_composed(q, k, v)
    assert out.shape == (2, 3, 5, 4), (
        f"q, k, v of (2, 3, 5, 4) should give (2, 3, 5, 4), got {out.shape}"
    )
    want = reference_attention(q.data, k.data, v.data)
    if not np.allclose(out.data, want, atol=1e-5):
        unscaled = reference_attention(q.data * np.float32(2.0), k.data, v.data)  # D = 4
        hint = ("it matches attention WITHOUT the 1/sqrt(D) scale: multiply the scores by "
                "1/sqrt(D)" if np.allclose(out.data, unscaled, atol=1e-5) else
                "scores = q @ k^T * (1/sqrt(D)), softmax over the LAST axis (the keys), then @ v")
        raise AssertionError(
            f"attention of q, k, v (2, 3, 5, 4): out[0, 0, 0] is {np.round(out.data[0, 0, 0], 4)}, "
            f"expected {np.round(want[0, 0, 0], 4)} (the loop reference): {hint}"
        )
    assert out.dtype == np.float32, (
        f"float32 inputs gave {out.dtype}: build the scale as q.dtype.type(1 / math.sqrt(D))"
    )
    causal = attention_composed(q, k, v, is_causal=True)
    assert np.allclose(causal.data, reference_attention(q.data, k.data, v.data, causal_mask(5)),
                       atol=1e-5), "is_causal=True should let query i see keys 0..i only"
    q2, k2, v2 = random_qkv(T=2, S=6, seed=1)
    keep = causal_mask(2, 6) & np.array([True, False, True, True, True, False])
    keep[0] = False  # query 0 may see nothing
    got = attention_composed(q2, k2, v2, mask=keep)
    assert not np.isnan(got.data).any(), (
        "a fully masked row produced NaN: add finfo.min instead of -inf, then multiply the "
        "weights by the mask so the row becomes zero"
    )
    assert np.allclose(got.data, reference_attention(q2.data, k2.data, v2.data, keep), atol=1e-5), (
        "with T=2 queries, S=6 keys and a mask (row 0 fully masked), the output should match "
        "the reference: masked keys get weight 0 and a fully masked row outputs zeros"
    )

    def check_composed(q, k, v, keep, is_causal):
        """attention_composed against the loop reference (float64), q's dtype kept; keep is a
        (T, S) mask or None."""
        dtype = q.dtype
        T, S = q.shape[-2], k.shape[-2]
        got = attention_composed(*(Tensor(a, dtype=dtype) for a in (q, k, v)), mask=keep,
                                 is_causal=is_causal)
        rule = np.ones((T, S), dtype=bool) if keep is None else np.asarray(keep)
        if is_causal:
            rule = rule & (np.arange(S)[None] <= np.arange(T)[:, None] + S - T)
        want = reference_attention(*(a.astype(np.float64) for a in (q, k, v)), rule)
        assert got.shape == want.shape and got.dtype == dtype, (
            f"{dtype} q {q.shape}, k {k.shape}, v {v.shape} should give {dtype} {want.shape}, "
            f"got {got.dtype} {got.shape}"
        )
        assert not np.isnan(got.data).any(), (
            "NaN in the output: add finfo.min (not -inf), then multiply the weights by the mask"
        )
        tol = 1e-10 if dtype == np.float64 else 1e-5
        assert np.allclose(got.data, want, atol=tol), (
            f"attention of q {q.shape}, k {k.shape}, v {v.shape} (is_causal={is_causal}, "
            f"{'no mask' if keep is None else 'a mask'}) differs from the loop reference by up to "
            f"{np.abs(got.data - want).max():.3g}: scores = q @ k^T * (1/sqrt(D)), masked "
            "scores pushed down, softmax over the keys, masked rows zeroed, then @ v"
        )

    check_composed(q.data, k.data, v.data, None, False)
    check_composed(q2.data, k2.data, v2.data, keep, False)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1202)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    hidden_cases(check_composed, {
        "more keys than queries, causal": (normal(1, 2, 2, 4), normal(1, 2, 6, 4),
                                           normal(1, 2, 6, 4), None, True),
        "a single key": (normal(2, 1, 3, 4), normal(2, 1, 1, 4), normal(2, 1, 1, 4), None, False),
        "one head of a wide head size": (normal(1, 1, 4, 16), normal(1, 1, 4, 16),
                                         normal(1, 1, 4, 16), None, True),
        "float64 inputs": (*(normal(1, 2, 3, 5, dtype=np.float64) for _ in range(3)), None, True),
        "values wider than keys": (normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 7),
                                   None, False),
        "a masked row under a causal mask": (normal(1, 1, 3, 4), normal(1, 1, 5, 4),
                                             normal(1, 1, 5, 4),
                                             np.array([[0, 1, 1, 1, 1], [0, 0, 0, 0, 0],
                                                       [1, 1, 0, 1, 1]], dtype=bool), True),
        "large scores": (normal(1, 1, 4, 4) * 30, normal(1, 1, 4, 4) * 30, normal(1, 1, 4, 4),
                         None, True),
    })
    ### END HIDDEN TESTS


test_unit_attention_composed()

# %% [markdown]
# ## Part 4: one fused operation, with its derivative
#
# The composed version records five to seven operations and keeps a `(T, S)` array for
# most of them. A fused `AttentionFunction(q, k, v, keep=..., drop=...)` does the same
# maths in one `forward` on arrays and one derivative rule.
#
# **Forward**, in `_attention_probs(q, k, keep)` (the weights) and `forward`:
#
# 1. `scores = q @ swapaxes(k, -1, -2)`, then `scores *= scale`, in place (the product is
#    a new array, ours to overwrite).
# 2. Where `keep` is False, write `-inf` (`np.copyto(scores, -inf, where=~keep)` broadcasts
#    `keep` and copies nothing else). A row's maximum is then `-inf` only if the row is
#    fully masked: replace those maxima by 0 before subtracting, so the row becomes `-inf`
#    everywhere and its `exp` is exactly 0, not NaN.
# 3. `exp(scores - max)` in place, divide by the row sums, where a sum of 0 (a fully masked
#    row) is replaced by 1: the row stays all zeros. Masked weights are exactly 0.
# 4. With dropout, multiply the weights by `drop` (0 or `1/(1-p)` per weight). `out =
#    weights @ v`.
#
# **Backward.** Write `P` for the weights (after dropout: `Pd = P * drop`), `O = Pd V`,
# `dO = grad`. Matrix products differentiate as in module 06, and the softmax rule is
# module 06's too:
#
# ```
# dV = Pd^T @ dO                       (..., S, Dv)
# dP = (dO @ V^T) * drop               (..., T, S)
# dS = P * (dP - rowsum(dP * P))       softmax's rule, row by row
# dQ = (dS @ K) * scale                (..., T, D)   the scale multiplied the scores
# dK = (dS^T @ Q) * scale              (..., S, D)
# ```
#
# (Multiplying `dQ` and `dK` by the scale instead of `dS` gives the same numbers and
# touches `T * D` elements instead of `T * S`.)
#
# One simplification from FlashAttention: `rowsum(dP * P)` is a sum over `S` keys per
# query, but it equals `rowsum(dO * O)`, a sum over `Dv` features, because `O = Pd V`:
# `sum_j P_ij drop_ij (dO_i . v_j) = dO_i . O_i`. `O` is the operation's output, which the
# record keeps (`ctx.output`).
#
# **Where do the weights come from in backward?** The record keeps the inputs `q, k, v`,
# the output and the parameters, but not the intermediate `P`. Module 01's `Function.apply`
# only stores what `forward` returns. So the rule **recomputes** `P` from `q` and `k`: one
# more `q @ k^T` and softmax. This is the trade FlashAttention makes on purpose: between
# forward and backward each attention layer keeps only `q, k, v, O` (`O(T * D)` memory)
# instead of `P` (`O(T * S)`), for one more matrix product and softmax in the backward
# pass.
#
# Masked and fully masked rows need no special case in backward: their `P` is exactly 0,
# so `dS` is 0 there, and the fully masked query's `dQ` row is 0.
#
# The last two lines, `dQ` and `dK`, are given as `_attention_input_grads(dS, q, k, needs)`
# (module 17's compiled attention ends with the same step). Skip the gradients of inputs
# that do not require them (`ctx.parents[i].requires_grad`).
# `k` and `v` may have been broadcast over leading axes (grouped-query attention, Part 6):
# return the gradients in the broadcast shape and `backward` sums them down.

# %% nbgrader={"grade": false, "grade_id": "attention-input-grads", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def _attention_input_grads(d_scores, q, k, needs):
    """The backward's last step, given: dQ = (dS @ K) * scale and dK = (dS^T @ Q) * scale,
    each only where `needs` asks (needs[0]: q, needs[1]: k). Module 17's compiled attention
    ends its rule with the same step and calls this too, so one fix reaches both."""
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))  # applied to (T, D), not (T, S)
    grad_q = grad_k = None
    if needs[0]:
        grad_q = np.matmul(d_scores, k)
        grad_q *= scale
    if needs[1]:
        grad_k = np.matmul(np.swapaxes(d_scores, -1, -2), q)
        grad_k *= scale
    return grad_q, grad_k


# %% nbgrader={"grade": false, "grade_id": "attention-function", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
def _attention_probs(q, k, keep=None):
    """softmax(q @ k^T / sqrt(D)) with masked weights exactly 0 and fully masked rows all 0."""
    ### BEGIN SOLUTION
    dtype = q.dtype.type
    scores = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., T, S), a new array
    scores *= dtype(1.0 / math.sqrt(q.shape[-1]))
    if keep is not None:
        np.copyto(scores, dtype(-np.inf), where=~keep)
    top = scores.max(axis=-1, keepdims=True)
    if keep is not None:
        top[np.isneginf(top)] = 0  # fully masked rows: exp(-inf - 0) = 0, not NaN
    scores -= top
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)  # (..., T, 1)
    if keep is not None:
        total[total == 0] = 1
    scores /= total
    return scores
    ### END SOLUTION


class AttentionFunction(Function):
    """softmax(q @ k^T / sqrt(D), masked by keep) * drop @ v, in one operation"""

    @staticmethod
    def forward(q, k, v, keep=None, drop=None):
        ### BEGIN SOLUTION
        probs = _attention_probs(q, k, keep)
        if drop is not None:
            probs *= drop
        return np.matmul(probs, v)
        ### END SOLUTION


@derivative(AttentionFunction)
def attention_backward(ctx, grad):
    """dV = Pd^T dO, dP = dO V^T drop, dS = P (dP - rowsum(dO O)), dQ = dS K s, dK = dS^T Q s"""
    ### BEGIN SOLUTION
    q, k, v = ctx.inputs
    keep, drop = ctx.params.get("keep"), ctx.params.get("drop")
    needs = [p.requires_grad for p in ctx.parents]
    probs = _attention_probs(q, k, keep)  # recomputed: the record does not keep it
    grad_v = None
    if needs[2]:
        dropped = probs if drop is None else probs * drop
        grad_v = np.matmul(np.swapaxes(dropped, -1, -2), grad)
    if not (needs[0] or needs[1]):
        return None, None, grad_v
    d_probs = np.matmul(grad, np.swapaxes(v, -1, -2))  # (..., T, S)
    if drop is not None:
        d_probs *= drop
    row = np.sum(grad * ctx.output, axis=-1, keepdims=True)  # = rowsum(dP * P)
    d_probs -= row
    d_probs *= probs  # dS, the gradient of the scaled scores
    grad_q, grad_k = _attention_input_grads(d_probs, q, k, needs)
    return grad_q, grad_k, grad_v
    ### END SOLUTION


# %% [markdown]
# The public functions are given: they check the shapes, build the masks and the dropout
# draw, and call your operation. `dropout_p` follows PyTorch's
# `F.scaled_dot_product_attention`: it is applied whenever it is not 0, so a layer passes
# `dropout_p=p if self.training else 0.0`. `attention_weights` returns the weights
# themselves (no gradient), for inspection and plots.

# %% nbgrader={"grade": false, "grade_id": "sdpa", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def scaled_dot_product_attention(q, k, v, mask=None, is_causal=False, dropout_p=0.0):
    """softmax(q @ k^T / sqrt(D)) @ v for q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv).

    mask: bool, broadcastable to (B, H, T, S), True = may attend. is_causal: query i sees keys
    j <= i + S - T. Fully masked rows give zeros. dropout_p: attention dropout, applied when > 0.

    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)))  # equal scores: equal weights
    >>> v = Tensor([[[[0.0], [3.0], [6.0]]]])  # (B, H, S, Dv) = (1, 1, 3, 1)
    >>> scaled_dot_product_attention(q, k, v).data.ravel().tolist()
    [3.0, 3.0, 3.0]
    >>> scaled_dot_product_attention(q, k, v, is_causal=True).data.ravel().tolist()
    [0.0, 1.5, 3.0]
    >>> hide_first = np.array([False, True, True])  # (S,): no query sees key 0
    >>> scaled_dot_product_attention(q, k, v, mask=hide_first).data.ravel().tolist()
    [4.5, 4.5, 4.5]
    """
    q, k, v = _as_tensor(q), _as_tensor(k), _as_tensor(v)
    scores_shape = _check_qkv(q, k, v)
    keep = _keep_mask(mask, is_causal, scores_shape)
    drop = _dropout(dropout_p, scores_shape, q.dtype)
    # Function.apply runs a faster twin instead if module 17 registered one in KERNELS.
    return AttentionFunction.apply(q, k, v, keep=keep, drop=drop)


def attention_weights(q, k, mask=None, is_causal=False):
    """The (B, H, T, S) attention weights as a NumPy array (no gradient), rows summing to 1.

    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)))
    >>> attention_weights(q, k, is_causal=True)[0, 0].round(3)
    array([[1.   , 0.   , 0.   ],
           [0.5  , 0.5  , 0.   ],
           [0.333, 0.333, 0.333]], dtype=float32)
    """
    q, k = _as_tensor(q), _as_tensor(k)
    scores_shape = _check_qkv(q, k, k)
    return _attention_probs(q.data, k.data, _keep_mask(mask, is_causal, scores_shape))


# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_weights", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_attention_weights():
    """Weights sum to 1 per row, masked ones are exactly 0, fully masked rows are 0 (no NaN)."""
    q, k, _ = random_qkv(T=3, S=5)
    keep = causal_mask(3, 5).copy()
    keep[1] = False  # query 1 may see nothing
    w = attention_weights(q, k, mask=keep)
    assert isinstance(w, np.ndarray) and w.shape == (2, 3, 3, 5), (
        f"the weights of 3 queries over 5 keys should have shape (2, 3, 3, 5), got {np.shape(w)}"
    )
    assert not np.isnan(w).any(), (
        "a fully masked row gave NaN: its maximum is -inf and -inf - (-inf) is NaN; replace "
        "the maxima of fully masked rows by 0 and their zero sums by 1"
    )
    assert np.all(w[..., ~keep] == 0), (
        "masked weights must be EXACTLY 0 (write -inf into masked scores: exp(-inf) = 0), "
        f"largest found {np.abs(w[..., ~keep]).max():.3g}"
    )
    assert np.allclose(w[:, :, [0, 2]].sum(axis=-1), 1, atol=1e-6), (
        "each row with an allowed key should sum to 1: normalize over the last axis"
    )
    assert np.all(w[:, :, 1] == 0), "the fully masked query 1 should get all-zero weights"
    assert w.dtype == np.float32, f"float32 inputs gave float {w.dtype} weights"
    plain = attention_weights(q, k)
    scores = q.data @ np.swapaxes(k.data, -1, -2) / np.float32(2.0)  # sqrt(D) = 2
    want = np.exp(scores - scores.max(-1, keepdims=True))
    assert np.allclose(plain, want / want.sum(-1, keepdims=True), atol=1e-6), (
        "without a mask the weights are softmax(q @ k^T / sqrt(D)) over the keys"
    )

    def check_weights(q, k, keep, is_causal):
        """attention_weights against a float64 softmax worked row by row over the allowed
        keys: masked weights exactly 0, fully masked rows all 0, no NaN, q's dtype."""
        dtype = q.dtype
        w = attention_weights(Tensor(q, dtype=dtype), Tensor(k, dtype=dtype), mask=keep,
                              is_causal=is_causal)
        *lead, T, D = q.shape
        S = k.shape[-2]
        rule = np.ones((T, S), dtype=bool) if keep is None else np.asarray(keep)
        if is_causal:
            rule = rule & (np.arange(S)[None] <= np.arange(T)[:, None] + S - T)
        scores = np.einsum("...td,...sd->...ts", q.astype(np.float64), k.astype(np.float64))
        want = np.zeros(scores.shape)
        for idx in np.ndindex(*lead, T):
            row = scores[idx][rule[idx[-1]]] / np.sqrt(D)
            if row.size:
                e = np.exp(row - row.max())
                want[idx][rule[idx[-1]]] = e / e.sum()
        assert isinstance(w, np.ndarray) and w.shape == want.shape and w.dtype == dtype, (
            f"the weights of q {q.shape} over k {k.shape} should be a {dtype} array "
            f"{want.shape}, got {getattr(w, 'dtype', None)} {np.shape(w)}"
        )
        assert not np.isnan(w).any(), (
            "NaN in the weights: subtract each row's maximum (0 for a fully masked row) "
            "before exp, and replace zero sums by 1"
        )
        assert np.all(w[..., ~rule] == 0), "masked weights must be EXACTLY 0"
        assert np.allclose(w, want, atol=1e-6), (
            "the weights differ from softmax(q @ k^T / sqrt(D)) over the allowed keys by up to "
            f"{np.abs(w - want).max():.3g}"
        )

    check_weights(q.data, k.data, keep, False)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1203)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    hidden_cases(check_weights, {
        "scores that overflow a naive exponent": (normal(1, 2, 3, 4) * 20, normal(1, 2, 5, 4) * 20,
                                                   None, False),
        "every query masked": (normal(2, 1, 3, 4), normal(2, 1, 3, 4),
                               np.zeros((3, 3), dtype=bool), False),
        "causal with more keys than queries": (normal(1, 3, 2, 4), normal(1, 3, 5, 4), None, True),
        "float64 inputs": (*(normal(1, 1, 4, 6, dtype=np.float64) for _ in range(2)), None, True),
        "a single key": (normal(2, 2, 3, 8), normal(2, 2, 1, 8), None, False),
        "a mask and causal together": (normal(1, 1, 4, 4), normal(1, 1, 4, 4),
                                       np.array([1, 0, 1, 1], dtype=bool)[None].repeat(4, 0),
                                       True),
    })
    ### END HIDDEN TESTS


test_unit_attention_weights()

# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_function", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_attention_function():
    """The fused op equals its composed twin in values and gradients, and passes gradcheck."""
    keep = causal_mask(3, 4) & np.array([True, True, False, True])
    keep = np.broadcast_to(keep, (2, 2, 3, 4)).copy()
    keep[1, 0, 0] = False  # one fully masked row
    for kwargs in ({}, {"is_causal": True}, {"mask": keep}):
        fused = random_qkv(H=2, T=3, S=4, seed=3, requires_grad=True)
        twin = random_qkv(H=2, T=3, S=4, seed=3, requires_grad=True)
        out = scaled_dot_product_attention(*fused, **kwargs)
        want = attention_composed(*twin, **kwargs)
        if not np.allclose(out.data, want.data, atol=1e-5):
            mask = causal_mask(3, 4) if kwargs.get("is_causal") else kwargs.get("mask")
            culprit = "fix the fused forward (or attention_composed, its twin)"
            if mask is None or np.ndim(mask) == 2:
                plain = (t.data for t in random_qkv(H=2, T=3, S=4, seed=3))
                ref = reference_attention(*plain, mask)
                if np.allclose(out.data, ref, atol=1e-5):
                    culprit = ("the fused op matches the loop reference, so your "
                               "attention_composed is wrong: see test_unit_attention_composed")
            raise AssertionError(
                f"fused attention ({kwargs or 'no mask'}) differs from the composed twin in "
                f"forward: out[0, 0, 0] is {np.round(out.data[0, 0, 0], 4)}, the twin gives "
                f"{np.round(want.data[0, 0, 0], 4)}: {culprit}"
            )
        assert out.dtype == np.float32, f"fused attention of float32 inputs gave {out.dtype}"
        g = np.random.default_rng(4).standard_normal(out.shape).astype(np.float32)
        out.backward(g)
        want.backward(g)
        for name, a, b in zip("qkv", fused, twin):
            assert a.grad is not None, f"d{name} is missing: the rule must return (dQ, dK, dV)"
            assert not np.isnan(a.grad.data).any(), f"d{name} has NaN ({kwargs or 'no mask'})"
            assert np.allclose(a.grad.data, b.grad.data, atol=1e-5), (
                f"d{name} of the fused op differs from the composed twin ({kwargs or 'no mask'}). "
                "dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dO * O)); dQ = dS K * scale; "
                "dK = dS^T Q * scale"
            )
            assert a.grad.dtype == np.float32, f"d{name} is {a.grad.dtype}, expected float32"
    q, k, v = random_qkv(B=1, H=2, T=3, S=4, D=3, dtype=np.float64, seed=5, requires_grad=True)
    try:
        gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=keep[:1]), [q, k, v])
    except GradcheckError as error:
        raise AssertionError(
            f"the fused attention's gradients disagree with finite differences: {error}"
        ) from None

    def check_twin(shapes, kwargs, scale, seed):
        """The fused op equals the composed twin on q, k, v of `shapes` (k and v may broadcast
        over q's heads): outputs, and the gradients of all three, float32 throughout."""
        rng = np.random.default_rng(seed)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        arrays[0] *= np.float32(scale)
        fused = [Tensor(a, requires_grad=True) for a in arrays]
        twin = [Tensor(a, requires_grad=True) for a in arrays]
        out = scaled_dot_product_attention(*fused, **kwargs)
        want = attention_composed(*twin, **kwargs)
        what = f"q, k, v of shapes {shapes} ({kwargs or 'no mask'})"
        assert out.shape == want.shape and np.allclose(out.data, want.data, atol=1e-5), (
            f"fused attention of {what} differs from the composed twin in forward"
        )
        assert out.dtype == np.float32, f"fused attention of float32 inputs gave {out.dtype}"
        g = rng.standard_normal(out.shape).astype(np.float32)
        out.backward(g)
        want.backward(g)
        for name, a, b in zip("qkv", fused, twin):
            assert a.grad is not None and a.grad.shape == a.shape, (
                f"d{name} should have {name}'s shape {a.shape}, got "
                f"{None if a.grad is None else a.grad.shape}"
            )
            assert np.allclose(a.grad.data, b.grad.data, atol=1e-4), (
                f"d{name} of the fused op differs from the composed twin for {what}"
            )
            assert a.grad.dtype == np.float32, f"d{name} is {a.grad.dtype}, expected float32"

    def check_gradients(shapes, kwargs, learned, seed):
        """The fused op's rule against central differences (float64) when only the inputs
        named in `learned` require gradients."""
        rng = np.random.default_rng(seed)
        inputs = [Tensor(rng.standard_normal(s), dtype=np.float64, requires_grad=n in learned)
                  for n, s in zip("qkv", shapes)]
        try:
            gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, **kwargs), inputs)
        except GradcheckError as error:
            raise AssertionError(
                f"the fused attention's gradients ({learned} learned, q, k, v {shapes}, "
                f"{kwargs or 'no mask'}) disagree with finite differences: {error}"
            ) from None

    check_twin(((2, 2, 3, 4), (2, 2, 4, 4), (2, 2, 4, 4)), {"mask": keep}, 1.0, 3)
    check_gradients(((1, 2, 3, 3), (1, 2, 4, 3), (1, 2, 4, 3)), {"mask": keep[:1]}, "qkv", 5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool).reshape(2, 1, 1, 5)
    hidden_cases(check_twin, {
        "key and value heads broadcast over query heads": (((2, 4, 3, 5), (2, 1, 4, 5),
                                                            (2, 1, 4, 5)), {}, 1.0, 11),
        "values wider than keys": (((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 7)), {}, 1.0, 12),
        "one query over many keys, causal": (((2, 2, 1, 4), (2, 2, 6, 4), (2, 2, 6, 4)),
                                             {"is_causal": True}, 1.0, 13),
        "a padding mask per sequence": (((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)),
                                        {"mask": padding, "is_causal": True}, 1.0, 14),
        "large scores": (((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)), {"is_causal": True}, 40.0,
                         15),
    })
    hidden_cases(check_gradients, {
        "the queries alone": (((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)), {}, "q", 21),
        "the values alone, causal": (((1, 1, 4, 3), (1, 1, 4, 3), (1, 1, 4, 3)),
                                     {"is_causal": True}, "v", 22),
        "keys and values shared by every head": (((1, 3, 2, 3), (1, 1, 4, 3), (1, 1, 4, 3)),
                                                 {"is_causal": True}, "qkv", 23),
        "values wider than keys, masked": (((2, 1, 3, 2), (2, 1, 5, 2), (2, 1, 5, 4)),
                                           {"mask": padding}, "kv", 24),
    })
    ### END HIDDEN TESTS


test_unit_attention_function()

# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_shapes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_attention_shapes():
    """T < S with a causal mask aligned to the end; broadcast heads; errors name the shapes."""
    q, k, v = random_qkv(T=5, S=5, seed=6)
    full = scaled_dot_product_attention(q, k, v, is_causal=True)
    last = scaled_dot_product_attention(q[:, :, 3:], k, v, is_causal=True)
    assert last.shape == (2, 3, 2, 4), (
        f"2 queries over 5 keys should give (2, 3, 2, 4), got {last.shape}"
    )
    assert np.allclose(last.data, full.data[:, :, 3:], atol=1e-6), (
        "the last 2 queries attending to all 5 keys with is_causal=True must equal rows 3 and "
        "4 of the full causal attention (the mask is aligned to the END of the keys)"
    )
    shared = scaled_dot_product_attention(q, k[:, :1], v[:, :1])
    assert shared.shape == (2, 3, 5, 4), "k, v with one head broadcast over the 3 query heads"
    try:
        scaled_dot_product_attention(q, k[..., :3], v)
    except ValueError as error:
        assert "(2, 3, 5, 3)" in str(error), f"the error should name the shapes: {error}"
    else:
        raise AssertionError("q with D=4 and k with D=3 must raise ShapeError")

    def check_chunk(shape, start, stop, kv_heads):
        """Queries start .. stop - 1 over keys 0 .. stop - 1 with is_causal=True equal rows
        start .. stop - 1 of the full causal attention (k and v with kv_heads heads)."""
        rng = np.random.default_rng(stop)
        B, H, T, D = shape
        q = Tensor(rng.standard_normal(shape).astype(np.float32))
        k, v = (Tensor(rng.standard_normal((B, kv_heads, T, D)).astype(np.float32))
                for _ in range(2))
        full = scaled_dot_product_attention(q, k, v, is_causal=True)
        part = scaled_dot_product_attention(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
                                            is_causal=True)
        assert part.shape == (B, H, stop - start, D), (
            f"{stop - start} queries over {stop} keys should give {(B, H, stop - start, D)}, got "
            f"{part.shape}"
        )
        assert np.allclose(part.data, full.data[:, :, start:stop], atol=1e-6), (
            f"queries {start}..{stop - 1} attending to keys 0..{stop - 1} with is_causal=True "
            f"must equal those rows of the full causal attention: align the mask to the END "
            "of the keys"
        )

    check_chunk((2, 3, 5, 4), 3, 5, 3)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_chunk, {
        "the last query alone": ((1, 2, 6, 4), 5, 6, 2),
        "a chunk in the middle": ((2, 2, 7, 3), 2, 5, 1),
        "the first query alone": ((1, 1, 4, 5), 0, 1, 1),
        "the whole sequence": ((1, 4, 5, 2), 0, 5, 4),
        "one key head for many query heads": ((3, 4, 6, 4), 1, 4, 1),
    })
    ### END HIDDEN TESTS


test_unit_attention_shapes()

# %% [markdown]
# ## Part 5: multi-head attention
#
# One attention computes one weighted average per position: one "question" per token. A
# layer with `H` **heads** asks `H` questions at once (one head may track the previous
# token, another the subject of the sentence), each in a subspace of size `D = C / H`, at
# the same total cost as one head of size `C`.
#
# **The layer (nanoGPT's `CausalSelfAttention`).** For `x` of shape `(B, T, C)`:
#
# ```
# qkv = self.qkv(x.reshape(B * T, C))      (B*T, 3C)    one Linear(C, 3C): q, k, v are its
#                                                         three consecutive thirds
# -> reshape (B, T, 3, H, D), permute (2, 0, 3, 1, 4)     (3, B, H, T, D)
# q, k, v = qkv[0], qkv[1], qkv[2]          (B, H, T, D) each
# y = scaled_dot_product_attention(q, k, v, mask, is_causal, dropout_p)   (B, H, T, D)
# -> permute (0, 2, 1, 3), reshape (B*T, C)                heads side by side again
# out = self.proj(y).reshape(B, T, C)       (B, T, C)
# ```
#
# (The projections see every token on its own, `(B*T, C)`, as module 13's MLP will: NumPy
# runs a `(B, T, C) @ (C, N)` product as `B` separate products, about 1.4 times slower than
# one `(B*T, C) @ (C, N)`.)
#
# One `Linear(C, 3C)` instead of three `Linear(C, C)` is one matrix product instead of
# three, and the layout matches both nanoGPT's `c_attn` and PyTorch's
# `nn.MultiheadAttention.in_proj_weight`, so weights can be copied across. The heads never
# need a Python loop: the reshape splits the channels into `(H, D)`, and the permute moves
# the head axis next to the batch axis, where matmul treats it as one more batch axis.
#
# **Dropout** as in nanoGPT: on the attention weights (`dropout_p`, only in training) and
# on the output (`Dropout(dropout)`, module 03). Both are off in `eval()` mode.
#
# The sizes are checked for you (`embed_dim % num_heads == 0`, a `ValueError` naming both,
# and in `forward` that `x` is `(B, T, embed_dim)`); you create the layers and write
# `forward`. Ignore its `cache` argument until Part 7 (it is `None` until then).

# %% nbgrader={"grade": false, "grade_id": "multihead", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _positive_int(value, label, owner):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{owner}: {label} must be a positive integer, got {value!r}")
    return int(value)


class MultiHeadAttention(Module):
    """Self-attention with num_heads heads: fused qkv projection, attention, output projection.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> attn = MultiHeadAttention(embed_dim=8, num_heads=2)
    >>> print(attn)
    MultiHeadAttention(
      embed_dim=8, num_heads=2, dropout=0.0
      (qkv): Linear(in_features=8, out_features=24, bias=True)
      (proj): Linear(in_features=8, out_features=8, bias=True)
      (resid_dropout): Dropout(p=0.0)
    )
    >>> attn.head_dim, attn.qkv.weight.shape
    (4, (24, 8))
    >>> x = Tensor(np.random.default_rng(0).standard_normal((2, 5, 8)))
    >>> y = attn(x, is_causal=True)
    >>> y.shape, y.dtype
    ((2, 5, 8), dtype('float32'))
    >>> edited = x.data.copy()
    >>> edited[:, 4] = 0  # change the last token: the outputs before it stay the same
    >>> z = attn(Tensor(edited), is_causal=True)
    >>> bool(np.allclose(z.data[:, :4], y.data[:, :4]))
    True
    """

    def __init__(self, embed_dim, num_heads, bias=True, dropout=0.0):
        super().__init__()
        self.embed_dim = _positive_int(embed_dim, "embed_dim", "MultiHeadAttention")
        self.num_heads = _positive_int(num_heads, "num_heads", "MultiHeadAttention")
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({self.embed_dim}) must be divisible by "
                f"num_heads ({self.num_heads}), so each head gets embed_dim // num_heads "
                "channels; change one of them"
            )
        self.head_dim = self.embed_dim // self.num_heads
        self.dropout = float(dropout)
        ### BEGIN SOLUTION
        self.qkv = Linear(self.embed_dim, 3 * self.embed_dim, bias=bias)
        self.proj = Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.resid_dropout = Dropout(self.dropout)
        ### END SOLUTION

    @classmethod
    def from_linears(cls, qkv, proj, num_heads):
        """The layer around existing projections (a checkpoint's, module 18), without the
        random weights the constructor would draw (given)."""
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.embed_dim = _positive_int(qkv.in_features, "embed_dim", "MultiHeadAttention")
        layer.num_heads = _positive_int(num_heads, "num_heads", "MultiHeadAttention")
        layer.head_dim, layer.dropout = layer.embed_dim // layer.num_heads, 0.0
        layer.qkv, layer.proj, layer.resid_dropout = qkv, proj, Dropout(0.0)
        return layer

    def forward(self, x, mask=None, is_causal=False, cache=None):
        """x (B, T, embed_dim) -> (B, T, embed_dim); cache: keys and values of earlier tokens."""
        x = _as_tensor(x)
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ShapeError(
                f"MultiHeadAttention(embed_dim={self.embed_dim}) got x of shape {x.shape}; it "
                f"takes (B, T, {self.embed_dim}): batch, sequence, channels"
            )
        ### BEGIN SOLUTION
        B, T, C = x.shape
        H, D = self.num_heads, self.head_dim
        qkv = self.qkv(x.reshape(B * T, C))  # (B*T, 3C): every token on its own
        qkv = qkv.reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, T, D) each
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S, D): the earlier tokens' and these
        p = self.dropout if self.training else 0.0
        y = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=p)
        y = y.permute(0, 2, 1, 3).reshape(B * T, C)  # (B*T, C)
        return self.resid_dropout(self.proj(y)).reshape(B, T, C)  # (B, T, C)
        ### END SOLUTION

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_multihead_attention", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_multihead_attention():
    """Heads are consecutive slices of q, k, v; outputs match per-head loops; causal holds."""
    manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    names = [name for name, _ in mha.named_parameters()]
    assert names == ["qkv.weight", "qkv.bias", "proj.weight", "proj.bias"], (
        f"parameters should be qkv (Linear(12, 36)) then proj (Linear(12, 12)), got {names}"
    )
    assert mha.qkv.weight.shape == (36, 12) and mha.proj.weight.shape == (12, 12), (
        f"qkv.weight should be (3 * 12, 12), got {mha.qkv.weight.shape}"
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    out = mha(Tensor(x), is_causal=True)
    assert out.shape == (2, 5, 12) and out.dtype == np.float32, (
        f"(2, 5, 12) in should give float32 (2, 5, 12) out, got {out.dtype} {out.shape}"
    )
    qkv = x @ mha.qkv.weight.data.T + mha.qkv.bias.data  # (B, T, 36)
    heads = []
    for h in range(3):  # head h uses channels 4h..4h+3 of each third
        q, k, v = (qkv[..., part * 12 + 4 * h: part * 12 + 4 * h + 4] for part in range(3))
        heads.append(reference_attention(q[:, None], k[:, None], v[:, None], causal_mask(5))[:, 0])
    want = np.concatenate(heads, axis=-1) @ mha.proj.weight.data.T + mha.proj.bias.data
    assert np.allclose(out.data, want, atol=1e-5), (
        "the output differs from per-head loops: q, k, v are the three consecutive thirds of "
        "qkv(x); reshape to (B, T, 3, H, D) and permute to (3, B, H, T, D); after attention "
        "put the heads back side by side with permute(0, 2, 1, 3).reshape(B, T, C)"
    )
    changed = x.copy()
    changed[:, 4] += 1.0
    again = mha(Tensor(changed), is_causal=True)
    assert np.allclose(again.data[:, :4], out.data[:, :4], atol=1e-6), (
        "with is_causal=True, changing the last token must not change earlier outputs"
    )
    mha(Tensor(x)).sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and np.abs(p.grad.data).sum() > 0, f"{name} received no gradient"
    for bad in ((2, 5, 8), (5, 12)):
        try:
            mha(Tensor(np.zeros(bad, dtype=np.float32)))
        except ValueError as error:
            assert str(bad) in str(error), f"the shape error should name x's shape {bad}: {error}"
        else:
            raise AssertionError(f"x of shape {bad} must raise ShapeError for embed_dim 12")
    try:
        MultiHeadAttention(10, 4)
    except ValueError as error:
        assert "10" in str(error) and "4" in str(error), f"name embed_dim and num_heads: {error}"
    else:
        raise AssertionError("MultiHeadAttention(10, 4) must raise ValueError: 10 % 4 != 0")

    def check_heads(C, H, bias, B, T, is_causal, padding, seed):
        """MultiHeadAttention(C, H, bias=) against per-head, per-sequence loops on qkv's three
        consecutive thirds; padding: (B, 1, 1, T) keys each sequence may see, or None."""
        manual_seed(seed)
        layer = MultiHeadAttention(C, H, bias=bias)
        x = np.random.default_rng(seed).standard_normal((B, T, C)).astype(np.float32)
        out = layer(Tensor(x), mask=padding, is_causal=is_causal)
        D = C // H
        qkv = x.astype(np.float64) @ layer.qkv.weight.data.T
        qkv = qkv + layer.qkv.bias.data if bias else qkv
        rule = np.ones((B, T, T), dtype=bool)
        if is_causal:
            rule &= np.tril(np.ones((T, T), dtype=bool))
        if padding is not None:
            rule &= padding.reshape(B, 1, T)
        y = np.zeros((B, T, C))
        for b in range(B):
            for h in range(H):
                q, k, v = (qkv[b:b + 1, None, :, part * C + h * D: part * C + (h + 1) * D]
                           for part in range(3))
                y[b, :, h * D:(h + 1) * D] = reference_attention(q, k, v, rule[b])[0, 0]
        want = y @ layer.proj.weight.data.T + (layer.proj.bias.data if bias else 0)
        assert out.shape == (B, T, C) and out.dtype == np.float32, (
            f"float32 x ({B}, {T}, {C}) should give float32 ({B}, {T}, {C}), got {out.dtype} "
            f"{out.shape}"
        )
        assert np.allclose(out.data, want, atol=1e-5), (
            f"MultiHeadAttention({C}, {H}, bias={bias}) differs from per-head loops "
            f"(is_causal={is_causal}, {'no mask' if padding is None else 'a padding mask'}): "
            "q, k, v are qkv(x)'s three consecutive thirds, head h their channels h*D..h*D+D-1; "
            "pass mask and is_causal on to the attention"
        )

    def check_refused(C, H):
        """MultiHeadAttention(C, H) with C not divisible by H raises ValueError naming both."""
        try:
            MultiHeadAttention(C, H)
        except ValueError as error:
            assert str(C) in str(error) and str(H) in str(error), (
                f"name embed_dim ({C}) and num_heads ({H}): {error}"
            )
        else:
            raise AssertionError(f"MultiHeadAttention({C}, {H}) must raise ValueError")

    check_heads(12, 3, True, 2, 5, True, None, 0)
    check_refused(10, 4)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    padding = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]], dtype=bool).reshape(3, 1, 1, 4)
    hidden_cases(check_heads, {
        "a single head": (8, 1, True, 2, 4, True, None, 1),
        "a head per channel": (4, 4, True, 1, 3, True, None, 2),
        "no biases": (12, 2, False, 2, 3, True, None, 3),
        "a single token": (6, 3, True, 3, 1, True, None, 4),
        "no causal mask": (8, 2, True, 2, 5, False, None, 5),
        "a padding mask per sequence": (8, 4, True, 3, 4, False, padding, 6),
    })
    hidden_cases(check_refused, {
        "an odd width over two heads": (7, 2),
        "more heads than channels": (5, 10),
        "a width that is a multiple of neither": (6, 4),
    })
    ### END HIDDEN TESTS


test_unit_multihead_attention()

# %% [markdown]
# ## Part 6: grouped-query attention, with rotary embeddings
#
# When a model generates text it caches the keys and values of every earlier token, for
# every layer and head (module 18). For a large model that cache, not the weights,
# limits how many sequences fit in memory. **Grouped-query attention** (GQA, Ainslie et
# al., 2023; Llama 2 70B, Llama 3, Qwen, Mistral) keeps `H` query heads but only
# `H_kv < H` key/value heads: each group of `g = H / H_kv` query heads shares one key and
# one value head. The cache shrinks by `g`; quality barely changes. `H_kv = 1` is
# multi-query attention, `H_kv = H` is ordinary multi-head attention.
#
# **The layout (Llama's names).** Separate projections `q_proj: Linear(C, H * D)`,
# `k_proj, v_proj: Linear(C, H_kv * D)`, and `o_proj: Linear(H * D, C)`, without biases by
# default. Query heads `j * g .. j * g + g - 1` share key/value head `j`, as in Hugging
# Face's `repeat_kv` (PyTorch's `repeat_interleave` on the head axis).
#
# **Repeat without copying.** `repeat_kv` copies each key/value head `g` times so that an
# ordinary `(B, H, T, D)` attention can run. Broadcasting does the same without the copy:
#
# ```
# q: (B, H, T, D)     -> reshape (B, H_kv, g, T, D)    query heads grouped (a view)
# k: (B, H_kv, S, D)  -> reshape (B, H_kv, 1, S, D)    one key head per group
# ```
#
# and `scaled_dot_product_attention` broadcasts the size-1 axis against the `g` query
# heads. In backward, `k`'s gradient comes out with shape `(B, H_kv, g, S, D)` and
# `backward` sums it over the group: each shared head receives the sum of the gradients of
# the heads that used it, exactly what the copy's gradient would have been. A mask
# broadcastable to `(B, H, T, S)` needs the same regrouping: reshape its head axis to
# `(H_kv, g)` if it has `H` heads, or insert a size-1 axis if it has one.
#
# **Rotary embeddings.** With `rotary` (a `RotaryEmbedding` from module 11) the queries
# and keys are rotated after the projection and before attention, both with
# `rotary.cos_sin(T, offset)`; values are not rotated. `offset` is the position of the
# first token (for cached generation), or one position per sequence, `(B,)`, which module
# 11's tables already handle.
#
# **Head size and per-head norms (given).** `head_dim` is usually `embed_dim // num_heads`;
# Qwen3 chooses it freely (`num_heads * head_dim` need not equal `embed_dim`), so the
# constructor takes it as an option and the sizes are checked and set for you. Qwen3 also
# normalizes every query and key head over its `D` coordinates before the rotation: the
# layer has `q_norm` and `k_norm`, `None` unless a checkpoint provides them (module 18);
# when they are set, apply them to `q` and `k` (shape `(B, H, T, D)`) right after the
# projections. As for `MultiHeadAttention`, leave `cache` for Part 7.

# %% nbgrader={"grade": false, "grade_id": "gqa", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _gqa_sizes(layer, embed_dim, num_heads, num_kv_heads, head_dim):
    """Check and set the sizes of a GroupedQueryAttention (given)."""
    owner = "GroupedQueryAttention"
    layer.embed_dim = _positive_int(embed_dim, "embed_dim", owner)
    layer.num_heads = _positive_int(num_heads, "num_heads", owner)
    layer.num_kv_heads = _positive_int(num_kv_heads, "num_kv_heads", owner)
    if head_dim is None and layer.embed_dim % layer.num_heads:
        raise ValueError(
            f"{owner}: embed_dim ({layer.embed_dim}) must be divisible by num_heads "
            f"({layer.num_heads}), or give head_dim"
        )
    if layer.num_heads % layer.num_kv_heads:
        raise ValueError(
            f"{owner}: num_heads ({layer.num_heads}) must be a multiple of num_kv_heads "
            f"({layer.num_kv_heads}): each key/value head serves an equal group of query heads"
        )
    layer.head_dim = _positive_int(layer.embed_dim // layer.num_heads if head_dim is None
                                   else head_dim, "head_dim", owner)
    layer.groups = layer.num_heads // layer.num_kv_heads
    layer.q_norm = layer.k_norm = None  # Qwen3's per-head norms, set by module 18


class GroupedQueryAttention(Module):
    """num_heads query heads sharing num_kv_heads key/value heads (Llama layout), optional RoPE.

    >>> from tinytorch.core.embeddings import RotaryEmbedding
    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> attn = GroupedQueryAttention(embed_dim=16, num_heads=4, num_kv_heads=2)
    >>> attn.head_dim, attn.groups, attn.q_proj.weight.shape, attn.k_proj.weight.shape
    (4, 2, (16, 16), (8, 16))
    >>> x = Tensor(np.random.default_rng(0).standard_normal((1, 6, 16)))
    >>> rope = RotaryEmbedding(attn.head_dim, max_len=32)
    >>> attn(x, is_causal=True, rotary=rope).shape
    (1, 6, 16)
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, bias=False, head_dim=None):
        super().__init__()
        _gqa_sizes(self, embed_dim, num_heads, num_kv_heads, head_dim)
        ### BEGIN SOLUTION
        C, D = self.embed_dim, self.head_dim
        self.q_proj = Linear(C, self.num_heads * D, bias=bias)
        self.k_proj = Linear(C, self.num_kv_heads * D, bias=bias)
        self.v_proj = Linear(C, self.num_kv_heads * D, bias=bias)
        self.o_proj = Linear(self.num_heads * D, C, bias=bias)
        ### END SOLUTION

    def _grouped_mask(self, mask):
        """A mask broadcastable to (B, H, T, S), regrouped to (B, H_kv, g, T, S)."""
        ### BEGIN SOLUTION
        if mask is None:
            return None
        mask = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
        if mask.ndim > 4:
            raise ShapeError(f"the mask of shape {mask.shape} should broadcast to (B, H, T, S)")
        mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
        if mask.shape[1] == self.num_heads:
            return mask.reshape(mask.shape[0], self.num_kv_heads, self.groups, *mask.shape[2:])
        if mask.shape[1] == 1:
            return mask[:, :, None]
        raise ShapeError(
            f"the mask of shape {mask.shape} has {mask.shape[1]} heads; it should broadcast "
            f"to (B, {self.num_heads}, T, S): use 1 or {self.num_heads} on the head axis"
        )
        ### END SOLUTION

    @classmethod
    def from_linears(cls, q_proj, k_proj, v_proj, o_proj, num_heads, num_kv_heads,
                     q_norm=None, k_norm=None):
        """The layer around existing projections (a checkpoint's, module 18), without the
        random weights the constructor would draw (given)."""
        layer = cls.__new__(cls)
        Module.__init__(layer)
        _gqa_sizes(layer, q_proj.in_features, num_heads, num_kv_heads,
                   q_proj.out_features // num_heads)
        layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj = q_proj, k_proj, v_proj, o_proj
        layer.q_norm, layer.k_norm = q_norm, k_norm
        return layer

    def forward(self, x, mask=None, is_causal=False, rotary=None, offset=0, cache=None):
        """x (B, T, embed_dim) -> (B, T, embed_dim); rotary: a RotaryEmbedding or None;
        cache: keys and values of earlier tokens (module 18), or None."""
        x = _as_tensor(x)
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ShapeError(
                f"GroupedQueryAttention(embed_dim={self.embed_dim}) got x of shape {x.shape}; "
                f"it takes (B, T, {self.embed_dim})"
            )
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        H, Hkv, g, D = self.num_heads, self.num_kv_heads, self.groups, self.head_dim
        q = self.q_proj(x).reshape(B, T, H, D).permute(0, 2, 1, 3)  # (B, H, T, D)
        k = self.k_proj(x).reshape(B, T, Hkv, D).permute(0, 2, 1, 3)  # (B, Hkv, T, D)
        v = self.v_proj(x).reshape(B, T, Hkv, D).permute(0, 2, 1, 3)  # (B, Hkv, T, D)
        if self.q_norm is not None:  # Qwen3: every head normalized, before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            cos, sin = rotary.cos_sin(T, offset)
            q = apply_rotary(q, cos, sin)
            k = apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hkv, S, D): the earlier tokens' and these
        S = k.shape[2]
        q = q.reshape(B, Hkv, g, T, D)  # query heads j*g .. j*g+g-1 share kv head j
        k = k.reshape(B, Hkv, 1, S, D)
        v = v.reshape(B, Hkv, 1, S, D)
        mask = self._grouped_mask(mask)
        y = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
        y = y.reshape(B, H, T, D).permute(0, 2, 1, 3).reshape(B, T, H * D)  # (B, T, H * D)
        return self.o_proj(y)
        ### END SOLUTION

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}")


# %% nbgrader={"grade": true, "grade_id": "test_unit_grouped_query_attention", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_grouped_query_attention():
    """Query heads share key/value heads in repeat_interleave order; RoPE rotates q and k."""
    manual_seed(1)
    gqa = GroupedQueryAttention(16, 4, 2)
    shapes = {name: p.shape for name, p in gqa.named_parameters()}
    assert shapes == {"q_proj.weight": (16, 16), "k_proj.weight": (8, 16),
                      "v_proj.weight": (8, 16), "o_proj.weight": (16, 16)}, (
        f"expected q_proj (16, 16), k_proj and v_proj (2 heads * 4, 16), o_proj (16, 16) and no "
        f"biases by default, got {shapes}"
    )
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 16)).astype(np.float32)
    rope = RotaryEmbedding(4, max_len=32)
    out = gqa(Tensor(x), is_causal=True, rotary=rope, offset=3)
    assert out.shape == (2, 6, 16) and out.dtype == np.float32, f"got {out.dtype} {out.shape}"

    def heads(t, n):  # (B, T, n * 4) -> (B, n, T, 4)
        return t.reshape(2, 6, n, 4).transpose(0, 2, 1, 3)

    cos, sin = rope.cos_sin(6, offset=3)
    q = heads(x @ gqa.q_proj.weight.data.T, 4)
    k = heads(x @ gqa.k_proj.weight.data.T, 2)
    v = heads(x @ gqa.v_proj.weight.data.T, 2)
    q = q * cos + rotate(q) * sin
    k = k * cos + rotate(k) * sin
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # heads 0, 1 share kv head 0
    y = reference_attention(q, k, v, causal_mask(6)).transpose(0, 2, 1, 3).reshape(2, 6, 16)
    want = y @ gqa.o_proj.weight.data.T
    assert np.allclose(out.data, want, atol=1e-4), (
        "the output differs from the reference with repeated key/value heads: query heads "
        "j*g .. j*g+g-1 share kv head j (reshape q to (B, H_kv, g, T, D), k and v to "
        "(B, H_kv, 1, S, D)); rotate q and k (not v) with rotary.cos_sin(T, offset)"
    )
    padding = np.ones((2, 1, 1, 6), dtype=bool)
    padding[1, ..., 4:] = False
    masked = gqa(Tensor(x), mask=padding, is_causal=True)
    assert not np.isnan(masked.data).any(), "a padding mask (B, 1, 1, S) should work with GQA"
    gqa(Tensor(x), is_causal=True).sum().backward()
    assert gqa.k_proj.weight.grad is not None and gqa.k_proj.weight.grad.shape == (8, 16), (
        "k_proj.weight should get a (8, 16) gradient, summed over the query heads sharing it"
    )
    for args in ((16, 4, 3), (16, 3, 1)):
        try:
            GroupedQueryAttention(*args)
        except ValueError:
            pass
        else:
            raise AssertionError(f"GroupedQueryAttention{args} must raise ValueError")

    def check_gqa(sizes, bias, B, T, offset, rotary, mask, is_causal, seed):
        """GroupedQueryAttention(*sizes, bias=) against per-(sequence, head) loops in float64:
        query heads j*g .. j*g+g-1 share kv head j; q and k rotated at positions offset + t
        (offset an int or one per sequence) when `rotary`; mask broadcast to (B, H, T, T)."""
        manual_seed(seed)
        C, H, Hkv, head_dim = sizes
        layer = GroupedQueryAttention(C, H, Hkv, bias=bias, head_dim=head_dim)
        D = layer.head_dim
        x = np.random.default_rng(seed).standard_normal((B, T, C)).astype(np.float32)
        rope = RotaryEmbedding(D, max_len=64) if rotary else None
        out = layer(Tensor(x), mask=mask, is_causal=is_causal, rotary=rope, offset=offset)

        def project(linear, n):  # (B, T, C) -> (B, n, T, D)
            y = x.astype(np.float64) @ linear.weight.data.T
            y = y + linear.bias.data if bias else y
            return y.reshape(B, T, n, D).transpose(0, 2, 1, 3)

        q, k, v = project(layer.q_proj, H), project(layer.k_proj, Hkv), project(layer.v_proj, Hkv)
        if rotary:
            theta = 10000.0 ** (-np.arange(0, D, 2) / D)
            positions = np.broadcast_to(offset, (B,))[:, None] + np.arange(T)  # (B, T)
            angles = positions[:, None, :, None] * np.concatenate((theta, theta))  # (B, 1, T, D)
            q = q * np.cos(angles) + rotate(q) * np.sin(angles)
            k = k * np.cos(angles) + rotate(k) * np.sin(angles)
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
        rule = np.ones((B, H, T, T), dtype=bool)
        if mask is not None:
            rule &= np.broadcast_to(mask, rule.shape)
        if is_causal:
            rule &= np.tril(np.ones((T, T), dtype=bool))
        y = np.zeros((B, H, T, D))
        for b, h in np.ndindex(B, H):
            sl = (slice(b, b + 1), slice(h, h + 1))
            y[b, h] = reference_attention(q[sl], k[sl], v[sl], rule[b, h])[0, 0]
        want = y.transpose(0, 2, 1, 3).reshape(B, T, H * D) @ layer.o_proj.weight.data.T
        want = want + layer.o_proj.bias.data if bias else want
        assert out.shape == (B, T, C) and out.dtype == np.float32, (
            f"GroupedQueryAttention{sizes[:3]} on x ({B}, {T}, {C}) should give float32 "
            f"({B}, {T}, {C}), got {out.dtype} {out.shape}"
        )
        assert np.allclose(out.data, want, atol=1e-4), (
            f"GroupedQueryAttention{sizes[:3]} (head_dim {D}, bias={bias}, offset={offset}, "
            f"{'rotary' if rotary else 'no rotary'}, {'a mask' if mask is not None else 'no mask'}"
            ") differs from the loop reference: query heads j*g .. j*g+g-1 share kv head j; "
            "rotate q and k with rotary.cos_sin(T, offset); regroup the mask's head axis"
        )

    def check_refused(sizes):
        """Sizes that do not split evenly raise ValueError."""
        try:
            GroupedQueryAttention(*sizes)
        except ValueError:
            pass
        else:
            raise AssertionError(f"GroupedQueryAttention{sizes} must raise ValueError")

    check_gqa((16, 4, 2, None), False, 2, 6, 3, True, None, True, 1)
    check_refused((16, 4, 3))
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1207)
    every_head = rng.random((2, 4, 5, 5)) > 0.4
    one_head = rng.random((2, 1, 5, 5)) > 0.4
    hidden_cases(check_gqa, {
        "multi-query attention": ((16, 4, 1, None), False, 2, 5, 0, True, None, True, 2),
        "as many key heads as query heads": ((12, 3, 3, None), False, 1, 4, 2, True, None, True,
                                             3),
        "an explicit head size": ((16, 4, 2, 6), False, 2, 3, 1, True, None, True, 4),
        "biases on every projection": ((8, 2, 1, None), True, 2, 4, 0, True, None, True, 5),
        "one offset per sequence": ((8, 4, 2, None), False, 3, 3, np.array([0, 7, 2]), True,
                                    None, True, 6),
        "no rotary": ((12, 6, 2, None), False, 2, 5, 0, False, None, True, 7),
        "a mask for every head": ((16, 4, 2, None), False, 2, 5, 0, True, every_head, False, 8),
        "a mask with one head axis, causal": ((16, 4, 2, None), False, 2, 5, 0, True, one_head,
                                              True, 9),
        "a single token deep into the sequence": ((8, 2, 1, None), False, 2, 1, 40, True, None,
                                                  True, 10),
    })
    hidden_cases(check_refused, {
        "key heads that do not divide the query heads": ((12, 6, 4),),
        "a width the heads do not divide": ((10, 4, 2),),
    })
    ### END HIDDEN TESTS


def rotate(a):  # rotate_half on NumPy arrays, written out for the reference
    half = a.shape[-1] // 2
    return np.concatenate((-a[..., half:], a[..., :half]), axis=-1)


test_unit_grouped_query_attention()

# %% [markdown]
# ## Part 7: attention with a KV cache
#
# A model generates text one token at a time: after a prompt of `P` tokens it computes
# token `P + 1`, then `P + 2`, and so on. The keys and values of earlier tokens never change
# (a token attends only to tokens before it, and the weights are fixed), so a generator
# keeps them in a **KV cache** and, at each step, computes `q`, `k`, `v` for the new tokens
# only. Your layers take the cache as an argument; module 18 builds the caches. All a
# layer needs is one method:
#
# ```
# k_all, v_all = cache.update(k, v)   # k, v: this step's (B, H_kv, T, D), after RoPE
#                                     # k_all, v_all: every token so far, (B, H_kv, S, D)
# ```
#
# Three things change in `forward` when a cache is given:
#
# - **Positions continue.** The new tokens are at positions `offset .. offset + T - 1`,
#   where `offset` is the number of tokens the cache holds (the caller passes it). RoPE
#   rotates `q` and `k` by those positions *before* `k` goes into the cache, so a cached key
#   is stored already rotated and is never rotated again.
# - **More keys than queries.** Attention runs over all `S` keys, `S = offset + T`. Reshape
#   `k` and `v` with `S`, not `T`.
# - **The causal mask is aligned to the end.** Query `t` of this step is the token at
#   position `S - T + t`; it may see keys `0 .. S - T + t`. That is `causal_mask(T, S)` of
#   Part 2, which `is_causal=True` already builds. One new token (`T = 1`) sees everything.
#
# Store `k` and `v` in the cache **before** regrouping them for grouped-query attention:
# the cache holds `H_kv` heads, not `H`; that is where grouped-query attention saves its
# memory. In `MultiHeadAttention` the cache holds `(B, H, S, D)`.
#
# The test below uses the smallest possible cache, which concatenates along the positions.
# Decoding token by token through it must give exactly the outputs of one pass over the
# whole sequence.

# %% nbgrader={"grade": false, "grade_id": "cache-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
class ConcatCache:
    """The smallest KV cache: keys and values concatenated along the positions (given)."""

    def __init__(self):
        self.keys = self.values = None

    def update(self, k, v):
        k, v = np.asarray(k.data), np.asarray(v.data)  # no gradient flows into a cache
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = np.concatenate([self.keys, k], axis=2)
            self.values = np.concatenate([self.values, v], axis=2)
        return Tensor(self.keys), Tensor(self.values)


class ScaleEachCoordinate(Module):
    """x * w over the last axis: stands in for Qwen3's per-head RMSNorm here (given)."""

    def __init__(self, w):
        super().__init__()
        self.w = np.asarray(w, dtype=np.float32)

    def forward(self, x):
        return x * Tensor(self.w)


# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_with_cache", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_attention_with_cache():
    """Decoding chunk by chunk with a cache equals one causal pass; q_norm/k_norm are used."""
    manual_seed(3)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 7, 16)).astype(np.float32)
    gqa = GroupedQueryAttention(16, 4, 2)
    rope = RotaryEmbedding(4, max_len=32)
    full = gqa(Tensor(x), is_causal=True, rotary=rope).data
    for chunks in ((7,), (3, 1, 1, 2), (1,) * 7):
        cache, held, outs = ConcatCache(), 0, []
        for n in chunks:
            part = x[:, held:held + n]
            outs.append(gqa(Tensor(part), is_causal=True, rotary=rope, offset=held,
                            cache=cache).data)
            held += n
        got = np.concatenate(outs, axis=1)
        assert got.shape == full.shape, (
            f"GQA with a cache, chunks {chunks}: outputs of shape {got.shape}, expected "
            f"{full.shape}: with a cache there are T queries but S = offset + T keys; "
            "reshape k and v with S"
        )
        err = np.abs(got - full).max()
        assert err < 1e-4, (
            f"decoding in chunks {chunks} through a cache differs from one causal pass by "
            f"{err:.3g}. Check: rotate q and k with rotary.cos_sin(T, offset) before "
            "cache.update (a cached key is stored rotated); call cache.update(k, v) with the "
            "H_kv heads, before regrouping; is_causal aligns the mask to the end of the keys"
        )
        assert cache.keys.shape == (2, 2, 7, 4), (
            f"the cache should hold (B, H_kv, S, D) = (2, 2, 7, 4), got {cache.keys.shape}: "
            "store k and v before they are regrouped or repeated for the query heads"
        )
    mha = MultiHeadAttention(16, 4)
    whole = mha(Tensor(x), is_causal=True).data
    cache = ConcatCache()
    steps = [mha(Tensor(x[:, t:t + 1]), is_causal=True, cache=cache).data for t in range(7)]
    err = np.abs(np.concatenate(steps, axis=1) - whole).max()
    assert err < 1e-4, (
        f"MultiHeadAttention decoded token by token through a cache differs from one causal "
        f"pass by {err:.3g}: k, v = cache.update(k, v) after the split into heads, then "
        "attention over every key"
    )
    w = np.linspace(0.5, 2.0, 4).astype(np.float32)
    gqa.q_norm, gqa.k_norm = ScaleEachCoordinate(w), ScaleEachCoordinate(w[::-1].copy())
    normed = gqa(Tensor(x), is_causal=True, rotary=rope).data
    plain = GroupedQueryAttention.from_linears(gqa.q_proj, gqa.k_proj, gqa.v_proj, gqa.o_proj, 4, 2)
    cos, sin = rope.cos_sin(7)

    def heads(t, n):  # (B, T, n * 4) -> (B, n, T, 4)
        return t.reshape(2, 7, n, 4).transpose(0, 2, 1, 3)

    q = heads(x @ gqa.q_proj.weight.data.T, 4) * w
    k = heads(x @ gqa.k_proj.weight.data.T, 2) * w[::-1]
    v = heads(x @ gqa.v_proj.weight.data.T, 2)
    q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    y = reference_attention(q, k, v, causal_mask(7)).transpose(0, 2, 1, 3).reshape(2, 7, 16)
    assert np.allclose(normed, y @ gqa.o_proj.weight.data.T, atol=1e-4), (
        "with q_norm and k_norm set, apply them to q and k (B, H, T, D) right after the "
        "projections and before the rotation"
        + (": they had no effect" if np.allclose(normed, plain(Tensor(x), is_causal=True,
                                                                rotary=rope).data) else "")
    )

    def check_cached(sizes, chunks, seed):
        """Decoding in `chunks` through a ConcatCache equals one causal pass, and the cache
        holds (B, kv heads, S, D): sizes (C, H) for MultiHeadAttention, (C, H, H_kv,
        head_dim, bias) for GroupedQueryAttention with rotary embeddings."""
        manual_seed(seed)
        if len(sizes) == 2:
            layer, extra, heads = MultiHeadAttention(*sizes), {}, sizes[1]
        else:
            C, H, Hkv, head_dim, bias = sizes
            layer = GroupedQueryAttention(C, H, Hkv, bias=bias, head_dim=head_dim)
            extra, heads = {"rotary": RotaryEmbedding(layer.head_dim, max_len=32)}, Hkv
        T = sum(chunks)
        x = np.random.default_rng(seed).standard_normal((2, T, layer.embed_dim)).astype(np.float32)
        full = layer(Tensor(x), is_causal=True, **extra).data
        cache, held, outs = ConcatCache(), 0, []
        for n in chunks:
            offset = {"offset": held} if extra else {}
            outs.append(layer(Tensor(x[:, held:held + n]), is_causal=True, cache=cache, **extra,
                              **offset).data)
            held += n
        got = np.concatenate(outs, axis=1)
        assert got.shape == full.shape and np.abs(got - full).max() < 1e-4, (
            f"{type(layer).__name__} decoded in chunks {chunks} through a cache differs from "
            "one causal pass: rotate with the offset before cache.update, attend over every "
            "key the cache returns, is_causal aligned to the end of the keys"
        )
        assert cache.keys.shape == (2, heads, T, layer.head_dim), (
            f"the cache should hold (B, H_kv, S, D) = {(2, heads, T, layer.head_dim)}, got "
            f"{cache.keys.shape}"
        )

    check_cached((16, 4, 2, None, False), (3, 1, 1, 2), 3)
    check_cached((16, 4), (1,) * 7, 3)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_cached, {
        "multi-query attention in uneven chunks": ((12, 3, 1, None, False), (2, 3, 1), 4),
        "multi-head attention in two chunks": ((8, 2), (4, 3), 5),
        "an explicit head size, token by token": ((16, 4, 2, 6, False), (1, 1, 1, 1, 1), 6),
        "biases and a long first chunk": ((8, 2, 2, None, True), (6, 1, 1), 7),
        "a single head, one token then the rest": ((6, 1), (1, 5), 8),
    })
    ### END HIDDEN TESTS


test_unit_attention_with_cache()

# %% [markdown]
# ## Systems analysis: attention's quadratic cost, measured
#
# **Memory and time against sequence length.** For one sequence and one head of size 32,
# the cell below measures, for T from 64 to 1024: the bytes of the `(T, T)` weights; the
# memory the graph keeps between forward and backward; the peak memory of forward plus
# backward (with `tracemalloc`, which sees NumPy's allocations); and the time of forward
# plus backward. It does so for the fused operation and for the composed twin, with a
# causal mask. A real model multiplies every figure by batch x heads x layers.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
import time
import tracemalloc


def measure(attention, q, k, v, grad):
    """(bytes kept by the graph after forward, peak bytes of forward + backward, seconds)."""
    tracemalloc.start()
    start = time.perf_counter()
    out = attention(q, k, v, is_causal=True)
    kept = tracemalloc.get_traced_memory()[0]
    out.backward(grad)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for t in (q, k, v):
        t.grad = None
    return kept, peak, seconds


def memory_report(lengths=(64, 128, 256, 512, 1024), head_dim=32):
    mib = 2**20
    print(f"{'T':>5} {'weights':>9} | fused: {'kept':>8} {'peak':>8} {'time':>8} | "
          f"composed: {'kept':>8} {'peak':>8} {'time':>8}")
    for T in lengths:
        q, k, v = random_qkv(B=1, H=1, T=T, S=T, D=head_dim, requires_grad=True)
        grad = np.ones((1, 1, T, head_dim), dtype=np.float32)
        weights = attention_weights(q, k, is_causal=True).nbytes
        row = f"{T:5} {weights / mib:7.2f}Mi |"
        for attention in (scaled_dot_product_attention, attention_composed):
            kept, peak, seconds = measure(attention, q, k, v, grad)
            row += f" {'':6} {kept / mib:6.2f}Mi {peak / mib:6.2f}Mi {seconds * 1e3:6.1f}ms |"
        print(row[:-2])


memory_report()

# %% [markdown]
# Each doubling of `T` multiplies the weights' bytes by four, and, once the `(T, T)` arrays
# dominate, the time too. The **fused** operation keeps `q`, `k`, `v` and the output
# between forward and backward, growing like `T`, plus the `(T, S)` boolean causal mask
# (one byte per pair, shared by every head and sequence); its backward recomputes the
# weights, so its peak holds two or three `(T, T)` float arrays for a moment only. The
# **composed** twin keeps five `(T, T)` float arrays per head from forward to backward
# (scores, scaled scores, masked scores, weights, masked weights) and two more shared by
# the heads (the additive bias and the 0/1 mask), growing like `T^2`. For a GPT-2-sized
# model (12 layers, 12 heads of 64) and `T = 1024`, one sequence makes that about
# 12 x (12 x 5 + 2) x 4 MiB = 2.9 GiB of attention intermediates in the composed form,
# against 12 x 4 x 3 MiB = 144 MiB of `q, k, v, O` in the fused one. That is why
# long-context training needs attention kernels that never store the weights
# (FlashAttention).
#
# **Time at the GPT's shape.** The training step of module 13 (batch 12, 4 heads, 64
# positions, heads of 32) runs causal attention in each of its 4 layers, forward and
# backward. The best of several runs, alternating the two versions:

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def speed_report(repeat=7):
    q, k, v = random_qkv(B=12, H=4, T=64, S=64, D=32, requires_grad=True)
    grad = np.ones((12, 4, 64, 32), dtype=np.float32)
    versions = {"fused": scaled_dot_product_attention, "composed": attention_composed}
    best = {name: [float("inf"), float("inf")] for name in versions}
    for _ in range(repeat):
        for name, attention in versions.items():
            start = time.perf_counter()
            out = attention(q, k, v, is_causal=True)
            middle = time.perf_counter()
            out.backward(grad)
            best[name][0] = min(best[name][0], middle - start)
            best[name][1] = min(best[name][1], time.perf_counter() - middle)
    for name, (forward, backward) in best.items():
        print(f"{name:9s} (12, 4, 64, 32) causal: forward {forward * 1e3:5.2f} ms, "
              f"backward {backward * 1e3:5.2f} ms, together {(forward + backward) * 1e3:5.2f} ms")
    fused, composed = sum(best["fused"]), sum(best["composed"])
    print(f"composed / fused time: {composed / fused:.2f}; attention in 4 layers costs "
          f"{4 * fused * 1e3:.1f} ms of each training step")


speed_report()

# %% [markdown]
# At this small size the two versions run in similar time, for opposite reasons. The fused
# forward is faster: one recorded operation instead of seven, no bias array, no extra
# `(T, T)` copies. Its backward is slower than the composed one by about one forward
# pass: the recomputation of the weights. As `T` grows, memory traffic takes over and the
# fused version pulls ahead in time as well (compare the two time columns of the first
# table from `T = 256` on). Everywhere, it buys the memory measured above, and the
# guarantee, tested, that masked weights are exactly zero and fully masked rows never turn
# into NaN.
#
# If `Function.apply` let `forward` keep the weights for backward (PyTorch's
# `ctx.save_for_backward`), the fused backward would skip the recomputation: faster at
# small `T`, at the price of one `(T, S)` array per layer kept from forward to backward.
# Which to choose is the classic trade between memory and time.
#
# ## What comes next
#
# - **Module 13 (transformers)** wraps your `MultiHeadAttention` with layer normalization,
#   an MLP and residual connections into a block, stacks blocks into a GPT with your
#   embeddings from module 11, and trains it on Tiny Shakespeare.
# - **Module 14 (profiling)** measures where the GPT's training step spends its time, and
#   how much of it is attention.
# - **Module 18 (KV caching)** stores the keys and values of generated tokens so that each
#   new token costs one query against the cache: `T = 1 < S`, with the end-aligned causal
#   mask and the rotary `offset` you wrote here.
