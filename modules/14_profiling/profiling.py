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
# # Module 14: Profiling
#
# ## Overview
#
# Module 13 ended with a GPT that trains on a CPU, and a promise: everything from here makes
# it fast, small and deployable, and every optimization targets a number you measured
# first. This module builds the instrument that measures those numbers. A **profiler** runs
# your model and says, layer by layer, where the time goes, how much arithmetic each layer
# does, how much memory each layer leaves behind for the backward pass, and what share of
# the whole each of those is.
#
# Guessing is how optimization goes wrong. Attention is quadratic in the context, so surely
# it dominates? On the milestone's TinyGPT (context 64) it does not: the MLP does about 1.6
# times its arithmetic. You will measure it instead of believing it.
#
# The profiler reads the two records your framework already keeps. Every operation passes
# through `Function.apply` (module 01), so that is where arithmetic can be counted; every
# layer is called through `Module.__call__` (module 03), so that is where time can be
# attributed to a layer. Both have a tiny hook point, empty unless a profiler listens.
#
# ## Learning objectives
#
# - Time code honestly: warm-up, repeats, and when to report the minimum or the median.
# - Count the floating-point operations of matrix products, attention and element-wise ops,
#   and check a count against one done by hand.
# - Find the memory a forward pass keeps alive for backward, without counting a shared
#   buffer twice.
# - Attribute time, FLOPs and memory to the layers of a model tree, as self time.
# - Derive the `6 x parameters x tokens` rule for a training step and check it on your GPT.
# - Answer, with numbers: attention against MLP, memory against sequence length, and which
#   layer is the bottleneck.
#
# ## What you build
#
# - `matmul_flops`, `attention_flops` and `op_flops(fn, arrays, params, output)`: FLOPs of
#   the operations that actually ran.
# - `kept_arrays(ctx)` and `new_saved_bytes(ctx, seen)`: the bytes a graph keeps for
#   backward, each buffer once.
# - The listener that attributes each op and each layer call to a row of the profile, and
#   `backward_flops(ctx, forward)`: the cost of each recorded op's derivative.
# - Given: `Profiler(depth=..., repeat=..., warmup=...)` with `profile_forward_pass(model, x)`
#   and `profile_training_step(model, x, y, optimizer, loss_fn=None)`, and the `Profile` it
#   returns, with a rich table (`show()`), a matplotlib figure (`plot(path)`) and groupings.
#
# ## What you are not building yet
#
# - **Per-layer backward time.** Backward runs in module 06's engine, not through
#   `Module.__call__`; the profile measures the backward pass as a whole and counts its FLOPs
#   per layer from the recorded graph. (PyTorch's profiler hooks the autograd engine too.)
# - **Making anything faster.** Quantization (15), compression (16), acceleration (17) and
#   KV caching (18) act on what you measure here.
# - **Hardware counters.** FLOPs here are counted from shapes, not read from the CPU.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp perf.profiling
#| export
import math
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytorch.core import layers as _layers
from tinytorch.core import tensor as _tensor
from tinytorch.core.activations import (
    GELUFunction, LogSoftmaxFunction, ReLUFunction, SigmoidFunction, SiLUFunction,
    SoftmaxFunction, TanhFunction,
)
from tinytorch.core.attention import AttentionFunction
from tinytorch.core.embeddings import EmbeddingFunction, RotaryFunction
from tinytorch.core.layers import Module
from tinytorch.core.losses import BCEWithLogitsFunction, CrossEntropyFunction
from tinytorch.core.tensor import (
    Add, Div, Exp, GetItem, Log, MatMul, Max, Mean, Mul, Neg, Permute, Pow, Reshape, Sub,
    Sum, Tensor, Transpose,
)
from tinytorch.models.transformer import LayerNormFunction, RMSNormFunction

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.optimizers import SGD, AdamW
from tinytorch.core.tensor import manual_seed
from tinytorch.testing import best_time, time_runs
from tinytorch.models.transformer import GPT, GPTConfig

# %% [markdown]
# ## Part 1: timing, and where a profiler can listen
#
# **Timing.** Module 01 gave every lesson one timing helper, `time_runs(fn, repeat, warmup,
# min_time)`: `warmup` untimed calls, then `repeat` timed runs, seconds per call for each.
# `best_time` reports the fastest run. Three things make a time honest:
#
# 1. **Warm-up.** The first call of anything pays for things later calls do not: NumPy
#    allocating fresh memory from the operating system, caches filling, lazy imports. A
#    profile that includes the first call blames a layer for start-up costs.
# 2. **Repeats.** On a machine shared with other programs every run is the true cost plus
#    some interference, which is never negative.
# 3. **The right summary.** The **minimum** estimates what the code itself costs, the
#    figure to compare two implementations with. The **median** estimates what a run
#    typically costs, interference included, and is robust to one run hit by a hiccup in
#    either direction. A profile splits one run into shares; the median of each layer's
#    time over runs keeps the shares of a typical run. (Adding up per-layer minima from
#    different runs would describe a run that never happened.)

# %% nbgrader={"grade": false, "grade_id": "timing-demo", "locked": false, "schema_version": 3, "solution": false, "task": false}
def timing_demo():
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    runs = time_runs(lambda: a @ a, repeat=7, warmup=1, min_time=0.002)
    print("256x256 matmul, 7 runs (us per call): " + " ".join(f"{r * 1e6:.0f}" for r in runs))
    print(f"best {min(runs) * 1e6:.0f} us, median {statistics.median(runs) * 1e6:.0f} us, "
          f"worst {max(runs) * 1e6:.0f} us")


timing_demo()

# %% [markdown]
# **Where to listen.** A profiler must see two things: every operation that runs, and every
# layer call. Your framework funnels both through one place each, given in earlier modules:
#
# - `Function.apply` (module 01) ends with
#   `if _op_observers: for observe in _op_observers: observe(cls, arrays, params, result)`.
#   `arrays` are the raw inputs the op's `forward` saw, `result` the output `Tensor`, whose
#   `_ctx` is the record backward will use (or `None` when nothing is recorded).
# - `Module.__call__` (module 03) calls `observer.enter(module)` before `forward` and
#   `observer.exit(module)` after it (also when it raises) for each of `_call_observers`.
#
# Both lists are empty unless a profiler is running, so the cost when nobody listens is one
# truth test per call (measured in the systems analysis). Nothing is monkey-patched: the
# class you read is the class that runs, profiled or not. PyTorch has the same two hook
# points: `torch.nn.modules.module.register_module_forward_hook` for module calls, and
# dispatcher-level hooks (`TorchDispatchMode`) for operations.
#
# A first listener that just prints what a `Linear` does:

# %% nbgrader={"grade": false, "grade_id": "hooks-demo", "locked": false, "schema_version": 3, "solution": false, "task": false}
def hooks_demo():
    manual_seed(0)
    layer = Linear(4, 3)

    def show(fn, arrays, params, result):
        shapes = ", ".join(str(a.shape) for a in arrays)
        print(f"  op {fn.__name__:8s} inputs {shapes:18s} -> {result.shape}")

    _tensor._op_observers.append(show)
    try:
        layer(Tensor(np.ones((2, 4), dtype=np.float32)))
    finally:
        _tensor._op_observers.remove(show)


hooks_demo()

# %% [markdown]
# `x @ W.T + b` is three operations: a `Permute` (the transpose, a view: no arithmetic), a
# `MatMul` and an `Add`. Always remove a listener in `finally`: a listener left behind
# slows every later operation of the session.
#
# ## Part 2: counting FLOPs
#
# A **FLOP** here is one floating-point addition or multiplication. Counting them from the
# shapes of the operations that actually ran gives a number that does not depend on the
# machine, and dividing it by the measured time gives the throughput (GFLOP/s) to compare
# with what the CPU can do (about 190 GFLOP/s for a good float32 matmul on two cores).
#
# **Matrix products.** `(m, k) @ (k, n)` computes $mn$ outputs, each a sum of `k`
# products: $k$ multiplications and $k - 1$ additions, counted as $2mkn$ (the
# multiply-add convention everyone uses). Leading axes broadcast, and each broadcast batch
# element is one more matrix product: `(B, H, T, D) @ (B, H, D, T)` costs
# $2BHTDT$. A 1-D operand is a vector: `(m, k) @ (k,)` is $2mk$.
#
# **Attention** (module 12's fused operation), per batch-and-head, with `T` queries, `S`
# keys, head sizes `D` and `Dv`: the scores `q @ k^T` cost $2TSD$, the weighted values
# `P @ v` cost $2TSD_v$, and in between each of the $TS$ scores is scaled once and goes
# through a softmax (maximum, subtraction, exponential, sum, division: five), six per score.
# With dropout on the weights, one more multiplication per weight. A causal mask does not
# save any of it: your module 12 computes the whole `(T, S)` matrix and masks it.
#
# **Everything else** is counted per element, with the convention written down in one
# table: one per element for `+ - * / neg ** exp log`, ReLU and tanh; the number of steps of
# the formula for the others (sigmoid 3: exp, add, divide; SiLU 4; GELU's tanh form 8, its
# exact form about 28 with module 02's erf polynomial); softmax and log-softmax 5; layer norm
# 5 to normalize plus 1 for the weight and 1 for a bias; RMS norm 4; rotary embedding 3.
# Reductions (`sum`, `mean`, `max`) cost one per **input** element, cross-entropy 5 per
# logit. Reshapes, transposes, indexing and embedding lookups move data and cost 0 FLOPs
# (they are not free in time: the profile shows that too). An operation missing from the
# table is reported as uncounted rather than guessed.
#
# Write `matmul_flops`, `attention_flops`, and `op_flops`, which dispatches on the
# `Function` class: `MatMul` and `AttentionFunction` by their formulas, the rest from the
# tables below, and `None` for an operation no rule covers.

