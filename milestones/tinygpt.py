"""2018, GPT: your own framework trains a character-level GPT on Tiny Shakespeare.

Radford et al.'s GPT stacked transformer decoder blocks and trained them to predict the
next token. Here the same model, small, learns the 1.1 million characters of Tiny
Shakespeare on a CPU, built entirely from your package: Tensor and autograd, Linear,
embeddings, causal attention, layer norm, cross-entropy, AdamW, a warm-up + cosine
schedule and module 08's checkpoints.

The default configuration is nanoGPT's CPU run of `shakespeare_char`: 4 layers, 4 heads,
128 wide, context 64, batch 12, no dropout, no biases, tied embeddings; AdamW with betas
(0.9, 0.99) and weight decay 0.1 on the matrices; lr 1e-3, 100 warm-up steps, cosine decay
to 1e-4 at step 2,000; gradients clipped to norm 1.0.

Data: characters encoded with module 10's CharTokenizer (65 ids, sorted characters, as
nanoGPT); the first 90% of the text trains, the last 10% validates. Each batch is 12
random windows of 65 characters (64 inputs, each with its next character as target).
Evaluation every 250 steps: mean loss over the same fixed 20 batches of each split (as
nanoGPT's CPU run, eval_iters=20), under no_grad; that shows the curve, to about +-0.015.

The verdict: the final validation loss is exact, over the whole validation split, and is
compared with what PyTorch reaches on the same configuration, measured the same way
(`benchmarks/tinygpt_loss.py`; numbers below, at PYTORCH_RUNS). nanoGPT's README quotes
1.88 for this run: that is the loss nanoGPT prints at step 2,000, a mean over 20 random
batches, which lands within about +-0.03 of the exact loss (two standard deviations).

    tito milestone run tinygpt                       # 2,000 steps, then samples
    tito milestone run tinygpt --quick               # a few steps (tests)
    tito milestone run tinygpt --sample-only --checkpoint runs/tinygpt --prompt "ROMEO:"

The checkpoint is a Hugging Face GPT-2 folder, written with module 08's safetensors writer:
`runs/tinygpt/config.json` + `model.safetensors`, so `transformers` loads it too
(`AutoModelForCausalLM.from_pretrained("runs/tinygpt")` gives the same logits). The
character vocabulary, the step and the losses are in config.json under "tinytorch", and the
vocabulary is also a `tokenizer.json` (one token per character) that module 10's
`load_hf_tokenizer` and `tokenizers` read.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

from _common import console, curve_table, need_tinytorch, needs, parser, report_verdict
from tito.course.checkpoints import (
    GPT2_CONFIG,
    GPT2_WEIGHTS,
    OPTIMIZER_STATE,
    CheckpointFolderError,
    load_pretrained,
    save_optimizer,
    save_pretrained,
)
from tito.course.datasets import encode_splits, get_batch, load_text, split_loss, tiled_windows
from tito.course.packages import acceleration

DEFAULTS = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64}

# Exact validation loss (whole split) after 2,000 steps of the default configuration in
# PyTorch 2.13 CPU: every PyTorch run of `benchmarks/tinygpt_loss.py --seeds 0 1 2 3 4 --jobs 2
# --threads 1` and of the same with seeds 5-9. "paired" runs start from TinyTorch's initial
# weights and batch draws for the seed; "nanoGPT" runs from PyTorch's own.
PYTORCH_RUNS = (
    1.9095, 1.9071, 1.9095, 1.9244, 1.9179, 1.9176, 1.9059, 1.9014, 1.9066, 1.9032,  # paired
    1.9118, 1.9085, 1.9160, 1.9055, 1.9079, 1.8975, 1.9078, 1.9047, 1.9092, 1.9170,  # nanoGPT
)
NANOGPT_README = 1.88  # nanoGPT's quoted figure for this run: a 20-batch estimate


def pytorch_reference():
    """(mean, sd, bar) of PYTORCH_RUNS; the bar is the mean plus three standard deviations."""
    mean = float(np.mean(PYTORCH_RUNS))
    sd = float(np.std(PYTORCH_RUNS, ddof=1))
    return mean, sd, mean + 3 * sd


def verdict(val):
    """(passed, message): the final validation loss against PyTorch's on this configuration."""
    mean, sd, bar = pytorch_reference()
    reference = (f"PyTorch reaches {mean:.3f} +- {sd:.3f} on this measure ({len(PYTORCH_RUNS)} "
                 f"runs, {min(PYTORCH_RUNS):.3f} to {max(PYTORCH_RUNS):.3f}); nanoGPT's README "
                 f"quotes {NANOGPT_README}, a 20-batch estimate")
    if val <= bar:
        return True, (f"Validation loss {val:.4f}: on par with PyTorch (at most {bar:.3f}, its "
                      f"mean + 3 sd). {reference}.")
    return False, (f"Validation loss {val:.4f} is above {bar:.3f}, PyTorch's mean + 3 sd: your "
                   f"framework trains worse than PyTorch on the same configuration. {reference}. "
                   "A correct framework matches PyTorch to float32 rounding from the same weights "
                   "on the same batches; rerun your modules' tests (`tito module test NN`, "
                   "modules 06-13), whose gradient checks find most such bugs.")


