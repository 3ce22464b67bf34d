"""What every figure shares: the ``Figure`` record, the palette, matplotlib's settings, and
the boxes, arrows and blank canvases the diagrams are drawn with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...course.registry import Module


@dataclass(frozen=True)
class Figure:
    module: str  # the module's slug
    name: str
    caption: str
    alt: str
    draw: Callable  # draw(fig) on a matplotlib Figure; draw(fig, narrow=True) for phones
    size: tuple[float, float] = (8.0, 3.4)  # inches
    # The phone layout's size in inches (a taller drawing, its text legible at 390 px), or
    # None: the figure has one layout only.
    narrow: tuple[float, float] | None = None

    def path_for(self, m: Module, narrow: bool = False) -> str:
        return f"figures/{m.dirname}-{self.name}{'-narrow' if narrow else ''}.svg"


INK, MUTED, ACCENT = "#1f2328", "#6b7280", "#c2410c"
BLUE, GREEN, RED = "#0b5cad", "#15803d", "#b91c1c"
FILL = {
    "ink": "#f3f4f6",
    "accent": "#fff1e8",
    "blue": "#eaf2fb",
    "green": "#eef8ee",
    "red": "#fdecec",
}


def style():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",  # text stays text: searchable, small, crisp
            "svg.hashsalt": "tinytorch-site",  # stable ids
            "font.family": "DejaVu Sans",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.edgecolor": MUTED,
            "axes.titlesize": 11,
        }
    )


def box(ax, x, y, w, h, text, fill="ink", edge=INK, size=9.5, weight="normal"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=FILL.get(fill, fill),
            edgecolor=edge,
            linewidth=1.1,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size, color=INK, weight=weight)


def arrow(ax, start, end, color=INK, text="", side=0.0, style="-|>", ls="-"):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=11,
            color=color,
            linewidth=1.2,
            linestyle=ls,
            shrinkA=2,
            shrinkB=2,
        )
    )
    if text:
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        ax.text(
            mx + side,
            my,
            text,
            fontsize=8.5,
            color=color,
            ha="left" if side >= 0 else "right",
            va="center",
        )


def canvas(fig, xlim, ylim):
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
