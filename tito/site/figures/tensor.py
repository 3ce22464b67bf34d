"""Module 01 (Tensor): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import FILL, INK, MUTED, Figure, canvas, narrow


def draw_broadcasting(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch import Tensor

    a = Tensor(np.arange(3, dtype=np.float32).reshape(3, 1) * 10)
    b = Tensor(np.arange(4, dtype=np.float32).reshape(1, 4))
    c = (a + b).data
    ax = canvas(fig, (0, 15.5), (0, 5.2))

    def grid(x0, values, real_rows, real_cols, title):
        rows, cols = values.shape
        for i in range(rows):
            for j in range(cols):
                real = i < real_rows and j < real_cols
                fill = FILL["blue"] if real else "#ffffff"
                ax.add_patch(
                    Rectangle(
                        (x0 + j, 3.6 - i),
                        1,
                        1,
                        facecolor=fill,
                        edgecolor=INK if real else MUTED,
                        linestyle="-" if real else (0, (2, 2)),
                        linewidth=1,
                    )
                )
                ax.text(
                    x0 + j + 0.5,
                    4.1 - i,
                    f"{values[i, j]:g}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color=INK if real else MUTED,
                )
        ax.text(x0 + cols / 2, 4.95, title, ha="center", fontsize=9.5, color=INK)

    grid(0.3, np.repeat(a.data, 4, axis=1), 3, 1, "a: shape (3, 1)")
    ax.text(4.75, 3.1, "+", fontsize=16, ha="center", va="center")
    grid(5.4, np.repeat(b.data, 3, axis=0), 1, 4, "b: shape (1, 4)")
    ax.text(9.85, 3.1, "=", fontsize=16, ha="center", va="center")
    grid(10.5, c, 3, 4, "a + b: shape (3, 4)")
    if not narrow(fig):  # the phone layout leaves the footnote to the caption
        ax.text(
            7.75,
            0.45,
            "Dashed cells are never stored: a size-1 axis is read again for every "
            "index of the other operand.",
            ha="center",
            fontsize=8.5,
            color=MUTED,
        )


FIGURES = [
    Figure(
        "tensor",
        "broadcasting",
        "Broadcasting (3, 1) + (1, 4): values computed by your `Tensor`.",
        "Three grids: a column of 0, 10, 20 plus a row of 0 to 3 gives a 3 by 4 "
        "table; stretched cells are dashed, as they are never stored.",
        draw_broadcasting,
        size=(8.0, 3.4),
        windows=((0, 9.6), (9.6, 15.5)),
    ),
]
