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
    draw: Callable  # draw(fig) on a matplotlib Figure (or SubFigure)
    size: tuple[float, float] = (8.0, 3.4)  # inches
    # The phone layout (its text legible at 390 px), one of: ``narrow``, its size in inches,
    # for a figure whose draw() stacks its panels when ``narrow(fig)`` (see ``panels``); or
    # ``windows``, for a diagram on one canvas: x ranges of the canvas, of equal width, shown
    # one above the other.
    narrow: tuple[float, float] | None = None
    windows: tuple[tuple[float, float], ...] = ()

    @property
    def has_narrow(self) -> bool:
        return bool(self.narrow or self.windows)

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


# ---- the width a figure is shown at ------------------------------------------------------------
# The page column is 752 CSS px wide at 1280 px (47rem) and 358 px on a 390 px phone; a
# figure narrower than its column is shown at its own size (96 px an inch). Its text must be
# at least 11 px wide-screen and 10 px on the phone (tests/test_site_browser.py measures it).
COLUMN_PX = {False: 740.0, True: 350.0}  # a little under the column: rounding, borders
MIN_TEXT_PX = {False: 11.0, True: 10.0}
NARROW_WIDTH = 4.2  # inches: a phone layout is drawn this wide
NEWLINE = "\n"


def narrow(fig) -> bool:
    """Is ``fig`` (a figure or subfigure) being drawn in its phone layout?"""
    return bool(getattr(fig, "tt_narrow", False) or getattr(fig.figure, "tt_narrow", False))


def min_points(width_in: float, is_narrow: bool) -> float:
    """The smallest font size, in points, that shows at the minimum size in CSS pixels."""
    shown = min(COLUMN_PX[is_narrow], width_in * 96)
    return MIN_TEXT_PX[is_narrow] * 72 * width_in / shown + 0.05


def enforce_text_size(fig, width_in: float, is_narrow: bool) -> None:
    """Raise every text of ``fig`` below the minimum to it, and wrap the titles of a phone
    layout to its width."""
    import textwrap

    from matplotlib.text import Text

    least = min_points(width_in, is_narrow)
    fig.canvas.draw()  # tick labels exist only once the figure has been drawn
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < least:
            text.set_fontsize(least)
    if is_narrow:
        for ax in fig.get_axes():
            for text, width in ((ax.title, 44), (ax.xaxis.label, 46)):
                if len(text.get_text()) > width:
                    text.set_text("\n".join(textwrap.wrap(text.get_text(), width)))
            # Room above the axes for its title, however many lines it has.
            lines = ax.get_title().count(NEWLINE) + 1 if ax.get_title() else 0
            room = lines * ax.title.get_fontsize() * 1.45 / 72 / fig.get_size_inches()[1] + 0.01
            box = ax.get_position()
            if lines and box.y1 + room > 1:
                ax.set_position([box.x0, box.y0, box.width, 1 - room - box.y0])
        for text in getattr(fig, "texts", []):  # a suptitle
            if len(text.get_text()) > 42:
                text.set_text("\n".join(textwrap.wrap(text.get_text(), 42)))


def panels(
    fig, wide: list[list[float]], tall: float = 0.0, left: float = 0.17, right: float = 0.96
) -> list:
    """Axes for side-by-side panels: at ``wide`` rectangles (figure fractions) in the wide
    layout, stacked one above the other in the phone layout, between ``left`` and ``right``
    (``tall``: room kept at the top for a suptitle, as a fraction)."""
    if not narrow(fig):
        return [fig.add_axes(rect) for rect in wide]
    n = len(wide)
    top, bottom, gap = 0.93 - tall, 0.07, 0.15
    height = (top - bottom - gap * (n - 1)) / n
    return [
        fig.add_axes([left, top - (i + 1) * height - i * gap, right - left, height])
        for i in range(n)
    ]
