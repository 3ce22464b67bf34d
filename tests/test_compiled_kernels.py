"""Module 17's compiled (numba) kernels against the plain operations, PyTorch and central
differences.

Each kernel is checked for its values and every gradient against the plain operation it
replaces (float32), by a float64 gradcheck with the kernel in the table, and where PyTorch
has the operation, against PyTorch's autograd. The kernels compile once per machine (numba's
cache beside the package), so the first run of this file takes longer than the next ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinytorch.core.activations import GELUFunction, SiLUFunction, gelu, silu
from tinytorch.core.attention import AttentionFunction, scaled_dot_product_attention
from tinytorch.core.autograd import KERNELS, gradcheck
from tinytorch.core.embeddings import RotaryEmbedding, RotaryFunction, apply_rotary
from tinytorch.core.layers import Linear, Parameter
from tinytorch.core.losses import CrossEntropyFunction, cross_entropy
from tinytorch.core.optimizers import AdamW
from tinytorch.core.tensor import MatMul, Tensor, manual_seed
from tinytorch.models.transformer import (
    GPT,
    GPTConfig,
    LayerNormFunction,
    RMSNormFunction,
    layer_norm,
    rms_norm,
)
from tinytorch.perf import acceleration as acc
from tinytorch.perf.quantization import (
    QuantizedLinear,
    QuantizedMatMul,
    quantize_int4,
    quantize_int8,
    quantize_model,
)

torch = pytest.importorskip("torch")


def f32(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def f64(*shape, seed=0, scale=1.0):
    data = np.random.default_rng(seed).standard_normal(shape) * scale
    return Tensor(data, dtype=np.float64, requires_grad=True)


@pytest.fixture(autouse=True)
def plain_afterwards():
    """Every test starts and ends with the plain framework."""
    assert acc.active_kernels() == ()
    yield
    acc.use_fast_kernels(False)


def with_kernel(key, fast, fn):
    """fn() with KERNELS[key] = fast, then the table as it was."""
    KERNELS[key] = fast
    try:
        return fn()
    finally:
        KERNELS.pop(key, None)


def plain_and_compiled(key, fast, fn, leaves, seed=9):
    """(output, gradients) of fn() plain and with the kernel, one weighted backward each."""
    results = []
    for on in (False, True):
        for t in leaves:
            t.grad = None
        out = with_kernel(key, fast, fn) if on else fn()
        weights = Tensor(f32(*out.shape, seed=seed).astype(out.dtype), dtype=out.dtype)
        (out * weights).sum().backward()
        results.append((out.data, [t.grad.data for t in leaves]))
    return results


# ---- the machinery ---------------------------------------------------------------------------
def test_package_kernels_are_cached_notebook_ones_are_not():
    """In a file: parallel, cached on disk; in exec'd code (a notebook cell): parallel, no cache."""
    assert acc.layer_norm_rows.targetoptions["parallel"] is True
    assert type(acc.layer_norm_rows._cache).__name__ == "FunctionCache"
    namespace = {"acc": acc, "prange": acc.prange}
    exec(compile("@acc.compiled\ndef twice(x, out, parts):\n"
                 "    for p in prange(parts):\n"
                 "        for i in range(x.shape[0]):\n"
                 "            out[i] = x[i] * x.dtype.type(2)\n",
                 "<cell 3 'kernel'>", "exec"), namespace)
    twice = namespace["twice"]
    assert twice.targetoptions["parallel"] is True
    assert type(twice._cache).__name__ == "NullCache"
    out = np.empty(3, np.float32)
    twice(np.arange(3, dtype=np.float32), out, 1)
    assert out.tolist() == [0, 2, 4]



ONE_PIECE = """
import numba, numpy as np
from tinytorch.perf import acceleration as acc

@acc.compiled
def threads_seen(out, parts):
    for p in acc.prange(parts):
        out[p] = numba.get_num_threads()

assert numba.get_num_threads() == 2, numba.get_num_threads()
one, two = np.zeros(1, np.int64), np.zeros(2, np.int64)
threads_seen(one, 1)
after_one = numba.get_num_threads()
threads_seen(two, 2)
print(one.tolist(), after_one, two.tolist(), numba.get_num_threads())
"""


def test_a_one_piece_call_runs_on_one_thread_and_restores_the_count(repo):
    """On a pool of two threads, a call with parts == 1 sees one thread, and the count is
    two again after it; parts == 2 runs on both."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", ONE_PIECE], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[1] 2 [2, 2] 2"


def test_a_kernel_keeps_the_name_docstring_and_python_function():
    kernel = acc.layer_norm_rows
    assert kernel.__name__ == "layer_norm_rows" and kernel.py_func.__name__ == "layer_norm_rows"
    assert kernel.__doc__ == kernel.py_func.__doc__  # its doctest runs
    assert kernel.targetoptions["parallel"] is True

THREAD_LAYER = """
import ctypes, importlib.metadata, os, sys
how = sys.argv[1]
if how == "no tbb":  # as on a machine where the tbb wheel is not installed
    files = importlib.metadata.files
    def without_tbb(name):
        if name == "tbb":
            raise importlib.metadata.PackageNotFoundError(name)
        return files(name)
    importlib.metadata.files = without_tbb
