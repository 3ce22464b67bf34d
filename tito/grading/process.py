"""Running nbgrader: the one place tito starts it.

Every nbgrader command tito runs (releasing lessons for students, and each step of an
instructor's grading) goes through ``run_nbgrader``: nbgrader's own application with tito's
grading configuration (``nbgrader_app.py``), this interpreter's environment, a process group
of its own that is killed whole when it overruns, and its output kept.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class NbgraderRun:
    args: list[str]
    returncode: int | None  # None: stopped by tito's wall-clock limit
    output: str
    seconds: float
    log: Path | None = None  # nbgrader's whole output, kept in the course's logs/

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def errors(self, limit: int = 8) -> str:
        """The gist of a failure: nbgrader's ERROR lines and the exception, without chatter."""
        lines = [ln.rstrip() for ln in self.output.splitlines() if ln.strip()]
        picked = []
        for ln in lines:
            if (_EXCEPTION.match(ln) or "| ERROR]" in ln) and not _BOILERPLATE.search(ln):
                if ln.strip() not in (p.strip() for p in picked):
                    picked.append(ln.strip())
        if not picked:
            picked = [ln for ln in lines if not _NOISE.search(ln)]
        text = "\n".join(picked[-limit:])
        if self.log:
            text += f"\n(nbgrader's full output: {self.log})"
        return text


_NOISE = re.compile(
    r"\| INFO\]|SAWarning|^\s+(for notebook in|return \[x for)|running over TCP|"
    r"does not exist in the database|^TITO-GUARD "
)
_BOILERPLATE = re.compile(r"Please see the|Traceback \(most recent")
_EXCEPTION = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit)\b(:|$)")


def nbgrader_env() -> dict[str, str]:
    """The environment for running nbgrader: this interpreter's scripts first on PATH.

    nbgrader starts helper programs (``alembic``) by name; in a virtual environment that was
    not activated they would not be found.
    """
    bindir = str(Path(sys.executable).parent)
    return dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))


def run_nbgrader(root: Path, args: list[str], wall_timeout: float | None = None,
                 log: str | None = None, env: dict[str, str] | None = None) -> NbgraderRun:
    """``nbgrader ARGS`` (``python -m tito.grading.nbgrader_app``) in the folder ``root``;
    killed whole after ``wall_timeout``.

    nbgrader runs in a process group of its own, killed whole when it overruns (or when tito
    is interrupted). The kernel it started has its own session, but ipykernel's parent
    poller ends it within a second of nbgrader's death. With ``log``, nbgrader's output is
    also kept in ``root/logs/<log>.log`` (``run.log`` is that path, relative to ``root``).
    """
    command = [sys.executable, "-m", "tito.grading.nbgrader_app", *args,
               f"--CourseDirectory.root={root}"]
    full_env = {**nbgrader_env(), **(env or {})}
    # In a virtual environment made with --system-site-packages, nbconvert's templates (used
    # by generate_feedback) live in the base Python's share/jupyter, which Jupyter does not
    # search by itself.
    base_share = Path(sys.base_prefix) / "share" / "jupyter"
    if sys.base_prefix != sys.prefix and base_share.is_dir():
        full_env["JUPYTER_PATH"] = os.pathsep.join(
            p for p in (full_env.get("JUPYTER_PATH", ""), str(base_share)) if p)
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=root, env=full_env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=wall_timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    except BaseException:  # Ctrl-C: the new session does not get the terminal's signal
        os.killpg(process.pid, signal.SIGKILL)
        raise
    run = NbgraderRun(args, code, output or "", time.perf_counter() - start)
    if log:
        path = Path(root) / "logs" / f"{log}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"$ nbgrader {' '.join(args)}\n{run.output}", encoding="utf-8")
        run.log = path.relative_to(root)
    return run
