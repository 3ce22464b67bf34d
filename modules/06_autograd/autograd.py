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
# # Module 06: Autograd
#
# ## Overview
#
# Training a network means moving every parameter a little in the direction that lowers
# the loss. For that you need the derivative of one number, the loss, with respect to every
# parameter: hundreds of thousands of partial derivatives, at every step. Deriving them by
# hand is hopeless. Estimating them numerically (nudge one parameter, run the model again)
# costs one forward pass per parameter. **Reverse-mode automatic differentiation** gets all
# of them for the cost of roughly two forward passes, and it is what `loss.backward()` does
# in every framework you will meet.
#
# You prepared for this in module 01. Each operation on a tensor that requires gradients
# leaves a record on its result: `t._ctx` names the `Function` that made `t`, the parent
# tensors, the arrays the operation saw and the array it produced. Followed from the loss
# back to the parameters, these records form a graph. In this module you give every
# operation a **derivative rule**, and you write the engine that walks the graph backwards,
# applying the chain rule at each node, until every parameter holds its gradient in `.grad`.
#
# **In numbers.** For $y = a \odot b$ with $10^6$ elements, the Jacobian
# $\partial y / \partial a$ has $10^{12}$ entries (4 TB in float32); the derivative rule
# $\bar a = \bar y \odot b$ touches $10^6$ numbers. A backward pass costs about two forward
# passes, and every array the forward saved stays in memory until it runs.
#
# ## Learning objectives
#
# - Apply the chain rule by hand on a small graph, and see why the gradients of a value that
#   is used twice add up.
# - Write derivative rules (vector-Jacobian products) for element-wise, matrix, shape,
#   indexing and reduction operations, and for the activations and losses of modules 02
#   and 04, without ever building a Jacobian matrix.
# - Sum broadcast gradients back to an input's shape, in exactly one place.
# - Order a graph topologically without recursion, and measure why recursion fails on deep
#   graphs.
# - Control what is recorded with `no_grad()` and `detach()`, free a graph once it has been
#   used, and check any rule numerically with `gradcheck`.
#
# ## What you build
#
# - `DERIVATIVES` and the decorator `@derivative(Op)`: the table of rules, keyed by the
#   `Function` class. Later modules register the rules of their new operations with it.
# - One rule per operation of modules 01, 02 and 04: `Add` ... `Max`, `ReLUFunction` ...
#   `LogSoftmaxFunction`, `CrossEntropyFunction`, `BCEWithLogitsFunction`.
# - `unbroadcast(grad, shape)`, `topological_order(root)` and
#   `backward(tensor, grad=None, retain_graph=False)`, the engine that `Tensor.backward()`
#   calls.
# - `no_grad()` and `enable_grad()`, context managers and decorators.
# - `gradcheck(fn, inputs)` and `GradcheckError`: your rules checked against finite
#   differences.
#
# ## What you are not building yet
#
# - **Updating parameters.** `backward` only computes gradients; optimizers (module 07)
#   use them.
# - **Gradients of gradients.** Your rules work on NumPy arrays, so the backward pass is not
#   itself recorded and cannot be differentiated again (PyTorch's `create_graph=True`).
# - **In-place operations.** TinyTorch's operations never modify their inputs, so the arrays
#   saved for backward stay valid. PyTorch needs version counters to detect in-place changes
#   to saved tensors; you do not (but do not write into `t.data` between forward and
#   backward).
# - **Hooks, gradient checkpointing and forward-mode differentiation.**

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.autograd
#| export
import functools
import math

import numpy as np

from tinytorch.core.tensor import (
    Add, Div, Exp, Function, GetItem, Log, MatMul, Max, Mean, Mul, Neg, Permute, Pow,
    Reshape, ShapeError, Sub, Sum, Tensor, Transpose, is_grad_enabled, set_grad_enabled,
)
from tinytorch.core.activations import (
    GELUFunction, LogSoftmaxFunction, ReLUFunction, SigmoidFunction, SiLUFunction,
    SoftmaxFunction, TanhFunction, erfc,
)
from tinytorch.core.losses import BCEWithLogitsFunction, CrossEntropyFunction

# %% [markdown]
# ## Part 1: the chain rule on a small graph
#
# Take two numbers, `a = 2` and `b = -3`, and compute
#
# ```
# c = a * b        # -6
# d = c + b        # -9
# L = d * d        # 81
# ```
#
# The records the forward pass leaves form this graph (arrows point from inputs to results):
#
# ```
#   a ──┐
#       ├─ Mul ─> c ──┐
#   b ──┤             ├─ Add ─> d ──┬─ Mul ─> L
#       └─────────────┘             └──┘
# ```
#
# `b` is used twice (by the first `Mul` and by `Add`), and `d` is used twice (both inputs of
# the last `Mul`). The **chain rule** says how a change in an input reaches `L`: through
# every path, multiplying the local derivatives along a path and adding over paths.
# Reverse mode computes it from the end, one node at a time. Write `gX` for `dL/dX`:
#
# | step | node | rule | value |
# |---|---|---|---|
# | start | `L` | `gL = 1` | 1 |
# | `L = d * d` | `d` | `gd = gL * d + gL * d` (one term per use) | -18 |
# | `d = c + b` | `c` | `gc = gd * 1` | -18 |
# |  | `b` | first contribution `gd * 1` | -18 |
# | `c = a * b` | `a` | `ga = gc * b` | 54 |
# |  | `b` | second contribution `gc * a` | -36 |
# | sum | `b` | `gb = -18 + -36` | -54 |
#
# Check with algebra: `L = b**2 * (a + 1)**2`, so `dL/da = 2 * b**2 * (a + 1) = 54` and
# `dL/db = 2 * b * (a + 1)**2 = -54`. Three facts make up the whole algorithm:
#
# 1. Each operation needs only a **local rule**: given the gradient of its output, return
#    the gradient of each of its inputs. `Mul` returns `(g * b, g * a)`; `Add` returns
#    `(g, g)`. No rule knows anything about the rest of the graph.
# 2. A node may run its rule only once **all** its uses have sent their contributions
#    (`b`'s gradient is complete only after both `Add` and the first `Mul`). That fixes the
#    order: a reversed topological order of the graph.
# 3. Contributions from several uses **add up**.
#
# ### From numbers to tensors: vector-Jacobian products
#
# With tensors, `g` is an array shaped like the operation's output, and a rule returns
# arrays shaped like its inputs. Mathematically the rule multiplies `g` by the operation's
# Jacobian matrix, but it never builds that matrix: for an element-wise op on a
# (1000, 1000) tensor the Jacobian would have 10^12 entries (4 TB in float32), almost all
# zero, while the rule `g * b` touches 10^6 numbers. Every rule in this module is such a
# **vector-Jacobian product**, written directly with NumPy.
#
# ### The table of rules
#
# Module 01 kept each operation's maths in its `forward`. The derivatives live here, in a
# table keyed by the `Function` class, filled with a decorator:
#
# ```python
# @derivative(Mul)
# def mul_backward(ctx, grad):
#     a, b = ctx.inputs
#     return grad * b, grad * a
# ```
#
# A rule receives the operation's record `ctx` (`ctx.inputs`: the input arrays, `ctx.output`:
# the result array, `ctx.params`: keyword parameters such as `axis`, `ctx.parents`: the
# input tensors) and `grad`, the gradient of the output. It returns a tuple with one entry
# per input, in order: an array, or `None` for an input that needs no gradient (a constant,
# an integer target). Checking `ctx.parents[i].requires_grad` lets a rule skip work nobody
# will use, such as the gradient of a constant in `x * 0.5`.
#
# The cell below is given: read it. Later modules (embeddings, attention, layer norm) import
# `derivative` and register the rules of their new operations beside the operations. It also
# re-exports a second, empty table, `KERNELS`, that you will not need until module 17. It
# lives in module 01 because `Function.apply` reads it: every `Op.apply(...)` first runs
# `cls = KERNELS.get(cls, cls)`. A faster version of an operation (its own `Function`
# subclass, with its own forward and its own rule here in `DERIVATIVES`) is registered
# under the plain one, `KERNELS[Plain] = Fast`, and then runs wherever any lesson applies
# `Plain`, with no lesson's code changed; `kernel(Plain)` tells which class that is. A
# faster *rule* for an unchanged forward is simply a new entry `DERIVATIVES[Plain]`. Both
# tables are plain dictionaries: what runs can always be read off them.

# %% nbgrader={"grade": false, "grade_id": "derivative-table", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
DERIVATIVES = {}  # Function class -> rule(ctx, grad) -> tuple of input gradients


def derivative(function_class):
    """Decorator: register `rule(ctx, grad) -> tuple` as the derivative of `function_class`.

    The rule gets the operation's record `ctx` (inputs, output, params, parents) and `grad`,
    the gradient of the output; it returns one gradient (an array, or None for an input
    that needs none) per input, in order. Arrays may keep the output's broadcast shape:
    `backward` sums them down to each input's shape.

    >>> class Sin(Function):
    ...     @staticmethod
    ...     def forward(a):
    ...         return np.sin(a)
    >>> @derivative(Sin)
    ... def sin_backward(ctx, grad):
    ...     (a,) = ctx.inputs
    ...     return (grad * np.cos(a),)
    >>> x = Tensor([0.0, np.pi], requires_grad=True)
    >>> Sin.apply(x).sum().backward()
    >>> x.grad
    Tensor([ 1., -1.])
    """
    if not (isinstance(function_class, type) and issubclass(function_class, Function)):
        raise TypeError(
            f"@derivative(...) takes the Function subclass whose derivative it registers, "
            f"e.g. @derivative(Mul); got {function_class!r}"
        )

    def register(rule):
        DERIVATIVES[function_class] = rule
        return rule

    return register


# The kernel table is module 01's: `Function.apply` looks every operation up in it. It is
# re-exported here, beside the derivative table, because the two are used together.
from tinytorch.core.tensor import KERNELS, kernel  # noqa: E402, F401


# %% [markdown]
# ## Part 2: element-wise rules
#
# For an element-wise operation, each output element depends only on the input elements at
# the same position, so the Jacobian is diagonal and the vector-Jacobian product is an
# element-wise product: `grad * (local derivative)`.
#
# | op | forward | rule for each input |
# |---|---|---|
# | `Add` | `a + b` | `grad`, `grad` |
# | `Sub` | `a - b` | `grad`, `-grad` |
# | `Mul` | `a * b` | `grad * b`, `grad * a` |
# | `Div` | `a / b` | `grad / b`, `-grad * a / b**2`, which is `-grad * out / b` |
# | `Neg` | `-a` | `-grad` |
# | `Pow` | `a ** e` | `grad * e * a ** (e - 1)` (`e` is `ctx.params["exponent"]`) |
# | `Exp` | `exp(a)` | `grad * out`: the output *is* the derivative, so reuse `ctx.output` |
# | `Log` | `log(a)` | `grad / a` |
#
# Two things to keep in mind:
#
# - **Broadcasting.** In `x + bias` with shapes (4, 3) and (3,), `grad` has shape (4, 3).
#   Return it as it is: `backward` will sum it down to (3,) in one place (Part 3). A rule
#   deals only with the maths.
# - **float32 stays float32.** `e - 1` with `e` a Python float is fine (NumPy keeps the
#   array's dtype for Python numbers), but `np.float64(e)` is not: build constants with
#   `a.dtype.type(e)`. A float64 gradient doubles the memory and halves the speed of every
#   operation behind it.

# %% nbgrader={"grade": false, "grade_id": "elementwise-rules", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
@derivative(Add)
def add_backward(ctx, grad):
    """d(a + b): (grad, grad)"""
    ### BEGIN SOLUTION
    return grad, grad
    ### END SOLUTION


@derivative(Sub)
def sub_backward(ctx, grad):
    """d(a - b): (grad, -grad)"""
    ### BEGIN SOLUTION
    return grad, (-grad if ctx.parents[1].requires_grad else None)
    ### END SOLUTION


@derivative(Mul)
def mul_backward(ctx, grad):
    """d(a * b): (grad * b, grad * a)"""
    ### BEGIN SOLUTION
    a, b = ctx.inputs
    grad_a = grad * b if ctx.parents[0].requires_grad else None
    grad_b = grad * a if ctx.parents[1].requires_grad else None
    return grad_a, grad_b
    ### END SOLUTION


@derivative(Div)
def div_backward(ctx, grad):
    """d(a / b): (grad / b, -grad * a / b**2)"""
    ### BEGIN SOLUTION
    a, b = ctx.inputs
    grad_a = grad / b if ctx.parents[0].requires_grad else None
    grad_b = -(grad * ctx.output) / b if ctx.parents[1].requires_grad else None
    return grad_a, grad_b
    ### END SOLUTION


@derivative(Neg)
def neg_backward(ctx, grad):
    """d(-a): (-grad,)"""
    ### BEGIN SOLUTION
    return (-grad,)
    ### END SOLUTION


@derivative(Pow)
def pow_backward(ctx, grad):
    """d(a ** e): (grad * e * a ** (e - 1),)"""
    ### BEGIN SOLUTION
    (a,) = ctx.inputs
    e = a.dtype.type(ctx.params["exponent"])
    return (grad * e * a ** (e - a.dtype.type(1)),)
    ### END SOLUTION


@derivative(Exp)
def exp_backward(ctx, grad):
    """d(exp(a)): (grad * exp(a),), and exp(a) is the saved output"""
    ### BEGIN SOLUTION
    return (grad * ctx.output,)
    ### END SOLUTION


