"""Does TinyTorch train TinyGPT as well as PyTorch? Validation loss after the full run.

For each seed, three runs of the `tinygpt` milestone's configuration (nanoGPT's CPU run of
`shakespeare_char`, 2,000 steps), each measured the same way: the mean loss per
character over the WHOLE validation split (1,742 windows of 64, no sampling noise).

- `tinytorch`: the milestone itself (`milestones/tinygpt.py --seed S`), whose checkpoint
  records the loss.
- `torch, paired`: PyTorch, started from TinyTorch's initial weights for that seed and fed
  the same batches in the same order. A correct framework gives the same loss to about
  1e-3 (float32 rounding grows over 2,000 steps); a wrong gradient does not.
- `torch, nanoGPT`: PyTorch on its own, as nanoGPT runs: its generator draws the initial
  weights (N(0, 0.02), residual projections / sqrt(2 * n_layer)) and the batch windows
  (`torch.randint`). This is the reference distribution: what the configuration itself
  reaches, seed to seed.

The PyTorch model and training step are `gpt_step.py`'s; the learning-rate schedule is
written out here from nanoGPT's `get_lr`, independently of TinyTorch's `CosineWarmup`.
Each run is its own process; `--jobs 2 --threads 1` runs two at once on two cores.

    .venv/bin/python benchmarks/tinygpt_loss.py                      # seeds 0 1 2, ~20 min
    .venv/bin/python benchmarks/tinygpt_loss.py --seeds 0 1 2 3 4 --jobs 2 --threads 1
    .venv/bin/python benchmarks/tinygpt_loss.py --quick              # 20 steps, a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MILESTONE = ROOT / "milestones" / "tinygpt.py"
KINDS = ("tinytorch", "paired", "nanogpt")
LABELS = {"tinytorch": "tinytorch", "paired": "torch, paired", "nanogpt": "torch, nanoGPT"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--windows", type=int, default=None,
                   help="validation windows to evaluate (default: the whole split)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS / intra-op threads per run (default: the libraries' own)")
    p.add_argument("--quick", action="store_true",
                   help="one seed, 20 steps, 48 validation windows: a smoke test")
    p.add_argument("--child", choices=("paired", "nanogpt"), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.windows = args.seeds[:1], 20, 48
    return args


def nanogpt_lr(step, steps, max_lr=1e-3, min_lr=1e-4, warmup=100):
    """nanoGPT's get_lr: linear warm-up, then cosine decay to min_lr at the last step."""
    warmup = min(warmup, steps - 1)
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    ratio = (step - warmup) / (steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


# ---- one PyTorch run (a child process) -------------------------------------------------------
def torch_run(args):
    """Train PyTorch's model for args.steps steps; print its whole-split validation loss."""
    import numpy as np
    import torch
    from gpt_step import torch_setup  # beside this script

    from tinytorch.core.tensor import manual_seed
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.text.tokenization import CharTokenizer
    from tito.course.datasets import encode_splits, get_batch, load_text, tiled_windows

    if args.threads:
        torch.set_num_threads(args.threads)
    text = load_text()
    tokenizer = CharTokenizer.train(text)
    train, val = encode_splits(text, tokenizer)
    # The milestone's sizes are GPTConfig's defaults, nanoGPT's CPU model (tests/test_tinygpt.py).
    config = GPTConfig(vocab_size=tokenizer.vocab_size).to_dict()
    block, batch = config["block_size"], 12

    if args.child == "paired":  # TinyTorch's initial weights and batch stream for this seed
        manual_seed(args.seed)
        weights = {n: p.data.copy()
                   for n, p in GPT(GPTConfig(**config)).named_parameters(remove_duplicate=False)}
        rng = np.random.default_rng(args.seed)

        def next_batch():
            return get_batch(train, batch, block, rng)
    else:  # nanoGPT: PyTorch's generator draws both
        torch.manual_seed(args.seed)
        weights = None
        train_t = torch.from_numpy(train)

        def next_batch():
            ix = torch.randint(len(train_t) - block, (batch,))
            x = torch.stack([train_t[i:i + block] for i in ix])
            y = torch.stack([train_t[i + 1:i + 1 + block] for i in ix])
            return x.numpy(), y.numpy()

    model, step = torch_setup(config, weights, args.threads)
    began = time.perf_counter()
    for s in range(args.steps):
        loss = step(*next_batch(), lr=nanogpt_lr(s, args.steps))
        if not math.isfinite(loss):
            raise SystemExit(f"step {s}: PyTorch's loss is {loss}")
    seconds = time.perf_counter() - began

    x, y = tiled_windows(val, block, args.windows)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(x), 64):
            xb, yb = torch.from_numpy(x[i:i + 64]), torch.from_numpy(y[i:i + 64])
            total += model(xb, yb)[1].item() * len(xb)
    print("CHILD " + json.dumps({"val": total / len(x), "windows": len(x),
                                 "last_train_loss": loss, "seconds": seconds}))


