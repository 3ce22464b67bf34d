"""One GPT training step, TinyTorch against PyTorch CPU eager, side by side in one run.

Three contestants, unless told otherwise: TinyTorch with module 17 (acceleration: its
compiled kernels switched on through the kernel tables, CompiledAdamW, glibc keeping freed
memory), the plain TinyTorch of modules 01-13 (no module 17: the lessons' own code, glibc's
default malloc), and PyTorch eager. `--plain` leaves the accelerated one out; without module
17 in the package it is left out and the script says so. `--numpy-kernels` adds a fourth:
module 17 with its NumPy kernels only (`use_fast_kernels(True, compiled=False)`, FusedAdamW),
to show what compiling adds.

Module 17's kernels are compiled by numba on their first call and kept on disk (numba's
cache, in `tinytorch/perf/__pycache__`), so only a fresh checkout compiles. Each process's
first step (compiling, or loading the cached machine code) is timed apart and printed; it is
never part of the step times. `--cold` gives the accelerated process an empty cache folder
of its own (NUMBA_CACHE_DIR), so its first step shows the full compile time.

Both frameworks train the SAME model (the `tinygpt` milestone's configuration by default:
nanoGPT's CPU run, 4 layers, 4 heads, 128 wide, context 64, batch 12), starting from the
SAME weights (copied from TinyTorch into PyTorch), on the SAME batches of Tiny Shakespeare,
with the same step: forward, cross-entropy, backward, clip the gradient norm to 1.0, AdamW
(betas 0.9/0.99, weight decay 0.1 on matrices only, as nanoGPT).

Timing: each framework trains in its own fresh process, and the processes alternate
(TinyTorch, PyTorch, PyTorch, TinyTorch, ... for --rounds rounds), so a noisy neighbour on
a shared machine slows both alike. Separate processes matter: OpenBLAS's and PyTorch's
thread pools keep spinning for a while after each call, and in one process they steal the
cores from each other (PyTorch's forward measured 2x slower right after a TinyTorch step).
The script prints the median time per step of each framework over all its rounds, split
into forward, backward and optimizer, and the ratio, overall and per round.

Memory: each training process reports its peak resident memory (VmHWM) above its resident
memory after building the model, i.e. the activations kept for backward, gradients,
optimizer state and temporaries of training. PyTorch's allocations are invisible
to tracemalloc, so RSS is the common measure; for TinyTorch the tracemalloc peak (NumPy
arrays only) is printed too.

    .venv/bin/python benchmarks/gpt_step.py            # 3 rounds x 30 steps each
    .venv/bin/python benchmarks/gpt_step.py --quick    # 1 round of 3 steps, smoke test
    .venv/bin/python benchmarks/gpt_step.py --threads 1 --clock cpu   # steadier when loaded
    .venv/bin/python benchmarks/gpt_step.py --plain    # plain TinyTorch against PyTorch only
    .venv/bin/python benchmarks/gpt_step.py --cold     # and the kernels' compile time from scratch
    .venv/bin/python benchmarks/gpt_step.py --breakdown  # and where each ms goes, both sides
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import _common
from _common import (
    check_float32,
    child_env,
    parse_step_arguments,
    report,
    set_threads,
    step_arguments,
    summary,
)
from tito.course.packages import acceleration  # imports no NumPy: thread settings first


def parse_args(argv=None):
    p = step_arguments(
        __doc__.splitlines()[0], steps=30, rounds=3, warmup=5, quick=(3, 1),
        malloc_help="keep: glibc keeps freed memory for reuse, in the PyTorch process and "
                    "the accelerated TinyTorch one (module 17's keep_freed_memory; the plain "
                    "TinyTorch never has it); default: glibc's own settings for all")
    p.add_argument("--plain", action="store_true",
                   help="leave out TinyTorch with module 17: plain TinyTorch against PyTorch")
    p.add_argument("--numpy-kernels", action="store_true",
                   help="add module 17 with its NumPy kernels only (no compiled ones)")
    p.add_argument("--cold", action="store_true",
                   help="compile module 17's kernels from scratch (an empty numba cache)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--profile", action="store_true",
                   help="then cProfile TinyTorch's steps in this process: where the time goes")
    p.add_argument("--breakdown", action="store_true",
                   help="then one more process per framework with every operation timed: "
                        "where each millisecond goes, TinyTorch's against PyTorch's")
    p.add_argument("--child", choices=("tinytorch", "numpy17", "plain", "torch"),
                   help=argparse.SUPPRESS)
    p.add_argument("--child-breakdown", action="store_true", help=argparse.SUPPRESS)
    return parse_step_arguments(p, argv)


clock = time.perf_counter


def setup_process(args):
    """Threads, malloc behaviour and clock, the same for both frameworks. Call before numpy.

    glibc's malloc settings are module 17's `keep_freed_memory()`: the PyTorch process and the
    accelerated TinyTorch one get it (with --malloc keep), the plain TinyTorch never does.
    """
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    set_threads(args.threads)
    if args.malloc == "keep" and args.child in ("tinytorch", "numpy17", "torch"):
        accel = acceleration()  # imported after the thread settings above
        if accel is None:
            raise SystemExit("--malloc keep needs module 17 (tinytorch.perf.acceleration)")
        accel.keep_freed_memory()


# ---- data ------------------------------------------------------------------------------
def batches(n, batch_size, block_size, seed=0):
    """n (x, y) batches of random windows of Tiny Shakespeare (character ids), int64 arrays."""
    import numpy as np

    from tito.course.datasets import char_ids, load_text

    data, chars = char_ids(load_text())
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        window = data[ix[:, None] + np.arange(block_size + 1)]  # (B, T + 1)
        out.append((window[:, :-1], window[:, 1:]))
    return out, len(chars)


# ---- TinyTorch -------------------------------------------------------------------------
def tinytorch_setup(config_kwargs, seed=0, fast=False, compiled=True):
    """TinyTorch's model and training step; fast: with module 17 (kernels on, CompiledAdamW;
    compiled=False: its NumPy kernels and FusedAdamW).

    Returns (model, step, kernels), kernels the names of the fast kernels switched on.
    """
    import numpy as np

    from tinytorch.core.optimizers import AdamW, clip_grad_norm_
    from tinytorch.core.tensor import manual_seed
    from tinytorch.models.transformer import GPT, GPTConfig

    accel = acceleration() if fast else None
    if fast and accel is None:
        raise RuntimeError("fast=True needs module 17 (tinytorch.perf.acceleration)")
    manual_seed(seed)
    model = GPT(GPTConfig(**config_kwargs))
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.1}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    optimizer_class = AdamW
    if accel:
        optimizer_class = accel.CompiledAdamW if compiled else accel.FusedAdamW
    optimizers = [optimizer_class(groups, lr=1e-3, betas=(0.9, 0.99))]
    kernels = accel.use_fast_kernels(True, compiled=compiled) if accel else accel_off()
    for p in model.parameters():
        assert p.dtype == np.float32, f"a TinyTorch parameter is {p.dtype}"

    def step(x, y, times=None, around=contextlib.nullcontext):
        with around():  # --breakdown: timers on every operation of these two phases
            t0 = clock()
            _, loss = model(x, y)
            t1 = clock()
            for opt in optimizers:
                opt.zero_grad()
            loss.backward()
            t2 = clock()
        t2_out = clock()  # after `around` closes: its teardown is in no phase
        clip_grad_norm_(model.parameters(), 1.0)
        for opt in optimizers:
            opt.step()
        t3 = clock()
        if times is not None:
            times.append((t1 - t0, t2 - t1, t3 - t2_out))
        else:  # untimed steps: check that nothing drifted to float64
            check_float32(loss, model)
        return loss.item()

    return model, step, kernels


def accel_off():
    """Switch module 17's kernels off if it is there (a plain run in a process that has it)."""
    accel = acceleration()
    return accel.use_fast_kernels(False) if accel else ()