# %% nbgrader={"grade": false, "grade_id": "flop-tables", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
# FLOPs per element of the output, by operation.
PER_OUTPUT_ELEMENT = {
    Add: 1, Sub: 1, Mul: 1, Div: 1, Neg: 1, Pow: 1, Exp: 1, Log: 1,
    ReLUFunction: 1, TanhFunction: 1, SigmoidFunction: 3, SiLUFunction: 4,
    SoftmaxFunction: 5, LogSoftmaxFunction: 5, RMSNormFunction: 4, RotaryFunction: 3,
}
# FLOPs per element of the first input (reductions, losses).
PER_INPUT_ELEMENT = {Sum: 1, Mean: 1, Max: 1, CrossEntropyFunction: 5, BCEWithLogitsFunction: 5}
# Operations that move or select data and do no arithmetic.
NO_ARITHMETIC = {Reshape, Transpose, Permute, GetItem, EmbeddingFunction}
GELU_FLOPS = {"tanh": 8, "none": 28}  # per element; module 02's two formulas


def _batch(*leading_shapes):
    """How many matrices a broadcast batch holds: the product of the broadcast leading axes."""
    return math.prod(np.broadcast_shapes(*[tuple(s) for s in leading_shapes]))


# %% nbgrader={"grade": false, "grade_id": "flops", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def matmul_flops(a_shape, b_shape):
    """2 * m * k * n for (..., m, k) @ (..., k, n), times the broadcast batch; 1-D = vector.

    >>> matmul_flops((4, 3), (3, 5)), matmul_flops((8, 4, 3), (3, 5))  # 8 matrices
    (120, 960)
    >>> matmul_flops((3,), (3, 5))  # a vector is one row
    30
    """
    ### BEGIN SOLUTION
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if len(a_shape) == 1:
        a_shape = (1,) + a_shape  # a vector on the left is one row
    if len(b_shape) == 1:
        b_shape = b_shape + (1,)  # a vector on the right is one column
    m, k = a_shape[-2:]
    n = b_shape[-1]
    return 2 * m * k * n * _batch(a_shape[:-2], b_shape[:-2])
    ### END SOLUTION


def attention_flops(q_shape, k_shape, v_shape, dropout=False):
    """Per (batch, head): 2TSD scores + 2TSDv values + 6TS scale and softmax (+TS dropout).

    >>> shape = (2, 4, 8, 16)  # (B, H, T, D): 2 sequences, 4 heads, 8 tokens
    >>> attention_flops(shape, shape, shape)
    35840
    >>> attention_flops(shape, shape, shape, dropout=True)  # + T * S per (batch, head)
    36352
    """
    ### BEGIN SOLUTION
    t, d = q_shape[-2:]
    s, dv = k_shape[-2], v_shape[-1]
    per_head = 2 * t * s * d + 2 * t * s * dv + 6 * t * s + (t * s if dropout else 0)
    return per_head * _batch(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    ### END SOLUTION


def op_flops(fn, arrays, params, output):
    """FLOPs of one operation that ran: fn (its Function class) on input arrays -> output.

    >>> a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    >>> out = a @ b
    >>> op_flops(MatMul, (a, b), {}, out), op_flops(Add, (out, out), {}, out)
    (120, 20)
    >>> op_flops(Reshape, (out,), {}, out.reshape(20))  # moves data, no arithmetic
    0
    """
    ### BEGIN SOLUTION
    if fn is MatMul:
        return matmul_flops(arrays[0].shape, arrays[1].shape)
    if fn is AttentionFunction:
        q, k, v = arrays[:3]
        return attention_flops(q.shape, k.shape, v.shape, params.get("drop") is not None)
    if fn in NO_ARITHMETIC:
        return 0
    if fn is GELUFunction:
        return GELU_FLOPS[params.get("approximate", "none")] * output.size
    if fn is LayerNormFunction:  # arrays: x, weight, and a bias when there is one
        return (5 + len(arrays) - 1) * output.size
    if fn in PER_OUTPUT_ELEMENT:
        return PER_OUTPUT_ELEMENT[fn] * output.size
    if fn in PER_INPUT_ELEMENT:
        return PER_INPUT_ELEMENT[fn] * arrays[0].size
    return None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_flops", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_flops():
    """Matmul and attention FLOPs equal hand counts; op_flops dispatches by Function class."""
    cases = [
        (((4, 3), (3, 5)), 2 * 4 * 3 * 5, "2 * m * k * n"),
        (((2, 7, 4, 3), (3, 5)), 2 * 7 * 2 * 4 * 3 * 5, "the leading (2, 7) batch multiplies it"),
        (((2, 1, 4, 3), (6, 3, 5)), 12 * 2 * 4 * 3 * 5, "the batch broadcasts (2, 1) with (6,)"),
        (((4, 3), (3,)), 2 * 4 * 3, "a 1-D right operand is one column"),
    ]

    def check_matmul(a, b, want, why):
        got = matmul_flops(a, b)
        assert got == want, (
            f"matmul_flops{a, b} = {got}, expected {want} ({why}): each of the m*n outputs is "
            "k multiply-adds, 2*k FLOPs, and every broadcast batch element is one more product"
        )

    def check_attention(q, k, v, dropout, want):
        got = attention_flops(q, k, v, dropout=dropout)
        assert got == want, (
            f"attention_flops for q {q}, k {k}, v {v}, dropout={dropout} = {got}, expected "
            f"{want}: per head 2TSD for q @ k^T, 2TS*Dv for P @ v, 6TS for scale + softmax, "
            "and TS more with dropout"
        )

    def check_op(op, arrays, params, out, want):
        got = op_flops(op, arrays, params, out)
        assert got == want, (
            f"op_flops({op.__name__}) on {[np.shape(a) for a in arrays]} = {got}, expected "
            f"{want}: element-wise ops count their output elements, reductions their input "
            "elements, MatMul uses matmul_flops"
        )

    for (a, b), want, why in cases:
        check_matmul(a, b, want, why)
    B, H, T, S, D = 2, 3, 5, 7, 4
    want = B * H * (2 * T * S * D + 2 * T * S * 6 + 6 * T * S)
    got = attention_flops((B, H, T, D), (B, H, S, D), (B, H, S, 6))
    assert got == want, (
        f"attention_flops for q (2, 3, 5, 4), k (2, 3, 7, 4), v (2, 3, 7, 6) = {got}, expected "
        f"{want}: per head 2TSD for q @ k^T, 2TS*Dv for P @ v, and 6TS for scale + softmax"
    )
    assert attention_flops((B, H, T, D), (B, H, S, D), (B, H, S, D), dropout=True) == \
        attention_flops((B, H, T, D), (B, H, S, D), (B, H, S, D)) + B * H * T * S, (
            "dropout on the weights adds one multiplication per weight: + B*H*T*S"
        )
    x = np.ones((4, 6), dtype=np.float32)
    assert op_flops(MatMul, [x, np.ones((6, 2), np.float32)], {}, np.ones((4, 2))) == 96, (
        "op_flops(MatMul, ...) should use matmul_flops on the two input shapes: 2*4*6*2 = 96"
    )
    assert op_flops(Add, [x, x], {}, x) == 24, "Add costs one FLOP per output element (24)"
    assert op_flops(Reshape, [x], {"shape": (24,)}, x.reshape(24)) == 0, (
        "a reshape moves no numbers through arithmetic: 0 FLOPs (NO_ARITHMETIC)"
    )
    assert op_flops(Sum, [x], {"axis": None}, np.float32(1)) == 24, (
        "a reduction costs one FLOP per INPUT element: sum over (4, 6) is 24, not 1"
    )
    assert op_flops(GELUFunction, [x], {"approximate": "tanh"}, x) == 8 * 24, (
        "GELU's tanh form costs GELU_FLOPS['tanh'] = 8 per element"
    )
    assert op_flops(LayerNormFunction, [x, x[0], x[0]], {}, x) == 7 * 24, (
        "layer norm with a bias: 5 per element to normalize, +1 weight, +1 bias = 7 per element"
    )

    class Mystery:
        pass

    assert op_flops(Mystery, [x], {}, x) is None, (
        "an operation no rule covers must give None (reported as uncounted), not a guess"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_matmul, {
        "one by one": ((1, 1), (1, 1), 2, ""),
        "a vector as the left operand": ((5,), (5, 3), 30, ""),
        "batches that broadcast on both sides": ((3, 1, 2, 4), (2, 4, 6), 576, ""),
        "a batched right operand": ((2, 3), (2, 3, 4), 96, ""),
        "two vectors": ((7,), (7,), 14, ""),
    })
    hidden_cases(check_attention, {
        "one of everything": ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1), False, 10),
        "other value width, with dropout": ((2, 4, 3, 8), (2, 4, 9, 8), (2, 4, 9, 2), True, 5832),
    })
    wide = np.ones((3, 5), np.float32)
    hidden_cases(check_op, {
        "an addition that broadcasts": (Add, [wide, np.ones(5, np.float32)], {}, wide, 15),
        "a sum over one axis": (Sum, [wide], {"axis": 0}, np.ones(5), 15),
        "a product of matrices": (MatMul, [wide, np.ones((5, 2), np.float32)], {},
                                  np.ones((3, 2)), 60),
        "a reshape of another shape": (Reshape, [wide], {"shape": (5, 3)}, wide.reshape(5, 3), 0),
    })
    ### END HIDDEN TESTS


