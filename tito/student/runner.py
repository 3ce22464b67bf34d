"""Run the graded tests of a lesson against whoever wrote it.

In a workspace, what runs is not simply the student's ``.ipynb``: the student's solution
cells and their own ungraded cells come from their notebook, but every LOCKED cell (the
graded tests and the given code) comes from the released notebook ``.tito/release/``, made by
nbgrader, whose per-cell checksums are verified first. A test the student edited or deleted
is put back and run all the same, and named; the number of tests comes from the release.

Cells run in order in a fresh Python process (``driver.py``) whose ``tinytorch`` is the one
beside the notebook's owner, so a student's bug can never be hidden by the reference already
loaded here. Results arrive cell by cell while the run goes on (``on_result``); an endless
loop is stopped at ``timeout`` and reported with the function and line that was running.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course.notebook import Cell, cells_of, load_notebook
from ..errors import ReleaseIntegrityError

DEFAULT_TIMEOUT = 120.0


@dataclass
class CellResult:
    cell: Cell
    status: str  # passed, failed, timeout, not run
    error_type: str = ""
    message: str = ""
    where: tuple | None = None
    traceback: str = ""
    seconds: float = 0.0
    stdout: str = ""
    depends_on: str = ""  # the earlier failing cell of the student's this one likely follows from

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def explain(self) -> str:
        """One teaching sentence: what went wrong and where."""
        if self.status == "timeout":
            return self.message
        if self.status == "not run":
            return "not run: " + (self.message or "an earlier cell ran out of time")
        where = ""
        if self.where:
            label, line, code, func = self.where
            where = f" (in {func}, {label} line {line}: `{code}`)" if code else f" ({label} line {line})"
        if self.error_type == "NotImplementedError":
            text = f"not implemented yet{where}: replace `raise NotImplementedError()` with your code"
        elif self.error_type == "AssertionError":
            text = (self.message or "an assertion failed without a message") + where
        elif self.error_type == "IntegrityError":
            text = f"not allowed: {self.message}. The tests cannot be trusted after that."
        elif self.error_type in ("SyntaxError", "IndentationError", "TabError"):
            text = (f"{self.error_type}: {self.message}{where}. Nothing in this cell ran, so "
                    "nothing it defines exists: fix this first")
        else:
            text = f"{self.error_type}: {self.message}{where}"
        if self.depends_on:
            text += f" [probably caused by the error in {self.depends_on} above: fix that first]"
        return text


@dataclass
class RunReport:
    cells: list[CellResult] = field(default_factory=list)
    seconds: float = 0.0
    expected_tests: int | None = None  # from the release; None when running a lesson itself
    notes: list[str] = field(default_factory=list)  # restored/edited cells, said to the student
    found_tests: int | None = None  # graded cells present in the student's own notebook

    @property
    def tests(self) -> list[CellResult]:
        return [r for r in self.cells if r.cell.is_graded]

    @property
    def passed(self) -> list[CellResult]:
        return [r for r in self.tests if r.passed]

    @property
    def failed(self) -> list[CellResult]:
        return [r for r in self.tests if not r.passed]

    @property
    def other_errors(self) -> list[CellResult]:
        """Ungraded cells (the student's code, demos) that raised."""
        return [r for r in self.cells if not r.cell.is_graded and r.status != "passed"]

    @property
    def integrity_errors(self) -> list[CellResult]:
        return [r for r in self.cells if r.error_type == "IntegrityError"]

    @property
    def ok(self) -> bool:
        if self.expected_tests is not None and len(self.tests) != self.expected_tests:
            return False
        return bool(self.tests) and not self.failed and not self.integrity_errors

    def points(self) -> tuple[float, float]:
        return (sum(r.cell.points for r in self.passed), sum(r.cell.points for r in self.tests))


# ---- which cells run ---------------------------------------------------------------------
def is_locked(cell: Cell) -> bool:
    """nbgrader's rule: graded cells and locked cells are read-only, solution cells never."""
    meta = cell.nbgrader
    if not meta or meta.get("solution"):
        return False
    return bool(meta.get("grade") or meta.get("locked"))


def cell_checksum(cell) -> str:
    """nbgrader's checksum of a cell (``nbgrader.utils.compute_checksum``), without importing
    nbgrader (seconds): MD5 of source, type, the grade/solution/locked flags, id and points."""
    meta = cell.metadata["nbgrader"]
    grade, solution = meta.get("grade", False), meta.get("solution", False)
    locked = False if solution else True if grade else meta.get("locked", False)
    digest = hashlib.md5()
    for part in (cell.source, cell.cell_type, str(grade), str(solution), str(locked), meta["grade_id"]):
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
                "notebooks, package and progress are kept)."
            )
    if not graded:
        raise ReleaseIntegrityError(f"{label} has no graded test cells. Restore it with `tito init . --force`.")


