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
# # Module 02: Activations
#
# ## Overview
#
# A linear layer computes $xW + b$. Stack two of them and you get
# $(xW_1 + b_1)W_2 + b_2 = x(W_1 W_2) + (b_1 W_2 + b_2)$: one linear layer again. However
# deep you stack them, linear layers can only draw straight decision boundaries. What makes
# a network *deep* is a non-linear function between the layers: an **activation**.
#
# Activations look like the easiest code in the course: each is one formula applied to
# every element. Two things make them interesting to engineers:
#
# - **Numerical stability.** `exp(89)` is already infinite in float32. A sigmoid or a
#   softmax written straight from the textbook returns `nan` on inputs a real network
#   produces. You will write versions that are exact and finite for inputs of +-1000.
# - **Memory traffic.** An activation does a handful of floating-point operations per
#   element but must read and write every element. On a CPU it is limited by how fast
#   memory moves, not by arithmetic, so every temporary array costs time.
#
# You will also implement a special function NumPy does not have, the error function
# `erf`, because the exact GELU used by BERT (and by PyTorch by default) needs it.
#
# **In numbers.** The largest float32 is about $3.4 \times 10^{38}$, so $e^x$ is `inf` from
# $x \approx 88.7$ on. An activation does about one floating-point operation for every 8 bytes
# it reads and writes.
#
# ## Learning objectives
#
# - Write element-wise operations as `Function` subclasses that keep float32 float32.
# - Explain why `exp` overflows and avoid it in sigmoid, softmax and log-softmax with the
#   max-subtraction and log-sum-exp tricks.
# - Approximate a special function (`erfc`) with a fitted formula, and measure its error.
# - Know where each activation is used: ReLU in MLPs and CNNs, GELU in GPT-2 and BERT,
#   SiLU in LLaMA's feed-forward layers, softmax for attention weights and class
#   probabilities.
# - Measure the time per element of each activation and the memory of softmax's temporaries.
#
# ## What you build
#
# - The operations, each a `Function` with a `forward` on NumPy arrays: `ReLUFunction`,
#   `SigmoidFunction`, `TanhFunction`, `GELUFunction`, `SiLUFunction`, `SoftmaxFunction`,
#   `LogSoftmaxFunction`, and the helpers `erf` and `erfc`.
# - The functions a model calls: `relu`, `sigmoid`, `tanh`, `gelu`, `silu`, `softmax`,
#   `log_softmax`. They take a `Tensor` (or anything `Tensor()` accepts) and return a `Tensor`.
# - Callable objects for building models: `ReLU()`, `Sigmoid()`, `Tanh()`, `GELU()`,
#   `SiLU()`, `Softmax(axis)`, `LogSoftmax(axis)`.
#
# ## What you are not building yet
#
# - **Derivatives.** Module 06 gives every operation here its derivative rule. Several are
#   cheapest written with the forward's *output*, which `Function.apply` already records
#   (`sigmoid' = s * (1 - s)`, `tanh' = 1 - t**2`): nothing here changes then.
# - **The `Module` base class.** Module 03 adds parameters, `Module` and `Sequential`. The
#   classes here have no parameters; `Sequential` will accept them as they are.
# - **Masked softmax.** Attention (module 12) fills masked scores with `-inf` before the
#   softmax you write here.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.activations
#| export
import math

import numpy as np

from tinytorch.core.tensor import Function, Tensor, reduction_args

# %% nbgrader={"grade": false, "grade_id": "test-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
from tinytorch.core.tensor import (  # the course's test helpers, given in module 01
    expect_close, expect_error, no_fp_errors, short_repr,
)


def check_elementwise(name, fn, cases, rtol=1e-6, atol=1e-7):
    """The tests below are tables; this runs one. A case is (x, expected, fix): x is float32
    unless it is already an array of another dtype. fn(Tensor(x)) must return a Tensor of x's
    shape and dtype, raise no overflow or 0/0 (underflow to 0 is fine), and hold `expected`."""
    for x, want, fix in cases:
        x = x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.float32)
        what = f"{name}({short_repr(x)}) in {x.dtype}"
        y = no_fp_errors(what, lambda: fn(Tensor(x, dtype=x.dtype)), fix)
        assert isinstance(y, Tensor), (
            f"{what} returned a {type(y).__name__}, not a Tensor: return an array from forward "
            "and let Function.apply wrap it"
        )
        assert y.dtype == x.dtype, (
            f"{what} gave {y.dtype}: keep the input's dtype; build constants with "
            "x.dtype.type(value)"
        )
        expect_close(what, y.data, np.asarray(want, dtype=np.float64), fix, rtol, atol)


# %% [markdown]
# ## Part 1: ReLU
#
# The rectified linear unit keeps positive values and zeroes the rest:
#
# ```
#   relu(x) = max(x, 0)        x:       [-2.0, -0.5, 0.0, 0.5, 3.0]
#                              relu(x): [ 0.0,  0.0, 0.0, 0.5, 3.0]
# ```
#
# It is the default activation of MLPs and CNNs because it is nearly free (one comparison
# per element) and, unlike sigmoid and tanh, it does not flatten out for large positive
# inputs, so gradients flowing through it do not shrink.
#
# Each operation is a `Function` subclass (module 01, Part 2) whose `forward` receives raw
# NumPy arrays and returns one. Two details decide whether your version is correct:
#
# - **Keep the dtype.** `np.maximum(x, 0)` keeps float32 in NumPy 2, but writing the
#   constant as `x.dtype.type(0)` says so explicitly and works with every NumPy.
# - **Let NaN through.** `np.maximum` propagates NaN. `np.where(x > 0, x, 0)` turns NaN into
#   0, which hides a diverged training run behind plausible-looking numbers. PyTorch's
#   `relu(nan)` is `nan`, and so is ours.
#
# Below the solution cell is the public function `relu(x)`, one line that calls
# `ReLUFunction.apply`. Every activation in this module has such a function; read them.

# %% nbgrader={"grade": false, "grade_id": "relu-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class ReLUFunction(Function):
    """max(x, 0), element-wise"""

    @staticmethod
    def forward(x):
        ### BEGIN SOLUTION
        return np.maximum(x, x.dtype.type(0))
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "relu-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def relu(x):
    """max(x, 0), element-wise. `x` is a Tensor or anything Tensor() accepts.

    >>> y = relu([-2.0, 0.0, 3.0])
    >>> y, y.dtype
    (Tensor([0., 0., 3.]), dtype('float32'))
    """
    return ReLUFunction.apply(x)


