"""Quantized TinyGPT: bytes actually held and the exact validation loss, float32 vs int8 vs int4.

Loads a trained checkpoint of the `tinygpt` milestone (`tito milestone run tinygpt`), and for
each format quantizes a fresh copy of the model with module 15's `quantize_model` (the tied
`lm_head` stays float32, as it is the embedding), then reports:

- the bytes the model holds (`model_nbytes`: the sum of `nbytes` of every array it keeps),
  and the bytes of the quantized Linear weights with their scales against their float32 bytes;
- the exact validation loss: every window of the validation split, with the milestone's own
  `split_loss` and `tiled_windows`;
- whether each target is met: int8 per-channel at most +0.01 loss and 26% of the bytes,
  int4 group 32 at most +0.05 and 16%.

Then int8 activations (W8A8, int32 accumulation), calibrated by min/max and by a percentile,
on the first `--act-windows` validation windows (NumPy's integer matrix product has no BLAS,
so the whole split would take minutes), against float32 on the same windows. A size-vs-loss
plot is written to `--plot`.

Last, speed: one token (one row) through single layers of a Qwen2.5-0.5B-sized model (its
MLP's (4864, 896) and (896, 4864) weights; `--lm-head` adds the 151,936 x 896 LM head),
timed with module 19's harness: float32 BLAS against module 15's NumPy forward (dequantize,
then multiply) and module 17's compiled kernels (QuantizedMatMulCompiled, reading the int8
or packed int4 weights as they are), in int8 per-channel and int4 group 128. Module 17's
kernels compile on first use (numba's cache keeps them); that first call is not timed.

    .venv/bin/python benchmarks/quantization.py --checkpoint runs/tinygpt
    .venv/bin/python benchmarks/quantization.py --quick     # untrained model, 24 windows (tests)
    .venv/bin/python benchmarks/quantization.py --speed-only --lm-head   # the speed table only
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import tinytorch as tt
from tinytorch.perf.acceleration import keep_freed_memory
from tinytorch.perf.quantization import (
    QuantizedLinear,
    calibrate,
    linear_weight_nbytes,
    model_nbytes,
    quantize_model,
)
from tito.course.checkpoints import load_pretrained, save_pretrained
from tito.course.datasets import encode_splits, load_text, split_loss, tiled_windows

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

FORMATS = (  # label, bits, group size, (max loss increase, max share of float32 bytes)
    ("float32", None, None, None),
    ("int8 per-channel", 8, None, (0.01, 0.26)),
    ("int4 group 128", 4, 128, None),
    ("int4 group 64", 4, 64, None),
    ("int4 group 32", 4, 32, (0.05, 0.16)),
)


def load_model(path):
    """(model, tokenizer) from a tinygpt checkpoint: the one place that reads the file format.

    The milestone writes a Hugging Face GPT-2 folder (config.json + model.safetensors); a
    `.npz` file from an earlier version of the milestone is read too.
    """
    from tinytorch.text.tokenization import CharTokenizer

    path = Path(path)
    if path.suffix == ".npz":
        from tinytorch.models.transformer import load_gpt

        model, _, extra = load_gpt(path)
    else:
        model, extra = load_pretrained(path.parent if path.is_file() else path)
    return model, CharTokenizer(extra["chars"])


def open_checkpoint(args, folder):
    """The checkpoint path of a run: an untrained one saved into `folder` with --quick, else
    --checkpoint; None (after saying how to make one) when there is none."""
    path = quick_checkpoint(folder) if args.quick else Path(args.checkpoint)
    if not path.exists():
        print(f"no checkpoint at {path}: train one with `tito milestone run tinygpt` "
              "(or pass --checkpoint)")
        return None
    return path


def quick_checkpoint(folder):
    """An untrained milestone-sized GPT saved as the milestone saves it (for --quick)."""
    from tinytorch.models.transformer import GPT, GPTConfig
    from tinytorch.text.tokenization import CharTokenizer

    tokenizer = CharTokenizer.train(load_text())
    tt.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size))
    path = Path(folder) / "tinygpt"
    save_pretrained(path, model, {"chars": tokenizer.chars, "step": 0})
    return path


def quantized_share(model, head_bytes, float_bytes):
    """Bytes of the replaced Linear weights (with scales) over their float32 bytes."""
    return (linear_weight_nbytes(model) - head_bytes) / float_bytes


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    markers = "osD^vPX*"
    for row, marker in zip(rows, markers):
        ax.scatter(row["model_bytes"] / 2**20, row["val_loss"], s=50, marker=marker,
                   label=f"{row['format']}: {row['model_bytes'] / 2**20:.2f} MiB, "
                         f"{row['val_loss']:.4f}")
    ax.set_xscale("log")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("model bytes held (MiB, log scale)")
    ax.set_ylabel("validation loss (whole split)")
    ax.set_title("TinyGPT: size against loss, round-to-nearest quantization")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


SPEED_SHAPES = ((4864, 896), (896, 4864))  # Qwen2.5-0.5B's MLP: gate/up, and down
LM_HEAD = (151_936, 896)


def speed_table(shapes, repeats=20):
    """Seconds per token (one row) of x @ W.T for each weight shape and format."""
    import numpy as np

    from tinytorch.core.autograd import KERNELS
    from tinytorch.perf.acceleration import QuantizedMatMulCompiled
    from tinytorch.perf.benchmarking import Benchmark
    from tinytorch.perf.quantization import QuantizedMatMul, quantize_int4, quantize_int8

    rng = np.random.default_rng(0)
    bench = Benchmark(warmup=2, repeats=repeats)
    rows = []
    for out_f, in_f in shapes:
        w = (rng.standard_normal((out_f, in_f)) * 0.02).astype(np.float32)
        x = tt.Tensor(rng.standard_normal((1, in_f)).astype(np.float32))
        q8, s8 = quantize_int8(w, axis=0)[:2]
        q4, s4 = quantize_int4(w, 128)
        entries = [("float32 BLAS", w.nbytes, lambda x=x, w=w: x.data @ w.T)]
        for label, (qw, sc, bits, group) in (("int8", (q8, s8, 8, None)),
                                             ("int4 g128", (q4, s4, 4, 128))):
            def op(x=x, qw=qw, sc=sc, bits=bits, group=group):
                return QuantizedMatMul.apply(x, qweight=qw, scale=sc, bits=bits, group_size=group)

            def compiled(op=op):
                KERNELS[QuantizedMatMul] = QuantizedMatMulCompiled
                try:
                    return op()
                finally:
                    KERNELS.pop(QuantizedMatMul, None)

            held = qw.nbytes + sc.nbytes
            entries += [(f"{label} NumPy (module 15)", held, op),
                        (f"{label} compiled (module 17)", held, compiled)]
        base = None
        for label, nbytes, fn in entries:
            m = bench.run(fn)
            base = base or m.median
            rows.append({"shape": [out_f, in_f], "format": label, "bytes": nbytes,
                         "seconds": m.median, "iqr": m.iqr, "vs_float32": m.median / base})
    return rows


def print_speed(rows):
    print("\none token (one row) through one layer, x @ W.T, median of module 19's harness "
          "(lower is faster; the ratio is against float32 BLAS on the same shape):")
    print(f"  {'weight (out, in)':18s} {'format':28s} {'weight MiB':>10s} {'ms/token':>9s} "
          f"{'vs float32':>10s} {'GB/s':>6s}")
    for r in rows:
        print(f"  {tuple(r['shape'])!s:18s} {r['format']:28s} {r['bytes'] / 2**20:10.1f} "
              f"{r['seconds'] * 1e3:9.3f} {r['vs_float32']:9.2f}x "
              f"{r['bytes'] / r['seconds'] / 1e9:6.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "runs" / "tinygpt"),
                   help="a tinygpt milestone checkpoint (default runs/tinygpt)")
    p.add_argument("--windows", type=int, default=None,
                   help="validation windows (default: the whole split, exact)")
    p.add_argument("--act-windows", type=int, default=128,
                   help="validation windows for the int8-activation rows (default 128)")
    p.add_argument("--plot", default=str(ROOT / "runs" / "quantization" / "size_vs_loss.png"))
    p.add_argument("--quick", action="store_true",
                   help="an untrained model and 24 windows: a smoke test")
    p.add_argument("--speed-only", action="store_true",
                   help="only the one-token speed table (no checkpoint needed)")
    p.add_argument("--lm-head", action="store_true",
                   help="add the 151,936 x 896 LM head to the speed table (about 1 GB of RAM)")
    args = p.parse_args()
    keep_freed_memory()
    shapes = SPEED_SHAPES + ((LM_HEAD,) if args.lm_head else ())
    if args.quick:
        shapes = ((512, 128), (128, 512))
    if args.speed_only:
        speed = speed_table(shapes)
        print_speed(speed)
        print("RESULT " + json.dumps({"speed": speed}))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        path = open_checkpoint(args, tmp)
        if path is None:
            return 2
        model, tokenizer = load_model(path)
        fresh = lambda: load_model(path)[0]  # noqa: E731  a float32 copy per format
        _, val_data = encode_splits(load_text(), tokenizer)
        windows = 24 if args.quick else args.windows
        act_windows = 8 if args.quick else args.act_windows
        block = model.config.block_size
        x, y = tiled_windows(val_data, block, windows)
        print(f"{path}: {model.num_parameters():,} parameters; {len(x):,} validation windows of "
              f"{block} ({'the whole split' if windows is None else 'a subset'})")

        head = model.lm_head.weight.data.nbytes
        float_linear = linear_weight_nbytes(model) - head
        rows = []
        for label, bits, group, target in FORMATS:
            m = fresh()
            if bits:
                quantize_model(m, bits=bits, group_size=group or 32)
            start = time.perf_counter()
            loss = split_loss(m, tt, x, y)
            seconds = time.perf_counter() - start
            rows.append({"format": label, "model_bytes": model_nbytes(m),
                         "linear_share": quantized_share(m, head, float_linear),
                         "val_loss": loss, "seconds": seconds, "target": target})
        base = rows[0]["val_loss"]
        print(f"\n{'format':18s} {'model bytes':>12s} {'vs float32':>10s} {'Linear W':>9s} "
              f"{'val loss':>9s} {'change':>8s} {'eval s':>7s}  target")
        verdicts = {}
        for r in rows:
            delta = r["val_loss"] - base
            note = ""
            if r["target"]:
                max_delta, max_share = r["target"]
                ok = delta <= max_delta and r["linear_share"] <= max_share
                verdicts[r["format"]] = ok
                note = (f"{'met' if ok else 'MISSED'} (loss <= +{max_delta}, "
                        f"Linear W <= {max_share:.0%})")
            print(f"{r['format']:18s} {r['model_bytes']:12,d} "
                  f"{r['model_bytes'] / rows[0]['model_bytes']:10.1%} {r['linear_share']:9.1%} "
                  f"{r['val_loss']:9.4f} {delta:+8.4f} {r['seconds']:7.1f}  {note}")
        for r in rows:
            if r["target"] and not verdicts[r["format"]]:
                print(f"\n{r['format']} misses its target with round-to-nearest: "
                      f"{r['val_loss'] - base:+.4f} loss, {r['linear_share']:.1%} of the bytes. "
                      "What would close it: smaller groups (more scales, more bytes), an "
                      "asymmetric zero point per group, or error-correcting rounding "
                      "(GPTQ, AWQ) calibrated on training text.")

        # Which layers carry the int4 error: one layer at a time in int4 group 32, the rest
        # float32, on the first --act-windows windows.
        xs, ys = x[:act_windows], y[:act_windows]
        sub_base = split_loss(model, tt, xs, ys)
        names = quantize_model(fresh(), bits=4, group_size=32)
        print(f"\nint4 group 32 one layer at a time (the others float32), first {len(xs)} "
              "validation windows:")
        sensitivity = {}
        for name in names:
            m = fresh()
            quantize_model(m, bits=4, group_size=32, skip=[n for n in names if n != name]
                           + ["lm_head"])
            sensitivity[name] = split_loss(m, tt, xs, ys) - sub_base
        worst = sorted(sensitivity, key=sensitivity.get, reverse=True)
        for name in worst[:4]:
            print(f"  {name:22s} {sensitivity[name]:+.4f}")
        print(f"  (the other {len(names) - 4} layers: {min(sensitivity.values()):+.4f} to "
              f"{sensitivity[worst[4]]:+.4f}; sum of all {sum(sensitivity.values()):+.4f})")
        m = fresh()  # the most sensitive layer in int8, by hand; the rest int4 group 32
        quantize_model(m, bits=4, group_size=32, skip=("lm_head", worst[0]))
        parent_name, child = worst[0].rsplit(".", 1)
        parent = dict(m.named_modules())[parent_name]
        setattr(parent, child, QuantizedLinear.from_linear(getattr(parent, child), bits=8))
        mixed = {"format": f"int4 g32, {worst[0]} int8", "model_bytes": model_nbytes(m),
                 "linear_share": quantized_share(m, head, float_linear),
                 "val_loss": split_loss(m, tt, x, y)}
        print(f"whole split, {mixed['format']}: val loss {mixed['val_loss']:.4f} "
              f"({mixed['val_loss'] - base:+.4f}), {mixed['model_bytes']:,} bytes, Linear W "
              f"{mixed['linear_share']:.1%}")

        xa, ya = x[:act_windows], y[:act_windows]
        calib = tiled_windows(
            encode_splits(load_text(), tokenizer)[0], block, 16)[0]
        act_rows = [("float32", None), ("int8 weights only", None),
                    ("W8A8 min/max", "minmax"), ("W8A8 percentile 99.99", "percentile")]
        print(f"\nint8 activations (int32 accumulation), first {len(xa)} validation windows; "
              "scales calibrated on 16 training windows")
        act = {}
        for label, method in act_rows:
            m = fresh()
            if label != "float32":
                quantize_model(m, bits=8)
            if method:
                calibrate(m, [calib], method=method, percentile=99.99)
            act[label] = split_loss(m, tt, xa, ya)
            print(f"  {label:24s} val loss {act[label]:.4f} ({act[label] - act['float32']:+.4f})")

        plot(rows + [mixed], args.plot)
        print(f"\nsize-vs-loss plot: {args.plot}")
        speed = speed_table(shapes, repeats=5 if args.quick else 20)
        print_speed(speed)
        result = {"rows": [{k: v for k, v in r.items() if k != "target"} for r in rows],
                  "targets_met": verdicts, "activations": act, "sensitivity": sensitivity,
                  "mixed": mixed, "speed": speed}
        print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
