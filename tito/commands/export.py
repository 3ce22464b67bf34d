"""`tito export`: lessons -> the committed reference package (course repository only)."""

import click

from ..course.exporter import check_plan, reference_plan, write_plan
from ..course.registry import COURSE_ROOT, get_module
from ..student.workspace import Workspace
from .ui import Failure, console


@click.command()
@click.argument("modules", nargs=-1)
@click.option("--check", is_flag=True, help="Exit non-zero if tinytorch/ differs from the lessons.")
def export(modules, check):
    """Write the #| export cells of MODULES (default: all written) into tinytorch/."""
    ws = Workspace.find()
    if ws is not None and ws.root != COURSE_ROOT:
        raise Failure(
            "`tito export` writes the course's reference package. In a workspace your code is "
            "exported by `tito module complete N`, after its tests pass."
        )
    chosen = [get_module(m) for m in modules] or None
    for m in chosen or []:
        if not m.written:
            raise Failure(f"Module {m.key} ({m.title}) is not written yet: nothing to export.")
    plan = reference_plan(chosen)
    if check:
        problems = check_plan(COURSE_ROOT, reference_plan())
        if problems:
            for p in problems:
                console.print(f"  [red]✗[/] {p}")
            console.print("tinytorch/ is out of sync with modules/: run `tito export`.")
            raise SystemExit(1)
        console.print(f"[green]✓[/] tinytorch/ matches modules/ ({len(plan)} generated files)")
        return
    written = write_plan(COURSE_ROOT, plan)
    for rel in written:
        console.print(f"  wrote {rel}")
    console.print(f"[green]✓[/] exported: {len(written)} file(s) changed, "
                  f"{len(plan) - len(written)} already current")