# %% nbgrader={"grade": true, "grade_id": "test_unit_relu", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_relu():
    """relu zeroes negatives, keeps positives, keeps the dtype and lets NaN through."""
    fix = "keep x where x > 0, else 0: np.maximum(x, x.dtype.type(0)) does exactly that"
    check_elementwise("relu", relu, [
        ([[-2.0, -0.5, 0.0], [0.5, 3.0, -1e-8]], [[0, 0, 0], [0.5, 3, 0]], fix),
        (np.array([-1.0, 2.0]), [0.0, 2.0], fix),
        ([np.nan, -1.0], [np.nan, 0.0], "relu(nan) must be nan: np.where(x > 0, x, 0) turns "
         "NaN into 0 and hides a diverged run; use np.maximum, which propagates NaN"),
    ])
    expect_close("relu([-3, 4]) of a list", relu([-3.0, 4.0]).data, [0.0, 4.0],
                 "relu should accept anything Tensor() accepts")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(2001)
    cube = rng.standard_normal((3, 4, 2)).astype(np.float32)
    far = rng.standard_normal((2, 5)) * 1e6
    hidden_cases(check_elementwise, {
        "a three-axis array": ("relu", relu, [(cube, np.where(cube > 0, cube, 0), fix)]),
        "float64 values far from zero": ("relu", relu, [(far, np.where(far > 0, far, 0), fix)]),
        "tiny values of both signs": ("relu", relu, [([-1e-30, 1e-30, -0.0], [0, 1e-30, 0], fix)]),
        "only negative values": ("relu", relu, [(-np.abs(cube), np.zeros(cube.shape), fix)]),
        "a NaN inside a matrix": ("relu", relu, [([[1.0, np.nan], [-2.0, 3.0]],
                                                  [[1.0, np.nan], [0.0, 3.0]], fix)]),
    })
    ### END HIDDEN TESTS


test_unit_relu()


# %% [markdown]
# ## Part 2: sigmoid and tanh
#
# The **sigmoid** squashes any number into (0, 1), so it can be read as a probability
# (binary classification, gates in LSTMs):
#
# ```
#   sigmoid(x) = 1 / (1 + exp(-x))       sigmoid(0) = 0.5
#                                        sigmoid(ln 3) = 1 / (1 + 1/3) = 0.75
# ```
#
# Written this way it **overflows** for negative inputs. float32 holds numbers up to about
# `3.4e38 = e**88.7`, so for `x = -100`, `exp(100)` is `inf`. Here the answer `1 / inf = 0`
# happens to be right, but NumPy warns, and the mirror-image formula
# `exp(x) / (1 + exp(x))`, which some write to avoid it, gives `inf / inf = nan` for
# `x = +100`. Use each form only where its `exp` cannot overflow:
#
# ```
#   x >= 0:  1 / (1 + exp(-x))           exp(-x) is in (0, 1]
#   x <  0:  exp(x) / (1 + exp(x))       exp(x) is in (0, 1)
# ```
#
# Both fit one branch-free formula whose two `exp`s only ever see arguments <= 0:
#
# ```
#   sigmoid(x) = exp(min(x, 0)) / (1 + exp(-|x|))
#                numerator: 1 for x >= 0, exp(x) for x < 0
# ```
#
# For `x = -1000` both `exp`s underflow towards 0, which is harmless: the answer really is
# 0 to float precision. Choosing the numerator with `np.where(x >= 0, 1, e)` is also
# correct, but on data of mixed signs it is slower than a second `exp` (the systems analysis
# measures it): selecting element by element on a random mask defeats the CPU's branch
# prediction.
#
# **Tanh** squashes into (-1, 1) and is a rescaled sigmoid: `tanh(x) = 2 * sigmoid(2x) - 1`.
# NumPy's `np.tanh` is already stable. Check it by hand: `tanh(ln 2) = (2 - 1/2) / (2 + 1/2)
# = 0.6`.

# %% nbgrader={"grade": false, "grade_id": "sigmoid-tanh-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class SigmoidFunction(Function):
    """1 / (1 + exp(-x)), element-wise, without overflow"""

    @staticmethod
    def forward(x):
        ### BEGIN SOLUTION
        zero, one = x.dtype.type(0), x.dtype.type(1)
        # Both exponents are <= 0, so neither exp can overflow.
        return np.exp(np.minimum(x, zero)) / (one + np.exp(-np.abs(x)))
        ### END SOLUTION


class TanhFunction(Function):
    """hyperbolic tangent, element-wise"""

    @staticmethod
    def forward(x):
        ### BEGIN SOLUTION
        return np.tanh(x)
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "sigmoid-tanh-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def sigmoid(x):
    """1 / (1 + exp(-x)), element-wise, finite for any input.

    >>> sigmoid(Tensor([-1000.0, 0.0, 2.0]))
    Tensor([0.    , 0.5   , 0.8808])
    """
    return SigmoidFunction.apply(x)


def tanh(x):
    """Hyperbolic tangent, element-wise.

    >>> tanh([-20.0, 0.0, 1.0])
    Tensor([-1.    ,  0.    ,  0.7616])
    """
    return TanhFunction.apply(x)


# %% nbgrader={"grade": true, "grade_id": "test_unit_sigmoid", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_sigmoid():
    """sigmoid matches hand-computed values, keeps float32 and never overflows."""
    ln3, e2 = math.log(3.0), math.exp(2.0)
    fix = ("for x >= 0 use 1 / (1 + exp(-x)); for x < 0 use exp(x) / (1 + exp(x)); check the "
           "sign inside exp")
    stable = ("exp of a large positive number overflowed, or inf / inf made nan: only "
              "exponentiate numbers <= 0, exp(min(x, 0)) and exp(-|x|)")
    check_elementwise("sigmoid", sigmoid, [
        ([0.0, ln3, -ln3], [0.5, 0.75, 0.25], fix),
        ([2.0, -2.0], [e2 / (1 + e2), 1 / (1 + e2)], fix),
        (np.array([0.0, -ln3]), [0.5, 0.25], fix),
        ([-1000.0, -100.0, 100.0, 1000.0], [0.0, 0.0, 1.0, 1.0], stable),
        (np.array([-1000.0, 1000.0]), [0.0, 1.0], stable),
    ])
    v = (np.random.default_rng(0).standard_normal(1000) * 10).astype(np.float32)
    expect_close("sigmoid(x) + sigmoid(-x) over 1,000 random x",
                 sigmoid(Tensor(v)).data + sigmoid(Tensor(-v)).data, np.ones(1000),
                 "it should be 1 for every x: one of your two branches is wrong", atol=1e-6)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def logistic(x):  # 1 / (1 + e^-x) through tanh, in float64: another route to the values
        return 0.5 * (1.0 + np.tanh(np.asarray(x, dtype=np.float64) / 2))

    grid = np.linspace(-30.0, 30.0, 121)
    block = (np.random.default_rng(2002).standard_normal((3, 2, 4)) * 6).astype(np.float32)
    edge = [-88.0, -89.0, 88.0, 89.0, -1e30, 1e30]
    hidden_cases(check_elementwise, {
        "a float64 grid": ("sigmoid", sigmoid, [(grid, logistic(grid), fix)]),
        "a three-axis float32 array": ("sigmoid", sigmoid, [(block, logistic(block), fix)]),
        "values at the edge of float32's exp": (
            "sigmoid", sigmoid, [(edge, logistic(edge), stable)]),
    })
    ### END HIDDEN TESTS


