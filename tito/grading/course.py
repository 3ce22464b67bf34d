"""The instructor's course folder: an ordinary nbgrader course, found and made by tito.

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
subprocess (``process.run_nbgrader``); tito checks the lesson's metadata first
(``metadata.py``), copies submissions into place (``collect.py``), runs nbgrader once per
student so that one student's crash or hang cannot stop the others (``autograde.py``), and
reads the gradebook back to say what happened (``results.py``, ``reports.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..course.registry import Module
from ..errors import GradingError
from ..files import find_upwards

CONFIG_NAME = "nbgrader_config.py"
COURSE_FOLDERS = ("source", "release", "submitted", "autograded", "feedback")
DEFAULT_TIMEOUT = 120  # seconds per cell when autograding
DEFAULT_COURSE_ID = "tinytorch"


def load_nbformat():
    """nbformat, imported on first use: its import costs a second or more at tito's start."""
    import nbformat

    return nbformat


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
# Left off: `tito nbgrader autograde` puts deleted locked cells back itself, where the
# release has them (tito/grading/nbgrader_app.py), and names them.
c.OverwriteCells.add_missing_cells = False
'''


@dataclass
class Course:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> Course | None:
        root = find_upwards(start, lambda folder: (folder / CONFIG_NAME).is_file())
        return None if root is None else cls(root)

    @classmethod
    def require(cls, start: Path | None = None) -> Course:
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
