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
# # Module 17: Acceleration
#
# ## Overview
#
# A TinyGPT training step does about 4 GFLOP of arithmetic, and NumPy's BLAS runs matrix
# products at close to 200 GFLOP/s on two cores: about 21 ms of work. Your step takes two to
# three times that. Module 14's profiler told you where the rest goes: element-wise passes
# over wide arrays (GELU, softmax, layer norm), temporaries that are allocated, page-faulted
# in and freed on every step, work done twice (attention recomputes its probabilities in
# backward), small matrix products, and the Python around every operation.
#
# This module wins that time back, one measured change at a time, without making the earlier
# lessons harder to read. Modules 02, 06, 12 and 13 stay textbook code. The fast versions
# live here and plug into your framework through two documented tables: module 06's
# `DERIVATIVES` (which rule differentiates an operation) and module 01's `KERNELS` (which
# `Function` runs when any lesson applies an operation: `Function.apply` looks every
# operation up there first). Nothing assigns attributes onto another module's classes:
# you can always read off the tables what runs, and switch every fast kernel off again with
# `use_fast_kernels(False)` to measure what it bought.
#
# It goes in two stages. Parts 1 to 9 take every win NumPy allows: fewer temporaries,
# in-place updates, BLAS where a reduction was, keeping instead of recomputing. Then NumPy
# itself is the limit: each of its calls is a full pass over memory, on one core, and no
# arrangement of calls fuses five passes into one. Parts 10 to 12 compile the loops with
# numba: a layer norm, an attention softmax, GELU, cross-entropy and AdamW that each make
# one pass and use every core; and quantized weights (module 15) that are read as the small
# integers they are, which is what finally makes them decode faster than float32.
#
# ## Learning objectives
#
# - Measure what vectorization buys: a Python loop against one NumPy call.
# - Read an array's strides; know which views copy when made contiguous, and what a
#   transposed operand costs.
# - Control BLAS's threads at run time and measure small and large products with 1 and 2.
# - Explain why freed temporaries cost page faults, and keep them mapped with `mallopt`.
# - Write in-place and fused kernels (GELU's backward, softmax-cross-entropy's backward,
#   attention that keeps its probabilities, an AdamW update without temporaries), each
#   checked against the plain one by value and by central differences.
# - Measure the trade of keeping against recomputing: milliseconds against bytes.
# - Swap an operation's forward without touching the lesson that applies it, through the
#   kernel table that `Function.apply` reads.
# - Count the memory passes of a NumPy computation, and write the compiled loop that makes
#   one: numba's types, `prange` and the size below which threads do not pay, compile time
#   and its cache, the fast-math flags that keep infinities.
# - Compute `exp` from operations that vectorize, and check a compiled kernel in ulps, against
#   the plain operation and by float64 central differences.
# - Explain, with the bytes, why int8 weights are slower than float32 in NumPy and faster in
#   a compiled kernel.
#
# ## What you build
#
# - `gelu_backward_inplace(ctx, grad)`: the tanh-GELU derivative in three arrays.
# - `cross_entropy_backward_inplace(ctx, grad)`: softmax minus one-hot, in one buffer.
# - `row_sums(a)` and `AttentionKeepFunction`: attention whose forward keeps the
#   probabilities, so its backward does not recompute them.
# - `FusedAdamW`: AdamW's update with no temporaries, state for state the same optimizer.
# - Compiled: `layer_norm_rows` and `layer_norm_rows_backward` (layer norm, one pass per
#   row), `softmax_rows` and `softmax_rows_backward` (attention's masked softmax and its
#   gradient), `int8_matmul_rows` and `int4_matmul_rows` (int8 and packed int4 weights
#   times a few rows, read as bytes, four weight rows at a time).
# - Given: `set_blas_threads(n)`, `blas_threads()`, `quiet_blas_threads()`,
#   `keep_freed_memory()`; three more NumPy kernels to read, `GELUTanhKernel`,
#   `LayerNormKernel` and `add_backward_bias_blas`;
#   `compiled`, `chunks`, `set_threads`, `fast_exp` and `int4_halves`; the compiled GELU,
#   cross-entropy, `CompiledAdamW`, RMSNorm, rotary and SiLU kernels and the `Function`
#   around each;
#   `MatMulRowsCompiled` (a few float32 rows through your int8 kernel); the tables
#   `FAST_KERNELS` and `COMPILED_KERNELS`, `use_fast_kernels(on, compiled)`,
#   `fast_kernels(on, compiled)` and `active_kernels()`.
#
# ## What you are not building yet
#
# - **Compiled matrix products.** BLAS stays the tool for products of two float32 matrices:
#   it runs them near the processor's peak, and a loop written here would not. What is
#   compiled is everything around the products.
# - **A GPU.** Another course; the ideas (fused kernels, memory passes, keep or recompute)
#   carry over unchanged.
# - **Flash attention's tiling.** You keep or recompute the whole `(T, T)` matrix; tiling it
#   so that it never exists at once matters at long contexts, not at 64.
# - **Benchmark statistics.** Module 19 builds the harness (repeats, confidence intervals,
#   paired runs) that turns these measurements into claims.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp perf.acceleration
#| export
import contextlib
import ctypes
import functools
import glob
import importlib.metadata
import math
import os
import sys

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from tinytorch.core.activations import GELUFunction, SiLUFunction
from tinytorch.core.attention import AttentionFunction, _attention_input_grads, _attention_probs
from tinytorch.core.autograd import DERIVATIVES, KERNELS, derivative, matmul_backward
from tinytorch.core.autograd import gelu_backward as plain_gelu_backward
from tinytorch.core.embeddings import RotaryFunction, rotary_backward
from tinytorch.core.losses import CrossEntropyFunction
from tinytorch.core.optimizers import AdamW, _grad_array
from tinytorch.core.tensor import Add, MatMul
from tinytorch.models.transformer import LayerNormFunction, RMSNormFunction
from tinytorch.perf.quantization import QuantizedMatMul, quantized_matmul_backward

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import time
import tracemalloc

from tinytorch.core.activations import gelu
from tinytorch.core.attention import scaled_dot_product_attention
from tinytorch.core.autograd import gradcheck
from tinytorch.core.losses import cross_entropy
from tinytorch.core.tensor import Tensor, manual_seed
from tinytorch.testing import best_time
from tinytorch.models.transformer import GPT, GPTConfig, layer_norm, layer_norm_composed
from tinytorch.perf.quantization import (dequantize_int4, dequantize_int8, quantize_int4,
                                         quantize_int8)


def rng(seed=0):
    return np.random.default_rng(seed)


def f32(*shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


# %% [markdown]
# ## Part 1: vectorization
#
# A Python loop pays the interpreter for every element: fetch a float object, multiply, box
# the result, around 50 ns each. One NumPy call pays that once and then runs a C loop over
# the whole array, often with SIMD instructions that do 8 float32 multiplications at once.
# The cell below measures a dot product of 100,000 numbers both ways. The ratio is why every
# lesson of this course works on whole arrays, and why a framework's speed is set by how
# many NumPy calls a step makes and how large they are, not by Python code around them.

# %% nbgrader={"grade": false, "grade_id": "demo-vectorize", "locked": false, "schema_version": 3, "solution": false, "task": false}
def vectorization_report(n=100_000):
    a, b = f32(n, seed=1), f32(n, seed=2)
    xs, ys = a.tolist(), b.tolist()

    def loop():
        total = 0.0
        for x, y in zip(xs, ys):
            total += x * y
        return total

    slow = best_time(loop, repeat=3)
    fast = best_time(lambda: np.dot(a, b), repeat=20)
    print(f"dot of {n:,} float32: Python loop {slow * 1e3:.2f} ms, np.dot {fast * 1e6:.1f} us "
          f"({slow / fast:,.0f}x)")
    return slow / fast


vectorization_report()

# %% [markdown]
# ## Part 2: memory layout
#
# A NumPy array is a pointer, a shape and **strides**: how many bytes to step for one move
# along each axis. A C-ordered `(B, T, C)` float32 array has strides `(T*C*4, C*4, 4)`: the
# last axis is contiguous. `a.T`, `a.swapaxes(1, 2)`, `a.permute(...)` and slicing make
# views: new strides over the same bytes, free. The bill comes later, when something needs
# contiguous memory (`reshape` of a permuted array copies; so does `np.ascontiguousarray`),
# or when a loop walks memory against the grain: summing columns of a C-ordered matrix reads
# every cache line for one float of it. BLAS takes a transposed operand for free (it has a
# flag for it), which is why `x @ W.T` in `Linear` costs nothing extra. The attention heads'
# `permute` followed by `reshape`, on the other hand, is a real copy every time.

# %% nbgrader={"grade": false, "grade_id": "demo-layout", "locked": false, "schema_version": 3, "solution": false, "task": false}
def layout_report(B=12, T=64, H=4, D=32):
    a = f32(B, T, H, D)
    heads = a.transpose(0, 2, 1, 3)  # (B, H, T, D): a view
    print(f"(B, T, H, D) strides {a.strides}; permuted to (B, H, T, D): strides "
          f"{heads.strides}, contiguous: {heads.flags['C_CONTIGUOUS']}, same memory: "
          f"{np.shares_memory(a, heads)}")
    view = best_time(lambda: a.transpose(0, 2, 1, 3), repeat=20)
    copy = best_time(lambda: np.ascontiguousarray(heads), repeat=20)
    print(f"making the view: {view * 1e6:.1f} us; making it contiguous (a copy of "
          f"{a.nbytes / 2**20:.1f} MiB): {copy * 1e6:.0f} us")
    m = f32(1024, 1024)
    rows = best_time(lambda: m.sum(axis=1), repeat=10)
    cols = best_time(lambda: m.T.copy().sum(axis=1), repeat=10)
    print(f"row sums of a 1024x1024 float32: {rows * 1e6:.0f} us; column sums through a "
          f"transposed copy: {cols * 1e6:.0f} us")
    w = f32(384, 128, seed=1)
    x = f32(768, 128, seed=2)
    free = best_time(lambda: x @ w.T, repeat=20)
    fresh = best_time(lambda: x @ np.ascontiguousarray(w.T), repeat=20)
    print(f"x @ W.T with the transposed view: {free * 1e6:.0f} us; copying W.T first: "
          f"{fresh * 1e6:.0f} us (BLAS reads a transposed operand as it is)")


layout_report()

# %% [markdown]
# ## Part 3: BLAS and its threads
#
# NumPy hands matrix products to OpenBLAS, which splits a large product over all cores. For
# a small one, waking the threads costs more than it saves, and on a machine shared with
# other work a second thread may wait for a core. The count can be set before NumPy loads
# (`OPENBLAS_NUM_THREADS=1`) or at run time through OpenBLAS's own function, which the given
# `set_blas_threads(n)` finds in the library NumPy already loaded. Measure your machine:
# the answer depends on the product's size and on who else is running.

# %% nbgrader={"grade": false, "grade_id": "blas-threads", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                 "openblas_set_num_threads")
_BLAS_GETTERS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                 "openblas_get_num_threads")


def _openblas_function(names):
    """The first of `names` exported by the OpenBLAS that NumPy loaded, or None."""
    folder = os.path.dirname(np.__file__) + ".libs"  # where NumPy's wheels keep it
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*.so*"))):
        lib = ctypes.CDLL(path)  # already loaded by NumPy: the same library instance
        for name in names:
            function = getattr(lib, name, None)
            if function is not None:
                return function
    return None


def set_blas_threads(n):
    """Use n threads in NumPy's BLAS from now on. True if done, False if no OpenBLAS found.

    Only the OpenBLAS bundled with NumPy's wheels is found; with another BLAS, set
    OPENBLAS_NUM_THREADS / MKL_NUM_THREADS / OMP_NUM_THREADS before starting Python.

    >>> before = blas_threads()
    >>> set_blas_threads(1), blas_threads()
    (True, 1)
    >>> _ = set_blas_threads(before)  # as it was
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"set_blas_threads(n): n must be a positive integer, got {n!r}")
    setter = _openblas_function(_BLAS_SETTERS)
    if setter is None:
        return False
    setter.argtypes, setter.restype = (ctypes.c_int,), None
    setter(int(n))
    return True


def blas_threads():
    """How many threads NumPy's OpenBLAS uses now, or None if it cannot be asked.

    >>> blas_threads() >= 1  # NumPy's wheels bundle OpenBLAS
    True
    """
    getter = _openblas_function(_BLAS_GETTERS)
    if getter is None:
        return None
    getter.restype = ctypes.c_int
    return int(getter())


QUIET_TIMEOUT = 4  # OPENBLAS_THREAD_TIMEOUT: idle threads spin 2^4 clock cycles, then sleep


def quiet_blas_threads():
    """Make NumPy's OpenBLAS put its idle threads to sleep at once, instead of letting them
    spin for about 0.1 s (2^28 clock cycles, its default) after each product. True if its
    threads now sleep at once; False if no OpenBLAS was found, or if you set
    OPENBLAS_THREAD_TIMEOUT yourself (yours is kept: OpenBLAS read it as it loaded).

    >>> quiet_blas_threads()  # NumPy's wheels bundle OpenBLAS
    True
    >>> os.environ["OPENBLAS_THREAD_TIMEOUT"]  # children inherit it, and read it on loading
    '4'
    """
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:  # set before OpenBLAS loaded: it has it
        return os.environ["OPENBLAS_THREAD_TIMEOUT"] == str(QUIET_TIMEOUT)
    read_env = _openblas_function(("openblas_read_env",))
    shutdown = _openblas_function(("blas_thread_shutdown_",))
    if read_env is None or shutdown is None:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(QUIET_TIMEOUT)
    read_env()  # OpenBLAS reads its environment variables again, this one among them
    shutdown()  # and stops its threads: the next product starts them with the short wait
    return True


# %% nbgrader={"grade": false, "grade_id": "demo-threads", "locked": false, "schema_version": 3, "solution": false, "task": false}
def threads_report():
    before = blas_threads()
    if before is None:
        print("this NumPy's BLAS is not the bundled OpenBLAS: thread control skipped")
        return
    shapes = {"small (64x32)@(32x64)": (f32(64, 32), f32(32, 64)),
              "large (768x128)@(128x512)": (f32(768, 128), f32(128, 512))}
    counts = sorted({1, max(1, os.cpu_count() or 1)})
    try:
        for label, (a, b) in shapes.items():
            flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
            parts = []
            for n in counts:
                set_blas_threads(n)
                t = best_time(lambda: a @ b, repeat=20)
                parts.append(f"{n} thread(s) {t * 1e6:.0f} us ({flops / t / 1e9:.0f} GFLOP/s)")
            print(f"{label}: " + ", ".join(parts))
    finally:
        set_blas_threads(before)


threads_report()

# %% [markdown]
# ### BLAS's threads do not go to sleep
#
# After a product, OpenBLAS's threads do not sleep: each spins, asking "more work?", for
# about 0.1 s (2^28 clock cycles), to start the next product a few microseconds sooner. With
# NumPy alone the other cores are idle anyway, so it costs nothing. It costs a great deal
# once a second pool runs between the products, as module 17's compiled kernels will: on
# a two-core machine the spinning thread holds the core the kernel's second thread needs.
# The cell below shows the spin: the process sleeps 50 ms right after a product and
# counts the CPU time it used meanwhile, before and after `quiet_blas_threads()`.
#
# OpenBLAS reads how long to spin, `OPENBLAS_THREAD_TIMEOUT` (2^n cycles, n from 4 to 30),
# when it loads, which is when NumPy is imported. `quiet_blas_threads()` (given above) sets
# it to 4, asks OpenBLAS to read its environment again, and stops its threads; the next
# product starts them anew, and they sleep as soon as their work is done. The price is
# waking them for every product. Which wins depends on the machine, so measure before you
# choose. On the course's two-core virtual machine (an AMD EPYC with AVX2), in TinyGPT's
# training step with every compiled kernel of this module, two threads:
#
# - the spin does starve the kernels: inside the step, the compiled GELU took 3.1 ms a
#   step on two threads, as long as on one (3.3 ms), and 2.0 ms with the threads quiet;
# - but the whole step went both ways. Medians of alternated processes, OpenBLAS's spin
#   (`OPENBLAS_THREAD_TIMEOUT=28`) against quiet threads: 86.3 against 78.6 ms and 89.3
#   against 80.4 (four each), 96.2 against 117.2 and 91.4 against 87.2 (six each). The
#   spinning processes took 81-120 ms; the quiet ones fell in two groups, 12 of 20 at
#   75-89 ms and 7 at 110-197 ms (one at 93), perhaps because on a virtual machine a
#   virtual CPU that sleeps can be slow to wake (not measured).
#
# So the module does not call it for you. `OPENBLAS_THREAD_TIMEOUT=4` set before starting
# Python does the same for a whole run, and a value you set yourself is kept.

# %% nbgrader={"grade": false, "grade_id": "demo-blas-spin", "locked": false, "schema_version": 3, "solution": false, "task": false}
def spin_report():
    if blas_threads() is None or blas_threads() < 2:
        print("one BLAS thread here (or not OpenBLAS): no thread is left spinning")
        return
    a = f32(512, 512)

    def cpu_while_asleep():  # ms of CPU this process uses in a 50 ms sleep after a product
        a @ a
        start = time.process_time()
        time.sleep(0.05)
        return (time.process_time() - start) * 1e3

    def setting():
        return f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset')}"

    print(f"CPU time in a 50 ms sleep right after a product, {setting()}: "
          f"{cpu_while_asleep():.1f} ms")
    quiet_blas_threads()
    print(f"after quiet_blas_threads(), {setting()}: {cpu_while_asleep():.1f} ms (this "
          "notebook's BLAS threads now sleep at once, to its end)")


spin_report()

# %% [markdown]
# ### Why the element-wise work stays on one core
#
# BLAS is the only part of a step that uses the second core. GELU, layer norm, softmax and
# attention's small per-head products run on one (BLAS runs a small product on one thread
# too). PyTorch runs those kernels on both cores as well, and that is most of its lead on
# two cores. Can Python threads do the same for NumPy? NumPy lets go of Python's global
# interpreter lock (the GIL) while a ufunc's loop or a BLAS call runs, so two threads that
# each call NumPy on half of an array do run at the same time. The cell below measures it:
# a helper thread waits on a lock, takes the second half of a chain of ufuncs, and hands
# back.

# %% nbgrader={"grade": false, "grade_id": "demo-helper-thread", "locked": false, "schema_version": 3, "solution": false, "task": false}
def helper_thread_report(rows=768, cols=512):
    import threading

    x, out = f32(rows, cols), np.empty((rows, cols), np.float32)

    def chain(lo, hi):  # GELU's passes over rows lo:hi, written into out
        o, a = out[lo:hi], x[lo:hi]
        np.multiply(a, a, out=o)
        o *= a
        o *= 0.044715
        o += a
        np.tanh(o, out=o)
        o += 1.0
        o *= a

    go, done = threading.Lock(), threading.Lock()
    go.acquire()
    done.acquire()
    job = {}

    def helper():
        while True:
            go.acquire()  # sleeps until there is work
            if job.get("stop"):
                return
            job["task"]()
            done.release()

    threading.Thread(target=helper, daemon=True).start()

    def both(first, second):
        job["task"] = second
        go.release()  # wake the helper with the second half
        first()  # the first half here, meanwhile
        done.acquire()  # wait for the helper's half

    half = rows // 2
    one = best_time(lambda: chain(0, rows), repeat=20)
    two = best_time(lambda: both(lambda: chain(0, half), lambda: chain(half, rows)), repeat=20)
    hand = best_time(lambda: both(lambda: None, lambda: None), repeat=50)
    job["stop"] = True
    go.release()
    print(f"7 ufuncs over ({rows}, {cols}): one thread {one * 1e6:.0f} us, two threads "
          f"{two * 1e6:.0f} us ({one / two:.2f}x); an empty hand-over {hand * 1e6:.0f} us")


if (os.cpu_count() or 1) >= 2:
    helper_thread_report()

# %% [markdown]
# On two cores this shows a real gain: 1.6-1.8x when this lesson was written, with an
# empty hand-over, there and back, of 25-65 microseconds. Inside a training step it does
# not survive. We built it into the kernels and measured (TinyGPT's step, two cores,
# separate processes, several rounds):
#
# - **The step needs many hand-overs.** Splitting every GELU, layer norm, attention and
#   matrix product made 68 per step. Between them the second core sat idle, and the
#   operating system put it to sleep. Each hand-over then took about 80 microseconds
#   (median): 45 to wake the helper, 35 to wake the caller back.
# - **Two thread pools fight.** OpenBLAS's threads keep spinning for a while after each
#   product, holding the second core just when the helper wants it. So BLAS had to go to
#   one thread and the helper split the products instead: in the step, 15% slower than
#   OpenBLAS's own split of the same products.
# - **The result:** attention got about 2 ms faster and GELU up to 1 ms, layer norm 1 ms
#   slower and the products 3.5 ms slower. Over four variants (everything split; all but
#   layer norm; only attention and GELU, with BLAS on one thread or on two) the whole step
#   came out between 3% faster and 13% slower, never a gain outside the noise.
#
# PyTorch's thread pool (OpenMP) *spins* between kernels, so its threads are awake when the
# next kernel comes. A Python thread cannot wait that way: spinning in Python holds the GIL
# that the main thread needs.
#
# So Parts 5 to 9 make each NumPy pass cheaper on one core instead, and two threads stay
# BLAS's. What that leaves on the table is PyTorch's second core for the element-wise work.
# Parts 10 to 12 take it back the way PyTorch does: compiled loops whose rows numba splits
# among its own threads, with no GIL in the way. Part 10 says which pool runs those threads
# and why: one whose idle threads neither spin against BLAS nor take long to wake.

# %% [markdown]
# ## Part 4: allocation reuse
#
# Every NumPy temporary is a `malloc`. glibc serves a large request (above about 128 KiB at
# first) with a fresh `mmap` from the kernel and returns it with `munmap` when freed; and it
# trims its heap when the top is free. The next step asks for the same sizes again and gets
# fresh pages, and **each page faults** the first time it is written (the kernel zeroes 4 KiB
# and maps it): for a step's hundred megabytes of temporaries that is tens of thousands of
# page faults, every step. Two `mallopt` settings keep the memory instead: a fixed mmap
# threshold of 32 MiB (smaller blocks come from the heap) and no trimming below 1 GiB. Freed
# temporaries then stay mapped and the next step reuses them. The given
# `keep_freed_memory()` sets both, process-wide (the same as the environment variables
# `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`); it is a no-op off glibc.
#
# The cell counts the minor page faults of a loop that makes sixteen 2 MiB temporaries at a
# time and frees them, as a step does, before and after. (Once set, the setting stays for
# this process: the second count is what your training steps see afterwards.)

# %% nbgrader={"grade": false, "grade_id": "malloc", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def keep_freed_memory():
    """Ask glibc (Linux) to keep freed memory for reuse instead of returning it to the kernel.

    Sets a fixed mmap threshold (32 MiB) and a trim threshold of 1 GiB, so the temporaries a
    training step frees are reused by the next step without page faults. Returns True if
    glibc accepted both, False elsewhere (nothing changed).

    >>> keep_freed_memory()  # True on Linux with glibc; False elsewhere, and nothing changes
    True
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        # CDLL(None): the symbols already loaded into this process, glibc's among them
        # (ctypes.util.find_library would start a subprocess to look for the file).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20) and mallopt(M_TRIM_THRESHOLD, 1 << 30))


# %% nbgrader={"grade": false, "grade_id": "demo-malloc", "locked": false, "schema_version": 3, "solution": false, "task": false}
def page_faults():
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def malloc_report(steps=10, n=512 * 1024):
    x = f32(n)

    def work():  # like a training step: temporaries that live together, then are freed
        for _ in range(steps):
            alive = [x * np.float32(i) for i in range(16)]  # 16 fresh 2 MiB arrays
            del alive

    def measure():
        work()  # warm up
        faults, t0 = page_faults(), time.perf_counter()
        work()
        return (page_faults() - faults) / steps, (time.perf_counter() - t0) / steps

    if page_faults() is None:
        print("no page-fault counter on this platform")
        return
    faults, seconds = measure()
    print(f"16 temporaries of 2 MiB, {steps} times: {faults:,.0f} page faults and "
          f"{seconds * 1e3:.2f} ms each time with glibc's settings so far")
    kept = keep_freed_memory()
    faults, seconds = measure()
    print(f"after keep_freed_memory() (applied: {kept}): {faults:,.0f} page faults and "
          f"{seconds * 1e3:.2f} ms each time")


malloc_report()
# %% [markdown]
# ## Part 5: an in-place kernel, GELU's backward
#
# GPT's MLP applies GELU to its widest activation, `(B*T, 4C)`: at the milestone's size
# 768 x 512 floats, 1.5 MiB. Module 06's rule for the tanh form is the formula as written,
#
# ```
# t = tanh(c (x + k x^3)),  u' = c (1 + 3 k x^2)
# dx = grad * (0.5 (1 + t) + 0.5 x (1 - t^2) u')
# ```
#
# and NumPy evaluates it one operator at a time: each `*`, `+` and `-` makes a new 1.5 MiB
# array, about fifteen of them. Each is a pass over memory (the arithmetic is cheap; the
# reads and writes are not) and an allocation. An **in-place** kernel computes the same
# numbers in three buffers by writing results into arrays it already owns: `a *= b`,
# `np.tanh(a, out=a)`, `np.multiply(a, b, out=c)`.
#
# Write `gelu_backward_inplace(ctx, grad)`. Rules for an in-place kernel: never write into
# an input (`ctx.inputs[0]` belongs to the graph, and `grad` may be shared with another
# consumer of the same tensor); only into arrays you made in this call. For
# `approximate="none"` (the erf form) return module 06's rule, `plain_gelu_backward(ctx,
# grad)`, unchanged: one kernel, one job. Every pass over the array costs about the same
# whatever it computes, so fold the scalars together: `u = (kc x^2 + c) x` is three passes,
# not four. A sketch with three buffers `x2`, `t`, `s`: `x2 = x*x`; `t = x2 * (k c)`,
# `t += c`, `t *= x` (that is `u`), then `tanh` in place; `x2 = ((1.5 k c) x2 + 0.5 c) x`
# (that is `x u' / 2`); `s = 1 - t*t`; `x2 *= s`; `t = 0.5 t + 0.5 + x2` (the slope); then
# `t *= grad`. Fifteen passes and three arrays, against the formula's two dozen
# temporaries.

