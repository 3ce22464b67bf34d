"""Hidden test cases (issue #21, section 2): every graded test cell of every lesson holds cases
the student never sees, and they reach the student nowhere.

A graded cell ends its test function with a region between ``### BEGIN HIDDEN TESTS`` and
``### END HIDDEN TESTS``. nbgrader's ``generate_assignment`` drops the region from the release
and records the whole cell in the gradebook; ``autograde`` puts the whole cell back before it
runs (the submitted cell's checksum differs from the recorded one), so the instructor's grade
runs the hidden cases and ``tito module complete`` (the release's cells) does not.

The house rules for a region, checked here so that nothing in it can surface anywhere:

- it is the end of the test function, so its cases run only once the visible ones pass;
- it holds data and calls of ``hidden_cases(check, {label: args})`` (module 01's given
  helper) that run the test's own visible checks on other inputs; no ``assert`` or ``raise``
  of its own, so it has no message for the site to list or for feedback to show;
- each label names the kind of case ("a batch of matrices"), never its values: a label has no
  number in it except a dtype's name. A failing hidden case is reported by its label and the
  error's kind alone (``hidden_cases`` drops the original message, which may show inputs).
"""

from __future__ import annotations

import ast
import json
import re
import textwrap

import nbformat
import numpy as np
import pytest

from tito.course.notebook import read_cells
from tito.course.registry import written_modules
from tito.course.solutions import HIDDEN_BEGIN, HIDDEN_END, partition_hidden, without_hidden_tests

WRITTEN = written_modules()
IDS = [m.dirname for m in WRITTEN]


def regions(source: str) -> list[tuple[int, int]]:
    """1-based (BEGIN line, END line) of each hidden region of a cell (nbgrader's matching:
    the words anywhere in a line)."""
    found, start = [], None
    for number, line in enumerate(source.split("\n"), 1):
        if HIDDEN_BEGIN in line:
            assert start is None, f"nested {HIDDEN_BEGIN} at line {number}"
            start = number
        elif HIDDEN_END in line:
            assert start is not None, f"{HIDDEN_END} without a BEGIN at line {number}"
            found.append((start, number))
            start = None
    assert start is None, f"{HIDDEN_BEGIN} at line {start} is never closed"
    return found


_DTYPE = re.compile(r"\b(?:u?int|b?float|complex)\d+\b")


def label_problem(label) -> str | None:
    if not isinstance(label, str) or not label.strip():
        return f"label {label!r} is not a text"
    if re.search(r"\d", _DTYPE.sub("", label)):
        return f"label {label!r} shows a number: name the kind of case, not its values"
    return None


def case_table(node, region) -> ast.Dict | None:
    """The dict literal whose keys label the cases of a hidden_cases call: the argument
    itself, or the dict a comprehension ``{... for label, ... in table.items()}`` reads."""
    if isinstance(node, ast.Dict):
        return node
    if isinstance(node, ast.DictComp) and len(node.generators) == 1:
        source = node.generators[0].iter
        if (isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute)
                and source.func.attr == "items" and isinstance(source.func.value, ast.Name)):
            name = source.func.value.id
            for stmt in ast.walk(region):
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict)
                        and any(getattr(t, "id", None) == name for t in stmt.targets)):
                    return stmt.value
    return None


