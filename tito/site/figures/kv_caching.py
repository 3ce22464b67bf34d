"""Module 18 (KV Caching and Serving): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import ACCENT, FILL, INK, MUTED, Figure, narrow


def draw_kv_layout(fig):
    import numpy as np
    from matplotlib.patches import Rectangle

    from tinytorch.models.llm import TinyKvFullCache, TinyKvPagedCache, TinyKvPagedPool

    lengths, page = [29, 6, 14, 3], 8
    dense = TinyKvFullCache()  # one layer's caches
    paged = TinyKvPagedCache(TinyKvPagedPool(page_size=page))
    for cache in (dense, paged):
        cache.reserve(lengths)
        kv = np.ones((len(lengths), 1, max(lengths), 4), np.float32)
        cache.update(kv, kv)
    S = dense.keys.shape[2]  # slots per row of the dense array
    ax = fig.add_axes([0, 0, 1, 1])  # not canvas(): cells are taller than wide here
    ax.set_xlim(-3.5, 68)
    ax.set_ylim(-1.6, 7.4)
    ax.axis("off")
    w = 0.95
    ax.text(0, 6.7, f"dense: one (B, S = {S}) array, {dense.nbytes()} bytes", fontsize=9.5)
    for b, n in enumerate(dense.lengths):
        y = 5.2 - 1.25 * b
        ax.text(-0.3, y + 0.45, f"row {b}", fontsize=8, ha="right", va="center", color=MUTED)
        for s in range(S):
            used = s < n
            ax.add_patch(
                Rectangle(
                    (s * w, y),
                    w,
                    0.9,
                    facecolor=FILL["blue"] if used else "#ffffff",
                    edgecolor=INK if used else MUTED,
                    linewidth=0.5,
                    linestyle="-" if used else (0, (2, 2)),
                )
            )
    x0 = 34
    ax.text(x0, 6.7, f"paged: pages of {page} slots, {paged.nbytes()} bytes", fontsize=9.5)
    for b, table in enumerate(paged.tables):
        y = 5.2 - 1.25 * b
        n = int(paged.lengths[b])
        for j, pid in enumerate(table):
            for s in range(page):
                used = j * page + s < n
                ax.add_patch(
                    Rectangle(
                        (x0 + (j * page + s) * w, y),
                        w,
                        0.9,
                        facecolor=FILL["accent"] if used else "#ffffff",
                        edgecolor=INK if used else MUTED,
                        linewidth=0.5,
                        linestyle="-" if used else (0, (2, 2)),
                    )
                )
            ax.text(
                x0 + (j * page + page / 2) * w,
                y + 0.45,
                f"page {pid}",
                fontsize=7,
                ha="center",
                va="center",
                color=ACCENT,
            )
    if not narrow(fig):  # the phone layout leaves the footnote to the caption
        ax.text(
            32,
            -0.6,
            f"Sequences of {lengths} tokens. Dashed slots are allocated but hold no "
            "token:\nthe dense cache pads every row to the longest, the paged one wastes at most "
            "the end of each row's last page.",
            ha="center",
            va="center",
            fontsize=8.5,
            color=MUTED,
        )


FIGURES = [
    Figure(
        "kv_caching",
        "kv-layout",
        "The keys and values of four unequal sequences in your dense "
        "cache and in your paged cache (sizes measured by their "
        "`nbytes()`).",
        "Left, four rows of 29 slots each, filled to 29, 6, 14 and 3 "
        "tokens, the rest dashed and wasted; right, the same rows as "
        "page tables of 8-slot pages, only the last page of each row "
        "partly empty.",
        draw_kv_layout,
        size=(10.0, 3.2),
        windows=((-3.5, 32.5), (32.5, 68.5)),
    ),
]
