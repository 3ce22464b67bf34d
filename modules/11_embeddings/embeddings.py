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
# # Module 11: Embeddings
#
# ## Overview
#
# A tokenizer (module 10) turns text into integers: `"to be"` might become `[57, 52, 1,
# 39, 42]`. A network cannot do arithmetic on those integers as numbers: token 57 is not
# "bigger" than token 52, and averaging two token ids means nothing. Every language model
# therefore starts with an **embedding table**, a matrix with one learned row of `D` numbers
# per token of the vocabulary. Looking a token up means reading its row. Training moves the
# rows so that tokens that behave alike end up with similar vectors.
#
# The second problem is **order**. Attention (module 12) compares every token with every
# other one, and the comparison does not care where the tokens are: shuffle the tokens and
# each one gets the same result, shuffled. "dog bites man" and "man bites dog" would look
# the same. The model has to be told positions, and there are three classic ways, all of
# which you build here:
#
# - **learned positions** (GPT-2, nanoGPT): a second table with one row per position, added
#   to the token vectors;
# - **sinusoidal encodings** (the original Transformer, 2017): fixed waves of many
#   frequencies, nothing to learn;
# - **rotary embeddings, RoPE** (Llama, Qwen, Mistral and most models since 2023): rotate
#   the query and key vectors by an angle proportional to the position, so that attention
#   scores depend on the *distance* between tokens.
#
# **In numbers.** GPT-2's token embedding is a $50\,257 \times 768$ table: 38.6M parameters,
# 154 MB in float32, almost a quarter of a 163M-parameter GPT-2-sized model. Learned positions
# add $1\,024 \times 768 \approx 0.8$M parameters and stop at position 1,023; sinusoidal and
# rotary positions add none.
#
# ## Learning objectives
#
# - Explain why an embedding lookup is a one-hot matrix product, and why it is never
#   computed that way.
# - Write the lookup's backward as a **scatter-add**, make repeated tokens accumulate, and
#   measure two ways of doing it.
# - Validate token ids with errors that name the bad id and the valid range.
# - Build learned, sinusoidal and rotary position information, and check by test the
#   property each one promises (sinusoids and rotations encode relative offsets).
# - Write a fused operation (`RotaryFunction`) together with its derivative, and check it
#   with `gradcheck`.
#
# ## What you build
#
# - `EmbeddingFunction`: gather `weight[indices]` forward, scatter-add backward, registered
#   beside it with `@derivative`.
# - `embedding(indices, weight)` and the layer `Embedding(num_embeddings, embedding_dim)`.
# - `PositionalEmbedding(max_len, embedding_dim)`: learned positions, with an `offset` for
#   generation.
# - `sinusoidal_encoding(max_len, dim)` and the layer `SinusoidalPositionalEncoding`.
# - `rotate_half`, `rope_frequencies(head_dim, base, scaling)` (with Llama 3's long-context
#   bands), `RotaryEmbedding(head_dim, max_len, base, scaling)` with its `cos_sin` tables
#   (one offset, or one per sequence), `RotaryFunction` with its derivative, and
#   `apply_rotary(x, cos, sin)`, in the convention of Llama and Qwen as published on
#   Hugging Face.
# - `Embedding.as_linear(x)`: the table used as the output layer (tied weights).
#
# ## What you are not building yet
#
# - **Attention.** The rotary embedding is applied inside attention, to queries and keys;
#   module 12 does that. Here you test its properties directly.
# - **The GPT's embedding stage.** Module 13 adds token and position vectors, initializes
#   the tables the way GPT-2 does (standard deviation 0.02) and ties the token table to the
#   output layer.
# - **Sparse gradients and `padding_idx`.** PyTorch can return an embedding's gradient as a
#   sparse tensor (only the rows used) and can pin one row at zero for padding. Our gradient
#   is a dense `(num_embeddings, embedding_dim)` array; the systems analysis measures what
#   that costs. (`Embedding(..., padding_idx=)` is given: a zero row that gets no gradient.)
# - **Other long-context RoPE scalings** (NTK, YaRN): variations on the frequencies you
#   compute here. Llama 3's frequency bands are built, since its checkpoints need them.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.embeddings
#| export
import numpy as np

from tinytorch.core.autograd import derivative
from tinytorch.core.layers import Module, Parameter
from tinytorch.core.tensor import Function, ShapeError, Tensor, default_generator

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import expect_error, explain, float64_inputs  # module 01's helpers

# %% [markdown]
# ## Part 1: the lookup, forward and backward
#
# An embedding table `W` has shape `(V, D)`: `V` tokens in the vocabulary (the
# *num_embeddings*), `D` numbers per token (the *embedding_dim*). For a batch of token ids
# `idx` of any shape, say `(B, T)`, the lookup returns `W[idx]`, of shape `(B, T, D)`.
#
# **It is a matrix product in disguise.** Write token `i` as a one-hot row vector `e_i`
# (zeros, a 1 at position `i`). Then `e_i @ W` is row `i` of `W`. A batch of `N` tokens is
# a one-hot matrix `E` of shape `(N, V)`, and the lookup is `E @ W`. Nobody computes it that
# way: `E @ W` costs `2 * N * V * D` operations to copy `N * D` numbers, and `E` alone
# would be `N * V` floats (for GPT-2's 50,257 tokens and a batch of 8,192 tokens, 1.6 GB).
# Indexing, `W[idx]`, is a **gather**: it copies the rows and nothing else.
#
# **The backward pass is the transposed product.** For `out = E @ W`, module 06 says
# `grad_W = E.T @ grad_out`: row `v` of `grad_W` is the sum of the gradient rows of every
# position that looked up token `v`. Rows of tokens that did not occur get zero. That is a
# **scatter-add**:
#
# ```
# idx      = [2, 0, 2]                    grad_out rows: g0, g1, g2
# grad_W   = zeros((V, D))
# grad_W[2] += g0;  grad_W[0] += g1;  grad_W[2] += g2        ->  row 2 holds g0 + g2
# ```
#
# The trap is the repeated token. `grad_W[idx] += grad_out` looks right and is wrong:
# NumPy evaluates it as `grad_W[idx] = grad_W[idx] + grad_out`, and when `idx` holds 2
# twice, the second write *replaces* the first, so row 2 gets `g2` instead of `g0 + g2`. In
# text almost every batch repeats tokens (spaces, "e", "the"), so this bug trains a model
# that learns only from the last occurrence of each token. No error is ever raised.
#
# Two correct ways:
#
# 1. `np.add.at(grad_W, idx, grad_out)`, NumPy's unbuffered add, which visits every index
#    in turn. Simple and correct; on a small vocabulary it is slow (measured in the
#    systems analysis).
# 2. **Sort, then sum each group.** Sort the flat ids (`order = np.argsort(ids)`), so equal
#    ids sit next to each other; find where each group starts; `np.add.reduceat` sums the
#    gradient rows of each group in one vectorized call; write the sums into the rows of
#    the distinct ids. Each row is written once, so plain assignment is now correct.
#
# Write the forward with indexing (flatten nothing: NumPy's `weight[indices]` already
# returns `indices.shape + (D,)`), and the backward with method 2 (or method 1 first, then
# improve it). The ids reach the operation as a **parameter**, `indices=...`, not as an
# input: an input would be turned into a float tensor and would ask for a gradient, and
# integer ids have none. The rule returns one gradient, for `weight`.

# %% nbgrader={"grade": false, "grade_id": "embedding-function", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class EmbeddingFunction(Function):
    """weight[indices]: one row of the table per index, of shape indices.shape + (D,)"""

    @staticmethod
    def forward(weight, indices):
        ### BEGIN SOLUTION
        return weight[indices]
        ### END SOLUTION