if how == "broken tbb":  # installed, but its library does not load
    CDLL = ctypes.CDLL
    def refuse(name, *args, **kwargs):
        if "tbb" in str(name):
            raise OSError(f"{name}: cannot open shared object file")
        return CDLL(name, *args, **kwargs)
    ctypes.CDLL = refuse
import tinytorch.perf.acceleration as acc
import torch  # loaded after the kernels' pool, as the benchmarks' PyTorch process does
print(acc.kernel_threads()[0], os.environ.get("OMP_WAIT_POLICY"), acc.tbb_library() is not None)
"""


def kernel_layer(repo, how, chosen=None):
    """The threading layer a fresh process's kernels run on, how TBB is made to look."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY")}
    if chosen:
        env["NUMBA_THREADING_LAYER"] = chosen
    return subprocess.run([sys.executable, "-c", THREAD_LAYER, how], capture_output=True,
                          text=True, cwd=repo, env=env, timeout=120)


def test_the_kernels_run_on_tbb_where_its_wheel_is_installed(repo):
    """numba's OpenMP pool spins between kernels and fought OpenBLAS's spinning threads (a
    step 4x longer on two cores); its workqueue pool costs 50-120 us a call. The package
    starts the pool on TBB (a dependency on x86-64 Linux and Windows), and leaves the
    process's OpenMP settings (which PyTorch shares) as they were."""
    import platform

    pytest.importorskip("torch")
    done = kernel_layer(repo, "as installed")
    assert done.returncode == 0, done.stderr
    layer, wait_policy, installed = done.stdout.split()
    assert wait_policy == "None"
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert installed == "True", "pyproject.toml installs tbb on x86-64 Linux"
    assert layer == ("tbb" if installed == "True" else "workqueue"), done.stdout


@pytest.mark.parametrize("how", ["no tbb", "broken tbb"])
def test_without_tbb_the_kernels_run_on_numbas_own_pool(how, repo):
    pytest.importorskip("torch")
    done = kernel_layer(repo, how)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["workqueue", "None"], done.stdout


