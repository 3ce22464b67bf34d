"""Module 15 (Quantization): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, MUTED, Figure, narrow, panels


def draw_quant_grid(fig):
    import numpy as np

    from tinytorch.perf.quantization import (
        dequantize_int4,
        dequantize_int8,
        quantize_int4,
        quantize_int8,
    )

    w = np.linspace(-1, 1, 400, dtype=np.float32)[None, :]  # one row, max |w| = 1
    q8, s8, z8 = quantize_int8(w)
    w8 = dequantize_int8(q8, s8, z8)
    p4, s4 = quantize_int4(w, group_size=400)
    w4 = dequantize_int4(p4, s4, group_size=400)
    ax1, ax2 = panels(fig, [[0.1, 0.16, 0.37, 0.7], [0.58, 0.16, 0.4, 0.7]])
    ax1.plot(w[0], w[0], color=MUTED, linewidth=0.8, linestyle="--", label="float32")
    ax1.step(
        w[0],
        w4[0],
        where="mid",
        color=ACCENT,
        linewidth=1.4,
        label=f"int4: 15 steps of {float(s4.ravel()[0]):.3f}",
    )
    ax1.step(
        w[0],
        w8[0],
        where="mid",
        color=BLUE,
        linewidth=1.0,
        label=f"int8: 255 steps of {float(s8):.4f}",
    )
    ax1.set_xlabel("weight w")
    ax1.set_ylabel("dequantized weight")
    ax1.set_title("scale = max|w| / 127 (int8), / 7 (int4)")
    ax1.legend(frameon=False, loc="upper left", fontsize=8.5)

    rng = np.random.default_rng(0)
    m = (rng.standard_normal((256, 256)) * rng.uniform(0.2, 2.0, (256, 1))).astype(np.float32)

    def rel(back):  # relative RMS error of the dequantized matrix
        return float(np.sqrt(np.mean((back - m) ** 2) / np.mean(m**2)))

    errors = {
        "int8\nper tensor": rel(dequantize_int8(*quantize_int8(m))),
        "int8\nper row": rel(dequantize_int8(*quantize_int8(m, axis=0), axis=0)),
    }
    for g in (128, 32):
        packed, scales = quantize_int4(m, group_size=g)
        group = f"g{g}" if narrow(fig) else f"group {g}"
        errors[f"int4\n{group}"] = rel(dequantize_int4(packed, scales, group_size=g))
    x = np.arange(len(errors))
    bars = ax2.bar(x, [100 * e for e in errors.values()], color=[BLUE, BLUE, ACCENT, ACCENT])
    for bar, e in zip(bars, errors.values()):
        ax2.text(
            bar.get_x() + bar.get_width() / 2,
            100 * e,
            f"{100 * e:.1f}%",
            ha="center",
            va="bottom",
            fontsize=8.5,
        )
    ax2.set_xticks(x)
    ax2.set_xticklabels(list(errors), fontsize=8.5)
    ax2.set_ylabel("relative RMS error, %")
    ax2.set_title("a (256, 256) matrix whose rows differ in scale")


FIGURES = [
    Figure(
        "quantization",
        "grid",
        "The int8 and int4 grids of your quantizers, and the error they "
        "leave on a random weight matrix (computed by "
        "`tito site figures`).",
        "Left, staircases of dequantized against original weights from "
        "-1 to 1: int4 has 15 coarse steps, int8 255 fine ones. Right, "
        "bars of relative error: int8 per tensor and per row under 2%, "
        "int4 in groups of 128 and 32 about 10%.",
        draw_quant_grid,
        size=(9.0, 3.6),
        narrow=(4.2, 7.2),
    ),
]
