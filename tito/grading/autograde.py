"""Grading a class with nbgrader itself: the logic behind `tito nbgrader ...`.

An instructor's course folder is an ordinary nbgrader course:

    course/
      nbgrader_config.py                 root, course_id, gradebook, per-cell time limit
      gradebook.db                       nbgrader's gradebook (sqlite)
      source/01_tensor/tensor.ipynb      from modules/01_tensor/tensor.py (`generate`)
      release/01_tensor/tensor.ipynb     what students get (`release`: generate_assignment)
      submitted/<student>/01_tensor/tensor.ipynb   (`collect`)
      autograded/<student>/01_tensor/tensor.ipynb  (`autograde`)
      feedback/<student>/01_tensor/tensor.html     (`feedback`)
      logs/01_tensor/autograde-<student>.log        nbgrader's output of each run (tito's)

The assignment of module N is its folder name (``01_tensor``) and its one notebook is the
module's slug (``tensor``). Every grading step is nbgrader's own command, run in a
subprocess from this interpreter's environment (see ``release.nbgrader_env``); tito only
checks the lesson's metadata first, copies submissions into place, runs nbgrader once per
student so that one student's crash or hang cannot stop the others, and reads the gradebook
back (nbgrader's ``Gradebook`` API) to say what happened.
"""

from __future__ import annotations

import copy
import csv
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from pathlib import Path

from ..course.notebook import SOLUTION_BEGIN, SOLUTION_END, to_ipynb
from ..course.registry import COURSE_ROOT, MODULES, Module, get_module, prerequisites
from ..errors import GradingError, NotebookError
from . import sandbox
from .release import nbgrader_env

CONFIG_NAME = "nbgrader_config.py"
COURSE_FOLDERS = ("source", "release", "submitted", "autograded", "feedback")
DEFAULT_TIMEOUT = 120  # seconds per cell when autograding
DEFAULT_COURSE_ID = "tinytorch"
# Extra wall-clock time allowed to one student's nbgrader run on top of the per-cell limits
# (starting Python, nbgrader and the kernel; writing the gradebook).
RUN_OVERHEAD = 300
def _nbformat():
    """nbformat, imported on first use: its import costs a second or more at tito's start."""
    import nbformat

    return nbformat


DEFAULT_CELLS = 50  # code cells assumed when the source notebook cannot be read

CONFIG_TEMPLATE = '''\
# nbgrader configuration of a TinyTorch course, written by `tito nbgrader init`.
# nbgrader reads it when run from this folder; paths are relative to this file, so the
# course folder can be moved.
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file
here = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = here
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

# Time limit per notebook cell when autograding, in seconds. A cell that runs longer (an
# endless loop) is interrupted, its test scores zero and grading goes on with the next cell.
# `tito nbgrader autograde N --timeout S` overrides it for one run.
c.ExecutePreprocessor.timeout = {timeout}

# nbgrader 0.9.6 could put deleted test cells back (OverwriteCells.add_missing_cells), but
# it crashes on TinyTorch notebooks: KeyError when the deleted test follows a locked cell
# that is not graded, and KeyError 'grade_id' on any ungraded cell with nbgrader metadata.
# Left off: a deleted test scores zero and is flagged for manual grading, and
# `tito nbgrader autograde` and `report` name the deleted cell.
c.OverwriteCells.add_missing_cells = False
'''


