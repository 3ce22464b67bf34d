"""Messages that point at the right code (issue #23 §3).

- Wrong blame: a mistake inside an op's forward (matmul's output reshape) is reported at its
  own line, not as "cannot combine shapes" for shapes that fit; a wrong `unbroadcast` is
  reported as unbroadcast's, not as a derivative rule's.
- Glitches: rich markup printed literally, a stray leading colon, given demo cells called
  "your cell", cell numbers counted from 0 (Jupyter shows none), and the tests after a
  refusal shown as passed.

Fast ones run the real driver on a few cells; the two lesson runs plant a mistake in a copy
of the reference lesson, as `tito site failures` does, and run it as `complete` runs it.
"""

from __future__ import annotations

import re

import nbformat
import numpy as np
import pytest
from conftest import REPO

from tito.commands import module as module_command
from tito.course.notebook import Cell, load_notebook
from tito.course.registry import COURSE_ROOT, get_module
from tito.student.plan import plan_cells
from tito.student.results import CellResult, RunReport
from tito.student.runner import run_cells, run_notebook
from tinytorch.core.tensor import Function, ShapeError, Tensor


def flat(text: str) -> str:
    return " ".join(text.split())


def printed(*results: CellResult, report: RunReport | None = None) -> str:
    """What `tito module complete` prints for these results (and the summary of ``report``)."""
    console = module_command.console
    width = console.width
    console.width = 400  # one line per message: nothing folded inside a quoted line of code
    try:
        with console.capture() as captured:
            for r in results:
                module_command._print_result(r)
            if report is not None:
                module_command._print_summary(report, "your notebook")
    finally:
        console.width = width
    return flat(captured.get())


def cell(index, source, origin="yours", **meta):
    return Cell(index, "code", source, meta, origin=origin)


GIVEN = "import numpy as np\nfrom tinytorch.core.tensor import Tensor, Function, ShapeError\n"
TEST = """def test_unit_product():
    a = Tensor(np.ones((2, 4, 3), dtype=np.float32))
    b = Tensor(np.ones((3, 5), dtype=np.float32))
    got = Product.apply(a, b)
    assert got.shape == (2, 4, 5), f"got {got.shape}"


test_unit_product()
"""


def graded(index, source, gid):
    return cell(index, source, "release", grade=True, points=1, locked=True, grade_id=gid)


# ---- wrong blame: an op's forward ---------------------------------------------------------------
def product(body):
    """A Function whose forward is ``body`` (on arrays a, b)."""
    namespace = {"np": np, "Function": Function}
    exec("class Product(Function):\n    @staticmethod\n    def forward(a, b):\n"
         f"        return {body}\n", namespace)
    return namespace["Product"]


OFF_BY_ONE = "np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-2], b.shape[1])"


def test_a_mistake_inside_forward_is_not_called_a_shape_clash():
    """A wrong reshape inside forward, on inputs that fit, raises its own error, not ShapeError."""
    ones = [Tensor(np.ones(s, dtype=np.float32)) for s in ((2, 4, 3), (3, 5))]
    for body in (OFF_BY_ONE,  # "cannot reshape array of size 40 into shape (2,5)"
                 "np.matmul(a.reshape(-1, 4), b)",  # a core-dimension error, on arrays of forward's
                 "np.matmul(a, b) + np.ones(4, a.dtype)"):  # a broadcast of forward's own arrays
        with pytest.raises(ValueError) as caught:
            product(body).apply(*ones)
        assert not isinstance(caught.value, ShapeError), (
            f"forward `{body}` on (2, 4, 3) and (3, 5), which fit, was reported as "
            f"{caught.value}: the mistake is inside forward, and its own error must show")


