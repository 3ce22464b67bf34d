"""What a run of a notebook's cells gives back: one result per cell, and the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..course.notebook import Cell


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
