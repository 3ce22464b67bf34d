"""Module 12 (Attention): its figures, each with its caption and alt text."""

from __future__ import annotations

from functools import cache

from .drawing import ACCENT, MUTED, Figure, panels


def draw_attention_matrix(fig):
    import numpy as np

    from tinytorch import nn

    rng = np.random.default_rng(0)
    t = 10
    q = rng.standard_normal((1, 1, t, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, t, 16)).astype(np.float32)
    weights = nn.attention_weights(q, k, is_causal=True)[0, 0]
    mask = nn.causal_mask(t)
    ax1, ax2 = panels(fig, [[0.05, 0.14, 0.38, 0.72], [0.53, 0.14, 0.42, 0.72]], right=0.86)
    ax1.imshow(mask, cmap="Greys", vmin=-0.3, vmax=1.6)
    ax1.set_title("causal_mask(10): True = may attend")
    image = ax2.imshow(weights, cmap="Oranges", vmin=0, vmax=1)
    ax2.set_title("attention weights: each row sums to 1")
    for ax in (ax1, ax2):
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
        ax.set_xticks(range(0, t, 3))
        ax.set_yticks(range(0, t, 3))
    fig.colorbar(image, ax=ax2, fraction=0.045, pad=0.03)


@cache
def _peaks(b, h, d, lengths):
    """Peak memory of forward + backward per length: measured once per drawing."""
    import tracemalloc

    import numpy as np

    from tinytorch import Tensor, nn

    rng = np.random.default_rng(0)
    peaks = []
    for t in lengths:
        q, k, v = (
            Tensor(rng.standard_normal((b, h, t, d)).astype(np.float32), requires_grad=True)
            for _ in range(3)
        )
        tracemalloc.start()
        out = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    return peaks


def draw_attention_memory(fig):

    lengths = [128, 256, 512, 1024, 2048]
    b, h, d = 1, 4, 32
    peaks = _peaks(b, h, d, tuple(lengths))
    table = [b * h * t * t * 4 / 2**20 for t in lengths]
    (ax,) = panels(fig, [[0.11, 0.16, 0.85, 0.74]])
    ax.plot(
        lengths,
        peaks,
        marker="o",
        color=ACCENT,
        linewidth=1.8,
        label="measured peak, forward + backward (tracemalloc)",
    )
    ax.plot(lengths, table, linestyle="--", color=MUTED, label="one (B, H, T, T) float32 table")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(t) for t in lengths])
    ticks = [0.25, 1, 4, 16, 64, 256]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("MiB")
    ax.legend(frameon=False, loc="upper left")
    ax.set_title(f"Your attention, B={b}, H={h}, head dim {d}: doubling T quadruples the memory")


FIGURES = [
    Figure(
        "attention",
        "matrix",
        "The causal mask and the attention weights it leaves: a lower triangle.",
        "Two 10 by 10 grids: the mask is a lower triangle of True; the weights are "
        "zero above the diagonal and each row sums to one.",
        draw_attention_matrix,
        size=(8.4, 3.6),
        narrow=(4.2, 7.6),
    ),
    Figure(
        "attention",
        "memory",
        "Measured: peak memory of your attention's forward and backward against "
        "sequence length (drawn by `tito site figures`).",
        "A log-log plot: measured peak memory rises fourfold per doubling of the "
        "sequence length, parallel to the size of one T by T table.",
        draw_attention_memory,
        size=(8.0, 4.2),
        narrow=(4.2, 4.2),
    ),
]