test_unit_flops()


# %% [markdown]
# ## Part 3: the memory a forward pass keeps for backward
#
# During a training forward pass every operation on tensors that require gradients leaves
# a record, `ctx` (module 01): its input arrays, its output array, its parameters, and for
# fused operations what `forward` chose to save (`ctx.saved`: layer norm's normalized input
# and inverse deviation). Those arrays stay alive until backward has used them: that is the
# **activation memory** of training, and for large models and long contexts it is larger
# than the weights.
#
# Counting it naively double-counts. The output of one op is the input of the next (one
# array, two records); a reshape, transpose or slice is a **view** of its input's memory, so
# `qkv[0]`, `qkv[1]` and `qkv[2]` all keep the whole `qkv` buffer alive. The honest count
# follows each array to the buffer that owns its memory (`array.base`, until there is none),
# and counts each buffer once. The parameters are not activations: the profiler marks their
# buffers as seen before it starts.
#
# Write `kept_arrays(ctx)`: every NumPy array a record holds (inputs, output, the items of
# `saved` when it is a tuple or list or the array itself, and array-valued parameters such
# as attention's mask or embedding's indices). Then `new_saved_bytes(ctx, seen)`: the bytes
# of the buffers of `kept_arrays(ctx)` that are not in `seen` yet, adding them to `seen`
# (a dict from `id(buffer)` to the buffer; holding the buffer keeps its id from being
# reused by a new array while the count runs).

# %% nbgrader={"grade": false, "grade_id": "buffer-of", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def buffer_of(array):
    """The array that owns the memory `array` is a view of (itself when it owns its data).

    >>> a = np.zeros((4, 4), np.float32)
    >>> buffer_of(a[1:, ::2].T) is a, buffer_of(a) is a, buffer_of(a.copy()) is a
    (True, True, False)
    """
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


# %% nbgrader={"grade": false, "grade_id": "saved-bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def kept_arrays(ctx):
    """Every NumPy array an op's record keeps alive: inputs, output, saved, array params.

    >>> x = Tensor(np.ones((4, 3)), requires_grad=True)
    >>> y = x @ Tensor(np.ones((3, 5)))  # y._ctx: the record of this matmul
    >>> [a.shape for a in kept_arrays(y._ctx)]  # the two inputs and the output
    [(4, 3), (3, 5), (4, 5)]
    """
    ### BEGIN SOLUTION
    arrays = list(ctx.inputs) + [ctx.output]
    if isinstance(ctx.saved, (tuple, list)):
        arrays.extend(ctx.saved)
    elif ctx.saved is not None:
        arrays.append(ctx.saved)
    arrays.extend(ctx.params.values())
    return [a for a in arrays if isinstance(a, np.ndarray)]
    ### END SOLUTION


def new_saved_bytes(ctx, seen):
    """Bytes of the buffers ctx keeps that are not in `seen` (id -> buffer); records them.

    >>> x = Tensor(np.ones((4, 3)), requires_grad=True)  # float32: 4 bytes a number
    >>> y = x @ Tensor(np.ones((3, 5)))
    >>> z = y.exp()
    >>> seen = {}
    >>> new_saved_bytes(y._ctx, seen)  # (12 + 15 + 20) * 4
    188
    >>> new_saved_bytes(z._ctx, seen)  # its input is y's output, already counted
    80
    >>> new_saved_bytes(y._ctx, seen)
    0
    """
    ### BEGIN SOLUTION
    total = 0
    for array in kept_arrays(ctx):
        buffer = buffer_of(array)
        if id(buffer) not in seen:
            seen[id(buffer)] = buffer
            total += buffer.nbytes
    return total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_saved_bytes", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_saved_bytes():
    """Saved bytes count each buffer once, through views, with saved and array params."""
    w = Tensor(np.ones((8, 16), dtype=np.float32), requires_grad=True)
    x = Tensor(np.ones((4, 8), dtype=np.float32))
    h = x @ w  # MatMul keeps x (128 B), w (512 B) and h (256 B)
    arrays = kept_arrays(h._ctx)
    assert any(a is h.data for a in arrays) and len(arrays) == 3, (
        f"kept_arrays of a MatMul record should hold its 2 inputs and its output, got "
        f"{len(arrays)} arrays: include ctx.inputs and ctx.output"
    )
    seen = {id(w.data): w.data}  # the parameter is not an activation
    got = new_saved_bytes(h._ctx, seen)
    assert got == 4 * 8 * 4 + 4 * 16 * 4, (
        "the MatMul record keeps x (4*8 floats) and h (4*16 floats) beyond the seen weight: "
        f"768 bytes, got {got}: count each buffer's nbytes once, skipping those already in seen"
    )
    r = h.reshape(2, 32)  # a view of h
    t = r.transpose()  # a view of a view
    assert new_saved_bytes(r._ctx, seen) == 0 and new_saved_bytes(t._ctx, seen) == 0, (
        "reshape and transpose are views of h, whose buffer was already counted: follow "
        "array.base with buffer_of(array) and count each buffer once"
    )
    y = t * 2.0  # a new (32, 2) buffer and a 0-d constant
    assert new_saved_bytes(y._ctx, seen) == 32 * 2 * 4 + 4, (
        "t * 2.0 keeps its new output (256 bytes) and the 0-d constant 2.0 (4 bytes)"
    )

    def check_matmul_kept(m, k, n):
        """x (m, k) @ a seen weight (k, n): the record keeps x and the output beyond it."""
        w = Tensor(np.ones((k, n), dtype=np.float32), requires_grad=True)
        h = Tensor(np.ones((m, k), dtype=np.float32)) @ w
        got = new_saved_bytes(h._ctx, {id(w.data): w.data})
        assert got == 4 * (m * k + m * n), (
            f"x ({m}, {k}) @ w ({k}, {n}) keeps x and h beyond the seen weight: "
            f"{4 * (m * k + m * n)} bytes, got {got}"
        )
        view = h.reshape(-1)
        assert new_saved_bytes(view._ctx, {id(h.data): h.data}) == 0, (
            "a view of a buffer already counted adds nothing: follow array.base"
        )

    check_matmul_kept(4, 8, 16)
    from tinytorch.core.tensor import Context

    ctx = Context(Add, (), [np.ones(3, np.float32)], np.ones(3, np.float32),
                  {"keep": np.ones((5, 5), dtype=bool), "axis": -1})
    ctx.saved = (np.ones(7, np.float32), np.ones(2, np.float32))
    got = new_saved_bytes(ctx, {})
    assert got == 12 + 12 + 25 + 28 + 8, (
        f"a record with 2 saved arrays and a (5, 5) bool mask parameter keeps 85 bytes, got "
        f"{got}: include the items of ctx.saved and the ndarray values of ctx.params"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_matmul_kept, {
        "a single row": (1, 5, 7),
        "a wide input and a narrow output": (6, 32, 1),
        "square matrices": (9, 9, 9),
    })
    ### END HIDDEN TESTS