# ---- PyTorch ---------------------------------------------------------------------------
def torch_setup(config_kwargs, weights, threads=None):
    """PyTorch's model (the one twin in torch_reference, fused SDPA attention) and training
    step; `weights` by name, or None for nanoGPT's own initialization."""
    import torch

    from torch_reference import TorchGPT, init_like_nanogpt_

    if threads:
        torch.set_num_threads(threads)
    model = TorchGPT(config_kwargs, attention="sdpa")
    if weights is None:  # from PyTorch's global generator, as nanoGPT
        init_like_nanogpt_(model)
    else:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.from_numpy(weights[name]))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))

    def step(x, y, times=None, lr=None, around=contextlib.nullcontext):
        if lr is not None:  # a schedule's value for this step (tinygpt_loss.py)
            for group in opt.param_groups:
                group["lr"] = lr
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        with around():  # --breakdown: torch.profiler over these two phases
            t0 = clock()
            _, loss = model(xt, yt)
            t1 = clock()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t2 = clock()
        t2_out = clock()  # after `around` closes: its teardown is in no phase
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = clock()
        if times is not None:
            times.append((t1 - t0, t2 - t1, t3 - t2_out))
        return loss.item()

    return model, step


# ---- one framework per subprocess ----------------------------------------------------------
def _proc_status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def setup_of(args, config, seed=0):
    """(model, step, kernels) of the child's framework for `config`."""
    if args.child in ("tinytorch", "numpy17", "plain"):
        return tinytorch_setup(config, seed=seed, fast=args.child != "plain",
                               compiled=args.child == "tinytorch")
    import torch  # noqa: F401

    tt_model, _, _ = tinytorch_setup(config, seed=seed)
    weights = {name: p.data for name, p in tt_model.named_parameters(remove_duplicate=False)}
    model, step = torch_setup(config, weights, args.threads)
    return model, step, ()


