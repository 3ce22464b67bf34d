"""The benchmark suite: your models against the same models in PyTorch, with module 19's harness.

Five benchmarks of the models the course builds, each TinyTorch against PyTorch CPU eager
on the SAME model (PyTorch's copy is given TinyTorch's weights) and the SAME inputs:

1. the `mlp_digits` milestone's MLP (64-128-64-10) on a batch of 8x8 digits: forward;
2. the same MLP: training step (forward, cross-entropy, backward, Adam);
3. the `tinygpt` milestone's TinyGPT (nanoGPT's CPU configuration): forward with loss;
4. TinyGPT: training step (forward, backward, AdamW);
5. TinyGPT: greedy decoding, new tokens per second (no KV cache on either side: module 13's
   `generate` re-reads the context for every token, and so does PyTorch's loop here).

Each benchmark is a `Benchmark.compare` of module 19: warm-up, then rounds of paired runs in
the order P T T P P T ... so a noisy neighbour slows both alike; the table gives each
framework's median and IQR, the ratio TinyTorch / PyTorch (time) with its 95% paired
bootstrap interval, and the verdict. Before timing, every benchmark checks that the two
frameworks agree (outputs, first loss, greedy tokens); a disagreement stops the run.

Threads: both frameworks run in this one process, so the suite pins BLAS and PyTorch to
--threads (default 1): with more threads, the pool of the side that just ran keeps spinning
and slows the other (`gpt_step.py` runs each framework in its own process for that reason).
Without PyTorch installed, TinyTorch's figures are printed alone, with a note.

    .venv/bin/python benchmarks/suite.py                  # 10 rounds each, full sizes
    .venv/bin/python benchmarks/suite.py --quick          # tiny sizes, 3 rounds: a smoke test
    .venv/bin/python benchmarks/suite.py --plot runs/suite.png --threads 2
"""

from __future__ import annotations

import os
import sys

# BLAS threads are fixed when NumPy loads: set them before importing it.
_THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from tinytorch.perf.benchmarking import (  # noqa: E402
    Benchmark,
    Measurement,
    environment,
    plot,
    table,
)

FULL = dict(mlp_batch=32, gpt=dict(vocab_size=65, block_size=64, n_layer=4, n_head=4,
                                   n_embd=128), gpt_batch=12, prompt=16, new_tokens=48)
QUICK = dict(mlp_batch=32, gpt=dict(vocab_size=65, block_size=16, n_layer=2, n_head=2,
                                    n_embd=32), gpt_batch=2, prompt=4, new_tokens=4)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 3 rounds, 1 warm-up")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (default 10)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 3)")
    p.add_argument("--threads", type=int, default=1,
                   help="BLAS and PyTorch threads, both frameworks (default 1; see above)")
    p.add_argument("--no-torch", action="store_true",
                   help="time TinyTorch alone, as when PyTorch is not installed")
    p.add_argument("--plot", metavar="PNG", help="save the samples of every benchmark")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    return args


@dataclass
class Case:
    """One benchmark: a TinyTorch call, the same call in PyTorch, and what one call does."""

    name: str
    tinytorch: Callable
    torch: Callable | None
    work: int  # items per call: images or tokens
    unit: str  # "images/s", "tokens/s"
    agreement: str  # how the two frameworks were checked, and the figure
    agrees: bool


# ---- data ------------------------------------------------------------------------------
def digits_batch(batch, seed=0):
    from tito.course.datasets import load_digits

    x_train, y_train, _, _ = load_digits(seed)
    ix = np.random.default_rng(seed).integers(0, len(x_train), size=batch)
    return x_train[ix], y_train[ix]


def shakespeare_batch(batch, block, seed=0):
    """(x, y) int64 windows of Tiny Shakespeare, characters as ids (sorted character set)."""
    from tito.course.datasets import load_text

    text = load_text()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = np.fromiter((lookup[c] for c in text[:200_000]), dtype=np.int64)
    ix = np.random.default_rng(seed).integers(0, len(data) - block - 1, size=batch)
    window = data[ix[:, None] + np.arange(block + 1)]  # (B, T + 1)
    return window[:, :-1], window[:, 1:], len(chars)