def region_problems(cell) -> list[str]:
    """What is wrong with the hidden region(s) of a graded cell (empty: nothing)."""
    source = cell.source
    spans = regions(source)
    if not spans:
        return ["no hidden test region"]
    problems = []
    tree = ast.parse(source)
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    lines = source.split("\n")
    for begin, end in spans:
        where = f"hidden region at lines {begin}-{end}"
        owner = [f for f in tests if f.lineno < begin and end <= f.end_lineno + 1]
        if not owner:
            problems.append(f"{where} is not inside a test_...() function")
            continue
        after = [s for s in ast.walk(owner[0]) if isinstance(s, ast.stmt) and s.lineno > end]
        if after:
            problems.append(f"{where} is not the end of {owner[0].name}(): line {after[0].lineno} "
                            "follows it (hidden cases run only once the visible ones pass)")
        body = textwrap.dedent("\n".join(lines[begin:end - 1]))
        try:
            region = ast.parse(body)
        except SyntaxError as error:
            problems.append(f"{where} is not whole statements: {error.msg}")
            continue
        calls = 0
        for node in ast.walk(region):
            if isinstance(node, (ast.Assert, ast.Raise)):
                problems.append(f"{where} has an {type(node).__name__.lower()} of its own: put "
                                "the check in the visible test and run it with hidden_cases")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hidden_cases":
                calls += 1
                table = case_table(node.args[1] if len(node.args) > 1 else None, region)
                if table is None or not table.keys:
                    problems.append(f"{where}: hidden_cases needs a dict literal of cases (or "
                                    "a comprehension over one's items())")
                    continue
                for key in table.keys:
                    problem = label_problem(key.value if isinstance(key, ast.Constant) else None)
                    if problem:
                        problems.append(f"{where}: {problem}")
        if not calls:
            problems.append(f"{where} never calls hidden_cases(check, cases)")
    return problems


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_every_graded_test_cell_has_hidden_cases(module):
    """Each graded test ends with hidden cases run by hidden_cases, labelled by kind only."""
    problems = []
    for cell in read_cells(module.source):
        if cell.is_graded:
            problems += [f"{cell.grade_id}: {p}" for p in region_problems(cell)]
        elif HIDDEN_BEGIN in cell.source or HIDDEN_END in cell.source:
            problems.append(f"{cell.grade_id}: hidden test markers outside a graded test cell "
                            "(nbgrader's generate_assignment refuses them)")
    assert not problems, f"{module.dirname}:\n  " + "\n  ".join(problems)


def test_region_rules_catch_what_they_are_for():
    """The region check fails a region that asserts, a label with a value, and a missing one."""
    good = ("def test_unit_x():\n    check(1)\n    ### BEGIN HIDDEN TESTS\n"
            "    hidden_cases(check, {'a negative number': -2.5})\n    ### END HIDDEN TESTS\n\n\n"
            "test_unit_x()\n")

    class Cell:
        def __init__(self, source):
            self.source = source

    assert region_problems(Cell(good)) == []
    assert region_problems(Cell(good.replace("a negative number", "x = -2.5")))
    assert region_problems(Cell(good.replace("a negative number", "float32 input"))) == []
    assert region_problems(Cell(good.replace("    hidden_cases", "    assert f(3), 'no'\n"
                                             "    hidden_cases")))
    assert region_problems(Cell(good.replace("    ### END HIDDEN TESTS\n",
                                             "    ### END HIDDEN TESTS\n    check(2)\n")))
    assert region_problems(Cell(good.replace("### BEGIN HIDDEN TESTS", "").replace(
        "### END HIDDEN TESTS", ""))) == ["no hidden test region"]


def hidden_lines(modules=WRITTEN) -> dict[str, str]:
    """Lines inside hidden regions (stripped, 8 characters or more) that no lesson shows
    outside one, each with the lesson and cell it comes from: what must never be shown."""
    public, secret = set(), {}
    for m in modules:
        for cell in read_cells(m.source):
            kept, dropped = partition_hidden(cell.source)
            public |= {line.strip() for line in kept}
            for line in dropped:
                if HIDDEN_BEGIN not in line and HIDDEN_END not in line:
                    secret.setdefault(line.strip(), f"{m.dirname} {cell.grade_id}")
    return {line: where for line, where in secret.items() if len(line) >= 8 and line not in public}


def hidden_labels(modules=WRITTEN) -> dict[str, str]:
    """The labels of every hidden case, each with where it is."""
    labels = {}
    for m in modules:
        for cell in read_cells(m.source):
            lines = cell.source.split("\n")
            for begin, end in regions(cell.source) if cell.is_graded else []:
                region = ast.parse(textwrap.dedent("\n".join(lines[begin:end - 1])))
                for node in ast.walk(region):
                    if (isinstance(node, ast.Call)
                            and getattr(node.func, "id", None) == "hidden_cases"):
                        table = case_table(node.args[1], region)
                        for key in table.keys if table is not None else []:
                            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                                labels.setdefault(key.value, f"{m.dirname} {cell.grade_id}")
    return labels


