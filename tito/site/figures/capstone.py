"""Module 20 (Capstone): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, FILL, MUTED, RED, Figure, panels


def draw_capstone_events(fig):
    import numpy as np

    from tinytorch.capstone import quantize_weights, weight_nbytes
    from tinytorch.models.llm import Config, ModelForCausalLM, WeightStore, generate

    C, L, V, P = 128, 4, 65, 64  # the tinygpt milestone's shape
    config = Config.from_dict(
        dict(model_type="gpt2", vocab_size=V, n_embd=C, n_layer=L, n_head=4, n_positions=P),
        "figure",
    )

    def model():
        rng = np.random.default_rng(0)
        shapes = {
            "transformer.wte.weight": (V, C),
            "transformer.wpe.weight": (P, C),
            "transformer.ln_f.weight": (C,),
            "transformer.ln_f.bias": (C,),
        }
        for i in range(L):
            p = f"transformer.h.{i}"
            for n in ("ln_1", "ln_2"):
                shapes[f"{p}.{n}.weight"] = shapes[f"{p}.{n}.bias"] = (C,)
            for n, s in (
                ("attn.c_attn", (C, 3 * C)),
                ("attn.c_proj", (C, C)),
                ("mlp.c_fc", (C, 4 * C)),
                ("mlp.c_proj", (4 * C, C)),
            ):
                shapes[f"{p}.{n}.weight"], shapes[f"{p}.{n}.bias"] = s, s[1:]
        tensors = {k: (0.02 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
        return ModelForCausalLM(config, WeightStore(tensors, "figure"))

    class Counting:  # the engine, counting the positions each call processes
        def __init__(self, inner):
            self.inner, self.config, self.calls = inner, inner.config, []

        def create_kv_cache(self, *args, **kwargs):
            return self.inner.create_kv_cache(*args, **kwargs)

        def __call__(self, ids, **kwargs):
            self.calls.append(np.asarray(ids).shape[-1])
            return self.inner(ids, **kwargs)

    prompt, new = list(range(6)), 56
    work = {}
    for cache in (None, "dense"):
        counting = Counting(model())
        generate(counting, prompt, new, temperature=0.0, cache=cache)
        work[cache] = counting.calls
    ax1, ax2 = panels(fig, [[0.08, 0.17, 0.4, 0.68], [0.6, 0.17, 0.38, 0.68]])
    steps = np.arange(1, new + 1)
    ax1.bar(
        steps,
        work[None],
        color=FILL["red"],
        edgecolor=RED,
        linewidth=0.4,
        label=f"no cache: {sum(work[None]):,} positions in all",
    )
    ax1.bar(
        steps,
        work["dense"],
        color=BLUE,
        width=0.5,
        label=f"KV cache: {sum(work['dense']):,} positions in all",
    )
    ax1.set_xlabel("decoding step (6-token prompt, 56 new tokens)")
    ax1.set_ylabel("positions run through the model")
    ax1.set_title("decode work per step")
    ax1.legend(frameon=False, loc="upper left", fontsize=8.5)

    rows = []
    for label, bits in (("float32", None), ("int8\nper channel", 8), ("int4\ngroup 32", 4)):
        m = model()
        if bits:
            quantize_weights(m, bits=bits, group_size=32)
        blocks = 0
        for block in m.layers:
            for layer in (block.self_attn.qkv, block.self_attn.proj, block.mlp.fc, block.mlp.proj):
                w = layer.weight  # a Parameter (float32) or a QuantizedWeight
                blocks += w.data.nbytes if bits is None else (w.qweight.nbytes + w.scale.nbytes)
        rows.append((label, weight_nbytes(m), blocks))
    x = np.arange(len(rows))
    mib = 2**20
    ax2.bar(x, [b / mib for _, _, b in rows], color=ACCENT, label="block weights (+ scales)")
    ax2.bar(
        x,
        [(t - b) / mib for _, t, b in rows],
        bottom=[b / mib for _, _, b in rows],
        color=FILL["ink"],
        edgecolor=MUTED,
        linewidth=0.6,
        label="embeddings, norms, biases (float32)",
    )
    for i, (_, total, _) in enumerate(rows):
        ax2.text(
            i,
            total / mib,
            f"{total / mib:.2f} MiB\n{rows[0][1] / total:.2f}x smaller"
            if i
            else f"{total / mib:.2f} MiB",
            ha="center",
            va="bottom",
            fontsize=8.5,
        )
    ax2.set_xticks(x)
    ax2.set_xticklabels([r[0] for r in rows], fontsize=8.5)
    ax2.set_ylabel("bytes held, MiB (weight_nbytes)")
    ax2.set_ylim(0, rows[0][1] / mib * 1.3)
    ax2.set_title("the TinyGPT's arrays, by format")
    ax2.legend(frameon=False, loc="upper right", fontsize=8)


FIGURES = [
    Figure(
        "capstone",
        "events",
        "What the optimized TinyGPT changes: the positions each decoding step runs through the "
        "model without and with the KV cache (counted around module 18's `generate`), and the "
        "bytes your `weight_nbytes` counts in each weight format.",
        "Left, bars rising from 6 to 61 positions per step without the cache, 1,876 in all, "
        "against a first bar of 6 and then bars of 1 with the cache, 61 in all; right, stacked "
        "bars of bytes held: float32 3.09 MiB, int8 0.86 MiB, int4 group 32 0.56 MiB, the "
        "float32 embeddings and norms a small constant part of each.",
        draw_capstone_events,
        size=(9.6, 3.6),
        narrow=(4.2, 7.6),
    ),
]
