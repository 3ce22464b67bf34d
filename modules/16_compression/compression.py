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
# # Module 16: Compression
#
# ## Overview
#
# Module 15 kept every weight and gave each fewer bits. This module removes weights
# altogether, three ways:
#
# - **Unstructured pruning** sets the weights of smallest magnitude to zero, anywhere in a
#   matrix. Half of a trained network's weights can go at a small cost in loss, recovered by
#   a short fine-tune, but the matrix keeps its shape: a dense matrix product does the same
#   work with zeros. The saving needs **sparse storage** (CSR), and CSR pays an index for
#   every value it keeps, so it only wins past a sparsity you will compute.
# - **Structured pruning** removes whole units: hidden neurons of the MLP, heads of
#   attention. The matrices really shrink, so the forward really gets faster, and you
#   measure by how much.
# - **Knowledge distillation** trains a small model to imitate a big one: the student
#   learns from the teacher's whole probability distribution (softened by a temperature),
#   which carries more information per example than the one correct next character.
#
# ## Learning objectives
#
# - Prune by magnitude per layer and globally, and keep pruned weights at zero through
#   optimizer steps (Adam's moments would otherwise revive them).
# - Count the bytes of CSR storage and derive the sparsity where it beats dense storage.
# - Remove MLP neurons and attention heads so that the matrices shrink and the model still
#   computes exactly what the pruned-in-place model computes.
# - Write the distillation loss (KL divergence at temperature $T$, scaled by $T^2$), check its
#   gradient by finite differences, and explain the $T^2$.
#
# ## What you build
#
# - `magnitude_mask(w, amount)`, `prune_magnitude(model, amount, scope="layer" | "global",
#   skip=...)` returning `PruningMasks` (`apply()`, `sparsity()`, `wrap(optimizer)`).
# - `CSRMatrix.from_dense(w)`, `.to_dense()`, `.nbytes`, `.matmul_t(x)` (`x @ W.T`).
# - `prune_mlp_neurons(model, amount)` and `prune_heads(model, amount)`, with
#   `HeadPrunedAttention`, the attention module with fewer heads.
# - `distillation_loss(student_logits, teacher_logits, targets, temperature, alpha)`.
#
# ## What you are not building yet
#
# - **Sparse kernels that are fast.** `CSRMatrix.matmul_t` is exact and vectorized, but a
#   dense BLAS product on a 50%-sparse matrix is still faster on a CPU; sparse speed-ups
#   need 90%+ sparsity or hardware patterns (2:4). Module 17 is about kernels.
# - **Iterative pruning schedules and lottery tickets.** One-shot pruning, then a short
#   fine-tune, is enough to see the trade-off.
# - **A profiler.** Which layers are worth shrinking is a question for module 14's
#   `Profiler`: `profile_forward_pass` on your GPT before and after `prune_mlp_neurons`
#   shows where the time went; this lesson times the whole forward.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp perf.compression
#| export
import numpy as np

from tinytorch.core.activations import log_softmax
from tinytorch.core.attention import MultiHeadAttention, scaled_dot_product_attention
from tinytorch.core.layers import Dropout, Linear, Module, Parameter
from tinytorch.core.losses import cross_entropy
from tinytorch.core.tensor import ShapeError, Tensor
from tinytorch.models.transformer import MLP, SwiGLU

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time

from tinytorch.core.autograd import gradcheck, no_grad
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import manual_seed
from tinytorch.models.transformer import GPT, GPTConfig

# %% [markdown]
# ## Part 1: magnitude pruning, and masks that survive training
#
# **Which weights to remove.** The simplest good rule: the ones closest to zero. Removing
# weight `w` changes a layer's output by $w x$, so small $|w|$ means a small change.
# `magnitude_mask(w, amount)` returns a boolean mask, `True` where a weight is kept, with
# exactly $\lfloor \text{amount} \cdot \text{w.size} \rfloor$ entries `False`: the smallest
# magnitudes. (A threshold $|w| > t$ would remove a different count when values tie;
# `np.argpartition` picks exactly `k` indices.)
#
# **Per layer or global.** Per layer prunes every matrix by the same fraction. Global ranks
# all the matrices' weights together against one threshold: layers whose weights are small
# overall lose more, layers with large weights lose less, at the same total sparsity. Which
# is better is measured in the benchmark.
#
# **Masks must survive training.** After pruning, a fine-tune recovers most of the loss.
# But an optimizer step would revive pruned weights: the gradient of a zero weight is not
# zero, and Adam's moment estimates keep pushing even after the gradient is zeroed.
# `PruningMasks.wrap(optimizer)` returns an optimizer whose `step()` zeroes the pruned
# entries' gradients, steps, then zeroes the pruned weights again: pruned stays pruned.
#
# **The amount.** `amount` is the fraction removed, in `[0, 1)`: 0 removes nothing, 1 would
# remove everything (not a model any more). Anything else is an error that says so.

# %% nbgrader={"grade": false, "grade_id": "magnitude", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def check_amount(amount, what="pruning amount"):
    """A float in [0, 1), or a ValueError that says what the amount means.

    >>> check_amount(0.5), check_amount(0)
    (0.5, 0.0)
    >>> try:
    ...     check_amount(1)
    ... except ValueError as error:
    ...     print(str(error).split(":")[0])
    the pruning amount must be a fraction in [0, 1), got 1
    """
    if isinstance(amount, bool) or not isinstance(amount, (int, float, np.floating)) \
            or not 0 <= amount < 1:
        raise ValueError(
            f"the {what} must be a fraction in [0, 1), got {amount!r}: it is the share of "
            "weights (or units) removed, e.g. 0.5 for half; 1 would remove everything")
    return float(amount)


def magnitude_mask(w, amount):
    """Boolean mask of w's shape: False on the floor(amount * size) smallest |w|.

    >>> w = np.array([[0.5, -0.1, 2.0], [-3.0, 0.05, 0.2]], dtype=np.float32)
    >>> magnitude_mask(w, 0.5)  # the 3 smallest in magnitude: -0.1, 0.05 and 0.2
    array([[ True, False,  True],
           [ True, False, False]])
    """
    amount = check_amount(amount)
    w = np.asarray(w.data if isinstance(w, Tensor) else w)
    ### BEGIN SOLUTION
    k = int(amount * w.size)
    mask = np.ones(w.size, dtype=bool)
    if k:
        smallest = np.argpartition(np.abs(w).ravel(), k - 1)[:k]
        mask[smallest] = False
    return mask.reshape(w.shape)
    ### END SOLUTION


