"""`tito nbgrader`: a class graded end to end by nbgrader itself (never mocked).

One course folder is graded once (module-scoped fixture) with these submissions of module 01:

    abe     a notebook that is not JSON, placed straight into submitted/ (graded first)
    alice   the reference solution                      -> full marks
    bob     the untouched release                       -> zero on every graded test
    carol   one bug: `return a + b` -> `return a - b`   -> loses exactly test_unit_arithmetic
    dave    `while True: pass` in Max.forward           -> stopped by the time limit
    erin    carol's bug, the arithmetic test replaced by `pass`, test_unit_shapes deleted
            (both put back and graded)
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import run_tito
from tito.course.notebook import read_cells, to_ipynb
from tito.course.registry import get_module
from tito.errors import GradingError
from tito.grading import sandbox
from tito.grading.autograde import prepare_run
from tito.grading.course import Course
from tito.grading.flags import static_flags
from tito.grading.metadata import metadata_problems
from tito.grading.package import prerequisite_package
from tito.student.runner import run_notebook

M = get_module(1)
CELLS = read_cells(M.source)
POINTS = {c.grade_id: c.points for c in CELLS if c.is_graded}
TOTAL = sum(POINTS.values())
REFERENCE = {c.grade_id: c.source for c in CELLS if c.nbgrader.get("solution")}
TIME_LIMIT = 10  # seconds per cell for the autograde run (the endless loop costs one)

ADD_BUG = ("return a + b", "return a - b")
LOOP = ("return np.max(a, axis=axis, keepdims=keepdims)", "while True:\n            pass")


def gid(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def student_notebook(release: Path, *, solve=True, bug=None, edit=None, delete=None):
    """The release, filled in like a student would: solution cells pasted by grade_id."""
    notebook = nbformat.read(release, as_version=4)
    for cell in notebook.cells:
        grade_id = gid(cell)
        if solve and grade_id in REFERENCE:
            source = REFERENCE[grade_id]
            if bug and bug[0] in source:
                source = source.replace(bug[0], bug[1], 1)
            cell.source = source
        if grade_id == edit:
            cell.source = "pass  # no test here"
    if bug:
        assert any(bug[1] in c.source for c in notebook.cells), f"bug {bug} was not planted"
    if delete:
        kept = [c for c in notebook.cells if gid(c) != delete]
        assert len(kept) == len(notebook.cells) - 1
        notebook.cells = kept
    return notebook


# ---- fast: metadata checks and the course folder -------------------------------------------
def _break(notebook, grade_id, change):
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == grade_id:
            change(meta)
            return notebook
    raise AssertionError(f"no cell {grade_id}")


@pytest.mark.parametrize("grade_id, change, expected", [
    ("elementwise", lambda m: m.pop("locked"),
     "grade_id 'elementwise', tensor.py line {line}): missing key 'locked'"),
    ("test_unit_matmul", lambda m: m.pop("points"),
     "grade_id 'test_unit_matmul', tensor.py line {line}): missing key 'points'"),
    ("test_unit_shapes", lambda m: m.update(schema_version=2), "schema_version is 2"),
    ("test_unit_records", lambda m: m.update(point=m.pop("points")), "unknown key 'point'"),
    ("matmul", lambda m: m.update(locked="no"), "'locked' must be true or false"),
])
def test_metadata_problems_name_the_cell_and_the_key(grade_id, change, expected):
    line = next(i for i, text in enumerate(M.source.read_text().splitlines(), 1)
                if text.startswith("# %%") and f'"grade_id": "{grade_id}"' in text)
    assert metadata_problems(to_ipynb(M.source), M.source) == []
    problems = metadata_problems(_break(to_ipynb(M.source), grade_id, change), M.source)
    assert any(expected.format(line=line) in p for p in problems), problems


def test_metadata_problems_without_a_grade_id_give_the_cell_index():
    notebook = _break(to_ipynb(M.source), "test_unit_reductions", lambda m: m.pop("grade_id"))
    index = next(i for i, c in enumerate(notebook.cells)
                 if c.metadata.get("nbgrader", {}).get("grade") and gid(c) is None)
    assert metadata_problems(notebook) == [
        f"cell {index}: missing key 'grade_id': every graded, solution or locked cell needs a "
        "unique \"grade_id\" (e.g. \"test_unit_<what>\")"
    ]
    twice = _break(to_ipynb(M.source), "test_unit_shapes",
                   lambda m: m.update(grade_id="test_unit_matmul"))
    assert any("grade_id 'test_unit_matmul' is used twice" in p for p in metadata_problems(twice))


def test_the_grading_package_holds_only_the_prerequisites(tmp_path):
    m6 = get_module(6)
    prerequisite_package(m6, tmp_path)
    probe = """