@derivative(Log)
def log_backward(ctx, grad):
    """d(log(a)): (grad / a,)"""
    ### BEGIN SOLUTION
    return (grad / ctx.inputs[0],)
    ### END SOLUTION


# %% [markdown]
# ### Test: element-wise rules
#
# The test calls your rules directly, on records made by real operations. `record(Op, ...)`
# below runs an operation on tensors that require gradients and returns its `ctx`.
# `numerical_gradient` is used from Part 4 on: it nudges one input element by `eps` up and
# down, runs the operation's `forward` on plain arrays, and divides the change of the output
# by `2 * eps`. In float64 this agrees with a correct rule to about eight digits (Part 10
# turns the same idea into `gradcheck`, a tool of the package).

# %% nbgrader={"grade": false, "grade_id": "test-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def record(op, *arrays, dtype=np.float32, **params):
    """Run `op` on tensors made from `arrays` (requiring grad) and return its record ctx."""
    tensors = [Tensor(np.asarray(a, dtype=dtype), dtype=dtype, requires_grad=True) for a in arrays]
    return op.apply(*tensors, **params)._ctx


def float32_array(values):
    return np.asarray(values, dtype=np.float32)


def mul_rule_first():
    """Fail with a message that blames Mul's rule when it is written and wrong: the tests of
    backward multiply, and would otherwise report a wrong rule as a wrong walk of the graph."""
    mul = DERIVATIVES.get(Mul)
    assert mul is None or np.allclose(
        mul(record(Mul, [2.0], [3.0]), float32_array([1.0]))[0], 3.0
    ), (
        "this test builds on Mul's derivative rule, which is wrong (see "
        "test_unit_elementwise_rules): fix that rule first"
    )


def random(*shape, seed=0):
    """A float64 array of standard normal numbers, the same on every run."""
    return np.random.default_rng(seed + len(shape)).standard_normal(shape)


def check_unbroadcast_first(test):
    """Fail `test` with a message about unbroadcast when it cannot sum broadcast gradients,
    which `test` relies on: otherwise its ShapeError would blame an operation's rule."""
    g = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    sums = {  # input shape -> the gradient summed over the axes it was stretched along
        (4, 3): g.sum(axis=0),
        (3,): g.sum(axis=(0, 1)),
        (4, 1): g.sum(axis=(0, 2)).reshape(4, 1),
        (2, 1, 3): g.sum(axis=1).reshape(2, 1, 3),
        (): g.sum(),
    }
    for shape, want in sums.items():
        before = (f"{test} builds on your unbroadcast, which is wrong: unbroadcast(a "
                  f"gradient of shape (2, 4, 3), {shape})")
        after = ("Fix unbroadcast first (test_unit_unbroadcast shows the cases); the "
                 "derivative rules are not at fault")
        try:
            got = unbroadcast(g, shape, "Mul")
        except NotImplementedError:
            raise
        except Exception as error:
            raise AssertionError(
                f"{before} raised {type(error).__name__}, though that gradient sums to "
                f"{shape}. {after}") from error
        assert np.shape(got) == shape and np.allclose(got, want), (
            f"{before} returned shape {np.shape(got)}, expected {shape} with the values summed "
            f"over the stretched axes. {after}")


def numerical_gradient(op, arrays, i, weights, params, eps=1e-6):
    """d sum(weights * op.forward(*arrays)) / d arrays[i], by central differences."""
    x = arrays[i]
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        keep = x[idx]
        x[idx] = keep + eps
        plus = np.sum(weights * op.forward(*arrays, **params))
        x[idx] = keep - eps
        minus = np.sum(weights * op.forward(*arrays, **params))
        x[idx] = keep
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


# %% nbgrader={"grade": true, "grade_id": "test_unit_elementwise_rules", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_elementwise_rules():
    """Each element-wise rule returns grad times the local derivative, as float32 arrays."""

    def check_rule(op, inputs, params, expected, g, hint):
        """DERIVATIVES[op] on a float32 record of op(*inputs) with upstream gradient g."""
        ctx = record(op, *inputs, **params)
        rule = DERIVATIVES.get(op)
        assert rule is not None, (
            f"no rule registered for {op.__name__}: decorate it with @derivative({op.__name__})"
        )
        got = rule(ctx, g)
        assert isinstance(got, (tuple, list)) and len(got) == len(inputs), (
            f"{op.__name__}'s rule should return a tuple with {len(inputs)} gradient(s), one per "
            f"input, got {got!r}. A one-input rule returns (value,) with the trailing comma."
        )
        for i, (value, want) in enumerate(zip(got, expected)):
            assert value is not None, (
                f"{op.__name__}'s rule returned None for input {i}, which requires grad"
            )
            assert np.allclose(value, want, rtol=1e-5), (
                f"{op.__name__}: gradient of input {i} with grad={g.tolist()}: expected {want}, "
                f"got {np.asarray(value).tolist()}. {hint}."
            )
            assert np.asarray(value).dtype == np.float32, (
                f"{op.__name__}: gradient of input {i} is {np.asarray(value).dtype} for float32 "
                "inputs: a float64 constant crept in. Build constants with a.dtype.type(value)."
            )

    a, b = [2.0, -3.0], [4.0, 0.5]
    g = float32_array([1.0, 10.0])
    cases = [
        # op, inputs, params, expected gradients, the likely mistake
        (Add, (a, b), {}, ([1, 10], [1, 10]), "Add passes grad unchanged to both inputs"),
        (Sub, (a, b), {}, ([1, 10], [-1, -10]), "the second input of Sub gets -grad"),
        (Mul, (a, b), {}, ([4, 5], [2, -30]), "each input of Mul gets grad times the OTHER input"),
        (Div, (a, b), {}, ([0.25, 20], [-0.125, 120]),
         "d(a/b)/db = -a/b**2: did you forget the minus sign or the square?"),
        (Neg, (a,), {}, ([-1, -10],), "Neg returns -grad"),
        (Pow, (a,), {"exponent": 3.0}, ([12, 270],), "d(a**e)/da = e * a**(e - 1)"),
        (Exp, ([0.0, 1.0],), {}, ([1, 10 * np.e],), "d(exp a)/da = exp(a), i.e. ctx.output"),
        (Log, ([0.5, 4.0],), {}, ([2, 2.5],), "d(log a)/da = 1/a"),
    ]
    for op, inputs, params, expected, hint in cases:
        check_rule(op, inputs, params, expected, g, hint)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    rng = np.random.default_rng(6001)
    p = rng.uniform(0.5, 2.0, (2, 3))
    q = rng.uniform(0.5, 2.0, (2, 3)) * rng.choice([-1.0, 1.0], (2, 3))
    up = rng.standard_normal((2, 3)).astype(np.float32)

    def numerical(op, inputs, params):  # the expected gradients, by central differences
        arrays = [np.array(x, dtype=np.float64) for x in inputs]
        return tuple(numerical_gradient(op, arrays, i, up, params) for i in range(len(arrays)))

    table = {
        "matrices through Add": (Add, (p, q), {}),
        "matrices through Sub": (Sub, (q, p), {}),
        "matrices through Mul": (Mul, (q, p), {}),
        "matrices through Div": (Div, (q, p), {}),
        "a matrix through Neg": (Neg, (q,), {}),
        "a negative fractional power": (Pow, (p,), {"exponent": -1.5}),
        "a square root": (Pow, (p,), {"exponent": 0.5}),
        "Exp of negative values": (Exp, (-p,), {}),
        "Log of small values": (Log, (p / 100,), {}),
    }
    hidden_cases(check_rule, {
        label: (op, inputs, params, numerical(op, inputs, params), up, "")
        for label, (op, inputs, params) in table.items()
    })
    ### END HIDDEN TESTS


test_unit_elementwise_rules()


# %% [markdown]
# ## Part 3: broadcast gradients, reduced in one place
#
# If `bias` of shape (3,) is added to `x` of shape (4, 3), NumPy stretches `bias` over 4
# rows: each `bias[j]` is used 4 times. A value used several times receives the **sum** of
# the gradients of its uses (Part 1, fact 3), so `bias`'s gradient is `grad.sum(axis=0)`.
# In general, to bring a gradient of the broadcast shape back to the input's shape:
#
# 1. sum over the leading axes the input did not have (`(4, 3)` -> `(3,)`), then
# 2. sum, keeping the axis, over every axis where the input had size 1 and the gradient has
#    more (`(4, 3)` -> `(4, 1)` for an input of shape `(4, 1)`).
#
# ```
# grad (2, 4, 3) -> input (4, 1):  sum axis 0 -> (4, 3);  sum axis 1, keepdims -> (4, 1)
# ```
#
# Frameworks that do this inside each rule forget it in some rule, sooner or later. You do
# it once, in `unbroadcast`, which `backward` calls on every gradient a rule returns. That
# also makes it the one place to **check** every gradient: if what is left does not have
# the input's shape, a rule is wrong, and the error must say which operation's rule, so the
# bug is found where it is and not three layers later.

# %% nbgrader={"grade": false, "grade_id": "unbroadcast", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
def unbroadcast(grad, shape, op="an operation"):
    """Sum `grad` over the axes that broadcasting stretched, so it has `shape`.

    Raises ShapeError naming `op` when `grad` cannot be reduced to `shape`: the rule of
    `op` returned a gradient of the wrong shape.
    """
    ### BEGIN SOLUTION
    if not isinstance(grad, np.ndarray):
        grad = np.asarray(grad)
    if grad.shape == shape:
        return grad
    original = grad.shape
    extra = grad.ndim - len(shape)
    if extra >= 0:
        if extra:
            grad = np.asarray(grad.sum(axis=tuple(range(extra))))  # may be a NumPy scalar
        stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
        if stretched:
            grad = grad.sum(axis=stretched, keepdims=True)
    if grad.shape != shape:
        raise ShapeError(
            f"the derivative rule of {op} returned a gradient of shape {original} for an "
            f"input of shape {shape}. A rule returns, for each input, an array shaped like "
            "the operation's output (backward sums the broadcast axes) or like the input. "
            f"Check {op}'s rule: a missing transpose, reshape or sum?"
        )
    return grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_unbroadcast", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_unbroadcast():
    """Gradients are summed over stretched axes, and impossible shapes name the op."""

    def check_summed(g, shape, want, hint):
        try:
            got = unbroadcast(g, shape)
        except ShapeError as error:
            raise AssertionError(
                f"unbroadcast(grad of shape {g.shape}, {shape}) raised ShapeError, but that "
                f"gradient does sum to {shape}: {hint}. Your summing reached another shape and "
                "the check at its end blamed the rule; the mistake is in the summing"
            ) from error
        assert isinstance(got, np.ndarray) and got.shape == shape, (
            f"unbroadcast(grad of shape {g.shape}, {shape}) returned shape "
            f"{np.shape(got)}, expected {shape}: {hint}"
        )
        assert np.allclose(got, want), f"unbroadcast to {shape} gave wrong values: {hint}"
        assert got.dtype == g.dtype, f"unbroadcast changed the dtype to {got.dtype}"

    def check_refused(g, bad):
        try:
            unbroadcast(g, bad, "MatMul")
        except ShapeError as error:
            assert "MatMul" in str(error) and str(bad) in str(error), (
                f"the error for {g.shape} -> {bad} should name the op (MatMul) and both "
                f"shapes, so the wrong rule can be found: {error}"
            )
        else:
            raise AssertionError(
                f"unbroadcast(grad of shape {g.shape}, {bad}) must raise ShapeError: no "
                "summing turns one into the other, so the rule that made it is wrong"
            )

    g = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    cases = [
        ((2, 4, 3), g, "a gradient that already has the input's shape is returned as it is"),
        ((4, 3), g.sum(axis=0), "sum the leading axes the input did not have"),
        ((3,), g.sum(axis=(0, 1)), "(2, 4, 3) -> (3,): sum both leading axes"),
        ((4, 1), g.sum(axis=0).sum(axis=1, keepdims=True),
         "(2, 4, 3) -> (4, 1): sum the leading axis, then axis 1 with keepdims=True"),
        ((1, 1, 1), g.sum(keepdims=True), "size-1 axes are summed with keepdims=True"),
        ((), g.sum(), "a scalar input gets the sum of everything"),
    ]
    for shape, want, hint in cases:
        check_summed(g, shape, want, hint)
    for bad in ((5, 3), (4, 2), (2, 2, 4, 3)):
        check_refused(g, bad)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    h = np.random.default_rng(6002).standard_normal((3, 1, 5, 2)).astype(np.float32)
    hidden_cases(check_summed, {
        "keeping a size-one middle axis": (h, (1, 5, 1), h.sum(axis=(0, 3), keepdims=True)[0], ""),
        "the last axis alone": (h, (2,), h.sum(axis=(0, 1, 2)), ""),
        "everything into a scalar": (h, (), h.sum(), ""),
        "a size-one first axis kept": (h, (1, 1, 5, 2), h.sum(axis=0, keepdims=True), ""),
        "a float64 gradient": (h.astype(np.float64), (5, 1), h.astype(np.float64).sum(
            axis=(0, 1)).sum(axis=1, keepdims=True), ""),
    })
    hidden_cases(check_refused, {
        "a shape with the wrong last axis": (h, (5, 3)),
        "more axes than the gradient": (h, (1, 3, 1, 5, 2)),
    })
    ### END HIDDEN TESTS


test_unit_unbroadcast()


