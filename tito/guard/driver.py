"""Runs a lesson's code cells in order in a fresh interpreter; used by `runner.py`.

Invoked as ``python -m tito.student.driver`` with the spec as JSON on stdin: the cells, the
folder that must come first on ``sys.path`` (the one holding the ``tinytorch`` under test),
the file descriptor to report on, a per-run token and the folders no cell may read.

Each cell's start and end are written as one line (``token<TAB>json``) to that descriptor
as they happen, so the parent prints each test's result when it finishes and knows which
cell was running if the run is stopped. On SIGUSR1, ``faulthandler`` writes the stack to
``stack_path``: the parent asks for it before stopping an endless loop, to name the line.

Cells marked ``trusted`` come from the released notebook (the locked tests and given code);
the others are the student's. After each student cell the driver checks that it did not
replace what the tests rely on (numpy's checks, builtins, helpers defined by locked cells)
and an audit hook refuses any read of the folders holding reference solutions.
"""

import builtins
import contextlib
import faulthandler
import io
import json
import linecache
import os
import signal
import sys
import time
import traceback


def _strip_magics(source):
    # IPython magics and shell escapes have no meaning outside Jupyter.
    return "\n".join(
        "pass  # " + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def _where(error, trusted=frozenset()):
    """Where to look: the innermost frame in one of the student's cells, in the first error of
    the chain that has one, starting from the root cause (the ValueError behind a ShapeError,
    the student's error behind a test's better message); else the innermost frame in any
    cell of the error itself. Returns (cell label, line, code, function) or None."""
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
    if found is None and isinstance(error, SyntaxError) and (error.filename or "").startswith("<cell "):
        found = (error.filename.strip("<>"), error.lineno, (error.text or "").strip(), "<cell>")
    return found


class _Guard:
    """What a student's cell must leave alone for the tests to mean anything."""

    def __init__(self, namespace):
        import numpy

        self.namespace = namespace
        self.modules = {"builtins": builtins, "numpy": numpy, "numpy.testing": numpy.testing,
                        "json": json, "traceback": traceback, "io": io}
        self.modules["tito.student.driver"] = sys.modules[__name__]
        self.snapshot = {}
        self.protected_names = {}
        self.sys_hooks = (sys.gettrace(), sys.getprofile())
        self.take()

    def take(self):
        self.snapshot = {
            (name, attr): id(value)
            for name, mod in self.modules.items() for attr, value in vars(mod).items()
        }

    def after_trusted(self, before):
        """Names a locked cell bound (test helpers, given classes) become protected."""
        for key, value in self.namespace.items():
            if before.get(key, None) is not value or key not in before:
                self.protected_names[key] = value

    def check(self, names=True):
        """What a cell changed that it must not have, as sentences (empty: fine). Locked cells
        are checked too (the student's functions run inside them), except for the names they
        bind themselves."""
        problems = []
        for (name, attr), ident in self.snapshot.items():
            found = vars(self.modules[name])
            if attr not in found or id(found[attr]) != ident:
                problems.append(f"it replaced {name}.{attr}")
        for key, value in self.protected_names.items() if names else ():
            if key not in self.namespace or self.namespace[key] is not value:
                problems.append(f"it redefined `{key}`, which a locked cell of the release defines")
        if (sys.gettrace(), sys.getprofile()) != self.sys_hooks:
            problems.append("it installed a trace or profile function (sys.settrace/setprofile)")
            sys.settrace(self.sys_hooks[0])
            sys.setprofile(self.sys_hooks[1])
        return problems


def _install_audit(forbidden, state):
    """Refuse, for the whole run, reads under ``forbidden`` folders and new processes."""
    roots = tuple(os.path.join(os.path.realpath(f), "") for f in forbidden)

    def hook(event, args):
        if not state["armed"]:
            return
        if event == "open" and roots and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = args[0]
            if isinstance(path, int):
                return
            path = os.fsdecode(path)
            full = os.path.realpath(path)
            if any(full.startswith(root) or full + os.sep == root for root in roots):
                state["violations"].append(f"it read {full}, which holds the course's reference solution")
                raise PermissionError(f"{full}: reading the course's reference solution is not allowed")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                       "os.fork", "os.forkpty"):
            state["violations"].append(f"it started a process ({event})")
            raise PermissionError(f"{event}: cells may not start other processes while graded")

    sys.addaudithook(hook)


def main():
    spec = json.loads(sys.stdin.read())
    token = spec["token"]
    out_fd = spec["fd"]
    sys.path.insert(0, spec["package_root"])
    os.environ.setdefault("MPLBACKEND", "Agg")
    stack_file = open(spec["stack_path"], "w")  # noqa: SIM115 - kept open for faulthandler
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    namespace = {"__name__": "__main__"}
    state = {"armed": False, "violations": []}
    _install_audit(spec.get("forbidden", []), state)
    guard = _Guard(namespace)
    write = os.write
    dumps = json.dumps

    def emit(record):
        data = (token + "\t" + dumps(record) + "\n").encode()
        while data:
            data = data[write(out_fd, data):]

    trusted_labels = {f"<cell {c['index']} '{c['name']}'>" for c in spec["cells"] if c.get("trusted")}
    for cell in spec["cells"]:
        label = f"<cell {cell['index']} '{cell['name']}'>"
        source = _strip_magics(cell["source"])
        linecache.cache[label] = (len(source), None, source.splitlines(True), label)
        trusted = cell.get("trusted", False)
        emit({"event": "start", "index": cell["index"]})
        record = {"event": "end", "index": cell["index"]}
        out = io.StringIO()
        before = dict(namespace)
        state["violations"] = []
        state["armed"] = True
        start = time.perf_counter()
        try:
            code = compile(source, label, "exec")
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
            record["status"] = "passed"
        except BaseException as error:  # a student's error of any kind is a result, not a crash
            record["status"] = "failed"
            record["error_type"] = type(error).__name__
            record["message"] = str(error)
            if isinstance(error, SyntaxError):
                record["message"] = error.msg
            if isinstance(error, SystemExit):
                record["message"] = f"the cell called sys.exit({error.code!r}); remove that call"
            record["where"] = _where(error, trusted_labels)
            record["traceback"] = "".join(
                traceback.format_exception(type(error), error, error.__traceback__)[-6:]
            )
        record["seconds"] = time.perf_counter() - start
        state["armed"] = False
        problems = guard.check(names=not trusted) + state["violations"]
        if problems:
            record["status"] = "failed"
            record["error_type"] = "IntegrityError"
            record["message"] = "; ".join(dict.fromkeys(problems))
            record["where"] = None
            guard.take()
        if trusted:
            guard.after_trusted(before)
        record["stdout"] = out.getvalue()[-4000:]
        emit(record)


if __name__ == "__main__":
    main()
