"""The course pipeline, for every written module: lesson format, reference, release, stubs.

These run over whatever modules exist, so a new lesson is checked without editing this file.
"""

from __future__ import annotations

import nbformat
import pytest

from tito.course.notebook import read_cells
from tito.course.registry import COURSE_ROOT, MODULES, prerequisites, written_modules
from tito.course.solutions import SOLUTION_BEGIN, SOLUTION_END, partition_solution, solution_lines
from tito.student.runner import run_notebook

WRITTEN = written_modules()
IDS = [m.dirname for m in WRITTEN]
REFERENCE_TIMEOUT = 600.0  # seconds for a whole notebook: a guard against a hang, not a speed check
REQUIRED_META = {"grade", "grade_id", "locked", "schema_version", "solution", "task"}


def test_registry_lists_the_twenty_modules_in_order():
    assert [m.number for m in MODULES] == list(range(1, 21))
    assert [m.slug for m in MODULES][:13] == [
        "tensor", "activations", "layers", "losses", "dataloader", "autograd", "optimizers",
        "training", "convolutions", "tokenization", "embeddings", "attention", "transformers",
    ]
    assert set(prerequisites(13)) == set(range(1, 9)) | {10, 11, 12}
    for m in MODULES:
        assert all(p < m.number for p in m.requires), f"{m.key} requires a later module"
    assert len({m.target for m in MODULES}) == len(MODULES)


def test_every_module_folder_is_in_the_registry():
    folders = {p.name for p in (COURSE_ROOT / "modules").iterdir() if p.is_dir()}
    assert folders <= {m.dirname for m in MODULES}, folders - {m.dirname for m in MODULES}


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_lesson_format(module):
    cells = read_cells(module.source)
    text = "\n".join(c.source for c in cells if c.kind == "markdown")
    for heading in ("Overview", "Learning objectives", "What you build",
                    "What you are not building yet", "Systems analysis", "What comes next"):
        assert heading.lower() in text.lower(), f"{module.dirname} lacks a '{heading}' section"
    ids = [c.grade_id for c in cells if c.nbgrader]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {module.dirname}"
    graded = [c for c in cells if c.is_graded]
    assert graded, f"{module.dirname} has no graded tests"
    for c in cells:
        if c.nbgrader:
            assert REQUIRED_META <= set(c.nbgrader), (
                f"cell {c.grade_id} lacks {REQUIRED_META - set(c.nbgrader)}")
            assert c.nbgrader["schema_version"] == 3
        if c.is_graded:
            assert c.nbgrader["locked"] and c.points > 0, f"{c.grade_id} must be locked with points"
        markers = c.source.count(SOLUTION_BEGIN), c.source.count(SOLUTION_END)
        assert markers[0] == markers[1], f"unbalanced solution markers in {c.grade_id}"
        if markers[0]:
            assert c.nbgrader.get("solution"), (
                f"{c.grade_id} has a solution block but solution=false")


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_reference_passes_every_graded_test(module):
    # the run's time limit stops a student's endless loop; here the reference runs beside
    # the suite's other workers on a loaded machine, where a minute's run can take several
    report = run_notebook(module.source, COURSE_ROOT, timeout=REFERENCE_TIMEOUT)
    failures = [f"{r.cell.grade_id}: {r.explain()}" for r in report.failed + report.other_errors]
    assert report.ok and not report.other_errors, "\n".join(failures)


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_release_leaks_no_solution_line(module, released):
    cells = read_cells(module.source)
    # lines that are legitimately visible: everything outside solution blocks
    given = {line.strip() for c in cells for line in partition_solution(c.source)[0]}
    secret = {line.strip() for c in cells for line in solution_lines(c.source)} - given - {""}
    assert secret, f"{module.dirname} has no solution lines to hide"
    notebook = nbformat.read(released[module.number], as_version=4)
    shown = {line.strip() for cell in notebook.cells for line in cell.source.splitlines()}
    leaked = sorted(secret & shown)
    assert not leaked, (
        f"solution lines visible in the student notebook of {module.dirname}: {leaked[:5]}")
    assert "BEGIN SOLUTION" not in nbformat.writes(notebook)


@pytest.mark.parametrize("module", WRITTEN, ids=IDS)
def test_every_graded_test_fails_on_the_release(module, released):
    report = run_notebook(released[module.number], COURSE_ROOT, timeout=REFERENCE_TIMEOUT)
    assert len(report.tests) == sum(c.is_graded for c in read_cells(module.source))
    passing = [r.cell.grade_id for r in report.passed]
    assert not passing, (
        f"these graded tests pass on the empty stub, so they test nothing: {passing}")