# %% [markdown]
# ## Part 4: reduction rules
#
# Reductions are the mirror image of broadcasting. Broadcasting copies a value along an
# axis, so its backward sums along that axis (Part 3); a **Sum** adds values along an axis,
# so its backward copies the gradient along it.
#
# **Sum** over some axes: every input element contributed once to its sum, so it receives
# that sum's gradient. Put the reduced axes back as size-1 axes (unless `keepdims=True`
# kept them: `np.expand_dims(grad, axes)`) and broadcast to the input's shape
# (`np.broadcast_to`, which copies nothing). Normalize `axis` first: `None` means every
# axis, an int is one axis, and negative axes count from the end (`axis % ndim`); the given
# helper `_reduced_axes(ndim, axis)` returns them as a sorted tuple.
#
# **Mean** is the sum divided by the number of elements reduced, so its rule is Sum's
# divided by that count (a constant of the input's dtype).
#
# **Max** passes the gradient to the element that was the maximum; the others had no
# influence. When several elements tie for the maximum, which one "was" it? PyTorch's
# `amax` shares the gradient equally among them, and so do you: the mask `a == max`
# (with the max's reduced axes restored) divided by the number of tied elements per output.
# The derivative at a tie does not exist; this choice is what makes the sum of the input
# gradients equal the output gradient, like a smooth function would.

# %% nbgrader={"grade": false, "grade_id": "reduction-rules", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
def _reduced_axes(ndim, axis):
    """`axis` (None, an int or a tuple, possibly negative) as a sorted tuple of axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim for a in axis))
    return (axis % ndim,)


@derivative(Sum)
def sum_backward(ctx, grad):
    """d(sum over axis): grad broadcast back over the reduced axes"""
    ### BEGIN SOLUTION
    a = ctx.inputs[0]
    axes = _reduced_axes(a.ndim, ctx.params.get("axis"))
    if not ctx.params.get("keepdims", False):
        grad = np.expand_dims(grad, axes)
    return (np.broadcast_to(grad, a.shape),)
    ### END SOLUTION


@derivative(Mean)
def mean_backward(ctx, grad):
    """d(mean over axis): grad broadcast back, divided by the number of elements reduced"""
    ### BEGIN SOLUTION
    a = ctx.inputs[0]
    axes = _reduced_axes(a.ndim, ctx.params.get("axis"))
    count = math.prod(a.shape[i] for i in axes)
    if not ctx.params.get("keepdims", False):
        grad = np.expand_dims(grad, axes)
    return (np.broadcast_to(grad / a.dtype.type(count), a.shape),)
    ### END SOLUTION


@derivative(Max)
def max_backward(ctx, grad):
    """d(max over axis): grad to the maximal elements, shared equally among ties"""
    ### BEGIN SOLUTION
    a = ctx.inputs[0]
    out = ctx.output
    axes = _reduced_axes(a.ndim, ctx.params.get("axis"))
    if not ctx.params.get("keepdims", False):
        grad = np.expand_dims(grad, axes)
        out = np.expand_dims(out, axes)
    mask = a == out
    count = mask.sum(axis=axes, keepdims=True).astype(a.dtype)
    return (mask * (grad / count),)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_reduction_rules", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_reduction_rules():
    """Sum, Mean and Max send the gradient back for every axis variant; ties share."""
    weights = np.random.default_rng(1)
    hints = {
        Sum: "expand grad at the reduced axes (unless keepdims) and broadcast it to a's shape",
        Mean: "as Sum, divided by the number of elements reduced",
        Max: "grad goes to the positions equal to the max (restore its reduced axes first)",
    }

    def check_reduction(op, x, axis, keepdims):
        """op's rule against finite differences for one axis and keepdims, in float64."""
        params = {"axis": axis, "keepdims": keepdims}
        ctx = record(op, x, dtype=np.float64, **params)
        g = weights.standard_normal(ctx.output.shape)
        (got,) = DERIVATIVES[op](ctx, g)
        want = numerical_gradient(op, [x.copy()], 0, g, params)
        label = f"{op.__name__}(axis={axis}, keepdims={keepdims}) on shape {x.shape}"
        assert np.shape(got) == x.shape, (
            f"{label}: the gradient has shape {np.shape(got)}, expected {x.shape}: {hints[op]}"
        )
        assert np.allclose(got, want, rtol=1e-5, atol=1e-7), (
            f"{label}: the gradient differs from finite differences (largest gap "
            f"{np.max(np.abs(got - want)):.3g}): {hints[op]}; normalize negative axes "
            "with axis % ndim"
        )

    def check_ties(op_input, axis, want, text):
        ctx = record(Max, op_input, axis=axis)
        (got,) = DERIVATIVES[Max](ctx, np.ones(ctx.output.shape, dtype=np.float32))
        assert np.allclose(got, want), (
            f"{text}: each tied element should get its share of the gradient, like torch.amax; "
            f"got {np.asarray(got).tolist()}. Divide the mask a == max by the number of tied "
            "elements per output"
        )

    x = random(2, 3, 4)
    for op in (Sum, Mean, Max):
        for axis in (None, 0, -1, (0, 2), (-1, 1)):
            for keepdims in (False, True):
                check_reduction(op, x, axis, keepdims)
        ctx = record(op, x, axis=-1)
        (got,) = DERIVATIVES[op](ctx, np.ones(ctx.output.shape, dtype=np.float32))
        assert np.asarray(got).dtype == np.float32, (
            f"{op.__name__}'s gradient of float32 data is {np.asarray(got).dtype}: divide by "
            "a constant of the input's dtype, a.dtype.type(count)"
        )
    check_ties([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], 1, [[0, 0.5, 0.5], [0.5, 0, 0.5]],
               "rows [1, 3, 3] and [2, 0, 2] have tied maxima")
    check_ties([[1.0, 5.0], [5.0, 2.0]], None, [[0, 0.5], [0.5, 0]],
               "max() over everything with two tied 5s: [[0, 0.5], [0.5, 0]] expected")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    line, four = random(7, seed=3), random(2, 1, 3, 2, seed=4)
    def sum_mean_max(array, axis, keepdims):
        for op in (Sum, Mean, Max):
            check_reduction(op, array, axis, keepdims)

    hidden_cases(sum_mean_max, {
        "a vector": (line, 0, False),
        "a vector, keepdims": (line, -1, True),
        "two axes of four": (four, (1, 3), False),
        "negative axes of four, keepdims": (four, (0, -1), True),
        "all four axes, keepdims": (four, None, True),
    })
    hidden_cases(check_ties, {
        "ties along the first axis": ([[4.0, 1.0], [4.0, 2.0], [4.0, 2.0]], 0,
                                      [[1 / 3, 0], [1 / 3, 0.5], [1 / 3, 0.5]], ""),
        "a whole row tied": ([[7.0, 7.0, 7.0, 7.0]], -1, [[0.25, 0.25, 0.25, 0.25]], ""),
    })
    ### END HIDDEN TESTS


test_unit_reduction_rules()


# %% [markdown]
# ## Part 5: the order of the walk
#
# Fact 2 of Part 1: a node may run its rule only after every node that uses it has sent
# its contribution. Put the graph's nodes in **topological order** (every node after its
# inputs), then walk that list backwards, from the loss to the leaves.
#
# The textbook way is a recursive depth-first search: visit each input, then append the
# node. It is four lines, and it breaks: Python stops recursion at about 1,000 nested calls
# (`sys.getrecursionlimit()`), and a graph is deep very easily. A recurrent network unrolled
# over 500 steps with a few operations per step, or the 10,000-step chain in the test
# below, raises `RecursionError` (the systems analysis measures where). Write the same
# search with your own stack, a Python list, which can grow as large as memory allows.
#
# A way to do it: push `(node, False)`. Pop an item. If it is `(node, True)`, all of the
# node's inputs are finished: append the node to the order. If it is `(node, False)` and the
# node was not seen, mark it seen, push `(node, True)`, then push `(parent, False)` for each
# parent that requires grad. Keep the `id(node)` of every node seen in a set: what matters
# is identity, and two different tensors may well hold equal numbers.
#
# Walk through `ctx.parents` only when `ctx` exists: leaves (tensors you created) have
# `_ctx is None`. Parents that do not require grad (constants, targets) have no gradient to
# receive, so leave them out of the order.