test_unit_sigmoid()


# %% nbgrader={"grade": true, "grade_id": "test_unit_tanh", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_tanh():
    """tanh matches hand-computed values and saturates at +-1 without warnings."""
    ln2 = math.log(2.0)
    check_elementwise("tanh", tanh, [
        ([0.0, ln2, -ln2], [0.0, 0.6, -0.6], "use np.tanh"),
        ([-1000.0, 1000.0], [-1.0, 1.0], "(e^x - e^-x) / (e^x + e^-x) overflows to inf / inf; "
         "np.tanh does not"),
    ], atol=1e-6)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def by_math(x):
        x = np.asarray(x, dtype=np.float64)
        return np.array([math.tanh(v) for v in x.ravel()]).reshape(x.shape)

    grid = np.linspace(-12.0, 12.0, 97)
    block = np.random.default_rng(2003).standard_normal((4, 1, 3)).astype(np.float32)
    hidden_cases(check_elementwise, {
        "a float64 grid": ("tanh", tanh, [(grid, by_math(grid), "")], 1e-6, 1e-6),
        "a three-axis float32 array": ("tanh", tanh, [(block, by_math(block), "")], 1e-6, 1e-6),
        "huge values of float32": ("tanh", tanh, [([-3e38, 3e38, -1e-20], [-1, 1, -1e-20], "")],
                                   1e-6, 1e-6),
    })
    ### END HIDDEN TESTS


test_unit_tanh()


# %% [markdown]
# ## Part 3: the error function, vectorized
#
# The exact GELU of Part 4 needs the cumulative distribution function of the standard
# normal distribution, `Phi(x) = P(Z <= x)`, which is written with the error function:
#
# ```
#   erf(x)  = 2/sqrt(pi) * integral from 0 to x of exp(-t**2) dt
#   erfc(x) = 1 - erf(x)
#   Phi(x)  = (1 + erf(x / sqrt(2))) / 2 = erfc(-x / sqrt(2)) / 2
# ```
#
# NumPy has no `erf`. Python's `math.erf` takes one number at a time: a Python loop over a
# million elements is far too slow (the systems analysis measures it). Libraries evaluate
# special functions with **fitted formulas**: a simple shape that is known to be right
# asymptotically, times a polynomial whose coefficients were fitted to make the error tiny.
#
# For `z >= 0` we use a Chebyshev fit of `erfc` (the classic one from *Numerical Recipes*):
#
# ```
#   t = 1 / (1 + z/2)                              t runs from 1 (z = 0) down to 0 (z -> inf)
#   erfc(z) = t * exp(-z**2 + P(t))                P(t) = c0 + c1 t + ... + c9 t**9
# ```
#
# The shape `exp(-z**2)` is how `erfc` really decays; `P` corrects the rest. Its relative
# error is below 1.1e-7 for every `z` up to 20, where `erfc` is 5e-176. Evaluate `P` with
# **Horner's rule**, `(((c9 t + c8) t + c7) t + ...) t + c0`: 9 multiplies and 9 adds, no
# powers. Negative inputs use the symmetry `erfc(-z) = 2 - erfc(z)`, and
# `erf(x) = sign(x) * (1 - erfc(|x|))`.
#
# **Why `erfc` and not `erf`?** The textbook formula for GELU is `x * (1 + erf(x/sqrt(2))) / 2`.
# For `x = -6`, `erf(-4.24) = -0.999999998`, and `1 + erf` subtracts two nearly equal numbers:
# in float32 that gives exactly 0, and in float64 about half of the 16 digits are lost.
# `erfc(4.24)` computes the small number `2e-9` directly, to full relative precision. A
# popular five-coefficient formula for `erf` (Abramowitz and Stegun 7.1.26) guarantees only
# a small *absolute* error, 1.5e-7: used for `erfc`, it is off by 0.15% at `z = 3.5` and by
# 100% near `z = 6`.
#
# Two engineering details:
#
# - **Temporaries.** `poly = poly * t + c` allocates two new arrays per coefficient: twenty
#   arrays for one function. Make `poly` once, then update it in place (`poly *= t`,
#   `poly += c`). The systems analysis shows how much of this function's time is memory.
# - **No branches.** Combine the two halves with `s = np.sign(x)`:
#   `(1 - s) + s * erfc(|x|)` is `erfc(|x|)` for `x > 0` and `2 - erfc(|x|)` for `x < 0`,
#   without `np.where` (see Part 2).
#
# Keep float32 float32: turn every coefficient into the input's dtype with `x.dtype.type(c)`.
# For `z = 1000`, `exp(-1e6)` underflows to 0, which is the right answer.

# %% nbgrader={"grade": false, "grade_id": "erf", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
# Coefficients c0..c9 of P(t) in erfc(z) = t * exp(-z**2 + P(t)), t = 1 / (1 + z/2).
ERFC_COEFFS = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)


def erfc(x):
    """1 - erf(x), element-wise, relative error < 1.1e-7 (float64)"""
    x = np.asarray(x)
    dtype = x.dtype.type
    ### BEGIN SOLUTION
    z = np.abs(x)
    t = dtype(1) / (dtype(1) + dtype(0.5) * z)
    # Horner's rule, from c9 down to c0. `poly` is a new array, so update it in place.
    poly = dtype(ERFC_COEFFS[9]) * t + dtype(ERFC_COEFFS[8])
    for c in ERFC_COEFFS[7::-1]:
        poly *= t
        poly += dtype(c)
    poly -= z * z
    tail = t * np.exp(poly)  # erfc(|x|)
    sign = np.sign(x)
    return (dtype(1) - sign) + sign * tail  # tail for x > 0, 2 - tail for x < 0
    ### END SOLUTION