# ---- the course folder -------------------------------------------------------------------
@dataclass
class Course:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Course | None":
        here = Path(start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file():
                return cls(folder)
        return None

    @classmethod
    def require(cls, start: Path | None = None) -> "Course":
        found = cls.find(start)
        if found is None:
            where = Path(start or Path.cwd()).resolve()
            raise GradingError(
                f"{where} is not inside an nbgrader course (no {CONFIG_NAME} here or above). "
                "Make one with `tito nbgrader init DIR`, then run tito inside it "
                "(or pass `tito nbgrader --course DIR ...`)."
            )
        return found

    # nbgrader's own reading of the configuration: root, gradebook URL, course id.
    def settings(self) -> dict:
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        try:
            config = PyFileConfigLoader(CONFIG_NAME, path=str(self.root)).load_config()
        except Exception as error:  # a syntax error in the instructor's config
            raise GradingError(f"{self.root / CONFIG_NAME} could not be read: {error}") from None
        coursedir = CourseDirectory(config=config)
        if not coursedir.root:
            coursedir.root = str(self.root)
        timeout = None
        if "ExecutePreprocessor" in config:
            timeout = config.ExecutePreprocessor.get("timeout")
        return {
            "db_url": coursedir.db_url,
            "course_id": coursedir.course_id,
            "timeout": timeout,
        }

    def gradebook(self):
        from nbgrader.api import Gradebook

        s = self.settings()
        return Gradebook(s["db_url"], s["course_id"])

    # paths
    def source_notebook(self, m: Module) -> Path:
        return self.root / "source" / m.dirname / f"{m.slug}.ipynb"

    def release_notebook(self, m: Module) -> Path:
        return self.root / "release" / m.dirname / f"{m.slug}.ipynb"

    def submitted_notebook(self, m: Module, student: str) -> Path:
        return self.root / "submitted" / student / m.dirname / f"{m.slug}.ipynb"

    def autograded_notebook(self, m: Module, student: str) -> Path:
        return self.root / "autograded" / student / m.dirname / f"{m.slug}.ipynb"

    def feedback_file(self, m: Module, student: str) -> Path:
        return self.root / "feedback" / student / m.dirname / f"{m.slug}.html"

    def students(self, m: Module) -> list[str]:
        """Students with a submission of module ``m`` in submitted/."""
        folder = self.root / "submitted"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if (p / m.dirname).is_dir())

    def rel(self, path: Path) -> str:
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)


def init_course(root: Path, course_id: str = DEFAULT_COURSE_ID, timeout: int = DEFAULT_TIMEOUT,
                force: bool = False) -> Course:
    root = Path(root).resolve()
    existing = [name for name in (CONFIG_NAME, "gradebook.db", *COURSE_FOLDERS)
                if (root / name).exists()]
    if existing and not force:
        raise GradingError(
            f"{root} already holds an nbgrader course ({', '.join(existing)}). "
            "`--force` rewrites nbgrader_config.py and adds missing folders; submissions, "
            "grades and the gradebook are never deleted."
        )
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", course_id):
        raise GradingError(f"course id {course_id!r}: use letters, digits, '_', '-' or '.'.")
    if timeout <= 0:
        raise GradingError(f"--timeout must be a positive number of seconds, got {timeout}.")
    root.mkdir(parents=True, exist_ok=True)
    for name in COURSE_FOLDERS:
        (root / name).mkdir(exist_ok=True)
    (root / CONFIG_NAME).write_text(
        CONFIG_TEMPLATE.format(course_id=course_id, timeout=int(timeout)), encoding="utf-8")
    return Course(root)


# ---- checking a lesson's nbgrader metadata ------------------------------------------------
NBGRADER_KEYS = {"schema_version", "grade", "grade_id", "locked", "points", "solution", "task",
                 "checksum", "cell_type"}
REQUIRED_KEYS = ("grade", "locked", "solution", "task")
_GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]+$")


