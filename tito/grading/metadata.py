"""Checking a lesson's nbgrader metadata before nbgrader sees it.

nbgrader's own errors name neither the cell nor, often, the key; these name both, with the
line of the cell in the lesson file and the fix.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from ..course.solutions import SOLUTION_BEGIN, SOLUTION_END, marker_counts

NBGRADER_KEYS = {"schema_version", "grade", "grade_id", "locked", "points", "solution", "task",
                 "checksum", "cell_type"}
REQUIRED_KEYS = ("grade", "locked", "solution", "task")
_GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]+$")


def _header_lines(lesson: Path | None) -> dict[str, int]:
    """grade_id -> line of its cell header in a jupytext lesson (for error messages)."""
    if lesson is None or Path(lesson).suffix != ".py":
        return {}
    found = {}
    for number, line in enumerate(Path(lesson).read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            match = re.search(r'"grade_id":\s*"([^"]*)"', line)
            if match:
                found.setdefault(match.group(1), number)
    return found


def metadata_problems(notebook, lesson: Path | None = None) -> list[str]:
    """Everything wrong with the nbgrader metadata of ``notebook``, one sentence per problem.

    Checked before nbgrader sees the notebook, because nbgrader's own errors name neither
    the cell nor, often, the key. Each sentence names the cell by grade_id (and its line in
    the lesson file) or by its position, then the key and the fix.
    """
    lines = _header_lines(lesson)
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, cell in enumerate(notebook.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        meta = cell.metadata["nbgrader"]
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        name = f"cell {index}"
        if isinstance(gid, str) and gid:
            name += f" (grade_id {gid!r}"
            name += f", {Path(lesson).name} line {lines[gid]})" if gid in lines else ")"

        def bad(text: str) -> None:
            problems.append(f"{name}: {text}")

        if not isinstance(meta, dict):
            bad(f"nbgrader metadata must be a mapping, got {type(meta).__name__}")
            continue
        version = meta.get("schema_version")
        if "schema_version" not in meta:
            bad("missing key 'schema_version': nbgrader 0.9 needs \"schema_version\": 3")
        elif version != 3 or isinstance(version, bool):
            bad(f"schema_version is {version!r}: nbgrader 0.9 needs \"schema_version\": 3")
        for key in REQUIRED_KEYS:
            if key not in meta:
                hint = {
                    "locked": " (true for tests and given code, false for solution cells)",
                    "grade": " (true only for graded test cells)",
                    "solution": " (true for cells with ### BEGIN SOLUTION)",
                    "task": " (false)",
                }[key]
                bad(f"missing key {key!r}{hint}")
            elif not isinstance(meta[key], bool):
                bad(f"{key!r} must be true or false, got {meta[key]!r}")
        for key in sorted(set(meta) - NBGRADER_KEYS):
            bad(f"unknown key {key!r} (nbgrader would silently drop it; a typo of "
                f"{_closest(key)!r}?)")
        grade, solution, locked = (meta.get(k) is True for k in ("grade", "solution", "locked"))
        if grade or solution or locked:
            if "grade_id" not in meta:
                bad("missing key 'grade_id': every graded, solution or locked cell needs a "
                    "unique \"grade_id\" (e.g. \"test_unit_<what>\")")
            elif not isinstance(gid, str) or not _GRADE_ID.match(gid):
                bad(f"grade_id {meta['grade_id']!r} is not valid: use letters, digits, '_' and '-'")
            elif gid in seen:
                bad(f"grade_id {gid!r} is used twice (also by cell {seen[gid]}): grade ids "
                    "must be unique")
            if isinstance(gid, str) and gid:
                seen.setdefault(gid, index)
        if grade:
            points = meta.get("points")
            if "points" not in meta:
                bad("missing key 'points': a graded cell (\"grade\": true) needs \"points\"")
            elif isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
                bad(f"points must be a number >= 0, got {points!r}")
            if cell.cell_type == "markdown" and not solution:
                bad("a graded markdown cell must also be a solution cell")
        elif "points" in meta:
            bad(f"has \"points\": {meta['points']!r} but \"grade\" is not true: the points "
                "would never count (set \"grade\": true, or remove points)")
        if solution and locked:
            bad("\"solution\": true and \"locked\": true contradict each other: students "
                "must be able to edit a solution cell (set \"locked\": false)")
        if solution and cell.cell_type == "code":
            begins, ends = marker_counts(cell.source)
            if begins != ends:
                bad(f"{begins} '{SOLUTION_BEGIN}' but {ends} '{SOLUTION_END}' lines: every "
                    "solution block needs both")
    if not problems:
        # nbgrader's own validator as the last word (it is what generate_assignment runs).
        from nbgrader.nbgraderformat import MetadataValidator

        try:
            MetadataValidator().validate_nb(copy.deepcopy(notebook))
        except Exception as error:  # jsonschema / nbgrader ValidationError
            problems.append(f"nbgrader's validator: {str(error).splitlines()[0]}")
    return problems


def _closest(key: str) -> str:
    import difflib

    match = difflib.get_close_matches(key, sorted(NBGRADER_KEYS), n=1, cutoff=0.0)
    return match[0] if match else ""
