"""The student's package as milestones use it: checked before it is written, verified after.

`tito module complete N` runs the graded tests on the student's *notebook*. What milestones
and later modules use is the *package* exported from it, and the two can differ:

- a helper defined in a cell without ``#| export`` exists in the notebook session but not in
  the package (``NameError`` the first time the package calls it);
- an exported cell that imports the module it is exported into (``from
  tinytorch.core.tensor import Tensor`` inside module 01) imports itself once exported: a
  circular import.

So ``check_export`` builds the new package in a staging copy, imports it in a fresh process
and runs the module's graded tests against it, the way milestones meet it. The workspace's
package is written only when that passes (``Workspace.install_package``); a refusal names the
missing name or the import and says where the fix goes.

``verify_progress`` looks the other way, for ``tito module status`` and ``tito system
doctor``: does the package (and the release it was graded with) back up what
``progress.json`` says? A module whose export is missing, a placeholder, edited after
``complete`` wrote it, or short of names, or whose release fails nbgrader's checksums, is
"not verified".
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..course.exporter import HEADER, PLACEHOLDER, public_names
from ..course.notebook import Cell, cells_of, load_notebook, read_cells
from ..course.registry import MODULES, Module
from ..errors import NotebookError, ReleaseIntegrityError
from .integrity import compare_with_authority, lesson_authority, release_authority, verify_release
from .runner import forbidden_roots, run_cells
from .workspace import Workspace

_NAME_ERROR = re.compile(r"name '(\w+)' is not defined")
_CAUGHT_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")
_PACKAGE_FRAME = re.compile(r'File "([^"]*?tinytorch[/\\][^"]*\.py)", line (\d+), '
                            r'in (\S+)\n\s*(.*)')


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class ExportCheck:
    ok: bool
    tests: int = 0  # graded tests run against the package
    seconds: float = 0.0
    problem: str = ""  # when not ok: what fails, where, and where the fix goes


# ---- reading the student's cells ---------------------------------------------------------------
def _parse(cell: Cell) -> ast.Module | None:
    try:  # directives and solution markers are comments: line numbers stay the notebook's
        return ast.parse(cell.source)
    except SyntaxError:
        return None


def _top_level(tree: ast.Module):
    """Statements run when the module is imported (inside if/try/with too, not in defs)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.extend(getattr(node, field, []) or [])


def _binds(tree: ast.Module, name: str) -> bool:
    for node in _top_level(tree):
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name == name):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
            targets = [node.target]
        for target in targets:
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
                return True
    return False


def _first_line(cell: Cell) -> str:
    lines = [ln for ln in cell.code().splitlines() if ln.strip()]
    return lines[0].strip() if lines else "(empty)"


def _cell_label(cell: Cell) -> str:
    """How the student finds a cell: its nbgrader name, or (their own cells have none) its
    first line."""
    if cell.nbgrader.get("grade_id"):
        return f"cell '{cell.grade_id}'"
    return f"cell that starts `{_first_line(cell)}`"


def _use_of(cells: list[Cell], name: str) -> tuple[Cell, str] | None:
    """The first exported cell that reads ``name``, with the line that does."""
    for cell in cells:
        tree = _parse(cell) if cell.is_export else None
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                return cell, cell.source.splitlines()[node.lineno - 1].strip()
    return None