def _header_lines(lesson: Path | None) -> dict[str, int]:
    """grade_id -> line of its cell header in a jupytext lesson (for error messages)."""
    if lesson is None or Path(lesson).suffix != ".py":
        return {}
    found = {}
    for number, line in enumerate(Path(lesson).read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            match = re.search(r'"grade_id":\s*"([^"]*)"', line)
            if match:
                found.setdefault(match.group(1), number)
    return found


def metadata_problems(notebook, lesson: Path | None = None) -> list[str]:
    """Everything wrong with the nbgrader metadata of ``notebook``, one sentence per problem.

    Checked before nbgrader sees the notebook, because nbgrader's own errors name neither
    the cell nor, often, the key. Each sentence names the cell by grade_id (and its line in
    the lesson file) or by its position, then the key and the fix.
    """
    lines = _header_lines(lesson)
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, cell in enumerate(notebook.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        meta = cell.metadata["nbgrader"]
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        name = f"cell {index}"
        if isinstance(gid, str) and gid:
            name += f" (grade_id {gid!r}"
            name += f", {Path(lesson).name} line {lines[gid]})" if gid in lines else ")"

        def bad(text: str) -> None:
            problems.append(f"{name}: {text}")

        if not isinstance(meta, dict):
            bad(f"nbgrader metadata must be a mapping, got {type(meta).__name__}")
            continue
        version = meta.get("schema_version")
        if "schema_version" not in meta:
            bad("missing key 'schema_version': nbgrader 0.9 needs \"schema_version\": 3")
        elif version != 3 or isinstance(version, bool):
            bad(f"schema_version is {version!r}: nbgrader 0.9 needs \"schema_version\": 3")
        for key in REQUIRED_KEYS:
            if key not in meta:
                hint = {
                    "locked": " (true for tests and given code, false for solution cells)",
                    "grade": " (true only for graded test cells)",
                    "solution": " (true for cells with ### BEGIN SOLUTION)",
                    "task": " (false)",
                }[key]
                bad(f"missing key {key!r}{hint}")
            elif not isinstance(meta[key], bool):
                bad(f"{key!r} must be true or false, got {meta[key]!r}")
        for key in sorted(set(meta) - NBGRADER_KEYS):
            bad(f"unknown key {key!r} (nbgrader would silently drop it; a typo of "
                f"{_closest(key)!r}?)")
        grade, solution, locked = (meta.get(k) is True for k in ("grade", "solution", "locked"))
        if grade or solution or locked:
            if "grade_id" not in meta:
                bad("missing key 'grade_id': every graded, solution or locked cell needs a "
                    "unique \"grade_id\" (e.g. \"test_unit_<what>\")")
            elif not isinstance(gid, str) or not _GRADE_ID.match(gid):
                bad(f"grade_id {meta['grade_id']!r} is not valid: use letters, digits, '_' and '-'")
            elif gid in seen:
                bad(f"grade_id {gid!r} is used twice (also by cell {seen[gid]}): grade ids "
                    "must be unique")
            if isinstance(gid, str) and gid:
                seen.setdefault(gid, index)
        if grade:
            points = meta.get("points")
            if "points" not in meta:
                bad("missing key 'points': a graded cell (\"grade\": true) needs \"points\"")
            elif isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
                bad(f"points must be a number >= 0, got {points!r}")
            if cell.cell_type == "markdown" and not solution:
                bad("a graded markdown cell must also be a solution cell")
        elif "points" in meta:
            bad(f"has \"points\": {meta['points']!r} but \"grade\" is not true: the points "
                "would never count (set \"grade\": true, or remove points)")
        if solution and locked:
            bad("\"solution\": true and \"locked\": true contradict each other: students "
                "must be able to edit a solution cell (set \"locked\": false)")
        if solution and cell.cell_type == "code":
            begins = sum(ln.strip() == SOLUTION_BEGIN for ln in cell.source.splitlines())
            ends = sum(ln.strip() == SOLUTION_END for ln in cell.source.splitlines())
            if begins != ends:
                bad(f"{begins} '{SOLUTION_BEGIN}' but {ends} '{SOLUTION_END}' lines: every "
                    "solution block needs both")
    if not problems:
        # nbgrader's own validator as the last word (it is what generate_assignment runs).
        from nbgrader.nbgraderformat import MetadataValidator

        try:
            MetadataValidator().validate_nb(copy.deepcopy(notebook))
        except Exception as error:  # jsonschema / nbgrader ValidationError
            problems.append(f"nbgrader's validator: {str(error).splitlines()[0]}")
    return problems


def _closest(key: str) -> str:
    import difflib

    match = difflib.get_close_matches(key, sorted(NBGRADER_KEYS), n=1, cutoff=0.0)
    return match[0] if match else ""


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
            unchanged = _content(_nbformat().read(target, as_version=4)) == _content(notebook)
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
        target.write_text(_nbformat().writes(notebook), encoding="utf-8")
    return Generated(
        target, unchanged, len(notebook.cells), len(graded),
        sum(float(c.metadata.nbgrader["points"]) for c in graded),
        sum(bool(c.metadata.get("nbgrader", {}).get("solution")) for c in notebook.cells),
    )


# ---- running nbgrader ----------------------------------------------------------------------
@dataclass
class NbgraderRun:
    args: list[str]
    returncode: int | None  # None: stopped by tito's wall-clock limit
    output: str
    seconds: float
    log: Path | None = None  # nbgrader's whole output, kept in the course's logs/

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def errors(self, limit: int = 8) -> str:
        """The gist of a failure: nbgrader's ERROR lines and the exception, without chatter."""
        lines = [ln.rstrip() for ln in self.output.splitlines() if ln.strip()]
        picked = []
        for ln in lines:
            if (_EXCEPTION.match(ln) or "| ERROR]" in ln) and not _BOILERPLATE.search(ln):
                if ln.strip() not in (p.strip() for p in picked):
                    picked.append(ln.strip())
        if not picked:
            picked = [ln for ln in lines if not _NOISE.search(ln)]
        text = "\n".join(picked[-limit:])
        if self.log:
            text += f"\n(nbgrader's full output: {self.log})"
        return text


_NOISE = re.compile(
    r"\| INFO\]|SAWarning|^\s+(for notebook in|return \[x for)|running over TCP|"
    r"does not exist in the database"
)
_BOILERPLATE = re.compile(r"Please see the|Traceback \(most recent")
_EXCEPTION = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit)\b(:|$)")


def run_nbgrader(course: Course, args: list[str], wall_timeout: float | None = None,
                 log: str | None = None, env: dict[str, str] | None = None) -> NbgraderRun:
    """``python -m nbgrader ARGS`` in the course folder; killed whole after ``wall_timeout``.

    nbgrader runs in a process group of its own, killed whole when it overruns (or when tito
    is interrupted). The kernel it started has its own session, but ipykernel's parent
    poller ends it within a second of nbgrader's death. With ``log``, nbgrader's output is
    also kept in ``logs/<log>.log`` of the course.
    """
    command = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course.root}"]
    full_env = {**nbgrader_env(), **(env or {})}
    # In a virtual environment made with --system-site-packages, nbconvert's templates (used
    # by generate_feedback) live in the base Python's share/jupyter, which Jupyter does not
    # search by itself.
    base_share = Path(sys.base_prefix) / "share" / "jupyter"
    if sys.base_prefix != sys.prefix and base_share.is_dir():
        full_env["JUPYTER_PATH"] = os.pathsep.join(
            p for p in (full_env.get("JUPYTER_PATH", ""), str(base_share)) if p)
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=course.root, env=full_env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=wall_timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    except BaseException:  # Ctrl-C: the new session does not get the terminal's signal
        os.killpg(process.pid, signal.SIGKILL)
        raise
    run = NbgraderRun(args, code, output or "", time.perf_counter() - start)
    if log:
        path = course.root / "logs" / f"{log}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"$ nbgrader {' '.join(args)}\n{run.output}", encoding="utf-8")
        run.log = Path(course.rel(path))
    return run


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
    run = run_nbgrader(course, ["generate_assignment", m.dirname, "--force"], wall_timeout=600,
                       log=f"{m.dirname}/release")
    if not run.ok or not target.is_file():
        raise GradingError(
            f"nbgrader generate_assignment {m.dirname} failed:\n{run.errors()}")
    return run