class MaskedOptimizer:
    """An optimizer whose step() keeps pruned weights at exactly zero.

    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.nn import Linear, Sequential
    >>> from tinytorch.optim import AdamW
    >>> manual_seed(0)
    >>> model = Sequential(Linear(8, 16), Linear(16, 4))
    >>> masks = prune_magnitude(model, 0.75)
    >>> opt = MaskedOptimizer(AdamW(model.parameters(), lr=0.01), masks)  # masks.wrap(...)
    >>> x = Tensor(np.random.default_rng(0).standard_normal((4, 8)))
    >>> for _ in range(3):
    ...     opt.zero_grad()
    ...     (model(x) ** 2).mean().backward()
    ...     opt.step()
    >>> masks.sparsity(), opt.lr  # still 75% zeros; the wrapped optimizer's settings show
    (0.75, 0.01)
    """

    def __init__(self, optimizer, masks):
        self.optimizer, self.masks = optimizer, masks

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        ### BEGIN SOLUTION
        for p, mask in self.masks.items():
            if p.grad is not None:
                p.grad.data *= mask  # no gradient into Adam's moments for pruned entries
        self.optimizer.step()
        self.masks.apply()  # weight decay and old momentum cannot revive them
        ### END SOLUTION

    def __getattr__(self, name):  # lr, state, ... of the wrapped optimizer
        return getattr(self.optimizer, name)


class PruningMasks:
    """The masks of a pruned model: {parameter: bool mask}, by parameter identity.

    >>> from tinytorch.nn import Linear
    >>> layer = Linear(4, 2)
    >>> masks = PruningMasks()
    >>> masks.add("weight", layer.weight, np.array([[True, False] * 2, [False, True] * 2]))
    >>> masks.apply()  # zero the masked-out weights, in place
    >>> masks.sparsity(), masks.layer_sparsity()
    (0.5, {'weight': 0.5})
    >>> int(np.count_nonzero(layer.weight.data))
    4
    """

    def __init__(self):
        self.entries = []  # (name, parameter, mask)

    def add(self, name, parameter, mask):
        self.entries.append((name, parameter, mask))

    def items(self):
        return [(p, m) for _, p, m in self.entries]

    def apply(self):
        """Zero every pruned weight, in place."""
        for _, p, mask in self.entries:
            p.data *= mask

    def sparsity(self):
        """Fraction of the masked weights that are zero right now."""
        zeros = sum(int(np.count_nonzero(p.data == 0)) for _, p, _ in self.entries)
        return zeros / sum(p.size for _, p, _ in self.entries)

    def layer_sparsity(self):
        return {name: float(np.mean(p.data == 0)) for name, p, _ in self.entries}

    def wrap(self, optimizer):
        return MaskedOptimizer(optimizer, self)


def prunable_weights(model, skip=("lm_head",)):
    """(name, weight Parameter) of every Linear whose dotted name is not in skip.

    >>> from tinytorch.nn import GPT, GPTConfig
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8))
    >>> for name, weight in prunable_weights(model):  # lm_head is skipped
    ...     print(name, weight.shape)
    blocks.0.attn.qkv.weight (24, 8)
    blocks.0.attn.proj.weight (8, 8)
    blocks.0.mlp.fc.weight (32, 8)
    blocks.0.mlp.proj.weight (8, 32)
    """
    return [(f"{name}.weight", m.weight) for name, m in model.named_modules()
            if isinstance(m, Linear) and name not in skip]


def prune_magnitude(model, amount, scope="layer", skip=("lm_head",)):
    """Zero the smallest weights of every Linear (per layer, or ranked globally); the masks.

    >>> from tinytorch.nn import Linear, Sequential
    >>> def small_model():
    ...     model = Sequential(Linear(4, 2), Linear(2, 1))
    ...     model[0].weight.data[...] = [[1, 2, 3, 4], [5, 6, 7, 8]]
    ...     model[1].weight.data[...] = [[0.5, 0.6]]
    ...     return model
    >>> prune_magnitude(small_model(), 0.5).layer_sparsity()  # half of each layer
    {'0.weight': 0.5, '1.weight': 0.5}
    >>> masks = prune_magnitude(small_model(), 0.5, scope="global")  # the 5 smallest of 10
    >>> masks.sparsity(), masks.layer_sparsity()
    (0.5, {'0.weight': 0.375, '1.weight': 1.0})
    """
    amount = check_amount(amount)
    if scope not in ("layer", "global"):
        raise ValueError(f"scope must be 'layer' or 'global', got {scope!r}")
    weights = prunable_weights(model, skip)
    if not weights:
        raise ValueError("the model has no Linear layers to prune (all skipped?)")
    masks = PruningMasks()
    ### BEGIN SOLUTION
    if scope == "layer":
        for name, w in weights:
            masks.add(name, w, magnitude_mask(w.data, amount))
    else:
        flat = np.concatenate([np.abs(w.data).ravel() for _, w in weights])
        keep = magnitude_mask(flat, amount)
        start = 0
        for name, w in weights:
            masks.add(name, w, keep[start:start + w.size].reshape(w.shape))
            start += w.size
    masks.apply()
    ### END SOLUTION
    return masks


# %% [markdown]
# ### Test: magnitude pruning

# %% nbgrader={"grade": true, "grade_id": "test_unit_magnitude", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_magnitude():
    """Exact counts, the smallest go, per layer vs global, and bad amounts."""
    w = np.array([[0.1, -3.0, 0.5], [-0.2, 2.0, 0.05]], dtype=np.float32)
    mask = magnitude_mask(w, 0.5)
    assert mask.shape == w.shape and mask.dtype == bool, (
        f"magnitude_mask gave {mask.dtype} {mask.shape}, expected a bool mask of shape {w.shape}")
    assert mask.tolist() == [[False, True, True], [False, True, False]], (
        f"pruning half of {w.tolist()} kept {mask.tolist()}: the three smallest |w| (0.05, "
        "0.1, -0.2) must go; compare magnitudes (np.abs), not signed values")

    def check_pruned(weights, amount):
        """magnitude_mask removes exactly int(amount * size) weights, the smallest |w|."""
        mask = magnitude_mask(weights, amount)
        k = int(amount * weights.size)
        assert (~mask).sum() == k, (
            f"amount {amount} of {weights.size} weights must prune exactly {k}, pruned "
            f"{(~mask).sum()}: k = int(amount * size)")
        if 0 < k < weights.size:
            assert np.abs(weights[~mask]).max() <= np.abs(weights[mask]).min(), (
                "the pruned weights must be the smallest in magnitude (np.abs)")

    def check_refused(amount):
        try:
            magnitude_mask(np.ones(10), amount)
        except ValueError as error:
            assert "[0, 1)" in str(error), f"the error should name the range [0, 1): {error}"
        else:
            raise AssertionError(f"amount {amount!r} must raise ValueError: it is not in [0, 1)")

    big = np.random.default_rng(0).standard_normal(1000)
    check_pruned(big, 0.37)
    assert magnitude_mask(big, 0.0).all(), "amount 0 must keep everything"
    for bad in (1.0, -0.1, 1.5, "half"):
        check_refused(bad)
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
    model.blocks[0].mlp.fc.weight.data *= 10  # one loud layer
    masks = prune_magnitude(model, 0.5, scope="layer")
    per = masks.layer_sparsity()
    assert len(per) == 4 and all(abs(s - 0.5) < 0.01 for s in per.values()), (
        f"per-layer pruning at 0.5 gave sparsities {per}: every Linear but the skipped "
        "lm_head should lose half its weights")
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
    model.blocks[0].mlp.fc.weight.data *= 10
    masks = prune_magnitude(model, 0.5, scope="global")
    per = masks.layer_sparsity()
    assert abs(masks.sparsity() - 0.5) < 0.01 and per["blocks.0.mlp.fc.weight"] < 0.1, (
        f"global pruning at 0.5 gave {per}: overall half should go, but the loud layer "
        "(weights x10) should keep nearly all of its weights; rank all layers together")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(1601)
    hidden_cases(check_pruned, {
        "nearly everything pruned": (rng.standard_normal(50), 0.99),
        "negative weights far from zero": (-rng.uniform(5, 9, (8, 8)), 0.25),
        "a three-axis array": (rng.standard_normal((3, 4, 5)).astype(np.float32), 0.5),
        "an amount that rounds down": (rng.standard_normal(7), 0.3),
    })
    hidden_cases(check_refused, {"not a number": float("nan"), "a boolean": True,
                                 "just above one": 1.0000001})
    ### END HIDDEN TESTS


