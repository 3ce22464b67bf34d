"""Graded tests as the website shows them: each test's docstring and the messages its
assertions (and the given helpers it calls) print, with f-string placeholders marked."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..course.notebook import Cell
from ..errors import LessonError

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


def assertion_messages(function: ast.AST) -> list[Message]:
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
        Helper(name, assertion_messages(given[name]), _unique(hints, env))
        for name, hints in calls.items()
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


def graded_tests(
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
                messages=assertion_messages(fn),
                helpers=_helpers(fn, local),
                part=part,
            )
        )
    return tests
