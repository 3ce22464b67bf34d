"""Handing out a module's notebook (`tito module start`, `reset`) and what a reset changes.

``hand_out`` copies the released student notebook (made by nbgrader if `tito init` did not)
into the workspace, never over the student's work without ``--force``, and keeping a backup;
``reset_consequences`` says, in the student's words, what `tito module reset` will change
before it changes it.
"""

from __future__ import annotations

import shutil

from ..course.registry import MILESTONES, Module, prerequisites, written_modules
from ..grading.release import release_notebooks
from ..student.kernel import set_kernel
from ..student.workspace import Workspace, backup_path
from .ui import Failure, console


def release_for(ws: Workspace, m: Module):
    """The student notebook for ``m``, generating it with nbgrader if init did not."""
    path = ws.release_path(m)
    if not path.is_file():
        notebook = release_notebooks([m])[m.number]
        path.parent.mkdir(parents=True, exist_ok=True)
        import nbformat

        nbformat.write(notebook, path)
    return path


def hand_out(ws: Workspace, m: Module, force: bool, verb: str) -> None:
    target = ws.notebook_path(m)
    source = release_for(ws, m)
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


def _some(modules, limit: int = 6) -> str:
    names = [f"{x.key} ({x.title})" for x in modules]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (
        f" and {more} more (`tito module status` lists them)" if more > 0 else "")


def reset_consequences(ws: Workspace, m: Module) -> list[str]:
    """What `tito module reset m` changes, in the student's words, before it changes it."""
    rel = m.notebook_relpath
    lines = [f"replace {rel} with a fresh copy of the release (yours is kept as a .bak file "
             "beside it)" if ws.notebook_path(m).is_file() else f"hand out a fresh {rel}"]
    record = ws.load_progress()["completed"].get(m.key)
    if record is None:
        return lines
    done = ws.completed()
    when = str(record.get("completed_at", ""))[:10]
    points = (f", {record['points']:g}/{record['points_total']:g} points"
              if isinstance(record.get("points"), (int, float)) and record.get("points_total")
              else "")
    lines.append(f"mark module {m.key} as not completed (it was completed on {when}{points})")
    later = [x for x in written_modules() if m.number in prerequisites(x.number)]
    locked = [x for x in later if x.number not in done]
    if locked:
        lines.append(f"lock the modules that build on it until you complete {m.key} again: "
                     f"`tito module complete` refuses {_some(locked)}")
    kept = [x for x in later if x.number in done]
    if kept:
        lines.append(f"leave {_some(kept)} completed, though they build on it")
    stopped = [ms.name for ms in MILESTONES if m.number in ms.requires and set(ms.requires) <= done]
    if stopped:
        lines.append(f"stop the milestone{'s' if len(stopped) > 1 else ''} {', '.join(stopped)} "
                     f"until you complete {m.key} again")
    lines.append(f"keep your exported code in {m.target_path} as it is")
    return lines
