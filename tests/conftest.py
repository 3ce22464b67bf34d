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