_HEADER = re.compile(r"^# %%.*?nbgrader=(\{.*\})[ \t]*$", re.MULTILINE)
_NEXT_CELL = re.compile(r"^# %%", re.MULTILINE)


def lesson_authority(path: Path) -> dict:
    """The locked cells of a lesson as ``{grade_id: (points, source)}``, read without jupytext
    (seconds to import): each cell's header and the lines up to the next cell header."""
    text = Path(path).read_text(encoding="utf-8")
    found = {}
    for match in _HEADER.finditer(text):
        meta = json.loads(match[1])
        if is_locked(Cell(0, "code", "", meta)):
            following = _NEXT_CELL.search(text, match.end())
            body = text[match.end():following.start() if following else len(text)]
            found[meta["grade_id"]] = (float(meta.get("points", 0)), body.strip())
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
            "Restore it with `tito init . --force` (your notebooks, package and progress are kept)."
        )


def plan_cells(student: list[Cell], release: list[Cell]) -> tuple[list[Cell], list[str], int, int]:
    """The cells to run, notes for the student, the number of graded tests, and how many
    of them the student's notebook holds.

    The release gives the structure: each locked cell runs as released (edited or deleted
    ones are named), each solution cell runs as the student wrote it (the release's stub if
    they deleted it). The student's own cells (no nbgrader id of the release) run where they
    put them, after the release cell they follow.
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

    def add_free(cell: Cell) -> None:
        # the student's own cell: whatever nbgrader metadata it claims, it is not a test
        plan.append(Cell(len(plan), "code", cell.source, {}, origin="yours"))

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


# ---- running -----------------------------------------------------------------------------
_STACK_LINE = re.compile(r'File "<cell (\d+) \'(.*?)\'>", line (\d+) in (\S+)')


def _stack_where(stack: str, plan: list[Cell]) -> str:
    """The innermost notebook line in a faulthandler dump, as `function, cell line N: code`."""
    for match in _STACK_LINE.finditer(stack):  # most recent call first
        index, name, line, func = int(match[1]), match[2], int(match[3]), match[4]
        lines = plan[index].source.splitlines() if index < len(plan) else []
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        return f"in {func}, cell {index} '{name}' line {line}" + (f": `{code}`" if code else "")
    return ""


def forbidden_roots(package_root: Path) -> list[str]:
    """Folders holding reference solutions that a student's cells must not read."""
    from ..course.registry import COURSE_ROOT

    package_root = Path(package_root).resolve()
    roots = set()
    if package_root != COURSE_ROOT:
        for sub in ("tinytorch", "modules", "site"):
            if (COURSE_ROOT / sub).exists():
                roots.add(str(COURSE_ROOT / sub))
        for entry in sys.path:
            folder = Path(entry or ".").resolve() / "tinytorch"
            if folder.is_dir() and folder.parent != package_root:
                roots.add(str(folder))
    return sorted(roots)