# %% nbgrader={"grade": false, "grade_id": "gelu-inplace", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def gelu_backward_inplace(ctx, grad):
    """d gelu(x) for the tanh form in three arrays; the erf form goes to module 06's rule

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import gelu
    >>> x = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
    >>> with fast_kernels(compiled=False):  # this rule is DERIVATIVES[GELUFunction] inside
    ...     gelu(x, approximate="tanh").sum().backward()
    >>> x.grad  # the slope of GELU at -1, 0 and 2
    Tensor([-0.083 ,  0.5   ,  1.0861])
    """
    if ctx.params.get("approximate", "none") != "tanh":
        return plain_gelu_backward(ctx, grad)
    x = ctx.inputs[0]
    dtype = x.dtype.type
    c = dtype(math.sqrt(2 / math.pi))
    k = dtype(0.044715)
    ### BEGIN SOLUTION
    half = dtype(0.5)
    x2 = x * x  # new: ours to overwrite
    t = np.multiply(x2, k * c)
    t += c
    t *= x  # u = c (x + k x^3)
    np.tanh(t, out=t)  # tanh u
    x2 *= dtype(1.5) * k * c
    x2 += half * c
    x2 *= x  # x u' / 2
    s = np.multiply(t, t)
    np.subtract(1, s, out=s)  # 1 - tanh^2 u
    x2 *= s  # x (1 - tanh^2 u) u' / 2
    t *= half
    t += half
    t += x2  # the slope
    t *= grad
    return (t,)
    ### END SOLUTION


# %% [markdown]
# ### Test: the in-place kernel is the same derivative, in less memory
#
# The test compares your kernel with module 06's rule on the same record, checks that
# neither input changed, measures both with `tracemalloc` (the peak of new NumPy memory),
# and runs `gradcheck` (central differences, float64) through `gelu` with the kernel
# switched on in the table.

# %% nbgrader={"grade": false, "grade_id": "test-helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def record_of(fn, *tensors, **params):
    """Apply fn to tensors that require grad and return the output's record (ctx)."""
    out = fn.apply(*tensors, **params)
    return out._ctx


def peak_bytes(call):
    """The peak of NumPy memory allocated while call() runs, in bytes."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@contextlib.contextmanager
def one_blas_thread():
    """Measure on one BLAS thread: on a shared machine, waiting for a second core swamps the
    differences these measurements are about (Part 3)."""
    before = blas_threads()
    if before is not None:
        set_blas_threads(1)
    try:
        yield
    finally:
        if before is not None:
            set_blas_threads(before)


def with_rule(table, key, rule, call):
    """Run call() with table[key] = rule, then put the old entry back."""
    old = table.get(key)
    table[key] = rule
    try:
        return call()
    finally:
        if old is None:
            table.pop(key, None)
        else:
            table[key] = old


# %% nbgrader={"grade": true, "grade_id": "test_unit_gelu_inplace", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_gelu_inplace():
    """The in-place GELU backward equals module 06's rule, in at most 60% of its memory."""
    x = Tensor(f32(768, 512, seed=3, scale=2.0), requires_grad=True)
    grad = f32(768, 512, seed=4)
    x_before, grad_before = x.data.copy(), grad.copy()
    ctx = record_of(GELUFunction, x, approximate="tanh")
    (want,) = plain_gelu_backward(ctx, grad)
    (got,) = gelu_backward_inplace(ctx, grad)
    assert np.array_equal(x.data, x_before) and np.array_equal(grad, grad_before), (
        "the kernel changed its input x or grad: write only into arrays you made in this call "
        "(x2 = x * x makes one; x2 = x is the input under another name)")
    assert got.dtype == np.float32, (
        f"the gradient is {got.dtype}, expected float32: a constant built as a Python or "
        "float64 number promoted it; build constants with x.dtype.type(value)")
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (
        f"gelu_backward_inplace differs from module 06's rule by up to "
        f"{np.abs(got - want).max():.3g}: check the sketch's order, u' = c (1 + 3 k x^2) "
        "multiplied by x, and the 0.5 applied to both terms")
    plain = peak_bytes(lambda: plain_gelu_backward(ctx, grad))
    fused = peak_bytes(lambda: gelu_backward_inplace(ctx, grad))
    assert fused <= 0.6 * plain, (
        f"the kernel's peak of new memory is {fused / 2**20:.1f} MiB against the plain rule's "
        f"{plain / 2**20:.1f} MiB: expected at most 60% of it. An expression such as "
        "a * b + c makes temporaries; use a *= b, a += c and out= instead")
    none_ctx = record_of(GELUFunction, x, approximate="none")
    (got_none,) = gelu_backward_inplace(none_ctx, grad)
    (want_none,) = plain_gelu_backward(none_ctx, grad)
    assert np.array_equal(got_none, want_none), (
        "for approximate='none' return plain_gelu_backward(ctx, grad) unchanged")
    x64 = Tensor(rng(5).standard_normal((3, 7)) * 2, dtype=np.float64, requires_grad=True)
    with_rule(DERIVATIVES, GELUFunction, gelu_backward_inplace,
              lambda: gradcheck(lambda t: gelu(t, approximate="tanh"), [x64]))
    print(f"GELU backward: plain rule peak {plain / 2**20:.1f} MiB, in place "
          f"{fused / 2**20:.1f} MiB, same values")

    def check_slope(x, grad, approximate):
        """gelu_backward_inplace against the tanh-GELU derivative worked in float64 (module
        06's rule for the erf form), in x's dtype, leaving x and grad as they were."""
        t = Tensor(x, dtype=x.dtype, requires_grad=True)
        ctx = record_of(GELUFunction, t, approximate=approximate)
        x_before, grad_before = t.data.copy(), grad.copy()
        (got,) = gelu_backward_inplace(ctx, grad)
        kind = f"{x.dtype} x of shape {x.shape}, approximate={approximate!r}"
        assert np.array_equal(t.data, x_before) and np.array_equal(grad, grad_before), (
            f"{kind}: the kernel changed its input x or grad: write only into arrays you made")
        assert got.dtype == x.dtype and got.shape == x.shape, (
            f"{kind}: the gradient is {got.dtype} {got.shape}, expected {x.dtype} {x.shape}: "
            "build every constant with x.dtype.type(value)")
        if approximate == "tanh":
            a, c, k = x.astype(np.float64), math.sqrt(2 / math.pi), 0.044715
            th = np.tanh(c * (a + k * a**3))
            want = grad * (0.5 * (1 + th) + 0.5 * a * (1 - th**2) * c * (1 + 3 * k * a**2))
        else:
            (want,) = plain_gelu_backward(ctx, grad)
        tol = 1e-10 if x.dtype == np.float64 else 1e-5
        scale = max(1.0, float(np.abs(grad).max()))
        assert np.allclose(got, want, rtol=tol, atol=tol * scale), (
            f"{kind}: differs from the derivative by up to {np.abs(got - want).max():.3g}: "
            "0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u', with every constant in x's dtype")

    check_slope(x.data[:4, :6], grad[:4, :6], "tanh")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(150)
    wide = gen.standard_normal((6, 5)).astype(np.float32) * 3
    hidden_cases(check_slope, {
        "float64 values": (gen.standard_normal((3, 5)) * 2, gen.standard_normal((3, 5)),
                           "tanh"),
        "a batch of sequences": (f32(2, 3, 7, seed=151, scale=2.0), f32(2, 3, 7, seed=152),
                                 "tanh"),
        "a single value": (np.array([-0.7], np.float32), np.array([1.3], np.float32), "tanh"),
        "large magnitudes": (f32(4, 6, seed=153, scale=20.0), f32(4, 6, seed=154), "tanh"),
        "values near zero": (f32(5, 3, seed=155, scale=1e-4), f32(5, 3, seed=156), "tanh"),
        "a transposed input": (wide.T, f32(5, 6, seed=157), "tanh"),
        "the erf form in float64": (gen.standard_normal((4, 4)), gen.standard_normal((4, 4)),
                                    "none"),
    })
    ### END HIDDEN TESTS


test_unit_gelu_inplace()

# %% [markdown]
# ## Part 6: fused softmax-cross-entropy
#
# The loss's derivative is `(softmax(logits) - onehot(target)) * grad / N`. Module 06's
# rule builds it from a shifted copy, an `exp` in place, a division, the subtraction at the
# targets and a final product with the per-row scale: the final product is one more
# `(N, V)` array. Here you fuse the last step into the buffer too: scale **in place**, so
# the kernel allocates exactly one `(N, V)` array, the one it returns. At TinyGPT's
# vocabulary of 65 the saving is small; at GPT-2's 50,257 one `(N, V)` float32 array is
# 150 MiB per 768 tokens, and the number of them is what decides whether a step fits.
#
# Write `cross_entropy_backward_inplace(ctx, grad)` for records of `CrossEntropyFunction`
# (module 04; `cross_entropy` passes the target, `ignore_index` and `reduction` in
# `ctx.params`): the same result as module 06's rule, one `(N, V)` allocation, returned as
# a one-entry tuple (`(grad_logits,)`, one entry per input). Rows whose target is
# `ignore_index` get zero gradient; `"mean"` divides by the number of kept rows; `"none"` has
# one `grad` per row. The given `cross_entropy_record(ctx)` reads the record's logits,
# target, `ignore_index` and `reduction` (Part 10's compiled rule starts from it too).

# %% nbgrader={"grade": false, "grade_id": "cross-entropy-record", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def cross_entropy_record(ctx):
    """(logits, target, ignore_index, reduction) of a CrossEntropyFunction record: the target
    is a parameter (module 04's `cross_entropy` passes it so) or else the second input.
    Part 6's rule and Part 10's compiled one both start here, so they read a record alike.

    >>> from tinytorch.core.losses import cross_entropy
    >>> from tinytorch.core.tensor import Tensor
    >>> loss = cross_entropy(Tensor(np.zeros((2, 3)), requires_grad=True), np.array([0, -100]))
    >>> logits, target, ignore_index, reduction = cross_entropy_record(loss._ctx)
    >>> logits.shape, target.tolist(), ignore_index, reduction
    ((2, 3), [0, -100], -100, 'mean')
    """
    target = ctx.params["target"] if "target" in ctx.params else ctx.inputs[1]
    return (ctx.inputs[0], target, ctx.params.get("ignore_index", -100),
            ctx.params.get("reduction", "mean"))


# %% nbgrader={"grade": false, "grade_id": "cross-entropy-inplace", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def cross_entropy_backward_inplace(ctx, grad):
    """(softmax(logits) - onehot(target)) * scale per row, in the one (N, V) buffer

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.losses import cross_entropy
    >>> logits = Tensor(np.zeros((2, 3)), requires_grad=True)
    >>> with fast_kernels(compiled=False):  # this rule is DERIVATIVES[CrossEntropyFunction]
    ...     cross_entropy(logits, np.array([0, -100])).backward()  # row 1 ignored
    >>> logits.grad.data.round(4)  # (softmax - onehot) / 1 kept row
    array([[-0.6667,  0.3333,  0.3333],
           [ 0.    ,  0.    ,  0.    ]], dtype=float32)
    """
    logits, target, ignore_index, reduction = cross_entropy_record(ctx)
    dtype = logits.dtype.type
    ### BEGIN SOLUTION
    probs = logits - np.max(logits, axis=-1, keepdims=True)  # the one (N, V) array
    np.exp(probs, out=probs)
    probs /= np.sum(probs, axis=-1, keepdims=True)
    keep = target != ignore_index
    rows = np.nonzero(keep)[0]
    probs[rows, target[rows]] -= dtype(1)
    scale = np.asarray(grad, dtype=logits.dtype) * keep  # (N,) or one value times (N,)
    if reduction == "mean":
        scale /= dtype(max(int(keep.sum()), 1))
    probs *= scale[:, None]
    return (probs,) + (None,) * (len(ctx.inputs) - 1)  # None for a target input
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_cross_entropy_inplace", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_cross_entropy_inplace():
    """The fused cross-entropy backward equals module 06's rule with one (N, V) array."""
    from tinytorch.core.autograd import cross_entropy_backward as plain_rule

    n, v = 768, 512
    logits = Tensor(f32(n, v, seed=6, scale=3.0), requires_grad=True)
    target = rng(7).integers(0, v, n)
    target[::7] = -100
    for reduction in ("mean", "sum", "none"):
        ctx = record_of(CrossEntropyFunction, logits, target=target, ignore_index=-100,
                        reduction=reduction)
        grad = f32(n, seed=8) if reduction == "none" else np.asarray(1.5, dtype=np.float32)
        want = plain_rule(ctx, grad)[0]
        got = cross_entropy_backward_inplace(ctx, grad)
        assert isinstance(got, tuple) and len(got) == 1, (
            "return (grad_logits,): a tuple with one entry per input, here the logits only")
        got = got[0]
        assert got.dtype == np.float32 and got.shape == (n, v), (
            f"grad_logits is {got.dtype} {got.shape}, expected float32 {(n, v)}")
        assert np.allclose(got, want, rtol=1e-5, atol=1e-7), (
            f"reduction={reduction!r}: differs from module 06's rule by up to "
            f"{np.abs(got - want).max():.3g}. Subtract 1 at each kept row's target, zero "
            "the ignored rows, and for 'mean' divide by the number of kept rows")
    ctx = record_of(CrossEntropyFunction, logits, target=target, ignore_index=-100,
                    reduction="mean")
    one = np.asarray(1.0, dtype=np.float32)
    plain = peak_bytes(lambda: plain_rule(ctx, one))
    fused = peak_bytes(lambda: cross_entropy_backward_inplace(ctx, one))
    array = n * v * 4
    assert fused < 1.5 * array, (
        f"peak of new memory {fused / 2**20:.2f} MiB, expected about one (N, V) array "
        f"({array / 2**20:.2f} MiB): scale the buffer in place (probs *= scale[:, None]) "
        "instead of returning probs * scale")
    x64 = Tensor(rng(9).standard_normal((5, 4)), dtype=np.float64, requires_grad=True)
    t = np.array([0, 3, -100, 1, 2])
    with_rule(DERIVATIVES, CrossEntropyFunction, cross_entropy_backward_inplace,
              lambda: gradcheck(lambda z: cross_entropy(z, t), [x64]))
    print(f"cross-entropy backward at (N, V) = {(n, v)}: plain peak {plain / 2**20:.2f} MiB, "
          f"fused {fused / 2**20:.2f} MiB")

    def check_loss_slope(logits, target, ignore_index, reduction, grad):
        """cross_entropy_backward_inplace against (softmax - onehot) * scale worked in
        float64: zero for ignored rows, 'mean' over the kept rows (none kept: zeros)."""
        t = Tensor(logits, dtype=logits.dtype, requires_grad=True)
        with np.errstate(invalid="ignore", divide="ignore"):  # a mean over no row is NaN
            ctx = record_of(CrossEntropyFunction, t, target=target, ignore_index=ignore_index,
                            reduction=reduction)
        got = cross_entropy_backward_inplace(ctx, grad)
        kind = (f"{logits.dtype} logits {logits.shape}, ignore_index={ignore_index}, "
                f"reduction={reduction!r}")
        assert isinstance(got, tuple) and len(got) == 1, f"{kind}: return (grad_logits,)"
        got = got[0]
        assert got.dtype == logits.dtype and got.shape == logits.shape, (
            f"{kind}: grad_logits is {got.dtype} {got.shape}, expected {logits.dtype} "
            f"{logits.shape}")
        z = logits.astype(np.float64)
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        want = z / z.sum(axis=-1, keepdims=True)
        keep = target != ignore_index
        rows = np.flatnonzero(keep)
        want[rows, target[rows]] -= 1
        scale = np.asarray(grad, dtype=np.float64) * keep
        if reduction == "mean":
            scale = scale / max(int(keep.sum()), 1)
        want *= scale[:, None]
        tol = 1e-12 if logits.dtype == np.float64 else 1e-6
        assert np.all(np.isfinite(got)) and np.allclose(got, want, rtol=1e-5, atol=tol), (
            f"{kind}: differs from (softmax - onehot) * scale by up to "
            f"{np.abs(got - want).max():.3g}: subtract each row's max before exp, compare "
            "the targets with ignore_index itself, and divide by max(kept rows, 1)")

    check_loss_slope(logits.data[:20], target[:20], -100, "mean", np.float32(1))
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(160)
    ids = gen.integers(0, 9, 12)
    ids[[2, 5]] = 3  # rows of the class used as ignore_index below
    hidden_cases(check_loss_slope, {
        "another ignore_index": (f32(12, 9, seed=161, scale=2.0), ids, 3, "mean",
                                 np.float32(1)),
        "a negative ignore_index of its own": (f32(12, 9, seed=162), np.where(
            gen.random(12) < 0.3, -1, ids), -1, "sum", np.float32(0.5)),
        "no ignored row, a sum": (f32(7, 5, seed=163), gen.integers(0, 5, 7), -100, "sum",
                                  np.float32(2.5)),
        "every row ignored": (f32(4, 6, seed=164), np.full(4, -100), -100, "mean",
                              np.float32(1)),
        "large logits": (f32(6, 11, seed=165, scale=500.0), gen.integers(0, 11, 6), -100,
                         "mean", np.float32(1)),
        "float64 logits, one gradient per row": (gen.standard_normal((5, 4)) * 3,
                                                 np.array([0, 3, -100, 1, 2]), -100, "none",
                                                 gen.standard_normal(5)),
        "a single row": (f32(1, 8, seed=166), np.array([5]), -100, "mean", np.float32(1)),
        "a single class": (f32(4, 1, seed=167), np.zeros(4, np.int64), -100, "sum",
                           np.float32(1)),
        "a float64 upstream gradient": (f32(5, 7, seed=168), gen.integers(0, 7, 5), -100,
                                        "mean", np.float64(0.75)),
    })
    ### END HIDDEN TESTS


test_unit_cross_entropy_inplace()

# %% [markdown]
# ## Part 7: attention that keeps its probabilities
#
# Module 12's `AttentionFunction` keeps `q, k, v` and its output, and its backward
# **recomputes** the probabilities `P = softmax(q k^T / sqrt(D))`: one more `(T, S)` matrix
# product and softmax per layer, to avoid keeping `P`, `B * H * T * S` floats. That is
# FlashAttention's trade, and at long contexts it is the right one. At TinyGPT's context of
# 64, `P` of one layer is `12 * 4 * 64 * 64 * 4` bytes = 0.75 MiB, and recomputing it costs
# more time than keeping it costs memory. Module 01's `Function.apply` lets an operation keep
# what its backward needs: set `saves_for_backward = True` and return `(output, saved)`
# from `forward`; the rule reads `ctx.saved`.
#
# Two more savings while you are here:
#
# - **Row sums with BLAS.** The softmax divides by row sums of `(T, S)` blocks with `S = 64`.
#   NumPy's `sum(axis=-1)` over short rows runs a reduction per row; a product with a
#   column of ones, `a @ ones((S, 1))`, is one BLAS call that streams the whole block. Write
#   `row_sums(a)` that way (same values, `(..., T, 1)`, the array's dtype).
# - **No row max when none is needed.** Module 12 subtracts each row's maximum before `exp`
#   so that `exp` cannot overflow; softmax does not change when every score of a row moves
#   by the same amount. But the max is one more reduction over short rows, as slow as the
#   sum was, and at TinyGPT's scale the scores are far from `exp`'s limits (about 88 in
#   float32). The given `attention_probs_fast` takes `exp` of the scores as they are, masks
#   by adding `-inf` (whose `exp` is exactly 0), and then *checks* what it skipped: a row
#   sum that overflowed to `inf`, or one so small that float rounding would be lost. Any
#   such row sends the whole call to module 12's `_attention_probs`, max first. The check
#   reads one number per row; the max read every score.
# - **The backward without the recompute.** With `P` (and `Pd = P * drop`, the same array
#   when there is no dropout) from `ctx.saved`, the rule is module 12's: `dV = Pd^T dO`,
#   `dP = (dO V^T) * drop`, `dS = P * (dP - rowsum(dO * O))`, `dQ = dS K * scale`,
#   `dK = dS^T Q * scale`. Compute `dS` in place in the `dP` array, and skip the gradients
#   of inputs that do not require them.
#
# `AttentionKeepFunction` subclasses `AttentionFunction`, so code that asks "is this
# attention?" still says yes; the registry (Part 13) puts it in `KERNELS` under
# `AttentionFunction`, where `Function.apply` finds it when module 12's attention runs.

# %% nbgrader={"grade": false, "grade_id": "row-sums", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def row_sums(a):
    """a.sum(axis=-1, keepdims=True), computed as one BLAS product with a column of ones

    >>> row_sums(np.arange(6, dtype=np.float32).reshape(2, 3))  # 0+1+2, 3+4+5
    array([[ 3.],
           [12.]], dtype=float32)
    """
    ### BEGIN SOLUTION
    return np.matmul(a, np.ones((a.shape[-1], 1), dtype=a.dtype))  # (..., T, 1)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "attention-probs-fast", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
def attention_probs_fast(q, k, keep=None):
    """module 12's softmax(q @ k^T / sqrt(D)), masked weights 0, fully masked rows 0;
    without the row max unless the row sums show that exp left float range

    >>> q = k = np.zeros((1, 1, 3, 2), dtype=np.float32)  # equal scores: equal weights
    >>> attention_probs_fast(q, k, np.tril(np.ones((3, 3), dtype=bool)))[0, 0].round(3)
    array([[1.   , 0.   , 0.   ],
           [0.5  , 0.5  , 0.   ],
           [0.333, 0.333, 0.333]], dtype=float32)
    """
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    probs = np.matmul(q * scale, np.swapaxes(k, -1, -2))  # (..., T, S); scaled as (T, D)
    empty = False  # rows with no key to attend to
    if keep is not None:
        probs += np.where(keep, q.dtype.type(0), q.dtype.type(-np.inf))  # exp(-inf) = 0
        empty = ~keep.any(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):  # an overflow is caught below, by its row sum
        np.exp(probs, out=probs)
    total = row_sums(probs)  # (..., T, 1)
    info = np.finfo(probs.dtype)
    lost = (total < info.tiny / info.eps) & ~empty  # so small that rounding is lost
    if lost.any() or not np.isfinite(total).all():  # or an exp overflowed
        return _attention_probs(q, k, keep)  # module 12's: subtract each row's max first
    np.copyto(total, total.dtype.type(1), where=empty)  # empty rows: 0 / 1 stays 0
    probs /= total
    return probs


# %% nbgrader={"grade": false, "grade_id": "attention-keep", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class AttentionKeepFunction(AttentionFunction):
    """Module 12's attention, keeping P (and P * drop) for backward instead of recomputing

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.attention import scaled_dot_product_attention
    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)), requires_grad=True)  # equal scores
    >>> v = Tensor([[[[0.0], [3.0], [6.0]]]])
    >>> with fast_kernels(compiled=False):
    ...     out = scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> out._ctx.fn.__name__, out.data.ravel().tolist()  # the mean of the values seen
    ('AttentionKeepFunction', [0.0, 1.5, 3.0])
    """

    saves_for_backward = True  # forward returns (out, (probs, dropped))

    @staticmethod
    def forward(q, k, v, keep=None, drop=None):
        ### BEGIN SOLUTION
        probs = attention_probs_fast(q, k, keep)  # (..., T, S)
        dropped = probs if drop is None else probs * drop
        return np.matmul(dropped, v), (probs, dropped)  # (..., T, Dv)
        ### END SOLUTION


@derivative(AttentionKeepFunction)
def attention_keep_backward(ctx, grad):
    """module 12's rule, with P and Pd read from ctx.saved instead of recomputed

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.attention import scaled_dot_product_attention
    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)), requires_grad=True)  # equal scores
    >>> v = Tensor(np.zeros((1, 1, 3, 1)), requires_grad=True)
    >>> with fast_kernels(compiled=False):
    ...     scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    >>> v.grad.data.ravel().round(4)  # dV = P^T dO: each key's total weight, 1 + 1/2 + 1/3, ...
    array([1.8333, 0.8333, 0.3333], dtype=float32)
    """
    ### BEGIN SOLUTION
    q, k, v = ctx.inputs
    probs, dropped = ctx.saved
    drop = ctx.params.get("drop")
    needs = [p.requires_grad for p in ctx.parents]
    grad_v = np.matmul(np.swapaxes(dropped, -1, -2), grad) if needs[2] else None
    if not (needs[0] or needs[1]):
        return None, None, grad_v
    d_probs = np.matmul(grad, np.swapaxes(v, -1, -2))  # (..., T, S)
    if drop is not None:
        d_probs *= drop
    d_probs -= row_sums(grad * ctx.output)  # rowsum(dO * O) = rowsum(dP * P)
    d_probs *= probs  # dS
    grad_q, grad_k = _attention_input_grads(d_probs, q, k, needs)  # module 12's last step
    return grad_q, grad_k, grad_v
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_row_sums", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def test_unit_row_sums():
    """row_sums equals a.sum(axis=-1, keepdims=True), float32, shape (..., T, 1)."""
    a = np.abs(f32(12, 4, 64, 64, seed=10))
    got = row_sums(a)
    assert got.shape == (12, 4, 64, 1) and got.dtype == np.float32, (
        f"row_sums gave {got.dtype} {got.shape}, expected float32 (12, 4, 64, 1): multiply by "
        "a column of ones of shape (S, 1) in the array's dtype")
    assert np.allclose(got, a.sum(axis=-1, keepdims=True), rtol=1e-5), (
        "row_sums differs from a.sum(axis=-1, keepdims=True): the column of ones has "
        "a.shape[-1] rows")

    def check_sums(a):
        """row_sums(a) against the float64 sums of each last-axis row, in a's dtype and
        with shape (..., 1), whatever the rank and length of the rows."""
        got = row_sums(a)
        want = a.astype(np.float64).sum(axis=-1, keepdims=True)
        assert got.shape == want.shape and got.dtype == a.dtype, (
            f"row_sums of {a.dtype} {a.shape} gave {got.dtype} {got.shape}, expected {a.dtype} "
            f"{want.shape}: a column of a.shape[-1] ones in a.dtype")
        tol = 1e-12 if a.dtype == np.float64 else 1e-5
        assert np.allclose(got, want, rtol=tol, atol=tol * a.shape[-1]), (
            f"row_sums of {a.dtype} {a.shape} differs from the row sums by up to "
            f"{np.abs(got - want).max():.3g}")

    check_sums(a[0, 0])
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(170)
    hidden_cases(check_sums, {
        "float64 values": gen.standard_normal((3, 4, 9)),
        "a single matrix of short rows": f32(5, 7, seed=171),
        "rows of one value": f32(3, 4, 1, seed=172),
        "long rows": f32(2, 1000, seed=173),
        "a batch of batches of matrices": f32(2, 2, 2, 3, 5, seed=174),
        "a transposed view": f32(6, 10, seed=175).T,
        "a single row": f32(33, seed=176),
    })
    ### END HIDDEN TESTS


test_unit_row_sums()


# %% nbgrader={"grade": true, "grade_id": "test_unit_attention_keep", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def run_attention(fn, q, k, v, keep=None, drop=None):
    """Forward and the three input gradients of fn through backward, as arrays."""
    qt, kt, vt = (Tensor(a, dtype=a.dtype, requires_grad=True) for a in (q, k, v))
    out = fn.apply(qt, kt, vt, keep=keep, drop=drop)
    weights = Tensor(f32(*out.shape, seed=11).astype(q.dtype), dtype=q.dtype)
    (out * weights).sum().backward()
    return out.data, [t.grad.data for t in (qt, kt, vt)]