test_unit_magnitude()


# %% nbgrader={"grade": true, "grade_id": "test_unit_masks_survive", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_masks_survive():
    """After AdamW steps through wrap(), pruned weights are exactly zero; the rest trained."""

    def check_survive(make_optimizer, amount):
        """One plain step, then pruning at `amount` and 3 masked steps: pruned weights stay 0."""
        manual_seed(0)
        model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
        idx = np.random.default_rng(0).integers(0, 16, (4, 8))
        # one unmasked step first, so Adam has momentum on every weight
        optimizer = make_optimizer(model.parameters())
        model(idx, idx)[1].backward()
        optimizer.step()
        masks = prune_magnitude(model, amount)
        before = {name: p.data.copy() for name, p, _ in masks.entries}
        masked = masks.wrap(optimizer)
        for _ in range(3):
            masked.zero_grad()
            model(idx, idx)[1].backward()
            masked.step()
        for name, p, mask in masks.entries:
            revived = int(np.count_nonzero(p.data[~mask]))
            assert revived == 0, (
                f"{name}: {revived} pruned weights are non-zero after 3 steps: Adam's momentum "
                "(and the gradient) revive them. In step(), multiply the gradient by the mask, "
                "step, then apply the masks again")
            assert not np.allclose(p.data[mask], before[name][mask]), (
                f"{name}: the kept weights did not change: step() must still call the optimizer")

    check_survive(lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.1), 0.5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.optimizers import SGD, Adam
    from tinytorch.testing import hidden_cases

    hidden_cases(check_survive, {
        "momentum SGD": (lambda ps: SGD(ps, lr=0.1, momentum=0.9), 0.5),
        "most weights pruned": (lambda ps: Adam(ps, lr=1e-2), 0.9),
    })
    ### END HIDDEN TESTS


test_unit_masks_survive()


# %% [markdown]
# ## Part 2: sparse storage (CSR), and when it pays
#
# A pruned matrix in a dense array is as big as before. **Compressed sparse row** (CSR)
# storage keeps only the non-zeros of an `(R, C)` matrix:
#
# - `data`: the `nnz` non-zero values, row by row (float32, 4 bytes each);
# - `indices`: the column of each (int32, 4 bytes each);
# - `indptr`: `R + 1` offsets; row `r`'s values are `data[indptr[r]:indptr[r + 1]]`.
#
# Bytes: `8 nnz + 4 (R + 1)` against dense `4 R C`. With density `d = nnz / (R C)`, CSR wins
# when `8 d R C < 4 R C`, that is **below 50% density**: at 50% sparsity CSR saves nothing
# (a little worse, for `indptr`); at 90% it is 20% of dense. int16 column indices (when
# `C < 32,768`) move the break-even to 67% density. This is why unstructured pruning needs
# high sparsity before it saves memory, and why module 15's int8 (25% of the bytes, no
# indices) is often the better deal.
#
# `matmul_t(x)` computes `x @ W.T` (what a `Linear` does) from CSR: each output column `r`
# is $\sum_j \mathrm{data}_j \, x[:, \mathrm{indices}_j]$ over row `r`'s entries.
# Gather `x[:, indices] * data` for all entries at once, `(N, nnz)`, then sum the runs of
# each row with
# `np.add.reduceat(..., indptr[:-1])` (skip empty rows: `reduceat` would copy a neighbour).