# ---- collecting submissions --------------------------------------------------------------------
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
                _nbformat().read(notebook, as_version=4)
            except Exception as error:
                raise GradingError(f"not a readable notebook ({str(error).splitlines()[0][:120]})")
        except GradingError as error:
            skipped.append(Skipped(path, str(error)))
            continue
        target = course.submitted_notebook(m, sid)
        replaced = target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, target)  # a fresh mtime: newer than any earlier grading
        ids[sid] = path
        done.append(Collected(sid, notebook, target, replaced))
    return done, skipped


# ---- what happened to a submission -----------------------------------------------------------
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
        if self.graded:
            return (f"{kind} {self.grade_id} was deleted: nbgrader 0.9.6 does not put it "
                    "back; it scores 0 and is flagged for manual grading")
        return (f"{kind} {self.grade_id} was deleted: nbgrader does not put it back; the "
                "cells after it ran without it")


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
            same = compute_checksum(cell) == source.checksum
        except Exception:  # metadata damaged beyond nbgrader's checksum
            same = False
        if not same:
            changes.append(LockedCellChange(source.name, "edited", source.name in graded))
    return changes


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
                notebook = _nbformat().read(submitted, as_version=4)
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
            graded_notebook = _nbformat().read(graded_nb, as_version=4)
            result.timed_out = timed_out_cells(graded_notebook)
            result.flags += runtime_flags(graded_notebook)

    if gb is not None:
        fill(gb)
    else:
        with course.gradebook() as book:
            fill(book)
    return result


