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
# # Module 09: Convolutions
#
# ## Overview
#
# Your MLP of module 08 reads an 8x8 digit as a row of 64 numbers. It has no idea that
# pixel 9 sits right below pixel 1: shuffle the 64 pixels the same way in every image and it
# learns exactly as well. Everything it knows about strokes and corners it must learn
# separately at every position, with separate weights.
#
# A **convolution** builds that knowledge in. It slides one small filter, say 3x3, over the
# whole image and computes the same weighted sum at every position. The filter's 9 weights
# are shared by all positions, so a stroke detector learned in one corner works in every
# corner, and a layer has a few hundred weights instead of tens of thousands. LeCun's
# LeNet-5 (1998) stacked such layers with **pooling** (keep the largest value of each 2x2
# block) and read bank cheques with them; the same pattern runs in every image model since.
#
# In this module you write the convolution twice. First as its **definition**, loops over
# the output positions, which is slow and obviously right. Then as **im2col**: copy every
# window of the input into one row of a matrix, and the whole convolution becomes **one
# matrix product**, which BLAS runs at full speed. You write its backward pass (col2im,
# which adds overlapping windows back together) and check it against finite differences.
# Then you train a LeNet-style CNN on the digits (milestone `cnn_digits`) and compare it with
# the MLP in parameters, FLOPs and accuracy.
#
# ## Learning objectives
#
# - Compute a convolution's output size from input size, kernel, stride and padding.
# - Write a 2-D convolution from its definition, then as im2col + one GEMM, and measure
#   the difference.
# - Derive the backward pass of im2col (col2im): every input pixel collects the gradient of
#   every window it appeared in.
# - Write max pooling (the gradient goes to the arg-max only) and average pooling, with
#   their derivative rules beside the operations.
# - Measure im2col's memory (the `k*k` blow-up) and compare a CNN with an MLP in
#   parameters and FLOPs.
#
# ## What you build
#
# - `conv_output_size`, `conv2d_loop` (the definition), `im2col` and `col2im`.
# - `Conv2dFunction` with its derivative rule; `Conv2d(in_channels, out_channels,
#   kernel_size, stride=1, padding=0, bias=True)` in PyTorch's NCHW layout.
# - `MaxPool2dFunction`, `AvgPool2dFunction` with their rules; `MaxPool2d`, `AvgPool2d`,
#   `Flatten`.
#
# ## What you are not building yet
#
# - **Faster convolution algorithms.** FFT and Winograd convolutions, and the direct
#   kernels of cuDNN and oneDNN, avoid materializing im2col's matrix. Module 17
#   (acceleration) looks at memory layout and fused kernels.
# - **Dilation, groups and depthwise convolutions** (MobileNet). Each is a different way
#   of picking the windows; im2col handles them with a different slicing.
# - **Batch normalization.** Modern CNNs normalize after each convolution; the digits are
#   small enough to train without it.
# - **1-D and 3-D convolutions** (audio, video): the same idea along one or three axes.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp core.convolutions
#| export
import math

import numpy as np

from tinytorch.core.autograd import derivative
from tinytorch.core.layers import Module, Parameter
from tinytorch.core.tensor import Function, ShapeError, Tensor, default_generator

# %% [markdown]
# The lesson itself (tests and measurements, not the package) also uses:

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time

from tinytorch.core.activations import ReLU
from tinytorch.core.autograd import backward, gradcheck
from tinytorch.core.layers import Dropout, Linear, Sequential
from tinytorch.core.tensor import explain, float64_inputs, manual_seed  # module 01's helpers

# %% [markdown]
# ## Part 1: shapes
#
# Images travel through a CNN as 4-D arrays in **NCHW** order, PyTorch's: `N` images in a
# batch, `C` channels (1 for grey, 3 for RGB, 16 after a layer with 16 filters), `H` rows
# and `W` columns. A convolution layer with `O` filters of size `kh x kw` has a weight of
# shape `(O, C, kh, kw)`: each filter looks at **all** `C` input channels of its window.
#
# ```
# x      (N, C, H, W)
# weight (O, C, kh, kw)     bias (O,)
# out    (N, O, OH, OW)
# ```
#
# **Padding** `p` adds `p` rows of zeros above and below (and columns left and right), so
# a 3x3 filter can be centred on the border pixels. **Stride** `s` moves the window `s`
# pixels at a time. Along one axis of size `H`, the padded input has `H + 2p` pixels; a
# window of `k` fits at the starts `0, s, 2s, ...` up to `H + 2p - k`, so
#
# $$
# OH = \left\lfloor \frac{H + 2p - k}{s} \right\rfloor + 1
# $$
#
# Worked example: `H = 8`, `k = 3`, `p = 1`, `s = 1` gives `(8 + 2 - 3) // 1 + 1 = 8`
# ("same" padding keeps the size); `s = 2` gives `7 // 2 + 1 = 4`. A 2x2 pooling with
# stride 2 halves the size: `(8 - 2) // 2 + 1 = 4`. When `s` does not divide `H + 2p - k`,
# the last rows are never covered by a window: the floor drops them, as PyTorch does.
#
# Write `conv_output_size` for one axis. The given `_conv_geometry` below uses it, after
# checking the input: it must be 4-D, have the layer's channel count, and be at least as
# large as the kernel once padded. Each error names the shapes and the fix.

