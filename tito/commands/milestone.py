"""`tito milestone ...`: historical runs on the student's own package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
from rich.markup import escape

from ..course.registry import COURSE_ROOT, MILESTONES, MILESTONES_DIR, get_milestone, get_module
from ..student.workspace import Workspace, not_a_workspace
from .ui import Failure, console, table


@click.group()
def milestone():
    """Run the course's historical milestones with your own tinytorch."""


def _context(what: str):
    """(package root, completed-or-written module numbers, who) for the current folder.

    In a workspace: the student's package and progress. In the course repository: the
    reference package. Anywhere else the student is lost: with a course repository installed
    (editable), its reference package, said loudly as not their code; in a student build,
    which has no reference, a refusal that says where they are and where to go."""
    from ..course.registry import written_modules

    ws = Workspace.find()
    if ws is not None and ws.root != COURSE_ROOT:
        return ws.root, ws.completed(), "your package"
    here = Path.cwd().resolve()
    reference = (COURSE_ROOT / "tinytorch" / "__init__.py").is_file()
    written = {m.number for m in written_modules()}
    if ws is not None or (reference and here.is_relative_to(COURSE_ROOT)):
        return COURSE_ROOT, written, "the reference package"
    lost = not_a_workspace(here, what)
    if not reference:
        raise Failure(lost)
    console.print(f"[yellow]{escape(lost)}[/] [bold]So this uses the course repository's reference "
                  f"solution ({COURSE_ROOT / 'tinytorch'}), not your code.[/]")
    return COURSE_ROOT, written, "the course's reference solution (not your code)"


@milestone.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(as_json):
    """The milestones and the modules each needs."""
    _, have, _ = _context("run `tito milestone list`")
    rows = [{"name": ms.name, "year": ms.year, "title": ms.title,
             "requires": [get_module(n).key for n in ms.requires],
             "missing": [get_module(n).key for n in ms.requires if n not in have],
             "available": (MILESTONES_DIR / ms.script).is_file()} for ms in MILESTONES]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    t = table("milestone", "year", "what", "needs", "ready")
    for r in rows:
        ready = ("[dim]coming soon[/]" if not r["available"] else
                 "[green]yes[/]" if not r["missing"] else f"needs {' '.join(r['missing'])}")
        t.add_row(r["name"], str(r["year"]), r["title"], " ".join(r["requires"]), ready)
    console.print(t)


@milestone.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(name, args):
    """Run milestone NAME with your package (extra ARGS go to the script, e.g. --quick)."""
    ms = get_milestone(name)
    root, have, who = _context(f"run `tito milestone run {name}`")
    missing = [n for n in ms.requires if n not in have]
    unwritten = [n for n in missing if not get_module(n).written]
    if unwritten:
        names = ", ".join(f"{get_module(n).key} ({get_module(n).title})" for n in unwritten)
        raise Failure(f"Milestone {ms.name} needs module{'s' if len(unwritten) > 1 else ''} "
                      f"{names}, not written yet: this milestone is coming soon. "
                      "`tito milestone list` shows the ones you can run.")
    if missing:
        names = ", ".join(f"{get_module(n).key} ({get_module(n).title})" for n in missing)
        raise Failure(f"Milestone {ms.name} needs modules {names}. "
                      f"Complete them first: `tito module complete {get_module(missing[0]).key}`.")
    script = MILESTONES_DIR / ms.script
    if not script.is_file():
        raise Failure(f"Milestone {ms.name} is not written yet: coming soon.")
    console.print(f"[bold]{ms.year} · {ms.title}[/] with {who} ({root / 'tinytorch'})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root), str(MILESTONES_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, str(script), *args], env=env, cwd=os.getcwd())
    raise SystemExit(done.returncode)