def erf(x):
    """error function, element-wise, absolute error < 1e-7"""
    x = np.asarray(x)
    dtype = x.dtype.type
    ### BEGIN SOLUTION
    return np.sign(x) * (dtype(1) - erfc(np.abs(x)))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_erf", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_erf():
    """erf and erfc match Python's math module, in the tails too, and keep float32."""
    x = np.linspace(-6.0, 6.0, 2401)
    want_erf = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.shape == x.shape, f"erf changed the shape {x.shape} into {got.shape}"
    worst = np.abs(got - want_erf).max()
    at = x[np.abs(got - want_erf).argmax()]
    assert worst < 2e-7, (
        f"erf is off by {worst:.2g} at x = {at:.3f} (expected < 2e-7): check the coefficient "
        "order in Horner's rule (start from c9, end with c0), t = 1 / (1 + z/2), and the "
        "sign: erf(-x) = -erf(x)"
    )
    z = np.linspace(0.0, 15.0, 1501)
    want_erfc = np.array([math.erfc(v) for v in z])
    rel = np.abs(erfc(z) - want_erfc) / want_erfc
    assert rel.max() < 2e-7, (
        f"erfc has relative error {rel.max():.2g} at z = {z[rel.argmax()]:.2f} (expected "
        "< 2e-7): compute the tail as t * exp(P(t) - z**2) directly, never as 1 - erf(z), "
        "which loses every digit once erfc(z) is below 1e-7"
    )
    neg = erfc(-z[:50])
    assert np.allclose(neg, 2.0 - want_erfc[:50], rtol=1e-7), (
        f"erfc(-0.1) gave {neg[1]}, expected {2 - want_erfc[1]}: use erfc(-z) = 2 - erfc(z)"
    )
    x32 = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], dtype=np.float32)
    assert erf(x32).dtype == np.float32 and erfc(x32).dtype == np.float32, (
        f"erf/erfc of float32 gave {erf(x32).dtype}/{erfc(x32).dtype}: turn every "
        "coefficient into the input's dtype with dtype(c)"
    )
    assert erf(np.float64(0.0)) == 0.0, f"erf(0) gave {erf(np.float64(0.0))}, expected exactly 0"
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        far = erfc(np.array([-1000.0, 1000.0]))
    assert np.array_equal(far, [2.0, 0.0]), f"erfc([-1000, 1000]) gave {far}, expected [2, 0]"

    def check_like_math(x):
        """erf and erfc of a float64 array of any shape against the math module."""
        want = [np.array([f(v) for v in x.ravel()]).reshape(x.shape) for f in (math.erf, math.erfc)]
        expect_close(f"erf of shape {x.shape}", erf(x), want[0],
                     "erf works on any shape: compute element-wise on the whole array", atol=2e-7)
        expect_close(f"erfc of shape {x.shape}", erfc(x), want[1],
                     "erfc(x) for x < 0 is 2 - erfc(-x); the tail is t * exp(P(t) - x**2)",
                     rtol=2e-7, atol=0.0)

    check_like_math(np.array([[-1.5, 0.25], [3.0, 9.5]]))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(2004)
    hidden_cases(check_like_math, {
        "a three-axis array": rng.standard_normal((2, 3, 4)) * 3,
        "the far right tail": np.linspace(15.0, 25.0, 41),
        "the left tail": np.linspace(-7.0, -3.0, 17),
        "values near zero": np.linspace(-1e-3, 1e-3, 11),
        "a scalar array": np.array(0.75),
    })
    ### END HIDDEN TESTS


test_unit_erf()


# %% [markdown]
# ## Part 4: smooth ReLUs: GELU and SiLU
#
# Transformers replaced ReLU with smooth curves that are 0 for very negative inputs, `x`
# for very positive ones, and dip slightly below zero in between.
#
# **GELU** (Gaussian error linear unit) weights `x` by the probability that a standard
# normal variable is below it:
#
# ```
#   gelu(x) = x * Phi(x) = x * erfc(-x / sqrt(2)) / 2               approximate="none"
#   gelu(x) ~ x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))   approximate="tanh"
#
#   gelu(1) = 1 * Phi(1) = 0.8413447       gelu(-1) = -Phi(-1) = -0.1586553
# ```
#
# BERT and PyTorch's default use the exact form. GPT-2 was trained with the tanh
# approximation (erf was slow on the hardware of the day), and a GPT-2 checkpoint should be
# run with the formula it was trained with. The two differ by at most about 5e-4.
#
# **SiLU** (sigmoid linear unit, also called swish) is `x * sigmoid(x)`; LLaMA-style models
# use it inside their gated feed-forward layers. Reuse your stable sigmoid: call
# `SigmoidFunction.forward(x)` directly on the array (not `.apply`, which is for Tensors).
#
# `approximate` is a keyword parameter of `GELUFunction.forward`, not an input array:
# `Function.apply` records it in the op's parameters, where module 06 will find it. Reject
# any value other than `"none"` and `"tanh"` with a `ValueError` that lists the two choices.

# %% nbgrader={"grade": false, "grade_id": "gelu-silu-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
GELU_APPROXIMATIONS = ("none", "tanh")


def _check_approximate(approximate):
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(
            f"GELU approximate must be 'none' (exact, with erf) or 'tanh' (GPT-2's formula), "
            f"got {approximate!r}"
        )


class GELUFunction(Function):
    """x * Phi(x) (approximate="none") or its tanh approximation (approximate="tanh")"""

    @staticmethod
    def forward(x, approximate):
        _check_approximate(approximate)
        dtype = x.dtype.type
        ### BEGIN SOLUTION
        if approximate == "none":
            cdf = dtype(0.5) * erfc(-x * dtype(1 / math.sqrt(2)))
            return x * cdf
        inner = dtype(math.sqrt(2 / math.pi)) * (x + dtype(0.044715) * x * x * x)
        return dtype(0.5) * x * (dtype(1) + np.tanh(inner))
        ### END SOLUTION


class SiLUFunction(Function):
    """x * sigmoid(x), element-wise"""

    @staticmethod
    def forward(x):
        ### BEGIN SOLUTION
        return x * SigmoidFunction.forward(x)
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "gelu-silu-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def gelu(x, approximate="none"):
    """x * Phi(x), exact (approximate="none") or GPT-2's tanh form (approximate="tanh").

    >>> gelu([-1.0, 0.0, 1.0])
    Tensor([-0.1587,  0.    ,  0.8413])
    >>> gelu([-1.0, 0.0, 1.0], approximate="tanh")
    Tensor([-0.1588,  0.    ,  0.8412])
    """
    _check_approximate(approximate)
    return GELUFunction.apply(x, approximate=approximate)