# %% nbgrader={"grade": false, "grade_id": "output-size", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def conv_output_size(size, kernel, stride=1, padding=0):
    """Number of window positions along one axis: (size + 2 * padding - kernel) // stride + 1.

    >>> conv_output_size(28, kernel=5), conv_output_size(28, kernel=5, padding=2)
    (24, 28)
    >>> conv_output_size(32, kernel=3, stride=2, padding=1)
    16
    """
    ### BEGIN SOLUTION
    return (size + 2 * padding - kernel) // stride + 1
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "geometry", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def _pair(value, name, minimum=1):
    """An int or an (h, w) pair as a tuple of two ints >= minimum."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair
    ):
        raise TypeError(f"{name} must be an int or a pair of ints (h, w), got {value!r}")
    if min(pair) < minimum:
        raise ValueError(
            f"{name} must be >= {minimum} along both axes, got {value!r}"
            + (": a stride of 0 never moves the window" if name == "stride" else "")
        )
    return int(pair[0]), int(pair[1])


def _conv_geometry(x_shape, kernel, stride, padding, op, in_channels=None):
    """(OH, OW) for a window op on x of shape (N, C, H, W), after checking the input."""
    if len(x_shape) != 4:
        hint = (f" Add a batch axis: x.reshape(1, {', '.join(map(str, x_shape))})."
                if len(x_shape) == 3 else
                " Reshape flat images first, e.g. x.reshape(N, 1, 8, 8) for 8x8 grey digits.")
        raise ShapeError(
            f"{op} expects a 4-D input (N, C, H, W), got shape {tuple(x_shape)}.{hint}"
        )
    if in_channels is not None and x_shape[1] != in_channels:
        raise ShapeError(
            f"{op} has in_channels={in_channels} but got an input of shape {tuple(x_shape)} "
            f"with {x_shape[1]} channels on axis 1 of (N, C, H, W). Set in_channels to the "
            "previous layer's out_channels (1 for grey images), or check the axis order: "
            "NHWC images need x.permute(0, 3, 1, 2)."
        )
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    padded = (x_shape[2] + 2 * ph, x_shape[3] + 2 * pw)
    if kh > padded[0] or kw > padded[1]:
        raise ShapeError(
            f"{op}: the {kh}x{kw} kernel is larger than the padded input "
            f"{padded[0]}x{padded[1]} (input shape {tuple(x_shape)}, padding ({ph}, {pw})). "
            "Use a smaller kernel, more padding, or fewer pooling layers before this one."
        )
    return (conv_output_size(x_shape[2], kh, sh, ph), conv_output_size(x_shape[3], kw, sw, pw))


# %% nbgrader={"grade": true, "grade_id": "test_unit_output_size", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_output_size():
    """The output-size formula for padding, stride and a stride that does not divide."""
    cases = [  # (size, kernel, stride, padding) -> expected
        ((8, 3, 1, 0), 6), ((8, 3, 1, 1), 8), ((8, 3, 2, 1), 4), ((8, 2, 2, 0), 4),
        ((7, 2, 2, 0), 3), ((5, 5, 1, 0), 1), ((28, 5, 1, 2), 28), ((10, 3, 3, 0), 3),
    ]

    def check_size(size, k, s, p, want):
        got = conv_output_size(size, k, s, p)
        assert got == want, (
            f"conv_output_size(size={size}, kernel={k}, stride={s}, padding={p}) gave {got}, "
            f"expected {want}: (size + 2 * padding - kernel) // stride + 1, with integer "
            "division (the last rows that no full window covers are dropped)"
        )
        assert isinstance(got, int), f"the output size should be an int, got {type(got).__name__}"

    for (size, k, s, p), want in cases:
        check_size(size, k, s, p, want)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_size, {
        "a one-pixel image": (1, 1, 1, 0, 1),
        "a stride larger than the kernel": (9, 4, 3, 2, 4),
        "a large image and kernel": (33, 7, 4, 3, 9),
        "a stride past the only window": (6, 6, 5, 0, 1),
        "padding that makes a window fit": (3, 5, 1, 1, 1),
    })
    ### END HIDDEN TESTS


test_unit_output_size()


# %% [markdown]
# ## Part 2: the definition, with loops
#
# Output pixel `(i, j)` of filter `o` for image `n` is the bias plus the sum, over every
# input channel `c` and kernel offset `(u, v)`, of weight times input under the window
# (`xp` is the padded input):
#
# $$
# \mathrm{out}[n, o, i, j] = \mathrm{bias}[o]
#   + \sum_{c, u, v} \mathrm{weight}[o, c, u, v] \; \mathrm{xp}[n, c, i s_h + u, j s_w + v]
# $$
#
# (Strictly this is a *cross-correlation*: a mathematician's convolution flips the kernel.
# Every deep-learning framework computes this unflipped sum and calls it convolution; since
# the kernel is learned, the flip would change nothing but the name.)
#
# Written as seven nested loops this runs in pure Python, one multiply-add at a time. Keep
# two loops, over the output positions `(i, j)`, and let NumPy do the sum for all images
# and filters at once: the window `xp[:, :, i*sh : i*sh+kh, j*sw : j*sw+kw]` has shape
# `(N, C, kh, kw)`, and `np.tensordot(window, weight, axes=([1, 2, 3], [1, 2, 3]))` sums
# over `(C, kh, kw)` and returns `(N, O)`. Pad with `np.pad(x, ((0, 0), (0, 0), (ph, ph),
# (pw, pw)))`. This function works on NumPy arrays; it is the reference your fast version
# is tested against, not a layer.

# %% nbgrader={"grade": false, "grade_id": "conv-loop", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def conv2d_loop(x, weight, bias=None, stride=1, padding=0):
    """out[n, o, i, j] = b[o] + sum over c, u, v of w[o, c, u, v] * xp[n, c, i*sh + u, j*sw + v]

    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> w = np.ones((1, 1, 2, 2), dtype=np.float32)  # adds up each 2x2 window
    >>> out = conv2d_loop(x, w, stride=2)
    >>> out.shape, out.dtype, out[0, 0].tolist()
    ((1, 1, 2, 2), dtype('float32'), [[10.0, 18.0], [42.0, 50.0]])
    """
    stride, padding = _pair(stride, "stride"), _pair(padding, "padding", minimum=0)
    O, C, kh, kw = weight.shape
    OH, OW = _conv_geometry(x.shape, (kh, kw), stride, padding, "conv2d_loop", C)
    (sh, sw), (ph, pw) = stride, padding
    ### BEGIN SOLUTION
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # (N, C, H + 2ph, W + 2pw)
    out = np.zeros((x.shape[0], O, OH, OW), dtype=x.dtype)
    for i in range(OH):
        for j in range(OW):
            window = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]  # (N, C, kh, kw)
            out[:, :, i, j] = np.tensordot(window, weight, axes=([1, 2, 3], [1, 2, 3]))  # (N, O)
    if bias is not None:
        out += bias.reshape(1, O, 1, 1)
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_conv_loop", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def slow_conv(x, w, b=None, stride=1, padding=0):
    """Seven loops, one multiply-add at a time: the definition, word for word (float64).

    The later tests check your fast versions against this, not against your conv2d_loop.
    """
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding", minimum=0)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    OH, OW = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    out = np.zeros((N, O, OH, OW))
    for n in range(N):
        for o in range(O):
            for i in range(OH):
                for j in range(OW):
                    total = 0.0 if b is None else b[o]
                    for c in range(C):
                        for u in range(kh):
                            for v in range(kw):
                                total += w[o, c, u, v] * xp[n, c, i * sh + u, j * sw + v]
                    out[n, o, i, j] = total
    return out


def test_unit_conv_loop():
    """conv2d_loop matches the seven-loop definition and a hand-computed example."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    w = np.ones((1, 1, 2, 2), dtype=np.float32)
    got = conv2d_loop(x, w)
    want = np.array([[[[10, 14, 18], [26, 30, 34], [42, 46, 50]]]], dtype=np.float32)
    assert got.shape == (1, 1, 3, 3), (
        f"a 2x2 kernel on a 4x4 image gives a 3x3 output, got shape {got.shape}"
    )
    assert np.array_equal(got, want), (
        f"a 2x2 box filter of ones on arange(16).reshape(4, 4) should sum each 2x2 block "
        f"(top-left 0+1+4+5 = 10), got\n{got[0, 0]}"
    )
    rng = np.random.default_rng(0)

    def check_definition(x_shape, w_shape, s, p, with_bias=True):
        """conv2d_loop against slow_conv for random x, weight (and bias)."""
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        b = rng.standard_normal(w_shape[0]).astype(np.float32) if with_bias else None
        got = conv2d_loop(x, w, b, stride=s, padding=p)
        want = slow_conv(x, w, b, s, p)
        assert got.shape == want.shape, (
            f"x {x.shape}, weight {w.shape}, stride {s}, padding {p}: expected output "
            f"{want.shape}, got {got.shape}"
        )
        assert np.allclose(got, want, atol=1e-4), (
            f"x {x.shape}, weight {w.shape}, stride {s}, padding {p}: values differ from the "
            "definition. Check the window start i*stride (not i), that it spans kh rows, "
            "and that the bias is added once per filter, broadcast as (1, O, 1, 1)"
        )
        assert got.dtype == np.float32, f"float32 input gave a {got.dtype} output"

    for (N, C, H, W, O, k, s, p) in [(2, 3, 5, 6, 4, 3, 1, 1), (1, 2, 7, 7, 3, 3, 2, 0),
                                     (2, 1, 6, 5, 2, 2, 2, 1)]:
        check_definition((N, C, H, W), (O, C, k, k), s, p)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_definition, {
        "one window": ((1, 1, 3, 3), (1, 1, 3, 3), 1, 0),
        "a rectangular kernel with pair strides": ((3, 2, 4, 7), (2, 2, 1, 3), (1, 2), (0, 1)),
        "no bias": ((2, 3, 5, 5), (4, 3, 2, 2), 1, 0, False),
        "a one-by-one kernel": ((1, 4, 3, 2), (5, 4, 1, 1), 1, 0),
    })
    ### END HIDDEN TESTS


test_unit_conv_loop()


# %% [markdown]
# ## Part 3: im2col, the convolution as one matrix product
#
# Look at the sum again: for one output position it is a dot product between the
# flattened window, `C * kh * kw` numbers, and the flattened filter, the same `C * kh * kw`
# numbers, for each of the `O` filters. If every window of every image becomes one **row**
# of a matrix,
#
# ```
# cols      (N * OH * OW, kh * kw * C)     one row per output pixel: its window, flattened
# W_mat     (O, kh * kw * C)               each filter flattened in the same order
# cols @ W_mat.T                           (N * OH * OW, O): every output pixel, every filter
# ```
#
# then the whole convolution is **one GEMM**, the operation BLAS is best at. This is
# *im2col* ("image to columns"; Caffe stored the windows as columns, we store them as rows
# so the result comes out as `(pixels, filters)`, like `Linear`'s `(batch, features)`).
#
# **Building the rows with a loop over kernel offsets.** Fix one kernel offset `(u, v)`.
# Entry `(u, v)` of the window at output position `(i, j)` is the pixel `xp[i*sh + u,
# j*sw + v]`, so for all positions at once it is a strided slice of the padded image,
# `xp[u : u + sh*OH : sh, v : v + sw*OW : sw]`, of shape `(OH, OW)`. One whole-array copy
# per offset fills one column block of every row: `kh * kw` copies (9 for a 3x3 kernel),
# however large the image.
#
# ```
# xp   = the padded image, channels last        (N, H + 2ph, W + 2pw, C)
# cols = empty((N, OH, OW, kh, kw, C))
# for u in range(kh):
#     for v in range(kw):
#         cols[:, :, :, u, v] = xp[:, u : u + sh*OH : sh, v : v + sw*OW : sw]    (N, OH, OW, C)
# cols.reshape(N * OH * OW, kh * kw * C)        free: cols is already in this order
# ```
#
# **Why channels last?** Each row is ordered `(u, v, c)`, channels innermost, and the
# padded image is held as `(N, H, W, C)` in memory. Every copy above then moves runs of `C`
# neighbouring floats instead of single floats `H * W` apart, which is several times
# faster. The given `_pad` below makes that padded copy: it returns an array of the usual
# NCHW *shape* whose *memory* is channels-last (`.transpose(0, 2, 3, 1)` of it is a
# contiguous `(N, Hp, Wp, C)`). Shape and memory order are separate things in NumPy: a
# transpose changes only the strides. PyTorch calls this layout `torch.channels_last`, and
# CPU libraries such as oneDNN prefer it for the same reason. The filter is flattened in the
# same `(u, v, c)` order: `W_mat = weight.transpose(0, 2, 3, 1).reshape(O, -1)`.
#
# (`np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))` gives all windows
# as a view without copying anything, and one `reshape` then copies them out; it computes
# the same `cols`. The offset loop is what col2im needs in Part 4, so we use it here too.)
#
# **The price is memory.** With stride 1 and "same" padding every input pixel appears in
# $k_h k_w$ windows, so `cols` is about $k_h k_w$ times the input: 9x for 3x3, 25x for 5x5.
# The systems analysis measures it.

