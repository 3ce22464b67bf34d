"""`tito init DIR`: make a student workspace."""

import shutil
from pathlib import Path

import click

from ..course.registry import written_modules
from ..errors import WorkspaceError
from ..files import atomic_write
from ..grading.release import release_notebooks
from ..student.kernel import install_kernel, kernel_name
from ..student.refresh import code_changed, refresh_notebook
from ..student.workspace import MARKER, Workspace, backup_path
from .ui import Failure, console


def _earlier_releases(ws: Workspace, modules) -> dict:
    """The releases a workspace's notebooks were handed out from, before they are replaced."""
    import nbformat

    found = {}
    for m in modules:
        path = ws.release_path(m)
        if path.is_file() and ws.notebook_path(m).is_file():
            try:
                found[m.number] = nbformat.read(path, as_version=4)
            except Exception:  # a damaged earlier release: nothing to compare with
                console.print(f"[yellow]{path.relative_to(ws.root)} could not be read[/]: "
                              f"module {m.key}'s notebook is left as it is")
    return found


def _completed(ws: Workspace) -> set[int]:
    """The completed modules, or none if the progress file is damaged: `init --force` then
    still refreshes the notebooks (`tito system repair-progress` mends the file)."""
    try:
        return ws.completed()
    except WorkspaceError:
        return set()


def _refresh(ws: Workspace, m, old, new) -> None:
    """Give module m's notebook the new release's given cells if only its solution cells
    were changed (tito/student/refresh.py), keeping a backup; say what happened."""
    import nbformat

    path = ws.notebook_path(m)
    rel = path.relative_to(ws.root)
    try:
        student = nbformat.read(path, as_version=4)
    except Exception as error:
        console.print(f"[yellow]{rel} could not be read ({error})[/]: it is left as it is")
        return
    updated, why = refresh_notebook(student, old, new)
    if updated is None and not why:
        return  # this module's release did not change
    if updated is None:
        console.print(f"[yellow]{rel}: module {m.key}'s release changed, but your notebook "
                      f"was left as it is[/]: {why}. `tito module test {m.key}` runs the new "
                      f"given code and tests anyway; `tito module reset {m.key}` gives you a "
                      "fresh notebook (yours is kept as a .bak file beside it).")
    else:
        backup = backup_path(path)
        shutil.copy2(path, backup)
        atomic_write(path, nbformat.writes(updated))
        console.print(f"[green]✓[/] {rel}: the new release's lesson text, given code and tests, "
                      f"with your solution cells kept (your previous notebook is "
                      f"{backup.relative_to(ws.root)})")
    if m.number in _completed(ws) and code_changed(old, new):
        console.print(f"  module {m.key} was completed with the earlier given code: run "
                      f"`tito module complete {m.key}` again to rebuild your package with it")


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True,
              help="Refresh the released notebooks of an existing workspace and the given cells "
                   "of your notebooks (your solution cells are kept, with a backup).")
def init(directory, force):
    """Create a workspace in DIRECTORY: released notebooks, an empty tinytorch package, progress.

    With --force in an existing workspace, the released notebooks are made again, and each
    notebook you were handed gets the new release's given cells if you changed only your
    solution cells in it (a backup is kept); otherwise it is left as it is, and you are told.
    """
    root = directory.resolve()
    if (root / MARKER).exists() and not force:
        raise Failure(
            f"{root} is already a TinyTorch workspace. `tito init {directory} --force` refreshes "
            "its released notebooks and the given cells of your notebooks; your solution cells, "
            "package and progress are kept."
        )
    Workspace.check_new_root(root)  # not inside another workspace, nor around one
    modules = written_modules()
    earlier = _earlier_releases(Workspace(root), modules) if force else {}
    console.print(f"Releasing {len(modules)} module notebooks with nbgrader ...")
    releases = release_notebooks(modules)
    ws = Workspace.create(root, releases)
    for m in modules:
        if m.number in earlier:
            _refresh(ws, m, earlier[m.number], releases[m.number])
    try:
        where = install_kernel(root)
        kernel_note = (f"Jupyter kernel {kernel_name(root)} ({where}) imports this workspace's "
                       "tinytorch")
    except Exception as error:  # Jupyter missing or its data folder not writable: say so, go on
        kernel_note = (f"[yellow]could not register the Jupyter kernel ({error})[/]: "
                       "fix that, then run `tito system kernel` in the workspace")
    console.print(f"[green]✓[/] workspace ready in {root}")
    console.print(f"  {kernel_note}")
    if earlier or _completed(ws):  # --force in a workspace already in use
        console.print(f"  {len(releases)} notebooks released again (solutions removed by "
                      "nbgrader); your package and progress are as they were")
        console.print(f"Next: `cd {directory}` then `tito module status`")
        return
    console.print(f"  {len(releases)} notebooks released (solutions removed by nbgrader), "
                  "tinytorch/ waiting for your code, progress in .tito/progress.json")
    console.print(f"Next: `cd {directory}` then `tito module start 01`")
