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
# # Module 15: Quantization
#
# ## Overview
#
# Your TinyGPT keeps every weight as a 32-bit float. Almost none of those 32 bits matter:
# a trained weight matrix survives being rounded to 256 levels (8 bits) nearly untouched,
# and to 16 levels (4 bits) with a small, measurable loss. **Quantization** stores each
# weight as a small integer plus a few float32 **scales**, and turns the integers back into
# floats (or multiplies them directly, in integer arithmetic) when the layer runs.
#
# The saving is real only if the integers are really stored as integers. A quantized weight
# kept in a float32 array (rounded, but still four bytes) saves nothing; here the int8 weights
# live in `np.int8` arrays, and the int4 weights are packed two per byte in `np.uint8`. After
# `quantize_model`, the float32 weight matrices are gone from memory, and you measure it:
# the sum of `nbytes` of every array the model holds.
#
# Decoding a token reads every weight once, so on a CPU the bytes of the weights set the
# speed limit of generation (module 18). Four times fewer bytes is up to four times faster
# decoding once a kernel multiplies the integers without unpacking them to float32 first;
# this lesson builds the storage, the arithmetic and the measurements of accuracy.
#
# ## Learning objectives
#
# - Map floats to int8 with a scale (symmetric) or a scale and zero point (asymmetric),
#   per tensor and per output channel; round to nearest-even, clamp, and map back.
# - Derive the round-trip error bound, `|w - deq(q(w))| <= scale / 2`, and see why
#   per-channel and group-wise scales shrink it.
# - Pack two 4-bit integers into one byte and unpack them, with one scale per group of 32,
#   64 or 128 weights.
# - Build a `QuantizedLinear` whose forward equals dequantize-then-matmul, and an int8 x int8
#   path that accumulates in int32, with activation scales calibrated by min/max or by a
#   percentile.
# - Quantize your GPT with `quantize_model` and measure bytes held against validation loss.
#
# ## What you build
#
# - `quantize_int8(w, axis=None, symmetric=True)` -> `(q, scale, zero_point)` and
#   `dequantize_int8(q, scale, zero_point, axis=None)`.
# - `pack_int4(q)`, `unpack_int4(packed)`, `quantize_int4(w, group_size)` -> `(packed,
#   scales)` and `dequantize_int4(packed, scales, group_size)`.
# - `QuantizedLinear` (`from_linear(linear, bits, group_size)`, `forward`,
#   `dequantized_weight()`) and `calibrate(model, batches, method, percentile)` for int8
#   activations.
# - `quantize_model(model, bits=8 | 4, group_size=..., skip=...)`, `model_nbytes(model)`
#   and `linear_weight_nbytes(model)`.
#
# ## What you are not building yet
#
# - **Fast integer kernels.** NumPy has no int8 BLAS: the int8 x int8 product here is exact
#   but slower than float32 on a CPU, and the weight-only forward turns the integers back
#   into a float32 matrix on every call. Here the subject is storage and accuracy; module 17
#   compiles the kernels that read the integers as they are (measured at the end of this
#   lesson).
# - **Quantization-aware training or error-correcting methods** (GPTQ, AWQ). Everything here
#   is round-to-nearest, applied once to a trained model. Where a target needs more, the
#   benchmark says so.
# - **A profiler.** Which layers are worth quantizing is a question for module 14's
#   `Profiler`: run `profile_forward_pass` on your model before and after `quantize_model`
#   to see where the bytes and the time go (the float32 bytes of each `Linear` are the ones
#   this module removes).

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp perf.quantization
#| export
import numpy as np

from tinytorch.core.autograd import derivative, no_grad
from tinytorch.core.layers import Linear, Module, Parameter, Sequential
from tinytorch.core.tensor import Function, ShapeError, Tensor

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time

from tinytorch.core.tensor import manual_seed
from tinytorch.models.transformer import GPT, GPTConfig

# %% [markdown]
# ## Part 1: int8, symmetric and asymmetric, per tensor and per channel
#
# **Symmetric.** Pick a scale $s$ so that the largest magnitude $a = \max |w|$ lands on the
# largest integer, 127: $s = a / 127$. Then
#
# $$q = \mathrm{clamp}(\mathrm{round}(w / s), -127, 127), \qquad \hat w = s\, q.$$
#
# Zero maps to zero exactly, which matters: a zero weight (or a zero padding activation)
# stays zero. We use the range [-127, 127] and leave -128 unused, so the range is symmetric
# (PyTorch calls this "restricted range" symmetric quantization).
#
# **Asymmetric (affine).** When values are lopsided (all positive, say, after a ReLU), a
# symmetric range wastes half its levels. Map `[min, max]` onto all 256 levels with a scale
# and an integer **zero point** $z$, the integer that stands for 0.0:
#
# $$s = \frac{\max - \min}{255}, \quad z = -128 - \mathrm{round}(\min / s), \quad
#   q = \mathrm{clamp}(\mathrm{round}(w / s) + z, -128, 127), \quad \hat w = s\,(q - z).$$
#
# $\min$ is taken as $\min(w_{\min}, 0)$ and $\max$ as $\max(w_{\max}, 0)$, so that 0.0 is
# inside the range and is represented exactly.
#
# **The error bound.** Inside the range, rounding moves $w / s$ by at most one half, so
#
# $$|w - \hat w| \le s / 2.$$
#
# The whole game of quantization is making $s$ small. One scale for a whole matrix (**per
# tensor**) is set by its single largest weight; one scale per output row (**per channel**,
# `axis=0`) lets every row use all 255 levels for its own range. Rows of trained weight
# matrices differ in range by several times, so per-channel costs a few bytes per row and
# buys a lot of accuracy.
#
# **Rounding.** Use round-to-nearest-**even** (`np.rint`): ties go to the even integer, so
# 0.5 -> 0, 1.5 -> 2, 2.5 -> 2. `np.floor(x + 0.5)` rounds every tie up, a bias that adds
# up in a sum over thousands of weights; PyTorch rounds to even, and so must you to match it
# bit for bit.
#
# **Divide, or multiply by the reciprocal?** On paper `w / s` and `w * (1 / s)` are the
# same number; in float32 each rounds, and near a rounding half the two land on different
# sides of it. PyTorch computes `inv = 1 / s` once per scale, in float32, and rounds
# `w * inv` (cheaper: one division per scale, a multiplication per weight). So do that:
# `inv = np.float32(1) / scale`, `q = rint(w * inv)`. The difference is rare (about 1
# weight in 4 million standard-normal ones lands one step away) but it is the difference
# between "equal to PyTorch" and "equal except sometimes". The zero point is computed as
# PyTorch's observers do, with a division: `z = -128 - rint(min / s)`.
#
# **Edge cases.** A row of zeros has $a = 0$; a scale of zero would divide by zero. Clamp the
# scale from below by float32's machine epsilon (`np.finfo(np.float32).eps`), as PyTorch's
# observers do. Keep everything float32: `a / 127` with a Python int is float32, but
# `a / np.float64(127)` is not.
#
# `axis=None` gives one scale (a 0-d float32 array); `axis=0` gives one per row, shape
# `(rows,)`. `zero_point` is int32 with the scale's shape (all zeros when symmetric).

# %% nbgrader={"grade": false, "grade_id": "int8", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
INT8_EPS = np.float32(np.finfo(np.float32).eps)  # smallest scale, as PyTorch's observers


def _reduce(w, fn, axis):
    """fn over the whole array (axis=None) or over every axis but `axis`, as float32."""
    if axis is None:
        return np.asarray(fn(w), dtype=np.float32)
    others = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    return np.asarray(fn(w, axis=others), dtype=np.float32)


def _broadcast(values, w, axis):
    """Per-channel values (C,) shaped to broadcast against w along `axis`."""
    if axis is None:
        return values
    shape = [1] * w.ndim
    shape[axis] = -1
    return values.reshape(shape)


def quantize_int8(w, axis=None, symmetric=True):
    """(q int8, scale float32, zero_point int32): w ~ scale * (q - zero_point).

    >>> w = np.array([[-1.0, 0.5], [0.25, 2.0]], dtype=np.float32)
    >>> q, scale, zero_point = quantize_int8(w)  # one scale: the largest |w| maps to 127
    >>> q.tolist(), round(float(scale), 6), int(zero_point)
    ([[-64, 32], [16, 127]], 0.015748, 0)
    >>> quantize_int8(w, axis=0)[0].tolist()  # a scale per row: each row uses [-127, 127]
    [[-127, 64], [16, 127]]
    """
    w = np.asarray(w.data if isinstance(w, Tensor) else w, dtype=np.float32)
    ### BEGIN SOLUTION
    if symmetric:
        amax = _reduce(np.abs(w), np.max, axis)
        scale = np.maximum(amax / np.float32(127), INT8_EPS)
        zero_point = np.zeros(scale.shape, dtype=np.int32)
        inv = np.float32(1) / scale  # PyTorch's order: w * (1 / s), see "Divide, or ..."
        q = np.clip(np.rint(w * _broadcast(inv, w, axis)), -127, 127)
    else:
        lo = np.minimum(_reduce(w, np.min, axis), np.float32(0))
        hi = np.maximum(_reduce(w, np.max, axis), np.float32(0))
        scale = np.maximum((hi - lo) / np.float32(255), INT8_EPS)
        zero_point = np.clip(-128 - np.rint(lo / scale), -128, 127).astype(np.int32)
        inv = np.float32(1) / scale
        shifted = np.rint(w * _broadcast(inv, w, axis)) + _broadcast(zero_point, w, axis)
        q = np.clip(shifted, -128, 127)
    return q.astype(np.int8), scale, zero_point
    ### END SOLUTION