# %% nbgrader={"grade": false, "grade_id": "topological-order", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
def topological_order(root):
    """Nodes of the graph behind `root` that require grad, each after its parents; root last."""
    ### BEGIN SOLUTION
    order = []
    seen = set()
    stack = [(root, False)]
    while stack:
        node, inputs_done = stack.pop()
        if inputs_done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        ctx = node._ctx
        if ctx is not None and ctx.parents is not None:
            for parent in ctx.parents:
                if parent.requires_grad and id(parent) not in seen:
                    stack.append((parent, False))
    return order
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_topological_order", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_topological_order():
    """Every node comes after its inputs, once; constants are left out; no recursion."""

    def check_order(build):
        """build() gives (root, {name: tensor}) naming every node that requires grad."""
        root, named = build()
        names = {id(t): n for n, t in named.items()}
        order = topological_order(root)
        got = [names.get(id(n), "?") for n in order]
        assert sorted(got) == sorted(named), (
            f"the order of the graph should hold {', '.join(sorted(named))} once each, got "
            f"{got}: did you visit a node twice (mark it seen) or skip the leaves? ('?' is a "
            "node that does not require grad, a constant: leave it out)"
        )
        position = {n: i for i, n in enumerate(got)}
        for name, t in named.items():
            for parent in t._ctx.parents if t._ctx is not None else ():
                if id(parent) in names:
                    assert position[names[id(parent)]] < position[name], (
                        f"in {got}, {names[id(parent)]} comes after {name}, which uses it: "
                        "append a node only after all its parents are appended (post-order)"
                    )
        assert got[-1] == names[id(root)], f"the root must come last, got {got}"

    def squared_sum():  # L = (a*b + b)**2
        a = Tensor([2.0], requires_grad=True)
        b = Tensor([-3.0], requires_grad=True)
        c = a * b
        d = c + b
        loss = d * d
        return loss, {"a": a, "b": b, "c": c, "d": d, "L": loss}

    check_order(squared_sum)
    a = Tensor([2.0], requires_grad=True)
    scaled = a * 3.0
    assert len(topological_order(scaled)) == 2, (
        "a * 3.0 has the leaf a and the constant 3.0: the constant does not require grad "
        "and must not be in the order"
    )
    x = Tensor([1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y + 1.0
    try:
        deep = topological_order(y)
    except RecursionError:
        raise AssertionError(
            "a chain of 10,000 additions raised RecursionError: write the search with an "
            "explicit stack (a list) instead of calling the function recursively"
        ) from None
    assert len(deep) == 10_001 and deep[0] is x and deep[-1] is y, (
        f"the 10,000-step chain should give 10,001 nodes from x to y, got {len(deep)}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    def diamond():
        x = Tensor([1.0, 2.0], requires_grad=True)
        w = Tensor([0.5, -1.0], requires_grad=True)
        h = x * w
        left, right = h * 2.0, h * h
        out = left + right
        return out, {"x": x, "w": w, "h": h, "left": left, "right": right, "out": out}

    def with_constants():
        a = Tensor([1.0], requires_grad=True)
        b = Tensor([2.0], requires_grad=True)
        shifted = a + 1.0
        product = shifted * Tensor([4.0])
        out = product - b
        return out, {"a": a, "b": b, "shifted": shifted, "product": product, "out": out}

    def fan_in():
        x = Tensor([0.5], requires_grad=True)
        named, total = {"x": x}, x
        for i in range(1, 8):
            term = x * float(i)
            total = total + term
            named[f"term{i}"], named[f"total{i}"] = term, total
        return total, named

    def leaf_only():
        x = Tensor([3.0], requires_grad=True)
        return x, {"x": x}

    hidden_cases(check_order, {
        "a diamond": diamond,
        "constants between the nodes": with_constants,
        "one leaf used by many nodes": fan_in,
        "a leaf alone": leaf_only,
    })
    ### END HIDDEN TESTS


test_unit_topological_order()


# %% [markdown]
# ## Part 6: `backward`
#
# Now the engine. `backward(tensor, grad=None, retain_graph=False)`:
#
# 1. **Check the start.** `tensor` must require grad (otherwise nothing was recorded: a
#    clear error, not silence). The starting gradient `grad` has `tensor`'s shape and dtype;
#    when it is not given it is 1, which is only meaningful for a one-element tensor such as
#    a loss. For anything larger, raise a `RuntimeError` that says what to do: reduce first
#    (`t.sum().backward()`) or pass a gradient (`t.backward(Tensor(np.ones(t.shape)))`).
# 2. **Order** the graph with `topological_order`, and check every interior node before
#    changing anything: its `Function` has a rule in `DERIVATIVES` (otherwise say which
#    class and how to register it), and its record was not freed by an earlier backward
#    (step 5 leaves `ctx.parents` as `None`).
# 3. **Walk** the order backwards with a dictionary `id(node) -> gradient`. For each node,
#    take its gradient; for an interior node call its rule, and for each parent that
#    requires grad pass the result through `unbroadcast(g, input.shape, op_name)` and add it
#    to the parent's entry. Adding is how reused nodes accumulate. (If a float32 input met a
#    float64 one, its gradient comes back float64: convert it to the input's dtype.)
# 4. **Leaves** (requires grad, no `_ctx`) receive their gradient in `.grad`, as a `Tensor`
#    of the leaf's shape and dtype. If `.grad` is already there, add to it, as PyTorch does:
#    gradients of several backward calls accumulate until an optimizer sets them back to
#    `None` (module 07). Store a copy, not the array a rule returned: that array may be a
#    read-only broadcast view, or shared with another leaf, and optimizers change `.grad`
#    in place. Make the copy C-ordered, `np.array(g, dtype=..., order="C")`: the gradient of
#    a weight used as `W.T` arrives as a transposed view (Fortran order), and the
#    optimizer's element-wise updates, which read the parameter, its gradient and its state
#    together, run about half as fast when one of them is laid out the other way round
#    (measured on a `(384, 128)` AdamW-style update: 0.22 ms against 0.12 ms). Interior
#    nodes get no `.grad`: nobody needs it, and it would keep memory alive.
# 5. **Free the graph.** The records hold every intermediate array of the forward pass:
#    for a GPT that is most of the memory of a training step. Once a node's rule has run,
#    empty its record (set `ctx.parents`, `ctx.inputs`, `ctx.output`, `ctx.saved` and
#    `ctx.params` to `None`; keep `ctx.fn` so errors can name the operation), unless
#    `retain_graph=True`. A second backward through an emptied record is then a clear error
#    rather than wrong numbers.
#
# The cell splits the work: `_seed_gradient` (step 1), `_rules_for` (the checks of step 2),
# `_accumulate_leaf` (step 4), and `backward`, which ties them together with the walk.
#
# Cost: one rule call per node, one dictionary lookup per edge. Keep Python out of the inner
# loop beyond that: all arithmetic happens inside the rules, on whole arrays.
#
# **Using it in this notebook.** `Tensor.backward()` (module 01) imports `backward` from the
# *package*, `tinytorch.core.autograd`, which your work becomes after
# `tito module complete 06`. Until then, call the function of this notebook directly:
# `backward(loss)`. The tests do the same, so they test the code you wrote here.

# %% nbgrader={"grade": false, "grade_id": "backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _seed_gradient(tensor, grad):
    """The gradient backward starts from: `grad` checked and converted, or 1 for a scalar."""
    ### BEGIN SOLUTION
    if grad is None:
        if tensor.size != 1:
            raise RuntimeError(
                f"backward() on a tensor of shape {tensor.shape} needs a starting gradient: "
                "the implicit 1.0 only makes sense for a one-element tensor such as a loss. "
                "Reduce it first, e.g. t.sum().backward(), or pass a gradient of its shape, "
                f"e.g. t.backward(Tensor(np.ones({tensor.shape})))."
            )
        return np.ones(tensor.shape, dtype=tensor.dtype)
    array = np.asarray(grad.data if isinstance(grad, Tensor) else grad, dtype=tensor.dtype)
    if array.shape != tensor.shape:
        raise ShapeError(
            f"backward(grad=...) got a gradient of shape {array.shape} for a tensor of shape "
            f"{tensor.shape}: the starting gradient must have exactly the tensor's shape."
        )
    return array
    ### END SOLUTION


def _rules_for(order):
    """The rule of every node in `order` (None for a leaf), after checking the whole graph.

    Raises RuntimeError for a record emptied by an earlier backward and for an operation
    without a rule, before anything is changed.
    """
    ### BEGIN SOLUTION
    rules = []
    for node in order:
        ctx = node._ctx
        if ctx is None:
            rules.append(None)  # a leaf
            continue
        name = ctx.fn.__name__
        if ctx.parents is None:
            raise RuntimeError(
                f"backward through a graph that was already freed (at a {name}): a first "
                "backward() emptied its records to release memory. Pass retain_graph=True to "
                "the first backward if you need a second one, or run the forward pass again. "
                "A tensor kept from an earlier step (an RNN state) must be .detach()ed."
            )
        rule = DERIVATIVES.get(ctx.fn)
        if rule is None:
            raise RuntimeError(
                f"no derivative rule for {name}: register one next to the operation, e.g.\n"
                f"    @derivative({name})\n"
                f"    def {name.lower()}_backward(ctx, grad):\n"
                "        return (...,)  # one gradient per input\n"
                "with `from tinytorch.core.autograd import derivative`."
            )
        rules.append(rule)
    return rules
    ### END SOLUTION


def _accumulate_leaf(leaf, g):
    """leaf.grad += g, as a Tensor of the leaf's dtype that owns its memory."""
    ### BEGIN SOLUTION
    if leaf.grad is None:
        # A private copy, in C order: the gradient of a weight used as W.T arrives
        # transposed (F order), and the optimizer's element-wise updates are several times
        # slower when param, grad and state are laid out in different orders.
        leaf.grad = Tensor._make(np.array(g, dtype=leaf.data.dtype, order="C"))
    else:
        old = leaf.grad.data if isinstance(leaf.grad, Tensor) else np.asarray(leaf.grad)
        leaf.grad = Tensor._make((old + g).astype(leaf.data.dtype, copy=False))
    ### END SOLUTION


def backward(tensor, grad=None, retain_graph=False):
    """Accumulate d(tensor)/d(leaf), times `grad`, into `.grad` of every leaf behind `tensor`.

    `grad` defaults to 1 for a one-element tensor. The graph is freed afterwards unless
    `retain_graph=True`. `t.backward()` calls it.

    >>> a, b = Tensor(2.0, requires_grad=True), Tensor(-3.0, requires_grad=True)
    >>> backward((a * b + b) ** 2)
    >>> a.grad, b.grad
    (Tensor(54.), Tensor(-54.))
    >>> x = Tensor([1.0, 4.0], requires_grad=True)
    >>> backward(x * 3, grad=Tensor([1.0, 0.5]))  # not one element: grad is needed
    >>> x.grad
    Tensor([3. , 1.5])
    """
    ### BEGIN SOLUTION
    if not isinstance(tensor, Tensor):
        raise TypeError(f"backward() takes a Tensor, got {type(tensor).__name__}")
    if not tensor.requires_grad:
        raise RuntimeError(
            "backward() on a tensor that does not require grad: no operation leading to it "
            "was recorded, so there is nothing to differentiate. Create the parameters with "
            "requires_grad=True, and check that the loss was not computed under no_grad() or "
            "from .detach()ed tensors."
        )
    seed = _seed_gradient(tensor, grad)
    order = topological_order(tensor)  # inputs first, `tensor` last
    rules = _rules_for(order)  # checks everything before anything changes

    grads = {id(tensor): seed}
    for node, rule in zip(reversed(order), reversed(rules)):
        g = grads.pop(id(node), None)
        ctx = node._ctx
        if g is not None:
            if rule is None:
                _accumulate_leaf(node, g)
                continue
            parents = ctx.parents
            parent_grads = rule(ctx, g)
            if not isinstance(parent_grads, (tuple, list)) or len(parent_grads) != len(parents):
                got = type(parent_grads).__name__
                if isinstance(parent_grads, (tuple, list)):
                    got += f" of length {len(parent_grads)}"
                raise TypeError(
                    f"the derivative rule of {ctx.fn.__name__} must return a tuple with one "
                    f"gradient (or None) per input ({len(parents)}), got a {got}. A one-input "
                    "rule returns (value,)."
                )
            for parent, array, pg in zip(parents, ctx.inputs, parent_grads):
                if pg is None or not parent.requires_grad:
                    continue
                pg = unbroadcast(pg, array.shape, ctx.fn.__name__)
                if pg.dtype != array.dtype:
                    pg = pg.astype(array.dtype)
                key = id(parent)
                if key in grads:
                    grads[key] = grads[key] + pg
                else:
                    grads[key] = pg
        if ctx is not None and not retain_graph:
            ctx.parents = ctx.inputs = ctx.output = ctx.saved = ctx.params = None
    ### END SOLUTION


# %% [markdown]
# ### Tests: the chain rule, accumulation, broadcasting and errors
#
# The first test is the graph of Part 1, with the values you derived by hand.

# %% nbgrader={"grade": true, "grade_id": "test_unit_chain_rule", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_chain_rule():
    """L = (a*b + b)**2 at a=2, b=-3 gives dL/da = 54 and dL/db = -54."""
    mul_rule_first()

    def check_chain(a_value, b_value, dtype=np.float32):
        """L = (a*b + b)**2: dL/da = 2(ab + b) b, dL/db = 2(ab + b)(a + 1), summed if arrays."""
        a = Tensor(a_value, dtype=dtype, requires_grad=True)
        b = Tensor(b_value, dtype=dtype, requires_grad=True)
        c = a * b
        d = c + b
        loss = (d * d).sum() if a.ndim else d * d
        backward(loss)
        av, bv = np.asarray(a_value, dtype=np.float64), np.asarray(b_value, dtype=np.float64)
        da, db = 2 * (av * bv + bv) * bv, 2 * (av * bv + bv) * (av + 1)
        assert a.grad is not None and b.grad is not None, (
            "after backward(loss) both leaves should have .grad: are leaves (tensors with "
            "_ctx None) given their gradient at the end of the walk?"
        )
        assert isinstance(a.grad, Tensor), f"a.grad should be a Tensor, got {type(a.grad).__name__}"
        assert np.allclose(a.grad.data, da, rtol=1e-5), (
            f"dL/da should be 2*b**2*(a+1) = {da}, got {a.grad.data}: check Mul's rule "
            "(grad times the OTHER input) and that d, used twice by d*d, receives both "
            "contributions"
        )
        assert np.allclose(b.grad.data, db, rtol=1e-5), (
            f"dL/db should be 2*(a*b + b) (through Add) + 2*(a*b + b)*a (through a*b) = {db}, "
            f"got {b.grad.data}: a node used twice must ADD the gradients of its uses (did the "
            "second one overwrite the first?)"
        )
        assert c.grad is None and d.grad is None, (
            "interior nodes (c, d) should not get .grad: only leaves do"
        )
        assert a.grad.shape == a.shape and a.grad.dtype == dtype, (
            f"a.grad should have a's shape {a.shape} and dtype {np.dtype(dtype)}, got "
            f"{a.grad.shape} {a.grad.dtype}"
        )

    check_chain(2.0, -3.0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_chain, {
        "other values": (-0.5, 1.25),
        "a zero factor": (0.0, 4.0),
        "vectors": ([1.0, -2.0, 0.5], [3.0, 0.25, -1.0]),
        "float64 scalars": (1.5, -2.0, np.float64),
    })
    ### END HIDDEN TESTS


test_unit_chain_rule()


# %% nbgrader={"grade": true, "grade_id": "test_unit_accumulation", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_accumulation():
    """Reused nodes sum their gradients; leaf .grad accumulates across backward calls."""
    mul_rule_first()

    def check_accumulated(x_value, w_value, calls):
        """`calls` backward passes of sum(x*x), then one through a diamond h -> (h*2, h*h)."""
        x = Tensor(x_value, requires_grad=True)
        for _ in range(calls):
            backward((x * x).sum())
        first = 2 * calls * x.data
        assert np.allclose(x.grad.data, first), (
            f"d/dx sum(x*x) = 2x per call, {first} after {calls}, got {x.grad.data}: x is both "
            "inputs of Mul, so its two contributions must be added"
        )
        w = Tensor(w_value, requires_grad=True)
        h = x * w  # used by two branches: a diamond
        backward((h * 2.0 + h * h).sum())
        want = first + (2 + 2 * x.data * w.data) * w.data
        assert np.allclose(x.grad.data, want, rtol=1e-5), (
            f"x.grad after a second backward should be the first gradient plus the new one "
            f"({want}), got {x.grad.data}: leaf gradients accumulate across calls "
            "(add to .grad instead of replacing it), and the diamond h -> (h*2, h*h) must sum "
            "both branches"
        )
        assert x.grad.dtype == np.float32 and x.grad.shape == x.shape, (
            f"x.grad must keep x's shape {x.shape} and dtype float32, got {x.grad.shape} "
            f"{x.grad.dtype}"
        )

    check_accumulated([1.0, 2.0, 3.0], [0.5, -1.0, 2.0], 1)
    y = Tensor([1.0, 1.0], requires_grad=True)
    backward(y.sum() + y.sum())
    assert np.allclose(y.grad.data, [2, 2]), (
        f"y.sum() + y.sum() gives y.grad [2, 2], got {y.grad.data}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_accumulated, {
        "three passes before the diamond": ([0.5, -1.5], [2.0, 3.0], 3),
        "a matrix": ([[1.0, -1.0], [2.0, 0.0]], [[0.25, 1.0], [-2.0, 5.0]], 2),
        "a scalar": (1.5, -0.5, 1),
    })
    ### END HIDDEN TESTS


test_unit_accumulation()


# %% nbgrader={"grade": true, "grade_id": "test_unit_broadcast_backward", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_broadcast_backward():
    """A broadcast input's gradient is summed back to the input's own shape."""
    mul_rule_first()
    check_unbroadcast_first("test_unit_broadcast_backward")
    rng = np.random.default_rng(0)

    def check_broadcast(x_shape, bias_shape, col_shape, bias_axes, col_axes):
        """backward(((x + bias) * col).sum()): bias.grad sums col, col.grad sums x + bias,
        over the axes (`bias_axes`, `col_axes`) each was stretched along."""
        x = Tensor(rng.standard_normal(x_shape), requires_grad=True)
        bias = Tensor(rng.standard_normal(bias_shape), requires_grad=True)
        col = Tensor(rng.standard_normal(col_shape), requires_grad=True)
        backward(((x + bias) * col).sum())
        out = np.broadcast_shapes(x_shape, bias_shape, col_shape)
        assert bias.grad is not None and bias.grad.shape == bias_shape, (
            f"bias of shape {bias_shape} was broadcast to {out}: its gradient must have shape "
            f"{bias_shape}, got {None if bias.grad is None else bias.grad.shape}. Is every "
            "gradient passed through unbroadcast before it is added to its parent's entry?"
        )
        want = np.broadcast_to(col.data, out).sum(axis=bias_axes).reshape(bias_shape)
        assert np.allclose(bias.grad.data, want, atol=1e-5), (
            "bias.grad should be col summed over the axes bias was stretched along"
        )
        assert col.grad.shape == col_shape, (
            f"col {col_shape} got a gradient of shape {col.grad.shape}"
        )
        want = np.broadcast_to(x.data + bias.data, out).sum(axis=col_axes).reshape(col_shape)
        assert np.allclose(col.grad.data, want, atol=1e-5), (
            "col.grad should be (x + bias) summed over the axes col was stretched along"
        )
        assert x.grad.dtype == np.float32, f"x.grad is {x.grad.dtype}, expected float32"

    check_broadcast((4, 3), (3,), (4, 1), 0, 1)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_broadcast, {
        "three axes, a vector bias and a middle column": ((2, 3, 4), (4,), (3, 1), (0, 1), (0, 2)),
        "every operand stretched": ((5, 1), (1, 6), (6,), 0, 0),
        "a scalar bias": ((3, 2), (), (3, 1), (0, 1), 1),
    })
    ### END HIDDEN TESTS


test_unit_broadcast_backward()


# %% nbgrader={"grade": true, "grade_id": "test_unit_deep_chain", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_deep_chain():
    """A chain of 10,000 operations differentiates without RecursionError."""
    mul_rule_first()

    def check_deep(steps, step, want):
        """`steps` repetitions of step(y) from x; d sum(y) / dx must be `want`."""
        x = Tensor([0.5, 2.0], requires_grad=True)
        y = x
        for _ in range(steps):
            y = step(y)
        try:
            backward(y.sum())
        except RecursionError:
            raise AssertionError(
                f"backward on a chain of {steps} steps raised RecursionError: order the graph "
                "with an explicit stack (topological_order), not a recursive function"
            ) from None
        assert np.allclose(x.grad.data, want, rtol=1e-3), (
            f"d/dx of the chain is {want:.4f}, got {x.grad.data}"
        )

    check_deep(5_000, lambda y: y * 1.0001 - 0.001, 1.0001 ** 5_000)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_deep, {
        "a longer chain of divisions": (12_000, lambda y: y / 1.00005, 1.00005 ** -12_000),
        "a chain of negations": (8_000, lambda y: -y, 1.0),
    })
    ### END HIDDEN TESTS