def silu(x):
    """x * sigmoid(x), element-wise (also called swish).

    >>> silu([-1.0, 0.0, 2.0])
    Tensor([-0.2689,  0.    ,  1.7616])
    """
    return SiLUFunction.apply(x)


# %% nbgrader={"grade": true, "grade_id": "test_unit_gelu", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_gelu():
    """Both GELU forms match their formulas, keep float32 and survive +-1000."""
    x = np.linspace(-8.0, 8.0, 321)
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    k = math.sqrt(2 / math.pi)
    approx = np.array([0.5 * v * (1 + math.tanh(k * (v + 0.044715 * v**3))) for v in x])
    exact_gelu = gelu

    def tanh_gelu(t):
        return gelu(t, approximate="tanh")

    # Relative error only (atol=0): the tiny values of x < 0 must be right too.
    check_elementwise("gelu", exact_gelu, [
        (x, exact, "the exact form is x * erfc(-x / sqrt(2)) / 2; written as "
         "x * (1 + erf(x / sqrt(2))) / 2 it loses the small values for negative x"),
        (np.array([1.0]), [0.8413447460685429], "gelu(1) is Phi(1) = 0.8413447"),
    ], rtol=1e-6, atol=0.0)
    check_elementwise("gelu(approximate='tanh')", tanh_gelu, [
        (x, approx, "x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))): check the constant "
         "0.044715 and the cube"),
    ], rtol=1e-12, atol=1e-12)
    far = "wrap constants such as sqrt(2/pi) with x.dtype.type(...); exp must not overflow"
    for fn in (exact_gelu, tanh_gelu):
        check_elementwise(f"gelu({fn.__name__})", fn, [
            (x.astype(np.float32), approx if fn is tanh_gelu else exact, far),
            ([-1000.0, 1000.0], [0.0, 1000.0], far),
        ], rtol=1e-5, atol=1e-6)
    expect_error("gelu(x, approximate='exact')", lambda: gelu(Tensor(x), approximate="exact"),
                 ValueError, ["none", "tanh"], "only 'none' and 'tanh' exist")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def formulas(v):  # both forms from the math module, in float64, for any shape
        v = np.asarray(v, dtype=np.float64)
        none = [t * 0.5 * math.erfc(-t / math.sqrt(2)) for t in v.ravel()]
        tanh = [0.5 * t * (1 + math.tanh(k * (t + 0.044715 * t**3))) for t in v.ravel()]
        return np.reshape(none, v.shape), np.reshape(tanh, v.shape)

    rng = np.random.default_rng(2005)
    wide = rng.standard_normal((3, 5)) * 4
    block = (rng.standard_normal((2, 2, 3)) * 3).astype(np.float32)
    ends = np.array([-40.0, -12.0, 12.0, 40.0], dtype=np.float32)
    hidden_cases(check_elementwise, {
        "a float64 matrix, exact form": (
            "gelu", exact_gelu, [(wide, formulas(wide)[0], "")], 1e-6, 0.0),
        "a float64 matrix, tanh form": (
            "gelu", tanh_gelu, [(wide, formulas(wide)[1], "")], 1e-12, 1e-12),
        "a three-axis float32 array, exact form": (
            "gelu", exact_gelu, [(block, formulas(block)[0], "")], 1e-5, 1e-6),
        "a three-axis float32 array, tanh form": (
            "gelu", tanh_gelu, [(block, formulas(block)[1], "")], 1e-5, 1e-6),
        "large float32 values, exact form": (
            "gelu", exact_gelu, [(ends, formulas(ends)[0], "")], 1e-5, 1e-6),
        "large float32 values, tanh form": (
            "gelu", tanh_gelu, [(ends, formulas(ends)[1], "")], 1e-5, 1e-6),
    })
    ### END HIDDEN TESTS


test_unit_gelu()


# %% nbgrader={"grade": true, "grade_id": "test_unit_silu", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_silu():
    """silu(x) = x * sigmoid(x), finite at +-1000, float32 kept."""
    x = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])
    check_elementwise("silu", silu, [
        (x.astype(np.float32), x / (1 + np.exp(-x)), "silu is x * sigmoid(x)"),
        ([-1000.0, 1000.0], [0.0, 1000.0], "reuse SigmoidFunction.forward, which never "
         "overflows, instead of writing 1 / (1 + exp(-x)) again"),
    ])
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    def by_tanh(v):  # x * sigmoid(x) with sigmoid(x) = (1 + tanh(x / 2)) / 2, in float64
        v = np.asarray(v, dtype=np.float64)
        return v * 0.5 * (1.0 + np.tanh(v / 2))

    rng = np.random.default_rng(2006)
    grid = np.linspace(-20.0, 20.0, 81)
    block = (rng.standard_normal((4, 3, 2)) * 5).astype(np.float32)
    hidden_cases(check_elementwise, {
        "a float64 grid": ("silu", silu, [(grid, by_tanh(grid), "")]),
        "a three-axis float32 array": ("silu", silu, [(block, by_tanh(block), "")], 1e-6, 1e-6),
        "values far below zero": ("silu", silu, [([-90.0, -500.0, -1e30], [0.0, 0.0, 0.0], "")]),
    })
    ### END HIDDEN TESTS


test_unit_silu()


# %% [markdown]
# ## Part 5: softmax and log-softmax
#
# Softmax turns a vector of scores ("logits") into probabilities: positive, summing to 1.
# It is not element-wise: each output depends on the whole vector along `axis`.
#
# ```
#   softmax(x)_i = exp(x_i) / sum_j exp(x_j)
#
#   x = [1, 2, 3]  ->  exp = [2.718, 7.389, 20.09], sum 30.19  ->  [0.090, 0.245, 0.665]
# ```
#
# **The max-subtraction trick.** Logits of 100 are common; `exp(100)` overflows float32
# and gives `inf / inf = nan`. But softmax does not change when a constant is subtracted
# from every score (`exp(x_i - c) / sum exp(x_j - c)`: the `exp(-c)` cancels). Subtract the
# row's maximum `m`: the largest exponent is then `exp(0) = 1`, nothing overflows, and the
# sum is at least 1, so there is no division by zero. Scores far below the maximum
# underflow to 0, which is their true probability to float precision.
#
# **Log-softmax** is what losses need (module 04). `np.log(softmax(x))` is wrong for those
# underflowed entries: `log(0) = -inf`, while the true value, e.g. `-1000`, is perfectly
# representable. Take the log analytically instead (the **log-sum-exp** trick):
#
# ```
#   log_softmax(x)_i = x_i - logsumexp(x)
#   logsumexp(x)     = m + log(sum_j exp(x_j - m))        m = max_j x_j
#
#   log_softmax([0, -1000]) = [0, -1000]        log(softmax([0, -1000])) = [0, -inf]
# ```
#
# **Memory.** The input is an `(N, C)` array; a careless softmax makes three more of that
# size (`x - m`, its `exp`, the quotient). You need only one: `x - m` is a fresh array you
# own, so exponentiate it in place (`np.exp(a, out=a)`) and divide in place (`a /= s`).
# Never write into `x` itself: it is the input tensor's data. Use `keepdims=True` on the
# reductions so `(N, 1)` broadcasts against `(N, C)`.

