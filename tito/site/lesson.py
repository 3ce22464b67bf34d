"""What the website shows of a lesson, read from the lesson file itself.

A lesson (``modules/NN_slug/slug.py``) already holds every piece of a module's web page:
its markdown sections (overview, objectives, what comes next), the functions and classes
the student writes (solution cells), and the graded tests with their teaching messages.
This file pulls them out with ``ast``; it never copies a line from inside a
``### BEGIN SOLUTION`` / ``### END SOLUTION`` block.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field

from ..course.notebook import Cell, read_cells
from ..course.registry import Module
from ..course.solutions import solution_blocks
from ..errors import LessonError

# The lesson sections a module page shows, by the heading they have in the lesson.
SECTIONS = (
    "overview",
    "learning objectives",
    "what you build",
    "what you are not building yet",
    "what comes next",
)

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```+|~~~+)")


@dataclass
class Stub:
    """A function or class the student writes: its signature and docstring, no body."""

    name: str
    code: str


@dataclass
class Part:
    """The solution code of one part of the lesson, as stubs."""

    heading: str
    stubs: list[Stub] = field(default_factory=list)


@dataclass
class Lesson:
    module: Module
    sections: dict[str, str]
    parts: list[Part]
    tests: list[GradedTest]

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tests)


# ---- markdown sections ------------------------------------------------------------------
def _sections(cells: list[Cell]) -> tuple[dict[str, str], dict[int, str]]:
    """Level-2 sections of the lesson's markdown, and the heading each cell sits under."""
    bodies: dict[str, list[str]] = {}
    under: dict[int, str] = {}
    current: str | None = None
    # A section's text ends at the first code cell after it: a markdown cell that follows
    # code without a heading of its own introduces that code, not the section above.
    closed = False
    for cell in cells:
        if cell.kind != "markdown":
            under[cell.index] = current or ""
            closed = True
            continue
        fenced = False
        lines = cell.source.splitlines()
        if current is not None and not closed:
            bodies[current].append("")  # a cell boundary is a paragraph break
        for line in lines:
            if _FENCE.match(line):
                fenced = not fenced
            match = None if fenced else _HEADING.match(line)
            if match and len(match.group(1)) <= 2:
                current = match.group(2).strip() if len(match.group(1)) == 2 else None
                closed = False
                if current is not None:
                    bodies.setdefault(current, [])
                continue
            if current is not None and not closed:
                bodies[current].append(line)
        under[cell.index] = current or ""
    return {k: "\n".join(v).strip("\n") for k, v in bodies.items()}, under


# ---- solution cells -> stubs --------------------------------------------------------------
def _contains(node: ast.AST, spans: list[tuple[int, int]]) -> bool:
    """Whether a solution block starts inside the node (its END marker, a comment, may
    follow the node's last statement)."""
    return any(node.lineno <= a <= node.end_lineno for a, _ in spans)


def _overlaps(first: int, last: int, spans: list[tuple[int, int]]) -> bool:
    return any(first <= b and a <= last for a, b in spans)


def _docstring(node, spans) -> str | None:
    body = getattr(node, "body", [])
    if not body or not isinstance(body[0], ast.Expr):
        return None
    value = body[0].value
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return None
    if _overlaps(body[0].lineno, body[0].end_lineno, spans):
        return None  # a docstring inside a solution block stays hidden
    return ast.get_docstring(node, clean=True)


WIDTH = 88  # stub lines wrap here, like black: the page shows them without scrolling


def _quote_doc(doc: str, indent: str) -> list[str]:
    doc = doc.replace('"""', '\\"\\"\\"')
    lines = doc.splitlines() or [""]
    if len(lines) == 1 and len(indent) + len(lines[0]) + 6 > WIDTH:
        lines = textwrap.wrap(lines[0], WIDTH - len(indent) - 3, break_on_hyphens=False)
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return (
        [f'{indent}"""{lines[0]}']
        + [f"{indent}{x}" if x else "" for x in lines[1:]]
        + [f'{indent}"""']
    )