test_unit_deep_chain()


# %% nbgrader={"grade": true, "grade_id": "test_unit_graph_freed", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_graph_freed():
    """After backward the records are emptied, unless retain_graph=True."""
    mul_rule_first()
    import gc
    import weakref

    def check_freed(n, make, per_call):
        """make(x) -> (an intermediate tensor, the loss); each backward adds per_call * ones."""
        x = Tensor(np.ones(n, dtype=np.float32), requires_grad=True)
        hidden, loss = make(x)
        alive = weakref.ref(hidden)
        del hidden
        backward(loss, retain_graph=True)
        gc.collect()
        assert alive() is not None, (
            "with retain_graph=True the graph must stay: the intermediate tensor disappeared"
        )
        backward(loss)
        gc.collect()
        assert np.allclose(x.grad.data, 2 * per_call), (
            f"two backward calls should accumulate {per_call} + {per_call} = {2 * per_call}, got "
            f"{x.grad.data[:3]}"
        )
        assert alive() is None, (
            "after backward the intermediate tensor is still alive: the graph keeps it. "
            "Empty each record once its rule has run (ctx.parents = ctx.inputs = ctx.output = "
            "None ...), unless retain_graph=True"
        )
        try:
            backward(loss)
        except RuntimeError as error:
            assert "retain_graph" in str(error), (
                f"the error for a second backward should say to pass retain_graph=True: {error}"
            )
        else:
            raise AssertionError(
                "a second backward through a freed graph must raise RuntimeError (the records "
                "are empty), not silently do nothing or treat the loss as a leaf"
            )

    def doubled_squares(x):  # sum((2x)**2): 8 per element at x = 1
        h = x * 2.0
        return h, (h * h).sum()

    check_freed(1000, doubled_squares, 8.0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    def diamond_mean(x):  # mean(h*3 + h) with h = x*x: 8x / n = 8 / 4 at x = 1
        h = x * x
        return h, (h * 3.0 + h).mean()

    def long_tail(x):  # the intermediate sits deep inside a chain
        h = x + 1.0
        y = h
        for _ in range(50):
            y = y * 1.0
        return h, y.sum()

    hidden_cases(check_freed, {
        "a diamond reduced by a mean": (4, diamond_mean, 2.0),
        "an intermediate deep in a chain": (10, long_tail, 1.0),
    })
    ### END HIDDEN TESTS


test_unit_graph_freed()


# %% nbgrader={"grade": true, "grade_id": "test_unit_backward_errors", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_backward_errors():
    """Every misuse gets an error that says what to do."""
    mul_rule_first()

    def error_of(call):
        try:
            call()
        except NotImplementedError:
            raise  # not written yet: say so, rather than judge the message
        except Exception as error:  # noqa: BLE001 - we inspect whatever was raised
            return error
        return None

    def check_start(shape, bad):
        """backward() on a tensor of `shape` with no grad, then with a grad of shape `bad`."""
        y = Tensor(np.ones(shape, dtype=np.float32), requires_grad=True) * 2.0
        error = error_of(lambda: backward(y))
        assert isinstance(error, RuntimeError), (
            f"backward() on a {shape} tensor without grad= must raise RuntimeError, got {error!r}"
        )
        assert "sum()" in str(error) and f"np.ones({shape})" in str(error), (
            f"the message should say what to pass (e.g. t.backward(Tensor(np.ones({shape})))) "
            f"or to reduce with .sum(): {error}"
        )
        error = error_of(lambda: backward(y, np.ones(bad, dtype=np.float32)))
        named = str(bad) in str(error) and str(shape) in str(error)
        assert isinstance(error, ValueError) and named, (
            f"a starting gradient of shape {bad} for a {shape} tensor must raise ShapeError "
            f"naming both shapes, got {error!r}"
        )

    check_start((2, 3), (3,))
    x = Tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    y = x * 2.0
    backward(y, np.full((2, 3), 0.5, dtype=np.float32))
    assert np.allclose(x.grad.data, 1.0), (
        f"backward(y, grad=0.5 everywhere) for y = 2x should give x.grad = 1, got {x.grad.data}"
    )
    plain = Tensor([1.0, 2.0]).sum()
    error = error_of(lambda: backward(plain))
    assert isinstance(error, RuntimeError) and "requires_grad" in str(error), (
        f"backward on a tensor that does not require grad must raise RuntimeError mentioning "
        f"requires_grad=True, got {error!r}"
    )

    class Cube(Function):  # a new op with no rule
        @staticmethod
        def forward(a):
            return a * a * a

    error = error_of(lambda: backward(Cube.apply(Tensor([2.0], requires_grad=True)).sum()))
    named = isinstance(error, RuntimeError) and "@derivative(Cube)" in str(error)
    assert named, (
        f"an op without a rule must raise RuntimeError naming the class and how to register "
        f"it, @derivative(Cube), got {error!r}"
    )
    leaf = Tensor([2.0], requires_grad=True)
    cube = Cube.apply(leaf)
    error = error_of(lambda: backward((cube + leaf).sum()))
    assert leaf.grad is None, (
        "backward failed on a missing rule but still changed leaf.grad: check the whole graph "
        "for rules before the walk, so a failed backward changes nothing"
    )

    @derivative(Cube)
    def wrong_cube_backward(ctx, grad):
        return (grad[:1],)  # wrong: shape (1,) for an input of shape (2,)

    error = error_of(lambda: backward(Cube.apply(Tensor([1.0, 2.0], requires_grad=True)).sum()))
    assert isinstance(error, ValueError) and "Cube" in str(error), (
        f"a rule returning a gradient of the wrong shape must be caught by unbroadcast with "
        f"a ShapeError naming the op (Cube), got {error!r}"
    )
    del DERIVATIVES[Cube]
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_start, {
        "a vector with a matrix gradient": ((4,), (2, 2)),
        "three axes with a gradient missing one": ((2, 1, 3), (2, 3)),
        "a column with a row gradient": ((3, 1), (1, 3)),
    })
    ### END HIDDEN TESTS


test_unit_backward_errors()


# %% [markdown]
# ## Part 7: matrix, shape and indexing rules
#
# **MatMul.** For `out = a @ b` with `a` (n, k) and `b` (k, m), `grad` is (n, m) and
#
# ```
# grad_a = grad @ b.T      # (n, m) @ (m, k) -> (n, k)
# grad_b = a.T @ grad      # (k, n) @ (n, m) -> (k, m)
# ```
#
# If you forget which side the transpose goes on, let the shapes tell you: there is only
# one way to combine `grad` with the other input into the input's shape. Batched inputs
# (`(B, n, k) @ (k, m)`) work the same with `np.swapaxes(b, -1, -2)` for the transpose; the
# batch axes of `b`'s gradient, which was broadcast over the batch, are summed by
# `unbroadcast`. The most common batched case, a `Linear` layer on `(B, T, C)` (a 3-D or
# larger `a` times a 2-D `b`), deserves module 01's trick: fold the leading axes into rows,
# `g2 = grad.reshape(-1, m)`, then `grad_a = (g2 @ b.T).reshape(a.shape)` and `grad_b =
# a.reshape(-1, k).T @ g2`. `grad_b` is then one `(k, B*T) @ (B*T, m)` product, the sum over
# the batch done inside BLAS, instead of `B` products written into a `(B, k, m)` array that
# `unbroadcast` sums afterwards (measured for `(12, 64, 128) @ (128, 384)`: 1.3 ms against
# 1.6 ms on a busy machine, and no `(B, k, m)` temporary). One-dimensional inputs follow
# `np.matmul`'s rules: a vector `a` (k,) acts as a (1, k) matrix and that axis is removed
# from the result (likewise (k,) -> (k, 1) for `b`). Put the axis back into `grad` and the
# vector back into a matrix, apply the formulas, and remove it again from the gradient.
# Backward costs two matrix products for one in forward: training is about three times the
# arithmetic of inference.
#
# **Reshape, Transpose, Permute** move no numbers, only positions, so their rules move the
# gradient back: reshape it to the input's shape, swap the same two axes, or apply the
# inverse permutation (`np.argsort(dims)`).
#
# **GetItem** copies the selected elements. Its gradient is zero for elements not selected
# and `grad` for the selected ones: make `np.zeros` of the input's shape and put `grad`
# where the index points. With plain integers and slices, `out[index] = grad` does it. With
# arrays of indices, an element can be selected twice: `x[[0, 0, 1]]` uses `x[0]` twice, so
# it must receive the sum of both gradients. `out[[0, 0, 1]] = grad` keeps only the last
# one; `np.add.at(out, index, grad)` adds every one. This is exactly how an embedding
# table's rows receive gradients from repeated tokens (module 11). `np.add.at` is slower
# than assignment, so use it only when the index can repeat: the given helper
# `_is_basic_index(index)` tells the two kinds of index apart.

# %% nbgrader={"grade": false, "grade_id": "shape-rules", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
@derivative(MatMul)
def matmul_backward(ctx, grad):
    """d(a @ b): (grad @ b.T, a.T @ grad), with np.matmul's vector rules"""
    ### BEGIN SOLUTION
    a, b = ctx.inputs
    if a.ndim > 2 and b.ndim == 2:
        # A Linear layer on (B, T, C): flatten the leading axes. grad_b is then one
        # (k, B*T) @ (B*T, m) product, instead of B products that unbroadcast sums afterwards.
        k, m = b.shape
        g2 = grad.reshape(-1, m)
        grad_a = (g2 @ b.T).reshape(a.shape) if ctx.parents[0].requires_grad else None
        grad_b = a.reshape(-1, k).T @ g2 if ctx.parents[1].requires_grad else None
        return grad_a, grad_b
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g = grad
    if b.ndim == 1:
        g = g[..., None]
    if a.ndim == 1:
        g = g[..., None, :]
    grad_a = grad_b = None
    if ctx.parents[0].requires_grad:
        grad_a = np.matmul(g, np.swapaxes(b2, -1, -2))
        if a.ndim == 1:
            grad_a = grad_a[..., 0, :]
    if ctx.parents[1].requires_grad:
        grad_b = np.matmul(np.swapaxes(a2, -1, -2), g)
        if b.ndim == 1:
            grad_b = grad_b[..., 0]
    return grad_a, grad_b
    ### END SOLUTION


@derivative(Reshape)
def reshape_backward(ctx, grad):
    """d(reshape): the gradient reshaped back to the input's shape"""
    ### BEGIN SOLUTION
    return (grad.reshape(ctx.inputs[0].shape),)
    ### END SOLUTION


@derivative(Transpose)
def transpose_backward(ctx, grad):
    """d(swap axes dim0, dim1): swap them back"""
    ### BEGIN SOLUTION
    return (np.swapaxes(grad, ctx.params["dim0"], ctx.params["dim1"]),)
    ### END SOLUTION


