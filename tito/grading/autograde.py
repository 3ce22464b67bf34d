"""Autograding: ``nbgrader autograde`` once per student, in a sandbox, with a wall-clock stop.

One run of a module shares its prerequisite package, kernelspec and sandbox limits between
its students (``GradingRun``); each student gets nbgrader in a process of its own, so one
student's crash or endless loop cannot stop the others.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from pathlib import Path

from ..course.registry import COURSE_ROOT, Module
from ..errors import GradingError
from . import sandbox
from .course import DEFAULT_TIMEOUT, Course, load_nbformat
from .package import prerequisite_package
from .process import run_nbgrader
from .results import StudentResult, student_result

# Extra wall-clock time allowed to one student's nbgrader run on top of the per-cell limits
# (starting Python, nbgrader and the kernel; writing the gradebook).
RUN_OVERHEAD = 300


DEFAULT_CELLS = 50  # code cells assumed when the source notebook cannot be read


@dataclass
class GradingRun:
    """What one `autograde` of a module shares between its students: the prerequisite
    package, the kernelspec, the sandbox (or ``unsafe``: none) and its limits."""

    module: Module
    folder: Path
    package: Path
    jupyter: Path
    sandboxed: bool
    limits: sandbox.Limits
    read_only: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "GradingRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_run(course: Course, m: Module, unsafe: bool = False,
                limits: sandbox.Limits | None = None) -> GradingRun:
    """The prerequisite package and the kernel of one autograde run of module ``m``.

    Refuses (GradingError) when there is no sandbox here and ``unsafe`` was not asked for.
    """
    import tempfile

    reason = None if unsafe else sandbox.unavailable()
    if reason:
        raise GradingError(
            f"autograde runs every student's code in a sandbox, and there is none here: "
            f"{reason}. `--unsafe` grades without one (each student's code then runs with "
            "your rights and can read the gradebook, source/ and other submissions); use it "
            "only for submissions you trust.")
    folder = Path(tempfile.mkdtemp(prefix="tito-grade-"))  # 0700: the instructor's only
    try:
        package = prerequisite_package(m, folder / "package")
        jupyter = sandbox.write_kernelspec(folder / "jupyter", not unsafe, package)
        run = GradingRun(m, folder, package, jupyter, not unsafe, limits or sandbox.Limits())
        if run.sandboxed:
            run.read_only, run.hidden = sandbox.python_folders([course.root, COURSE_ROOT])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return run


def autograde_student(course: Course, m: Module, student: str, timeout: int | None = None,
                      run: GradingRun | None = None, slot: int = 0) -> StudentResult:
    """``nbgrader autograde`` for one student, in its own process, with a wall-clock stop.

    The notebook runs in ``run``'s kernel (sandboxed unless the run is unsafe) against the
    prerequisite package; ``slot`` tells parallel jobs apart (each has its own sandbox user).
    """
    if run is None:
        with prepare_run(course, m) as own:
            return autograde_student(course, m, student, timeout, own, slot)
    if timeout is None:
        timeout = course.settings()["timeout"] or DEFAULT_TIMEOUT
    n_code = DEFAULT_CELLS
    source = course.source_notebook(m)
    if source.is_file():
        n_code = sum(c.cell_type == "code" for c in load_nbformat().read(source, as_version=4).cells)
    wall = (n_code + 1) * timeout + RUN_OVERHEAD
    args = ["autograde", m.dirname, f"--student={student}", "--force",
            f"--ExecutePreprocessor.timeout={int(timeout)}",
            f"--ExecutePreprocessor.kernel_name={sandbox.KERNEL_NAME}"]
    runtime = run.folder / f"k{slot}"  # short: ipc socket paths must fit in 107 bytes
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir(mode=0o700)
    env = {"JUPYTER_PATH": os.pathsep.join(
               p for p in (str(run.jupyter), os.environ.get("JUPYTER_PATH", "")) if p),
           "JUPYTER_RUNTIME_DIR": str(runtime)}
    if run.sandboxed:
        # No network in the sandbox: ZMQ over unix sockets in this kernel's own folder (the
        # connection file goes there too: jupyter_client makes it with mkstemp in TMPDIR).
        args += ["--KernelManager.transport=ipc", f"--KernelManager.ip={runtime}/ipc"]
        env["TMPDIR"] = str(runtime)
        config = sandbox.KernelConfig(
            output=str(course.autograded_notebook(m, student).parent),
            runtime=str(runtime), package=str(run.package), python=sys.executable,
            uid=sandbox.UID_BASE + slot,
            limits=dataclass_replace(run.limits, cpu_seconds=min(run.limits.cpu_seconds,
                                                                  int(wall))),
            read_only=run.read_only, hidden=run.hidden)
        env[sandbox.CONFIG_ENV] = str(config.write(run.folder / f"k{slot}.json"))
    # Stale results must not pass for new ones when this run fails.
    course.autograded_notebook(m, student).unlink(missing_ok=True)
    try:
        done = run_nbgrader(course.root, args, wall_timeout=wall,
                            log=f"{m.dirname}/autograde-{student}", env=env)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    result = student_result(course, m, student)
    result.seconds = done.seconds
    if done.returncode is None:
        result.status = "stopped"
        result.error = (f"nbgrader did not finish within {wall:.0f} s "
                        f"and was stopped (with its kernel); its output: {done.log}")
    elif not done.ok or result.status != "graded":
        result.status = "failed"
        result.error = done.errors() or f"nbgrader exited with code {done.returncode}"
    return result


def autograde_all(course: Course, m: Module, students: list[str], timeout: int,
                  run: GradingRun, jobs: int = 1, done=None) -> list[StudentResult]:
    """Every student of ``students`` graded, ``jobs`` at a time (results in that order).

    Each job has a slot of its own (its sandbox user, its kernel folder). ``done(result)``
    is called as each student finishes. nbgrader writes gradebook.db from every job; sqlite
    serializes the writes itself (each autograde holds the lock for a few milliseconds).
    """
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    slots: queue.Queue[int] = queue.Queue()
    for k in range(max(1, jobs)):
        slots.put(k)
    lock = threading.Lock()

    def one(student: str) -> StudentResult:
        slot = slots.get()
        try:
            result = autograde_student(course, m, student, timeout, run, slot)
        finally:
            slots.put(slot)
        if done is not None:
            with lock:
                done(result)
        return result

    if jobs <= 1:
        return [one(s) for s in students]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, students))
