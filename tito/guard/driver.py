"""Runs a lesson's code cells in order in a fresh interpreter: the child process of the graders.

`tito module complete`/`test` start it through ``tito/student/runner.py``; `tito nbgrader
autograde` starts it a second time for each student, inside the sandbox, on the student's
solution cells and the instructor's own test cells (``tito/grading/verify.py``). Both run::

    python -I -B path/to/driver.py        (the spec as JSON on stdin; the results on stdout)

``-I`` (isolated): no ``PYTHON*`` variable (``PYTHONOPTIMIZE``, ``PYTHONPATH``,
``PYTHONSTARTUP``), no user site folder, nothing from the current folder at start-up.

**The results.** Each cell's start and end go back as one line each, ``MAC<TAB>json``, where
MAC is an HMAC-SHA256 of the json under a key the parent sent on stdin; the json carries a
sequence number. Only this file writes them, from an audit hook that accepts a record only
from the frame of the loop below: the key lives in that hook's closure, which no Python code
can reach (the guard refuses frames and the garbage collector's lists). A line a cell writes
into the channel itself is not signed and is dropped by the parent; a run that stops before
its last record leaves its remaining cells failed.

**The cells** run in a thread of their own: a signal handler runs in the main thread and
sees only its frame, which holds nothing. Cells marked ``trusted`` are the release's (the
locked tests and given code); the others are the student's. After each cell the guard
(``snapshots.py``) compares NumPy, the builtins and the helpers with what they were before any
student code ran, and puts back what changed; the audit hook refuses the rest while the run
lasts. ``definitions_only`` (the instructor's second grading) runs only the definitions,
imports and constants at the top level of a student's cell, and reports the rest.

A graded cell that writes to stderr fails, as it does in nbgrader, which scores any output to
stderr in a test cell as zero: the two graders agree.
"""

import os
import sys

try:  # run as a file (the graders), or imported (tito's own tests)
    from . import protect, snapshots
except ImportError:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import protect  # type: ignore[no-redef]
    import snapshots  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))


def _strip_magics(source):
    # IPython magics and shell escapes have no meaning outside Jupyter.
    return "\n".join(
        "pass  # " + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def definitions(tree):
    """(kept, dropped) top-level statements of a parsed cell: kept are imports, function and
    class definitions, assignments to plain names, docstrings and ``pass``, and ``if``/``try``
    blocks made only of those; dropped are ``(line, code)`` of everything else."""
    import ast

    def fine(node):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Pass)):
            return True
        if isinstance(node, ast.Assign):
            return all(isinstance(t, ast.Name) for t in node.targets)
        if isinstance(node, ast.AnnAssign):
            return isinstance(node.target, ast.Name)
        if isinstance(node, ast.Expr):
            return isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        if isinstance(node, ast.If):
            return all(fine(n) for n in node.body + node.orelse)
        if isinstance(node, ast.Try):
            return all(fine(n) for n in node.body + node.orelse + node.finalbody) and all(
                fine(n) for h in node.handlers for n in h.body)
        return False

    kept, dropped = [], []
    for node in tree.body:
        if fine(node):
            kept.append(node)
        else:
            dropped.append((node.lineno, ast.unparse(node).splitlines()[0][:120]))
    return kept, dropped


def _where(error, trusted=frozenset()):
    """Where to look: the innermost frame in one of the student's cells, in the first error of
    the chain that has one, starting from the root cause (the ValueError behind a ShapeError,
    the student's error behind a test's better message); else the innermost frame in any
    cell of the error itself. Returns (cell label, line, code, function) or None."""
    import traceback

    chain, seen = [], set()
    while error is not None and id(error) not in seen and len(chain) < 5:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__

    def frames(err):
        return [(f.filename, (f.filename.strip("<>"), f.lineno, (f.line or "").strip(), f.name))
                for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith("<cell ")]

    for err in reversed(chain):
        mine = [here for name, here in frames(err) if name not in trusted]
        if mine:
            return mine[-1]
    error = chain[0]
    found = frames(error)[-1][1] if frames(error) else None
    if (found is None and isinstance(error, SyntaxError)
            and (error.filename or "").startswith("<cell ")):
        found = (error.filename.strip("<>"), error.lineno, (error.text or "").strip(), "<cell>")
    return found


