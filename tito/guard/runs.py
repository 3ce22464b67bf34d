"""Running a notebook's cells in the guarded driver, from the grader's side: shared by
`tito module complete` (``tito/student/runner.py``) and the instructor's second grading
(``tito/grading/verify.py``), which may not import each other.

The driver (``driver.py``, a child process, maybe inside the sandbox) gets its spec on stdin
and answers on stdout with signed records; ``start_driver`` starts it, ``collect_results``
reads the records into a ``RunReport`` as they come, with a thread and a queue: only
primitives that exist on Linux, macOS and Windows (no ``select`` on a pipe, no ``pass_fds``,
no POSIX signal), which ``tests/test_honest_grading.py`` checks. Unlike the three files the
sandbox gets (protect.py, driver.py, kernel.py), this one runs in tito and imports it.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course.notebook import Cell, default_exp
from .protect import ctypes_packages_for

DRIVER = Path(__file__).resolve().parent / "driver.py"
MAX_LINE = 1 << 20  # a record longer than this is not one of the driver's
MAX_CHANNEL = 64 << 20  # bytes read from the driver before the run is stopped


def _first_line(source: str) -> str:
    """The first line of a cell that says something (not a directive, not blank), cut short."""
    for line in source.splitlines():
        text = line.strip()
        if text and not text.startswith("#|"):
            return text if len(text) <= 60 else text[:57] + "..."
    return ""


def cell_label(cell: Cell, plan: list[Cell] = ()) -> str:
    """How a student finds a cell in Jupyter, which numbers no cell: its nbgrader name (the
    lesson's cells), else whose it is, the named cell it follows in ``plan`` and how it starts.
    ``origin`` "given" is a cell of the lesson the notebook holds unchanged (a demo)."""
    if cell.nbgrader.get("grade_id"):
        return f"cell '{cell.grade_id}'"
    owner = "the lesson's cell" if cell.origin in ("given", "release") else "your cell"
    named = [c for c in plan[:cell.index] if c.nbgrader.get("grade_id")]
    if named:
        owner += f" after '{named[-1].grade_id}'"
    else:
        later = [c for c in plan[cell.index + 1:] if c.nbgrader.get("grade_id")]
        if later:
            owner += f" before '{later[0].grade_id}'"
    first = _first_line(cell.source)
    return owner + (f" that starts `{first}`" if first else " (an empty cell)")


def is_locked(cell: Cell) -> bool:
    """nbgrader's rule: graded cells and locked cells are read-only, solution cells never."""
    meta = cell.nbgrader
    if not meta or meta.get("solution"):
        return False
    return bool(meta.get("grade") or meta.get("locked"))


@dataclass
class CellResult:
    cell: Cell
    status: str  # passed, failed, timeout, not run
    error_type: str = ""
    message: str = ""
    where: tuple | None = None
    traceback: str = ""
    seconds: float = 0.0
    stdout: str = ""
    depends_on: str = ""  # the earlier failing cell of the student's this one likely follows from
    stderr: str = ""  # what the cell wrote to stderr (a graded cell that did fails, as in nbgrader)
    dropped: list = field(default_factory=list)  # (line, code) not run: not a definition
    label: str = ""  # how the student finds the cell (``cell_label``); its grade_id if unset
    after_refusal: str = ""  # the cell refused earlier in the run: this result is not counted

    @property
    def name(self) -> str:
        return self.label or f"cell '{self.cell.grade_id}'"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def explain(self) -> str:
        """One teaching sentence: what went wrong and where."""
        if self.status == "timeout":
            return self.message
        if self.status == "not run":
            return "not run: " + (self.message or "an earlier cell ran out of time")
        where = ""
        if self.where:
            label, line, code, func = self.where
            if label == self.label and not self.cell.nbgrader.get("grade_id"):
                label = "this cell"  # its long name is said once, before the message
            where = (f" (in {func}, {label}, line {line}: `{code}`)" if code
                     else f" ({label}, line {line})")
        if self.error_type == "NotImplementedError":
            text = f"not implemented yet{where}: replace `raise NotImplementedError()` with your code"
        elif self.error_type == "AssertionError":
            text = (self.message or "an assertion failed without a message") + where
        elif self.error_type == "IntegrityError":
            text = f"not allowed: {self.message} (put back); the tests after it are not counted"
        elif self.error_type == "StderrOutput":
            text = (f"the test passed but wrote to stderr ({self.message!r}). nbgrader, which "
                    "gives the instructor's grade, scores any output to stderr in a test cell "
                    "as a failure: remove the print(..., file=sys.stderr), or fix what raises "
                    "the warning")
        elif self.error_type in ("SyntaxError", "IndentationError", "TabError"):
            text = (f"{self.error_type}: {self.message}{where}. Nothing in this cell ran, so "
                    "nothing it defines exists: fix this first")
        elif self.error_type:
            text = f"{self.error_type}: {self.message}{where}"
        else:  # the run itself ended or was stopped here: no exception to name
            text = (self.message or "failed") + where
        if self.depends_on:
            text += f" [probably caused by the error in {self.depends_on} above: fix that first]"
        return text


@dataclass
class RunReport:
    cells: list[CellResult] = field(default_factory=list)
    seconds: float = 0.0
    expected_tests: int | None = None  # from the release; None when running a lesson itself
    notes: list[str] = field(default_factory=list)  # restored/edited cells, said to the student
    found_tests: int | None = None  # graded cells present in the student's own notebook
    finished: bool = True  # the driver sent its last record (False: it died or was stopped)
    started: bool = True  # the driver sent its first record (False: it never ran a cell)
    rejected_lines: int = 0  # lines on the result channel without the run's signature
    driver_error: str = ""  # the driver's own stderr when it failed before any cell

    @property
    def tests(self) -> list[CellResult]:
        return [r for r in self.cells if r.cell.is_graded]

    @property
    def passed(self) -> list[CellResult]:
        """Tests that passed and count: not after a refusal (see ``not_counted``)."""
        return [r for r in self.tests if r.passed and not r.after_refusal]

    @property
    def failed(self) -> list[CellResult]:
        return [r for r in self.tests if not r.passed]

    @property
    def not_counted(self) -> list[CellResult]:
        """Tests that passed after the guard refused an earlier cell: what they checked was
        put back, but they ran after it, so they are not counted (as in the second grading)."""
        return [r for r in self.tests if r.passed and r.after_refusal]

    @property
    def other_errors(self) -> list[CellResult]:
        """Ungraded cells (the student's code, demos) that raised."""
        return [r for r in self.cells if not r.cell.is_graded and r.status != "passed"]

    @property
    def integrity_errors(self) -> list[CellResult]:
        return [r for r in self.cells if r.error_type == "IntegrityError"]

    @property
    def ok(self) -> bool:
        if self.expected_tests is not None and len(self.tests) != self.expected_tests:
            return False
        return bool(self.tests) and not self.failed and not self.integrity_errors

    def points(self) -> tuple[float, float]:
        return (sum(r.cell.points for r in self.passed), sum(r.cell.points for r in self.tests))


_STACK_LINE = re.compile(r'File "<cell (\d+) \'(.*?)\'>", line (\d+) in (\S+)')


def _stack_where(stack: str, plan: list[Cell]) -> str:
    """The innermost notebook line in a faulthandler dump, as `in function, cell, line N: code`."""
    for match in _STACK_LINE.finditer(stack):  # most recent call first
        index, line, func = int(match[1]), int(match[3]), match[4]
        if index >= len(plan):
            continue
        lines = plan[index].source.splitlines()
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        func = qualified_name(plan[index].source, line, func)
        return (f"in {func}, {cell_label(plan[index], plan)}, line {line}"
                + (f": `{code}`" if code else ""))
    return ""


_LABEL = re.compile(r"^cell (\d+) '")


def qualified_name(source: str, line: int, name: str) -> str:
    """``name`` of the function running at ``line`` of a cell, with the classes and functions
    around it: `MatMul.forward`, not `forward`; a test's local check as `test_x.check`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return name
    path: list[str] = []
    body = tree.body
    while True:
        inner = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                        ast.ClassDef))
                      and n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if inner is None:
            break
        path.append(inner.name)
        body = inner.body
    while path and path[-1] != name:  # the line is in a lambda or a comprehension
        path.pop()
    return ".".join(path) if path else name


def _where_label(where, plan: list[Cell]) -> tuple | None:
    """The driver's ``where`` with its cell named as the student finds it (see cell_label)
    and its function by its qualified name."""
    if not where:
        return None
    where = list(where)
    match = _LABEL.match(str(where[0]))
    if match and int(match[1]) < len(plan):
        cell = plan[int(match[1])]
        where[0] = cell_label(cell, plan)
        if len(where) > 3 and isinstance(where[1], int):
            where[3] = qualified_name(cell.source, where[1], str(where[3]))
    return tuple(where)


def forbidden_roots(package_root: Path) -> list[str]:
    """Folders holding reference solutions that a student's cells must not read."""
    from ..course.registry import COURSE_ROOT

    package_root = Path(package_root).resolve()
    roots = set()
    if package_root != COURSE_ROOT:
        for sub in ("tinytorch", "modules", "site"):
            if (COURSE_ROOT / sub).exists():
                roots.add(str(COURSE_ROOT / sub))
        for entry in sys.path:
            folder = Path(entry or ".").resolve() / "tinytorch"
            if folder.is_dir() and folder.parent != package_root:
                roots.add(str(folder))
    return sorted(roots)


def helper_modules(plan: list[Cell]) -> list[str]:
    """The ``tinytorch`` modules the trusted cells import (the given helpers of module 01,
    say): the driver imports them before any student code runs and watches them."""
    found = []
    for cell in plan:
        if cell.origin != "release":
            continue
        try:
            tree = ast.parse("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                                       for ln in cell.source.splitlines()))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinytorch"):
                found.append(node.module)
            elif isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name.startswith("tinytorch")]
    return list(dict.fromkeys(found))