def shown_hidden(text: str, secret: dict[str, str]) -> list[str]:
    """The hidden lines that ``text`` shows (as lines of it, indentation ignored)."""
    shown = {line.strip() for line in text.splitlines()}
    return sorted(f"{line!r} ({where})" for line, where in secret.items() if line in shown)


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_the_release_has_no_hidden_case_and_still_passes_the_integrity_check(module, released):
    """The released notebook holds no hidden line, and tito's release check agrees with it."""
    from tito.student.integrity import compare_with_authority, lesson_authority, verify_release

    notebook = nbformat.read(released[module.number], as_version=4)
    text = nbformat.writes(notebook)
    assert HIDDEN_BEGIN not in text and HIDDEN_END not in text
    leaked = shown_hidden("\n".join(c.source for c in notebook.cells), hidden_lines([module]))
    assert not leaked, f"hidden test lines in the release of {module.dirname}: {leaked[:5]}"
    # each locked cell is the lesson's, hidden lines removed: what `complete` checks
    cells = {c.grade_id: c for c in read_cells(released[module.number])}
    for cell in read_cells(module.source):
        if cell.is_graded:
            assert cells[cell.grade_id].source == without_hidden_tests(cell.source).strip("\n") \
                or cells[cell.grade_id].source.strip() == without_hidden_tests(cell.source).strip()
    verify_release(notebook, str(released[module.number]))
    compare_with_authority(read_cells(released[module.number]), lesson_authority(module.source),
                           str(released[module.number]))


# ---- the helper that runs them ------------------------------------------------------------------
def test_hidden_cases_reports_the_label_and_never_the_inputs():
    """A failing hidden case names its label and error kind; its inputs and message do not show."""
    from tinytorch.testing import hidden_cases

    def check(x, want):
        assert np.allclose(x * 2, want), f"2 * {x} gave {x * 2}, expected {want}"

    hidden_cases(check, {"a small number": (1.5, 3.0), "zero": (0.0, 0.0)})
    with pytest.raises(AssertionError) as info:
        hidden_cases(check, {"a small number": (1.5, 3.0), "a large number": (12345.678, 1.0)})
    text = str(info.value)
    assert "hidden case 'a large number' failed with AssertionError" in text
    assert "12345" not in text and "expected" not in text
    assert info.value.__context__ is None and info.value.__cause__ is None, (
        "the original error (whose message may show the inputs) must not travel with it")
    with pytest.raises(AssertionError, match="'a string' failed with TypeError"):
        hidden_cases(lambda x: x + 1, {"a string": "7"})


def test_hidden_cases_lets_an_unwritten_solution_through_and_refuses_an_empty_table():
    """NotImplementedError (the stub) passes through as it is; no cases at all is an error."""
    from tinytorch.testing import hidden_cases

    def stub(x):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        hidden_cases(stub, {"anything": 1})
    with pytest.raises(ValueError, match="at least one case"):
        hidden_cases(stub, {})


def test_nbgrader_and_tito_drop_the_same_lines():
    """tito's reading of hidden regions is nbgrader's own ClearHiddenTests, line for line."""
    from nbformat.v4 import new_code_cell
    from nbgrader.preprocessors import ClearHiddenTests

    source = ("def test_unit_x():\n    check(1)\n    ### BEGIN HIDDEN TESTS\n    check(2)\n"
              "    ### END HIDDEN TESTS\n# a note, END HIDDEN TESTS in words\n\ntest_unit_x()")
    cell = new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": "t",
                                                        "points": 1, "solution": False}})
    ClearHiddenTests().preprocess_cell(cell, {}, 0)
    assert cell.source == without_hidden_tests(source)
    assert "check(2)" not in cell.source and "a note" not in cell.source


def test_module_01_tells_the_student_about_the_hidden_cases(released):
    """The release says that the instructor's grade runs cases `complete` does not."""
    text = json.dumps(nbformat.read(released[1], as_version=4).cells)
    assert "instructor's grade" in text and "hidden_cases" in text


