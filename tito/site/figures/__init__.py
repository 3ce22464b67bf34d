"""The figures of the module pages: SVG files in site/figures/, drawn with matplotlib.

Each module may have figures: the picture that explains it, and plots of what its lesson
measures. They live one file per module (``tensor.py``, ``attention.py``, ...), each figure
beside its caption and alt text; ``drawing.py`` holds what they share. ``draw_all()``
(``tito site figures``) draws them again; the SVGs are committed so the site builds without
matplotlib. Text stays text in the SVG (``svg.fonttype: none``) and no date or random id is
written, so drawing twice gives the same bytes on one machine (figures that plot a
measurement change with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...course.registry import COURSE_ROOT, Module
from . import (
    acceleration,
    activations,
    attention,
    autograd,
    benchmarking,
    capstone,
    compression,
    convolutions,
    dataloader,
    embeddings,
    kv_caching,
    layers,
    losses,
    optimizers,
    profiling,
    quantization,
    tensor,
    tokenization,
    training,
    transformers,
)
from .drawing import Figure, style

FIGURES_DIR = COURSE_ROOT / "site" / "figures"

# The figures of each module, by the module's slug, in course order.
FIGURES: dict[str, list[Figure]] = {
    file.FIGURES[0].module: file.FIGURES
    for file in (
        tensor,
        activations,
        layers,
        losses,
        dataloader,
        autograd,
        optimizers,
        training,
        convolutions,
        tokenization,
        embeddings,
        attention,
        transformers,
        profiling,
        quantization,
        compression,
        acceleration,
        kv_caching,
        benchmarking,
        capstone,
    )
}


@dataclass(frozen=True)
class PlacedFigure:
    name: str
    caption: str
    alt: str
    path: str  # relative to the site root
    size: tuple[float, float]  # CSS pixels, as drawn
    narrow_path: str | None = None  # the phone layout, when the figure has one
    narrow_size: tuple[float, float] | None = None


def _pixels(inches: tuple[float, float]) -> tuple[float, float]:
    return (round(inches[0] * 96, 1), round(inches[1] * 96, 1))


def figures_of(m: Module) -> list[PlacedFigure]:
    return [
        PlacedFigure(
            f.name, f.caption, f.alt, f.path_for(m), _pixels(f.size),
            f.path_for(m, narrow=True) if f.narrow else None,
            _pixels(f.narrow) if f.narrow else None,
        )
        for f in FIGURES.get(m.slug, [])
    ]


def draw_all(root: Path = FIGURES_DIR, only: list[str] | None = None) -> list[Path]:
    """Draw every figure (or those of the slugs in ``only``) into ``root``; returns the files."""
    import matplotlib.pyplot as plt

    from ...course.registry import MODULES

    style()
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for m in MODULES:
        if only and m.slug not in only:
            continue
        for f in FIGURES.get(m.slug, []):
            for narrow in (False, True) if f.narrow else (False,):
                fig = plt.figure(figsize=f.narrow if narrow else f.size)  # inches
                if narrow:
                    f.draw(fig, narrow=True)
                else:
                    f.draw(fig)
                path = root / Path(f.path_for(m, narrow)).name
                fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
                plt.close(fig)
                written.append(path)
    return written