# %% nbgrader={"grade": false, "grade_id": "pad", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| exporti
def _pad(x, padding, fill=0.0):
    """x (N, C, H, W) padded with `fill`: shape (N, C, H + 2ph, W + 2pw), channels-last memory."""
    (ph, pw), (N, C, H, W) = padding, x.shape
    xp = np.full((N, H + 2 * ph, W + 2 * pw, C), fill, dtype=x.dtype)
    xp[:, ph:ph + H, pw:pw + W] = x.transpose(0, 2, 3, 1)
    return xp.transpose(0, 3, 1, 2)


def _zeros(shape, dtype):
    """Zeros of NCHW shape with channels-last memory, like everything this module returns."""
    N, C, H, W = shape
    return np.zeros((N, H, W, C), dtype=dtype).transpose(0, 3, 1, 2)


# %% nbgrader={"grade": false, "grade_id": "im2col", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def im2col(x, kernel_size, stride=(1, 1), padding=(0, 0)):
    """(N, C, H, W) -> (N * OH * OW, kh * kw * C): every window of x, flattened, one per row.

    >>> x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    >>> cols = im2col(x, (2, 2))
    >>> cols.shape  # four 2x2 windows of one channel
    (4, 4)
    >>> cols[0].tolist(), cols[3].tolist()  # the top-left and the bottom-right window
    ([0.0, 1.0, 3.0, 4.0], [4.0, 5.0, 7.0, 8.0])
    """
    (kh, kw), (sh, sw) = kernel_size, stride
    N, C = x.shape[:2]
    OH, OW = _conv_geometry(x.shape, (kh, kw), (sh, sw), padding, "im2col")
    xp = _pad(x, padding).transpose(0, 2, 3, 1)  # (N, H + 2ph, W + 2pw, C), contiguous
    ### BEGIN SOLUTION
    cols = np.empty((N, OH, OW, kh, kw, C), dtype=x.dtype)
    for u in range(kh):
        for v in range(kw):
            cols[:, :, :, u, v] = xp[:, u:u + sh * OH:sh, v:v + sw * OW:sw]  # (N, OH, OW, C)
    return cols.reshape(N * OH * OW, kh * kw * C)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_im2col", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_im2col():
    """Rows are the windows in (n, i, j) order, columns in (u, v, c) order; GEMM = conv."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    cols = im2col(x, (2, 2))
    assert cols.shape == (9, 4), (
        f"im2col of a 4x4 image with a 2x2 kernel should have 9 rows (windows) of 4 values, "
        f"got shape {cols.shape}"
    )
    assert np.array_equal(cols[0], [0, 1, 4, 5]) and np.array_equal(cols[1], [1, 2, 5, 6]), (
        f"row 0 should be the top-left window [0, 1, 4, 5] and row 1 the next one to the "
        f"right [1, 2, 5, 6], got {cols[0]} and {cols[1]}: rows go over (n, i, j), columns "
        "over (u, v, c)"
    )
    strided = im2col(x, (2, 2), stride=(2, 2))
    blocks = [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]
    assert np.array_equal(strided, blocks), (
        f"with stride 2 the 2x2 windows do not overlap, got\n{strided}\nstep the slices by the "
        "stride: xp[:, u : u + sh*OH : sh, v : v + sw*OW : sw]"
    )
    padded = im2col(x, (3, 3), padding=(1, 1))
    assert padded.shape == (16, 9), (
        f"a 3x3 kernel with padding 1 on a 4x4 image has 4x4 = 16 windows of 9 values, got "
        f"shape {padded.shape}: is conv_output_size(4, 3, 1, 1) equal to 4?"
    )
    assert np.array_equal(padded[0], [0, 0, 0, 0, 0, 1, 0, 4, 5]), (
        f"with padding 1 the top-left 3x3 window is mostly zeros, [0 0 0 0 0 1 0 4 5], got "
        f"{padded[0] if padded.ndim == 2 else padded}: slice the PADDED image xp"
    )
    two = np.stack([x, 100 + x], axis=1).reshape(1, 2, 4, 4)
    assert np.array_equal(im2col(two, (2, 2))[0], [0, 100, 1, 101, 4, 104, 5, 105]), (
        f"with 2 channels row 0 should be [0, 100, 1, 101, 4, 104, 5, 105]: channels innermost, "
        f"(u, v, c) order; got {im2col(two, (2, 2))[0]}"
    )
    rng = np.random.default_rng(1)

    def check_gemm(x_shape, w_shape, stride, padding):
        """im2col(x) @ the flattened weight, reshaped, equals the definition."""
        (N, C, H, W), (O, _, kh, kw) = x_shape, w_shape
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        cols = im2col(x, (kh, kw), stride=stride, padding=padding)
        OH = conv_output_size(H, kh, stride[0], padding[0])
        OW = conv_output_size(W, kw, stride[1], padding[1])
        assert cols.shape == (N * OH * OW, C * kh * kw), (
            f"x {x_shape}, kernel {(kh, kw)}, stride {stride}, padding {padding}: expected "
            f"{(N * OH * OW, C * kh * kw)}, got {cols.shape}"
        )
        out = (cols @ w.transpose(0, 2, 3, 1).reshape(O, -1).T).reshape(N, OH, OW, O)
        want = slow_conv(x, w, stride=stride, padding=padding)
        assert np.allclose(out.transpose(0, 3, 1, 2), want, atol=1e-5), (
            f"cols @ W_mat.T differs from the definition for x {x_shape}, kernel {(kh, kw)}, "
            f"stride {stride}, padding {padding}: fill cols[:, :, :, u, v] for EVERY offset of "
            "the (kh, kw) kernel"
        )
        assert cols.dtype == np.float32, f"im2col of float32 gave {cols.dtype}"

    check_gemm((2, 3, 6, 5), (4, 3, 3, 2), (2, 1), (1, 0))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_gemm, {
        "a kernel as large as the image": ((1, 1, 3, 3), (2, 1, 3, 3), (1, 1), (0, 0)),
        "a one-by-one kernel": ((3, 2, 5, 4), (3, 2, 1, 1), (1, 1), (0, 0)),
        "a tall kernel with a wide stride and uneven padding": (
            (2, 4, 7, 3), (2, 4, 2, 3), (3, 1), (2, 1)),
        "a batch of one with many channels": ((1, 6, 4, 4), (2, 6, 2, 2), (2, 2), (1, 1)),
    })
    ### END HIDDEN TESTS


test_unit_im2col()


# %% [markdown]
# ## Part 4: col2im, the backward pass of im2col
#
# im2col copies each input pixel into every window that contains it. Its backward pass
# therefore does the reverse: given a gradient for every entry of `cols`, each input pixel
# receives the **sum** of the gradients of all its copies. Where windows overlap (stride
# smaller than the kernel) a pixel collects several contributions; where the stride skips
# pixels they get nothing; padding pixels are cut off at the end.
#
# The same loop over the `kh * kw` kernel offsets does it, with the assignment reversed.
# For offset `(u, v)` the block `cols[:, :, :, u, v]` (after reshaping `cols` to
# `(N, OH, OW, kh, kw, C)`) came from the strided grid `xp[:, u : u + sh*OH : sh, v : v +
# sw*OW : sw]`. Within one offset no two entries come from the same pixel, so one `+=` per
# offset is safe, and the overlaps are summed across offsets:
#
# ```
# dxp = zeros((N, H + 2ph, W + 2pw, C))                    channels last, as in im2col
# for u in range(kh):
#     for v in range(kw):
#         dxp[:, u : u + sh*OH : sh, v : v + sw*OW : sw] += cols[:, :, :, u, v]
# dx  = dxp[:, ph : ph + H, pw : pw + W]  as (N, C, H, W): .transpose(0, 3, 1, 2)
# ```
#
# A loop over pixels would run `N * C * H * W` Python steps; this one runs `kh * kw`.
#
# How do you know it is right? col2im is the **adjoint** (transpose) of im2col: for any `x`
# and any `c` of the right shapes, `sum(im2col(x) * c) == sum(x * col2im(c))`. The test
# checks that identity, and gradcheck checks the whole convolution in Part 5.

# %% nbgrader={"grade": false, "grade_id": "col2im", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def col2im(cols, x_shape, kernel_size, stride=(1, 1), padding=(0, 0)):
    """The adjoint of im2col: (N * OH * OW, kh * kw * C) -> (N, C, H, W), overlaps summed.

    >>> cols = np.ones((4, 4), dtype=np.float32)  # the four 2x2 windows of a 3x3 image
    >>> col2im(cols, (1, 1, 3, 3), (2, 2))[0, 0].tolist()  # windows holding each pixel
    [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
    """
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, padding
    N, C, H, W = x_shape
    OH, OW = _conv_geometry(x_shape, (kh, kw), (sh, sw), (ph, pw), "col2im")
    ### BEGIN SOLUTION
    cols = cols.reshape(N, OH, OW, kh, kw, C)
    dxp = np.zeros((N, H + 2 * ph, W + 2 * pw, C), dtype=cols.dtype)
    for u in range(kh):
        for v in range(kw):
            dxp[:, u:u + sh * OH:sh, v:v + sw * OW:sw] += cols[:, :, :, u, v]
    return dxp[:, ph:ph + H, pw:pw + W].transpose(0, 3, 1, 2)  # (N, C, H, W)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_col2im", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_col2im():
    """col2im counts overlaps, drops padding, and is the adjoint of im2col."""
    ones = np.ones((9, 4), dtype=np.float32)  # 4x4 image, 2x2 kernel, stride 1: 9 windows
    counts = col2im(ones, (1, 1, 4, 4), (2, 2))
    want = np.array([[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]], dtype=np.float32)
    assert counts.shape == (1, 1, 4, 4), (
        f"col2im back to x_shape (1, 1, 4, 4) gave shape {counts.shape}: strip the padding "
        "and transpose the channels-last buffer back to (N, C, H, W)"
    )
    assert np.array_equal(counts[0, 0], want), (
        "col2im of all-ones columns should count how many 2x2 windows cover each pixel "
        f"(corners 1, centre 4), got\n{counts[0, 0]}\nthe overlapping windows must be ADDED "
        "(+=), not overwritten (=)"
    )
    padded = col2im(np.ones((16, 9), dtype=np.float32), (1, 1, 4, 4), (3, 3), padding=(1, 1))
    assert padded.shape == (1, 1, 4, 4) and padded[0, 0, 0, 0] == 4 and padded[0, 0, 1, 1] == 9, (
        f"3x3 windows with padding 1 on a 4x4 image: a corner pixel is in 4 windows and an "
        f"inner pixel in 9, got\n{padded[0, 0] if padded.ndim == 4 else padded}\ncut the "
        "padding off at the end: dxp[:, ph : ph + H, pw : pw + W]"
    )
    rng = np.random.default_rng(2)

    def check_adjoint(shape, k, s, p):
        """sum(im2col(x) * c) == sum(x * col2im(c)) for random x and c."""
        x = rng.standard_normal(shape)
        cols = im2col(x, k, s, p)
        c = rng.standard_normal(cols.shape)
        back = col2im(c, shape, k, s, p)
        assert back.shape == shape, f"col2im should return x's shape {shape}, got {back.shape}"
        lhs, rhs = np.sum(cols * c), np.sum(x * back)
        assert np.isclose(lhs, rhs, rtol=1e-10), (
            f"x {shape}, kernel {k}, stride {s}, padding {p}: sum(im2col(x) * c) = {lhs:.6f} "
            f"but sum(x * col2im(c)) = {rhs:.6f}; they must be equal. Use the same slices as "
            "im2col, u : u + sh*OH : sh and v : v + sw*OW : sw, on the padded buffer (this "
            "identity uses your im2col too: if test_unit_im2col fails, fix it first)"
        )
        return c

    for shape, k, s, p in [((2, 3, 6, 5), (3, 2), (2, 1), (1, 0)),
                           ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1)),
                           ((2, 1, 5, 5), (2, 2), (3, 3), (0, 0))]:
        c = check_adjoint(shape, k, s, p)
    assert col2im(c.astype(np.float32), shape, k, s, p).dtype == np.float32, (
        "col2im of float32 columns should be float32: make the zeros with dtype=cols.dtype"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_adjoint, {
        "one window over the whole image": ((1, 1, 4, 3), (4, 3), (1, 1), (0, 0)),
        "overlapping windows with wide padding": ((2, 2, 5, 6), (3, 3), (1, 2), (2, 1)),
        "a one-by-one kernel on many channels": ((1, 5, 3, 3), (1, 1), (1, 1), (0, 0)),
        "a stride that skips pixels": ((1, 3, 9, 8), (2, 2), (4, 3), (0, 1)),
    })
    ### END HIDDEN TESTS


test_unit_col2im()


# %% [markdown]
# ## Part 5: `Conv2dFunction` and the `Conv2d` layer
#
# Now the operation: `Conv2dFunction.apply(x, weight, bias, stride=..., padding=...)` (or
# without `bias`) on arrays `x (N, C, H, W)`, `weight (O, C, kh, kw)`, `bias (O,)`.
#
# **Forward.** `cols = im2col(x, ...)`, `out = cols @ W_mat.T` (plus `bias`), with
# `W_mat = weight.transpose(0, 2, 3, 1).reshape(O, -1)` in the rows' `(u, v, c)` order.
# The product is `(N * OH * OW, O)`: `out.reshape(N, OH, OW, O).transpose(0, 3, 1, 2)` is
# the NCHW result, a view (channels-last in memory, so the next layer's copies are fast).
# The backward needs `cols` again; instead of recomputing it, `forward` **saves** it: the
# class sets `saves_for_backward = True` and returns `(out, cols)`, and module 01's
# `Function.apply` keeps `cols` in `ctx.saved` (the rule reads it there).
#
# **Backward.** Write `G` for the gradient of the output in the forward product's row
# layout: `grad.transpose(0, 2, 3, 1).reshape(-1, O)`, `(N * OH * OW, O)`. The forward was
# `out_rows = cols @ W_mat.T + bias`, a `Linear` layer whose batch is every output pixel,
# so its rules are module 06's matmul rules:
#
# ```
# d W_mat = G.T @ cols             (O, kh * kw * C) -> (O, kh, kw, C) -> transpose (0, 3, 1, 2)
# d bias  = G.sum(axis=0)          (O,)
# d cols  = G @ W_mat              (N * OH * OW, kh * kw * C)
# d x     = col2im(d cols, x.shape, ...)              your Part 4
# ```
#
# Skip the gradients nobody needs (`ctx.parents[i].requires_grad`): the input image of the
# first layer never requires one, and its `col2im` is the most expensive part of backward.
#
# **The layer.** `Conv2d` holds `weight (O, C, kh, kw)` and `bias (O,)`, initialized as
# PyTorch does: uniform in $(-k, k)$ with $k = 1 / \sqrt{C k_h k_w}$, the fan-in of one
# output pixel (module 03's argument, with `C * kh * kw` inputs per output). Its `forward`
# (given) checks the input with `_conv_geometry` and calls your operation.

# %% nbgrader={"grade": false, "grade_id": "conv-function", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class Conv2dFunction(Function):
    """out = im2col(x) @ W_mat.T + bias, as (N, O, OH, OW)"""

    saves_for_backward = True  # forward returns (out, cols); the rule reads ctx.saved

    @staticmethod
    def forward(x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        O, C, kh, kw = weight.shape
        N = x.shape[0]
        OH, OW = _conv_geometry(x.shape, (kh, kw), stride, padding, "Conv2d", C)
        ### BEGIN SOLUTION
        cols = im2col(x, (kh, kw), stride, padding)  # (N*OH*OW, kh*kw*C)
        w_mat = weight.transpose(0, 2, 3, 1).reshape(O, -1)  # (O, kh*kw*C)
        out = cols @ w_mat.T  # (N*OH*OW, O)
        if bias is not None:
            out += bias
        return out.reshape(N, OH, OW, O).transpose(0, 3, 1, 2), cols  # (N, O, OH, OW)
        ### END SOLUTION


@derivative(Conv2dFunction)
def conv2d_backward(ctx, grad):
    """dW = G^T cols, db = sum G, dx = col2im(G W_mat), with G the gradient as (N*OH*OW, O)"""
    x, weight = ctx.inputs[0], ctx.inputs[1]
    stride, padding = ctx.params["stride"], ctx.params["padding"]
    cols = ctx.saved
    needs = [p.requires_grad for p in ctx.parents]
    O, C, kh, kw = weight.shape
    ### BEGIN SOLUTION
    g = grad.transpose(0, 2, 3, 1).reshape(-1, O)  # (N*OH*OW, O)
    grad_x = grad_w = grad_b = None
    if needs[0]:
        w_mat = weight.transpose(0, 2, 3, 1).reshape(O, -1)  # (O, kh*kw*C)
        grad_x = col2im(g @ w_mat, x.shape, (kh, kw), stride, padding)
    if needs[1]:
        grad_w = (g.T @ cols).reshape(O, kh, kw, C).transpose(0, 3, 1, 2)
    if len(needs) == 3 and needs[2]:
        grad_b = g.sum(axis=0)
    ### END SOLUTION
    return (grad_x, grad_w) if len(needs) == 2 else (grad_x, grad_w, grad_b)


# %% nbgrader={"grade": false, "grade_id": "conv2d", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class Conv2d(Module):
    """2-D convolution over (N, C, H, W) with weight (out_channels, in_channels, kh, kw).

    >>> conv = Conv2d(3, 8, kernel_size=3, padding=1)
    >>> conv
    Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=True)
    >>> conv.weight.shape, conv(Tensor(np.ones((2, 3, 32, 32)))).shape
    ((8, 3, 3, 3), (2, 8, 32, 32))
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        for label, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"Conv2d: {label} must be a positive integer, got {value!r}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding", minimum=0)
        ### BEGIN SOLUTION
        kh, kw = self.kernel_size
        bound = 1.0 / math.sqrt(self.in_channels * kh * kw)
        generator = default_generator()
        shape = (self.out_channels, self.in_channels, kh, kw)
        self.weight = Parameter(generator.uniform(-bound, bound, shape).astype(np.float32))
        if bias:
            bias_values = generator.uniform(-bound, bound, self.out_channels)
            self.bias = Parameter(bias_values.astype(np.float32))
        else:
            self.bias = None
        ### END SOLUTION

    def forward(self, x):
        if not isinstance(x, Tensor):
            x = Tensor(x)
        _conv_geometry(x.shape, self.kernel_size, self.stride, self.padding,
                       f"Conv2d({self.in_channels}, {self.out_channels}, "
                       f"kernel_size={self.kernel_size})", self.in_channels)
        inputs = (x, self.weight) if self.bias is None else (x, self.weight, self.bias)
        return Conv2dFunction.apply(*inputs, stride=self.stride, padding=self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


# %% nbgrader={"grade": true, "grade_id": "test_unit_conv2d_forward", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_conv2d_forward():
    """Conv2d's parameters, init and output match the loop definition, in float32."""
    manual_seed(0)
    layer = Conv2d(3, 4, kernel_size=3, padding=1)
    assert layer.weight.shape == (4, 3, 3, 3) and layer.bias.shape == (4,), (
        f"Conv2d(3, 4, 3) should hold weight (4, 3, 3, 3) and bias (4,), got "
        f"{layer.weight.shape} and {None if layer.bias is None else layer.bias.shape}"
    )
    bound = 1 / math.sqrt(3 * 3 * 3)
    assert np.abs(layer.weight.data).max() <= bound and layer.weight.data.std() > bound / 3, (
        f"weights should be uniform in (-{bound:.3f}, {bound:.3f}): k = 1 / sqrt(in_channels "
        f"* kh * kw), got a largest |w| of {np.abs(layer.weight.data).max():.3f}"
    )
    assert layer.weight.dtype == np.float32, f"the weight is {layer.weight.dtype}, expected float32"
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"], (
        "register the parameters as self.weight and self.bias (PyTorch's names)"
    )
    assert Conv2d(2, 3, (3, 1), bias=False).bias is None, "bias=False should leave self.bias None"
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 5)).astype(np.float32)
    out = layer(Tensor(x))
    assert out.shape == (2, 4, 6, 5), (
        f"Conv2d(3, 4, 3, padding=1) on (2, 3, 6, 5) keeps the size: expected (2, 4, 6, 5), "
        f"got {out.shape}"
    )
    want = slow_conv(x, layer.weight.data, layer.bias.data, padding=1)
    assert np.allclose(out.data, want, atol=1e-5), (
        "Conv2d's output differs from the definition: flatten the weight in the rows' (u, v, c) "
        "order, weight.transpose(0, 2, 3, 1).reshape(O, -1), and bring the (N*OH*OW, O) "
        "product back with .reshape(N, OH, OW, O).transpose(0, 3, 1, 2)"
    )
    assert out.dtype == np.float32, f"Conv2d of float32 gave {out.dtype}"

    def check_layer(layer, x_shape, stride, padding):
        """layer(x) against the definition with the layer's own weight, bias and settings."""
        x = np.random.default_rng(3).standard_normal(x_shape).astype(np.float32)
        got = layer(Tensor(x))
        bias = None if layer.bias is None else layer.bias.data
        want = slow_conv(x, layer.weight.data, bias, stride=stride, padding=padding)
        assert got.shape == want.shape and np.allclose(got.data, want, atol=1e-5), (
            f"{layer!r} on {x_shape} differs from the definition: pass the layer's stride and "
            "padding to Conv2dFunction, and skip the bias when it is None"
        )
        assert got.dtype == np.float32, f"Conv2d of float32 gave {got.dtype}"

    check_layer(Conv2d(3, 2, (3, 2), stride=(2, 1), bias=False), (2, 3, 6, 5), (2, 1), 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_layer, {
        "one input channel, many filters": (Conv2d(1, 6, 2), (3, 1, 4, 4), 1, 0),
        "pair padding and stride": (Conv2d(2, 3, (1, 3), stride=(1, 2), padding=(1, 0)),
                                    (1, 2, 3, 7), (1, 2), (1, 0)),
        "a kernel covering the padded image": (Conv2d(4, 1, 5, padding=1), (2, 4, 3, 3), 1, 1),
    })
    ### END HIDDEN TESTS