test_unit_saved_bytes()


# %% [markdown]
# ## Part 4: attributing ops and calls to layers
#
# A profile has one **row** per layer: every module of the model tree down to `depth`
# levels (`depth=1`: the model's direct children; the model itself is the row `""`).
# Modules deeper than `depth` are merged into their ancestor's row. Each row reports its
# **self** figures: what ran inside that module but not inside a deeper row, so the rows add
# up to the whole, and a `TransformerBlock` row holds its two residual additions while its
# attention and MLP have rows of their own.
#
# The listener keeps a **stack**, one entry per module call in progress: the row name (or
# `None` for a module deeper than `depth`, or not in the model's tree) and the time it
# started.
#
# - `enter(module)`: push `(row or None, time.perf_counter())`.
# - `exit(module)`: pop; for a row, add the elapsed time to that row, and **subtract** it
#   from the nearest enclosing row on the stack. That is self time: the parent's clock ran
#   during the child's call, and those seconds are the child's.
# - `op(fn, arrays, params, result)`: the innermost row on the stack gets the op's FLOPs
#   (`op_flops`; an op with no rule goes into `uncounted` by name), and, when the result
#   has a record, its new saved bytes and the FLOPs of its derivative (Part 5).
#
# The profiler installs the listener in both hook lists for one counting run, and in the
# module-call list only for the timed runs: counting FLOPs costs Python time per op, which
# must not be charged to the layers.

# %% nbgrader={"grade": false, "grade_id": "listener", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def row_depth(name):
    """How deep a dotted module name is: "" (the model) is 0, "blocks.0.attn" is 3.

    >>> row_depth(""), row_depth("lm_head"), row_depth("blocks.0.attn")
    (0, 1, 3)
    """
    return 0 if name == "" else name.count(".") + 1


class _Listener:
    """Attributes module-call time, and op FLOPs and saved bytes, to the rows of a profile."""

    def __init__(self, names, depth, seen):
        self.names = names  # id(module) -> dotted name in the model ("" is the model)
        self.depth = depth
        self.seen = seen  # buffers already counted: id -> array (the parameters at first)
        self.stack = []  # (row name or None, start time), one per call in progress
        self.time, self.calls = {}, {}
        self.flops, self.backward_flops, self.saved = {}, {}, {}
        self.uncounted = set()

    def row(self):
        """The innermost row on the stack, or None outside the model."""
        for name, _ in reversed(self.stack):
            if name is not None:
                return name
        return None

    def enter(self, module):
        ### BEGIN SOLUTION
        name = self.names.get(id(module))
        if name is not None and row_depth(name) > self.depth:
            name = None  # merged into its ancestor's row
        self.stack.append((name, time.perf_counter()))
        ### END SOLUTION

    def exit(self, module):
        ### BEGIN SOLUTION
        name, start = self.stack.pop()
        if name is None:
            return
        elapsed = time.perf_counter() - start
        self.time[name] = self.time.get(name, 0.0) + elapsed
        self.calls[name] = self.calls.get(name, 0) + 1
        parent = self.row()
        if parent is not None:
            self.time[parent] = self.time.get(parent, 0.0) - elapsed  # self time
        ### END SOLUTION

    def op(self, fn, arrays, params, result):
        ### BEGIN SOLUTION
        row = self.row()
        row = OUTSIDE if row is None else row
        flops = op_flops(fn, arrays, params, result.data)
        if flops is None:
            self.uncounted.add(fn.__name__)
            flops = 0
        self.flops[row] = self.flops.get(row, 0) + flops
        if result._ctx is not None:
            self.saved[row] = self.saved.get(row, 0) + new_saved_bytes(result._ctx, self.seen)
            extra = backward_flops(result._ctx, flops)
            self.backward_flops[row] = self.backward_flops.get(row, 0) + extra
        ### END SOLUTION


OUTSIDE = "(outside the model)"  # ops of a loss function called on the model's output

# %% [markdown]
# ## Part 5: the training step, and `6 x parameters x tokens`
#
# Backward runs module 06's engine over the records the forward left. Its FLOPs can be
# counted from those records, one rule per operation:
#
# - A **matrix product** `C = A @ B` has two gradient products, $dA = dC\, B^\top$ and
#   $dB = A^\top dC$, each as large as the forward product. So backward costs the forward's
#   FLOPs **once per input that requires a gradient** (`ctx.parents[i].requires_grad`): the
#   first layer's input data needs no gradient, the weights always do.
# - **Attention** (module 12) recomputes the probabilities ($2TSD + 6TS$), then $dV = P^\top dO$
#   ($2TSD_v$) when `v` needs it and, when `q` or `k` does, $dP = dO\, V^\top$ ($2TSD_v$), $dS$
#   ($3TS$: a row sum, a subtraction, a multiplication), and `dQ`, `dK` ($2TSD$ each, for
#   the inputs that need them).
# - **Everything else** (element-wise ops, norms, softmax, losses): twice its forward FLOPs
#   when any input needs a gradient, the usual rule of thumb, and a small share of the
#   total.
#
# Why $6ND$? In a transformer almost every FLOP is a matrix product with a weight matrix.
# Each of the `N` weights takes part in one multiply-add per token in the forward ($2N$
# FLOPs per token) and in two in the backward ($4N$): $6N$ per token, $6ND$ for $D$
# tokens. The rule leaves out attention's scores (`q @ k^T` and `P @ v` have no weights:
# $12 \cdot \text{n\_layer} \cdot T \cdot \text{n\_embd}$ per token for the whole step) and
# the element-wise work. `N` counts
# the weights that take part in matrix products: not the position table (a lookup), but a
# token table tied to the output layer does count, as the output layer.
#
# Write `backward_flops(ctx, forward)`: the FLOPs of the derivative of the op recorded in
# `ctx`, whose forward cost `forward` FLOPs.

