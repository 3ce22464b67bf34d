"""Autograding: ``nbgrader autograde`` once per student, in a sandbox, then a second grading.

One run of a module shares its prerequisite package, kernelspec, guard and sandbox limits
between its students (``GradingRun``); each student gets nbgrader in a process of its own, so
one student's crash or endless loop cannot stop the others, and a sandbox of its own: a uid
leased for that student alone, a control group holding the memory and processes of
everything the student's code starts, a size-limited runtime folder. After nbgrader, the
control group is emptied (nothing the student started outlives the run), and the submission
is graded again by the strict driver (``verify.py``); where the two grades differ, the lower
one is written to the gradebook and the student is flagged. A re-run that fails never
deletes the earlier result: the graded notebook and the gradebook's scores are put back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from pathlib import Path

from ..course.notebook import cells_of, load_notebook
from ..course.registry import COURSE_ROOT, DATA_DIR, Module
from ..errors import GradingError
from ..guard.protect import ctypes_packages_for
from ..guard.runs import helper_modules, is_locked
from . import sandbox, verify
from .course import DEFAULT_TIMEOUT, Course, load_nbformat
from .package import prerequisite_package
from .process import run_nbgrader
from .results import StudentResult, student_result

# Extra wall-clock time allowed to one student's nbgrader run on top of the per-cell limits
# (starting Python, nbgrader and the kernel; writing the gradebook).
RUN_OVERHEAD = 300
GUARD_LINE = re.compile(r"^TITO-GUARD (\{.*\})\s*$", re.MULTILINE)

DEFAULT_CELLS = 50  # code cells assumed when the source notebook cannot be read


@dataclass
class GradingRun:
    """What one `autograde` of a module shares between its students: the prerequisite
    package, the kernelspec, the guard, the sandbox (or ``unsafe``: none) and its limits."""

    module: Module
    folder: Path
    package: Path
    jupyter: Path
    sandboxed: bool
    limits: sandbox.Limits
    read_only: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    guard: Path | None = None  # sandbox.GUARD_FILES: protect, snapshots, driver, kernel (copied)
    kernel_config: dict = field(default_factory=dict)  # kernel.py's CONFIG, but the package
    cgroups: str | None = None  # why there is no control group here (None: there is)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> GradingRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _kernel_config(course: Course, m: Module) -> dict:
    """What nbgrader's guarded kernel needs to know of the module (see kernel.py)."""
    source = course.source_notebook(m)
    cells = [c for c in cells_of(load_notebook(source)) if c.kind == "code"] \
        if source.is_file() else []
    trusted = [c for c in cells if is_locked(c)]
    for c in trusted:
        c.origin = "release"
    target = next((c.directives["default_exp"] for c in trusted
                   if "default_exp" in c.directives), None)
    return {"helpers": helper_modules(trusted), "trusted": [c.source for c in trusted],
            "own_module": f"tinytorch.{target}" if target else "",
            "ctypes_packages": ctypes_packages_for(c.source for c in cells)}