test_unit_conv2d_forward()


# %% nbgrader={"grade": true, "grade_id": "test_unit_conv2d_backward", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_conv2d_backward():
    """Every gradient of Conv2dFunction agrees with finite differences (float64), stays float32."""
    rng = np.random.default_rng(4)
    hint = ("Input 0 is x, input 1 the weight, input 2 the bias. "
            "G = grad.transpose(0, 2, 3, 1).reshape(-1, O); dW = G.T @ cols, reshaped to "
            "(O, kh, kw, C) and transposed to (O, C, kh, kw); db = G.sum(axis=0); "
            "dx = col2im(G @ W_mat, x.shape, ...)")

    def check_gradients(shape, wshape, s, p):
        x, w, b = float64_inputs(rng, shape, wshape, wshape[:1])
        explain(f"Conv2d gradients for x {shape}, weight {wshape}, stride {s}, padding {p}",
                lambda: gradcheck(lambda x, w, b: Conv2dFunction.apply(x, w, b, stride=s,
                                                                       padding=p), [x, w, b]),
                f"{hint}. (gradcheck differentiates your forward: if test_unit_conv2d_forward, "
                "test_unit_im2col or test_unit_col2im fails too, fix that first)")

    for shape, wshape, s, p in [((2, 2, 5, 4), (3, 2, 3, 3), (1, 1), (1, 1)),
                                ((1, 3, 6, 6), (2, 3, 3, 2), (2, 1), (0, 1))]:
        check_gradients(shape, wshape, s, p)
    x32 = Tensor(rng.standard_normal((1, 2, 4, 4)).astype(np.float32), requires_grad=True)
    layer = Conv2d(2, 3, 3)
    backward(layer(x32).sum())
    for name, t in (("x", x32), ("weight", layer.weight), ("bias", layer.bias)):
        assert t.grad is not None, f"the gradient of {name} is missing: return (dx, dW, db)"
        assert t.grad.dtype == np.float32, f"the gradient of {name} is {t.grad.dtype}, not float32"
    frozen = Tensor(rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    backward(layer(frozen).sum())  # the input needs no gradient: col2im is skipped
    assert frozen.grad is None, "an input that does not require grad must get no gradient"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_gradients, {
        "a one-by-one kernel": ((2, 3, 3, 2), (2, 3, 1, 1), (1, 1), (0, 0)),
        "a stride that skips pixels, with padding": ((1, 2, 5, 5), (2, 2, 2, 2), (3, 2), (1, 1)),
    })
    ### END HIDDEN TESTS


