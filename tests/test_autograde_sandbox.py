"""`tito nbgrader autograde` against hostile submissions: each is contained, the others graded.

One course, graded by nbgrader itself (never mocked) in the bubblewrap sandbox, modules 01 and
02 released. Module 01, one autograde run with ``--jobs 2`` and tight limits:

    alice   the reference solution                                -> full marks
    eve     writes into the course root, lists submitted/, reads source/, the gradebook,
            another student's notebook, the repository's tinytorch, the instructor's home,
            and tries to plant a symlink over its own graded notebook
    ned     connects to 127.0.0.1:PORT, where this test listens (and names a kernel that is
            not installed, as a student workspace's notebook does)
    fred    forks endlessly (uncaught: its cell fails)
    meg     allocates past the memory limit (uncaught: its cell fails)
    ivan    imports the reference `Tensor` (module 01's own export) in a solution cell

Each hostile attempt sits at the end of a solution cell, after the (reference) solution; eve's
and ned's print what each attempt achieved, and the test reads those lines from the graded
notebook. The same module
01 submissions of alice and ivan are graded again with ``--jobs 1``: the same per-test
scores. Module 02: the reference scores full marks with only module 01 in `tinytorch`, and a
submission whose solution cells import the reference activations is flagged and scores zero.
"""

from __future__ import annotations

import ast
import json
import socket
import threading
from pathlib import Path

import nbformat
import pytest

from conftest import REPO, run_tito
from test_nbgrader import POINTS, TOTAL, gid, student_notebook
from tito.course.notebook import read_cells
from tito.course.registry import get_module
from tito.grading import sandbox
from tito.grading.course import Course

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sandbox.unavailable() is not None,
                       reason=f"no sandbox here: {sandbox.unavailable()}"),
]

M1, M2 = get_module(1), get_module(2)
HOSTILE_CELL = "shapes"  # a solution cell of module 01; the attempt runs after its solution
MEMORY_MB = 2048

PROBE = '''

def _attempt(name, action):
    import json as _json
    try:
        result = action()
        print("HOSTILE", _json.dumps({"what": name, "ok": True, "got": repr(result)[:200]}))
    except BaseException as error:
        print("HOSTILE", _json.dumps({"what": name, "ok": False,
                                       "got": f"{type(error).__name__}: {error}"[:200]}))
'''

EVE = PROBE + '''
import os as _os
from pathlib import Path as _P
_course = _P(COURSE_PATH)  # the course folder (the kernel's own folder is /grading/work)
_attempt("write course root", lambda: (_course / "pwned.txt").write_text("eve was here"))
_attempt("list submitted", lambda: _os.listdir(_course / "submitted"))
_attempt("read source", lambda: (_course / "source/01_tensor/tensor.ipynb").read_text()[:50])
_attempt("read gradebook", lambda: (_course / "gradebook.db").read_bytes()[:16])
_alice = _course / "submitted/alice/01_tensor/tensor.ipynb"
_attempt("read alice", lambda: _alice.read_text()[:50])
_attempt("overwrite alice", lambda: _alice.write_text("{}"))
_attempt("read repository", lambda: _P(REPO_PATH, "tinytorch/core/tensor.py").read_text()[:50])
_attempt("list home", lambda: _os.listdir(HOME_PATH))
_attempt("symlink over own notebook", lambda: (
    _P("tensor.ipynb").unlink(), _P("tensor.ipynb").symlink_to(_course / "gradebook.db")))
_attempt("write own folder", lambda: _P("notes.txt").write_text("hello"))
_attempt("import tito", lambda: __import__("tito.course.registry"))
'''

NED = PROBE + '''
import socket as _socket
_attempt("connect", lambda: _socket.create_connection(("127.0.0.1", PORT), timeout=3).close())
'''

