"""Collecting submissions: students' notebooks copied into ``submitted/<student>/``."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..course.registry import Module
from ..errors import GradingError
from .course import Course, load_nbformat

_STUDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


@dataclass
class Collected:
    student: str
    source: Path
    target: Path
    replaced: bool


@dataclass
class Skipped:
    path: Path
    reason: str


def _find_notebook(folder: Path, m: Module) -> Path:
    candidates = [p for p in sorted(folder.rglob("*.ipynb"))
                  if ".ipynb_checkpoints" not in p.parts]
    named = [p for p in candidates if p.name == f"{m.slug}.ipynb"]
    if len(named) == 1:
        return named[0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise GradingError(f"no notebook (.ipynb) inside {folder}")
    raise GradingError(
        f"{len(candidates)} notebooks inside {folder} and not exactly one named "
        f"{m.slug}.ipynb: pass the file itself"
    )


def _student_of(path: Path, m: Module) -> str:
    if path.is_dir():
        return path.name
    stem = path.stem
    if stem in (m.slug, m.dirname):  # submissions/alice/tensor.ipynb
        return path.parent.name
    return stem


def collect(course: Course, m: Module, paths: list[Path], student: str | None = None
            ) -> tuple[list[Collected], list[Skipped]]:
    """Copy submissions into submitted/<student>/NN_slug/slug.ipynb.

    A PATH is a student's folder (student id = folder name) or a notebook file (student id =
    file name, or its folder's name when the file is called ``slug.ipynb``).
    """
    if student and len(paths) != 1:
        raise GradingError("--student names one student: give exactly one PATH with it.")
    done: list[Collected] = []
    skipped: list[Skipped] = []
    ids: dict[str, Path] = {}
    for path in paths:
        path = Path(path)
        try:
            if not path.exists():
                raise GradingError("does not exist")
            notebook = _find_notebook(path, m) if path.is_dir() else path
            if notebook.suffix != ".ipynb":
                raise GradingError("not a notebook (.ipynb)")
            sid = student or _student_of(path, m)
            if not _STUDENT.match(sid):
                raise GradingError(
                    f"student id {sid!r} (from the name) is not usable: letters, digits, "
                    "'_', '-', '.', '@'; pass --student ID")
            if sid in ids:
                raise GradingError(f"student {sid!r} was already collected from {ids[sid]}")
            try:
                load_nbformat().read(notebook, as_version=4)
            except Exception as error:
                first = str(error).splitlines()[0][:120]
                raise GradingError(f"not a readable notebook ({first})") from None
        except GradingError as error:
            skipped.append(Skipped(path, str(error)))
            continue
        target = course.submitted_notebook(m, sid)
        replaced = target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, target)  # a fresh mtime: newer than any earlier grading
        # nbgrader reads the submission's time from timestamp.txt (grades.csv's timestamp
        # column, late penalties): the time the student's file was last written.
        written = datetime.fromtimestamp(notebook.stat().st_mtime, timezone.utc)
        (target.parent / "timestamp.txt").write_text(
            written.strftime("%Y-%m-%d %H:%M:%S.%f %Z"), encoding="utf-8")
        ids[sid] = path
        done.append(Collected(sid, notebook, target, replaced))
    return done, skipped
