"""Compressed TinyGPT: pruning, structured pruning and distillation, with exact validation losses.

Loads a trained checkpoint of the `tinygpt` milestone (through `benchmarks/quantization.py`'s
`load_model`, the one place that reads the file) and measures, with module 16's functions:

1. Unstructured magnitude pruning to 50% (per layer, and ranked globally), before and after a
   short fine-tune whose optimizer is wrapped by the masks; the sparsity after the fine-tune
   (pruned weights must stay zero) and the CSR bytes against dense. Target: at most +0.05
   validation loss after the fine-tune.
2. Structured pruning: 25% of the MLP neurons, and 1 of 4 heads per layer, removed (the
   matrices shrink); loss before and after the same fine-tune, and the forward time of the
   whole model, dense and pruned alternating. Target: a measured speed-up for the MLP prune.
3. Distillation: a 2-layer, 64-wide student trained alone and trained on the teacher's
   softened outputs (distillation_loss), same initial weights, same batches, same steps;
   both exact validation losses.

Every loss is exact: the whole validation split, with the milestone's `split_loss`.

    .venv/bin/python benchmarks/compression.py --checkpoint runs/tinygpt --threads 1
    .venv/bin/python benchmarks/compression.py --quick     # untrained model, a few steps (tests)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from quantization import load_model, open_checkpoint  # one checkpoint reader (benchmarks/)

import tinytorch as tt
from tinytorch.core.optimizers import AdamW, clip_grad_norm_
from tinytorch.core.training import CosineWarmup, set_lr
from tinytorch.models.transformer import GPT, GPTConfig
from tinytorch.perf.acceleration import keep_freed_memory, set_blas_threads
from tinytorch.perf.compression import (
    CSRMatrix,
    distillation_loss,
    prunable_weights,
    prune_heads,
    prune_magnitude,
    prune_mlp_neurons,
)
from tito.course.datasets import encode_splits, get_batch, load_text, split_loss, tiled_windows

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def optimizers_for(model, lr):
    """AdamW as the milestone sets it up: weight decay on matrices only."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [AdamW(decay, lr=lr, betas=(0.9, 0.99), weight_decay=0.1)]
    if no_decay:
        groups.append(AdamW(no_decay, lr=lr, betas=(0.9, 0.99), weight_decay=0.0))
    return groups


def train(model, data, steps, schedule, seed, masks=None, teacher=None, temperature=2.0,
          alpha=0.5, batch_size=12):
    """`steps` AdamW steps on random windows of `data`; with `teacher`, on distillation_loss."""
    optimizers = optimizers_for(model, schedule(0))
    if masks is not None:
        optimizers = [masks.wrap(opt) for opt in optimizers]
    rng = np.random.default_rng(seed)
    block = model.config.block_size
    model.train()
    for step in range(steps):
        for opt in optimizers:
            set_lr(opt.optimizer if masks is not None else opt, schedule(step))
        x, y = get_batch(data, batch_size, block, rng)
        if teacher is None:
            _, loss = model(x, y)
        else:
            with tt.no_grad():
                teacher_logits = teacher(x)[0].data
            logits, _ = model(x)
            loss = distillation_loss(logits, teacher_logits, y, temperature, alpha)
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"step {step}: loss {loss.item()}")
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        for opt in optimizers:
            opt.step()
    model.eval()
    return model