# %% nbgrader={"grade": false, "grade_id": "backward-flops", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def backward_flops(ctx, forward):
    """FLOPs of the derivative of the op recorded in ctx (forward = its forward FLOPs).

    >>> x = Tensor(np.ones((4, 3)), requires_grad=True)
    >>> w = Tensor(np.ones((3, 5)), requires_grad=True)
    >>> y = x @ w  # 120 FLOPs forward
    >>> backward_flops(y._ctx, 120)  # one matmul for each input's gradient
    240
    >>> backward_flops((x @ Tensor(np.ones((3, 5))))._ctx, 120)  # only x needs one
    120
    """
    needs = [p.requires_grad for p in ctx.parents]
    if not any(needs):
        return 0
    ### BEGIN SOLUTION
    if ctx.fn is MatMul:
        return forward * sum(needs[:2])
    if ctx.fn is AttentionFunction:
        q, k, v = ctx.inputs[:3]
        t, d = q.shape[-2:]
        s, dv = k.shape[-2], v.shape[-1]
        per_head = 2 * t * s * d + 6 * t * s  # the probabilities, recomputed
        if needs[2]:
            per_head += 2 * t * s * dv
        if needs[0] or needs[1]:
            per_head += 2 * t * s * dv + 3 * t * s + 2 * t * s * d * (needs[0] + needs[1])
        return per_head * _batch(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return 2 * forward
    ### END SOLUTION


# %% [markdown]
# The `Profiler` and its `Profile` are given: they run the model, install the listener,
# take the medians, and present the result. Read `_run_counted` and `_rows` first.
#
# `profile_training_step(model, x, y, optimizer, loss_fn=None)` needs a loss. With
# `loss_fn`, the step is `loss = loss_fn(model(x), y)` (the loss's ops get the row
# `(outside the model)`). Without it, the model computes its own loss, as your `GPT` does:
# `model(x, y)` must return `(output, loss)`. Each profiled step is a **real** training step
# (`zero_grad`, forward, backward, `optimizer.step()`): the weights change, as they would in
# training. Profile a copy if that matters.
#
# A model called on an input it cannot take stops the profile with a `ProfileError` that
# names the input's shape, what the model expects (when the model says: a GPT's
# `block_size`, a first `Linear`'s `in_features`), and the model's own message.

# %% nbgrader={"grade": false, "grade_id": "profiler", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class ProfileError(ValueError):
    """The model cannot be profiled on this input; the message names both shapes.

    >>> from tinytorch.nn import Linear
    >>> try:
    ...     Profiler(repeat=1).profile_forward_pass(Linear(8, 4), Tensor(np.zeros((2, 5))))
    ... except ProfileError as error:
    ...     print(str(error).split(": the model")[0])
    cannot profile Linear on an input of shape (2, 5)
    """


@dataclass
class LayerRow:
    """One row of a profile: a module's own (self) figures.

    >>> row = LayerRow("blocks.0", "TransformerBlock", params=3104, time=0.002, flops=98304,
    ...                backward_flops=196608, saved_bytes=65536, calls=1)
    >>> print(f"{row.name}: {row.flops / row.time / 1e9:.3f} GFLOP/s")
    blocks.0: 0.049 GFLOP/s
    """

    name: str
    kind: str
    params: int
    time: float  # median seconds per run (forward; self time)
    flops: int  # forward FLOPs of the ops that ran in this row
    backward_flops: int  # FLOPs of their derivatives (from the recorded graph)
    saved_bytes: int  # activation bytes this row's ops keep for backward
    calls: int


@dataclass
class Profile:
    """What a Profiler measured: one row per layer, and the run as a whole.

    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.nn import Linear, ReLU, Sequential
    >>> manual_seed(0)
    >>> model = Sequential(Linear(8, 16), ReLU(), Linear(16, 4))
    >>> x = Tensor(np.random.default_rng(0).standard_normal((32, 8)))
    >>> profile = Profiler(repeat=2).profile_forward_pass(model, x)
    >>> profile.what, profile.model, profile.input_shape
    ('forward pass', 'Sequential', (32, 8))
    >>> profile.flops, profile.saved_bytes
    (13440, 8192)
    >>> first = profile.row("0")  # the first Linear
    >>> first.kind, first.params, first.flops, round(profile.share(first, "flops"), 3)
    ('Linear', 144, 8704, 0.648)
    >>> sorted((group.name, group.flops) for group in profile.grouped())  # summed by class
    [('Linear', 12928), ('Sequential', 512)]

    ReLU (module 02) is not a Module, so its FLOPs are the model's own: row "".
    """

    what: str  # "forward pass" or "training step"
    model: str
    input_shape: tuple
    rows: list
    total_time: float  # median seconds of the whole run (forward, or the whole step)
    phases: dict  # median seconds: forward (and backward, optimizer for a step)
    peak_bytes: int  # peak memory NumPy allocated during the counted run (tracemalloc)
    repeat: int
    uncounted: set = field(default_factory=set)

    @property
    def flops(self):
        return sum(r.flops for r in self.rows)

    @property
    def backward_flops(self):
        return sum(r.backward_flops for r in self.rows)

    @property
    def saved_bytes(self):
        return sum(r.saved_bytes for r in self.rows)

    def row(self, name):
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no row {name!r}; rows are {[r.name for r in self.rows]}")

    def share(self, row, of="time"):
        """A row's share of the rows' total time, flops, backward_flops or saved_bytes."""
        total = sum(getattr(r, of) for r in self.rows)
        return getattr(row, of) / total if total else 0.0

    def grouped(self, key=lambda row: row.kind):
        """Rows summed by key(row) (default: the module's class), largest time first."""
        groups, kinds = {}, {}
        for r in self.rows:
            name = key(r)
            g = groups.setdefault(name, LayerRow(name, r.kind, 0, 0.0, 0, 0, 0, 0))
            kinds.setdefault(name, set()).add(r.kind)
            g.kind = r.kind if len(kinds[name]) == 1 else "(several)"
            g.params += r.params
            g.time += r.time
            g.flops += r.flops
            g.backward_flops += r.backward_flops
            g.saved_bytes += r.saved_bytes
            g.calls += r.calls
        return sorted(groups.values(), key=lambda g: -g.time)

    def table(self, rows=None, title=None):
        """A rich Table of the rows (or of `rows`, e.g. grouped())."""
        from rich.table import Table

        rows = self.rows if rows is None else rows
        step = self.what == "training step"
        table = Table(title=title or f"{self.model}: {self.what}, input {self.input_shape}, "
                      f"median of {self.repeat} runs")
        columns = ["layer", "module", "params", "ms", "time", "MFLOP", "FLOPs", "GFLOP/s",
                   "kept KiB"] + (["bwd MFLOP"] if step else [])
        for column in columns:
            table.add_column(column, justify="left" if column in ("layer", "module") else "right",
                             no_wrap=True)
        total_time = sum(r.time for r in rows) or 1.0
        total_flops = sum(r.flops for r in rows) or 1
        for r in rows:
            rate = f"{r.flops / r.time / 1e9:.1f}" if r.time > 0 and r.flops else ""
            cells = [r.name or "(model)", r.kind, f"{r.params:,}", f"{r.time * 1e3:.2f}",
                     f"{r.time / total_time:.1%}", f"{r.flops / 1e6:.2f}",
                     f"{r.flops / total_flops:.1%}", rate, f"{r.saved_bytes / 1024:,.0f}"]
            if step:
                cells.append(f"{r.backward_flops / 1e6:.2f}")
            table.add_row(*cells)
        return table

    def summary(self):
        """The run as a whole, in a few lines of text."""
        phases = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.phases.items())
        lines = [
            f"{self.what} of {self.model} on {self.input_shape}: {self.total_time * 1e3:.2f} ms "
            f"median ({phases})",
            f"forward {self.flops / 1e6:,.2f} MFLOP"
            + (f", backward {self.backward_flops / 1e6:,.2f} MFLOP" if self.backward_flops else "")
            + f"; kept for backward {self.saved_bytes / 2**20:.2f} MiB; peak allocated "
            f"{self.peak_bytes / 2**20:.2f} MiB",
        ]
        if self.uncounted:
            lines.append(f"ops without a FLOP rule (counted as 0): {sorted(self.uncounted)}")
        return "\n".join(lines)

    def show(self, rows=None, console=None):
        """Print the table and the summary in the terminal (rich)."""
        from rich.console import Console

        console = console or Console(width=max(Console().width, 112))  # no cropped columns
        console.print(self.table(rows))
        console.print(self.summary())

    def plot(self, path, rows=None):
        """Save a figure of each row's share of time, FLOPs and kept memory; returns the path."""
        from matplotlib.figure import Figure

        rows = self.rows if rows is None else rows
        rows = [r for r in rows if r.time > 0 or r.flops or r.saved_bytes]
        labels = [r.name or "(model)" for r in rows]
        figure = Figure(figsize=(11, 0.32 * len(rows) + 1.6), layout="constrained")
        axes = figure.subplots(1, 3, sharey=True)
        total = {k: sum(getattr(r, k) for r in rows) or 1 for k in ("time", "flops", "saved_bytes")}
        for ax, key, title in zip(axes, ("time", "flops", "saved_bytes"),
                                  ("time (median)", "forward FLOPs", "kept for backward")):
            ax.barh(labels, [100 * getattr(r, key) / total[key] for r in rows], color="tab:blue")
            ax.set_title(title)
            ax.set_xlabel("% of the total")
        axes[0].invert_yaxis()  # the first row on top
        figure.suptitle(f"{self.model}: {self.what}, input {self.input_shape}")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
        return path


