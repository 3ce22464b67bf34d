"""What a determined student tries in order to pass without writing the code; each stays closed.

Every test is one attempt, made through the real CLI in a fresh workspace: the notebook is
filled with the reference solution and a planted bug (or no solution at all), then the
attempt is added. Before the grading took its locked cells from the verified release, each
of these gave "completed" (except where the comment says it already failed); now each fails,
naming what was done. Attempts that cannot be closed on a machine the student controls are
listed in ``LIMITS`` below, with the reason.
"""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from conftest import REPO, run_tito
from test_cli import write_like_a_student
from tito.course.notebook import read_cells
from tito.course.registry import get_module

pytestmark = pytest.mark.slow

LIMITS = """
- Editing the installed tito (runner.py, tito/guard/) or the Python interpreter, the
  workspace's own exported package, or .tito/progress.json by hand: the student owns that
  code and that record on their own machine. The grade that counts is the instructor's
  `tito nbgrader autograde`, whose second grading runs in the sandbox on the student's
  solution cells alone (tests/test_autograde_sandbox.py).
- A patch that a student's function makes and undoes within one test call is not seen by the
  check after the cell; the audit hook still refuses the ways to reach the grader's state.
"""

TENSOR = get_module(1)
N_TESTS = sum(c.is_graded for c in read_cells(TENSOR.source))
BUG = ("return a + b", "return a - b")  # Add subtracts: fails test_unit_arithmetic


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    root = tmp_path_factory.mktemp("honest") / "course"
    done = run_tito("init", str(root), cwd=root.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert run_tito("module", "start", "01", cwd=root).returncode == 0
    return root


@pytest.fixture
def ws(fresh, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(fresh, root)
    return root


def notebook_of(ws):
    return ws / TENSOR.notebook_relpath


def edit(ws, change):
    """Apply ``change(cells)`` to the student's notebook (a list of nbformat cells)."""
    path = notebook_of(ws)
    nb = nbformat.read(path, as_version=4)
    nb.cells = change(nb.cells) or nb.cells
    nbformat.write(nb, path)


def gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def graded(cell):
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def append_to(ws, grade_id, code):
    def change(cells):
        for cell in cells:
            if gid(cell) == grade_id:
                cell.source += "\n" + code
    edit(ws, change)


def replace_solutions(ws, code):
    """Every solution cell of the student's notebook becomes ``code``."""
    def change(cells):
        for cell in cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                cell.source = code
    edit(ws, change)


def complete(ws):
    return run_tito("module", "complete", "01", cwd=ws, timeout=300)


def assert_not_completed(done):
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Not completed" in done.stdout
    assert "01" not in json.loads((done.ws / ".tito/progress.json").read_text())["completed"]


def run(ws):
    """`tito module complete 01` in ``ws``; the result remembers its workspace."""
    done = complete(ws)
    done.ws = ws
    return done


# ---- the tests a student edits ------------------------------------------------------------
def test_test_bodies_replaced_by_pass(ws):
    # Every graded test body replaced by `pass`, a bug left in: gave "7 passed, 33/33".
    write_like_a_student(ws, 1, bug=BUG)

    def change(cells):
        for cell in cells:
            if graded(cell):
                cell.source = "pass"
    edit(ws, change)
    done = run(ws)
    assert_not_completed(done)
    assert "✗ test_unit_arithmetic" in done.stdout and "a + b gave" in done.stdout
    assert ("test_unit_arithmetic was edited in your notebook; the original test was run"
            in done.stdout)


def test_test_cells_deleted(ws):
    # Four of the seven test cells deleted: gave "3 tests: 3 passed · 11/11".
    write_like_a_student(ws, 1, bug=BUG)
    kept = []

    def change(cells):
        tests = [c for c in cells if graded(c)]
        drop = {id(c) for c in tests[:4]}
        kept.extend(gid(c) for c in tests[4:])
        return [c for c in cells if id(c) not in drop]
    edit(ws, change)
    done = run(ws)
    assert_not_completed(done)
    assert f"{N_TESTS} tests expected, {N_TESTS - 4} found in your notebook: the 4 missing were " \
           "restored and run" in done.stdout
    assert ("✗ test_unit_arithmetic" in done.stdout
            and "was missing from your notebook" in done.stdout)


def test_deleted_tests_are_run_all_the_same_on_correct_code(ws):
    # The other side of the deletion: correct code with tests deleted still completes, and
    # every test of the release counts.
    write_like_a_student(ws, 1)
    edit(ws, lambda cells: [c for c in cells if not graded(c)])
    done = run(ws)
    assert done.returncode == 0, done.stdout
    assert f"{N_TESTS} tests expected, 0 found" in done.stdout
    assert f"{N_TESTS} passed, 0 failed" in done.stdout


def test_test_cell_unmarked_as_graded(ws):
    # The test cell's nbgrader metadata set to grade: false so it no longer counts.
    write_like_a_student(ws, 1, bug=BUG)

    def change(cells):
        for cell in cells:
            if gid(cell) == "test_unit_arithmetic":
                cell.metadata["nbgrader"]["grade"] = False
                cell.source = "pass"
    edit(ws, change)
    done = run(ws)
    assert_not_completed(done)
    assert "✗ test_unit_arithmetic" in done.stdout


def test_solution_cell_redefines_the_test_and_the_test_cell_only_calls_it(ws):
    # The solution cell defines a `test_unit_arithmetic` that passes; the student's test cell
    # is edited to call it without redefining it. Gave a pass before.
    write_like_a_student(ws, 1, bug=BUG)
    append_to(ws, "elementwise", "def test_unit_arithmetic():\n    pass")

    def change(cells):
        for cell in cells:
            if gid(cell) == "test_unit_arithmetic":
                cell.source = "test_unit_arithmetic()"
    edit(ws, change)
    done = run(ws)
    assert_not_completed(done)
    assert "✗ test_unit_arithmetic" in done.stdout and "a + b gave" in done.stdout


def test_a_graded_cell_of_the_students_own(ws):
    # The student adds a cell with nbgrader metadata of a test (grade: true, 100 points) that
    # passes. Before: counted as an 8th test, 133 points. Now the student's own cells are never
    # tests: the module has the release's tests and points.
    write_like_a_student(ws, 1)

    def change(cells):
        fake = nbformat.v4.new_code_cell("pass")
        fake.metadata["nbgrader"] = {"grade": True, "grade_id": "test_unit_bonus", "locked": True,
                                     "points": 100, "schema_version": 3, "solution": False,
                                     "task": False}
        return cells + [fake]
    edit(ws, change)
    done = run(ws)
    assert done.returncode == 0, done.stdout
    assert f"{N_TESTS} tests: {N_TESTS} passed" in done.stdout and "/33 points" in done.stdout
    assert "test_unit_bonus" not in done.stdout


def test_solution_cell_rebinds_given_code(ws):
    # A solution cell replaces `Function`, the given (locked) base class every op uses.
    write_like_a_student(ws, 1)
    append_to(ws, "elementwise", "Function = object")
    done = run(ws)
    assert_not_completed(done)
    assert "it redefined `Function`, which a locked cell of the release defines" in done.stdout


# ---- the helpers the tests rely on ------------------------------------------------------
def test_solution_cell_monkeypatches_numpy_checks(ws):
    # `np.allclose` replaced by a function that always agrees, a bug left in: gave a pass.
    write_like_a_student(ws, 1, bug=BUG)
    append_to(ws, "elementwise", "np.allclose = lambda *args, **kwargs: True")
    done = run(ws)
    assert_not_completed(done)
    assert "it replaced numpy.allclose" in done.stdout


def test_solution_cell_installs_a_trace_function(ws):
    # sys.settrace lets a cell jump over the tests' assert lines (frame.f_lineno set in a trace
    # function, to the next line that is not an assert). Gave a pass with a bug left in.
    write_like_a_student(ws, 1, bug=BUG)
    append_to(ws, "elementwise", (
        "import sys, linecache, dis\n"
        "def _skip(frame, event, arg):\n"
        "    if event == 'line' and frame.f_code.co_name.startswith('test_unit'):\n"
        "        here = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()\n"
        "        if here.startswith('assert'):\n"
        "            lines = {n for _, n in dis.findlinestarts(frame.f_code)"
        " if n and n > frame.f_lineno}\n"
        "            for target in sorted(lines):\n"
        "                text = linecache.getline(frame.f_code.co_filename, target).strip()\n"
        "                if text.startswith('assert'):\n"
        "                    continue\n"
        "                try:\n"
        "                    frame.f_lineno = target\n"
        "                    break\n"
        "                except ValueError:\n"
        "                    pass\n"
        "    return _skip\n"
        "sys.settrace(_skip)"
    ))
    done = run(ws)
    assert_not_completed(done)
    assert "trace or profile function" in done.stdout


def test_a_students_function_installs_the_trace_during_a_test(ws):
    # The same trace, installed from inside the student's Tensor constructor, i.e. while a
    # locked test cell runs: the check after each locked cell catches it too.
    write_like_a_student(ws, 1, bug=("self.data = array", "self.data = array\n        import sys\n"
                                     "        sys.settrace(lambda *a: None)"))
    done = run(ws)
    assert_not_completed(done)
    assert "trace or profile function" in done.stdout


# ---- the reference solution -----------------------------------------------------------------
def test_solution_reads_the_reference_through_course_root(ws):
    # Every solution cell executes the repository's exported reference, found through
    # tito.course.registry.COURSE_ROOT. Gave 33/33.
    replace_solutions(ws, (
        "from tito.course.registry import COURSE_ROOT\n"
        "exec(open(COURSE_ROOT / 'tinytorch' / 'core' / 'tensor.py').read())"
    ))
    done = run(ws)
    assert_not_completed(done)
    assert "which holds the course's reference solution" in done.stdout


def test_solution_imports_the_installed_reference_package(ws):
    # In every solution cell, the workspace's tinytorch is taken off sys.path so that
    # `import tinytorch` finds the installed (here: editable) reference package, whose names
    # are copied in. Gave 33/33.
    replace_solutions(ws, (
        "import sys, os\n"
        "sys.path[:] = [p for p in sys.path"
        " if not os.path.isdir(os.path.join(p or '.', 'tinytorch'))]\n"
        "for name in [n for n in sys.modules if n.startswith('tinytorch')]:\n"
        "    del sys.modules[name]\n"
        "import tinytorch.core.tensor as _reference\n"
        "globals().update({k: v for k, v in vars(_reference).items() if not k.startswith('__')})"
    ))
    done = run(ws)
    assert_not_completed(done)
    # refused as the import of the module being graded (before: as a read of the reference)
    assert "the module being graded" in " ".join(done.stdout.split())


def test_solution_reads_the_lesson_file(ws):
    # The lesson (with its solutions) is read through the registry, and every solution cell
    # runs the lesson's cell of the same name. Gave 33/33.
    replace_solutions(ws, (
        "import jupytext\n"
        "from tito.course.registry import get_module\n"
        "_lesson = jupytext.read(get_module(1).source)\n"
        "for _c in _lesson.cells:\n"
        "    if _c.metadata.get('nbgrader', {}).get('solution'):\n"
        "        exec(_c.source)"
    ))
    done = run(ws)
    assert_not_completed(done)
    # jupytext's own use of frames is refused first; reading the lesson would be refused next
    assert "not allowed:" in done.stdout


def test_solution_starts_a_process(ws):
    # A solution cell shells out (to copy the reference, or to run anything else).
    write_like_a_student(ws, 1)
    append_to(ws, "elementwise", "import subprocess\nsubprocess.run(['true'])")
    done = run(ws)
    assert_not_completed(done)
    assert "it started a process" in done.stdout


# ---- the run itself -------------------------------------------------------------------------
def test_sys_exit_in_a_solution_cell(ws):
    # sys.exit(0) in a solution cell (a bug left in), hoping the run ends "successfully". This
    # already failed before (the cells after it were reported as not run); now the exit is a
    # failure of that cell, named, and the tests still run and catch the bug.
    write_like_a_student(ws, 1, bug=BUG)
    append_to(ws, "elementwise", "import sys\nsys.exit(0)")
    done = run(ws)
    assert_not_completed(done)
    assert "called sys.exit(0)" in done.stdout and "✗ test_unit_arithmetic" in done.stdout


def test_forged_results_then_os_exit(ws):
    # The first solution cell writes a results file saying every cell passed, then ends the
    # process with os._exit(0) so nothing overwrites it. The old driver took its results file
    # from argv and trusted it: this gave "7 passed". It also writes forged result lines to
    # every open file descriptor (the new report channel) without the run's token.
    append_to(ws, "tensor-class", (
        "import json, os, sys\n"
        "if len(sys.argv) > 2:\n"
        "    spec = json.load(open(sys.argv[1]))\n"
        "    fake = [{'index': c['index'], 'status': 'passed', 'seconds': 0.0}"
        " for c in spec['cells']]\n"
        "    json.dump(fake, open(sys.argv[2], 'w'))\n"
        "for fd in range(3, 30):\n"
        "    for i in range(40):\n"
        "        for line in (json.dumps({'event': 'start', 'index': i}),\n"
        "                     json.dumps({'event': 'end', 'index': i, 'status': 'passed'})):\n"
        "            try:\n"
        "                os.write(fd, ('x\\t' + line + '\\n').encode())\n"
        "            except OSError:\n"
        "                pass\n"
        "os._exit(0)"
    ))
    done = run(ws)
    assert_not_completed(done)
    assert "the test process ended in this cell" in done.stdout
    assert f"{N_TESTS} tests: 0 passed" in done.stdout


# ---- the release --------------------------------------------------------------------------
def _edit_release(ws, recompute):
    from nbgrader.utils import compute_checksum

    path = ws / ".tito" / "release" / f"{TENSOR.dirname}.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if gid(cell) == "test_unit_arithmetic":
            cell.source = "pass"
            if recompute:
                cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
    nbformat.write(nb, path)


def test_release_edited(ws):
    # The test is emptied in the student's notebook AND in .tito/release. Gave a pass before
    # (the release was not used); now the changed checksum is refused.
    write_like_a_student(ws, 1, bug=BUG)
    _edit_release(ws, recompute=False)
    done = run(ws)
    assert done.returncode == 2 and "does not match the checksum" in done.stderr
    assert "tito init . --force" in done.stderr


def test_release_edited_with_recomputed_checksum(ws):
    # The same, with nbgrader's checksum recomputed (it is an unkeyed MD5): caught by comparing
    # the release's locked cells with the course's own (the lesson here, the packaged release
    # in a student build).
    write_like_a_student(ws, 1, bug=BUG)
    _edit_release(ws, recompute=True)
    done = run(ws)
    assert done.returncode == 2 and "does not match the course's release" in done.stderr



# ---- the issue's attempts (#21 §1), one row each -------------------------------------------
# (name, module, where the code goes: a grade_id to append to, or "top" for a new first cell,
#  the code, a planted bug, extra environment, what the refusal must say). Each of these
# completed module 01 or 02 before the guard (tests/test_grading_guard.py tests the guard
# itself); now each fails `complete`, naming what was refused.
ACTIVATIONS = get_module(2)
IDENTITY = ("return np.maximum(x, x.dtype.type(0))", "return x")  # relu forward does nothing

ATTACKS = [
    ("numpy checks and helpers replaced quietly", 2, "relu-op",
     "import warnings\nwarnings.simplefilter('ignore')\n"
     "np.isclose = lambda *a, **k: np.True_\nnp.allclose = lambda *a, **k: True\n"
     "expect_close = lambda *a, **k: None",
     IDENTITY, {}, "it replaced numpy."),
    ("expect_close.__code__ swapped, expected values read from the caller's frame", 2,
     "relu-op",
     "import sys\n"
     "def _copy(what, got, want, fix, rtol=1e-6, atol=1e-7):\n"
     "    sys._getframe(1).f_locals\n"
     "try:\n    expect_close.__code__ = _copy.__code__\nexcept Exception:\n    pass",
     IDENTITY, {}, "it changed __code__ of expect_close"),
    ("the guard switched off through the caller's frame", 1, "elementwise",
     "import sys\n"
     "try:\n    sys._getframe(1).f_locals['guard'].check = lambda *a, **k: []\n"
     "except Exception:\n    pass\n"
     "np.allclose = lambda *a, **k: True",
     BUG, {}, "it looked into the call stack"),
    ("the driver's state found through gc, then a process", 1, "elementwise",
     "import gc, subprocess\n"
     "try:\n    [o for o in gc.get_objects() if isinstance(o, dict) and 'armed' in o]\n"
     "except Exception:\n    pass\n"
     "try:\n    subprocess.run(['true'])\nexcept Exception:\n    pass",
     BUG, {}, "it searched the interpreter's objects"),
    ("ctypes.CDLL(None).system", 1, "elementwise",
     "import ctypes\n"
     "try:\n    ctypes.CDLL(None).system(b'true')\nexcept Exception:\n    pass",
     BUG, {}, "through ctypes"),
    ("forged results through the report channel, read from the caller's frame", 1,
     "elementwise",
     "import sys, os\n"
     "try:\n    spec = sys._getframe(1).f_locals\nexcept Exception:\n    pass\n"
     "try:\n    sys.audit('tito.report', {'event': 'done'})\nexcept Exception:\n    pass",
     BUG, {}, "not allowed"),
    ("PYTHONOPTIMIZE=1: asserts compiled out", 1, "elementwise", "", BUG,
     {"PYTHONOPTIMIZE": "1"}, "a + b gave"),
    ("sitecustomize.py on PYTHONPATH patching NumPy", 1, "elementwise", "", BUG,
     {"PYTHONPATH": "SITE"}, "a + b gave"),
    ("helpers rebound early, in a free cell at the top", 2, "top",
     "import tinytorch.testing as _t\n_t.expect_close = lambda *a, **k: None\n"
     "_t.check_elementwise = lambda *a, **k: None",
     IDENTITY, {}, "it replaced tinytorch.testing."),
    ("a symlinked placeholder holding the reference", 2, "relu-op",
     "from tinytorch.core.activations import ReLUFunction", IDENTITY, {"SYMLINK": "1"},
     "the module being graded"),
]


@pytest.fixture(scope="module")
def fresh02(fresh, tmp_path_factory):
    """A workspace whose module 01 is completed with the reference, module 02 started."""
    root = tmp_path_factory.mktemp("honest02") / "ws"
    shutil.copytree(fresh, root)
    write_like_a_student(root, 1)
    done = complete(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert run_tito("module", "start", "02", cwd=root).returncode == 0
    return root


@pytest.mark.parametrize("name, number, where, code, bug, env, said", ATTACKS,
                         ids=[a[0] for a in ATTACKS])
def test_an_attempt_of_the_issue_fails_complete(name, number, where, code, bug, env, said,
                                                fresh, fresh02, tmp_path):
    """Each attempt of #21 (a planted bug kept) fails `tito module complete`, named."""
    import os
    import subprocess
    import sys

    ws = tmp_path / "ws"
    shutil.copytree(fresh if number == 1 else fresh02, ws)
    m = get_module(number)
    write_like_a_student(ws, number, bug=bug)
    path = ws / m.notebook_relpath
    nb = nbformat.read(path, as_version=4)
    if where == "top":
        nb.cells.insert(0, nbformat.v4.new_code_cell(code))
    elif code:
        for cell in nb.cells:
            if gid(cell) == where:
                cell.source += "\n" + code
    nbformat.write(nb, path)
    extra = dict(env)
    if extra.pop("SYMLINK", None):  # the placeholder points at a copy of the reference
        copy = ws / "reference_copy.py"
        shutil.copy(REPO / "tinytorch" / "core" / "activations.py", copy)
        target = ws / "tinytorch" / "core" / "activations.py"
        target.unlink()
        target.symlink_to(copy)
    if extra.get("PYTHONPATH") == "SITE":
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import numpy\nnumpy.allclose = lambda *a, **k: True\n"
            "numpy.array_equal = lambda *a, **k: True\n")
        extra["PYTHONPATH"] = str(site)
    done = subprocess.run([sys.executable, "-m", "tito", "module", "complete", m.key], cwd=ws,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200", **extra})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Not completed" in done.stdout, out
    assert said in " ".join(out.split()), out
    assert m.key not in json.loads((ws / ".tito/progress.json").read_text())["completed"]
