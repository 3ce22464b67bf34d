"""Module 08 (Training): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, FILL, MUTED, Figure, narrow, panels


def draw_schedule(fig):
    from tinytorch.core.training import CosineWarmup

    sched = CosineWarmup(1e-3, 1e-4, 100, 2000)
    steps = list(range(0, 2201, 5))
    (ax,) = panels(fig, [[0.11, 0.16, 0.85, 0.74]])
    ax.plot(steps, [sched(s) * 1e3 for s in steps], color=ACCENT, linewidth=2)
    ax.axvspan(0, 100, color=FILL["accent"])
    ax.text(110, 0.95, "warm-up:\n100 steps", fontsize=8.5, color=ACCENT, va="top")
    ax.text(
        900 if narrow(fig) else 1600,
        0.55,
        "cosine decay to min_lr\nat total_steps = 2000",
        fontsize=8.5,
        color=MUTED,
    )
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate (×10⁻³)")
    ax.set_title("CosineWarmup(max_lr=1e-3, min_lr=1e-4, 100, 2000), evaluated by tinytorch")


FIGURES = [
    Figure(
        "training",
        "schedule",
        "The learning-rate schedule of the TinyGPT run: warm-up, then cosine decay.",
        "The learning rate rises linearly for 100 steps, then falls along a "
        "cosine to a tenth of its peak at step 2000.",
        draw_schedule,
        size=(8.0, 3.4),
        narrow=(4.2, 3.6),
    ),
]