def speed_setup(args):
    """Module 17's speed-ups unless --plain: (optimizer class, kernel names, one-line note)."""
    from tinytorch.core.optimizers import AdamW

    accel = None if args.plain else acceleration()
    if accel is None:
        if args.threads:
            console.print("[yellow]note:[/] --threads needs module 17 (acceleration); ignored "
                          "(set OPENBLAS_NUM_THREADS before starting instead)")
        why = "--plain" if args.plain else "module 17 (acceleration) not completed"
        return AdamW, (), f"plain framework ({why}): the lessons' own kernels, AdamW"
    accel.keep_freed_memory()
    if args.threads:
        if accel.blas_threads() is None:
            console.print("[yellow]note:[/] could not find NumPy's OpenBLAS; --threads sets the "
                          "compiled kernels' threads only (set OPENBLAS_NUM_THREADS too)")
        accel.set_threads(args.threads)
    kernels = accel.use_fast_kernels(True)
    pool = ""
    if hasattr(accel, "kernel_threads"):  # module 17's threading layer and its threads
        layer, threads = accel.kernel_threads()
        pool = f" on numba's {layer} pool ({threads} thread{'s' * (threads > 1)})"
    return accel.CompiledAdamW, kernels, (
        f"module 17 (acceleration): kernels {', '.join(kernels)}{pool}; CompiledAdamW; freed "
        "memory kept for reuse (--plain turns all of it off)")


def arguments():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps (default 2000)")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-batches", type=int, default=20,
                   help="batches of each split per evaluation (default 20, as nanoGPT's CPU run)")
    p.add_argument("--final-windows", type=int, default=None,
                   help="windows of each split for the final evaluation, which the verdict "
                        "uses (default: the whole validation split, 1,742 windows)")
    p.add_argument("--batch-size", type=int, default=12)
    for name, default in DEFAULTS.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                       help=f"model size (default {default}; with --sample-only, the checkpoint's)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for NumPy's matrix products and module 17's compiled kernels "
                        "(default: all cores); 1 is often "
                        "faster on a machine busy with other work (needs module 17)")
    p.add_argument("--plain", action="store_true",
                   help="do not use module 17's fast kernels, FusedAdamW and malloc settings")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--out", default="runs/tinygpt", help="folder for the checkpoint")
    p.add_argument("--checkpoint", help="checkpoint to sample from (with --sample-only)")
    p.add_argument("--sample-only", action="store_true",
                   help="sample from --checkpoint, no training")
    p.add_argument("--prompt", default="\n",
                   help="text the samples start from (default: a newline)")
    p.add_argument("--samples", type=int, default=2, help="how many samples to print")
    p.add_argument("--tokens", type=int, default=500, help="characters per sample")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    return p.parse_args()


class Failure(Exception):
    """A bad input: printed in red, exit code 2, no traceback."""


# ---- data: tito.course.datasets (load_text, encode_splits, get_batch, tiled_windows, split_loss)
# ---- sampling ---------------------------------------------------------------------------
def encode_prompt(tokenizer, prompt, block_size):
    """The prompt's ids; a clear error for characters outside the vocabulary."""
    unknown = sorted({ch for ch in prompt if ch not in tokenizer.stoi})
    if unknown:
        others = "".join(c for c in tokenizer.chars if not c.isalpha())
        raise Failure(
            f"the prompt contains {len(unknown)} character(s) that are not in the model's "
            f"vocabulary of {tokenizer.vocab_size}: {', '.join(repr(c) for c in unknown)}. "
            f"The vocabulary is the letters a-z and A-Z and {others!r}; remove or replace "
            "the others."
        )
    if not prompt:
        raise Failure("the prompt is empty: give at least one character, e.g. --prompt '\\n'")
    ids = tokenizer.encode(prompt)
    if len(ids) > block_size:
        console.print(
            f"[yellow]note:[/] the prompt has {len(ids)} characters but the model's context is "
            f"{block_size}: it sees only the last {block_size} when predicting (generate crops "
            "the context to block_size; older text is forgotten)."
        )
    return ids