# fred and meg do not catch what they get: the cell fails (and is flagged), the kernel lives on.
FRED = '''
import os as _os, time as _time
_made = 0
while _made < 5000:
    if _os.fork() == 0:  # every child forks on, for ever
        while True:
            try:
                _os.fork()
            except OSError:
                _time.sleep(0.5)
    _made += 1
print(f"HOSTILE fork bomb: {_made} processes and no limit")
'''

MEG = '''
import numpy as _np
print("HOSTILE allocated", _np.ones(3 * 2**30 // 8).sum())
'''


def hostile(release, code: str) -> nbformat.NotebookNode:
    notebook = student_notebook(release)
    cell = next(c for c in notebook.cells if gid(c) == HOSTILE_CELL)
    cell.source += "\n" + code
    return notebook


def hostile_outputs(course, student) -> list:
    path = course / "autograded" / student / M1.dirname / f"{M1.slug}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    return [o for c in notebook.cells if gid(c) == HOSTILE_CELL for o in c.outputs]


def attempts(course, student) -> dict[str, tuple[bool, str]]:
    """What the student's code printed about each attempt, from the graded notebook."""
    text = "".join(o.get("text", "") for o in hostile_outputs(course, student)
                   if o.output_type == "stream")
    found = {}
    for line in text.splitlines():
        if line.startswith("HOSTILE "):
            item = json.loads(line.removeprefix("HOSTILE "))
            found[item["what"]] = (item["ok"], item["got"])
    return found


def scores(course, m, student):
    with Course(course).gradebook() as gb:
        return {g.name: g.score for g in gb.find_submission_notebook(m.slug, m.dirname,
                                                                     student).grades}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("sandbox")
    course = base / "course"
    out = {"course": course}
    assert run_tito("nbgrader", "init", "course", cwd=base).returncode == 0
    for m in (M1, M2):
        for step in ("generate", "release"):
            done = run_tito("nbgrader", step, m.key, cwd=course)
            assert done.returncode == 0, done.stdout + done.stderr
    release1 = course / "release" / M1.dirname / f"{M1.slug}.ipynb"
    release2 = course / "release" / M2.dirname / f"{M2.slug}.ipynb"

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(connection)

    threading.Thread(target=serve, daemon=True).start()
    ivan = student_notebook(release1)
    cell = next(c for c in ivan.cells if gid(c) == "tensor-class")
    cell.source = "from tinytorch.core.tensor import Tensor, Function  # the reference\n"
    subs = base / "submissions"
    notebooks = {
        "alice": student_notebook(release1),
        "eve": hostile(release1, EVE.replace("REPO_PATH", repr(str(REPO))).replace(
            "HOME_PATH", repr(str(Path.home()))).replace("COURSE_PATH", repr(str(course)))),
        "ned": hostile(release1, NED.replace("PORT", str(port))),
        "fred": hostile(release1, FRED),
        "meg": hostile(release1, MEG),
        "ivan": ivan,
    }
    # A notebook saved with another kernel (e.g. a student workspace's own) is still graded in
    # the sandbox's kernel: autograde names its kernel itself.
    notebooks["ned"].metadata["kernelspec"] = {"name": "tinytorch-0123abcd", "language": "python",
                                               "display_name": "my workspace"}
    for student, notebook in notebooks.items():
        (subs / student).mkdir(parents=True)
        nbformat.write(notebook, subs / student / f"{M1.slug}.ipynb")
    done = run_tito("nbgrader", "collect", "01", *sorted(str(p) for p in subs.iterdir()),
                    cwd=course)
    assert done.returncode == 0, done.stdout + done.stderr
    out["before"] = {p: p.read_bytes() for p in course.rglob("*") if p.is_file()}
    out["jobs2"] = run_tito("nbgrader", "autograde", "01", "--jobs", "2", "--timeout", "30",
                            "--memory", str(MEMORY_MB), "--processes", "64", cwd=course)
    out["accepted"] = len(accepted)
    out["attempts"] = {s: attempts(course, s) for s in ("eve", "ned")}
    out["errors"] = {s: [(o.ename, o.evalue) for o in hostile_outputs(course, s)
                         if o.output_type == "error"] for s in ("fred", "meg")}
    out["printed"] = {s: "".join(o.get("text", "") for o in hostile_outputs(course, s))
                      for s in ("fred", "meg")}
    out["scores2"] = {s: scores(course, M1, s) for s in notebooks}
    out["jobs1"] = run_tito("nbgrader", "autograde", "01", "--jobs", "1", "--timeout", "30",
                            "--memory", str(MEMORY_MB), "--student", "alice",
                            "--student", "ivan", cwd=course)
    out["scores1"] = {s: scores(course, M1, s) for s in ("alice", "ivan")}
    server.close()

    # Module 02: the reference, and a submission that imports the reference activations.
    reference2 = {c.grade_id: c.source for c in read_cells(M2.source) if c.nbgrader.get("solution")}
    honest, cheat = (nbformat.read(release2, as_version=4) for _ in range(2))
    for cell in honest.cells:
        if gid(cell) in reference2:
            cell.source = reference2[gid(cell)]
    for cell in cheat.cells:
        if gid(cell) in reference2:
            cell.source = "from tinytorch.core.activations import *  # the reference\n"
    (subs / "carl").mkdir()
    for student, notebook in (("alice", honest), ("carl", cheat)):
        nbformat.write(notebook, subs / student / f"{M2.slug}.ipynb")
    done = run_tito("nbgrader", "collect", "02", str(subs / "alice" / f"{M2.slug}.ipynb"),
                    str(subs / "carl" / f"{M2.slug}.ipynb"), cwd=course)
    out["m2"] = run_tito("nbgrader", "autograde", "02", "--jobs", "2", cwd=course)
    out["m2_scores"] = {s: scores(course, M2, s) for s in ("alice", "carl")}
    out["report"] = run_tito("nbgrader", "report", "02", cwd=course)
    return out