@derivative(Permute)
def permute_backward(ctx, grad):
    """d(permute dims): the inverse permutation, argsort(dims)"""
    ### BEGIN SOLUTION
    ndim = grad.ndim
    dims = [d % ndim for d in ctx.params["dims"]]
    return (np.transpose(grad, np.argsort(dims)),)
    ### END SOLUTION


def _is_basic_index(index):
    """True for integers, slices, None and ..., which select every element at most once."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(
        p is None or p is Ellipsis or isinstance(p, (slice, int, np.integer)) for p in parts
    )


@derivative(GetItem)
def getitem_backward(ctx, grad):
    """d(a[index]): zeros with grad put at index; repeated indices add up (np.add.at)"""
    ### BEGIN SOLUTION
    a = ctx.inputs[0]
    index = ctx.params["index"]
    out = np.zeros(a.shape, dtype=a.dtype)
    if _is_basic_index(index):
        out[index] = grad
    else:
        np.add.at(out, index, grad)
    return (out,)
    ### END SOLUTION


# %% [markdown]
# ### A helper for the tests: your backward against finite differences
#
# From here on the tests run an operation through your `backward` and compare every input's
# gradient with `numerical_gradient` (float64), then run it again in float32 and check that
# the gradients stay float32.

# %% nbgrader={"grade": false, "grade_id": "test-helpers-numerical", "locked": true, "schema_version": 3, "solution": false, "task": false}
def check_op(op, arrays, hint, differentiable=None, **params):
    """Compare backward's gradients for op(*arrays, **params) with numerical ones."""
    rng = np.random.default_rng(42)
    differentiable = range(len(arrays)) if differentiable is None else differentiable
    arrays = [np.array(a) for a in arrays]
    tensors = [
        Tensor(a, dtype=a.dtype, requires_grad=i in differentiable) for i, a in enumerate(arrays)
    ]
    out = op.apply(*tensors, **params)
    weights = rng.standard_normal(out.shape)
    backward(out, weights)
    label = f"{op.__name__}({', '.join(str(np.shape(a)) for a in arrays)}"
    label += "".join(f", {k}={v!r}" for k, v in params.items()) + ")"
    for i in differentiable:
        got = tensors[i].grad
        assert got is not None, (
            f"{label}: input {i} received no gradient: did the rule return None for it?"
        )
        want = numerical_gradient(op, arrays, i, weights, params)
        assert got.shape == want.shape, (
            f"{label}: the gradient of input {i} has shape {got.shape}, expected {want.shape}"
        )
        bad = ~np.isclose(got.data, want, rtol=1e-4, atol=1e-6)
        if bad.any():
            where = tuple(int(j) for j in np.argwhere(bad)[0])
            raise AssertionError(
                f"{label}: gradient of input {i} at element {where}: expected "
                f"{want[where]:.6g} (finite differences), got {got.data[where]:.6g}. {hint}"
            )
    # The same in float32: the gradients must stay float32.
    def as_float32(a):
        is_float64 = isinstance(a, np.ndarray) and a.dtype == np.float64
        return a.astype(np.float32) if is_float64 else a

    floats = [
        Tensor(as_float32(a), dtype=as_float32(a).dtype, requires_grad=i in differentiable)
        for i, a in enumerate(arrays)
    ]
    params32 = {k: as_float32(v) for k, v in params.items()}
    backward(op.apply(*floats, **params32), weights.astype(np.float32))
    for i in differentiable:
        assert floats[i].grad.dtype == np.float32, (
            f"{label} in float32: the gradient of input {i} is {floats[i].grad.dtype}. A "
            "float64 constant crept into the rule: build constants with a.dtype.type(value)"
        )



# %% nbgrader={"grade": true, "grade_id": "test_unit_matmul_rule", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_matmul_rule():
    """MatMul's gradients for matrices, batches and vectors match finite differences."""
    check_unbroadcast_first("test_unit_matmul_rule")
    hint = ("grad_a = grad @ b.T and grad_b = a.T @ grad (transpose the last two axes); for a "
            "vector input add the missing axis to grad first and remove it from the result")
    check_op(MatMul, [random(3, 4), random(4, 2, seed=1)], hint)
    check_op(MatMul, [random(2, 3, 4), random(4, 5, seed=1)],
             hint + "; b was broadcast over the batch: unbroadcast sums its batch axis")
    check_op(MatMul, [random(2, 1, 3, 4), random(5, 4, 2, seed=1)], hint)
    check_op(MatMul, [random(4), random(4, 3, seed=1)], hint + " (a is a vector: (4,) as (1, 4))")
    check_op(MatMul, [random(2, 3, 4), random(4, seed=1)],
             hint + " (b is a vector: (4,) as (4, 1))")
    check_op(MatMul, [random(4), random(4, seed=1)], hint + " (two vectors: a dot product)")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(lambda a, b: check_op(MatMul, [a, b], hint), {
        "a column times a row": (random(5, 1, seed=7), random(1, 3, seed=8)),
        "two batches of the same size": (random(3, 2, 4, seed=7), random(3, 4, 2, seed=8)),
        "batch axes that both broadcast": (random(2, 1, 1, 3, seed=7), random(4, 3, 2, seed=8)),
        "a vector times a batch": (random(3, seed=7), random(2, 3, 4, seed=8)),
        "a batch times a vector of one": (random(2, 5, 1, seed=7), random(1, seed=8)),
    })
    ### END HIDDEN TESTS


test_unit_matmul_rule()


