"""Student versions of lessons, made by nbgrader itself.

``nbgrader generate_assignment`` replaces every ``### BEGIN SOLUTION`` block with
``raise NotImplementedError()``, locks the read-only and test cells and records their
checksums. We never strip solutions by hand: the notebooks a student receives from ``tito``
are the same ones an instructor's nbgrader course would release.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..course.notebook import to_ipynb
from ..course.registry import Module
from ..errors import ReleaseError
from .process import run_nbgrader

ASSIGNMENT = "tinytorch"


def packaged_release(module: Module) -> Path | None:
    """The released notebook shipped inside a student build of the course, if there is one."""
    path = module.packaged_release
    return path if path.is_file() else None


def release_notebooks(modules: list[Module]) -> dict:
    """Generate the student version of each lesson with one nbgrader run (module -> notebook).

    In a student build there are no lessons: the notebooks nbgrader released when the build
    was made are packaged with tito, and are used as they are.
    """
    import nbformat

    packaged = {m.number: nbformat.read(m.packaged_release, as_version=4)
                for m in modules if not m.source.is_file() and m.packaged_release.is_file()}
    modules = [m for m in modules if m.number not in packaged]
    if not modules:
        return packaged
    with tempfile.TemporaryDirectory(prefix="tito-release-") as tmp:
        root = Path(tmp)
        source = root / "source" / ASSIGNMENT
        source.mkdir(parents=True)
        for m in modules:
            nbformat.write(to_ipynb(m.source), source / f"{m.dirname}.ipynb")
        done = run_nbgrader(root, ["generate_assignment", ASSIGNMENT, "--force", "--no-db"],
                            wall_timeout=600)
        released = {}
        for m in modules:
            path = root / "release" / ASSIGNMENT / f"{m.dirname}.ipynb"
            if not done.ok or not path.is_file():
                raise ReleaseError(
                    f"nbgrader could not release module {m.key} ({m.dirname}):\n"
                    + (done.output[-3000:] if done.returncode is not None
                       else "it did not finish within 600 s and was stopped")
                )
            released[m.number] = nbformat.read(path, as_version=4)
        return {**released, **packaged}