# %% nbgrader={"grade": false, "grade_id": "csr", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class CSRMatrix:
    """A 2-D float32 matrix in compressed sparse row form.

    >>> w = np.array([[0.5, 0.0, 2.0], [-3.0, 0.0, 0.0]], dtype=np.float32)
    >>> m = CSRMatrix.from_dense(w)
    >>> m.data  # the nonzero values, row by row
    array([ 0.5,  2. , -3. ], dtype=float32)
    >>> m.indices, m.indptr  # their columns, and where each row starts in data
    (array([0, 2, 0], dtype=int32), array([0, 2, 3], dtype=int32))
    >>> m.nnz, m.nbytes, w.nbytes
    (3, 36, 24)
    >>> bool(np.array_equal(m.to_dense(), w))
    True
    >>> m.matmul_t(np.ones((1, 3), dtype=np.float32))  # x @ W.T
    array([[ 2.5, -3. ]], dtype=float32)
    """

    def __init__(self, data, indices, indptr, shape):
        self.data, self.indices, self.indptr = data, indices, indptr
        self.shape = tuple(shape)

    @classmethod
    def from_dense(cls, w):
        w = np.asarray(w.data if isinstance(w, Tensor) else w, dtype=np.float32)
        if w.ndim != 2:
            raise ShapeError(f"CSRMatrix stores a 2-D matrix, got shape {w.shape}")
        ### BEGIN SOLUTION
        rows, cols = np.nonzero(w)  # row-major order: row by row
        indptr = np.zeros(w.shape[0] + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=w.shape[0]), out=indptr[1:])
        return cls(w[rows, cols], cols.astype(np.int32), indptr, w.shape)
        ### END SOLUTION

    @property
    def nnz(self):
        return int(self.data.size)

    @property
    def nbytes(self):
        return self.data.nbytes + self.indices.nbytes + self.indptr.nbytes

    def to_dense(self):
        ### BEGIN SOLUTION
        out = np.zeros(self.shape, dtype=np.float32)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out
        ### END SOLUTION

    def matmul_t(self, x):
        """x @ W.T for x (N, C): (N, R), from the stored entries only."""
        x = np.asarray(x.data if isinstance(x, Tensor) else x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.shape[1]:
            raise ShapeError(f"matmul_t: x of shape {x.shape} needs {self.shape[1]} columns "
                             f"for a matrix of shape {self.shape}")
        ### BEGIN SOLUTION
        out = np.zeros((x.shape[0], self.shape[0]), dtype=np.float32)
        products = x[:, self.indices] * self.data  # (N, nnz)
        filled = np.diff(self.indptr) > 0  # rows with at least one entry
        if filled.any():
            out[:, filled] = np.add.reduceat(products, self.indptr[:-1][filled], axis=1)
        return out
        ### END SOLUTION


# %% [markdown]
# ### Test: CSR

# %% nbgrader={"grade": true, "grade_id": "test_unit_csr", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_csr():
    """Layout, round trip, bytes and the product, including empty rows."""
    w = np.array([[0, 2, 0, 0], [0, 0, 0, 0], [1, 0, 0, 3]], dtype=np.float32)
    csr = CSRMatrix.from_dense(w)
    assert csr.data.tolist() == [2, 1, 3] and csr.indices.tolist() == [1, 0, 3], (
        f"data {csr.data.tolist()}, indices {csr.indices.tolist()}; expected [2, 1, 3] and "
        "[1, 0, 3]: the non-zeros row by row with their column numbers (np.nonzero)")
    assert csr.indptr.tolist() == [0, 1, 1, 3], (
        f"indptr {csr.indptr.tolist()}, expected [0, 1, 1, 3]: R + 1 offsets, the running "
        "count of non-zeros per row (the empty row 1 repeats the offset)")
    assert csr.indices.dtype == np.int32 and csr.indptr.dtype == np.int32, (
        "store indices and indptr as int32 (4 bytes), not int64")
    assert csr.nbytes == 3 * 4 + 3 * 4 + 4 * 4, f"nbytes {csr.nbytes}, expected 40"
    try:
        dense = csr.to_dense()
    except (IndexError, ValueError) as e:
        raise AssertionError(
            f"to_dense() raised {type(e).__name__}: {e}. Row i owns the entries "
            "indptr[i]:indptr[i + 1], so repeat each row number np.diff(indptr)[i] times to "
            "pair it with its columns") from e
    assert np.array_equal(dense, w), (
        f"to_dense() gave {dense.tolist()}, expected {w.tolist()}: put data[j] at (row of "
        "entry j, indices[j]) in a zero matrix of the stored shape")

    def check_csr(dense, x):
        """from_dense(dense): round trip, bytes and x @ dense.T, for any matrix."""
        sparse = CSRMatrix.from_dense(dense)
        assert np.array_equal(sparse.to_dense(), dense), "to_dense() must give the matrix back"
        nnz, rows = np.count_nonzero(dense), dense.shape[0]
        assert sparse.nbytes == 8 * nnz + 4 * (rows + 1), (
            f"nbytes {sparse.nbytes}, expected 8 nnz + 4 (R + 1) = {8 * nnz + 4 * (rows + 1)}")
        got = sparse.matmul_t(x)
        assert got.shape == (x.shape[0], rows) and np.allclose(got, x @ dense.T, atol=1e-5), (
            "matmul_t differs from x @ W.T: sum x[:, indices] * data over each row's run; skip "
            "empty rows in reduceat")

    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 96)).astype(np.float32)
    big[big < 0.8] = 0.0  # about 79% zeros
    big[5] = 0.0  # an empty row
    sparse = CSRMatrix.from_dense(big)
    x = rng.standard_normal((7, 96)).astype(np.float32)
    got = sparse.matmul_t(x)
    assert got.shape == (7, 64) and np.allclose(got, x @ big.T, atol=1e-5), (
        f"matmul_t differs from x @ W.T by {np.abs(got - x @ big.T).max():.2e}: sum "
        "x[:, indices] * data over each row's run; skip empty rows in reduceat")
    assert sparse.nbytes == 8 * np.count_nonzero(big) + 4 * 65, "nbytes = 8 nnz + 4 (R + 1)"
    check_csr(w, rng.standard_normal((2, 4)).astype(np.float32))
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    full = rng.standard_normal((3, 5)).astype(np.float32) + 10
    tail = np.zeros((6, 4), np.float32)
    tail[-1, -1] = 2.5
    hidden_cases(check_csr, {
        "a matrix of zeros": (np.zeros((4, 3), np.float32), np.ones((2, 3), np.float32)),
        "no zero at all": (full, rng.standard_normal((3, 5)).astype(np.float32)),
        "one value in the last row": (tail, rng.standard_normal((1, 4)).astype(np.float32)),
        "one column": (np.array([[0.0], [3.0], [0.0]], np.float32), np.ones((5, 1), np.float32)),
    })
    ### END HIDDEN TESTS


test_unit_csr()


# %% [markdown]
# ## Part 3: structured pruning that shrinks the matrices
#
# **MLP neurons.** Hidden neuron `j` of `proj(gelu(fc(x)))` reads row `j` of `fc.weight`
# (and `fc.bias[j]`) and writes column `j` of `proj.weight`. Remove it and both matrices
# lose a row and a column: `fc` becomes `(H', C)`, `proj` `(C, H')`, and every token's MLP
# costs $H' / H$ of the FLOPs. Score each neuron by how much it can move the output,
# $\lVert \mathrm{fc.weight}[j] \rVert \cdot \lVert \mathrm{proj.weight}[:, j] \rVert$, and keep the
# $H - \lfloor \text{amount} \cdot H \rfloor$ highest,
# **in their original order** (sorted indices), so the smaller model computes exactly what
# the big one computes with those neurons zeroed (with `bias=False`, `gelu(0) = 0`). For
# SwiGLU the neuron is row `j` of `gate_proj` and `up_proj` and column `j` of `down_proj`.
#
# **Attention heads.** The fused `qkv` weight `(3C, C)` holds, for each of q, k and v, `H`
# blocks of $D = C / H$ rows, head after head: head `h`'s query rows are `h*D ... h*D+D-1`,
# its key rows `C + h*D ...`, its value rows `2C + h*D ...`. The output projection reads
# head `h` from columns `h*D ... h*D+D-1`. Removing heads keeps `D` and lowers `H`; the
# attention's inner width `H' D` is then narrower than the model's `C`, which
# `MultiHeadAttention` (inner width = `C`) cannot express, so `HeadPrunedAttention` is
# the same computation with an inner width of its own. Score a head by
# $\lVert \text{v rows} \rVert \cdot \lVert \text{proj columns} \rVert$
# (what it writes into the residual stream).

# %% nbgrader={"grade": false, "grade_id": "structured", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _keep_top(scores, amount):
    """Indices of the len(scores) - floor(amount * len) highest scores, in ascending order."""
    n_keep = len(scores) - int(amount * len(scores))
    return np.sort(np.argsort(-scores, kind="stable")[:n_keep])


def _sliced_linear(linear, rows=None, cols=None):
    """A new Linear holding linear's weight[rows][:, cols] (and bias[rows])."""
    w = linear.weight.data
    w = w if rows is None else w[rows]
    w = w if cols is None else w[:, cols]
    new = Linear(w.shape[1], w.shape[0], bias=linear.bias is not None)
    new.weight = Parameter(np.ascontiguousarray(w))
    if linear.bias is not None:
        b = linear.bias.data
        new.bias = Parameter((b if rows is None else b[rows]).copy())
    return new


