"""`tito init DIR`: make a student workspace."""

from pathlib import Path

import click

from ..course.registry import written_modules
from ..grading.release import release_notebooks
from ..student.kernel import install_kernel, kernel_name
from ..student.workspace import MARKER, Workspace
from .ui import Failure, console


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True,
              help="Refresh the released notebooks of an existing workspace (your work is kept).")
def init(directory, force):
    """Create a workspace in DIRECTORY: released notebooks, an empty tinytorch package, progress."""
    root = directory.resolve()
    if (root / MARKER).exists() and not force:
        raise Failure(
            f"{root} is already a TinyTorch workspace. `tito init {directory} --force` refreshes "
            "its released notebooks; your notebooks, package and progress are never touched."
        )
    Workspace.check_new_root(root)  # not inside another workspace, nor around one
    modules = written_modules()
    console.print(f"Releasing {len(modules)} module notebooks with nbgrader ...")
    releases = release_notebooks(modules)
    Workspace.create(root, releases)
    try:
        where = install_kernel(root)
        kernel_note = (f"Jupyter kernel {kernel_name(root)} ({where}) imports this workspace's "
                       "tinytorch")
    except Exception as error:  # Jupyter missing or its data folder not writable: say so, go on
        kernel_note = (f"[yellow]could not register the Jupyter kernel ({error})[/]: "
                       "fix that, then run `tito system kernel` in the workspace")
    console.print(f"[green]✓[/] workspace ready in {root}")
    console.print(f"  {kernel_note}")
    console.print(f"  {len(releases)} notebooks released (solutions removed by nbgrader), "
                  "tinytorch/ waiting for your code, progress in .tito/progress.json")
    console.print(f"Next: `cd {directory}` then `tito module start 01`")
