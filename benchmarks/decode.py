"""Decoding with module 18's engine against Hugging Face transformers, on one checkpoint.

    python benchmarks/decode.py            # Qwen2.5-0.5B-shaped checkpoint (~2 GB, written once)
    python benchmarks/decode.py --quick    # a tiny checkpoint, a few tokens (tests)
    python benchmarks/decode.py --threads 1 --skip batching   # one core each (busy machines)

Six measurements, printed with their ratios (nothing here is asserted):

1. decode tokens/s of five sides, each in its own subprocess, the sides taking turns round by
   round (the order rotates): TinyTorch in float32, int8 (per channel) and int4 (groups of
   128) (`tinytorch.models.load_model` with `ModelFeatures(kernels="fast",
   attention="fast", weights=...)`: module 17's compiled kernels, module 15's quantized
   weights; `--kernels plain` runs the lessons' NumPy code instead), transformers in float32
   (CPU, eager attention, its own DynamicCache) and transformers with PyTorch's own dynamic
   int8 quantization of every Linear (`torch.ao.quantization.quantize_dynamic`). Every
   decoded token's step time of every round is a sample; module 19's harness
   (`tinytorch.perf.benchmarking`) gives each side's median, each ratio with its 95%
   bootstrap interval and the verdict (tokens/s = 1 / median step), and the issue's targets
   are printed with them: float32 >= 1.2x transformers float32, int8 >= 2.5x and at or above
   PyTorch's int8, int4 >= 3.0x;
2. peak resident memory (ru_maxrss) of each serving process against the float32 bytes of
   the weights;
3. for the quantized sides: the weights' bytes, the distance of the logits from float32's on
   a fixed 64-token sequence (TinyTorch's formats from TinyTorch's float32, PyTorch's int8
   from transformers' float32), how many of its 64 next-token choices (argmax) agree, and
   how many of the 64 greedy tokens of the float32 decode do;
4. continuous batching (module 18's Engine) on the same checkpoint: total tokens/s of 1, 4
   and 8 concurrent requests against serving the same requests one after another, and the
   bytes of the paged pool;
5. the KV cache's speed-up over recomputing the whole prefix, 256 new tokens after a
   32-token prompt, on a smaller model (in this process);
6. the paged cache's bytes for a batch of unequal sequences against the dense cache's.

The checkpoint has random float32 weights of Qwen2.5-0.5B's shape (24 layers, hidden 896,
14 heads, 2 KV heads, intermediate 4864, vocabulary 151,936, tied embeddings), written with
module 08's `save_safetensors` into --folder (reused when it is already there). Threads:
`--threads N` (default 2, the issue's setting) for BLAS, numba and torch in every process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# BLAS threads are fixed when NumPy loads: set them (--threads, default 1) before importing it.
_THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "2"
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = _THREADS

import numpy as np  # noqa: E402

from _common import cpu_description  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

QWEN_05B = dict(model_type="qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                max_position_embeddings=32768, architectures=["Qwen2ForCausalLM"],
                dtype="float32", use_sliding_window=False)
QUICK = dict(QWEN_05B, vocab_size=1000, hidden_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, intermediate_size=256)
SIDES = ("tinytorch", "transformers", "int8", "int4", "torch-int8")
OURS = ("tinytorch", "int8", "int4")  # TinyTorch's sides; the others are PyTorch's
TARGETS = {"tinytorch": 1.2, "int8": 2.5, "int4": 3.0}  # x transformers float32 (issue 22)


def shapes(c):
    C, D = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * D
    out = {"model.embed_tokens.weight": (c["vocab_size"], C), "model.norm.weight": (C,)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                    p + "self_attn.q_proj.weight": (C, C), p + "self_attn.q_proj.bias": (C,),
                    p + "self_attn.k_proj.weight": (kv, C), p + "self_attn.k_proj.bias": (kv,),
                    p + "self_attn.v_proj.weight": (kv, C), p + "self_attn.v_proj.bias": (kv,),
                    p + "self_attn.o_proj.weight": (C, C),
                    p + "mlp.gate_proj.weight": (c["intermediate_size"], C),
                    p + "mlp.up_proj.weight": (c["intermediate_size"], C),
                    p + "mlp.down_proj.weight": (C, c["intermediate_size"])})
    return out


def random_tensors(c, seed=0):
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in shapes(c).items():
        if len(shape) == 1:
            base = 1.0 if name.endswith("norm.weight") else 0.0
            a = base + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            a = rng.standard_normal(shape, dtype=np.float32)
            a *= np.float32(1.0 if "embed" in name else 1.0 / np.sqrt(shape[1]))
        tensors[name] = a.astype(np.float32, copy=False)
    return tensors


def write_checkpoint(folder, c):
    from tinytorch.core.training import save_safetensors

    folder = Path(folder)
    if (folder / "config.json").is_file() and json.loads((folder / "config.json").read_text()) == c:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tensors = random_tensors(c)
    save_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    del tensors
    (folder / "config.json").write_text(json.dumps(c))
    size = (folder / "model.safetensors").stat().st_size
    print(f"wrote {folder} ({size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s")
    return folder


def prompt_of(prompt_len, seed=0):
    return np.random.default_rng(seed).integers(0, 1000, size=prompt_len).tolist()


SCORED = 64  # the fixed sequence whose logits the weight formats are compared on


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- one side, in its own process -----------------------------------------------------------
def worker(side, folder, prompt_len, new_tokens, threads, kernels="fast", logits_file=None):
    """Decode new_tokens greedy tokens after a prompt; step times, memory, tokens."""
    prompt = prompt_of(prompt_len)
    marks = []
    t0 = time.perf_counter()
    if side in OURS:
        from tinytorch.models import ModelFeatures, generate, load_model

        features = ModelFeatures(kernels=kernels, attention=kernels, group_size=128,
                                 weights="float32" if side == "tinytorch" else side)
        model = load_model(folder, features)
        load_s = time.perf_counter() - t0
        weight_bytes = model.nbytes()
        float32_bytes = 4 * model.num_parameters()
        model(np.asarray([prompt[:1]]))  # the one-token kernels loaded (or compiled) once
        if logits_file:  # logits of a fixed sequence, to compare the weight formats
            np.save(logits_file, model(np.asarray([prompt_of(SCORED, seed=2)]))[0])
        start = time.perf_counter()
        out = generate(model, prompt, new_tokens, temperature=0, cache="dense", stop_ids=(),
                       on_token=lambda step, ids: marks.append(time.perf_counter()))
        tokens = out[prompt_len:].tolist()
    else:
        import torch
        import transformers

        torch.set_num_threads(threads)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager").eval()
        weight_bytes = float32_bytes = 4 * sum(p.numel() for p in model.parameters())
        if side == "torch-int8":  # PyTorch's dynamic int8: every Linear, the tied head too
            import warnings

            from torch.ao.quantization import quantize_dynamic

            with warnings.catch_warnings():  # deprecated in favour of torchao, still shipped
                warnings.simplefilter("ignore")
                model = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            weight_bytes = torch_bytes(model)
        load_s = time.perf_counter() - t0
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0

        class Clock(transformers.LogitsProcessor):
            def __call__(self, input_ids, scores):
                marks.append(time.perf_counter())
                return scores

        with torch.no_grad():
            if logits_file:
                np.save(logits_file, model(torch.tensor([prompt_of(SCORED, seed=2)]))
                        .logits[0].numpy())
            start = time.perf_counter()
            ids = torch.tensor([prompt])
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, do_sample=False,
                                 logits_processor=[Clock()])
        tokens = out[0, prompt_len:].tolist()
    # marks[i]: the logits of new token i are ready. Decode speed: tokens 1.. after the first.
    steps = np.diff(marks)
    return {"side": side, "load_s": load_s, "prefill_s": marks[0] - start,
            "decode_tokens_per_s": len(steps) / float(steps.sum()),
            "median_step_ms": float(np.median(steps)) * 1e3, "steps_s": steps.tolist(),
            "peak_rss_bytes": peak_rss(), "weight_bytes": weight_bytes,
            "float32_bytes": float32_bytes, "tokens": tokens}


def torch_bytes(model):
    """Bytes of a dynamically quantized transformers model: its float parameters (the
    embedding, norms) and every quantized Linear's int8 weight (one byte each), scales and
    bias."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        if type(module).__name__ == "Linear" and callable(getattr(module, "weight", None)):
            weight = module.weight()  # a quantized tensor: int8 values and their scale(s)
            scales = (weight.q_per_channel_scales().numel()
                      if weight.qscheme() in (torch_per_channel_schemes()) else 1)
            total += weight.numel() + 4 * scales
            bias = module.bias()
            total += 0 if bias is None else bias.numel() * bias.element_size()
    return total


