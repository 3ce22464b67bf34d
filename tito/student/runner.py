"""Run the graded tests of a lesson against whoever wrote it.

In a workspace, what runs is not simply the student's ``.ipynb``: the student's solution
cells and their own ungraded cells come from their notebook, but every LOCKED cell (the
graded tests and the given code) comes from the released notebook ``.tito/release/``, made by
nbgrader, whose per-cell checksums are verified first. A test the student edited or deleted
is put back and run all the same, and named; the number of tests comes from the release.

Cells run in order in a fresh Python process (``tito/guard/driver.py``, started isolated:
``python -I``) whose ``tinytorch`` is the one beside the notebook's owner, so a student's bug
can never be hidden by the reference already loaded here. Results arrive cell by cell while the
run goes on (``on_result``), each line signed with a key only this process and the driver's
reporter know; an endless loop is stopped at ``timeout`` and reported with the function and
line that was running (the driver dumps its own stack just before the limit).

Only primitives that exist on Linux, macOS and Windows are used: the child's stdin and stdout
pipes, a thread that reads them, ``Process.kill`` (``tito/guard/runs.py``; the tests check).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from ..course.notebook import Cell, cells_of, load_notebook
from ..course.registry import DATA_DIR, DATA_ENV
from ..guard.protect import scrub_environment
from ..guard.runs import (
    DRIVER,
    RunReport,
    collect_results,
    driver_spec,
    forbidden_roots,
    is_locked,
    start_driver,
)
from .integrity import compare_with_authority, verify_release
from .plan import plan_cells

DEFAULT_TIMEOUT = 120.0


def _dump_after(timeout: float) -> float:
    """When the driver writes its stack, to name the line that was running if the run is
    stopped at `timeout` (the whole run's limit): 2-5 s before it (a quarter of it
    between), so that a loaded machine still writes the stack before the stop; never
    before half of it.

    >>> _dump_after(8), _dump_after(120), _dump_after(2)
    (6.0, 115.0, 1.0)
    """
    margin = min(5.0, max(2.0, 0.25 * timeout))
    return max(timeout - margin, 0.5 * timeout)


def run_cells(plan: list[Cell], package_root: Path, cwd: Path, timeout: float = DEFAULT_TIMEOUT,
              on_result=None, forbidden: list[str] | None = None) -> RunReport:
    """Execute ``plan`` in a fresh driver process; ``on_result(CellResult)`` as each ends."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tito-run-") as tmp:
        stack_path = Path(tmp) / "stack.txt"
        stderr_path = Path(tmp) / "stderr.txt"
        spec = driver_spec(plan, Path(package_root).resolve(), secrets.token_bytes(32),
                           forbidden=forbidden or [], stack_path=str(stack_path),
                           dump_after=_dump_after(timeout))
        env = scrub_environment(dict(os.environ, MPLBACKEND="Agg"))
        env.setdefault(DATA_ENV, str(DATA_DIR))  # the course's data, for lessons that read it
        proc, found, records = start_driver([sys.executable, "-I", "-B", str(DRIVER)], spec,
                                            cwd, env, stderr_path)
        return collect_results(plan, proc, found, records, timeout, start, on_result,
                               stack_path, stderr_path)


def _lesson_cells(path: Path) -> list[Cell]:
    cells = [c for c in cells_of(load_notebook(path)) if c.kind == "code"]
    def origin(c: Cell) -> str:
        if is_locked(c):
            return "release"
        return "yours" if c.nbgrader.get("solution") else "given"  # a demo cell of the lesson

    return [Cell(i, "code", c.source, c.nbgrader, origin=origin(c)) for i, c in enumerate(cells)]


def run_notebook(path: Path, package_root: Path, timeout: float = DEFAULT_TIMEOUT,
                 on_result=None) -> RunReport:
    """Execute every code cell of ``path`` as it is (the reference lesson, a released stub)."""
    return run_cells(_lesson_cells(path), package_root, Path(path).resolve().parent, timeout,
                     on_result)


def run_student(path: Path, release_path: Path, package_root: Path,
                timeout: float = DEFAULT_TIMEOUT, on_result=None,
                authority: dict | None = None) -> RunReport:
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
    for r in report.cells:
        for line, code in r.dropped[:3]:
            notes.append(f"{r.name}, line {line}: `{code}` is not a definition, an import "
                         "or a constant: the instructor's grade does not run it (put it inside a "
                         "function, or in a cell of your own)")
    report.notes = notes
    report.found_tests = found
    return report
