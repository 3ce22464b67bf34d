"""Module 02 (Activations): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, GREEN, INK, MUTED, Figure, panels


def draw_activations(fig):
    import numpy as np

    from tinytorch import Tensor, nn

    x = np.linspace(-4, 4, 321, dtype=np.float32)
    ax, ax2 = panels(fig, [[0.08, 0.14, 0.6, 0.78], [0.76, 0.14, 0.22, 0.78]])
    for name, fn, color in (
        ("ReLU", nn.relu, INK),
        ("GELU", nn.gelu, ACCENT),
        ("SiLU", nn.silu, GREEN),
        ("Sigmoid", nn.sigmoid, BLUE),
        ("Tanh", nn.tanh, "#7c3aed"),
    ):
        ax.plot(x, fn(Tensor(x)).data, color=color, label=name, linewidth=1.6)
    ax.axhline(0, color=MUTED, linewidth=0.6)
    ax.axvline(0, color=MUTED, linewidth=0.6)
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    ax.set_ylim(-1.2, 4.1)
    ax.legend(frameon=False, loc="upper left")
    ax.set_title("Your activations, evaluated by tinytorch")
    big = np.array([-1000, -100, -10, 0, 10, 100, 1000], dtype=np.float32)
    with np.errstate(over="ignore"):
        naive = 1 / (1 + np.exp(-big))
    ax2.axis("off")
    stable = nn.sigmoid(Tensor(big)).data
    ax2.text(0.0, 1.0, "sigmoid in float32", fontsize=9.5, weight="bold", va="top")
    for head, x0 in (("x", 0.0), ("stable", 0.33), ("textbook", 0.68)):
        ax2.text(x0, 0.9, head, fontsize=8, color=MUTED, va="top")
    for i, v in enumerate(big):
        y = 0.8 - i * 0.085
        for text, x0 in ((f"{v:g}", 0.0), (f"{stable[i]:.3g}", 0.33), (f"{naive[i]:.3g}", 0.68)):
            ax2.text(x0, y, text, fontsize=8, va="top")
    ax2.text(
        0.0,
        0.0,
        "e^1000 overflows to inf\n(NumPy warns); the stable\nform never does.",
        fontsize=8,
        color=MUTED,
        va="bottom",
    )


FIGURES = [
    Figure(
        "activations",
        "curves",
        "The activations of this module, and why sigmoid must be written stably.",
        "Curves of ReLU, GELU, SiLU, sigmoid and tanh from -4 to 4, and a "
        "table of sigmoid at plus and minus 1000 where the textbook form "
        "overflows.",
        draw_activations,
        size=(8.0, 3.4),
        narrow=(4.2, 7.0),
    ),
]