@pytest.mark.parametrize("shapes, body", [
    (((2, 3), (4,)), "a + b"),
    (((4, 3), (4, 3)), "np.matmul(a, b)"),  # the inner sizes differ
    (((2, 3, 4), (5, 4, 2)), "np.matmul(a, b)"),  # batch axes 2 and 5
    (((3,), (4,)), "np.matmul(a, b)"),
])
def test_inputs_that_do_not_fit_still_get_a_shape_error_naming_both(shapes, body):
    """Inputs whose shapes cannot be combined still give a ShapeError naming both shapes."""
    tensors = [Tensor(np.ones(s, dtype=np.float32)) for s in shapes]
    with pytest.raises(ShapeError) as caught:
        product(body).apply(*tensors)
    assert all(str(s) in str(caught.value) for s in shapes), str(caught.value)


def test_the_where_names_the_method_and_its_line_not_a_cell_number(tmp_path):
    """The error's place reads `in Product.forward, cell 'product', line N: code`."""
    student = ("class Product(Function):\n    @staticmethod\n    def forward(a, b):\n"
               f"        return {OFF_BY_ONE}\n")
    plan = [cell(0, GIVEN, "release", grade_id="imports", locked=True),
            cell(1, student, solution=True, grade_id="product"),
            graded(2, TEST, "test_unit_product")]
    report = run_cells(plan, REPO, tmp_path, timeout=60)
    text = report.cells[2].explain()
    assert "cannot combine shapes" not in text, text
    assert text.startswith("ValueError: cannot reshape array of size 40 into shape (2,5)"), text
    assert "(in Product.forward, cell 'product', line 4: `return np.matmul(" in text, text
    assert not re.search(r"cell \d", text), f"Jupyter numbers no cell: {text}"


# ---- wrong blame: unbroadcast, in the lesson ------------------------------------------------------
def run_planted(number, grade_id, old, new, tmp_path):
    """The reference lesson with ``old`` -> ``new`` in cell ``grade_id``, run as complete runs it."""
    m = get_module(number)
    nb = load_notebook(m.source)
    planted = 0
    for c in nb.cells:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            planted += c.source.count(old)
            c.source = c.source.replace(old, new)
    assert planted == 1, f"{old!r} is not once in {m.dirname}'s cell {grade_id}"
    path = tmp_path / f"{m.slug}.ipynb"
    nbformat.write(nbformat.from_dict(nb), path)
    report = run_notebook(path, COURSE_ROOT, timeout=120)
    return {r.cell.grade_id: r for r in report.tests}


@pytest.mark.slow
def test_a_wrong_unbroadcast_is_blamed_not_the_rules(tmp_path):
    """unbroadcast without keepdims: its own test and the tests through backward name it."""
    results = run_planted(6, "unbroadcast", "grad.sum(axis=stretched, keepdims=True)",
                          "grad.sum(axis=stretched)", tmp_path)
    own = results["test_unit_unbroadcast"]
    assert not own.passed and "does sum to (4, 1)" in own.explain(), own.explain()
    assert "in unbroadcast, cell 'unbroadcast'" in own.explain(), own.explain()
    for test in ("test_unit_broadcast_backward", "test_unit_matmul_rule"):
        text = results[test].explain()
        assert not results[test].passed, test
        assert "derivative rule of" not in text and "Check Mul" not in text, text
        assert f"{test} builds on your unbroadcast, which is wrong" in text, text
        assert "in unbroadcast, cell 'unbroadcast'" in text, text
    assert results["test_unit_chain_rule"].passed, "a test that needs no broadcasting still passes"


@pytest.mark.slow
def test_an_off_by_one_in_matmuls_reshape_is_shown_at_its_line(tmp_path):
    """Module 01's MatMul with a wrong output reshape: the reshape's error, at its line."""
    results = run_planted(1, "matmul", "reshape(*a.shape[:-1], b.shape[1])",
                          "reshape(*a.shape[:-2], b.shape[1])", tmp_path)
    text = results["test_unit_matmul"].explain()
    assert "cannot combine shapes" not in text, text
    assert "cannot reshape array" in text and "in MatMul.forward, cell 'matmul'" in text, text