# ---- grading module N against N's prerequisites only ------------------------------------------
GRADING_PLACEHOLDER = "# PLACEHOLDER written by `tito nbgrader autograde`"
# What a kernel says when a notebook imports what grading does not provide (see below).
_NOT_PROVIDED = ("does not build on", "the module being graded", "comes from module")


def _placeholder(target: Module, graded: Module, provided: list[Module]) -> str:
    if target.number == graded.number:
        why = (f"tinytorch.{target.target} is module {target.key} ({target.title}), the module "
               "being graded: its code must be written in this notebook, not imported.")
    else:
        have = ", ".join(p.key for p in provided) or "none"
        why = (f"tinytorch.{target.target} is module {target.key} ({target.title}), which "
               f"module {graded.key} ({graded.title}) does not build on: grading {graded.key} "
               f"provides only its prerequisites (modules: {have}).")
    return f"{GRADING_PLACEHOLDER}\nraise ImportError({why!r})\n"


def prerequisite_package(m: Module, dest: Path) -> Path:
    """``dest/tinytorch``: the reference exports of ``prerequisites(m)`` only.

    Every other module's file (``m``'s own included) is a placeholder whose ImportError names
    the module; the package's ``__init__`` files say which module a missing name comes from.
    """
    from ..course.exporter import init_files, reference_export, reference_plan, write_plan

    provided = [get_module(n) for n in prerequisites(m.number)]
    dest.mkdir(parents=True, exist_ok=True)
    plan = reference_plan(only=provided, root=dest)
    present = {p.number: reference_export(p).names for p in provided}
    missing: dict[str, Module] = {}
    for other in MODULES:
        if other.number in present:
            continue
        plan[other.target_path] = _placeholder(other, m, provided)
        if other.written:
            for name in reference_export(other).names:
                if not any(name in names for names in present.values()):
                    missing.setdefault(name, other)
    plan.update(init_files(present, missing, f"grading module {m.key}: prerequisites only"))
    write_plan(dest, plan)
    return dest


def forbidden_imports(m: Module) -> tuple[dict[str, Module], dict[str, Module]]:
    """(export target -> module, public name -> module) a solution of ``m`` must not import."""
    return _forbidden(m.number)


@functools.lru_cache(maxsize=None)
def _forbidden(number: int) -> tuple[dict[str, Module], dict[str, Module]]:
    from ..course.exporter import reference_export

    m = get_module(number)
    allowed = set(prerequisites(m.number))
    targets = {o.target: o for o in MODULES if o.number not in allowed}
    allowed_names = {n for o in MODULES if o.number in allowed and o.written
                     for n in reference_export(o).names}
    names: dict[str, Module] = {}
    for o in MODULES:
        if o.number not in allowed and o.written:
            for n in reference_export(o).names:
                if n not in allowed_names:
                    names.setdefault(n, o)
    return targets, names


# Reaching for the course from a notebook: the repository, nbgrader's folders, tito itself.
_COURSE_WORDS = re.compile(
    r"gradebook|nbgrader_config|\bsubmitted\b|\bautograded\b|\bsource/|COURSE_ROOT|"
    r"\.tito\b|\.\./|getcwd|Path\.cwd|Path\.home|expanduser|/root\b|/home/"
)


