"""2018, MLPerf-style optimization: your baseline and optimized TinyGPT race under rules.

MLPerf (2018 onwards) made machine-learning speed claims comparable: a fixed workload, a
quality target the fast system must still reach, repeated measurements and the measured
environment, all published together. This milestone runs module 20's events on the TinyGPT
that `tito milestone run tinygpt` trained and saved in `runs/tinygpt`:

- the baseline: the float32 checkpoint in module 18's engine, decoding without a cache
  (every step recomputes the whole context), module 17's fast kernels off;
- the optimized model: the same weights, optionally with MLP neurons pruned first
  (`--prune 0.25`), quantized (int8 per channel by default, or int4 in groups: `--bits 4
  --group-size 32`), decoding with the KV cache, fast kernels on;
- the events: latency of one greedy decode request (module 19's paired, interleaved runs:
  median, IQR, n, and the 95% interval of the ratio), throughput in tokens/s, the bytes of
  the arrays each model holds, and the exact validation loss over the whole split;
- the rule: the optimized model's validation loss at most 0.05 above the baseline's, or it
  is disqualified.

It prints the scoreboard, writes `submission.json` (default `runs/olympics/submission.json`)
with module 20's `write_submission` and checks it with the course's validator.

    tito milestone run olympics                       # runs/tinygpt, int8 + KV cache + fast kernels
    tito milestone run olympics --bits 4 --group-size 32
    tito milestone run olympics --prune 0.25          # a quarter of the MLP neurons removed first
    tito milestone run olympics --checkpoint DIR --out my/submission.json
    tito milestone run olympics --quick               # an untrained model, a few windows (tests)

Exit status: 0 qualified; 3 disqualified (the submission is still written, with
`"qualified": false`); 1 a run that stopped on a bad setting; 2 nothing to run (no
checkpoint, missing modules, bad arguments). A script can tell the verdict without reading
the scoreboard.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

from _common import cannot_load, console, need_tinytorch, needs, parser
from tito.course.checkpoints import save_pretrained
from tito.course.datasets import encode_splits, load_text, tiled_windows

DEFAULT_CHECKPOINT = Path("runs/tinygpt")
DEFAULT_OUT = Path("runs/olympics/submission.json")
PROMPT = "ROMEO:"
DISQUALIFIED = 3  # the exit status of a run whose loss rose by more than the rule allows


def arguments(argv=None):
    p = parser("Baseline against optimized TinyGPT, under MLPerf-style rules.")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help=f"a tinygpt checkpoint folder (default {DEFAULT_CHECKPOINT}; --quick "
                        "without it uses an untrained model)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"where to write the submission (default {DEFAULT_OUT})")
    p.add_argument("--bits", type=int, choices=(8, 4), default=8,
                   help="weight format of the optimized model (default 8)")
    p.add_argument("--group-size", type=int, default=32, help="int4 group size (default 32)")
    p.add_argument("--prune", type=float, default=0.0,
                   help="share of every block's MLP neurons to remove first (module 16's "
                        "structured pruning, no fine-tuning; default 0)")
    p.add_argument("--cache", choices=("dense", "paged", "none"), default="dense",
                   help="the optimized model's KV cache (default dense)")
    p.add_argument("--no-fast-kernels", action="store_true",
                   help="leave module 17's fast kernels off for the optimized model too")
    p.add_argument("--new-tokens", type=int, default=None,
                   help="tokens per decode request (default 56; --quick 24)")
    p.add_argument("--repeats", type=int, default=None, help="paired runs (default 10; --quick 5)")
    p.add_argument("--windows", type=int, default=None,
                   help="validation windows (default: the whole split, exact; --quick 32)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for NumPy's matrix products (default: all cores; --quick: 1); "
                        "on a busy machine 1 keeps a threaded BLAS from waiting on the others")
    return p.parse_args(argv)


def untrained_checkpoint(folder, seed):
    """An untrained milestone-sized TinyGPT saved as the tinygpt milestone saves it."""
    import tinytorch as tt
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.text.tokenization import CharTokenizer

    tokenizer = CharTokenizer.train(load_text())
    tt.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size))
    path = Path(folder) / "tinygpt-untrained"
    save_pretrained(path, model, {"chars": tokenizer.chars, "step": 0})
    return path


def no_checkpoint(path):
    console.print(
        f"[red]There is no TinyGPT checkpoint in {path}[/] (no config.json).\n"
        "  - Train one: `tito milestone run tinygpt` (about two minutes on two cores); it "
        f"saves to {DEFAULT_CHECKPOINT}.\n"
        "  - Or pass --checkpoint DIR (a folder that milestone wrote), or --quick for an "
        "untrained model (the events run, the figures mean little).")
    sys.exit(2)


def mib(nbytes):
    return f"{nbytes / 2**20:.2f} MiB"


def scoreboard(s, comparison):
    """The rich table: event, baseline, optimized, ratio with its interval, verdict."""
    b, o, d = s["baseline"], s["optimized"], s["derived"]
    low, high = d["speedup_ci"]
    t = Table(title="Olympics scoreboard", title_justify="left")
    for name, justify in (("event", "left"), ("baseline", "right"), ("optimized", "right"),
                          ("ratio (95% interval)", "right"), ("verdict", "left")):
        t.add_column(name, justify=justify)

    def latency(fig):
        lat = fig["latency"]
        return f"{lat['median'] * 1e3:.1f} ms (IQR {lat['iqr'] * 1e3:.1f}, n {lat['n']})"

    speed = f"{d['speedup']:.2f}x faster [{low:.2f}, {high:.2f}]"
    t.add_row(f"latency, {s['workload']['new_tokens']} new tokens", latency(b), latency(o),
              speed, comparison.verdict)
    t.add_row("throughput", f"{b['tokens_per_s']:.0f} tokens/s", f"{o['tokens_per_s']:.0f} "
              "tokens/s", speed, comparison.verdict)
    t.add_row("weight bytes", mib(b["weight_bytes"]), mib(o["weight_bytes"]),
              f"{d['size_ratio']:.2f}x smaller", "exact (no noise)" if d["size_ratio"] > 1
              else "not smaller")
    rule = s["rule"]
    t.add_row(f"val loss ({s['workload']['val_windows']:,} windows)", f"{b['val_loss']:.4f}",
              f"{o['val_loss']:.4f}", f"{d['loss_change']:+.4f}",
              f"within +{rule['max_loss_increase']}" if rule["qualified"]
              else f"[red]above +{rule['max_loss_increase']}[/]")
    return t


def main(argv=None):
    args = arguments(argv)
    need_tinytorch()
    with needs("modules 17-20 (the capstone imports acceleration, benchmarking, "
               "quantization, the KV cache)"):
        from tinytorch.capstone import run_olympics, validate_submission
        from tinytorch.models import load_model
    from tinytorch.perf.acceleration import set_blas_threads
    from tinytorch.text.tokenization import CharTokenizer

    if args.threads is None and args.quick:
        args.threads = 1  # a smoke test should not depend on how busy the other cores are
    if args.threads and not set_blas_threads(args.threads):
        console.print("[yellow]note:[/] could not find NumPy's OpenBLAS; --threads ignored")
    new_tokens = args.new_tokens or (24 if args.quick else 56)
    repeats = args.repeats or (5 if args.quick else 10)
    windows = args.windows or (32 if args.quick else None)
    if new_tokens < 1 or repeats < 1:
        console.print("[red]--new-tokens and --repeats must be at least 1[/]")
        sys.exit(2)

    with tempfile.TemporaryDirectory() as tmp:
        if args.checkpoint is None and args.quick:
            folder = untrained_checkpoint(tmp, args.seed)
            checkpoint = "untrained TinyGPT (--quick)"
        else:
            folder = args.checkpoint or DEFAULT_CHECKPOINT
            checkpoint = str(folder)
            if not (folder / "config.json").is_file():
                no_checkpoint(folder)
        with cannot_load(folder):
            model = load_model(folder)
        c = model.config
        info = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        chars = (info.get("tinytorch") or {}).get("chars")
        if c.model_type != "gpt2" or not chars:
            console.print(f"[red]{folder} is not a TinyGPT checkpoint[/] (a GPT-2 folder with "
                          "the character vocabulary under \"tinytorch\" in config.json, as "
                          "`tito milestone run tinygpt` writes)")
            sys.exit(2)
        tokenizer = CharTokenizer(chars)
        _, val_data = encode_splits(load_text(), tokenizer)
        block = c.max_position_embeddings
        x, y = tiled_windows(val_data, block, windows)
        prompt_ids = tokenizer.encode(PROMPT)
        room = block - len(prompt_ids) + 1
        if new_tokens > room:
            console.print(f"[dim]the context is {block} tokens: {room} new tokens after the "
                          f"prompt, not {new_tokens}[/]")
            new_tokens = room
        console.print(f"[bold]{checkpoint}[/]: {model.num_parameters():,} parameters, "
                      f"{c.num_hidden_layers} layers, width {c.hidden_size}, context {block}; "
                      f"validation: {len(x):,} windows "
                      f"({'the whole split, exact' if windows is None else 'a subset'})")
        fast = not args.no_fast_kernels
        kind = "int8 per-channel" if args.bits == 8 else f"int4 group {args.group_size}"
        pruned = f"{args.prune:.0%} of the MLP neurons pruned, " if args.prune else ""
        console.print(f"optimized: {pruned}{kind} weights, cache={args.cache}, fast kernels "
                      f"{'on' if fast else 'off'}; request: {PROMPT!r} + {new_tokens} greedy "
                      f"tokens, {repeats} paired runs")
        start = time.perf_counter()
        try:
            submission, comparison = run_olympics(
                lambda: load_model(folder), x, y, prompt_ids, new_tokens, args.out,
                checkpoint=checkpoint, bits=args.bits, group_size=args.group_size,
                cache=None if args.cache == "none" else args.cache, fast=fast, prune=args.prune,
                warmup=1 if args.quick else 2, repeats=repeats)
        except ValueError as error:  # a bad setting, or a submission the validator refused
            console.print(f"[red]The run stopped:[/] {error}")
            sys.exit(1)
        seconds = time.perf_counter() - start

    console.print(scoreboard(submission, comparison))
    techniques = ", ".join(
        f"{t['name']} ({', '.join(f'{k}={v}' for k, v in t['settings'].items())})"
        for t in submission["techniques"])
    console.print(f"techniques: {techniques}")
    validate_submission(args.out)  # the file on disk, as a grader would read it
    console.print(f"submission written to {args.out} and validated against the course's "
                  f"schema ({seconds:.1f} s for the events)")
    d, rule = submission["derived"], submission["rule"]
    if rule["qualified"]:
        console.print(f"[green bold]QUALIFIED[/]: {d['speedup']:.2f}x faster "
                      f"[{d['speedup_ci'][0]:.2f}, {d['speedup_ci'][1]:.2f}], "
                      f"{d['size_ratio']:.2f}x smaller, loss {d['loss_change']:+.4f} "
                      f"(allowed +{rule['max_loss_increase']})")
    else:
        console.print(f"[red bold]DISQUALIFIED[/]: the optimized model's validation loss rose "
                      f"by {d['loss_change']:+.4f}, more than the allowed "
                      f"+{rule['max_loss_increase']}; its speed and size do not count")
        return DISQUALIFIED
    return 0


if __name__ == "__main__":
    sys.exit(main())
