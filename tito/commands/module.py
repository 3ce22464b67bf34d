"""`tito module ...`: list, status, start, test, complete, reset."""

from __future__ import annotations

import json
import shutil

import click

from ..course.exporter import render_module
from ..course.notebook import load_notebook, read_cells
from ..course.registry import (
    COURSE_ROOT,
    MILESTONES,
    MODULES,
    Module,
    get_module,
    prerequisites,
    unlocked_by,
)
from ..errors import NotebookError
from ..grading.release import packaged_release, release_notebooks
from ..student.integrity import lesson_authority, release_authority
from ..student.kernel import set_kernel
from ..student.results import CellResult, RunReport
from ..student.runner import DEFAULT_TIMEOUT, run_notebook, run_student
from ..student.workspace import Workspace, backup_path
from .ui import Failure, console, interactive, table


@click.group()
def module():
    """Work on the course's modules."""


def _written(ref: str) -> Module:
    m = get_module(ref)
    if not m.written:
        raise Failure(
            f"Module {m.key} ({m.title}) is not written yet: it is coming soon. "
            "`tito module list` shows which modules are ready."
        )
    return m


def _missing(m: Module, done: set[int]) -> list[int]:
    """m's prerequisites (all of them, not only the direct ones) not yet completed."""
    return [n for n in prerequisites(m.number) if n not in done]


def _names(numbers) -> str:
    return ", ".join(f"{get_module(n).key} ({get_module(n).title})" for n in numbers)


# ---- list ------------------------------------------------------------------------------
@module.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(as_json):
    """Every module of the course, from the registry."""
    rows = []
    for m in MODULES:
        rows.append({
            "number": m.number, "key": m.key, "slug": m.slug, "title": m.title, "tier": m.tier,
            "written": m.written, "export": f"tinytorch.{m.target}",
            "requires": [get_module(n).key for n in m.requires],
            "prerequisites": [get_module(n).key for n in prerequisites(m.number)],
            "unlocks": [ms.name for ms in unlocked_by(m.number)],
        })
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    t = table("#", "module", "status", "needs", "exports to", "unlocks",
              title=f"TinyTorch: {len(MODULES)} modules, {sum(r['written'] for r in rows)} written")
    for r in rows:
        status = "[green]ready[/]" if r["written"] else "[dim]coming soon[/]"
        t.add_row(r["key"], r["title"], status, " ".join(r["requires"]) or "-",
                  r["export"].removeprefix("tinytorch."), ", ".join(r["unlocks"]))
    for column in t.columns[:3]:
        column.no_wrap = True
    console.print(t)


# ---- status ----------------------------------------------------------------------------
def _states(ws: Workspace) -> list[dict]:
    done = ws.completed()
    rows = []
    for m in MODULES:
        missing = _missing(m, done)
        if not m.written:
            state = "not written"
        elif m.number in done:
            state = "completed"
        elif ws.notebook_path(m).is_file():
            state = "started"
        elif not missing:
            state = "available"
        else:
            state = "locked"
        rows.append({"key": m.key, "title": m.title, "state": state,
                     "missing": [get_module(n).key for n in missing]})
    return rows


@module.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json):
    """Your progress through the course (in a workspace)."""
    ws = Workspace.require()
    rows = _states(ws)
    if as_json:
        click.echo(json.dumps({"workspace": str(ws.root), "modules": rows}, indent=2))
        return
    colours = {"completed": "green", "started": "yellow", "available": "cyan",
               "locked": "dim", "not written": "dim"}
    t = table("#", "module", "state", "needs first", title=f"Progress in {ws.root}")
    for r in rows:
        t.add_row(r["key"], r["title"], f"[{colours[r['state']]}]{r['state']}[/]",
                  " ".join(r["missing"]) if r["state"] == "locked" else "")
    console.print(t)
    done = sum(r["state"] == "completed" for r in rows)
    written = sum(r["state"] != "not written" for r in rows)
    console.print(f"{done} of {written} written modules completed.")
    nxt = _next_step(ws, rows)
    if nxt:
        console.print(nxt)


def _next_step(ws: Workspace, rows) -> str | None:
    """What to do next: start the next open module, or finish the one already started."""
    for r in rows:
        if r["state"] == "started":
            m = get_module(r["key"])
            return (f"Next: write your code in {m.notebook_relpath} (`jupyter lab "
                    f"{m.notebook_relpath}`), then `tito module complete {m.key}`")
        if r["state"] == "available":
            return f"Next: `tito module start {r['key']}`"
    return None