import importlib
for name in ("core.tensor", "core.layers", "core.losses", "core.autograd", "data.loader"):
    try:
        module = importlib.import_module("tinytorch." + name)
        print(name, "ok", module.__file__)
    except ImportError as error:
        print(name, "refused", error)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name in ("core.tensor", "core.layers", "core.losses"):
        assert lines[name].startswith(f"ok {tmp_path}"), lines
    assert lines["core.autograd"] == (
        "refused tinytorch.core.autograd is module 06 (Autograd), the module being graded: "
        "its code must be written in this notebook, not imported.")
    assert lines["data.loader"].startswith(
        "refused tinytorch.data.loader is module 05 (DataLoader), which module 06 (Autograd) "
        "does not build on: grading 06 provides only its prerequisites (modules: 01, 02, 03, "
        "04).")


def test_the_scan_flags_imports_of_the_graded_module_and_paths_into_the_course(tmp_path):
    course = Course(tmp_path)
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from tinytorch.core.tensor import Tensor as _T"),
        nbformat.v4.new_code_cell(
            "import importlib\nimportlib.import_module('tinytorch.core.tensor')"),
        nbformat.v4.new_code_cell("import tito.course.registry"),
        nbformat.v4.new_code_cell("open('../../../gradebook.db', 'rb').read()"),
        nbformat.v4.new_code_cell(f"print(open({str(tmp_path / 'source')!r}).read())"),
        nbformat.v4.new_code_cell("import numpy as np\nx = np.ones(3)"),
        nbformat.v4.new_code_cell("import os\nhere = os.getcwd()  # the submitted work\n"
                                  "up = os.path.join('..', 'data', 'x.npz')"),
        # A name imported from the package root, after cells the scan already read (the scan
        # once rebound its table of names to a cell's words and crashed here).
        nbformat.v4.new_code_cell("from tinytorch import Tensor"),
    ])
    flags = static_flags(course, M, notebook)
    assert "cell 0: imports tinytorch.core.tensor.Tensor (its own module)" in flags
    assert "cell 1: names tinytorch.core.tensor (its own module)" in flags
    assert "cell 2: imports tito.course.registry" in flags
    assert "cell 3: mentions 'gradebook' (a path into the course?)" in flags
    assert f"cell 4: names the course folder {tmp_path}" in flags
    # Ordinary words of file handling are not flags (#21 §1b): "../", getcwd, comments.
    assert not any("'../'" in f or "getcwd" in f for f in flags), flags
    assert not any(f.startswith(("cell 5", "cell 6")) for f in flags), flags
    assert "cell 7: imports tinytorch.Tensor (its own module)" in flags, flags
    # Module 02 builds on 01: importing the Tensor is what its lesson does.
    assert static_flags(course, get_module(2), nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from tinytorch.core.tensor import Tensor")])) == []


def test_autograde_refuses_without_a_sandbox_unless_unsafe(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    monkeypatch.setattr(sandbox, "_checked", {})
    with pytest.raises(GradingError) as error:
        prepare_run(Course(tmp_path), M)
    assert "bubblewrap (`bwrap`) is not installed" in str(error.value)
    assert "`--unsafe` grades without one" in str(error.value)
    with prepare_run(Course(tmp_path), M, unsafe=True) as run:
        assert not run.sandboxed
        assert (run.package / "tinytorch" / "core" / "tensor.py").read_text().startswith(
            "# PLACEHOLDER written by `tito nbgrader autograde`")


@pytest.mark.slow
def test_init_refuses_to_clobber_a_course(tmp_path):
    done = run_tito("nbgrader", "init", "course", "--timeout", "60", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    course = tmp_path / "course"
    config = (course / "nbgrader_config.py").read_text()
    assert "c.ExecutePreprocessor.timeout = 60" in config
    assert "c.CourseDirectory.course_id = 'tinytorch'" in config
    for folder in ("source", "release", "submitted", "autograded", "feedback"):
        assert (course / folder).is_dir()
    assert Course(course).settings()["timeout"] == 60
    assert Course(course).settings()["db_url"] == f"sqlite:///{course / 'gradebook.db'}"
    kept = course / "submitted" / "alice" / "keep.txt"
    kept.parent.mkdir(parents=True)
    kept.write_text("student work")
    again = run_tito("nbgrader", "init", "course", cwd=tmp_path)
    assert again.returncode == 2 and "already holds an nbgrader course" in again.stderr
    assert "c.ExecutePreprocessor.timeout = 60" in (course / "nbgrader_config.py").read_text()
    forced = run_tito("nbgrader", "init", "course", "--force", cwd=tmp_path)
    assert forced.returncode == 0 and kept.read_text() == "student work"
    assert "c.ExecutePreprocessor.timeout = 120" in (course / "nbgrader_config.py").read_text()
    outside = run_tito("nbgrader", "autograde", "01", cwd=tmp_path)
    assert outside.returncode == 2 and "tito nbgrader init DIR" in outside.stderr


@pytest.mark.slow
def test_generate_refuses_a_lesson_with_broken_metadata(tmp_path):
    assert run_tito("nbgrader", "init", "course", cwd=tmp_path).returncode == 0
    text = M.source.read_text()
    header = next(t for t in text.splitlines() if '"grade_id": "test_unit_arithmetic"' in t)
    line = text.splitlines().index(header) + 1
    broken = tmp_path / "tensor.py"
    broken.write_text(text.replace(header, header.replace('"points": 6, ', "")))
    course = tmp_path / "course"
    done = run_tito("nbgrader", "generate", "01", "--lesson", str(broken), cwd=course)
    assert done.returncode == 2
    assert (f"(grade_id 'test_unit_arithmetic', tensor.py line {line}): missing key 'points'"
            in " ".join(done.stderr.split()))
    assert not (course / "source" / "01_tensor" / "tensor.ipynb").exists()
    done = run_tito("nbgrader", "release", "01", cwd=course)
    assert done.returncode == 2 and "tito nbgrader generate 01" in done.stderr

    source = course / "source" / "01_tensor" / "tensor.ipynb"
    assert run_tito("nbgrader", "generate", "01", cwd=course).returncode == 0
    again = run_tito("nbgrader", "generate", "01", cwd=course)  # cell ids differ per read
    assert again.returncode == 0 and "(unchanged)" in again.stdout
    notebook = nbformat.read(source, as_version=4)
    notebook.cells[0].source += "\nA note the instructor added."
    nbformat.write(notebook, source)
    done = run_tito("nbgrader", "generate", "01", cwd=course)
    assert done.returncode == 2 and "--force" in done.stderr
    assert "A note the instructor added." in source.read_text()


# ---- slow: the whole pipeline, graded once ------------------------------------------------------
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    course = base / "course"
    out = {"course": course}
    out["init"] = run_tito("nbgrader", "init", "course", cwd=base)
    out["generate"] = run_tito("nbgrader", "generate", "01", cwd=course)
    out["release"] = run_tito("nbgrader", "release", "01", cwd=course)
    release = course / "release" / "01_tensor" / "tensor.ipynb"
    assert release.is_file(), out["release"].stdout + out["release"].stderr

    subs = base / "submissions"
    notebooks = {
        "alice/tensor.ipynb": student_notebook(release),
        "bob/tensor.ipynb": student_notebook(release, solve=False),
        "carol.ipynb": student_notebook(release, bug=ADD_BUG),
        "dave/work/tensor.ipynb": student_notebook(release, bug=LOOP),
        "erin/tensor.ipynb": student_notebook(release, bug=ADD_BUG, edit="test_unit_arithmetic",
                                              delete="test_unit_shapes"),
    }
    for rel, notebook in notebooks.items():
        (subs / rel).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, subs / rel)
    (subs / "abe.ipynb").write_text("{ this is not a notebook")
    out["collect"] = run_tito("nbgrader", "collect", "01",
                              *sorted(str(p) for p in subs.iterdir()), cwd=course)
    # A broken file that reached submitted/ some other way (e.g. nbgrader's exchange).
    target = course / "submitted" / "abe" / "01_tensor" / "tensor.ipynb"
    target.parent.mkdir(parents=True)
    shutil.copy(subs / "abe.ipynb", target)

    # In the sandbox where there is one (tests/test_autograde_sandbox.py tests it), else
    # --unsafe: this file tests the grading, not the sandbox.
    unsafe = [] if sandbox.unavailable() is None else ["--unsafe"]
    out["autograde"] = run_tito("nbgrader", "autograde", "01", "--timeout", str(TIME_LIMIT),
                                *unsafe, cwd=course)
    out["feedback"] = run_tito("nbgrader", "feedback", "01", cwd=course)
    out["report"] = run_tito("nbgrader", "report", cwd=course)
    for width in (80, 200):
        out[f"report{width}"] = subprocess.run(
            [sys.executable, "-m", "tito", "nbgrader", "report"], cwd=course,
            capture_output=True, text=True, env={**os.environ, "COLUMNS": str(width)})
    with Course(course).gradebook() as gb:
        out["scores"] = {
            s: {g.name: (g.score, g.max_score, g.needs_manual_grade)
                for g in gb.find_submission_notebook(M.slug, M.dirname, s).grades}
            for s in ("alice", "bob", "carol", "dave", "erin")
        }
    return out


def _out(done) -> str:
    return " ".join((done.stdout + done.stderr).split())  # rich may wrap long lines


@pytest.mark.slow
def test_pipeline_steps(graded):
    for step in ("init", "generate", "release"):
        assert graded[step].returncode == 0, graded[step].stdout + graded[step].stderr
    assert f"7 graded tests ({TOTAL:g} points)" in _out(graded["generate"])
    assert "nbgrader metadata checked" in _out(graded["generate"])
    release = (graded["course"] / "release/01_tensor/tensor.ipynb").read_text()
    assert "raise NotImplementedError()" in release and "BEGIN SOLUTION" not in release

    collect = graded["collect"]
    assert collect.returncode == 1  # abe's file was refused, the others collected
    assert "abe.ipynb: not a readable notebook" in _out(collect)
    for student in ("alice", "bob", "carol", "dave", "erin"):
        assert (graded["course"] / "submitted" / student / "01_tensor" / "tensor.ipynb").is_file()


@pytest.mark.slow
def test_reference_gets_full_marks_and_the_release_zero_on_every_test(graded):
    alice, bob = graded["scores"]["alice"], graded["scores"]["bob"]
    assert set(alice) == set(POINTS) == set(bob)
    assert {k: s for k, (s, _, _) in alice.items()} == POINTS
    assert sum(s for s, _, _ in alice.values()) == TOTAL
    assert all(score == 0 for score, _, _ in bob.values())
    assert {k: m for k, (_, m, _) in bob.items()} == POINTS
    out = _out(graded["autograde"])
    assert f"alice: {TOTAL:g}/{TOTAL:g} points, 7/7 tests passed" in out
    assert f"bob: 0/{TOTAL:g} points, 0/7 tests passed" in out and "lost points: every test" in out


@pytest.mark.slow
def test_one_bug_loses_exactly_the_points_of_its_test(graded):
    # Which tests the bug breaks, found by running the student's notebook with tito's runner.
    carol = graded["course"] / "submitted/carol/01_tensor/tensor.ipynb"
    ran = run_notebook(carol, package_root=graded["course"], timeout=300)
    broken = {r.cell.grade_id for r in ran.failed}
    assert broken == {"test_unit_arithmetic"}, broken
    scores = graded["scores"]["carol"]
    lost = {k for k, (s, m, _) in scores.items() if s < m}
    assert lost == broken
    assert sum(s for s, _, _ in scores.values()) == TOTAL - POINTS["test_unit_arithmetic"]
    assert "lost points: test_unit_arithmetic" in _out(graded["autograde"])


@pytest.mark.slow
def test_an_endless_loop_is_stopped_and_the_other_tests_are_graded(graded):
    scores = graded["scores"]["dave"]
    assert scores["test_unit_reductions"][0] == 0
    assert all(s == m for k, (s, m, _) in scores.items() if k != "test_unit_reductions")
    out = _out(graded["autograde"])
    assert f"time limit {TIME_LIMIT} s per cell (this run's --timeout)" in out
    assert f"test_unit_reductions stopped at the time limit ({TIME_LIMIT} s): scored 0" in out
    autograded = nbformat.read(graded["course"] / "autograded/dave/01_tensor/tensor.ipynb",
                               as_version=4)
    errors = [o.ename for c in autograded.cells if gid(c) == "test_unit_reductions"
              for o in c.outputs if o.output_type == "error"]
    assert "CellTimeoutError" in errors


@pytest.mark.slow
def test_edited_and_deleted_locked_cells_are_detected(graded):
    scores = graded["scores"]["erin"]
    # The test replaced by `pass` was put back by nbgrader and caught the bug anyway.
    assert scores["test_unit_arithmetic"][0] == 0
    # The deleted test is put back where the release has it (tito's preprocessor: nbgrader
    # 0.9.6 cannot) and graded like any other: erin's shapes are right.
    assert scores["test_unit_shapes"] == (POINTS["test_unit_shapes"], POINTS["test_unit_shapes"],
                                          False)
    others = {k: v for k, v in scores.items()
              if k not in ("test_unit_arithmetic", "test_unit_shapes")}
    assert all(s == m and not manual for s, m, manual in others.values())
    out = _out(graded["autograde"])
    assert ("graded test test_unit_arithmetic was edited (checksum differs): nbgrader graded "
            "the original instead") in out
    assert ("graded test test_unit_shapes was deleted: it was put back where the release has "
            "it") in out
    autograded = nbformat.read(graded["course"] / "autograded/erin/01_tensor/tensor.ipynb",
                               as_version=4)
    restored = [c.source for c in autograded.cells if gid(c) == "test_unit_arithmetic"]
    assert restored and restored[0].startswith("def test_unit_arithmetic")
    order = [gid(c) for c in autograded.cells if gid(c)]
    assert order.index("test_unit_shapes") == order.index("shapes") + 1  # where it was
    marks = {gid(c): c.metadata.get("tito", {}).get("restored") for c in autograded.cells}
    assert marks["test_unit_shapes"] == "deleted" and marks["test_unit_arithmetic"] == "edited"
    assert out.count("⚠") == 2  # nobody else touched a locked cell


@pytest.mark.slow
def test_a_broken_submission_does_not_stop_the_others(graded):
    done = graded["autograde"]
    assert done.returncode == 1  # abe could not be graded, and says so
    out = _out(done)
    assert "✗ abe: failed" in out
    assert out.index("abe: failed") < out.index("alice:")  # abe went first; the rest still ran
    assert "5 graded, 1 not graded, 1 with changed locked cells" in out
    for student in ("alice", "bob", "carol", "dave", "erin"):
        assert (graded["course"] / "autograded" / student / "01_tensor" / "tensor.ipynb").is_file()


@pytest.mark.slow
def test_feedback_for_every_graded_student(graded):
    done = graded["feedback"]
    assert done.returncode == 0, done.stdout + done.stderr
    for student in ("alice", "bob", "carol", "dave", "erin"):
        html = graded["course"] / "feedback" / student / "01_tensor" / "tensor.html"
        assert html.is_file() and "test_unit_arithmetic" in html.read_text()
    assert "abe: not autograded, no feedback" in _out(done)


@pytest.mark.slow
def test_report_csv_and_table(graded):
    done = graded["report"]
    assert done.returncode == 0, done.stdout + done.stderr
    with open(graded["course"] / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == M.dirname}
    expected = {
        "alice": TOTAL,
        "bob": 0,
        "carol": TOTAL - POINTS["test_unit_arithmetic"],
        "dave": TOTAL - POINTS["test_unit_reductions"],
        "erin": TOTAL - POINTS["test_unit_arithmetic"],
    }
    for student, score in expected.items():
        assert float(rows[student]["score"]) == score, rows[student]
        assert float(rows[student]["max_score"]) == TOTAL
        assert rows[student]["status"] == "graded"
        assert rows[student]["timestamp"], rows[student]  # collect wrote timestamp.txt
    # abe's notebook could not be graded: that is not a zero (bob's 0 is).
    assert rows["abe"]["score"] == "not graded" and rows["abe"]["raw_score"] == "not graded"
    assert rows["abe"]["status"].startswith("not graded: autograde failed")
    table = {line.split("│")[0].strip(): [cell.strip() for cell in line.split("│")[1:]]
             for line in done.stdout.splitlines() if "│" in line}
    assert table["alice"] == [f"{POINTS[k]:g}" for k in POINTS] + [f"{TOTAL:g}"]
    assert table["bob"] == ["0"] * 8
    assert table["carol"][list(POINTS).index("test_unit_arithmetic")] == "0"
    shapes = list(POINTS).index("test_unit_shapes")
    assert table["erin !"][shapes] == f"{POINTS['test_unit_shapes']:g}"
    assert table["dave !"][list(POINTS).index("test_unit_reductions")] == "0"
    assert table["abe !"] == ["-"] * 7 + ["not graded"]
    out = _out(done)
    assert "! dave: stopped at the time limit: test_unit_reductions" in out
    assert "! erin: graded test test_unit_arithmetic was edited" in out
    assert "! erin: graded test test_unit_shapes was deleted" in out
    assert "! abe: not graded: run `tito nbgrader autograde 01 --student abe`" in out
    assert "grades.csv" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 200])