def test_unit_attention_keep():
    """Attention that keeps P equals module 12's, forward and gradients, keeping one P."""
    q, k, v = f32(2, 3, 6, 4, seed=12), f32(2, 3, 6, 4, seed=13), f32(2, 3, 6, 4, seed=14)
    causal = np.tril(np.ones((6, 6), dtype=bool))
    keep = causal & (rng(15).random((2, 1, 6, 6)) > 0.2)
    keep[0, 0, 2] = False  # a fully masked row
    drop = (rng(16).random((2, 3, 6, 6)) > 0.25).astype(np.float32) / np.float32(0.75)
    for mask, dropout in ((None, None), (causal, None), (keep, drop)):
        want_out, want_grads = run_attention(AttentionFunction, q, k, v, mask, dropout)
        got_out, got_grads = run_attention(AttentionKeepFunction, q, k, v, mask, dropout)
        assert got_out.dtype == np.float32 and np.allclose(got_out, want_out, atol=1e-6), (
            f"forward differs from module 12's by {np.abs(got_out - want_out).max():.3g}: "
            "return (probs * drop) @ v and the saved arrays as (out, (probs, dropped)); the "
            "probabilities come from attention_probs_fast, which divides by your row_sums: "
            "if test_unit_row_sums fails too, fix that first")
        for name, got, want in zip("qkv", got_grads, want_grads):
            assert np.allclose(got, want, atol=1e-5), (
                f"d{name} differs from module 12's rule by {np.abs(got - want).max():.3g} "
                f"(mask {mask is not None}, dropout {dropout is not None}): dV uses Pd = P * drop,"
                " dP is multiplied by drop, dS = P * (dP - rowsum(dO * O))")
    ctx = AttentionKeepFunction.apply(Tensor(q, requires_grad=True), Tensor(k), Tensor(v))._ctx
    saved = sum(a.nbytes for a in {id(a): a for a in ctx.saved}.values())
    assert saved == 2 * 3 * 6 * 6 * 4, (
        f"the record keeps {saved} bytes, expected one (B, H, T, S) float32 array "
        f"({2 * 3 * 6 * 6 * 4} bytes): without dropout, save probs itself as `dropped`")
    q64, k64, v64 = (Tensor(rng(s).standard_normal((1, 2, 5, 3)), dtype=np.float64,
                            requires_grad=True) for s in (17, 18, 19))
    with_rule(KERNELS, AttentionFunction, AttentionKeepFunction,
              lambda: gradcheck(lambda a, b, c: scaled_dot_product_attention(
                  a, b, c, is_causal=True), [q64, k64, v64]))

    def check_keep(q, k, v, keep=None, drop=None, needs=(True, True, True)):
        """AttentionKeepFunction against softmax(q k^T / sqrt(D)) (masked, dropped) @ v
        worked in float64, its gradients against module 12's rule for the inputs that need
        them, and a record that keeps P once (P and P * drop with dropout)."""
        kind = (f"q {q.shape}, k {k.shape}, v {v.shape}, {q.dtype}, mask {keep is not None}, "
                f"dropout {drop is not None}, gradients for {needs}")
        results = {}
        for fn in (AttentionFunction, AttentionKeepFunction):
            ts = [Tensor(a, dtype=a.dtype, requires_grad=n) for a, n in zip((q, k, v), needs)]
            out = fn.apply(*ts, keep=keep, drop=drop)
            weights = Tensor(rng(177).standard_normal(out.shape).astype(q.dtype), dtype=q.dtype)
            (out * weights).sum().backward()
            results[fn] = out.data, [None if t.grad is None else t.grad.data for t in ts]
        got, got_grads = results[AttentionKeepFunction]
        _, want_grads = results[AttentionFunction]
        scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        if keep is not None:
            scores = np.where(keep, scores, -np.inf)
        top = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=-1, keepdims=True)
        probs = e / np.where(total == 0, 1, total)
        want = (probs if drop is None else probs * drop) @ v.astype(np.float64)
        tol = 1e-10 if q.dtype == np.float64 else 1e-5
        reach = max(1.0, float(np.abs(np.where(np.isfinite(scores), scores, 0)).max()))
        assert got.dtype == q.dtype and got.shape == want.shape and np.allclose(
            got, want, rtol=tol, atol=tol * reach), (
            f"{kind}: the forward differs from softmax(q k^T / sqrt(D)) @ v by "
            f"{np.abs(got - want).max():.3g}, or is not {q.dtype} {want.shape}")
        for name, g1, g0, need in zip("qkv", got_grads, want_grads, needs):
            if not need:
                continue
            size = max(1.0, float(np.abs(g0).max()))
            assert g1 is not None and np.allclose(g1, g0, rtol=tol * 10, atol=tol * 10 * size), (
                f"{kind}: d{name} differs from module 12's rule by "
                f"{np.abs(g1 - g0).max() if g1 is not None else 'everything (None)'}: scale by "
                "1 / sqrt(D) of these inputs, swap the last two axes whatever the rank")
        ctx = AttentionKeepFunction.apply(Tensor(q, dtype=q.dtype, requires_grad=True),
                                          Tensor(k, dtype=q.dtype), Tensor(v, dtype=q.dtype),
                                          keep=keep, drop=drop)._ctx  # before backward frees it
        saved = sum(a.nbytes for a in {id(a): a for a in ctx.saved}.values())
        one = probs.size * q.dtype.itemsize
        assert saved == (one if drop is None else 2 * one), (
            f"{kind}: the record keeps {saved} bytes, expected "
            f"{'one' if drop is None else 'two'} (..., T, S) array(s) of {one} bytes")

    check_keep(q[:1, :2], k[:1, :2], v[:1, :2], causal)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(178)
    big = gen.random((2, 2, 4, 6)) > 0.3
    hidden_cases(check_keep, {
        "more keys than queries": (f32(2, 2, 3, 4, seed=180), f32(2, 2, 7, 4, seed=181),
                                   f32(2, 2, 7, 4, seed=182)),
        "values wider than keys, causal": (f32(1, 3, 5, 4, seed=183), f32(1, 3, 5, 4, seed=184),
                                           f32(1, 3, 5, 6, seed=185),
                                           np.tril(np.ones((5, 5), bool))),
        "a wider head with a padding mask": (f32(2, 2, 4, 16, seed=186),
                                             f32(2, 2, 6, 16, seed=187),
                                             f32(2, 2, 6, 16, seed=188),
                                             np.array([[[[True] * 4 + [False] * 2]]] * 2)),
        "no head axis": (f32(2, 5, 8, seed=189), f32(2, 5, 8, seed=190), f32(2, 5, 8, seed=191),
                         np.tril(np.ones((5, 5), bool))),
        "every row masked": (f32(1, 2, 3, 4, seed=192), f32(1, 2, 3, 4, seed=193),
                             f32(1, 2, 3, 4, seed=194), np.zeros((3, 3), bool)),
        "large scores": (f32(2, 2, 4, 4, seed=195, scale=30.0), f32(2, 2, 4, 4, seed=196,
                                                                  scale=30.0),
                         f32(2, 2, 4, 4, seed=197), np.tril(np.ones((4, 4), bool))),
        "float64 inputs with a mask and dropout": (
            gen.standard_normal((2, 2, 4, 3)), gen.standard_normal((2, 2, 6, 3)),
            gen.standard_normal((2, 2, 6, 3)), big,
            (gen.random((2, 2, 4, 6)) > 0.5) / 0.5),
        "only the values need gradients": (f32(2, 2, 4, 8, seed=198), f32(2, 2, 4, 8, seed=199),
                                           f32(2, 2, 4, 8, seed=200), None, None,
                                           (False, False, True)),
        "only the queries need gradients": (f32(2, 2, 4, 8, seed=201), f32(2, 2, 4, 8, seed=202),
                                            f32(2, 2, 4, 8, seed=203),
                                            np.tril(np.ones((4, 4), bool)), None,
                                            (True, False, False)),
        "a single query": (f32(2, 2, 1, 4, seed=204), f32(2, 2, 6, 4, seed=205),
                           f32(2, 2, 6, 4, seed=206)),
    })
    ### END HIDDEN TESTS


test_unit_attention_keep()

# %% [markdown]
# ## Part 8: a fused AdamW update
#
# Module 07's AdamW is five lines of array algebra per parameter, and each line makes
# temporaries: `(1 - beta1) * grad`, `grad * grad`, `np.sqrt(v)`, the division, the
# denominator, the step. For TinyGPT's 27 parameter arrays that is about 200 allocations
# and as many passes over memory per step. `FusedAdamW` computes **the same numbers, in the
# same order** (so the result is bitwise AdamW's) with one scratch buffer for the whole
# model, sized to the largest parameter and reused by every update: `np.multiply(grad,
# 1 - beta1, out=tmp); m += tmp`, and so on, ending with `param -= tmp`.
#
# Only `update(param, grad, state)` changes; the state has AdamW's names (`step`,
# `exp_avg`, `exp_avg_sq`), so `state_dict()` and `load_state_dict()` move freely between
# the two, and parameter groups work as in module 07. Match AdamW's order exactly: decay
# `param *= 1 - lr * weight_decay` first; then `m = beta1 m + (1 - beta1) g`,
# `v = beta2 v + (1 - beta2) g^2` (square first, then scale), `denom = sqrt(v) /
# sqrt(1 - beta2^t) + eps`, `param -= (lr / (1 - beta1^t)) * (m / denom)`.

# %% nbgrader={"grade": false, "grade_id": "fused-adamw", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class FusedAdamW(AdamW):
    """AdamW with the same results, computed in place with one shared scratch buffer.

    >>> from tinytorch.core.tensor import Tensor
    >>> w = Tensor([1.0, -1.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> FusedAdamW([w], lr=0.1, weight_decay=0.0).step()  # a first step: lr against the sign
    >>> w.data.round(4)
    array([ 0.9, -0.9], dtype=float32)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay)
        self._scratch = np.empty(0, dtype=np.float32)

    def _buffer(self, like):
        """A scratch view of like's shape and dtype (grown when a larger parameter comes)."""
        if self._scratch.size < like.size or self._scratch.dtype != like.dtype:
            self._scratch = np.empty(like.size, dtype=like.dtype)
        return self._scratch[: like.size].reshape(like.shape)

    def _next_step(self, param, state):
        """AdamW's state of `param` (made on its first step), its step count advanced:
        (t, exp_avg, exp_avg_sq)."""
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(param)
            state["exp_avg_sq"] = np.zeros_like(param)
        state["step"] += 1
        return state["step"], state["exp_avg"], state["exp_avg_sq"]

    def update(self, param, grad, state):
        beta1, beta2 = self.betas
        t, m, v = self._next_step(param, state)
        tmp = self._buffer(param)
        ### BEGIN SOLUTION
        if self.weight_decay:
            param *= 1.0 - self.lr * self.weight_decay
        m *= beta1
        np.multiply(grad, 1.0 - beta1, out=tmp)
        m += tmp
        v *= beta2
        np.multiply(grad, grad, out=tmp)
        tmp *= 1.0 - beta2
        v += tmp
        np.sqrt(v, out=tmp)
        tmp /= math.sqrt(1.0 - beta2**t)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= self.lr / (1.0 - beta1**t)
        param -= tmp
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_fused_adamw", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_fused_adamw():
    """FusedAdamW equals AdamW to the bit, state included, with almost no new memory."""
    from tinytorch.core.layers import Parameter

    def run(cls):
        params = [Parameter(f32(64, 32, seed=20)), Parameter(f32(32, seed=21)),
                  Parameter(f32(8, 64, seed=22))]
        opt = cls([{"params": params[::2]}, {"params": params[1:2], "weight_decay": 0.0}],
                  lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
        for step in range(3):
            for i, p in enumerate(params):
                p.grad = Tensor(f32(*p.shape, seed=30 + 10 * step + i))
            opt.step()
        return params, opt

    want, want_opt = run(AdamW)
    got, got_opt = run(FusedAdamW)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == np.float32, f"parameter {i} became {a.dtype}: keep float32"
        assert np.array_equal(a.data, b.data), (
            f"parameter {i} differs from AdamW's by {np.abs(a.data - b.data).max():.3g} after 3 "
            "steps: follow AdamW's order exactly (decay first; square the gradient, then "
            "scale; divide sqrt(v) by sqrt(1 - beta2**t), then add eps)")
    theirs, ours = want_opt.state_dict(), got_opt.state_dict()
    assert sorted(theirs) == sorted(ours) and all(
        np.array_equal(theirs[key], ours[key]) for key in theirs), (
        "the state differs from AdamW's: keep exactly the state names step, exp_avg, exp_avg_sq")
    big = [Parameter(f32(512, 512, seed=40))]
    big[0].grad = Tensor(f32(512, 512, seed=41))
    plain_opt, fused_opt = AdamW(big, lr=1e-3), FusedAdamW(big, lr=1e-3)
    plain_opt.step(), fused_opt.step()  # both have their state now
    plain = peak_bytes(plain_opt.step)
    fused = peak_bytes(fused_opt.step)
    assert fused < 0.25 * plain, (
        f"FusedAdamW's step allocates {fused / 2**20:.2f} MiB at peak, AdamW's "
        f"{plain / 2**20:.2f} MiB: write every intermediate into tmp (out=tmp, tmp *= ...)")
    print(f"AdamW step on 512x512: peak of new memory {plain / 2**20:.2f} MiB; fused "
          f"{fused / 2**20:.2f} MiB; same parameters and state to the bit")

    def check_same_as_adamw(shapes, settings, steps, dtype=np.float32, decay_groups=False):
        """FusedAdamW(**settings) against module 07's AdamW on the same parameters and
        gradients for `steps` steps: every parameter and every state array to the bit."""
        def train(cls):
            gen = rng(210)
            params = [Parameter(gen.standard_normal(s).astype(dtype), dtype=dtype) for s in shapes]
            groups = ([{"params": params[::2]}, {"params": params[1::2], "weight_decay": 0.0}]
                      if decay_groups else params)
            opt = cls(groups, **settings)
            for _ in range(steps):
                for p in params:
                    p.grad = Tensor(gen.standard_normal(p.shape).astype(dtype), dtype=dtype)
                opt.step()
            return params, opt.state_dict()

        (want, want_state), (got, got_state) = train(AdamW), train(FusedAdamW)
        kind = f"{dtype.__name__} parameters {shapes}, {settings}, {steps} steps"
        for i, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == b.dtype and np.array_equal(a.data, b.data), (
                f"{kind}: parameter {i} differs from AdamW's by "
                f"{np.abs(a.data.astype(np.float64) - b.data).max():.3g}: use the optimizer's "
                "own lr, betas, eps and weight_decay (never their default values), in AdamW's "
                "order")
        assert sorted(got_state) == sorted(want_state) and all(
            np.array_equal(got_state[key], want_state[key]) for key in want_state), (
            f"{kind}: the state differs from AdamW's")

    check_same_as_adamw([(8, 4), (4,)], {"lr": 1e-2, "betas": (0.9, 0.99),
                                         "weight_decay": 0.1}, 3)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_same_as_adamw, {
        "other betas and a larger eps": ([(6, 5), (5,)], {"lr": 3e-3, "betas": (0.8, 0.95),
                                                          "eps": 1e-3, "weight_decay": 0.05},
                                         4),
        "no weight decay": ([(4, 4), (7,)], {"lr": 1e-2, "weight_decay": 0.0}, 3),
        "many steps": ([(3, 3)], {"lr": 1e-3, "betas": (0.85, 0.9), "weight_decay": 0.01},
                       12),
        "parameters that grow in size": ([(3,), (4, 5), (16, 16)], {"lr": 2e-2}, 3),
        "float64 parameters": ([(5, 3), (3,)], {"lr": 1e-2, "betas": (0.7, 0.98),
                                                "weight_decay": 0.2}, 3, np.float64),
        "a large step and strong decay": ([(4, 6)], {"lr": 0.5, "weight_decay": 0.5}, 2),
        "groups with their own decay": ([(5, 5), (5,), (2, 5)], {"lr": 1e-2, "betas": (
            0.95, 0.999), "weight_decay": 0.3}, 3, np.float32, True),
    })
    ### END HIDDEN TESTS


test_unit_fused_adamw()

# %% [markdown]
# ## Part 9: swapping a forward, GELU and layer norm
#
# Module 01's `Function.apply` starts with one line, `cls = KERNELS.get(cls, cls)`: every
# operation is looked up in the kernel table before it runs. So a faster forward needs no
# change in the lesson that applies it. Register `KERNELS[GELUFunction] = GELUTanhKernel` and
# module 13's MLP, which calls `gelu(...)`, runs the fast class: its `forward`, its record,
# its rule. A kernel is a `Function` subclass of the plain one (code that asks "is this
# GELU?" still says yes) with its own rule in `DERIVATIVES`, because the record names the
# class that ran. The three kernels below are given: read them, they use only what Parts 5
# to 7 taught.
#
# - **GELU, tanh form, forward and backward as a pair.** The plain forward makes nine
#   temporaries; this one writes into two arrays. And it *keeps* `tanh(u)` for backward
#   (one `(B*T, 4C)` array per layer, 1.5 MiB at the milestone's size): the backward then
#   needs no `tanh` at all, the most expensive pass of Part 5's kernel. The same
#   keep-or-recompute trade as Part 7's attention, at a smaller scale. The erf form runs
#   module 02's forward and module 06's rule unchanged.
# - **Layer norm with BLAS row sums.** Module 13's fused layer norm is already one
#   operation; what is left is the reductions. The mean over `C` is a product with a
#   column of `1/C` (Part 7's `row_sums` trick), and so is the mean of the gradient in
#   backward; the bias gradient, a sum over all `B*T` rows, is a row of ones times the
#   gradient. Same record, same saved arrays (`x_hat`, `rstd`), fewer slow reductions.
# - **The bias gradient of `x @ W.T + b`.** `Add`'s rule returns `grad` for both inputs and
#   `backward` sums it down to `b`'s shape `(C,)` with `grad.sum(axis=0)`. This rule,
#   registered in `DERIVATIVES[Add]` (the forward is unchanged), does that sum as one BLAS
#   product for the common case of a 2-D `grad` and a 1-D bias, and leaves every other
#   `Add` as it was.
#
# The check cell compares each with the plain operation (forward, gradients, and a float64
# central-difference `gradcheck` through the table) and times both.

# %% nbgrader={"grade": false, "grade_id": "forward-kernels", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class GELUTanhKernel(GELUFunction):
    """GELU in two arrays; the tanh form keeps tanh(u) so that backward skips the tanh.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import gelu
    >>> with fast_kernels(compiled=False):
    ...     y = gelu(Tensor([-1.0, 0.0, 2.0], requires_grad=True), approximate="tanh")
    >>> y._ctx.fn.__name__, y
    ('GELUTanhKernel', Tensor([-0.1588,  0.    ,  1.9546], requires_grad=True))
    """

    saves_for_backward = True  # forward returns (out, tanh_u), tanh_u None for the erf form

    @staticmethod
    def forward(x, approximate):
        if approximate != "tanh":
            return GELUFunction.forward(x, approximate), None
        dtype = x.dtype.type
        c, k = dtype(math.sqrt(2 / math.pi)), dtype(0.044715)
        t = np.multiply(x, x)  # (N, 4C), ours
        t *= k * c
        t += c
        t *= x  # u = c (x + k x^3)
        np.tanh(t, out=t)  # kept for backward
        out = np.add(t, dtype(1))
        out *= x
        out *= dtype(0.5)  # 0.5 x (1 + tanh u)
        return out, t


@derivative(GELUTanhKernel)
def gelu_tanh_kernel_backward(ctx, grad):
    """Part 5's slope, 0.5 (1 + t) + x (1 - t^2) u' / 2, with t = tanh(u) read from ctx.saved

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import gelu
    >>> x = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
    >>> with fast_kernels(compiled=False):  # GELUTanhKernel's record: tanh(u) kept
    ...     gelu(x, approximate="tanh").sum().backward()
    >>> x.grad
    Tensor([-0.083 ,  0.5   ,  1.0861])
    """
    t = ctx.saved
    if t is None:  # the erf form: module 06's rule
        return plain_gelu_backward(ctx, grad)
    x = ctx.inputs[0]
    dtype = x.dtype.type
    c, k, half = dtype(math.sqrt(2 / math.pi)), dtype(0.044715), dtype(0.5)
    s = np.multiply(t, t)
    np.subtract(dtype(1), s, out=s)  # 1 - tanh^2 u
    a = np.multiply(x, x)
    a *= dtype(1.5) * k * c
    a += half * c
    a *= x  # x u' / 2
    a *= s
    np.multiply(t, half, out=s)
    s += half
    s += a  # the slope
    s *= grad
    return (s,)


_CONSTANTS = {}  # (shape, fill, dtype) -> a read-only array, made once and reused


def _constant(shape, fill, dtype):
    """A read-only array of `fill`: BLAS operands that every step would otherwise rebuild."""
    key = (shape, fill, np.dtype(dtype))
    array = _CONSTANTS.get(key)
    if array is None:
        array = np.full(shape, fill, dtype=dtype)
        array.flags.writeable = False
        _CONSTANTS[key] = array
    return array


def _mean_column(c, dtype):
    return _constant((c, 1), 1.0 / c, dtype)  # x @ this = the mean of each row


class LayerNormKernel(LayerNormFunction):
    """Module 13's layer norm, its row means and bias sum done as BLAS products.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import layer_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> with fast_kernels(compiled=False):
    ...     y = layer_norm(x, Tensor(np.ones(3)), Tensor(np.zeros(3)))
    >>> y._ctx.fn.__name__, y.data.round(4)
    ('LayerNormKernel', array([[-1.2247,  0.    ,  1.2247]], dtype=float32))
    """

    saves_for_backward = True  # forward returns (out, (x_hat, rstd)), both (N, C) / (N, 1)

    @staticmethod
    def forward(x, weight, *bias, eps=1e-5):
        c = x.shape[-1]
        rows = x.reshape(-1, c)  # (N, C), N = B*T
        x_hat = rows - rows @ _mean_column(c, x.dtype)  # (N, C), a new array
        var = (np.einsum("ij,ij->i", x_hat, x_hat) / x.dtype.type(c))[:, None]  # (N, 1)
        rstd = 1 / np.sqrt(var + x.dtype.type(eps))  # (N, 1): a few floats, temporaries are free
        x_hat *= rstd
        out = x_hat * weight  # (N, C)
        if bias:
            out += bias[0]
        return out.reshape(x.shape), (x_hat, rstd)


@derivative(LayerNormKernel)
def layer_norm_kernel_backward(ctx, grad):
    """module 13's rule: rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat))

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import layer_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> w, b = Tensor(np.ones(3), requires_grad=True), Tensor(np.zeros(3), requires_grad=True)
    >>> with fast_kernels(compiled=False):
    ...     (layer_norm(x, w, b) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    >>> w.grad, b.grad  # x_hat times the upstream gradient; the upstream gradient itself
    (Tensor([-1.2247,  0.    ,  3.6742]), Tensor([1., 2., 3.]))
    """
    x_hat, rstd = ctx.saved
    x, weight = ctx.inputs[0], ctx.inputs[1]
    n, c = x_hat.shape
    g = grad.reshape(n, c)
    g_hat = g * weight  # (N, C)
    mean_gx = np.einsum("ij,ij->i", g_hat, x_hat)[:, None]  # (N, 1)
    mean_gx *= x.dtype.type(1.0 / c)
    dx = x_hat * mean_gx
    dx += g_hat @ _mean_column(c, x.dtype)  # + mean(g_hat), broadcast over the row
    np.subtract(g_hat, dx, out=dx)
    dx *= rstd
    grads = [dx.reshape(x.shape)] + [None] * (len(ctx.parents) - 1)  # weight (and bias)
    if ctx.parents[1].requires_grad:
        grads[1] = np.einsum("ij,ij->j", g, x_hat)  # (C,)
    if len(grads) == 3 and ctx.parents[2].requires_grad:
        grads[2] = (_constant((1, n), 1.0, g.dtype) @ g)[0]  # (C,), one BLAS product
    return tuple(grads)


def add_backward_bias_blas(ctx, grad):
    """d(a + b) = (grad, grad); a bias b of shape (C,) under a 2-D grad gets ones @ grad

    >>> from tinytorch.core.tensor import Tensor
    >>> a = Tensor(np.ones((4, 3)), requires_grad=True)
    >>> b = Tensor(np.zeros(3), requires_grad=True)
    >>> with fast_kernels(compiled=False):
    ...     (a + b).sum().backward()
    >>> b.grad  # the 4 rows summed by ones (1, 4) @ grad (4, 3)
    Tensor([4., 4., 4.])
    """
    a, b = ctx.inputs
    grad_b = grad
    if (grad.ndim == 2 and b.ndim == 1 and a.shape == grad.shape and grad.shape[0] > 1
            and b.shape[0] == grad.shape[1] and ctx.parents[1].requires_grad):
        grad_b = (_constant((1, grad.shape[0]), 1.0, grad.dtype) @ grad)[0]  # (C,)
    return grad, grad_b


# %% nbgrader={"grade": false, "grade_id": "check-forward-kernels", "locked": true, "schema_version": 3, "solution": false, "task": false}
def check_forward_kernels():
    x = Tensor(f32(768, 512, seed=70, scale=2.0), requires_grad=True)
    xs = Tensor(f32(768, 128, seed=71), requires_grad=True)
    w, b = (Tensor(f32(128, seed=s), requires_grad=True) for s in (72, 73))
    cases = (("gelu tanh", GELUFunction, GELUTanhKernel, KERNELS,
              lambda: gelu(x, approximate="tanh"), [x]),
             ("layer norm", LayerNormFunction, LayerNormKernel, KERNELS,
              lambda: layer_norm(xs, w, b), [xs, w, b]),
             ("bias add", Add, add_backward_bias_blas, DERIVATIVES,
              lambda: xs + b, [xs, b]))
    for label, key, fast, table, fn, leaves in cases:
        weights = f32(*fn().shape, seed=74)
        results = {}
        for on in (False, True):
            def step():
                for t in leaves:
                    t.grad = None
                out = fn()
                (out * weights).sum().backward()
                return out
            run = step if not on else (lambda: with_rule(table, key, fast, step))
            out = run()
            results[on] = (out.data, [t.grad.data for t in leaves], best_time(run, repeat=5))
        (want, want_g, slow), (got, got_g, quick) = results[False], results[True]
        assert got.dtype == np.float32 and np.allclose(got, want, rtol=1e-5, atol=1e-6), (
            f"{label}: the kernel's forward differs by {np.abs(got - want).max():.3g}")
        for i, (g1, g0) in enumerate(zip(got_g, want_g)):
            assert g1.dtype == np.float32 and np.allclose(g1, g0, rtol=1e-4, atol=1e-5), (
                f"{label}: gradient {i} differs by {np.abs(g1 - g0).max():.3g}")
        print(f"{label}: forward+backward plain {slow * 1e3:.2f} ms, kernel "
              f"{quick * 1e3:.2f} ms, same values")
    x64 = Tensor(rng(75).standard_normal((4, 6)) * 2, dtype=np.float64, requires_grad=True)
    w64, b64 = (Tensor(rng(s).standard_normal(6), dtype=np.float64, requires_grad=True)
                for s in (76, 77))
    with_rule(KERNELS, GELUFunction, GELUTanhKernel,
              lambda: gradcheck(lambda t: gelu(t, approximate="tanh"), [x64]))
    with_rule(KERNELS, LayerNormFunction, LayerNormKernel,
              lambda: gradcheck(lambda t, u, v: layer_norm(t, u, v), [x64, w64, b64]))
    with_rule(DERIVATIVES, Add, add_backward_bias_blas,
              lambda: gradcheck(lambda t, v: t + v, [x64, b64]))