# ---- glitches -------------------------------------------------------------------------------------
def test_notes_are_printed_without_markup():
    """A note reads `note: ...`, never the literal `[yellow]note:[/]`."""
    report = RunReport(cells=[CellResult(graded(0, "pass", "test_unit_x"), "passed")],
                       notes=["test_unit_x was edited in your notebook; the original test was run"])
    text = printed(report=report)
    assert "[yellow]" not in text and "[/]" not in text, text
    assert "note: test_unit_x was edited in your notebook" in text, text


def test_a_process_that_ended_has_no_stray_colon():
    """A cell where the test process ended says so, without an empty error name before it."""
    r = CellResult(graded(0, "pass", "test_unit_x"), "failed",
                   message="the test process ended in this cell (os._exit, a crash, or the "
                           "memory ran out): nothing after it ran")
    assert r.explain().startswith("the test process ended in this cell"), r.explain()
    assert not printed(r).split("test_unit_x (1 pts)")[1].lstrip().startswith(":")


RELEASE = [
    cell(0, GIVEN, "", grade_id="imports", locked=True),
    cell(1, "def double(x):\n    raise NotImplementedError()\n", "", solution=True,
         grade_id="double", locked=False),
    cell(2, "def report():\n    assert double(2) == 4\n\n\nreport()\n", ""),  # a demo
    graded(3, "assert double(3) == 6, 'double(3)'\n", "test_unit_double"),
]


def test_a_given_demo_cell_is_the_lessons_and_named_by_its_first_line(tmp_path):
    """A demo cell of the lesson that raises is "the lesson's cell ... that starts `...`",
    a cell the student added is "your cell ...", and neither is called by a number."""
    student = [cell(0, GIVEN, "", grade_id="imports", locked=True),
               cell(1, "def double(x):\n    return x + 1\n", "", solution=True,
                    grade_id="double", locked=False),
               cell(2, RELEASE[2].source, ""),
               cell(3, "print(double(5))\nassert double(5) == 10\n", ""),
               RELEASE[3]]
    plan, _, _, _ = plan_cells(student, RELEASE)
    assert [c.origin for c in plan] == ["release", "yours", "given", "yours", "release"]
    report = run_cells(plan, REPO, tmp_path, timeout=60)
    demo, mine = report.cells[2], report.cells[3]
    text = printed(demo, mine)
    assert "the lesson's cell after 'double' that starts `def report():` raised" in text, text
    assert "(in report, this cell, line 2: `assert double(2) == 4`)" in text, text
    assert "your cell after 'double' that starts `print(double(5))` raised" in text, text
    assert "cell-" not in text and not re.search(r"cell \d", text), text


def test_the_tests_after_a_refusal_are_not_shown_as_passed(tmp_path):
    """After the guard refuses a cell, the tests after it are "not counted", never ✓, and the
    summary says so instead of "N passed, 0 failed ... Fix the failures above"."""
    plan = [cell(0, GIVEN, "release", grade_id="imports", locked=True),
            cell(1, "def double(x):\n    return 2 * x\n\n\nnp.allclose = lambda *a, **k: True\n",
                 solution=True, grade_id="double"),
            graded(2, "assert double(3) == 6, 'double(3)'\n", "test_unit_double"),
            graded(3, "assert np.allclose(double(1), 2)\n", "test_unit_close")]
    report = run_cells(plan, REPO, tmp_path, timeout=60)
    assert report.integrity_errors and not report.ok
    assert report.passed == [] and len(report.not_counted) == 2
    assert report.points() == (0, 2)
    text = printed(*report.cells, report=report)
    assert "✓" not in text, text
    assert "✗ your cell 'double' was refused: not allowed: it replaced numpy.allclose" in text, text
    assert "test_unit_double (1 pts) not counted: it ran after cell 'double' was refused" in text
    assert "2 tests: 0 passed, 0 failed, 2 not counted · 0/2 points" in text, text
    assert "Refused: your cell 'double' did what graded code may not" in text, text
