"""What happened to a submission, read back from nbgrader's gradebook and notebooks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..course.registry import Module
from ..course.solutions import without_hidden_tests
from .course import Course, load_nbformat
from .flags import runtime_flags, static_flags


def load_grading(course: Course, m: Module, student: str) -> dict:
    """What autograde saved beyond the gradebook (verify.save): flags, the second grading."""
    import json

    path = course.root / "logs" / m.dirname / f"grading-{student}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@dataclass
class CellScore:
    name: str
    score: float
    max_score: float
    needs_manual: bool


@dataclass
class LockedCellChange:
    grade_id: str
    change: str  # "edited" or "deleted"
    graded: bool

    def explain(self) -> str:
        kind = "graded test" if self.graded else "locked cell"
        if self.change == "edited":
            return (f"{kind} {self.grade_id} was edited (checksum differs): nbgrader graded "
                    "the original instead")
        return (f"{kind} {self.grade_id} was deleted: it was put back where the release has "
                "it and run, as `tito module complete` does")


@dataclass
class StudentResult:
    student: str
    status: str  # graded, failed (nbgrader error), stopped (wall-clock limit), not graded
    tests: list[CellScore] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    locked_changes: list[LockedCellChange] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    stale: bool = False  # submitted again after it was autograded
    flags: list[str] = field(default_factory=list)  # what the code reached for (see *_flags)
    ended: str = ""  # "timed out in X" / "the kernel died in X": X and every later test scored 0
    restored: dict[str, str] = field(default_factory=dict)  # locked cell -> "edited"/"deleted"
    second: dict = field(default_factory=dict)  # the second grading, as verify.save wrote it

    @property
    def awaiting(self) -> list[str]:
        """Tests nbgrader left for grading by hand."""
        return [t.name for t in self.tests if t.needs_manual]

    @property
    def condition(self) -> str:
        """The status in words: graded, or graded with what the instructor must know."""
        if self.status != "graded":
            return self.status
        said = []
        if self.ended:
            said.append(self.ended + " (it and every test after it scored 0)")
        if self.awaiting:
            said.append("awaiting manual grading: " + ", ".join(self.awaiting))
        return "graded" + ("; " + "; ".join(said) if said else "")

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)

    @property
    def passed(self) -> int:
        return sum(t.score >= t.max_score > 0 for t in self.tests)


def scores_per_test(gb, m: Module, student: str) -> list[CellScore]:
    """Per graded test, from nbgrader's gradebook, in notebook order."""
    from nbgrader.api import MissingEntry

    try:
        submitted = gb.find_submission_notebook(m.slug, m.dirname, student)
        order = [c.name for c in gb.find_notebook(m.slug, m.dirname).source_cells]
    except MissingEntry:
        return []
    grades = sorted(submitted.grades,
                    key=lambda g: order.index(g.name) if g.name in order else len(order))
    return [CellScore(g.name, float(g.score or 0), float(g.max_score or 0),
                      bool(g.needs_manual_grade)) for g in grades]


def locked_cell_changes(gb, m: Module, notebook) -> list[LockedCellChange]:
    """Locked cells of the release that the submission edited or deleted.

    Uses nbgrader's own checksums: the ones generate_assignment stored in the gradebook,
    recomputed on the submitted cell with ``nbgrader.utils.compute_checksum``.
    """
    from nbgrader.api import MissingEntry
    from nbgrader.utils import compute_checksum

    try:
        master = gb.find_notebook(m.slug, m.dirname)
    except MissingEntry:
        return []
    graded = {c.name for c in master.grade_cells}
    points = {c.name: c.max_score for c in master.grade_cells}
    submitted = {}
    for cell in notebook.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            submitted.setdefault(gid, cell)
    changes = []
    for source in master.source_cells:
        if not source.locked:
            continue
        cell = submitted.get(source.name)
        if cell is None:
            changes.append(LockedCellChange(source.name, "deleted", source.name in graded))
            continue
        try:
            same = compute_checksum(cell) in (source.checksum,
                                              _released_checksum(source, points.get(source.name)))
        except Exception:  # metadata damaged beyond nbgrader's checksum
            same = False
        if not same:
            changes.append(LockedCellChange(source.name, "edited", source.name in graded))
    return changes


def _released_checksum(source, points) -> str:
    """nbgrader's checksum of a locked cell as the release holds it. generate_assignment
    removes a graded test cell's hidden test cases from the release and records the checksum
    after that; the gradebook keeps the whole cell and its checksum."""
    from nbformat.v4 import new_code_cell
    from nbgrader.utils import compute_checksum

    released = without_hidden_tests(source.source)
    if points is None or released == source.source:
        return source.checksum
    meta = {"grade": True, "solution": False, "locked": True, "grade_id": source.name,
            "points": points}
    return compute_checksum(new_code_cell(released, metadata={"nbgrader": meta}))


def ended_at(notebook) -> str:
    """Where grading ended the kernel (a cell past its time limit that ignored the interrupt,
    or a kernel that died): ``timed out in X`` / ``the kernel died in X``, or ``""``."""
    for index, cell in enumerate(notebook.cells):
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            if output.get("ename") == "CellTimeoutError" and "kernel was ended" in str(
                    output.get("evalue", "")):
                return f"timed out in {name}"
            if output.get("ename") == "DeadKernelError":
                return f"the kernel died in {name}"
    return ""


def restored_cells(notebook) -> dict[str, str]:
    """Locked cells the grading put back: grade_id -> "edited" or "deleted"."""
    found = {}
    for cell in notebook.cells:
        how = cell.get("metadata", {}).get("tito", {}).get("restored")
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if how and gid:
            found[gid] = how
    return found


def timed_out_cells(notebook) -> list[str]:
    """Cells of an autograded notebook that nbgrader interrupted at the time limit."""
    names = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") == "CellTimeoutError":
                names.append(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                             or f"cell {index}")
                break
    return names


def student_result(course: Course, m: Module, student: str, gb=None) -> StudentResult:
    """What the course folder and gradebook say about one student's module ``m``."""
    result = StudentResult(student, "not graded")
    graded_nb = course.autograded_notebook(m, student)
    submitted = course.submitted_notebook(m, student)

    def fill(book):
        if submitted.is_file():
            try:
                notebook = load_nbformat().read(submitted, as_version=4)
            except Exception:
                notebook = None
            if notebook is not None:
                result.locked_changes = locked_cell_changes(book, m, notebook)
                result.flags = static_flags(course, m, notebook, book)
        if graded_nb.is_file():
            result.status = "graded"
            result.stale = submitted.is_file() and (
                submitted.stat().st_mtime > graded_nb.stat().st_mtime)
            result.tests = scores_per_test(book, m, student)
            graded_notebook = load_nbformat().read(graded_nb, as_version=4)
            result.timed_out = timed_out_cells(graded_notebook)
            result.ended = ended_at(graded_notebook)
            result.restored = restored_cells(graded_notebook)
            result.flags += runtime_flags(graded_notebook)
            saved = load_grading(course, m, student)
            if saved and not result.stale and saved.get("graded_at") in (
                    None, graded_nb.stat().st_mtime):
                result.flags += [f for f in saved.get("flags", []) if f not in result.flags]
                result.second = saved.get("second", {})

    if gb is not None:
        fill(gb)
    else:
        with course.gradebook() as book:
            fill(book)
    return result