def _split_args(text: str) -> list[str]:
    """Split an argument list at its top-level commas."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote and text[i - 1] != "\\" else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _def_stub(node, indent: str, spans) -> list[str]:
    out = [f"{indent}@{ast.unparse(d)}" for d in node.decorator_list]
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    head = f"{indent}{prefix} {node.name}("
    args = ast.unparse(node.args)
    if len(head) + len(args) + len(returns) + 2 <= WIDTH:
        out.append(f"{head}{args}){returns}:")
    else:  # one argument a line, as black formats a long signature
        out.append(head)
        out += [f"{indent}    {a}," for a in _split_args(args)]
        out.append(f"{indent}){returns}:")
    doc = _docstring(node, spans)
    if doc:
        out += _quote_doc(doc, indent + "    ")
    out.append(f"{indent}    ...")
    return out


def _class_stub(node: ast.ClassDef, spans) -> list[str]:
    out = [f"@{ast.unparse(d)}" for d in node.decorator_list]
    bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
    out.append(f"class {node.name}({', '.join(bases)}):" if bases else f"class {node.name}:")
    doc = _docstring(node, spans)
    if doc:
        out += _quote_doc(doc, "    ")
    methods = [
        n
        for n in node.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _contains(n, spans)
    ]
    for method in methods:
        out.append("")
        out += _def_stub(method, "    ", spans)
    if not methods:
        out.append("    ...")
    return out


def _stubs(cell: Cell, label: str) -> list[Stub]:
    source = cell.source
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise LessonError(
            f"{label}: solution cell {cell.grade_id!r} is not valid Python ({error.msg}, "
            f"line {error.lineno}); the website reads it with ast."
        ) from None
    spans = solution_blocks(source)
    stubs = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_") and not _contains(node, spans):
                continue  # a private helper that is given, not written
            lines = (
                _class_stub(node, spans)
                if isinstance(node, ast.ClassDef)
                else _def_stub(node, "", spans)
            )
            stubs.append(Stub(node.name, "\n".join(lines)))
    return stubs


# ---- graded tests ------------------------------------------------------------------------
Message = list[tuple[str, bool]]


def _is_text(node: ast.AST, env: dict[str, ast.AST]) -> bool:
    """Whether an expression builds a string we can show: literals, f-strings, their sums."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_text(node.left, env) or _is_text(node.right, env)
    return bool(isinstance(node, ast.Name) and node.id in env)


def _pieces(node: ast.AST, env: dict[str, ast.AST]) -> Message:
    """A message expression as text and placeholder pieces."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.value, False)]
    if isinstance(node, ast.JoinedStr):
        out: Message = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                out += (
                    _pieces(value.value, env)
                    if (isinstance(value.value, ast.Name) and value.value.id in env)
                    else [(ast.unparse(value.value), True)]
                )
            else:
                out += _pieces(value, env)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_text(node, env):
        return _pieces(node.left, env) + _pieces(node.right, env)
    if isinstance(node, ast.Name) and node.id in env:
        return _pieces(env[node.id], {k: v for k, v in env.items() if k != node.id})
    return [(ast.unparse(node), True)]


def _merge(pieces: Message) -> Message:
    out: Message = []
    for text, is_placeholder in pieces:
        if out and not is_placeholder and not out[-1][1]:
            out[-1] = (out[-1][0] + text, False)
        elif text or is_placeholder:
            out.append((text, is_placeholder))
    return out


def message_text(message: Message) -> str:
    """A message as plain text, placeholders written ``<expr>``."""
    return "".join(f"<{t}>" if p else t for t, p in message)


def _constant_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _constant_text(node.left) and _constant_text(node.right)
    return False


def _text_names(function: ast.AST) -> dict[str, ast.AST]:
    """Local names bound once, to a constant string: ``hint = "..."`` (shown in full)."""
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    bound.setdefault(name.id, []).append(node)
    return {k: v[0] for k, v in bound.items() if len(v) == 1 and _constant_text(v[0])}


def _unique(found: list[tuple[int, int, ast.AST]], env) -> list[Message]:
    out, seen = [], set()
    for _, _, expr in sorted(found, key=lambda x: (x[0], x[1])):
        message = _merge(_pieces(expr, env))
        key = message_text(message)
        if key.strip() and key not in seen:
            seen.add(key)
            out.append(message)
    return out


def _messages(function: ast.AST) -> list[Message]:
    """The messages of a function's ``assert ..., msg`` and ``raise AssertionError(msg)``."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assert) and node.msg is not None:
            found.append((node.lineno, node.col_offset, node.msg))
        elif (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name)
            and node.exc.func.id == "AssertionError"
            and node.exc.args
        ):
            found.append((node.lineno, node.col_offset, node.exc.args[0]))
    return _unique(found, _text_names(function))