def prune_mlp_neurons(model, amount):
    """Remove floor(amount * hidden) hidden neurons of every MLP/SwiGLU; {name: (H, H')}.

    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.nn import GPT, GPTConfig
    >>> manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=4, n_embd=16))
    >>> model.num_parameters()
    6512
    >>> prune_mlp_neurons(model, 0.5)
    {'blocks.0.mlp': (64, 32), 'blocks.1.mlp': (64, 32)}
    >>> model.num_parameters(), model.blocks[0].mlp.fc.weight.shape
    (4464, (32, 16))
    """
    amount = check_amount(amount)
    sizes = {}
    for name, m in model.named_modules():
        ### BEGIN SOLUTION
        if isinstance(m, MLP):
            score = np.linalg.norm(m.fc.weight.data, axis=1) * np.linalg.norm(
                m.proj.weight.data, axis=0)  # (H,)
            keep = _keep_top(score, amount)
            sizes[name] = (len(score), len(keep))
            m.fc = _sliced_linear(m.fc, rows=keep)
            m.proj = _sliced_linear(m.proj, cols=keep)
        elif isinstance(m, SwiGLU):
            score = (np.linalg.norm(m.gate_proj.weight.data, axis=1)
                     * np.linalg.norm(m.up_proj.weight.data, axis=1)
                     * np.linalg.norm(m.down_proj.weight.data, axis=0))
            keep = _keep_top(score, amount)
            sizes[name] = (len(score), len(keep))
            m.gate_proj = _sliced_linear(m.gate_proj, rows=keep)
            m.up_proj = _sliced_linear(m.up_proj, rows=keep)
            m.down_proj = _sliced_linear(m.down_proj, cols=keep)
        ### END SOLUTION
    if not sizes:
        raise ValueError("the model has no MLP or SwiGLU modules to prune")
    return sizes


class HeadPrunedAttention(Module):
    """Causal self-attention with num_heads heads of head_dim each, inner width != embed_dim.

    >>> from tinytorch.nn import Linear
    >>> attn = HeadPrunedAttention(Linear(16, 24), Linear(8, 16), num_heads=2, head_dim=4)
    >>> print(attn)  # two heads of 4 left in a 16-wide model
    HeadPrunedAttention(
      embed_dim=16, num_heads=2, head_dim=4
      (qkv): Linear(in_features=16, out_features=24, bias=True)
      (proj): Linear(in_features=8, out_features=16, bias=True)
      (resid_dropout): Dropout(p=0.0)
    )
    >>> attn(Tensor(np.zeros((2, 5, 16))), is_causal=True).shape
    (2, 5, 16)
    """

    def __init__(self, qkv, proj, num_heads, head_dim, dropout=0.0):
        super().__init__()
        self.num_heads, self.head_dim = int(num_heads), int(head_dim)
        self.embed_dim = proj.out_features
        self.qkv, self.proj = qkv, proj  # (3 H' D, C) and (C, H' D)
        self.resid_dropout = Dropout(dropout)

    def forward(self, x, mask=None, is_causal=False):
        B, T, C = x.shape
        H, D = self.num_heads, self.head_dim
        qkv = self.qkv(x).reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        y = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], mask=mask, is_causal=is_causal)
        y = y.permute(0, 2, 1, 3).reshape(B, T, H * D)  # (B, T, H' D)
        return self.resid_dropout(self.proj(y))  # (B, T, C)

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}"


def prune_heads(model, amount):
    """Remove floor(amount * heads) heads of every MultiHeadAttention; {name: (H, H')}.

    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.nn import GPT, GPTConfig
    >>> manual_seed(0)
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=4, n_embd=16))
    >>> prune_heads(model, 0.5)
    {'blocks.0.attn': (4, 2), 'blocks.1.attn': (4, 2)}
    >>> type(model.blocks[0].attn).__name__, model.blocks[0].attn.qkv.weight.shape
    ('HeadPrunedAttention', (24, 16))
    >>> ids = np.random.default_rng(0).integers(0, 10, size=(2, 8))
    >>> model(ids)[0].shape  # the model still runs, with fewer heads
    (2, 8, 10)
    """
    amount = check_amount(amount)
    sizes = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, m in list(parent._modules.items()):
            if not isinstance(m, MultiHeadAttention):
                continue
            C, H, D = m.embed_dim, m.num_heads, m.head_dim
            ### BEGIN SOLUTION
            w_qkv, w_proj = m.qkv.weight.data, m.proj.weight.data  # (3C, C), (C, C)
            v_rows = w_qkv[2 * C:].reshape(H, D, C)
            proj_cols = w_proj.reshape(C, H, D)
            score = (np.linalg.norm(v_rows.reshape(H, -1), axis=1)
                     * np.linalg.norm(proj_cols.transpose(1, 0, 2).reshape(H, -1), axis=1))
            heads = _keep_top(score, amount)
            cols = (heads[:, None] * D + np.arange(D)).ravel()  # (H' D,) inner channels
            rows = np.concatenate([part * C + cols for part in range(3)])  # q, k, v rows
            new = HeadPrunedAttention(_sliced_linear(m.qkv, rows=rows),
                                      _sliced_linear(m.proj, cols=cols), len(heads), D,
                                      m.dropout)
            ### END SOLUTION
            setattr(parent, child_name, new)
            sizes[f"{parent_name}.{child_name}" if parent_name else child_name] = (H, len(heads))
    if not sizes:
        raise ValueError("the model has no MultiHeadAttention modules to prune")
    return sizes


# %% [markdown]
# ### Test: the shrunk model computes what the zeroed model computes

