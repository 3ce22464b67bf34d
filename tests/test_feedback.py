"""The feedback a student receives after `tito nbgrader autograde` (tito/grading/reports.py):
no hidden test case in it, and math that shows without the network.

Fast: the feedback's preprocessing on small notebooks; the whole of `tito nbgrader feedback`
on graded submissions is checked in tests/test_hidden_tests.py.
"""

from __future__ import annotations

import re

import nbformat

from tito.grading.nbgrader_app import BoundedFeedback, HiddenTestsLeftOut, mathml
from tito.grading.reports import HIDDEN_NOTE, hide_hidden_tests

TEST_CELL = '''def test_unit_double():
    """double() doubles."""

    def check(x, want):
        assert double(x) == want, f"double({x}) gave {double(x)}"

    check(2, 4)
    ### BEGIN HIDDEN TESTS
    hidden_cases(check, {
        "a negative number": (-3.5, -7.0),
        "a large number": (1e30, 2e30),
    })
    ### END HIDDEN TESTS


test_unit_double()
'''
SECRET = ['hidden_cases(check, {', '"a negative number": (-3.5, -7.0),',
          '"a large number": (1e30, 2e30),', "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"]


def ipython_traceback():
    """An error output as IPython writes it for a failed hidden case: ANSI colours, the
    failing line with an arrow and the lines around it."""
    red, green, reset = "\x1b[0;31m", "\x1b[0;32m", "\x1b[0m"
    frame = "\n".join([
        f"Cell {green}In[7], line 9{reset}, in {green}test_unit_double{reset}()",
        f"{green}      7{reset} check(2, 4)",
        f"{green}      8{reset} ### BEGIN HIDDEN TESTS",
        f"{red}----> 9{reset} hidden_cases(check, {{",
        f"{green}     10{reset}     \"a negative number\": (-3.5, -7.0),",
        f"{green}     11{reset}     \"a large number\": (1e30, 2e30),",
    ])
    return nbformat.v4.new_output(
        "error", ename="AssertionError",
        evalue="hidden case 'a negative number' failed with AssertionError: your code passes",
        traceback=[f"{red}AssertionError{reset}  Traceback (most recent call last)", frame,
                   f"{red}AssertionError{reset}: hidden case 'a negative number' failed"])


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_hidden_cases_are_left_out_of_the_source_and_the_traceback():
    """A test cell's hidden region and the traceback lines that quote it are left out; the
    visible test, the error's name and its label stay."""
    cell = nbformat.v4.new_code_cell(TEST_CELL)
    cell.outputs = [ipython_traceback()]
    assert hide_hidden_tests(cell)
    traceback = plain("\n".join(cell.outputs[0].traceback))
    for line in SECRET:
        assert line not in cell.source, f"the source still shows {line!r}:\n{cell.source}"
        assert line not in traceback, f"the traceback still shows {line!r}:\n{traceback}"
    assert HIDDEN_NOTE in cell.source and "check(2, 4)" in cell.source
    assert "test_unit_double()" in cell.source.splitlines()[-1]
    assert "check(2, 4)" in traceback and "hidden case 'a negative number' failed" in traceback
    assert cell.outputs[0].evalue.startswith("hidden case 'a negative number' failed")


def test_a_cell_without_hidden_cases_is_left_as_it_is():
    """Only cells with a hidden region change."""
    cell = nbformat.v4.new_code_cell("def test_unit_x():\n    assert True\n")
    cell.outputs = [ipython_traceback()]
    before = dict(cell)
    assert not hide_hidden_tests(cell)
    assert cell == before


def test_the_feedback_preprocessor_runs_it_on_every_cell():
    """nbgrader's generate_feedback runs HiddenTestsLeftOut (tito's configuration of it)."""
    from tito.grading.nbgrader_app import tito_config

    assert HiddenTestsLeftOut in tito_config().GenerateFeedback.preprocessors
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TEST_CELL)])
    nb, _ = HiddenTestsLeftOut().preprocess(nb, {})
    assert "BEGIN HIDDEN TESTS" not in nb.cells[0].source


MATH = r"The chain rule: $\frac{\partial L}{\partial x} = \sum_i g_i w_i$, and $$y = W x + b$$"


def test_math_is_mathml_in_the_feedback_html():
    """Math in the feedback is MathML in the HTML nbconvert writes, so it shows without
    MathJax, which needs the network: latex2mathml is a dependency of the package."""
    from importlib.metadata import requires

    declared = [r for r in requires("tinytorch") or [] if "extra ==" not in r]
    assert any(r.startswith("latex2mathml") for r in declared), (
        f"latex2mathml is not a runtime dependency of tinytorch: {declared}")
    assert "<mfrac>" in mathml(r"$\frac{a}{b}$")
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(MATH)])
    nb, _ = BoundedFeedback().preprocess(nb, {})
    html, _ = HTMLExporter().from_notebook_node(nb)
    body = html[html.index("<body"):]
    assert body.count("<math") == 2 and "<mfrac>" in body and "<msub>" in body, body[:2000]
    assert r"\frac" not in body and "$$" not in body
