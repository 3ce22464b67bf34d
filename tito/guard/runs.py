"""Running a notebook's cells in the guarded driver, from the grader's side: shared by
`tito module complete` (``tito/student/runner.py``) and the instructor's second grading
(``tito/grading/verify.py``), which may not import each other.

The driver (``driver.py``, a child process, maybe inside the sandbox) gets its spec on stdin
and answers on stdout with signed records; ``start_driver`` starts it, ``collect_results``
reads the records into a ``RunReport`` as they come, with a thread and a queue: only
primitives that exist on Linux, macOS and Windows (no ``select`` on a pipe, no ``pass_fds``,
no POSIX signal), which ``tests/test_honest_grading.py`` checks. Unlike the files the
sandbox gets (protect.py, snapshots.py, driver.py, kernel.py), this one runs in tito and
imports it. What a run found (``CellResult``, ``RunReport``, how a cell is named) is in
``results.py``; tito's other parts import those names from here.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..course.notebook import Cell, default_exp
from .protect import ctypes_packages_for
from .results import (  # noqa: F401 - is_locked: imported from here by grading and student
    CellResult,
    RunReport,
    cell_label,
    is_locked,
    root_cause,
    stack_where,
    where_label,
)

DRIVER = Path(__file__).resolve().parent / "driver.py"
MAX_LINE = 1 << 20  # a record longer than this is not one of the driver's
MAX_CHANNEL = 64 << 20  # bytes read from the driver before the run is stopped


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
    say): the driver imports them before any student code runs and watches them. The module
    being graded is never one of them, even when a given helper imports it when called
    (module 01's ``float64_inputs``): importing it stays refused."""
    target = default_exp([c for c in plan if c.origin == "release"])
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
    return [name for name in dict.fromkeys(found) if not target or name != f"tinytorch.{target}"]


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
                    stderr_path: Path | None = None,
                    cell_timeout: float | None = None) -> RunReport:
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
                record.get("message", ""), where_label(record.get("where"), plan),
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
            cause = root_cause(result, cause)
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
                where = stack_where(stack, plan)
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
                    "an earlier cell ran out of time" if timed_out
                    else "the test process stopped earlier"))
            r.label = cell_label(cell, plan)
            if on_result:
                on_result(r)
        report.cells.append(r)
    return report