with one_blas_thread():
    check_forward_kernels()


# %% [markdown]
# ## Part 10: when NumPy is the limit, compile the loop
#
# Every kernel so far is a sequence of NumPy calls, and each call is a **pass**: it reads
# its whole input arrays from memory and writes a whole output array back. Module 13's
# layer norm forward, for example, makes these passes over the `(N, C)` rows:
#
# | call | reads | writes |
# | --- | --- | --- |
# | `np.add.reduce(x, axis=-1)` (the mean) | x | |
# | `x - mean` | x | x_hat |
# | `einsum` of `x_hat` with itself (the variance) | x_hat | |
# | `x_hat *= rstd` | x_hat | x_hat |
# | `x_hat * weight` | x_hat | out |
# | `out += bias` | out | out |
#
# Six reads and four writes of `N * C` floats, plus four small `(N, 1)` ones. A loop that
# takes one row at a time does it all in one pass: it reads the row (128 floats, 512 bytes,
# which then sit in the fastest cache), sums it, sums the squared deviations, and writes the
# normalized row, once. Memory traffic drops from ten arrays to two, and nothing is
# allocated but the output. NumPy cannot express "do these five things to each row before
# moving on"; a loop can, but a Python loop costs 50 ns an element (Part 1).
#
# **numba** compiles such a loop. `numba.njit(fn)` reads `fn`'s Python bytecode, infers the
# type of every variable from the types of the arguments of the first call (float32 arrays
# give float32 arithmetic), and hands the result to LLVM, the compiler behind clang, which
# turns it into machine code with SIMD instructions. The function then runs at C speed,
# on NumPy arrays, with no Python in the loop. Only a subset of Python compiles: loops,
# arithmetic, `math`, NumPy arrays and a good part of NumPy's functions; no Python objects,
# no `Tensor`s. The kernels take arrays and write their results into arrays they are given.
#
# Four things to know before writing one:
#
# - **Types come from the first call.** `x.dtype.type` works inside a kernel as in NumPy,
#   and is how a kernel stays float32 for float32 arrays and float64 for the float64
#   gradient checks. Beware Python literals: in numba `x[i] * 2` with a float32 `x` is
#   **float64** (an integer literal is int64, and int64 times float32 is float64 in NumPy's
#   rules); write `T(2)` with `T = x.dtype.type`.
# - **Compiling takes time, once.** The first call with new argument types compiles (a
#   second or so); every later call runs the machine code. `compiled` (given below) asks
#   numba to keep the machine code on disk, `cache=True`: it writes it next to the file
#   that defines the kernel, in `__pycache__` (for your package,
#   `tinytorch/perf/__pycache__/acceleration.*.nbi` and `.nbc`), or in your user cache
#   folder when that one is read-only, so the next process loads it in milliseconds. A
#   notebook cell has no file, so in this notebook each kernel compiles once per session
#   (the lesson compiles about twenty: budget half a minute). Benchmarks report the compile
#   time apart and never count it in step times.
# - **`prange` splits a loop over threads.** With `parallel=True`, a `for` loop over
#   `numba.prange(n)` is divided among numba's threads (as many as cores, by default);
#   without it, `prange` is `range`. Each iteration
#   must be independent: two threads must never write the same element. The kernels here
#   split their rows into `parts` contiguous pieces and loop `prange(parts)`;
#   `chunks(rows, row_size)` (given) picks `parts`: one below `PARALLEL_MIN` elements,
#   where waking a second thread costs more than it saves (measured below), else one per
#   thread.
# - **Which threads run the pieces.** numba hands a `prange` loop to a *threading layer*,
#   and the choice decides both what a call costs and whether the kernels fight BLAS for
#   the cores. Three are on offer, measured on this course's two-core machine:
#   - OpenMP (`omp`, the default on Linux when TBB is absent): its threads spin after each
#     kernel to be awake for the next, and so do OpenBLAS's after each product. A training
#     step alternates the two, and each pool's spinning threads held the cores the other
#     was waiting for: the milestone's step took 323 ms (85 ms otherwise). Telling OpenMP to
#     sleep (`OMP_WAIT_POLICY=PASSIVE`, or a short `GOMP_SPINCOUNT`) fixes that, but the
#     setting is not ours to make: PyTorch shares the same OpenMP library in a process that
#     imports both, and a PyTorch step went from 50 to 75-84 ms.
#   - numba's own `workqueue`: its threads always sleep between kernels, so it never
#     starves BLAS, but waking them costs 50-120 microseconds a call, even for a kernel
#     that runs on one thread. The milestone's training step took 81 ms on it, and an int8
#     decode step of a 24-layer model, a few hundred kernel calls, 85 ms.
#   - Intel's TBB (`tbb`): a work-stealing scheduler whose idle threads back off and sleep
#     on their own, and which no other library here shares: 2-5 microseconds a call, 41.6
#     ms a training step of the milestone, 35 ms an int8 decode step. OpenBLAS's own
#     threads still spin after each product, whatever the layer: Part 3 measures what
#     putting them to sleep (`quiet_blas_threads()`) does.
#
#   So the course installs TBB's wheel with numba (on x86-64 Linux and Windows, where PyPI
#   has it), and `start_kernel_threads()` (given, run as the package loads) starts numba's
#   pool on TBB, or on `workqueue` where TBB cannot load, unless you chose a layer yourself
#   with `NUMBA_THREADING_LAYER`. `kernel_threads()` says which layer runs. (On
#   `workqueue`, two Python threads must not run compiled kernels at the same time.)
# - **One piece, no pool.** Even on TBB, a `prange` loop hands its work to the pool and
#   wakes a thread when there is a single piece. Back to back that costs little, but in a
#   decode step Python runs between the calls, and the woken threads fall back asleep in
#   between: with 100 microseconds of Python between calls, a one-row RMSNorm took 18.6
#   microseconds a call, against 1.0 for the same kernel compiled without `parallel`. One
#   token of a 24-layer model makes 145 such one-piece calls (norms, rotary, SiLU,
#   softmax) besides its 169 products. So a kernel made by `compiled` runs a call whose
#   last argument, `parts`, is 1 with numba's thread count set to 1 for that call
#   (`numba.set_num_threads`, which holds for the calling thread only): the piece runs on
#   the calling thread and wakes nobody, 4.4 microseconds a call.
#   `chunks` gives 1 below `PARALLEL_MIN`, so small work stays on the calling thread.
#   An int8 decode step of that model went from 32.2-33.2 ms to 30.0-30.6 ms (medians
#   of 24 steps, two pairs of runs, alternated).
# - **Fast math, but not all of it.** By default LLVM keeps the exact order of every float
#   operation, which forbids SIMD sums (adding 8 numbers at once reorders the additions).
#   `fastmath` flags allow it: `reassoc` (reorder sums), `contract` (fused multiply-add) and
#   `arcp` (multiply by a reciprocal). The full set adds `nnan` and `ninf`, "assume no NaN
#   and no infinity", and then LLVM may delete the very comparisons that a masked softmax
#   (it adds `-inf`) or an overflow check rely on. `FASTMATH` is the three safe flags.
#
# A compiled kernel is checked like the NumPy ones: against the plain operation (forward
# and every gradient) and by `gradcheck` in float64 through the kernel table. And when one
# misbehaves, `kernel.py_func` is your plain Python function, uncompiled: call it on a
# small array and add prints.

# %% nbgrader={"grade": false, "grade_id": "compile-setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
FASTMATH = frozenset({"contract", "reassoc", "arcp"})  # no nnan/ninf: masks add -inf
PARALLEL_MIN = 1 << 14  # elements below which a kernel runs on one thread (measured below)


def tbb_library():
    """The path of TBB's shared library from the `tbb` wheel (installed with the course on
    x86-64 Linux and Windows), or None where it is not installed.

    >>> path = tbb_library()
    >>> path is None or os.path.basename(path) in ("libtbb.so.12", "tbb12.dll")
    True
    """
    try:
        files = importlib.metadata.files("tbb") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name in ("libtbb.so.12", "tbb12.dll"):
            return str(f.locate())
    return None


def start_kernel_threads():
    """Start numba's thread pool on TBB, or on numba's own `workqueue` where TBB cannot
    load (unless NUMBA_THREADING_LAYER names a layer), and return the layer's name.

    >>> start_kernel_threads() in ("tbb", "workqueue", "omp")
    True
    """
    if "NUMBA_THREADING_LAYER" not in os.environ:
        library = tbb_library()
        try:
            if library is None:
                raise OSError("the tbb wheel is not installed")
            # the wheel puts the library in the environment's lib folder, which the loader
            # does not search: load it first, and numba's tbb layer finds it
            if os.name == "nt":
                os.add_dll_directory(os.path.dirname(library))
            else:
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            numba.config.THREADING_LAYER = "tbb"  # read when the pool starts, just below
            numba.get_num_threads()
        except (OSError, ValueError):  # no TBB, or it did not load: numba's own pool
            numba.config.THREADING_LAYER = "workqueue"
    numba.get_num_threads()
    return numba.threading_layer()


def kernel_threads():
    """The threading layer and the number of threads the compiled kernels run on.

    >>> layer, n = kernel_threads()
    >>> layer in ("tbb", "workqueue", "omp") and n >= 1
    True
    """
    return numba.threading_layer(), numba.get_num_threads()


start_kernel_threads()


def compiled(fn=None, *, fastmath=FASTMATH):
    """fn compiled by numba: prange loops on all threads, the given fast-math flags (False:
    none, every float operation in Python's order), no GIL, and the machine code cached on
    disk when fn is defined in a file (your package; a notebook cell has none).

    >>> @compiled
    ... def twice(x, out):
    ...     for i in prange(x.shape[0]):  # the iterations shared among the threads
    ...         out[i] = 2 * x[i]
    >>> x = np.arange(3, dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> twice(x, out)  # compiled on this first call, for float32 arrays
    >>> out
    array([0., 2., 4.], dtype=float32)
    """
    if fn is None:
        return lambda f: compiled(f, fastmath=fastmath)
    return Kernel(fn, fastmath)


def _jit(fn, **options):
    """numba.njit(fn), its machine code cached on disk when fn is defined in a file"""
    if not os.path.isfile(fn.__code__.co_filename):
        return numba.njit(**options)(fn)
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # numba found nowhere to write its cache
        return numba.njit(**options)(fn)


class Kernel:
    """A compiled kernel (numba's parallel machine code) that runs a call whose last
    argument, the number of pieces `parts`, is 1 on the calling thread alone.

    >>> kernel = compiled(lambda x, out, parts: None)
    >>> kernel.targetoptions["parallel"], kernel.py_func.__name__
    (True, '<lambda>')
    """

    def __init__(self, fn, fastmath=FASTMATH):
        self.py_func = fn  # the plain Python function, to debug with prints
        self.parallel = _jit(fn, parallel=True, nogil=True,
                             fastmath=set(fastmath) if fastmath else False)
        functools.update_wrapper(self, fn)  # the name and docstring of fn

    def __call__(self, *args):
        parts = args[-1] if args else None
        if type(parts) is int and parts == 1:
            threads = numba.get_num_threads()
            if threads > 1:  # one piece: this thread's count set to 1 wakes no other thread
                numba.set_num_threads(1)
                try:
                    return self.parallel(*args)
                finally:
                    numba.set_num_threads(threads)
        return self.parallel(*args)

    def __getattr__(self, name):  # the rest (targetoptions, ...) from the compiled code
        if name == "parallel":  # not made yet (or a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.parallel, name)


def chunks(rows, row_size=1):
    """How many pieces a kernel splits `rows` rows of `row_size` elements into: one per
    thread, but one in all below PARALLEL_MIN elements.

    >>> chunks(10), chunks(PARALLEL_MIN - 1)  # small work: one piece, no thread started
    (1, 1)
    >>> chunks(1000, 1000) == numba.get_num_threads()  # one piece per thread
    True
    """
    if rows * row_size < PARALLEL_MIN:
        return 1
    return max(1, min(numba.get_num_threads(), rows))


