"""Where pages live and how they link to each other, and the registry facts pages share
(tiers, module ranges, hours, the reading order)."""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from pathlib import Path

from ..course.registry import (
    COURSE_ROOT,
    MILESTONES,
    MILESTONES_DIR,
    MODULES,
    Milestone,
    Module,
)

SITE_DIR = COURSE_ROOT / "site"
SITE_TITLE = "TinyTorch"
# Written by hand and committed beside the generated files; never generated.
STYLESHEET = "styles.css"
# The pandoc filter Quarto and `tito site render --pandoc` both run (tables as cards on
# phones, formulas kept with their punctuation): generated from tito/site/templates/.
SITE_FILTER = "tinytorch.lua"
# The page shell, the filters and the pages' wording (Jinja2 templates and data files).
TEMPLATES = Path(__file__).with_name("templates")


def module_page(m: Module) -> str:
    return f"modules/{m.dirname}.qmd"


def milestone_page(ms: Milestone) -> str:
    return f"milestones/{ms.name}.qmd"


def rel_link(target: str, page: str) -> str:
    """``target`` (relative to the site root) as a link from ``page``."""
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def milestone_ready(ms: Milestone) -> bool:
    return (MILESTONES_DIR / ms.script).is_file()


def module_ref(m: Module, page: str, short: bool = False) -> str:
    """A link to a written module's page, or its name and "coming soon" (never a link)."""
    name = f"{m.key} {m.title}"
    if m.written:
        return f"[{name}]({rel_link(module_page(m), page)})"
    return name if short else f"{name} [(coming soon)]{{.soon}}"


def milestone_ref(ms: Milestone, page: str, year: bool = True) -> str:
    text = f"{ms.title} ({ms.year})" if year else ms.title
    return f"[{text}]({rel_link(milestone_page(ms), page)})"


def tier_modules() -> dict[str, list[Module]]:
    tiers: dict[str, list[Module]] = defaultdict(list)
    for m in MODULES:
        tiers[m.tier].append(m)
    return tiers


def span_text(modules: list[Module]) -> str:
    keys = [m.key for m in modules]
    return f"module {keys[0]}" if len(keys) == 1 else f"modules {keys[0]}–{keys[-1]}"


def ranges(numbers) -> str:
    """Module numbers as short ranges: 01–08, 10–13."""
    numbers = sorted(numbers)
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    shown = [
        f"{r[0]:02d}–{r[-1]:02d}" if len(r) > 2 else ", ".join(f"{n:02d}" for n in r) for r in runs
    ]
    return ", ".join(shown)


def hours_range(text: str) -> tuple[float, float] | None:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:-\s*(\d+(?:\.\d+)?))?\s*", text)
    if not match:
        return None
    low = float(match.group(1))
    return low, float(match.group(2) or low)


def hours_total(modules: list[Module]) -> str | None:
    ranges = [hours_range(m.hours) for m in modules]
    if not ranges or any(r is None for r in ranges):
        return None
    low, high = sum(r[0] for r in ranges), sum(r[1] for r in ranges)
    return f"{low:g}–{high:g} hours" if low != high else f"{low:g} hours"


def notebook_file(m: Module) -> str:
    """The released (solution-free) notebook of ``m``, relative to the site root."""
    return f"notebooks/{m.dirname}.ipynb"


def reading_order() -> list[Module | Milestone]:
    """Modules in registry order, each milestone right after the module that unlocks it."""
    out: list[Module | Milestone] = []
    for m in MODULES:
        out.append(m)
        out += sorted(
            (ms for ms in MILESTONES if max(ms.requires) == m.number), key=lambda ms: ms.year
        )
    return out
