"""The guard both graders run student code under (``tito/guard``), tested on its own.

Fast: each test runs the real driver process (``python -I tito/guard/driver.py``) on a few
cells, no workspace and no nbgrader. ``ATTEMPTS`` is the table of what a cell may try; each
one is made in a cell of its own that catches whatever it gets, and the run must still
report that cell as refused, by name. The same table drives the reference check: an honest
cell doing the ordinary version of each thing (a namedtuple, a warning, a traceback) passes.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from tito.course.notebook import Cell
from tito.guard import driver as driver_module
from tito.guard.runs import DRIVER, SignedRecords, collect_results, driver_spec, start_driver
from tito.student.runner import run_cells

GIVEN = '''import numpy as np


def expect_close(what, got, want, fix, rtol=1e-6):
    """Given helper: the test's check."""
    assert np.allclose(got, want, rtol=rtol), f"{what} gave {got}, expected {want}: {fix}"
'''

TEST = '''def test_unit_double():
    want = np.array([2.0, 4.0])
    expect_close("double([1, 2])", double(np.array([1.0, 2.0])), want, "multiply by 2")


test_unit_double()
'''

WRONG = "def double(x):\n    return x  # the bug: should be 2 * x\n"
RIGHT = "def double(x):\n    return 2 * x\n"


def plan_of(*cells):
    """Cells as (origin, source[, graded]) -> a plan for run_cells."""
    out = []
    for i, spec in enumerate(cells):
        origin, source = spec[0], spec[1]
        graded = len(spec) > 2 and spec[2]
        meta = {"grade_id": f"c{i}"}
        if graded:
            meta.update(grade=True, points=1, locked=True, grade_id=f"test_{i}")
        out.append(Cell(i, "code", source, meta, origin=origin))
    return out


def run(*cells, tmp_path, **kwargs):
    return run_cells(plan_of(*cells), REPO, tmp_path, timeout=60, **kwargs)


# What a cell may try, each refused while graded code runs (the list and the ways
# around it). Every attempt catches what it gets: the refusal must be reported all the same.
ATTEMPTS = {
    "frame of the caller": "sys._getframe(1).f_locals",
    "frame through a traceback": "(lambda e: e.__traceback__.tb_frame)(_raise())",
    "frame through a generator": "(x for x in ()).gi_frame",
    "frames of every thread": "sys._current_frames()",
    "frames through inspect": "__import__('inspect').stack()",
    "frames through a library generator": "list(__import__('traceback').walk_stack(None))",
    "the garbage collector's objects": "__import__('gc').get_objects()",
    "the referrers of a function": "__import__('gc').get_referrers(expect_close)",
    "ctypes into libc": "__import__('ctypes').CDLL(None).system(b'true')",
    "a trace function": "sys.settrace(lambda *a: None)",
    "a new audit hook": "sys.addaudithook(lambda *a: None)",
    "a subprocess": "__import__('subprocess').run(['true'])",
    "os.system": "os.system('true')",
    "the process's memory": "open('/proc/self/mem', 'rb')",
    "the result channel reopened": "open('/proc/self/fd/0', 'rb')",
    "the helper's code swapped": "setattr(expect_close, '__code__', "
                                 "(lambda *a, **k: None).__code__)",
    "the helper's tolerance": "setattr(expect_close, '__defaults__', (1e9,))",
    "the grader's report": "sys.audit('tito.report', "
                           "{'event': 'end', 'index': 3, 'status': 'passed'})",
    "code compiled as a library's": "compile('1', __import__('numpy').__file__, 'exec')",
    "a test's function rebuilt": "type(expect_close)(expect_close.__code__, {})",
}


PRELUDE = ("import os, sys\n"
           "def _raise():\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
           "        return e\n")


def test_each_attempt_is_refused_even_when_caught(tmp_path):
    """Every attempt of the table is refused and reported, though its cell catches it."""
    names = list(ATTEMPTS)
    cells = [("release", GIVEN), ("yours", RIGHT)]
    cells += [("yours", PRELUDE + f"try:\n    {ATTEMPTS[n]}\nexcept BaseException:\n    pass\n")
              for n in names]
    report = run(*cells, ("release", TEST, True), tmp_path=tmp_path)
    missed = [(n, r.status, r.message) for n, r in zip(names, report.cells[2:])
              if r.error_type != "IntegrityError" or not r.message]
    assert not missed, f"not refused: {missed}"
    assert report.cells[-1].passed, report.cells[-1].explain()  # the test itself still ran


def test_a_refusal_names_what_and_why_in_one_line(tmp_path):
    """The student sees what was refused and why, in one line, without the attack."""
    report = run(("release", GIVEN), ("yours", "import gc\ntry:\n    gc.get_objects()\n"
                                       "except Exception:\n    pass\n"), tmp_path=tmp_path)
    text = report.cells[1].explain()
    assert "\n" not in text
    assert "it searched the interpreter's objects (gc), which graded code may not do" in text


HONEST = {
    "a namedtuple": "from collections import namedtuple\nP = namedtuple('P', 'x y')\nP(1, 2)",
    "a NamedTuple": "from typing import NamedTuple\nclass Q(NamedTuple):\n    x: int\nQ(1)",
    "an enum": "import enum\nColor = enum.Enum('Color', 'RED GREEN')\nColor.RED",
    "a dataclass": "from dataclasses import dataclass, field\n@dataclass\nclass D:\n"
                   "    x: list = field(default_factory=list)\nD()",
    "a formatted traceback": "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n"
                             "    text = traceback.format_exc()\n"
                             "assert 'ZeroDivisionError' in text",
    "a logged message": "import logging\nlogging.getLogger('x').warning('hello')",
    "a warning caught": "import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
                        "    warnings.simplefilter('always')\n    warnings.warn('w')\nassert w",
    "np.r_ with a string": "import numpy as np\nnp.r_['0,2', [1, 2], [3, 4]]",
    "its own function's defaults": "def f(a=1):\n    return a\nf.__defaults__ = (2,)\n"
                                   "assert f() == 2",
    "a thread": "import threading\nt = threading.Thread(target=lambda: None)\nt.start()\nt.join()",
}


def test_ordinary_code_is_not_refused(tmp_path):
    """What honest code does (namedtuples, tracebacks, logging...) is not refused."""
    names = list(HONEST)
    report = run(("release", GIVEN), *[("yours", HONEST[n]) for n in names],
                 ("yours", RIGHT), ("release", TEST, True), tmp_path=tmp_path)
    refused = [(n, r.explain()) for n, r in zip(names, report.cells[1:]) if not r.passed]
    assert not refused, refused
    assert report.cells[-1].passed


def test_a_patch_is_named_and_put_back_after_the_cell(tmp_path):
    """np.allclose replaced: the cell fails naming it, and the test after it runs on NumPy's."""
    report = run(("release", GIVEN),
                 ("yours", WRONG + "np.allclose = lambda *a, **k: True\n"),
                 ("release", TEST, True), tmp_path=tmp_path)
    assert "it replaced numpy.allclose" in report.cells[1].message
    assert not report.cells[2].passed and "double([1, 2]) gave" in report.cells[2].message


def test_a_protected_name_rebound_is_put_back(tmp_path):
    """A given helper rebound in the namespace is named and restored before the test."""
    report = run(("release", GIVEN),
                 ("yours", WRONG + "def expect_close(*a, **k):\n    pass\n"),
                 ("release", TEST, True), tmp_path=tmp_path)
    assert "it redefined `expect_close`" in report.cells[1].message
    assert not report.cells[2].passed


def test_stderr_in_a_test_cell_fails_like_nbgrader(tmp_path):
    """A test that passes but writes to stderr fails, and the message says why (nbgrader)."""
    noisy = RIGHT.replace("return 2 * x", "import sys\n    print('debug', file=sys.stderr)\n"
                                          "    return 2 * x")
    report = run(("release", GIVEN), ("yours", noisy), ("release", TEST, True),
                 tmp_path=tmp_path)
    test = report.cells[2]
    assert test.status == "failed" and test.error_type == "StderrOutput"
    assert "nbgrader" in test.explain() and "stderr" in test.explain()
    assert "debug" in test.explain()
    quiet = run(("release", GIVEN), ("yours", noisy.replace("import sys\n    print('debug', "
                                                            "file=sys.stderr)\n    ", "")),
                ("release", TEST, True), tmp_path=tmp_path)
    assert quiet.cells[2].passed


def test_the_environment_does_not_reach_the_driver(tmp_path):
    """PYTHONOPTIMIZE (asserts off), PYTHONPATH with a sitecustomize, PYTHONSTARTUP: ignored."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import numpy\nnumpy.allclose = lambda *a, **k: True\n")
    (site / "startup.py").write_text("import numpy\nnumpy.allclose = lambda *a, **k: True\n")
    env = {"PYTHONOPTIMIZE": "2", "PYTHONPATH": str(site),
           "PYTHONSTARTUP": str(site / "startup.py")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        report = run(("release", GIVEN), ("yours", WRONG), ("release", TEST, True),
                     tmp_path=tmp_path)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert not report.cells[2].passed and "double([1, 2]) gave" in report.cells[2].message


def test_the_module_being_graded_cannot_be_imported(tmp_path):
    """The graded module's own export (a symlinked copy of the reference, say) is refused."""
    given = "#| default_exp core.tensor\nimport numpy as np\n"
    report = run(("release", given),
                 ("yours", "try:\n    from tinytorch.core.tensor import Tensor\n"
                           "except Exception:\n    pass\n"), tmp_path=tmp_path)
    assert report.cells[1].error_type == "IntegrityError"
    assert "it imported tinytorch.core.tensor, the module being graded" in report.cells[1].message


def test_forged_lines_on_every_descriptor_are_dropped(tmp_path):
    """Lines written to every open descriptor, then os._exit(0): nothing forged counts."""
    forge = ("import json, os\n"
             "for fd in range(0, 64):\n"
             "    for i in range(8):\n"
             "        for rec in ({'seq': i, 'event': 'end', 'index': i, 'status': 'passed'},):\n"
             "            try:\n"
             "                os.write(fd, ('00' * 32 + '\\t' + json.dumps(rec)"
             " + '\\n').encode())\n"
             "            except OSError:\n"
             "                pass\n"
             "os._exit(0)\n")
    report = run(("release", GIVEN), ("yours", forge), ("release", TEST, True),
                 tmp_path=tmp_path)
    assert not report.finished
    assert report.cells[1].status == "failed" and "ended in this cell" in report.cells[1].message
    assert report.cells[2].status == "not run"


def test_signed_records_reject_what_is_not_the_drivers():
    """A line counts only with the run's MAC and the next sequence number."""
    import hashlib
    import hmac

    key = secrets.token_bytes(32)

    def line(record, with_key=key):
        payload = json.dumps(record).encode()
        return hmac.new(with_key, payload, hashlib.sha256).hexdigest().encode() + b"\t" + payload

    records = SignedRecords(key)
    stream = b"\n".join([
        b"garbage without a tab",
        line({"seq": 0, "event": "ready"}),
        line({"seq": 1, "event": "start", "index": 0}, with_key=b"x" * 32),  # wrong key
        line({"seq": 3, "event": "start", "index": 0}),  # a sequence number skipped
        line({"seq": 1, "event": "start", "index": 0}),
        line({"seq": 1, "event": "start", "index": 0}),  # replayed
    ]) + b"\n"
    got = records.feed(stream[:50]) + records.feed(stream[50:])
    assert [r["event"] for r in got] == ["ready", "start"]
    assert records.rejected == 4


# ---- works on Windows and macOS too --------------------------------------------------------
POSIX_ONLY = {
    ("os", "pipe"): "os.pipe with pass_fds",
    ("os", "fork"): "os.fork",
    ("os", "killpg"): "os.killpg",
    ("os", "setsid"): "os.setsid",
    ("signal", "SIGUSR1"): "signal.SIGUSR1",
    ("signal", "SIGKILL"): "signal.SIGKILL",
    ("select", "select"): "select.select on a pipe",
}
POSIX_MODULES = {"select", "fcntl", "resource", "termios", "pty", "posix"}
POSIX_KEYWORDS = {"pass_fds", "preexec_fn", "start_new_session"}


@pytest.mark.parametrize("path", ["tito/guard/runs.py", "tito/guard/driver.py",
                                  "tito/guard/protect.py", "tito/guard/snapshots.py",
                                  "tito/student/runner.py"])
def test_the_local_runner_uses_no_posix_only_primitive(path):
    """`tito module complete`'s runner and driver use nothing missing on Windows."""
    tree = ast.parse((REPO / path).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in POSIX_ONLY:
            found.append(POSIX_ONLY[(node.value.id, node.attr)])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            found += [f"import {n}" for n in names if n.split(".")[0] in POSIX_MODULES]
        elif isinstance(node, ast.keyword) and node.arg in POSIX_KEYWORDS:
            found.append(f"{node.arg}=")
    assert not found, f"{path} uses POSIX-only primitives: {found}"


def test_the_runner_works_without_the_posix_primitives(tmp_path, monkeypatch):
    """With os.pipe, select and SIGUSR1 gone (as on Windows), a run still completes."""
    import select
    import signal

    real_pipe = os.pipe

    def pipe():  # subprocess's own use stays (it has its Windows twin); tito's may not
        if "/tito/" in sys._getframe(1).f_code.co_filename:
            raise AttributeError("module 'os' has no attribute 'pipe' (as on Windows)")
        return real_pipe()

    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.delattr(select, "select")
    monkeypatch.delattr(signal, "SIGUSR1")
    report = run(("release", GIVEN), ("yours", RIGHT), ("release", TEST, True),
                 tmp_path=tmp_path)
    assert report.finished and report.cells[2].passed


def test_a_timeout_names_the_line_without_a_signal(tmp_path):
    """An endless loop is stopped and named from the driver's own stack dump (no SIGUSR1)."""
    loop = "def double(x):\n    while True:\n        x = x + 0\n"
    report = run_cells(plan_of(("release", GIVEN), ("yours", loop), ("release", TEST, True)),
                       REPO, tmp_path, timeout=4)
    test = report.cells[2]
    assert test.status == "timeout", test.explain()
    assert "in double, cell 'c1', line 3: `x = x + 0`" in test.message


def test_the_sandboxed_files_import_nothing_of_tito():
    """The guard's files (protect.py, snapshots.py, ...) go into the sandbox: no tito import."""
    from tito.grading.sandbox.config import GUARD_FILES

    for name in GUARD_FILES:
        tree = ast.parse((REPO / "tito" / "guard" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("tito"), (name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("tito") for a in node.names), name


def test_the_driver_runs_from_a_copy_outside_tito(tmp_path):
    """The driver and the guard work as two loose files, as in the sandbox."""
    from shutil import copyfile

    for name in ("protect.py", "snapshots.py", "driver.py"):
        copyfile(REPO / "tito" / "guard" / name, tmp_path / name)
    plan = plan_of(("release", GIVEN), ("yours", RIGHT), ("release", TEST, True))
    spec = driver_spec(plan, REPO, secrets.token_bytes(32))
    proc, found, records = start_driver([sys.executable, "-I", "-B", str(tmp_path / "driver.py")],
                                        spec, tmp_path, dict(os.environ), tmp_path / "err.txt")
    import time

    report = collect_results(plan, proc, found, records, 60, time.perf_counter(),
                             stderr_path=tmp_path / "err.txt")
    assert report.finished and report.cells[2].passed, (tmp_path / "err.txt").read_text()


def test_definitions_only_keeps_definitions_and_reports_the_rest():
    """The second grading runs a solution cell's definitions, imports and constants only."""
    source = ("import numpy as np\nEPS = np.float32(1e-5)\n'''doc'''\n"
              "def f(x):\n    return x\nclass C:\n    pass\n"
              "try:\n    import numba\nexcept ImportError:\n    numba = None\n"
              "get_ipython().input_transformers_cleanup.append(None)\n"
              "np.allclose = f\nprint('hello')\nfor i in range(3):\n    pass\n")
    kept, dropped = driver_module.definitions(ast.parse(source))
    assert [type(n).__name__ for n in kept] == ["Import", "Assign", "Expr", "FunctionDef",
                                                 "ClassDef", "Try"]
    assert [line for line, _ in dropped] == [12, 13, 14, 15]
    assert dropped[0][1].startswith("get_ipython().input_transformers_cleanup.append")


def test_the_driver_refuses_to_run_without_asserts(tmp_path):
    """Started with -O (asserts compiled out), the driver stops before any cell."""
    plan = plan_of(("release", GIVEN), ("yours", WRONG), ("release", TEST, True))
    spec = driver_spec(plan, REPO, secrets.token_bytes(32))
    done = subprocess.run([sys.executable, "-O", "-I", str(DRIVER)], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=60)
    assert "needs asserts" in done.stderr
    assert "passed" not in done.stdout


@pytest.fixture(autouse=True)
def _no_stray_files(tmp_path):
    yield
    assert not (Path.cwd() / "sitecustomize.py").exists()


# ---- hidden_cases, the given helper the hidden test cases run through ----------------------------
HIDDEN_TEST = '''def test_unit_double():
    from tinytorch.testing import hidden_cases

    def check(x, want):
        assert double(x) == want, "double"

    hidden_cases(check, {"a negative number": (-3.0, -6.0)})