def set_threads(n):
    """Use n threads for NumPy's BLAS and for the compiled kernels (at most numba's pool).

    >>> before = blas_threads()
    >>> set_threads(1)
    >>> blas_threads(), numba.get_num_threads()
    (1, 1)
    >>> set_threads(before)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"set_threads(n): n must be a positive integer, got {n!r}")
    set_blas_threads(int(n))
    numba.set_num_threads(min(int(n), numba.config.NUMBA_NUM_THREADS))


# %% [markdown]
# ### Your first compiled kernel: layer norm, forward and backward, one row at a time
#
# Write `layer_norm_rows(x, weight, bias, eps, out, mean, rstd, parts)` for `x` of shape
# `(N, C)`: for each row, its mean, its variance (the mean squared deviation), `rstd = 1 /
# sqrt(var + eps)`, and `out[i, j] = (x[i, j] - mean) * rstd * weight[j] + bias[j]`; keep
# `mean[i]` and `rstd[i]` for backward. The loop over the pieces and the rows of each piece
# is given; write the body for row `i`: three loops over `j`, with the sums in `T`.
#
# Then `layer_norm_rows_backward(grad, x, weight, mean, rstd, dx, dweight, dbias, parts)`.
# With `x_hat = (x - mean) * rstd` recomputed from the row (cheaper than keeping an
# `(N, C)` array of it: one multiply-add against a read from memory) and `g_hat = grad *
# weight`, module 13's rule is
#
# ```
# dx[i, j] = rstd * (g_hat[j] - mean_j(g_hat) - x_hat[j] * mean_j(g_hat * x_hat))
# dweight[j] = sum_i grad[i, j] * x_hat[i, j]      dbias[j] = sum_i grad[i, j]
# ```
#
# The first needs two sums over the row, then a second loop to write it. The last two are
# sums over **rows**, and rows belong to different threads: two threads adding into the
# same `dweight[j]` would lose updates. So each piece `p` adds into its own row,
# `dweight[p, j]` and `dbias[p, j]` (arrays of shape `(parts, C)`, zeros when they arrive),
# and the caller sums the `parts` rows afterwards: a few hundred floats.

# %% nbgrader={"grade": false, "grade_id": "layer-norm-rows", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
@compiled
def layer_norm_rows(x, weight, bias, eps, out, mean, rstd, parts):
    """out = (x - mean) * rstd * weight + bias for each row of x (N, C); mean, rstd (N,) kept

    >>> x = np.array([[3.0, 4.0, 5.0]], dtype=np.float32)
    >>> out, mean, rstd = np.empty_like(x), np.empty(1, np.float32), np.empty(1, np.float32)
    >>> ones, zeros = np.ones(3, np.float32), np.zeros(3, np.float32)
    >>> layer_norm_rows(x, ones, zeros, 1e-5, out, mean, rstd, 1)
    >>> out.round(4), mean
    (array([[-1.2247,  0.    ,  1.2247]], dtype=float32), array([4.], dtype=float32))
    """
    n, c = x.shape
    T = x.dtype.type
    inv_c = T(1.0 / c)
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            ### BEGIN SOLUTION
            total = T(0)
            for j in range(c):
                total += x[i, j]
            m = total * inv_c
            var = T(0)
            for j in range(c):
                d = x[i, j] - m
                var += d * d
            r = T(1) / math.sqrt(var * inv_c + eps)
            for j in range(c):
                out[i, j] = (x[i, j] - m) * r * weight[j] + bias[j]
            mean[i] = m
            rstd[i] = r
            ### END SOLUTION


@compiled
def layer_norm_rows_backward(grad, x, weight, mean, rstd, dx, dweight, dbias, parts):
    """dx (N, C) of layer_norm_rows; dweight, dbias (parts, C): one partial sum per piece

    >>> x = np.array([[3.0, 4.0, 5.0]], dtype=np.float32)  # mean 4, variance 2 / 3
    >>> mean, rstd = np.array([4.0], np.float32), np.array([np.sqrt(1.5)], np.float32)
    >>> grad, ones = np.ones_like(x), np.ones(3, np.float32)
    >>> dx, dw, db = np.empty_like(x), np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float32)
    >>> layer_norm_rows_backward(grad, x, ones, mean, rstd, dx, dw, db, 1)
    >>> dx  # a shift of the whole row does not move the output
    array([[0., 0., 0.]], dtype=float32)
    >>> dw.round(4), db  # grad * x_hat and grad, summed over the piece's rows
    (array([[-1.2247,  0.    ,  1.2247]], dtype=float32), array([[1., 1., 1.]], dtype=float32))
    """
    n, c = x.shape
    T = x.dtype.type
    inv_c = T(1.0 / c)
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            ### BEGIN SOLUTION
            m, r = mean[i], rstd[i]
            sum_g = T(0)
            sum_gx = T(0)
            for j in range(c):
                x_hat = (x[i, j] - m) * r
                g_hat = grad[i, j] * weight[j]
                sum_g += g_hat
                sum_gx += g_hat * x_hat
                dweight[p, j] += grad[i, j] * x_hat
                dbias[p, j] += grad[i, j]
            sum_g *= inv_c
            sum_gx *= inv_c
            for j in range(c):
                x_hat = (x[i, j] - m) * r
                dx[i, j] = r * (grad[i, j] * weight[j] - sum_g - x_hat * sum_gx)
            ### END SOLUTION


# %% [markdown]
# The `Function` around the two kernels is given. It keeps `(rows, mean, rstd)` for
# backward: two floats per row instead of module 13's `x_hat`, a whole `(N, C)` array (the
# input `x` is kept by the record anyway). A layer norm without bias gets a row of zeros, so
# one kernel serves both.

# %% nbgrader={"grade": false, "grade_id": "layer-norm-compiled", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
class LayerNormCompiled(LayerNormFunction):
    """Module 13's layer norm as one compiled pass per row; keeps mean and rstd per row.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import layer_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> with fast_kernels():
    ...     y = layer_norm(x, Tensor(np.ones(3)), Tensor(np.zeros(3)))
    >>> y._ctx.fn.__name__, y.data.round(4)
    ('LayerNormCompiled', array([[-1.2247,  0.    ,  1.2247]], dtype=float32))
    """

    saves_for_backward = True  # forward returns (out, (rows, mean, rstd))

    @staticmethod
    def forward(x, weight, *bias, eps=1e-5):
        c = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape(-1, c)  # (N, C): a view when x is C-ordered
        n = rows.shape[0]
        out = np.empty_like(rows)
        mean, rstd = np.empty(n, x.dtype), np.empty(n, x.dtype)
        b = bias[0] if bias else _constant((c,), 0.0, x.dtype)
        layer_norm_rows(rows, np.ascontiguousarray(weight), np.ascontiguousarray(b),
                        x.dtype.type(eps), out, mean, rstd, chunks(n, c))
        return out.reshape(x.shape), (rows, mean, rstd)


@derivative(LayerNormCompiled)
def layer_norm_compiled_backward(ctx, grad):
    """module 13's rule, from the compiled kernel; the weight and bias sums per piece, added

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import layer_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> w, b = Tensor(np.ones(3), requires_grad=True), Tensor(np.zeros(3), requires_grad=True)
    >>> with fast_kernels(compiled=True):
    ...     (layer_norm(x, w, b) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    >>> w.grad, b.grad  # x_hat times the upstream gradient; the upstream gradient itself
    (Tensor([-1.2247,  0.    ,  3.6742]), Tensor([1., 2., 3.]))
    """
    rows, mean, rstd = ctx.saved
    n, c = rows.shape
    parts = chunks(n, c)
    dx = np.empty_like(rows)
    dweight = np.zeros((parts, c), rows.dtype)
    dbias = np.zeros((parts, c), rows.dtype)
    layer_norm_rows_backward(np.ascontiguousarray(grad).reshape(n, c), rows,
                             np.ascontiguousarray(ctx.inputs[1]), mean, rstd, dx, dweight,
                             dbias, parts)
    grads = (dx.reshape(ctx.inputs[0].shape),
             dweight.sum(axis=0) if ctx.parents[1].requires_grad else None)
    if len(ctx.parents) == 3:
        grads += (dbias.sum(axis=0) if ctx.parents[2].requires_grad else None,)
    return grads


# %% nbgrader={"grade": true, "grade_id": "test_unit_layer_norm_rows", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_layer_norm_rows():
    """The compiled layer norm equals module 13's, forward and gradients; float64 gradcheck."""
    x = Tensor(f32(96, 40, seed=80, scale=3.0) + 1, requires_grad=True)
    w, b = (Tensor(f32(40, seed=s), requires_grad=True) for s in (81, 82))
    weights = f32(96, 40, seed=83)
    results = {}
    for fast in (False, True):
        for t in (x, w, b):
            t.grad = None
        run = lambda: layer_norm(x, w, b)  # noqa: E731
        out = with_rule(KERNELS, LayerNormFunction, LayerNormCompiled, run) if fast else run()
        (out * Tensor(weights)).sum().backward()
        results[fast] = out.data, [t.grad.data for t in (x, w, b)]
    (want, want_g), (got, got_g) = results[False], results[True]
    assert got.dtype == np.float32 and np.allclose(got, want, atol=1e-5), (
        f"layer_norm_rows differs from module 13's layer norm by {np.abs(got - want).max():.3g}"
        ": the mean and the variance are over the row (j), var is the mean of (x - mean)^2, "
        "rstd = 1 / sqrt(var + eps), and mean[i], rstd[i] must be written for backward")
    for name, g1, g0 in zip(("dx", "dweight", "dbias"), got_g, want_g):
        assert g1.dtype == np.float32 and np.allclose(g1, g0, atol=1e-4), (
            f"{name} differs from module 13's rule by {np.abs(g1 - g0).max():.3g}: "
            "dx = rstd (g_hat - mean(g_hat) - x_hat mean(g_hat x_hat)) with g_hat = grad * "
            "weight; dweight[p, j] += grad * x_hat and dbias[p, j] += grad, into the row p "
            "of the piece (the caller sums the rows)")
    x64 = Tensor(rng(84).standard_normal((5, 6)) * 2, dtype=np.float64, requires_grad=True)
    w64, b64 = (Tensor(rng(s).standard_normal(6), dtype=np.float64, requires_grad=True)
                for s in (85, 86))
    with_rule(KERNELS, LayerNormFunction, LayerNormCompiled,
              lambda: gradcheck(lambda t, u, v: layer_norm(t, u, v), [x64, w64, b64]))

    def norm64(x, w, b, eps, g):
        """Layer norm over the last axis and its gradients for the upstream g, in float64:
        out, mean, rstd, dx, and the per-row terms of dweight and dbias."""
        x, w, g = (a.astype(np.float64) for a in (x, w, g))
        mean = x.mean(axis=-1, keepdims=True)
        rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
        x_hat = (x - mean) * rstd
        g_hat = g * w
        dx = rstd * (g_hat - g_hat.mean(axis=-1, keepdims=True)
                     - x_hat * (g_hat * x_hat).mean(axis=-1, keepdims=True))
        return x_hat * w + (0 if b is None else b), mean, rstd, dx, g * x_hat, g

    def check_norm(x, w, b, eps, tol):
        """layer_norm through LayerNormCompiled against the float64 formulas: the output and
        the gradients of x, weight and bias, in x's dtype."""
        xt = Tensor(x, dtype=x.dtype, requires_grad=True)
        wt = Tensor(w, dtype=x.dtype, requires_grad=True)
        bt = None if b is None else Tensor(b, dtype=x.dtype, requires_grad=True)
        g = rng(220).standard_normal(x.shape).astype(x.dtype)
        out = with_rule(KERNELS, LayerNormFunction, LayerNormCompiled,
                        lambda: layer_norm(xt, wt, bt, eps=eps))
        with_rule(KERNELS, LayerNormFunction, LayerNormCompiled,
                  lambda: (out * Tensor(g, dtype=x.dtype)).sum().backward())
        want, _, _, dx, dw, db = norm64(x, w, b, eps, g)
        kind = f"{x.dtype} x {x.shape}, eps={eps}, bias {b is not None}"
        assert out.dtype == x.dtype and np.allclose(out.data, want, rtol=tol, atol=tol), (
            f"{kind}: the output differs from (x - mean) * rstd * weight + bias by "
            f"{np.abs(out.data - want).max():.3g}: mean first, then the mean of (x - mean)^2 "
            "(not mean(x^2) - mean^2, which cancels), and the eps you are given")
        rows = (-1, x.shape[-1])
        pairs = [("dx", xt, dx), ("dweight", wt, dw.reshape(rows).sum(0))]
        pairs += [] if b is None else [("dbias", bt, db.reshape(rows).sum(0))]
        for name, t, want_g in pairs:
            size = max(1.0, float(np.abs(want_g).max()))
            assert t.grad is not None and t.grad.dtype == x.dtype and np.allclose(
                t.grad.data, want_g, rtol=tol * 10, atol=tol * 10 * size), (
                f"{kind}: {name} differs from module 13's rule by "
                f"{np.abs(t.grad.data - want_g).max():.3g}")

    def check_pieces(x, w, b, eps, parts):
        """layer_norm_rows and its backward called with `parts` pieces: every row's out, mean
        and rstd, dx, and in row p of dweight and dbias the sums over piece p's rows only."""
        n, c = x.shape
        out, mean, rstd = np.empty_like(x), np.empty(n, x.dtype), np.empty(n, x.dtype)
        layer_norm_rows(x, w, b, x.dtype.type(eps), out, mean, rstd, parts)
        g = rng(221).standard_normal((n, c)).astype(x.dtype)
        dx, dweight, dbias = np.empty_like(x), np.zeros((parts, c), x.dtype), np.zeros(
            (parts, c), x.dtype)
        layer_norm_rows_backward(g, x, w, mean, rstd, dx, dweight, dbias, parts)
        want, want_mean, want_rstd, want_dx, dw, db = norm64(x, w, b, eps, g)
        kind = f"{parts} pieces of {n} rows of {c}, eps={eps}"
        for name, got, ref in (("out", out, want), ("mean", mean, want_mean[:, 0]),
                               ("rstd", rstd, want_rstd[:, 0]), ("dx", dx, want_dx)):
            size = max(1.0, float(np.abs(ref).max()))
            assert np.allclose(got, ref, rtol=1e-4, atol=1e-4 * size), (
                f"{kind}: {name} differs from the formula by {np.abs(got - ref).max():.3g}")
        for p in range(parts):
            piece = slice(p * n // parts, (p + 1) * n // parts)
            for name, got, ref in (("dweight", dweight, dw), ("dbias", dbias, db)):
                assert np.allclose(got[p], ref[piece].sum(axis=0), rtol=1e-4, atol=1e-4), (
                    f"{kind}: row {p} of {name} is not the sum over the rows of piece {p}: "
                    "add into row p of the piece (dweight[p, j] += ...), never another row")

    check_norm(x.data[:4], w.data, b.data, 1e-5, 1e-5)
    check_pieces(x.data[:6].copy(), w.data, b.data, 1e-5, 2)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(222)
    flat = f32(5, 12, seed=223)
    flat[2] = 0.25  # a constant row: variance 0
    hidden_cases(check_norm, {
        "a large eps": (f32(6, 10, seed=224, scale=2.0), f32(10, seed=225), f32(10, seed=226),
                        0.5, 1e-5),
        "a batch of sequences": (f32(2, 5, 16, seed=227), f32(16, seed=228), f32(16, seed=229),
                                 1e-5, 1e-5),
        "float64 rows": (gen.standard_normal((7, 9)) * 3, gen.standard_normal(9),
                         gen.standard_normal(9), 1e-6, 1e-10),
        "a constant row": (flat, f32(12, seed=230), f32(12, seed=231), 1e-5, 1e-4),
        "rows far from zero": (f32(8, 24, seed=232) + 1000, f32(24, seed=233),
                               f32(24, seed=234), 1e-5, 2e-3),
        "no bias": (f32(4, 8, seed=235, scale=2.0), f32(8, seed=236), None, 1e-5, 1e-5),
        "one feature": (f32(4, 1, seed=246), f32(1, seed=247), f32(1, seed=248), 1e-5, 1e-5),
    })
    hidden_cases(check_pieces, {
        "rows split into pieces": (f32(50, 24, seed=237), f32(24, seed=238), f32(24, seed=239),
                                   1e-5, 3),
        "more pieces than rows": (f32(3, 8, seed=240), f32(8, seed=241), f32(8, seed=242),
                                  1e-5, 4),
        "a large eps in pieces": (f32(9, 6, seed=243, scale=3.0), f32(6, seed=244),
                                  f32(6, seed=245), 2.0, 2),
    })
    ### END HIDDEN TESTS


test_unit_layer_norm_rows()

# %% [markdown]
# ### What compiling bought, and when threads pay
#
# The cell measures three things on your machine: what compiling your kernel cost (numba
# records it) against a call afterwards; the NumPy layer norm against the compiled one at
# the milestone's size `(768, 128)`, forward and backward; and the compiled forward on one
# thread against all threads, at growing row counts, which is where `PARALLEL_MIN` comes
# from. On a machine busy with other work, threads wait for each other (a parallel loop
# ends when its slowest thread does, and that one may be waiting for a core): the sweep then
# shows erratic times, and one thread is the honest measure.

# %% nbgrader={"grade": false, "grade_id": "demo-compiled-layer-norm", "locked": false, "schema_version": 3, "solution": false, "task": false}
def compiled_layer_norm_report():
    x = f32(768, 128, seed=90)
    w, b = f32(128, seed=91), f32(128, seed=92)
    out, mean, rstd = np.empty_like(x), np.empty(768, np.float32), np.empty(768, np.float32)
    eps = np.float32(1e-5)
    # numba keeps what compiling cost, per compiled signature (the first was float32)
    timers = layer_norm_rows.get_metadata(layer_norm_rows.signatures[0])["timers"]
    again = best_time(lambda: layer_norm_rows(x[:2], w, b, eps, out[:2], mean[:2], rstd[:2],
                                              1), repeat=20)
    python = best_time(lambda: layer_norm_rows.py_func(x[:2], w, b, eps, out[:2], mean[:2],
                                                       rstd[:2], 1), repeat=3)
    print(f"compiling layer_norm_rows for float32 took {timers['compiler_lock']:.2f} s; a call "
          f"then takes {again * 1e6:.1f} us; the same 2 rows in Python "
          f"(layer_norm_rows.py_func): {python * 1e6:.0f} us")
    xs = Tensor(x, requires_grad=True)
    ws, bs = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
    grad = Tensor(f32(768, 128, seed=93))
    times = {}
    for fast in (False, True):
        def forward():
            return layer_norm(xs, ws, bs)

        def both():
            (forward() * grad).sum().backward()

        run = ((lambda f: with_rule(KERNELS, LayerNormFunction, LayerNormCompiled, f)) if fast
               else (lambda f: f()))
        run(both)  # warm up (and compile the backward)
        times[fast] = (best_time(lambda: run(forward), repeat=20),
                       best_time(lambda: run(both), repeat=10))
    (f0, b0), (f1, b1) = times[False], times[True]
    print(f"layer norm (768, 128): module 13 forward {f0 * 1e6:.0f} us, forward+backward "
          f"{b0 * 1e6:.0f} us; compiled {f1 * 1e6:.0f} us and {b1 * 1e6:.0f} us "
          f"({f0 / f1:.1f}x, {b0 / b1:.1f}x)")
    n_threads = numba.get_num_threads()
    if n_threads < 2:
        print("one thread for the compiled kernels here: nothing to split")
        return
    for rows in (16, 64, 256, 1024, 4096):
        xr = f32(rows, 128, seed=94)
        o, m, r = np.empty_like(xr), np.empty(rows, np.float32), np.empty(rows, np.float32)
        one = best_time(lambda: layer_norm_rows(xr, w, b, eps, o, m, r, 1), repeat=30)
        all_ = best_time(lambda: layer_norm_rows(xr, w, b, eps, o, m, r, n_threads), repeat=30)
        print(f"  {rows:5d} rows x 128 ({rows * 128:>7,} elements): 1 thread {one * 1e6:6.1f} us, "
              f"{n_threads} threads {all_ * 1e6:6.1f} us ({one / all_:.2f}x)")


compiled_layer_norm_report()

# %% [markdown]
# What to look for: compiling costs about a second on the first call, then a call costs
# microseconds, and the compiled kernel runs several times faster than NumPy's passes on
# the same rows (about 3x forward at `(768, 128)` when this lesson was written). The thread
# sweep shows the price of going parallel: at 16 rows a second thread only adds the cost of
# waking it and waiting for it; the gain appears somewhere between a few thousand and a few
# tens of thousands of elements, and grows with the size. `PARALLEL_MIN` (16,384 elements)
# sits at that crossing on the machine where this lesson was measured; yours may differ.
#
# ## Part 11: exp without a library call; attention, GELU, cross-entropy and AdamW compiled
#
# Try the obvious compiled softmax or GELU, with `math.exp` or `math.tanh` in the loop, and
# it is *slower* than NumPy: each `math.exp` is a call into the C math library, one number
# at a time (5 to 25 ns, measured below), while NumPy's own `exp` and `tanh` work on 8 or 16
# floats at once (SIMD). A loop that calls the library cannot be vectorized. The fix is to
# compute `exp` from operations that vectorize, the way those SIMD routines do:
#
# - write `x = n ln 2 + r` with `n = round(x / ln 2)`, so that `|r| <= ln(2) / 2`
#   (`r` is computed in two steps, `x - n * hi - n * lo` with `ln 2 = hi + lo` and `hi` so
#   short that `n * hi` is exact: one step would lose `r`'s low digits);
# - `exp(r)` on that small interval is a short polynomial: the Taylor series
#   `1 + r + r^2/2 + ... + r^7/7!` is accurate to about one unit in the last place (ulp) of
#   a float32 (the next term is below `6e-9`);
# - `2^n` needs no arithmetic at all: a float32 is a sign bit, 8 exponent bits and 23
#   mantissa bits, so the float whose bits are `(n + 127) << 23` *is* `2^n`. The given
#   helper `_float32_from_bits` reinterprets an integer's 32 bits as a float (an LLVM
#   `bitcast`: no instruction at all).
#
# Clamping the input keeps `n` in range: above about 88.7 the result is `inf`, as `np.exp`
# gives; below about -87, where `exp` leaves float32's normal range (results under
# `1.2e-38`, which only subnormal floats can hold), it is 0. No softmax or GELU notices.
# `fast_exp(x)` uses this for float32 and the library's `exp` for float64, whose only job
# here is the gradient checks. It is given, with a check of its accuracy in ulps.
#
# GELU needs `tanh`, but not really: `0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))`, the sigmoid
# of `2u` (multiply the top and bottom of `tanh`'s definition by `exp(-u)`). So
# `gelu(x) = x * s` with `s = 1 / (1 + e)` and `e = exp(-2u)`: one `exp` and one division.
# The backward gets better too. Module 06's slope `0.5 (1 + t) + 0.5 x (1 - t^2) u'` needs
# `1 - t^2`, which cancels to nothing where `t` is near 1 or -1; with the sigmoid, `1 - t^2
# = 4 s (1 - s)` and `1 - s = e s` is computed without a subtraction. The slope is
# `s + 2 x s (1 - s) u'`.

# %% nbgrader={"grade": false, "grade_id": "fast-exp", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose 32 bits are those of the integer `bits` (reinterpreted, not converted)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        elif bits.bitwidth < 32:
            value = builder.sext(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


_LOG2E = 1.0 / math.log(2.0)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = HI + LO; n * HI is exact in float32


@numba.njit(inline="always")
def _exp32(x):
    """exp(x) for a float32, in operations that vectorize: 2^n * exp(r), x = n ln 2 + r."""
    low, high = np.float32(-87.0), np.float32(88.8)
    clamped = x if x > low else low
    clamped = clamped if clamped < high else high
    t = clamped * np.float32(_LOG2E)
    n = np.int32(t + np.float32(0.5) if t >= np.float32(0) else t - np.float32(0.5))  # round
    nf = np.float32(n)
    # r = x - n ln 2 in two steps, ln 2's high part first (its product with n is exact). This
    # relies on FASTMATH having no "nsz": with it LLVM may merge the steps into n * ln(2).
    r = (clamped - nf * np.float32(_LN2_HI)) - nf * np.float32(_LN2_LO)  # |r| <= ln(2) / 2
    p = np.float32(1 / 5040) + r * np.float32(1 / 40320)  # Taylor series of exp(r), Horner
    p = np.float32(1 / 720) + r * p
    p = np.float32(1 / 120) + r * p
    p = np.float32(1 / 24) + r * p
    p = np.float32(1 / 6) + r * p
    p = np.float32(0.5) + r * p
    p = np.float32(1) + r * p
    p = np.float32(1) + r * p
    # 2^n as 2^(n-1) * 2, so that n = 128 (results up to float32's max) stays representable
    y = p * _float32_from_bits((n + np.int32(126)) << np.int32(23)) * np.float32(2)
    y = np.float32(0) if x < np.float32(-86.5) else y  # below float32's normal range
    return x if x != x else y  # NaN stays NaN


def fast_exp(x):
    """exp(x) inside compiled kernels: float32 without a library call, float64 exactly.

    >>> x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> exp_rows(x, out, 1)  # fast_exp runs inside compiled code; exp_rows calls it
    >>> bool(np.allclose(out, np.exp(x), rtol=1e-6))
    True
    """
    return math.exp(x)


@overload(fast_exp, inline="always")  # inlined: a call would stop SIMD
def _fast_exp_kernel(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: math.exp(x)


@compiled
def exp_rows(x, out, parts):
    """out = fast_exp(x), element by element (x, out flat): fast_exp from Python

    >>> x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> exp_rows(x, out, 1)
    >>> np.allclose(out, np.exp(x), rtol=1e-6)
    True
    """
    n = x.shape[0]
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        xs, outs = x[lo:hi], out[lo:hi]
        for i in range(xs.shape[0]):
            outs[i] = fast_exp(xs[i])


# %% nbgrader={"grade": false, "grade_id": "check-fast-exp", "locked": true, "schema_version": 3, "solution": false, "task": false}
def ulps(got, want):
    """|got - want| in units in the last place of float32 at want (want in float64)."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def check_fast_exp():
    x = np.concatenate([np.linspace(-86, 88.7, 200_001, dtype=np.float32),
                        f32(100_000, seed=95, scale=5.0)])
    got = np.empty_like(x)
    exp_rows(x, got, 1)
    worst = ulps(got, np.exp(x.astype(np.float64))).max()
    edges = np.array([-np.inf, -1000, -90, 89, 1000, np.inf, np.nan], dtype=np.float32)
    out = np.empty_like(edges)
    exp_rows(edges, out, 1)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(edges)
    want[np.abs(want) < np.finfo(np.float32).tiny] = 0  # below the normal range: flushed to 0
    assert np.array_equal(out, want, equal_nan=True), f"fast_exp at the edges: {out}, not {want}"
    assert worst <= 2, f"fast_exp is {worst:.1f} ulp away from exp"
    fast = best_time(lambda: exp_rows(x, got, 1), repeat=10)
    numpy = best_time(lambda: np.exp(x, out=got), repeat=10)
    library_exp(x[:2], got[:2])  # compile first
    library = best_time(lambda: library_exp(x, got), repeat=3)
    print(f"fast_exp: at most {worst:.1f} ulp from exp. exp of {x.size:,} float32 on one "
          f"thread: a compiled loop calling math.exp {library * 1e6:.0f} us, fast_exp "
          f"{fast * 1e6:.0f} us, np.exp {numpy * 1e6:.0f} us")


@numba.njit
def library_exp(x, out):
    for i in range(x.size):
        out[i] = math.exp(x[i])  # one call into the C library per element


check_fast_exp()

# %% [markdown]
# ### The attention softmax, compiled
#
# Attention's scores `(B, H, T, S)` come from a matrix product, and BLAS stays the right
# tool for those. What follows the product is Part 7's softmax: scale, mask, max, `exp`,
# row sum, divide, six passes in NumPy. Compiled, it is one visit per row of `S` floats,
# while the row sits in the fastest cache:
#
# 1. the maximum of `scale * s[j]` over the kept entries (`keep[j]` True). A row with no
#    kept entry becomes zeros, as in module 12;
# 2. `e_j = fast_exp(scale * s[j] - max)` for kept entries, `0` for masked ones, written
#    back into the row, and their sum;
# 3. every entry times `1 / sum`.
#
# Write `softmax_rows(scores, keep, scale, parts)`, in place, for `scores` of shape
# `(R, T, S)` (the caller folds `B` and `H` into `R`) and `keep` of the same shape, bool
# (a broadcast view: a causal `(T, S)` mask costs no memory). The row loop is given:
# `s = scores[r, t]` and `kept = keep[r, t]` are views of one row.
#
# Then `softmax_rows_backward(probs, d_probs, scale, parts)`: with `P` the row of
# probabilities and `dP` the gradient of the probabilities (`dO @ V^T`, computed by BLAS),
# the gradient of the scaled scores is Part 7's `dS = P * (dP - rowsum(P * dP))`; here the
# kernel also multiplies by `scale`, so that `dQ = dS @ K` needs no further pass. In place,
# into `d_probs`: one sum over the row, then one loop that writes it.

# %% nbgrader={"grade": false, "grade_id": "softmax-rows", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
@compiled
def softmax_rows(scores, keep, scale, parts):
    """In place: each row of scores (R, T, S) becomes softmax(scale * row) over its kept
    entries (keep, bool, same shape); masked weights 0, a row with nothing kept all 0

    >>> scores = np.zeros((1, 2, 3), dtype=np.float32)  # R=1 matrix, T=2 rows, S=3 keys
    >>> keep = np.array([[[True, True, True], [True, False, False]]])
    >>> softmax_rows(scores, keep, np.float32(0.5), 1)
    >>> scores.round(3)
    array([[[0.333, 0.333, 0.333],
            [1.   , 0.   , 0.   ]]], dtype=float32)
    """
    n_r, n_t, n_s = scores.shape
    rows = n_r * n_t
    T = scores.dtype.type
    for p in prange(parts):
        for row in range(p * rows // parts, (p + 1) * rows // parts):
            s, kept = scores[row // n_t, row % n_t], keep[row // n_t, row % n_t]
            ### BEGIN SOLUTION
            top = T(-np.inf)
            for j in range(n_s):
                if kept[j]:
                    top = max(top, s[j] * scale)
            if top == T(-np.inf):  # every key masked
                for j in range(n_s):
                    s[j] = T(0)
                continue
            total = T(0)
            for j in range(n_s):
                e = fast_exp(s[j] * scale - top) if kept[j] else T(0)
                s[j] = e
                total += e
            inv = T(1) / total
            for j in range(n_s):
                s[j] *= inv
            ### END SOLUTION


@compiled
def softmax_rows_backward(probs, d_probs, scale, parts):
    """In place: d_probs (R, T, S) becomes scale * P * (dP - rowsum(P * dP)), row by row

    >>> probs = np.array([[[0.5, 0.5]]], np.float32)
    >>> d_probs = np.array([[[1.0, 0.0]]], np.float32)  # rowsum(P * dP) = 0.5
    >>> softmax_rows_backward(probs, d_probs, np.float32(1.0), 1)
    >>> d_probs  # 0.5 * (1 - 0.5), 0.5 * (0 - 0.5)
    array([[[ 0.25, -0.25]]], dtype=float32)
    """
    n_r, n_t, n_s = probs.shape
    rows = n_r * n_t
    T = probs.dtype.type
    for p in prange(parts):
        for row in range(p * rows // parts, (p + 1) * rows // parts):
            pr, dr = probs[row // n_t, row % n_t], d_probs[row // n_t, row % n_t]
            ### BEGIN SOLUTION
            dot = T(0)
            for j in range(n_s):
                dot += pr[j] * dr[j]
            for j in range(n_s):
                dr[j] = scale * pr[j] * (dr[j] - dot)
            ### END SOLUTION


# %% [markdown]
# The `Function` is given, and it is Part 7's attention with the two kernels in place of
# the NumPy softmax: `q @ k^T` by BLAS, `softmax_rows` in place, `P @ v` by BLAS; backward
# `dV = P^T dO` and `dP = dO V^T` by BLAS, `softmax_rows_backward`, then `dQ = dS K` and
# `dK = dS^T Q`. It keeps `P` as Part 7 does. With dropout it hands the call to Part 7's
# NumPy kernel: the milestone trains without it, and one path for the rare case is enough.

# %% nbgrader={"grade": false, "grade_id": "attention-compiled", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
_ALL_KEPT = np.ones((1, 1), dtype=bool)  # the mask of attention without a mask


def _rows_of(a):
    """(..., T, S) -> (R, T, S), a view when a is C-ordered (or a broadcast view)."""
    return a.reshape((-1,) + a.shape[-2:])


class AttentionCompiled(AttentionKeepFunction):
    """Part 7's attention with the softmax and its gradient compiled; keeps P.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.attention import scaled_dot_product_attention
    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)), requires_grad=True)  # equal scores
    >>> v = Tensor([[[[0.0], [3.0], [6.0]]]])
    >>> with fast_kernels(compiled=True):
    ...     out = scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> out._ctx.fn.__name__, out.data.ravel().tolist()  # the mean of the values seen
    ('AttentionCompiled', [0.0, 1.5, 3.0])
    """

    saves_for_backward = True  # forward returns (out, (probs, dropped))

    @staticmethod
    def forward(q, k, v, keep=None, drop=None):
        if drop is not None:
            return AttentionKeepFunction.forward(q, k, v, keep, drop)
        scores = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., T, S), a new array
        mask = np.broadcast_to(_ALL_KEPT if keep is None else keep, scores.shape)
        probs = _rows_of(scores)  # (R, T, S) view
        softmax_rows(probs, _rows_of(mask), q.dtype.type(1.0 / math.sqrt(q.shape[-1])),
                     chunks(probs.shape[0] * probs.shape[1], probs.shape[2]))
        return np.matmul(scores, v), (scores, scores)  # (..., T, Dv)


@derivative(AttentionCompiled)
def attention_compiled_backward(ctx, grad):
    """Part 7's rule, dS from the compiled kernel (scale included); dropout: Part 7's own

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.attention import scaled_dot_product_attention
    >>> q = k = Tensor(np.zeros((1, 1, 3, 2)), requires_grad=True)  # equal scores
    >>> v = Tensor(np.zeros((1, 1, 3, 1)), requires_grad=True)
    >>> with fast_kernels(compiled=True):
    ...     scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    >>> v.grad.data.ravel().round(4)  # dV = P^T dO: each key's total weight, 1 + 1/2 + 1/3, ...
    array([1.8333, 0.8333, 0.3333], dtype=float32)
    """
    if ctx.params.get("drop") is not None:
        return attention_keep_backward(ctx, grad)
    q, k, v = ctx.inputs
    probs = ctx.saved[0]  # (..., T, S)
    want_q, want_k, want_v = (p.requires_grad for p in ctx.parents)
    grads = [None, None, np.matmul(np.swapaxes(probs, -1, -2), grad) if want_v else None]
    if want_q or want_k:
        d_scores = np.matmul(grad, np.swapaxes(v, -1, -2))  # dP, a new array; dS in place
        rows = _rows_of(d_scores)
        softmax_rows_backward(_rows_of(probs), rows, q.dtype.type(1.0 / math.sqrt(q.shape[-1])),
                              chunks(rows.shape[0] * rows.shape[1], rows.shape[2]))
        if want_q:
            grads[0] = np.matmul(d_scores, k)
        if want_k:
            grads[1] = np.matmul(np.swapaxes(d_scores, -1, -2), q)
    return tuple(grads)


# %% nbgrader={"grade": true, "grade_id": "test_unit_softmax_rows", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_softmax_rows():
    """The compiled attention equals module 12's with and without masks; float64 gradcheck."""
    q, k, v = (f32(2, 3, 6, 4, seed=s, scale=2.0) for s in (100, 101, 102))
    causal = np.tril(np.ones((6, 6), dtype=bool))
    keep = causal & (rng(103).random((6, 6)) > 0.2)
    keep[2] = False  # a fully masked row
    for mask in (None, causal, keep):
        want_out, want_grads = run_attention(AttentionFunction, q, k, v, mask)
        got_out, got_grads = run_attention(AttentionCompiled, q, k, v, mask)
        assert got_out.dtype == np.float32 and np.allclose(got_out, want_out, atol=1e-5), (
            f"forward differs from module 12's by {np.abs(got_out - want_out).max():.3g} "
            f"(mask: {mask is not None}): softmax_rows takes the max of scale * s over kept "
            "entries, exp(scale * s - max) for kept entries and 0 for masked ones, then "
            "divides by the sum; a row with nothing kept becomes zeros")
        for name, got, want in zip("qkv", got_grads, want_grads):
            assert np.allclose(got, want, atol=1e-4), (
                f"d{name} differs from module 12's rule by {np.abs(got - want).max():.3g} "
                f"(mask: {mask is not None}): softmax_rows_backward writes scale * P * (dP - "
                "rowsum(P * dP)) into d_probs")
    q64, k64, v64 = (Tensor(rng(s).standard_normal((1, 2, 5, 3)), dtype=np.float64,
                            requires_grad=True) for s in (104, 105, 106))
    with_rule(KERNELS, AttentionFunction, AttentionCompiled,
              lambda: gradcheck(lambda a, b, c: scaled_dot_product_attention(
                  a, b, c, is_causal=True), [q64, k64, v64]))

    def softmax64(scores, keep):
        """softmax over the last axis in float64, masked entries 0, rows with none kept 0."""
        scores = np.where(keep, scores.astype(np.float64), -np.inf)
        top = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - np.where(np.isfinite(top), top, 0))
        total = e.sum(axis=-1, keepdims=True)
        return e / np.where(total == 0, 1, total)

    def check_compiled(q, k, v, keep=None):
        """AttentionCompiled against softmax(q k^T / sqrt(D)) @ v in float64, and its
        gradients against module 12's rule."""
        got, got_grads = run_attention(AttentionCompiled, q, k, v, keep)
        _, want_grads = run_attention(AttentionFunction, q, k, v, keep)
        scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        want = softmax64(scores, True if keep is None else keep) @ v.astype(np.float64)
        kind = f"q {q.shape}, k {k.shape}, v {v.shape}, {q.dtype}, mask {keep is not None}"
        tol = 1e-10 if q.dtype == np.float64 else 1e-5
        reach = max(1.0, float(np.abs(scores).max()))
        assert got.dtype == q.dtype and got.shape == want.shape and np.allclose(
            got, want, rtol=tol, atol=tol * reach), (
            f"{kind}: the forward differs from softmax(q k^T / sqrt(D)) @ v by "
            f"{np.abs(got - want).max():.3g}: subtract the row's max (of the kept entries) "
            "before exp, so that no exp overflows; a row with nothing kept is all zeros")
        for name, g1, g0 in zip("qkv", got_grads, want_grads):
            size = max(1.0, float(np.abs(g0).max()))
            assert np.allclose(g1, g0, rtol=tol * 10, atol=tol * 10 * size), (
                f"{kind}: d{name} differs from module 12's rule by {np.abs(g1 - g0).max():.3g}")

    def check_rows(scores, mask, scale, parts):
        """softmax_rows and softmax_rows_backward called with `parts` pieces on (R, T, S)
        rows and a mask broadcast from (T, S), against the float64 formulas."""
        keep = np.broadcast_to(mask, scores.shape)  # as AttentionCompiled passes it
        probs = scores.copy()
        softmax_rows(probs, keep, scores.dtype.type(scale), parts)
        want = softmax64(scores.astype(np.float64) * scale, keep)
        kind = f"{parts} pieces of rows {scores.shape}, scale {scale}"
        reach = max(1.0, float(np.abs(scores).max()) * scale)
        assert np.allclose(probs, want, rtol=1e-5, atol=1e-6 * reach), (
            f"{kind}: softmax_rows differs from softmax(scale * s) over the kept entries by "
            f"{np.abs(probs - want).max():.3g}")
        d_probs = rng(250).standard_normal(scores.shape).astype(scores.dtype)
        p64 = probs.astype(np.float64)
        want_d = scale * p64 * (d_probs - (p64 * d_probs).sum(axis=-1, keepdims=True))
        softmax_rows_backward(probs, d_probs, scores.dtype.type(scale), parts)
        assert np.allclose(d_probs, want_d, rtol=1e-5, atol=1e-6), (
            f"{kind}: softmax_rows_backward differs from scale * P * (dP - rowsum(P * dP)) by "
            f"{np.abs(d_probs - want_d).max():.3g}")

    check_compiled(q[:1], k[:1], v[:1], causal)
    check_rows(f32(2, 6, 6, seed=107), causal, 0.5, 1)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    gen = rng(251)
    lower = np.tril(np.ones((5, 5), dtype=bool))
    some = gen.random((4, 6)) > 0.4
    some[1] = False  # a row with nothing kept
    hidden_cases(check_compiled, {
        "more keys than queries": (f32(2, 2, 3, 4, seed=252), f32(2, 2, 7, 4, seed=253),
                                   f32(2, 2, 7, 4, seed=254)),
        "values wider than keys, causal": (f32(1, 3, 5, 4, seed=255), f32(1, 3, 5, 4, seed=256),
                                           f32(1, 3, 5, 6, seed=257), lower),
        "a wider head, causal": (f32(2, 2, 5, 16, seed=258), f32(2, 2, 5, 16, seed=259),
                                 f32(2, 2, 5, 16, seed=260), lower),
        "no head axis": (f32(2, 5, 8, seed=261), f32(2, 5, 8, seed=262), f32(2, 5, 8, seed=263),
                         lower),
        "every row masked": (f32(1, 2, 3, 4, seed=264), f32(1, 2, 3, 4, seed=265),
                             f32(1, 2, 3, 4, seed=266), np.zeros((3, 3), dtype=bool)),
        "large scores": (f32(2, 2, 5, 4, seed=267, scale=30.0), f32(2, 2, 5, 4, seed=268,
                                                                  scale=30.0),
                         f32(2, 2, 5, 4, seed=269), lower),
        "a mask shared by every head": (f32(2, 2, 4, 4, seed=270), f32(2, 2, 6, 4, seed=271),
                                        f32(2, 2, 6, 4, seed=272), some),
        "float64 inputs, causal": (gen.standard_normal((2, 2, 5, 3)),
                                   gen.standard_normal((2, 2, 5, 3)),
                                   gen.standard_normal((2, 2, 5, 3)), lower),
        "a single query": (f32(2, 2, 1, 4, seed=273), f32(2, 2, 6, 4, seed=274),
                           f32(2, 2, 6, 4, seed=275)),
    })
    hidden_cases(check_rows, {
        "rows split into pieces": (f32(4, 4, 6, seed=276, scale=3.0), some, 0.35, 3),
        "more pieces than rows": (f32(2, 1, 5, seed=277), np.ones((1, 5), dtype=bool), 1.0, 4),
        "large scores in pieces": (f32(3, 5, 5, seed=278, scale=200.0), lower, 0.5, 2),
    })
    ### END HIDDEN TESTS


