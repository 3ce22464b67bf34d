"""The one-stream int8 kernels that `int8_streams.py` times beside module 17's
`int8_matmul_rows` (which reads four rows from four far-apart blocks). Compiled with module
17's `compiled`, so the three differ only in the order they read the weights. Imported by
the benchmark's child process, after its thread settings."""

from numba import prange

from tinytorch.perf.acceleration import compiled


@compiled
def one_row(x, q, scale, out, parts):
    """One weight row after another: one stream of addresses per thread."""
    n_rows, n_k = x.shape
    n_out = q.shape[0]
    T = x.dtype.type
    for p in prange(parts):
        for o in range(p * n_out // parts, (p + 1) * n_out // parts):
            w = q[o]
            for r in range(n_rows):
                total = T(0)
                for k in range(n_k):
                    total += x[r, k] * T(w[k])
                out[r, o] = total * scale[o]


@compiled
def adjacent4(x, q, scale, out, parts):
    """Four neighbouring weight rows in one loop: x read once for four, one stream still."""
    n_rows, n_k = x.shape
    n_out = q.shape[0]
    T = x.dtype.type
    for p in prange(parts):
        lo, hi = p * n_out // parts, (p + 1) * n_out // parts
        last = lo + (hi - lo) // 4 * 4
        for o in range(lo, last, 4):
            for r in range(n_rows):
                t0 = t1 = t2 = t3 = T(0)
                for k in range(n_k):
                    t0 += x[r, k] * T(q[o, k])
                    t1 += x[r, k] * T(q[o + 1, k])
                    t2 += x[r, k] * T(q[o + 2, k])
                    t3 += x[r, k] * T(q[o + 3, k])
                out[r, o], out[r, o + 1] = t0 * scale[o], t1 * scale[o + 1]
                out[r, o + 2], out[r, o + 3] = t2 * scale[o + 2], t3 * scale[o + 3]
        for o in range(last, hi):
            for r in range(n_rows):
                total = T(0)
                for k in range(n_k):
                    total += x[r, k] * T(q[o, k])
                out[r, o] = total * scale[o]
