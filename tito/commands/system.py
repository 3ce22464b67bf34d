"""`tito system ...`: check the machine and repair a workspace."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from ..course.exporter import render_module
from ..course.registry import COURSE_ROOT, written_modules
from ..errors import NotebookError, ReleaseIntegrityError
from ..student.doctor import jupyter_check, run_checks
from ..student.package import sha256_text
from ..student.runner import run_student
from ..student.workspace import PROGRESS_FORMAT, Workspace, backup_path, not_a_workspace, now_iso
from .ui import Failure, console, table


@click.group()
def system():
    """Check your set-up."""


def kernel_check() -> tuple[bool, str]:
    """A kernel named python3 exists (nbgrader and notebooks need it)."""
    found = jupyter_check()
    return found.ok, found.detail


STATES = {"ok": "[green]✓[/]", "failed": "[red]✗[/]", "not verified": "[yellow]?[/]",
          "note": "[dim]·[/]"}


@system.command()
def doctor():
    """Check Python, packages, the Jupyter kernels and (inside one) the workspace."""
    checks, _ = run_checks()
    outside = next((c for c in checks if c.name == "workspace" and c.state == "failed"), None)
    t = table("check", "", "detail", title="tito system doctor")
    for c in checks:  # (where the student is, in full, is the last line)
        detail = f"none: {Path.cwd()} is not a workspace" if c is outside else c.detail
        t.add_row(c.name, STATES[c.state], escape(detail))
    console.print(t)
    failed = [c for c in checks if c.state == "failed"]
    unverified = [c for c in checks if c.state == "not verified"]
    if outside is not None:
        others = len(failed) - 1
        console.print(f"[red]No workspace was checked.[/] {escape(outside.detail)}"
                      + (f" [red]{others} other check(s) failed.[/]" if others else ""))
    elif failed:
        console.print(f"[red]{len(failed)} check(s) failed.[/]"
                      + (" [yellow]Progress is not verified either.[/]" if unverified else ""))
    elif unverified:
        console.print("[yellow]Not verified:[/] your progress file says more than your package "
                      "and the release back up (see \"progress vs package\"). Run `tito module "
                      "complete` again for the modules named.")
    else:
        console.print("[green]All checks passed.[/]")
    raise SystemExit(1 if failed or unverified else 0)


@system.command()
@click.option("--prune", is_flag=True,
              help="Also remove the kernels of workspaces that were deleted or moved.")
def kernel(prune):
    """Register (again) this workspace's Jupyter kernel and point its notebooks at it."""
    from ..student.kernel import (
        dead_kernels,
        install_kernel,
        kernel_name,
        point_notebooks,
        remove_kernel,
    )

    ws = Workspace.find()
    if ws is not None and ws.root != COURSE_ROOT:
        try:
            where = install_kernel(ws.root)
        except Exception as error:  # Jupyter missing or its data folder not writable
            raise Failure(f"could not register the kernel: {error}. Is jupyter_client installed "
                          "(`pip install ipykernel`)?") from None
        console.print(f"[green]✓[/] Jupyter kernel {kernel_name(ws.root)} in {where}: notebooks "
                      "that select it import this workspace's tinytorch")
        for item in point_notebooks(ws.root):
            console.print(f"  {item.notebook} now selects it (it selected {item.kernel or 'none'}"
                          + (f", of {item.owner}" if item.owner and item.owner != ws.root else "")
                          + "); reload it in Jupyter if it is open")
    elif not prune:
        raise Failure(not_a_workspace(Path.cwd(), "run `tito system kernel`")
                      + " (`tito system kernel --prune` works anywhere.)")
    if not prune:
        dead = dead_kernels()
        if dead:
            console.print(f"  {len(dead)} kernel(s) of workspaces that no longer exist remain "
                          "(a moved or deleted folder): `tito system kernel --prune` removes them")
    if prune:
        dead = dead_kernels()
        for k in dead:
            remove_kernel(k)
            console.print(f"  removed kernel {k.name} of {k.workspace} (no workspace there any "
                          "more)")
        if not dead:
            console.print("  no kernel of a deleted workspace to remove")


@system.command("repair-progress")
def repair_progress():
    """Rebuild a damaged progress file by re-testing your notebooks (the old file is kept)."""
    ws = Workspace.require("run `tito system repair-progress`")
    old = ws.progress_path
    if old.exists():
        backup = backup_path(old)
        old.replace(backup)
        console.print(f"kept the old progress file as {backup.relative_to(ws.root)}")
    completed = {}
    for m in written_modules():
        path = ws.notebook_path(m)
        if not path.is_file() or ws.exported_names(m) is None:
            continue
        release = ws.release_path(m)
        if not release.is_file():
            console.print(f"  [red]✗[/] module {m.key}: no released notebook; run "
                          "`tito init . --force`")
            continue
        try:
            report = run_student(path, release, ws.root)
        except (ReleaseIntegrityError, NotebookError) as error:
            console.print(f"  [red]✗[/] module {m.key}: {error}", markup=False)
            continue
        mark = "[green]✓[/]" if report.ok else "[red]✗[/]"
        console.print(f"  {mark} module {m.key}: {len(report.passed)}/{len(report.tests)} tests "
                      "pass")
        if report.ok:
            got, total = report.points()
            completed[m.key] = {"completed_at": now_iso(), "tests_passed": len(report.passed),
                                "tests_total": len(report.tests), "points": got,
                                "points_total": total, "seconds": round(report.seconds, 2),
                                "rebuilt": True}
            # the package file is vouched for only if it is what this notebook exports
            export = render_module(m, [r.cell for r in report.cells], str(m.notebook_relpath),
                                   " (your notebook)")
            if (ws.root / m.target_path).read_text(encoding="utf-8") == export.text:
                completed[m.key]["export_sha256"] = sha256_text(export.text)
            else:
                console.print(f"      {m.target_path} is not what your notebook exports now: "
                              f"`tito module complete {m.key}` brings them together")
    ws.save_progress({"format": PROGRESS_FORMAT, "created": now_iso(), "completed": completed})
    console.print(f"[green]✓[/] progress rebuilt: {len(completed)} module(s) completed")