def dequantize_int8(q, scale, zero_point, axis=None):
    """scale * (q - zero_point), float32, broadcast along `axis`.

    >>> w = np.array([[-1.0, 0.5], [0.25, 2.0]], dtype=np.float32)
    >>> dequantize_int8(*quantize_int8(w)).round(3)  # within scale / 2 of w
    array([[-1.008,  0.504],
           [ 0.252,  2.   ]], dtype=float32)
    """
    ### BEGIN SOLUTION
    zero = _broadcast(np.asarray(zero_point, dtype=np.float32), q, axis)
    centered = q.astype(np.float32) - zero  # small integers: exact in float32
    return centered * _broadcast(np.asarray(scale, dtype=np.float32), q, axis)  # float32
    ### END SOLUTION


# %% [markdown]
# ### Test: int8 values, scales and zero points

# %% nbgrader={"grade": true, "grade_id": "test_unit_int8", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_int8():
    """Hand-checked values, round-half-even, the s/2 bound, per-channel and asymmetric."""
    w = np.array([[-1.27, 0.0, 0.635, 1.0], [0.2, -0.1, 0.05, 0.0]], dtype=np.float32)
    q, scale, zp = quantize_int8(w)
    assert q.dtype == np.int8, (
        f"q has dtype {q.dtype}, expected int8: store the integers as np.int8 "
        "(.astype(np.int8) after clipping), or nothing is saved")
    assert scale.dtype == np.float32 and scale.shape == (), (
        f"per-tensor scale should be a 0-d float32 array, got {scale.dtype} {scale.shape}")
    assert abs(float(scale) - 0.01) < 1e-7, (
        f"scale of max|w| = 1.27 should be 1.27 / 127 = 0.01, got {float(scale)}: "
        "divide the largest magnitude by 127")
    assert q[0].tolist() == [-127, 0, 64, 100], (
        f"row 0 quantized to {q[0].tolist()}, expected [-127, 0, 64, 100] "
        "(0.635 / 0.01 = 63.5 rounds to the even 64): use np.rint, then clip to [-127, 127]")
    ties = quantize_int8(np.array([0.5, 1.5, 2.5, -2.5, 127.0], dtype=np.float32))[0]
    assert ties.tolist() == [0, 2, 2, -2, 127], (
        f"ties 0.5, 1.5, 2.5, -2.5 (scale 1) gave {ties.tolist()[:4]}, expected [0, 2, 2, -2]: "
        "round half to even with np.rint, not np.floor(x + 0.5) or np.round(x) + ...")
    near = quantize_int8(np.array([[1.0, -0.94094485]], dtype=np.float32), axis=0)[0]
    assert near.tolist() == [[127, -119]], (
        f"[1.0, -0.94094485] per channel gave {near.tolist()}, expected [[127, -119]] as "
        "PyTorch: -0.94094485 / s is just past -119.5 but -0.94094485 * (1 / s) is just "
        "before it. Multiply by the float32 reciprocal, inv = np.float32(1) / scale, as "
        "PyTorch does, instead of dividing")
    qc, sc, _ = quantize_int8(w, axis=0)
    assert sc.shape == (2,) and sc.dtype == np.float32, (
        f"per-channel scales should have shape (2,) float32 (one per row), got {sc.shape} "
        f"{sc.dtype}: reduce over every axis but `axis`")
    assert np.allclose(sc, [0.01, 0.2 / 127]), f"per-channel scales {sc} are not max|row| / 127"
    assert qc[1].tolist() == [127, -64, 32, 0], (
        f"row 1 per channel gave {qc[1].tolist()}, expected [127, -64, 32, 0]: divide each row "
        "by its own scale (broadcast the (rows,) scales along axis 0)")
    qn, _, zn = quantize_int8(np.array([-1.0, 0.0, 1.55], dtype=np.float32), symmetric=False)
    assert int(zn) == -28 and qn.tolist() == [-128, -28, 127], (
        f"asymmetric [-1, 0, 1.55] (scale 2.55 / 255 = 0.01): got q {qn.tolist()}, zero point "
        f"{int(zn)}; expected q [-128, -28, 127] and zero point -28, so that the minimum -1 "
        "lands on -128: z = -128 - rint(min / scale) (minus: min is negative)")
    rng = np.random.default_rng(0)
    big = rng.standard_normal((8, 64)).astype(np.float32) * rng.uniform(0.1, 3, (8, 1))
    for axis in (None, 0):
        for symmetric in (True, False):
            qq, s, z = quantize_int8(big, axis=axis, symmetric=symmetric)
            back = dequantize_int8(qq, s, z, axis=axis)
            assert back.dtype == np.float32, f"dequantize gave {back.dtype}, expected float32"
            bound = _broadcast(s, big, axis) / 2 * (1 + 1e-5)
            worst = float(np.max(np.abs(big - back) - bound))
            assert worst <= 1e-7, (
                f"axis={axis}, symmetric={symmetric}: an error exceeds scale/2 by {worst:.3g}. "
                "Check that dequantize computes scale * (q - zero_point) and that clipping "
                "does not cut values inside the range")
    qa, sa, za = quantize_int8(np.array([0.0, 1.0, 2.55], dtype=np.float32), symmetric=False)
    assert za.dtype == np.int32 and int(za) == -128 and qa.tolist() == [-128, -28, 127], (
        f"asymmetric [0, 1, 2.55]: got q {qa.tolist()}, zero point {za}; expected q "
        "[-128, -28, 127] and zero point -128 (min 0 maps to the lowest level): "
        "z = -128 - rint(min / scale) with min = min(w.min(), 0)")
    zero = quantize_int8(np.zeros((2, 3), dtype=np.float32), axis=0)
    assert np.all(zero[1] > 0) and np.all(zero[0] == 0), (
        "a row of zeros must give q = 0 and a small positive scale, not a division by zero: "
        "clamp the scale from below with INT8_EPS")

    def channels(a, axis):
        """a as (channels, values): one row per scale (a single row when axis is None)."""
        return a.reshape(1, -1) if axis is None else np.moveaxis(a, axis, 0).reshape(
            a.shape[axis], -1)

    def near_half(v):
        """Where v is so close to a rounding tie that float32 and float64 may round apart."""
        return np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-3

    def check_int8(w, axis, symmetric):
        """quantize_int8 and dequantize_int8 against the formulas worked in float64: each
        channel's scale and zero point, q = rint(w / scale) + z clipped, the round trip."""
        q, scale, zp = quantize_int8(w, axis=axis, symmetric=symmetric)
        w32 = np.asarray(w.data if isinstance(w, Tensor) else w, dtype=np.float32)
        shape = () if axis is None else (w32.shape[axis],)
        kind = f"axis={axis}, symmetric={symmetric}, w of shape {w32.shape}"
        assert q.dtype == np.int8 and q.shape == w32.shape, (
            f"{kind}: q is {q.dtype} {q.shape}, expected int8 {w32.shape}")
        assert scale.dtype == np.float32 and scale.shape == shape, (
            f"{kind}: scale is {scale.dtype} {scale.shape}, expected float32 {shape}: one "
            "scale per index of `axis` (reduce over every other axis), a 0-d array for None")
        assert zp.dtype == np.int32 and zp.shape == shape, (
            f"{kind}: zero_point is {zp.dtype} {zp.shape}, expected int32 {shape}")
        w64 = channels(w32.astype(np.float64), axis)  # (C, values)
        eps = float(np.finfo(np.float32).eps)
        if symmetric:
            want = np.maximum(np.abs(w64).max(axis=1) / 127, eps)
        else:
            lo, hi = np.minimum(w64.min(axis=1), 0), np.maximum(w64.max(axis=1), 0)
            want = np.maximum((hi - lo) / 255, eps)
        got = scale.astype(np.float64).reshape(-1)
        assert np.allclose(got, want, rtol=1e-6, atol=0), (
            f"{kind}: scales {got[:4]} differ from {want[:4]}: symmetric max|w| / 127 per "
            "channel; asymmetric (max(w_max, 0) - min(w_min, 0)) / 255; at least INT8_EPS")
        z = zp.astype(np.float64).reshape(-1)
        if symmetric:
            assert np.all(z == 0), f"{kind}: a symmetric zero point must be 0, got {z[:4]}"
        else:
            want_z = np.clip(-128 - np.rint(lo / got), -128, 127)
            off = np.abs(z - want_z)
            assert np.all((off == 0) | (near_half(lo / got) & (off == 1))), (
                f"{kind}: zero points {z[:4]}, expected {want_z[:4]} = -128 - rint(min / "
                "scale), with min = min(w_min, 0)")
        ratio = w64 / got[:, None]
        want_q = np.clip(np.rint(ratio) + z[:, None], -127 if symmetric else -128, 127)
        off = np.abs(channels(q, axis).astype(np.float64) - want_q)
        assert np.all((off == 0) | (near_half(ratio) & (off == 1))), (
            f"{kind}: {int(np.sum(off > 0))} values are not rint(w / scale) + zero_point: "
            "multiply each channel by its own 1 / scale, round with np.rint, add the zero "
            "point, clip")
        back = dequantize_int8(q, scale, zp, axis=axis)
        assert back.dtype == np.float32 and back.shape == w32.shape, (
            f"{kind}: dequantize gave {back.dtype} {back.shape}, expected float32 {w32.shape}")
        deq = (channels(q, axis).astype(np.float64) - z[:, None]) * got[:, None]
        assert np.allclose(channels(back, axis), deq, rtol=1e-6, atol=0), (
            f"{kind}: dequantize differs from scale * (q - zero_point) by up to "
            f"{np.abs(channels(back, axis) - deq).max():.3g}: broadcast each channel's "
            "scale and zero point along `axis`")
        err = np.abs(channels(back, axis) - w64) - got[:, None] / 2 * (1 + 1e-5)
        assert err.max() <= 1e-7, f"{kind}: an error exceeds scale / 2 by {err.max():.3g}"

    check_int8(w, None, True)
    check_int8(w, 0, False)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = np.random.default_rng(7)

    def normal(*shape, scale=1.0):
        return (gen.standard_normal(shape) * scale).astype(np.float32)

    rows = normal(4, 9)
    rows[2] = 0.7  # a constant row
    hidden_cases(check_int8, {
        "a batch of matrices, per channel along the first axis": (normal(4, 3, 5), 0, True),
        "per channel along the last axis": (normal(6, 10), -1, True),
        "per channel along the columns, asymmetric": (normal(5, 7), 1, False),
        "a middle axis of a batch, asymmetric": (normal(2, 4, 3), 1, False),
        "a vector, one scale": (normal(50), None, True),
        "a vector, one scale per element": (normal(12), 0, False),
        "all-positive values, asymmetric": (gen.uniform(0.5, 2, (3, 8)).astype(np.float32),
                                            None, False),
        "all-negative values, asymmetric per channel": (
            -gen.uniform(0.1, 3, (4, 6)).astype(np.float32), 0, False),
        "all zeros, symmetric": (np.zeros((3, 4), np.float32), None, True),
        "all zeros, asymmetric": (np.zeros((3, 4), np.float32), None, False),
        "a constant row, asymmetric per channel": (rows, 0, False),
        "values below the smallest scale": (normal(3, 5, scale=1e-9), None, True),
        "large values, asymmetric per channel": (normal(3, 16, scale=1e4), 0, False),
        "float64 input, asymmetric": (gen.standard_normal((4, 6)) * 2, None, False),
        "a Tensor, per channel": (Tensor(normal(3, 8)), 0, True),
        "a single negative value, asymmetric": (np.array([[-3.5]], np.float32), 0, False),
    })
    ### END HIDDEN TESTS


