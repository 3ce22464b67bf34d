"""What the website shows of a lesson, read from the lesson file itself.

A lesson (``modules/NN_slug/slug.py``) already holds every piece of a module's web page:
its markdown sections (overview, objectives, what comes next), the functions and classes
the student writes (solution cells), and the graded tests with their teaching messages.
This file reads the sections and puts the page's pieces together; ``stubs.py`` turns
solution cells into stubs and ``messages.py`` reads the graded tests, both with ``ast``,
and neither copies a line from inside a ``### BEGIN SOLUTION`` / ``### END SOLUTION``
block.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..course.notebook import Cell, read_cells
from ..course.registry import Module
from ..errors import LessonError
from .messages import GradedTest, graded_tests
from .stubs import Stub, solution_stubs

# The lesson sections a module page shows, by the heading they have in the lesson.
SECTIONS = (
    "overview",
    "learning objectives",
    "what you build",
    "what you are not building yet",
    "what comes next",
)

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```+|~~~+)")
_PART = re.compile(r"Part (\d+)\b")


@dataclass
class Part:
    """The solution code of one part of the lesson, as stubs."""

    heading: str
    stubs: list[Stub] = field(default_factory=list)


@dataclass
class Lesson:
    module: Module
    sections: dict[str, str]
    parts: list[Part]
    tests: list[GradedTest]
    # Every "Part N: ..." heading of the lesson, in order, with code to write or not.
    part_headings: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tests)


# ---- markdown sections ------------------------------------------------------------------
def _sections(cells: list[Cell]) -> tuple[dict[str, str], dict[int, str]]:
    """Level-2 sections of the lesson's markdown, and the heading each cell sits under."""
    bodies: dict[str, list[str]] = {}
    under: dict[int, str] = {}
    current: str | None = None
    # A section's text ends at the first code cell after it: a markdown cell that follows
    # code without a heading of its own introduces that code, not the section above.
    closed = False
    for cell in cells:
        if cell.kind != "markdown":
            under[cell.index] = current or ""
            closed = True
            continue
        fenced = False
        lines = cell.source.splitlines()
        if current is not None and not closed:
            bodies[current].append("")  # a cell boundary is a paragraph break
        for line in lines:
            if _FENCE.match(line):
                fenced = not fenced
            match = None if fenced else _HEADING.match(line)
            if match and len(match.group(1)) <= 2:
                current = match.group(2).strip() if len(match.group(1)) == 2 else None
                closed = False
                if current is not None:
                    bodies.setdefault(current, [])
                continue
            if current is not None and not closed:
                bodies[current].append(line)
        under[cell.index] = current or ""
    return {k: "\n".join(v).strip("\n") for k, v in bodies.items()}, under


# ---- the whole lesson --------------------------------------------------------------------
def read_lesson(module: Module) -> Lesson:
    label = f"modules/{module.dirname}/{module.slug}.py"
    cells = read_cells(module.source)
    sections, under = _sections(cells)
    lower = {k.lower(): v for k, v in sections.items()}
    missing = [s for s in SECTIONS if s not in lower]
    if missing:
        needed = ", ".join(s.capitalize() for s in SECTIONS)
        raise LessonError(
            f"{label} has no '## {missing[0].capitalize()}' section; the website page of module "
            f"{module.key} is made from its sections: {needed}."
        )
    given: dict[str, ast.FunctionDef] = {}
    for cell in cells:
        if cell.kind == "code" and not cell.nbgrader.get("solution") and not cell.is_graded:
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue  # notebook magics: nothing the website needs
            given.update({n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)})
    parts: list[Part] = []
    tests: list[GradedTest] = []
    for cell in cells:
        if cell.kind != "code":
            continue
        heading = under.get(cell.index, "")
        if cell.nbgrader.get("solution"):
            stubs = solution_stubs(cell, label)
            if stubs:
                if not parts or parts[-1].heading != heading:
                    parts.append(Part(heading))
                parts[-1].stubs += stubs
        if cell.is_graded:
            tests += graded_tests(cell, heading, label, given)
    headings = [h for h in dict.fromkeys(under.values()) if _PART.match(h)]
    return Lesson(module, {k: lower[k] for k in SECTIONS}, parts, tests, headings)
