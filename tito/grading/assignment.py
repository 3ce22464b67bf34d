"""An assignment in the course folder: the source notebook from the lesson, then its release.

``generate`` writes ``source/NN_slug/slug.ipynb`` after checking the lesson's metadata;
``release`` runs ``nbgrader generate_assignment`` on it (solutions replaced, checksums kept
in the gradebook).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..course.notebook import to_ipynb
from ..course.registry import Module
from ..errors import GradingError, NotebookError
from .course import Course, load_nbformat
from .metadata import metadata_problems
from .process import NbgraderRun, run_nbgrader


def _content(notebook) -> list:
    """What a notebook says, without the random cell ids jupytext/nbformat give each read."""
    return [(c.cell_type, c.source, dict(c.get("metadata", {}))) for c in notebook.cells]


@dataclass
class Generated:
    path: Path
    unchanged: bool  # the source notebook was already exactly this
    cells: int
    tests: int
    points: float
    solutions: int


def generate(course: Course, m: Module, lesson: Path | None = None,
             force: bool = False) -> Generated:
    """Lesson file -> source/NN_slug/slug.ipynb, after checking its nbgrader metadata."""
    lesson = Path(lesson) if lesson else m.source
    try:
        notebook = to_ipynb(lesson)
    except NotebookError as error:
        raise GradingError(str(error)) from None
    problems = metadata_problems(notebook, lesson)
    if problems:
        raise GradingError(
            f"{lesson} has broken nbgrader metadata; nothing was written:\n  "
            + "\n  ".join(problems)
        )
    graded = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    if not graded:
        raise GradingError(
            f"{lesson} has no graded test cells (\"grade\": true): nothing to grade.")
    target = course.source_notebook(m)
    unchanged = False
    if target.is_file():
        try:
            unchanged = _content(load_nbformat().read(target, as_version=4)) == _content(notebook)
        except Exception:  # unreadable: certainly not the same
            pass
        if not unchanged and not force:
            raise GradingError(
                f"{course.rel(target)} exists and differs from what {lesson.name} gives now "
                "(the lesson changed, or the notebook was edited by hand). `--force` "
                "replaces it."
            )
    if not unchanged:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(load_nbformat().writes(notebook), encoding="utf-8")
    return Generated(
        target, unchanged, len(notebook.cells), len(graded),
        sum(float(c.metadata.nbgrader["points"]) for c in graded),
        sum(bool(c.metadata.get("nbgrader", {}).get("solution")) for c in notebook.cells),
    )


def release(course: Course, m: Module, force: bool = False) -> NbgraderRun:
    source = course.source_notebook(m)
    if not source.is_file():
        raise GradingError(
            f"{course.rel(source)} does not exist: run `tito nbgrader generate {m.key}` first."
        )
    target = course.release_notebook(m)
    if target.is_file() and not force:
        raise GradingError(
            f"{course.rel(target)} exists: module {m.key} is already released. `--force` "
            "releases it again (once there are submissions, nbgrader refuses to add or remove "
            "cells; students holding the old release will show its changed locked cells as "
            "edited)."
        )
    run = run_nbgrader(course.root, ["generate_assignment", m.dirname, "--force"], wall_timeout=600,
                       log=f"{m.dirname}/release")
    if not run.ok or not target.is_file():
        raise GradingError(
            f"nbgrader generate_assignment {m.dirname} failed:\n{run.errors()}")
    return run
