"""Solution cells as stubs: the signatures and docstrings the student completes, no bodies.

Read with ``ast``; nothing from inside a ``### BEGIN SOLUTION`` / ``### END SOLUTION``
block is ever copied (a docstring inside one stays hidden too).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from ..course.notebook import Cell
from ..course.solutions import solution_blocks
from ..errors import LessonError


@dataclass
class Stub:
    """A function or class the student writes: its signature and docstring, no body."""

    name: str
    code: str


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


def solution_stubs(cell: Cell, label: str) -> list[Stub]:
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
