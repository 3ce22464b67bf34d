"""After autograde: feedback files, nbgrader's CSV export (honest about what was not graded),
and the per-test report of every student."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path

from ..course.registry import MODULES, Module
from ..course.solutions import HIDDEN_BEGIN, HIDDEN_END, partition_hidden
from ..errors import GradingError
from .course import Course
from .process import NbgraderRun, run_nbgrader
from .results import StudentResult, student_result


def feedback(course: Course, m: Module) -> tuple[NbgraderRun, dict[str, Path | None], list[str]]:
    """``nbgrader generate_feedback``: (the run, autograded student -> HTML or None, students
    with a submission that was not autograded)."""
    run = run_nbgrader(course.root, ["generate_feedback", m.dirname, "--force"], wall_timeout=1800,
                       log=f"{m.dirname}/feedback")
    made, ungraded = {}, []
    for student in course.students(m):
        if not course.autograded_notebook(m, student).is_file():
            ungraded.append(student)
            continue
        path = course.feedback_file(m, student)
        made[student] = path if path.is_file() else None
        if path.is_file():
            name_tests(path, student_result(course, m, student))
    return run, made, ungraded


HIDDEN_NOTE = "# (the instructor's hidden test cases ran here: they are not shown)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONTEXT_PREFIX = re.compile(r"^\s*(?:-*>)?\s*\d+\s?")  # IPython's "---> 12 " and "     13 "


def hide_hidden_tests(cell) -> bool:
    """Take the hidden test cases out of an autograded cell before its feedback is rendered.

    Autograde runs each test cell whole, hidden region included, and the feedback would show
    it: in the cell's source (each region becomes one comment line saying the cases ran) and
    in the tracebacks of its errors (IPython prints the lines around the failing line, and a
    hidden case fails inside its region: those lines are left out). Returns whether the cell
    changed. The gradebook and the autograded notebook keep everything.
    """
    kept, dropped = partition_hidden(cell.get("source", ""))
    if not dropped:
        return False
    lines, inside = [], False
    for line in cell.source.split("\n"):
        if HIDDEN_BEGIN in line:
            inside = True
            lines.append(line[:len(line) - len(line.lstrip())] + HIDDEN_NOTE)
        elif HIDDEN_END in line:
            inside = False
        elif not inside:
            lines.append(line)
    cell.source = "\n".join(lines)
    shown = {line.strip() for line in kept}
    secret = {line.strip() for line in dropped} - shown - {""}
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            output["traceback"] = [_without_lines(entry, secret)
                                   for entry in output.get("traceback", [])]
    return True


def _without_lines(entry: str, secret: set[str]) -> str:
    """A traceback entry without its context lines that show one of ``secret``."""
    def hidden(line: str) -> bool:
        plain = _ANSI.sub("", line)
        return (plain.strip() in secret or _CONTEXT_PREFIX.sub("", plain, count=1).strip() in secret
                or HIDDEN_BEGIN in plain or HIDDEN_END in plain)

    return "\n".join(line for line in entry.split("\n") if not hidden(line))


_TOC_ENTRY = re.compile(r'<a href="#([^"]+)">Test cell</a>')


def name_tests(path: Path, result: StudentResult) -> None:
    """nbgrader's feedback summary says "Test cell" for every test: name each one, and say
    which the grading put back (the student deleted or edited it) or where it ended."""
    html = path.read_text(encoding="utf-8")

    def entry(match):
        name = match.group(1)
        note = ""
        how = result.restored.get(name)
        if how == "deleted":
            note = " (you deleted this test: the original was put back and run)"
        elif how == "edited":
            note = " (you edited this test: the original was run)"
        return f'<a href="#{name}">Test <code>{escape(name)}</code></a>{escape(note)}'

    named = _TOC_ENTRY.sub(entry, html)
    if named != html:
        path.write_text(named, encoding="utf-8")


def export_csv(course: Course, target: Path, modules: list[Module] | None = None) -> NbgraderRun:
    """``nbgrader export`` to CSV: one row per student and assignment (all, or ``modules``).

    nbgrader lists every student of the gradebook under every assignment and scores 0 where
    it graded nothing; those rows are then marked ``not graded`` (see ``mark_not_graded``).
    """
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    only = [f"--ExportPlugin.assignment={m.dirname}" for m in modules or []]
    run = run_nbgrader(course.root, ["export", f"--to={target}", *only], wall_timeout=600,
                       log="export")
    if not run.ok or not target.is_file():
        raise GradingError(f"nbgrader export failed:\n{run.errors()}")
    mark_not_graded(course, target)
    return run


NOT_GRADED = "not graded"


def mark_not_graded(course: Course, path: Path) -> int:
    """Rewrite nbgrader's CSV so that a notebook that was never graded does not read as 0.

    nbgrader exports 0 for a student whose notebook it could not grade (it crashed on it,
    the notebook was unreadable, or there is none). Those rows get ``not graded`` as their
    score and a ``status`` column says why; a real zero stays 0.0. Returns the rows marked.
    """
    by_dir = {m.dirname: m for m in MODULES}
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return 0
    results: dict = {}  # (module, student) -> the status in words, for the graded ones
    wanted = {(by_dir[r["assignment"]], r.get("student_id", "")) for r in rows
              if r.get("assignment") in by_dir}
    if wanted:
        with course.gradebook() as gb:
            for m, student in wanted:
                if course.autograded_notebook(m, student).is_file():
                    results[(m.number, student)] = student_result(course, m, student,
                                                                  gb).condition
    marked = 0
    for row in rows:
        m = by_dir.get(row.get("assignment", ""))
        if m is None:
            row["status"] = ""
            continue
        student = row.get("student_id", "")
        if course.autograded_notebook(m, student).is_file():
            row["status"] = results.get((m.number, student)) or "graded"
            continue
        if course.submitted_notebook(m, student).is_file():
            row["status"] = (f"{NOT_GRADED}: autograde failed or was not run "
                             f"(logs/{m.dirname}/autograde-{student}.log)")
        else:
            row["status"] = f"{NOT_GRADED}: no submission"
        for key in ("raw_score", "score"):
            if key in row:
                row[key] = NOT_GRADED
        marked += 1
    fields = [*rows[0].keys()]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return marked


@dataclass
class AssignmentReport:
    module: Module
    tests: list[tuple[str, float]]  # (grade_id, points) in notebook order
    students: list[StudentResult]


def report(course: Course, modules: list[Module]) -> list[AssignmentReport]:
    """Per module with an assignment in the gradebook: every student's per-test scores."""
    from nbgrader.api import MissingEntry

    out = []
    with course.gradebook() as gb:
        for m in modules:
            try:
                master = gb.find_notebook(m.slug, m.dirname)
            except MissingEntry:
                continue
            max_scores = {c.name: float(c.max_score) for c in master.grade_cells}
            tests = [(c.name, max_scores[c.name]) for c in master.source_cells
                     if c.name in max_scores]
            known = {s.student.id for s in gb.find_assignment(m.dirname).submissions}
            students = sorted(known | set(course.students(m)))
            out.append(AssignmentReport(
                m, tests, [student_result(course, m, s, gb) for s in students]))
    return out