test_unit_conv2d_backward()


# %% [markdown]
# ## Part 6: pooling and flattening
#
# A **pooling** layer summarizes each window of each channel by one number, with no
# weights: the maximum (max pooling) or the mean (average pooling). A 2x2 window with
# stride 2 halves the height and width, so the next convolution's 3x3 filter sees a 6x6
# patch of the original image, and the exact position of a stroke within each 2x2 block
# stops mattering. `MaxPool2d(kernel_size, stride=None, padding=0)` uses `stride =
# kernel_size` when none is given, as PyTorch does.
#
# The windows are im2col's, one channel at a time, and the same loop over kernel offsets
# computes them without copying any window out: for offset `(u, v)`, `xp[:, :, u : u +
# sh*OH : sh, v : v + sw*OW : sw]` is the `(u, v)` entry of every window, `(N, C, OH, OW)`.
#
# **Max pooling.** Start from `out` full of `-inf` and `arg` (the winning offset `u * kw +
# v` of each window) full of 0, made with `np.full_like` / `np.zeros_like` of that slice
# (they copy its memory order). For each offset, `better = (window > out) |
# np.isnan(window)` (the NaN part is explained below); record the offset where the window is
# better (`arg[better] = u * kw + v`) and keep the larger values (`np.maximum(out, window,
# out=out)`, in place). Return `(out, arg)`: `arg` is saved for backward. The maximum is
# locally equal to the winning pixel and does not depend on the others, so **the whole
# gradient of a window goes to its arg-max**; the other pixels get 0. Padding for max
# pooling is `-inf` (a padded pixel never wins).
#
# **Ties.** When two pixels of a window share the maximum (ReLU outputs make many zeros)
# the derivative does not exist. PyTorch gives the gradient to the first in row-major
# order; the strict `>` keeps the earliest offset, which is the same pixel, so you agree
# with PyTorch (the package tests check it). Module 06's `Max` split ties evenly instead;
# for pooling, first-wins is the convention.
#
# **NaN.** A NaN in a window (a diverged activation) makes the window's maximum NaN:
# `np.maximum` propagates it, as PyTorch does, so the bad value is seen downstream instead of
# being hidden. Its gradient must follow it there. But every comparison with NaN is False,
# so `window > out` alone never records a NaN, nor anything after one, and the gradient of
# `[[1, nan], [0.5, 2]]` would land on the 1. PyTorch's rule is "greater, or NaN": each NaN
# takes the window over, so the last NaN in row-major order gets the gradient. That is the
# `| np.isnan(window)`.
#
# **Backward**, with the offset loop of col2im: for each offset `(u, v)`,
# `dxp[:, :, u : u + sh*OH : sh, v : v + sw*OW : sw] += where(arg == u * kw + v, grad, 0)`.
#
# **Average pooling.** `out` starts at 0, adds the window at each offset, and is divided by
# `kh * kw`. Its derivative sends `grad / (kh * kw)` to every pixel of the window, through
# the same loop. Padding counts as zeros in the mean (PyTorch's default,
# `count_include_pad=True`).
#
# **Flatten** turns `(N, C, H, W)` into `(N, C * H * W)` for the `Linear` layers at the
# end: a `reshape`, whose derivative module 06 already has. It keeps axis 0 (the batch)
# and merges the rest: `x.reshape(x.shape[0], -1)`.