def _install_reporter(key: bytes, fd: int, allow_requester, note):
    """The audit hook that signs and writes the records (see the module's docstring)."""
    import _json
    import _thread

    try:
        import _hashlib

        _mac = _hashlib.hmac_digest
    except (ImportError, AttributeError):  # a Python without OpenSSL's HMAC
        import hmac

        _mac = hmac.digest
    _getframe, _write, _get_ident = sys._getframe, os.write, _thread.get_ident
    _encode_str = _json.encode_basestring_ascii
    _int_repr, _float_repr, _hex = int.__repr__, float.__repr__, bytes.hex
    _type, _join, _isinstance = type, ",".join, isinstance
    state = {"frame": None, "seq": 0, "done": False}
    busy: set = set()

    def encode(value):
        kind = _type(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if kind is int:
            return _int_repr(value)
        if kind is float:
            return _float_repr(value) if value == value and value not in (
                float("inf"), float("-inf")) else "null"
        if kind is str:
            return _encode_str(value)
        if kind is list or kind is tuple:
            return "[" + _join([encode(v) for v in value]) + "]"
        if kind is dict:
            return "{" + _join([_encode_str(k) + ":" + encode(v) for k, v in value.items()
                                if _type(k) is str]) + "}"
        return '"?"'

    def hook(event, args):
        if event != "tito.report":
            return
        ident = _get_ident()
        if ident in busy:
            return
        busy.add(ident)
        try:
            frame = _getframe(1)
            if state["frame"] is None:
                state["frame"] = frame
            elif frame is not state["frame"] or state["done"]:
                note("it tried to write to the grader's report")
                raise protect.Refused("it tried to write to the grader's report")
            record = args[0] if args and _type(args[0]) is dict else {}
            payload = "{" + _encode_str("seq") + ":" + _int_repr(state["seq"]) + (
                "," + encode(record)[1:] if record else "}")
            state["seq"] += 1
            if record.get("event") == "done":
                state["done"] = True
            data = (_hex(_mac(key, payload.encode(), "sha256")) + "\t" + payload + "\n").encode()
            data = b"\n" + data  # a line a cell left unfinished cannot swallow this one
            while data:
                data = data[_write(fd, data):]
        finally:
            busy.discard(ident)
            frame = None

    sys.addaudithook(hook)
    allow_requester(hook.__code__)


def _text(value, limit=None):
    """An exact ``str`` (never a student's subclass), cut to its last ``limit`` characters."""
    text = "".join([value]) if isinstance(value, str) else "?"
    return text[-limit:] if limit else text


def _start(raw: bytes, finished) -> None:
    """Read the spec, install the guard and the reporter, start the worker thread."""
    import _thread
    import ast
    import contextlib
    import faulthandler
    import io
    import json
    import linecache
    import time
    import traceback

    spec = json.loads(raw)
    key = bytes.fromhex(spec.pop("key"))
    # The records go to the original stdout; a cell's own writes to fd 1 go nowhere.
    channel = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    package_root = spec["package_root"]
    sys.path.insert(0, package_root)
    if spec.get("cwd_on_path", True):
        sys.path.append(os.getcwd())  # the notebook's folder, after every installed package
    os.environ.setdefault("MPLBACKEND", "Agg")
    if sys.flags.optimize:
        raise SystemExit("the graded run needs asserts: Python was started with -O")

    guard = protect.make_guard(
        trusted_roots=[*protect.library_roots(), os.path.join(package_root, "tinytorch"), HERE],
        forbidden_roots=spec.get("forbidden", []), own_module=spec.get("own_module", ""),
        strict=True, ctypes_packages=spec.get("ctypes_packages", []))
    _install_reporter(key, channel, guard["allow_requester"], guard["note"])
    del key
    modules = snapshots.watched_modules(spec.get("helpers", []))
    namespace = {"__name__": "__main__"}
    checker = snapshots.make_checker(modules, namespace)
    if spec.get("stack_path"):
        stack_file = open(spec["stack_path"], "w")  # noqa: SIM115 - kept open for faulthandler
        faulthandler.dump_traceback_later(spec.get("dump_after", 60), file=stack_file)

    cells = spec["cells"]
    only_definitions = spec.get("definitions_only", False)
    stderr_fails = spec.get("stderr_fails_tests", True)
    trusted_labels = frozenset(f"<cell {c['index']} '{c['name']}'>" for c in cells
                               if c.get("trusted"))
    arm, take, trust_code = guard["arm"], guard["take"], guard["trust_code"]
    in_cell = guard["in_cell"]
    check, protect_names = checker["check"], checker["protect"]
    _audit, _compile, _exec, _clock = sys.audit, compile, exec, time.perf_counter
    _dict, _len, _isinstance, _type = dict, len, isinstance, type
    _parse, _module_node = ast.parse, ast.Module
    _redirect_out, _redirect_err, _string_io = (contextlib.redirect_stdout,
                                                contextlib.redirect_stderr, io.StringIO)
    _format = traceback.format_exception
    _lines = linecache.cache
    where_of, strip, keep = _where, _strip_magics, definitions

    def worker():
        try:
            _audit("tito.report", {"event": "ready"})
            arm()
            for cell in cells:
                index, trusted = cell["index"], cell.get("trusted", False)
                label = f"<cell {index} '{cell['name']}'>"
                source = strip(cell["source"])
                _lines[label] = (_len(source), None, source.splitlines(True), label)
                _audit("tito.report", {"event": "start", "index": index})
                record = {"event": "end", "index": index}
                out, err = _string_io(), _string_io()
                before = _dict(namespace)
                take()
                start = _clock()
                try:
                    if only_definitions and not trusted:
                        tree = _parse(source, label)
                        kept, dropped = keep(tree)
                        if dropped:
                            record["dropped"] = dropped
                        code = _compile(_module_node(body=kept, type_ignores=[]), label, "exec")
                    else:
                        code = _compile(source, label, "exec")
                        if cell.get("solution") and not trusted:
                            # said, not dropped: the instructor's grade will not run these
                            dropped = keep(_parse(source, label))[1]
                            if dropped:
                                record["dropped"] = dropped
                    if trusted:
                        trust_code(code)
                    with _redirect_out(out), _redirect_err(err):
                        in_cell(True)
                        try:
                            _exec(code, namespace)
                        finally:
                            in_cell(False)
                    record["status"] = "passed"
                except BaseException as error:  # a student's error of any kind is a result
                    record["status"] = "failed"
                    record["error_type"] = _text(_type(error).__name__)
                    if _isinstance(error, SyntaxError):
                        record["message"] = _text(error.msg)
                    elif _isinstance(error, SystemExit):
                        record["message"] = (f"the cell called sys.exit({_text(repr(error.code))})"
                                             "; remove that call")
                    else:
                        record["message"] = _text(str(error))
                    found = where_of(error, trusted_labels)
                    record["where"] = [_text(str(found[0])), found[1], _text(found[2]),
                                       _text(found[3])] if found else None
                    record["traceback"] = _text("".join(
                        _format(_type(error), error, error.__traceback__)[-6:]))
                    error.__traceback__ = None
                    del error
                record["seconds"] = _clock() - start
                problems = check(names=not trusted) + take()
                if problems:
                    record["status"] = "failed"
                    record["error_type"] = "IntegrityError"
                    record["message"] = "; ".join(_dict.fromkeys(problems))
                    record["where"] = None
                if trusted:
                    protect_names(before)
                before = None
                record["stdout"] = _text(out.getvalue(), 4000)
                written = _text(err.getvalue(), 4000)
                if written:
                    record["stderr"] = written
                    if cell.get("graded") and stderr_fails and record["status"] == "passed":
                        record["status"] = "failed"
                        record["error_type"] = "StderrOutput"
                        record["message"] = written.strip().splitlines()[-1][:300] \
                            if written.strip() else "(blank)"
                _audit("tito.report", record)
                record = None
            _audit("tito.report", {"event": "done"})
        except BaseException:  # the driver's own failure: said on stderr, the run ends
            traceback.print_exc()
        finally:
            finished()

    _thread.start_new_thread(worker, ())


def main():
    import _thread

    done = _thread.allocate_lock()
    done.acquire()
    _start(sys.stdin.buffer.read(), done.release)
    done.acquire()  # the main thread only waits: a signal handler finds nothing here
    sys.stderr.flush()
    os._exit(0)  # no finalizers: no student object runs after the last record


if __name__ == "__main__":
    main()