def print_samples(model, tokenizer, prompt_ids, args, seed):
    with_seed = f"seed {seed}"
    settings = f"temperature {args.temperature}"
    if args.top_k:
        settings += f", top_k {args.top_k}"
    if args.top_p:
        settings += f", top_p {args.top_p}"
    for i in range(args.samples):
        ids = model.generate(prompt_ids, args.tokens, temperature=args.temperature,
                             top_k=args.top_k, top_p=args.top_p, seed=seed + i)
        text = tokenizer.decode(ids.tolist())
        console.rule(f"sample {i + 1} ({settings}, {with_seed} + {i})")
        console.print(text, markup=False, highlight=False)
    console.rule()


# ---- the checkpoint: a Hugging Face GPT-2 folder (tito.course.checkpoints) ----------------


# ---- the pieces of the run ----------------------------------------------------------------
def requested_sizes(args):
    return {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}


def sample_only(args, tt):
    from tinytorch.text.tokenization import CharTokenizer

    path = Path(args.checkpoint or args.out)
    if path.is_file() and path.name in (GPT2_CONFIG, GPT2_WEIGHTS):
        path = path.parent  # the folder is the checkpoint
    if path.suffix == ".npz":  # a checkpoint of an earlier version of this milestone
        model, step, extra = load_npz(path, args)
    else:
        model, info = load_pretrained(path, requested_sizes(args))
        step, extra = info.get("step"), info
    extra = extra or {}
    if "chars" not in extra:
        raise Failure(f"{path} holds no tokenizer vocabulary: was it written by this milestone?")
    tokenizer = CharTokenizer(extra["chars"])
    config = model.config
    console.print(f"loaded {path}: step {step}, {model.num_parameters():,} parameters, "
                  f"{config.n_layer} layers x {config.n_embd} wide, context {config.block_size}"
                  + (f", val loss {extra['val_loss']:.4f}" if "val_loss" in extra else ""))
    prompt_ids = encode_prompt(tokenizer, args.prompt, config.block_size)
    print_samples(model, tokenizer, prompt_ids, args, args.seed)
    return 0


def load_npz(path, args):
    """(model, step, extra) from the .npz checkpoint earlier versions wrote."""
    from tinytorch.core.training import CheckpointError
    from tinytorch.models.transformer import load_gpt

    try:
        return load_gpt(path, **requested_sizes(args))
    except CheckpointError as error:
        raise Failure(f"cannot sample from {path}: {error}") from None


class Progress:
    """A rich progress bar on a terminal; a plain line per evaluation elsewhere."""

    def __init__(self, total):
        self.total, self.bar = total, None
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(),
                           TextColumn("loss {task.fields[loss]}"),
                           TextColumn("{task.fields[rate]} tok/s"), TimeRemainingColumn(),
                           console=console)
            self.task = self.bar.add_task("train", total=total, loss="-", rate="-")
            self.bar.start()

    def update(self, step, loss, tokens_per_s):
        if self.bar is not None:
            self.bar.update(self.task, completed=step, loss=f"{loss:.4f}",
                            rate=f"{tokens_per_s:,.0f}")

    def log(self, text):
        (self.bar.console if self.bar is not None else console).print(text)

    def close(self):
        if self.bar is not None:
            self.bar.stop()