def first_step(args, vocab):
    """Seconds of one step of a tiny model with the real one's layers (same parameter count
    and kinds): module 17's kernels compile here, or load from numba's cache, and every
    framework makes its one-time allocations, before the memory and time measurements."""
    import numpy as np

    tiny = dict(config_of(args), n_embd=2 * args.n_head, block_size=4, vocab_size=vocab)
    ids = np.random.default_rng(1).integers(0, vocab, (2, 5))
    _, step, _ = setup_of(args, tiny, seed=1)
    started = time.perf_counter()
    step(ids[:, :-1], ids[:, 1:])
    return time.perf_counter() - started


def child(args):
    """Train one framework: warm-up, then timed steps; report times, losses and memory."""
    config = config_of(args)
    data, vocab = batches(args.warmup + args.steps, args.batch_size, args.block_size)
    config["vocab_size"] = vocab
    first = first_step(args, vocab)
    model, step, kernels = setup_of(args, config)
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak (VmHWM) to the current RSS
    except OSError:
        pass
    if args.child_breakdown:  # the phases on the wall clock, as the operations' timers
        import _breakdown

        global clock
        clock = time.perf_counter

        warm, timed = data[:args.warmup], data[args.warmup:]
        for x, y in warm:
            step(x, y)
        breakdown = (_breakdown.torch_breakdown if args.child == "torch"
                     else _breakdown.tinytorch_breakdown)
        rows, times = breakdown(step, timed)
        report({"rows": rows, "times": times, "kernels": list(kernels)})
        return
    base = _proc_status("VmRSS")
    times = []
    for i, (x, y) in enumerate(data):
        loss = step(x, y, times if i >= args.warmup else None)
    result = {"times": times, "loss": loss, "rss_base": base, "rss_peak": _proc_status("VmHWM"),
              "kernels": list(kernels), "first_step_s": first}
    if args.child in ("tinytorch", "numpy17", "plain"):
        import tracemalloc

        tracemalloc.start()
        step(*data[-1])
        result["tracemalloc_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    report(result)


def run_child(args, framework, breakdown=False):
    options = ["--steps", args.steps, "--warmup", args.warmup, "--malloc", args.malloc,
               "--clock", args.clock, "--n-layer", args.n_layer, "--n-head", args.n_head,
               "--n-embd", args.n_embd, "--block-size", args.block_size,
               "--batch-size", args.batch_size] + (["--threads", args.threads] if args.threads
                                                   else [])
    if breakdown:
        options.append("--child-breakdown")
    if args.cold and framework == "tinytorch":
        import tempfile

        with tempfile.TemporaryDirectory() as cache:  # numba compiles every kernel afresh
            return _common.run_child(__file__, framework, options,
                                     child_env(NUMBA_CACHE_DIR=cache))
    return _common.run_child(__file__, framework, options)


# ---- the comparison --------------------------------------------------------------------
def config_of(args):
    return dict(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                n_embd=args.n_embd)


def compare(runs, name):
    """Module 19's Comparison of every timed step of `name` against PyTorch's (all rounds)."""
    from tinytorch.perf.benchmarking import Comparison

    steps = {k: [sum(t) for run in runs[k] for t in run["times"]] for k in (name, "torch")}
    return Comparison.from_samples(steps["torch"], steps[name], names=("pytorch", LABELS[name]))


def agreement_check(args):
    """One step of each framework from the same weights on the same batch: equal losses."""
    import numpy as np

    config = config_of(args)
    data, vocab = batches(1, args.batch_size, args.block_size)
    config["vocab_size"] = vocab
    tt_model, tt_step, _ = tinytorch_setup(config)
    weights = {name: p.data.copy() for name, p in tt_model.named_parameters(remove_duplicate=False)}
    _, pt_step = torch_setup(config, weights, args.threads)
    first_plain, first_pt = tt_step(*data[0]), pt_step(*data[0])
    first_fast = None
    if not args.plain and acceleration() is not None:
        _, fast_step, _ = tinytorch_setup(config, fast=True)
        first_fast = fast_step(*data[0])
        accel_off()
    return tt_model.num_parameters(), vocab, first_plain, first_fast, first_pt, np.__version__


def profile_tinytorch(args):
    import cProfile
    import pstats

    config = config_of(args)
    data, vocab = batches(args.warmup + args.steps, args.batch_size, args.block_size)
    config["vocab_size"] = vocab
    _, step, kernels = tinytorch_setup(config, fast=not args.plain and acceleration() is not None)
    for x, y in data[:args.warmup]:
        step(x, y)
    profiler = cProfile.Profile()
    profiler.enable()
    for x, y in data[args.warmup:]:
        step(x, y, [])
    profiler.disable()
    which = f"with module 17 ({', '.join(kernels)})" if kernels else "plain"
    print(f"\nTinyTorch profile, {which}, of {args.steps} steps (top 25 by own time):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def print_breakdown(args, main_tt, timed_ms):
    """Run one instrumented process per framework (_breakdown.py) and print where each
    millisecond of a step goes, side by side; returns {framework: {row: ms}}."""
    import _breakdown

    runs = {name: run_child(args, name, breakdown=True) for name in (main_tt, "torch")}
    rows = {name: run["rows"] for name, run in runs.items()}
    steps = {name: len(run["times"]) for name, run in runs.items()}
    print(f"\nwhere the milliseconds go: mean ms a step over {steps[main_tt]} steps (wall "
          "clock), one process per framework with every operation timed (TinyTorch: each "
          "forward and derivative rule; PyTorch: torch.profiler's self time of each ATen "
          "operation)")
    name_tt = LABELS[main_tt]
    print(f"{'':52s}{name_tt:>14s}{'pytorch':>10s}{'difference':>12s}")
    for row in _breakdown.ROWS:
        a, b = rows[main_tt][row], rows["torch"][row]
        print(f"{row:52s}{a:14.1f}{b:10.1f}{a - b:+12.1f}")
    total = {name: sum(r.values()) for name, r in rows.items()}
    print(f"{'step, with the timers on':52s}{total[main_tt]:14.1f}{total['torch']:10.1f}"
          f"{total[main_tt] - total['torch']:+12.1f}")
    print(f"{'step in the timed rounds above (median)':52s}{timed_ms[main_tt]:14.1f}"
          f"{timed_ms['torch']:10.1f}{timed_ms[main_tt] - timed_ms['torch']:+12.1f}")
    return rows


LABELS = {"tinytorch": "tinytorch+17", "numpy17": "+17 numpy", "plain": "tinytorch",
          "torch": "pytorch"}
TARGET = 0.80  # issue 22: module 17's step at most 0.80x PyTorch eager's


def main(argv=None):
    args = parse_args(argv)
    setup_process(args)
    if args.child:
        child(args)
        return 0
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    n_params, vocab, first_plain, first_fast, first_pt, np_version = agreement_check(args)
    fast = first_fast is not None
    tokens = args.batch_size * args.block_size
    print(f"GPT: {args.n_layer} layers, {args.n_head} heads, {args.n_embd} wide, context "
          f"{args.block_size}, batch {args.batch_size}, vocab {vocab}: {n_params:,} parameters "
          f"({tokens} tokens per step)")
    print(f"threads: {args.threads or 'library default (all cores)'}; malloc: {args.malloc} "
          f"(pytorch{' and tinytorch+17' if fast else ''}; plain tinytorch: glibc default); "
          f"clock: {args.clock}; numpy {np_version}, torch {torch.__version__}; "
          f"CPU: {_common.cpu_description()}")
    if not fast:
        print("module 17 (acceleration): " + ("left out (--plain)" if args.plain else
              "not in this package: only the plain framework runs (tito module complete 17)"))
    first_tt = first_fast if fast else first_plain
    print(f"first-step loss: tinytorch {first_tt:.6f}, torch {first_pt:.6f} "
          f"(same weights, same batch: must agree)"
          + (f"; plain tinytorch {first_plain:.6f}" if fast else ""))
    if abs(first_tt - first_pt) > 1e-4 or abs(first_plain - first_pt) > 1e-4:
        print("[error] the models disagree: the comparison is not like for like")
        return 1

    order = ("tinytorch", "plain", "torch") if fast else ("plain", "torch")
    if fast and args.numpy_kernels:
        order = ("tinytorch", "numpy17", "plain", "torch")
    runs = {name: [] for name in order}
    for r in range(args.rounds):
        turn = order[r % len(order):] + order[:r % len(order)]  # rotate who goes first
        for framework in (turn if r % 2 == 0 else turn[::-1]):
            runs[framework].append(run_child(args, framework))
    if fast:
        print("module 17 kernels on in tinytorch+17: "
              + ", ".join(runs["tinytorch"][0]["kernels"]) + "; optimizer CompiledAdamW")
    print("first step of each process, on a tiny model with the same layers (not in the step "
          "times; for tinytorch+17 it compiles the kernels" +
          (" from scratch, --cold)" if args.cold else ", or loads them from numba's cache)")
          + ": "
          + "; ".join(f"{LABELS[name]} " + ", ".join(f"{run['first_step_s']:.2f}"
                                                      for run in runs[name]) + " s"
                      for name in order))
    print(f"\n{args.rounds} round(s) x {args.steps} timed steps per framework, after "
          f"{args.warmup} warm-up steps, each framework in its own process (medians, ms):")
    print(f"{'':14s}{'step':>9s}{'forward':>10s}{'backward':>10s}{'optimizer':>11s}"
          f"{'tokens/s':>10s}")
    results = {}
    for name in order:
        times = [t for run in runs[name] for t in run["times"]]
        ms, parts = summary(times)
        results[name] = ms
        print(f"{LABELS[name]:14s}{ms:9.1f}{parts[0]:10.1f}{parts[1]:10.1f}{parts[2]:11.1f}"
              f"{tokens / ms * 1e3:10,.0f}")
    ratios, per_round, intervals, verdicts = {}, {}, {}, {}
    for name in order[:-1]:
        comparison = compare(runs, name)
        ratios[name], intervals[name] = comparison.ratio, list(comparison.ci)
        verdicts[name] = comparison.verdict
        per_round[name] = [summary(a["times"])[0] / summary(b["times"])[0]
                           for a, b in zip(runs[name], runs["torch"])]
        target = f" (target <= {TARGET:.2f})" if name == "tinytorch" else ""
        low, high = comparison.ci
        print(f"ratio {LABELS[name]} / pytorch: {ratios[name]:.2f}x per step{target}, 95% "
              f"interval [{low:.2f}, {high:.2f}] over every step: {comparison.verdict}; "
              "per round: " + ", ".join(f"{r:.2f}x" for r in per_round[name]))
    if fast:
        gain = [summary(a["times"])[0] / summary(b["times"])[0]
                for a, b in zip(runs["plain"], runs["tinytorch"])]
        print(f"module 17 makes the step {results['plain'] / results['tinytorch']:.2f}x faster "
              "(per round: " + ", ".join(f"{g:.2f}x" for g in gain) + ")")
    main_tt = "tinytorch" if fast else "plain"
    print(f"loss after the last step: tinytorch {runs[main_tt][0]['loss']:.4f}, "
          f"pytorch {runs['torch'][0]['loss']:.4f}"
          + (f"; plain tinytorch {runs['plain'][0]['loss']:.4f}" if fast else ""))

    print("\npeak memory of training above the built model (VmHWM - VmRSS before step 1):")
    memory = {}
    for name in order:
        grown = max(run["rss_peak"] - run["rss_base"] for run in runs[name])
        base = runs[name][0]["rss_base"]
        memory[name] = grown
        extra = ""
        if "tracemalloc_peak" in runs[name][0]:
            peak = max(run["tracemalloc_peak"] for run in runs[name])
            extra = f"; tracemalloc peak of one step {peak / 2**20:.1f} MiB"
        print(f"  {LABELS[name]:13s} {grown / 2**20:6.1f} MiB (process base "
              f"{base / 2**20:.0f} MiB){extra}")
    print(f"  weights: {n_params * 4 / 2**20:.1f} MiB float32")
    if args.profile:
        profile_tinytorch(args)
    rows = print_breakdown(args, main_tt, results) if args.breakdown else None
    result = {"tinytorch_ms": results[main_tt], "torch_ms": results["torch"],
              "ratio": ratios[main_tt], "per_round": per_round[main_tt],
              "ci": intervals[main_tt], "verdict": verdicts[main_tt],
              "plain_ci": intervals["plain"], "plain_verdict": verdicts["plain"],
              "accelerated": fast, "plain_ms": results["plain"], "plain_ratio": ratios["plain"],
              "plain_per_round": per_round["plain"],
              "kernels": runs["tinytorch"][0]["kernels"] if fast else [],
              "first_step_s": {name: [run["first_step_s"] for run in runs[name]]
                               for name in order},
              "memory_bytes": {("tinytorch" if name == main_tt else name): memory[name]
                               for name in order},
              "breakdown": rows}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