def _out(done) -> str:
    return " ".join((done.stdout + done.stderr).split())


def test_every_student_is_graded_and_the_reference_gets_full_marks(graded):
    done = graded["jobs2"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 graded, 0 not graded" in _out(done)
    assert "2 at a time" in _out(done)
    assert "sandbox: bubblewrap" in _out(done)
    assert graded["scores2"]["alice"] == POINTS
    # The hostile code ran after a complete solution: each of them still scores in full
    # (fred's fork bomb keeps his own process quota full: see test_a_fork_bomb_is_contained).
    for student in ("eve", "ned", "meg"):
        assert graded["scores2"][student] == POINTS, student
    assert set(graded["scores2"]["fred"]) == set(POINTS)


def test_the_filesystem_attempts_are_contained(graded):
    course, tried = graded["course"], graded["attempts"]["eve"]
    assert set(tried) == {"write course root", "list submitted", "read source",
                          "read gradebook", "read alice", "overwrite alice", "read repository",
                          "list home", "symlink over own notebook", "write own folder",
                          "import tito"}, tried
    # The instructor's home is not there; at most the folders above a bound Python show.
    ok, got = tried.pop("list home")
    python_dirs = {Path(p).relative_to(Path.home()).parts[0]
                   for p in sandbox.python_folders([graded["course"], REPO])[0]
                   if Path(p).is_relative_to(Path.home())}
    assert not ok or set(ast.literal_eval(got)) <= python_dirs, got
    for what, (ok, got) in tried.items():  # every other attempt failed
        assert not ok, f"{what} succeeded in the sandbox: {got}"
    assert any(word in tried["write course root"][1] for word in (
        "Read-only file system", "PermissionError", "FileNotFoundError"))
    assert "FileNotFoundError" in tried["list submitted"][1]
    assert "ModuleNotFoundError" in tried["import tito"][1]
    # Nothing in the course changed but what nbgrader itself writes.
    assert not (course / "pwned.txt").exists()
    before = graded["before"]
    for path, data in before.items():
        if "submitted" in path.parts or "source" in path.parts or "release" in path.parts:
            assert path.read_bytes() == data, f"{path} changed"
    graded_nb = course / "autograded" / "eve" / M1.dirname / f"{M1.slug}.ipynb"
    assert graded_nb.is_file() and not graded_nb.is_symlink()
    assert not (graded_nb.parent / "notes.txt").exists()
    out = _out(graded["jobs2"])
    assert "eve: 33/33 points" in out
    # The static scan saw the paths into the course (the attempts caught their errors).
    assert "flagged: shapes: mentions 'gradebook' (a path into the course?)" in out
    assert "flagged: shapes: mentions 'submitted'" in out
    # What the code reached for, though it caught the error, is flagged by the kernel's guard.
    assert "flagged: nbgrader's kernel: it tried to open" in out


def test_the_network_is_unreachable(graded):
    assert graded["scores2"]["ned"] == POINTS  # graded although its kernel is not installed
    ok, got = graded["attempts"]["ned"]["connect"]
    assert not ok and "ConnectionRefusedError" in got, got
    assert graded["accepted"] == 0


def test_a_fork_bomb_is_contained(graded):
    assert "no limit" not in graded["printed"]["fred"]
    assert [e for e, _ in graded["errors"]["fred"]] == ["BlockingIOError"]
    assert "flagged: shapes: ran past the process limit" in _out(graded["jobs2"])
    # fred's kernel survived its bomb: grading went on past the hostile cell, up to the last
    # test, which the kernel executed. Whether each later test passes is timing: the bomb's
    # own processes keep retrying and hold fred's process quota, so a test that needs a new
    # thread then may fail; that is fred's loss, and no one else's (alice: full marks).
    tests = list(POINTS)
    before, last = tests[:tests.index("test_unit_shapes")], tests[-1]
    assert all(graded["scores2"]["fred"][k] == POINTS[k] for k in before), graded["scores2"]
    path = graded["course"] / "autograded" / "fred" / M1.dirname / f"{M1.slug}.ipynb"
    cells = {gid(c): c for c in nbformat.read(path, as_version=4).cells}
    assert cells[last].get("execution_count") is not None, f"{last} was never run: the kernel died"
    assert not any(o.output_type == "error" and "Dead" in o.ename for o in cells[last].outputs)


def test_memory_past_the_limit_is_refused(graded):
    assert "allocated" not in graded["printed"]["meg"]
    assert [e for e, _ in graded["errors"]["meg"]] == ["MemoryError"]
    assert "flagged: shapes: ran past the memory limit" in _out(graded["jobs2"])
    assert f"{MEMORY_MB} MiB memory" in _out(graded["jobs2"])


def test_importing_the_graded_module_is_flagged_and_fails(graded):
    ivan = graded["scores2"]["ivan"]
    assert sum(ivan.values()) < TOTAL
    out = _out(graded["jobs2"])
    assert ("flagged: tensor-class: imports tinytorch.core.tensor.Tensor (its own module)"
            in out)
    assert ("tensor-class: imported what grading does not provide: ImportError: "
            "tinytorch.core.tensor is module 01 (Tensor), the module being graded") in out


def test_one_job_and_two_jobs_give_the_same_scores(graded):
    done = graded["jobs1"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 at a time" in _out(done)
    for student, per_test in graded["scores1"].items():
        assert per_test == graded["scores2"][student], student


def test_module_02_sees_only_its_prerequisites(graded):
    done = graded["m2"]
    assert done.returncode == 0, done.stdout + done.stderr
    out = _out(done)
    assert "prerequisites of 02 only (modules: 01)" in out
    alice, carl = graded["m2_scores"]["alice"], graded["m2_scores"]["carl"]
    total = sum(c.points for c in read_cells(M2.source) if c.is_graded)
    assert sum(alice.values()) == total
    assert sum(carl.values()) == 0, carl  # 78/78-style full marks before this change
    assert "carl" in out and "imports tinytorch.core.activations (its own module)" in out
    report = _out(graded["report"])
    assert "carl: flagged: relu-op: imports tinytorch.core.activations (its own module)" in report