def self_imports(module: Module, cells: list[Cell]) -> list[tuple[Cell, str]]:
    """Top-level imports, in exported cells, of the module they are exported into, or of its
    own names from a namespace that re-exports it (``from tinytorch import Tensor`` in module
    01): each one makes the exported file import itself."""
    own = f"tinytorch.{module.target}"
    exported = [c for c in cells if c.is_public_export and _parse(c) is not None]
    mine = set(public_names(exported, "your notebook")) | {"*"}
    namespaces = {"tinytorch" + (f".{ns}" if ns else "") for ns in module.namespaces}
    namespaces |= {f"tinytorch.{ns}" for ns, _ in module.reexports}
    found = []
    for cell in cells:
        tree = _parse(cell) if cell.is_export else None
        if tree is None:
            continue
        for node in _top_level(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                loop = node.module == own or (node.module in namespaces and any(
                    a.name in mine for a in node.names))
            elif isinstance(node, ast.Import):
                loop = any(a.name == own for a in node.names)
            else:
                continue
            if loop:
                found.append((cell, cell.source.splitlines()[node.lineno - 1].strip()))
    return found


# ---- the check -----------------------------------------------------------------------------------
_IMPORT_PACKAGE = """\
import importlib
import tinytorch  # the whole package first, as a milestone imports it
_exported = importlib.import_module({target!r})
globals().update({{k: v for k, v in vars(_exported).items() if not k.startswith("__")}})
del importlib, _exported
"""


def check_plan(module: Module, tested: list[Cell]) -> list[Cell]:
    """What runs against the package: the import of it, then the release's cells that are not
    part of it (the graded tests and the given code between them), up to the last test.
    The student's own cells and every exported cell come from the package instead."""
    graded = [i for i, c in enumerate(tested) if c.is_graded]
    keep = ([c for c in tested[:graded[-1] + 1] if c.origin == "release" and not c.is_export]
            if graded else [])
    plan = [Cell(0, "code", _IMPORT_PACKAGE.format(target=f"tinytorch.{module.target}"),
                 {"grade_id": "import-the-exported-package"}, origin="release")]
    for c in keep:
        plan.append(Cell(len(plan), "code", c.source, dict(c.nbgrader), origin="release"))
    return plan


def check_export(module: Module, root: Path, tested: list[Cell], notebook_dir: Path,
                 timeout: float, files: dict[Path, str] | None = None) -> ExportCheck:
    """Import the package under ``root`` with ``files`` (relative path -> text: the new export
    and the ``__init__`` files that change with it) written over it, in a fresh process, and
    run module's graded tests against it. ``tested`` are the cells ``complete`` ran, in
    order. ``root``'s own package is only read: the files go into a staging copy. Without
    ``files``, the package under ``root`` is checked as it is (the reference, in the course)."""
    start = time.perf_counter()
    loops = self_imports(module, tested)
    if loops:
        cell, line = loops[0]
        return ExportCheck(False, problem=(
            f"your {_cell_label(cell)} imports from its own module: `{line}`. It is exported into "
            f"tinytorch.{module.target}, so once exported the file would import itself (a circular "
            "import: `import tinytorch` would fail for every milestone). Delete that line: the "
            "names it imports are defined in this same notebook."))
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="tito-package-check-") as tmp:
        package_root = root
        if files is not None:
            package_root = Path(tmp)
            if (root / "tinytorch").is_dir():  # else ``files`` holds the whole package
                shutil.copytree(root / "tinytorch", package_root / "tinytorch",
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            Workspace(package_root).install_package(files)
        plan = check_plan(module, tested)
        forbidden = forbidden_roots(package_root)
        if package_root != root:
            forbidden.append(str(root / "tinytorch"))  # the staged copy must stand on its own
        report = run_cells(plan, package_root, Path(notebook_dir), timeout, forbidden=forbidden)
        for r in report.cells:  # the staging folder is gone when the student reads this
            r.message = (r.message or "").replace(str(package_root) + os.sep, "")
    seconds = time.perf_counter() - start
    tests = [r for r in report.cells if r.cell.is_graded]
    first = report.cells[0]
    failing = [first] if not first.passed else [r for r in tests if not r.passed]
    failing += [r for r in report.integrity_errors if r not in failing]
    if not failing:
        return ExportCheck(True, len(tests), seconds)
    return ExportCheck(False, len(tests), seconds,
                       problem=_explain(module, failing[0], tested, len(failing)))


def _explain(module: Module, result, tested: list[Cell], n_failing: int) -> str:
    """What failed against the package, where in the student's notebook, and the fix."""
    target = f"tinytorch.{module.target}"
    context = ("importing " + target if result.cell.grade_id == "import-the-exported-package"
               else result.cell.grade_id)
    text = f"{result.error_type or result.status} {context}: {result.message}"
    # the NameError itself, or one a test caught and explained in its own message
    name = (_NAME_ERROR.search(result.message or "") if result.error_type == "NameError"
            else _CAUGHT_NAME_ERROR.search(
                (result.message or "") + "\n" + (result.traceback or "")))
    if name:
        other = _other_module(result.traceback, module)
        if other is not None and _use_of(tested, name[1]) is None:
            return (f"`{name[1]}` is not defined in tinytorch.{other.target}, module {other.key}'s "
                    f"export, which {context} calls into: that module was exported with a name "
                    f"its package lacks. Run `tito module complete {other.key}` again: it now "
                    "checks its package and names the cell to fix.")
        return _missing_name(module, name[1], tested, context)
    if result.error_type == "ImportError" and "circular import" in (result.message or ""):
        return (f"{text}. Your exported code imports the package while the package is being "
                "imported (a circular import): an exported cell must not import its own module, "
                "nor a `tinytorch` namespace that re-exports it. Import only earlier modules.")
    where = _package_frame(result.traceback, tested)
    more = f" ({n_failing} checks fail the same way or after it)" if n_failing > 1 else ""
    return (f"{text}{where}{more}. It passed in your notebook, so it depends on something that "
            "exists only in your notebook session (a cell without `#| export`, a value set by "
            "hand): everything the package needs must be in your exported cells.")


def _other_module(traceback: str, module: Module) -> Module | None:
    """The earlier module whose exported file the innermost package frame is in, if not ours."""
    frames = _PACKAGE_FRAME.findall(traceback or "")
    if not frames:
        return None
    path = frames[-1][0].replace("\\", "/")
    for m in MODULES:
        if m is not module and path.endswith("/" + m.target_path.as_posix()):
            return m
    return None


def _missing_name(module: Module, name: str, tested: list[Cell], context: str) -> str:
    use = _use_of(tested, name)
    used = (f" (your exported code uses it: {_cell_label(use[0])}, `{use[1]}`)" if use else "")
    defined = [c for c in tested
               if not c.is_export and (tree := _parse(c)) is not None and _binds(tree, name)]
    where_fix = (f"the solution cell that uses it ({_cell_label(use[0])})" if use
                 else "your solution cell")
    head = (f"`{name}` is not defined in the exported package tinytorch.{module.target}{used}; "
            f"{context} fails on the package because of it.")
    if defined and defined[0].origin == "yours":
        cell = defined[0]
        return (f"{head} It is defined in your {_cell_label(cell)}, which has no `#| export` "
                "line, so it stays in the notebook and never reaches the package. Move the "
                f"definition into {where_fix}, or make `#| export` the first line of the cell that "
                "defines it.")
    if defined:
        return (f"{head} It is defined in the lesson's {_cell_label(defined[0])}, which is not "
                f"part of the package: define what you need inside {where_fix}.")
    return (f"{head} No cell of your notebook defines it: it existed only in your notebook "
            f"session. Define it in {where_fix} (its cells carry `#| export`).")


def _package_frame(traceback: str, tested: list[Cell]) -> str:
    """`, in forward (your cell 'x'): `code`` for the innermost line of the package in a
    traceback."""
    frames = _PACKAGE_FRAME.findall(traceback or "")
    if not frames:
        return ""
    _, _, func, code = frames[-1]
    cell = next((c for c in tested if c.is_export and code and code in c.source), None)
    return (f", in {func}" + (f" ({_cell_label(cell)})" if cell else "")
            + (f": `{code}`" if code else ""))


# ---- progress against the package ------------------------------------------------------------
def authority(module: Module) -> dict | None:
    """The course's own locked cells for ``module``: the lesson in the course repository, the
    packaged release in a student build; None when neither is at hand."""
    if module.source.is_file():
        return lesson_authority(module.source)
    if module.packaged_release.is_file():
        return release_authority(read_cells(module.packaged_release))
    return None


_RELEASE_CHECKED: dict[tuple, str | None] = {}


def release_problem(ws: Workspace, module: Module) -> str | None:
    """Why the workspace's released notebook of ``module`` cannot be trusted (None: it can).
    Remembered for the file as it is (path, size, time), so doctor reads each release once."""
    path = ws.release_path(module)
    try:
        stat = path.lstat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _RELEASE_CHECKED:
        return _RELEASE_CHECKED[key]
    found = _release_problem(ws, module, path)
    if key is not None:
        _RELEASE_CHECKED[key] = found
    return found


def _release_problem(ws: Workspace, module: Module, path: Path) -> str | None:
    label = str(path.relative_to(ws.root))
    if not path.is_file():
        return f"{label} is missing: run `tito init . --force`"
    if path.is_symlink():
        return f"{label} is a symbolic link, not the release: run `tito init . --force`"
    try:
        notebook = load_notebook(path)
        verify_release(notebook, label)
        found = authority(module)
        if found is not None:
            compare_with_authority(cells_of(notebook), found, label)
    except (NotebookError, ReleaseIntegrityError) as error:
        return str(error)
    return None


def completion_problem(ws: Workspace, module: Module, record: dict) -> str | None:
    """Why the package does not back up "module is completed" (None: it does)."""
    rel = module.target_path
    path = ws.root / rel
    redo = f"run `tito module complete {module.key}` again"
    if not path.is_file():
        return f"{rel} is missing: {redo}"
    if path.is_symlink():
        return f"{rel} is a symbolic link, not the file `complete` wrote: {redo}"
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.startswith(PLACEHOLDER):
        return f"{rel} is still the placeholder (nothing was exported): {redo}"
    first = text.splitlines()[0] if text else ""
    if not first.startswith(HEADER) or "(your notebook)" not in first:
        return f"{rel} was not written by `tito module complete`: {redo}"
    recorded = record.get("export_sha256")
    if recorded and sha256_text(text) != recorded:
        return f"{rel} changed after `complete` wrote it: {redo}"
    problem = release_problem(ws, module)
    if problem:
        return problem
    if not recorded:  # completed before exports were recorded: check its names instead
        names = ws.exported_names(module) or []
        missing = [n for n in ws.release_names(module) if n not in names]
        if missing:
            return (f"{rel} lacks {', '.join(missing[:5])}, "
                    f"which module {module.key} defines: {redo}")
    return None


def verify_progress(ws: Workspace) -> dict[str, str]:
    """module key -> why it is "not verified", for every completed module that is not backed
    up by the package and a release that passes its checksums. Raises WorkspaceError when the
    progress file itself cannot be read."""
    completed = ws.load_progress()["completed"]
    problems = {}
    for m in MODULES:
        if m.key in completed:
            problem = completion_problem(ws, m, completed[m.key] or {})
            if problem:
                problems[m.key] = problem
    return problems