def _expected_input(model):
    """What the model says it takes, when it says: a GPT's block_size, a first layer's width."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "block_size"):
        return f"token ids of shape (B, T) with T <= block_size = {config.block_size}"
    for name, m in model.named_modules():
        if hasattr(m, "in_features"):
            return f"shape (..., {m.in_features}): `{name or 'the model'}` is {m!r}"
        if hasattr(m, "embed_dim"):
            return f"shape (B, T, {m.embed_dim})"
    return "an input its forward accepts"


class Profiler:
    """Per-layer time, FLOPs and activation memory of a model's forward pass or training step.

    depth: rows for the modules down to this many levels below the model (deeper modules
    are merged into their ancestor). repeat: timed runs (medians are reported). warmup:
    untimed runs first (at least 1: the first run is the one whose FLOPs and bytes are
    counted, since counting slows it down).

    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.nn import Linear, ReLU, Sequential, cross_entropy
    >>> from tinytorch.optim import SGD
    >>> manual_seed(0)
    >>> model = Sequential(Linear(8, 16), ReLU(), Linear(16, 4))
    >>> rng = np.random.default_rng(0)
    >>> x, y = Tensor(rng.standard_normal((32, 8))), rng.integers(0, 4, size=32)
    >>> step = Profiler(repeat=2).profile_training_step(
    ...     model, x, y, SGD(model.parameters(), lr=0.1), loss_fn=cross_entropy)
    >>> sorted(step.phases), step.flops, step.backward_flops
    (['backward', 'forward', 'optimizer'], 14080, 19968)
    >>> [row.name for row in step.rows]  # "" is the model itself; the loss is outside it
    ['', '0', '2', '(outside the model)']
    """

    def __init__(self, depth=1, repeat=5, warmup=1):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"Profiler: depth must be an integer >= 0, got {depth!r}")
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"Profiler: repeat must be a positive integer, got {repeat!r}")
        if not isinstance(warmup, int) or warmup < 1:
            raise ValueError(
                f"Profiler: warmup must be an integer >= 1 (the first run is the counted one, "
                f"untimed), got {warmup!r}"
            )
        self.depth, self.repeat, self.warmup = depth, repeat, warmup

    # ---- the two entry points -----------------------------------------------------------
    def profile_forward_pass(self, model, x):
        """Profile model(x): rows of self time, FLOPs and bytes kept for backward.

        Gradients are recorded as in training, so the bytes are what a training forward
        keeps; under no_grad() nothing is kept (inference)."""
        self._check_model(model)

        def run(listener):
            t0 = time.perf_counter()
            model(x)
            return {"forward": time.perf_counter() - t0}

        return self._profile(model, x, run, "forward pass")

    def profile_training_step(self, model, x, y, optimizer, loss_fn=None):
        """Profile real steps: zero_grad, loss = loss_fn(model(x), y) or model(x, y)[1],
        backward, optimizer.step(). The model's weights change."""
        self._check_model(model)

        def run(listener):
            optimizer.zero_grad()
            t0 = time.perf_counter()
            if loss_fn is None:
                try:
                    out = model(x, y)
                except TypeError as error:
                    out = error
                if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Tensor)):
                    got = f"raised {out}" if isinstance(out, TypeError) else \
                        f"returned {type(out).__name__}"
                    raise ProfileError(
                        f"profile_training_step without loss_fn calls model(x, y) and needs "
                        f"(output, loss) back, as GPT's forward(idx, targets) gives; "
                        f"{type(model).__name__} {got}. Pass loss_fn=... (e.g. cross_entropy)."
                    )
                loss = out[1]
            else:
                loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            if listener is not None:  # backward is not counted op by op: its FLOPs come
                _tensor._op_observers.remove(listener.op)  # from the recorded graph, and
                listener.seen.clear()  # the buffers must be free to go as backward ends
            loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            t3 = time.perf_counter()
            return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2}

        return self._profile(model, x, run, "training step")

    # ---- the machinery ----------------------------------------------------------------
    def _check_model(self, model):
        if not isinstance(model, Module):
            raise TypeError(
                f"Profiler profiles a Module (its layers are the rows), got "
                f"{type(model).__name__}; wrap plain functions in a Module"
            )

    def _profile(self, model, x, run, what):
        names = {id(m): name for name, m in model.named_modules()}
        seen = {id(buffer_of(p.data)): p.data for p in model.parameters()}
        counted, peak = self._run_counted(model, x, run, names, seen)
        del seen  # the counted run's graph is gone; its buffers may be freed now
        # the timed runs: module calls only (counting FLOPs op by op would slow them down)
        for _ in range(self.warmup - 1):
            run(None)
        per_row, phases = {}, {}
        for _ in range(self.repeat):
            listener = _Listener(names, self.depth, {})
            _layers._call_observers.append(listener)
            try:
                parts = run(None)
            finally:
                _layers._call_observers.remove(listener)
            for name, seconds in listener.time.items():
                per_row.setdefault(name, []).append(seconds)
            for phase, seconds in parts.items():
                phases.setdefault(phase, []).append(seconds)
        totals = [sum(parts) for parts in zip(*phases.values())]
        rows = self._rows(model, counted, per_row)
        return Profile(what, type(model).__name__, tuple(np.shape(getattr(x, "data", x))),
                       rows, statistics.median(totals),
                       {k: statistics.median(v) for k, v in phases.items()}, peak,
                       self.repeat, counted.uncounted)

    def _run_counted(self, model, x, run, names, seen):
        """One untimed run with both hooks installed: FLOPs, saved bytes, peak memory."""
        listener = _Listener(names, self.depth, seen)
        _layers._call_observers.append(listener)
        _tensor._op_observers.append(listener.op)
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        try:
            run(listener)
        except ProfileError:
            raise
        except (ValueError, TypeError, IndexError) as error:
            shape = tuple(np.shape(getattr(x, "data", x)))
            raise ProfileError(
                f"cannot profile {type(model).__name__} on an input of shape {shape}: the "
                f"model expects {_expected_input(model)}. Pass an input of that shape. "
                f"(The model said: {type(error).__name__}: {error})"
            ) from error
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            if not tracing:
                tracemalloc.stop()
            if listener in _layers._call_observers:
                _layers._call_observers.remove(listener)
            if listener.op in _tensor._op_observers:
                _tensor._op_observers.remove(listener.op)
            listener.seen = None  # let the counted run's buffers go
        return listener, peak

    def _rows(self, model, counted, per_row):
        """One LayerRow per module down to depth (in the model's order), plus OUTSIDE."""
        params = {}
        for name, p in model.named_parameters():
            owner = name.rsplit(".", 1)[0] if "." in name else ""
            row = ".".join(owner.split(".")[:self.depth]) if owner else ""
            params[row] = params.get(row, 0) + p.size
        rows = []
        for name, m in model.named_modules():
            if row_depth(name) > self.depth:
                continue
            times = per_row.get(name, [])
            rows.append(LayerRow(
                name, type(m).__name__, params.get(name, 0),
                statistics.median(times) if times else 0.0, counted.flops.get(name, 0),
                counted.backward_flops.get(name, 0), counted.saved.get(name, 0),
                counted.calls.get(name, 0)))
        if OUTSIDE in counted.flops:
            rows.append(LayerRow(OUTSIDE, "loss_fn", 0, 0.0, counted.flops[OUTSIDE],
                                 counted.backward_flops.get(OUTSIDE, 0),
                                 counted.saved.get(OUTSIDE, 0), 0))
        return rows


# %% [markdown]
# ### Test: a profile of a small network, against hand counts
#
# `Sequential(Linear(8, 32), ReLU(), Linear(32, 4))` on a batch of 16. By hand: the first
# `Linear` is `2 * 16 * 8 * 32` FLOPs for the product plus `16 * 32` for the bias; the ReLU
# (not a `Module` in this course, so its op lands in the `Sequential`'s own row) is
# `16 * 32`; the second `Linear` is `2 * 16 * 32 * 4 + 16 * 4`.

# %% nbgrader={"grade": true, "grade_id": "test_unit_profiler", "locked": true, "points": 8, "schema_version": 3, "solution": false, "task": false}
def test_unit_profiler():
    """Rows hold hand-counted FLOPs, self times add up, saved bytes and errors are right."""
    manual_seed(0)
    model = Sequential(Linear(8, 32), ReLU(), Linear(32, 4))
    x = Tensor(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))
    profile = Profiler(depth=1, repeat=3).profile_forward_pass(model, x)
    names = [r.name for r in profile.rows]
    assert names == ["", "0", "2"], (
        f"rows should be the model ('') and its children '0' and '2', got {names}"
    )
    want = {"0": 2 * 16 * 8 * 32 + 16 * 32, "": 16 * 32, "2": 2 * 16 * 32 * 4 + 16 * 4}
    got = {r.name: r.flops for r in profile.rows}
    assert got == want, (
        f"FLOPs per row {got}, expected {want}: each op's FLOPs go to the innermost row on "
        "the stack (the ReLU, not a Module, belongs to the Sequential's own row '')"
    )
    assert profile.row("0").params == 8 * 32 + 32, "row '0' owns Linear(8, 32)'s 288 parameters"
    assert all(r.time >= 0 for r in profile.rows), (
        f"a self time is negative: {[(r.name, r.time) for r in profile.rows]}: subtract a "
        "child's elapsed time from its nearest enclosing ROW only once, when the child exits"
    )

    class Nap(Module):
        def forward(self, x):
            time.sleep(0.03)
            return x

    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.inner = Nap()

        def forward(self, x):
            return self.inner(x)

    naps = Profiler(depth=1, repeat=1).profile_forward_pass(Outer(), x)
    inner, outer = naps.row("inner").time, naps.row("").time
    assert inner >= 0.03 and outer < 0.5 * inner, (
        f"Outer only calls inner, which sleeps 30 ms: inner's row should hold >= 30 ms and "
        f"Outer's own row almost nothing, got inner {inner * 1e3:.1f} ms, Outer "
        f"{outer * 1e3:.1f} ms. Self time: when a row exits, add its elapsed time to it AND "
        "subtract it from the nearest enclosing row on the stack"
    )
    assert profile.row("0").calls == 1 and profile.row("").calls == 1, (
        "each module was called once: count calls in exit()"
    )
    # kept for backward: layer 0 keeps at least its (16, 32) outputs
    kept = profile.row("0").saved_bytes
    assert kept >= 16 * 32 * 4, (
        f"row '0' keeps {kept} bytes for backward; its (16, 32) float32 outputs alone are "
        "2048 bytes: pass each recorded op's ctx to new_saved_bytes"
    )
    deep = Profiler(depth=0, repeat=2).profile_forward_pass(model, x)
    assert [r.name for r in deep.rows] == [""] and deep.flops == sum(want.values()), (
        "with depth=0 there is one row, the model, holding every FLOP: a module deeper than "
        "depth pushes None and its ops go to the nearest row"
    )

    def check_rows(n, a, b, c):
        """Linear(a, b), ReLU, Linear(b, c) on n samples: each row's FLOPs and parameters."""
        manual_seed(0)
        net = Sequential(Linear(a, b), ReLU(), Linear(b, c))
        data = Tensor(np.ones((n, a), dtype=np.float32))
        rows = Profiler(depth=1, repeat=1).profile_forward_pass(net, data)
        want = {"0": 2 * n * a * b + n * b, "": n * b, "2": 2 * n * b * c + n * c}
        got = {r.name: r.flops for r in rows.rows}
        assert got == want, (
            f"FLOPs per row {got}, expected {want}: each op's FLOPs go to the innermost row on "
            "the stack (the ReLU, not a Module, belongs to the Sequential's own row '')"
        )
        assert rows.row("2").params == b * c + c, f"row '2' owns Linear({b}, {c})'s parameters"

    def check_refused(width, shape):
        manual_seed(0)
        net = Sequential(Linear(width, 3))
        try:
            Profiler(repeat=1).profile_forward_pass(net, Tensor(np.ones(shape, np.float32)))
        except ProfileError as error:
            text = str(error)
            assert str(shape) in text and str(width) in text, (
                f"the error should name the given shape {shape} and the expected width "
                f"{width}: {text}"
            )
        else:
            raise AssertionError(
                f"profiling Linear({width}, ...) on {shape} must raise ProfileError")

    check_rows(16, 8, 32, 4)
    check_refused(8, (16, 5))
    assert not _layers._call_observers and not _tensor._op_observers, (
        "a listener was left installed after profiling: remove it in `finally`"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_rows, {
        "one sample": (1, 3, 5, 2),
        "a narrow middle layer": (10, 12, 1, 6),
    })
    hidden_cases(check_refused, {
        "an input wider than the layer": (4, (2, 9)),
        "a three-axis input of the wrong width": (6, (2, 3, 5)),
    })
    ### END HIDDEN TESTS