# %% nbgrader={"grade": true, "grade_id": "test_unit_structured", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_structured():
    """Smaller matrices; logits equal to the big model with the same units zeroed."""
    config = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=4, n_embd=32)
    idx = np.random.default_rng(0).integers(0, 20, (3, 8))
    manual_seed(0)
    model = GPT(config)
    zeroed = GPT(config)
    zeroed.load_state_dict(model.state_dict())
    sizes = prune_mlp_neurons(model, 0.25)
    assert sizes == {"blocks.0.mlp": (128, 96), "blocks.1.mlp": (128, 96)}, (
        f"prune_mlp_neurons(0.25) reported {sizes}; expected 128 -> 96 hidden neurons in "
        "each block's MLP: keep hidden - floor(amount * hidden)")
    fc = model.blocks[0].mlp.fc.weight
    assert fc.shape == (96, 32) and model.blocks[0].mlp.proj.weight.shape == (32, 96), (
        f"fc {fc.shape}, proj {model.blocks[0].mlp.proj.weight.shape}: expected (96, 32) and "
        "(32, 96): remove the neuron's row of fc and its column of proj")
    for i in range(2):
        big, small = zeroed.blocks[i].mlp, model.blocks[i].mlp
        kept = [np.flatnonzero((big.fc.weight.data == r).all(axis=1))[0]
                for r in small.fc.weight.data]
        assert kept == sorted(kept), "keep the neurons in their original order (np.sort)"
        gone = np.setdiff1d(np.arange(128), kept)
        score = (np.linalg.norm(big.fc.weight.data, axis=1)
                 * np.linalg.norm(big.proj.weight.data, axis=0))
        assert score[gone].max() <= score[kept].min(), (
            "the removed neurons should be those with the smallest "
            "||fc row|| * ||proj column||")
        big.fc.weight.data[gone] = 0.0
        big.proj.weight.data[:, gone] = 0.0
    with no_grad():
        want, got = zeroed(idx)[0].data, model(idx)[0].data
    assert np.allclose(got, want, atol=1e-5), (
        f"the shrunk model's logits differ from the zeroed model's by "
        f"{np.abs(got - want).max():.2e}: slice fc rows and proj columns with the same indices")
    heads = prune_heads(model, 0.5)
    attn = model.blocks[0].attn
    assert heads["blocks.0.attn"] == (4, 2) and attn.qkv.weight.shape == (48, 32), (
        f"prune_heads(0.5) gave {heads} and qkv {attn.qkv.weight.shape}; expected 4 -> 2 "
        "heads and qkv (3 * 2 * 8, 32) = (48, 32): keep each kept head's q, k and v rows")
    assert attn.proj.weight.shape == (32, 16), (
        f"proj is {attn.proj.weight.shape}, expected (32, 16): the kept heads' columns")
    for i in range(2):
        a, b = zeroed.blocks[i].attn, model.blocks[i].attn
        kept_cols = [np.flatnonzero((a.proj.weight.data.T == c).all(axis=1))[0]
                     for c in b.proj.weight.data.T]
        gone = np.setdiff1d(np.arange(32), kept_cols)
        a.proj.weight.data[:, gone] = 0.0  # a head that writes nothing is removed
    with no_grad():
        want, got = zeroed(idx)[0].data, model(idx)[0].data
    assert np.allclose(got, want, atol=1e-5), (
        f"after prune_heads the logits differ by {np.abs(got - want).max():.2e} from the model "
        "whose removed heads write nothing: take rows c*C + h*D .. + D for c in q, k, v and "
        "the same h*D .. + D columns of proj, in order")

    def check_shrunk(config, neurons, heads):
        """prune_mlp_neurons then prune_heads: the sizes, the neurons chosen, the shapes."""
        manual_seed(1)
        net = GPT(config)
        copy = GPT(config)
        copy.load_state_dict(net.state_dict())
        width = 4 * config.n_embd
        keep = width - int(neurons * width)
        sizes = prune_mlp_neurons(net, neurons)
        assert sizes == {f"blocks.{i}.mlp": (width, keep) for i in range(config.n_layer)}, (
            f"prune_mlp_neurons({neurons}) reported {sizes}; expected {width} -> {keep} in "
            "every block: keep hidden - floor(amount * hidden)")
        big, small = copy.blocks[0].mlp, net.blocks[0].mlp
        kept = [np.flatnonzero((big.fc.weight.data == r).all(axis=1))[0]
                for r in small.fc.weight.data]
        gone = np.setdiff1d(np.arange(width), kept)
        score = (np.linalg.norm(big.fc.weight.data, axis=1)
                 * np.linalg.norm(big.proj.weight.data, axis=0))
        assert not len(gone) or score[gone].max() <= score[kept].min(), (
            "the removed neurons should be those with the smallest ||fc row|| * ||proj column||")
        d = config.n_embd // config.n_head
        kept_heads = config.n_head - int(heads * config.n_head)
        got = prune_heads(net, heads)
        attn = net.blocks[0].attn
        assert got["blocks.0.attn"] == (config.n_head, kept_heads), (
            f"prune_heads({heads}) gave {got}; expected {config.n_head} -> {kept_heads} heads")
        assert attn.qkv.weight.shape == (3 * kept_heads * d, config.n_embd), (
            f"qkv is {attn.qkv.weight.shape}: keep each kept head's q, k and v rows")
        assert attn.proj.weight.shape == (config.n_embd, kept_heads * d), (
            f"proj is {attn.proj.weight.shape}: keep the kept heads' columns")

    check_shrunk(GPTConfig(vocab_size=12, block_size=4, n_layer=1, n_head=4, n_embd=16), 0.25, 0.5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_shrunk, {
        "half the neurons and one of two heads": (
            GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=16), 0.5, 0.5),
        "amounts that round down, three heads": (
            GPTConfig(vocab_size=10, block_size=4, n_layer=2, n_head=3, n_embd=24), 0.1, 0.34),
        "nothing pruned": (
            GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8), 0.0, 0.0),
    })
    ### END HIDDEN TESTS


test_unit_structured()


# %% [markdown]
# ## Part 4: knowledge distillation
#
# A trained model's output is a whole distribution over the next character: after "th" it
# might say e 0.6, a 0.2, i 0.1, ... The one-hot target says only "e". A **student**
# trained to match the **teacher**'s distribution learns, from every position, which
# mistakes are reasonable. **Temperature** `T > 1` softens both distributions,
# `softmax(z / T)`, so the small probabilities (the "dark knowledge") weigh more:
#
# $$\mathcal{L} = \alpha\, T^2\, \frac1N \sum_{n} \mathrm{KL}\big(p^{(T)}_n \,\|\,
#   q^{(T)}_n\big) + (1 - \alpha)\, \mathrm{CE}(z_s, y), \quad
#   \mathrm{KL}(p \| q) = \sum_i p_i (\log p_i - \log q_i),$$
#
# with $p = \mathrm{softmax}(z_t / T)$ (the teacher, a constant) and
# $q = \mathrm{softmax}(z_s / T)$ (the student). **Why $T^2$:** the gradient of the KL term
# with respect to the student's logits
# is $(q - p) / T$, and for logits of moderate size $q - p$ itself shrinks like $1 / T$, so
# the soft term's gradient shrinks like $1 / T^2$; multiplying by $T^2$ keeps the two terms'
# gradients on the same scale whatever `T` (Hinton et al., 2015).
#
# Compute `log q` with `log_softmax` (module 02) on the student's logits divided by `T`, a
# Tensor so that autograd sees it; compute `p` and `p log p` with NumPy from the teacher's
# logits (no gradient flows into the teacher). The `p log p` term does not change the
# gradient, but makes the value a true KL: zero when the student matches the teacher.
# Logits may be `(N, V)` or `(B, T, V)`: flatten to rows.