def torch_per_channel_schemes():
    import torch

    return (torch.per_channel_affine, torch.per_channel_symmetric)


def quantize_dynamic_available():
    try:
        from torch.ao.quantization import quantize_dynamic  # noqa: F401
    except ImportError:
        return False
    return True


def batching_worker(folder, prompt_len, new_tokens, counts, kernels="fast"):
    """Total tokens/s of N concurrent requests (the Engine) against one after another."""
    from tinytorch.models import Engine, ModelFeatures, generate, load_model

    model = load_model(folder, ModelFeatures(kernels=kernels, attention=kernels))
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 1000, size=int(rng.integers(prompt_len // 2, prompt_len + 1)))
               .tolist() for _ in range(max(counts))]
    generate(model, prompts[0][:4], 2, stop_ids=())  # touch the mapped weights once
    rows = []
    for n in counts:
        batch = prompts[:n]
        t0 = time.perf_counter()
        alone = [generate(model, p, new_tokens, cache="paged", page_size=16, stop_ids=())
                 [len(p):].tolist() for p in batch]
        one_by_one = time.perf_counter() - t0
        engine = Engine(model, max_batch=n, page_size=16, prefill_chunk=64)
        rids = [engine.add_request(p, max_new_tokens=new_tokens, stop_ids=()) for p in batch]
        t0 = time.perf_counter()
        out = engine.run()
        batched = time.perf_counter() - t0
        pool = sum(p.nbytes() for p in engine.pools)
        rows.append({"requests": n, "tokens": n * new_tokens,
                     "one_by_one_tokens_per_s": n * new_tokens / one_by_one,
                     "batched_tokens_per_s": n * new_tokens / batched,
                     "speedup": one_by_one / batched, "pool_bytes": pool,
                     "identical": all(out[r] == a for r, a in zip(rids, alone))})
    return {"rows": rows, "peak_rss_bytes": peak_rss(), "kv_bytes_per_token":
            model.config.kv_bytes_per_token()}


def thread_env(threads):
    n = str(threads)
    return {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "NUMBA_NUM_THREADS": n}


def run_worker(args, *extra):
    done = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), *extra],
                          capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO), **thread_env(args.threads)))
    if done.returncode:
        raise SystemExit(f"worker {extra} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.split("WORKER ", 1)[1].splitlines()[0])


def decode_worker(args, side, folder, new_tokens, logits_file=None):
    extra = ["--worker", side, "--folder", str(folder), "--prompt-len", str(args.prompt_len),
             "--new-tokens", str(new_tokens), "--kernels", args.kernels]
    return run_worker(args, *extra, *(["--logits-file", str(logits_file)] if logits_file else []))


# ---- in this process: the cache's speed-up and the paged cache's memory ---------------------
def small_model(c):
    from tinytorch.models import Config, ModelForCausalLM, WeightStore

    config = Config.from_dict(c)
    return ModelForCausalLM(config, WeightStore(random_tensors(c, seed=1)))


def cache_speedup(c, prompt_len, new_tokens):
    from tinytorch.models import generate

    model = small_model(c)
    prompt = list(range(1, prompt_len + 1))
    result, outputs = {}, {}
    for mode in ("dense", "paged", None):
        t0 = time.perf_counter()
        outputs[mode] = generate(model, prompt, new_tokens, temperature=0, cache=mode,
                                 page_size=64, stop_ids=()).tolist()
        result[str(mode)] = new_tokens / (time.perf_counter() - t0)
    same = outputs["dense"] == outputs["paged"] == outputs[None]
    return result, same


def paged_memory(c, lengths, page_size):
    model = small_model(c)
    ids = np.ones((len(lengths), max(lengths)), dtype=np.int64)
    out = {}
    for mode in ("dense", "paged"):
        cache = model.create_kv_cache(mode, page_size=page_size)
        model(ids, cache=cache, lengths=list(lengths), logits_to_keep=1)
        out[mode] = sum(layer_cache.nbytes() for layer_cache in cache)
    out["needed"] = sum(lengths) * model.config.kv_bytes_per_token()
    return out


def agreement(a, b):
    """(positions where two greedy sequences agree, length of their common prefix)."""
    same = [x == y for x, y in zip(a, b)]
    prefix = same.index(False) if False in same else len(same)
    return sum(same), prefix


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--folder", type=Path, default=None,
                   help="where the checkpoint is written (default: a folder in the temp dir)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds; in each, every side decodes once, in its own process")
    p.add_argument("--new-tokens", type=int, default=None)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--batch-tokens", type=int, default=None,
                   help="new tokens per request in the batching measurement (default 16)")
    p.add_argument("--skip", nargs="*", default=[],
                   choices=("transformers", "quantized", "torch-int8", "batching"),
                   help="leave out transformers (float32 and int8), the quantized decodes "
                        "(TinyTorch's and PyTorch's), PyTorch's int8 alone, and/or the "
                        "batching measurement")
    p.add_argument("--kernels", choices=("fast", "plain"), default="fast",
                   help="TinyTorch's sides: module 17's compiled kernels (fast, the default) "
                        "or the lessons' NumPy code (plain: module 15's int8 and int4 "
                        "products dequantize every weight on every call, about 30x slower)")
    p.add_argument("--threads", type=int, default=2,
                   help="BLAS, numba and torch threads in every process (default 2, the "
                        "issue's setting; on a shared, loaded machine a second thread waits "
                        "for a time slice at every product: pass 1 there)")
    p.add_argument("--worker", choices=SIDES + ("batching",))
    p.add_argument("--logits-file", default=None)
    p.add_argument("--counts", default="1,4,8")
    args = p.parse_args()
    if args.worker == "batching":
        counts = [int(n) for n in args.counts.split(",")]
        result = batching_worker(args.folder, args.prompt_len, args.new_tokens, counts,
                                 args.kernels)
        print("WORKER " + json.dumps(result))
        return
    if args.worker:
        result = worker(args.worker, args.folder, args.prompt_len, args.new_tokens, args.threads,
                        args.kernels, args.logits_file)
        print("WORKER " + json.dumps(result))
        return

    c = QUICK if args.quick else QWEN_05B
    rounds = args.rounds or (1 if args.quick else 3)
    new_tokens = args.new_tokens or (8 if args.quick else 64)
    batch_tokens = args.batch_tokens or (4 if args.quick else 16)
    folder = args.folder or Path(tempfile.gettempdir()) / (
        "tinytorch-decode-" + ("quick" if args.quick else "qwen2.5-0.5b-shape"))
    write_checkpoint(folder, c)
    sides = ["tinytorch", "transformers"]
    if "quantized" not in args.skip:
        sides += ["int8", "int4", "torch-int8"]
    torch_int8_note = None
    if "torch-int8" in sides and not quantize_dynamic_available():
        torch_int8_note = ("the installed PyTorch has no torch.ao.quantization.quantize_dynamic: "
                           "PyTorch's own int8 is not measured")
    if "transformers" in args.skip or "torch-int8" in args.skip or torch_int8_note:
        sides = [side for side in sides if side != "torch-int8"]
    if "transformers" in args.skip:
        sides.remove("transformers")
    print(f"checkpoint: {folder} ({'quick' if args.quick else 'Qwen2.5-0.5B'} shape, random "
          f"float32); prompt {args.prompt_len} tokens, {new_tokens} new tokens, greedy; "
          f"{args.threads} thread(s) per process (BLAS, numba, torch); TinyTorch's kernels: "
          f"{args.kernels}; {os.cpu_count()} CPUs ({cpu_description()}), shared with other "
          f"jobs (load average "
          f"{os.getloadavg()[0]:.1f})")
    if torch_int8_note:
        print(torch_int8_note)

    scratch = Path(tempfile.mkdtemp(prefix="decode-logits-"))
    runs = {side: [] for side in sides}
    for r in range(rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]  # the first side rotates
        for side in order:
            logits = scratch / f"{side}.npy" if r == 0 else None
            res = decode_worker(args, side, folder, new_tokens, logits)
            runs[side].append(res)
            print(f"  round {r + 1} {side:12s}: {res['decode_tokens_per_s']:7.2f} tokens/s "
                  f"(median step {res['median_step_ms']:.1f} ms), prefill "
                  f"{res['prefill_s'] * 1e3:.0f} ms, load {res['load_s']:.2f} s, peak RSS "
                  f"{res['peak_rss_bytes'] / 2**20:,.0f} MiB; load average "
                  f"{os.getloadavg()[0]:.1f}")
    from tinytorch.perf.benchmarking import Comparison

    def steps_of(side):
        return [t for run in runs[side] for t in run["steps_s"]]

    def compare(baseline, candidate):
        """tokens/s of candidate over baseline (= baseline's step / candidate's), its 95%
        interval and verdict, and the ratio of each round."""
        cmp = Comparison.from_samples(steps_of(baseline), steps_of(candidate),
                                      names=(baseline, candidate))
        rounds_ = [b["median_step_ms"] / a["median_step_ms"]
                   for a, b in zip(runs[candidate], runs[baseline])]
        return {"ratio": cmp.speedup, "ci": [1 / cmp.ci[1], 1 / cmp.ci[0]],
                "verdict": cmp.verdict, "per_round": rounds_,
                "tokens_per_s": 1 / cmp.candidate.median,
                "baseline_tokens_per_s": 1 / cmp.baseline.median}

    def shown(x):
        return (f"{x['ratio']:.2f}x [{x['ci'][0]:.2f}, {x['ci'][1]:.2f}], {x['verdict']} "
                f"(per round {', '.join(f'{v:.2f}' for v in x['per_round'])})")

    weights = runs["tinytorch"][0]["weight_bytes"]
    float32_tokens = runs["tinytorch"][0]["tokens"]
    rss = {s: max(r["peak_rss_bytes"] for r in rs) for s, rs in runs.items() if rs}
    best = {side: 1 / float(np.median(steps_of(side))) for side in sides}
    ratio = ci = verdict = agree = None
    per_round = []
    targets = {}
    if "transformers" in sides:
        float32 = compare("transformers", "tinytorch")
        ratio, ci, verdict, per_round = (float32["ratio"], tuple(float32["ci"]),
                                         float32["verdict"], float32["per_round"])
        agree = float32_tokens == runs["transformers"][0]["tokens"]
        met = ci[0] >= TARGETS["tinytorch"]
        targets["float32"] = {"target": TARGETS["tinytorch"], "ratio": ratio, "ci": list(ci),
                              "met": met}
        print(f"decode: tinytorch {best['tinytorch']:.2f} tokens/s, transformers "
              f"{best['transformers']:.2f} tokens/s (1 / median token step, {rounds} round(s)): "
              f"ratio {shown(float32)}; target >= {TARGETS['tinytorch']}x: "
              f"{'met' if met else 'NOT met'}; greedy tokens "
              f"{'identical' if agree else 'DIFFERENT'}")
        print(f"memory: float32 weights {weights / 2**20:,.0f} MiB; peak RSS tinytorch "
              f"{rss['tinytorch'] / 2**20:,.0f} MiB ({rss['tinytorch'] / weights:.2f}x the "
              f"weights), transformers {rss['transformers'] / 2**20:,.0f} MiB "
              f"({rss['transformers'] / weights:.2f}x)")
    else:
        print(f"decode (float32, transformers skipped): tinytorch {best['tinytorch']:.2f} "
              f"tokens/s; peak RSS {rss['tinytorch'] / 2**20:,.0f} MiB "
              f"({rss['tinytorch'] / weights:.2f}x the weights)")

    quantized = {}
    for side in ("int8", "int4", "torch-int8"):
        if side not in sides:
            continue
        res = dict(runs[side][0])
        reference_side = "transformers" if side == "torch-int8" else "tinytorch"
        reference = np.load(scratch / f"{reference_side}.npy")
        logits = np.load(scratch / f"{side}.npy")
        scale = float(np.abs(reference).max())
        diff = np.abs(logits - reference)
        reference_tokens = runs[reference_side][0]["tokens"]
        same, prefix = agreement(res["tokens"], reference_tokens)
        choices = int((logits.argmax(-1) == reference.argmax(-1)).sum())
        res.update(max_logit_error=float(diff.max()), mean_logit_error=float(diff.mean()),
                   logit_scale=scale, next_token_agree=choices, tokens_agree=same,
                   common_prefix=prefix, distinct_float32_tokens=len(set(reference_tokens)),
                   decode_tokens_per_s=best[side],
                   peak_rss_bytes=max(r["peak_rss_bytes"] for r in runs[side]))
        res.pop("steps_s")
        res["vs_float32"] = compare(reference_side, side)
        if "transformers" in sides and side != "torch-int8":
            res["vs_transformers"] = compare("transformers", side)
            met = res["vs_transformers"]["ci"][0] >= TARGETS[side]
            targets[side] = {"target": TARGETS[side], "ratio": res["vs_transformers"]["ratio"],
                             "ci": res["vs_transformers"]["ci"], "met": met}
        if side == "int8" and "torch-int8" in sides:
            res["vs_torch_int8"] = compare("torch-int8", "int8")
            targets["int8_vs_torch_int8"] = {
                "target": 1.0, "ratio": res["vs_torch_int8"]["ratio"],
                "ci": res["vs_torch_int8"]["ci"],
                "met": res["vs_torch_int8"]["verdict"] != "slower"}
        quantized[side] = res
        label = {"int8": "int8 (per channel)", "int4": "int4 (groups of 128)",
                 "torch-int8": "PyTorch int8 (quantize_dynamic, per tensor)"}[side]
        print(f"{label}: {res['decode_tokens_per_s']:.2f} tokens/s, "
              f"{shown(res['vs_float32'])} its framework's float32; weights "
              f"{res['weight_bytes'] / 2**20:,.0f} MiB ({res['weight_bytes'] / weights:.2f}x "
              f"float32), peak RSS {res['peak_rss_bytes'] / 2**20:,.0f} MiB "
              f"({res['peak_rss_bytes'] / weights:.2f}x the float32 weights), load "
              f"{res['load_s']:.1f} s; logits of a {SCORED}-token sequence differ from "
              f"{reference_side}'s float32 by {res['max_logit_error']:.3g} at most, "
              f"{res['mean_logit_error']:.3g} on average (largest |logit| {scale:.3g}); "
              f"next-token choices agreeing: {choices} of {SCORED} "
              f"({len(set(reference.argmax(-1).tolist()))} distinct); greedy tokens agreeing: "
              f"{same} of {len(reference_tokens)} (first {prefix} identical; float32's has "
              f"{len(set(reference_tokens))} distinct token(s))")
        if "vs_transformers" in res:
            print(f"  {side} against transformers float32: {shown(res['vs_transformers'])}; "
                  f"target >= {TARGETS[side]}x: {'met' if targets[side]['met'] else 'NOT met'}")
        if "vs_torch_int8" in res:
            print(f"  int8 against PyTorch's int8: {shown(res['vs_torch_int8'])}; target at or "
                  f"above it: {'met' if targets['int8_vs_torch_int8']['met'] else 'NOT met'}")

    batching = None
    if "batching" not in args.skip:
        counts = "1,2,3" if args.quick else "1,4,8"
        batching = run_worker(args, "--worker", "batching", "--folder", str(folder),
                              "--prompt-len", str(args.prompt_len), "--new-tokens",
                              str(batch_tokens), "--counts", counts, "--kernels", args.kernels)
        for row in batching["rows"]:
            print(f"batching, {row['requests']} request(s) x {batch_tokens} tokens (prompts of "
                  f"{args.prompt_len // 2}-{args.prompt_len}): one after another "
                  f"{row['one_by_one_tokens_per_s']:.2f} tokens/s, continuous batching "
                  f"{row['batched_tokens_per_s']:.2f} tokens/s ({row['speedup']:.2f}x); paged "
                  f"pool {row['pool_bytes'] / 2**20:.1f} MiB; tokens "
                  f"{'identical' if row['identical'] else 'DIFFERENT'}; load average "
                  f"{os.getloadavg()[0]:.1f}")

    small = dict(QWEN_05B, vocab_size=8192, hidden_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=768)
    if args.quick:
        small, sp_prompt, sp_new = QUICK, 8, 16
    else:
        sp_prompt, sp_new = 32, 256
    speed, same = cache_speedup(small, sp_prompt, sp_new)
    print(f"KV cache, {sp_new} tokens after a {sp_prompt}-token prompt "
          f"({small['num_hidden_layers']} layers, hidden {small['hidden_size']}): dense "
          f"{speed['dense']:.0f} tokens/s, paged {speed['paged']:.0f}, no cache "
          f"{speed['None']:.0f}: the cache is {speed['dense'] / speed['None']:.1f}x faster "
          f"(tokens {'identical' if same else 'DIFFERENT'})")

    lengths = (500, 30, 120, 8) if not args.quick else (40, 3, 12)
    mem = paged_memory(small, lengths, page_size=16)
    print(f"KV memory, batch of sequences {list(lengths)} tokens, pages of 16: dense "
          f"{mem['dense'] / 2**10:,.0f} KiB, paged {mem['paged'] / 2**10:,.0f} KiB "
          f"({mem['dense'] / mem['paged']:.2f}x less); the tokens need "
          f"{mem['needed'] / 2**10:,.0f} KiB")
    print("RESULT " + json.dumps({
        "tinytorch_tokens_per_s": best["tinytorch"], "transformers_tokens_per_s":
        best.get("transformers"), "ratio": ratio, "ratio_ci": ci and list(ci),
        "verdict": verdict,
        "ratio_per_round": per_round, "targets": targets, "threads": args.threads,
        "kernels": args.kernels, "torch_int8_note": torch_int8_note,
        "greedy_identical": agree,
        "weight_bytes": weights, "peak_rss_bytes": rss, "quantized": quantized,
        "batching": batching,
        "cache_tokens_per_s": speed, "cache_speedup": speed["dense"] / speed["None"],
        "kv_bytes": mem, "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