def test_release_checksums_are_nbgraders(released):
    """tito verifies releases with its own copy of nbgrader's checksum (nbgrader takes seconds
    to import); both must agree on every cell of every release, and an edit must change it."""
    from nbgrader.utils import compute_checksum

    from tito.student.integrity import cell_checksum, verify_release

    for path in released.values():
        notebook = nbformat.read(path, as_version=4)
        checked = [c for c in notebook.cells if "checksum" in c.metadata.get("nbgrader", {})]
        assert checked
        for cell in checked:
            recorded = cell.metadata.nbgrader["checksum"]
            assert cell_checksum(cell) == compute_checksum(cell) == recorded
        verify_release(notebook, str(path))
        test = next(c for c in checked if c.metadata.nbgrader.get("grade"))
        test.source += "\npass"
        with pytest.raises(Exception, match="does not match the checksum"):
            verify_release(notebook, str(path))


# Typical bugs planted in module 01's reference, and what the failing test must say: the
# expected and actual values, and the student's line (root cause first).
PLANTED_01 = [
    ("mean over the wrong axis",
     "return np.mean(a, axis=axis, keepdims=keepdims)",
     "return np.mean(a, axis=0 if axis is not None else None, keepdims=keepdims)",
     "test_unit_reductions", ["has shape (3, 4), expected (2, 3)", "not reduced over axis=-1"]),
    ("mean divides by the wrong count",
     "return np.mean(a, axis=axis, keepdims=keepdims)",
     "return np.sum(a, axis=axis, keepdims=keepdims) / a.size",
     "test_unit_reductions", ["expected [-1.5", "divides by 24 instead of 2"]),
    ("keepdims dropped",
     "return np.sum(a, axis=axis, keepdims=keepdims)", "return np.sum(a, axis=axis)",
     "test_unit_reductions", ["keepdims was not passed through"]),
    ("broadcast bug in Add.forward",
     "return a + b\n", "return a + b[..., None]\n",
     "test_unit_arithmetic", ["a + b with a of shape (2, 3) and b of shape (3,)",
                              "'elementwise'", "return a + b[..., None]"]),
    ("item() through float()",
     "return self.data.item()", "return float(self.data)",
     "test_unit_tensor_creation",
     ["Tensor([7.0]).item() raised TypeError", "return float(self.data)"]),
    ("matmul with the wrong operand",
     "        return np.matmul(a, b)\n", "        return np.matmul(a, np.ones_like(b))\n",
     "test_unit_matmul", ["(4, 3) @ (3, 5): first row", "expected"]),
]


@pytest.mark.parametrize("what, old, new, test, says", PLANTED_01, ids=[p[0] for p in PLANTED_01])
def test_module_01_messages_for_planted_bugs(what, old, new, test, says, tmp_path):
    lesson = MODULES[0].source.read_text()
    assert lesson.count(old) >= 1, f"the planted bug '{what}' no longer applies to the lesson"
    path = tmp_path / "tensor.py"
    path.write_text(lesson.replace(old, new, 1))
    report = run_notebook(path, COURSE_ROOT)
    failed = {r.cell.grade_id: r.explain() for r in report.failed}
    assert test in failed, f"{what}: expected {test} to fail, failures: {failed}"
    for text in says:
        assert text in failed[test], f"{what}: {text!r} not in {failed[test]!r}"


def test_float64_constructor_is_blamed_on_the_constructor_not_the_ops(tmp_path):
    lesson = MODULES[0].source.read_text()
    old = ("            array = np.asarray(data)\n            if array.dtype != np.float32:\n"
           "                array = array.astype(np.float32)\n")
    assert old in lesson
    path = tmp_path / "tensor.py"
    path.write_text(lesson.replace(old, "            array = np.asarray(data, dtype=np.float64)\n"))
    report = run_notebook(path, COURSE_ROOT)
    messages = {r.cell.grade_id: r.explain() for r in report.failed}
    assert "store float32 by default" in messages.pop("test_unit_tensor_creation")
    assert messages, "the ops' tests should fail too"
    for name, text in messages.items():
        assert "your Tensor constructor changes the dtype" in text, (name, text)


def test_completed_finds_a_module_only_with_the_name_it_needs(tmp_path, monkeypatch):
    from tito.course.packages import acceleration, completed

    half = tmp_path / "half_exported.py"  # what `tito export` writes for an unfinished lesson
    half.write_text("EARLY = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert completed("half_exported", "EARLY").EARLY == 1
    assert completed("half_exported", "LAST_CELL") is None
    assert completed("no_such_package.module", "anything") is None
    accel = acceleration()  # module 17 is completed in the course's own package
    assert accel is not None and callable(accel.use_fast_kernels)