# %% nbgrader={"grade": false, "grade_id": "distillation", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def distillation_loss(student_logits, teacher_logits, targets=None, temperature=2.0,
                      alpha=0.5):
    """alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) * CE(s, targets).

    >>> teacher = np.array([[2.0, 1.0, 0.0]])
    >>> distillation_loss(Tensor([[2.0, 1.0, 0.0]]), teacher).item()  # the same: no loss
    0.0
    >>> loss = distillation_loss(Tensor([[0.0, 0.0, 0.0]], requires_grad=True), teacher)
    >>> round(loss.item(), 4), loss.dtype
    (0.3137, dtype('float32'))
    >>> round(distillation_loss(Tensor([[2.0, 1.0, 0.0]]), teacher, targets=[0]).item(), 4)
    0.2038
    """
    s = student_logits if isinstance(student_logits, Tensor) else Tensor(student_logits)
    t = np.asarray(teacher_logits.data if isinstance(teacher_logits, Tensor) else teacher_logits)
    if s.shape != t.shape:
        raise ShapeError(f"student logits {s.shape} and teacher logits {t.shape} must have the "
                         "same shape: the same batch, sequence and vocabulary")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha weighs the soft term and must be in [0, 1], got {alpha}")
    v = s.shape[-1]
    s = s.reshape(-1, v)  # (N, V)
    t = t.reshape(-1, v).astype(s.dtype)
    ### BEGIN SOLUTION
    temp = s.dtype.type(temperature)
    shifted = t / temp - t.max(axis=-1, keepdims=True) / temp
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (N, V)
    p = np.exp(log_p)
    log_q = log_softmax(s / temp, axis=-1)  # (N, V), a Tensor: gradients flow
    kl = (Tensor(p * log_p, dtype=s.dtype) - log_q * Tensor(p, dtype=s.dtype)).sum(axis=-1)
    soft = kl.mean() * (temp * temp)
    if targets is None or alpha == 1:
        return soft
    hard = cross_entropy(s, np.asarray(targets).reshape(-1))
    return soft * s.dtype.type(alpha) + hard * s.dtype.type(1 - alpha)
    ### END SOLUTION


# %% [markdown]
# ### Test: the distillation loss, its value and its gradient