def driver_spec(plan: list[Cell], package_root: Path, key: bytes, *, forbidden=(),
                stack_path: str | None = None, dump_after: float = 60.0,
                definitions_only: bool = False) -> dict:
    """What the driver needs (see ``tito/guard/driver.py``); also used by the second grading."""
    target = default_exp([c for c in plan if c.origin == "release"])  # never a student's cell
    return {
        "key": key.hex(), "package_root": str(package_root), "stack_path": stack_path,
        "dump_after": dump_after, "forbidden": list(forbidden),
        "own_module": f"tinytorch.{target}" if target else "",
        "helpers": helper_modules(plan),
        "ctypes_packages": ctypes_packages_for(c.source for c in plan),
        "definitions_only": definitions_only, "stderr_fails_tests": True,
        "cells": [{"index": c.index, "name": c.grade_id, "source": c.source,
                   "trusted": c.origin == "release", "graded": c.is_graded,
                   "solution": bool(c.nbgrader.get("solution"))} for c in plan],
    }


class SignedRecords:
    """The driver's records out of a byte stream: a line counts only when its MAC is right and
    its sequence number the next one; anything else (a cell's own writes) is dropped."""

    def __init__(self, key: bytes):
        self.key = key
        self.seq = 0
        self.buffer = b""
        self.total = 0
        self.rejected = 0
        self.overflow = False

    def feed(self, chunk: bytes) -> list[dict]:
        self.total += len(chunk)
        if self.total > MAX_CHANNEL:
            self.overflow = True
            return []
        self.buffer += chunk
        out = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            record = self._check(line)
            if record is not None:
                out.append(record)
        if len(self.buffer) > MAX_LINE:
            self.buffer = b""
        return out

    def _check(self, line: bytes) -> dict | None:
        mac, sep, payload = line.partition(b"\t")
        if not sep:
            if line.strip():
                self.rejected += 1
            return None
        want = hmac.new(self.key, payload, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(want, mac):
            self.rejected += 1
            return None
        try:
            record = json.loads(payload)
        except ValueError:
            self.rejected += 1
            return None
        if record.get("seq") != self.seq:
            self.rejected += 1
            return None
        self.seq += 1
        return record


def _reader(stream, records: SignedRecords, out: queue.Queue) -> None:
    """A thread: the child's stdout, record by record, then ``None`` at its end."""
    try:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            for record in records.feed(chunk):
                out.put(record)
            if records.overflow:
                break
    except (OSError, ValueError):
        pass
    out.put(None)


def start_driver(command: list[str], spec: dict, cwd: Path, env: dict, stderr_path: Path):
    """Start ``command`` (the driver, maybe inside a sandbox) with ``spec`` on its stdin;
    returns (process, record queue, SignedRecords)."""
    key = bytes.fromhex(spec["key"])
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    try:
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
    except OSError:  # it died at once; its stderr says why
        pass
    records = SignedRecords(key)
    found: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, records, found), daemon=True).start()
    return proc, found, records