# %% nbgrader={"grade": false, "grade_id": "softmax-op", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class SoftmaxFunction(Function):
    """exp(x) / sum(exp(x)) along axis, computed as exp(x - max) / sum(exp(x - max))"""

    @staticmethod
    def forward(x, axis):
        ### BEGIN SOLUTION
        out = x - np.max(x, axis=axis, keepdims=True)  # a new array, ours to overwrite
        np.exp(out, out=out)
        out /= np.sum(out, axis=axis, keepdims=True)
        return out
        ### END SOLUTION


class LogSoftmaxFunction(Function):
    """x - logsumexp(x) along axis"""

    @staticmethod
    def forward(x, axis):
        ### BEGIN SOLUTION
        shifted = x - np.max(x, axis=axis, keepdims=True)
        shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "softmax-api", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def softmax(x, axis=None, *, dim=None):
    """exp(x) / sum(exp(x)) along `axis`: probabilities that sum to 1, overflow-free.

    >>> softmax(Tensor([[1.0, 2.0, 3.0], [1000.0, 1000.0, 1000.0]]))  # the last axis
    Tensor([[0.09  , 0.2447, 0.6652],
            [0.3333, 0.3333, 0.3333]])
    >>> softmax(Tensor([[1.0, 2.0], [3.0, 4.0]]), dim=0)
    Tensor([[0.1192, 0.1192],
            [0.8808, 0.8808]])
    """
    axis, _ = reduction_args("softmax", axis, None, dim, None)
    return SoftmaxFunction.apply(x, axis=-1 if axis is None else axis)


def log_softmax(x, axis=None, *, dim=None):
    """x - logsumexp(x) along `axis`: the log of softmax, finite where softmax underflows.

    >>> softmax([0.0, -1000.0]), log_softmax([0.0, -1000.0])
    (Tensor([1., 0.]), Tensor([    0., -1000.]))
    """
    axis, _ = reduction_args("log_softmax", axis, None, dim, None)
    return LogSoftmaxFunction.apply(x, axis=-1 if axis is None else axis)


# %% nbgrader={"grade": true, "grade_id": "test_unit_softmax", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def softmax_reference(x, axis):
    """softmax and log_softmax in float64, from the formula, for the tests' tables."""
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return np.exp(log_p), log_p