test_unit_int8()

# %% [markdown]
# ## Part 2: int4 with group-wise scales, two values per byte
#
# Four bits hold 16 levels. Symmetric int4 uses [-7, 7] with $s = \max |w| / 7$: the bound
# $|w - \hat w| \le s/2$ still holds, but $s$ is now 18 times larger than int8's for the same
# range. A single scale per row is too coarse, so int4 schemes give each **group** of
# `group_size` consecutive weights in a row its own scale (32, 64 or 128; llama.cpp's
# `Q4_0` uses 32). A weight matrix `(out, in)` then has `in / group_size` scales per row,
# and the bound is per group: $|w - \hat w| \le s_g / 2$ with $s_g = \max_{g} |w| / 7$.
#
# **The bytes.** Per weight: half a byte for the integer plus $4 / \text{group\_size}$ bytes for its
# share of a float32 scale. Group 32: $0.5 + 0.125 = 0.625$ bytes, 15.6% of float32's 4;
# group 128: `0.53` bytes, 13.3%. Smaller groups are more accurate and bigger.
#
# **Packing.** NumPy has no 4-bit type, so two values share one `uint8`. Add 8 to map
# [-8, 7] to [0, 15] (a nibble), put the even-indexed value in the low four bits and the
# odd-indexed one in the high four: `byte = lo | (hi << 4)`. Unpacking reverses it:
# `lo = byte & 0x0F`, `hi = byte >> 4`, minus 8 each, interleaved back in order. The last
# axis must have even length.

# %% nbgrader={"grade": false, "grade_id": "int4", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def pack_int4(q):
    """int values in [-8, 7], last axis even -> uint8 with half the last axis (two per byte).

    >>> packed = pack_int4(np.array([[-8, 7, 1, -1]]))  # four values in two bytes
    >>> packed.dtype, packed.shape
    (dtype('uint8'), (1, 2))
    """
    q = np.asarray(q)
    if q.shape[-1] % 2:
        raise ShapeError(f"pack_int4 needs an even last axis to pair values, got shape {q.shape}")
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError(f"int4 values must be in [-8, 7], got [{q.min()}, {q.max()}]")
    ### BEGIN SOLUTION
    nibbles = (q.astype(np.int16) + 8).astype(np.uint8)  # [-8, 7] -> [0, 15]
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
    ### END SOLUTION


def unpack_int4(packed):
    """uint8 (..., n) -> int8 (..., 2n) in [-8, 7], the inverse of pack_int4.

    >>> unpack_int4(pack_int4(np.array([[-8, 7, 1, -1]]))).tolist()
    [[-8, 7, 1, -1]]
    """
    packed = np.asarray(packed, dtype=np.uint8)
    ### BEGIN SOLUTION
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.int8)
    out[..., 0::2] = (packed & 0x0F).astype(np.int8) - 8
    out[..., 1::2] = (packed >> 4).astype(np.int8) - 8
    return out
    ### END SOLUTION


def _check_groups(in_features, group_size, name="the weight"):
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size < 2 or group_size % 2:
        raise ValueError(f"group_size must be a positive even integer (32, 64 or 128), "
                         f"got {group_size!r}")
    if in_features % group_size:
        divisors = [g for g in (16, 32, 64, 128, 256) if in_features % g == 0]
        raise ValueError(
            f"group_size {group_size} does not divide the rows of {name} ({in_features} "
            f"input features): every group needs exactly {group_size} weights. Use a group "
            f"size that divides {in_features}, e.g. {divisors or [in_features]}, or skip "
            "this layer."
        )