def _editable_cells(gb, m: Module, notebook) -> list[tuple[str, str]]:
    """(name, source) of every code cell nbgrader runs as the student wrote it.

    Locked cells of the release are replaced by their originals before grading, so only the
    other cells (solution cells and any cell the student added) are the student's code.
    """
    from nbgrader.api import MissingEntry

    locked: set[str] = set()
    if gb is not None:
        try:
            locked = {c.name for c in gb.find_notebook(m.slug, m.dirname).source_cells
                      if c.locked}
        except MissingEntry:
            pass
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in locked:
            continue
        cells.append((gid or f"cell {index}", cell.source))
    return cells


def _imported(tree) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in an AST."""
    import ast

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [a.name for a in node.names]))
    return found


def static_flags(course: Course, m: Module, notebook, gb=None) -> list[str]:
    """What the student's own cells reach for that grading does not allow, one line each.

    A static scan (grading goes on; these are for the instructor to review): imports of the
    graded module's own export or of a module it does not build on, imports of ``tito`` or
    ``nbgrader``, and paths into the course (the repository, the gradebook, ``source/``,
    other submissions, the instructor's home).
    """
    flags = _scan(course, m, _editable_cells(gb, m, notebook))
    reference = course.source_notebook(m)
    if flags and reference.is_file():  # what the reference solution itself does is fine
        known = _reference_flags(course.root, m.number, reference.stat().st_mtime)
        flags = [f for f in flags if f not in known]
    return flags


@functools.lru_cache(maxsize=32)
def _reference_flags(root: Path, number: int, mtime: float) -> frozenset[str]:
    m = get_module(number)
    try:
        notebook = _nbformat().read(Course(root).source_notebook(m), as_version=4)
    except Exception:
        return frozenset()
    return frozenset(_scan(Course(root), m, _editable_cells(None, m, notebook)))


def _scan(course: Course, m: Module, cells: list[tuple[str, str]]) -> list[str]:
    import ast

    targets, names = forbidden_imports(m)
    flags: list[str] = []
    paths = {str(course.root), str(COURSE_ROOT)}
    for name, source in cells:
        said: list[str] = []
        code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                         for ln in source.splitlines())
        try:
            tree = ast.parse(code)
        except SyntaxError:
            tree = None
        for module, imported in _imported(tree) if tree is not None else []:
            top = module.split(".")[0]
            if top in ("tito", "nbgrader"):
                said.append(f"imports {module}")
                continue
            if top != "tinytorch":
                continue
            dotted = module.removeprefix("tinytorch").lstrip(".")
            for item in imported or [""]:
                full = ".".join(p for p in (dotted, item) if p)
                owner = next((o for t, o in targets.items()
                              if full == t or full.startswith(t + ".")
                              or (dotted and (dotted == t or dotted.startswith(t + ".")))),
                             None)
                if owner is None and item in names:
                    owner = names[item]
                if owner is not None:
                    what = "its own module" if owner.number == m.number else (
                        f"module {owner.key}, not a prerequisite")
                    shown = module + (f".{item}" if item and item != "*" else "")
                    said.append(f"imports {shown} ({what})")
        for match in re.finditer(r"tinytorch[./\\]([A-Za-z_][\w./\\]*)", source):
            dotted = re.sub(r"[/\\]", ".", match.group(1)).removesuffix(".py")
            owner = next((o for t, o in targets.items()
                          if dotted == t or dotted.startswith(t + ".")), None)
            text = f"names tinytorch.{dotted}"
            if owner is not None and not any(f"tinytorch.{dotted}" in s for s in said):
                said.append(text + (" (its own module)" if owner.number == m.number
                                    else f" (module {owner.key}, not a prerequisite)"))
        for path in paths:
            if path in source:
                said.append(f"names the course folder {path}")
        for word in sorted({w.group(0) for w in _COURSE_WORDS.finditer(source)}):
            said.append(f"mentions {word!r} (a path into the course?)")
        flags += [f"{name}: {text}" for text in dict.fromkeys(said)]
    return flags


_SANDBOX_ERRORS = (
    ("PermissionError", "", "denied by the sandbox"),
    ("OSError", "Read-only file system", "denied by the sandbox (read-only)"),
    ("ConnectionRefusedError", "", "tried the network (there is none in the sandbox)"),
    ("OSError", "Network is unreachable", "tried the network (there is none in the sandbox)"),
    ("MemoryError", "", "ran past the memory limit"),
    ("BlockingIOError", "Resource temporarily unavailable", "ran past the process limit"),
    ("ModuleNotFoundError", "tito", "imported tito (not in the sandbox)"),
    ("ModuleNotFoundError", "nbgrader", "imported nbgrader (not in the sandbox)"),
)


def runtime_flags(notebook) -> list[str]:
    """Errors in the graded notebook that the sandbox or the prerequisite package caused."""
    flags = []
    for index, cell in enumerate(notebook.cells):
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            ename, evalue = output.get("ename", ""), str(output.get("evalue", ""))
            said = None
            if ename in ("ImportError", "AttributeError") and (
                    GRADING_PLACEHOLDER in evalue or any(w in evalue for w in _NOT_PROVIDED)):
                said = "imported what grading does not provide"
            for kind, part, text in _SANDBOX_ERRORS:
                if said is None and ename == kind and part in evalue:
                    said = text
            if said:
                flags.append(f"{name}: {said}: {ename}: {evalue[:200]}")
    return flags


@dataclass
class GradingRun:
    """What one `autograde` of a module shares between its students: the prerequisite
    package, the kernelspec, the sandbox (or ``unsafe``: none) and its limits."""

    module: Module
    folder: Path
    package: Path
    jupyter: Path
    sandboxed: bool
    limits: sandbox.Limits
    read_only: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "GradingRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_run(course: Course, m: Module, unsafe: bool = False,
                limits: sandbox.Limits | None = None) -> GradingRun:
    """The prerequisite package and the kernel of one autograde run of module ``m``.

    Refuses (GradingError) when there is no sandbox here and ``unsafe`` was not asked for.
    """
    import tempfile

    reason = None if unsafe else sandbox.unavailable()
    if reason:
        raise GradingError(
            f"autograde runs every student's code in a sandbox, and there is none here: "
            f"{reason}. `--unsafe` grades without one (each student's code then runs with "
            "your rights and can read the gradebook, source/ and other submissions); use it "
            "only for submissions you trust.")
    folder = Path(tempfile.mkdtemp(prefix="tito-grade-"))  # 0700: the instructor's only
    try:
        package = prerequisite_package(m, folder / "package")
        jupyter = sandbox.write_kernelspec(folder / "jupyter", not unsafe, package)
        run = GradingRun(m, folder, package, jupyter, not unsafe, limits or sandbox.Limits())
        if run.sandboxed:
            run.read_only, run.hidden = sandbox.python_folders([course.root, COURSE_ROOT])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return run


# ---- autograde, feedback, report ---------------------------------------------------------------
def autograde_student(course: Course, m: Module, student: str, timeout: int | None = None,
                      run: GradingRun | None = None, slot: int = 0) -> StudentResult:
    """``nbgrader autograde`` for one student, in its own process, with a wall-clock stop.

    The notebook runs in ``run``'s kernel (sandboxed unless the run is unsafe) against the
    prerequisite package; ``slot`` tells parallel jobs apart (each has its own sandbox user).
    """
    if run is None:
        with prepare_run(course, m) as own:
            return autograde_student(course, m, student, timeout, own, slot)
    if timeout is None:
        timeout = course.settings()["timeout"] or DEFAULT_TIMEOUT
    n_code = DEFAULT_CELLS
    source = course.source_notebook(m)
    if source.is_file():
        n_code = sum(c.cell_type == "code" for c in _nbformat().read(source, as_version=4).cells)
    wall = (n_code + 1) * timeout + RUN_OVERHEAD
    args = ["autograde", m.dirname, f"--student={student}", "--force",
            f"--ExecutePreprocessor.timeout={int(timeout)}",
            f"--ExecutePreprocessor.kernel_name={sandbox.KERNEL_NAME}"]
    runtime = run.folder / f"k{slot}"  # short: ipc socket paths must fit in 107 bytes
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir(mode=0o700)
    env = {"JUPYTER_PATH": os.pathsep.join(
               p for p in (str(run.jupyter), os.environ.get("JUPYTER_PATH", "")) if p),
           "JUPYTER_RUNTIME_DIR": str(runtime)}
    if run.sandboxed:
        # No network in the sandbox: ZMQ over unix sockets in this kernel's own folder (the
        # connection file goes there too: jupyter_client makes it with mkstemp in TMPDIR).
        args += ["--KernelManager.transport=ipc", f"--KernelManager.ip={runtime}/ipc"]
        env["TMPDIR"] = str(runtime)
        config = sandbox.KernelConfig(
            output=str(course.autograded_notebook(m, student).parent),
            runtime=str(runtime), package=str(run.package), python=sys.executable,
            uid=sandbox.UID_BASE + slot,
            limits=dataclass_replace(run.limits, cpu_seconds=min(run.limits.cpu_seconds,
                                                                  int(wall))),
            read_only=run.read_only, hidden=run.hidden)
        env[sandbox.CONFIG_ENV] = str(config.write(run.folder / f"k{slot}.json"))
    # Stale results must not pass for new ones when this run fails.
    course.autograded_notebook(m, student).unlink(missing_ok=True)
    try:
        done = run_nbgrader(course, args, wall_timeout=wall,
                            log=f"{m.dirname}/autograde-{student}", env=env)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    result = student_result(course, m, student)
    result.seconds = done.seconds
    if done.returncode is None:
        result.status = "stopped"
        result.error = (f"nbgrader did not finish within {wall:.0f} s "
                        f"and was stopped (with its kernel); its output: {done.log}")
    elif not done.ok or result.status != "graded":
        result.status = "failed"
        result.error = done.errors() or f"nbgrader exited with code {done.returncode}"
    return result


def autograde_all(course: Course, m: Module, students: list[str], timeout: int,
                  run: GradingRun, jobs: int = 1, done=None) -> list[StudentResult]:
    """Every student of ``students`` graded, ``jobs`` at a time (results in that order).

    Each job has a slot of its own (its sandbox user, its kernel folder). ``done(result)``
    is called as each student finishes. nbgrader writes gradebook.db from every job; sqlite
    serializes the writes itself (each autograde holds the lock for a few milliseconds).
    """
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    slots: queue.Queue[int] = queue.Queue()
    for k in range(max(1, jobs)):
        slots.put(k)
    lock = threading.Lock()

    def one(student: str) -> StudentResult:
        slot = slots.get()
        try:
            result = autograde_student(course, m, student, timeout, run, slot)
        finally:
            slots.put(slot)
        if done is not None:
            with lock:
                done(result)
        return result

    if jobs <= 1:
        return [one(s) for s in students]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, students))


def feedback(course: Course, m: Module) -> tuple[NbgraderRun, dict[str, Path | None], list[str]]:
    """``nbgrader generate_feedback``: (the run, autograded student -> HTML or None, students
    with a submission that was not autograded)."""
    run = run_nbgrader(course, ["generate_feedback", m.dirname, "--force"], wall_timeout=1800,
                       log=f"{m.dirname}/feedback")
    made, ungraded = {}, []
    for student in course.students(m):
        if not course.autograded_notebook(m, student).is_file():
            ungraded.append(student)
            continue
        path = course.feedback_file(m, student)
        made[student] = path if path.is_file() else None
    return run, made, ungraded


def export_csv(course: Course, target: Path, modules: list[Module] | None = None) -> NbgraderRun:
    """``nbgrader export`` to CSV: one row per student and assignment (all, or ``modules``).

    nbgrader lists every student of the gradebook under every assignment and scores 0 where
    it graded nothing; those rows are then marked ``not graded`` (see ``mark_not_graded``).
    """
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    only = [f"--ExportPlugin.assignment={m.dirname}" for m in modules or []]
    run = run_nbgrader(course, ["export", f"--to={target}", *only], wall_timeout=600,
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
    rows = read_csv(path)
    if not rows:
        return 0
    marked = 0
    for row in rows:
        m = by_dir.get(row.get("assignment", ""))
        if m is None:
            row["status"] = ""
            continue
        student = row.get("student_id", "")
        if course.autograded_notebook(m, student).is_file():
            row["status"] = "graded"
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


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


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

