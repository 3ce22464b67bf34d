"""Module 04 (Losses): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, RED, Figure, narrow, panels


def draw_cross_entropy(fig):
    import numpy as np

    from tinytorch import Tensor, nn

    scale = np.linspace(0, 120, 241, dtype=np.float32)
    base = np.array([1.0, -0.5, 0.25, -1.0], dtype=np.float32)
    stable, naive = [], []
    for s in scale:
        logits = (base * s)[None, :]
        stable.append(nn.cross_entropy(Tensor(logits), np.array([1])).item())
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(logits)
            naive.append(float(-np.log(e[0, 1] / e.sum())))
    naive = np.array(naive)
    (ax,) = panels(fig, [[0.1, 0.16, 0.86, 0.74]])
    ax.plot(scale, stable, color=BLUE, linewidth=2, label="your cross_entropy (log-sum-exp)")
    ok = np.isfinite(naive)
    ax.plot(
        scale[ok],
        naive[ok],
        color=ACCENT,
        linestyle="--",
        linewidth=1.6,
        label="-log(softmax) in float32",
    )
    first_bad = scale[~ok][0] if (~ok).any() else None
    if first_bad is not None:
        ax.axvline(first_bad, color=RED, linewidth=0.8)
        ax.text(
            first_bad - 1.5 if narrow(fig) else first_bad + 1.5,
            max(stable) * 0.55,
            f"from scale {first_bad:g}: exp overflows,\nthe textbook loss is inf or nan",
            color=RED,
            fontsize=8.5,
            ha="right" if narrow(fig) else "left",
        )
    ax.set_xlabel("logit scale s (logits = s · [1, -0.5, 0.25, -1], target class 1)")
    ax.set_ylabel("loss")
    ax.legend(frameon=False, loc="upper left")
    ax.set_title("A wrong, confident prediction: the loss should grow linearly with s")


FIGURES = [
    Figure(
        "losses",
        "stable-cross-entropy",
        "Cross-entropy of one confidently wrong prediction as its logits "
        "grow: computed stably, and the textbook way in float32.",
        "A straight rising line for the stable loss; the textbook loss follows "
        "it and then stops where exp overflows.",
        draw_cross_entropy,
        size=(8.0, 3.4),
        narrow=(4.2, 4.0),
    ),
]