def prepare_run(course: Course, m: Module, unsafe: bool = False,
                limits: sandbox.Limits | None = None) -> GradingRun:
    """The prerequisite package, the guard and the kernel of one autograde run of ``m``.

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
        if unsafe:
            guard = Path(__file__).resolve().parents[1] / "guard"
        else:
            guard = sandbox.copy_guard(folder / "guard")
        jupyter = sandbox.write_kernelspec(folder / "jupyter", not unsafe, package, guard)
        run = GradingRun(m, folder, package, jupyter, not unsafe, limits or sandbox.Limits(),
                         guard=guard, kernel_config=_kernel_config(course, m))
        if run.sandboxed:
            run.read_only, run.hidden = sandbox.python_folders([course.root, COURSE_ROOT])
            try:
                sandbox.Cgroup(f"probe-{os.getpid()}", run.limits).remove()
            except OSError as error:
                run.cgroups = str(error)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return run


def _guard_flags(output: str) -> list[str]:
    """What nbgrader's guarded kernel reported (its lines in nbgrader's output)."""
    flags = []
    for match in GUARD_LINE.finditer(output):
        try:
            flags.append("nbgrader's kernel: " + str(json.loads(match[1])["flag"])[:300])
        except (ValueError, KeyError, TypeError):
            continue
    return list(dict.fromkeys(flags))


def _end_session(runtime: Path) -> None:
    """--unsafe: end every process of the kernel's session and process group (the kernel
    wrote its pid; jupyter_client started it in a session of its own)."""
    try:
        pid = int((runtime / "kernel.pid").read_text())
    except (OSError, ValueError):
        return
    victims = {pid}
    proc = Path("/proc")
    if proc.is_dir():  # Linux: every process whose session is the kernel's
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 4 and int(fields[3]) == pid:  # session id
                victims.add(int(entry.name))
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _grades_of(course: Course, m: Module, student: str) -> dict:
    from nbgrader.api import MissingEntry

    try:
        with course.gradebook() as gb:
            notebook = gb.find_submission_notebook(m.slug, m.dirname, student)
            return {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade)
                    for g in notebook.grades}
    except (MissingEntry, Exception):  # noqa: BLE001 - no earlier grading
        return {}


def _put_back_grades(course: Course, m: Module, student: str, saved: dict) -> None:
    from nbgrader.api import MissingEntry

    if not saved:
        return
    try:
        with course.gradebook() as gb:
            notebook = gb.find_submission_notebook(m.slug, m.dirname, student)
            for grade in notebook.grades:
                if grade.name in saved:
                    grade.auto_score, grade.manual_score, grade.needs_manual_grade = \
                        saved[grade.name]
            gb.db.commit()
    except (MissingEntry, Exception):  # noqa: BLE001 - nothing to put back
        pass


def autograde_student(course: Course, m: Module, student: str, timeout: int | None = None,
                      run: GradingRun | None = None, slot: int = 0) -> StudentResult:
    """``nbgrader autograde`` for one student, then the second grading (see the module's doc).

    The notebook runs in ``run``'s kernel (sandboxed unless the run is unsafe) against the
    prerequisite package. ``slot`` is kept for callers; each sandbox leases its own uid.
    """
    if run is None:
        with prepare_run(course, m) as own:
            return autograde_student(course, m, student, timeout, own, slot)
    if timeout is None:
        timeout = course.settings()["timeout"] or DEFAULT_TIMEOUT
    n_code = DEFAULT_CELLS
    source = course.source_notebook(m)
    if source.is_file():
        cells = load_nbformat().read(source, as_version=4).cells
        n_code = sum(c.cell_type == "code" for c in cells)
    wall = (n_code + 1) * timeout + RUN_OVERHEAD
    args = ["autograde", m.dirname, f"--student={student}", "--force",
            f"--ExecutePreprocessor.timeout={int(timeout)}",
            f"--ExecutePreprocessor.kernel_name={sandbox.KERNEL_NAME}"]
    lease = sandbox.UidLease() if run.sandboxed else None
    uid = lease.uid if lease else os.getuid()
    tag = f"{os.getpid()}-{uid}"
    runtime = run.folder / f"k{uid}"  # short: ipc socket paths must fit in 107 bytes
    cgroup = None
    mounted = False
    graded_dir = course.autograded_notebook(m, student).parent
    backup = run.folder / f"previous-{student}"
    saved_grades = _grades_of(course, m, student)
    try:
        shutil.rmtree(runtime, ignore_errors=True)
        kernel_cfg = dict(run.kernel_config)
        if run.sandboxed:
            mounted = sandbox.mount_runtime(runtime, run.limits.runtime_mb, uid)
            if run.cgroups is None:
                cgroup = sandbox.Cgroup(tag, run.limits)
            kernel_cfg["package"] = sandbox.SANDBOX_PACKAGE
        else:
            runtime.mkdir(mode=0o700)
            kernel_cfg["package"] = str(run.package)
        guard_config = run.folder / f"g{uid}.json"
        guard_config.write_text(json.dumps(kernel_cfg), encoding="utf-8")
        config = sandbox.KernelConfig(
            output=str(graded_dir), runtime=str(runtime), package=str(run.package),
            python=sys.executable, uid=uid,
            limits=dataclass_replace(run.limits, cpu_seconds=min(run.limits.cpu_seconds,
                                                                  int(wall))),
            read_only=run.read_only, hidden=run.hidden, guard=str(run.guard),
            guard_config=str(guard_config), data=str(DATA_DIR) if DATA_DIR.is_dir() else "",
            cgroups=cgroup.join_files() if cgroup else [])
        env = {"JUPYTER_PATH": os.pathsep.join(
                   p for p in (str(run.jupyter), os.environ.get("JUPYTER_PATH", "")) if p),
               "JUPYTER_RUNTIME_DIR": str(runtime),
               sandbox.CONFIG_ENV: str(config.write(run.folder / f"k{uid}.json"))}
        if run.sandboxed:
            # No network in the sandbox: ZMQ over unix sockets in this kernel's own folder
            # (the connection file goes there too: jupyter_client makes it in TMPDIR).
            args += ["--KernelManager.transport=ipc", f"--KernelManager.ip={runtime}/ipc"]
            env["TMPDIR"] = str(runtime)
        # The earlier result is kept aside, and put back if this run fails.
        if graded_dir.is_dir():
            shutil.copytree(graded_dir, backup, symlinks=True)
        course.autograded_notebook(m, student).unlink(missing_ok=True)
        done = run_nbgrader(course.root, args, wall_timeout=wall,
                            log=f"{m.dirname}/autograde-{student}", env=env)
        if cgroup is not None:
            cgroup.kill()  # nothing the student's code started outlives its notebook
        elif not run.sandboxed:
            _end_session(runtime)
        flags = _guard_flags(done.output)
        pressure = cgroup.pressure() if cgroup is not None else {}
        with verify.PARSING:
            result = student_result(course, m, student)
        result.seconds = done.seconds
        if done.returncode is None:
            result.status = "stopped"
            result.error = (f"nbgrader did not finish within {wall:.0f} s "
                            f"and was stopped (with its kernel); its output: {done.log}")
        elif not done.ok or result.status != "graded":
            result.status = "failed"
            result.error = done.errors() or f"nbgrader exited with code {done.returncode}"
        if result.status != "graded":
            if backup.is_dir():  # a failed re-run: the earlier result stands
                shutil.rmtree(graded_dir, ignore_errors=True)
                shutil.copytree(backup, graded_dir, symlinks=True)
                _put_back_grades(course, m, student, saved_grades)
                result.error += "\n(the earlier result was kept)"
            return result
        # The second grading, in the same sandbox (a fresh process, the same limits).
        driver_config = dataclass_replace(config, runtime="", guard_config="")
        second = verify.verify(course, m, student, run, driver_config if run.sandboxed else None,
                               float(timeout))
        if cgroup is not None:
            cgroup.kill()
            after = cgroup.pressure()
            pressure = {k: max(v, after.get(k, 0)) for k, v in pressure.items()}
        with verify.PARSING, course.gradebook() as gb:
            flags += verify.settle(course, m, student, second, gb)
        if pressure.get("memory"):
            flags.append(f"reached the sandbox's memory limit ({run.limits.memory_mb} MiB; "
                         f"{pressure['memory']} allocations refused)")
        if pressure.get("processes"):
            flags.append(f"reached the sandbox's process limit ({run.limits.processes}; "
                         f"{pressure['processes']} new processes refused)")
        verify.save(course, m, student, {"flags": flags, "second": second.to_json(),
                                         "pressure": pressure,
                                         "runtime_limited": mounted or not run.sandboxed})
        with verify.PARSING:
            result = student_result(course, m, student)
        result.seconds = done.seconds + second.seconds
        return result
    finally:
        if cgroup is not None:
            cgroup.remove()
        if run.sandboxed:
            sandbox.unmount_runtime(runtime, mounted)
        else:
            shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)
        shutil.rmtree(run.folder / f"v-{student}", ignore_errors=True)
        if lease is not None:
            lease.release()


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
