"""`tito system ...`: check the machine and repair a workspace."""

from __future__ import annotations

import importlib
import platform
import sys

import click

from ..course.registry import written_modules
from ..errors import NotebookError, ReleaseIntegrityError, WorkspaceError
from ..student.runner import run_student
from ..student.workspace import PROGRESS_FORMAT, Workspace, backup_path, now_iso
from .ui import Failure, console, table


@click.group()
def system():
    """Check your set-up."""


def _check_import(name: str) -> tuple[bool, str]:
    try:
        mod = importlib.import_module(name)
    except Exception as error:  # any import failure is a finding, not a crash
        return False, f"cannot import: {error}. Fix: pip install -e . in the course folder"
    return True, getattr(mod, "__version__", "installed")


def kernel_check() -> tuple[bool, str]:
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        specs = KernelSpecManager().find_kernel_specs()
    except Exception as error:  # broken Jupyter install
        return False, f"cannot list Jupyter kernels: {error}"
    if "python3" in specs:
        return True, f"python3 at {specs['python3']}"
    return False, (
        "no Jupyter kernel named python3 (nbgrader and notebooks need it). Fix: "
        f"{sys.executable} -m ipykernel install --sys-prefix --name python3"
    )


def workspace_kernel_check(ws: Workspace) -> tuple[bool, str]:
    """The workspace's Jupyter kernel exists and imports the workspace's own tinytorch."""
    from ..student.kernel import find_kernel, kernel_imports, kernel_name

    fix = "Fix: `tito system kernel` registers it again"
    try:
        spec = find_kernel(ws.root)
    except Exception as error:  # broken Jupyter install
        return False, f"cannot look up Jupyter kernels: {error}. {fix}"
    if spec is None:
        return False, f"no Jupyter kernel {kernel_name(ws.root)} for this workspace: notebooks " \
                      f"would import another tinytorch. {fix}"
    good, detail = kernel_imports(spec, ws.root)
    return good, (f"{kernel_name(ws.root)} imports {detail}" if good else f"{detail}. {fix}")


@system.command()
def doctor():
    """Check Python, packages, the Jupyter kernel and (inside one) the workspace."""
    rows: list[tuple[str, bool, str]] = []
    ok = sys.version_info >= (3, 10)
    rows.append(("Python", ok, platform.python_version() + ("" if ok else ": need 3.10 or newer")))
    for name in ("numpy", "jupytext", "nbformat", "nbgrader", "rich", "click"):
        good, detail = _check_import(name)
        rows.append((name, good, detail))
    good, detail = kernel_check()
    rows.append(("Jupyter kernel", good, detail))
    ws = Workspace.find()
    if ws is not None:
        try:
            done = ws.completed()
            rows.append(("progress file", True, f"{len(done)} modules completed"))
        except WorkspaceError as error:
            rows.append(("progress file", False, str(error)))
        missing = [m.key for m in written_modules() if not ws.release_path(m).is_file()]
        rows.append(("released notebooks", not missing,
                     "all present" if not missing else f"missing for {', '.join(missing)}: run `tito init . --force`"))
        good, detail = _package_check(ws)
        rows.append(("your tinytorch", good, detail))
        good, detail = workspace_kernel_check(ws)
        rows.append(("workspace kernel", good, detail))
    else:
        rows.append(("workspace", True, "not inside one (fine in the course repository)"))
    t = table("check", "", "detail", title="tito system doctor")
    for name, good, detail in rows:
        t.add_row(name, "[green]✓[/]" if good else "[red]✗[/]", detail)
    console.print(t)
    failed = [r for r in rows if not r[1]]
    console.print("[green]All checks passed.[/]" if not failed else f"[red]{len(failed)} check(s) failed.[/]")
    raise SystemExit(1 if failed else 0)


def _package_check(ws: Workspace) -> tuple[bool, str]:
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import tinytorch, sys; print(tinytorch.__file__)"],
                          cwd=ws.root, capture_output=True, text=True)
    if done.returncode != 0:
        return False, "import tinytorch fails: " + done.stderr.strip().splitlines()[-1]
    where = done.stdout.strip()
    if not where.startswith(str(ws.root)):
        return False, f"`import tinytorch` finds {where}, not your workspace's package"
    return True, where


@system.command()
def kernel():
    """Register (again) the Jupyter kernel of this workspace, which imports its tinytorch."""
    from ..student.kernel import install_kernel, kernel_name

    ws = Workspace.find()
    if ws is None:
        raise Failure("Not inside a workspace: run this inside the folder made by `tito init`.")
    try:
        where = install_kernel(ws.root)
    except Exception as error:  # Jupyter missing or its data folder not writable
        raise Failure(f"could not register the kernel: {error}. Is jupyter_client installed "
                      "(`pip install ipykernel`)?") from None
    console.print(f"[green]✓[/] Jupyter kernel {kernel_name(ws.root)} in {where}: notebooks "
                  "that select it import this workspace's tinytorch")


@system.command("repair-progress")
def repair_progress():
    """Rebuild a damaged progress file by re-testing your notebooks (the old file is kept)."""
    ws = Workspace.find()
    if ws is None:
        raise Failure("Not inside a workspace: run this inside the folder made by `tito init`.")
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
            console.print(f"  [red]✗[/] module {m.key}: no released notebook; run `tito init . --force`")
            continue
        try:
            report = run_student(path, release, ws.root)
        except (ReleaseIntegrityError, NotebookError) as error:
            console.print(f"  [red]✗[/] module {m.key}: {error}", markup=False)
            continue
        mark = "[green]✓[/]" if report.ok else "[red]✗[/]"
        console.print(f"  {mark} module {m.key}: {len(report.passed)}/{len(report.tests)} tests pass")
        if report.ok:
            got, total = report.points()
            completed[m.key] = {"completed_at": now_iso(), "tests_passed": len(report.passed),
                                "tests_total": len(report.tests), "points": got,
                                "points_total": total, "seconds": round(report.seconds, 2),
                                "rebuilt": True}
    ws.save_progress({"format": PROGRESS_FORMAT, "created": now_iso(), "completed": completed})
    console.print(f"[green]✓[/] progress rebuilt: {len(completed)} module(s) completed")
