"""The second grading: the grade that counts, made where the student's code cannot reach it.

nbgrader runs the whole notebook in one IPython kernel: whatever a cell does to that process
(an input transformer that rewrites the tests, a ``run_cell`` that hides their errors, NumPy's
checks replaced) changes how the later cells run. After nbgrader, `autograde` therefore grades
every submission a second time, in a fresh process in the same sandbox, with the guarded
driver (``tito/guard/driver.py``) that `tito module complete` uses, strict:

- the cells are the instructor's **source** notebook's (``source/``: the tests with their
  hidden cases, the given code), in its order; each solution cell is the student's, found by
  its ``grade_id`` (the release's stub where it is missing), and only its definitions, imports
  and constants run (anything else at its top level is not run, and is reported);
- before any of the student's code, the audit hook is installed and NumPy, the builtins and
  the helpers are taken as they are; after every cell they are compared and put back, and
  what could reach the grader is refused (``tito/guard/protect.py``);
- each test's result comes back signed; a test after a refused action or a replaced check
  scores zero.

Then the two grades are compared test by test: where they differ, the submission is flagged
with both scores and the reason, and the lower score is written to the gradebook, so that
`nbgrader export`, the feedback and `tito nbgrader report` all show the grade that counts.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course.notebook import Cell, cells_of, load_notebook
from ..course.registry import COURSE_ROOT, Module
from ..guard.protect import scrub_environment
from ..guard.runs import DRIVER, collect_results, driver_spec, forbidden_roots, start_driver
from . import sandbox
from .course import Course

RESTARTS = 3  # a test that runs past its limit is skipped and the run started again, this often
# Parsing Python (ast, tokenize) in two jobs' threads at once trips CPython 3.11 ("AST
# constructor recursion depth mismatch"): the jobs of `--jobs N` take turns for it.
PARSING = threading.Lock()


@dataclass
class Outcome:
    name: str
    points: float
    status: str  # passed, failed, timeout, not run, untrusted
    message: str = ""

    @property
    def score(self) -> float:
        return self.points if self.status == "passed" else 0.0


@dataclass
class Verification:
    tests: dict[str, Outcome] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # "cell, line N: code" not run
    refusals: list[str] = field(default_factory=list)  # "cell: what was refused"
    seconds: float = 0.0
    error: str = ""  # the second grading itself could not run

    def to_json(self) -> dict:
        return {"tests": {k: [o.points, o.status, o.message] for k, o in self.tests.items()},
                "dropped": self.dropped, "refusals": self.refusals,
                "seconds": round(self.seconds, 2), "error": self.error}


def verification_plan(course: Course, m: Module, student: str) -> list[Cell]:
    """The source notebook's code cells, each solution cell replaced by the student's."""
    source = [c for c in cells_of(load_notebook(course.source_notebook(m))) if c.kind == "code"]
    release = {c.grade_id: c for c in cells_of(load_notebook(course.release_notebook(m)))
               if c.kind == "code" and c.nbgrader.get("solution")}
    mine: dict[str, Cell] = {}
    submitted = course.submitted_notebook(m, student)
    for c in cells_of(load_notebook(submitted)):
        if c.kind == "code" and c.nbgrader.get("grade_id"):
            mine.setdefault(c.grade_id, c)
    plan = []
    for c in source:
        meta = dict(c.nbgrader)
        if meta.get("solution"):
            theirs = mine.get(c.grade_id) or release.get(c.grade_id)
            text = theirs.source if theirs is not None else "raise NotImplementedError()"
            plan.append(Cell(len(plan), "code", text, meta, origin="yours"))
        else:
            plan.append(Cell(len(plan), "code", c.source, meta, origin="release"))
    return plan


def _command(run, cfg_path: Path | None) -> list[str]:
    if run.sandboxed:
        return [sys.executable, "-m", "tito.grading.sandbox", "driver", str(cfg_path)]
    return [sys.executable, "-I", "-B", str(DRIVER)]


def verify(course: Course, m: Module, student: str, run, config: sandbox.KernelConfig | None,
           cell_timeout: float) -> Verification:
    """Grade ``student``'s module ``m`` again with the strict driver (see the module's doc).

    ``config`` is the student's sandbox (None with ``--unsafe``, where the driver runs as the
    instructor with the course's folders forbidden to read).
    """
    start = time.perf_counter()
    result = Verification()
    try:
        with PARSING:
            plan = verification_plan(course, m, student)
    except Exception as error:  # noqa: BLE001 - an unreadable notebook: nbgrader said so too
        result.error = f"the notebooks could not be read: {error}"
        return result
    skipped: dict[int, str] = {}
    report = None
    for _ in range(RESTARTS + 1):
        cells = [Cell(c.index, c.kind, c.source if c.index not in skipped else
                      f"raise TimeoutError({skipped[c.index]!r})", c.nbgrader, origin=c.origin)
                 for c in plan]
        report = _run_once(course, m, student, run, config, cells, cell_timeout)
        late = [r for r in report.cells if r.status == "timeout"]
        if not late:
            break
        skipped[late[0].cell.index] = (f"this cell ran past the time limit ({cell_timeout:g} s) "
                                       "in the second grading")
    result.seconds = time.perf_counter() - start
    if report is None:
        return result
    if not report.started:  # the grader's failure, not the student's: nothing is lowered
        text = (report.driver_error or "").strip().splitlines()
        last = text[-1][:300] if text else "no output"
        result.error = f"the second grading did not start ({last})"
        return result
    untrusted_after = None
    for r in report.cells:
        name = r.cell.grade_id
        if r.error_type == "IntegrityError":
            result.refusals.append(f"{name}: {r.message}")
            if untrusted_after is None:
                untrusted_after = name
        for line, code in r.dropped:
            result.dropped.append(f"{name}, line {line}: {code}")
        if not r.cell.is_graded:
            continue
        status, message = r.status, r.explain() if not r.passed else ""
        if r.cell.index in skipped:
            status, message = "timeout", skipped[r.cell.index]
        elif untrusted_after is not None and r.error_type != "IntegrityError":
            status = "untrusted"
            message = (f"not counted: the tests could not be trusted after what "
                       f"{untrusted_after} did")
        result.tests[name] = Outcome(name, r.cell.points, status, message)
    return result


def _run_once(course, m, student, run, config, cells, cell_timeout):
    key = secrets.token_bytes(32)
    work = Path(run.folder) / f"v-{student}"
    work.mkdir(parents=True, exist_ok=True)
    stderr_path = work / "stderr.txt"
    with PARSING:
        spec = _spec(course, run, cells, key)
    if run.sandboxed:
        cfg_path = config.write(work / "sandbox.json")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        cwd = work
    else:
        cfg_path = None
        env = scrub_environment(dict(os.environ, MPLBACKEND="Agg"))
        cwd = course.autograded_notebook(m, student).parent
        if not cwd.is_dir():
            cwd = work
    total = cell_timeout * (len(cells) + 2)
    start = time.perf_counter()
    proc, found, records = start_driver(_command(run, cfg_path), spec, cwd, env, stderr_path)
    return collect_results(cells, proc, found, records, total, start,
                           stderr_path=stderr_path, cell_timeout=cell_timeout)


def _spec(course, run, cells, key) -> dict:
    if run.sandboxed:
        return driver_spec(cells, Path(sandbox.SANDBOX_PACKAGE), key, definitions_only=True)
    forbidden = [*forbidden_roots(run.package), str(course.root / "source"),
                 str(course.root / "submitted"), str(course.root / "release"),
                 str(course.root / "gradebook.db"), str(COURSE_ROOT / "modules")]
    return driver_spec(cells, run.package, key, forbidden=forbidden, definitions_only=True)


def settle(course: Course, m: Module, student: str, result: Verification, gb) -> list[str]:
    """Compare with nbgrader's grades; write the lower where they differ. The flags, one line
    each (empty when the two agree)."""
    from nbgrader.api import MissingEntry

    flags = []
    try:
        notebook = gb.find_submission_notebook(m.slug, m.dirname, student)
    except MissingEntry:
        return flags
    if result.error and not result.tests:
        return [f"the second grading could not run: {result.error}"]
    changed = False
    for grade in notebook.grades:
        outcome = result.tests.get(grade.name)
        if outcome is None:
            continue
        nb_score = float(grade.auto_score or 0)
        second = outcome.score
        top = float(grade.max_score or 0)
        if grade.needs_manual_grade:
            flags.append(f"{grade.name}: awaits grading by hand; the second grading "
                         f"{'passed it' if outcome.status == 'passed' else 'failed it'}")
            continue
        if abs(nb_score - second) < 1e-9:
            continue
        why = outcome.message or "passed"
        if nb_score > second:
            grade.auto_score = second
            changed = True
            flags.append(f"{grade.name}: nbgrader gave {nb_score:g}/{top:g}, the second grading "
                         f"{second:g}/{top:g} ({why[:200]}): the lower score counts")
        else:
            flags.append(f"{grade.name}: nbgrader gave {nb_score:g}/{top:g}, the second grading "
                         f"{second:g}/{top:g}: the lower score (nbgrader's) counts")
    if changed:
        gb.db.commit()
    for refusal in result.refusals:
        flags.append(f"refused in the second grading: {refusal}")
    return flags


def save(course: Course, m: Module, student: str, data: dict) -> Path:
    """What autograde learned about a student beyond nbgrader's gradebook, for `report`
    (``results.load_grading`` reads it back, for the graded notebook it was made for)."""
    graded = course.autograded_notebook(m, student)
    if graded.is_file():
        data = {**data, "graded_at": graded.stat().st_mtime}
    path = course.root / "logs" / m.dirname / f"grading-{student}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path