@dataclass
class Helper:
    """A given (non-solution) function a test calls: its messages and the hints passed to it."""

    name: str
    messages: list[Message]
    hints: list[Message]


def _helpers(function: ast.FunctionDef, given: dict[str, ast.FunctionDef]) -> list[Helper]:
    env = _text_names(function)
    calls: dict[str, list[tuple[int, int, ast.AST]]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in given:
            args = list(node.args) + [k.value for k in node.keywords]
            hints = calls.setdefault(node.func.id, [])
            hints += [(a.lineno, a.col_offset, a) for a in args if _is_text(a, env)]
    helpers = [
        Helper(name, _messages(given[name]), _unique(hints, env)) for name, hints in calls.items()
    ]
    return [h for h in helpers if h.messages or h.hints]


@dataclass
class GradedTest:
    grade_id: str
    points: float
    function: str
    doc: str
    # Each message is a list of (text, is_placeholder) pieces: the f-string `{t.shape}`
    # becomes the placeholder piece "t.shape".
    messages: list[Message]
    helpers: list[Helper]
    part: str


def _graded(
    cell: Cell, part: str, label: str, given: dict[str, ast.FunctionDef]
) -> list[GradedTest]:
    try:
        tree = ast.parse(cell.source)
    except SyntaxError as error:
        raise LessonError(
            f"{label}: graded cell {cell.grade_id!r} is not valid Python ({error.msg})."
        ) from None
    functions = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]
    if not functions:
        raise LessonError(
            f"{label}: graded cell {cell.grade_id!r} defines no test_...() function; the website "
            "shows each graded test's docstring and assertion messages."
        )
    tests = []
    for i, fn in enumerate(functions):
        local = dict(given)
        local.update(
            {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n is not fn}
        )
        tests.append(
            GradedTest(
                grade_id=cell.grade_id,
                points=cell.points if i == 0 else 0.0,
                function=fn.name,
                doc=ast.get_docstring(fn, clean=True) or "",
                messages=_messages(fn),
                helpers=_helpers(fn, local),
                part=part,
            )
        )
    return tests


# ---- the whole lesson --------------------------------------------------------------------
def read_lesson(module: Module) -> Lesson:
    label = f"modules/{module.dirname}/{module.slug}.py"
    cells = read_cells(module.source)
    sections, under = _sections(cells)
    lower = {k.lower(): v for k, v in sections.items()}
    missing = [s for s in SECTIONS if s not in lower]
    if missing:
        needed = ", ".join(s.capitalize() for s in SECTIONS)
        raise LessonError(
            f"{label} has no '## {missing[0].capitalize()}' section; the website page of module "
            f"{module.key} is made from its sections: {needed}."
        )
    given: dict[str, ast.FunctionDef] = {}
    for cell in cells:
        if cell.kind == "code" and not cell.nbgrader.get("solution") and not cell.is_graded:
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue  # notebook magics: nothing the website needs
            given.update({n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)})
    parts: list[Part] = []
    tests: list[GradedTest] = []
    for cell in cells:
        if cell.kind != "code":
            continue
        heading = under.get(cell.index, "")
        if cell.nbgrader.get("solution"):
            stubs = _stubs(cell, label)
            if stubs:
                if not parts or parts[-1].heading != heading:
                    parts.append(Part(heading))
                parts[-1].stubs += stubs
        if cell.is_graded:
            tests += _graded(cell, heading, label, given)
    return Lesson(module, {k: lower[k] for k in SECTIONS}, parts, tests)