# %% nbgrader={"grade": false, "grade_id": "pooling", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| exporti
class MaxPool2dFunction(Function):
    """the maximum of each (kh, kw) window, per channel"""

    saves_for_backward = True  # forward returns (out, arg): the winner of each window

    @staticmethod
    def forward(x, kernel=(2, 2), stride=(2, 2), padding=(0, 0)):
        (kh, kw), (sh, sw) = kernel, stride
        OH, OW = _conv_geometry(x.shape, kernel, stride, padding, "MaxPool2d")
        xp = _pad(x, padding, fill=-np.inf)  # (N, C, H + 2ph, W + 2pw)
        ### BEGIN SOLUTION
        out = np.full_like(xp[:, :, :sh * OH:sh, :sw * OW:sw], -np.inf)  # (N, C, OH, OW)
        arg = np.zeros_like(out, dtype=np.intp)
        for u in range(kh):
            for v in range(kw):
                window = xp[:, :, u:u + sh * OH:sh, v:v + sw * OW:sw]
                # strict: a tie keeps the earlier offset; a NaN always takes over, as PyTorch
                better = (window > out) | np.isnan(window)
                arg[better] = u * kw + v
                np.maximum(out, window, out=out)
        return out, arg
        ### END SOLUTION


@derivative(MaxPool2dFunction)
def maxpool2d_backward(ctx, grad):
    """the gradient of each window goes to its arg-max; the other pixels get 0"""
    (x,), arg = ctx.inputs, ctx.saved
    (kh, kw), (sh, sw), (ph, pw) = ctx.params["kernel"], ctx.params["stride"], ctx.params["padding"]
    N, C, H, W = x.shape
    OH, OW = grad.shape[2:]
    dxp = _zeros((N, C, H + 2 * ph, W + 2 * pw), grad.dtype)
    ### BEGIN SOLUTION
    zero = grad.dtype.type(0)
    for u in range(kh):
        for v in range(kw):
            dxp[:, :, u:u + sh * OH:sh, v:v + sw * OW:sw] += np.where(arg == u * kw + v, grad, zero)
    ### END SOLUTION
    return (dxp[:, :, ph:ph + H, pw:pw + W],)


class AvgPool2dFunction(Function):
    """the mean of each (kh, kw) window, per channel (padding counts as zeros)"""

    @staticmethod
    def forward(x, kernel=(2, 2), stride=(2, 2), padding=(0, 0)):
        (kh, kw), (sh, sw) = kernel, stride
        OH, OW = _conv_geometry(x.shape, kernel, stride, padding, "AvgPool2d")
        xp = _pad(x, padding, fill=0.0)
        ### BEGIN SOLUTION
        out = np.zeros_like(xp[:, :, :sh * OH:sh, :sw * OW:sw])  # (N, C, OH, OW)
        for u in range(kh):
            for v in range(kw):
                out += xp[:, :, u:u + sh * OH:sh, v:v + sw * OW:sw]
        out /= out.dtype.type(kh * kw)
        return out
        ### END SOLUTION


@derivative(AvgPool2dFunction)
def avgpool2d_backward(ctx, grad):
    """every pixel of a window gets grad / (kh * kw)"""
    (x,) = ctx.inputs
    (kh, kw), (sh, sw), (ph, pw) = ctx.params["kernel"], ctx.params["stride"], ctx.params["padding"]
    N, C, H, W = x.shape
    OH, OW = grad.shape[2:]
    dxp = _zeros((N, C, H + 2 * ph, W + 2 * pw), grad.dtype)
    ### BEGIN SOLUTION
    share = grad / grad.dtype.type(kh * kw)
    for u in range(kh):
        for v in range(kw):
            dxp[:, :, u:u + sh * OH:sh, v:v + sw * OW:sw] += share
    ### END SOLUTION
    return (dxp[:, :, ph:ph + H, pw:pw + W],)


# %% [markdown]
# The layers are given: they check their arguments and call your operations. `Flatten` is
# yours, one line.

# %% nbgrader={"grade": false, "grade_id": "pool-layers", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _pool_args(kernel_size, stride, padding, name):
    kernel = _pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else _pair(stride, "stride")
    padding = _pair(padding, "padding", minimum=0)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ValueError(
            f"{name}: padding {padding} must be at most half the kernel {kernel}; a window "
            "of padding only would have no pixel to pool"
        )
    return kernel, stride, padding