test_unit_softmax_rows()

# %% [markdown]
# ### GELU, cross-entropy and AdamW: the same pattern, given
#
# Three more kernels complete the training step. Read them: they use nothing new.
#
# - **GELU (tanh form)**, forward and backward, element by element in the sigmoid form
#   above. The backward recomputes `exp(-2u)` instead of keeping anything (Part 9 kept
#   `tanh(u)`): recomputing is now cheaper than reading a kept array back from memory, and
#   the record holds nothing. The erf form runs module 02's forward and module 06's rule.
# - **Softmax-cross-entropy.** Forward: per row, the max, the sum of `exp`, the log-sum-exp
#   `lse`, and the loss `lse - logits[target]` (0 for an ignored row); it keeps `lse` (one
#   float per row). Backward: `exp(logits - lse) - onehot`, times each row's scale, written
#   once. Anything unusual (a target out of range, a wrong shape, an unknown reduction) goes
#   to module 04's forward, which raises its teaching error: a compiled kernel does not check
#   its indices, and reading past an array is a crash, not an error.
# - **AdamW in one pass per parameter.** `CompiledAdamW` is `FusedAdamW` (Part 8) whose
#   `step` hands each parameter, its gradient and its two state arrays to one compiled loop
#   that reads each element once and writes it once (Part 8 made eleven passes). One call
#   for all parameters at once is possible too, with a tuple of arrays, but numba compiles
#   a tuple of 27 arrays as 27 cases of every access: 36 seconds of compiling, again for
#   each model size, to save 26 calls of a few microseconds. The kernel is compiled
#   **without** fast-math flags: every float operation in Part 8's order, so the result is
#   AdamW's to the bit, as Part 8's was.

# %% nbgrader={"grade": false, "grade_id": "gelu-ce-adamw-compiled", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@compiled
def gelu_tanh_rows(x, out, parts):
    """out = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = c (x + k x^3), element by element

    >>> x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> gelu_tanh_rows(x, out, 1)
    >>> out.round(4)
    array([-0.1588,  0.    ,  1.9546], dtype=float32)
    """
    n = x.shape[0]
    T = x.dtype.type
    c2, k, one = T(-2 * math.sqrt(2 / math.pi)), T(0.044715), T(1)
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        xs, outs = x[lo:hi], out[lo:hi]
        for i in range(xs.shape[0]):  # from 0, on a slice: LLVM sees contiguous, SIMD-able loads
            a = xs[i]
            outs[i] = a / (one + fast_exp(c2 * (a + k * a * a * a)))


@compiled
def gelu_tanh_rows_backward(x, grad, out, parts):
    """out = grad * (s + 2 x s (1 - s) u'), s = 1 / (1 + e), e = exp(-2u), 1 - s = e s

    >>> x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> gelu_tanh_rows_backward(x, np.ones_like(x), out, 1)
    >>> out.round(4)  # GELU's slope at -1, 0 and 2
    array([-0.083 ,  0.5   ,  1.0861], dtype=float32)
    """
    n = x.shape[0]
    T = x.dtype.type
    c, k, one, two, three = T(math.sqrt(2 / math.pi)), T(0.044715), T(1), T(2), T(3)
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        xs, gs, outs = x[lo:hi], grad[lo:hi], out[lo:hi]
        for i in range(xs.shape[0]):
            a = xs[i]
            e = fast_exp(-two * c * (a + k * a * a * a))
            s = one / (one + e)
            rest = e * s if e < one else one - s  # 1 - s, never a cancellation (nor inf * 0)
            outs[i] = gs[i] * (s + two * a * s * rest * c * (one + three * k * a * a))


class GELUCompiled(GELUFunction):
    """GELU's tanh form as one compiled pass; the erf form is module 02's.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import gelu
    >>> with fast_kernels():
    ...     y = gelu(Tensor([-1.0, 0.0, 2.0], requires_grad=True), approximate="tanh")
    >>> y._ctx.fn.__name__, y
    ('GELUCompiled', Tensor([-0.1588,  0.    ,  1.9546], requires_grad=True))
    """

    @staticmethod
    def forward(x, approximate):
        if approximate != "tanh":
            return GELUFunction.forward(x, approximate)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        gelu_tanh_rows(flat, out, chunks(flat.size))
        return out.reshape(x.shape)


@derivative(GELUCompiled)
def gelu_compiled_backward(ctx, grad):
    """the tanh form from the compiled kernel (exp recomputed); the erf form: module 06's rule

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import gelu
    >>> x = Tensor([-1.0, 0.0, 2.0], requires_grad=True)
    >>> with fast_kernels():
    ...     gelu(x, approximate="tanh").sum().backward()
    >>> x.grad  # module 06's slope, from the compiled kernel
    Tensor([-0.083 ,  0.5   ,  1.0861])
    """
    if ctx.params.get("approximate", "none") != "tanh":
        return plain_gelu_backward(ctx, grad)
    x = np.ascontiguousarray(ctx.inputs[0]).reshape(-1)
    out = np.empty_like(x)
    g = np.ascontiguousarray(grad, dtype=x.dtype).reshape(-1)
    gelu_tanh_rows_backward(x, g, out, chunks(x.size))
    return (out.reshape(ctx.inputs[0].shape),)


@compiled
def cross_entropy_rows(logits, target, ignore_index, losses, lse, parts):
    """losses[i] = logsumexp(logits[i]) - logits[i, target[i]] (0 if ignored); lse[i] kept

    >>> logits = np.zeros((2, 3), dtype=np.float32)
    >>> losses, lse = np.empty(2, np.float32), np.empty(2, np.float32)
    >>> cross_entropy_rows(logits, np.array([0, -100]), -100, losses, lse, 1)
    >>> losses.round(4), lse.round(4)  # log(3), and 0 for the ignored row
    (array([1.0986, 0.    ], dtype=float32), array([1.0986, 1.0986], dtype=float32))
    """
    n, v = logits.shape
    T = logits.dtype.type
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            top = logits[i, 0]
            for j in range(1, v):
                top = max(top, logits[i, j])
            total = T(0)
            for j in range(v):
                total += fast_exp(logits[i, j] - top)
            log_total = math.log(total)
            lse[i] = top + log_total
            t = target[i]  # (top - logit) first: no cancellation between two large numbers
            losses[i] = (top - logits[i, t]) + log_total if t != ignore_index else T(0)


@compiled
def cross_entropy_rows_backward(logits, target, ignore_index, lse, scale, out, parts):
    """out[i] = (exp(logits[i] - lse[i]) - onehot(target[i])) * scale[i], 0 for ignored rows

    >>> logits, target = np.zeros((2, 3), dtype=np.float32), np.array([0, -100])
    >>> lse = np.full(2, np.log(3), dtype=np.float32)
    >>> out = np.empty_like(logits)
    >>> cross_entropy_rows_backward(logits, target, -100, lse, np.ones(2, np.float32), out, 1)
    >>> out.round(4)
    array([[-0.6667,  0.3333,  0.3333],
           [ 0.    ,  0.    ,  0.    ]], dtype=float32)
    """
    n, v = logits.shape
    T = logits.dtype.type
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            t = target[i]
            if t == ignore_index:
                for j in range(v):
                    out[i, j] = T(0)
                continue
            for j in range(v):
                out[i, j] = fast_exp(logits[i, j] - lse[i]) * scale[i]
            out[i, t] -= scale[i]


def _cross_entropy_fits(logits, target, ignore_index, reduction):
    """True when the compiled kernel may run: the shapes, types and classes module 04 accepts."""
    if (logits.ndim != 2 or target.shape != logits.shape[:1] or reduction not in
            ("mean", "sum", "none") or not np.issubdtype(target.dtype, np.integer)):
        return False
    counted = target != ignore_index
    return not (counted & ((target < 0) | (target >= logits.shape[1]))).any()


class CrossEntropyCompiled(CrossEntropyFunction):
    """Module 04's loss from one compiled pass per row; keeps each row's log-sum-exp.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.losses import cross_entropy
    >>> with fast_kernels():
    ...     loss = cross_entropy(Tensor(np.zeros((2, 3)), requires_grad=True), np.array([0, 2]))
    >>> loss._ctx.fn.__name__, round(loss.item(), 4)  # uniform over 3 classes: log(3)
    ('CrossEntropyCompiled', 1.0986)
    """

    saves_for_backward = True  # forward returns (loss, lse); lse None from module 04's path

    @staticmethod
    def forward(logits, target, ignore_index, reduction):
        if not _cross_entropy_fits(logits, target, ignore_index, reduction):
            return CrossEntropyFunction.forward(logits, target, ignore_index, reduction), None
        n = logits.shape[0]
        rows = np.ascontiguousarray(logits)
        losses, lse = np.empty(n, logits.dtype), np.empty(n, logits.dtype)
        cross_entropy_rows(rows, np.ascontiguousarray(target), ignore_index, losses, lse,
                           chunks(n, logits.shape[1]))
        if reduction == "none":
            return losses, lse
        divisor = np.count_nonzero(target != ignore_index) if reduction == "mean" else 1
        with np.errstate(invalid="ignore"):  # no row kept: 0 / 0 = NaN, as in PyTorch
            return np.asarray(losses.sum() / logits.dtype.type(divisor)), lse


@derivative(CrossEntropyCompiled)
def cross_entropy_compiled_backward(ctx, grad):
    """(softmax - onehot) * scale per row, from the kept log-sum-exp

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.losses import cross_entropy
    >>> logits = Tensor(np.zeros((2, 3)), requires_grad=True)
    >>> with fast_kernels():
    ...     cross_entropy(logits, np.array([0, -100])).backward()  # row 1 ignored
    >>> logits.grad.data.round(4)  # (softmax - onehot) / 1 kept row
    array([[-0.6667,  0.3333,  0.3333],
           [ 0.    ,  0.    ,  0.    ]], dtype=float32)
    """
    lse = ctx.saved
    if lse is None:
        return cross_entropy_backward_inplace(ctx, grad)
    logits, target, ignore_index, reduction = cross_entropy_record(ctx)
    logits = np.ascontiguousarray(logits)
    scale = np.broadcast_to(np.asarray(grad, dtype=logits.dtype), target.shape)  # (N,)
    if reduction == "mean":  # the kernel writes 0 to ignored rows: they need no scale
        scale = scale / logits.dtype.type(max(np.count_nonzero(target != ignore_index), 1))
    out = np.empty_like(logits)
    cross_entropy_rows_backward(logits, np.ascontiguousarray(target), ignore_index, lse,
                                np.ascontiguousarray(scale), out,
                                chunks(logits.shape[0], logits.shape[1]))
    return (out,) + (None,) * (len(ctx.inputs) - 1)


@compiled(fastmath=False)
def adamw_rows(param, grad, m, v, settings, parts):
    """AdamW on one flat parameter, in place; settings = (decay, beta1, 1 - beta1, beta2,
    1 - beta2, sqrt(1 - beta2^t), eps, lr / (1 - beta1^t))

    >>> p, g = np.array([1.0], np.float32), np.array([0.5], np.float32)
    >>> m, v = np.zeros(1, np.float32), np.zeros(1, np.float32)
    >>> settings = np.array([1.0, 0.9, 0.1, 0.999, 0.001, math.sqrt(0.001), 1e-8, 0.1 / 0.1])
    >>> adamw_rows(p, g, m, v, settings, 1)  # step 1, lr 0.1: the first step moves by lr
    >>> p.round(4), m.round(4)
    (array([0.9], dtype=float32), array([0.05], dtype=float32))
    """
    n = param.shape[0]
    T = param.dtype.type
    decay, beta1, one_m_beta1, beta2 = (T(settings[0]), T(settings[1]), T(settings[2]),
                                        T(settings[3]))
    one_m_beta2, bias2, eps, step = (T(settings[4]), T(settings[5]), T(settings[6]),
                                     T(settings[7]))
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        ps, gs, ms, vs = param[lo:hi], grad[lo:hi], m[lo:hi], v[lo:hi]
        for j in range(hi - lo):  # Part 8's operations, in Part 8's order
            g = gs[j]
            q = ps[j] * decay
            ms[j] = ms[j] * beta1 + g * one_m_beta1
            vs[j] = vs[j] * beta2 + (g * g) * one_m_beta2
            ps[j] = q - ms[j] / (math.sqrt(vs[j]) / bias2 + eps) * step


class CompiledAdamW(FusedAdamW):
    """AdamW's numbers to the bit, each float32 parameter updated by one compiled pass.

    >>> from tinytorch.core.tensor import Tensor
    >>> w = Tensor([1.0, -1.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> CompiledAdamW([w], lr=0.1, weight_decay=0.0).step()  # FusedAdamW's numbers
    >>> w.data.round(4)
    array([ 0.9, -0.9], dtype=float32)
    """

    def step(self):
        todo, plain = [], False
        for p, state in self._each_param():
            if p.grad is None:
                continue
            grad = _grad_array(p)
            plain = plain or p.data.dtype != np.float32 or grad.dtype != np.float32 or not (
                p.data.flags.c_contiguous)
            todo.append((p, grad, state, self.lr, self.weight_decay, self.betas, self.eps))
        if plain:  # a parameter the kernel does not take: Part 8's loop for all of them
            return super().step()
        self.steps += 1
        for p, grad, state, lr, weight_decay, (beta1, beta2), eps in todo:
            t, m, v = self._next_step(p.data, state)
            decay = 1.0 - lr * weight_decay if weight_decay else 1.0
            settings = np.array((decay, beta1, 1.0 - beta1, beta2, 1.0 - beta2,
                                 math.sqrt(1.0 - beta2**t), eps, lr / (1.0 - beta1**t)))
            adamw_rows(p.data.reshape(-1), np.ascontiguousarray(grad).reshape(-1),
                       m.reshape(-1), v.reshape(-1), settings, chunks(p.data.size))