def test_unit_softmax():
    """softmax gives probabilities along the chosen axis, stably, in float32."""

    def check_softmax(x_, axis, fix):
        what = f"softmax({short_repr(x_)}, axis={axis})"
        y = no_fp_errors(what, lambda: softmax(Tensor(x_), axis=axis), fix)
        assert y.dtype == np.float32, f"{what} gave {y.dtype}, expected float32"
        expect_close(what, y.data, softmax_reference(x_, axis)[0], fix, atol=1e-6)

    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    t = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    big = np.array([[1000.0, 1000.0], [-1000.0, 0.0], [1000.0, -1000.0]], dtype=np.float32)
    cases = [  # (x, axis, fix)
        (x, -1, "divide exp(x - max) by its sum over axis; [[1, 2, 3]] gives about "
         "[0.090, 0.245, 0.665]"),
        (x, 0, "pass axis to both max and sum"),
        (t, 1, "reduce with axis=axis, keepdims=True, so the sums broadcast against x"),
        (big, -1, "subtract the maximum along axis (keepdims=True) before exp"),
        (x + np.float32(50), -1, "softmax(x + 50) must equal softmax(x): subtract the maximum"),
    ]
    for x_, axis, fix in cases:
        check_softmax(x_, axis, fix)
    before = x.copy()
    softmax(Tensor(x))
    assert np.array_equal(x, before), (
        "softmax modified its input array: work in place only on the new array x - max"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(2007)
    four = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    masked = np.array([[0.5, -np.inf, 2.0], [-np.inf, 1.0, -np.inf]], dtype=np.float32)
    hidden_cases(check_softmax, {
        "a four-axis array over an inner axis": (four, 2, ""),
        "a four-axis array over the first axis": (four * 30, 0, ""),
        "one column": (rng.standard_normal((5, 1)).astype(np.float32), -1, ""),
        "masked entries": (masked, -1, ""),
        "very negative rows": (four[0, 0] - np.float32(3e4), -1, ""),
    })
    ### END HIDDEN TESTS


test_unit_softmax()


# %% nbgrader={"grade": true, "grade_id": "test_unit_log_softmax", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_log_softmax():
    """log_softmax equals log(softmax) where that is finite, and stays finite where it is not."""
    x = (np.random.default_rng(1).standard_normal((4, 7)) * 3).astype(np.float32)
    big = np.array([[0.0, -1000.0], [1000.0, 1000.0]], dtype=np.float32)
    fix = ("subtract m + log(sum(exp(x - m))), with m the maximum along axis; never take "
           "log(softmax(x)), which is -inf where softmax underflows")

    def check_log_softmax(x_, axis):
        what = f"log_softmax({short_repr(x_)}, axis={axis})"
        y = no_fp_errors(what, lambda: log_softmax(Tensor(x_), axis=axis), fix)
        assert y.dtype == np.float32, f"{what} gave {y.dtype}, expected float32"
        expect_close(what, y.data, softmax_reference(x_, axis)[1], fix, rtol=1e-6, atol=1e-5)

    for x_, axis in ((x, -1), (x, 0), (big, -1)):
        check_log_softmax(x_, axis)
    expect_close("log(softmax(x))", np.log(softmax(Tensor(x)).data), softmax_reference(x, -1)[1],
                 "log_softmax is right but softmax is not: see test_unit_softmax", atol=1e-5)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(2008)
    three = (rng.standard_normal((3, 2, 5)) * 4).astype(np.float32)
    hidden_cases(check_log_softmax, {
        "a three-axis array over the middle axis": (three, 1),
        "a three-axis array over the last axis": (three, -1),
        "rows with a huge spread": (np.array([[-1e4, 0.0, 1e4], [5.0, -3e3, 5.0]],
                                             dtype=np.float32), -1),
        "one column": (three[:, :, :1].reshape(6, 1), -1),
    })
    ### END HIDDEN TESTS


test_unit_log_softmax()


# %% [markdown]
# ## Part 6: activations as objects
#
# Models are built from objects: `Sequential(Linear(784, 128), ReLU(), Linear(128, 10))` in
# module 03. So each activation also comes as a small class that stores its settings
# (`GELU(approximate="tanh")`, `Softmax(axis=-1)`) and, when called, applies its function.
#
# They share a tiny base class, `_Activation`, given below: calling an object runs its
# `forward`, and `repr` shows its settings, the way PyTorch prints `GELU(approximate='tanh')`.
# Module 03's `Module` will grow the same two methods plus parameters. Write each `forward`,
# and make `GELU` reject a bad `approximate` when it is *built*, not later in the middle
# of a training step.

# %% nbgrader={"grade": false, "grade_id": "activation-classes", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class _Activation:
    """Base of the activation objects: calling one runs forward; repr shows its settings."""

    def __call__(self, x):
        return self.forward(x)

    def extra_repr(self):
        """The settings shown inside the parentheses of repr, e.g. "axis=-1"."""
        return ""

    def __repr__(self):
        return f"{type(self).__name__}({self.extra_repr()})"


class ReLU(_Activation):
    """max(x, 0), element-wise.

    >>> ReLU()(Tensor([-1.0, 2.0]))
    Tensor([0., 2.])
    """

    def forward(self, x):
        ### BEGIN SOLUTION
        return relu(x)
        ### END SOLUTION


class Sigmoid(_Activation):
    """1 / (1 + exp(-x)), element-wise.

    >>> Sigmoid()(Tensor([0.0, 2.0]))
    Tensor([0.5   , 0.8808])
    """

    def forward(self, x):
        ### BEGIN SOLUTION
        return sigmoid(x)
        ### END SOLUTION


class Tanh(_Activation):
    """Hyperbolic tangent, element-wise.

    >>> Tanh()(Tensor([0.0, 1.0]))
    Tensor([0.    , 0.7616])
    """

    def forward(self, x):
        ### BEGIN SOLUTION
        return tanh(x)
        ### END SOLUTION


class GELU(_Activation):
    """x * Phi(x), exact ("none") or GPT-2's tanh approximation ("tanh").

    >>> act = GELU(approximate="tanh")
    >>> act
    GELU(approximate='tanh')
    >>> act(Tensor([-1.0, 1.0]))
    Tensor([-0.1588,  0.8412])
    """

    def __init__(self, approximate="none"):
        ### BEGIN SOLUTION
        _check_approximate(approximate)
        self.approximate = approximate
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return gelu(x, approximate=self.approximate)
        ### END SOLUTION

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(_Activation):
    """x * sigmoid(x), element-wise.

    >>> SiLU()(Tensor([-1.0, 2.0]))
    Tensor([-0.2689,  1.7616])
    """

    def forward(self, x):
        ### BEGIN SOLUTION
        return silu(x)
        ### END SOLUTION


class Softmax(_Activation):
    """Probabilities along `axis` (the last one by default).

    >>> Softmax(dim=0)
    Softmax(axis=0)
    >>> Softmax()(Tensor([[0.0, 0.0], [0.0, 2.0]]))
    Tensor([[0.5   , 0.5   ],
            [0.1192, 0.8808]])
    """

    def __init__(self, axis=None, *, dim=None):
        axis, _ = reduction_args(type(self).__name__, axis, None, dim, None)
        self.axis = -1 if axis is None else axis

    def forward(self, x):
        ### BEGIN SOLUTION
        return softmax(x, axis=self.axis)
        ### END SOLUTION

    def extra_repr(self):
        return f"axis={self.axis}"


class LogSoftmax(_Activation):
    """Log-probabilities along `axis` (the last one by default).

    >>> LogSoftmax()(Tensor([[0.0, 0.0]]))
    Tensor([[-0.6931, -0.6931]])
    """

    def __init__(self, axis=None, *, dim=None):
        axis, _ = reduction_args(type(self).__name__, axis, None, dim, None)
        self.axis = -1 if axis is None else axis

    def forward(self, x):
        ### BEGIN SOLUTION
        return log_softmax(x, axis=self.axis)
        ### END SOLUTION

    def extra_repr(self):
        return f"axis={self.axis}"


# %% nbgrader={"grade": true, "grade_id": "test_unit_activation_classes", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_activation_classes():
    """Each class, called on a tensor, gives its function's result; repr shows the settings."""

    def check_wrapping(x):
        pairs = [
            (ReLU(), relu(x)), (Sigmoid(), sigmoid(x)), (Tanh(), tanh(x)),
            (GELU(), gelu(x)), (GELU(approximate="tanh"), gelu(x, approximate="tanh")),
            (SiLU(), silu(x)), (Softmax(axis=0), softmax(x, axis=0)),
            (LogSoftmax(), log_softmax(x)),
        ]
        for layer, want in pairs:
            got = layer(x)
            assert isinstance(got, Tensor), (
                f"{layer!r}(x) returned {type(got).__name__}, not a Tensor"
            )
            assert np.array_equal(got.data, want.data), (
                f"{layer!r}(x) differs from the function it wraps: forward should call it with "
                "the object's settings (axis, approximate)"
            )
            assert np.array_equal(layer.forward(x).data, want.data), (
                f"{layer!r}.forward(x) is wrong"
            )

    def check_repr(text, layer):
        assert repr(layer) == text, f"repr gave {repr(layer)!r}, expected {text!r}"

    def check_refused(approximate):
        try:
            GELU(approximate=approximate)
        except ValueError as error:
            assert approximate in str(error), (
                f"the error should name the bad value {approximate!r}: {error}"
            )
        else:
            raise AssertionError(
                f"GELU(approximate={approximate!r}) must raise ValueError when the object is "
                "built: call _check_approximate in __init__"
            )

    check_wrapping(Tensor([[-2.0, 0.5, 3.0], [1.0, -1.0, 0.0]]))
    reprs = {
        "ReLU()": ReLU(), "GELU(approximate='tanh')": GELU(approximate="tanh"),
        "GELU(approximate='none')": GELU(), "Softmax(axis=-1)": Softmax(),
        "LogSoftmax(axis=1)": LogSoftmax(axis=1), "SiLU()": SiLU(),
    }
    for text, layer in reprs.items():
        check_repr(text, layer)
    check_refused("fast")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(2009)
    hidden_cases(check_wrapping, {
        "a three-axis tensor": Tensor(rng.standard_normal((3, 2, 4)).astype(np.float32)),
        "a single row": Tensor(rng.standard_normal((1, 6)).astype(np.float32)),
        "a float64 tensor": Tensor(rng.standard_normal((2, 5)), dtype=np.float64),
    })
    hidden_cases(check_repr, {
        "a positive axis": ("Softmax(axis=2)", Softmax(axis=2)),
        "an axis given as dim": ("LogSoftmax(axis=0)", LogSoftmax(dim=0)),
        "the default activation classes": ("Sigmoid()", Sigmoid()),
    })
    hidden_cases(check_refused, {"a capitalized mode": "Tanh", "an empty mode": ""})
    ### END HIDDEN TESTS


test_unit_activation_classes()


# %% [markdown]
# ## Systems analysis: time per element, and softmax's memory
#
# **Time.** Each activation reads 4 bytes and writes 4 bytes per float32 element. ReLU does
# one comparison for those 8 bytes and runs about as fast as memory can be copied. The
# exact GELU evaluates a 10-term polynomial, a division and an `exp`: about twenty NumPy
# calls, each a pass over the whole array, most of them writing a new 4 MB temporary. The
# cell below times each `forward` on a million float32 numbers (best of a few runs), then
# the same exact GELU applied to 64 Ki-element chunks (256 KB, small enough to stay in the
# CPU's cache), and, for scale, Python's `math.erf` in a loop.

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
import time

from tinytorch.core.tensor import best_time  # the course's timing helper, given in module 01


def in_chunks(fn, x, size=65536):
    """Apply an element-wise fn to consecutive slices of x: same maths, cache-sized temporaries."""
    out = np.empty_like(x)
    for i in range(0, x.size, size):
        out[i:i + size] = fn(x[i:i + size])
    return out


def speed_report(n=1_000_000):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    mask = x >= 0
    cases = {
        "relu": lambda: ReLUFunction.forward(x),
        "tanh": lambda: TanhFunction.forward(x),
        "sigmoid": lambda: SigmoidFunction.forward(x),
        "silu": lambda: SiLUFunction.forward(x),
        "gelu tanh": lambda: GELUFunction.forward(x, approximate="tanh"),
        "gelu exact": lambda: GELUFunction.forward(x, approximate="none"),
        "gelu exact, chunks": lambda: in_chunks(lambda c: GELUFunction.forward(c, "none"), x),
        "softmax 1000x1000": lambda: SoftmaxFunction.forward(x.reshape(1000, 1000), axis=-1),
        "np.where on signs": lambda: np.where(mask, x, -x),
    }
    times = {name: best_time(fn) for name, fn in cases.items()}
    for name, seconds in times.items():
        print(f"{name:>18}: {seconds * 1e3:6.2f} ms = {seconds / n * 1e9:5.2f} ns/element "
              f"({seconds / times['relu']:4.1f}x relu)")
    sample = x[:20_000].tolist()
    start = time.perf_counter()
    [math.erf(v) for v in sample]
    loop = (time.perf_counter() - start) / len(sample)
    vec = best_time(lambda: in_chunks(erf, x)) / n
    print(f"erf: Python loop over math.erf {loop * 1e9:.0f} ns/element, vectorized in chunks "
          f"{vec * 1e9:.1f} ns/element ({loop / vec:.0f}x faster)")


speed_report()

# %% [markdown]
# **Memory.** `tracemalloc` sees NumPy's allocations. Compare the peak extra memory of your
# in-place softmax with the formula written as it reads, `exp(x) / sum(exp(x))`, on a
# `(1024, 4096)` float32 array (16 MiB, roughly one attention score matrix of a small
# model). The inputs are standard-normal, so the formula does not overflow here; on logits
# of 100 it gives `nan`, which is why yours subtracts the maximum first. The cell shows that
# too, on one row.

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
import tracemalloc


def peak_mib(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak / 2**20


def memory_report(shape=(1024, 4096)):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    def as_written(a):  # no max subtraction: only safe for small scores
        return np.exp(a) / np.exp(a).sum(axis=-1, keepdims=True)

    print(f"input {shape} float32: {x.nbytes / 2**20:.0f} MiB")
    in_place = peak_mib(lambda: SoftmaxFunction.forward(x, axis=-1))
    print(f"softmax, in place:   peak {in_place:5.1f} MiB")
    print(f"softmax, as written: peak {peak_mib(lambda: as_written(x)):5.1f} MiB")
    big = np.array([[100.0, 99.0, 0.0]], dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        print(f"on logits {big[0].tolist()}: as written {as_written(big)[0]}, "
              f"yours {SoftmaxFunction.forward(big, axis=-1)[0]}")


memory_report()

# %% [markdown]
# What to look for (on a shared two-core machine the absolute numbers move around; the
# ratios are steadier):
#
# - ReLU runs near memory speed (well under 1 ns per element). NumPy's `tanh` and `exp`
#   use SIMD instructions on most current CPUs, so `tanh` can be nearly as fast.
# - Sigmoid and SiLU cost a few times ReLU: a handful of passes, two `exp`s.
# - `np.where` on a random sign mask costs more than a whole sigmoid: element-by-element
#   selection on unpredictable data stalls the CPU on mispredicted branches.
# - The exact GELU is the slowest, and most of its time is **memory, not arithmetic**:
#   applied to cache-sized chunks, the very same code runs several times faster, because
#   its twenty temporaries are small, reused and stay in cache, instead of twenty fresh
#   4 MB arrays that the operating system must map and the CPU must stream through main
#   memory. A fused kernel (module 17) computes the whole formula in one pass per element.
# - The in-place softmax peaks at one output array; the formula as written keeps two alive
#   at once (and a version that subtracts the maximum out of place, a third). In a
#   transformer, softmax runs on every attention score matrix, in every layer.
#
# ## What comes next
#
# - **Module 03 (layers)** builds `Linear`, `Module` and `Sequential`; your activation
#   objects sit between the linear layers.
# - **Module 04 (losses)** fuses your log-softmax into cross-entropy, so that a 50,000-word
#   vocabulary never needs a probability matrix.
# - **Module 06 (autograd)** adds each operation's derivative: `relu' = (x > 0)`,
#   `sigmoid' = s * (1 - s)`, and the Jacobian-vector product of softmax.
# - **Module 12 (attention)** applies your softmax to masked attention scores.