test_unit_profiler()


# %% [markdown]
# ### Test: a whole GPT, and the training step against `6 N D`
#
# A hand count of a small GPT's forward, op by op (with biases, so every `Linear` has its
# addition), and the training step's counted FLOPs against `6 N D`.

# %% nbgrader={"grade": true, "grade_id": "test_unit_gpt_profile", "locked": true, "points": 8, "schema_version": 3, "solution": false, "task": false}
def gpt_forward_flops(c, B, T):
    """The forward FLOPs of module 13's GPT by hand: one line per op."""
    C, V, H, L = c.n_embd, c.vocab_size, c.n_head, c.n_layer
    n = B * T
    bias = 1 if c.bias else 0
    norm = (6 + bias) * n * C  # layer norm: 5 to normalize, weight, bias
    per_layer = (
        norm  # ln1
        + 2 * n * C * 3 * C + bias * n * 3 * C  # qkv projection
        + B * H * (2 * T * T * (C // H) * 2 + 6 * T * T)  # attention
        + 2 * n * C * C + bias * n * C  # output projection
        + n * C  # residual add
        + norm  # ln2
        + 2 * n * C * 4 * C + bias * n * 4 * C  # fc
        + 8 * n * 4 * C  # GELU, tanh form
        + 2 * n * 4 * C * C + bias * n * C  # proj
        + n * C  # residual add
    )
    # wte + wpe, the blocks, ln_f, the output layer, the loss
    return n * C + L * per_layer + norm + 2 * n * C * V + 5 * n * V


def test_unit_gpt_profile():
    """A GPT forward's counted FLOPs equal the hand count; the step is close to 6ND."""

    def check_forward(config, B, T):
        """A GPT forward on (B, T) ids: counted FLOPs equal gpt_forward_flops, without loss."""
        manual_seed(0)
        net = GPT(config)
        ids = np.random.default_rng(1).integers(0, config.vocab_size, size=(B, T))
        counted = Profiler(depth=3, repeat=1).profile_forward_pass(net, ids).flops
        hand = gpt_forward_flops(config, B, T) - 5 * B * T * config.vocab_size
        assert counted == hand, (
            f"GPT forward of {config}: counted {counted:,} FLOPs, hand count {hand:,} "
            f"(difference {counted - hand:+,}). Check op_flops for MatMul, AttentionFunction, "
            "LayerNormFunction and GELUFunction"
        )

    manual_seed(0)
    config = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=True)
    model = GPT(config)
    B, T = 3, 16
    idx = np.random.default_rng(0).integers(0, 32, size=(B, T + 1))
    x, y = idx[:, :-1], idx[:, 1:]
    forward = Profiler(depth=3, repeat=1).profile_forward_pass(model, x)
    want = gpt_forward_flops(config, B, T) - 5 * B * T * config.vocab_size  # no targets: no loss
    assert forward.flops == want, (
        f"GPT forward: counted {forward.flops:,} FLOPs, hand count {want:,} "
        f"(difference {forward.flops - want:+,}). Check op_flops for MatMul, AttentionFunction, "
        "LayerNormFunction and GELUFunction"
    )
    attn = forward.row("blocks.0.attn").flops
    C = config.n_embd
    want_attn = 2 * B * T * C * 3 * C + B * T * 3 * C + B * 2 * (4 * T * T * 16 + 6 * T * T) \
        + 2 * B * T * C * C + B * T * C
    assert attn == want_attn, (
        f"row blocks.0.attn holds {attn:,} FLOPs, expected {want_attn:,} (qkv, attention, proj): "
        "ops go to the innermost row on the stack"
    )
    step = Profiler(depth=3, repeat=1).profile_training_step(
        model, x, y, SGD(model.parameters(), lr=0.0))
    N = model.num_parameters(exclude_embeddings=True)
    total = step.flops + step.backward_flops
    ratio = total / (6 * N * B * T)
    assert 1.0 < ratio < 1.6, (
        f"the training step counts {total:,} FLOPs, {ratio:.2f}x 6ND = {6 * N * B * T:,}: "
        "expected a little above 1 (attention scores and element-wise work come on top). "
        "Backward of a MatMul costs its forward once per input that requires grad"
    )
    assert step.backward_flops > 1.8 * step.flops, (
        f"backward counts {step.backward_flops:,} FLOPs for a forward of {step.flops:,}: "
        "backward of a matmul is two products of the forward's size, about 2x the forward"
    )
    assert set(step.phases) == {"forward", "backward", "optimizer"}, step.phases
    try:
        Profiler(repeat=1).profile_forward_pass(model, np.zeros((2, 40), dtype=np.int64))
    except ProfileError as error:
        assert "(2, 40)" in str(error) and "16" in str(error), (
            f"the error should name the input (2, 40) and block_size 16: {error}"
        )
    else:
        raise AssertionError("a (2, 40) input to a block_size=16 GPT must raise ProfileError")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_forward, {
        "no biases, more heads": (GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=4,
                                            n_embd=16, bias=False), 2, 8),
        "a sequence shorter than the block": (GPTConfig(vocab_size=11, block_size=12, n_layer=3,
                                                        n_head=1, n_embd=8, bias=True), 1, 5),
    })
    ### END HIDDEN TESTS


test_unit_gpt_profile()


# %% [markdown]
# ## Systems analysis: your TinyGPT, measured
#
# The milestone's model (4 layers, 4 heads, 128 wide, context 64, vocabulary 65) on one
# training batch of 12 sequences of 64 tokens, AdamW, profiled three levels deep. On a
# shared machine the times move from run to run; the FLOP counts do not.

# %% nbgrader={"grade": false, "grade_id": "analysis-step", "locked": false, "schema_version": 3, "solution": false, "task": false}
def tinygpt_batch(config, batch=12, seed=0):
    idx = np.random.default_rng(seed).integers(0, config.vocab_size,
                                               size=(batch, config.block_size + 1))
    return idx[:, :-1], idx[:, 1:]


def block_part(row):
    """Rows of the 4 blocks summed by part: blocks.2.attn -> attn, blocks.2 -> residual adds."""
    parts = row.name.split(".")
    if parts[0] == "blocks" and len(parts) == 3:
        return parts[2]
    if parts[0] == "blocks" and len(parts) == 2:
        return "residual adds"
    return row.name or "(model)"