# %% nbgrader={"grade": false, "grade_id": "check-gelu-ce-adamw", "locked": true, "schema_version": 3, "solution": false, "task": false}
def check_gelu_ce_adamw():
    x = Tensor(f32(64, 48, seed=110, scale=3.0), requires_grad=True)
    weights = f32(64, 48, seed=111)
    logits = Tensor(f32(64, 17, seed=112, scale=3.0), requires_grad=True)
    target = rng(113).integers(0, 17, 64)
    target[::5] = -100
    for label, key, fast, fn, leaf in (
            ("gelu", GELUFunction, GELUCompiled,
             lambda: (gelu(x, approximate="tanh") * Tensor(weights)).sum(), x),
            ("cross-entropy", CrossEntropyFunction, CrossEntropyCompiled,
             lambda: cross_entropy(logits, target), logits)):
        leaf.grad = None
        want = fn()
        want.backward()
        want_g, leaf.grad = leaf.grad.data, None
        got = with_rule(KERNELS, key, fast, fn)
        with_rule(KERNELS, key, fast, got.backward)
        assert np.allclose(got.data, want.data, rtol=1e-5), f"{label}: the value differs"
        assert np.allclose(leaf.grad.data, want_g, atol=1e-5), f"{label}: the gradient differs"
    from tinytorch.core.layers import Parameter

    def train(cls):
        params = [Parameter(f32(64, 32, seed=116)), Parameter(f32(32, seed=117))]
        opt = cls([{"params": params[:1]}, {"params": params[1:], "weight_decay": 0.0}],
                  lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
        for step in range(3):
            for i, p in enumerate(params):
                p.grad = Tensor(f32(*p.shape, seed=118 + 10 * step + i))
            opt.step()
        return params

    for a, b in zip(train(CompiledAdamW), train(AdamW)):
        assert np.array_equal(a.data, b.data), "CompiledAdamW differs from AdamW"
    print("GELU, cross-entropy: same values and gradients as the plain ops (their float64 "
          "gradchecks are in the course's tests, tests/test_compiled_kernels.py); "
          "CompiledAdamW: AdamW's parameters to the bit")


check_gelu_ce_adamw()


# %% [markdown]
# ## Part 12: quantized weights that decode faster, and kernels for one token
#
# Module 15 stored weights as int8 (one byte and a per-row scale) or int4 (half a byte and
# a scale per group), and measured that its forward is *slower* than float32's. The reason
# is in the bytes. Generating one token multiplies one row `x` by every weight matrix: each
# weight is used once, so the time is the time to read the weights from memory. Module 15's
# forward, `x @ deq(W).T`, first makes `deq(W)`: it reads every int8 weight (1 byte), writes
# a float32 copy (4 bytes), and then BLAS reads that copy back (4 bytes): 9 bytes of memory
# traffic per weight, against float32's 4. Quantization saved memory and cost time.
#
# A compiled kernel reads each int8 weight once, converts it to float32 in a register, and
# multiplies it right there: 1 byte per weight, a quarter of float32's traffic, so up to four
# times faster than float32 wherever reading memory is the limit. For int4 it is half a
# byte: the kernel splits each byte into its two 4-bit halves (`b & 15` and `b >> 4`, minus
# 8) and multiplies the two halves with the even and odd entries of `x`, summing one group
# at a time and scaling each group's sum by its scale.
#
# With many rows at once (a prompt of hundreds of tokens, or training), each weight is used
# by every row: the product is limited by arithmetic, not memory, and BLAS's float32
# arithmetic beats anything written by hand. So above `SMALL_ROWS` rows, the kernel converts
# a **tile** of weight rows at a time into a small float32 buffer (a few hundred kilobytes,
# which stays in cache) and hands the tile to BLAS: the whole float32 matrix never exists.
#
# One more thing decides the speed of a kernel that streams weights from memory: how many
# reads it keeps in flight. A core has room for only about a dozen outstanding cache-line
# misses, and the hardware prefetcher runs ahead of each *stream* of addresses it
# recognizes. A loop that reads one weight row after another is one stream, and one core
# reading one stream gets a fraction of the memory's bandwidth (5.5 GB/s here, where
# BLAS's float32 product reads 15 GB/s on one core). Reading **four rows from four
# far-apart blocks** at once gives the prefetcher four streams to run ahead of. Measured on
# this course's machine (`benchmarks/int8_streams.py`, idle, load 1.3) for the LM head of a
# Qwen2.5-0.5B-sized model (151,936 x 896, one token): one row at a time 24.9 ms on one
# thread and 12.9 ms on two; four blocks at once 12.6 and 6.0 ms, about 2x; four
# *adjacent* rows at once (one stream still) 19.2 and 9.3 ms. For all of one token's
# products of that model (24 layers and the head, 471 MiB of int8 weights, read from
# memory, not cache), two threads took 51.6 ms one row at a time and 25.9 ms with four
# blocks, against 72.1 ms for float32 BLAS: 2.8x faster than float32, where the bytes
# alone would allow 4x. The benchmark measures the three kernels on your machine.
#
# Write `int8_matmul_rows(x, q, scale, out, parts)`: for `x` of shape `(N, K)` (N small),
# int8 `q` of shape `(M, K)` and float32 `scale` `(M,)`, `out[n, o] = scale[o] * sum_k x[n,
# k] * q[o, k]`. The output rows `o` are split into `parts` pieces, one per thread (given).
# Cut each piece's rows `lo .. hi` into four blocks of `block = (hi - lo) // 4` rows, and
# for each `i < block` read the four rows `lo + i`, `lo + block + i`, `lo + 2 block + i`,
# `lo + 3 block + i` together: for each input row `r` (the four weight rows stay in cache),
# four float32 sums in one loop over `k`, converting each weight with `T(w[k])`. Then the
# rows left over, `lo + 4 block .. hi`, one at a time.

# %% nbgrader={"grade": false, "grade_id": "int8-matmul-rows", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
@compiled
def int8_matmul_rows(x, q, scale, out, parts):
    """out[n, o] = scale[o] * sum_k x[n, k] q[o, k], the int8 weights read as they are

    >>> x = np.array([[1.0, 2.0]], dtype=np.float32)
    >>> q = np.array([[10, -5], [127, 0]], dtype=np.int8)  # (out, in)
    >>> out = np.empty((1, 2), dtype=np.float32)
    >>> int8_matmul_rows(x, q, np.array([0.1, 0.01], dtype=np.float32), out, 1)
    >>> out.round(4)  # 0.1 * (10 - 10), 0.01 * 127
    array([[0.  , 1.27]], dtype=float32)
    """
    n_rows, n_k = x.shape
    n_out = q.shape[0]
    T = x.dtype.type
    for p in prange(parts):
        lo, hi = p * n_out // parts, (p + 1) * n_out // parts
        block = (hi - lo) // 4
        ### BEGIN SOLUTION
        for i in range(block):  # four weight rows, one from each quarter: four streams
            o0, o1, o2, o3 = lo + i, lo + block + i, lo + 2 * block + i, lo + 3 * block + i
            w0, w1, w2, w3 = q[o0], q[o1], q[o2], q[o3]
            for r in range(n_rows):
                xr = x[r]
                t0 = t1 = t2 = t3 = T(0)
                for k in range(n_k):
                    t0 += xr[k] * T(w0[k])
                    t1 += xr[k] * T(w1[k])
                    t2 += xr[k] * T(w2[k])
                    t3 += xr[k] * T(w3[k])
                out[r, o0] = t0 * scale[o0]
                out[r, o1] = t1 * scale[o1]
                out[r, o2] = t2 * scale[o2]
                out[r, o3] = t3 * scale[o3]
        for o in range(lo + 4 * block, hi):  # the rows left over, one at a time
            w = q[o]
            for r in range(n_rows):
                xr = x[r]
                total = T(0)
                for k in range(n_k):
                    total += xr[k] * T(w[k])
                out[r, o] = total * scale[o]
        ### END SOLUTION


# %% [markdown]
# ### The int4 kernel: four blocks again, half a byte per weight
#
# Module 15's int4 format packs two weights into a byte, `q[o, j] = lo + 16 hi`, each half
# stored as its value plus 8 (0..15 for -8..7), with one scale for every `group` weights of
# a row. The weight `2j` of row `o` is `lo - 8` and the weight `2j + 1` is `hi - 8`, so a
# kernel given the even entries of `x` (`x_even`) and the odd ones (`x_odd`) multiplies byte
# `j` with `x_even[j]` and `x_odd[j]`. Two details make it fast:
#
# - It splits the byte in float32, not with `b & 15` and `b >> 4`. numba does integer
#   arithmetic in 64-bit integers (Python's `int` semantics), so an integer split works on
#   lanes of 8 per vector instead of 16 float32 ones, and converts 64-bit integers to
#   floats; `b = float32(byte)`, `high = floor(b / 16)`, `low = b - 16 high` are exact in
#   float32 and stay in float32 lanes. That made the kernel about 1.4x faster here (a
#   `(4864, 896)` product, one thread). `int4_halves(byte)`, given below, does this split;
#   numba compiles it into the loop that calls it.
# - The 8 comes off once per group, not once per value: `sum_j x_j (q_j - 8) = sum_j x_j
#   q_j - 8 sum_j x_j`. So the loop sums the stored halves as they are (0..15), and takes
#   `8 * x_sums[r, g]` off each group's sum, where `x_sums[r, g]` is the sum of input row
#   `r`'s entries in group `g` (the `Function` computes them; they cost nothing next to the
#   weights). On the Qwen2.5-0.5B-shaped checkpoint of `benchmarks/decode.py` (int4, groups
#   of 128, two threads, median of 24 decode steps), that took the step from 62-65 ms to
#   53-54 ms.
#
# Write `int4_matmul_rows(x_even, x_odd, x_sums, packed, scales, out, parts)`: `packed` is
# `(M, K / 2)` uint8, `scales` is `(M, groups)`, each group is `size = K / 2 / groups`
# bytes, and for input row `r` and weight row `o`
#
# `out[r, o] = sum over groups g of scales[o, g] * (sum over the group's bytes j of
# (x_even[r, j] low_j + x_odd[r, j] high_j) - 8 x_sums[r, g])`.
#
# Read the weight rows as your int8 kernel does: four rows from the four blocks of each
# piece together (for each group, one loop over its bytes that keeps four sums), then the
# rows left over one at a time. On the checkpoint above, four blocks took the int4 decode
# step from 81-83 ms to 59-62 ms, one row at a time against four blocks in alternate runs
# on a busy day (about 1.35x; `benchmarks/README.md` has the runs).

# %% nbgrader={"grade": false, "grade_id": "int4-halves", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@numba.njit(inline="always")
def int4_halves(byte):
    """The two 4-bit halves of a byte, (low, high), each 0..15, as float32: split in float32
    lanes (exact), compiled into the kernel that calls it

    >>> low, high = int4_halves(np.uint8(0x9F))  # 0x9F = 159 = 15 + 16 * 9
    >>> float(low), float(high)
    (15.0, 9.0)
    """
    b = np.float32(byte)  # 0..255: exact
    high = np.floor(b * np.float32(1 / 16))  # b >> 4
    return b - np.float32(16) * high, high


# %% nbgrader={"grade": false, "grade_id": "int4-matmul-rows", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
@compiled
def int4_matmul_rows(x_even, x_odd, x_sums, packed, scales, out, parts):
    """out[r, o] = sum over groups g of scales[o, g] * (sum_j (x_even[r, j] low_j + x_odd[r, j]
    high_j) - 8 x_sums[r, g]), j over group g's bytes of row o, low_j and high_j the halves
    (0..15) of byte j, x_sums[r, g] the sum of row r's entries in group g

    >>> x = np.array([[1.0, 2.0]], dtype=np.float32)
    >>> packed = np.array([[0x9F]], dtype=np.uint8)  # low half 15 -> 7, high half 9 -> 1
    >>> out = np.empty((1, 1), dtype=np.float32)
    >>> int4_matmul_rows(x[:, 0::2].copy(), x[:, 1::2].copy(), np.array([[3.0]], np.float32),
    ...                  packed, np.array([[0.5]], np.float32), out, 1)
    >>> out  # 0.5 * (1 * 7 + 2 * 1)
    array([[4.5]], dtype=float32)
    """
    n_rows = x_even.shape[0]
    n_out, n_bytes = packed.shape
    groups = scales.shape[1]
    size = n_bytes // groups  # bytes per group
    T = x_even.dtype.type
    eight = T(8)
    for p in prange(parts):
        lo, hi = p * n_out // parts, (p + 1) * n_out // parts
        block = (hi - lo) // 4
        ### BEGIN SOLUTION
        for i in range(block):  # four weight rows, one from each quarter: four streams
            o0, o1, o2, o3 = lo + i, lo + block + i, lo + 2 * block + i, lo + 3 * block + i
            for r in range(n_rows):
                t0 = t1 = t2 = t3 = T(0)
                for g in range(groups):
                    first, last = g * size, (g + 1) * size
                    xe, xo = x_even[r, first:last], x_odd[r, first:last]
                    w0, w1 = packed[o0, first:last], packed[o1, first:last]
                    w2, w3 = packed[o2, first:last], packed[o3, first:last]
                    a0 = a1 = a2 = a3 = T(0)
                    for j in range(size):
                        low0, high0 = int4_halves(w0[j])
                        low1, high1 = int4_halves(w1[j])
                        low2, high2 = int4_halves(w2[j])
                        low3, high3 = int4_halves(w3[j])
                        a0 += xe[j] * low0 + xo[j] * high0
                        a1 += xe[j] * low1 + xo[j] * high1
                        a2 += xe[j] * low2 + xo[j] * high2
                        a3 += xe[j] * low3 + xo[j] * high3
                    shift = eight * x_sums[r, g]  # the 8 taken from every value, at once
                    t0 += (a0 - shift) * scales[o0, g]
                    t1 += (a1 - shift) * scales[o1, g]
                    t2 += (a2 - shift) * scales[o2, g]
                    t3 += (a3 - shift) * scales[o3, g]
                out[r, o0], out[r, o1], out[r, o2], out[r, o3] = t0, t1, t2, t3
        for o in range(lo + 4 * block, hi):  # the rows left over, one at a time
            for r in range(n_rows):
                total = T(0)
                for g in range(groups):
                    first, last = g * size, (g + 1) * size
                    w, xe, xo = packed[o, first:last], x_even[r, first:last], x_odd[r, first:last]
                    acc = T(0)
                    for j in range(size):
                        low, high = int4_halves(w[j])
                        acc += xe[j] * low + xo[j] * high
                    total += (acc - eight * x_sums[r, g]) * scales[o, g]
                out[r, o] = total
        ### END SOLUTION


# %% [markdown]
# The tiles for many rows and the `Function` are given. `QuantizedMatMul` is module 15's
# operation; `QuantizedMatMulCompiled` is its kernel-table twin, with module 15's derivative
# rule (the gradient to `x`, `grad @ deq(W)`, is rare: quantized layers are for inference).
# Inputs that are not float32 go to module 15's forward.

# %% nbgrader={"grade": false, "grade_id": "quantized-compiled", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
SMALL_ROWS = 8  # up to this many rows, the integer kernels; more, float32 tiles and BLAS
TILE_ELEMENTS = 1 << 16  # weights per dequantized tile: 256 KiB of float32, kept in cache


@compiled
def dequantize_rows(q, scales, first, out, parts):
    """out = the float32 weights of rows first .. first + len(out) of int8 q (scales (M,)) or
    packed int4 q (scales (M, groups)), row by row

    >>> q = np.array([[10, -20], [30, 40]], dtype=np.int8)
    >>> out = np.empty((1, 2), np.float32)
    >>> dequantize_rows(q, np.array([0.5, 0.1], np.float32), 1, out, 1)  # row 1 only
    >>> out.round(4)
    array([[3., 4.]], dtype=float32)
    """
    n_out, n_k = out.shape
    T = out.dtype.type
    for p in prange(parts):
        for i in range(p * n_out // parts, (p + 1) * n_out // parts):
            o, row = first + i, out[i]
            if scales.ndim == 1:  # int8, one scale per row
                for k in range(n_k):
                    row[k] = T(q[o, k]) * scales[o]
            else:  # int4: two values per byte, one scale per group
                group, eight = n_k // scales.shape[1], np.float32(8)
                for k in range(n_k // 2):
                    low, high = int4_halves(q[o, k])
                    s = scales[o, (2 * k) // group]
                    row[2 * k] = T(low - eight) * s
                    row[2 * k + 1] = T(high - eight) * s


class QuantizedMatMulCompiled(QuantizedMatMul):
    """Module 15's x @ deq(W).T from the stored integers: kernels for a few rows, tiles of
    dequantized rows and BLAS for many; the float32 matrix is never made.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.layers import Linear
    >>> from tinytorch.core.tensor import manual_seed
    >>> from tinytorch.perf.quantization import QuantizedLinear
    >>> manual_seed(0)
    >>> linear = Linear(4, 2)
    >>> small, x = QuantizedLinear.from_linear(linear, bits=8), Tensor(np.ones((1, 4)))
    >>> with fast_kernels():
    ...     y = small(x)
    >>> bool(np.allclose(y.data, linear(x).data, atol=0.01))  # int8 weights read as they are
    True
    """

    @staticmethod
    def forward(x, qweight, scale, bits, group_size):
        if x.dtype != np.float32:
            return QuantizedMatMul.forward(x, qweight, scale, bits, group_size)
        n_in = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape(-1, n_in)  # (N, K)
        n, n_out = rows.shape[0], qweight.shape[0]
        out = np.empty((n, n_out), np.float32)
        if n <= SMALL_ROWS:
            parts = chunks(n_out, n_in * n)
            if bits == 8:
                int8_matmul_rows(rows, qweight, scale, out, parts)
            else:
                sums = rows.reshape(n, scale.shape[1], -1).sum(axis=2)  # (N, groups)
                int4_matmul_rows(np.ascontiguousarray(rows[:, 0::2]),
                                 np.ascontiguousarray(rows[:, 1::2]), sums, qweight, scale,
                                 out, parts)
        else:
            tile = max(16, TILE_ELEMENTS // n_in)
            buffer = np.empty((min(tile, n_out), n_in), np.float32)
            for first in range(0, n_out, tile):
                w = buffer[:min(tile, n_out - first)]  # (tile, K), overwritten per tile
                dequantize_rows(qweight, scale, first, w, chunks(w.shape[0], n_in))
                out[:, first:first + w.shape[0]] = rows @ w.T
        return out.reshape(x.shape[:-1] + (n_out,))


@derivative(QuantizedMatMulCompiled)
def quantized_matmul_compiled_backward(ctx, grad):
    """module 15's rule: grad @ deq(W) to x

    >>> from tinytorch.core.tensor import Tensor
    >>> q, scale = np.array([[10, -5]], np.int8), np.array([0.1], np.float32)  # W = [1, -0.5]
    >>> x = Tensor(np.ones((1, 2), np.float32), requires_grad=True)
    >>> with fast_kernels():
    ...     y = QuantizedMatMul.apply(x, qweight=q, scale=scale, bits=8, group_size=None)
    ...     y.sum().backward()
    >>> x.grad
    Tensor([[ 1. , -0.5]])
    """
    return quantized_matmul_backward(ctx, grad)


# %% [markdown]
# Nothing in `int8_matmul_rows` says the weights are int8: `T(w[k])` converts whatever
# type they have, and numba compiles one machine-code version of a function for each
# combination of argument types it is called with. Called with float32 weights and scales
# of 1, your kernel is a float32 product for a few rows that reads four streams.
#
# That is worth having, because of what BLAS does with a few rows. Measured on this
# course's machine (two threads; 60 different `(4864, 896)` float32 weights, 1 GiB, so that
# every weight comes from memory), NumPy's `@` and your kernel took, for all 60 products:
#
# | rows | NumPy `@` (OpenBLAS) | your kernel |
# |---:|---:|---:|
# | 1 | 34.0 ms | 34.8 ms |
# | 2 | 110.8 ms | 37.6 ms |
# | 4 | 110.9 ms | 44.9 ms |
# | 8 | 114.1 ms | 64.8 ms |
#
# For one row both read the weights as fast as the memory delivers them. From two rows on,
# BLAS took three times as long, while the kernel's time grows only with its arithmetic.
# A few rows is what serving looks like: module 18's `Engine` decodes one token for each
# of up to 8 requests in one forward, so every product of its step has up to 8 rows.
# Serving 8 requests of 16 tokens on the Qwen2.5-0.5B-shaped checkpoint of
# `benchmarks/decode.py` (float32, two threads) went from 21.6 to 27.7 tokens/s with it.
#
# `MatMulRowsCompiled` is the kernel-table twin of module 01's `MatMul` that uses it: for
# at most `SMALL_ROWS` float32 rows times a float32 matrix that is the transposed view of
# a C-ordered weight `(out, in)` (as module 03's `Linear` hands it over in `x @ W.T`), it
# calls your kernel; every other product goes to `MatMul`'s forward and BLAS. Its
# derivative is module 06's rule for `MatMul`.

# %% nbgrader={"grade": false, "grade_id": "matmul-rows-compiled", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
_UNIT_SCALES = {}  # n -> float32 ones (n,): the scales of float32 weight rows


def _unit_scales(n):
    ones = _UNIT_SCALES.get(n)
    if ones is None:
        ones = _UNIT_SCALES[n] = np.ones(n, np.float32)
    return ones


class MatMulRowsCompiled(MatMul):
    """a @ b for a few float32 rows `a` and b = W.T, W a C-ordered float32 weight (out, in):
    int8_matmul_rows compiled for float32 weights (scales of 1); BLAS for the rest.

    >>> from tinytorch.core.tensor import Tensor
    >>> w = Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))  # (out, in)
    >>> with fast_kernels():
    ...     y = Tensor(np.ones((1, 2), np.float32)) @ w.T  # one row: the compiled kernel
    >>> y
    Tensor([[1., 5., 9.]])
    """

    @staticmethod
    def forward(a, b):
        if (a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 2 or b.ndim != 2
                or a.shape[-1] != b.shape[0] or not b.T.flags.c_contiguous):
            return MatMul.forward(a, b)  # its checks, its errors, BLAS
        n, (n_in, n_out) = math.prod(a.shape[:-1]), b.shape
        if n > SMALL_ROWS:  # a training batch: BLAS, before any copy of `a`
            return MatMul.forward(a, b)
        rows = np.ascontiguousarray(a).reshape(n, n_in)  # (N, K)
        out = np.empty((n, n_out), np.float32)
        int8_matmul_rows(rows, b.T, _unit_scales(n_out), out, chunks(n_out, n_in * n))
        return out.reshape(a.shape[:-1] + (n_out,))


@derivative(MatMulRowsCompiled)
def matmul_rows_compiled_backward(ctx, grad):
    """module 06's rule: grad @ b.T to a, a.T @ grad to b

    >>> from tinytorch.core.tensor import Tensor
    >>> w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)  # (out, in)
    >>> x = Tensor(np.ones((1, 3), np.float32), requires_grad=True)
    >>> with fast_kernels():
    ...     (x @ w.T).sum().backward()  # one row: the compiled forward, this rule
    >>> x.grad, w.grad  # each input feeds both outputs; each weight sees x
    (Tensor([[2., 2., 2.]]), Tensor([[1., 1., 1.],
            [1., 1., 1.]]))
    """
    return matmul_backward(ctx, grad)


# %% nbgrader={"grade": true, "grade_id": "test_unit_int8_matmul_rows", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_int8_matmul_rows():
    """The integer kernels equal module 15's dequantize-and-multiply, without its float32 copy."""
    w = f32(96, 128, seed=120)
    x = Tensor(f32(3, 128, seed=121))
    q8, s8, _ = quantize_int8(w, axis=0)
    got = np.empty((3, 96), np.float32)
    int8_matmul_rows(x.data, q8, s8, got, 1)
    want = x.data @ dequantize_int8(q8, s8, 0, axis=0).T
    assert np.allclose(got, want, rtol=1e-5, atol=1e-4), (
        f"int8_matmul_rows differs from x @ deq(W).T by {np.abs(got - want).max():.3g}: "
        "out[r, o] = scale[o] * sum_k x[r, k] * T(q[o, k]), for every input row r and weight "
        "row o of the piece")
    for bits, args in ((8, (q8, s8, 8, None)),):  # int4: test_unit_int4_matmul_rows
        for n in (1, 3, 40):  # the integer kernel, and the tiles for 40 rows
            xs = Tensor(f32(n, 128, seed=122 + n))
            plain = QuantizedMatMul.apply(xs, qweight=args[0], scale=args[1], bits=bits,
                                          group_size=args[3]).data
            fast = with_rule(KERNELS, QuantizedMatMul, QuantizedMatMulCompiled,
                             lambda: QuantizedMatMul.apply(xs, qweight=args[0], scale=args[1],
                                                           bits=bits, group_size=args[3])).data
            assert fast.dtype == np.float32 and np.allclose(fast, plain, rtol=1e-5, atol=1e-4), (
                f"int{bits}, {n} rows: the compiled product differs from module 15's by "
                f"{np.abs(fast - plain).max():.3g}")
    big = f32(512, 1024, seed=130)
    qb, sb, _ = quantize_int8(big, axis=0)
    one = f32(1, 1024, seed=131)
    out = np.empty((1, 512), np.float32)
    int8_matmul_rows(one, qb, sb, out, 1)
    held = peak_bytes(lambda: int8_matmul_rows(one, qb, sb, out, 1))
    assert held < big.nbytes // 10, (
        f"int8_matmul_rows allocated {held:,} bytes: it must read the int8 weights as they "
        f"are, not build float32 ones ({big.nbytes:,} bytes)")

    def product64(x, q, s):
        """x @ (q * s per row).T in float64: what the integers and scales stand for."""
        return x.astype(np.float64) @ (q.astype(np.float64) * s.astype(np.float64)[:, None]).T

    def check_kernel(rows, n_in, n_out, parts, seed):
        """int8_matmul_rows called with `parts` pieces of weight rows, against float64."""
        q, s, _ = quantize_int8(f32(n_out, n_in, seed=seed), axis=0)
        x = f32(rows, n_in, seed=seed + 1)
        out = np.full((rows, n_out), np.nan, np.float32)
        int8_matmul_rows(x, q, s, out, parts)
        want = product64(x, q, s)
        unwritten = np.flatnonzero(np.isnan(out).any(axis=0))
        assert not unwritten.size, (
            f"{rows} rows of {n_in} times {n_out} int8 weight rows in {parts} pieces: the "
            f"outputs of weight rows {unwritten.tolist()[:8]} were never written (out was "
            "filled with NaN): every row lo .. hi of each piece needs its output, the rows "
            "left over after the four blocks too")
        assert np.allclose(out, want, rtol=1e-5, atol=1e-5 * math.sqrt(n_in)), (
            f"{rows} rows of {n_in} times {n_out} int8 weight rows in {parts} pieces: differs "
            f"from x @ deq(W).T by {np.nanmax(np.abs(out - want)):.3g}: every output of the "
            "piece's weight rows, the sum over all K = x.shape[1] entries")

    def check_function(shape, n_out, seed):
        """QuantizedMatMulCompiled (through the kernel table) for x of `shape`: the integer
        kernel up to SMALL_ROWS rows, tiles of dequantized rows above, against float64."""
        q, s, _ = quantize_int8(f32(n_out, shape[-1], seed=seed), axis=0)
        x = Tensor(f32(*shape, seed=seed + 1))
        got = with_rule(KERNELS, QuantizedMatMul, QuantizedMatMulCompiled,
                        lambda: QuantizedMatMul.apply(x, qweight=q, scale=s, bits=8,
                                                      group_size=None)).data
        want = product64(x.data.reshape(-1, shape[-1]), q, s).reshape(shape[:-1] + (n_out,))
        assert got.dtype == np.float32 and got.shape == want.shape and np.allclose(
            got, want, rtol=1e-5, atol=1e-5 * math.sqrt(shape[-1])), (
            f"x {shape} times {n_out} int8 weight rows: the compiled product differs from "
            f"x @ deq(W).T by {np.abs(got - want).max():.3g}")

    check_kernel(3, 128, 96, 2, 132)
    check_kernel(1, 64, 19, 1, 136)  # four blocks of four rows and three rows left over
    check_function((2, 128), 96, 134)
    wf, xf = Tensor(f32(40, 128, seed=138)), Tensor(f32(2, 1, 128, seed=139))
    got = with_rule(KERNELS, MatMul, MatMulRowsCompiled, lambda: xf @ wf.T).data
    want = xf.data.astype(np.float64) @ wf.data.astype(np.float64).T
    assert got.dtype == np.float32 and np.allclose(got, want, rtol=1e-5, atol=1e-4), (
        f"float32 weights (40, 128) and x (2, 1, 128): MatMulRowsCompiled, your kernel with "
        f"scales of 1, differs from x @ W.T by {np.abs(got - want).max():.3g}")
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_kernel, {
        "an odd row length": (2, 37, 10, 1, 140),
        "a long row": (2, 300, 12, 1, 142),
        "weight rows split into pieces": (4, 64, 20, 3, 144),
        "more pieces than weight rows": (1, 16, 2, 4, 146),
        "one input row": (1, 96, 33, 2, 148),
        "one weight row": (5, 40, 1, 1, 150),
        "four blocks and three rows left over": (2, 48, 23, 1, 162),
        "two pieces of four blocks, rows left over in each": (3, 64, 45, 2, 164),
    })
    hidden_cases(check_function, {
        "as many rows as the integer kernel takes": ((SMALL_ROWS, 64), 24, 152),
        "one row more": ((SMALL_ROWS + 1, 64), 24, 154),
        "a batch of sequences": ((2, 3, 48), 16, 156),
        "weights in several tiles": ((10, 4096), 40, 158),
        "a single vector": ((80,), 7, 160),
    })
    ### END HIDDEN TESTS


test_unit_int8_matmul_rows()


# %% nbgrader={"grade": true, "grade_id": "test_unit_int4_matmul_rows", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_int4_matmul_rows():
    """The int4 kernel equals module 15's dequantize-and-multiply, every row of every piece."""

    def run(x, packed, scales, group, parts):
        """int4_matmul_rows on x (N, K), its output starting as NaN"""
        out = np.full((x.shape[0], packed.shape[0]), np.nan, np.float32)
        sums = x.reshape(x.shape[0], -1, group).sum(axis=2)  # (N, groups)
        int4_matmul_rows(np.ascontiguousarray(x[:, 0::2]), np.ascontiguousarray(x[:, 1::2]),
                         sums, packed, scales, out, parts)
        return out

    def check_kernel(rows, n_in, n_out, group, parts, seed):
        """int4_matmul_rows with `parts` pieces of weight rows, against float64."""
        packed, scales = quantize_int4(f32(n_out, n_in, seed=seed), group)
        x = f32(rows, n_in, seed=seed + 1)
        got = run(x, packed, scales, group, parts)
        want = x.astype(np.float64) @ dequantize_int4(packed, scales, group).astype(np.float64).T
        unwritten = np.flatnonzero(np.isnan(got).any(axis=0))
        assert not unwritten.size, (
            f"{rows} rows of {n_in} times {n_out} int4 weight rows (groups of {group}) in "
            f"{parts} pieces: the outputs of weight rows {unwritten.tolist()[:8]} were never "
            "written (out was filled with NaN): every row lo .. hi of each piece needs its "
            "output, the rows left over after the four blocks too")
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * math.sqrt(n_in)), (
            f"{rows} rows of {n_in} times {n_out} int4 weight rows (groups of {group}) in "
            f"{parts} pieces: differs from x @ deq(W).T by {np.abs(got - want).max():.3g}: "
            "each group's sum of x_even low + x_odd high, minus 8 x_sums[r, g], times "
            "scales[o, g], summed over every group g")

    w = f32(96, 128, seed=170)
    x = f32(3, 128, seed=171)
    packed, scales = quantize_int4(w, 32)
    got = run(x, packed, scales, 32, 1)
    want = x @ dequantize_int4(packed, scales, 32).T
    assert np.allclose(got, want, rtol=1e-5, atol=1e-4), (
        f"int4_matmul_rows differs from x @ deq(W).T by {np.nanmax(np.abs(got - want)):.3g}: "
        "out[r, o] = sum over groups g of scales[o, g] * (sum over the group's bytes j of "
        "(x_even[r, j] low_j + x_odd[r, j] high_j) - 8 x_sums[r, g])")
    for n in (1, 3, 40):  # the integer kernel, and the tiles for 40 rows
        xs = Tensor(f32(n, 128, seed=172 + n))
        plain = QuantizedMatMul.apply(xs, qweight=packed, scale=scales, bits=4,
                                      group_size=32).data
        fast = with_rule(KERNELS, QuantizedMatMul, QuantizedMatMulCompiled,
                         lambda: QuantizedMatMul.apply(xs, qweight=packed, scale=scales, bits=4,
                                                       group_size=32)).data
        assert fast.dtype == np.float32 and np.allclose(fast, plain, rtol=1e-5, atol=1e-4), (
            f"int4, {n} rows: the compiled product differs from module 15's by "
            f"{np.abs(fast - plain).max():.3g}")
    check_kernel(1, 64, 19, 16, 1, 176)  # four blocks of four rows and three rows left over
    check_kernel(3, 128, 45, 64, 2, 178)  # two pieces, rows left over in each
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_kernel, {
        "one group per row": (2, 64, 12, 64, 1, 180),
        "many small groups": (2, 256, 10, 16, 1, 182),
        "weight rows split into pieces": (4, 128, 20, 32, 3, 184),
        "more pieces than weight rows": (1, 32, 2, 16, 4, 186),
        "one weight row": (5, 64, 1, 32, 1, 188),
        "four blocks and three rows left over": (2, 64, 23, 32, 1, 190),
        "as many rows as the integer kernel takes": (SMALL_ROWS, 64, 24, 32, 2, 192),
    })
    ### END HIDDEN TESTS


test_unit_int4_matmul_rows()

# %% [markdown]
# ### Kernels for one token: RMSNorm, rotary embeddings, SiLU and SwiGLU
#
# Decoding a token runs every layer on one row. Module 13's RMSNorm and module 11's rotary
# embedding are each one operation already, but each makes several NumPy passes and
# temporaries; for one row of 896 floats the passes cost little and the calls' overhead
# most. The compiled twins below do each in one pass (RMSNorm forward and backward, like
# Part 10's layer norm without the mean; rotary, each pair `(x_j, x_{j+d/2})` rotated by
# its angle; SiLU `x * sigmoid(x)` with `fast_exp`), and are registered in the kernel table
# like the others, so an engine that switches the table on runs them.
#
# SwiGLU's `silu(gate) * up` is two operations in module 13, and the kernel table swaps
# operations, it does not merge them: `swiglu_rows` below is the fused kernel (one pass,
# no temporary), for a lesson that applies `silu(gate) * up` as one operation to plug in.
# These kernels are checked like the others (values, every gradient, float64 gradcheck,
# PyTorch) in the course's tests, `tests/test_compiled_kernels.py`, rather than here: each
# kernel a notebook compiles costs it a second.

# %% nbgrader={"grade": false, "grade_id": "decode-kernels", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
@compiled
def rms_norm_rows(x, weight, eps, out, rstd, parts):
    """out = x * rstd * weight for each row of x (N, C), rstd = 1 / sqrt(mean(x^2) + eps)

    >>> x = np.array([[3.0, 4.0]], dtype=np.float32)  # mean of squares 12.5
    >>> out, rstd = np.empty_like(x), np.empty(1, dtype=np.float32)
    >>> rms_norm_rows(x, np.ones(2, dtype=np.float32), 0.0, out, rstd, 1)
    >>> out.round(4)  # 3 / sqrt(12.5), 4 / sqrt(12.5)
    array([[0.8485, 1.1314]], dtype=float32)
    """
    n, c = x.shape
    T = x.dtype.type
    inv_c = T(1.0 / c)
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            total = T(0)
            for j in range(c):
                total += x[i, j] * x[i, j]
            r = T(1) / math.sqrt(total * inv_c + eps)
            for j in range(c):
                out[i, j] = x[i, j] * r * weight[j]
            rstd[i] = r


@compiled
def rms_norm_rows_backward(grad, x, weight, rstd, dx, dweight, parts):
    """dx = rstd (g_hat - x_hat mean(g_hat x_hat)), g_hat = grad * weight; dweight (parts, C)

    >>> x = np.array([[3.0, 4.0]], dtype=np.float32)  # mean of squares 12.5
    >>> dx, dw = np.empty_like(x), np.zeros((1, 2), np.float32)
    >>> rstd = np.array([1 / np.sqrt(12.5)], np.float32)
    >>> rms_norm_rows_backward(x.copy(), x, np.ones(2, np.float32), rstd, dx, dw, 1)
    >>> dx, dw.round(4)  # scaling x leaves the output unchanged: a gradient along x gives 0
    (array([[0., 0.]], dtype=float32), array([[2.5456, 4.5255]], dtype=float32))
    """
    n, c = x.shape
    T = x.dtype.type
    inv_c = T(1.0 / c)
    for p in prange(parts):
        for i in range(p * n // parts, (p + 1) * n // parts):
            r = rstd[i]
            sum_gx = T(0)
            for j in range(c):
                x_hat = x[i, j] * r
                sum_gx += grad[i, j] * weight[j] * x_hat
                dweight[p, j] += grad[i, j] * x_hat
            sum_gx *= inv_c
            for j in range(c):
                dx[i, j] = r * (grad[i, j] * weight[j] - x[i, j] * r * sum_gx)


class RMSNormCompiled(RMSNormFunction):
    """Module 13's RMSNorm as one compiled pass per row; keeps rstd per row.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import rms_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> with fast_kernels():
    ...     y = rms_norm(x, Tensor(np.ones(3)))
    >>> y._ctx.fn.__name__, y.data.round(4)  # x / sqrt(mean(x^2)), mean(x^2) = 50 / 3
    ('RMSNormCompiled', array([[0.7348, 0.9798, 1.2247]], dtype=float32))
    """

    saves_for_backward = True  # forward returns (out, (rows, rstd))

    @staticmethod
    def forward(x, weight, eps=1e-6):
        c = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape(-1, c)
        out, rstd = np.empty_like(rows), np.empty(rows.shape[0], x.dtype)
        rms_norm_rows(rows, np.ascontiguousarray(weight, dtype=x.dtype), x.dtype.type(eps), out,
                      rstd, chunks(rows.shape[0], c))
        return out.reshape(x.shape), (rows, rstd)


@derivative(RMSNormCompiled)
def rms_norm_compiled_backward(ctx, grad):
    """module 13's rule from the compiled kernel

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.models.transformer import rms_norm
    >>> x = Tensor([[3.0, 4.0, 5.0]], requires_grad=True)
    >>> w = Tensor(np.ones(3), requires_grad=True)
    >>> with fast_kernels():
    ...     rms_norm(x, w).sum().backward()
    >>> w.grad  # the normalized x
    Tensor([0.7348, 0.9798, 1.2247])
    """
    rows, rstd = ctx.saved
    n, c = rows.shape
    parts = chunks(n, c)
    dx, dweight = np.empty_like(rows), np.zeros((parts, c), rows.dtype)
    rms_norm_rows_backward(np.ascontiguousarray(grad).reshape(n, c), rows,
                           np.ascontiguousarray(ctx.inputs[1], dtype=rows.dtype), rstd, dx,
                           dweight, parts)
    grad_weight = dweight.sum(axis=0) if ctx.parents[1].requires_grad else None
    return dx.reshape(ctx.inputs[0].shape), grad_weight


@compiled
def rotary_rows(x, cos, sin, backward, out, parts):
    """out = x cos + rotate_half(x) sin (backward: g cos - rotate_half(g sin)), rotate_half(x)
    = [-x2 | x1], for x (R, T, d) and cos, sin (T or 1, d)

    >>> x = np.array([[[1.0, 0.0]]], dtype=np.float32)  # one row, one position, d = 2
    >>> cos, sin = np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32)  # 90 degrees
    >>> out = np.empty_like(x)
    >>> rotary_rows(x, cos, sin, False, out, 1)
    >>> out  # (1, 0) turned a quarter: (0, 1)
    array([[[0., 1.]]], dtype=float32)
    """
    n_r, n_t, d = x.shape
    half = d // 2
    rows = n_r * n_t
    for p in prange(parts):
        for row in range(p * rows // parts, (p + 1) * rows // parts):
            t = row % n_t if cos.shape[0] > 1 else 0
            a, o, c, s = x[row // n_t, row % n_t], out[row // n_t, row % n_t], cos[t], sin[t]
            for j in range(half):
                x1, x2 = a[j], a[j + half]
                if backward:
                    o[j] = x1 * c[j] + x2 * s[j + half]
                    o[j + half] = x2 * c[j + half] - x1 * s[j]
                else:
                    o[j] = x1 * c[j] - x2 * s[j]
                    o[j + half] = x2 * c[j + half] + x1 * s[j + half]


def _rotary_fits(x, cos):
    return x.ndim >= 2 and cos.ndim == 2 and cos.shape[0] in (1, x.shape[-2]) and (
        x.shape[-1] % 2 == 0)


def _rotary(x, cos, sin, backward):
    rows = np.ascontiguousarray(x).reshape((-1,) + x.shape[-2:])  # (R, T, d)
    out = np.empty_like(rows)
    rotary_rows(rows, np.ascontiguousarray(cos, dtype=x.dtype),
                np.ascontiguousarray(sin, dtype=x.dtype), backward, out,
                chunks(rows.shape[0] * rows.shape[1], rows.shape[2]))
    return out.reshape(x.shape)


class RotaryCompiled(RotaryFunction):
    """Module 11's RoPE as one compiled pass per row (tables (T, d) or (1, d)).

    >>> from tinytorch.core.embeddings import apply_rotary
    >>> from tinytorch.core.tensor import Tensor
    >>> cos, sin = np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32)  # 90 degrees
    >>> with fast_kernels():
    ...     y = apply_rotary(Tensor(np.array([[[1.0, 0.0]]], np.float32)), cos, sin)
    >>> y  # (1, 0) turned a quarter: (0, 1)
    Tensor([[[0., 1.]]])
    """

    @staticmethod
    def forward(x, cos, sin):
        if not _rotary_fits(x, cos):
            return RotaryFunction.forward(x, cos, sin)
        return _rotary(x, cos, sin, False)


@derivative(RotaryCompiled)
def rotary_compiled_backward(ctx, grad):
    """module 11's rule, grad cos - rotate_half(grad sin), in one pass

    >>> from tinytorch.core.embeddings import apply_rotary
    >>> from tinytorch.core.tensor import Tensor
    >>> x = Tensor(np.array([[[1.0, 0.0]]], np.float32), requires_grad=True)
    >>> cos, sin = np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32)  # 90 degrees
    >>> with fast_kernels():
    ...     y = apply_rotary(x, cos, sin)
    ...     (y * Tensor(np.array([[[0.0, 1.0]]], np.float32))).sum().backward()
    >>> y._ctx.fn.__name__, x.grad  # the second output is the first input
    ('RotaryCompiled', Tensor([[[1., 0.]]]))
    """
    x, cos, sin = ctx.inputs[0], ctx.params["cos"], ctx.params["sin"]
    if not _rotary_fits(x, cos):
        return rotary_backward(ctx, grad)
    return (_rotary(np.asarray(grad, dtype=x.dtype), cos, sin, True),)


@compiled
def silu_rows(x, out, parts):
    """out = x * sigmoid(x) = x / (1 + exp(-x)), element by element (x, out flat)

    >>> x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> silu_rows(x, out, 1)
    >>> np.allclose(out, x / (1 + np.exp(-x)), rtol=1e-5)
    True
    """
    n = x.shape[0]
    one = x.dtype.type(1)
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        xs, outs = x[lo:hi], out[lo:hi]
        for i in range(xs.shape[0]):
            outs[i] = xs[i] / (one + fast_exp(-xs[i]))


@compiled
def silu_rows_backward(x, grad, out, parts):
    """out = grad * s (1 + x (1 - s)), s = sigmoid(x), 1 - s = e s with e = exp(-x)

    >>> x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    >>> out = np.empty_like(x)
    >>> silu_rows_backward(x, np.ones_like(x), out, 1)
    >>> out.round(4)  # SiLU's slope at -1, 0 and 2
    array([0.0723, 0.5   , 1.0908], dtype=float32)
    """
    n = x.shape[0]
    one = x.dtype.type(1)
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        xs, gs, outs = x[lo:hi], grad[lo:hi], out[lo:hi]
        for i in range(xs.shape[0]):
            e = fast_exp(-xs[i])
            s = one / (one + e)
            rest = e * s if e < one else one - s
            outs[i] = gs[i] * s * (one + xs[i] * rest)


class SiLUCompiled(SiLUFunction):
    """Module 02's SiLU as one compiled pass.

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import silu
    >>> with fast_kernels():
    ...     y = silu(Tensor([0.0, 2.0], requires_grad=True))
    >>> y._ctx.fn.__name__, y.data.round(4)  # x / (1 + exp(-x))
    ('SiLUCompiled', array([0.    , 1.7616], dtype=float32))
    """

    @staticmethod
    def forward(x):
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        silu_rows(flat, out, chunks(flat.size))
        return out.reshape(x.shape)


@derivative(SiLUCompiled)
def silu_compiled_backward(ctx, grad):
    """d silu = s (1 + x (1 - s)), from the compiled kernel

    >>> from tinytorch.core.tensor import Tensor
    >>> from tinytorch.core.activations import silu
    >>> x = Tensor([0.0, 2.0], requires_grad=True)
    >>> with fast_kernels():
    ...     silu(x).sum().backward()
    >>> x.grad  # s (1 + x (1 - s)), s = sigmoid(x)
    Tensor([0.5   , 1.0908])
    """
    x = np.ascontiguousarray(ctx.inputs[0]).reshape(-1)
    out = np.empty_like(x)
    silu_rows_backward(x, np.ascontiguousarray(grad, dtype=x.dtype).reshape(-1), out,
                       chunks(x.size))
    return (out.reshape(ctx.inputs[0].shape),)


@compiled
def swiglu_rows(gate, up, out, parts):
    """out = silu(gate) * up in one pass, no temporary (gate, up, out flat)

    >>> gate, up = np.array([0.0, 2.0], dtype=np.float32), np.array([5.0, 3.0], dtype=np.float32)
    >>> out = np.empty_like(gate)
    >>> swiglu_rows(gate, up, out, 1)
    >>> np.allclose(out, gate / (1 + np.exp(-gate)) * up, rtol=1e-5)
    True
    """
    n = gate.shape[0]
    one = gate.dtype.type(1)
    for p in prange(parts):
        lo, hi = p * n // parts, (p + 1) * n // parts
        gs, us, outs = gate[lo:hi], up[lo:hi], out[lo:hi]
        for i in range(gs.shape[0]):
            outs[i] = gs[i] / (one + fast_exp(-gs[i])) * us[i]


# %% [markdown]
# ## Part 13: plugging the kernels in
#
# A fast kernel is worth nothing if the framework does not run it, and a framework that
# runs it by reassigning another module's functions (`activations.GELUFunction.forward =
# ...`) can no longer be read: what runs depends on what was imported last. Your framework
# has two tables instead, both plain dictionaries, both importable from module 06:
#
# - `DERIVATIVES[Op]` is the rule `backward` calls for records of `Op`. A faster rule for
#   the same forward (GELU, cross-entropy) is registered by replacing the entry.
# - `KERNELS[Op]` is the `Function` that runs wherever a lesson applies `Op`: module 01's
#   `Function.apply` begins with `cls = KERNELS.get(cls, cls)`, and `kernel(Op)` tells which
#   class that is. A kernel with a different forward (attention that keeps `P`, Part 9's
#   GELU and layer norm) goes there, with its own rule in `DERIVATIVES` under its own
#   class.
#
# The given cell lists every fast kernel once, with its name, the table, the key and the
# fast entry: `FAST_KERNELS` for the NumPy kernels of Parts 5 to 9, `COMPILED_KERNELS` for
# the compiled ones of Parts 10 to 12. Where both have a kernel for the same operation,
# the compiled one wins; `kernel_set(compiled)` is the list that is switched on, the
# compiled kernels and the NumPy ones for the other operations (`compiled=False`: the NumPy
# kernels alone, to measure what compiling added). `use_fast_kernels(True)` puts each entry
# of that set in its table and remembers what was there; `use_fast_kernels(False)` puts the
# plain entries back. Both return the names now active, and `fast_kernels(on)` does the
# same for a `with` block and restores the previous state afterwards, for measuring one
# against the other. An optimizer is not an operation: `CompiledAdamW` (or `FusedAdamW`) is
# a class you construct instead of `AdamW`.
#
# Completing this module exports all of it into `tinytorch.perf.acceleration`; the
# `tinygpt` milestone and `benchmarks/gpt_step.py` switch the kernels on and use
# `CompiledAdamW`, `keep_freed_memory()` and `set_threads` when they find the module
# (`--plain` turns it off), and print which kernels ran. Without module 17, nothing
# compiled ever runs: the tables are empty, and every lesson's own code runs.
#
# What the tables cost: one dictionary lookup per operation in `Function.apply`, about
# 50 ns, against the tens of microseconds of a NumPy call on TinyGPT's arrays. What they
# cannot do: fuse operations that a lesson applies one after the other. Slicing `q`, `k`
# and `v` out of module 12's fused projection is three `GetItem`s, and each one's rule must
# return a zero-filled gradient of the whole `(B, T, 3C)` array; one operation that splits
# it into three would write the three gradients into one buffer, but that changes the
# lesson that applies it, so it is not done here.

# %% nbgrader={"grade": false, "grade_id": "registry", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
FAST_KERNELS = (
    # (name, table, key, fast entry): switching on sets table[key] = fast entry
    ("gelu_backward_inplace", DERIVATIVES, GELUFunction, gelu_backward_inplace),
    ("cross_entropy_backward_inplace", DERIVATIVES, CrossEntropyFunction,
     cross_entropy_backward_inplace),
    ("attention_keep_probs", KERNELS, AttentionFunction, AttentionKeepFunction),
    ("gelu_tanh_kernel", KERNELS, GELUFunction, GELUTanhKernel),
    ("layer_norm_kernel", KERNELS, LayerNormFunction, LayerNormKernel),
    ("add_backward_bias_blas", DERIVATIVES, Add, add_backward_bias_blas),
)
COMPILED_KERNELS = (
    ("layer_norm_compiled", KERNELS, LayerNormFunction, LayerNormCompiled),
    ("gelu_compiled", KERNELS, GELUFunction, GELUCompiled),
    ("attention_compiled", KERNELS, AttentionFunction, AttentionCompiled),
    ("cross_entropy_compiled", KERNELS, CrossEntropyFunction, CrossEntropyCompiled),
    ("quantized_matmul_compiled", KERNELS, QuantizedMatMul, QuantizedMatMulCompiled),
    ("matmul_rows_compiled", KERNELS, MatMul, MatMulRowsCompiled),
    ("rms_norm_compiled", KERNELS, RMSNormFunction, RMSNormCompiled),
    ("rotary_compiled", KERNELS, RotaryFunction, RotaryCompiled),
    ("silu_compiled", KERNELS, SiLUFunction, SiLUCompiled),
)
ALL_KERNELS = FAST_KERNELS + COMPILED_KERNELS
_PLAIN_ENTRIES = {}  # name -> the table entry the fast kernel replaced (None: there was none)


def kernel_set(compiled=True):
    """The entries use_fast_kernels switches on: the compiled kernels, and the NumPy ones for
    the operations that have no compiled kernel (compiled=False: the NumPy ones alone).

    >>> sorted(name for name, *_ in kernel_set())[:3]
    ['add_backward_bias_blas', 'attention_compiled', 'cross_entropy_compiled']
    >>> [name for name, *_ in kernel_set(compiled=False)][:2]
    ['gelu_backward_inplace', 'cross_entropy_backward_inplace']
    """
    if not compiled:
        return FAST_KERNELS
    taken = {key for _, _, key, _ in COMPILED_KERNELS}
    return tuple(e for e in FAST_KERNELS if e[2] not in taken) + COMPILED_KERNELS


def active_kernels():
    """The names of the fast kernels whose entries are in their tables now.

    >>> active_kernels()  # none until use_fast_kernels() or fast_kernels()
    ()
    """
    return tuple(name for name, table, key, fast in ALL_KERNELS if table.get(key) is fast)


def _switch(names, on):
    for name, table, key, fast in ALL_KERNELS:
        if name not in names:
            continue
        if on and table.get(key) is not fast:
            _PLAIN_ENTRIES[name] = table.get(key)
            table[key] = fast
        elif not on and table.get(key) is fast:
            plain = _PLAIN_ENTRIES.pop(name, None)
            if plain is None:
                del table[key]
            else:
                table[key] = plain


def use_fast_kernels(on: bool = True, compiled: bool = True) -> tuple[str, ...]:
    """Switch the fast kernels of kernel_set(compiled) on (or all of them off); returns the
    names now active.

    >>> on = use_fast_kernels()
    >>> "attention_compiled" in on, active_kernels() == on
    (True, True)
    >>> use_fast_kernels(False)  # every table as the lessons left it
    ()
    """
    if not isinstance(on, bool) or not isinstance(compiled, bool):
        raise TypeError(f"use_fast_kernels(on, compiled) takes True or False, got {on!r}, "
                        f"{compiled!r}")
    wanted = {name for name, *_ in kernel_set(compiled)} if on else set()
    _switch({name for name, *_ in ALL_KERNELS} - wanted, False)
    _switch(wanted, True)
    return active_kernels()


@contextlib.contextmanager
def fast_kernels(on=True, compiled=True):
    """with fast_kernels(): ... runs with the fast kernels on (off with on=False; the NumPy
    ones alone with compiled=False), then restores exactly the kernels that were active
    before. Yields the names active inside.

    >>> with fast_kernels() as names:
    ...     "gelu_compiled" in names
    True
    >>> active_kernels()  # restored on the way out
    ()
    """
    before = set(active_kernels())
    try:
        yield use_fast_kernels(on, compiled)
    finally:
        _switch({name for name, *_ in ALL_KERNELS} - before, False)
        _switch(before, True)


# %% nbgrader={"grade": true, "grade_id": "test_unit_fast_kernels", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def gpt_step_grads(fast, seed=0, optimizer=None):
    """Loss and gradients of one small GPT step, with the fast kernels on or off."""
    manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=17, block_size=16, n_layer=2, n_head=2, n_embd=32))
    ids = rng(seed).integers(0, 17, (3, 17))
    with fast_kernels(fast) as names:
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
    grads = {name: p.grad.data.copy() for name, p in model.named_parameters()}
    return loss.item(), grads, names


def test_unit_fast_kernels():
    """A GPT step with every fast kernel on equals the plain step; the switches restore."""
    assert active_kernels() == (), (
        f"kernels {active_kernels()} are on before the test: a `with fast_kernels()` block "
        "should restore the previous state")
    plain_loss, plain_grads, names_off = gpt_step_grads(False)
    fast_loss, fast_grads, names_on = gpt_step_grads(True)
    assert names_off == () and set(names_on) == {name for name, *_ in kernel_set()}, (
        f"inside fast_kernels(False) the active kernels were {names_off}, inside "
        f"fast_kernels(True) {names_on}")
    assert active_kernels() == (), "fast_kernels() left kernels switched on after the block"
    assert abs(plain_loss - fast_loss) < 1e-5, (
        f"the fast kernels change the loss: {fast_loss} against {plain_loss}; a forward "
        "kernel (attention) computes something else than module 12's")
    for name, want in plain_grads.items():
        got = fast_grads[name]
        assert got.dtype == np.float32 and np.allclose(got, want, rtol=1e-4, atol=1e-6), (
            f"the gradient of {name} changes with the fast kernels by up to "
            f"{np.abs(got - want).max():.3g}; the kernel tests above say which rule is wrong")
    assert use_fast_kernels(True) == active_kernels() and use_fast_kernels(False) == (), (
        "use_fast_kernels(on) returns the names active afterwards")

    def check_step(fields, batch, length, seed, compiled=True):
        """One training step of GPT(GPTConfig(**fields)) on `batch` random sequences: the
        loss and every gradient with the kernels of kernel_set(compiled) on equal the plain
        step's, and the tables are as they were afterwards."""
        results = {}
        for on in (False, True):
            manual_seed(seed)
            model = GPT(GPTConfig(**fields))
            ids = rng(seed).integers(0, fields["vocab_size"], (batch, length + 1))
            with fast_kernels(on, compiled=compiled) as names:
                _, loss = model(ids[:, :-1], ids[:, 1:])
                loss.backward()
            results[on] = loss.item(), {n: p.grad.data for n, p in model.named_parameters()}
            want_names = {name for name, *_ in kernel_set(compiled)} if on else set()
            assert set(names) == want_names and active_kernels() == (), (
                f"{fields}: fast_kernels({on}, compiled={compiled}) ran {names} and left "
                f"{active_kernels()} on afterwards")
        (plain, plain_grads), (fast, fast_grads) = results[False], results[True]
        assert abs(plain - fast) < 1e-5, (
            f"{fields}, compiled={compiled}: the loss is {fast} with the kernels, {plain} "
            "without")
        for name, want in plain_grads.items():
            got = fast_grads[name]
            assert got.dtype == np.float32 and np.allclose(got, want, rtol=1e-4, atol=1e-6), (
                f"{fields}, compiled={compiled}: the gradient of {name} differs by "
                f"{np.abs(got - want).max():.3g}; the kernel tests above say which rule is wrong")

    small = {"vocab_size": 17, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}
    check_step(small, 3, 16, 0)
    ### BEGIN HIDDEN TESTS
    from tinytorch.testing import hidden_cases

    hidden_cases(check_step, {
        "a wider model with more heads": (small | {"n_embd": 48, "n_head": 4}, 2, 12, 1),
        "one layer and one head": (small | {"n_layer": 1, "n_head": 1}, 3, 10, 2),
        "biases and an untied head": (small | {"bias": True, "tie_weights": False}, 2, 16, 3),
        "a single sequence": (small, 1, 16, 4),
        "a short sequence": (small | {"vocab_size": 40}, 4, 3, 5),
        "the exact GELU": (small | {"gelu_approximate": "none"}, 2, 8, 6),
        "the NumPy kernels alone": (small | {"n_head": 4}, 2, 16, 7, False),
        "the NumPy kernels with biases": (small | {"bias": True}, 3, 9, 8, False),
    })
    ### END HIDDEN TESTS


test_unit_fast_kernels()

# %% [markdown]
# ## Systems analysis
#
# Three measurements on your machine, on one BLAS thread (times vary with the load; the
# bytes do not):
#
# 1. **Keep or recompute.** Attention's forward + backward at TinyGPT's shape, module 12's
#    recompute against your keep, and the bytes each record holds between forward and
#    backward.
# 2. **A fused layer norm.** Module 13 fused LayerNorm into one operation with its own rule;
#    here it is timed against `layer_norm_composed`, the same maths from eight Tensor
#    operations, forward and backward, with the graph nodes each records.
# 3. **The whole step.** A small GPT's training step with every kernel off and on
#    (interleaved, so a busy neighbour slows both alike). The milestone's full-size step is
#    measured against PyTorch by `benchmarks/gpt_step.py`.

# %% nbgrader={"grade": false, "grade_id": "analysis", "locked": false, "schema_version": 3, "solution": false, "task": false}
def attention_trade(B=12, H=4, T=64, D=32, rounds=3):
    q, k, v = (Tensor(f32(B, H, T, D, seed=s), requires_grad=True) for s in (50, 51, 52))
    grad = Tensor(f32(B, H, T, D, seed=53))
    labels = {False: "recompute (module 12)", True: "keep P (module 17)"}
    seconds, kept = {False: [], True: []}, {}

    def step():
        y = scaled_dot_product_attention(q, k, v, is_causal=True)
        (y * grad).sum().backward()

    for _ in range(rounds):  # interleaved, so that a busy neighbour slows both alike
        for on in (False, True):
            with fast_kernels(on):
                seconds[on].append(best_time(step, repeat=3))
                ctx = scaled_dot_product_attention(q, k, v, is_causal=True)._ctx
                arrays = list(ctx.inputs) + [ctx.output] + list(ctx.saved or ())
                arrays += [ctx.params["keep"]] if ctx.params.get("keep") is not None else []
                kept[on] = sum(a.nbytes for a in {id(a): a for a in arrays}.values())
    for on in (False, True):
        print(f"attention ({B}, {H}, {T}, {D}) forward+backward, {labels[on]}: "
              f"{min(seconds[on]) * 1e3:.2f} ms, record keeps {kept[on] / 2**20:.2f} MiB")
    print(f"  keeping P: {min(seconds[False]) / min(seconds[True]):.2f}x the speed for "
          f"{(kept[True] - kept[False]) / 2**20:.2f} MiB more per layer")


def count_nodes(t):
    seen, stack = set(), [t]
    while stack:
        node = stack.pop()
        if id(node) in seen or node._ctx is None:
            continue
        seen.add(id(node))
        stack.extend(node._ctx.parents)
    return len(seen)


def layer_norm_report(rows=768, C=128):
    x = Tensor(f32(rows, C, seed=60), requires_grad=True)
    w, b = (Tensor(f32(C, seed=s), requires_grad=True) for s in (61, 62))
    for label, fn in (("composed", layer_norm_composed), ("fused (module 13)", layer_norm)):
        nodes = count_nodes(fn(x, w, b))

        def step():
            fn(x, w, b).sum().backward()

        print(f"layer norm ({rows}, {C}) {label}: {nodes} graph nodes, forward+backward "
              f"{best_time(step, repeat=7) * 1e3:.2f} ms")


def step_report(rounds=3):
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64))
    ids = rng(1).integers(0, 65, (4, 65))
    modes = {"plain": (False, False), "NumPy kernels": (True, False), "compiled": (True, True)}
    times = {mode: [] for mode in modes}
    for _ in range(rounds):  # interleaved, so that a busy neighbour slows all alike
        for mode, (on, compiled_too) in modes.items():
            with fast_kernels(on, compiled=compiled_too):
                t0 = time.perf_counter()
                _, loss = model(ids[:, :-1], ids[:, 1:])
                loss.backward()
                times[mode].append(time.perf_counter() - t0)
    best = {mode: min(t) for mode, t in times.items()}
    print("GPT step (2 layers, 64 wide, 4 x 64 tokens), forward+backward, one thread: "
          + ", ".join(f"{mode} {t * 1e3:.1f} ms ({best['plain'] / t:.2f}x)"
                      for mode, t in best.items()))