# %% nbgrader={"grade": true, "grade_id": "test_unit_distillation", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_distillation():
    """A hand-computed value, zero for a perfect student, T^2, and finite differences."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal((5, 7))
    t = rng.standard_normal((5, 7)) * 2
    y = rng.integers(0, 7, 5)

    def softmax_np(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    T = 3.0
    p, q = softmax_np(t / T), softmax_np(s / T)
    kl = np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1))
    got = distillation_loss(Tensor(s, dtype=np.float64), t, temperature=T).item()
    assert abs(got - T * T * kl) < 1e-9, (
        f"soft loss {got:.6f}, expected T^2 * mean KL(p || q) = {T * T * kl:.6f}: divide both "
        "logits by T, KL = sum p (log p - log q) per row, mean over rows, times T^2")
    same = distillation_loss(Tensor(t, dtype=np.float64), t, temperature=T).item()
    assert abs(same) < 1e-12, (
        f"a student equal to the teacher has KL {same:.3g}, expected 0: include the p log p term")
    ce = -np.mean(np.log(softmax_np(s))[np.arange(5), y])
    mixed = distillation_loss(Tensor(s, dtype=np.float64), t, y, temperature=T, alpha=0.3)
    assert abs(mixed.item() - (0.3 * T * T * kl + 0.7 * ce)) < 1e-9, (
        f"alpha=0.3 gave {mixed.item():.6f}, expected 0.3 * soft + 0.7 * cross-entropy "
        f"= {0.3 * T * T * kl + 0.7 * ce:.6f}: the hard term uses the logits at T = 1")
    three_d = distillation_loss(Tensor(s.reshape(1, 5, 7), dtype=np.float64),
                                t.reshape(1, 5, 7), temperature=T).item()
    assert abs(three_d - got) < 1e-12, "(B, T, V) logits must give the same loss as (B*T, V)"

    def check_soft(student_logits, teacher_logits, temperature):
        """The soft loss equals T^2 * mean over rows of KL(p || q), both at temperature T."""
        p, q = softmax_np(teacher_logits / temperature), softmax_np(student_logits / temperature)
        want = temperature**2 * np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1))
        got = distillation_loss(Tensor(student_logits, dtype=np.float64), teacher_logits,
                                temperature=temperature).item()
        assert abs(got - want) < 1e-9 * max(1.0, abs(want)), (
            f"soft loss {got:.6f}, expected T^2 * mean KL(p || q) = {want:.6f} at T = "
            f"{temperature}: divide both logits by T, KL = sum p (log p - log q) per row")

    check_soft(s, t, 2.0)
    student = Tensor(s, dtype=np.float64, requires_grad=True)
    assert gradcheck(lambda z: distillation_loss(z, t, y, temperature=T, alpha=0.3),
                     [student]), "the gradient does not match finite differences"
    student.grad = None
    distillation_loss(student, t, temperature=T).backward()
    want = (q - p) / 5 * T  # T^2 * (q - p) / T, per row, over 5 rows
    assert np.allclose(student.grad.data, want, atol=1e-10), (
        "the soft term's gradient should be T * (q - p) / N: is log q computed from the "
        "student's logits as a Tensor (log_softmax(s / T)), and p from the teacher as a constant?")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_soft, {
        "temperature one": (s, t, 1.0),
        "a temperature below one": (s * 0.5, t, 0.5),
        "a single row of many classes": (rng.standard_normal((1, 30)), rng.standard_normal((1, 30)),
                                         4.0),
        "confident teachers": (s, t * 20, 2.0),
    })
    ### END HIDDEN TESTS


test_unit_distillation()


# %% [markdown]
# ## Systems analysis: bytes, speed-up and a small distillation, measured on your machine
#
# **Storage.** A milestone-sized GPT's block weights pruned to 50% and 90%, stored dense
# and as CSR (measured `nbytes`), and module 15's int8 for comparison.

# %% nbgrader={"grade": false, "grade_id": "analysis-bytes", "locked": false, "schema_version": 3, "solution": false, "task": false}
def storage_report():
    manual_seed(0)
    dense = sum(w.data.nbytes for _, w in prunable_weights(GPT(GPTConfig())))
    print(f"block Linear weights, float32 dense: {dense:,} bytes")
    for amount in (0.5, 0.9):
        manual_seed(0)
        model = GPT(GPTConfig())
        prune_magnitude(model, amount)
        csr = sum(CSRMatrix.from_dense(w.data).nbytes for _, w in prunable_weights(model))
        print(f"  {amount:.0%} pruned: CSR {csr:,} bytes = {csr / dense:.1%} of dense")
    print(f"  int8 per-channel (module 15), nothing pruned: about {(1 + 4 / 128) / 4:.1%}")


storage_report()

# %% [markdown]
# **Speed.** A structured prune shrinks the matrices; an unstructured one does not. Below:
# one block of the milestone's model on 12 x 64 tokens, its MLP before and after removing
# 25% of the neurons, and its attention before and after removing one head of four. The
# runs alternate, so that a noisy neighbour slows all alike, and the best of each is kept
# (the minimum is the run least disturbed by other work).

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def speed_report(rounds=15):
    manual_seed(0)
    x = Tensor(np.random.default_rng(0).standard_normal((12, 64, 128)).astype(np.float32))
    pairs = {}
    for label, prune in (("MLP, 25% of neurons removed", prune_mlp_neurons),
                         ("attention, 1 head of 4 removed", prune_heads)):
        dense = GPT(GPTConfig(n_layer=1))
        small = GPT(GPTConfig(n_layer=1))
        small.load_state_dict(dense.state_dict())
        prune(small, 0.25)
        part = "mlp" if "MLP" in label else "attn"
        pairs[label] = [getattr(dense.blocks[0], part), getattr(small.blocks[0], part)]
    with no_grad():
        for label, modules in pairs.items():
            best = [float("inf"), float("inf")]
            call = (lambda m: m(x)) if "MLP" in label else (lambda m: m(x, is_causal=True))
            for _ in range(rounds):
                for i, module in enumerate(modules):
                    start = time.perf_counter()
                    call(module)
                    best[i] = min(best[i], time.perf_counter() - start)
            params = [sum(p.size for p in m.parameters()) for m in modules]
            print(f"  {label:31s} {params[0]:7,d} -> {params[1]:7,d} weights, "
                  f"{best[0] * 1e3:5.2f} -> {best[1] * 1e3:5.2f} ms, "
                  f"speed-up {best[0] / best[1]:.2f}x")


speed_report()

# %% [markdown]
# A quarter of the MLP's neurons is a quarter of its FLOPs (both matrices shrink), so the
# ideal is 1.33x; one head of four removes a quarter of the q, k, v and output projections
# and of the attention itself. The measured speed-up stays below the FLOP ratio: the GELU,
# the reshapes and Python's per-op overhead do not all shrink. For the whole model (norms,
# embeddings and the head do not shrink at all) see the benchmark below.
#
# **Distillation, fast version.** A trained model is needed for a real teacher, so here the
# teacher is a fixed random two-layer network on 32 inputs and 10 classes, and the student
# a smaller one; both students see the same 64 examples for the same steps, one with the
# teacher's argmax labels, the other with its softened distribution. The measure is how
# often the student agrees with the teacher on fresh inputs.

# %% nbgrader={"grade": false, "grade_id": "analysis-distill", "locked": false, "schema_version": 3, "solution": false, "task": false}
def distillation_report(steps=150):
    from tinytorch.core.activations import relu

    rng = np.random.default_rng(0)
    manual_seed(0)
    teacher = [Linear(32, 128), Linear(128, 10)]
    scale = np.float32(3.0)

    def teacher_logits(x):
        return (teacher[1](relu(teacher[0](Tensor(x)))) * scale).data

    x_train = rng.standard_normal((64, 32)).astype(np.float32)
    x_test = rng.standard_normal((2000, 32)).astype(np.float32)
    t_train, t_test = teacher_logits(x_train), teacher_logits(x_test)
    for label, soft in (("hard labels", False), ("distilled, T=4", True)):
        manual_seed(1)
        student = [Linear(32, 16), Linear(16, 10)]
        params = [p for layer in student for p in layer.parameters()]
        optimizer = AdamW(params, lr=1e-2, weight_decay=0.0)
        for _ in range(steps):
            logits = student[1](relu(student[0](Tensor(x_train))))
            if soft:
                loss = distillation_loss(logits, t_train, temperature=4.0)
            else:
                loss = cross_entropy(logits, t_train.argmax(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with no_grad():
            pred = student[1](relu(student[0](Tensor(x_test)))).data.argmax(-1)
        print(f"  student trained on {label:15s}: agrees with the teacher on "
              f"{np.mean(pred == t_test.argmax(-1)):.1%} of 2,000 new inputs")


distillation_report()

# %% [markdown]
# **On the trained TinyGPT**, `benchmarks/compression.py` measures the exact validation loss
# (the whole split) after each kind of compression and a short fine-tune, the forward
# speed-up, the CSR bytes, and a 2-layer, 64-wide student trained alone and distilled from
# the milestone's model, for the same steps:
#
# ```
# .venv/bin/python benchmarks/compression.py --checkpoint runs/tinygpt
# ```
#
# Measured on one machine (two shared cores, heavily loaded; `--threads 1`), on the
# milestone's checkpoint (float32 validation loss 1.9095). Every fine-tune is 200 AdamW
# steps at lr 2e-4; the **control** is the dense model after the same fine-tune (further
# training helps it too): 1.9086.
#
# ```
# 1. unstructured magnitude pruning, 50% of every block Linear weight
#    scope      pruned  fine-tuned   change  vs control  sparsity  CSR / dense  target (+0.05)
#    layer      1.9698      1.9026  -0.0069     -0.0060     50.0%       100.6%  met
#    global     1.9557      1.9029  -0.0066     -0.0058     50.0%       100.6%  met
#
# 2. structured pruning (the matrices shrink), then the same fine-tune
#    model                 params   pruned  fine-tuned  vs control  forward CPU  speed-up
#    dense                804,096   1.9095      1.9086     +0.0000      28.9 ms     1.00x
#    MLP neurons -25%     673,024   1.9682      1.9084     -0.0002      24.8 ms     1.16x
#    heads -25%           738,560   2.0392      1.9192     +0.0106      26.1 ms     1.11x
#    (forward of a (12, 64) batch, median of 20 alternating runs; wall-clock speed-ups
#    1.19x and 1.16x)
#
# 3. distillation: student of 106,880 parameters (2 layers, 64 wide), 1000 steps
#    student alone                        : validation loss 2.3053
#    student distilled (T=2.0, alpha=0.5) : validation loss 2.2495   (-0.0557)
# ```
#
# Half the weights go for nothing once fine-tuned (the pruned models even end a little
# below the control: on this small data set the pruning acts as a regularizer), but stored
# as CSR they take *more* bytes than dense, as Part 2 derived: unstructured sparsity at 50%
# is a saving of FLOPs only for hardware that skips zeros. Removing a quarter of the MLP
# neurons costs nothing after the fine-tune and makes the whole forward 1.16x faster. If the
# MLP takes a share $f$ of the forward, cutting a quarter of it gives $1 / (1 - f / 4)$:
# 1.14x for $f = 1/2$, so the measured 1.16x says the MLP is a little over half of this
# forward (module 14's profiler measures that share directly).
# A head of four costs more: attention has fewer, more specialized units. The distilled
# student, the same size and the same steps, reaches a loss 0.056 lower than the student
# trained alone; it pays for it with the teacher's forward on every batch.
#
# ## What comes next
#
# - **Module 17 (acceleration)** writes faster kernels: the sparse and low-bit formats of
#   modules 15 and 16 only turn into speed with kernels that exploit them.
# - **Module 18 (KV caching)** makes generation fast without touching the weights.
# - **The capstone** combines them: quantize, prune, distill and cache your TinyGPT, and
#   prove each step with a measurement.