def quantize_int4(w, group_size=32):
    """(packed uint8 (out, in/2), scales float32 (out, in/group_size)), symmetric [-7, 7].

    >>> w = np.array([[0.7, -0.35, 0.1, 0.0]], dtype=np.float32)
    >>> packed, scales = quantize_int4(w, group_size=2)  # two groups of two in the row
    >>> packed.shape, packed.dtype, scales.round(4)  # each group's largest |w| over 7
    ((1, 2), dtype('uint8'), array([[0.1   , 0.0143]], dtype=float32))
    """
    w = np.asarray(w.data if isinstance(w, Tensor) else w, dtype=np.float32)
    if w.ndim != 2:
        raise ShapeError(f"quantize_int4 takes a weight matrix (out, in), got shape {w.shape}")
    _check_groups(w.shape[1], group_size)
    ### BEGIN SOLUTION
    out_f, in_f = w.shape
    groups = w.reshape(out_f, in_f // group_size, group_size)  # (out, G, g)
    amax = np.abs(groups).max(axis=-1)  # (out, G)
    scales = np.maximum(amax / np.float32(7), INT8_EPS)
    inv = np.float32(1) / scales  # (out, G): as int8, multiply by the reciprocal
    q = np.clip(np.rint(groups * inv[..., None]), -7, 7).reshape(out_f, in_f)
    return pack_int4(q), scales
    ### END SOLUTION


def dequantize_int4(packed, scales, group_size=32):
    """float32 (out, in) from quantize_int4's packed values and group scales.

    >>> w = np.array([[0.7, -0.35, 0.1, 0.0]], dtype=np.float32)
    >>> dequantize_int4(*quantize_int4(w, group_size=2), group_size=2)  # -0.35: 4 steps of 0.1
    array([[ 0.7, -0.4,  0.1,  0. ]], dtype=float32)
    """
    ### BEGIN SOLUTION
    q = unpack_int4(packed)  # (out, in)
    out_f, in_f = q.shape
    groups = q.reshape(out_f, in_f // group_size, group_size).astype(np.float32)
    return (groups * scales[..., None]).reshape(out_f, in_f)
    ### END SOLUTION


# %% [markdown]
# ### Test: packing and the int4 round trip

# %% nbgrader={"grade": true, "grade_id": "test_unit_int4", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_int4():
    """Packing layout, exact unpacking, group scales and the s/2 bound per group."""
    packed = pack_int4(np.array([[-8, 7, 0, 1]]))
    assert packed.dtype == np.uint8 and packed.shape == (1, 2), (
        f"pack_int4 of shape (1, 4) gave {packed.dtype} {packed.shape}; expected uint8 (1, 2): "
        "two 4-bit values per byte")
    assert packed.tolist() == [[0xF0, 0x98]], (
        f"pack_int4([-8, 7, 0, 1]) gave {[hex(b) for b in packed[0]]}, expected ['0xf0', "
        "'0x98']: add 8, even index in the low nibble, odd index in the high nibble")
    every = np.arange(-8, 8).repeat(2).reshape(4, 8)
    back = unpack_int4(pack_int4(every))
    assert back.dtype == np.int8 and np.array_equal(back, every), (
        f"unpack_int4(pack_int4(q)) != q: got {back[0].tolist()} for {every[0].tolist()}. "
        "Unpack with byte & 0x0F and byte >> 4, subtract 8, and interleave (0::2, 1::2)")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 128)).astype(np.float32)
    w[:, :32] *= 10  # one loud group per row: group scales keep it from spoiling the rest
    for g in (32, 64, 128):
        p, s = quantize_int4(w, g)
        assert p.shape == (6, 64) and s.shape == (6, 128 // g) and s.dtype == np.float32, (
            f"group {g}: packed {p.shape}, scales {s.shape} {s.dtype}; expected (6, 64) and "
            f"(6, {128 // g}) float32: one scale per group of {g} weights in each row")
        deq = dequantize_int4(p, s, g)
        err = np.abs(w - deq).reshape(6, 128 // g, g).max(axis=-1)
        assert np.all(err <= s / 2 * (1 + 1e-5)), (
            f"group {g}: the round-trip error {err.max():.4f} exceeds scale/2 in some group. "
            "Scale each group by max|w| / 7 over that group only and round with np.rint")
        assert np.allclose(s, np.abs(w).reshape(6, -1, g).max(-1) / 7), (
            f"group {g}: scales are not max|w| / 7 of each group")
    assert dequantize_int4(*quantize_int4(w, 32), 32)[:, 32:].std() > 0.5, (
        "groups after the loud one were crushed: each group needs its own scale")

    def near_half(v):
        """Where v is so close to a rounding tie that float32 and float64 may round apart."""
        return np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-3

    def check_packing(q):
        """pack_int4 against the bytes worked out with arithmetic (low + 16 * high, after
        adding 8), for any leading axes; unpack_int4 gives q back as int8."""
        q = np.asarray(q)
        packed = pack_int4(q)
        shape = q.shape[:-1] + (q.shape[-1] // 2,)
        assert packed.dtype == np.uint8 and packed.shape == shape, (
            f"pack_int4 of shape {q.shape} gave {packed.dtype} {packed.shape}, expected uint8 "
            f"{shape}: pair the values along the last axis only (q[..., 0::2], q[..., 1::2])")
        wide = q.astype(np.int64) + 8
        want = wide[..., 0::2] + 16 * wide[..., 1::2]
        assert np.array_equal(packed.astype(np.int64), want), (
            f"pack_int4 of shape {q.shape}: the bytes differ from (even + 8) + 16 * (odd + 8)")
        back = unpack_int4(packed)
        assert back.dtype == np.int8 and np.array_equal(back, q), (
            f"unpack_int4(pack_int4(q)) for shape {q.shape} gave {back.dtype} {back.shape}, "
            "not q: unpack along the last axis, for any leading axes")

    def check_int4(w, group_size):
        """quantize_int4 against float64 group scales (max|w| / 7 per group), the packed
        integers read back with divmod, and dequantize_int4 against q * scale."""
        p, s = quantize_int4(w, group_size)
        w64 = np.asarray(w.data if isinstance(w, Tensor) else w, np.float32).astype(np.float64)
        out_f, in_f = w64.shape
        groups = in_f // group_size
        kind = f"w of shape {w64.shape}, group {group_size}"
        assert p.dtype == np.uint8 and p.shape == (out_f, in_f // 2), (
            f"{kind}: packed is {p.dtype} {p.shape}, expected uint8 {(out_f, in_f // 2)}")
        assert s.dtype == np.float32 and s.shape == (out_f, groups), (
            f"{kind}: scales are {s.dtype} {s.shape}, expected float32 {(out_f, groups)}")
        blocks = w64.reshape(out_f, groups, group_size)
        want = np.maximum(np.abs(blocks).max(axis=-1) / 7, float(np.finfo(np.float32).eps))
        got = s.astype(np.float64)
        assert np.allclose(got, want, rtol=1e-6, atol=0), (
            f"{kind}: the scales are not max|w| / 7 of each group (at least INT8_EPS)")
        high, low = np.divmod(p.astype(np.int64), 16)
        q = np.empty((out_f, in_f), np.int64)
        q[:, 0::2], q[:, 1::2] = low - 8, high - 8
        ratio = blocks / got[..., None]
        off = np.abs(q.reshape(blocks.shape) - np.clip(np.rint(ratio), -7, 7))
        assert np.all((off == 0) | (near_half(ratio) & (off == 1))), (
            f"{kind}: {int(np.sum(off > 0))} packed values are not rint(w / group scale)")
        deq = dequantize_int4(p, s, group_size)
        assert deq.dtype == np.float32 and deq.shape == w64.shape, (
            f"{kind}: dequantize_int4 gave {deq.dtype} {deq.shape}, expected float32 "
            f"{w64.shape}")
        want_deq = (q.reshape(blocks.shape) * got[..., None]).reshape(out_f, in_f)
        assert np.allclose(deq, want_deq, rtol=1e-6, atol=0), (
            f"{kind}: dequantize_int4 differs from q * group scale by up to "
            f"{np.abs(deq - want_deq).max():.3g}")

    check_packing(every)
    check_int4(w, 64)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = np.random.default_rng(8)
    hidden_cases(check_packing, {
        "a vector": gen.integers(-8, 8, 10),
        "a batch of matrices": gen.integers(-8, 8, (2, 3, 6)),
        "a single pair": np.array([7, -8]),
        "only the extremes": np.array([[-8, -8, 7, 7], [7, -8, -8, 7]]),
        "int8 values": gen.integers(-8, 8, (3, 4)).astype(np.int8),
    })
    quiet = gen.standard_normal((2, 64)).astype(np.float32)
    quiet[:, 16:32] = 0  # an all-zero group
    loud = gen.standard_normal((3, 128)).astype(np.float32)
    loud[1, 70] = 40.0  # one outlier
    hidden_cases(check_int4, {
        "one row, small groups": (gen.standard_normal((1, 64)).astype(np.float32), 16),
        "groups of two": (gen.standard_normal((3, 8)).astype(np.float32), 2),
        "one group per row": (gen.standard_normal((4, 48)).astype(np.float32), 48),
        "an all-zero group": (quiet, 16),
        "a wide matrix in many groups": (gen.standard_normal((5, 256)).astype(np.float32), 32),
        "one outlier": (loud, 64),
        "float64 weights": (gen.standard_normal((3, 32)) * 3, 8),
        "a Tensor": (Tensor(gen.standard_normal((2, 24)).astype(np.float32)), 12),
    })
    ### END HIDDEN TESTS


test_unit_int4()

# %% nbgrader={"grade": true, "grade_id": "test_unit_int4_errors", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_int4_errors():
    """A group size that does not divide the row is a clear error."""
    w = np.ones((4, 96), dtype=np.float32)
    try:
        quantize_int4(w, 64)
    except ValueError as error:
        assert "96" in str(error) and "64" in str(error), f"the message should name both: {error}"
    else:
        raise AssertionError("quantize_int4 with group_size 64 on rows of 96 must raise "
                             "ValueError: 96 weights do not split into groups of 64")
    p, s = quantize_int4(w, 32)
    assert p.shape == (4, 48) and s.shape == (4, 3), "group 32 divides 96: it must work"

    def check_groups(shape, group_size):
        """quantize_int4 works when group_size divides the rows (the shapes say so) and
        raises a ValueError naming both numbers when it does not."""
        from tinytorch.testing import expect_error

        w = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
        out_f, in_f = shape
        if in_f % group_size:
            expect_error(f"quantize_int4 on rows of {in_f} with group_size {group_size}",
                         lambda: quantize_int4(w, group_size), ValueError,
                         [str(in_f), str(group_size)], "say that the group does not divide "
                         "the row, and name both")
        else:
            p, s = quantize_int4(w, group_size)
            assert p.shape == (out_f, in_f // 2) and s.shape == (out_f, in_f // group_size), (
                f"group {group_size} divides {in_f}: expected packed {(out_f, in_f // 2)} and "
                f"scales {(out_f, in_f // group_size)}, got {p.shape} and {s.shape}")

    check_groups((4, 96), 64)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_groups, {
        "a group longer than the row": ((2, 32), 64),
        "a group that leaves a remainder": ((3, 80), 32),
        "a group as long as the row": ((2, 40), 40),
        "many small groups": ((2, 96), 4),
        "one row, a group that does not divide it": ((1, 100), 64),
    })
    ### END HIDDEN TESTS


test_unit_int4_errors()

# %% [markdown]
# ## Part 3: `QuantizedLinear`, and int8 activations with int32 accumulation
#
# A `QuantizedLinear` replaces a `Linear`. It keeps the integers and the scales, not the
# float32 weight: after `from_linear`, nothing in it references the old `(out, in)` float32
# array, so once the `Linear` is dropped that memory is freed. The bias (`out` floats) stays
# float32.
#
# **Weight-only forward.** `y = x @ deq(W).T + b`: dequantize, then multiply in float32.
# That is exactly the float model with rounded weights, so its accuracy is the accuracy of
# the storage. It is one operation, `QuantizedMatMul` (a `Function`, module 01), whose
# inputs are `x` and whose parameters are the stored integers and scales: you write its
# forward, `x @ deq(W).T`, and its derivative rule (given) sends `grad @ deq(W)` to `x`, so
# a quantized layer can sit inside a model that is still trained elsewhere. Being one
# operation is what lets module 17 swap in a compiled kernel through the kernel table
# (`KERNELS[QuantizedMatMul]`) without touching this lesson. (Real kernels never build the
# whole float matrix: they read the integers and convert a few at a time inside the
# product. NumPy builds it, for the duration of one call, which is why this forward is
# *slower* than float32's; measured at the end of the lesson.)
#
# **int8 activations (W8A8).** Quantize the input too, per tensor and symmetric, with a
# scale $s_x$ fixed in advance; then
#
# $$y_{ij} = \sum_k (s_x\, q^x_{ik})(s_{w,j}\, q^w_{jk}) = s_x\, s_{w,j}
#   \underbrace{\sum_k q^x_{ik}\, q^w_{jk}}_{\text{integers}}.$$
#
# The sum of products of int8s needs a wider integer: each product is at most
# $127 \times 127 = 16\,129$, so $k$ of them fit in int32 while
# $k \le 2^{31} / 16\,129 \approx 133\,000$,
# ample for any layer here. Cast both to `np.int32` before the product (int8 @ int8 in NumPy
# wraps around at 127).
#
# **Calibration.** `s_x` must be fixed before deployment, from sample inputs: run a few
# batches through the model, record each quantized layer's inputs, and set $s_x = a / 127$
# where `a` is the largest `|x|` seen (**min/max**) or a high **percentile** of `|x|`
# (99.99%, say). Activations have outliers: a percentile clips the rare outlier and gives the
# other values a finer grid. `calibrate` sets `layer.observed = []` on every `QuantizedLinear`,
# the forward appends `|x|` while the list exists, and `calibrate` turns the record into
# `input_scale` and removes it.

# %% nbgrader={"grade": false, "grade_id": "quantized-matmul", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class QuantizedMatMul(Function):
    """x @ deq(W).T for W stored as int8 rows (bits=8) or packed int4 groups (bits=4)"""

    @staticmethod
    def forward(x, qweight, scale, bits, group_size):
        ### BEGIN SOLUTION
        if bits == 8:
            w = dequantize_int8(qweight, scale, 0, axis=0)  # (out, in), a temporary
        else:
            w = dequantize_int4(qweight, scale, group_size)
        return np.matmul(x, w.T.astype(x.dtype, copy=False))  # (..., out)
        ### END SOLUTION


@derivative(QuantizedMatMul)
def quantized_matmul_backward(ctx, grad):
    """d(x @ deq(W).T) / dx = grad @ deq(W); the stored integers are constants"""
    p = ctx.params
    if p["bits"] == 8:
        w = dequantize_int8(p["qweight"], p["scale"], 0, axis=0)
    else:
        w = dequantize_int4(p["qweight"], p["scale"], p["group_size"])
    return (np.matmul(grad, w.astype(grad.dtype, copy=False)),)


# %% nbgrader={"grade": false, "grade_id": "quantized-linear", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class QuantizedLinear(Module):
    """A Linear whose weight is stored as int8 (per-channel) or packed int4 (group-wise).

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> linear = Linear(4, 3)
    >>> small = QuantizedLinear.from_linear(linear, bits=8)
    >>> small, small.qweight.dtype
    (QuantizedLinear(in_features=4, out_features=3, int8 per-channel), dtype('int8'))
    >>> x = Tensor(np.ones((2, 4)))
    >>> bool(np.abs(small(x).data - linear(x).data).max() < 0.05)  # close to the float layer
    True
    """

    def __init__(self, in_features, out_features, bits, qweight, scale, group_size=None,
                 bias=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.bits, self.group_size = int(bits), group_size
        self.qweight = qweight  # int8 (out, in) or uint8 (out, in / 2)
        self.scale = scale  # float32 (out,) or (out, in / group_size)
        self.bias = bias  # Parameter (out,) or None
        self.input_scale = None  # float32 scalar: set by calibrate(); int8 activations
        self.observed = None  # a list while calibrate() records inputs

    @classmethod
    def from_linear(cls, linear, bits=8, group_size=32):
        """Quantize `linear`'s weight; the result holds no float32 copy of it."""
        if bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {bits!r}")
        ### BEGIN SOLUTION
        w = linear.weight.data  # (out, in)
        if bits == 8:
            qweight, scale, _ = quantize_int8(w, axis=0)  # per output channel, symmetric
            group_size = None
        else:
            qweight, scale = quantize_int4(w, group_size)
        bias = None if linear.bias is None else Parameter(linear.bias.data.copy())
        return cls(linear.in_features, linear.out_features, bits, qweight, scale, group_size,
                   bias)
        ### END SOLUTION

    def dequantized_weight(self):
        """The float32 (out, in) weight the integers stand for (a temporary)."""
        ### BEGIN SOLUTION
        if self.bits == 8:
            return dequantize_int8(self.qweight, self.scale, 0, axis=0)
        return dequantize_int4(self.qweight, self.scale, self.group_size)
        ### END SOLUTION

    def forward(self, x):
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(
                f"QuantizedLinear(in_features={self.in_features}, out_features="
                f"{self.out_features}) got an input of shape {x.shape}: its last axis must "
                f"be {self.in_features}")
        if self.observed is not None:
            self.observed.append(np.abs(x.data).ravel())
        if self.input_scale is not None:
            return self._int8_forward(x)
        ### BEGIN SOLUTION
        y = QuantizedMatMul.apply(x, qweight=self.qweight, scale=self.scale, bits=self.bits,
                                  group_size=self.group_size)  # (..., out)
        return y + self.bias if self.bias is not None else y
        ### END SOLUTION

    def _int8_forward(self, x):
        """int8 x int8 products summed in int32, rescaled by s_x * s_w per output channel."""
        rows = x.data.reshape(-1, self.in_features)  # (N, in)
        ### BEGIN SOLUTION
        xq = np.clip(np.rint(rows / self.input_scale), -127, 127).astype(np.int8)  # (N, in)
        acc = xq.astype(np.int32) @ self.qweight.astype(np.int32).T  # (N, out), int32
        y = acc.astype(np.float32) * (self.input_scale * self.scale)  # (N, out)
        ### END SOLUTION
        if self.bias is not None:
            y += self.bias.data
        return Tensor(y.reshape(x.shape[:-1] + (self.out_features,)))

    def extra_repr(self):
        kind = "int8 per-channel" if self.bits == 8 else f"int4 group {self.group_size}"
        acts = ", int8 activations" if self.input_scale is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, {kind}{acts}"


def calibrate(model, batches, method="minmax", percentile=99.99):
    """Set input_scale on every int8 QuantizedLinear from the inputs seen on `batches`.

    >>> from tinytorch.core.tensor import manual_seed
    >>> manual_seed(0)
    >>> model = Sequential(Linear(4, 8), Linear(8, 2))
    >>> _ = quantize_model(model)
    >>> _ = calibrate(model, [np.full((2, 4), 2.54, dtype=np.float32)])
    >>> round(float(model[0].input_scale), 4)  # the largest input seen, 2.54, over 127
    0.02
    >>> model[0]
    QuantizedLinear(in_features=4, out_features=8, int8 per-channel, int8 activations)
    """
    if method not in ("minmax", "percentile"):
        raise ValueError(f"method must be 'minmax' or 'percentile', got {method!r}")
    layers = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    if not layers:
        raise ValueError("the model has no QuantizedLinear layers: run quantize_model first")
    if any(layer.bits != 8 for layer in layers):
        raise ValueError("int8 activations need int8 weights: quantize_model(model, bits=8)")
    ### BEGIN SOLUTION
    for layer in layers:
        layer.input_scale, layer.observed = None, []
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            for batch in batches:
                model(batch)
    finally:
        model.train(was_training)
    for layer in layers:
        seen = np.concatenate(layer.observed)
        a = seen.max() if method == "minmax" else np.percentile(seen, percentile)
        layer.input_scale = np.maximum(np.float32(a) / np.float32(127), INT8_EPS)
        layer.observed = None
    ### END SOLUTION
    return model


# %% [markdown]
# ### Test: `QuantizedLinear`

# %% nbgrader={"grade": true, "grade_id": "test_unit_quantized_linear", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_quantized_linear():
    """No float32 weight left; forward = dequantize-then-matmul; int8 activations close."""
    manual_seed(0)
    linear = Linear(64, 16)
    x = Tensor(np.random.default_rng(0).standard_normal((3, 5, 64)).astype(np.float32))
    for bits, g in ((8, None), (4, 32)):
        q = QuantizedLinear.from_linear(linear, bits=bits, group_size=g or 32)
        held = {k: v for k, v in vars(q).items() if isinstance(v, np.ndarray)}
        floats = [k for k, v in held.items() if v.dtype == np.float32 and v.size >= 64 * 16]
        assert not floats, (
            f"bits={bits}: QuantizedLinear holds a float32 array of weight size in {floats}: "
            "keep only the integers and scales, never linear.weight itself")
        want_bytes = 16 * 64 if bits == 8 else 16 * 32 + 16 * 2 * 4
        got_bytes = q.qweight.nbytes + q.scale.nbytes
        assert got_bytes == want_bytes + (16 * 4 if bits == 8 else 0), (
            f"bits={bits}: qweight + scale hold {got_bytes} bytes, expected "
            f"{want_bytes + (16 * 4 if bits == 8 else 0)}: int8 is one byte a weight plus one "
            "float32 scale per row; int4 half a byte plus one scale per group")
        w_hat = q.dequantized_weight()
        assert w_hat.shape == (16, 64) and w_hat.dtype == np.float32, (
            f"dequantized_weight() gave {w_hat.shape} {w_hat.dtype}, expected (16, 64) float32")
        want = x.data @ w_hat.T + linear.bias.data
        got = q(x)
        assert got.shape == (3, 5, 16), f"forward gave shape {got.shape}, expected (3, 5, 16)"
        assert np.allclose(got.data, want, atol=1e-5), (
            f"bits={bits}: forward differs from x @ dequantized_weight().T + bias by "
            f"{np.abs(got.data - want).max():.2e}: the forward must multiply by the "
            "dequantized weight (transposed) and add the bias")
        assert np.abs(w_hat - linear.weight.data).max() > 0, "the weight should be rounded"
    q8 = QuantizedLinear.from_linear(linear, bits=8)
    exact = q8(x).data
    calibrate(Sequential(q8), [x], method="minmax")
    assert q8.observed is None and q8.input_scale is not None, (
        "after calibrate, input_scale is set and the record (observed) removed")
    assert abs(float(q8.input_scale) - np.abs(x.data).max() / 127) < 1e-6, (
        f"min/max calibration: input_scale {float(q8.input_scale)} should be max|x| / 127 = "
        f"{np.abs(x.data).max() / 127}")
    w8a8 = q8(x).data
    gap = np.abs(w8a8 - exact).max() / np.abs(exact).max()
    assert 0 < gap < 0.02, (
        f"int8 activations changed the output by {gap:.2%} of its range (expected a small "
        "non-zero change): quantize x with input_scale, multiply in int32, then rescale by "
        "input_scale * scale")
    calibrate(Sequential(q8), [x], method="percentile", percentile=90)
    p90 = float(np.percentile(np.abs(x.data), 90)) / 127
    assert abs(float(q8.input_scale) - p90) < 1e-6, (
        f"percentile calibration (90): input_scale {float(q8.input_scale):.6g}, expected the "
        f"90th percentile of the observed |x| / 127 = {p90:.6g} (min/max would give "
        f"{np.abs(x.data).max() / 127:.6g}): clip the outliers with np.percentile")

    def check_layer(in_f, out_f, bits, group_size, bias, x_shape, seed):
        """QuantizedLinear.from_linear against the float weight: the bytes held, each
        dequantized weight within half its (float64) scale of the original and on its grid,
        the forward equal to x @ deq(W).T + b in float64, and the gradient to x."""
        manual_seed(seed)
        linear = Linear(in_f, out_f, bias=bias)
        q = QuantizedLinear.from_linear(linear, bits=bits, group_size=group_size)
        kind = f"Linear({in_f}, {out_f}, bias={bias}) at bits={bits}, group_size={group_size}"
        floats = [k for k, v in vars(q).items() if isinstance(v, np.ndarray)
                  and v.dtype == np.float32 and v.size >= in_f * out_f]
        assert not floats, f"{kind}: holds a float32 array of weight size in {floats}"
        want_bytes = (out_f * in_f + 4 * out_f if bits == 8
                      else out_f * in_f // 2 + 4 * out_f * (in_f // group_size))
        got_bytes = q.qweight.nbytes + q.scale.nbytes
        assert got_bytes == want_bytes, (
            f"{kind}: qweight + scale hold {got_bytes} bytes, expected {want_bytes}: int8 a byte "
            "a weight and a scale a row; int4 half a byte and a scale per group of group_size")
        w = linear.weight.data.astype(np.float64)
        width = in_f if bits == 8 else group_size  # the weights that share a scale
        blocks = w.reshape(out_f, -1, width)
        step = np.maximum(np.abs(blocks).max(-1, keepdims=True) / (127 if bits == 8 else 7),
                          float(np.finfo(np.float32).eps))
        w_hat = q.dequantized_weight()
        assert w_hat.shape == (out_f, in_f) and w_hat.dtype == np.float32, (
            f"{kind}: dequantized_weight() is {w_hat.dtype} {w_hat.shape}, expected float32 "
            f"{(out_f, in_f)}")
        levels = w_hat.astype(np.float64).reshape(blocks.shape) / step
        assert np.all(np.abs(levels - np.rint(levels)) < 1e-3) and np.all(
            np.abs(w_hat.reshape(blocks.shape) - blocks) <= step / 2 * (1 + 1e-5)), (
            f"{kind}: the dequantized weight is not the original rounded to its scale's grid "
            "(max|w| / 127 per row for int8, max|w| / 7 per group for int4): quantize with "
            "the layer's own bits and group_size")
        x = Tensor(np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32),
                   requires_grad=True)
        y = q(x)
        b = linear.bias.data.astype(np.float64) if bias else 0.0
        want = x.data.astype(np.float64) @ w_hat.astype(np.float64).T + b
        assert y.shape == want.shape and y.dtype == np.float32, (
            f"{kind}: forward of {x_shape} gave {y.dtype} {y.shape}, expected float32 "
            f"{want.shape}")
        assert np.allclose(y.data, want, rtol=1e-5, atol=1e-5), (
            f"{kind}: forward differs from x @ deq(W).T + b by {np.abs(y.data - want).max():.3g}")
        weights = np.random.default_rng(seed + 1).standard_normal(want.shape).astype(np.float32)
        (y * Tensor(weights)).sum().backward()
        grad = weights.astype(np.float64) @ w_hat.astype(np.float64)
        assert x.grad is not None and np.allclose(x.grad.data, grad, rtol=1e-5, atol=1e-5), (
            f"{kind}: the gradient to x is not grad @ deq(W): apply QuantizedMatMul to x (it "
            "records the operation) rather than computing on x.data")

    def check_int8_activations(layers, batches, method, percentile):
        """calibrate sets each layer's input_scale from every input it saw on every batch
        (max, or the percentile by hand from the sorted values), and the int8 forward
        equals s_x * s_w * (rint(x / s_x) @ q.T) + b, worked in float64."""
        model = Sequential(*layers)
        seen = [[] for _ in layers]
        for batch in batches:  # what each layer sees, before calibration (weights only)
            h = Tensor(batch)
            for i, layer in enumerate(layers):
                seen[i].append(np.abs(h.data).astype(np.float64).ravel())
                h = layer(h)
        calibrate(model, [Tensor(b) for b in batches], method=method, percentile=percentile)
        for i, layer in enumerate(layers):
            values = np.sort(np.concatenate(seen[i]))
            if method == "minmax":
                a = values[-1]
            else:  # linear interpolation between the two nearest ranks, as np.percentile
                rank = percentile / 100 * (len(values) - 1)
                low = int(np.floor(rank))
                a = values[low] + (rank - low) * (values[min(low + 1, len(values) - 1)]
                                                  - values[low])
            assert layer.observed is None and layer.input_scale is not None, (
                f"layer {i}: after calibrate, input_scale is set and observed is None")
            assert abs(float(layer.input_scale) - a / 127) <= 1e-6 * a / 127 + 1e-12, (
                f"{method} calibration, layer {i} of {len(layers)}, {len(batches)} batches: "
                f"input_scale {float(layer.input_scale):.6g}, expected {a / 127:.6g} from "
                "every value the layer saw on every batch (its own inputs, not the model's)")
        x = batches[0].astype(np.float64)
        for i, layer in enumerate(layers):
            got = layer(Tensor(batches[0] if i == 0 else x.astype(np.float32))).data
            s_x = float(layer.input_scale)
            ratio = x / s_x
            xq = np.clip(np.rint(ratio), -127, 127)
            qw = layer.qweight.astype(np.float64)
            s_w = layer.scale.astype(np.float64)
            b = 0.0 if layer.bias is None else layer.bias.data.astype(np.float64)
            want = (xq @ qw.T) * (s_x * s_w) + b
            slack = (near_half(ratio).astype(np.float64) @ np.abs(qw).T) * (s_x * s_w)
            assert got.shape == want.shape and np.all(
                np.abs(got - want) <= slack + 1e-5 * np.abs(want) + 1e-5), (
                f"layer {i}: the int8 forward differs from s_x * s_w * (rint(x / s_x) @ q.T) + "
                f"b by {np.abs(got - want).max():.3g}: quantize x with input_scale, multiply "
                "in int32, rescale by input_scale * scale (one per output row)")
            x = got.astype(np.float64)

    def near_half(v):
        """Where v is so close to a rounding tie that float32 and float64 may round apart."""
        return np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-3

    check_layer(64, 16, 4, 32, True, (3, 5, 64), 0)
    manual_seed(1)
    check_int8_activations([QuantizedLinear.from_linear(Linear(64, 16), bits=8)],
                           [x.data.reshape(-1, 64)], "percentile", 90)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_layer, {
        "int4 with small groups": (48, 10, 4, 16, True, (4, 48), 2),
        "int4 with one group per row": (40, 6, 4, 40, False, (2, 40), 3),
        "int8 without a bias": (20, 12, 8, 32, False, (2, 3, 20), 4),
        "a single input vector": (24, 8, 8, 32, True, (24,), 5),
        "int4 on a batch of batches": (32, 5, 4, 8, True, (2, 2, 3, 32), 6),
        "a layer that widens": (8, 40, 8, 32, True, (6, 8), 7),
    })

    def layers(*sizes, seed=0, bias=True):
        manual_seed(seed)
        return [QuantizedLinear.from_linear(Linear(sizes[i], sizes[i + 1], bias=bias), bits=8)
                for i in range(len(sizes) - 1)]

    gen = np.random.default_rng(10)
    spiky = gen.standard_normal((40, 24)).astype(np.float32)
    spiky[3, 5] = 60.0  # an outlier that min/max would let set the scale
    hidden_cases(check_int8_activations, {
        "batches of different sizes, min/max": (layers(24, 12), [
            gen.standard_normal((5, 24)).astype(np.float32) * 3,
            gen.standard_normal((2, 24)).astype(np.float32),
            gen.standard_normal((9, 24)).astype(np.float32) * 0.5], "minmax", 99.99),
        "batches of different sizes, a percentile": (layers(24, 12, seed=1), [
            gen.standard_normal((7, 24)).astype(np.float32),
            gen.standard_normal((3, 24)).astype(np.float32) * 4], "percentile", 75),
        "an outlier, a high percentile": (layers(24, 8, seed=2), [spiky], "percentile", 99),
        "two layers, each from its own inputs": (layers(24, 32, 6, seed=3), [
            gen.standard_normal((6, 24)).astype(np.float32),
            gen.standard_normal((4, 24)).astype(np.float32) * 2], "minmax", 99.99),
        "layers without biases": (layers(16, 16, 4, seed=4, bias=False), [
            gen.standard_normal((3, 16)).astype(np.float32)], "minmax", 99.99),
    })
    ### END HIDDEN TESTS


test_unit_quantized_linear()

# %% [markdown]
# ## Part 4: `quantize_model` on your GPT, and the bytes it actually holds
#
# `quantize_model` walks the model, replaces every `Linear` whose dotted name is not in
# `skip` with a `QuantizedLinear`, and returns the names it replaced. Three rules keep it
# honest:
#
# - **Check everything first, then change anything.** Bits must be 4 or 8, and for int4 the
#   group size must divide every replaced layer's input features; a problem with the fifth
#   layer must not leave four layers quantized.
# - **Never twice.** Quantizing a quantized model would round already-rounded weights and
#   compound the error; it is an error that says so.
# - **The tied head.** In a GPT with tied weights, `lm_head.weight` *is* `wte.weight`: the
#   embedding still needs the float32 matrix, so quantizing the head saves nothing. The
#   default `skip=("lm_head",)` leaves it alone.
#
# `model_nbytes(model)` counts the bytes actually held: every array found on every module
# (parameters, integer weights, scales), each array once even when shared. That number, not
# a formula, is what the tables report. `linear_weight_nbytes(model)` counts only the weights
# (and scales) of `Linear` and `QuantizedLinear` layers: the part quantization shrinks.

# %% nbgrader={"grade": false, "grade_id": "quantize-model", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _arrays_of(module):
    """(name, ndarray) for the arrays a module holds directly: parameters and buffers."""
    for name, value in vars(module).items():
        if isinstance(value, Tensor):
            yield name, value.data
        elif isinstance(value, np.ndarray):
            yield name, value
    for name, p in module._parameters.items():
        if p is not None:
            yield name, p.data


def model_nbytes(model):
    """Bytes of every array the model holds (parameters, quantized weights, scales), once each.

    >>> model = Sequential(Linear(4, 8), Linear(8, 2))
    >>> model_nbytes(model)  # (4*8 + 8 + 8*2 + 2) float32 values
    232
    >>> _ = quantize_model(model)
    >>> model_nbytes(model)  # int8 weights, float32 scales and biases
    128
    """
    seen, total = set(), 0
    for module in model.modules():
        for _, array in _arrays_of(module):
            if id(array) not in seen:
                seen.add(id(array))
                total += array.nbytes
    return total


def linear_weight_nbytes(model):
    """Bytes of the weights (with their scales) of the model's Linear and QuantizedLinear layers.

    >>> model = Sequential(Linear(4, 8), Linear(8, 2))
    >>> linear_weight_nbytes(model)  # (4*8 + 8 + 8*2 + 2) float32 values, biases included
    192
    >>> _ = quantize_model(model)
    >>> linear_weight_nbytes(model)
    88
    """
    total, seen = 0, set()
    for module in model.modules():
        if isinstance(module, QuantizedLinear):
            arrays = (module.qweight, module.scale)
        elif isinstance(module, Linear):
            arrays = (module.weight.data,)
        else:
            continue
        for array in arrays:
            if id(array) not in seen:
                seen.add(id(array))
                total += array.nbytes
    return total


def _replace_child(parent, name, new):
    """Put `new` in place of parent's child `name` (Sequential keeps a list of its layers too)."""
    old = parent._modules[name]
    setattr(parent, name, new)
    if isinstance(parent, Sequential):
        parent._layers = [new if layer is old else layer for layer in parent._layers]


def quantize_model(model, bits=8, group_size=32, skip=("lm_head",)):
    """Replace every Linear not named in `skip` by a QuantizedLinear, in place; their names.

    >>> model = Sequential(Linear(4, 8), Linear(8, 2))
    >>> quantize_model(model, bits=4, group_size=4)
    ['0', '1']
    >>> model[1]
    QuantizedLinear(in_features=8, out_features=2, int4 group 4)
    """
    if bits not in (4, 8):
        raise ValueError(
            f"bits must be 4 or 8, got {bits!r}: int8 (per-channel scales) or int4 (group-wise "
            "scales, two values per byte) are the formats QuantizedLinear stores")
    done = [name for name, m in model.named_modules() if isinstance(m, QuantizedLinear)]
    if done:
        raise ValueError(
            f"the model is already quantized ({len(done)} QuantizedLinear layers, e.g. "
            f"{done[0]!r}): quantizing again would round rounded weights. Start from the "
            "float32 model (load the checkpoint again)")
    ### BEGIN SOLUTION
    targets = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent._modules.items():
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, Linear) and name not in skip:
                targets.append((name, parent, child_name, child))
    if bits == 4:
        for name, _, _, linear in targets:
            _check_groups(linear.in_features, group_size, f"layer {name!r}")
    for _, parent, child_name, linear in targets:
        new = QuantizedLinear.from_linear(linear, bits=bits, group_size=group_size)
        _replace_child(parent, child_name, new)
    return [name for name, *_ in targets]
    ### END SOLUTION


