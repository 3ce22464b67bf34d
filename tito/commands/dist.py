"""`tito dist student`: a wheel of the course for students, without any reference solution.

The wheel (``tinytorch-course``) holds the ``tito`` package and, as its package data under
``tito/_course/``, the notebooks nbgrader releases from the lessons (solutions replaced by
``raise NotImplementedError()``) and the milestones with their data. It holds no lesson
(``modules/*.py``), no reference ``tinytorch`` package, no website and no tests. Installed,
``tito init`` makes workspaces from the packaged notebooks and ``tito module complete``
grades them against the same locked tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from .. import __version__
from ..course.registry import COURSE_ROOT, MILESTONES_DIR, written_modules
from ..grading.release import release_notebooks
from .ui import Failure, console

PROJECT = "tinytorch-course"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "The TinyTorch course for students: the tito CLI, released notebooks and milestones."
requires-python = ">=3.10"
dependencies = {dependencies}

[project.scripts]
tito = "tito.cli:main"

[tool.setuptools]
packages = {packages}
include-package-data = false

[tool.setuptools.package-data]
tito = {data}
"""


def _dependencies() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise Failure("building the student wheel needs Python 3.11 or newer (tomllib)") from None

    with open(COURSE_ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]["dependencies"]


def build_student_wheel(out: Path) -> Path:
    """Stage tito + released notebooks + milestones, build the wheel into ``out``; its path."""
    modules = written_modules()
    if not all(m.source.is_file() for m in modules):
        raise Failure("a student build is made from the course repository (its lessons), not "
                      "from an installed student build")
    releases = release_notebooks(modules)
    import nbformat

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tito-dist-") as tmp:
        stage = Path(tmp)
        shutil.copytree(COURSE_ROOT / "tito", stage / "tito",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_course"))
        course = stage / "tito" / "_course"
        (course / "release").mkdir(parents=True)
        for m in modules:
            nbformat.write(releases[m.number], course / "release" / f"{m.dirname}.ipynb")
        shutil.copytree(MILESTONES_DIR, course / "milestones",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        data = sorted(str(p.relative_to(stage / "tito")) for p in course.rglob("*") if p.is_file())
        packages = sorted({".".join(p.parent.relative_to(stage).parts)
                           for p in (stage / "tito").rglob("__init__.py")})
        # lists of strings as TOML arrays: JSON's strings are TOML's basic strings (a
        # dependency's environment marker keeps its own quotes, escaped)
        (stage / "pyproject.toml").write_text(PYPROJECT.format(
            name=PROJECT, version=__version__, dependencies=json.dumps(_dependencies()),
            packages=json.dumps(packages), data=json.dumps(data)), encoding="utf-8")
        # pip builds in an isolated environment with the setuptools and wheel that the staged
        # pyproject asks for (from the package index or pip's cache), whatever this
        # environment happens to hold.
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(stage)],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise Failure("building the student wheel failed (pip needs setuptools and wheel from "
                          "the package index or its cache):\n"
                          + (done.stderr or done.stdout)[-3000:])
    wheels = sorted(out.glob(f"{PROJECT.replace('-', '_')}-{__version__}-*.whl"))
    if not wheels:
        raise Failure(f"pip reported success but no wheel is in {out}")
    return wheels[-1]


@click.group()
def dist():
    """Build distributions of the course."""


@dist.command()
@click.option("--out", default="dist", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Folder for the wheel.")
def student(out):
    """A wheel for students: tito, the released notebooks and the milestones; no solutions."""
    console.print(f"Releasing {len(written_modules())} notebooks with nbgrader and building the "
                  "wheel ...")
    wheel = build_student_wheel(out)
    console.print(f"[green]✓[/] {wheel}")
    console.print(f"  students install it with `pip install {wheel.name}`, then "
                  "`tito init my-course`")