def step_report():
    manual_seed(0)
    config = GPTConfig()
    model = GPT(config)
    optimizer = AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    x, y = tinygpt_batch(config)
    profile = Profiler(depth=3, repeat=3).profile_training_step(model, x, y, optimizer)
    groups = profile.grouped(block_part)
    profile.show(groups)
    phases = profile.phases
    print(f"step: forward {phases['forward'] / profile.total_time:.0%}, backward "
          f"{phases['backward'] / profile.total_time:.0%}, optimizer "
          f"{phases['optimizer'] / profile.total_time:.0%} of {profile.total_time * 1e3:.1f} ms")
    attn, mlp = (next(g for g in groups if g.name == k) for k in ("attn", "mlp"))
    step_flops = profile.flops + profile.backward_flops
    print(f"attention (4 layers, with qkv and proj): {attn.time / phases['forward']:.0%} of the "
          f"forward time, {(attn.flops + attn.backward_flops) / step_flops:.0%} of the step's "
          f"FLOPs; MLP: {mlp.time / phases['forward']:.0%} of the forward time, "
          f"{(mlp.flops + mlp.backward_flops) / step_flops:.0%} of the step's FLOPs")
    n = model.num_parameters(exclude_embeddings=True)
    tokens = x.size
    rule = 6 * n * tokens
    with_attention = rule + 12 * config.n_layer * config.block_size * config.n_embd * tokens
    print(f"FLOPs of the step: counted {step_flops / 1e9:.3f} G; 6ND = 6 x {n:,} x {tokens} = "
          f"{rule / 1e9:.3f} G (counted / 6ND = {step_flops / rule:.2f}); with attention's "
          f"12 L T C D: {with_attention / 1e9:.3f} G ({step_flops / with_attention:.2f})")
    print(f"the step ran at {step_flops / profile.total_time / 1e9:.1f} GFLOP/s")
    return profile


step_profile = step_report()

# %% [markdown]
# **The figure.** The same profile, row by row, saved as a PNG (in `runs/profile/` beside
# your notebook) and shown here.

# %% nbgrader={"grade": false, "grade_id": "analysis-figure", "locked": false, "schema_version": 3, "solution": false, "task": false}
def figure_report(profile, path="runs/profile/tinygpt_step.png"):
    saved = profile.plot(path)
    print(f"figure saved to {saved}")
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is not None:
        display(Image(filename=str(saved)))


figure_report(step_profile)

# %% [markdown]
# **Which layer is the bottleneck?** The rows sorted by time, with their throughput: a layer
# that does many FLOPs at a high GFLOP/s is doing its job (big matrix products); a layer that
# takes time at a low GFLOP/s (or with no FLOPs at all) is overhead: Python, copies, small
# operations. Those are the targets of module 17.

# %% nbgrader={"grade": false, "grade_id": "analysis-bottleneck", "locked": false, "schema_version": 3, "solution": false, "task": false}
def bottleneck_report(profile, top=5):
    rows = sorted(profile.rows, key=lambda r: -r.time)[:top]
    profile.show(rows)
    worst = rows[0]
    print(f"the bottleneck of the forward: {worst.name or '(model)'} ({worst.kind}), "
          f"{profile.share(worst):.0%} of the forward time, "
          f"{profile.share(worst, 'flops'):.0%} of its FLOPs")


bottleneck_report(step_profile)

# %% [markdown]
# **Memory against sequence length.** The same model built with a context of 256, one
# training step at growing `T` with a batch of 4: the bytes the graph keeps for backward
# (counted by the profiler) and the peak memory NumPy allocated during the step
# (`tracemalloc`). Fitting $a + bT + cT^2$ to the peak separates the linear part (the
# activations of every layer, `T` rows each) from the quadratic one: attention's `(B, H, T,
# T)` scores and probabilities, $4BH$ bytes per $T^2$ for each such matrix alive at
# once.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def memory_report(lengths=(32, 64, 128, 256), batch=4):
    manual_seed(0)
    config = GPTConfig(block_size=max(lengths))
    model = GPT(config)
    rng = np.random.default_rng(0)
    print(f"{'T':>5s} {'kept for backward':>18s} {'peak of the step':>17s} {'one (B,H,T,T)':>14s}")
    peaks = []
    for t in lengths:
        idx = rng.integers(0, config.vocab_size, size=(batch, t + 1))
        profile = Profiler(depth=0, repeat=1).profile_training_step(
            model, idx[:, :-1], idx[:, 1:], SGD(model.parameters(), lr=0.0))
        scores = batch * config.n_head * t * t * 4
        peaks.append(profile.peak_bytes)
        print(f"{t:5d} {profile.saved_bytes / 2**20:14.2f} MiB "
              f"{profile.peak_bytes / 2**20:13.2f} MiB {scores / 2**20:10.2f} MiB")
    t = np.asarray(lengths, dtype=np.float64)
    a, b, c = np.linalg.lstsq(np.stack([np.ones_like(t), t, t * t], axis=1),
                              np.asarray(peaks, dtype=np.float64), rcond=None)[0]
    per_matrix = batch * config.n_head * 4
    print(f"peak ~ {a / 2**20:.2f} MiB + {b / 1024:.1f} KiB x T + {c:.0f} B x T^2: the T^2 term is "
          f"{c / per_matrix:.1f} (B, H, T, T) float32 matrices alive at once "
          f"(one is {per_matrix} B x T^2)")


memory_report()

# %% [markdown]
# **What the hook points cost when nobody listens.** A small op timed with the empty lists,
# as every program runs, and with one listener that does nothing.

# %% nbgrader={"grade": false, "grade_id": "analysis-overhead", "locked": false, "schema_version": 3, "solution": false, "task": false}
def overhead_report():
    import timeit

    a = Tensor(np.ones(8, dtype=np.float32))
    bare = listened = float("inf")
    for _ in range(5):  # interleaved, so that a busy moment slows both alike
        bare = min(bare, best_time(lambda: a + a, repeat=3, min_time=0.002))
        _tensor._op_observers.append(lambda *args: None)
        try:
            listened = min(listened, best_time(lambda: a + a, repeat=3, min_time=0.002))
        finally:
            _tensor._op_observers.pop()
    check = min(timeit.repeat("if hooks: pass", globals={"hooks": []}, number=200_000,
                              repeat=5)) / 200_000
    print(f"a + a on 8 floats: {bare * 1e6:.2f} us with no listener ({check * 1e9:.0f} ns of it "
          f"is the test `if _op_observers`, {check / bare:.1%}), {listened * 1e6:.2f} us with "
          "one listener that does nothing")


overhead_report()

# %% [markdown]
# What to look for (your figures vary with the machine and its load; the FLOP counts do not):
#
# - **Attention against the MLP.** At context 64 the MLP does about 1.6 times attention's
#   FLOPs: per token and layer the MLP's two products are $16C^2$ FLOPs, attention's
#   projections $8C^2$ and its scores $4TC$ (and its softmax $6T$ per head). Compare
#   attention's share of the time with its share of the FLOPs. When they are close, the time
#   goes where the arithmetic is. When the time share is larger (on a busy machine it often
#   is), the difference is attention's overhead: reshapes, permutes and the softmax cost
#   time without many FLOPs, and its `(T, T)` products per head are small matrix products,
#   which run at a lower GFLOP/s than the MLP's large ones.
# - **The step** is about a quarter to a third forward, most of the rest backward; AdamW is a
#   few percent. Its FLOPs are about 10% above $6ND$; adding attention's $12LTC$ per
#   token brings the estimate within a few percent.
# - **Memory against `T`.** What the graph keeps grows linearly (your module 12 recomputes
#   the attention probabilities in backward instead of keeping them; only the causal mask,
#   one byte per $T^2$, is kept), but the peak grows with $T^2$: the scores and their
#   gradients exist during each layer's attention, forward and backward. At $T = 256$ and
#   batch 4 the $T^2$ term is about an eighth of the peak, and it quadruples with every
#   doubling of `T`: at GPT-2's 1,024 positions it would dominate.
# - **The bottleneck** of the forward is one of the MLPs (the largest matrix products), with
#   the attention layers next. A row with a low GFLOP/s (norms, residual additions, the
#   model's own row) is overhead that fusing removes (module 17); the MLP only gets faster
#   with fewer FLOPs or cheaper ones (modules 15 and 16).
#
# ## What comes next
#
# - **Module 15 (quantization)** stores the weights in 8 and 4 bits: the model's bytes
#   shrink, and the profile shows where the time goes afterwards.
# - **Module 16 (compression)** removes weights, neurons and heads; the FLOP counts of this
#   module show what structured pruning saves and unstructured pruning does not.
# - **Module 17 (acceleration)** fuses the low-GFLOP/s rows you found here.
# - **Module 18 (KV caching)** profiles generation, token by token.