# ---- hard-coded solutions: `complete` passes them, the instructor's grade does not ---------
# Each planted solution is the reference with a few lines rewritten to fit the visible cases
# only: the kind of code that passes every test a student can see. (cell, old, new, the test
# whose hidden cases catch it). The reference cells are read from the lesson, so these snippets
# must exist in it (checked: the test says which no longer applies).
FITTED = {
    1: [("tensor-class", 'got shape {self.shape} "', 'got shape (2,) "',
         "test_unit_tensor_creation"),
        ("matmul", "        return np.matmul(a, b)\n",
         "        return np.matmul(a, b) if b.ndim < 3 else np.matmul(a, b[0])\n",
         "test_unit_matmul"),
        ("reductions", "return np.mean(a, axis=axis, keepdims=keepdims)",
         "return (np.mean(a, axis=axis, keepdims=keepdims) if a.ndim == 3 else "
         "np.median(a, axis=axis, keepdims=keepdims))", "test_unit_reductions")],
    2: [("relu-op", "return np.maximum(x, x.dtype.type(0))",
         "return np.maximum(x, x.dtype.type(0)) if x.ndim < 3 else x", "test_unit_relu"),
        ("softmax-op", "out = x - np.max(x, axis=axis, keepdims=True)",
         "axis = axis if x.ndim < 4 else -1\n        out = x - np.max(x, axis=axis, keepdims=True)",
         "test_unit_softmax")],
    6: [("elementwise-rules", 'e = a.dtype.type(ctx.params["exponent"])', "e = a.dtype.type(3)",
         "test_unit_elementwise_rules"),
        ("reduction-rules", "return (mask * (grad / count),)",
         "return (mask * (grad / (2 if mask.sum() > out.size else 1)),)",
         "test_unit_reduction_rules")],
    # module 13: an eps fixed at its default, a norm chosen by the MLP's kind (the visible
    # configs pair layernorm with gelu and rmsnorm with swiglu), and a top-p cumulative sum
    # over the whole batch (the visible logits are one row)
    13: [("layernorm-op", "var += dtype(eps)", "var += dtype(1e-5)", "test_unit_layer_norm"),
         ("param-count", 'norm = c if config.norm == "rmsnorm" else c * (1 + b)',
          'norm = c if config.mlp == "swiglu" else c * (1 + b)', "test_unit_param_count"),
         ("generate", "before = np.cumsum(sorted_probs, axis=-1) - sorted_probs",
          "before = np.cumsum(sorted_probs).reshape(sorted_probs.shape) - sorted_probs",
          "test_unit_sampling")],
}


def _reference_cells(module):
    return {c.grade_id: c.source for c in read_cells(module.source) if c.nbgrader.get("solution")}


def fitted_notebook(release, module, plants=()):
    """The release with the reference solution pasted in, then `plants` rewritten in it."""
    notebook = nbformat.read(release, as_version=4)
    reference = _reference_cells(module)
    for cell in notebook.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in reference:
            cell.source = reference[gid]
    for gid, old, new, _ in plants:
        cell = next((c for c in notebook.cells
                     if c.metadata.get("nbgrader", {}).get("grade_id") == gid), None)
        assert cell is not None and old in cell.source, (
            f"the planted change {old!r} no longer applies to {module.dirname}'s cell {gid}: "
            "update FITTED to the lesson")
        cell.source = cell.source.replace(old, new, 1)
    return notebook


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """One course; modules 01, 02, 06 and 13 each graded once over a class of two: `honest`
    (the reference) and `fitted` (the planted solution). Then feedback for everyone."""
    from conftest import run_tito
    from tito.course.registry import get_module
    from tito.grading import sandbox
    from tito.grading.course import Course

    base = tmp_path_factory.mktemp("hidden-grading")
    course = base / "course"
    out = {"course": course, "runs": {}}
    assert run_tito("nbgrader", "init", "course", cwd=base).returncode == 0
    unsafe = [] if sandbox.unavailable() is None else ["--unsafe"]
    for number in FITTED:
        m = get_module(number)
        for step in (("generate", m.key), ("release", m.key)):
            done = run_tito("nbgrader", *step, cwd=course)
            assert done.returncode == 0, done.stdout + done.stderr
        release = course / "release" / m.dirname / f"{m.slug}.ipynb"
        subs = base / f"in-{m.key}"
        for student, plants in (("honest", ()), ("fitted", FITTED[number])):
            (subs / student).mkdir(parents=True)
            nbformat.write(fitted_notebook(release, m, plants), subs / student / f"{m.slug}.ipynb")
        done = run_tito("nbgrader", "collect", m.key, *(str(p) for p in sorted(subs.iterdir())),
                        cwd=course)
        assert done.returncode == 0, done.stdout + done.stderr
        out["runs"][number] = run_tito("nbgrader", "autograde", m.key, "--timeout", "60",
                                       *unsafe, cwd=course, timeout=1800)
        out[f"feedback{number}"] = run_tito("nbgrader", "feedback", m.key, cwd=course)
    with Course(course).gradebook() as gb:
        out["scores"] = {
            (number, s): {g.name: (g.score, g.max_score)
                          for g in gb.find_submission_notebook(get_module(number).slug,
                                                               get_module(number).dirname,
                                                               s).grades}
            for number in FITTED for s in ("honest", "fitted")}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("number", sorted(FITTED))