# %% nbgrader={"grade": true, "grade_id": "test_unit_shape_rules", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_shape_rules():
    """Reshape, Transpose, Permute and GetItem move the gradient back where it came from."""
    x = random(2, 3, 4)
    check_op(Reshape, [x], "reshape grad back to the input's shape", shape=(4, 6))
    check_op(Transpose, [x], "swap the same two axes back", dim0=0, dim1=2)
    check_op(Transpose, [x], "swap the same two axes back", dim0=-2, dim1=-1)
    check_op(Permute, [x], "apply the inverse permutation, np.argsort(dims)", dims=(2, 0, 1))
    check_op(Permute, [x], "apply the inverse permutation (dims may be negative)", dims=(-1, 0, -2))
    check_op(GetItem, [x], "zeros of the input's shape, grad put at index",
             index=(slice(None), slice(1, None), slice(None, None, 2)))
    check_op(GetItem, [x], "an integer index drops an axis; put grad back at it", index=(1, 2))
    repeats = "repeated indices must add up: use np.add.at(out, index, grad), not out[index] = grad"
    check_op(GetItem, [x], repeats, index=np.array([1, 1, 0]))
    check_op(GetItem, [x], repeats, index=(slice(None), np.array([2, 0, 2, 2])))
    check_op(GetItem, [x], "a boolean mask selects elements once", index=x > 0)
    t = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    backward(t[np.array([0, 0, 0, 2])].sum())
    assert np.allclose(t.grad.data, [3, 0, 1]), (
        f"t[[0, 0, 0, 2]].sum() uses t[0] three times: t.grad should be [3, 0, 1], got "
        f"{t.grad.data}. {repeats}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    z = random(3, 1, 4, 2, seed=9)
    hidden_cases(lambda op, params: check_op(op, [z], "", **params), {
        "a reshape that infers a size": (Reshape, {"shape": (-1, 2)}),
        "a transpose of outer axes": (Transpose, {"dim0": 1, "dim1": 3}),
        "a reversed permutation": (Permute, {"dims": (3, 2, 1, 0)}),
        "an ellipsis index": (GetItem, {"index": (Ellipsis, 1)}),
        "negative indices": (GetItem, {"index": (-1, 0, slice(-3, None))}),
        "repeated indices on two axes": (GetItem, {"index": (np.array([0, 2, 0]),
                                                             np.array([0, 0, 0]))}),
        "a boolean mask over the first two axes": (GetItem, {"index": z[:, :, 0, 0] > 0}),
    })
    ### END HIDDEN TESTS


test_unit_shape_rules()


# %% [markdown]
# ## Part 8: activations and losses
#
# The operations of modules 02 and 04 are fused: one `Function` each, instead of a chain of
# `Exp`, `Div` and `Sum`. Their rules are fused too, and usually cheaper than the chain's,
# because the derivative can often be written with the output the forward pass already
# computed (`ctx.output`).
#
# | op | forward `y` | rule: grad times |
# |---|---|---|
# | `ReLUFunction` | `max(x, 0)` | `1` where `x > 0`, else `0` |
# | `SigmoidFunction` | `s = 1 / (1 + exp(-x))` | `s * (1 - s)`, with `s = ctx.output` |
# | `TanhFunction` | `t = tanh(x)` | `1 - t**2`, with `t = ctx.output` |
# | `SiLUFunction` | `x * s` | `s * (1 + x * (1 - s))`, `s` the sigmoid of `x` |
# | `GELUFunction` ("none") | `x * Phi(x)` | `Phi(x) + x * phi(x)` |
# | `GELUFunction` ("tanh") | `0.5 * x * (1 + t)` | `0.5 * (1 + t) + 0.5 * x * (1 - t**2) * u'` |
#
# Here `phi(x) = exp(-x**2 / 2) / sqrt(2 pi)` is the normal density, `t = tanh(u)` with
# `u = c * (x + 0.044715 x**3)`, `c = sqrt(2 / pi)`, and `u' = c * (1 + 3 * 0.044715 x**2)`.
#
# `Phi(x) = 0.5 * erfc(-x / sqrt(2))`, with module 02's `erfc`, so the derivative is
# consistent with the forward pass to the last digit. For `SiLU`, compute `s` without
# overflow as `0.5 * (1 + tanh(x / 2))`.
#
# **Softmax** couples the elements of a row: `y_i = exp(x_i) / sum_j exp(x_j)`, so
# `dy_i/dx_k = y_i * (delta_ik - y_k)`. Multiplied by `grad` this collapses to
#
# ```
# grad_x = y * (grad - sum(grad * y, axis, keepdims=True))
# ```
#
# one product, one sum and one subtraction per row, instead of a (C, C) Jacobian per row.
# **LogSoftmax** (`y = x - logsumexp(x)`) gives `grad_x = grad - exp(y) * sum(grad, axis,
# keepdims=True)`.
#
# **Cross-entropy from logits** (module 04): with `p = softmax(logits)` per row and the
# target class `t`, the loss of a row is `-log p[t]` and its gradient is the famous
# `p - onehot(t)`. Rows whose target is `ignore_index` contribute nothing and get zero
# gradient; `reduction="mean"` divides by the number of rows *not* ignored, `"sum"` does not
# divide, and `"none"` returns one loss per row, so `grad` then has a value per row.
# `cross_entropy` passes the integer targets as a parameter, `ctx.params["target"]`; should
# someone pass them as a second input instead, return `None` for it (integers have no
# gradient).
#
# **Binary cross-entropy with logits**: `loss = max(x, 0) - x * t + log(1 + exp(-|x|))`
# per element, and its derivative is simply `sigmoid(x) - t`, times `grad` (divided by the
# number of elements for `"mean"`). Here the target is a parameter, `ctx.params["target"]`.

# %% nbgrader={"grade": false, "grade_id": "activation-rules", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
@derivative(ReLUFunction)
def relu_backward(ctx, grad):
    """d relu(x): grad where x > 0, else 0"""
    ### BEGIN SOLUTION
    return (grad * (ctx.inputs[0] > 0),)
    ### END SOLUTION


@derivative(SigmoidFunction)
def sigmoid_backward(ctx, grad):
    """d sigmoid(x) = s * (1 - s), s the saved output"""
    ### BEGIN SOLUTION
    s = ctx.output
    return (grad * s * (1 - s),)
    ### END SOLUTION


@derivative(TanhFunction)
def tanh_backward(ctx, grad):
    """d tanh(x) = 1 - t**2, t the saved output"""
    ### BEGIN SOLUTION
    t = ctx.output
    return (grad * (1 - t * t),)
    ### END SOLUTION


@derivative(SiLUFunction)
def silu_backward(ctx, grad):
    """d (x * s(x)) = s * (1 + x * (1 - s))"""
    ### BEGIN SOLUTION
    x = ctx.inputs[0]
    half = x.dtype.type(0.5)
    s = half + half * np.tanh(half * x)
    return (grad * s * (1 + x * (1 - s)),)
    ### END SOLUTION


@derivative(GELUFunction)
def gelu_backward(ctx, grad):
    """d gelu(x): Phi(x) + x * phi(x), or the derivative of the tanh form"""
    ### BEGIN SOLUTION
    x = ctx.inputs[0]
    dtype = x.dtype.type
    if ctx.params.get("approximate", "none") == "none":
        cdf = dtype(0.5) * erfc(-x * dtype(1 / math.sqrt(2)))
        pdf = np.exp(dtype(-0.5) * x * x) * dtype(1 / math.sqrt(2 * math.pi))
        return (grad * (cdf + x * pdf),)
    # gelu(x) = x (1 + tanh u) / 2 with u = c (x + k x^3), so
    # slope = (1 + tanh u) / 2 + x (1 - tanh^2 u) u' / 2 with u' = c (1 + 3 k x^2).
    c = dtype(math.sqrt(2 / math.pi))
    k = dtype(0.044715)
    t = np.tanh(c * (x + k * x * x * x))  # tanh u
    du = c * (1 + dtype(3) * k * x * x)  # u'
    half = dtype(0.5)
    return (grad * (half * (1 + t) + half * x * (1 - t * t) * du),)
    ### END SOLUTION


@derivative(SoftmaxFunction)
def softmax_backward(ctx, grad):
    """d softmax: y * (grad - sum(grad * y)) along axis"""
    ### BEGIN SOLUTION
    y = ctx.output
    axis = ctx.params.get("axis", -1)
    return (y * (grad - np.sum(grad * y, axis=axis, keepdims=True)),)
    ### END SOLUTION


@derivative(LogSoftmaxFunction)
def log_softmax_backward(ctx, grad):
    """d log_softmax: grad - exp(y) * sum(grad) along axis"""
    ### BEGIN SOLUTION
    y = ctx.output
    axis = ctx.params.get("axis", -1)
    return (grad - np.exp(y) * np.sum(grad, axis=axis, keepdims=True),)
    ### END SOLUTION


@derivative(CrossEntropyFunction)
def cross_entropy_backward(ctx, grad):
    """d cross_entropy(logits, target): (softmax(logits) - onehot(target)) per kept row"""
    ### BEGIN SOLUTION
    logits = ctx.inputs[0]
    target = ctx.params["target"] if "target" in ctx.params else ctx.inputs[1]
    ignore_index = ctx.params.get("ignore_index", -100)
    reduction = ctx.params.get("reduction", "mean")
    dtype = logits.dtype.type
    probs = logits - np.max(logits, axis=-1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= np.sum(probs, axis=-1, keepdims=True)
    keep = target != ignore_index
    rows = np.nonzero(keep)[0]
    probs[rows, target[rows]] -= dtype(1)
    if reduction == "mean":  # divided by the number of rows that are not ignored
        grad = grad / dtype(max(int(keep.sum()), 1))
    scale = grad * keep  # zero for ignored rows; one value per row for "none"
    grad_logits = probs * scale.astype(logits.dtype, copy=False)[:, None]
    return (grad_logits,) + (None,) * (len(ctx.inputs) - 1)  # None for a target input
    ### END SOLUTION


@derivative(BCEWithLogitsFunction)
def bce_with_logits_backward(ctx, grad):
    """d bce_with_logits(x, t) = sigmoid(x) - t"""
    ### BEGIN SOLUTION
    x = ctx.inputs[0]
    t = np.asarray(ctx.params["target"], dtype=x.dtype)
    half = x.dtype.type(0.5)
    diff = half + half * np.tanh(half * x) - t
    if ctx.params.get("reduction", "mean") == "mean":
        grad = grad / x.dtype.type(x.size)
    return (grad * diff,)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_activation_rules", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_activation_rules():
    """Each activation's rule matches finite differences (and stays float32)."""
    x = random(3, 5) * 2.0
    x[0, 0] = 0.3  # keep ReLU's kink (at 0) away from the finite differences
    check_op(ReLUFunction, [x], "grad where x > 0, zero elsewhere")
    check_op(SigmoidFunction, [x], "s * (1 - s) with s = ctx.output")
    check_op(TanhFunction, [x], "1 - t**2 with t = ctx.output")
    check_op(SiLUFunction, [x], "s * (1 + x * (1 - s)), s = sigmoid(x)")
    check_op(GELUFunction, [x], "Phi(x) + x * phi(x): the cdf plus x times the density",
             approximate="none")
    check_op(GELUFunction, [x], "differentiate 0.5*x*(1 + tanh(u)) with the product and chain "
             "rules; u' = sqrt(2/pi) * (1 + 3 * 0.044715 * x**2)", approximate="tanh")
    for axis in (-1, 0):
        check_op(SoftmaxFunction, [x], "y * (grad - sum(grad * y, axis, keepdims=True)); "
                 "use the op's axis", axis=axis)
        check_op(LogSoftmaxFunction, [x], "grad - exp(y) * sum(grad, axis, keepdims=True)",
                 axis=axis)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    cube = random(2, 3, 4, seed=11) * 3.0
    cube[np.abs(cube) < 0.05] = 0.5  # away from ReLU's kink
    hidden_cases(lambda op, params: check_op(op, [cube], "", **params), {
        "ReLU of three axes": (ReLUFunction, {}),
        "Sigmoid of large values": (SigmoidFunction, {}),
        "Tanh of three axes": (TanhFunction, {}),
        "SiLU of three axes": (SiLUFunction, {}),
        "exact GELU of three axes": (GELUFunction, {"approximate": "none"}),
        "tanh GELU of three axes": (GELUFunction, {"approximate": "tanh"}),
        "Softmax over the middle axis": (SoftmaxFunction, {"axis": 1}),
        "LogSoftmax over a negative middle axis": (LogSoftmaxFunction, {"axis": -2}),
    })
    ### END HIDDEN TESTS


test_unit_activation_rules()


# %% nbgrader={"grade": true, "grade_id": "test_unit_loss_rules", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_loss_rules():
    """Cross-entropy and BCE-with-logits rules match finite differences for every reduction."""
    logits = random(5, 4)
    target = np.array([0, 3, -100, 1, 3])
    for reduction in ("mean", "sum", "none"):
        check_op(CrossEntropyFunction, [logits],
                 "softmax(logits) - onehot(target) per row, zero for ignored rows; 'mean' "
                 "divides by the number of rows NOT ignored",
                 target=target, ignore_index=-100, reduction=reduction)
    labels = (random(3, 4, seed=5) > 0).astype(np.float64)
    for reduction in ("mean", "sum", "none"):
        check_op(BCEWithLogitsFunction, [random(3, 4)], "sigmoid(x) - target, times grad; "
                 "'mean' divides by the number of elements", target=labels, reduction=reduction)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    many = random(7, 3, seed=12)
    classes = np.array([2, 0, 1, 2, 2, 1, 0])
    soft = np.random.default_rng(13).uniform(0, 1, (2, 2, 3))
    hidden_cases(lambda op, arrays, params: check_op(op, arrays, "", **params), {
        "another ignore index, mean": (CrossEntropyFunction, [many],
                                       {"target": classes, "ignore_index": 2, "reduction": "mean"}),
        "another ignore index, none": (CrossEntropyFunction, [many],
                                       {"target": classes, "ignore_index": 2, "reduction": "none"}),
        "one row": (CrossEntropyFunction, [many[:1]],
                    {"target": classes[:1], "ignore_index": -100, "reduction": "sum"}),
        "soft labels over three axes": (BCEWithLogitsFunction, [random(2, 2, 3, seed=14) * 4],
                                        {"target": soft, "reduction": "mean"}),
    })
    ### END HIDDEN TESTS


test_unit_loss_rules()


# %% [markdown]
# ## Part 9: not recording: `no_grad()` and `detach()`
#
# Recording costs time and memory: every operation keeps its input arrays alive for
# backward. Evaluating a model, generating text, or updating parameters in an optimizer
# needs no gradients, so the record should not be made at all. Module 01 has the switch,
# `set_grad_enabled(flag)`, which returns the previous setting; `no_grad()` wraps it as a
# context manager:
#
# ```python
# with no_grad():
#     logits = model(x)      # nothing recorded: no _ctx, requires_grad False
# ```
#
# `__enter__` switches recording off and remembers what it was; `__exit__` puts that back,
# even when the block raised an exception (Python calls `__exit__` either way) and even when
# blocks are nested. Remember the previous state on a list (a stack), so the same object can
# be entered twice. The given `__call__` also makes it a decorator: `@no_grad()` (or
# `@no_grad`) above a function runs the whole function without recording. `enable_grad()`
# turns recording back on inside a `no_grad()` block.
#
# `t.detach()` (module 01) is the other tool: a tensor with the same data that is a leaf and
# does not require grad. Gradients stop there. Use it to keep a value from one step to the
# next without keeping the whole graph of the step that made it (an RNN's hidden state, a
# target computed by the model itself).

# %% nbgrader={"grade": false, "grade_id": "no-grad", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class _GradMode:
    """Base of no_grad and enable_grad: a context manager that is also a decorator."""

    enabled = True

    def __new__(cls, func=None):
        self = super().__new__(cls)
        if func is None:
            return self
        if not callable(func):
            raise TypeError(f"{cls.__name__}() takes no arguments; use `with {cls.__name__}():`")
        return self(func)  # used as a bare decorator, @no_grad

    def __init__(self, func=None):
        self._previous = []

    def __enter__(self):
        ### BEGIN SOLUTION
        self._previous.append(set_grad_enabled(self.enabled))
        ### END SOLUTION
        return self

    def __exit__(self, exc_type, exc, traceback):
        ### BEGIN SOLUTION
        set_grad_enabled(self._previous.pop())
        ### END SOLUTION
        return False  # never swallow the exception

    def __call__(self, func):
        @functools.wraps(func)
        def run(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)

        return run


class no_grad(_GradMode):
    """`with no_grad():` (or `@no_grad()`): operations inside record nothing.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> with no_grad():
    ...     y = w * 2
    >>> y.requires_grad, (w * 2).requires_grad
    (False, True)
    >>> @no_grad()
    ... def predict(x):
    ...     return w * x
    >>> predict(3.0)
    Tensor([3., 6.])
    """

    enabled = False


class enable_grad(_GradMode):
    """`with enable_grad():` records again, e.g. inside a no_grad() block.

    >>> w = Tensor([1.0], requires_grad=True)
    >>> with no_grad():
    ...     with enable_grad():
    ...         y = w * 2
    ...     z = w * 2
    >>> y.requires_grad, z.requires_grad
    (True, False)
    """

    enabled = True


# %% nbgrader={"grade": true, "grade_id": "test_unit_no_grad", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_no_grad():
    """no_grad records nothing, restores the previous state (even after errors), nests."""
    w = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        assert not is_grad_enabled(), "inside `with no_grad():` is_grad_enabled() must be False"
        y = w * 3.0
    assert y._ctx is None and not y.requires_grad, (
        "w * 3.0 inside no_grad() was recorded: __enter__ must call set_grad_enabled(False)"
    )
    assert is_grad_enabled(), "after the no_grad() block recording must be on again"
    try:
        with no_grad():
            raise ValueError("boom")
    except ValueError:
        pass
    assert is_grad_enabled(), (
        "an exception inside no_grad() left recording off: restore the previous state in "
        "__exit__, which runs even when the block raises"
    )
    def check_restored(start):
        """Nested and decorated blocks entered with recording `start` leave it as it was."""
        previous = set_grad_enabled(start)
        try:
            with no_grad():
                with no_grad():
                    pass
                assert not is_grad_enabled(), (
                    "leaving an inner no_grad() turned recording on inside the outer one: restore "
                    "the PREVIOUS state (returned by set_grad_enabled), not True"
                )
                with enable_grad():
                    assert is_grad_enabled(), "enable_grad() inside no_grad() should record again"
                assert not is_grad_enabled(), "after enable_grad() we are back inside no_grad()"
            assert is_grad_enabled() == start, (
                f"nested blocks entered with recording {'on' if start else 'off'} must end with "
                f"it {'on' if start else 'off'}: restore the previous state, not a constant"
            )

            @no_grad()
            def predict(x):
                return x * w

            assert predict(Tensor([1.0, 1.0]))._ctx is None, (
                "@no_grad() on a function: nothing recorded"
            )
            assert is_grad_enabled() == start, (
                "after a @no_grad() function returns, recording is back as it was"
            )
        finally:
            set_grad_enabled(previous)

    check_restored(True)
    frozen = (w * 2.0).detach()
    loss = (frozen * w).sum()
    backward(loss)
    assert np.allclose(w.grad.data, [2.0, 4.0]), (
        f"(w*2).detach() * w: the detached factor is a constant, so w.grad = 2w = [2, 4], got "
        f"{w.grad.data}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_restored, {"blocks entered with recording off": False})
    ### END HIDDEN TESTS


test_unit_no_grad()


# %% [markdown]
# ## Part 10: `gradcheck`
#
# Every rule you wrote can be checked against the definition of a derivative. For an input
# element `x_i`, the **central difference**
#
# ```
# (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)
# ```
#
# approximates `df/dx_i` with an error of order `eps**2`. `gradcheck(fn, inputs)` computes
# the analytic gradients with your `backward`, then the numerical ones element by element,
# and compares them. Three details make it trustworthy:
#
# - **float64 only.** The numerator is the difference of two nearly equal numbers. In
#   float32 (7 significant digits) with `eps = 1e-6` it is mostly rounding noise, and
#   correct rules fail. Refuse other dtypes with a message saying so.
# - **A random projection, not a plain sum.** To check a tensor-valued `fn`, reduce its
#   output to a number. `fn(x).sum()` is the obvious choice and a bad one: the rows of a
#   softmax always sum to 1, so the gradient of the sum is 0 and any rule that returns zeros
#   passes. Use `sum(w * fn(x))` with fixed random weights `w` instead, i.e. start `backward`
#   from `grad = w`.
# - **A message that finds the bug**: which input, which element, both values. Raise
#   `GradcheckError`.
#
# Compare with `|analytic - numerical| <= atol + rtol * |numerical|`. Compute the numerical
# values under `no_grad()` (nothing needs recording), put every perturbed element back, and
# leave the inputs' `.grad` as you found them.

# %% nbgrader={"grade": false, "grade_id": "gradcheck", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class GradcheckError(AssertionError):
    """An analytic gradient that disagrees with finite differences.

    >>> class Cube(Function):
    ...     @staticmethod
    ...     def forward(a):
    ...         return a * a * a
    >>> @derivative(Cube)
    ... def cube_backward(ctx, grad):  # wrong on purpose: the factor 3 is missing
    ...     (a,) = ctx.inputs
    ...     return (grad * a * a,)
    >>> x = Tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    >>> try:
    ...     gradcheck(Cube.apply, [x])
    ... except GradcheckError as error:
    ...     print(str(error)[:85])  # the start of the message
    gradcheck: input 0, element (1,): analytic gradient -0.52841945, numerical -1.5852584
    """


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4):
    """Check the gradients of `fn(*inputs)` against central differences; True or GradcheckError.

    `inputs` are float64 Tensors; those with requires_grad are checked. The output is
    reduced with fixed random weights, sum(w * fn(*inputs)), so no rule can pass by accident.

    >>> x = Tensor([0.5, -1.0, 2.0], dtype=np.float64, requires_grad=True)
    >>> y = Tensor([3.0, 1.0, 0.5], dtype=np.float64, requires_grad=True)
    >>> gradcheck(lambda a, b: (a * b).exp() / b, [x, y])
    True
    """
    ### BEGIN SOLUTION
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(
                f"gradcheck: input {i} is a {type(x).__name__}; pass Tensors, e.g. "
                "Tensor(array, dtype=np.float64, requires_grad=True)"
            )
        if x.requires_grad and x.dtype != np.float64:
            raise TypeError(
                f"gradcheck: input {i} is {x.dtype}, it must be float64: Tensor(array, "
                "dtype=np.float64, requires_grad=True). Finite differences subtract two nearly "
                "equal values and divide by 2*eps; in float32 (about 7 digits) that quotient "
                "is mostly rounding noise and correct rules would fail."
            )
    checked = [i for i, x in enumerate(inputs) if x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    previous = [x.grad for x in inputs]
    try:
        for x in inputs:
            x.grad = None
        out = fn(*inputs)
        if not isinstance(out, Tensor) or not out.requires_grad:
            raise GradcheckError(
                "gradcheck: fn(*inputs) did not return a Tensor that depends on the inputs "
                "(was it computed under no_grad(), or from detached tensors?)"
            )
        weights = np.random.default_rng(0).standard_normal(out.shape)
        backward(out, weights)
        for i in checked:
            x = inputs[i]
            analytic = np.zeros(x.shape) if x.grad is None else x.grad.data
            numerical = np.zeros(x.shape)
            if not x.data.flags.writeable:
                x.data = x.data.copy()
            with no_grad():
                for idx in np.ndindex(x.shape):
                    keep = x.data[idx]
                    try:
                        x.data[idx] = keep + eps
                        plus = np.sum(weights * fn(*inputs).data)
                        x.data[idx] = keep - eps
                        minus = np.sum(weights * fn(*inputs).data)
                    finally:
                        x.data[idx] = keep
                    numerical[idx] = (plus - minus) / (2 * eps)
            excess = np.abs(analytic - numerical) - (atol + rtol * np.abs(numerical))
            excess = np.where(np.isnan(excess), np.inf, excess)  # a nan always fails
            bad = excess > 0
            if bad.any():
                where = tuple(int(j) for j in np.unravel_index(int(np.argmax(excess)), x.shape))
                raise GradcheckError(
                    f"gradcheck: input {i}, element {where}: analytic gradient "
                    f"{analytic[where]:.8g}, numerical {numerical[where]:.8g} "
                    f"({int(bad.sum())} of {x.size} elements differ by more than "
                    f"atol={atol} + rtol={rtol} * |numerical|). A derivative rule of an "
                    "operation in fn is wrong for this input."
                )
    finally:
        for x, g in zip(inputs, previous):
            x.grad = g
    return True
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_gradcheck", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_gradcheck():
    """gradcheck passes correct rules, catches a wrong one, and refuses float32."""
    rng = np.random.default_rng(3)
    a = Tensor(rng.standard_normal((3, 4)), dtype=np.float64, requires_grad=True)
    b = Tensor(rng.standard_normal(4) + 3.0, dtype=np.float64, requires_grad=True)
    assert gradcheck(lambda a, b: (a * b + a / b).exp(), [a, b]) is True, (
        "gradcheck should return True for correct rules (exp, *, /, + with broadcasting)"
    )
    assert a.grad is None, "gradcheck must leave the inputs' .grad as it found them (None)"

    class Square(Function):
        @staticmethod
        def forward(x):
            return x * x

    class Product(Function):
        @staticmethod
        def forward(x, y):
            return x * y

    def check_caught(op, rule, fn, inputs, index):
        """gradcheck of fn with a wrong `rule` registered for op must name input `index`."""
        DERIVATIVES[op] = rule
        try:
            gradcheck(fn, inputs)
        except GradcheckError as error:
            text = str(error)
            assert f"input {index}" in text and "element" in text, (
                f"GradcheckError should name the input (input {index}) and the element: {text}"
            )
        else:
            raise AssertionError(
                "gradcheck accepted a wrong rule (for x * x, grad * x instead of 2 * grad * x): "
                "compare every element with atol + rtol * |numerical| and raise GradcheckError"
            )
        finally:
            del DERIVATIVES[op]

    check_caught(Square, lambda ctx, grad: (grad * ctx.inputs[0],), lambda x: Square.apply(x),
                 [a], 0)
    probs = Tensor(rng.standard_normal((2, 3)), dtype=np.float64, requires_grad=True)
    DERIVATIVES[Square] = lambda ctx, grad: (np.zeros_like(grad),)
    try:
        gradcheck(lambda x: SoftmaxFunction.apply(Square.apply(x), axis=-1), [probs])
    except GradcheckError:
        pass
    else:
        raise AssertionError(
            "a rule returning zeros passed gradcheck under a softmax: reduce the output with "
            "random weights (start backward from grad = w), not with a plain sum, whose "
            "gradient through a softmax is always zero"
        )
    finally:
        del DERIVATIVES[Square]
    try:
        gradcheck(lambda x: x * 2.0, [Tensor([1.0, 2.0], requires_grad=True)])
    except TypeError as error:
        assert "float64" in str(error), f"the float32 refusal should say to use float64: {error}"
    else:
        raise AssertionError("gradcheck on float32 inputs must raise TypeError explaining float64")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    def one_element_off(ctx, grad):
        x, y = ctx.inputs
        wrong = grad * x
        wrong.flat[-1] += 0.01
        return grad * y, wrong

    c = Tensor(rng.standard_normal((2, 2)), dtype=np.float64, requires_grad=True)
    d = Tensor(rng.standard_normal((2, 2)), dtype=np.float64, requires_grad=True)
    product = lambda x, y: Product.apply(x, y)  # noqa: E731
    hidden_cases(check_caught, {
        "a wrong gradient for the second input": (
            Product, lambda ctx, grad: (grad * ctx.inputs[1], grad), product, [c, d], 1),
        "a wrong gradient for the first input only": (
            Product, lambda ctx, grad: (-grad * ctx.inputs[1], grad * ctx.inputs[0]), product,
            [c, d], 0),
        "one element off by a little": (Product, one_element_off, product, [c, d], 1),
    })
    ### END HIDDEN TESTS


test_unit_gradcheck()


# %% [markdown]
# ## Systems analysis: memory, depth and speed of backward, measured on your machine
#
# **Memory held by the graph.** Every recorded operation keeps its input and output arrays
# until backward has used them. Below, a two-layer network's forward pass on a batch of 256:
# count the bytes of intermediate arrays the graph keeps alive, before backward, after a
# backward with `retain_graph=True`, and after a normal backward.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def graph_bytes(root):
    """Bytes of the intermediate arrays (outputs of recorded ops) that the graph holds."""
    seen, total = set(), 0
    for node in topological_order(root):
        ctx = node._ctx
        if ctx is None or ctx.parents is None:
            continue  # a leaf (its data lives anyway) or an emptied record
        base = ctx.output if ctx.output.base is None else ctx.output.base
        if id(base) not in seen:  # a view (reshape, transpose) shares its base's memory
            seen.add(id(base))
            total += base.nbytes
    return total


def memory_report(batch=256, width=512):
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, width)).astype(np.float32))
    w1 = Tensor(rng.standard_normal((width, width)).astype(np.float32) * 0.05, requires_grad=True)
    w2 = Tensor(rng.standard_normal((width, 10)).astype(np.float32) * 0.05, requires_grad=True)
    hidden = x @ w1
    hidden = hidden * hidden.exp()
    loss = ((hidden @ w2) ** 2).mean()
    activation = batch * width * 4
    print(f"one (batch={batch}, width={width}) float32 activation: {activation / 2**20:.2f} MiB")
    print(f"graph holds before backward:           {graph_bytes(loss) / 2**20:6.2f} MiB")
    backward(loss, retain_graph=True)
    print(f"after backward(retain_graph=True):     {graph_bytes(loss) / 2**20:6.2f} MiB")
    backward(loss)
    print(f"after backward (graph freed):          {graph_bytes(loss) / 2**20:6.2f} MiB")
    with no_grad():
        hidden = x @ w1
        loss = (((hidden * hidden.exp()) @ w2) ** 2).mean()
    print(f"the same forward under no_grad():      {graph_bytes(loss) / 2**20:6.2f} MiB")


