"""Module 16 (Compression): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, INK, MUTED, Figure, panels


def draw_pruning_mask(fig):
    import numpy as np

    from tinytorch import manual_seed
    from tinytorch.core.layers import Linear
    from tinytorch.perf.compression import magnitude_mask

    manual_seed(0)
    w = Linear(24, 12).weight.data  # (out, in) = (12, 24)
    mask = magnitude_mask(w, 0.5)
    threshold = float(np.abs(w)[mask].min())  # the smallest magnitude that survives
    bound = float(np.abs(w).max())
    ax1, ax2, ax3 = panels(
        fig, [[0.03, 0.2, 0.3, 0.62], [0.36, 0.2, 0.3, 0.62], [0.73, 0.2, 0.25, 0.62]]
    )
    ax1.imshow(w, cmap="RdBu_r", vmin=-bound, vmax=bound)
    ax1.set_title(f"Linear(24, 12).weight {w.shape}", fontsize=9.5)
    ax2.imshow(np.where(mask, w, np.nan), cmap="RdBu_r", vmin=-bound, vmax=bound)
    ax2.set_title(f"magnitude_mask(w, 0.5): {int((~mask).sum())} of {w.size} zeroed", fontsize=9.5)
    for ax in (ax1, ax2):
        ax.set_xticks([])
        ax.set_yticks([])
    bins = np.linspace(0, bound, 25)
    ax3.hist(np.abs(w)[~mask], bins=bins, color=MUTED, label="pruned")
    ax3.hist(np.abs(w)[mask], bins=bins, color=ACCENT, label="kept")
    ax3.axvline(threshold, color=INK, linewidth=1, linestyle="--")
    ax3.set_xlabel("|w|")
    ax3.set_ylabel("weights")
    ax3.legend(frameon=False, fontsize=8.5)
    ax3.set_title(f"threshold |w| = {threshold:.3f}", fontsize=9.5)


FIGURES = [
    Figure(
        "compression",
        "pruning-mask",
        "Magnitude pruning of one layer at 50%: the mask your "
        "`magnitude_mask` computes, and where it cuts.",
        "Left, a 12 by 24 weight heatmap in red and blue; middle, the same "
        "weights with the half of smallest magnitude blanked out, "
        "scattered over the matrix; right, a histogram of |w| split at "
        "one threshold into pruned (grey) and kept (orange).",
        draw_pruning_mask,
        size=(9.6, 3.2),
        narrow=(4.2, 9.0),
    ),
]