# ---- the runs, as processes ---------------------------------------------------------------
def command(args, kind, seed, out):
    """The process for one run, and how to read its result."""
    if kind == "tinytorch":
        cmd = [sys.executable, str(MILESTONE), "--seed", str(seed), "--steps", str(args.steps),
               "--samples", "0", "--out", str(out)]
        if args.windows:
            cmd += ["--final-windows", str(args.windows)]
        if args.steps < 250:
            cmd += ["--eval-every", str(max(1, args.steps // 2)), "--eval-batches", "2"]
    else:
        cmd = [sys.executable, __file__, "--child", kind, "--seed", str(seed),
               "--steps", str(args.steps)]
        if args.windows:
            cmd += ["--windows", str(args.windows)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return cmd


def result_of(kind, returncode, output, out):
    """A finished run's {"val", "seconds"}, from the milestone's checkpoint or the child's line."""
    if returncode not in (0, 1) or (kind != "tinytorch" and returncode):
        raise RuntimeError(f"the {kind} run failed (exit {returncode}):\n{output[-5000:]}")
    if kind == "tinytorch":  # exit 1 = above the milestone's bar; the loss is still measured
        info = json.loads((Path(out) / "config.json").read_text())["tinytorch"]
        return {"val": info["val_loss"], "seconds": info["seconds"]}
    lines = [line for line in output.splitlines() if line.startswith("CHILD ")]
    return json.loads(lines[-1][len("CHILD "):])


def run_all(args):
    """Every (kind, seed) run, `args.jobs` at a time; results by (kind, seed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if args.threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(args.threads)
    todo = [(kind, seed) for seed in args.seeds for kind in KINDS]
    results, running = {}, []
    with tempfile.TemporaryDirectory(prefix="tinygpt_loss_") as tmp:
        while todo or running:
            while todo and len(running) < args.jobs:
                kind, seed = todo.pop(0)
                out = Path(tmp) / f"{kind}_{seed}"
                log = tempfile.TemporaryFile(mode="w+")
                proc = subprocess.Popen(command(args, kind, seed, out), stdout=log,
                                        stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
                running.append((kind, seed, out, proc, log))
            time.sleep(0.2)
            for item in [r for r in running if r[3].poll() is not None]:
                kind, seed, out, proc, log = item
                running.remove(item)
                log.seek(0)
                text = log.read()
                log.close()
                result = results[kind, seed] = result_of(kind, proc.returncode, text, out)
                print(f"  {LABELS[kind]:15s} seed {seed}: validation {result['val']:.4f} "
                      f"({result['seconds']:.0f} s)", flush=True)
    return results


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        torch_run(args)
        return 0
    import numpy  # noqa: F401  (fail early if the dev install is missing)
    import torch

    what = "the whole validation split" if args.windows is None else f"{args.windows} windows"
    print(f"TinyGPT, {args.steps} steps, seeds {args.seeds}; validation loss per character over "
          f"{what}; {args.jobs} run(s) at a time, threads "
          f"{args.threads or 'library default'}; torch {torch.__version__}")
    results = run_all(args)

    print(f"\n{'seed':>6s}" + "".join(f"{LABELS[k]:>17s}" for k in KINDS) + f"{'tt - paired':>14s}")
    for seed in args.seeds:
        row = [results[k, seed]["val"] for k in KINDS]
        print(f"{seed:6d}" + "".join(f"{v:17.4f}" for v in row) + f"{row[0] - row[1]:+14.4f}")
    summary = {}
    for kind in KINDS:
        values = [results[kind, s]["val"] for s in args.seeds]
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        summary[kind] = {"mean": statistics.fmean(values), "sd": sd,
                         "min": min(values), "max": max(values)}
    print(f"{'mean':>6s}" + "".join(f"{summary[k]['mean']:17.4f}" for k in KINDS))
    print(f"{'sd':>6s}" + "".join(f"{summary[k]['sd']:17.4f}" for k in KINDS))
    gap = max(abs(results["tinytorch", s]["val"] - results["paired", s]["val"]) for s in args.seeds)
    print(f"\nlargest |tinytorch - torch paired| over the seeds: {gap:.4f} (same weights, same "
          "batches: the frameworks themselves)")
    print(f"tinytorch mean - torch nanoGPT mean: "
          f"{summary['tinytorch']['mean'] - summary['nanogpt']['mean']:+.4f} (different draws: "
          "seed-to-seed spread, compare with the sd)")
    print("RESULT " + json.dumps({"seeds": args.seeds, "steps": args.steps, "windows": args.windows,
                                  "runs": {f"{k}/{s}": results[k, s]["val"] for k, s in results},
                                  "summary": summary, "largest_paired_gap": gap}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