# %% [markdown]
# ### Test: quantizing a GPT

# %% nbgrader={"grade": true, "grade_id": "test_unit_quantize_model", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_quantize_model():
    """Every Linear but the head replaced, bytes shrink as computed, errors are clear."""
    manual_seed(0)
    config = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=64)
    idx = np.random.default_rng(0).integers(0, 32, (2, 16))
    shapes = [(192, 64), (64, 64), (256, 64), (64, 256)] * 2  # (out, in) of the 8 Linears
    floats = sum(4 * o * i for o, i in shapes)
    int8 = sum(o * i + 4 * o for o, i in shapes) / floats  # a byte a weight + a scale a row
    int4 = sum(o * i // 2 + 4 * o * i // 32 for o, i in shapes) / floats  # + a scale a group
    for bits, ratio in ((8, int8), (4, int4)):
        manual_seed(0)
        model = GPT(config)
        before_logits = model(idx)[0].data
        before = linear_weight_nbytes(model)
        names = quantize_model(model, bits=bits, group_size=32)
        assert len(names) == 8 and "lm_head" not in names, (
            f"quantize_model replaced {names}; expected the 4 Linears of each of the 2 blocks "
            "(attn.qkv, attn.proj, mlp.fc, mlp.proj) and not the tied lm_head")
        kinds = [type(m).__name__ for _, m in model.named_modules()]
        assert kinds.count("QuantizedLinear") == 8, (
            f"the model holds {kinds.count('QuantizedLinear')} QuantizedLinear layers after "
            "quantize_model, expected 8: put the new layer in its parent with setattr")
        after = linear_weight_nbytes(model)
        head = config.vocab_size * config.n_embd * 4
        got = (after - head) / (before - head)
        assert abs(got - ratio) < 1e-6, (
            f"bits={bits}: the replaced weights hold {got:.4f} of their float32 bytes, expected "
            f"{ratio:.4f}. int8: 1 byte a weight + a float32 scale per row; int4: half a byte "
            "+ a float32 scale per group of 32")
        logits = model(idx)[0].data
        rel = np.abs(logits - before_logits).max() / np.abs(before_logits).max()
        assert rel < (0.02 if bits == 8 else 0.2), (
            f"bits={bits}: logits moved by {rel:.2%} of their range after quantization: is the "
            "dequantized weight the right way round (out, in)?")
    for bad, word in (((model,), "already"), ((GPT(config),), None)):
        try:
            quantize_model(*bad, bits=4, group_size=48) if word is None else quantize_model(*bad)
        except ValueError as error:
            if word is None:
                assert "48" in str(error) and "64" in str(error), (
                    f"the group-size error should name 48 and the row length 64: {error}")
            else:
                assert word in str(error), f"quantizing twice should say so: {error}"
        else:
            raise AssertionError("quantizing twice, and group size 48 on rows of 64, must "
                                 "each raise ValueError")
    fresh = GPT(config)
    try:
        quantize_model(fresh, bits=3)
    except ValueError as error:
        assert "4 or 8" in str(error), f"the message should name the valid bits: {error}"
    else:
        raise AssertionError("bits=3 must raise ValueError naming 4 or 8")
    assert not any(isinstance(m, QuantizedLinear) for m in fresh.modules()), (
        "a failed quantize_model must leave the model untouched: check before replacing")

    def run(model, inputs):
        out = model(inputs)
        return (out[0] if isinstance(out, tuple) else out).data

    def check_quantized(build, bits, group_size, skip):
        """quantize_model replaces exactly the Linears not named in skip (read off the model
        before), each by a QuantizedLinear of its own weight (within half a float64 scale),
        leaves the skipped ones as they were, holds the bytes counted by hand, and keeps the
        output close."""
        model, inputs = build()
        linears = {n: m for n, m in model.named_modules() if isinstance(m, Linear)}
        wanted = sorted(n for n in linears if n not in skip)
        before = run(model, inputs)
        names = quantize_model(model, bits=bits, group_size=group_size, skip=skip)
        kind = f"bits={bits}, group_size={group_size}, skip={skip}"
        assert sorted(names) == wanted, (
            f"{kind}: quantize_model returned {sorted(names)}, expected every Linear not "
            f"named in skip: {wanted}. Walk every module (named_modules), compare the full "
            "dotted name with skip, and return the names replaced")
        now = dict(model.named_modules())
        expected_bytes = 0
        for name, linear in linears.items():
            out_f, in_f = linear.weight.shape
            if name not in wanted:
                assert now.get(name) is linear, f"{kind}: the skipped layer {name!r} changed"
                expected_bytes += 4 * out_f * in_f
                continue
            layer = now.get(name)
            assert isinstance(layer, QuantizedLinear) and layer.bits == bits, (
                f"{kind}: {name!r} is a {type(layer).__name__} after quantize_model, expected a "
                f"QuantizedLinear with bits={bits} put in its parent's place")
            width = in_f if bits == 8 else group_size
            blocks = linear.weight.data.astype(np.float64).reshape(out_f, -1, width)
            step = np.abs(blocks).max(-1, keepdims=True) / (127 if bits == 8 else 7)
            error = np.abs(layer.dequantized_weight().reshape(blocks.shape) - blocks)
            assert np.all(error <= step / 2 * (1 + 1e-5) + 1e-12), (
                f"{kind}: {name!r} does not hold its own Linear's weight, rounded")
            expected_bytes += (out_f * in_f + 4 * out_f if bits == 8 else
                               out_f * in_f // 2 + 4 * out_f * (in_f // group_size))
        assert linear_weight_nbytes(model) == expected_bytes, (
            f"{kind}: the Linear weights hold {linear_weight_nbytes(model)} bytes, expected "
            f"{expected_bytes}")
        after = run(model, inputs)
        moved = np.abs(after - before).max() / np.abs(before).max()
        assert moved < (0.02 if bits == 8 else 0.2), (
            f"{kind}: the output moved by {moved:.2%} of its range after quantization")

    def check_refused(build, bits, group_size, skip, words):
        """quantize_model refuses with a ValueError naming `words` and leaves every layer of
        the model as it was."""
        from tinytorch.testing import expect_error

        model, _ = build()
        layers = dict(model.named_modules())
        expect_error(f"quantize_model(bits={bits}, group_size={group_size}, skip={skip})",
                     lambda: quantize_model(model, bits=bits, group_size=group_size,
                                            skip=skip), ValueError, words,
                     "check every layer to be replaced before replacing any")
        changed = [n for n, m in model.named_modules() if layers.get(n) is not m]
        assert not changed, (
            f"a refused quantize_model changed {changed}: check everything first, then "
            "replace")

    def gpt(**fields):
        def build():
            manual_seed(0)
            config = GPTConfig(**({"vocab_size": 32, "block_size": 16, "n_layer": 2,
                                   "n_head": 2, "n_embd": 64} | fields))
            return GPT(config), idx
        return build

    check_quantized(gpt(), 8, 32, ("lm_head",))
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = np.random.default_rng(11)

    def mlp(*sizes):
        def build():
            manual_seed(1)
            model = Sequential(*(Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)))
            return model, Tensor(gen.standard_normal((5, sizes[0])).astype(np.float32))
        return build

    hidden_cases(check_quantized, {
        "a plain stack of Linears": (mlp(32, 64, 16), 8, 32, ()),
        "a stack of Linears in int4": (mlp(64, 32, 32), 4, 16, ()),
        "an untied head, nothing skipped": (gpt(tie_weights=False), 8, 32, ()),
        "one block's layer skipped by name": (gpt(), 4, 32, ("lm_head", "blocks.1.mlp.fc")),
        "a model with biases, int4 in small groups": (gpt(bias=True), 4, 16, ("lm_head",)),
        "a deeper, narrower model": (gpt(n_layer=3, n_embd=32), 8, 32, ("lm_head",)),
        "a skipped layer the group does not divide": (mlp(64, 48, 8), 4, 32, ("1",)),
    })
    hidden_cases(check_refused, {
        "a later layer the group does not divide": (mlp(64, 32, 8), 4, 64, (), ["64", "32"]),
        "the last of several layers the group does not divide": (mlp(64, 64, 96, 8), 4, 64,
                                                                  (), ["64", "96"]),
    })
    ### END HIDDEN TESTS


test_unit_quantize_model()

# %% [markdown]
# ## Systems analysis: bytes held, rounding error and time, measured on your machine
#
# The milestone's model (804,096 parameters, 786,432 of them in the blocks' `Linear`
# weights), quantized four ways. The model here is freshly initialized, so only the bytes
# and the relative weight error mean something; the accuracy of a *trained* model is
# measured by the benchmark below.

# %% nbgrader={"grade": false, "grade_id": "analysis-bytes", "locked": false, "schema_version": 3, "solution": false, "task": false}
def bytes_report(repeats=3):
    idx = np.random.default_rng(0).integers(0, 65, (4, 64))
    rows = []
    for label, bits, group in (("float32", None, None), ("int8 per-channel", 8, None),
                               ("int4 group 128", 4, 128), ("int4 group 32", 4, 32)):
        manual_seed(0)
        model = GPT(GPTConfig())
        head = model.lm_head.weight.data.nbytes  # tied, float32, skipped
        with no_grad():
            ref = model(idx)[0].data
        base = linear_weight_nbytes(model) - head
        if bits:
            quantize_model(model, bits=bits, group_size=group or 32)
        best = float("inf")
        with no_grad():
            for _ in range(repeats):
                start = time.perf_counter()
                logits = model(idx)[0].data
                best = min(best, time.perf_counter() - start)
        rows.append((label, model_nbytes(model), (linear_weight_nbytes(model) - head) / base,
                     np.abs(logits - ref).max() / np.abs(ref).max(), best))
    print(f"{'format':18s} {'model bytes':>12s} {'block Linears':>14s} {'logit change':>13s} "
          f"{'forward (4, 64)':>16s}")
    for label, total, share, rel, seconds in rows:
        print(f"{label:18s} {total:12,d} {share:13.1%} {rel:12.2%} {seconds * 1e3:13.1f} ms")


bytes_report()

# %% [markdown]
# "block Linears" are the bytes of the replaced weights (their scales included) against
# their float32 bytes: 25.6% for int8 (a float32 scale per row of 128 or 512 bytes) and
# 15.6% for int4 group 32, as Part 2 computed; the rest of the model (embeddings, norms,
# biases) stays float32. The time column is not a speed-up to expect: the quantized forward
# does *more* work (it unpacks and rescales every weight on every call, then runs the same
# float32 matrix product), and on a small batch the difference is within the noise of a
# shared machine.
#
# **Why this forward is slower, and what makes it faster.** Count the bytes for one token,
# one row `x` times a weight matrix. Float32: BLAS reads each weight once, 4 bytes. This
# lesson's int8 forward reads the int8 weight (1 byte), writes its float32 copy (4 bytes),
# and BLAS reads the copy back (4 bytes): 9 bytes of memory traffic per weight, plus the
# arithmetic of the conversion, so it is several times *slower* than float32, although it
# stores a quarter of the bytes. Module 17 registers a compiled kernel for
# `QuantizedMatMul` that reads each int8 weight once, converts it in a register and
# multiplies it there: 1 byte per weight (half a byte for int4), which is why it is faster
# than float32. Measured with `OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1
# benchmarks/quantization.py --speed-only --lm-head`, one token through single weights of
# a Qwen2.5-0.5B-sized model, one thread each (an idle machine, load 0.8-1.1):
#
# ```
# ms per token                  (896, 4864) weight   LM head (151936, 896)
# float32 BLAS                       0.631              32.4
# int8, this lesson (NumPy)          3.80  (6.0x)      382    (12x slower)
# int8, module 17 (compiled)         0.187 (0.30x)       9.2  (3.5x faster)
# int4 g128, this lesson (NumPy)     5.14  (8.2x)      404    (12x slower)
# int4 g128, module 17 (compiled)    0.333 (0.53x)      17.6  (1.8x faster)
# ```
#
# On the LM head, which no cache holds, module 17's int8 kernel reads its bytes at 14.8
# GB/s and float32 BLAS at 16.8 GB/s: one core keeps only a few reads from memory in
# flight, and each int8 weight also needs a conversion, so the kernel gets 3.5x of the 4x
# its bytes allow (module 17 shows how reading four far-apart rows at once doubled its
# speed). int4, with two conversions and a split per byte, is limited by that arithmetic
# rather than by its half a byte: it reads only 4.1 GB/s, and is slower than int8 although
# it reads half the bytes.
#
# The int4 figures above are for a kernel that reads one weight row at a time. Module 17's
# int4 exercise reads four rows from four far-apart blocks at once, as its int8 kernel does.
# The same command on a slower day (2026-12-07; float32 BLAS took 43.8 ms on the head,
# against 32.4 above: the machine shares its memory with its neighbours) gave the head in
# 16.0 ms as int4 (2.7x faster than float32, against 1.8x one row at a time) and 10.9 ms
# as int8 (4.0x).
#
# The bytes read per token are what decoding speed depends on (module 18).
#
# **On a trained TinyGPT** (the checkpoint of `tito milestone run tinygpt`), the benchmark
# measures the exact validation loss over the whole split and the bytes held:
#
# ```
# .venv/bin/python benchmarks/quantization.py --checkpoint runs/tinygpt
# ```
#
# Measured on one machine (two shared cores, loaded), on the milestone's checkpoint
# (2,000 steps, float32 validation loss 1.9095):
#
# ```
# format              model bytes vs float32  Linear W  val loss   change  target
# float32               3,216,384     100.0%    100.0%    1.9095  +0.0000
# int8 per-channel        875,520      27.2%     25.6%    1.9093  -0.0002  met (<= +0.01, <= 26%)
# int4 group 128          488,448      15.2%     13.3%    1.9198  +0.0103
# int4 group 64           513,024      16.0%     14.1%    1.9198  +0.0103
# int4 group 32           562,176      17.5%     15.6%    1.9197  +0.0102  met (<= +0.05, <= 16%)
#
# int4 group 32 one layer at a time (the others float32), first 128 validation windows:
#   blocks.0.attn.qkv      +0.0081
#   blocks.0.mlp.proj      +0.0010
#   (the other 14 layers: -0.0006 to +0.0006)
# whole split, int4 g32, blocks.0.attn.qkv int8: val loss 1.9117 (+0.0022), Linear W 16.3%
#
# int8 activations (int32 accumulation), first 128 validation windows:
#   int8 weights only +0.0002 (vs float32 on the same windows), W8A8 min/max +0.0007,
#   W8A8 percentile 99.99 -0.0004
# ```
#
# int8 per-channel is free: the loss moves by less than the rounding of the last digit.
# int4 costs about +0.010 whatever the group size, and the one-layer-at-a-time rows say why:
# almost all of it comes from **one layer**, the first block's query/key/value projection,
# whose errors every later layer inherits (and which sets the attention pattern through
# `q @ k^T`). Keeping that single layer in int8 brings int4 to +0.002 for 0.7% more bytes.
# That is the usual lesson of low-bit quantization: measure each layer's sensitivity (module
# 14's profiler tells you where the bytes are; this table tells you where the error is), and
# spend bits where they matter. The script also writes the size-vs-loss plot
# (`runs/quantization/size_vs_loss.png`).
#
# ## What comes next
#
# - **Module 16 (compression)** removes weights instead of rounding them: pruning, structured
#   pruning that shrinks the matrices, and distillation into a smaller model.
# - **Module 17 (acceleration)** writes the kernels that make low-bit storage fast as well as
#   small.
# - **Module 18 (KV caching)**: with the weights at a quarter of their bytes, the cache of
#   keys and values becomes the next thing to measure during generation.
