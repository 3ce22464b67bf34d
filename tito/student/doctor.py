"""What `tito system doctor` checks, and how it stays within two seconds.

Each check gives a ``Check``: a name, a state (``ok``, ``failed``, ``not verified``, or
``note``, which is only said), and a detail that names the fix. The slow parts run in fresh
processes started first, side by side, while the rest is checked here:

- the student's package: ``python`` run in the workspace imports NumPy, ``tinytorch`` and
  every completed module, and checks each one's ``__all__``;
- the workspace's kernel: its interpreter, with its environment, imports ``tinytorch`` from a
  notebook's folder and finds ``ipykernel``.

What this process checks itself is read from files: the installed packages' metadata (every
package the course needs, and every package those need, at the versions required), the
kernel folders, the released notebooks against nbgrader's checksums and the course's own
copy, each course notebook's kernel, and progress against the package
(``package.verify_progress``). Importing nbgrader, jupytext and nbformat to see whether
they import would take 3 to 8 s here; the metadata check names the same missing or
wrong-version packages, and what the student's path really imports is imported for real
in the two processes above.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

from ..course.registry import COURSE_ROOT, MODULES, written_modules
from ..errors import WorkspaceError
from .installed import Check, package_checks
from .kernel import (
    dead_kernels,
    find_kernel,
    installed_kernels,
    kernel_name,
    misdirected_notebooks,
    probe_result,
    start_probe,
)
from .package import release_problem, verify_progress
from .workspace import Workspace, not_a_workspace


def jupyter_check() -> Check:
    """A kernel named python3 (nbgrader runs notebooks with it)."""
    try:
        kernels = installed_kernels()
    except Exception as error:  # a broken jupyter_core: a finding, not a crash
        return Check("Jupyter kernel", "failed", f"cannot list Jupyter kernels: {error}")
    if "python3" in kernels:
        return Check("Jupyter kernel", "ok", f"python3 at {kernels['python3']}")
    import importlib.util

    if importlib.util.find_spec("ipykernel") is not None:  # Jupyter's built-in python3
        return Check("Jupyter kernel", "ok", "python3 (ipykernel's own, for this Python)")
    return Check("Jupyter kernel", "failed", "no Jupyter kernel named python3 (nbgrader and "
                 f"notebooks need it). Fix: {sys.executable} -m pip install ipykernel, then "
                 f"{sys.executable} -m ipykernel install --sys-prefix --name python3")


# ---- the student's package, in a fresh process ------------------------------------------------
PACKAGE_PROBE = """\
import importlib, json, sys
out = {"modules": {}}
try:
    import numpy
    out["numpy"] = numpy.__version__
except Exception as error:
    out["numpy_error"] = f"{type(error).__name__}: {error}"
targets = json.loads(sys.argv[1])
if targets is not None:
    try:
        import tinytorch
        out["tinytorch"] = tinytorch.__file__
    except Exception as error:
        out["tinytorch_error"] = f"{type(error).__name__}: {error}"
    for target in targets:
        try:
            module = importlib.import_module(target)
            out["modules"][target] = [n for n in getattr(module, "__all__", [])
                                      if not hasattr(module, n)]
        except Exception as error:
            out["modules"][target] = f"{type(error).__name__}: {error}"
print(json.dumps(out))
"""


def start_package_probe(cwd: Path, targets: list[str] | None) -> subprocess.Popen:
    """`python` as the student runs it in ``cwd``: NumPy, and (``targets`` not None) the
    package and each completed module's file."""
    return subprocess.Popen([sys.executable, "-c", PACKAGE_PROBE, json.dumps(targets)],
                            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def package_probe_checks(proc: subprocess.Popen, ws: Workspace | None,
                         targets: dict[str, str]) -> list[Check]:
    """Read the probe: NumPy, then (in a workspace) the package; ``targets`` maps each
    completed module's dotted path to its key."""
    try:
        out, err = proc.communicate(timeout=120)
        found = json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return [Check("numpy", "failed", "`python` did not import NumPy within 120 s")]
    except (ValueError, IndexError):
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        return [Check("numpy", "failed", f"`python` could not run the check: {tail}")]
    checks = [Check("numpy", "ok", f"{found['numpy']}, imported by `python`") if "numpy" in found
              else Check("numpy", "failed", f"`import numpy` fails: {found.get('numpy_error')}. "
                         f"Fix: {sys.executable} -m pip install --force-reinstall numpy")]
    if ws is None:
        return checks
    if "tinytorch" not in found:
        checks.append(Check("your tinytorch", "failed", f"`import tinytorch` fails in {ws.root}: "
                            f"{found.get('tinytorch_error')}"))
        return checks
    where = Path(found["tinytorch"]).resolve()
    if not where.is_relative_to(ws.root):
        checks.append(Check("your tinytorch", "failed",
                            f"`import tinytorch` finds {where}, not your workspace's package "
                            "(is PYTHONPATH set to another folder?)"))
        return checks
    broken = []
    for target, result in found["modules"].items():
        key = targets[target]
        if isinstance(result, str):
            broken.append(f"{target} (module {key}) does not import: {result}; run "
                          f"`tito module complete {key}` again")
        elif result:
            broken.append(f"{target} (module {key}) lists {', '.join(result[:3])} in __all__ "
                          f"without defining them; run `tito module complete {key}` again")
    if broken:
        checks.append(Check("your tinytorch", "failed", "; ".join(broken)))
    else:
        n = len(found["modules"])
        checks.append(Check("your tinytorch", "ok", f"{where}" + (
            f"; the {n} completed module{'s' if n != 1 else ''} import" if n else "")))
    return checks


# ---- the workspace ------------------------------------------------------------------------------
def release_check(ws: Workspace) -> Check:
    problems = []
    for m in written_modules():
        problem = release_problem(ws, m)
        if problem:
            problems.append(problem)
    if problems:
        return Check("released notebooks", "failed", "; ".join(problems[:3])
                     + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))
    return Check("released notebooks", "ok",
                 f"all {len(written_modules())} match nbgrader's checksums "
                 "and the course's release")


