"""The shape of `tito/` and of the lessons, read from their imports with `ast` (issue #15).

`tito/` is layered: the command line (`tito/cli.py`, `tito/commands/`) uses the core
packages (`course`, `student`, `grading`, `site`) and `errors.py`/`files.py`; core code
never imports the command line back, the core packages import each other without a cycle,
and the two packages a student's work runs on (`course`, `student`) never reach for the
website or the CLI. A lesson under `modules/` never imports or looks up `tito`: a student's
notebook must run where only `tinytorch` is installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What each part of tito may import (besides itself). Core code never imports commands/cli.
ALLOWED = {
    "errors": set(),
    "files": set(),
    # guard/protect.py, snapshots.py, driver.py, kernel.py run inside the sandbox, where tito
    # is not: they import nothing of tito (tests/test_grading_guard.py checks); guard/runs.py
    # and guard/results.py are tito's side
    "guard": {"course", "errors", "files"},
    "course": {"errors", "files"},
    "student": {"course", "guard", "errors", "files"},
    "grading": {"course", "guard", "errors", "files"},
    "site": {"course", "student", "grading", "guard", "errors", "files"},
    "commands": {"(init)", "course", "student", "grading", "guard", "site", "errors", "files"},
    "cli": {"(init)", "commands", "errors"},
    "__main__": {"cli"},
    "(init)": set(),
}


def module_name(path: Path, root: Path) -> tuple[str, list[str]]:
    """(dotted name, package parts) of a file under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), parts
    return ".".join(parts), parts[:-1]


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in a file, relative imports resolved, imports
    inside functions included; ``from x import y`` counts as ``x.y`` when y is a module."""
    _, package = module_name(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            for alias in node.names:
                sub = Path(root, *f"{module}.{alias.name}".split("."))
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    found.append((node.lineno, f"{module}.{alias.name}"))
    return found


def part_of(dotted: str) -> str:
    """The part of tito a module belongs to: ``tito.site.build`` -> ``site``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "(init)"


def dependencies(root: Path, package: str = "tito") -> dict[str, dict[str, list[str]]]:
    """part -> part it imports -> where (``file:line``), for every file of ``package``."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted((root / package).rglob("*.py")):
        name, _ = module_name(path, root)
        here = part_of(name)
        for line, target in imported_modules(path, root):
            if target.split(".")[0] != package:
                continue
            there = part_of(target)
            if there != here:
                where = f"{path.relative_to(root)}:{line}"
                places = graph.setdefault(here, {}).setdefault(there, [])
                if where not in places:
                    places.append(where)
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Every cycle of the part graph, each as the path that closes it."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, {})):
            visit(nxt, path + [node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    return found


def test_the_parts_of_tito_import_each_other_without_a_cycle():
    graph = dependencies(REPO)
    loops = cycles(graph)
    assert not loops, "import cycles between parts of tito: " + "; ".join(
        " -> ".join(loop) + f" (first edge at {graph[loop[0]][loop[1]][0]})" for loop in loops
    ) + ". Move the shared code down a layer (errors.py, files.py or course/)."


def test_each_part_of_tito_imports_only_the_layers_below_it():
    problems = []
    for here, targets in sorted(dependencies(REPO).items()):
        allowed = ALLOWED.get(here)
        if allowed is None:
            problems.append(f"tito/{here} is a new part of tito: add it to ALLOWED in this test, "
                            "with the layers it may import")
            continue
        for there, where in sorted(targets.items()):
            if there not in allowed:
                problems.append(f"tito/{here} imports tito/{there} ({', '.join(where[:3])})")
    assert not problems, (
        "imports against the layering (cli -> commands -> site -> student, grading -> course "
        "-> errors, files): " + "; ".join(problems)
    )


def test_course_and_student_never_reach_for_the_site_or_the_cli():
    graph = dependencies(REPO)
    for here in ("course", "student"):
        for there in ("site", "commands", "cli"):
            assert there not in graph.get(here, {}), (
                f"tito/{here} imports tito/{there} at {graph[here][there]}: a student's work "
                f"runs on tito/{here}, which must not depend on the website or the CLI"
            )


def lesson_lookups_of_tito(source: str) -> list[tuple[int, str]]:
    """Where a lesson imports or looks up the ``tito`` package: ``import tito...``,
    ``from tito... import``, and ``find_spec`` / ``import_module`` / ``__import__`` of it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.split(".")[0] == "tito"]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == "tito":
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (name in ("find_spec", "import_module", "__import__")
                    and isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and first.value.split(".")[0] == "tito"):
                found.append((node.lineno, f"{name}({first.value!r})"))
    return found


LESSONS = sorted(REPO.glob("modules/*/*.py"))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.parent.name)
def test_a_lesson_never_imports_or_looks_up_tito(lesson):
    found = lesson_lookups_of_tito(lesson.read_text(encoding="utf-8"))
    assert not found, (
        f"{lesson.relative_to(REPO)} depends on the CLI: "
        + ", ".join(f"line {n}: {what}" for n, what in found)
        + ". A lesson runs where only tinytorch is installed: take a path argument, or read "
        "an environment variable tito sets (TINYTORCH_DATA for the course's data)."
    )


# ---- the checks can fail: each one on a small tree made to break it ------------------------
def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_cycle_check_finds_a_planted_cycle(tmp_path):
    root = _tree(tmp_path, {
        "tito/__init__.py": "",
        "tito/course/__init__.py": "",
        "tito/course/a.py": "def f():\n    from ..site import b\n",  # inside a function
        "tito/site/__init__.py": "",
        "tito/site/b.py": "from ..course.a import f\n",
    })
    graph = dependencies(root)
    assert graph == {"course": {"site": ["tito/course/a.py:2"]},
                     "site": {"course": ["tito/site/b.py:1"]}}, graph
    assert cycles(graph) and set(cycles(graph)[0]) == {"course", "site"}
    assert not cycles({"site": {"course": []}, "course": {"errors": []}})


def test_the_lesson_check_finds_imports_and_lookups():
    source = ("import importlib.util\nimport tito.course.registry\nfrom tito import cli\n"
              "spec = importlib.util.find_spec('tito')\n__import__('tito.site')\n"
              "import tinytorch\nprint('run `tito module complete 10`')\n")
    assert [n for n, _ in lesson_lookups_of_tito(source)] == [2, 3, 4, 5]
