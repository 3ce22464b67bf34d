"""One CNN training step, TinyTorch against PyTorch CPU eager, side by side in one run.

Both frameworks train the SAME model, the `cnn_digits` milestone's LeNet-style CNN (built
by the milestone's own `lenet(nn)`, in tito.course.architectures, from `tinytorch.nn` and from
`torch.nn`), starting from
the SAME weights (copied from TinyTorch into PyTorch), on the SAME batches of 64 8x8 digits
from the milestone's training split, with the same step: forward, cross-entropy, backward,
Adam (lr 2e-3). The milestone's dropout is set to 0 here: the two frameworks would draw
different masks, and the losses could no longer be compared step by step.

Timing: as in `gpt_step.py`, each framework trains in its own fresh process and the
processes alternate (TinyTorch, PyTorch, PyTorch, TinyTorch, ... for --rounds rounds), so
a noisy neighbour slows both alike and neither framework's spinning thread pool steals the
cores from the other. The statistics are module 19's harness (`tinytorch.perf.benchmarking`):
the median time per step of each framework over all its rounds, split into forward,
backward and optimizer, the ratio of the step medians with its 95% bootstrap interval
(over the steps, unpaired: each framework's steps come from its own processes) and the
harness's verdict, and the ratio per round.

    .venv/bin/python benchmarks/conv_step.py            # 4 rounds x 200 steps each
    .venv/bin/python benchmarks/conv_step.py --quick    # 1 round of 5 steps, smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import _common
from _common import (
    check_float32,
    parse_step_arguments,
    report,
    set_threads,
    step_arguments,
    summary,
)
from tito.course.architectures import lenet

BATCH = 64


def parse_args(argv=None):
    p = step_arguments(
        __doc__.splitlines()[0], steps=200, rounds=4, warmup=20, quick=(5, 2),
        malloc_help="keep: glibc keeps freed memory for reuse, for both frameworks (see "
                    "gpt_step.py); default: glibc's own settings")
    p.add_argument("--child", choices=("tinytorch", "torch"), help=argparse.SUPPRESS)
    return parse_step_arguments(p, argv)


clock = time.perf_counter


def setup_process(args):
    """Threads, malloc behaviour and clock, the same for both frameworks. Call before numpy."""
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    set_threads(args.threads)
    if args.malloc == "keep":
        from tinytorch.perf.acceleration import keep_freed_memory  # after the thread settings

        keep_freed_memory()


def batches(n, seed=0):
    """n (x, y) batches of 64 training digits, (64, 1, 8, 8) float32 and (64,) int64."""
    import numpy as np

    from tito.course.datasets import load_digits

    x_train, y_train, _, _ = load_digits(seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ix = rng.integers(0, len(x_train), size=BATCH)
        out.append((x_train[ix].reshape(BATCH, 1, 8, 8), y_train[ix]))
    return out


# ---- TinyTorch -------------------------------------------------------------------------
def tinytorch_setup(seed=0):
    import numpy as np

    from tinytorch import nn
    from tinytorch.core.tensor import Tensor, manual_seed
    from tinytorch.optim import Adam

    manual_seed(seed)
    model = lenet(nn, dropout=0.0)
    opt = Adam(model.parameters(), lr=2e-3)

    def step(x, y, times=None):
        t0 = clock()
        loss = nn.cross_entropy(model(Tensor(x)), Tensor(y, dtype=np.int64))
        t1 = clock()
        opt.zero_grad()
        loss.backward()
        t2 = clock()
        opt.step()
        t3 = clock()
        if times is not None:
            times.append((t1 - t0, t2 - t1, t3 - t2))
        else:  # untimed steps: check that nothing drifted to float64
            check_float32(loss, model)
        return loss.item()

    return model, step


# ---- PyTorch ---------------------------------------------------------------------------
def torch_setup(weights, threads=None):
    """The same CNN in PyTorch (the milestone's lenet(torch.nn)) from TinyTorch's weights."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    model = lenet(torch.nn, dropout=0.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = torch.nn.functional.cross_entropy

    def step(x, y, times=None):
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        t0 = clock()
        loss = loss_fn(model(xt), yt)
        t1 = clock()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = clock()
        opt.step()
        t3 = clock()
        if times is not None:
            times.append((t1 - t0, t2 - t1, t3 - t2))
        return loss.item()

    return model, step


def tinytorch_weights():
    model, _ = tinytorch_setup()
    return model, {name: p.data.copy() for name, p in model.named_parameters()}


# ---- one framework per subprocess ----------------------------------------------------------
def child(args):
    data = batches(args.warmup + args.steps)
    if args.child == "tinytorch":
        _, step = tinytorch_setup()
    else:
        _, weights = tinytorch_weights()
        _, step = torch_setup(weights, args.threads)
    times = []
    for i, (x, y) in enumerate(data):
        loss = step(x, y, times if i >= args.warmup else None)
    report({"times": times, "loss": loss})


def run_child(args, framework):
    options = ["--steps", args.steps, "--warmup", args.warmup, "--malloc", args.malloc,
               "--clock", args.clock] + (["--threads", args.threads] if args.threads else [])
    return _common.run_child(__file__, framework, options)


# ---- the comparison --------------------------------------------------------------------
def step_samples(times):
    """Seconds per whole step, from the (forward, backward, optimizer) times of each step."""
    return [sum(t) for t in times]


def agreement_check(args):
    """One step of each framework from the same weights on the same batch: equal losses."""
    import numpy as np

    data = batches(1)
    tt_model, tt_step = tinytorch_setup()
    weights = {name: p.data.copy() for name, p in tt_model.named_parameters()}
    _, pt_step = torch_setup(weights, args.threads)
    return tt_model.num_parameters(), tt_step(*data[0]), pt_step(*data[0]), np.__version__


def environment_line():
    """Where this ran (module 19's environment()): CPU, cores, load, BLAS."""
    from tinytorch.perf.benchmarking import environment

    env = environment()
    load = env["load_average"][0] if env["load_average"] else float("nan")
    return (f"environment: {env['cpu']}, {env['usable_cores']} usable cores, load {load:.2f}, "
            f"{env['platform']}, {env['blas'].get('name', 'BLAS ?')} "
            f"{env['blas'].get('version', '')}")


def main(argv=None):
    args = parse_args(argv)
    setup_process(args)
    if args.child:
        child(args)
        return 0
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    n_params, first_tt, first_pt, np_version = agreement_check(args)
    print(f"CNN of cnn_digits (conv 3x3 16, pool, conv 3x3 32, pool, 128-64-10), batch {BATCH} "
          f"of 1x8x8 digits: {n_params:,} parameters")
    print(f"threads: {args.threads or 'library default (all cores)'}; malloc: {args.malloc}; "
          f"clock: {args.clock}; numpy {np_version}, torch {torch.__version__}")
    print(environment_line())
    print(f"first-step loss: tinytorch {first_tt:.6f}, torch {first_pt:.6f} "
          f"(same weights, same batch: must agree)")
    if abs(first_tt - first_pt) > 1e-4:
        print("[error] the two models disagree: the comparison is not like for like")
        return 1

    runs = {"tinytorch": [], "torch": []}
    order = ("tinytorch", "torch")
    for r in range(args.rounds):
        for framework in (order if r % 2 == 0 else order[::-1]):
            runs[framework].append(run_child(args, framework))
    print(f"\n{args.rounds} round(s) x {args.steps} timed steps per framework, after "
          f"{args.warmup} warm-up steps, each framework in its own process (medians, ms):")
    print(f"{'':12s}{'step':>9s}{'forward':>10s}{'backward':>10s}{'optimizer':>11s}"
          f"{'images/s':>10s}")
    results = {}
    for name, label in (("tinytorch", "tinytorch"), ("torch", "pytorch")):
        times = [t for run in runs[name] for t in run["times"]]
        ms, parts = summary(times)
        results[name] = ms
        print(f"{label:12s}{ms:9.2f}{parts[0]:10.2f}{parts[1]:10.2f}{parts[2]:11.2f}"
              f"{BATCH / ms * 1e3:10,.0f}")
    from tinytorch.perf.benchmarking import Comparison

    comparison = Comparison.from_samples(
        [s for run in runs["torch"] for s in step_samples(run["times"])],
        [s for run in runs["tinytorch"] for s in step_samples(run["times"])],
        names=("pytorch", "tinytorch"))
    ratio = comparison.ratio
    per_round = [summary(a["times"])[0] / summary(b["times"])[0]
                 for a, b in zip(runs["tinytorch"], runs["torch"])]
    print(f"ratio tinytorch / pytorch: {ratio:.2f}x per step (target <= 2x); per round: "
          + ", ".join(f"{r:.2f}x" for r in per_round))
    print(f"95% interval of the ratio over the steps [{comparison.ci[0]:.2f}, "
          f"{comparison.ci[1]:.2f}]: tinytorch {comparison.verdict} (module 19's verdict; "
          f"rounds differ by more than steps on a busy machine, so read the per-round ratios too)")
    print(f"loss after the last step: tinytorch {runs['tinytorch'][0]['loss']:.6f}, "
          f"pytorch {runs['torch'][0]['loss']:.6f}")
    print("RESULT " + json.dumps({"tinytorch_ms": results["tinytorch"],
                                  "torch_ms": results["torch"], "ratio": ratio,
                                  "ci": list(comparison.ci), "verdict": comparison.verdict,
                                  "per_round": per_round,
                                  "first_loss": [first_tt, first_pt],
                                  "last_loss": [runs["tinytorch"][0]["loss"],
                                                runs["torch"][0]["loss"]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
