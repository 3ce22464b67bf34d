"""What one run of a notebook's cells found, cell by cell, and how a cell is named.

``CellResult`` (one cell: its status, its error and where, one teaching sentence) and
``RunReport`` (the run: tests passed, failed, not counted) are what `tito module complete`
prints and what the instructor's second grading compares; ``runs.py`` makes them from the
driver's records. A cell is named as a student finds it in Jupyter (``cell_label``), a function
by its qualified name, a timed-out line from faulthandler's dump (``stack_where``). Like
``runs.py``, this file runs in tito, never in the sandbox.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..course.notebook import Cell


def _first_line(source: str) -> str:
    """The first line of a cell that says something (not a directive, not blank), cut short."""
    for line in source.splitlines():
        text = line.strip()
        if text and not text.startswith("#|"):
            return text if len(text) <= 60 else text[:57] + "..."
    return ""


def cell_label(cell: Cell, plan: list[Cell] = ()) -> str:
    """How a student finds a cell in Jupyter, which numbers no cell: its nbgrader name (the
    lesson's cells), else whose it is, the named cell it follows in ``plan`` and how it starts.
    ``origin`` "given" is a cell of the lesson the notebook holds unchanged (a demo)."""
    if cell.nbgrader.get("grade_id"):
        return f"cell '{cell.grade_id}'"
    owner = "the lesson's cell" if cell.origin in ("given", "release") else "your cell"
    named = [c for c in plan[:cell.index] if c.nbgrader.get("grade_id")]
    if named:
        owner += f" after '{named[-1].grade_id}'"
    else:
        later = [c for c in plan[cell.index + 1:] if c.nbgrader.get("grade_id")]
        if later:
            owner += f" before '{later[0].grade_id}'"
    first = _first_line(cell.source)
    return owner + (f" that starts `{first}`" if first else " (an empty cell)")


def is_locked(cell: Cell) -> bool:
    """nbgrader's rule: graded cells and locked cells are read-only, solution cells never."""
    meta = cell.nbgrader
    if not meta or meta.get("solution"):
        return False
    return bool(meta.get("grade") or meta.get("locked"))


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
    stderr: str = ""  # what the cell wrote to stderr (a graded cell that did fails, as in nbgrader)
    dropped: list = field(default_factory=list)  # (line, code) not run: not a definition
    label: str = ""  # how the student finds the cell (``cell_label``); its grade_id if unset
    after_refusal: str = ""  # the cell refused earlier in the run: this result is not counted

    @property
    def name(self) -> str:
        return self.label or f"cell '{self.cell.grade_id}'"

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
            if label == self.label and not self.cell.nbgrader.get("grade_id"):
                label = "this cell"  # its long name is said once, before the message
            where = (f" (in {func}, {label}, line {line}: `{code}`)" if code
                     else f" ({label}, line {line})")
        if self.error_type == "NotImplementedError":
            text = (f"not implemented yet{where}: replace `raise NotImplementedError()` with "
                    "your code")
        elif self.error_type == "AssertionError":
            text = (self.message or "an assertion failed without a message") + where
        elif self.error_type == "IntegrityError":
            text = f"not allowed: {self.message} (put back); the tests after it are not counted"
        elif self.error_type == "StderrOutput":
            text = (f"the test passed but wrote to stderr ({self.message!r}). nbgrader, which "
                    "gives the instructor's grade, scores any output to stderr in a test cell "
                    "as a failure: remove the print(..., file=sys.stderr), or fix what raises "
                    "the warning")
        elif self.error_type in ("SyntaxError", "IndentationError", "TabError"):
            text = (f"{self.error_type}: {self.message}{where}. Nothing in this cell ran, so "
                    "nothing it defines exists: fix this first")
        elif self.error_type:
            text = f"{self.error_type}: {self.message}{where}"
        else:  # the run itself ended or was stopped here: no exception to name
            text = (self.message or "failed") + where
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
    finished: bool = True  # the driver sent its last record (False: it died or was stopped)
    started: bool = True  # the driver sent its first record (False: it never ran a cell)
    rejected_lines: int = 0  # lines on the result channel without the run's signature
    driver_error: str = ""  # the driver's own stderr when it failed before any cell

    @property
    def tests(self) -> list[CellResult]:
        return [r for r in self.cells if r.cell.is_graded]

    @property
    def passed(self) -> list[CellResult]:
        """Tests that passed and count: not after a refusal (see ``not_counted``)."""
        return [r for r in self.tests if r.passed and not r.after_refusal]

    @property
    def failed(self) -> list[CellResult]:
        return [r for r in self.tests if not r.passed]

    @property
    def not_counted(self) -> list[CellResult]:
        """Tests that passed after the guard refused an earlier cell: what they checked was
        put back, but they ran after it, so they are not counted (as in the second grading)."""
        return [r for r in self.tests if r.passed and r.after_refusal]

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


_STACK_LINE = re.compile(r'File "<cell (\d+) \'(.*?)\'>", line (\d+) in (\S+)')


def stack_where(stack: str, plan: list[Cell]) -> str:
    """The innermost notebook line in a faulthandler dump, as `in function, cell, line N: code`."""
    for match in _STACK_LINE.finditer(stack):  # most recent call first
        index, line, func = int(match[1]), int(match[3]), match[4]
        if index >= len(plan):
            continue
        lines = plan[index].source.splitlines()
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        func = qualified_name(plan[index].source, line, func)
        return (f"in {func}, {cell_label(plan[index], plan)}, line {line}"
                + (f": `{code}`" if code else ""))
    return ""


_LABEL = re.compile(r"^cell (\d+) '")


def qualified_name(source: str, line: int, name: str) -> str:
    """``name`` of the function running at ``line`` of a cell, with the classes and functions
    around it: `MatMul.forward`, not `forward`; a test's local check as `test_x.check`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return name
    path: list[str] = []
    body = tree.body
    while True:
        inner = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                        ast.ClassDef))
                      and n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if inner is None:
            break
        path.append(inner.name)
        body = inner.body
    while path and path[-1] != name:  # the line is in a lambda or a comprehension
        path.pop()
    return ".".join(path) if path else name


def where_label(where, plan: list[Cell]) -> tuple | None:
    """The driver's ``where`` with its cell named as the student finds it (see cell_label)
    and its function by its qualified name."""
    if not where:
        return None
    where = list(where)
    match = _LABEL.match(str(where[0]))
    if match and int(match[1]) < len(plan):
        cell = plan[int(match[1])]
        where[0] = cell_label(cell, plan)
        if len(where) > 3 and isinstance(where[1], int):
            where[3] = qualified_name(cell.source, where[1], str(where[3]))
    return tuple(where)


def root_cause(result: CellResult, cause: CellResult | None) -> CellResult | None:
    """Mark a failure that follows from an earlier failing ungraded cell (root cause first);
    return the cause to remember for the cells after this one."""
    if result.passed:
        return cause
    if not result.cell.is_graded and result.status == "failed" and cause is None:
        return result
    if cause is not None and result.error_type in ("NameError", "ImportError", "AttributeError"):
        result.depends_on = cause.name
    return cause