def test_a_fitted_solution_passes_complete_and_loses_marks_in_the_grade(number, graded_class,
                                                                         tmp_path):
    """A solution fitted to the visible cases passes every test `complete` runs, and loses
    exactly the points of the tests whose hidden cases it fails in nbgrader's autograde."""
    from tito.course.registry import COURSE_ROOT, get_module
    from tito.student.runner import run_student

    m = get_module(number)
    course = graded_class["course"]
    run = graded_class["runs"][number]
    assert run.returncode == 0, run.stdout + run.stderr
    # both solutions are honest work: neither is flagged (module 13's reference once was, for
    # writing its checkpoint to a temporary folder)
    assert "flagged" not in run.stdout, run.stdout
    # what `tito module complete` runs: the release's locked cells, the student's own cells
    local = run_student(course / "submitted" / "fitted" / m.dirname / f"{m.slug}.ipynb",
                        course / "release" / m.dirname / f"{m.slug}.ipynb", COURSE_ROOT)
    assert local.ok and not local.failed, [r.explain() for r in local.failed]
    points = {c.grade_id: c.points for c in read_cells(m.source) if c.is_graded}
    honest = graded_class["scores"][(number, "honest")]
    assert {k: s for k, (s, _) in honest.items()} == points, honest
    fitted = graded_class["scores"][(number, "fitted")]
    lost = {k for k, (s, top) in fitted.items() if s < top}
    assert lost == {p[3] for p in FITTED[number]}, fitted
    total = sum(points.values())
    got = sum(s for s, _ in fitted.values())
    assert got < total, f"the fitted solution of {m.dirname} scored {got}/{total}"


@pytest.mark.slow
@pytest.mark.parametrize("number", sorted(FITTED))
def test_the_graded_notebook_names_a_failed_hidden_case_by_its_label_only(number, graded_class):
    """In the autograded notebook a failed hidden case shows its label and nothing it ran on."""
    from tito.course.registry import get_module

    m = get_module(number)
    notebook = nbformat.read(graded_class["course"] / "autograded" / "fitted" / m.dirname /
                             f"{m.slug}.ipynb", as_version=4)
    secret = hidden_lines([m])
    failed = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                failed[cell.metadata.get("nbgrader", {}).get("grade_id")] = output["evalue"]
    for _, _, _, test in FITTED[number]:
        assert failed.get(test, "").startswith("hidden case '"), failed.get(test)
        shown = [line for line in secret if line in failed[test]]
        assert not shown, f"{test}'s message shows hidden lines: {shown}"


@pytest.mark.slow
@pytest.mark.parametrize("number", sorted(FITTED))
def test_feedback_shows_no_hidden_line(number, graded_class):
    """nbgrader's feedback HTML, what the student receives, holds no line of a hidden case."""
    import html

    from tito.course.registry import get_module

    m = get_module(number)
    done = graded_class[f"feedback{number}"]
    assert done.returncode == 0, done.stdout + done.stderr
    # a hidden line that a visible line contains (`h = x * w` in `h = x * w  # a diamond`)
    # is shown by that line: it is no secret
    visible = "\n".join(without_hidden_tests(c.source) for lesson in WRITTEN
                         for c in read_cells(lesson.source))
    secret = [line for line in hidden_lines([m]) if line not in visible]
    for student in ("honest", "fitted"):
        page = html.unescape((graded_class["course"] / "feedback" / student / m.dirname /
                              f"{m.slug}.html").read_text())
        text = re.sub(r"<[^>]+>", "", page)
        shown = [line for line in secret if line in text]
        assert not shown, f"{student}'s feedback for {m.dirname} shows hidden lines: {shown[:3]}"


@pytest.mark.slow
def test_honest_students_are_not_flagged_for_edited_tests(graded_class):
    """A submission whose test cells are the release's is not reported as having edited them,
    although the restored cells (with their hidden cases) differ from what it holds."""
    for number, run in graded_class["runs"].items():
        text = " ".join((run.stdout + run.stderr).split())
        assert "was edited" not in text, f"module {number}: {text[:3000]}"


# ---- the site and `tito module complete` -------------------------------------------------------
@pytest.mark.slow
def test_the_site_shows_no_hidden_case():
    """No page `tito site build` writes shows a hidden line or a hidden case's label, and no
    recorded failure ("When it fails") comes from a hidden case."""
    from tito.site.build import generate
    from tito.site.failures import recorded

    secret, labels = hidden_lines(), hidden_labels()
    assert secret and labels
    for path, page in generate().items():
        shown = [line for line in secret if line in page]
        assert not shown, f"site/{path} shows hidden lines: {shown[:3]}"
        quoted = [label for label in labels if f"'{label}'" in page or f'"{label}"' in page]
        assert not quoted, f"site/{path} shows hidden case labels: {quoted[:3]}"
    for m in WRITTEN:
        for result in recorded(m).values():
            message = result.get("message", "")
            assert not message.startswith("hidden case"), (
                f"the page of {m.dirname} would show a hidden case's failure: {message[:200]} "
                "(choose a planted mistake that a visible case catches)")
            assert not [line for line in secret if line in message], message[:200]


