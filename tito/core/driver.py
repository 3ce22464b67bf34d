"""Runs a lesson's code cells in order in a fresh interpreter; used by `runner.py`.

Invoked as ``python -m tito.core.driver SPEC.json RESULTS.json``. The spec holds the cells
and the folder that must come first on ``sys.path`` (the folder holding the ``tinytorch``
package under test: the student's workspace or the course repository). Results are written
after every cell, so a run stopped by a timeout still says where it stopped.
"""

import contextlib
import io
import json
import linecache
import os
import sys
import time
import traceback


def _strip_magics(source):
    # IPython magics and shell escapes have no meaning outside Jupyter.
    return "\n".join(
        "pass  # " + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def _where(error):
    """The innermost frame that lies in a notebook cell: (cell label, line, code)."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.startswith("<cell "):
            found = (frame.filename.strip("<>"), frame.lineno, (frame.line or "").strip(), frame.name)
    return found


def main(spec_path, results_path):
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    sys.path.insert(0, spec["package_root"])
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace = {"__name__": "__main__"}
    results = []

    def save():
        tmp = results_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(results, handle)
        os.replace(tmp, results_path)

    for cell in spec["cells"]:
        label = f"<cell {cell['index']} '{cell['name']}'>"
        source = _strip_magics(cell["source"])
        linecache.cache[label] = (len(source), None, source.splitlines(True), label)
        record = {"index": cell["index"], "status": "running"}
        results.append(record)
        save()
        out = io.StringIO()
        start = time.perf_counter()
        try:
            code = compile(source, label, "exec")
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
            record["status"] = "passed"
        except Exception as error:  # a student's error of any kind is a result, not a crash
            record["status"] = "failed"
            record["error_type"] = type(error).__name__
            record["message"] = str(error)
            record["where"] = _where(error)
            record["traceback"] = "".join(
                traceback.format_exception(type(error), error, error.__traceback__)[-6:]
            )
        record["seconds"] = time.perf_counter() - start
        record["stdout"] = out.getvalue()[-4000:]
        save()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
