"""The figures of the module pages: SVG files in site/figures/, drawn here with matplotlib.

Each module may have figures (``FIGURES``, by the module's slug): the picture that explains
it, and plots of what its lesson measures. ``draw_all()`` (``tito site figures``) draws them
again; the SVGs are committed so the site builds without matplotlib. Text stays text in the
SVG (``svg.fonttype: none``) and no date or random id is written, so drawing twice gives
the same bytes on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .registry import COURSE_ROOT, Module

FIGURES_DIR = COURSE_ROOT / "site" / "figures"


@dataclass(frozen=True)
class Figure:
    module: str  # the module's slug
    name: str
    caption: str
    alt: str
    draw: Callable  # draw(fig) on a matplotlib Figure

    def path_for(self, m: Module) -> str:
        return f"figures/{m.dirname}-{self.name}.svg"


FIGURES: dict[str, list[Figure]] = {}


@dataclass(frozen=True)
class PlacedFigure:
    name: str
    caption: str
    alt: str
    path: str  # relative to the site root


def figures_of(m: Module) -> list[PlacedFigure]:
    return [PlacedFigure(f.name, f.caption, f.alt, f.path_for(m)) for f in FIGURES.get(m.slug, [])]
