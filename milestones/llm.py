"""2023, open-weights LLMs: a Hugging Face checkpoint served by your own engine.

In 2023 Llama, Qwen and their relatives put the weights of capable language models in
everyone's hands, as a folder: `config.json` and safetensors files. Module 18 reads such a
folder with your code: module 08's safetensors reader, and a model built of your own layers
(module 11's embedding and rotary positions, module 12's attention, module 13's norms and
MLPs), wired by module 18's blocks, with its KV caches. This milestone streams the text with
its speed.

    tito milestone run llm --model DIR --prompt "Once upon a time"
    tito milestone run llm --model DIR --prompt-ids 9707,11,1879 --cache paged
    tito milestone run llm                           # your own TinyGPT, from runs/tinygpt
    tito milestone run llm --compare                 # the same prompt with each cache
    tito milestone run llm --requests 8              # 8 requests at once (continuous batching)

DIR is a checkpoint folder of a supported family (llama, qwen2, qwen3, qwen2_moe,
qwen3_moe, gpt2), for example one downloaded from the Hugging Face Hub with
`huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir qwen`. Without `--model`
it serves the TinyGPT that `tito milestone run tinygpt` trains and saves in GPT-2's layout
(`runs/tinygpt/config.json` + `model.safetensors`, with its character vocabulary).

Text needs a tokenizer: the character vocabulary of a TinyGPT folder, or the folder's
`tokenizer.json` read by module 10 (`load_hf_tokenizer`: GPT-2, Qwen2 and Llama 3 style
byte-level BPE). Without either, pass token ids with `--prompt-ids`; the ids are printed.

`--cache dense|paged|none`: the KV cache (module 18) or none (every step recomputes the
whole context, module 13's way); `--compare` runs all three and prints their tokens/s.
Generation stops at the checkpoint's end-of-sequence token (`config.json` or
`generation_config.json`) or after `--max-new-tokens`.

`--requests N` serves N requests at once with module 18's `Engine` (continuous batching
over the paged cache): the prompt N times, each sampled with its own seed (or greedy:
then all N are the same text), and prints each continuation and the total throughput.

`--weights int8|int4` and `--kernels fast` load the model with `ModelFeatures`: module 15's
quantized weights, module 17's kernels (each needs its module completed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from _common import cannot_load, console, need_tinytorch, needs, parser

DEFAULT_MODEL = Path("runs/tinygpt")


def arguments(argv=None):
    p = parser("Serve a Hugging Face checkpoint folder with your own tinytorch.")
    p.add_argument("--model", type=Path, default=None,
                   help=f"checkpoint folder (default: your TinyGPT in {DEFAULT_MODEL})")
    p.add_argument("--prompt", default=None, help="text to continue")
    p.add_argument("--prompt-ids", default=None, help="comma-separated token ids instead of text")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 100 (--quick: 8)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 for greedy")
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--cache", choices=("dense", "paged", "none"), default="dense")
    p.add_argument("--page-size", type=int, default=128, help="tokens per page (paged cache)")
    p.add_argument("--compare", action="store_true",
                   help="generate with each cache (dense, paged, none) and compare tokens/s")
    p.add_argument("--requests", type=int, default=None,
                   help="serve this many requests at once with the Engine (continuous batching)")
    p.add_argument("--weights", choices=("float32", "int8", "int4"), default="float32",
                   help="weight format: module 15's int8 (per channel) or int4 (groups of 128)")
    p.add_argument("--group-size", type=int, default=128, help="int4: weights per scale")
    p.add_argument("--kernels", choices=("plain", "fast"), default="plain",
                   help="fast: module 17's kernels")
    return p.parse_args(argv)


def find_tokenizer(folder):
    """(tokenizer or None, a sentence saying which) for a checkpoint folder."""
    from tinytorch.text import CharTokenizer

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    chars = (config.get("tinytorch") or {}).get("chars")
    if chars:
        return CharTokenizer(chars), f"its {len(chars)}-character vocabulary"
    if (folder / "tokenizer.json").is_file():
        import tinytorch.text as text

        try:
            load = text.load_hf_tokenizer  # module 10, Part 8
        except AttributeError:
            return None, ("its tokenizer.json, which your module 10 cannot read yet (complete "
                          "module 10's Part 8): pass --prompt-ids; the ids are printed")
        return load(folder / "tokenizer.json"), "its tokenizer.json (module 10)"
    return None, "no tokenizer (no character vocabulary, no tokenizer.json): pass --prompt-ids"


def no_checkpoint(folder):
    console.print(
        f"[red]There is no checkpoint in {folder}[/] (no config.json).\n"
        f"  - Train your TinyGPT: `tito milestone run tinygpt` (about 2,000 steps; "
        f"`--quick` makes a barely trained one in seconds). It saves to {DEFAULT_MODEL}.\n"
        "  - Or pass --model DIR, a Hugging Face checkpoint folder (config.json + "
        "*.safetensors) of a llama, qwen2, qwen3, qwen2_moe, qwen3_moe or gpt2 model.")
    sys.exit(2)


def run_once(model, prompt_ids, args, cache, tokenizer, stream=True):
    """Generate once; stream the text (or ids); returns (new ids, seconds to the first
    token, seconds for the rest)."""
    from tinytorch.models import generate

    shown = [""]
    new_ids = []
    marks = []

    def on_token(step, ids):
        marks.append(time.perf_counter())
        new_ids.append(int(ids[0]))
        if not stream:
            return
        if tokenizer is None:
            console.print(f"{int(ids[0])} ", end="", markup=False, highlight=False)
        else:
            text = tokenizer.decode(new_ids)
            if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                console.print(text[len(shown[0]):], end="", markup=False, highlight=False)
                shown[0] = text
        console.file.flush()

    start = time.perf_counter()
    generate(model, prompt_ids, args.max_new_tokens, temperature=args.temperature,
             top_k=args.top_k, top_p=args.top_p, seed=args.seed,
             cache=None if cache == "none" else cache, page_size=args.page_size,
             on_token=on_token)
    if stream:
        console.print()
    first = marks[0] - start
    rest = marks[-1] - marks[0]
    return new_ids, first, rest


def serve(model, prompt_ids, args, tokenizer):
    """N requests at once with the Engine: each continuation, then the throughput."""
    from tinytorch.models import Engine

    n = args.requests
    engine = Engine(model, max_batch=n, page_size=16)
    rids = [engine.add_request(prompt_ids, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_k=args.top_k,
                               top_p=args.top_p, seed=args.seed + i) for i in range(n)]
    console.print()
    start, steps, peak = time.perf_counter(), 0, 0
    while engine.waiting or engine.active:
        engine.step()
        steps += 1
        peak = max(peak, len(engine.active))
    seconds = time.perf_counter() - start
    total = 0
    for rid in rids:
        tokens = engine.results[rid]
        total += len(tokens)
        shown = tokenizer.decode(tokens) if tokenizer is not None else " ".join(map(str, tokens))
        console.print(f"[bold]request {rid}[/] ({len(tokens)} tokens): ", end="")
        console.print(shown, markup=False, highlight=False)
    pool = sum(p.nbytes() for p in engine.pools)
    console.print(f"served {n} requests at once ({peak} in the batch at most, {steps} engine "
                  f"steps): {total} new tokens in {seconds:.2f} s, {total / seconds:.1f} tokens/s "
                  f"in total; paged KV pool {pool / 2**20:.2f} MiB, every page back in the pool: "
                  f"{all(p.pages_in_use == 0 for p in engine.pools)}")


def main(argv=None):
    args = arguments(argv)
    need_tinytorch()
    with needs("module 18 (KV Caching and Serving)"):
        from tinytorch.models import ModelFeatures, load_model
    folder = args.model or DEFAULT_MODEL
    if not (folder / "config.json").is_file():
        no_checkpoint(folder)
    if args.max_new_tokens is None:
        args.max_new_tokens = 8 if args.quick else 100
    if args.max_new_tokens < 1:
        console.print("[red]--max-new-tokens must be at least 1[/]")
        sys.exit(2)

    if args.requests is not None and args.requests < 1:
        console.print("[red]--requests must be at least 1[/]")
        sys.exit(2)
    t0 = time.perf_counter()
    with cannot_load(folder):
        features = ModelFeatures(kernels=args.kernels, weights=args.weights,
                                 group_size=args.group_size)
        model = load_model(folder, features)
    c = model.config
    load_s = time.perf_counter() - t0
    params = model.num_parameters()
    console.print(f"[bold]{folder}[/]: {c.model_type}, {c.num_hidden_layers} layers, hidden "
                  f"{c.hidden_size}, {c.num_attention_heads} heads ({c.num_key_value_heads} KV), "
                  f"vocabulary {c.vocab_size:,}; {params:,} parameters, loaded "
                  f"(memory-mapped) in {load_s:.2f} s"
                  + ("" if features == ModelFeatures() else
                     f"; weights {args.weights} ({model.nbytes() / 2**20:,.1f} MiB), kernels "
                     f"{args.kernels}"))

    tokenizer, which = find_tokenizer(folder)
    console.print(f"tokenizer: {which}")
    if args.prompt_ids:
        try:
            prompt_ids = [int(t) for t in args.prompt_ids.replace(" ", "").split(",") if t]
        except ValueError:
            console.print(f"[red]--prompt-ids must be comma-separated integers, got "
                          f"{args.prompt_ids!r}[/]")
            sys.exit(2)
    elif tokenizer is None:
        console.print("[red]No tokenizer for text prompts:[/] pass --prompt-ids 1,2,3")
        sys.exit(2)
    else:
        text = args.prompt if args.prompt is not None else ("ROMEO:" if c.model_type == "gpt2"
                                                            else "Once upon a time")
        try:
            prompt_ids = tokenizer.encode(text)
        except ValueError as error:
            console.print(f"[red]Cannot encode the prompt:[/] {error}")
            sys.exit(2)
        console.rule(f"prompt: {text!r}")
        console.print(text, end="", markup=False, highlight=False)
    if not prompt_ids or max(prompt_ids) >= c.vocab_size or min(prompt_ids) < 0:
        console.print(f"[red]prompt ids must be in [0, {c.vocab_size}), got {prompt_ids}[/]")
        sys.exit(2)

    if c.model_type == "gpt2":  # learned positions: prompt and new tokens share n_positions
        room = c.max_position_embeddings - len(prompt_ids) + 1
        if room < 1:
            console.print(f"[red]The prompt has {len(prompt_ids)} tokens; this model's context "
                          f"is {c.max_position_embeddings} (n_positions): shorten it.[/]")
            sys.exit(2)
        if args.max_new_tokens > room:
            console.print(f"[dim]its context is {c.max_position_embeddings} tokens (GPT-2's "
                          f"learned positions), so {room} new tokens after the prompt, not "
                          f"{args.max_new_tokens}[/]")
            args.max_new_tokens = room
    if args.requests:
        serve(model, prompt_ids, args, tokenizer)
        return
    caches = ("dense", "paged", "none") if args.compare else (args.cache,)
    results = {}
    for i, cache in enumerate(caches):
        if i:
            console.rule(f"cache={cache}")
        new_ids, first, rest = run_once(model, prompt_ids, args, cache, tokenizer)
        n = len(new_ids)
        speed = (n - 1) / rest if n > 1 and rest > 0 else float("nan")
        results[cache] = (new_ids, speed)
        console.print(f"[dim]cache={cache}: prompt of {len(prompt_ids)} tokens + first token in "
                      f"{first * 1e3:.0f} ms; then {n - 1} tokens at {speed:.1f} tokens/s[/]")
    if args.compare:
        base = results["none"][1]
        for cache, (ids, speed) in results.items():
            same = "same tokens" if ids == results["dense"][0] else "different tokens"
            console.print(f"  {cache:5s}: {speed:8.1f} tokens/s  ({speed / base:5.1f}x no cache, "
                          f"{same})")
    kv = c.kv_bytes_per_token()
    console.print(f"KV cache: {kv / 1024:.1f} KiB per token ({c.num_hidden_layers} layers x 2 x "
                  f"{c.num_key_value_heads} KV heads x {c.head_dim} x 4 bytes)")


if __name__ == "__main__":
    main()
