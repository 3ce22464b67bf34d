"""The one reader of ``### BEGIN SOLUTION`` / ``### END SOLUTION`` blocks.

A lesson marks the code a student writes with these two comment lines; nbgrader replaces
what is between them with ``raise NotImplementedError()`` when it releases the lesson.
Everything in tito that needs to know where a solution is (the exporter drops the marker
lines, the metadata lint counts them, the website shows stubs and checks that nothing from
inside a block leaks) reads them here, so they all agree on what a marker is.
"""

from __future__ import annotations

SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"


def is_marker(line: str) -> bool:
    """Whether a line is a BEGIN or END marker (indentation and trailing spaces ignored)."""
    return line.strip() in (SOLUTION_BEGIN, SOLUTION_END)


def solution_blocks(text: str) -> list[tuple[int, int]]:
    """1-based line ranges (inclusive, marker lines included) of the closed blocks of
    ``text``; a BEGIN without its END opens no block here (``marker_counts`` finds it)."""
    blocks, start = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == SOLUTION_BEGIN:
            start = number
        elif line.strip() == SOLUTION_END and start is not None:
            blocks.append((start, number))
            start = None
    return blocks


def marker_counts(text: str) -> tuple[int, int]:
    """(BEGIN lines, END lines) of ``text``: equal in a well-formed cell."""
    lines = [line.strip() for line in text.splitlines()]
    return lines.count(SOLUTION_BEGIN), lines.count(SOLUTION_END)


def partition_solution(text: str) -> tuple[list[str], list[str]]:
    """(visible lines, solution lines) of lesson text; the marker lines are in neither.

    Everything after a BEGIN counts as solution until its END, so an unclosed block hides
    the rest of the text rather than show it.
    """
    visible, hidden, inside = [], [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == SOLUTION_BEGIN:
            inside = True
        elif stripped == SOLUTION_END:
            inside = False
        else:
            (hidden if inside else visible).append(line)
    return visible, hidden


def solution_lines(text: str) -> list[str]:
    """The lines inside the solution blocks of ``text``."""
    return partition_solution(text)[1]


# ---- hidden test cases ------------------------------------------------------------------------
# A graded test cell may hold cases the student never sees between these two lines: nbgrader's
# generate_assignment removes them from the release (after recording the whole cell in the
# gradebook), and autograde puts the whole cell back before it runs. nbgrader matches the words
# anywhere in a line, so the same rule is kept here.
HIDDEN_BEGIN = "BEGIN HIDDEN TESTS"
HIDDEN_END = "END HIDDEN TESTS"


def partition_hidden(text: str) -> tuple[list[str], list[str]]:
    """(lines the release keeps, lines it drops) of a cell, exactly as nbgrader's
    ``ClearHiddenTests`` splits them: a line naming a marker and the lines between a BEGIN and
    its END are dropped; an unclosed region drops the rest of the cell."""
    kept, dropped, inside = [], [], False
    for line in text.split("\n"):
        if HIDDEN_BEGIN in line:
            inside = True
            dropped.append(line)
        elif HIDDEN_END in line:
            inside = False
            dropped.append(line)
        else:
            (dropped if inside else kept).append(line)
    return kept, dropped


def without_hidden_tests(text: str) -> str:
    """``text`` as nbgrader releases it: the hidden test regions removed."""
    return "\n".join(partition_hidden(text)[0])
