"""`tito init --force` after the course changed: a handed-out notebook takes the new release's
given cells when the student changed only their solution cells, and is left alone (with the
reason) otherwise. The student's solution cells are never lost."""

from __future__ import annotations

import copy

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tito.student.refresh import code_changed, refresh_notebook


def cell(kind, source, grade_id=None, solution=False):
    made = new_code_cell(source) if kind == "code" else new_markdown_cell(source)
    if grade_id:
        made.metadata["nbgrader"] = {"grade_id": grade_id, "solution": solution,
                                     "locked": not solution, "grade": False}
    return made


def release(given="import numpy as np", text="# Lesson", stub="raise NotImplementedError()",
            extra=()):
    return new_notebook(cells=[
        cell("markdown", text),
        cell("code", given, "imports"),
        cell("code", f"def add(a, b):\n    {stub}", "add", solution=True),
        *extra,
        cell("code", "assert add(1, 2) == 3", "test-add"),
    ])


def handed_out(old, solution="def add(a, b):\n    return a + b"):
    student = copy.deepcopy(old)
    student.metadata["kernelspec"] = {"name": "tinytorch-abc", "display_name": "TinyTorch"}
    student.cells[2].source = solution
    student.cells[2].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    return student


def test_a_notebook_with_only_solutions_changed_takes_the_new_given_cells():
    old, new = release(), release(given="import numpy as np\nimport math", text="# Lesson, v2")
    updated, why = refresh_notebook(handed_out(old), old, new)
    assert why == "" and updated is not None
    assert [c.source for c in updated.cells] == [
        "# Lesson, v2", "import numpy as np\nimport math", "def add(a, b):\n    return a + b",
        "assert add(1, 2) == 3"]
    assert updated.cells[2].outputs[0]["text"] == "ran\n"  # the student's run, kept
    assert updated.metadata["kernelspec"]["name"] == "tinytorch-abc"
    assert code_changed(old, new)


def test_a_new_exercise_arrives_as_its_stub_and_the_old_ones_keep_the_students_code():
    old = release()
    new = release(extra=[cell("code", "def mul(a, b):\n    raise NotImplementedError()", "mul",
                              solution=True)])
    updated, _ = refresh_notebook(handed_out(old), old, new)
    sources = [c.source for c in updated.cells]
    assert "def add(a, b):\n    return a + b" in sources
    assert "def mul(a, b):\n    raise NotImplementedError()" in sources


def test_an_unchanged_release_changes_nothing():
    old = release()
    assert refresh_notebook(handed_out(old), old, release()) == (None, "")


def test_a_cell_the_student_added_or_edited_outside_their_solutions_keeps_the_notebook_as_is():
    old, new = release(), release(given="import numpy as np\nimport math")
    added = handed_out(old)
    added.cells.insert(3, cell("code", "print(add(2, 2))  # my own check"))
    edited = handed_out(old)
    edited.cells[0].source = "# Lesson (my notes: remember broadcasting)"
    for student in (added, edited):
        updated, why = refresh_notebook(student, old, new)
        assert updated is None and "outside your solution cells" in why


def test_an_exercise_dropped_by_the_new_release_while_it_holds_code_is_not_lost():
    old = release()
    new = new_notebook(cells=[cell("markdown", "# Lesson"), cell("code", "import numpy as np",
                                                                 "imports")])
    updated, why = refresh_notebook(handed_out(old), old, new)
    assert updated is None and "add" in why and "holds your code" in why
    # its untouched stub may go: nothing of the student's is in it
    untouched = handed_out(old, solution=old.cells[2].source)
    updated, why = refresh_notebook(untouched, old, new)
    assert why == "" and [c.source for c in updated.cells] == ["# Lesson", "import numpy as np"]