@derivative(EmbeddingFunction)
def embedding_backward(ctx, grad):
    """d weight[indices]: the gradient rows scatter-added into the rows they came from"""
    ### BEGIN SOLUTION
    weight = ctx.inputs[0]
    ids = np.asarray(ctx.params["indices"]).reshape(-1)
    rows = grad.reshape(ids.size, weight.shape[-1])
    grad_weight = np.zeros(weight.shape, dtype=weight.dtype)
    if ids.size == 0:
        return (grad_weight,)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    grad_weight[sorted_ids[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return (grad_weight,)
    ### END SOLUTION


# %% [markdown]
# ### Test: gather and scatter-add
#
# The test looks up a small table with repeated ids and checks the gradient row by row:
# row `v` must receive the sum of the gradients of every position where `v` occurred.

# %% nbgrader={"grade": true, "grade_id": "test_unit_embedding_function", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_embedding_function():
    """Forward gathers rows of any index shape; backward adds the rows of repeated ids."""
    weight_values = np.arange(15, dtype=np.float32).reshape(5, 3)
    weight = Tensor(weight_values, requires_grad=True)
    ids = np.array([[2, 0], [2, 2]])
    out = EmbeddingFunction.apply(weight, indices=ids)
    assert out.shape == (2, 2, 3), (
        f"looking up ids of shape (2, 2) in a (5, 3) table should give (2, 2, 3), got "
        f"{out.shape}: weight[indices] keeps the index shape and appends D"
    )
    assert np.array_equal(out.data, weight_values[ids]), "the rows returned are not weight[ids]"
    assert out.dtype == np.float32, f"the lookup of a float32 table gave {out.dtype}"
    grad = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    out.backward(grad)
    want = np.zeros((5, 3), dtype=np.float32)
    want[2] = grad[0, 0] + grad[1, 0] + grad[1, 1]  # id 2 occurs three times
    want[0] = grad[0, 1]
    got = weight.grad
    assert got is not None and got.shape == (5, 3), (
        f"weight.grad should have the table's shape (5, 3), got "
        f"{None if got is None else got.shape}: return one gradient, for weight, shaped like it"
    )
    assert np.allclose(got.data[0], want[0]), (
        f"row 0 (used once) should get {want[0]}, got {got.data[0]}"
    )
    assert np.allclose(got.data[2], want[2]), (
        f"id 2 occurs three times, so row 2 must receive the SUM of three gradient rows, "
        f"{want[2]}, got {got.data[2]}. `grad_w[ids] += g` keeps only the last write for a "
        "repeated index: use np.add.at or sort the ids and sum each group (np.add.reduceat)"
    )
    assert np.allclose(got.data[[1, 3, 4]], 0), "rows of ids that never occurred must get zero"
    assert got.dtype == np.float32, f"the table's gradient should stay float32, got {got.dtype}"
    table = float64_inputs(np.random.default_rng(0), (6, 4))
    many = np.array([5, 1, 1, 0, 5, 5, 3])
    explain("the embedding's gradient, ids [5, 1, 1, 0, 5, 5, 3]",
            lambda: gradcheck(lambda w: EmbeddingFunction.apply(w, indices=many), [table]),
            "scatter-add: every occurrence of an id adds its gradient row (np.add.at)")

    def check_lookup(values, ids, grad):
        """The rows against np.take, the table's gradient against the one-hot product E.T @ g."""
        weight = Tensor(values, dtype=values.dtype, requires_grad=True)
        ids = np.asarray(ids)
        out = EmbeddingFunction.apply(weight, indices=ids)
        shape = ids.shape + values.shape[1:]
        assert out.shape == shape, (
            f"ids of shape {ids.shape} in a {values.shape} table should give {shape}, got "
            f"{out.shape}: weight[indices] keeps the index shape and appends D"
        )
        assert np.array_equal(out.data, np.take(values, ids, axis=0)), (
            "the rows returned are not weight[ids]"
        )
        assert out.dtype == values.dtype, f"the lookup of a {values.dtype} table gave {out.dtype}"
        out.backward(grad)
        one_hot = (ids.reshape(-1, 1) == np.arange(len(values))).astype(np.float64)  # (N, V)
        want = one_hot.T @ np.asarray(grad, dtype=np.float64).reshape(-1, values.shape[1])
        got = weight.grad
        assert got is not None and got.shape == values.shape, (
            f"weight.grad should have the table's shape {values.shape}, got "
            f"{None if got is None else got.shape}"
        )
        assert np.allclose(got.data, want, atol=1e-5), (
            "row v of the table's gradient should be the sum of the gradient rows of every "
            "position that looked up v (the one-hot product E.T @ grad): use np.add.at, or sort "
            "the ids and sum each group with np.add.reduceat"
        )
        assert got.dtype == values.dtype, (
            f"the gradient of a {values.dtype} table came out {got.dtype}"
        )

    check_lookup(weight_values, ids, grad)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(1101)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    hidden_cases(check_lookup, {
        "ids of three axes": (normal(7, 3), rng.integers(0, 7, (2, 3, 2)), normal(2, 3, 2, 3)),
        "a single id": (normal(6, 4), np.int64(4), normal(4)),
        "one id repeated everywhere": (normal(5, 2), np.full(9, 2), normal(9, 2)),
        "no ids at all": (normal(4, 3), np.zeros(0, dtype=np.int64), normal(0, 3)),
        "a float64 table": (normal(6, 5, dtype=np.float64), np.array([[5, 0, 5], [1, 5, 0]]),
                            normal(2, 3, 5, dtype=np.float64)),
        "a one-row table": (normal(1, 4), np.zeros(3, dtype=np.int64), normal(3, 4)),
        "every id once, in reverse": (normal(8, 2), np.arange(8)[::-1], normal(8, 2)),
        "unsorted ids with long runs": (normal(9, 3), rng.integers(0, 3, 40), normal(40, 3)),
    })
    ### END HIDDEN TESTS


test_unit_embedding_function()

# %% [markdown]
# ## Part 2: the `Embedding` layer
#
# The layer owns the table as a `Parameter` of shape `(num_embeddings, embedding_dim)` and
# calls your operation. Two decisions:
#
# **Initialization.** PyTorch's `nn.Embedding` draws every entry from a standard normal
# distribution, N(0, 1), and so do you (float32, from the shared generator
# `default_generator()`, so `manual_seed` makes it repeatable). Unlike a `Linear` weight,
# nothing multiplies the rows on the way in, so there is no fan-in to scale by. GPT-2 uses
# a smaller standard deviation, 0.02, and module 13 re-initializes its tables that way.
#
# **Checking the ids.** NumPy's own errors are poor teachers here, and some mistakes
# raise nothing at all:
#
# - a **negative** id is valid NumPy indexing (from the end of the table) and silently
#   returns the wrong row: refuse it;
# - an id `>= num_embeddings` (a tokenizer with a bigger vocabulary than the model) gives
#   "index 70 is out of bounds for axis 0 with size 65" deep inside the forward pass: say
#   which id, and that valid ids are `[0, num_embeddings)`, raising `IndexError`;
# - **float** ids: `Tensor([1, 2, 3])` is float32 (module 01's default), and NumPy refuses
#   to index with floats. Raise a `TypeError` that says to use integers, e.g.
#   `Tensor(ids, dtype=np.int64)`.
#
# The check costs one `min` and one `max` over the ids: microseconds, next to a forward
# pass. `indices` may be a `Tensor`, a NumPy array, a list or an int, of any shape.
#
# **The table read the other way: `as_linear(x)`.** A language model ends by scoring a
# vector `x` of size `D` against every token of the vocabulary. Many models (GPT-2,
# nanoGPT, Qwen2.5's small sizes) use the embedding table itself for that, *tied*
# weights: the logits are `x @ weight.T`, shape `(..., V)`, one dot product per row. It is
# a `Linear` layer without bias whose weight is the table, and it needs no second copy of
# the table: `weight.T` is a view. Write it with your `Tensor`'s `@` and `.T`, so the
# gradient reaches the same table from both ends.
#
# `Embedding.from_pretrained(weight)` (given, PyTorch's name) wraps a table that already
# exists, such as a checkpoint's, without drawing a random one first: for a vocabulary of
# 151,936 rows of 896 that draw alone takes seconds (module 18 loads models this way).

# %% nbgrader={"grade": false, "grade_id": "embedding-layer", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _as_indices(indices, num_embeddings, who="Embedding"):
    """The ids as an integer ndarray, checked to lie in [0, num_embeddings)."""
    ### BEGIN SOLUTION
    array = indices.data if isinstance(indices, Tensor) else np.asarray(indices)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{who} needs integer token ids, got dtype {array.dtype}. Use integers, e.g. "
            "Tensor(ids, dtype=np.int64) or ids.astype(np.int64): Tensor(list) is float32 "
            "by default, and a float cannot pick a row of the table."
        )
    if array.size:
        low, high = array.min(), array.max()
        if low < 0 or high >= num_embeddings:
            bad = int(low) if low < 0 else int(high)
            raise IndexError(
                f"{who}: index {bad} is out of range for a table of {num_embeddings} rows; "
                f"valid indices are [0, {num_embeddings}). Does the tokenizer's vocabulary "
                "size match num_embeddings?"
            )
    return array
    ### END SOLUTION


def embedding(indices, weight):
    """weight[indices] for integer ids of any shape: (..., D), differentiable in weight.

    >>> weight = Tensor([[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]], requires_grad=True)
    >>> out = embedding(np.array([[2, 1], [1, 1]]), weight)
    >>> out.shape
    (2, 2, 2)
    >>> out[0]
    Tensor([[ 2., 20.],
            [ 1., 10.]], requires_grad=True)
    >>> out.sum().backward()
    >>> weight.grad  # row 1 was looked up three times
    Tensor([[0., 0.],
            [3., 3.],
            [1., 1.]])
    """
    ### BEGIN SOLUTION
    ids = _as_indices(indices, weight.shape[0], "embedding")
    return EmbeddingFunction.apply(weight, indices=ids)
    ### END SOLUTION


class Embedding(Module):
    """A (num_embeddings, embedding_dim) table of learned rows, looked up by integer id.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> emb = Embedding(10, 4, padding_idx=0)
    >>> emb, emb.weight.shape, emb.weight.dtype
    (Embedding(10, 4, padding_idx=0), (10, 4), dtype('float32'))
    >>> emb(np.array([[3, 0, 7]])).shape  # (batch, tokens) ids -> (batch, tokens, dim)
    (1, 3, 4)
    >>> emb(np.array([0]))  # the padding row starts at zero
    Tensor([[0., 0., 0., 0.]], requires_grad=True)
    >>> emb.as_linear(Tensor(np.ones((2, 4)))).shape  # scores against every row
    (2, 10)
    >>> Embedding.from_pretrained(Tensor(np.eye(3, dtype=np.float32)))(np.array([1]))
    Tensor([[0., 1., 0.]], requires_grad=True)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        for label, value in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"Embedding: {label} must be a positive integer, got {value!r}")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        ### BEGIN SOLUTION
        shape = (self.num_embeddings, self.embedding_dim)
        self.weight = Parameter(default_generator().standard_normal(shape, dtype=np.float32))
        ### END SOLUTION
        # padding_idx (given), as PyTorch: that row starts at zero and gets no gradient.
        self.padding_idx = None
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx={padding_idx} is outside the table's "
                    f"{self.num_embeddings} rows: use an index in [0, {self.num_embeddings})"
                )
            self.padding_idx = int(padding_idx) % self.num_embeddings
            self.weight.data[self.padding_idx] = 0

    def forward(self, indices):
        if self.padding_idx is not None:
            return _lookup_with_padding(self, indices)
        ### BEGIN SOLUTION
        ids = _as_indices(indices, self.num_embeddings)
        return EmbeddingFunction.apply(self.weight, indices=ids)
        ### END SOLUTION

    def as_linear(self, x):
        """x (..., embedding_dim) scored against every row: (..., num_embeddings) logits."""
        ### BEGIN SOLUTION
        return x @ self.weight.T
        ### END SOLUTION

    @classmethod
    def from_pretrained(cls, weight):
        """A layer around an existing (V, D) table, used as it is: no copy, no random draw
        (PyTorch's name; module 18 loads checkpoints with it) (given)."""
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.num_embeddings, layer.embedding_dim = (int(n) for n in weight.shape)
        layer.weight = weight if isinstance(weight, Parameter) else Parameter(weight)
        layer.padding_idx = None
        return layer

    def extra_repr(self):
        padding = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"


def _lookup_with_padding(emb, indices):
    """emb.weight[indices] where the padding row's value is used but gets no gradient."""
    ids = _as_indices(indices, emb.num_embeddings)
    out = EmbeddingFunction.apply(emb.weight, indices=ids)  # (..., D)
    is_pad = (ids == emb.padding_idx)[..., None]  # (..., 1)
    if not is_pad.any():
        return out
    keep = Tensor((~is_pad).astype(out.dtype))
    pad_row = Tensor(emb.weight.data[emb.padding_idx] * is_pad)  # a constant: no gradient
    return out * keep + pad_row


# %% nbgrader={"grade": true, "grade_id": "test_unit_embedding", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_embedding():
    """The layer owns an N(0, 1) float32 table, looks up ids of any form, and trains."""
    from tinytorch.core.tensor import manual_seed

    manual_seed(0)
    emb = Embedding(1000, 16)
    w = emb.weight
    assert isinstance(w, Parameter) and w.shape == (1000, 16), (
        f"Embedding(1000, 16).weight should be a Parameter of shape (1000, 16), got "
        f"{type(w).__name__} {getattr(w, 'shape', None)}"
    )
    assert w.dtype == np.float32, f"the table should be float32, got {w.dtype}"
    assert abs(float(w.data.mean())) < 0.05 and abs(float(w.data.std()) - 1) < 0.05, (
        f"the table should be drawn from N(0, 1) like PyTorch's nn.Embedding, got mean "
        f"{w.data.mean():.3f}, std {w.data.std():.3f}"
    )
    assert [name for name, _ in emb.named_parameters()] == ["weight"], (
        "the table must be registered as the layer's one parameter, 'weight'"
    )
    manual_seed(0)
    again = Embedding(1000, 16)
    assert np.array_equal(again.weight.data, w.data), (
        "draw the table from default_generator(), so manual_seed makes it repeatable"
    )
    ids = np.array([[3, 999, 3], [0, 1, 2]])
    for form in (ids, Tensor(ids, dtype=np.int64), ids.tolist(), ids.astype(np.int32)):
        out = emb(form)
        assert out.shape == (2, 3, 16), (
            f"ids of shape (2, 3) given as {type(form).__name__} should give (2, 3, 16), "
            f"got {out.shape}"
        )
        assert np.array_equal(out.data, w.data[ids]), (
            f"rows looked up from a {type(form).__name__} are wrong"
        )
    assert emb(7).shape == (16,), "a single int id gives one row, shape (16,)"
    assert np.array_equal(embedding(ids, w).data, w.data[ids]), (
        "embedding(ids, weight) is weight[ids]"
    )
    looked_up = emb(ids)
    assert looked_up.requires_grad, (
        "emb(ids) records no operation (requires_grad is False), so no gradient can reach "
        "the table: return EmbeddingFunction.apply(self.weight, indices=ids), not a new "
        "Tensor of self.weight.data[ids]"
    )
    looked_up.sum().backward()
    counts = np.bincount(ids.ravel(), minlength=1000).astype(np.float32)
    assert w.grad is not None and np.allclose(w.grad.data, counts[:, None]), (
        "after emb(ids).sum().backward(), row v of weight.grad should equal how often v "
        "occurs in ids (3 occurs twice): expected row 3 = [2, 2, ...], got "
        + ("weight.grad None" if w.grad is None else f"row 3 = {w.grad.data[3][:4]}...")
        + ": the layer must call EmbeddingFunction.apply(self.weight, indices=ids)"
    )

    def check_layer(num, dim, ids, seed):
        """A new Embedding(num, dim): a float32 table, repeatable from manual_seed (and N(0, 1)
        when large enough to tell), that looks ids up and counts them in its gradient."""
        manual_seed(seed)
        layer = Embedding(num, dim)
        table = layer.weight
        assert isinstance(table, Parameter) and table.shape == (num, dim), (
            f"Embedding({num}, {dim}).weight should be a Parameter of shape ({num}, {dim}), got "
            f"{type(table).__name__} {getattr(table, 'shape', None)}"
        )
        assert table.dtype == np.float32, f"the table should be float32, got {table.dtype}"
        manual_seed(seed)
        assert np.array_equal(Embedding(num, dim).weight.data, table.data), (
            "draw the table from default_generator(), so manual_seed makes it repeatable"
        )
        if table.size >= 10_000:
            spread = (float(table.data.mean()), float(table.data.std()))
            assert abs(spread[0]) < 0.05 and abs(spread[1] - 1) < 0.05, (
                f"the table should be drawn from N(0, 1), got mean {spread[0]:.3f}, std "
                f"{spread[1]:.3f}"
            )
        given = np.asarray(ids.data if isinstance(ids, Tensor) else ids)
        out = layer(ids)
        assert out.shape == given.shape + (dim,), (
            f"ids of shape {given.shape} should give {given.shape + (dim,)}, got {out.shape}"
        )
        assert np.array_equal(out.data, np.take(table.data, given, axis=0)), (
            f"rows looked up from a {type(ids).__name__} are wrong"
        )
        out.sum().backward()
        counts = np.bincount(given.ravel(), minlength=num).astype(np.float32)
        assert table.grad is not None and np.allclose(table.grad.data, counts[:, None]), (
            "after emb(ids).sum().backward(), row v of weight.grad should equal how often v "
            "occurs in ids: the layer must call EmbeddingFunction.apply(self.weight, indices=ids)"
        )

    check_layer(1000, 16, ids, 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(1102)
    hidden_cases(check_layer, {
        "a nested list of ids": (5, 3, [[0, 4], [4, 4], [2, 0]], 7),
        "a three-axis int32 array": (9, 2, rng.integers(0, 9, (2, 2, 3)).astype(np.int32), 1),
        "a Tensor of int64 ids": (6, 5, Tensor(np.array([5, 5, 1, 0]), dtype=np.int64), 2),
        "a single NumPy integer": (4, 3, np.int64(3), 3),
        "uint8 ids": (200, 4, rng.integers(0, 200, 30).astype(np.uint8), 4),
        "a wide table": (2000, 40, rng.integers(0, 2000, (4, 8)), 5),
        "a table of one row": (1, 6, [0, 0, 0], 6),
    })
    ### END HIDDEN TESTS


test_unit_embedding()

# %% nbgrader={"grade": true, "grade_id": "test_unit_embedding_errors", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_embedding_errors():
    """Bad ids raise errors that name the id and the valid range, or say to use integers."""
    emb = Embedding(65, 8)

    def error_of(call):
        try:
            call()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - we inspect whatever was raised
            return error
        return None

    for bad, ids in ((70, [1, 70, 3]), (65, np.array([[0, 65]])), (-1, [4, -1])):
        error = error_of(lambda: emb(ids))
        assert isinstance(error, (IndexError, ValueError)), (
            f"emb({ids!r}) on a 65-row table must raise IndexError, got {error!r}"
            + (": negative ids are valid NumPy indexing and would silently read the wrong "
               "row, so check min() >= 0 too" if bad < 0 else "")
        )
        assert str(bad) in str(error) and "[0, 65)" in str(error), (
            f"the error for id {bad} should name it and the valid range [0, 65), got "
            f"{type(error).__name__}: {error}"
            + (". This is NumPy's own error: your check let the id through; valid ids are "
               "0..64, so refuse ids < 0 or >= num_embeddings"
               if "out of bounds" in str(error) else "")
        )
    error = error_of(lambda: emb(Tensor([1, 2, 3])))
    assert isinstance(error, TypeError), (
        f"float ids (Tensor([1, 2, 3]) is float32) must raise TypeError, got {error!r}"
    )
    assert "integer" in str(error).lower(), f"the TypeError should say to use integers: {error}"
    assert emb(np.zeros((0,), dtype=np.int64)).shape == (0, 8), "no ids give an empty (0, 8) result"

    def check_refused(num, ids, bad):
        """Embedding(num, ...)(ids) raises IndexError naming the bad id and [0, num)."""
        error = error_of(lambda: Embedding(num, 3)(ids))
        assert isinstance(error, (IndexError, ValueError)), (
            f"emb({ids!r}) on a {num}-row table must raise IndexError, got {error!r}"
        )
        assert str(bad) in str(error) and f"[0, {num})" in str(error), (
            f"the error for id {bad} should name it and the valid range [0, {num}), got "
            f"{type(error).__name__}: {error}"
        )

    def check_not_integers(ids):
        """Ids that are not integers raise a TypeError that says to use integers."""
        error = error_of(lambda: Embedding(10, 3)(ids))
        assert isinstance(error, TypeError) and "integer" in str(error).lower(), (
            f"ids of dtype {np.asarray(getattr(ids, 'data', ids)).dtype} must raise a TypeError "
            f"saying to use integers, got {error!r}"
        )

    def check_accepted(num, ids):
        """Valid ids, the first and last rows and empty batches included, raise nothing."""
        error = error_of(lambda: Embedding(num, 3)(ids))
        assert error is None, (
            f"emb({ids!r}) on a {num}-row table is valid (ids 0..{num - 1}), but raised {error!r}"
        )

    check_refused(65, [1, 70, 3], 70)
    check_not_integers(Tensor([1, 2, 3]))
    check_accepted(65, [0, 64])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_refused, {
        "an id far past the end": (10, [3, 10_000], 10_000),
        "the table size itself in a three-axis array": (7, np.array([[[0, 7], [1, 1]]]), 7),
        "a very negative id": (12, np.array([-500, 2]), -500),
        "a negative id first": (30, [-3, 4, 5], -3),
        "any id of a one-row table but zero": (1, [0, 0, 1], 1),
        "a Tensor holding a bad id": (5, Tensor(np.array([2, 9]), dtype=np.int64), 9),
    })
    hidden_cases(check_not_integers, {
        "a float64 array of whole numbers": np.array([1.0, 2.0]),
        "a list of fractions": [0.5, 1.5],
        "a float32 Tensor of whole numbers in a matrix": Tensor(np.ones((2, 2))),
    })
    hidden_cases(check_accepted, {
        "the last row of a one-row table": (1, [0]),
        "the first and last rows in a matrix": (300, np.array([[0, 299], [299, 0]])),
        "an empty batch with two axes": (4, np.zeros((3, 0), dtype=np.int64)),
        "int8 ids": (100, np.array([0, 99, 50], dtype=np.int8)),
    })
    ### END HIDDEN TESTS


test_unit_embedding_errors()

# %% nbgrader={"grade": true, "grade_id": "test_unit_embedding_as_linear", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_embedding_as_linear():
    """as_linear scores x against every row (x @ weight.T) and trains the same table."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((7, 4)).astype(np.float32)
    emb = Embedding.from_pretrained(table)
    assert emb.weight.data is table or np.shares_memory(emb.weight.data, table), (
        "from_pretrained should wrap the given table, not copy it"
    )
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    logits = emb.as_linear(Tensor(x))
    assert isinstance(logits, Tensor) and logits.shape == (2, 3, 7), (
        f"as_linear of x (2, 3, 4) against a (7, 4) table should give a Tensor (2, 3, 7): one "
        f"score per row; got {type(logits).__name__} {getattr(logits, 'shape', None)}"
    )
    assert np.allclose(logits.data, x @ table.T, atol=1e-5), (
        "as_linear(x) should be x @ weight.T (the dot product of x with every row); the "
        "values differ: did you multiply by weight instead of weight.T?"
    )
    assert logits.dtype == np.float32, f"the logits should stay float32, got {logits.dtype}"
    trained = Embedding(7, 4)
    out = trained.as_linear(Tensor(x))
    assert out.requires_grad, (
        "as_linear records no operation, so no gradient reaches the table: use the Tensor "
        "operations self.weight.T and @, not NumPy on weight.data"
    )
    (out.sum() + trained(np.array([1, 1])).sum()).backward()
    want = np.broadcast_to(x.reshape(-1, 4).sum(0), (7, 4)).copy()
    want[1] += 2  # row 1 was also looked up twice
    assert np.allclose(trained.weight.grad.data, want, atol=1e-4), (
        "a tied table gets the gradient of both uses added: the lookup's rows and the output "
        "layer's x summed over positions"
    )

    def check_tied(values, x, ids):
        """as_linear(x) is one dot product of x with every row (einsum); the table's gradient
        adds the output layer's x, summed over positions, to the lookup's counts."""
        layer = Embedding.from_pretrained(values.copy())
        scores = layer.as_linear(Tensor(x))
        want = np.einsum("...d,vd->...v", x.astype(np.float64), values.astype(np.float64))
        assert isinstance(scores, Tensor) and scores.shape == want.shape, (
            f"as_linear of x {x.shape} against a {values.shape} table should give a Tensor "
            f"{want.shape}, got {type(scores).__name__} {getattr(scores, 'shape', None)}"
        )
        assert np.allclose(scores.data, want, atol=1e-4), (
            "as_linear(x) should be x @ weight.T (the dot product of x with every row)"
        )
        assert scores.dtype == np.float32, f"the logits should stay float32, got {scores.dtype}"
        (scores.sum() + layer(ids).sum()).backward()
        grad = np.broadcast_to(x.reshape(-1, values.shape[1]).sum(0), values.shape).copy()
        grad += np.bincount(np.ravel(ids), minlength=len(values))[:, None]
        assert np.allclose(layer.weight.grad.data, grad, atol=1e-4), (
            "a tied table gets the gradient of both uses added: the lookup's rows and the "
            "output layer's x summed over positions"
        )

    check_tied(table, x, np.array([1, 1]))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(1104)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    hidden_cases(check_tied, {
        "a single vector": (normal(6, 3), normal(3), np.array([0, 5])),
        "a batch of four axes": (normal(5, 2), normal(2, 2, 3, 2), np.array([[4, 4], [0, 1]])),
        "a table of one row": (normal(1, 4), normal(3, 4), np.zeros(5, dtype=np.int64)),
        "more dimensions than rows": (normal(3, 9), normal(4, 9), np.array([2, 2, 2, 0])),
        "a larger vocabulary": (normal(50, 8), normal(2, 5, 8), rng.integers(0, 50, (3, 4))),
    })
    ### END HIDDEN TESTS


test_unit_embedding_as_linear()

# %% [markdown]
# ## Part 3: learned positions
#
# GPT-2 and nanoGPT give each *position* `0, 1, ..., max_len - 1` its own learned vector,
# stored in a second table of shape `(max_len, D)`, and add it to the token vectors:
#
# ```
# x = token_embedding(ids)            # (B, T, D)
#   + positional_embedding(T)         # (T, D), broadcast over the batch
# ```
#
# The lookup for positions `0..T-1` is a plain slice, `weight[0:T]`: no ids to check, and
# module 01's `GetItem` already has a derivative (slices select each row at most once, so
# no scatter-add is needed). Two details:
#
# - **`offset`.** When a model generates text one token at a time with a cache of earlier
#   keys and values (module 18), the new token is at position `offset`, not 0. `forward(1,
#   offset=k)` must return row `k`.
# - **The hard limit.** A learned table has no row for position `max_len`: a GPT trained
#   with a context of 64 cannot look at 65 tokens. Raise a `ValueError` that names both
#   numbers, `seq_len + offset` and `max_len`, and says to crop the context.
#
# Initialize the table like `Embedding`'s, from N(0, 1).

# %% nbgrader={"grade": false, "grade_id": "positional-embedding", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class PositionalEmbedding(Module):
    """Learned positions: a (max_len, embedding_dim) table whose rows 0..T-1 are returned.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> positions = PositionalEmbedding(16, 8)
    >>> positions(5).shape, positions(3, offset=13).shape  # rows 0..4, then 13..15
    ((5, 8), (3, 8))
    >>> bool((positions(1, offset=2).data == positions.weight.data[2]).all())
    True
    """

    def __init__(self, max_len, embedding_dim):
        super().__init__()
        for label, value in (("max_len", max_len), ("embedding_dim", embedding_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(
                    f"PositionalEmbedding: {label} must be a positive integer, got {value!r}"
                )
        self.max_len = int(max_len)
        self.embedding_dim = int(embedding_dim)
        ### BEGIN SOLUTION
        shape = (self.max_len, self.embedding_dim)
        self.weight = Parameter(default_generator().standard_normal(shape, dtype=np.float32))
        ### END SOLUTION

    def forward(self, seq_len, offset=0):
        """The vectors of positions offset .. offset + seq_len - 1, shape (seq_len, dim)."""
        ### BEGIN SOLUTION
        seq_len, offset = int(seq_len), int(offset)
        if seq_len < 0 or offset < 0:
            raise ValueError(
                f"PositionalEmbedding: seq_len ({seq_len}) and offset ({offset}) must be >= 0"
            )
        if seq_len + offset > self.max_len:
            raise ValueError(
                f"PositionalEmbedding: positions up to seq_len + offset = {seq_len + offset} "
                f"requested, but the table has max_len = {self.max_len} rows. A learned "
                f"table has no vector beyond position {self.max_len - 1}: crop the input to "
                f"the last {self.max_len} tokens, or build the model with a larger max_len."
            )
        return self.weight[offset:offset + seq_len]
        ### END SOLUTION

    def extra_repr(self):
        return f"{self.max_len}, {self.embedding_dim}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_positional_embedding", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_positional_embedding():
    """Rows offset..offset+T-1 of a learned table; positions past max_len are refused."""
    pos = PositionalEmbedding(16, 4)
    w = pos.weight
    assert isinstance(w, Parameter) and w.shape == (16, 4) and w.dtype == np.float32, (
        f"PositionalEmbedding(16, 4).weight should be a float32 Parameter of shape (16, 4), "
        f"got {getattr(w, 'shape', None)}"
    )
    out = pos(5)
    assert out.shape == (5, 4), f"pos(5) should have shape (5, 4), got {out.shape}"
    assert np.array_equal(out.data, w.data[:5]), "pos(5) should be rows 0..4 of the table"
    step = pos(1, offset=9)
    assert np.array_equal(step.data, w.data[9:10]), (
        "pos(1, offset=9) is the vector of position 9 (generating the 10th token): return "
        "rows offset .. offset + seq_len - 1"
    )
    assert pos(16).shape == (16, 4) and pos(3, offset=13).shape == (3, 4), (
        "the whole table (16 positions) must be usable"
    )
    expect_error("pos(10, offset=7), positions up to 16 in a 16-row table",
                 lambda: pos(10, offset=7), ValueError, ["17", "16"],
                 "the slice would silently stop at row 15: compare seq_len + offset, not "
                 "seq_len alone, with max_len, and name both numbers")
    x = Tensor(np.ones((2, 5, 4), dtype=np.float32))
    (x + pos(5)).sum().backward()
    want = np.zeros((16, 4), dtype=np.float32)
    want[:5] = 2  # two sequences in the batch use positions 0..4
    assert w.grad is not None and np.allclose(w.grad.data, want), (
        "after (x + pos(5)).sum().backward() with a batch of 2, rows 0..4 of the table should "
        "have gradient 2 and the rest 0: return a slice of the Parameter (a Tensor op), not "
        "a new Tensor of its data"
    )

    def check_positions(max_len, dim, seq_len, offset, batch):
        """pos(seq_len, offset) is rows offset .. offset + seq_len - 1, and a batch using them
        sends `batch` to each of those rows' gradients, 0 to the others."""
        layer = PositionalEmbedding(max_len, dim)
        table = layer.weight
        out = layer(seq_len, offset=offset)
        rows = np.take(table.data, np.arange(offset, offset + seq_len), axis=0)
        assert out.shape == (seq_len, dim) and np.array_equal(out.data, rows), (
            f"pos({seq_len}, offset={offset}) on a ({max_len}, {dim}) table should be its rows "
            f"{offset}..{offset + seq_len - 1}, shape ({seq_len}, {dim}); got {out.shape}"
        )
        if seq_len:
            (Tensor(np.ones((batch, seq_len, dim), dtype=np.float32)) + out).sum().backward()
            want = np.zeros((max_len, dim), dtype=np.float32)
            want[offset:offset + seq_len] = batch
            assert table.grad is not None and np.allclose(table.grad.data, want), (
                f"a batch of {batch} using positions {offset}..{offset + seq_len - 1} should give "
                f"those rows gradient {batch} and the others 0: return a slice of the Parameter"
            )

    def check_too_far(max_len, seq_len, offset):
        """Positions past the table raise a ValueError naming seq_len + offset and max_len."""
        layer = PositionalEmbedding(max_len, 2)
        expect_error(f"pos({seq_len}, offset={offset}) on a {max_len}-row table",
                     lambda: layer(seq_len, offset=offset), ValueError,
                     [str(seq_len + offset), str(max_len)],
                     "compare seq_len + offset, not seq_len alone, with max_len, and name both")

    check_positions(16, 4, 5, 0, 2)
    check_too_far(16, 10, 7)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_positions, {
        "the last position alone": (12, 3, 1, 11, 3),
        "every position of the table": (7, 2, 7, 0, 1),
        "a middle window in a batch": (40, 5, 6, 17, 4),
        "a table of one position": (1, 8, 1, 0, 2),
        "no positions": (9, 3, 0, 4, 1),
    })
    hidden_cases(check_too_far, {
        "one position too many": (12, 13, 0),
        "an offset at the end": (20, 1, 20),
        "a long prompt at an offset": (100, 64, 40),
    })
    ### END HIDDEN TESTS


test_unit_positional_embedding()

# %% [markdown]
# ## Part 4: sinusoidal encodings
#
# The original Transformer (Vaswani et al., 2017) uses no table to learn. Position `pos`
# gets a vector of waves at `D/2` frequencies, a sine and a cosine each:
#
# ```
# PE[pos, 2i]     = sin(pos * w_i)
# PE[pos, 2i + 1] = cos(pos * w_i)        with  w_i = 1 / 10000 ** (2i / D),  i = 0 .. D/2 - 1
# ```
#
# **Convention**: sines on the even dimensions, cosines on the odd ones, interleaved, as in
# the paper and in most tutorials. (Rotary embeddings, Part 5, use the other common layout:
# first half, second half.) If `D` is odd, the last even column is a sine with no cosine
# partner.
#
# The frequencies go from `w_0 = 1` (a period of about 6.3 positions) down to about
# `1/10000` (a period of about 63,000 positions): like the hands of a clock, fast waves
# tell neighbouring positions apart and slow waves tell far ones apart.
#
# **Why sines and cosines, together?** Because shifting the position by `k` is a
# *rotation* of each (sin, cos) pair by the angle `k * w_i`:
#
# ```
# sin((pos + k) w) =  sin(pos w) cos(k w) + cos(pos w) sin(k w)
# cos((pos + k) w) =  cos(pos w) cos(k w) - sin(pos w) sin(k w)
# ```
#
# So `PE[pos + k]` is a fixed linear function of `PE[pos]`, the same for every `pos`, and
# the dot product `PE[pos] . PE[pos + k] = sum_i cos(k * w_i)` depends only on the offset
# `k`. The test checks exactly that. Nothing limits the length either: position 10,000 has
# an encoding as well as position 5.
#
# Compute the angles in float64 (at `pos = 5000`, float32 has only about 3 correct decimal
# places of the angle left) and return the finished table as **float32**, shape
# `(max_len, dim)`.

# %% nbgrader={"grade": false, "grade_id": "sinusoidal", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def sinusoidal_encoding(max_len, dim, base=10000.0):
    """PE[pos, 2i] = sin(pos / base**(2i/dim)), PE[pos, 2i+1] = cos(same); float32.

    >>> table = sinusoidal_encoding(4, 6)
    >>> table.shape, table.dtype
    ((4, 6), dtype('float32'))
    >>> table[0].tolist()  # position 0: sin 0 = 0, cos 0 = 1
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    >>> table[1, :2].round(4)  # position 1, the fastest pair: sin 1, cos 1
    array([0.8415, 0.5403], dtype=float32)
    """
    ### BEGIN SOLUTION
    position = np.arange(max_len, dtype=np.float64)[:, None]
    frequencies = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = position * frequencies  # (max_len, ceil(dim / 2))
    table = np.empty((max_len, dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return table.astype(np.float32)
    ### END SOLUTION


class SinusoidalPositionalEncoding(Module):
    """Fixed sinusoidal positions (Vaswani et al.): no parameters, forward(seq_len, offset).

    >>> pe = SinusoidalPositionalEncoding(max_len=32, dim=8)
    >>> pe, list(pe.parameters())  # fixed: nothing to learn
    (SinusoidalPositionalEncoding(32, 8), [])
    >>> pe(4).shape, bool((pe(1, offset=3).data == pe.table[3]).all())
    ((4, 8), True)
    """

    def __init__(self, max_len, dim, base=10000.0):
        super().__init__()
        self.max_len, self.dim = int(max_len), int(dim)
        self.table = sinusoidal_encoding(self.max_len, self.dim, base)  # not a Parameter

    def forward(self, seq_len, offset=0):
        if seq_len + offset > self.max_len:
            raise ValueError(
                f"SinusoidalPositionalEncoding: seq_len + offset = {seq_len + offset} is "
                f"beyond the precomputed max_len = {self.max_len}; build it with a larger "
                "max_len (the formula works for any position)."
            )
        return Tensor(self.table[offset:offset + seq_len])

    def extra_repr(self):
        return f"{self.max_len}, {self.dim}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_sinusoidal", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_sinusoidal():
    """Sines on even dims, cosines on odd, float32; the dot product depends only on the offset."""
    pe = sinusoidal_encoding(50, 8)
    assert isinstance(pe, np.ndarray) and pe.shape == (50, 8), (
        f"sinusoidal_encoding(50, 8) should be an array of shape (50, 8), got {np.shape(pe)}"
    )
    assert pe.dtype == np.float32, (
        f"the table should be float32, got {pe.dtype}: compute in float64, then .astype(np.float32)"
    )
    assert np.allclose(pe[0, 0::2], 0) and np.allclose(pe[0, 1::2], 1), (
        f"position 0 should be [0, 1, 0, 1, ...] (sin 0 on even dims, cos 0 on odd), got "
        f"{pe[0]}: interleave, table[:, 0::2] = sin and table[:, 1::2] = cos"
    )
    want = [np.sin(3.0), np.cos(3.0), np.sin(3.0 / 10), np.cos(3.0 / 10),
            np.sin(3.0 / 100), np.cos(3.0 / 100), np.sin(3.0 / 1000), np.cos(3.0 / 1000)]
    assert np.allclose(pe[3], want, atol=1e-6), (
        f"position 3 with D = 8 should be sin/cos of 3 * w_i with w_i = 1/10000**(2i/8) = "
        f"1, 1/10, 1/100, 1/1000, interleaved: expected {np.round(want, 4)}, got "
        f"{np.round(pe[3], 4)}"
    )
    dots = [float(pe[p] @ pe[p + 5]) for p in (0, 7, 20, 40)]
    assert np.allclose(dots, dots[0], atol=1e-5), (
        f"PE[p] . PE[p + 5] should be the same for every p (sum of cos(5 w_i)), got {dots}: "
        "each sin/cos pair must share its frequency"
    )
    odd = sinusoidal_encoding(4, 5)
    last = np.sin(np.arange(4) / 10000 ** (4 / 5))
    assert odd.shape == (4, 5) and np.allclose(odd[:, 4], last), (
        "with an odd dim (5) the last column is the sine of the third frequency, 1/10000**(4/5)"
    )
    layer = SinusoidalPositionalEncoding(50, 8)
    assert np.array_equal(layer(4, offset=2).data, pe[2:6]) and not list(layer.parameters()), (
        "the layer returns rows offset..offset+T-1 of the fixed table and has no parameters"
    )

    def check_table(max_len, dim, base, positions):
        """Rows `positions` of sinusoidal_encoding(max_len, dim, base), one value at a time in
        float64; PE[p] . PE[p + k] the same for every p."""
        got = sinusoidal_encoding(max_len, dim, base)
        assert isinstance(got, np.ndarray) and got.shape == (max_len, dim), (
            f"sinusoidal_encoding({max_len}, {dim}) should be an array ({max_len}, {dim}), got "
            f"{np.shape(got)}"
        )
        assert got.dtype == np.float32, f"the table should be float32, got {got.dtype}"
        for pos in positions:
            want = [np.sin(pos / base ** (j / dim)) if j % 2 == 0 else
                    np.cos(pos / base ** ((j - 1) / dim)) for j in range(dim)]
            assert np.allclose(got[pos], want, atol=2e-6), (
                f"position {pos} with D = {dim}, base {base:g}: expected "
                f"{np.round(want, 4)[:6]}..., got {np.round(got[pos], 4)[:6]}...: sin on even "
                "dims, cos on odd, w_i = 1/base**(2i/D), the angles computed in float64"
            )
        k = max_len // 3
        dots = [float(got[p].astype(np.float64) @ got[p + k]) for p in (0, k // 2, max_len - k - 1)]
        assert np.allclose(dots, dots[0], atol=1e-4), (
            f"PE[p] . PE[p + {k}] should not depend on p, got {dots}"
        )

    check_table(50, 8, 10000.0, [0, 3, 49])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_table, {
        "an odd width": (30, 7, 10000.0, [0, 1, 29]),
        "a width of two": (20, 2, 10000.0, [5, 19]),
        "far positions, where float32 angles go wrong": (3000, 16, 10000.0, [1234, 2999]),
        "another base": (40, 10, 500.0, [2, 39]),
        "a wide table": (10, 64, 10000.0, [1, 9]),
    })
    ### END HIDDEN TESTS


test_unit_sinusoidal()

# %% [markdown]
# ## Part 5: rotary position embeddings (RoPE)
#
# Learned and sinusoidal positions are *added* to the token vectors at the input, and the
# network must learn to untangle "what" from "where". RoPE (Su et al., 2021) puts the
# position where attention uses it: it **rotates** every query and key vector, inside each
# attention head, by angles proportional to the token's position. The score between a query
# at position `m` and a key at position `n` is a dot product, and rotations have the
# property
#
# ```
# (R(m θ) q) . (R(n θ) k) = q . (R((n - m) θ) k)
# ```
#
# so the score depends on the contents and on the **distance** `n - m` only, never on the
# absolute positions. Every recent open model family (Llama, Qwen, Mistral, Gemma) uses it.
#
# **The rotation.** Split a head vector of even size `d` into `d/2` pairs and rotate pair
# `i` by the angle `pos * θ_i`, with `θ_i = 1 / base ** (2i / d)`, `base = 10000` (the same
# frequencies as Part 4). Which coordinates form a pair is a convention, and it must match
# the checkpoints you load. Llama and Qwen as published on Hugging Face pair coordinate `i`
# with coordinate `i + d/2` (first half with second half):
#
# ```
# x = [x1 | x2]                      x1 = x[..., :d/2],  x2 = x[..., d/2:]
# rotate_half(x) = [-x2 | x1]
# freqs[pos, i] = pos * θ_i            (d/2 angles per position)
# emb = [freqs | freqs]               (d angles: the pair's angle, twice)
# cos, sin = cos(emb), sin(emb)       (seq_len, d) each
# rope(x) = x * cos + rotate_half(x) * sin
# ```
#
# Check it on one pair `(a, b) = (x1_i, x2_i)` with angle `φ`: the first half becomes
# `a cos φ - b sin φ`, the second `b cos φ + a sin φ`, which is the rotation of `(a, b)` by
# `φ`.
#
# **The frequencies, `rope_frequencies(head_dim, base, scaling=None)`**, return the `d/2`
# values `θ_i = base ** (-2i / d)` in float64. Checkpoints choose `base` (their
# `rope_theta`): 10,000 for Llama 2, 500,000 for Llama 3, 1,000,000 for Qwen2.5.
#
# Llama 3.1 was trained on 8,192 positions and then stretched to 128K by **slowing its
# slow frequencies**. Its `config.json` carries `rope_scaling = {"rope_type": "llama3",
# "factor": f, "low_freq_factor": lo, "high_freq_factor": hi,
# "original_max_position_embeddings": L}`; with `scaling` that dict, each frequency's
# wavelength `w_i = 2π / θ_i` picks its band:
#
# - `w_i < L / hi` (fast, short waves): unchanged, `θ_i`;
# - `w_i > L / lo` (slow, long waves): divided by the factor, `θ_i / f`;
# - in between, a blend: `(1 - s) θ_i / f + s θ_i` with `s = (L / w_i - lo) / (hi - lo)`.
#
# Fast frequencies tell neighbouring tokens apart and must stay as trained; slow ones
# measure long distances, and dividing them by `f` lets `f` times more positions fit in
# their turn.
#
# **`RotaryEmbedding(head_dim, max_len, base, scaling=None)`** precomputes `cos` and `sin`
# for positions `0 .. max_len - 1` once (angles in float64, tables stored as float32), and
# `cos_sin(seq_len, offset=0)` returns the rows `offset .. offset + seq_len - 1` of both:
# a token generated alone at position `k` must be rotated exactly like position `k` of the
# full sequence. Slices are views: no copy per call. A server decodes many sequences at
# once, each at its own length, so `offset` may also be an array of one start per sequence,
# `(B,)`: then return the rows of positions `offset[b] + t` as `(B, 1, T, d)` arrays (the
# `1` broadcasts over the heads; fancy indexing with a `(B, T)` array of positions gathers
# them). `forward(x, offset=0)` is a shortcut for `apply_rotary(x, *self.cos_sin(T, offset))`.
#
# **A fused operation.** `apply_rotary` could be built from slicing, negation and
# concatenation, but module 01 has no concatenation, and it would record five operations
# per call, twice per layer. Write it as one `RotaryFunction(x, cos=..., sin=...)`. Its
# derivative: `cos` and `sin` are constants (parameters of the op), so only `x` gets a
# gradient. `x * cos` contributes `grad * cos`. For `rotate_half(x) * sin`, the gradient
# first becomes `grad * sin`, then goes back through `rotate_half`, a fixed linear map
# whose adjoint (transpose) is needed: `rotate_half` sends `(x1, x2)` to `(-x2, x1)`, and
# its adjoint sends `(g1, g2)` to `(g2, -g1)`, which is `-rotate_half(g)`. A rotation's
# adjoint is the rotation by the opposite angle, as it should be:
#
# ```
# grad_x = grad * cos - rotate_half(grad * sin)
# ```
#
# `rotate_half` works on NumPy arrays (it is used inside the operation). Write it without
# temporary copies: fill one new array with `np.negative(x2, out=...)` and a copy of `x1`.
# Cast `cos` and `sin` to `x`'s dtype inside `forward`, so a float64 input (gradient
# checks) does not meet float32 tables and a float32 input stays float32.

# %% nbgrader={"grade": false, "grade_id": "rotary", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def rotate_half(x):
    """[x1 | x2] -> [-x2 | x1] on the last axis of an ndarray (Llama/Qwen's RoPE pairing).

    >>> rotate_half(np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    array([-3., -4.,  1.,  2.], dtype=float32)
    >>> rotate_half(np.arange(12.0).reshape(2, 3, 2))[1, 2].tolist()
    [-11.0, 10.0]
    """
    ### BEGIN SOLUTION
    if isinstance(x, Tensor):
        raise TypeError(
            "rotate_half works on NumPy arrays inside RotaryFunction; to rotate a Tensor "
            "differentiably call apply_rotary(x, cos, sin)"
        )
    x = np.asarray(x)
    if x.shape[-1] % 2:
        raise ShapeError(f"rotate_half needs an even last axis, got shape {x.shape}")
    half = x.shape[-1] // 2
    out = np.empty_like(x)
    np.negative(x[..., half:], out=out[..., :half])
    out[..., half:] = x[..., :half]
    return out
    ### END SOLUTION


def rope_frequencies(head_dim, base=10000.0, scaling=None):
    """The head_dim/2 angles per position theta_i = base**(-2i/head_dim), float64; with
    Llama 3's rescaled bands when `scaling` is its dict (rope_type "llama3").

    >>> rope_frequencies(8).tolist()  # theta_i = 10000**(-2i/8)
    [1.0, 0.1, 0.01, 0.001]
    >>> llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    >>> rope_frequencies(8, scaling=llama3).round(6).tolist()  # slow bands / 8
    [1.0, 0.013042, 0.00125, 0.000125]
    """
    ### BEGIN SOLUTION
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    inv_freq = 1.0 / base**exponents  # theta_i, (d/2,)
    if scaling is None:
        return inv_freq
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelength = 2 * np.pi / inv_freq
    smooth = (old_len / wavelength - low) / (high - low)  # 0 at the slow end, 1 at the fast
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = np.where(wavelength < old_len / high, inv_freq, blended)  # fast: unchanged
    return np.where(wavelength > old_len / low, inv_freq / factor, out)  # slow: / factor
    ### END SOLUTION


class RotaryEmbedding(Module):
    """RoPE tables for heads of size head_dim: cos/sin of pos * theta_i, float32.

    >>> rope = RotaryEmbedding(head_dim=4, max_len=16)
    >>> rope
    RotaryEmbedding(head_dim=4, max_len=16, base=10000)
    >>> cos, sin = rope.cos_sin(3)  # positions 0, 1, 2
    >>> cos.shape, cos.dtype, cos[0].tolist(), sin[0].tolist()
    ((3, 4), dtype('float32'), [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
    >>> x = Tensor(np.ones((1, 2, 3, 4), dtype=np.float32))  # (B, heads, T, head_dim)
    >>> y = rope(x)
    >>> y.shape, bool((y.data[:, :, 0] == 1).all())  # position 0 is not rotated
    ((1, 2, 3, 4), True)
    >>> rope.cos_sin(2, offset=np.array([0, 5]))[0].shape  # one offset per sequence
    (2, 1, 2, 4)
    """

    def __init__(self, head_dim, max_len=2048, base=10000.0, scaling=None):
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) \
                or head_dim < 2 or head_dim % 2:
            raise ValueError(
                f"RotaryEmbedding: head_dim must be a positive even integer (coordinates are "
                f"rotated in pairs), got {head_dim!r}"
            )
        self.head_dim, self.max_len, self.base = int(head_dim), int(max_len), float(base)
        self.scaling = scaling
        ### BEGIN SOLUTION
        inv_freq = rope_frequencies(self.head_dim, self.base, scaling)  # theta_i, (d/2,)
        freqs = np.arange(self.max_len, dtype=np.float64)[:, None] * inv_freq  # (max_len, d/2)
        emb = np.concatenate((freqs, freqs), axis=-1)  # (max_len, d)
        self.cos_cached = np.cos(emb).astype(np.float32)
        self.sin_cached = np.sin(emb).astype(np.float32)
        ### END SOLUTION

    def cos_sin(self, seq_len, offset=0):
        """(cos, sin) float32 for positions offset..offset + seq_len - 1: (seq_len, head_dim)
        for an int offset, (B, 1, seq_len, head_dim) for one offset per sequence (B,)."""
        ### BEGIN SOLUTION
        seq_len = int(seq_len)
        start = np.asarray(offset, dtype=np.int64)
        if seq_len < 0 or start.ndim > 1 or (start.size and start.min() < 0):
            raise ValueError(
                f"RotaryEmbedding: seq_len ({seq_len}) must be >= 0 and offset ({offset}) an "
                "int >= 0 or one int >= 0 per sequence"
            )
        last = int(start.max(initial=0)) + seq_len
        if last > self.max_len:
            raise ValueError(
                f"RotaryEmbedding: positions up to seq_len + offset = {last} requested, but "
                f"the tables were built for max_len = {self.max_len}: build RotaryEmbedding "
                "with a larger max_len"
            )
        if start.ndim == 0:
            a = int(start)
            return self.cos_cached[a:a + seq_len], self.sin_cached[a:a + seq_len]
        positions = start[:, None] + np.arange(seq_len)  # (B, T)
        return self.cos_cached[positions][:, None], self.sin_cached[positions][:, None]
        ### END SOLUTION

    def forward(self, x, offset=0):
        """x (..., T, head_dim) rotated for positions offset .. offset + T - 1."""
        cos, sin = self.cos_sin(x.shape[-2], offset)
        return apply_rotary(x, cos, sin)

    def extra_repr(self):
        scaled = "" if self.scaling is None else f", scaling={self.scaling.get('rope_type')}"
        return f"head_dim={self.head_dim}, max_len={self.max_len}, base={self.base:g}{scaled}"


# %% nbgrader={"grade": false, "grade_id": "rotary-function", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class RotaryFunction(Function):
    """x * cos + rotate_half(x) * sin: RoPE on the last axis of x (..., T, d)"""

    @staticmethod
    def forward(x, cos, sin):
        ### BEGIN SOLUTION
        cos = cos.astype(x.dtype, copy=False)
        sin = sin.astype(x.dtype, copy=False)
        out = rotate_half(x)
        out *= sin
        out += x * cos
        return out
        ### END SOLUTION


@derivative(RotaryFunction)
def rotary_backward(ctx, grad):
    """d rope(x): grad * cos - rotate_half(grad * sin); cos and sin are constants"""
    ### BEGIN SOLUTION
    x = ctx.inputs[0]
    cos = ctx.params["cos"].astype(x.dtype, copy=False)
    sin = ctx.params["sin"].astype(x.dtype, copy=False)
    grad_x = grad * cos
    grad_x -= rotate_half(grad * sin)
    return (grad_x,)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "apply-rotary", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def apply_rotary(x, cos, sin):
    """RoPE, x * cos + rotate_half(x) * sin, for x (..., T, d), cos and sin (T, d) or
    (B, 1, T, d).

    >>> rope = RotaryEmbedding(head_dim=2, max_len=8)
    >>> cos, sin = rope.cos_sin(3)
    >>> x = Tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])  # one pair, positions 0-2
    >>> apply_rotary(x, cos, sin)  # rotated by 0, 1 and 2 radians: (cos p, sin p)
    Tensor([[ 1.    ,  0.    ],
            [ 0.5403,  0.8415],
            [-0.4161,  0.9093]])
    """
    if not isinstance(x, Tensor):
        x = Tensor(x)
    cos = cos.data if isinstance(cos, Tensor) else np.asarray(cos)
    sin = sin.data if isinstance(sin, Tensor) else np.asarray(sin)
    if cos.shape != sin.shape or cos.ndim < 1 or cos.shape[-1] != x.shape[-1] or (
        cos.ndim >= 2 and cos.shape[-2] not in (1, x.shape[-2])
    ):
        raise ShapeError(
            f"apply_rotary: x has shape {x.shape}, cos {cos.shape} and sin {sin.shape}: "
            f"cos and sin must be (T, d) = ({x.shape[-2] if x.ndim > 1 else '?'}, "
            f"{x.shape[-1]}) or (B, 1, T, d), e.g. rotary.cos_sin(T, offset)"
        )
    return RotaryFunction.apply(x, cos=cos, sin=sin)


# %% [markdown]
# ### Tests: tables, rotation, relative positions, derivative
#
# The reference below writes the Hugging Face formula out by hand, pair by pair, with
# explicit angles: your vectorized version must agree with it.

# %% nbgrader={"grade": true, "grade_id": "test_unit_rotary_tables", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_rotary_tables():
    """rotate_half swaps the halves with a sign; cos/sin tables are [freqs | freqs], float32."""
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 6)
    got = rotate_half(x)
    assert np.array_equal(got, [[-4, -5, -6, 1, 2, 3]]), (
        f"rotate_half([1, 2, 3, 4, 5, 6]) should be [-4, -5, -6, 1, 2, 3] (-second half, "
        f"then first half), got {np.asarray(got).tolist()}"
    )
    assert got.dtype == np.float32 and not np.shares_memory(got, x), (
        "rotate_half should return a new float32 array and leave x alone"
    )
    rope = RotaryEmbedding(8, max_len=32)
    cos, sin = rope.cos_sin(5)
    assert cos.shape == (5, 8) and sin.shape == (5, 8), (
        f"cos_sin(5) for head_dim 8 should give two (5, 8) arrays, got {cos.shape}, {sin.shape}"
    )
    assert cos.dtype == np.float32 and sin.dtype == np.float32, (
        f"the tables should be float32, got {cos.dtype}, {sin.dtype}"
    )
    theta = 1.0 / 10000 ** (np.arange(0, 8, 2) / 8)  # 1, 0.1, 0.01, 0.001
    angles = np.arange(5)[:, None] * np.concatenate((theta, theta))
    ok = np.allclose(cos, np.cos(angles), atol=1e-6) and np.allclose(sin, np.sin(angles), atol=1e-6)
    assert ok, (
        "cos_sin should hold cos/sin of pos * theta_i with theta_i = 1/10000**(2i/d), the d/2 "
        "angles written twice: emb = concat(freqs, freqs) (not interleaved). For head_dim 8, "
        f"position 1: expected cos {[round(float(v), 4) for v in np.cos(angles[1])]}, got "
        f"{[round(float(v), 4) for v in cos[1]]}"
    )
    cos_k, sin_k = rope.cos_sin(2, offset=7)
    want_k = np.cos(np.arange(7, 9)[:, None] * np.concatenate((theta, theta)))
    assert np.allclose(cos_k, want_k, atol=1e-6) and sin_k.shape == (2, 8), (
        "cos_sin(2, offset=7) should hold the rows of positions 7 and 8"
    )
    try:
        rope.cos_sin(30, offset=5)
    except ValueError as error:
        assert "35" in str(error) and "32" in str(error), (
            f"the error should name seq_len + offset (35) and max_len (32): {error}"
        )
    else:
        raise AssertionError("cos_sin(30, offset=5) with max_len 32 must raise ValueError")

    def check_rotate(x):
        """rotate_half(x) is [-second half | first half] of the last axis, a new array of x's
        dtype."""
        half = x.shape[-1] // 2
        want = np.concatenate((-x[..., half:], x[..., :half]), axis=-1)
        got = rotate_half(x)
        assert np.shape(got) == x.shape and np.array_equal(got, want), (
            f"rotate_half of an array {x.shape} should be [-x2 | x1] on its last axis, got "
            f"{np.shape(got)} {np.asarray(got).ravel()[:4]}... instead of {want.ravel()[:4]}..."
        )
        assert got.dtype == x.dtype and not np.shares_memory(got, x), (
            f"rotate_half should return a new {x.dtype} array and leave x alone"
        )

    def check_tables(head_dim, max_len, base, seq_len, offset):
        """cos_sin(seq_len, offset) against angles pos * base**(-2i/d), i < d/2, written twice."""
        rope = RotaryEmbedding(head_dim, max_len=max_len, base=base)
        cos, sin = rope.cos_sin(seq_len, offset=offset)
        half = [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]
        angles = np.array([[p * f for f in half + half] for p in range(offset, offset + seq_len)])
        assert np.shape(cos) == (seq_len, head_dim) and np.shape(sin) == (seq_len, head_dim), (
            f"cos_sin({seq_len}, offset={offset}) for head_dim {head_dim} should give two "
            f"({seq_len}, {head_dim}) arrays, got {np.shape(cos)}, {np.shape(sin)}"
        )
        assert cos.dtype == np.float32 and sin.dtype == np.float32, (
            f"the tables should be float32, got {cos.dtype}, {sin.dtype}"
        )
        ok = np.allclose(cos, np.cos(angles.reshape(cos.shape)), atol=1e-6) and np.allclose(
            sin, np.sin(angles.reshape(sin.shape)), atol=1e-6)
        assert ok, (
            f"cos_sin should hold cos/sin of pos * theta_i with theta_i = 1/{base:g}**(2i/d), "
            "the d/2 angles written twice (concat(freqs, freqs)), computed in float64"
        )

    def check_past_end(max_len, seq_len, offset):
        """Positions past max_len raise a ValueError naming seq_len + offset and max_len."""
        rope = RotaryEmbedding(4, max_len=max_len)
        expect_error(f"cos_sin({seq_len}, offset={offset}) with max_len {max_len}",
                     lambda: rope.cos_sin(seq_len, offset=offset), ValueError,
                     [str(seq_len + offset), str(max_len)],
                     "compare seq_len + offset with max_len, and name both")

    check_rotate(x)
    check_tables(8, 32, 10000.0, 5, 0)
    check_past_end(32, 30, 5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(1107)
    hidden_cases(check_rotate, {
        "a float64 matrix": rng.standard_normal((3, 10)),
        "a batch of four axes": rng.standard_normal((2, 3, 4, 6)).astype(np.float32),
        "a width of two": np.array([[1.5, -2.0]], dtype=np.float32),
        "a single vector": np.arange(12, dtype=np.float32),
    })
    hidden_cases(check_tables, {
        "a head of two": (2, 10, 10000.0, 10, 0),
        "Llama three's base": (16, 64, 500000.0, 4, 60),
        "a wide head deep into the table": (128, 4096, 1000000.0, 3, 4000),
        "the last row alone": (6, 9, 10000.0, 1, 8),
        "a small base": (10, 20, 100.0, 20, 0),
    })
    hidden_cases(check_past_end, {
        "one position too many": (16, 17, 0),
        "an offset at the end": (8, 1, 8),
        "a long prompt at an offset": (64, 40, 30),
    })
    ### END HIDDEN TESTS


test_unit_rotary_tables()


# %% nbgrader={"grade": true, "grade_id": "test_unit_rope_scaling_and_offsets", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_rope_scaling_and_offsets():
    """Llama 3's bands: fast kept, slow divided, middle blended; one offset per sequence."""
    plain = rope_frequencies(16, 10000.0)
    want = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    assert plain.shape == (8,) and np.allclose(plain, want, rtol=1e-12), (
        f"rope_frequencies(16) should be base ** (-2i / 16) for i = 0..7, {want}, got {plain}"
    )
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    scaled = rope_frequencies(16, 10000.0, llama3)
    wavelength = 2 * np.pi / want
    fast, slow = wavelength < 64 / 4, wavelength > 64 / 1
    mid = ~fast & ~slow
    assert fast.any() and slow.any() and mid.any()  # the test covers all three bands
    assert np.allclose(scaled[fast], want[fast], rtol=1e-9), (
        f"fast frequencies (wavelength below L / high_freq_factor) stay as they are: expected "
        f"{want[fast]}, got {scaled[fast]}"
    )
    assert np.allclose(scaled[slow], want[slow] / 8, rtol=1e-9), (
        f"slow frequencies (wavelength above L / low_freq_factor) are divided by factor 8: "
        f"expected {want[slow] / 8}, got {scaled[slow]}"
        + (" (left unscaled)" if np.allclose(scaled[slow], want[slow]) else "")
    )
    s = (64 / wavelength[mid] - 1) / 3
    assert np.allclose(scaled[mid], (1 - s) * want[mid] / 8 + s * want[mid], rtol=1e-9), (
        "the middle band blends (1 - s) * theta / factor + s * theta with "
        "s = (L / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)"
    )
    rope = RotaryEmbedding(16, max_len=64, scaling=llama3)
    cos, _ = rope.cos_sin(3, offset=5)
    angles = np.arange(5, 8)[:, None] * np.concatenate((scaled, scaled))
    assert np.allclose(cos, np.cos(angles), atol=1e-6), (
        "RotaryEmbedding(..., scaling=...) should build its tables from rope_frequencies with "
        "the scaling"
    )
    cos_b, sin_b = rope.cos_sin(2, offset=np.array([0, 9, 4]))
    assert cos_b.shape == (3, 1, 2, 16) and sin_b.shape == (3, 1, 2, 16), (
        f"cos_sin(2, offset=[0, 9, 4]) should give (B, 1, T, d) = (3, 1, 2, 16) tables, one "
        f"start per sequence, got {cos_b.shape}"
    )
    for b, start in enumerate((0, 9, 4)):
        one, _ = rope.cos_sin(2, offset=start)
        assert np.array_equal(cos_b[b, 0], one), (
            f"sequence {b} starts at position {start}: its rows must be those of "
            f"cos_sin(2, offset={start})"
        )
    x = np.random.default_rng(4).standard_normal((3, 2, 2, 16)).astype(np.float32)
    rotated = rope(Tensor(x), offset=np.array([0, 9, 4])).data
    assert np.allclose(rotated[1:2], rope(Tensor(x[1:2]), offset=9).data, atol=1e-6), (
        "rotating a batch with one offset per sequence should equal rotating each alone"
    )
    try:
        rope.cos_sin(2, offset=np.array([1, 63]))
    except ValueError as error:
        assert "65" in str(error) and "64" in str(error), (
            f"the error should name the last position needed (65) and max_len (64): {error}"
        )
    else:
        raise AssertionError("offsets reaching past max_len must raise ValueError")

    def check_frequencies(head_dim, base, scaling):
        """rope_frequencies against the bands worked out one frequency at a time, and the
        tables of RotaryEmbedding(..., scaling=...) built from them."""
        want = []
        for i in range(head_dim // 2):
            theta = base ** (-2 * i / head_dim)
            if scaling is None:
                want.append(theta)
                continue
            factor, low, high = (scaling[k] for k in ("factor", "low_freq_factor",
                                                      "high_freq_factor"))
            length = scaling["original_max_position_embeddings"]
            wavelength = 2 * np.pi / theta
            if wavelength < length / high:  # fast: kept
                want.append(theta)
            elif wavelength > length / low:  # slow: divided
                want.append(theta / factor)
            else:  # between: blended
                s = (length / wavelength - low) / (high - low)
                want.append((1 - s) * theta / factor + s * theta)
        got = rope_frequencies(head_dim, base, scaling)
        assert np.shape(got) == (head_dim // 2,) and np.allclose(got, want, rtol=1e-9), (
            f"rope_frequencies({head_dim}, {base:g}, {scaling}) should be {np.array(want)}, got "
            f"{got}: fast frequencies kept, slow ones divided by the factor, the middle band "
            "blended with s = (L / wavelength - low_freq_factor) / (high - low)"
        )
        rope = RotaryEmbedding(head_dim, max_len=40, base=base, scaling=scaling)
        cos, sin = rope.cos_sin(3, offset=37)
        angles = np.arange(37, 40)[:, None] * np.concatenate((want, want))
        assert np.allclose(cos, np.cos(angles), atol=1e-6) and np.allclose(
            sin, np.sin(angles), atol=1e-6), (
            "RotaryEmbedding(..., scaling=...) should build its tables from rope_frequencies "
            "with the scaling"
        )

    def check_offsets(head_dim, max_len, seq_len, offsets):
        """cos_sin with one offset per sequence is (B, 1, T, d), row b the tables of positions
        offsets[b] ..; rotating the batch equals rotating each sequence alone."""
        rope = RotaryEmbedding(head_dim, max_len=max_len)
        cos, sin = rope.cos_sin(seq_len, offset=np.array(offsets))
        shape = (len(offsets), 1, seq_len, head_dim)
        assert np.shape(cos) == shape and np.shape(sin) == shape, (
            f"cos_sin({seq_len}, offset={offsets}) should give (B, 1, T, d) = {shape} tables, "
            f"got {np.shape(cos)}"
        )
        theta = 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
        for b, start in enumerate(offsets):
            angles = np.arange(start, start + seq_len)[:, None] * np.concatenate((theta, theta))
            assert np.allclose(cos[b, 0], np.cos(angles), atol=1e-6) and np.allclose(
                sin[b, 0], np.sin(angles), atol=1e-6), (
                f"sequence {b} starts at position {start}: its rows must be those of positions "
                f"{start}..{start + seq_len - 1}"
            )
        x = np.random.default_rng(len(offsets)).standard_normal(
            (len(offsets), 2, seq_len, head_dim)).astype(np.float32)
        rotated = rope(Tensor(x), offset=np.array(offsets)).data
        for b, start in enumerate(offsets):
            alone = rope(Tensor(x[b:b + 1]), offset=start).data
            assert np.allclose(rotated[b:b + 1], alone, atol=1e-6), (
                "rotating a batch with one offset per sequence should equal rotating each alone"
            )

    def check_offsets_past_end(max_len, seq_len, offsets):
        """An offset per sequence that reaches past max_len is refused, naming the last
        position needed and max_len."""
        rope = RotaryEmbedding(4, max_len=max_len)
        expect_error(f"cos_sin({seq_len}, offset={offsets}) with max_len {max_len}",
                     lambda: rope.cos_sin(seq_len, offset=np.array(offsets)), ValueError,
                     [str(max(offsets) + seq_len), str(max_len)],
                     "the last position needed is max(offset) + seq_len: compare it with max_len")

    check_frequencies(16, 10000.0, llama3)
    check_offsets(16, 64, 2, [0, 9, 4])
    check_offsets_past_end(64, 2, [1, 63])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def bands(factor, low, high, length):
        return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": length}

    hidden_cases(check_frequencies, {
        "Llama three point one's published settings": (128, 500000.0, bands(8.0, 1.0, 4.0, 8192)),
        "a factor of two and narrow bands": (32, 10000.0, bands(2.0, 2.0, 3.0, 128)),
        "a short original context, every band slow": (8, 10000.0, bands(4.0, 1.0, 4.0, 2)),
        "a long original context, every band fast": (8, 10.0, bands(4.0, 1.0, 4.0, 10**6)),
        "no scaling and a large base": (20, 1000000.0, None),
    })
    hidden_cases(check_offsets, {
        "one sequence": (8, 16, 3, [5]),
        "equal offsets": (4, 32, 2, [7, 7, 7]),
        "offsets reaching the last position": (6, 20, 4, [16, 0]),
        "one token per sequence": (10, 50, 1, [49, 3, 12, 0]),
    })
    hidden_cases(check_offsets_past_end, {
        "one sequence one position too far": (32, 4, [0, 29]),
        "every sequence too far": (10, 3, [9, 8]),
    })
    ### END HIDDEN TESTS


test_unit_rope_scaling_and_offsets()


# %% nbgrader={"grade": true, "grade_id": "test_unit_apply_rotary", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_apply_rotary():
    """RoPE rotates pairs (i, i + d/2), keeps norms, and makes q.k depend on n - m only."""
    rng = np.random.default_rng(0)
    d, T = 8, 6
    rope = RotaryEmbedding(d, max_len=64)
    x = rng.standard_normal((2, 3, T, d)).astype(np.float32)  # (B, H, T, d)
    got = apply_rotary(Tensor(x), *rope.cos_sin(T))
    assert isinstance(got, Tensor) and got.shape == x.shape, (
        f"apply_rotary should return a Tensor of x's shape {x.shape}, got "
        f"{getattr(got, 'shape', None)}"
    )
    assert got.dtype == np.float32, f"RoPE on float32 input should stay float32, got {got.dtype}"
    want = np.empty_like(x)  # the Hugging Face formula, one pair at a time
    for pos in range(T):
        for i in range(d // 2):
            phi = pos / 10000 ** (2 * i / d)
            a, b = x[..., pos, i], x[..., pos, i + d // 2]
            want[..., pos, i] = a * np.cos(phi) - b * np.sin(phi)
            want[..., pos, i + d // 2] = b * np.cos(phi) + a * np.sin(phi)
    wrong = np.argwhere(~np.isclose(got.data, want, atol=1e-5))
    assert not len(wrong), (
        "apply_rotary differs from the pairwise rotation: pair coordinate i with i + d/2 and "
        "compute x * cos + rotate_half(x) * sin. First difference at (b, h, t, i) = "
        f"{tuple(int(v) for v in wrong[0])}: expected {want[tuple(wrong[0])]:.5f}, got "
        f"{got.data[tuple(wrong[0])]:.5f} ({len(wrong)} of {want.size} values differ)"
    )
    assert np.allclose(np.linalg.norm(got.data, axis=-1), np.linalg.norm(x, axis=-1), atol=1e-5), (
        "a rotation keeps every vector's length"
    )
    q = rng.standard_normal(d).astype(np.float32)
    k = rng.standard_normal(d).astype(np.float32)

    def score(m, n):
        qm = rope(Tensor(np.broadcast_to(q, (1, d)).copy()), offset=m).data[0]
        kn = rope(Tensor(np.broadcast_to(k, (1, d)).copy()), offset=n).data[0]
        return float(qm @ kn)

    scores = [score(m, m + 3) for m in (0, 5, 20, 40)]
    assert np.allclose(scores, scores[0], atol=1e-4), (
        f"the score of a query at m and a key at m + 3 should not depend on m, got {scores}: "
        "rope(x, offset=k) must rotate by the angles of positions k, k+1, ..."
    )
    full = rope(Tensor(x))
    alone = rope(Tensor(x[:, :, 4:5]), offset=4)
    assert np.allclose(alone.data, full.data[:, :, 4:5], atol=1e-6), (
        "a token encoded alone at offset 4 must equal position 4 of the full sequence: this is "
        "what generation with a KV cache relies on"
    )

    def check_rotation(x, offset, max_len):
        """apply_rotary(x, *rope.cos_sin(T, offset)) against the pairwise rotation written out,
        pair (i, i + d/2) at a time (offset: an int, or one per sequence of axis 0); x's dtype
        and every vector's length are kept."""
        T, d = x.shape[-2:]
        rope = RotaryEmbedding(d, max_len=max_len)
        got = apply_rotary(Tensor(x, dtype=x.dtype), *rope.cos_sin(T, offset))
        assert isinstance(got, Tensor) and got.shape == x.shape, (
            f"apply_rotary should return a Tensor of x's shape {x.shape}, got "
            f"{getattr(got, 'shape', None)}"
        )
        assert got.dtype == x.dtype, (
            f"RoPE on {x.dtype} input should stay {x.dtype}, got {got.dtype}"
        )
        starts = np.broadcast_to(np.asarray(offset), x.shape[:1] if np.ndim(offset) else ())
        want = np.empty(x.shape)
        for lead in np.ndindex(x.shape[:-2]):
            start = int(starts[lead[0]]) if np.ndim(offset) else int(offset)
            for t in range(T):
                for i in range(d // 2):
                    phi = (start + t) / 10000 ** (2 * i / d)
                    a, b = x[lead + (t, i)], x[lead + (t, i + d // 2)]
                    want[lead + (t, i)] = a * np.cos(phi) - b * np.sin(phi)
                    want[lead + (t, i + d // 2)] = b * np.cos(phi) + a * np.sin(phi)
        assert np.allclose(got.data, want, atol=1e-5), (
            "apply_rotary differs from the pairwise rotation: pair coordinate i with i + d/2 and "
            "compute x * cos + rotate_half(x) * sin (largest gap "
            f"{np.abs(got.data - want).max():.3g})"
        )
        assert np.allclose(np.linalg.norm(got.data, axis=-1), np.linalg.norm(x, axis=-1),
                           atol=1e-4), "a rotation keeps every vector's length"

    check_rotation(x, 0, 64)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(1109)
    hidden_cases(check_rotation, {
        "a head of two": (rng.standard_normal((3, 2)).astype(np.float32), 5, 16),
        "three axes and an offset": (rng.standard_normal((2, 4, 6)).astype(np.float32), 11, 32),
        "float64 input": (rng.standard_normal((1, 2, 3, 8)), 2, 8),
        "one offset per sequence": (rng.standard_normal((3, 2, 2, 4)).astype(np.float32),
                                    np.array([0, 13, 6]), 16),
        "a single token deep into the table": (
            rng.standard_normal((1, 1, 1, 12)).astype(np.float32), 999, 1000),
        "a wide head": (rng.standard_normal((1, 5, 32)).astype(np.float32), 0, 8),
    })
    ### END HIDDEN TESTS


test_unit_apply_rotary()


# %% nbgrader={"grade": true, "grade_id": "test_unit_rotary_backward", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_rotary_backward():
    """RotaryFunction's derivative matches finite differences and stays float32."""
    rng = np.random.default_rng(1)
    rope = RotaryEmbedding(6, max_len=16)
    cos, sin = rope.cos_sin(4, offset=3)
    x = float64_inputs(rng, (2, 4, 6))
    explain("RoPE's derivative", lambda: gradcheck(lambda t: apply_rotary(t, cos, sin), [x]),
            "grad_x = grad * cos - rotate_half(grad * sin): the adjoint of rotate_half is "
            "-rotate_half")
    x32 = Tensor(rng.standard_normal((2, 4, 6)).astype(np.float32), requires_grad=True)
    g = rng.standard_normal((2, 4, 6)).astype(np.float32)
    apply_rotary(x32, cos, sin).backward(g)
    assert x32.grad.dtype == np.float32, f"the gradient of float32 input is {x32.grad.dtype}"
    inverse = apply_rotary(Tensor(g), cos, -sin).data  # rotating back by the opposite angle
    assert np.allclose(x32.grad.data, inverse, atol=1e-5), (
        "the gradient of a rotation is the gradient rotated back by the opposite angle"
    )

    def check_derivative(shape, offset, seed):
        """RoPE's rule against central differences (float64), and in float32 the gradient
        rotated back by the opposite angle, for x of `shape` at `offset` (or offsets)."""
        rng = np.random.default_rng(seed)
        rope = RotaryEmbedding(shape[-1], max_len=64)
        cos, sin = rope.cos_sin(shape[-2], offset)
        x64 = float64_inputs(rng, shape)
        explain(f"RoPE's derivative on x {shape}",
                lambda: gradcheck(lambda t: apply_rotary(t, cos, sin), [x64]),
                "grad_x = grad * cos - rotate_half(grad * sin): the adjoint of rotate_half is "
                "-rotate_half")
        x = Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        g = rng.standard_normal(shape).astype(np.float32)
        apply_rotary(x, cos, sin).backward(g)
        assert x.grad.dtype == np.float32, f"the gradient of float32 input is {x.grad.dtype}"
        back = apply_rotary(Tensor(g), cos, -sin).data
        assert np.allclose(x.grad.data, back, atol=1e-5), (
            "the gradient of a rotation is the gradient rotated back by the opposite angle"
        )

    check_derivative((2, 4, 6), 3, 1)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_derivative, {
        "a head of two": ((5, 2), 0, 2),
        "one offset per sequence": ((3, 2, 2, 4), np.array([9, 0, 30]), 3),
        "four axes and a wide head": ((1, 2, 3, 16), 40, 4),
        "a single token": ((1, 1, 8), 63, 5),
    })
    ### END HIDDEN TESTS


test_unit_rotary_backward()

# %% [markdown]
# ## Systems analysis: table memory and the cost of the scatter-add, measured
#
# **Memory.** An embedding table holds `V * D` floats, and training keeps as much again for
# its gradient plus twice that for Adam's two moment estimates. The cell below measures
# the arrays for the character-level GPT of module 13 and for a GPT-2-sized vocabulary, and
# how much of the dense gradient a batch of 768 tokens actually touches.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def memory_report(tokens=768):
    rng = np.random.default_rng(0)
    models = (("character GPT (module 13)", 65, 128), ("GPT-2 vocabulary", 50257, 768))
    for name, vocab, dim in models:
        table = np.empty((vocab, dim), dtype=np.float32)  # the parameter itself
        training = 4 * table.nbytes  # weights, gradient, Adam's m and v
        used = np.unique(rng.integers(0, vocab, tokens)).size
        print(f"{name:26s} V={vocab:6,} D={dim:4}: table {table.nbytes / 2**20:7.2f} MiB, "
              f"with gradient and Adam {training / 2**20:7.2f} MiB; a batch of {tokens} "
              f"tokens touches {used:,} rows ({used / vocab:.1%})")


memory_report()

# %% [markdown]
# With a large vocabulary a batch touches a few percent of the rows, yet the dense gradient
# (and the optimizer's update) covers all of them. (Real text is worse than this uniform
# draw: frequent tokens repeat, so even fewer rows are touched.) That is what sparse
# embedding gradients and, in large models, the choice of tying the input table to the
# output layer (module 13) are about.
#
# **Time of the backward pass.** The same scatter-add three ways: `np.add.at`, your sort
# and `reduceat`, and the dense one-hot product `E.T @ grad` that the lookup stands for,
# on GPT-sized batches (768 tokens of dimension 128).

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.tensor import best_time  # the course's timing helper, given in module 01


def scatter_report(tokens=768, dim=128):
    rng = np.random.default_rng(0)
    for vocab in (65, 50257):
        ids = rng.integers(0, vocab, tokens)
        grad = rng.standard_normal((tokens, dim)).astype(np.float32)
        weight = Tensor(np.zeros((vocab, dim), dtype=np.float32), requires_grad=True)
        ctx = EmbeddingFunction.apply(weight, indices=ids)._ctx  # the record your rule reads

        def with_add_at():
            out = np.zeros((vocab, dim), dtype=np.float32)
            np.add.at(out, ids, grad)
            return out

        def with_sort():
            return embedding_backward(ctx, grad)[0]

        def with_one_hot():
            one_hot = np.zeros((tokens, vocab), dtype=np.float32)
            one_hot[np.arange(tokens), ids] = 1
            return one_hot.T @ grad

        assert np.allclose(with_add_at(), with_sort(), atol=1e-4)
        line = (f"V={vocab:6,}: np.add.at {best_time(with_add_at) * 1e3:6.2f} ms, "
                f"sort + reduceat (your rule) {best_time(with_sort) * 1e3:6.2f} ms")
        if vocab < 5000:  # the one-hot matrix grows with V: (768, 50257) floats is 154 MB
            line += f", one-hot matmul {best_time(with_one_hot) * 1e3:6.2f} ms"
        print(line)


scatter_report()

# %% [markdown]
# On a two-core machine, with the character vocabulary, `np.add.at` takes several times
# longer than sorting and `reduceat` (it visits the indices one by one), and the one-hot
# product is competitive only because `V` is tiny: its cost grows with `V`, the others'
# with the number of tokens. With GPT-2's vocabulary the two scatter-adds are close, and
# the time that matters is elsewhere: a dense (50257, 768) gradient is 150 MB that the
# engine stores in `.grad` and the optimizer reads and writes at every step. The lookup
# itself is nearly free; the tables' memory is what embeddings cost.
#
# ## What comes next
#
# - **Module 12 (attention)** compares every token with every other one. Its grouped-query
#   attention takes your `RotaryEmbedding` and rotates queries and keys with
#   `apply_rotary` before the scores are computed.
# - **Module 13 (transformers)** builds the GPT's input stage from `Embedding` and
#   `PositionalEmbedding`, and ties the token table to the output layer.
# - **Module 18 (KV caching)** generates one token at a time; the `offset` arguments you
#   wrote here put each new token at its true position.
