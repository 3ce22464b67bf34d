"""`tito module ...`: list, status, start, test, complete, reset."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from ..course.exporter import render_module
from ..course.notebook import load_notebook
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
from ..student.package import authority, check_export, sha256_text, verify_progress
from ..student.results import CellResult, RunReport
from ..student.runner import DEFAULT_TIMEOUT, run_notebook, run_student
from ..student.workspace import Workspace, not_a_workspace
from .handout import hand_out, release_for, reset_consequences
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
def _states(ws: Workspace, verify: bool = True) -> list[dict]:
    """Each module's state. A completed module the package does not back up (see
    ``verify_progress``) is "not verified", with why."""
    done = ws.completed()
    unverified = verify_progress(ws) if verify else {}
    rows = []
    for m in MODULES:
        missing = _missing(m, done)
        why = ""
        if not m.written:
            state = "not written"
        elif m.number in done:
            state = "completed"
            if m.key in unverified:
                state, why = "not verified", unverified[m.key]
        elif ws.notebook_path(m).is_file():
            state = "started"
        elif not missing:
            state = "available"
        else:
            state = "locked"
        rows.append({"key": m.key, "title": m.title, "state": state,
                     "missing": [get_module(n).key for n in missing], "why": why})
    return rows


@module.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json):
    """Your progress through the course (in a workspace), checked against your package."""
    ws = Workspace.require("run `tito module status`")
    rows = _states(ws)
    if as_json:
        click.echo(json.dumps({"workspace": str(ws.root), "modules": rows}, indent=2))
        return
    colours = {"completed": "green", "started": "yellow", "available": "cyan",
               "locked": "dim", "not written": "dim", "not verified": "red"}
    t = table("#", "module", "state", "needs first", title=f"Progress in {ws.root}")
    for r in rows:
        t.add_row(r["key"], r["title"], f"[{colours[r['state']]}]{r['state']}[/]",
                  " ".join(r["missing"]) if r["state"] == "locked" else "")
    console.print(t)
    done = sum(r["state"] in ("completed", "not verified") for r in rows)
    written = sum(r["state"] != "not written" for r in rows)
    unverified = [r for r in rows if r["state"] == "not verified"]
    console.print(f"{done} of {written} written modules completed"
                  + (f", {len(unverified)} of them not verified:" if unverified else "."))
    for r in unverified:
        console.print(f"  [red]not verified[/] {r['key']} ({r['title']}): {escape(r['why'])}")
    if unverified:
        console.print("  [dim]Your progress file says these are completed; your package or the "
                      "release does not back it up.[/]")
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
    hand_out(ws, m, force, "start")
    console.print(f"When your code is written: `tito module complete {m.key}`")


@module.command()
@click.argument("number")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(number, yes):
    """Start module NUMBER over: a fresh notebook (yours is kept as a backup); says first what
    it will un-complete and lock."""
    ws = Workspace.require("run `tito module reset`")
    m = _written(number)
    console.print(f"[bold]`tito module reset {m.key}` will:[/]")
    for line in reset_consequences(ws, m):
        console.print(f"  - {escape(line)}")
    if not yes:
        if not interactive():
            raise Failure("Nothing was changed. To go ahead, run "
                          f"`tito module reset {m.key} --yes`.")
        click.confirm("Go ahead?", abort=True)
    hand_out(ws, m, force=True, verb="reset")
    if ws.forget_completion(m):
        console.print(f"  module {m.key} is marked not completed: `tito module complete {m.key}` "
                      "when your code is written again")


# ---- test / complete ---------------------------------------------------------------------
def _who(r: CellResult) -> str:
    """The cell as the student finds it: theirs or the lesson's, by name or by its first line."""
    if r.cell.nbgrader.get("grade_id"):
        whose = "your cell" if r.cell.origin == "yours" else "the lesson's cell"
        return f"{whose} '{r.cell.grade_id}'"
    return r.name


def _print_result(r: CellResult) -> None:
    """One line per test as it finishes; a failing cell of the student's is shown first."""
    if r.cell.is_graded:
        if r.passed and r.after_refusal:
            console.print(f"  [yellow]-[/] {r.cell.grade_id} [dim]({r.cell.points:g} pts)[/] "
                          f"not counted: it ran after {escape(r.after_refusal)} was refused")
        elif r.passed:
            console.print(f"  [green]✓[/] {r.cell.grade_id} [dim]({r.cell.points:g} pts, "
                          f"{r.seconds:.2f} s)[/]")
        else:
            console.print(f"  [red]✗[/] {r.cell.grade_id} [dim]({r.cell.points:g} pts)[/]")
            console.print(f"      {r.explain()}", markup=False)
    elif r.error_type == "IntegrityError":
        console.print(f"  [red]✗[/] {escape(_who(r))} was refused:")
        console.print(f"      {r.explain()}", markup=False)
    elif not r.passed and r.status != "not run":
        why = ("not graded, but the tests after it use it" if r.cell.origin == "yours" else
               "not graded: the lesson's code, calling yours")
        console.print(f"  [yellow]![/] {escape(_who(r))} raised ({why}):")
        console.print(f"      {r.explain()}", markup=False)


