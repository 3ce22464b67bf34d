"""The instructor's grade cannot be forged from inside the notebook (#21 §1, §1b; #23 §1).

One course, module 02 released, one `tito nbgrader autograde --jobs 2` over a class of hostile
submissions (nbgrader itself, in the sandbox; never mocked). ``CLASS`` is the table: each row
is a student, what they tried, and what the grade that counts must show. Before the guard and
the second grading, the rows marked "forged" got full marks from nbgrader, unflagged
(#21's own examples: the input transformer, run_cell, the replaced checks, the swapped code).

Then: a SIGINT-ignoring cell scores that test and every later one zero with the status
"timed out" and re-running that student succeeds; a re-run that fails keeps the earlier
result; two `autograde` runs at once, a fork bomb in one, grade the other correctly; the
feedback names each test; grades.csv has a timestamp.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import run_tito
from tito.course.notebook import read_cells
from tito.course.registry import get_module
from tito.grading import sandbox
from tito.grading.course import Course

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sandbox.unavailable() is not None,
                       reason=f"no sandbox here: {sandbox.unavailable()}"),
]

M = get_module(2)
CELLS = read_cells(M.source)
REFERENCE = {c.grade_id: c.source for c in CELLS if c.nbgrader.get("solution")}
POINTS = {c.grade_id: c.points for c in CELLS if c.is_graded}
TOTAL = sum(POINTS.values())
IDENTITY = ("return np.maximum(x, x.dtype.type(0))", "return x")  # relu's forward does nothing
TIME_LIMIT = 10

TRANSFORMER = ("get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'] "
               "if 'def test_unit_' in ''.join(lines) else lines)")
RUN_CELL = '''
_shell = get_ipython()
_original = type(_shell).run_cell_async
async def _quiet(self, raw_cell, *args, **kwargs):
    body = "\\n".join("    " + line for line in raw_cell.splitlines()) or "    pass"
    return await _original(self, "try:\\n" + body + "\\nexcept BaseException:\\n    pass\\n",
                           *args, **kwargs)
type(_shell).run_cell_async = _quiet
'''
CHECKS = ("import numpy as np\nnp.isclose = lambda *a, **k: np.True_\n"
          "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True")
CODE_SWAP = '''
import sys
def _agree(what, got, want, fix, rtol=1e-6, atol=1e-7):
    return None
try:
    expect_close.__code__ = _agree.__code__
except Exception:
    pass
'''
NOISY = ("return np.maximum(x, x.dtype.type(0))",
         "import sys\n        print('relu called', file=sys.stderr)\n"
         "        return np.maximum(x, x.dtype.type(0))")
HARMLESS = ("import os\nhere = os.getcwd()  # where the submitted work is\n"
            "up = os.path.join('..', 'x')")
SIGINT = ("return np.maximum(x, x.dtype.type(0))",
          "import signal\n        signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
          "        while True:\n            pass")

# student: (solve, bug, code appended to relu-op, delete a test, what must hold)
CLASS = {
    "honest": (True, None, "", None, "full marks, no flag (and `getcwd`/'../' not flagged)"),
    "tina": (False, None, TRANSFORMER, None, "forged: 0 and flagged (input transformers)"),
    "rudy": (False, None, RUN_CELL, None, "forged: 0 and flagged (run_cell)"),
    "nina": (True, IDENTITY, CHECKS, None, "forged: loses relu's points, flagged"),
    "sean": (False, None, "_ip = get_ipython()\n_ip.showtraceback = lambda *a, **k: None\n"
                          "_ip.events.register('post_run_cell', lambda *a: None)", None,
             "errors hidden (showtraceback, a callback): 0 and flagged"),
    "cody": (True, IDENTITY, CODE_SWAP, None, "forged: loses relu's points, flagged"),
    "stella": (True, NOISY, "", None, "stderr in a test: 0 for that test in both gradings"),
    "dora": (True, None, "", "test_unit_relu", "deleted test put back, run, named"),
    "polly": (True, None, "for _ in range(3000):\n    print('y' * 10000)", None,
              "30 MB of output: bounded in the graded notebook and the feedback"),
}


def notebook_for(release: Path, solve, bug, code, delete):
    notebook = nbformat.read(release, as_version=4)
    for cell in notebook.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if solve and gid in REFERENCE:
            source = REFERENCE[gid]
            if bug and bug[0] in source:
                source = source.replace(bug[0], bug[1], 1)
            cell.source = source
        if gid == "relu-op" and code:
            cell.source += "\n" + code
    if delete:
        notebook.cells = [c for c in notebook.cells
                          if c.metadata.get("nbgrader", {}).get("grade_id") != delete]
    return notebook


def scores(course: Path, student: str, m=M) -> dict:
    with Course(course).gradebook() as gb:
        return {g.name: g.score for g in gb.find_submission_notebook(m.slug, m.dirname,
                                                                     student).grades}


def _out(done) -> str:
    return " ".join((done.stdout + done.stderr).split())


def lines_of(done, student: str) -> str:
    """The autograde output from ``student``'s summary line to the next student's."""
    text = done.stdout
    start = text.index(f"  {student}:")
    nxt = [text.index(f"\n  {s}:", start + 1) for s in list(CLASS) + ["sigi"]
           if f"\n  {s}:" in text[start + 1:]]
    return " ".join(text[start:min(nxt) if nxt else len(text)].split())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("authority")
    course = base / "course"
    assert run_tito("nbgrader", "init", "course", cwd=base).returncode == 0
    for step in ("generate", "release"):
        done = run_tito("nbgrader", step, M.key, cwd=course)
        assert done.returncode == 0, done.stdout + done.stderr
    release = course / "release" / M.dirname / f"{M.slug}.ipynb"
    subs = base / "subs"
    for student, (solve, bug, code, delete, _) in CLASS.items():
        notebook = notebook_for(release, solve, bug, code, delete)
        if student == "honest":
            notebook.cells.append(nbformat.v4.new_code_cell(HARMLESS))
        (subs / student).mkdir(parents=True)
        nbformat.write(notebook, subs / student / f"{M.slug}.ipynb")
    sigi = notebook_for(release, True, SIGINT, "", None)
    (subs / "sigi").mkdir()
    nbformat.write(sigi, subs / "sigi" / f"{M.slug}.ipynb")
    done = run_tito("nbgrader", "collect", M.key, *sorted(str(p) for p in subs.iterdir()),
                    cwd=course)
    assert done.returncode == 0, done.stdout + done.stderr
    out = {"course": course, "subs": subs}
    out["autograde"] = run_tito("nbgrader", "autograde", M.key, "--jobs", "2", "--timeout",
                                str(TIME_LIMIT), *[f"--student={s}" for s in CLASS],
                                cwd=course, timeout=1200)
    out["scores"] = {s: scores(course, s) for s in CLASS}
    out["sigi"] = run_tito("nbgrader", "autograde", M.key, "--student", "sigi", "--timeout",
                           str(TIME_LIMIT), cwd=course, timeout=1200)
    out["sigi_scores"] = scores(course, "sigi")
    # sigi fixes the loop and hands in again: re-running that student succeeds
    fixed = notebook_for(course / "release" / M.dirname / f"{M.slug}.ipynb", True, None, "", None)
    nbformat.write(fixed, subs / "sigi" / f"{M.slug}.ipynb")
    run_tito("nbgrader", "collect", M.key, str(subs / "sigi"), cwd=course)
    out["sigi_again"] = run_tito("nbgrader", "autograde", M.key, "--student", "sigi",
                                 cwd=course, timeout=1200)
    out["sigi_again_scores"] = scores(course, "sigi")
    out["feedback"] = run_tito("nbgrader", "feedback", M.key, cwd=course)
    out["report"] = run_tito("nbgrader", "report", M.key, cwd=course)
    return out


def test_the_class_is_graded(graded):
    """Every hostile submission of the class is graded (none 'not graded')."""
    done = graded["autograde"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CLASS)} graded, 0 not graded" in _out(done)


def test_the_honest_student_gets_full_marks_and_no_flag(graded):
    """The reference scores full marks in both gradings, with no flag at all."""
    assert sum(graded["scores"]["honest"].values()) == TOTAL
    said = lines_of(graded["autograde"], "honest")
    assert "⚑" not in said, said


@pytest.mark.parametrize("student, wanted", [
    ("tina", "input_transformers"), ("rudy", "run_cell"), ("nina", "numpy."),
    ("sean", "showtraceback"),
    ("cody", "__code__ of expect_close")])
def test_a_forged_grade_loses_its_marks_and_is_flagged(graded, student, wanted):
    """Each of #21's ways to forge nbgrader's grade loses its marks and is flagged."""
    got = graded["scores"][student]
    assert sum(got.values()) < TOTAL, got
    if CLASS[student][1] == IDENTITY:
        assert got["test_unit_relu"] == 0, got
    said = lines_of(graded["autograde"], student)
    assert "⚑ flagged" in said and wanted in said, said


