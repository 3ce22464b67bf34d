"""Recorded milestone runs for the milestone pages: what a real run printed, and how long it took.

``tito site runs [NAME ...]`` runs each milestone as a reader would (``tito milestone run NAME``
from the course folder, on the course's own ``tinytorch``), and keeps what it printed, the
wall time, the machine's load before and after, and the exit code, in
``site/runs/NAME.json``. The milestone pages quote those files; nothing on them is typed by
hand. The runs are in reading order, so ``tinygpt`` has written ``runs/tinygpt`` before
``llm`` and ``olympics`` read it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..course.registry import COURSE_ROOT, MILESTONES, MILESTONES_DIR, Milestone

RUNS_DIR = COURSE_ROOT / "site" / "runs"
# The width the output is printed at: the lessons' 100 columns, less a margin.
COLUMNS = 96


def run_path(ms: Milestone, root: Path = RUNS_DIR) -> Path:
    return root / f"{ms.name}.json"


def recorded_run(ms: Milestone, root: Path = RUNS_DIR) -> dict | None:
    path = run_path(ms, root)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _clean(text: str) -> str:
    """Output as any reader's run would print it: no path of this machine."""
    return text.replace(str(COURSE_ROOT) + "/", "").replace(str(COURSE_ROOT), ".").rstrip("\n")


def help_text(ms: Milestone) -> str:
    """The milestone script's own ``--help`` (its flags), as ``tito milestone run`` runs it."""
    env = dict(os.environ, COLUMNS=str(COLUMNS), PYTHONPATH=os.pathsep.join(
        [str(COURSE_ROOT), str(MILESTONES_DIR)]))
    done = subprocess.run([sys.executable, str(MILESTONES_DIR / ms.script), "--help"],
                          cwd=COURSE_ROOT, env=env, capture_output=True, text=True, check=False)
    return _clean(done.stdout)


def record_run(ms: Milestone, args: tuple[str, ...] = (), root: Path = RUNS_DIR) -> dict:
    """Run milestone ``ms`` from the course folder and write what it printed to ``root``."""
    command = [sys.executable, "-m", "tito", "milestone", "run", ms.name, *args]
    env = dict(os.environ, COLUMNS=str(COLUMNS), NO_COLOR="1", TERM="dumb")
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run(command, cwd=COURSE_ROOT, env=env, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - start
    load_after = os.getloadavg()
    result = {
        "command": " ".join(["tito", "milestone", "run", ms.name, *args]),
        "exit_code": done.returncode,
        "seconds": round(seconds, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "output": _clean(done.stdout + done.stderr),
        "help": help_text(ms),
    }
    root.mkdir(parents=True, exist_ok=True)
    run_path(ms, root).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                                  encoding="utf-8")
    return result


def milestones_to_run(names: tuple[str, ...]) -> list[Milestone]:
    chosen = [ms for ms in MILESTONES if not names or ms.name in names]
    return sorted(chosen, key=lambda ms: [m.name for m in MILESTONES].index(ms.name))
