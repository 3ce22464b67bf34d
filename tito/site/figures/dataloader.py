"""Module 05 (DataLoader): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import INK, MUTED, Figure, canvas, narrow


def draw_epochs(fig):
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch import Tensor
    from tinytorch.data import DataLoader, TensorDataset

    data = TensorDataset(Tensor(np.arange(12, dtype=np.float32)))
    loader = DataLoader(data, batch_size=4, shuffle=True, seed=7)
    cmap = plt.get_cmap("tab20")

    def cell(ax, x, y, idx):
        ax.add_patch(
            Rectangle(
                (x, y),
                1.0,
                0.9,
                facecolor=cmap(int(idx) % 20),
                edgecolor=INK,
                linewidth=0.8,
                alpha=0.85,
            )
        )
        ax.text(x + 0.5, y + 0.45, str(int(idx)), ha="center", va="center", fontsize=9)

    if narrow(fig):  # the phone layout: an epoch per column, a batch per row
        ax = canvas(fig, (-0.4, 11.4), (0, 6.0))
        for b in range(3):
            ax.text(0.05, 4.25 - b * 1.5, f"batch {b}", fontsize=8, va="center", color=MUTED)
        for col, epoch in enumerate((0, 1)):
            x0 = 1.75 + col * 4.95
            ax.text(x0 + 2.15, 5.55, f"epoch {epoch}", ha="center", fontsize=9.5)
            for i, idx in enumerate(loader.order(epoch)):
                cell(ax, x0 + (i % 4) * 1.1, 3.8 - (i // 4) * 1.5, idx)
        return
    ax = canvas(fig, (0, 16), (0, 4.6))
    for row, epoch in enumerate((0, 1)):
        order = loader.order(epoch)
        y = 3.2 - row * 1.6
        ax.text(0.1, y + 0.45, f"epoch {epoch}", fontsize=9.5, va="center")
        for i, idx in enumerate(order):
            cell(ax, 1.9 + i * 1.1 + (i // 4) * 0.45, y, idx)
        for b in range(3):
            x = 1.9 + b * (4 * 1.1 + 0.45)
            ax.text(x + 2.2, y - 0.22, f"batch {b}", ha="center", fontsize=8, color=MUTED)
    ax.text(
        8,
        0.2,
        "order(epoch) = default_rng([seed, epoch]).permutation(12): the same for "
        "every run, and for a run resumed at any epoch",
        ha="center",
        fontsize=8.5,
        color=MUTED,
    )


FIGURES = [
    Figure(
        "dataloader",
        "epochs",
        "Twelve examples in batches of four over two epochs: the shuffle "
        "is fixed by the seed and the epoch.",
        "Two rows of twelve numbered cells, grouped in three batches; the "
        "order differs between epoch 0 and epoch 1.",
        draw_epochs,
        size=(8.0, 3.4),
        narrow=(4.2, 2.3),
    ),
]