def test_the_lower_score_is_what_nbgrader_exports(graded):
    """The lowered scores are the gradebook's: grades.csv and the report show them."""
    with open(graded["course"] / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    for student in ("tina", "rudy", "nina", "cody", "sean"):
        assert float(rows[student]["score"]) == sum(graded["scores"][student].values())
        assert float(rows[student]["score"]) < TOTAL


def test_stderr_in_a_test_costs_that_test_in_both_gradings(graded):
    """A test writing to stderr scores 0 in nbgrader and in the second grading: they agree."""
    got = graded["scores"]["stella"]
    assert got["test_unit_relu"] == 0  # (and any later test that calls relu)
    assert got["test_unit_sigmoid"] == POINTS["test_unit_sigmoid"]
    assert "second grading" not in lines_of(graded["autograde"], "stella")


def test_a_deleted_test_is_put_back_run_and_named(graded):
    """A deleted test is restored where the release has it, graded, and named everywhere."""
    assert sum(graded["scores"]["dora"].values()) == TOTAL
    said = lines_of(graded["autograde"], "dora")
    assert "test_unit_relu was deleted: it was put back" in said
    html = (graded["course"] / "feedback" / "dora" / M.dirname / f"{M.slug}.html").read_text()
    assert "(you deleted this test: the original was put back and run)" in html


def test_the_feedback_names_each_test(graded):
    """The feedback's summary lists every test by name, not 'Test cell'."""
    assert graded["feedback"].returncode == 0, graded["feedback"].stdout
    html = (graded["course"] / "feedback" / "honest" / M.dirname / f"{M.slug}.html").read_text()
    assert ">Test cell<" not in html
    for name in POINTS:
        assert f"Test <code>{name}</code>" in html


def test_a_cell_ignoring_sigint_is_timed_out_and_a_rerun_succeeds(graded):
    """A SIGINT-ignoring loop: that test and every later one score 0, status 'timed out'."""
    done = graded["sigi"]
    assert done.returncode == 0, done.stdout + done.stderr
    out = _out(done)
    assert "1 graded, 0 not graded" in out
    assert "timed out in test_unit_relu" in out
    got = graded["sigi_scores"]
    tests = list(POINTS)
    after = tests[tests.index("test_unit_relu"):]
    assert all(got[t] == 0 for t in after), got
    assert all(got[t] == POINTS[t] for t in tests[:tests.index("test_unit_relu")]), got
    again = graded["sigi_again"]
    assert again.returncode == 0, again.stdout + again.stderr
    assert sum(graded["sigi_again_scores"].values()) == TOTAL


def test_grades_csv_has_a_timestamp_and_a_status(graded):
    """grades.csv: the submission's time (collect writes it) and the status in words."""
    with open(graded["course"] / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert all(rows[s]["timestamp"] for s in CLASS), rows
    assert rows["honest"]["status"] == "graded"


# ---- two runs at once ---------------------------------------------------------------------
FORK_BOMB = '''
import os as _os, time as _time
for _ in range(400):
    try:
        if _os.fork() == 0:
            while True:
                try:
                    _os.fork()
                except OSError:
                    _time.sleep(0.2)
    except OSError:
        break
'''


def test_two_runs_at_once_a_fork_bomb_in_one(tmp_path):
    """Two `autograde` at once, a fork bomb in one: the other is graded in full, and a failed
    re-run afterwards keeps the earlier result."""
    m1 = get_module(1)
    reference = {c.grade_id: c.source for c in read_cells(m1.source) if c.nbgrader.get("solution")}
    courses = {}
    for name, extra in (("bomb", FORK_BOMB), ("calm", "")):
        base = tmp_path / name
        base.mkdir()
        assert run_tito("nbgrader", "init", "course", cwd=base).returncode == 0
        course = base / "course"
        for step in ("generate", "release"):
            assert run_tito("nbgrader", step, "01", cwd=course).returncode == 0
        notebook = nbformat.read(course / "release" / m1.dirname / f"{m1.slug}.ipynb",
                                 as_version=4)
        for cell in notebook.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in reference:
                cell.source = reference[gid] + ("\n" + extra if gid == "shapes" else "")
        (base / "subs" / "pat").mkdir(parents=True)
        nbformat.write(notebook, base / "subs" / "pat" / f"{m1.slug}.ipynb")
        assert run_tito("nbgrader", "collect", "01", str(base / "subs" / "pat"),
                        cwd=course).returncode == 0
        courses[name] = course
    runs = {name: subprocess.Popen([sys.executable, "-m", "tito", "nbgrader", "autograde", "01",
                                    "--processes", "64", "--timeout", "30"], cwd=course,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name, course in courses.items()}
    outputs = {name: proc.communicate(timeout=900)[0] for name, proc in runs.items()}
    calm = courses["calm"]
    assert runs["calm"].returncode == 0, outputs["calm"]
    total = sum(c.points for c in read_cells(m1.source) if c.is_graded)
    assert sum(scores(calm, "pat", m1).values()) == total, outputs["calm"]
    assert "reached the sandbox's process limit" in " ".join(outputs["bomb"].split())

    # A re-run that fails (the submission is no notebook now) keeps the earlier result.
    graded_nb = calm / "autograded" / "pat" / m1.dirname / f"{m1.slug}.ipynb"
    before = graded_nb.read_bytes()
    (calm / "submitted" / "pat" / m1.dirname / f"{m1.slug}.ipynb").write_text("{ not json")
    again = run_tito("nbgrader", "autograde", "01", cwd=calm)
    assert again.returncode == 1 and "the earlier result was kept" in again.stdout
    assert graded_nb.read_bytes() == before
    assert sum(scores(calm, "pat", m1).values()) == total


def test_the_sandbox_blocks_user_namespaces_and_hides_host_paths(tmp_path):
    """Inside: no user namespace, /etc readable, a passwd entry for the sandbox user,
    /proc/1/cmdline without host paths, the uid leased for this run only."""
    out = tmp_path / "out"
    out.mkdir()
    lease = sandbox.UidLease()
    try:
        other = sandbox.UidLease()
        assert other.uid != lease.uid  # two leases at once never share a uid
        other.release()
        cfg = sandbox.KernelConfig(output=str(out), runtime="", package=str(tmp_path),
                                   python=sys.executable, uid=lease.uid,
                                   read_only=sandbox.python_folders([tmp_path])[0])
        probe = ("import os, pwd, json, ctypes\n"
                 "libc = ctypes.CDLL(None)\n"
                 "userns = libc.unshare(0x10000000)\n"
                 "print(json.dumps({'uid': os.getuid(), 'name': pwd.getpwuid(os.getuid()).pw_name,"
                 " 'etc': oct(os.stat('/etc').st_mode & 0o777),"
                 " 'cmdline': open('/proc/1/cmdline').read().replace(chr(0), ' '),"
                 " 'userns': userns, 'cwd': os.getcwd()}))\n")
        fds: list[int] = []
        argv = sandbox.sandbox_command(cfg, [sys.executable, "-I", "-c", probe], fds)
        done = subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, timeout=120)
    finally:
        lease.release()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["uid"] == lease.uid and seen["name"] == "student"
    assert seen["etc"] == "0o755"
    assert seen["userns"] == -1  # unshare(CLONE_NEWUSER) refused
    assert str(out) not in seen["cmdline"] and str(tmp_path) not in seen["cmdline"]
    assert seen["cwd"] == sandbox.WORK


def test_unsafe_ends_the_kernels_whole_session(tmp_path):
    """--unsafe: a process the student's code started does not outlive the run."""
    m1 = get_module(1)
    reference = {c.grade_id: c.source for c in read_cells(m1.source) if c.nbgrader.get("solution")}
    assert run_tito("nbgrader", "init", "course", cwd=tmp_path).returncode == 0
    course = tmp_path / "course"
    for step in ("generate", "release"):
        assert run_tito("nbgrader", step, "01", cwd=course).returncode == 0
    notebook = nbformat.read(course / "release" / m1.dirname / f"{m1.slug}.ipynb", as_version=4)
    marker = f"{secrets_token()}"
    for cell in notebook.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in reference:
            cell.source = reference[gid]
        if gid == "shapes":
            cell.source += ("\nimport subprocess\n"
                            f"subprocess.Popen(['sleep', '300', '{marker}'][:2] "
                            f"+ [], env={{'TITO_MARK': '{marker}'}})")
    (tmp_path / "subs" / "olly").mkdir(parents=True)
    nbformat.write(notebook, tmp_path / "subs" / "olly" / f"{m1.slug}.ipynb")
    assert run_tito("nbgrader", "collect", "01", str(tmp_path / "subs" / "olly"),
                    cwd=course).returncode == 0
    done = run_tito("nbgrader", "autograde", "01", "--unsafe", cwd=course)
    assert done.returncode == 0, done.stdout + done.stderr
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and _has_mark(p, marker)]
    assert not left, f"still running after autograde --unsafe: {left}"
    assert "started a process" in " ".join(done.stdout.split())


def secrets_token() -> str:
    import secrets

    return secrets.token_hex(8)


def _has_mark(proc: Path, marker: str) -> bool:
    try:
        return marker.encode() in (proc / "environ").read_bytes()
    except OSError:
        return False


def test_endless_output_is_bounded(graded):
    """30 MB printed: nbgrader keeps 200,000 characters of it, the feedback less."""
    graded_nb = graded["course"] / "autograded" / "polly" / M.dirname / f"{M.slug}.ipynb"
    assert graded_nb.stat().st_size < 2_000_000, graded_nb.stat().st_size
    assert "dropped by the grader" in graded_nb.read_text()
    html = graded["course"] / "feedback" / "polly" / M.dirname / f"{M.slug}.html"
    assert html.stat().st_size < 2_000_000, html.stat().st_size
    assert sum(graded["scores"]["polly"].values()) == TOTAL