# ---- start / reset -----------------------------------------------------------------------
def _release_for(ws: Workspace, m: Module):
    """The student notebook for ``m``, generating it with nbgrader if init did not."""
    path = ws.release_path(m)
    if not path.is_file():
        notebook = release_notebooks([m])[m.number]
        path.parent.mkdir(parents=True, exist_ok=True)
        import nbformat

        nbformat.write(notebook, path)
    return path


def _hand_out(ws: Workspace, m: Module, force: bool, verb: str) -> None:
    target = ws.notebook_path(m)
    source = _release_for(ws, m)
    if target.exists():
        if not force:
            raise Failure(
                f"{target.relative_to(ws.root)} already exists and holds your work; it was not "
                f"touched. To replace it with a fresh copy, run `tito module {verb} {m.key} "
                "--force` (your current notebook is kept as a .bak file)."
            )
        backup = backup_path(target)
        shutil.copy2(target, backup)
        console.print(f"  kept your previous notebook as {backup.relative_to(ws.root)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    set_kernel(target, ws.root)  # Jupyter then imports this workspace's tinytorch
    console.print(f"[green]✓[/] {target.relative_to(ws.root)} is ready: open it with "
                  f"`jupyter lab {target.relative_to(ws.root)}`")


@module.command()
@click.argument("number")
@click.option("--force", is_flag=True, help="Replace an existing notebook (a backup is kept).")
def start(number, force):
    """Hand out module NUMBER's notebook, solutions cleared by nbgrader."""
    ws = Workspace.require()
    m = _written(number)
    done = ws.completed()
    missing = _missing(m, done)
    console.print(f"[bold]Module {m.key}: {m.title}[/] · {m.summary}")
    if missing:
        console.print(f"[yellow]note:[/] you can read ahead, but `tito module complete {m.key}` "
                      f"will need {_names(missing)} first.")
    _hand_out(ws, m, force, "start")
    console.print(f"When your code is written: `tito module complete {m.key}`")


@module.command()
@click.argument("number")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(number, yes):
    """Start module NUMBER over: a fresh notebook (yours is kept as a backup)."""
    ws = Workspace.require()
    m = _written(number)
    if not yes:
        if not interactive():
            raise Failure(f"`tito module reset {m.key}` replaces your notebook; add --yes to confirm.")
        click.confirm(f"Replace your notebook for module {m.key} with a fresh copy?", abort=True)
    _hand_out(ws, m, force=True, verb="reset")
    if ws.forget_completion(m):
        console.print(f"  module {m.key} is marked not completed; your exported package code "
                      "stays until you complete it again")


# ---- test / complete ---------------------------------------------------------------------
def _print_result(r: CellResult) -> None:
    """One line per test as it finishes; a failing cell of the student's is shown first."""
    if r.cell.is_graded:
        if r.passed:
            console.print(f"  [green]✓[/] {r.cell.grade_id} [dim]({r.cell.points:g} pts, "
                          f"{r.seconds:.2f} s)[/]")
        else:
            console.print(f"  [red]✗[/] {r.cell.grade_id} [dim]({r.cell.points:g} pts)[/]")
            console.print(f"      {r.explain()}", markup=False)
    elif not r.passed and r.status != "not run":
        who = "your cell" if r.cell.origin == "yours" else "cell"
        console.print(f"  [yellow]![/] {who} {r.cell.grade_id} raised (not graded, but the tests "
                      "after it use it):")
        console.print(f"      {r.explain()}", markup=False)


def _print_summary(report: RunReport, label: str) -> None:
    for note in report.notes:
        console.print(f"  [yellow]note:[/] {note}", markup=False)
    got, total = report.points()
    n_pass, n = len(report.passed), len(report.tests)
    colour = "green" if report.ok else "red"
    counted = f"{n} tests:"
    if report.expected_tests is not None and report.found_tests is not None \
            and report.found_tests != report.expected_tests:
        missing = report.expected_tests - report.found_tests
        counted = (f"{report.expected_tests} tests expected, {report.found_tests} found in your "
                   f"notebook: the {missing} missing were restored and run:")
    console.print(f"[{colour}]{counted} {n_pass} passed, {n - n_pass} failed[/] · "
                  f"{got:g}/{total:g} points · {report.seconds:.1f} s · {label}")


def _authority(m: Module):
    """The course's own cells for ``m`` to check a workspace's release against, if at hand."""
    if m.source.is_file():
        return lesson_authority(m.source)
    packaged = packaged_release(m)
    return release_authority(read_cells(packaged)) if packaged else None


def _run(m: Module, ws: Workspace | None, timeout: float) -> tuple[RunReport, object, str]:
    if ws is None:
        path = m.source
        label = f"reference solution {m.source.relative_to(COURSE_ROOT)}"
    else:
        path = ws.notebook_path(m)
        label = f"your notebook {path.relative_to(ws.root)}"
        if not path.is_file():
            raise Failure(f"{path.relative_to(ws.root)} does not exist: run `tito module start {m.key}` first.")
    try:
        notebook = load_notebook(path)
    except NotebookError as error:
        raise Failure(str(error) + _recovery(m, ws)) from None
    console.print(f"[bold]Module {m.key}: {m.title}[/] · testing {label} "
                  f"[dim](time limit {timeout:g} s, `--timeout` to change)[/]")
    if ws is None:
        report = run_notebook(path, COURSE_ROOT, timeout=timeout, on_result=_print_result)
    else:
        release = _release_for(ws, m)
        report = run_student(path, release, ws.root, timeout=timeout, on_result=_print_result,
                             authority=_authority(m))
    if not report.tests:
        raise Failure(f"{label} has no graded test cells (nbgrader metadata grade: true). "
                      f"Was it replaced? `tito module reset {m.key}` gives a fresh copy.")
    return report, notebook, label


def _recovery(m: Module, ws: Workspace | None) -> str:
    if ws is None:
        return ""
    backups = sorted(ws.notebook_path(m).parent.glob(ws.notebook_path(m).name + ".bak-*"))
    text = (f" To start over, `tito module reset {m.key} --yes` gives a fresh notebook (the "
            "damaged one is kept as a .bak copy)")
    if backups:
        text += f"; your last backup is {backups[-1].relative_to(ws.root)}"
    return text + "."


@module.command()
@click.argument("number")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, help="Seconds before the run is stopped.")
def test(number, timeout):
    """Run module NUMBER's graded tests (your notebook in a workspace, else the reference)."""
    m = _written(number)
    ws = Workspace.find()
    if ws is not None and ws.root == COURSE_ROOT:
        ws = None
    if ws is None and not m.source.is_file():
        raise Failure("This is not a TinyTorch workspace (no .tito folder here or above): run "
                      "`tito module test` inside the folder made by `tito init DIR`.")
    report, _, label = _run(m, ws, timeout)
    _print_summary(report, label)
    raise SystemExit(0 if report.ok else 1)