def test_report_is_readable_at_any_width(graded, width):
    done = graded[f"report{width}"]
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    header = next(i for i, line in enumerate(lines) if "┃" in line)
    heads = " ".join(line for line in lines[header:header + 4] if "┃" in line)
    if width == 200:  # every test's name whole in the header
        for name in POINTS:
            assert name.removeprefix("test_unit_") in heads
    else:  # numbered columns, and a legend that names each test with its points
        for i, (name, points) in enumerate(POINTS.items(), 1):
            assert f"#{i}" in heads
            assert f"#{i} {name} ({points:g} points)" in done.stdout
    rows = {line.split("│")[0].strip(): line for line in lines if "│" in line}
    assert f"{TOTAL:g}" in rows["alice"] and "not graded" in rows["abe !"]


def test_the_instructors_thread_settings_reach_the_sandboxed_kernel(tmp_path, monkeypatch):
    """The sandbox clears the environment, but the thread settings (BLAS's, OpenMP's and
    numba's, which module 17's kernels use) reach the student's kernel; nothing else does."""
    from tito.grading.sandbox import bwrap
    from tito.grading.sandbox.config import KernelConfig

    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("INSTRUCTOR_TOKEN", "secret")
    cfg = KernelConfig(output=str(tmp_path), runtime="", package=str(tmp_path),
                       python=sys.executable, uid=os.getuid())
    fds: list[int] = []
    try:
        args = bwrap.bwrap_options(cfg, fds)
    finally:
        for fd in fds:
            os.close(fd)
    env = {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--setenv"}
    assert env["NUMBA_NUM_THREADS"] == "1" and env["OPENBLAS_NUM_THREADS"] == "1", env
    assert "OMP_NUM_THREADS" not in env and "INSTRUCTOR_TOKEN" not in env, env