test_unit_double()
'''

SWAPS = {
    "the function rebound": "import tinytorch.testing as _t\n"
                            "_t.hidden_cases = lambda check, cases: None\n",
    "the module swapped in sys.modules": (
        "import sys, types\n_fake = types.ModuleType('tinytorch.testing')\n"
        "_fake.hidden_cases = lambda check, cases: None\n"
        "sys.modules['tinytorch.testing'] = _fake\n"),
    "the module removed from sys.modules": "import sys\ndel sys.modules['tinytorch.testing']\n",
}


@pytest.mark.parametrize("name", list(SWAPS))
def test_hidden_cases_of_the_package_cannot_be_replaced(name, tmp_path):
    """A hidden region's `from tinytorch.testing import hidden_cases` gets the real helper:
    rebinding it, or swapping its module in sys.modules, is refused and put back."""
    given = GIVEN + "from tinytorch.core.tensor import Tensor\n"
    report = run(("release", given), ("yours", WRONG + SWAPS[name]),
                 ("release", HIDDEN_TEST, True), tmp_path=tmp_path)
    refused, test = report.cells[1], report.cells[2]
    assert refused.error_type == "IntegrityError", (name, refused.explain())
    assert "tinytorch.testing" in refused.message, refused.message
    assert not test.passed and "hidden case 'a negative number' failed" in test.message, (
        name, test.explain())


def test_the_module_being_graded_is_never_a_watched_helper():
    """A given helper that imports the graded module when called (module 01's float64_inputs)
    does not make that module a helper: importing it from a student's cell stays refused."""
    from tito.guard.runs import helper_modules

    given = ("#| default_exp core.tensor\nimport numpy as np\n"
             "def float64_inputs(rng, *shapes):\n    from tinytorch.core.tensor import Tensor\n")
    test = "def test_x():\n    from tinytorch.testing import hidden_cases\n"
    plan = plan_of(("release", given), ("release", test, True))
    assert helper_modules(plan) == ["tinytorch.testing"]
    plan = plan_of(("release", given.replace("core.tensor\nimport", "core.layers\nimport")))
    assert helper_modules(plan) == ["tinytorch.core.tensor"], "another module's import is watched"


def test_hidden_cases_rebound_in_module_01_is_put_back(tmp_path):
    """In module 01 the helper is a name its given cell defines: rebinding it is refused."""
    from tito.course.notebook import read_cells

    cell = next(c for c in read_cells(REPO / "modules" / "01_tensor" / "tensor.py")
                if c.grade_id == "hidden-cases")
    test = HIDDEN_TEST.replace("    from tinytorch.testing import hidden_cases\n\n", "")
    report = run(("release", GIVEN), ("release", cell.source),
                 ("yours", WRONG + "def hidden_cases(check, cases):\n    pass\n"),
                 ("release", test, True), tmp_path=tmp_path)
    assert "it redefined `hidden_cases`" in report.cells[2].message, report.cells[2].explain()
    assert not report.cells[3].passed and "hidden case" in report.cells[3].message


@pytest.mark.filterwarnings("ignore:a locked cell warns")
def test_names_ipython_changes_between_cells_are_not_protected():
    """What IPython itself rebinds or deletes between two cells (its output history, the
    warning registry cleared before each cell) is in the kernel guard's ignore list, or a
    locked cell that printed or warned would be reported as redefined by the next cell
    (module 13's autograde failed a fitted student's checkpoint test that way)."""
    from IPython.core.interactiveshell import InteractiveShell

    from tito.guard.kernel import IPYTHON_NAMES

    shell = InteractiveShell()
    try:
        shell.run_cell("import warnings\nwarnings.warn('a locked cell warns')\n41 + 1")
        before = dict(shell.user_ns)
        shell.run_cell("x = 1")
        changed = {k for k, v in before.items() if shell.user_ns.get(k, before) is not v}
    finally:
        InteractiveShell.clear_instance()
    assert "__warningregistry__" in changed  # the case the guard got wrong
    assert changed - set(IPYTHON_NAMES) == set(), changed - set(IPYTHON_NAMES)


KERNEL_OPENS = '''
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from tito.guard import protect

