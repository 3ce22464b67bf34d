"""Does any released notebook carry a lesson's solution? The check of issue #21 section 3.

Every solution block of every lesson (the lines between ``### BEGIN SOLUTION`` and ``### END
SOLUTION``) is compared, line by line after normalizing, with every cell of every released
notebook: markdown, given code, locked tests, everything a student receives. A released
cell *restates* a block when it holds most of the block's telling lines; the finding names
the released cell (module and cell), the lesson and solution cell it restates, and the lines.

Normalizing a line: comments dropped, spaces removed, so that re-indenting or re-spacing a
solution does not hide it. A line is *telling* when it is long enough to say something (at
least ``MIN_CHARS`` characters once normalized) and no released notebook of the course shows
it outside a block anyway as plain given code of that lesson (``return out``, ``else:``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tito.course.notebook import read_cells
from tito.course.registry import Module

MIN_CHARS = 16  # a normalized line shorter than this says too little to count
MIN_LINES = 3  # a released cell restates a block holding this many of its telling lines


def normalize(line: str) -> str:
    """A line without its comment and its spaces (strings are kept whole: '#' in a string
    is only cut when it follows two spaces, the style's inline comment)."""
    stripped = line.strip()
    if stripped.startswith("#"):
        return ""
    stripped = re.split(r"\s{2,}#\s", stripped, maxsplit=1)[0]
    return re.sub(r"\s+", "", stripped)


@dataclass
class Block:
    module: Module
    cell: str  # grade_id of the solution cell
    lines: list[str]  # telling lines, normalized, in order
    shown: dict[str, str] = field(default_factory=dict)  # normalized -> as written


def solution_blocks(module: Module) -> list[Block]:
    """The solution blocks of a lesson, each with its telling lines."""
    blocks = []
    for cell in read_cells(module.source):
        inside, current = False, None
        for line in cell.source.splitlines():
            if line.strip() == "### BEGIN SOLUTION":
                inside, current = True, Block(module, cell.grade_id, [])
            elif line.strip() == "### END SOLUTION":
                inside = False
                if current is not None and current.lines:
                    blocks.append(current)
            elif inside:
                norm = normalize(line)
                if len(norm) >= MIN_CHARS and norm not in current.shown:
                    current.lines.append(norm)
                    current.shown[norm] = line.strip()
    return blocks


def released_cells(path: Path) -> list[tuple[str, set[str]]]:
    """(cell name, normalized lines) of every code cell a released notebook gives whole:
    given code, locked tests, free cells. A solution cell's released lines (the frame around
    its stub) are left out: handing over setup lines is their job."""
    notebook = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = []
    for index, cell in enumerate(notebook["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or meta.get("solution"):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        defined = re.search(r"^(?:def|class) (\w+)", source, re.MULTILINE)
        name = meta.get("grade_id") or f"cell {index}" + (f" ({defined[1]})" if defined else "")
        cells.append((name, {normalize(line) for line in source.splitlines()} - {""}))
    return cells


@dataclass
class Leak:
    released: str  # "module NN, cell NAME"
    restates: str  # "module MM's solution cell NAME"
    lines: list[str]

    def __str__(self) -> str:
        shown = "; ".join(self.lines[:4]) + (" ..." if len(self.lines) > 4 else "")
        return (f"{self.released} restates {self.restates} ({len(self.lines)} of its lines: "
                f"{shown})")


def cross_leaks(modules: list[Module], releases: dict[int, Path]) -> list[Leak]:
    """Every released cell that restates a solution block of any lesson."""
    cells = {m.number: released_cells(releases[m.number]) for m in modules}
    leaks = []
    for m in modules:
        for block in solution_blocks(m):
            need = min(MIN_LINES, len(block.lines))  # a shorter block: all of its lines
            for other in modules:
                for name, lines in cells[other.number]:
                    found = [line for line in block.lines if line in lines]
                    if found and len(found) >= need:
                        leaks.append(Leak(
                            f"module {other.key} ({other.dirname}), cell '{name}'",
                            f"module {m.key}'s solution cell '{block.cell}'",
                            [block.shown[line] for line in found]))
    return leaks
