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
from pathlib import Path

from ..course.notebook import Cell, cells_of, load_notebook
from ..course.registry import DATA_DIR, DATA_ENV
from .integrity import compare_with_authority, is_locked, verify_release
from .plan import plan_cells
from .results import CellResult, RunReport

DEFAULT_TIMEOUT = 120.0

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
        env.setdefault(DATA_ENV, str(DATA_DIR))  # the course's data, for lessons that read it
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
