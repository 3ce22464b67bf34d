"""Shared fixtures: the repository, the real CLI, and nbgrader releases made once."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the reference package, even without an install

from tito.course.registry import written_modules  # noqa: E402
from tito.grading.release import release_notebooks  # noqa: E402


# Workspace kernels that `tito init` registers during the tests go to a folder of their own,
# not the user's Jupyter folder.
JUPYTER_DATA = Path(tempfile.mkdtemp(prefix="tito-tests-jupyter-"))
atexit.register(shutil.rmtree, JUPYTER_DATA, True)
os.environ["JUPYTER_DATA_DIR"] = str(JUPYTER_DATA)


def run_tito(*args: str, cwd: Path, stdin=subprocess.DEVNULL, timeout: float = 600):
    """Run the real `tito` CLI in a subprocess, as a user would (no terminal attached)."""
    return subprocess.run(
        [sys.executable, "-m", "tito", *args], cwd=cwd, stdin=stdin,
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


PLANNED = "20_capstone"  # the module a planned-course copy leaves out


@pytest.fixture(scope="session")
def planned_course(tmp_path_factory) -> Path:
    """A copy of the course whose module 20 lesson is missing: a module that is planned but not
    written, as every module was before its lesson landed. Run it with `run_tito_from`."""
    root = tmp_path_factory.mktemp("planned") / "course"
    skip = shutil.ignore_patterns("__pycache__", PLANNED, "*.egg-info")
    for name in ("tito", "tinytorch", "milestones", "modules", "site"):
        shutil.copytree(REPO / name, root / name, ignore=skip)
    shutil.copy(REPO / "README.md", root / "README.md")  # the site's home page quotes it
    return root


def run_tito_from(course: Path, *args: str, cwd: Path, timeout: float = 600):
    """Run the `tito` of a course copy (its registry, lessons and package come first)."""
    return subprocess.run(
        [sys.executable, "-m", "tito", *args], cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200",
             "PYTHONPATH": os.pathsep.join([str(course), os.environ.get("PYTHONPATH", "")])},
    )


@pytest.fixture(scope="session")
def released(tmp_path_factory) -> dict[int, Path]:
    """Every written module's student notebook, made by nbgrader in one run."""
    folder = tmp_path_factory.mktemp("release")
    paths = {}
    for number, notebook in release_notebooks(written_modules()).items():
        path = folder / f"{number:02d}.ipynb"
        nbformat.write(notebook, path)
        paths[number] = path
    return paths