class MaxPool2d(Module):
    """The maximum of each window; stride defaults to kernel_size.

    >>> MaxPool2d(2)(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)))
    Tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = _pool_args(
            kernel_size, stride, padding, "MaxPool2d")

    def forward(self, x):
        x = x if isinstance(x, Tensor) else Tensor(x)
        return MaxPool2dFunction.apply(x, kernel=self.kernel_size, stride=self.stride,
                                       padding=self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean of each window (padding counts as zeros); stride defaults to kernel_size.

    >>> AvgPool2d(2)(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)))
    Tensor([[[[ 2.5,  4.5],
              [10.5, 12.5]]]])
    """

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = _pool_args(
            kernel_size, stride, padding, "AvgPool2d")

    def forward(self, x):
        x = x if isinstance(x, Tensor) else Tensor(x)
        return AvgPool2dFunction.apply(x, kernel=self.kernel_size, stride=self.stride,
                                       padding=self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class Flatten(Module):
    """(N, C, H, W) -> (N, C * H * W): keep the batch axis, merge the rest.

    >>> Flatten()(Tensor(np.ones((2, 3, 4, 4)))).shape
    (2, 48)
    """

    def forward(self, x):
        x = x if isinstance(x, Tensor) else Tensor(x)
        ### BEGIN SOLUTION
        return x.reshape(x.shape[0], -1)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_pooling", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_pooling():
    """Max and average pooling values, and Flatten's shape."""
    x = np.array([[[[1, 2, 5, 0], [3, 4, 1, 1], [0, 0, 9, 8], [0, 7, 8, 9]]]], dtype=np.float32)
    got = MaxPool2d(2)(Tensor(x))
    assert got.shape == (1, 1, 2, 2), (
        f"MaxPool2d(2) on a 4x4 image gives 2x2 (stride defaults to the kernel), got {got.shape}"
    )
    assert np.array_equal(got.data[0, 0], [[4, 5], [7, 9]]), (
        f"MaxPool2d(2) should keep the largest value of each 2x2 block, [[4, 5], [7, 9]], got\n"
        f"{got.data[0, 0]}\nvisit every offset (u, v) of the kernel and keep the larger value"
    )
    avg = AvgPool2d(2)(Tensor(x))
    assert np.allclose(avg.data[0, 0], [[2.5, 1.75], [1.75, 8.5]]), (
        f"AvgPool2d(2) should average each 2x2 block, [[2.5, 1.75], [1.75, 8.5]], got\n"
        f"{avg.data[0, 0]}\nsum the kh * kw offsets, then divide by kh * kw"
    )
    assert avg.dtype == np.float32 and got.dtype == np.float32, "pooling must keep float32"
    padded = MaxPool2d(3, stride=2, padding=1)(Tensor(-np.ones((1, 1, 4, 4), dtype=np.float32)))
    assert padded.shape == (1, 1, 2, 2) and np.all(padded.data == -1), (
        "MaxPool2d with padding on an all -1 image must give -1 everywhere: a padded pixel "
        f"(-inf) never wins, and out starts at -inf, not 0; got {padded.data.ravel()}"
    )

    def check_pool(layer, x, want):
        """layer(x) holds `want` (shape and values) and keeps x's dtype."""
        got = layer(Tensor(x, dtype=x.dtype))
        assert got.shape == np.shape(want) and np.allclose(got.data, want), (
            f"{layer!r} on {x.shape} gave shape {got.shape}, expected {np.shape(want)}; max "
            "keeps each window's largest value, average divides its sum by kh * kw (padding "
            "counts as -inf for max, 0 for average)"
        )
        assert got.dtype == x.dtype, f"{layer!r} turned {x.dtype} into {got.dtype}"

    def check_flat(shape):
        flat = Flatten()(Tensor(np.zeros(shape, dtype=np.float32)))
        want = (shape[0], int(np.prod(shape[1:])))
        assert flat.shape == want, (
            f"Flatten of {shape} should be {want}, got {flat.shape}: keep the batch axis "
            "first and merge the rest, x.reshape(x.shape[0], -1)"
        )

    check_pool(AvgPool2d(2), x, [[[[2.5, 1.75], [1.75, 8.5]]]])
    check_flat((5, 3, 2, 4))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    rng = np.random.default_rng(9001)
    a = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    b = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    c = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    c_pad = np.pad(c, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    c_max = np.array([[[[c_pad[0, 0, i:i + 3, j:j + 3].max() for j in range(4)]
                        for i in range(3)]]])
    hidden_cases(check_pool, {
        "max over a batch of many channels": (MaxPool2d(2), a,
                                              a.reshape(2, 3, 3, 2, 2, 2).max(axis=(3, 5))),
        "average over a rectangular window": (AvgPool2d((3, 2)), b,
                                              b.reshape(1, 2, 2, 3, 2, 2).mean(axis=(3, 5))),
        "max over overlapping padded windows": (MaxPool2d(3, stride=1, padding=1), c, c_max),
        "float64 input": (MaxPool2d(2), a.astype(np.float64),
                          a.reshape(2, 3, 3, 2, 2, 2).max(axis=(3, 5))),
    })
    hidden_cases(check_flat, {"one value per sample": ((3, 1, 1, 1),), "already flat": ((4, 5),)})
    ### END HIDDEN TESTS


test_unit_pooling()


# %% nbgrader={"grade": true, "grade_id": "test_unit_pooling_backward", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_pooling_backward():
    """Max pooling sends each gradient to the first arg-max; both rules pass gradcheck."""
    x = np.array([[[[1, 2, 5, 0], [3, 4, 1, 5], [0, 0, 9, 8], [0, 0, 8, 9]]]], dtype=np.float32)
    t = Tensor(x, requires_grad=True)
    out = MaxPool2d(2)(t)
    backward(out, np.array([[[[10, 20], [30, 40]]]], dtype=np.float32))
    want = np.array([[0, 0, 20, 0], [0, 10, 0, 0], [30, 0, 40, 0], [0, 0, 0, 0]], dtype=np.float32)
    assert t.grad is not None and np.array_equal(t.grad.data[0, 0], want), (
        "the gradient of each window should go to its maximum only; in a tie (the two 5s, "
        "the zeros and the two 9s) to the FIRST in row-major order, as PyTorch does: compare "
        f"with a strict >. Expected\n{want}\ngot\n{None if t.grad is None else t.grad.data[0, 0]}"
    )
    assert t.grad.dtype == np.float32, f"the max-pool gradient is {t.grad.dtype}, not float32"
    rng = np.random.default_rng(5)

    def check_pool_gradient(layer, shape):
        x = float64_inputs(rng, shape)
        explain(f"{layer!r} on {shape}", lambda: gradcheck(layer, [x]),
                "Add each offset (u, v) into dxp[:, :, u : u + sh*OH : sh, v : v + sw*OW : sw] "
                "(+=: windows may overlap)")

    for layer in (MaxPool2d(2), MaxPool2d(3, stride=2, padding=1), AvgPool2d(2),
                  AvgPool2d(3, stride=1, padding=1)):
        check_pool_gradient(layer, (2, 2, 5, 6))
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_pool_gradient, {
        "max over rectangular overlapping windows": (MaxPool2d((2, 3), stride=(1, 2)),
                                                     (1, 3, 4, 7)),
        "average over windows one pixel apart": (AvgPool2d(2, stride=1), (1, 2, 4, 5)),
        "max over one window per image": (MaxPool2d(4), (3, 1, 4, 4)),
    })
    ### END HIDDEN TESTS


test_unit_pooling_backward()


# %% [markdown]
# ### Test: a small CNN learns, and bad input is explained
#
# A LeNet-style stack: convolution, ReLU, pooling, twice, then `Flatten` and `Linear`
# layers. A few steps of gradient descent on random data must lower the loss, which needs
# every gradient of the stack to be right and to reach every parameter.

# %% nbgrader={"grade": true, "grade_id": "test_unit_cnn", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_cnn():
    """A small CNN's loss falls under gradient descent; bad input raises clear errors."""
    manual_seed(1)
    model = Sequential(Conv2d(1, 4, 3, padding=1), ReLU(), MaxPool2d(2),
                       Conv2d(4, 8, 3, padding=1), ReLU(), AvgPool2d(2), Flatten(), Linear(32, 3))
    rng = np.random.default_rng(6)
    x = Tensor(rng.standard_normal((6, 1, 8, 8)).astype(np.float32))
    y = rng.standard_normal((6, 3)).astype(np.float32)
    losses = []
    for _ in range(30):
        loss = ((model(x) - Tensor(y)) ** 2).mean()
        losses.append(loss.item())
        model.zero_grad()
        backward(loss)
        for p in model.parameters():
            assert p.grad is not None, "a parameter of the CNN received no gradient"
            p.data -= np.float32(0.1) * p.grad.data
    assert losses[-1] < 0.6 * losses[0], (
        f"30 steps of gradient descent should lower the loss by 40%, went from {losses[0]:.4f} "
        f"to {losses[-1]:.4f}: a gradient of the stack is wrong; the conv and pooling tests "
        "above name the part"
    )

    def check_refused(layer, bad, words):
        try:
            layer(Tensor(bad.astype(np.float32)))
        except ValueError as error:
            assert all(w in str(error) for w in words), (
                f"the error for an input of shape {bad.shape} should name {words}: {error}"
            )
        else:
            raise AssertionError(f"{layer!r} on shape {bad.shape} must raise ShapeError")

    layer = Conv2d(3, 4, 3)
    for bad, words in [(np.zeros((3, 8, 8)), ["(3, 8, 8)", "4-D"]),
                       (np.zeros((2, 1, 8, 8)), ["(2, 1, 8, 8)", "in_channels=3"]),
                       (np.zeros((1, 3, 2, 2)), ["(1, 3, 2, 2)", "3x3"])]:
        check_refused(layer, bad, words)
    try:
        Conv2d(1, 1, 3, stride=0)
    except ValueError as error:
        assert "stride" in str(error), f"the error for stride=0 should name the stride: {error}"
    else:
        raise AssertionError("Conv2d(1, 1, 3, stride=0) must raise ValueError")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    wide = Conv2d(5, 2, (2, 4))
    hidden_cases(check_refused, {
        "a five-axis input": (wide, np.zeros((1, 1, 5, 4, 4)), ["(1, 1, 5, 4, 4)", "4-D"]),
        "too few channels": (wide, np.zeros((1, 4, 6, 6)), ["(1, 4, 6, 6)", "in_channels=5"]),
        "an image narrower than the kernel": (wide, np.zeros((2, 5, 6, 3)),
                                              ["(2, 5, 6, 3)", "2x4"]),
    })
    ### END HIDDEN TESTS


test_unit_cnn()


# %% [markdown]
# ## Systems analysis: loops against im2col, im2col's memory, CNN against MLP
#
# **The definition against one GEMM.** Both compute the same numbers; the loop pays the
# interpreter and a small `tensordot` per output pixel, im2col pays one copy and one large
# matrix product.

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def best_time(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loop_vs_im2col(N=16, C=16, H=16, O=32, k=3):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w = rng.standard_normal((O, C, k, k)).astype(np.float32)
    b = np.zeros(O, dtype=np.float32)
    pad = (k // 2, k // 2)
    fast = Conv2dFunction.forward(x, w, b, stride=(1, 1), padding=pad)[0]
    assert np.allclose(fast, conv2d_loop(x, w, b, padding=k // 2), atol=1e-3), (
        "im2col + GEMM and conv2d_loop disagree: the graded tests above say which is wrong")
    loop_s = best_time(lambda: conv2d_loop(x, w, b, padding=k // 2), repeat=2)
    gemm_s = best_time(lambda: Conv2dFunction.forward(x, w, b, stride=(1, 1), padding=pad))
    flops = 2 * N * O * H * H * C * k * k
    print(f"conv {k}x{k}, x {x.shape} -> {fast.shape}: loops {loop_s * 1e3:.1f} ms "
          f"({flops / loop_s / 1e9:.1f} GFLOP/s), im2col + GEMM {gemm_s * 1e3:.2f} ms "
          f"({flops / gemm_s / 1e9:.1f} GFLOP/s): {loop_s / gemm_s:.0f}x faster")


loop_vs_im2col()

# %% [markdown]
# The loop over 256 output positions is not hopeless (each step is a vectorized
# `tensordot` over the whole batch), but each call is a small matrix product BLAS cannot
# run at full speed, plus the interpreter's overhead per call. im2col does the same
# arithmetic in one call. Frameworks used exactly this for years (Caffe, early PyTorch on
# CPU), and on GPUs cuDNN still often picks an implicit-GEMM algorithm: im2col without
# writing the matrix out.
#
# **The price: memory.** im2col writes every window out. With stride 1 and "same" padding
# each pixel is copied into `kh * kw` rows:

# %% nbgrader={"grade": false, "grade_id": "analysis-memory", "locked": false, "schema_version": 3, "solution": false, "task": false}
def im2col_memory(N=64, C=16, H=8):
    x = np.zeros((N, C, H, H), dtype=np.float32)
    for k in (1, 3, 5):
        for s in (1, 2):
            cols = im2col(x, (k, k), (s, s), (k // 2, k // 2))
            print(f"x {x.shape} ({x.nbytes / 2**10:.0f} KiB), kernel {k}x{k}, stride {s}: "
                  f"cols {cols.shape} {cols.nbytes / 2**10:.0f} KiB = "
                  f"{cols.nbytes / x.nbytes:.1f}x the input")


im2col_memory()

# %% [markdown]
# A 3x3 kernel multiplies the memory by about 9 (a little less at the borders, where
# padding rows are not counted in the input), a 5x5 by 25; a stride of 2 divides it by 4.
# The backward pass keeps `cols` of every layer alive until it runs (that is what `ctx.saved`
# holds), so a deep CNN on large images spends most of its training memory there. On the
# 8x8 digits it is a few hundred KiB per batch, nothing.
#
# **CNN against MLP.** The milestone `cnn_digits` trains the LeNet-style CNN below on the
# same 8x8 digits and split as `mlp_digits`'s MLP. Count their parameters and the
# floating-point operations of one forward pass of one image (a multiply-add is 2 FLOPs; a
# convolution does `C * kh * kw` multiply-adds per output value, a `Linear` layer
# `in_features`; activations and pooling are a few percent and left out).

# %% nbgrader={"grade": false, "grade_id": "analysis-cnn-mlp", "locked": false, "schema_version": 3, "solution": false, "task": false}
def forward_flops(model, shape):
    """FLOPs of the Conv2d and Linear layers for one input of `shape`, by running it."""
    total = 0
    x = Tensor(np.zeros((1,) + shape, dtype=np.float32))
    for layer in model:
        y = layer(x)
        if isinstance(layer, Conv2d):
            total += 2 * y.size * layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
        elif isinstance(layer, Linear):
            total += 2 * y.size * layer.in_features
        x = y
    return total


def cnn_vs_mlp():
    manual_seed(0)
    mlp = Sequential(Linear(64, 128), ReLU(), Linear(128, 64), ReLU(), Linear(64, 10))
    cnn = Sequential(Conv2d(1, 16, 3, padding=1), ReLU(), MaxPool2d(2),
                     Conv2d(16, 32, 3, padding=1), ReLU(), MaxPool2d(2),
                     Flatten(), Dropout(0.3), Linear(32 * 2 * 2, 64), ReLU(), Linear(64, 10))
    rows = [("MLP 64-128-64-10", mlp, (64,)), ("CNN (milestone)", cnn, (1, 8, 8))]
    for name, model, shape in rows:
        print(f"{name:18s} {model.num_parameters():7,} parameters, "
              f"{forward_flops(model, shape) / 1e3:6.1f} kFLOP per image")


cnn_vs_mlp()

# %% [markdown]
# The CNN has **fewer parameters** than the MLP (its convolutions share 9-weight filters
# over every position) but does **several times more arithmetic** per image: each filter
# weight is used at every position. That is the trade of convolutional networks: weights
# are cheap to store and the prior (local, position-independent features) makes them
# learn from less data, while the FLOPs grow with the image area.
#
# And accuracy? Measured on the course's machine (seed 0, the same 359 held-out images):
#
# | model (command) | training images | parameters | kFLOP/image | held-out |
# | --- | --- | ---: | ---: | ---: |
# | MLP (`tito milestone run mlp_digits`) | the 1,438 | 17,226 | 34 | 98.3% |
# | CNN (40 epochs, dropout 0.3, cosine) | the 1,438 | 13,706 | 184 | 98.3% |
# | CNN (`tito milestone run cnn_digits`) | + 1-pixel shifts | 13,706 | 184 | 99.2% |
# | MLP (`... cnn_digits --model mlp`) | + 1-pixel shifts | 17,226 | 34 | 97.2% |
#
# On 8x8 digits the architecture alone buys no accuracy: both reach 98.3%. What the CNN
# can use is the knowledge that a digit moved by one pixel is the same digit. Shifted
# copies of the training images help it (99.2%) and hurt the MLP (97.2%): for the MLP, a
# shift sends every stroke to different input weights, a new pattern to memorize; for the
# CNN it is the same strokes, seen by the same filters, in another place. On larger images
# (28x28 MNIST, 32x32 CIFAR) the gap widens in the CNN's favour in accuracy and in
# parameters: an MLP's first layer grows with the number of pixels, a convolution's does
# not. The FLOPs, though, grow with the image area for the CNN too: the next modules'
# attention pays the same kind of price, per pair of tokens.
#
# ## What comes next
#
# - **Milestone `cnn_digits`** (`tito milestone run cnn_digits --plot cnn.png`) trains this
#   CNN with your package, and draws its learned first-layer filters and its confusion
#   matrix.
# - **Module 10 (tokenization)** turns from images to text; the sequence models of modules
#   11-13 replace the convolution's fixed window by attention, which chooses where to look.
# - **Module 14 (profiling)** measures where the time of your models goes, including the
#   im2col copies of this module.