def train(args, tt):
    from tinytorch.core.optimizers import clip_grad_norm_
    from tinytorch.core.training import CosineWarmup, TrainingError, set_lr
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.text.tokenization import CharTokenizer

    text = load_text()
    tokenizer = CharTokenizer.train(text)
    sizes = dict(DEFAULTS, **requested_sizes(args))
    prompt_ids = encode_prompt(tokenizer, args.prompt, sizes["block_size"])  # fail before training
    train_data, val_data = encode_splits(text, tokenizer)
    console.print(f"Tiny Shakespeare: {len(text):,} characters, vocabulary {tokenizer.vocab_size}; "
                  f"{len(train_data):,} train / {len(val_data):,} validation")

    tt.manual_seed(args.seed)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, **sizes)
    model = GPT(config)
    optimizer_class, _, speed_note = speed_setup(args)
    decay = [p for p in model.parameters() if p.ndim >= 2]  # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.ndim < 2]  # norm weights, biases
    groups = [{"params": decay, "weight_decay": args.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    optimizer = optimizer_class(groups, lr=args.lr, betas=(0.9, 0.99))
    steps = 10 if args.quick else args.steps
    eval_every = 5 if args.quick else args.eval_every
    n_eval = 2 if args.quick else args.eval_batches
    schedule = CosineWarmup(args.lr, args.min_lr, min(args.warmup, steps - 1), steps)
    console.print(f"GPT: {model.num_parameters():,} parameters ({config.n_layer} layers, "
                  f"{config.n_head} heads, {config.n_embd} wide, context {config.block_size}); "
                  f"batch {args.batch_size}, {steps} steps, lr {args.lr:g} -> {args.min_lr:g} "
                  f"(warm-up {schedule.warmup_steps}), evaluation every {eval_every} steps on "
                  f"{n_eval} batches per split")
    console.print(speed_note)

    batch_rng = np.random.default_rng(args.seed)
    eval_rng = np.random.default_rng(args.seed + 1)
    # The same n_eval random batches of each split at every evaluation, as windows.
    eval_windows = {split: get_batch(data, n_eval * args.batch_size, config.block_size, eval_rng)
                    for split, data in (("train", train_data), ("val", val_data))}
    tokens_per_step = args.batch_size * config.block_size
    rows, progress = [], Progress(steps)
    train_seconds, start = 0.0, time.perf_counter()
    try:
        for step in range(steps):
            lr = schedule(step)
            set_lr(optimizer, lr)
            x, y = get_batch(train_data, args.batch_size, config.block_size, batch_rng)
            began = time.perf_counter()
            _, loss = model(x, y)
            value = loss.item()
            if not math.isfinite(value):
                raise TrainingError(
                    f"step {step}: the loss is {value}; training diverged (lr {lr:.3g})")
            optimizer.zero_grad()
            loss.backward()
            clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            train_seconds += time.perf_counter() - began
            done = step + 1
            progress.update(done, value, tokens_per_step * done / train_seconds)
            if done % eval_every == 0 or done == steps:
                losses = {split: split_loss(model, tt, x, y)
                          for split, (x, y) in eval_windows.items()}
                rows.append({"step": done, "train loss": losses["train"],
                             "val loss": losses["val"]})
                progress.log(f"step {done}/{steps}: train loss {losses['train']:.4f}, "
                             f"val loss {losses['val']:.4f}, "
                             f"{train_seconds / done * 1e3:.1f} ms/step, "
                             f"{tokens_per_step * done / train_seconds:,.0f} tokens/s")
    finally:
        progress.close()
    wall = time.perf_counter() - start
    console.print(curve_table("evaluation", rows, ["step", "train loss", "val loss"]))
    # 20 random batches estimate a loss to about +-0.015, too coarse for a verdict. The final
    # loss is exact: the whole validation split, and as many windows spread over the training
    # split.
    n_windows = 24 if args.quick else args.final_windows
    x_val, y_val = tiled_windows(val_data, config.block_size, n_windows)
    x_train, y_train = tiled_windows(train_data, config.block_size, len(x_val))
    final = {"train": split_loss(model, tt, x_train, y_train),
             "val": split_loss(model, tt, x_val, y_val)}
    val = final["val"]
    console.print(f"trained {steps} steps in {wall:.1f} s wall time "
                  f"({train_seconds / steps * 1e3:.1f} ms per training step, "
                  f"{tokens_per_step * steps / train_seconds:,.0f} tokens/s)")
    every = len(x_val) == (len(val_data) - 1) // config.block_size
    whole = "the whole validation split" if every else "validation"
    console.print(f"final loss per character over {len(x_val):,} windows of {config.block_size} "
                  f"({whole}; as many spread over the training split): train "
                  f"{final['train']:.4f}, validation {val:.4f}")

    out = Path(args.out)
    save_pretrained(out, model, {"chars": tokenizer.chars, "step": steps, "val_loss": val,
                                 "train_loss": final["train"], "seconds": round(wall, 1)})
    save_optimizer(out, optimizer)
    console.print(f"saved the model, its config and its vocabulary to {out}/ "
                  f"({GPT2_CONFIG} + {GPT2_WEIGHTS}, Hugging Face's GPT-2 layout; the AdamW "
                  f"state in {OPTIMIZER_STATE})")
    print_samples(model, tokenizer, prompt_ids, args, args.seed)
    if args.quick:
        return 0
    if not reference_run(args):
        console.print("[dim]No PyTorch reference for this configuration (the defaults have one), "
                      "so no verdict.[/]")
        return 0
    passed, message = verdict(val)
    return report_verdict(passed, message, message)


def reference_run(args):
    """Whether this run is the configuration PyTorch's reference numbers are for."""
    defaults = {"batch_size": 12, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100,
                "weight_decay": 0.1, "final_windows": None}
    return (args.steps == 2000 and all(getattr(args, k) == v for k, v in defaults.items())
            and all(v == DEFAULTS[k] for k, v in requested_sizes(args).items()))


def main() -> int:
    args = arguments()
    tt = need_tinytorch()
    with needs():
        import tinytorch.models.transformer  # noqa: F401
        import tinytorch.text.tokenization  # noqa: F401
    if args.quick:
        args.tokens = min(args.tokens, 80)
    try:
        return sample_only(args, tt) if args.sample_only else train(args, tt)
    except (Failure, CheckpointFolderError) as error:
        from rich.markup import escape

        console.print(f"[red]error:[/] {escape(str(error))}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