seen = []
guard = protect.make_guard(trusted_roots=protect.library_roots([sys.argv[1]]), strict=False,
                           report=seen.append)
guard["arm"]()
folder = tempfile.mkdtemp()
student = compile("""
with open(os.path.join(folder, ".tmp-checkpoint.npz"), "wb") as f:  # a new file: allowed
    f.write(b"weights")
try:
    open(os.path.join(folder, "no-such-file.txt"))  # a typo in a folder it has: allowed
except FileNotFoundError:
    pass
try:
    open("/no-such-course/submitted/alice/tensor.ipynb")  # a folder it cannot see: flagged
except FileNotFoundError:
    pass
""", "<ipython-input-1>", "exec")
exec(student, {"os": os, "folder": folder})
print(json.dumps(seen))
'''


def test_the_kernel_flags_a_folder_it_cannot_see_and_not_a_new_file(tmp_path):
    """nbgrader's kernel records a student's open of a path outside the sandbox, but not
    the creation of a file in a folder the sandbox has: module 08's checkpoint writer opens a
    new temporary file, and module 13's reference was flagged for it."""
    done = subprocess.run([sys.executable, "-I", "-c", KERNEL_OPENS, str(REPO)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == ["it tried to open /no-such-course/submitted/alice/tensor.ipynb, which is "
                    "not in the sandbox"], seen