with one_blas_thread():
    attention_trade()
    layer_norm_report()
    step_report()

# %% [markdown]
# What to look for:
#
# - **Keeping P** saves a third to a half of attention's forward + backward time at `T = 64`
#   (the second `q @ k^T` and softmax) for 0.75 MiB more per layer. Both the bytes and the
#   saved work grow with `T^2`, but memory is the wall a long context hits first: at
#   `T = 8192` one layer's `P` for this batch is 12 GiB. That is why FlashAttention
#   recomputes, and why the choice is a measured trade, not a rule.
# - **The fused layer norm** records one graph node instead of nine and is faster forward
#   and backward (about 1.5x here): fewer passes over memory, fewer temporaries, one rule
#   instead of nine. Part 9's NumPy kernel takes only a little more off it; Part 10's
#   compiled one takes most of what is left (one pass per row).
# - **The step** gets faster by a modest factor, not by 2x: matrix products are most of a
#   step, and BLAS already runs them near the machine's peak; the kernels win back the
#   element-wise passes, the recompute and the optimizer's temporaries. On the milestone's
#   model, `python benchmarks/gpt_step.py --numpy-kernels` prints the plain framework, the
#   NumPy kernels and the compiled ones against PyTorch eager, side by side in one run.
#   Measured while writing Parts 10-12 (`--threads 1 --clock cpu`, a machine shared with
#   other work, load 4-5): plain 148.5 ms, NumPy kernels 122.3 ms, compiled 104.2 ms,
#   PyTorch 91.9 ms a step, so compiling took the step from 1.33x to 1.13x PyTorch's and
#   made it 1.43x faster than plain; peak training memory 48.8 MiB against PyTorch's 48.0.
#   Where the rest goes: `--breakdown` times every operation on both sides and prints the
#   same rows for each framework. Two runs on another machine (a 2-core AMD EPYC with AVX2,
#   two threads, idle): the step was 1.18-1.22x PyTorch's. The matrix products cost about
#   the same in both frameworks, 46-50 ms against 45 ms, half the step. Attention cost more,
#   15.4 ms against 9-10 ms: NumPy runs the 48 small products of a batched product one after
#   another on one core, while PyTorch's fused attention spreads the heads over both. Layer
#   norm cost a little more (3.4-3.7 ms against about 2). The compiled GELU (7.2-7.4 ms
#   against 9.9-10.7) and AdamW (2.5-2.9 against 7.6-8.1) cost less. The Python bookkeeping
#   of Function.apply and backward (8.2-8.6 ms) was close to what PyTorch's dispatcher and
#   autograd engine took (7.3-8.2, under its profiler). So a step at 0.8x PyTorch's is out
#   of reach there: 0.8x of PyTorch's step (59-67 ms in these runs) minus the products
#   leaves 10-21 ms for everything else, which took PyTorch itself 29-39 ms.
#   On two threads, a machine busy with other work makes every parallel loop wait for its
#   slowest thread, for both frameworks: measure that on idle cores.

# ## What comes next
#
# - **Module 18 (KV caching)** makes generation fast: the keys and values of the prompt are
#   kept instead of recomputed, the same keep-or-recompute trade for inference.
# - **Module 19 (benchmarking)** turns measurements like these into claims: repeats,
#   confidence intervals for a ratio, paired runs on a noisy machine.
# - **Module 20 (capstone)** combines quantization, compression, these kernels and the KV
#   cache into a fast, small TinyGPT, and proves every figure.
