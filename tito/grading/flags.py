"""What a submission reached for that grading does not allow: for the instructor to review.

Static flags come from the student's own cells (imports of modules the graded one does not
build on, of ``tito`` or ``nbgrader``, paths into the course); runtime flags from the errors
the sandbox or the prerequisite package caused in the graded notebook.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from ..course.registry import COURSE_ROOT, MODULES, Module, get_module, prerequisites
from .course import Course, load_nbformat
from .package import _NOT_PROVIDED, GRADING_PLACEHOLDER


def forbidden_imports(m: Module) -> tuple[dict[str, Module], dict[str, Module]]:
    """(export target -> module, public name -> module) a solution of ``m`` must not import."""
    return _forbidden(m.number)


@functools.cache
def _forbidden(number: int) -> tuple[dict[str, Module], dict[str, Module]]:
    from ..course.exporter import reference_export

    m = get_module(number)
    allowed = set(prerequisites(m.number))
    targets = {o.target: o for o in MODULES if o.number not in allowed}
    allowed_names = {n for o in MODULES if o.number in allowed and o.written
                     for n in reference_export(o).names}
    names: dict[str, Module] = {}
    for o in MODULES:
        if o.number not in allowed and o.written:
            for n in reference_export(o).names:
                if n not in allowed_names:
                    names.setdefault(n, o)
    return targets, names


# Reaching for the course from a notebook: nbgrader's files and folders, tito's own, named in
# the code's strings (not its comments). Ordinary words of file handling (getcwd, "../", a
# home folder) are not flags: what the code actually reached for is, from the sandbox.
_COURSE_WORDS = re.compile(
    r"gradebook|nbgrader_config|\bsubmitted\b|\bautograded\b|\bsource/|\.tito\b"
)


def _strings_and_names(source: str) -> tuple[list[str], set[str]]:
    """The string literals and the names of ``source`` (comments left out)."""
    import io
    import tokenize

    strings, names = [], set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING:
                strings.append(token.string)
            elif token.type == tokenize.NAME:
                names.add(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        strings = [source]
    return strings, names


def _editable_cells(gb, m: Module, notebook) -> list[tuple[str, str]]:
    """(name, source) of every code cell nbgrader runs as the student wrote it.

    Locked cells of the release are replaced by their originals before grading, so only the
    other cells (solution cells and any cell the student added) are the student's code.
    """
    from nbgrader.api import MissingEntry

    locked: set[str] = set()
    if gb is not None:
        try:
            locked = {c.name for c in gb.find_notebook(m.slug, m.dirname).source_cells
                      if c.locked}
        except MissingEntry:
            pass
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in locked:
            continue
        cells.append((gid or f"cell {index}", cell.source))
    return cells


def _imported(tree) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in an AST."""
    import ast

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [a.name for a in node.names]))
    return found


def static_flags(course: Course, m: Module, notebook, gb=None) -> list[str]:
    """What the student's own cells reach for that grading does not allow, one line each.

    A static scan (grading goes on; these are for the instructor to review): imports of the
    graded module's own export or of a module it does not build on, imports of ``tito`` or
    ``nbgrader``, and paths into the course (the repository, the gradebook, ``source/``,
    other submissions, the instructor's home).
    """
    flags = _scan(course, m, _editable_cells(gb, m, notebook))
    reference = course.source_notebook(m)
    if flags and reference.is_file():  # what the reference solution itself does is fine
        known = _reference_flags(course.root, m.number, reference.stat().st_mtime)
        flags = [f for f in flags if f not in known]
    return flags


@functools.lru_cache(maxsize=32)
def _reference_flags(root: Path, number: int, mtime: float) -> frozenset[str]:
    m = get_module(number)
    try:
        notebook = load_nbformat().read(Course(root).source_notebook(m), as_version=4)
    except Exception:
        return frozenset()
    return frozenset(_scan(Course(root), m, _editable_cells(None, m, notebook)))


def _scan(course: Course, m: Module, cells: list[tuple[str, str]]) -> list[str]:
    import ast

    targets, names = forbidden_imports(m)
    flags: list[str] = []
    paths = {str(course.root), str(COURSE_ROOT)}
    for name, source in cells:
        said: list[str] = []
        code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                         for ln in source.splitlines())
        try:
            tree = ast.parse(code)
        except SyntaxError:
            tree = None
        for module, imported in _imported(tree) if tree is not None else []:
            top = module.split(".")[0]
            if top in ("tito", "nbgrader"):
                said.append(f"imports {module}")
                continue
            if top != "tinytorch":
                continue
            dotted = module.removeprefix("tinytorch").lstrip(".")
            for item in imported or [""]:
                full = ".".join(p for p in (dotted, item) if p)
                owner = next((o for t, o in targets.items()
                              if full == t or full.startswith(t + ".")
                              or (dotted and (dotted == t or dotted.startswith(t + ".")))),
                             None)
                if owner is None and item in names:
                    owner = names[item]
                if owner is not None:
                    what = "its own module" if owner.number == m.number else (
                        f"module {owner.key}, not a prerequisite")
                    shown = module + (f".{item}" if item and item != "*" else "")
                    said.append(f"imports {shown} ({what})")
        for match in re.finditer(r"tinytorch[./\\]([A-Za-z_][\w./\\]*)", source):
            dotted = re.sub(r"[/\\]", ".", match.group(1)).removesuffix(".py")
            owner = next((o for t, o in targets.items()
                          if dotted == t or dotted.startswith(t + ".")), None)
            text = f"names tinytorch.{dotted}"
            if owner is not None and not any(f"tinytorch.{dotted}" in s for s in said):
                said.append(text + (" (its own module)" if owner.number == m.number
                                    else f" (module {owner.key}, not a prerequisite)"))
        strings, used = _strings_and_names(code)  # `names` is the owners' table above
        for path in paths:
            if any(path in text for text in strings):
                said.append(f"names the course folder {path}")
        words = {w.group(0) for text in strings for w in _COURSE_WORDS.finditer(text)}
        if "COURSE_ROOT" in used:
            words.add("COURSE_ROOT")
        for word in sorted(words):
            said.append(f"mentions {word!r} (a path into the course?)")
        flags += [f"{name}: {text}" for text in dict.fromkeys(said)]
    return flags


_SANDBOX_ERRORS = (
    ("PermissionError", "", "denied by the sandbox"),
    ("OSError", "Read-only file system", "denied by the sandbox (read-only)"),
    ("ConnectionRefusedError", "", "tried the network (there is none in the sandbox)"),
    ("OSError", "Network is unreachable", "tried the network (there is none in the sandbox)"),
    ("MemoryError", "", "ran past the memory limit"),
    ("BlockingIOError", "Resource temporarily unavailable", "ran past the process limit"),
    ("ModuleNotFoundError", "tito", "imported tito (not in the sandbox)"),
    ("ModuleNotFoundError", "nbgrader", "imported nbgrader (not in the sandbox)"),
)


def runtime_flags(notebook) -> list[str]:
    """Errors in the graded notebook that the sandbox or the prerequisite package caused."""
    flags = []
    for index, cell in enumerate(notebook.cells):
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            ename, evalue = output.get("ename", ""), str(output.get("evalue", ""))
            said = None
            if ename in ("ImportError", "AttributeError") and (
                    GRADING_PLACEHOLDER in evalue or any(w in evalue for w in _NOT_PROVIDED)):
                said = "imported what grading does not provide"
            for kind, part, text in _SANDBOX_ERRORS:
                if said is None and ename == kind and part in evalue:
                    said = text
            if said:
                flags.append(f"{name}: {said}: {ename}: {evalue[:200]}")
    return flags
