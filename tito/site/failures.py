"""Curated failures for the website: typical mistakes, planted in the reference, really run.

Each written module may have ``site/failures/NN_slug.yaml``, written by hand: two or three
typical mistakes, each as the solution cell it is planted in (``cell``, a grade_id), a
snippet of that cell (``old``) and what a student might write instead (``new``), the graded
test that catches it (``test``), its cause and its fix. ``record()`` plants each mistake in a
copy of the lesson, runs the lesson through the same runner as ``tito module complete``
(``tito.student.runner.run_notebook``, a fresh process on the course's ``tinytorch``) and keeps
the message that command would print for the named test. The messages go to
``site/failures/NN_slug.recorded.json``; the module page shows them. Nothing on the page is
typed by hand: regenerate with ``tito site failures`` whenever the tests' messages change.
"""

from __future__ import annotations

import json
import multiprocessing
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..course.registry import COURSE_ROOT, Module, written_modules
from ..errors import FailureSpecError

FAILURES_DIR = COURSE_ROOT / "site" / "failures"


@dataclass(frozen=True)
class Mistake:
    test: str  # grade_id of the graded test cell that should catch it
    cell: str  # grade_id of the solution cell it is planted in
    old: str
    new: str
    cause: str
    fix: str

    @property
    def key(self) -> str:
        return f"{self.cell}: {self.old!r} -> {self.new!r}"


def spec_path(m: Module, root: Path = FAILURES_DIR) -> Path:
    return root / f"{m.dirname}.yaml"


def recorded_path(m: Module, root: Path = FAILURES_DIR) -> Path:
    return root / f"{m.dirname}.recorded.json"


def mistakes(m: Module, root: Path = FAILURES_DIR) -> list[Mistake]:
    """The planted mistakes of module ``m`` (none when it has no failures file)."""
    import yaml

    path = spec_path(m, root)
    if not path.is_file():
        return []
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = []
    for i, entry in enumerate(entries, 1):
        # "new" may be empty (a line left out); everything else must say something
        missing = [
            k
            for k in ("test", "cell", "old", "new", "cause", "fix")
            if entry.get(k) is None or (k != "new" and not entry.get(k))
        ]
        if missing:
            raise FailureSpecError(
                f"site/failures/{path.name}, mistake {i}: missing {', '.join(missing)}; each "
                "mistake needs test, cell, old, new, cause and fix."
            )
        out.append(Mistake(**{k: str(entry[k]) for k in Mistake.__dataclass_fields__}))
    return out


def planted_notebook(m: Module, mistake: Mistake):
    """The lesson with ``mistake`` planted, cut after the test that should catch it."""
    from ..course.notebook import load_notebook

    nb = load_notebook(m.source)
    label = f"site/failures/{m.dirname}.yaml"
    cells = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells]
    if mistake.cell not in cells:
        raise FailureSpecError(f"{label}: the lesson has no cell {mistake.cell!r}.")
    if mistake.test not in cells:
        raise FailureSpecError(f"{label}: the lesson has no graded cell {mistake.test!r}.")
    cell = nb.cells[cells.index(mistake.cell)]
    count = cell.source.count(mistake.old)
    if count != 1:
        raise FailureSpecError(
            f"{label}: {mistake.old!r} occurs {count} times in cell {mistake.cell!r}, not once; "
            "quote a longer snippet of the reference (the lesson may have changed)."
        )
    cell.source = cell.source.replace(mistake.old, mistake.new)
    last = cells.index(mistake.test)
    if cells.index(mistake.cell) > last:
        raise FailureSpecError(f"{label}: cell {mistake.cell!r} comes after {mistake.test!r}.")
    nb.cells = nb.cells[: last + 1]
    return nb


def run_mistake(m: Module, mistake: Mistake, timeout: float = 120) -> dict:
    """Run the lesson with ``mistake`` planted; what ``tito module complete`` says of the test."""
    import nbformat

    from ..student.runner import run_notebook

    nb = planted_notebook(m, mistake)
    with tempfile.TemporaryDirectory(prefix="tito-failure-") as tmp:
        path = Path(tmp) / f"{m.slug}.ipynb"
        nbformat.write(nb, path)
        report = run_notebook(path, COURSE_ROOT, timeout=timeout)
    result = next(r for r in report.tests if r.cell.grade_id == mistake.test)
    # Where the error happened is a line of the planted copy of the reference solution: it
    # means nothing to a reader and would show solution code on the page, so it is left out.
    result.where = None
    return {
        "test": mistake.test,
        "cell": mistake.cell,
        "old": mistake.old,
        "new": mistake.new,
        "status": result.status,
        "message": result.explain() if not result.passed else "",
    }


def run_all(modules: list[Module] | None = None, workers: int = 2) -> dict[str, list[dict]]:
    """Every planted mistake of ``modules`` (default: every written one), run; by dirname."""
    modules = written_modules() if modules is None else modules
    jobs = [(m, x) for m in modules for x in mistakes(m)]
    # Processes, not threads: CPython 3.11 builds an AST with interpreter-wide state, and two
    # threads parsing cells at once failed with "SystemError: AST constructor recursion depth
    # mismatch" (seen in CI). "spawn": a fresh interpreter, nothing inherited from the caller.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        results = list(pool.map(run_mistake, [m for m, _ in jobs], [x for _, x in jobs]))
    out: dict[str, list[dict]] = {m.dirname: [] for m in modules if mistakes(m)}
    for (m, _), result in zip(jobs, results):
        out[m.dirname].append(result)
    return out


def record(modules: list[Module] | None = None, root: Path = FAILURES_DIR) -> list[str]:
    """Run every planted mistake and write the ``.recorded.json`` files; returns problems
    (a mistake that no longer fails its test), which are recorded all the same."""
    problems = []
    for dirname, results in run_all(modules).items():
        for r in results:
            if r["status"] == "passed":
                problems.append(
                    f"{dirname}: planting {r['new']!r} in {r['cell']} no longer fails {r['test']}"
                )
        path = root / f"{dirname}.recorded.json"
        text = json.dumps(results, indent=2, ensure_ascii=False) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return problems


def recorded(m: Module, root: Path = FAILURES_DIR) -> dict[str, dict]:
    """The recorded results of module ``m``, by mistake key."""
    path = recorded_path(m, root)
    if not path.is_file():
        return {}
    return {
        Mistake(r["test"], r["cell"], r["old"], r["new"], "", "").key: r
        for r in json.loads(path.read_text(encoding="utf-8"))
    }
