"""The check that no page shows a line from inside a solution block."""

from __future__ import annotations

from ..course.registry import (
    MODULES,
)
from ..course.solutions import partition_solution


def hidden_lines() -> dict[str, str]:
    """Solution lines that a student never sees, each with the lesson it comes from.

    A line inside ``### BEGIN SOLUTION`` / ``### END SOLUTION`` is hidden unless the same
    text is public anyway: in given code, prose or a test of some lesson (``return``,
    ``loss.backward()``). Comments and lines under 3 characters say nothing.
    """
    public, hidden = [], {}
    lessons = [m for m in MODULES if m.written]
    for m in lessons:
        visible, solution = partition_solution(m.source.read_text(encoding="utf-8"))
        public.extend(visible)
        for line in solution:
            hidden.setdefault(line.strip(), f"modules/{m.dirname}/{m.slug}.py")
    text = "\n".join(public)
    return {
        line: where
        for line, where in hidden.items()
        if len(line) >= 3 and not line.startswith("#") and line not in text
    }


def solution_leaks(files: dict[str, str]) -> list[str]:
    hidden = hidden_lines()
    return [
        f"{path} shows {line!r} from {where}"
        for path, page in sorted(files.items())
        for line, where in hidden.items()
        if line in page
    ]