memory_report()

# %% [markdown]
# The parameters are not counted (they live anyway). Everything else is memory that exists
# only for the backward pass: a few activations' worth per layer. That is why inference
# under `no_grad()` fits much larger batches, and why freeing the graph after each step
# matters: a training loop that kept its graphs alive would grow by this much every step.
#
# **Recursion depth.** Below, a recursive topological sort and your iterative one run on
# chains of growing length.

# %% nbgrader={"grade": false, "grade_id": "analysis-depth", "locked": false, "schema_version": 3, "solution": false, "task": false}
import sys
import time


def recursive_order(node, seen=None, order=None):
    """The textbook depth-first topological sort: one Python call per level of the graph."""
    seen = set() if seen is None else seen
    order = [] if order is None else order
    if id(node) not in seen:
        seen.add(id(node))
        if node._ctx is not None:
            for parent in node._ctx.parents:
                if parent.requires_grad:
                    recursive_order(parent, seen, order)
        order.append(node)
    return order


def depth_report(lengths=(100, 500, 900, 1_000, 2_000, 10_000)):
    x = Tensor(np.ones(4, dtype=np.float32), requires_grad=True)
    chain, y = [x], x
    for _ in range(max(lengths)):
        y = y * 1.0
        chain.append(y)
    print(f"Python's recursion limit here: {sys.getrecursionlimit()}")
    for n in lengths:
        try:
            recursive_order(chain[n])
            recursive = "ok"
        except RecursionError:
            recursive = "RecursionError"
        start = time.perf_counter()
        iterative = len(topological_order(chain[n]))
        took = (time.perf_counter() - start) * 1e3
        print(f"chain of {n:>6,} ops: recursive {recursive:<15} iterative {iterative:>6,} nodes "
              f"in {took:.2f} ms")


depth_report()

# %% [markdown]
# The recursive walk fails near the recursion limit (each level of the graph costs a
# Python frame, and the interpreter's own frames count too). Raising the limit with
# `sys.setrecursionlimit` only moves the wall, and past a point crashes the interpreter
# when the C stack overflows. The iterative walk's stack is a list on the heap: its limit is
# memory, and its time grows linearly with the graph.
#
# **Time per operation.** Backward runs one rule per node. On tiny tensors the time is all
# Python overhead (the rule call, dictionary lookups, `unbroadcast`); on large tensors it is
# NumPy arithmetic, and a matrix product's backward costs two products.

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def speed_report(ops=2_000, n=256):
    x = Tensor(np.ones(16, dtype=np.float32), requires_grad=True)
    start = time.perf_counter()
    y = x
    for _ in range(ops // 2):
        y = y * 1.0001
        y = y + 0.5
    loss = y.sum()
    forward_s = time.perf_counter() - start
    start = time.perf_counter()
    backward(loss)
    backward_s = time.perf_counter() - start
    print(f"{ops:,} small ops: forward {forward_s / ops * 1e6:.1f} us/op, "
          f"backward {backward_s / ops * 1e6:.1f} us/op")
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((n, n)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal((n, n)).astype(np.float32), requires_grad=True)
    grad = np.ones((n, n), dtype=np.float32)
    forward_s = backward_s = float("inf")
    for _ in range(6):  # best of six: the first run also warms up the caches
        start = time.perf_counter()
        out = a @ b
        forward_s = min(forward_s, time.perf_counter() - start)
        start = time.perf_counter()
        backward(out, grad)
        backward_s = min(backward_s, time.perf_counter() - start)
    print(f"({n}, {n}) @ ({n}, {n}): forward {forward_s * 1e3:.2f} ms, backward "
          f"{backward_s * 1e3:.2f} ms ({backward_s / forward_s:.1f}x forward)")


speed_report()

# %% [markdown]
# On a two-core machine expect a few microseconds per small operation in each direction,
# and a matrix product's backward near twice its forward. Per-operation overhead is why
# fused operations (softmax, cross-entropy, layer norm) matter: one fused op replaces a
# dozen small ones, in forward *and* in backward.
#
# ## What comes next
#
# - **Module 07 (optimizers)** reads the `.grad` you fill and updates the parameters: SGD,
#   Adam, AdamW, gradient clipping. Together with this module, a network can now learn: the
#   perceptron and XOR milestones run on your own engine.
# - **Module 08 (training)** wraps forward, `loss.backward()` and the optimizer step into a
#   training loop, with `no_grad()` for evaluation.
# - **Modules 11 to 13** add new operations (embedding lookup, attention, layer norm),
#   each registering its rule with `@derivative(...)` right beside it, and checked with your
#   `gradcheck`.