@pytest.mark.slow
def test_complete_runs_no_hidden_case_and_shows_none(tmp_path):
    """In a workspace, the fitted module-01 solution completes (the visible cases pass), and
    neither that run nor a failing one prints a hidden line or label."""
    from conftest import run_tito
    from tito.course.registry import get_module

    m = get_module(1)
    ws = tmp_path / "ws"
    assert run_tito("init", str(ws), cwd=tmp_path).returncode == 0
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    path = ws / m.notebook_relpath
    release = ws / ".tito" / "release" / f"{m.dirname}.ipynb"
    secret, labels = hidden_lines([m]), hidden_labels([m])

    def shows(text):
        return [s for s in secret if s in text] + [f"label {x!r}" for x in labels
                                                    if f"'{x}'" in text]

    nbformat.write(fitted_notebook(release, m, FITTED[1]), path)
    done = run_tito("module", "complete", "01", cwd=ws)
    n = sum(c.is_graded for c in read_cells(m.source))
    assert done.returncode == 0 and f"{n} tests: {n} passed" in done.stdout, done.stdout
    assert not shows(done.stdout + done.stderr)
    nbformat.write(fitted_notebook(release, m, [("elementwise", "return a + b\n",
                                                 "return a - b\n", "")]), path)
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 1 and "test_unit_arithmetic" in done.stdout, done.stdout
    assert "hidden case" not in done.stdout and not shows(done.stdout + done.stderr)


# ---- the cross-module leak check (run on the student build in test_student_build.py) -----------
def test_the_leak_check_names_the_cell_the_module_and_the_solution(released, tmp_path):
    """A solution block pasted (re-indented, re-spaced, commented) into another module's given
    cell is found and named; the same lines in a solution cell's frame, or prose, are not."""
    from cross_leaks import cross_leaks, solution_blocks
    from tito.course.registry import get_module

    block = max(solution_blocks(get_module(6)), key=lambda b: len(b.lines))
    pasted = [f"  {block.shown[line].replace(' ', '  ')}  # copied" for line in block.lines]
    notebook = nbformat.read(released[2], as_version=4)
    target = next(c for c in notebook.cells if c.cell_type == "code"
                  and not c.metadata.get("nbgrader", {}).get("solution")
                  and c.metadata.get("nbgrader", {}).get("grade_id"))
    target.source += "\n" + "\n".join(pasted)
    modules = [get_module(2), get_module(6)]
    releases = {2: tmp_path / "02.ipynb", 6: released[6]}
    nbformat.write(notebook, releases[2])
    found = [str(leak) for leak in cross_leaks(modules, releases)
             if leak.released.startswith("module 02 ")]
    gid = target.metadata["nbgrader"]["grade_id"]
    assert any(f"cell '{gid}'" in f and f"module 06's solution cell '{block.cell}'" in f
               for f in found), found
    target.source = target.source.split("\n" + pasted[0])[0]  # back to the release
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") or cell.cell_type == "markdown":
            cell.source += "\n" + "\n".join(pasted)
    nbformat.write(notebook, releases[2])
    assert not [leak for leak in cross_leaks(modules, releases)
                if leak.released.startswith("module 02 ")]


def test_the_sites_released_notebooks_are_current_with_hidden_cases(released, tmp_path):
    """`tito site build --check` compares the site's released notebooks with the lessons: a
    notebook nbgrader just released (hidden cases removed) is current, an older one is not."""
    from tito.site.build import notebook_problems
    from tito.site.links import notebook_file

    for m in WRITTEN:
        path = tmp_path / notebook_file(m)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nbformat.writes(nbformat.read(released[m.number], as_version=4)))
    assert notebook_problems(tmp_path) == []
    stale = nbformat.read(released[1], as_version=4)
    test = next(c for c in stale.cells if c.metadata.get("nbgrader", {}).get("grade"))
    test.source += "\n# an older line"
    (tmp_path / notebook_file(WRITTEN[0])).write_text(nbformat.writes(stale))
    assert [p for p in notebook_problems(tmp_path) if "older than its lesson" in p]