def forward_times(models, x, rounds):
    """{label: {"wall": median s, "cpu": median s, ...}} of model(x) under no_grad.

    Module 19's harness times each pruned model against "dense" in paired rounds (dense,
    pruned, pruned, dense, ...), once on each clock, and gives the ratio's 95% interval and
    its verdict. CPU time (time.process_time) counts only the time this process ran: with one
    BLAS thread it is the steadier measure on a shared machine; wall time is what a user waits.
    """
    from tinytorch.perf.benchmarking import Benchmark

    def forward(model):
        def fn():
            with tt.no_grad():
                model(x)
        return fn

    times = {}
    for label, model in models.items():
        if label == "dense":
            continue
        row = times[label] = {}
        for clock_name, clock in (("cpu", time.process_time), ("wall", time.perf_counter)):
            c = Benchmark(warmup=1, repeats=rounds, clock=clock).compare(
                forward(models["dense"]), forward(model), names=("dense", label))
            row[clock_name] = c.candidate.median
            row[f"verdict_{clock_name}"] = c.verdict
            row[f"ci_{clock_name}"] = list(c.ci)
            times.setdefault("dense", {}).setdefault(clock_name, c.baseline.median)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "runs" / "tinygpt"))
    p.add_argument("--windows", type=int, default=None,
                   help="validation windows (default: the whole split, exact)")
    p.add_argument("--finetune-steps", type=int, default=200)
    p.add_argument("--finetune-lr", type=float, default=2e-4)
    p.add_argument("--distill-steps", type=int, default=1000)
    p.add_argument("--temperature", type=float, default=2.0)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--rounds", type=int, default=20, help="timed forwards per model")
    p.add_argument("--threads", type=int, default=None,
                   help="NumPy BLAS threads (1 is steadier on a busy machine)")
    p.add_argument("--quick", action="store_true", help="untrained model, a few steps (tests)")
    args = p.parse_args()
    keep_freed_memory()
    if args.threads:
        set_blas_threads(args.threads)
    if args.quick:
        args.finetune_steps, args.distill_steps, args.rounds = 3, 5, 3

    with tempfile.TemporaryDirectory() as tmp:
        path = open_checkpoint(args, tmp)
        if path is None:
            return 2
        teacher, tokenizer = load_model(path)
    teacher.eval()
    trained = teacher.state_dict()

    def fresh():
        """A float32 copy of the trained model, to compress."""
        model = GPT(teacher.config)
        model.load_state_dict(trained)
        return model.eval()

    train_data, val_data = encode_splits(load_text(), tokenizer)
    block = teacher.config.block_size
    x, y = tiled_windows(val_data, block, 24 if args.quick else args.windows)
    loss = lambda m: split_loss(m, tt, x, y)  # noqa: E731
    base = loss(teacher)
    print(f"{path}: {teacher.num_parameters():,} parameters, validation loss {base:.4f} over "
          f"{len(x):,} windows; fine-tune: {args.finetune_steps} steps, lr {args.finetune_lr:g}")
    result = {"base": base}
    constant = lambda step: args.finetune_lr  # noqa: E731

    # 0. the control: the dense model fine-tuned the same way (further training at a low lr
    # helps it too, so pruned-and-fine-tuned is compared with this as well as with `base`)
    control = loss(train(fresh(), train_data, args.finetune_steps, constant, seed=1))
    result["dense_finetuned"] = control
    print(f"control: the dense model after the same fine-tune: {control:.4f} "
          f"({control - base:+.4f})")

    # 1. unstructured
    print("\n1. unstructured magnitude pruning, 50% of every block Linear weight")
    print(f"   {'scope':8s} {'pruned':>8s} {'fine-tuned':>11s} {'change':>8s} {'vs control':>11s} "
          f"{'sparsity':>9s} {'CSR / dense':>12s}  target (+0.05)")
    for scope in ("layer", "global"):
        m = fresh()
        masks = prune_magnitude(m, 0.5, scope=scope)
        before = loss(m)
        train(m, train_data, args.finetune_steps, constant, seed=1, masks=masks)
        after = loss(m)
        weights = [w.data for _, w in prunable_weights(m)]
        csr = sum(CSRMatrix.from_dense(w).nbytes for w in weights)
        dense = sum(w.nbytes for w in weights)
        ok = after - base <= 0.05
        print(f"   {scope:8s} {before:8.4f} {after:11.4f} {after - base:+8.4f} "
              f"{after - control:+11.4f} {masks.sparsity():9.1%} {csr / dense:12.1%}  "
              f"{'met' if ok else 'MISSED'}")
        result[f"unstructured_{scope}"] = {"pruned": before, "finetuned": after,
                                           "sparsity": masks.sparsity(), "csr_share": csr / dense,
                                           "met": ok}

    # 2. structured
    print("\n2. structured pruning (the matrices shrink), then the same fine-tune")
    idx = np.random.default_rng(0).integers(0, teacher.config.vocab_size, (12, block))
    models = {"dense": teacher}
    for label, prune in (("MLP neurons -25%", prune_mlp_neurons), ("heads -25%", prune_heads)):
        m = fresh()
        prune(m, 0.25)
        before = loss(m)
        train(m, train_data, args.finetune_steps, constant, seed=1)
        after = loss(m)
        models[label] = m
        result[label] = {"pruned": before, "finetuned": after,
                         "parameters": m.num_parameters()}
    times = forward_times(models, idx, args.rounds)
    print(f"   {'model':18s} {'params':>9s} {'pruned':>8s} {'fine-tuned':>11s} {'change':>8s} "
          f"{'vs control':>11s} {'forward CPU':>12s} {'speed-up':>9s} {'wall':>9s} "
          f"{'speed-up':>9s}  verdict (CPU, 95% CI of the time ratio)")
    for label, m in models.items():
        t = times[label]
        speed_cpu, speed_wall = times["dense"]["cpu"] / t["cpu"], times["dense"]["wall"] / t["wall"]
        row = result.get(label, {"pruned": base, "finetuned": control})
        print(f"   {label:18s} {m.num_parameters():9,d} {row['pruned']:8.4f} "
              f"{row['finetuned']:11.4f} {row['finetuned'] - base:+8.4f} "
              f"{row['finetuned'] - control:+11.4f} {t['cpu'] * 1e3:9.1f} ms {speed_cpu:8.2f}x "
              f"{t['wall'] * 1e3:6.1f} ms {speed_wall:8.2f}x  "
              + (f"{t['verdict_cpu']} [{t['ci_cpu'][0]:.2f}, {t['ci_cpu'][1]:.2f}]"
                 if label != "dense" else "(baseline)"))
        if label != "dense":
            result[label].update({"cpu_ms": t["cpu"] * 1e3, "wall_ms": t["wall"] * 1e3,
                                  "speedup_cpu": speed_cpu, "speedup_wall": speed_wall,
                                  "verdict_cpu": t["verdict_cpu"], "ci_cpu": t["ci_cpu"],
                                  "verdict_wall": t["verdict_wall"], "ci_wall": t["ci_wall"]})
    print(f"   forward of a (12, {block}) batch, median of {args.rounds} paired rounds against "
          "dense (module 19's Benchmark.compare; dense's figure from the first comparison)")
    result["dense_times_ms"] = {k: v * 1e3 for k, v in times["dense"].items()}

    # 3. distillation
    small = GPTConfig(vocab_size=teacher.config.vocab_size, block_size=block, n_layer=2,
                      n_head=4, n_embd=64)
    schedule = CosineWarmup(1e-3, 1e-4, min(100, args.distill_steps - 1), args.distill_steps)
    print(f"\n3. distillation: student of {GPT(small).num_parameters():,} parameters (2 layers, "
          f"64 wide), {args.distill_steps} steps, same initial weights and batches")
    students = {}
    for label, use_teacher in (("alone", False), ("distilled", True)):
        tt.manual_seed(1)
        student = GPT(small)
        start = time.perf_counter()
        train(student, train_data, args.distill_steps, schedule, seed=2,
              teacher=teacher if use_teacher else None, temperature=args.temperature,
              alpha=args.alpha)
        seconds = time.perf_counter() - start
        students[label] = loss(student)
        extra = (f" (T={args.temperature}, alpha={args.alpha})" if use_teacher else "")
        print(f"   student {label:10s}{extra}: validation loss {students[label]:.4f} "
              f"({seconds:.0f} s of training)")
    print(f"   teacher: {base:.4f}; distilled - alone: "
          f"{students['distilled'] - students['alone']:+.4f}")
    result["distillation"] = students
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
