"""Module 11 (Embeddings): its figures, each with its caption and alt text."""

from __future__ import annotations

from .drawing import Figure, panels


def draw_sinusoidal(fig):
    from tinytorch import nn

    table = nn.sinusoidal_encoding(64, 64)
    table = getattr(table, "data", table)
    (ax,) = panels(fig, [[0.1, 0.15, 0.78, 0.75]], right=0.86)
    image = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="upper")
    ax.set_xlabel("feature (pairs of sin and cos, fast waves on the left)")
    ax.set_ylabel("position")
    ax.set_title("sinusoidal_encoding(64, 64): one row per position, nothing learned")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)


FIGURES = [
    Figure(
        "embeddings",
        "sinusoidal",
        "Sinusoidal position encodings: every position gets a distinct pattern of waves.",
        "A 64 by 64 heatmap of positions against features; stripes are "
        "narrow on the left (fast waves) and wide on the right.",
        draw_sinusoidal,
        size=(8.0, 3.4),
        narrow=(4.2, 4.2),
    ),
]