def _print_summary(report: RunReport, label: str) -> None:
    for note in report.notes:
        console.print(f"  [yellow]note:[/] {escape(note)}")
    got, total = report.points()
    n_pass, n_fail, n = len(report.passed), len(report.failed), len(report.tests)
    uncounted = len(report.not_counted)
    colour = "green" if report.ok else "red"
    counted = f"{n} tests:"
    if report.expected_tests is not None and report.found_tests is not None \
            and report.found_tests != report.expected_tests:
        missing = report.expected_tests - report.found_tests
        counted = (f"{report.expected_tests} tests expected, {report.found_tests} found in your "
                   f"notebook: the {missing} missing were restored and run:")
    tally = (f"{n_pass} passed, {n_fail} failed"
             + (f", {uncounted} not counted" if uncounted else ""))
    console.print(f"[{colour}]{escape(counted)} {tally}[/] · "
                  f"{got:g}/{total:g} points · {report.seconds:.1f} s · {escape(label)}")
    refused = report.integrity_errors
    if refused:
        first = refused[0]
        console.print(f"[red]Refused:[/] {escape(_who(first))} did what graded code may not "
                      f"({escape(first.message)}): it was put back, and the tests that ran "
                      "after it are not counted.")


def _run(m: Module, ws: Workspace | None, timeout: float) -> tuple[RunReport, object, str]:
    if ws is None:
        path = m.source
        label = f"reference solution {m.source.relative_to(COURSE_ROOT)}"
    else:
        path = ws.notebook_path(m)
        label = f"your notebook {path.relative_to(ws.root)}"
        if not path.is_file():
            raise Failure(f"{path.relative_to(ws.root)} does not exist: run "
                          f"`tito module start {m.key}` first.")
    try:
        notebook = load_notebook(path)
    except NotebookError as error:
        raise Failure(str(error) + _recovery(m, ws)) from None
    console.print(f"[bold]Module {m.key}: {m.title}[/] · testing {label} "
                  f"[dim](time limit {timeout:g} s, `--timeout` to change)[/]")
    if ws is None:
        report = run_notebook(path, COURSE_ROOT, timeout=timeout, on_result=_print_result)
    else:
        release = release_for(ws, m)
        report = run_student(path, release, ws.root, timeout=timeout, on_result=_print_result,
                             authority=authority(m))
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
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds before the run is stopped.")
def test(number, timeout):
    """Run module NUMBER's graded tests (your notebook in a workspace, else the reference)."""
    m = _written(number)
    ws = Workspace.find()
    if ws is not None and ws.root == COURSE_ROOT:
        ws = None
    if ws is None and not m.source.is_file():
        raise Failure(not_a_workspace(Path.cwd(), f"run `tito module test {m.key}`"))
    report, _, label = _run(m, ws, timeout)
    _print_summary(report, label)
    raise SystemExit(0 if report.ok else 1)


@module.command()
@click.argument("number")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds before the run is stopped.")
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
        fix = ("Remove what was refused above" if report.integrity_errors and not report.failed
               else "Fix the failures above")
        console.print("[red]Not completed.[/] Nothing was exported; your package is unchanged. "
                      f"{fix} and run this command again.")
        raise SystemExit(1)
    rel = m.notebook_relpath
    # the cells that were tested: yours where you write, the release's where it is locked
    tested = [r.cell for r in report.cells]
    export = render_module(m, tested, str(rel), " (your notebook)")
    lacking = [n for n in ws.release_names(m) if n not in export.names]
    if lacking:
        _refuse(f"your exported cells do not define {', '.join(f'`{n}`' for n in lacking[:6])}, "
                f"which module {m.key} exports (the released notebook's cells define them and "
                "later modules import them). Keep each definition in its solution cell, with "
                "`#| export` as the cell's first line.")
    files = ws.package_files(m, export.text)
    console.print("Checking the package built from your notebook: a fresh process imports it "
                  "and runs the graded tests against it, as milestones and later modules use "
                  "it ...")
    check = check_export(m, ws.root, tested, ws.notebook_path(m).parent, timeout, files)
    if not check.ok:
        _refuse(check.problem)
    console.print(f"  [green]✓[/] tinytorch.{m.target} imports and passes the {check.tests} graded "
                  f"tests [dim]({check.seconds:.1f} s)[/]")
    ws.install_package(files)
    got, total = report.points()
    ws.record_completion(m, {"tests_passed": len(report.passed), "tests_total": len(report.tests),
                             "points": got, "points_total": total,
                             "seconds": round(report.seconds, 2),
                             "export_sha256": sha256_text(export.text)})
    console.print(f"[green]✓ Module {m.key} completed.[/] Your code is now "
                  f"{m.target_path} ({len(export.names)} public names: "
                  f"{', '.join(export.names[:6])}{'…' if len(export.names) > 6 else ''}).")
    console.print(HIDDEN_TESTS_NOTE)
    _announce_unlocks(ws, m)


HIDDEN_TESTS_NOTE = (
    "[dim]This was your own check. The grade that counts is your instructor's (nbgrader), and it "
    "also runs hidden test cases that `complete` does not run: other shapes, values and edge "
    "cases. Code written for the visible tests alone can lose marks there.[/]"
)


def _refuse(problem: str) -> None:
    """The export check failed: say what and where, keep the package, exit 1."""
    console.print(f"  [red]✗[/] {escape(problem)}")
    console.print("[red]Not completed.[/] Your notebook passes its tests, but the package built "
                  "from it does not work on its own. Nothing was exported; your package is "
                  "unchanged. Fix the cell named above and run this command again.")
    raise SystemExit(1)


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
    nxt = _next_step(ws, _states(ws, verify=False))
    if nxt:
        console.print(nxt)
    else:
        console.print("No other module is open to you yet: `tito module status` shows what "
                      "each needs.")
