"""Which cells run, in what order: the release's locked cells, the student's solutions and
their own extra cells, each one marked by where it came from."""

from __future__ import annotations

from ..course.notebook import Cell
from .integrity import is_locked


def plan_cells(student: list[Cell], release: list[Cell]) -> tuple[list[Cell], list[str], int, int]:
    """The cells to run, notes for the student, the number of graded tests, and how many
    of them the student's notebook holds.

    The release gives the structure: each locked cell runs as released (edited or deleted
    ones are named), each solution cell runs as the student wrote it (the release's stub if
    they deleted it). The student's own cells (no nbgrader id of the release) run where they
    put them, after the release cell they follow; those that are a demo cell of the release,
    unchanged, are marked "given" (the lesson's code, run as the student's: never trusted).
    """
    release_code = [c for c in release if c.kind == "code"]
    known = {c.grade_id: c for c in release_code if c.nbgrader}
    student_code = [c for c in student if c.kind == "code"]
    by_id: dict[str, Cell] = {}
    for c in student_code:
        if c.nbgrader.get("grade_id") in known:
            by_id.setdefault(c.grade_id, c)
    # the student's free cells, grouped after the known cell they follow
    after: dict[str | None, list[Cell]] = {}
    anchor = None
    for c in student_code:
        gid = c.nbgrader.get("grade_id")
        if gid in known:
            anchor = gid
        else:
            after.setdefault(anchor, []).append(c)
    plan: list[Cell] = []
    notes: list[str] = []
    seen_anchor: set = set()

    def add(cell: Cell, origin: str) -> None:
        plan.append(Cell(len(plan), "code", cell.source, dict(cell.nbgrader), origin=origin))

    # the release's free cells (demos, examples): the student's copy runs, but if it is
    # unchanged it is the lesson's code, and messages say so ("given", never trusted)
    given = {c.source.strip() for c in release_code if not c.nbgrader.get("grade_id")}

    def add_free(cell: Cell) -> None:
        # the student's own cell: whatever nbgrader metadata it claims, it is not a test
        origin = "given" if cell.source.strip() in given and cell.source.strip() else "yours"
        plan.append(Cell(len(plan), "code", cell.source, {}, origin=origin))

    for c in after.get(None, []):
        add_free(c)
    for rc in release_code:
        gid = rc.nbgrader.get("grade_id") if rc.nbgrader else None
        if gid is None:
            continue  # an ungraded, unlocked release cell: the student's copy (if kept) runs
        mine = by_id.get(gid)
        kind = "test" if rc.is_graded else "given code"
        if is_locked(rc):
            if mine is None:
                notes.append(f"{gid} was missing from your notebook; the original {kind} was put "
                             "back in its place and run")
            elif mine.source != rc.source or not is_locked(mine):
                notes.append(f"{gid} was edited in your notebook; the original {kind} was run")
            add(rc, "release")
        elif rc.nbgrader.get("solution"):
            if mine is None:
                notes.append(f"{gid} (your solution cell) was missing from your notebook; the empty "
                             "stub of the release was run in its place")
                add(rc, "release")
            else:
                add(Cell(0, "code", mine.source, dict(rc.nbgrader)), "yours")
        else:
            add(rc, "release")
        if gid not in seen_anchor:
            seen_anchor.add(gid)
            for c in after.get(gid, []):
                add_free(c)
    expected = sum(c.is_graded for c in release_code)
    found = sum(1 for c in release_code if c.is_graded and c.grade_id in by_id)
    return plan, notes, expected, found
