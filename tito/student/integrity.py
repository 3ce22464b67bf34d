"""Is the released notebook the course's own? nbgrader's checksums, and the lesson as the
authority on what each locked cell (a graded test, given code) must say."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ..course.notebook import Cell
from ..course.solutions import without_hidden_tests
from ..errors import ReleaseIntegrityError
from ..guard.runs import is_locked  # noqa: F401 - nbgrader's rule, shared with grading


def cell_checksum(cell) -> str:
    """nbgrader's checksum of a cell (``nbgrader.utils.compute_checksum``), without importing
    nbgrader (seconds): MD5 of source, type, the grade/solution/locked flags, id and points."""
    meta = cell.metadata["nbgrader"]
    grade, solution = meta.get("grade", False), meta.get("solution", False)
    locked = False if solution else True if grade else meta.get("locked", False)
    digest = hashlib.md5()
    for part in (cell.source, cell.cell_type, str(grade), str(solution), str(locked),
                 meta["grade_id"]):
        digest.update(part.encode("utf-8"))
    if grade:
        digest.update(str(float(meta["points"])).encode("utf-8"))
    return digest.hexdigest()


def verify_release(notebook, label: str) -> None:
    """Refuse a release whose locked cells do not match the checksums nbgrader recorded."""
    graded = 0
    for i, cell in enumerate(notebook.cells):
        meta = cell.get("metadata", {}).get("nbgrader")
        if not meta:
            continue
        graded += bool(meta.get("grade"))
        if not is_locked(Cell(i, cell.cell_type, cell.source, dict(meta))):
            continue
        if "checksum" not in meta or cell_checksum(cell) != meta["checksum"]:
            raise ReleaseIntegrityError(
                f"{label} was changed: its locked cell '{meta.get('grade_id', i)}' does not match "
                "the checksum nbgrader recorded. Restore it with `tito init . --force` (your "
                "solution cells, package and progress are kept)."
            )
    if not graded:
        raise ReleaseIntegrityError(f"{label} has no graded test cells. "
                                    "Restore it with `tito init . --force`.")


_HEADER = re.compile(r"^# %%.*?nbgrader=(\{.*\})[ \t]*$", re.MULTILINE)
_NEXT_CELL = re.compile(r"^# %%", re.MULTILINE)


def lesson_authority(path: Path) -> dict:
    """The locked cells of a lesson as ``{grade_id: (points, source)}``, read without jupytext
    (seconds to import): each cell's header and the lines up to the next cell header, its
    hidden test cases removed as nbgrader removes them from the release."""
    text = Path(path).read_text(encoding="utf-8")
    found = {}
    for match in _HEADER.finditer(text):
        meta = json.loads(match[1])
        if is_locked(Cell(0, "code", "", meta)):
            following = _NEXT_CELL.search(text, match.end())
            body = text[match.end():following.start() if following else len(text)]
            found[meta["grade_id"]] = (float(meta.get("points", 0)),
                                       without_hidden_tests(body).strip())
    return {"cells": found}


def release_authority(cells: list[Cell]) -> dict:
    """The locked cells of a course release (a student build's packaged copy)."""
    return {"cells": {c.grade_id: (c.points, c.source.strip()) for c in cells
                      if c.kind == "code" and is_locked(c)}}


def compare_with_authority(release_cells: list[Cell], authority: dict, label: str) -> None:
    """Locked cells of the workspace's release must be the course's own, one for one."""
    mine = {c.grade_id: c for c in release_cells if c.kind == "code" and is_locked(c)}
    theirs = authority["cells"]
    differ = sorted(set(mine) ^ set(theirs))
    for gid, cell in mine.items():
        if gid not in theirs:
            continue
        points, source = theirs[gid]
        if cell.source.strip() != source or cell.points != points:
            differ.append(gid)
    if differ:
        raise ReleaseIntegrityError(
            f"{label} does not match the course's release (cells {', '.join(differ[:5])}). "
            "Restore it with `tito init . --force` (your solution cells, package and progress "
            "are kept)."
        )