@module.command()
@click.argument("number")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, help="Seconds before the run is stopped.")
def complete(number, timeout):
    """Test YOUR notebook for module NUMBER; if every test passes, export it and record it."""
    ws = Workspace.require()
    m = _written(number)
    done = ws.completed()
    missing = _missing(m, done)
    if missing:
        first = get_module(missing[0]).key
        raise Failure(
            f"Module {m.key} ({m.title}) builds on modules you have not completed: "
            f"{_names(missing)}. Complete them first, starting with `tito module complete {first}`."
        )
    report, notebook, label = _run(m, ws, timeout)
    _print_summary(report, label)
    if not report.ok:
        console.print("[red]Not completed.[/] Nothing was exported; your package is unchanged. "
                      "Fix the failures above and run this command again.")
        raise SystemExit(1)
    rel = m.notebook_relpath
    # the cells that were tested: yours where you write, the release's where it is locked
    export = render_module(m, [r.cell for r in report.cells], str(rel), " (your notebook)")
    path = ws.export_student(m, export.text)
    got, total = report.points()
    ws.record_completion(m, {"tests_passed": len(report.passed), "tests_total": len(report.tests),
                             "points": got, "points_total": total,
                             "seconds": round(report.seconds, 2)})
    console.print(f"[green]✓ Module {m.key} completed.[/] Your code is now "
                  f"{path.relative_to(ws.root)} ({len(export.names)} public names: "
                  f"{', '.join(export.names[:6])}{'…' if len(export.names) > 6 else ''}).")
    _announce_unlocks(ws, m)


def _announce_unlocks(ws: Workspace, m: Module) -> None:
    done = ws.completed()
    milestones = [ms for ms in MILESTONES if m.number in ms.requires and set(ms.requires) <= done]
    for ms in milestones:
        console.print(f"  [magenta]unlocked milestone[/] {ms.name} ({ms.year}, {ms.title}): "
                      f"`tito milestone run {ms.name}`")
    opened = [
        x for x in MODULES
        if m.number in prerequisites(x.number) and set(prerequisites(x.number)) <= done
        and x.number not in done
    ]
    for x in opened:
        if x.written:
            console.print(f"  [cyan]unlocked module[/] {x.key} ({x.title})")
    nxt = _next_step(ws, _states(ws))
    if nxt:
        console.print(nxt)
    else:
        console.print("No other module is open to you yet: `tito module status` shows what each needs.")
