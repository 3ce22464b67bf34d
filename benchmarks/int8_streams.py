"""Module 17's int8 matrix-vector kernel: how many weight rows it reads at once.

One token through a model multiplies one row by every weight matrix; each weight is read
once, so the kernel's speed is the speed at which one core can pull bytes from memory. A
core keeps only a few reads in flight, and its prefetcher runs ahead of each stream of
addresses it recognizes. Three ways to walk the int8 weights, all compiled by numba with
module 17's `compiled` and all computing `out[r, o] = scale[o] * sum_k x[r, k] q[o, k]`:

- `one row`: one weight row after another (one stream per thread);
- `4 adjacent`: four neighbouring rows in one loop (one stream still, fewer passes over x);
- `4 blocks`: the package's `int8_matmul_rows`, four rows from four far-apart blocks of the
  thread's piece (four streams).

Each is timed, with float32 BLAS (`x @ W.T`) on the same shapes, on two workloads:
the LM head of a Qwen2.5-0.5B-sized model (151,936 x 896), and all the products of one
token of that model (24 layers of q, k, v, o, gate, up, down, then the head), whose 0.5 GB
of int8 weights are far larger than any cache. Each thread count runs in its own process.
The kernels' outputs are checked against each other before anything is timed.

    .venv/bin/python benchmarks/int8_streams.py                # 1 and 2 threads
    .venv/bin/python benchmarks/int8_streams.py --threads 2
    .venv/bin/python benchmarks/int8_streams.py --quick        # small shapes (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import child_env, report, run_child, set_threads  # noqa: E402

HIDDEN, INTER, KV, VOCAB, LAYERS = 896, 4864, 128, 151_936, 24
QUICK = dict(hidden=128, inter=512, kv=32, vocab=8192, layers=2)
KERNELS = ("one row", "4 adjacent", "4 blocks")


def token_shapes(hidden, inter, kv, vocab, layers):
    """(rows, columns) of every weight one token multiplies by, in the model's order."""
    layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden),
             (inter, hidden), (inter, hidden), (hidden, inter)]
    return layer * layers + [(vocab, hidden)]


def make_kernels():
    """The two one-stream kernels (benchmarks/_int8_kernels.py) and the package's four-block
    one; imported here, after the thread settings."""
    from _int8_kernels import adjacent4, one_row

    from tinytorch.perf.acceleration import int8_matmul_rows

    return dict(zip(KERNELS, (one_row, adjacent4, int8_matmul_rows)))


def child(sizes, repeat):
    """One thread count's process: every kernel and BLAS on both workloads."""
    import numba
    import numpy as np

    from tinytorch.perf.acceleration import chunks

    kernels = make_kernels()
    rng = np.random.default_rng(0)
    shapes = token_shapes(**sizes)
    weights = [(rng.integers(-127, 128, size=s, dtype=np.int8),
                rng.uniform(0.001, 0.01, s[0]).astype(np.float32)) for s in shapes]
    inputs = {s[1]: rng.standard_normal((1, s[1]), dtype=np.float32) for s in shapes}
    floats = [rng.standard_normal(s, dtype=np.float32) for s in shapes]

    def run_kernel(kernel, which):
        outs = []
        for q, scale in which:
            out = np.empty((1, q.shape[0]), np.float32)
            kernel(inputs[q.shape[1]], q, scale, out, chunks(q.shape[0], q.shape[1]))
            outs.append(out)
        return outs

    def run_blas(which):
        return [inputs[w.shape[1]] @ w.T for w in which]

    first = {name: run_kernel(k, weights) for name, k in kernels.items()}  # compiles, untimed
    for name in KERNELS[:2]:
        for a, b in zip(first[name], first["4 blocks"]):
            if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"{name} and the package's int8_matmul_rows disagree by "
                                 f"{np.abs(a - b).max():.3g}: the timings would mean nothing")

    def best_ms(fn):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e3

    result = {"threads": numba.get_num_threads(), "workloads": {}}
    for label, pick in (("LM head", slice(-1, None)), ("one token", slice(None))):
        row = {name: best_ms(lambda k=k: run_kernel(k, weights[pick]))
               for name, k in kernels.items()}
        row["float32 BLAS"] = best_ms(lambda: run_blas(floats[pick]))
        row["int8 bytes"] = sum(q.nbytes for q, _ in weights[pick])
        result["workloads"][label] = row
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="thread counts, one process each (default: 1 2)")
    p.add_argument("--repeat", type=int, default=7, help="timed passes; the best is kept")
    p.add_argument("--quick", action="store_true", help="a 2-layer model of width 128")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else dict(hidden=HIDDEN, inter=INTER, kv=KV, vocab=VOCAB,
                                          layers=LAYERS)
    if args.child:
        set_threads(int(args.child))  # before NumPy loads
        report(child(sizes, 3 if args.quick else args.repeat))
        return
    print(f"load average {os.getloadavg()[0]:.1f}; "
          + ("--quick: a 2-layer model of width 128" if args.quick else
             "Qwen2.5-0.5B-shaped weights, random int8"))
    runs = []
    for threads in args.threads:
        flags = ["--quick"] if args.quick else ["--repeat", args.repeat]
        got = run_child(Path(__file__), str(threads), flags, env=child_env())
        runs.append(got)
        for label, row in got["workloads"].items():
            print(f"\n{label}, {got['threads']} thread(s), {row['int8 bytes'] / 2**20:,.0f} MiB "
                  "of int8 weights (best of the passes):")
            for name in (*KERNELS, "float32 BLAS"):
                gbs = row["int8 bytes"] * (4 if name == "float32 BLAS" else 1) / row[name] / 1e6
                print(f"  {name:13} {row[name]:9.2f} ms  {gbs:6.1f} GB/s read  "
                      f"{row['one row'] / row[name]:5.2f}x one row  "
                      f"{row['float32 BLAS'] / row[name]:5.2f}x float32")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("RESULT " + json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