def progress_checks(ws: Workspace) -> list[Check]:
    try:
        done = ws.completed()
        problems = verify_progress(ws)
    except WorkspaceError as error:
        return [Check("progress file", "failed", str(error))]
    checks = [Check("progress file", "ok",
                    f"{len(done)} module{'s' if len(done) != 1 else ''} completed")]
    if problems:
        checks.append(Check("progress vs package", "not verified", "; ".join(
            f"module {key}: {why}" for key, why in sorted(problems.items()))))
    elif done:
        checks.append(Check("progress vs package", "ok",
                            "each completed module is in your package as "
                            "`complete` wrote it, graded with the course's release"))
    return checks


def kernel_checks(ws: Workspace, probe) -> list[Check]:
    fix = "Fix: `tito system kernel` (in this folder)"
    checks = []
    kernel, proc = probe
    if kernel is None:
        checks.append(Check("workspace kernel", "failed",
                            f"no Jupyter kernel {kernel_name(ws.root)} for this workspace: "
                            f"notebooks would import another tinytorch. {fix}"))
    else:
        good, detail = probe_result(proc, ws.root) if proc is not None else (
            False, f"{kernel.folder / 'kernel.json'} names no interpreter that starts")
        checks.append(Check("workspace kernel", "ok" if good else "failed",
                            f"{kernel.name} imports {detail}" if good else f"{detail}. {fix}"))
    try:
        wrong = misdirected_notebooks(ws.root)
        dead = dead_kernels()
    except Exception as error:  # noqa: BLE001 - a broken jupyter_core is a finding, not a crash
        return checks + [Check("notebook kernels", "failed",
                               f"cannot list Jupyter kernels: {error}")]
    if wrong:
        checks.append(Check("notebook kernels", "failed",
                            "; ".join(w.describe(ws.root) for w in wrong[:3])
                            + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
                            + f". {fix} points them at this workspace's kernel"))
    else:
        checks.append(Check("notebook kernels", "ok", "every course notebook here selects this "
                            "workspace's kernel"))
    if dead:
        checks.append(Check("old kernels", "note", f"{len(dead)} kernel(s) of workspaces that no "
                            "longer exist (" + ", ".join(str(k.workspace) for k in dead[:3])
                            + "): `tito system kernel --prune` removes them"))
    return checks


def in_course_repository(cwd: Path) -> bool:
    return (COURSE_ROOT / "modules").is_dir() and Path(cwd).resolve().is_relative_to(COURSE_ROOT)


def run_checks(cwd: Path | None = None) -> tuple[list[Check], Workspace | None]:
    """Every check, in the order they are shown, and the workspace checked (None: none)."""
    cwd = Path(cwd or Path.cwd()).resolve()
    ws = Workspace.find(cwd)
    if ws is not None and ws.root == COURSE_ROOT:
        ws = None
    targets: dict[str, str] = {}
    if ws is not None:
        try:
            targets = {f"tinytorch.{m.target}": m.key
                       for m in MODULES if m.number in ws.completed()}
        except WorkspaceError:
            pass  # the progress check below says why
    # the two fresh processes first: they run while this one reads files
    package_proc = start_package_probe(ws.root if ws else cwd, list(targets) if ws else None)
    kernel_probe = (None, None)
    if ws is not None:
        try:
            kernel = find_kernel(ws.root)
        except Exception:  # noqa: BLE001 - a broken jupyter_core: jupyter_check says so
            kernel = None
        proc = None
        if kernel is not None and kernel.argv:
            try:
                proc = start_probe(kernel, ws.root)
            except OSError:
                proc = None
        kernel_probe = (kernel, proc)
    ok = sys.version_info >= (3, 10)
    checks = [Check("Python", "ok" if ok else "failed",
                    platform.python_version() + ("" if ok else ": need 3.10 or newer"))]
    checks += package_checks()
    checks.append(jupyter_check())
    if ws is None:
        checks += package_probe_checks(package_proc, None, {})
        if in_course_repository(cwd):
            checks.append(Check("workspace", "note", f"none: {cwd} is in the course repository "
                                f"({COURSE_ROOT}), which holds the reference solutions"))
        else:
            checks.append(Check("workspace", "failed",
                                not_a_workspace(cwd, "run `tito system doctor`")))
        return checks, None
    progress = progress_checks(ws)
    checks.append(progress[0])
    checks.append(release_check(ws))
    checks += package_probe_checks(package_proc, ws, targets)
    checks += progress[1:]
    checks += kernel_checks(ws, kernel_probe)
    return checks, ws