# ---- PyTorch twins ---------------------------------------------------------------------
def torch_mlp(tt_model):
    """The MLP of mlp_digits in torch.nn, with TinyTorch's weights copied in."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    copy_weights(model, dict(tt_model.named_parameters()))
    return model


# The PyTorch reference GPT. At merge this is repointed at the shared PyTorch reference
# module in benchmarks/ (one definition for every script); keep it in this one function.
def copy_weights(torch_model, weights):
    import torch

    with torch.no_grad():
        for name, p in torch_model.named_parameters():
            w = weights[name]
            p.copy_(torch.from_numpy(np.asarray(w.data if hasattr(w, "data") else w)))


# ---- the benchmarks ----------------------------------------------------------------------
def mlp_cases(sizes, torch):
    from tinytorch import nn
    from tinytorch.core.autograd import no_grad
    from tinytorch.core.tensor import Tensor, manual_seed
    from tinytorch.optim import Adam

    x, y = digits_batch(sizes["mlp_batch"])
    manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    opt = Adam(model.parameters(), lr=2e-3)
    xt, yt = Tensor(x), Tensor(y, dtype=np.int64)

    def tt_forward():
        with no_grad():
            return model(xt).data

    def tt_step():
        loss = nn.cross_entropy(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    pt_forward = pt_step = None
    agree_fwd = agree_step = "PyTorch not run"
    ok_fwd = ok_step = True
    if torch is not None:
        pt = torch_mlp(model)
        pt_opt = torch.optim.Adam(pt.parameters(), lr=2e-3)
        px, py = torch.from_numpy(x), torch.from_numpy(y)

        def pt_forward():
            with torch.no_grad():
                return pt(px)

        def pt_step():
            loss = torch.nn.functional.cross_entropy(pt(px), py)
            pt_opt.zero_grad(set_to_none=True)
            loss.backward()
            pt_opt.step()
            return loss.item()

        diff = float(np.abs(tt_forward() - pt_forward().numpy()).max())
        ok_fwd = diff < 1e-4
        agree_fwd = f"logits max |diff| {diff:.1e}"
        first = (tt_step(), pt_step())  # one step each, from the same weights
        ok_step = abs(first[0] - first[1]) < 1e-4
        agree_step = f"first-step loss {first[0]:.6f} vs {first[1]:.6f}"
    n = sizes["mlp_batch"]
    return [Case(f"MLP digits forward (batch {n})", tt_forward, pt_forward, n, "images/s",
                 agree_fwd, ok_fwd),
            Case(f"MLP digits train step (batch {n})", tt_step, pt_step, n, "images/s",
                 agree_step, ok_step)]


def gpt_cases(sizes, torch):
    from tinytorch.core.optimizers import AdamW
    from tinytorch.core.tensor import manual_seed
    from tinytorch.models.transformer import GPT, GPTConfig

    config = dict(sizes["gpt"])
    x, y, vocab = shakespeare_batch(sizes["gpt_batch"], config["block_size"])
    config["vocab_size"] = vocab
    manual_seed(0)
    model = GPT(GPTConfig(**config))
    opt = AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
    prompt = x[0, :sizes["prompt"]]
    new = sizes["new_tokens"]
    tokens = x.size

    def tt_forward():
        from tinytorch.core.autograd import no_grad

        with no_grad():
            return model(x, y)[1].item()

    def tt_step():
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def tt_decode():
        return model.generate(prompt, new, temperature=0).tolist()[len(prompt):]

    # Greedy decoding first, before any training step moves the weights.
    pt_fns = (None, None, None)
    agree = ["PyTorch not run"] * 3
    ok = [True] * 3
    if torch is not None:
        from torch_reference import torch_gpt_from

        pt = torch_gpt_from(model, attention="sdpa")  # the one PyTorch twin, weights copied
        pt_opt = torch.optim.AdamW(pt.parameters(), lr=1e-3, betas=(0.9, 0.99),
                                   weight_decay=0.0)
        px, py = torch.from_numpy(x), torch.from_numpy(y)
        block = config["block_size"]

        def pt_forward():
            with torch.no_grad():
                return pt(px, py)[1].item()

        def pt_step():
            _, loss = pt(px, py)
            pt_opt.zero_grad(set_to_none=True)
            loss.backward()
            pt_opt.step()
            return loss.item()

        def pt_decode():
            ids = torch.from_numpy(prompt)[None]  # (1, T)
            with torch.no_grad():
                for _ in range(new):
                    logits, _ = pt(ids[:, -block:])  # (1, T, V)
                    ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return ids[0, len(prompt):].tolist()

        pt_fns = (pt_forward, pt_step, pt_decode)
        same_tokens = tt_decode() == pt_decode()
        ok[2], agree[2] = same_tokens, f"greedy tokens {'identical' if same_tokens else 'DIFFER'}"
        losses = (tt_forward(), pt_forward())
        ok[0] = abs(losses[0] - losses[1]) < 1e-4
        agree[0] = f"loss {losses[0]:.6f} vs {losses[1]:.6f}"
        first = (tt_step(), pt_step())
        ok[1] = abs(first[0] - first[1]) < 1e-4
        agree[1] = f"first-step loss {first[0]:.6f} vs {first[1]:.6f}"
    shape = (f"{config['n_layer']} layers, {config['n_embd']} wide, batch "
             f"{sizes['gpt_batch']} x {config['block_size']}")
    return [Case(f"TinyGPT forward ({shape})", tt_forward, pt_fns[0], tokens, "tokens/s",
                 agree[0], ok[0]),
            Case(f"TinyGPT train step ({shape})", tt_step, pt_fns[1], tokens, "tokens/s",
                 agree[1], ok[1]),
            Case(f"TinyGPT decode ({new} tokens after {len(prompt)}, greedy)", tt_decode,
                 pt_fns[2], new, "tokens/s", agree[2], ok[2])]


def import_torch(args):
    if args.no_torch:
        return None, "--no-torch"
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (pip install -e '.[dev]')"
    torch.set_num_threads(args.threads)
    return torch, None


def main(argv=None):
    args = parse_args(argv)
    from rich.console import Console

    console = Console(width=160)
    torch, why_not = import_torch(args)
    sizes = QUICK if args.quick else FULL
    env = environment()
    if torch is not None:
        env["torch"] = torch.__version__
    console.print(f"[bold]environment[/]: {env['cpu']}, {env['usable_cores']} usable of "
                  f"{env['cores']} cores, load {env['load_average'] and env['load_average'][0]:.2f}"
                  f"; {env['platform']}; Python {env['python']}, NumPy {env['numpy']} "
                  f"({env['blas'].get('name', 'BLAS ?')} {env['blas'].get('version', '')}), "
                  f"torch {env.get('torch', '-')}, tinytorch {env['tinytorch']}; threads "
                  f"{args.threads} (thread env {env['thread_env']})")
    cases = mlp_cases(sizes, torch) + gpt_cases(sizes, torch)
    for case in cases:
        flag = "" if case.agrees else "  [red][error] the frameworks disagree[/]"
        console.print(f"  check {case.name}: {case.agreement}{flag}")
    if not all(c.agrees for c in cases):
        console.print("[red]the two models disagree: the comparison is not like for like[/]")
        return 1

    bench = Benchmark(warmup=args.warmup, repeats=args.rounds)
    results, comparisons = {}, {}
    for case in cases:
        if torch is None:
            m = bench.run(case.tinytorch)
            results[case.name] = {"tinytorch": measurement_dict(m), "work": case.work}
            continue
        c = bench.compare(case.torch, case.tinytorch, names=("pytorch", "tinytorch"))
        comparisons[case.name] = c
        results[case.name] = dict(c.to_dict(), work=case.work, unit=case.unit)

    how = (f"{args.rounds} paired rounds (P T T P ...) after {args.warmup} warm-up calls each"
           if torch is not None else f"{args.rounds} runs after {args.warmup} warm-up calls")
    if torch is None:
        from rich.table import Table

        t = Table(title=f"TinyTorch alone: {how}")
        for col in ("benchmark", "tinytorch (median ± IQR)", "throughput"):
            t.add_column(col)
        for case in cases:
            m = Measurement(tuple(results[case.name]["tinytorch"]["samples"]))
            t.add_row(case.name, str(m), f"{case.work / m.median:,.0f} {case.unit}")
        console.print(t)
        console.print(f"[yellow]note: the PyTorch column is skipped: {why_not}[/]")
    else:
        console.print(table(comparisons, title=f"TinyTorch against PyTorch: {how}; ratio = "
                                               "tinytorch time / pytorch time"))
        for case in cases:
            c = comparisons[case.name]
            console.print(f"  {case.name}: tinytorch {case.work / c.candidate.median:,.0f}, "
                          f"pytorch {case.work / c.baseline.median:,.0f} {case.unit} (medians)")
    if args.plot and comparisons:
        console.print(f"samples plotted to {plot(comparisons, args.plot)}")
    print("RESULT " + json.dumps({"environment": env, "threads": args.threads,
                                  "torch": torch is not None, "benchmarks": results}))
    return 0


def measurement_dict(m):
    return {"samples": list(m.samples), "median": m.median, "iqr": m.iqr, "n": m.n}


if __name__ == "__main__":
    sys.exit(main())
