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
from .drawing import NARROW_WIDTH, Figure, enforce_text_size, style

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


def _svg_pixels(path: Path) -> tuple[float, float]:
    """The CSS size of a matplotlib SVG (its width and height are in points)."""
    import re

    head = path.read_text(encoding="utf-8")[:2000]
    w, h = (float(re.search(rf'{k}="([\d.]+)pt"', head).group(1)) for k in ("width", "height"))
    return round(w * 4 / 3, 1), round(h * 4 / 3, 1)


def figures_of(m: Module) -> list[PlacedFigure]:
    """The figures of ``m`` as its page shows them (their SVGs must have been drawn)."""
    out = []
    for f in FIGURES.get(m.slug, []):
        wide, phone = f.path_for(m), f.path_for(m, narrow=True) if f.has_narrow else None
        size = (
            _svg_pixels(FIGURES_DIR / Path(wide).name)
            if (FIGURES_DIR / Path(wide).name).is_file()
            else (0, 0)
        )
        phone_file = FIGURES_DIR / Path(phone).name if phone else None
        phone_size = _svg_pixels(phone_file) if phone_file and phone_file.is_file() else None
        out.append(PlacedFigure(f.name, f.caption, f.alt, wide, size, phone, phone_size))
    return out


def _draw_windows(f: Figure):
    """The phone layout of a one-canvas diagram: the canvas drawn once per window (an x
    range), the windows stacked, at the wide drawing's proportions."""
    import matplotlib.pyplot as plt

    probe = plt.figure(figsize=f.size)
    f.draw(probe)
    ax = probe.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    box = ax.get_position()
    plt.close(probe)
    per_x = f.size[0] * box.width / (x1 - x0)  # inches per canvas unit, as drawn wide
    per_y = f.size[1] * box.height / (y1 - y0)
    width = max(b - a for a, b in f.windows)
    scale = NARROW_WIDTH / (width * per_x)
    heights = [per_y * scale * (y1 - y0)] * len(f.windows)
    fig = plt.figure(figsize=(NARROW_WIDTH, sum(heights)))
    fig.tt_narrow = True
    for sub, (a, b) in zip(fig.subfigures(len(f.windows), 1), f.windows):
        sub.tt_narrow = True
        f.draw(sub)
        for axes in sub.axes:
            axes.set_xlim(a, b)
            axes.set_position([0, 0, (b - a) / width, 1])
            for artist in axes.texts:  # a text belongs to the window its anchor is in
                artist.set_visible(a <= artist.get_position()[0] <= b)
    return fig


def _save(fig, path: Path, width_in: float, is_narrow: bool) -> Path:
    import matplotlib.pyplot as plt

    enforce_text_size(fig, width_in, is_narrow)
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return path


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
            fig = plt.figure(figsize=f.size)  # inches
            f.draw(fig)
            written.append(_save(fig, root / Path(f.path_for(m)).name, f.size[0], False))
            if f.windows:
                fig = _draw_windows(f)
            elif f.narrow:
                fig = plt.figure(figsize=f.narrow)
                fig.tt_narrow = True
                f.draw(fig)
            else:
                continue
            path = root / Path(f.path_for(m, narrow=True)).name
            written.append(_save(fig, path, fig.get_size_inches()[0], True))
    return written
