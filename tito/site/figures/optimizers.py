"""Module 07 (Optimizers): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, GREEN, MUTED, Figure, panels


def draw_optimizer_paths(fig):
    import numpy as np

    from tinytorch import Tensor
    from tinytorch.optim import SGD, Adam

    def path(make, steps=60):
        p = Tensor(np.array([-4.0, 2.0], dtype=np.float32), requires_grad=True)
        opt = make([p])
        points = [p.data.copy()]
        for _ in range(steps):
            opt.zero_grad()
            loss = (p * p * Tensor(np.array([0.05, 1.0], dtype=np.float32))).sum()
            loss.backward()
            opt.step()
            points.append(p.data.copy())
        return np.array(points)

    (ax,) = panels(fig, [[0.08, 0.14, 0.9, 0.76]])
    gx, gy = np.meshgrid(np.linspace(-4.5, 1, 200), np.linspace(-2.5, 2.5, 120))
    ax.contour(gx, gy, 0.05 * gx**2 + gy**2, levels=12, colors="#d1d5db", linewidths=0.7)
    for label, make, color in (
        ("SGD lr=0.9", lambda ps: SGD(ps, lr=0.9), MUTED),
        ("SGD momentum 0.9, lr=0.1", lambda ps: SGD(ps, lr=0.1, momentum=0.9), BLUE),
        ("Adam lr=0.3", lambda ps: Adam(ps, lr=0.3), ACCENT),
    ):
        pts = path(make)
        ax.plot(
            pts[:, 0],
            pts[:, 1],
            marker="o",
            markersize=2.5,
            linewidth=1.2,
            color=color,
            label=label,
        )
    ax.plot([0], [0], marker="*", color=GREEN, markersize=12)
    ax.set_xlabel("w1 (gentle direction)")
    ax.set_ylabel("w2 (steep direction)")
    ax.legend(frameon=False, loc="lower right", fontsize=8.5)
    ax.set_title("60 steps of your optimizers on L = 0.05·w1² + w2² (minimum: the star)")


FIGURES = [
    Figure(
        "optimizers",
        "paths",
        "SGD, SGD with momentum and Adam on a narrow valley, run with your optimizers.",
        "Three paths on elliptical contours from (-4, 2) toward the minimum "
        "at the origin: plain SGD zigzags, momentum and Adam move along the "
        "valley.",
        draw_optimizer_paths,
        size=(8.0, 3.4),
        narrow=(4.2, 4.0),
    ),
]
