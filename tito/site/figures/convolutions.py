"""Module 09 (Convolutions): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, BLUE, FILL, GREEN, INK, MUTED, RED, Figure, arrow, canvas, narrow


def draw_im2col(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch.core.convolutions import im2col

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)  # (N, C, H, W)
    cols = im2col(x, (3, 3))  # (N * OH * OW, kh * kw * C) = (4, 9)
    colors = [BLUE, ACCENT, GREEN, RED]
    fills = ["blue", "accent", "green", "red"]
    ax = canvas(fig, (-0.5, 17.5), (-1.4, 5.6))
    for i in range(4):
        for j in range(4):
            ax.add_patch(
                Rectangle((j, 3 - i), 1, 1, facecolor="#ffffff", edgecolor=INK, linewidth=0.8)
            )
            ax.text(j + 0.5, 3.5 - i, f"{x[0, 0, i, j]:g}", ha="center", va="center", fontsize=9)
    for w, (oi, oj) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        inset = 0.06 + 0.07 * w
        ax.add_patch(
            Rectangle(
                (oj + inset, 1 - oi + inset),
                3 - 2 * inset,
                3 - 2 * inset,
                fill=False,
                edgecolor=colors[w],
                linewidth=1.6,
            )
        )
    ax.text(2, 4.5, "x: (1, 1, 4, 4), four 3x3 windows", ha="center", fontsize=9.5)
    arrow(ax, (4.4, 2), (6.2, 2))
    ax.text(5.3, 2.3, "im2col", ha="center", fontsize=8.5)
    x0, cw = 6.6, 1.1
    for r in range(cols.shape[0]):
        for c in range(cols.shape[1]):
            ax.add_patch(
                Rectangle(
                    (x0 + c * cw, 3 - r),
                    cw,
                    1,
                    facecolor=FILL[fills[r]],
                    edgecolor=colors[r],
                    linewidth=0.8,
                )
            )
            ax.text(
                x0 + (c + 0.5) * cw,
                3.5 - r,
                f"{cols[r, c]:g}",
                ha="center",
                va="center",
                fontsize=9,
            )
    ax.text(
        x0 + 4.5 * cw, 4.5, f"cols: {cols.shape}, one row per window", ha="center", fontsize=9.5
    )
    if not narrow(fig):  # the phone layout leaves the footnote to the caption
        ax.text(
            8.5,
            -0.8,
            "Each window, flattened, becomes one row; the convolution is then one\n"
            "matrix product with the weight flattened in the same (kh, kw, C) order: "
            "(N * OH * OW, O).",
            ha="center",
            fontsize=8.5,
            color=MUTED,
        )


FIGURES = [
    Figure(
        "convolutions",
        "im2col",
        "im2col on a 4 by 4 image with a 3 by 3 kernel: values computed by your `im2col`.",
        "A 4 by 4 grid numbered 0 to 15 with four overlapping 3 by 3 "
        "windows outlined in four colours, and the 4 by 9 matrix "
        "im2col makes of it, one coloured row per window.",
        draw_im2col,
        size=(9.0, 3.6),
        windows=((-1.6, 5.9), (5.9, 17.5)),
    ),
]