def run_cells(plan: list[Cell], package_root: Path, cwd: Path, timeout: float = DEFAULT_TIMEOUT,
              on_result=None, forbidden: list[str] | None = None) -> RunReport:
    """Execute ``plan`` in a fresh driver process; ``on_result(CellResult)`` as each ends."""
    token = secrets.token_hex(16)
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    results: dict[int, CellResult] = {}
    cause: CellResult | None = None
    running: int | None = None
    timed_out = False
    stack = ""
    with tempfile.TemporaryDirectory(prefix="tito-run-") as tmp:
        stack_path = Path(tmp) / "stack.txt"
        spec = {
            "package_root": str(Path(package_root).resolve()), "token": token, "fd": write_fd,
            "stack_path": str(stack_path), "forbidden": list(forbidden or []),
            "cells": [{"index": c.index, "name": c.grade_id, "source": c.source,
                       "trusted": c.origin == "release"} for c in plan],
        }
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
        with open(Path(tmp) / "stderr.txt", "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tito.student.driver"], cwd=cwd, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                pass_fds=(write_fd,),
            )
        os.close(write_fd)
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        deadline = start + timeout
        buffer = b""
        expected_index = 0
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([pipe], [], [], min(left, 0.5))
                if not ready:
                    continue
                chunk = pipe.read(65536)
                if not chunk:
                    break  # the driver ended (or died)
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    got_token, _, payload = line.decode("utf-8", "replace").partition("\t")
                    if got_token != token:
                        continue
                    record = json.loads(payload)
                    index = record.get("index")
                    if record["event"] == "start" and index == expected_index:
                        running = index
                    elif record["event"] == "end" and index == running and index not in results:
                        cell = plan[index]
                        result = CellResult(
                            cell, record["status"], record.get("error_type", ""),
                            record.get("message", ""),
                            tuple(record["where"]) if record.get("where") else None,
                            record.get("traceback", ""), record.get("seconds", 0.0),
                            record.get("stdout", ""),
                        )
                        results[index] = result
                        running = None
                        expected_index = index + 1
                        cause = _root_cause(result, cause)
                        if on_result:
                            on_result(result)
            if timed_out and proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGUSR1)
                    for _ in range(20):
                        time.sleep(0.05)
                        if stack_path.exists() and "File" in stack_path.read_text(errors="replace"):
                            break
                except ProcessLookupError:
                    pass
                stack = stack_path.read_text(errors="replace") if stack_path.exists() else ""
                proc.kill()
        proc.wait()
    report = RunReport(seconds=time.perf_counter() - start)
    for cell in plan:
        r = results.get(cell.index)
        if r is None:
            if cell.index == running and timed_out:
                where = _stack_where(stack, plan)
                r = CellResult(cell, "timeout", message=(
                    f"stopped after the time limit of {timeout:g} s" + (f", {where}" if where else "")
                    + ". An endless loop? If your code is only slow, give it longer with "
                    f"`--timeout {int(timeout * 2)}`."))
            elif cell.index == running:
                r = CellResult(cell, "failed", message=(
                    "the test process ended in this cell (os._exit, a crash, or the memory ran "
                    "out): nothing after it ran"))
            else:
                r = CellResult(cell, "not run", message=(
                    "an earlier cell ran out of time" if timed_out else "the test process stopped earlier"))
            if on_result:
                on_result(r)
        report.cells.append(r)
    return report


def _root_cause(result: CellResult, cause: CellResult | None) -> CellResult | None:
    """Mark a failure that follows from an earlier failing ungraded cell (root cause first);
    return the cause to remember for the cells after this one."""
    if result.passed:
        return cause
    if not result.cell.is_graded and result.status == "failed" and cause is None:
        return result
    if cause is not None and result.error_type in ("NameError", "ImportError", "AttributeError"):
        result.depends_on = f"cell '{cause.cell.grade_id}'"
    return cause


def _lesson_cells(path: Path) -> list[Cell]:
    cells = [c for c in cells_of(load_notebook(path)) if c.kind == "code"]
    return [Cell(i, "code", c.source, c.nbgrader, origin="release" if is_locked(c) else "yours")
            for i, c in enumerate(cells)]


def run_notebook(path: Path, package_root: Path, timeout: float = DEFAULT_TIMEOUT,
                 on_result=None) -> RunReport:
    """Execute every code cell of ``path`` as it is (the reference lesson, a released stub)."""
    return run_cells(_lesson_cells(path), package_root, Path(path).resolve().parent, timeout, on_result)


def run_student(path: Path, release_path: Path, package_root: Path, timeout: float = DEFAULT_TIMEOUT,
                on_result=None, authority: dict | None = None) -> RunReport:
    """Grade a student's notebook with the locked cells of its verified release."""
    release_nb = load_notebook(release_path)
    label = str(release_path)
    verify_release(release_nb, label)
    release = cells_of(release_nb)
    if authority is not None:
        compare_with_authority(release, authority, label)
    plan, notes, expected, found = plan_cells(cells_of(load_notebook(path)), release)
    report = run_cells(plan, package_root, Path(path).resolve().parent, timeout, on_result,
                       forbidden=forbidden_roots(package_root))
    report.expected_tests = expected
    report.notes = notes
    report.found_tests = found
    return report
