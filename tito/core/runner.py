"""Run the graded tests of a lesson against whoever wrote it.

``run_notebook`` executes every code cell of a notebook (the student's ``.ipynb`` in a
workspace, the reference ``.py`` in the course repository) in order, in a fresh Python
process whose ``tinytorch`` is the one beside the notebook's owner, and reports each graded
cell as a test. Nothing is imported into the calling process, so a student's bug can never
be hidden by the reference solution already loaded here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .notebook import Cell, cells_of, load_notebook

DEFAULT_TIMEOUT = 600.0


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

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def explain(self) -> str:
        """One teaching sentence: what went wrong and where."""
        if self.status == "timeout":
            return "stopped: the cell ran longer than the time limit (an endless loop?)"
        if self.status == "not run":
            return "not run: an earlier cell ran out of time"
        where = ""
        if self.where:
            label, line, code, func = self.where
            where = f" (in {func}, {label} line {line}: `{code}`)" if code else f" ({label} line {line})"
        if self.error_type == "NotImplementedError":
            return f"not implemented yet{where}: replace `raise NotImplementedError()` with your code"
        if self.error_type == "AssertionError":
            return (self.message or "an assertion failed without a message") + where
        return f"{self.error_type}: {self.message}{where}"


@dataclass
class RunReport:
    cells: list[CellResult] = field(default_factory=list)
    seconds: float = 0.0

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
    def ok(self) -> bool:
        return bool(self.tests) and not self.failed

    def points(self) -> tuple[float, float]:
        return (sum(r.cell.points for r in self.passed), sum(r.cell.points for r in self.tests))


def run_notebook(path: Path, package_root: Path, timeout: float = DEFAULT_TIMEOUT) -> RunReport:
    """Execute ``path``'s code cells with ``package_root`` first on ``sys.path``."""
    cells = [c for c in cells_of(load_notebook(path)) if c.kind == "code"]
    spec = {
        "package_root": str(Path(package_root).resolve()),
        "cells": [{"index": c.index, "name": c.grade_id, "source": c.source} for c in cells],
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tito-run-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        results_path = Path(tmp) / "results.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
        timed_out = False
        try:
            subprocess.run(
                [sys.executable, "-m", "tito.core.driver", str(spec_path), str(results_path)],
                cwd=Path(path).resolve().parent, env=env, timeout=timeout,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
        except subprocess.TimeoutExpired:
            timed_out = True
        raw = json.loads(results_path.read_text()) if results_path.exists() else []
    by_index = {r["index"]: r for r in raw}
    report = RunReport(seconds=time.perf_counter() - start)
    for cell in cells:
        r = by_index.get(cell.index)
        if r is None:
            report.cells.append(CellResult(cell, "not run" if timed_out else "failed",
                                           message="the test process stopped before this cell"))
        elif r["status"] == "running":
            report.cells.append(CellResult(cell, "timeout" if timed_out else "failed",
                                           message="the test process died in this cell"))
        else:
            report.cells.append(CellResult(
                cell, r["status"], r.get("error_type", ""), r.get("message", ""),
                tuple(r["where"]) if r.get("where") else None, r.get("traceback", ""),
                r.get("seconds", 0.0), r.get("stdout", ""),
            ))
    return report