def test_a_layer_the_user_chose_is_kept(repo):
    pytest.importorskip("torch")
    done = kernel_layer(repo, "as installed", chosen="omp")
    if "No threading layer could be loaded" in done.stderr:
        pytest.skip("numba has no omp layer here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["omp", "None"], done.stdout


def test_chunks_one_piece_below_the_threshold_one_per_thread_above():
    assert acc.chunks(10, 100) == 1
    assert acc.chunks(1, acc.PARALLEL_MIN * 4) == 1  # one row cannot be split
    big = acc.chunks(1024, 128)
    assert big == min(acc.numba.get_num_threads(), 1024)


BLAS_SPIN = """
import json, os, time
import numpy as np

a = np.ones((512, 512), np.float32)


def cpu_while_asleep():  # ms of CPU the process uses in a 200 ms sleep after a product
    a @ a
    start = time.process_time()
    time.sleep(0.2)
    return (time.process_time() - start) * 1e3


from tinytorch.perf import acceleration  # noqa: E402

loaded = max(cpu_while_asleep() for _ in range(3))  # loading the module changes nothing
done = acceleration.quiet_blas_threads()
after = max(cpu_while_asleep() for _ in range(3))
print(json.dumps([loaded, done, after, os.environ.get("OPENBLAS_THREAD_TIMEOUT")]))
"""


def test_quiet_blas_threads_puts_openblas_idle_threads_to_sleep(repo):
    """OpenBLAS as it ships keeps a thread spinning after each product (a core's worth of CPU
    while the process sleeps), module 17 loaded or not; after quiet_blas_threads() the
    process sleeps with it."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", BLAS_SPIN], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded, quieted, after, setting = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded > 15, (f"OpenBLAS used only {loaded:.1f} ms of CPU in a 200 ms sleep after "
                         "a product: it no longer spins (or loading module 17 quieted it), so this "
                         "test cannot see the change")
    assert quieted is True
    assert after < 5, f"{after:.1f} ms of CPU in a 200 ms sleep: OpenBLAS's threads still spin"
    assert setting == str(acc.QUIET_TIMEOUT)


def test_an_openblas_thread_timeout_you_set_is_kept(repo):
    import os
    import subprocess
    import sys

    script = ("import os; from tinytorch.perf import acceleration as acc; "
              "print(acc.quiet_blas_threads(), os.environ['OPENBLAS_THREAD_TIMEOUT'])")
    env = {**os.environ, "OPENBLAS_THREAD_TIMEOUT": "20"}
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "20"]


def test_set_threads_sets_both_pools():
    before_numba, before_blas = acc.numba.get_num_threads(), acc.blas_threads()
    try:
        acc.set_threads(1)
        assert acc.numba.get_num_threads() == 1
        if before_blas is not None:
            assert acc.blas_threads() == 1
    finally:
        acc.numba.set_num_threads(before_numba)
        if before_blas is not None:
            acc.set_blas_threads(before_blas)
    with pytest.raises(ValueError, match="positive integer"):
        acc.set_threads(0)


def pieces_agree(parts):
    """Splitting rows among threads changes no row's result (sums across rows: rounding)."""
    x, w, b = f32(50, 33, seed=1), f32(33, seed=2), f32(33, seed=3)
    g = f32(50, 33, seed=4)
    outs = []
    for p in (1, parts):
        out, mean, rstd = np.empty_like(x), np.empty(50, np.float32), np.empty(50, np.float32)
        acc.layer_norm_rows(x, w, b, np.float32(1e-5), out, mean, rstd, p)
        dx, dw, db = np.empty_like(x), np.zeros((p, 33), np.float32), np.zeros((p, 33), np.float32)
        acc.layer_norm_rows_backward(g, x, w, mean, rstd, dx, dw, db, p)
        scores = f32(4, 9, 9, seed=5)
        acc.softmax_rows(scores, np.broadcast_to(np.tril(np.ones((9, 9), bool)), scores.shape),
                         np.float32(0.5), p)
        outs.append((out, dx, dw.sum(0), db.sum(0), scores))
    (o1, dx1, dw1, db1, s1), (o2, dx2, dw2, db2, s2) = outs
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(dx1, dx2)
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_allclose(dw1, dw2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db1, db2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_pieces_do_not_change_the_rows(parts):
    pieces_agree(parts)


def test_pieces_on_two_real_threads(repo):
    """The same on two threads of numba's pool (the suite's own processes use one thread
    each: conftest.py), so that the pieces really run at once."""
    import os
    import subprocess
    import sys

    script = ("import numba, test_compiled_kernels as t\n"
              "assert numba.get_num_threads() == 2, numba.get_num_threads()\n"
              "for parts in (2, 3, 7):\n    t.pieces_agree(parts)\nprint('agreed')\n")
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "PYTHONPATH": str(repo / "tests")}
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["agreed"], done.stderr


# ---- fast_exp ----------------------------------------------------------------------------------
def test_fast_exp_within_two_ulps_over_float32s_range():
    x = np.concatenate([np.linspace(-86.4, 88.7, 1_000_001, dtype=np.float32),
                        f32(200_000, seed=6, scale=10.0), np.float32([0, -0.0, 1e-30, -1e-30])])
    got = np.empty_like(x)
    acc.exp_rows(x, got, acc.chunks(x.size))
    want = np.exp(x.astype(np.float64))
    spacing = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert (np.abs(got - want) / spacing).max() <= 2


def test_fast_exp_edges_and_float64():
    edges = np.float32([-np.inf, -1e30, -100, -87.5, 88.8, 89, 1e30, np.inf, np.nan])
    out = np.empty_like(edges)
    acc.exp_rows(edges, out, 1)
    assert out[:4].tolist() == [0, 0, 0, 0]  # below float32's normal range: 0
    assert np.isposinf(out[4:8]).all() and np.isnan(out[8])
    x = np.linspace(-700, 700, 10_001)
    got = np.empty_like(x)
    acc.exp_rows(x, got, 1)  # float64: the C library's exp, the one Python's math uses
    np.testing.assert_array_equal(got, [math.exp(v) for v in x])


# ---- layer norm, RMSNorm --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 5, 12), (7, 12), (1, 12)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_compiled_matches_module_13_and_pytorch(shape, bias):
    x = Tensor(f32(*shape, seed=10, scale=3.0) + 2, requires_grad=True)
    w = Tensor(f32(12, seed=11), requires_grad=True)
    b = Tensor(f32(12, seed=12), requires_grad=True) if bias else None
    leaves = [x, w] + ([b] if bias else [])
    (want, want_g), (got, got_g) = plain_and_compiled(
        LayerNormFunction, acc.LayerNormCompiled, lambda: layer_norm(x, w, b), leaves)
    np.testing.assert_allclose(got, want, atol=1e-5)
    for g1, g0 in zip(got_g, want_g):
        assert g1.dtype == np.float32
        np.testing.assert_allclose(g1, g0, atol=1e-4)
    tx, tw = torch.tensor(x.data, requires_grad=True), torch.tensor(w.data, requires_grad=True)
    tb = torch.tensor(b.data, requires_grad=True) if bias else None
    ref = torch.nn.functional.layer_norm(tx, (12,), tw, tb, 1e-5)
    ref.backward(torch.tensor(f32(*shape, seed=9)))
    np.testing.assert_allclose(got, ref.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(got_g[0], tx.grad.numpy(), atol=1e-4)
    np.testing.assert_allclose(got_g[1], tw.grad.numpy(), atol=1e-4)


def test_layer_norm_compiled_takes_a_transposed_input():
    base = f32(12, 6, seed=13)
    x = Tensor(base, requires_grad=True)
    w = Tensor(f32(12, seed=14), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(
        LayerNormFunction, acc.LayerNormCompiled, lambda: layer_norm(x.T, w), [x, w])
    np.testing.assert_allclose(got, want, atol=1e-5)
    for g1, g0 in zip(got_g, want_g):
        np.testing.assert_allclose(g1, g0, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_compiled_gradcheck_float64(bias):
    x, w, b = f64(3, 4, 7, seed=15, scale=2.0), f64(7, seed=16), f64(7, seed=17)
    leaves = [x, w, b] if bias else [x, w]
    with_kernel(LayerNormFunction, acc.LayerNormCompiled,
                lambda: gradcheck(lambda *t: layer_norm(*t), leaves))


def test_rms_norm_compiled_matches_module_13_pytorch_and_gradcheck():
    x = Tensor(f32(2, 3, 16, seed=18, scale=2.0), requires_grad=True)
    w = Tensor(f32(16, seed=19), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(
        RMSNormFunction, acc.RMSNormCompiled, lambda: rms_norm(x, w), [x, w])
    np.testing.assert_allclose(got, want, atol=1e-5)
    for g1, g0 in zip(got_g, want_g):
        np.testing.assert_allclose(g1, g0, atol=1e-4)
    tx, tw = torch.tensor(x.data, requires_grad=True), torch.tensor(w.data, requires_grad=True)
    ref = torch.nn.functional.rms_norm(tx, (16,), tw, 1e-6)
    ref.backward(torch.tensor(f32(2, 3, 16, seed=9)))
    np.testing.assert_allclose(got, ref.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(got_g[0], tx.grad.numpy(), atol=1e-4)
    with_kernel(RMSNormFunction, acc.RMSNormCompiled,
                lambda: gradcheck(lambda a, b: rms_norm(a, b),
                                  [f64(3, 6, seed=20), f64(6, seed=21)]))


# ---- GELU, SiLU, SwiGLU ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gelu", "silu"])
def test_gelu_and_silu_compiled_match_pytorch_including_extremes(kind):
    values = np.concatenate([f32(200, seed=22, scale=4.0),
                             np.float32([-1e4, -100, -50, -20, -1e-8, 0, 1e-8, 20, 50, 100, 1e4])])
    x = Tensor(values, requires_grad=True)
    key, fast = ((GELUFunction, acc.GELUCompiled) if kind == "gelu" else
                 (SiLUFunction, acc.SiLUCompiled))
    fn = (lambda: gelu(x, approximate="tanh")) if kind == "gelu" else (lambda: silu(x))
    (want, want_g), (got, got_g) = plain_and_compiled(key, fast, fn, [x])
    assert np.isfinite(got).all() and np.isfinite(got_g[0]).all()
    tx = torch.tensor(values, requires_grad=True)
    ref = (torch.nn.functional.gelu(tx, approximate="tanh") if kind == "gelu" else
           torch.nn.functional.silu(tx))
    ref.backward(torch.tensor(f32(values.size, seed=9)))
    np.testing.assert_allclose(got, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_g[0], tx.grad.numpy(), rtol=1e-5, atol=3e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gelu_compiled_erf_form_is_module_02s():
    x = Tensor(f32(40, seed=23, scale=3.0), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(
        GELUFunction, acc.GELUCompiled, lambda: gelu(x), [x])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_g[0], want_g[0])


@pytest.mark.parametrize("kind", ["gelu", "silu"])
def test_gelu_and_silu_compiled_gradcheck_float64(kind):
    x = f64(5, 7, seed=24, scale=3.0)
    if kind == "gelu":
        with_kernel(GELUFunction, acc.GELUCompiled,
                    lambda: gradcheck(lambda t: gelu(t, approximate="tanh"), [x]))
    else:
        with_kernel(SiLUFunction, acc.SiLUCompiled, lambda: gradcheck(silu, [x]))


def test_swiglu_rows_is_silu_times_up():
    gate, up = f32(3000, seed=25, scale=4.0), f32(3000, seed=26)
    out = np.empty_like(gate)
    acc.swiglu_rows(gate, up, out, acc.chunks(gate.size))
    tg, tu = torch.tensor(gate), torch.tensor(up)
    np.testing.assert_allclose(out, (torch.nn.functional.silu(tg) * tu).numpy(), rtol=1e-5,
                               atol=1e-6)


# ---- attention ---------------------------------------------------------------------------------
def attention_run(q, k, v, compiled, **kw):
    ts = [Tensor(a, dtype=a.dtype, requires_grad=True) for a in (q, k, v)]
    fn = lambda: scaled_dot_product_attention(*ts, **kw)  # noqa: E731
    out = with_kernel(AttentionFunction, acc.AttentionCompiled, fn) if compiled else fn()
    out.backward(Tensor(f32(*out.shape, seed=7).astype(q.dtype), dtype=q.dtype))
    return out.data, [t.grad.data for t in ts]


def masks(B, T, S):
    padding = np.ones((B, 1, 1, S), dtype=bool)
    padding[-1, ..., S // 2:] = False
    per_batch = np.random.default_rng(27).random((B, 1, T, S)) > 0.3
    per_batch[0, 0, 1] = False  # a fully masked row
    return {"none": {}, "causal": {"is_causal": True}, "padding": {"mask": padding},
            "per-batch, a fully masked row": {"mask": per_batch}}


@pytest.mark.parametrize("name", list(masks(2, 6, 6)))
def test_attention_compiled_matches_module_12(name):
    q, k, v = f32(2, 3, 6, 4, seed=28), f32(2, 3, 6, 4, seed=29), f32(2, 3, 6, 5, seed=30)
    kw = masks(2, 6, 6)[name]
    o0, g0 = attention_run(q, k, v, False, **kw)
    o1, g1 = attention_run(q, k, v, True, **kw)
    np.testing.assert_allclose(o1, o0, atol=1e-6)
    for a, b in zip(g1, g0):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_attention_compiled_fully_masked_rows_are_zero():
    q, k, v = f32(1, 1, 4, 3, seed=31), f32(1, 1, 4, 3, seed=32), f32(1, 1, 4, 3, seed=33)
    mask = np.ones((4, 4), dtype=bool)
    mask[2] = False
    out, grads = attention_run(q, k, v, True, mask=mask)
    assert np.all(out[0, 0, 2] == 0) and np.all(grads[0][0, 0, 2] == 0)


def test_attention_compiled_with_grouped_keys_broadcast_over_heads():
    """k and v (B, 1, S, D) broadcast over q's heads: gradients summed back by backward."""
    q, k, v = f32(2, 4, 5, 3, seed=34), f32(2, 1, 5, 3, seed=35), f32(2, 1, 5, 3, seed=36)
    o0, g0 = attention_run(q, k, v, False, is_causal=True)
    o1, g1 = attention_run(q, k, v, True, is_causal=True)
    np.testing.assert_allclose(o1, o0, atol=1e-6)
    for a, b in zip(g1, g0):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("scale", [30.0, 1e3])
def test_attention_compiled_huge_scores_do_not_overflow(scale):
    """Scores of several hundred: the max is subtracted first, as in module 12."""
    q, k, v = f32(1, 2, 6, 4, seed=37, scale=scale), f32(1, 2, 6, 4, seed=38), f32(1, 2, 6, 4,
                                                                                    seed=39)
    with np.errstate(over="raise", invalid="raise"):
        o1, g1 = attention_run(q, k, v, True, is_causal=True)
        o0, g0 = attention_run(q, k, v, False, is_causal=True)
    assert np.isfinite(o1).all()
    np.testing.assert_allclose(o1, o0, rtol=1e-5, atol=1e-5)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3 * scale)


def test_attention_compiled_with_dropout_is_part_7s():
    q, k, v = f32(1, 2, 6, 4, seed=40), f32(1, 2, 6, 4, seed=41), f32(1, 2, 6, 4, seed=42)
    drop = ((np.random.default_rng(43).random((1, 2, 6, 6)) > 0.3) / 0.7).astype(np.float32)
    keep = np.tril(np.ones((6, 6), dtype=bool))
    results = []
    for fn in (AttentionFunction, acc.AttentionCompiled):
        ts = [Tensor(a, requires_grad=True) for a in (q, k, v)]
        out = fn.apply(*ts, keep=keep, drop=drop)
        out.sum().backward()
        results.append((out.data, [t.grad.data for t in ts]))
    (o0, g0), (o1, g1) = results
    np.testing.assert_allclose(o1, o0, atol=1e-6)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_attention_compiled_against_pytorch():
    q, k, v = f32(2, 2, 7, 4, seed=44), f32(2, 2, 7, 4, seed=45), f32(2, 2, 7, 4, seed=46)
    out, grads = attention_run(q, k, v, True, is_causal=True)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ref.backward(torch.tensor(f32(*ref.shape, seed=7)))
    np.testing.assert_allclose(out, ref.detach().numpy(), atol=1e-5)
    for ours, theirs in zip(grads, (tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


@pytest.mark.parametrize("kw", [{"is_causal": True}, {"mask": "padding"}])
def test_attention_compiled_gradcheck_float64(kw):
    if kw.get("mask") == "padding":
        mask = np.ones((1, 1, 1, 5), dtype=bool)
        mask[..., 3:] = False
        kw = {"mask": mask}
    q, k, v = f64(1, 2, 5, 3, seed=47), f64(1, 2, 5, 3, seed=48), f64(1, 2, 5, 3, seed=49)
    with_kernel(AttentionFunction, acc.AttentionCompiled, lambda: gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, **kw), [q, k, v]))


# ---- cross-entropy -----------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_compiled_matches_module_04_and_pytorch(reduction):
    target = np.random.default_rng(50).integers(0, 13, 30)
    target[[3, 17]] = -100
    logits = Tensor(f32(30, 13, seed=51, scale=4.0), requires_grad=True)
    fn = lambda: cross_entropy(logits, target, reduction=reduction)  # noqa: E731
    (want, want_g), (got, got_g) = plain_and_compiled(CrossEntropyFunction,
                                                      acc.CrossEntropyCompiled, fn, [logits])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_g[0], want_g[0], rtol=1e-5, atol=1e-7)
    assert np.all(got_g[0][[3, 17]] == 0)
    tl = torch.tensor(logits.data, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(tl, torch.tensor(target), reduction=reduction)
    np.testing.assert_allclose(got, ref.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_cross_entropy_compiled_all_ignored_is_nan_as_module_04():
    logits = Tensor(f32(4, 5, seed=52), requires_grad=True)
    target = np.full(4, -100)
    got = with_kernel(CrossEntropyFunction, acc.CrossEntropyCompiled,
                      lambda: cross_entropy(logits, target))
    assert np.isnan(got.item()) and np.isnan(cross_entropy(logits, target).item())


def test_cross_entropy_compiled_bad_targets_are_module_04s_errors_not_a_crash():
    """The kernel does not check indices; the op hands anything odd to module 04 first."""
    logits = Tensor(f32(4, 5, seed=53), requires_grad=True)
    for target, error in ((np.array([0, 5, 1, 2]), ValueError), (np.array([0, -3, 1, 2]),
                                                                    ValueError)):
        with pytest.raises(error, match="outside the valid class range"):
            with_kernel(CrossEntropyFunction, acc.CrossEntropyCompiled,
                        lambda t=target: cross_entropy(logits, t))


def test_cross_entropy_compiled_gradcheck_float64():
    target = np.array([0, 3, -100, 1, 2, 2])
    with_kernel(CrossEntropyFunction, acc.CrossEntropyCompiled, lambda: gradcheck(
        lambda z: cross_entropy(z, target), [f64(6, 4, seed=54, scale=2.0)]))


# ---- AdamW -------------------------------------------------------------------------------------
def train(cls, params, steps=5, **kw):
    groups = [{"params": params[:2]}, {"params": params[2:], "weight_decay": 0.0, "lr": 3e-3}]
    opt = cls(groups, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, **kw)
    for step in range(steps):
        for i, p in enumerate(params):
            p.grad = Tensor(f32(*p.shape, seed=100 + 10 * step + i).astype(p.dtype),
                            dtype=p.dtype)
        if step == 2:
            params[1].grad = None  # a parameter without a gradient this step: left alone
        opt.step()
    return opt


def make_params(dtype=np.float32):
    shapes = [(70, 40), (40,), (100_000,), (3, 5)]
    return [Parameter(f32(*s, seed=60 + i).astype(dtype), dtype=dtype)
            for i, s in enumerate(shapes)]


def test_compiled_adamw_is_adamw_to_the_bit():
    """Groups with their own lr and weight decay, a skipped parameter, several work items."""
    a, b = make_params(), make_params()
    plain, compiled = train(AdamW, a), train(acc.CompiledAdamW, b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.data, y.data)
    theirs, ours = plain.state_dict(), compiled.state_dict()
    assert sorted(theirs) == sorted(ours)
    for key in theirs:
        np.testing.assert_array_equal(np.asarray(theirs[key]), np.asarray(ours[key]), key)


def test_compiled_adamw_resumes_adamw_state_and_takes_a_transposed_gradient():
    a, b = make_params(), make_params()
    plain = train(AdamW, a, steps=2)
    for p, q in zip(a, b):
        q.data[...] = p.data
    compiled = acc.CompiledAdamW([{"params": b[:2]}, {"params": b[2:], "weight_decay": 0.0,
                                                      "lr": 3e-3}],
                                 lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    compiled.load_state_dict(plain.state_dict())
    for p, q in zip(a, b):
        g = f32(*p.shape[::-1], seed=70).T if p.ndim == 2 else f32(*p.shape, seed=70)
        p.grad, q.grad = Tensor(np.ascontiguousarray(g)), Tensor(g)  # q's is F-ordered
    plain.step()
    compiled.step()
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.data, q.data)


def test_compiled_adamw_float64_parameters_take_part_8s_path():
    a, b = make_params(np.float64), make_params(np.float64)
    train(AdamW, a)
    train(acc.CompiledAdamW, b)
    for x, y in zip(a, b):
        assert y.dtype == np.float64
        np.testing.assert_array_equal(x.data, y.data)


# ---- quantized weights -------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 2, 8, 9, 33])
@pytest.mark.parametrize("fmt", ["int8", "int4/32", "int4/64", "int4/128"])
def test_quantized_matmul_compiled_matches_module_15(rows, fmt):
    w = f32(37, 256, seed=80)
    if fmt == "int8":
        qw, scale = quantize_int8(w, axis=0)[:2]
        bits, group = 8, None
    else:
        group = int(fmt.split("/")[1])
        (qw, scale), bits = quantize_int4(w, group), 4
    x = Tensor(f32(rows, 256, seed=81))
    fn = lambda: QuantizedMatMul.apply(x, qweight=qw, scale=scale, bits=bits,  # noqa: E731
                                       group_size=group)
    want = fn().data
    got = with_kernel(QuantizedMatMul, acc.QuantizedMatMulCompiled, fn).data
    assert got.dtype == np.float32 and got.shape == (rows, 37)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n_out, parts", [(1, 1), (3, 1), (4, 1), (23, 1), (45, 2), (2, 4),
                                          (64, 3)])
@pytest.mark.parametrize("group", [16, 64])
def test_int4_kernel_every_row_of_every_piece_against_float64(n_out, parts, group):
    """int4_matmul_rows called directly, pieces and rows left over after the four blocks
    included: every output written (out starts as NaN) and equal to x @ deq(W).T in float64."""
    from tinytorch.perf.quantization import dequantize_int4

    packed, scales = quantize_int4(f32(n_out, 128, seed=105), group)
    x = f32(3, 128, seed=106)
    out = np.full((3, n_out), np.nan, np.float32)
    sums = x.reshape(3, 128 // group, group).sum(axis=2)
    acc.int4_matmul_rows(np.ascontiguousarray(x[:, 0::2]), np.ascontiguousarray(x[:, 1::2]),
                         sums, packed, scales, out, parts)
    want = x.astype(np.float64) @ dequantize_int4(packed, scales, group).astype(np.float64).T
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_quantized_matmul_compiled_takes_batches_and_float64_and_differentiates():
    w = f32(24, 64, seed=82)
    qw, scale = quantize_int8(w, axis=0)[:2]
    x = Tensor(f32(2, 3, 64, seed=83), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(
        QuantizedMatMul, acc.QuantizedMatMulCompiled,
        lambda: QuantizedMatMul.apply(x, qweight=qw, scale=scale, bits=8, group_size=None), [x])
    assert got.shape == (2, 3, 24)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got_g[0], want_g[0], rtol=1e-5, atol=1e-4)
    packed, scales = quantize_int4(w, 16)
    with_kernel(QuantizedMatMul, acc.QuantizedMatMulCompiled, lambda: gradcheck(
        lambda t: QuantizedMatMul.apply(t, qweight=packed, scale=scales, bits=4, group_size=16),
        [f64(3, 64, seed=84)]))


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_matmul_compiled_never_builds_the_float32_weight(bits):
    import tracemalloc

    w = f32(1024, 1024, seed=85)
    qw, scale = quantize_int8(w, axis=0)[:2] if bits == 8 else quantize_int4(w, 64)
    group = None if bits == 8 else 64
    for rows in (1, 64):  # the integer kernel, then tiles of dequantized rows and BLAS
        x = Tensor(f32(rows, 1024, seed=86))

        def run():
            return with_kernel(QuantizedMatMul, acc.QuantizedMatMulCompiled,
                               lambda: QuantizedMatMul.apply(x, qweight=qw, scale=scale,
                                                             bits=bits, group_size=group))
        run()
        tracemalloc.start()
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # 1 row: the output only; 64 rows: the output (256 KiB) and one tile (256 KiB)
        assert peak < w.nbytes / (50 if rows == 1 else 6), (bits, rows, peak)


def test_quantized_gpt_with_compiled_kernels_gives_the_plain_logits():
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=4, n_embd=64))
    quantize_model(model, bits=4, group_size=32)
    idx = np.random.default_rng(87).integers(0, 40, (1, 9))
    want = model(idx)[0].data
    with acc.fast_kernels() as names:
        got = model(idx)[0].data
        one = model(idx[:, :1])[0].data  # one token: the integer kernels
    assert "quantized_matmul_compiled" in names
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(one[0, 0], want[0, 0], rtol=1e-4, atol=1e-4)
    layer = QuantizedLinear.from_linear(Linear(64, 32), bits=8)
    assert layer.dequantized_weight().shape == (32, 64)  # module 15's API is unchanged


# ---- float32 rows through the int8 kernel -------------------------------------------------------
def run_kernel_used(fn):
    """fn() with MatMulRowsCompiled in the table; also whether its compiled path ran."""
    calls = []
    kernel = acc.int8_matmul_rows

    def counting(*args):
        calls.append(args[1].dtype)
        return kernel(*args)

    acc.int8_matmul_rows = counting
    try:
        return with_kernel(MatMul, acc.MatMulRowsCompiled, fn), calls
    finally:
        acc.int8_matmul_rows = kernel


@pytest.mark.parametrize("shape", [(1, 96), (3, 96), (8, 96), (2, 4, 96), (1, 1, 96)])
@pytest.mark.parametrize("n_out", [1, 5, 67])
def test_matmul_rows_compiled_is_x_at_w_transposed_against_float64(shape, n_out):
    w = Tensor(f32(n_out, 96, seed=95))  # (out, in), as a Linear stores it
    x = Tensor(f32(*shape, seed=96))
    got, calls = run_kernel_used(lambda: x @ w.T)
    want = x.data.astype(np.float64) @ w.data.astype(np.float64).T
    assert calls == [np.float32], "a few float32 rows times W.T: the compiled kernel"
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["9 rows", "float64", "b not a transposed weight", "1-D x"])
def test_matmul_rows_compiled_leaves_other_products_to_blas(case):
    w, x = f32(7, 16, seed=97), f32(2, 16, seed=98)
    a, b = {"9 rows": (f32(9, 16, seed=99), w.T), "float64": (x.astype(np.float64), w.T),
            "b not a transposed weight": (x, np.ascontiguousarray(w.T)),
            "1-D x": (x[0], w.T)}[case]
    got, calls = run_kernel_used(lambda: Tensor(a, dtype=a.dtype) @ Tensor(b, dtype=b.dtype))
    assert calls == []
    np.testing.assert_allclose(got.data, a @ b, rtol=1e-6, atol=1e-6)


def test_matmul_rows_compiled_keeps_matmuls_shape_error():
    x, w = Tensor(f32(1, 16, seed=100)), Tensor(f32(7, 15, seed=101))
    with pytest.raises(ValueError, match=r"\(1, 16\) and \(15, 7\)"):
        with_kernel(MatMul, acc.MatMulRowsCompiled, lambda: x @ w.T)


def test_matmul_rows_compiled_differentiates_as_module_06():
    w = Tensor(f32(11, 32, seed=102), requires_grad=True)
    x = Tensor(f32(2, 3, 32, seed=103), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(MatMul, acc.MatMulRowsCompiled,
                                                      lambda: x @ w.T, [x, w])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for g, h in zip(got_g, want_g):
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-5)


def test_linear_decoding_one_token_runs_the_kernel_inside_fast_kernels():
    manual_seed(0)
    layer = Linear(64, 48)
    x = Tensor(f32(1, 1, 64, seed=104))
    want = layer(x).data
    calls, kernel = [], acc.int8_matmul_rows
    acc.int8_matmul_rows = lambda *args: calls.append(args[1].dtype) or kernel(*args)
    try:
        with acc.fast_kernels() as names:  # what ModelFeatures(kernels="fast") switches on
            got = layer(x)
    finally:
        acc.int8_matmul_rows = kernel
    assert "matmul_rows_compiled" in names and calls == [np.float32]
    np.testing.assert_allclose(got.data, want, rtol=1e-5, atol=1e-5)


# ---- rotary ------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokens", [9, 1])
def test_rotary_compiled_matches_module_11_and_gradcheck(tokens):
    rope = RotaryEmbedding(8, max_len=32)
    cos, sin = rope.cos_sin(tokens, offset=5)
    x = Tensor(f32(2, 3, tokens, 8, seed=88), requires_grad=True)
    (want, want_g), (got, got_g) = plain_and_compiled(
        RotaryFunction, acc.RotaryCompiled, lambda: apply_rotary(x, cos, sin), [x])
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got_g[0], want_g[0], atol=1e-6)
    x64 = f64(1, 2, tokens, 8, seed=89)
    with_kernel(RotaryFunction, acc.RotaryCompiled, lambda: gradcheck(
        lambda t: apply_rotary(t, cos.astype(np.float64), sin.astype(np.float64)), [x64]))


def test_rotary_compiled_with_unequal_halves_and_one_dimensional_tables():
    """Tables whose halves differ (not [f | f]) and 1-D tables (module 11's path)."""
    rng = np.random.default_rng(90)
    cos, sin = rng.random((4, 6)).astype(np.float32), rng.random((4, 6)).astype(np.float32)
    x = Tensor(f32(3, 4, 6, seed=91), requires_grad=True)
    for c, s in ((cos, sin), (cos[0], sin[0])):
        (want, want_g), (got, got_g) = plain_and_compiled(
            RotaryFunction, acc.RotaryCompiled, lambda c=c, s=s: apply_rotary(x, c, s), [x])
        np.testing.assert_allclose(got, want, atol=1e-6)
        np.testing.assert_allclose(got_g[0], want_g[0], atol=1e-6)