def collect_results(plan: list[Cell], proc, found: queue.Queue, records: SignedRecords,
                    timeout: float, start: float, on_result=None, stack_path: Path | None = None,
                    stderr_path: Path | None = None, cell_timeout: float | None = None) -> RunReport:
    """Read the driver's records into a RunReport, stopping the process at ``timeout`` (the
    whole run) or when one cell has run ``cell_timeout`` seconds."""
    results: dict[int, CellResult] = {}
    cause: CellResult | None = None
    refused = ""  # the first cell the guard refused: the tests after it are not counted
    running: int | None = None
    timed_out = finished = False
    deadline = start + timeout
    cell_deadline = float("inf")
    expected_index = 0
    ready = False
    while True:
        left = min(deadline, cell_deadline) - time.perf_counter()
        if left <= 0:
            timed_out = True
            break
        try:
            record = found.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if record is None:
            break
        event, index = record.get("event"), record.get("index")
        if event == "ready":
            ready = True
        elif not ready:
            continue
        elif event == "done":
            finished = True
            break
        elif event == "start" and index == expected_index and index < len(plan):
            running = index
            if cell_timeout is not None:
                cell_deadline = time.perf_counter() + cell_timeout
        elif event == "end" and index == running and index not in results:
            result = CellResult(
                plan[index], record.get("status", "failed"), record.get("error_type", ""),
                record.get("message", ""), _where_label(record.get("where"), plan),
                record.get("traceback", ""), record.get("seconds", 0.0),
                record.get("stdout", ""), stderr=record.get("stderr", ""),
                dropped=[tuple(d) for d in record.get("dropped", [])],
                label=cell_label(plan[index], plan), after_refusal=refused,
            )
            if result.error_type == "IntegrityError" and not refused:
                refused = result.name
            results[index] = result
            running = None
            cell_deadline = float("inf")
            expected_index = index + 1
            cause = _root_cause(result, cause)
            if on_result:
                on_result(result)
    if proc.poll() is None:
        if finished:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        else:
            proc.kill()
    proc.wait()
    stack = ""
    if timed_out and stack_path is not None and Path(stack_path).exists():
        stack = Path(stack_path).read_text(errors="replace")
    crash = ""
    if not finished and stderr_path is not None and Path(stderr_path).exists():
        crash = Path(stderr_path).read_text(errors="replace")[-2000:]
    report = RunReport(seconds=time.perf_counter() - start)
    report.finished = finished
    report.started = ready
    report.rejected_lines = records.rejected
    report.driver_error = crash if not timed_out and running is None and not results else ""
    for cell in plan:
        r = results.get(cell.index)
        if r is None:
            if cell.index == running and timed_out:
                where = _stack_where(stack, plan)
                limit = cell_timeout if cell_timeout is not None else timeout
                r = CellResult(cell, "timeout", message=(
                    f"stopped after the time limit of {limit:g} s" + (f", {where}" if where else "")
                    + ". An endless loop? If your code is only slow, give it longer with "
                    f"`--timeout {int(limit * 2)}`."))
            elif cell.index == running:
                r = CellResult(cell, "failed", message=(
                    "the test process ended in this cell (os._exit, a crash, or the memory ran "
                    "out): nothing after it ran"))
            else:
                r = CellResult(cell, "not run", message=(
                    "an earlier cell ran out of time" if timed_out else "the test process stopped earlier"))
            r.label = cell_label(cell, plan)
            if on_result:
                on_result(r)
        report.cells.append(r)
    return report


def _root_cause(result: CellResult, cause: CellResult | None) -> CellResult | None:
    """Mark a failure that follows from an earlier failing ungraded cell (root cause first);
    return the cause to remember for the cells after this one."""
    if result.passed:
        return cause
    if not result.cell.is_graded and result.status == "failed" and cause is None:
        return result
    if cause is not None and result.error_type in ("NameError", "ImportError", "AttributeError"):
        result.depends_on = cause.name
    return cause
