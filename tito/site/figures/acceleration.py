"""Module 17 (Acceleration): its figures, each with its caption and alt text."""

from __future__ import annotations

from functools import cache

from .drawing import ACCENT, BLUE, Figure, panels


@cache
def _measure(B, H, D, lengths):
    """Time and bytes kept, with the fast kernels off and on: measured once per drawing, so
    the wide and the phone layout show the same run."""
    import numpy as np

    from tinytorch import Tensor
    from tinytorch.core.attention import scaled_dot_product_attention
    from tinytorch.perf.acceleration import fast_kernels
    from tinytorch.testing import best_time

    rows = {False: ([], []), True: ([], [])}  # on -> (ms, MiB kept)
    for T in lengths:
        rng = np.random.default_rng(T)
        q, k, v = (
            Tensor(rng.standard_normal((B, H, T, D)).astype(np.float32), requires_grad=True)
            for _ in range(3)
        )
        grad = Tensor(rng.standard_normal((B, H, T, D)).astype(np.float32))
        for on in (False, True):
            with fast_kernels(on):
                ctx = scaled_dot_product_attention(q, k, v, is_causal=True)._ctx
                kept = list(ctx.inputs) + [ctx.output, ctx.params["keep"]] + list(ctx.saved or ())
                nbytes = sum(a.nbytes for a in {id(a): a for a in kept}.values())

                def step():
                    (scaled_dot_product_attention(q, k, v, is_causal=True) * grad).sum().backward()

                rows[on][0].append(best_time(step, repeat=5) * 1e3)
                rows[on][1].append(nbytes / 2**20)
    return rows


def draw_attention_keep(fig):
    from matplotlib.ticker import FuncFormatter

    B, H, D = 4, 4, 32
    lengths = (16, 32, 64, 128, 256)
    rows = _measure(B, H, D, lengths)
    labels = {False: "recompute P (module 12)", True: "keep P (module 17)"}
    colors = {False: BLUE, True: ACCENT}
    axes = panels(fig, [[0.08, 0.16, 0.39, 0.64], [0.58, 0.16, 0.39, 0.64]], tall=0.06)
    for i, (title, ylabel) in enumerate(
        (
            ("forward + backward time (log scale)", "ms"),
            ("bytes the record keeps for backward", "MiB"),
        )
    ):
        ax = axes[i]
        for on in (False, True):
            ax.plot(lengths, rows[on][i], marker="o", color=colors[on], label=labels[on])
        ax.set_xscale("log", base=2)
        if i == 0:
            ax.set_yscale("log")
            # plain numbers: a 10^k label sets its exponent in a smaller type
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xticks(lengths)
        ax.set_xticklabels([str(t) for t in lengths])
        ax.set_xlabel("context length T")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if i == 0:
            ax.legend(frameon=False, loc="upper left")
    fig.suptitle(
        f"Causal attention, batch {B}, {H} heads of {D}: measured by `tito site figures`",
        fontsize=10,
        y=0.99,
    )


FIGURES = [
    Figure(
        "acceleration",
        "attention-keep",
        "Keeping the attention probabilities for backward against "
        "recomputing them: time and bytes against the context length, "
        "measured on the machine that drew the figure.",
        "Left, two rising lines of forward-plus-backward milliseconds "
        "against T from 16 to 256, the keeping kernel below the "
        "recomputing one; right, the bytes each record keeps: the "
        "recomputing one grows linearly with T, the keeping one "
        "quadratically, pulling away at long contexts.",
        draw_attention_keep,
        size=(9.6, 3.4),
        narrow=(4.2, 7.6),
    ),
]
