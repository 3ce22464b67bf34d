"""The student's path through the real CLI, in temporary workspaces, and every bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import run_tito, run_tito_from
from tito.course.notebook import read_cells
from tito.course.registry import MODULES, get_module, prerequisites, written_modules
from tito.student.kernel import install_kernel, kernel_name

# Every test here that runs the real CLI is a journey (slow): those using a workspace made by
# `tito init` (``fresh_workspace``) are marked by tests/conftest.py, the others below by hand.
# The in-process checks stay in the fast tier.


@pytest.fixture(scope="module")
def fresh_workspace(tmp_path_factory):
    """One `tito init` (an nbgrader run); each test works on its own copy."""
    root = tmp_path_factory.mktemp("init") / "course"
    done = run_tito("init", str(root), cwd=root.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.fixture
def ws(fresh_workspace, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(fresh_workspace, root)
    install_kernel(root)  # a copied workspace is a new folder: it gets its own kernel
    return root


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_like_a_student(ws, number, *, mark="# written by the student", bug=None):
    """Fill the student's notebook with the reference solution, marked as theirs.

    ``bug`` = (old, new) replaces a snippet in the student's code to plant a mistake.
    """
    module = get_module(number)
    reference = {c.grade_id: c.source for c in read_cells(module.source)
                 if c.nbgrader.get("solution")}
    path = ws / module.notebook_relpath
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            source = reference[grade_id] + "\n" + mark
            if bug and bug[0] in source:
                source = source.replace(bug[0], bug[1], 1)
            cell.source = source
    nbformat.write(notebook, path)


def python_in(ws, code):
    return subprocess.run([sys.executable, "-c", code], cwd=ws, capture_output=True, text=True)


def test_init_makes_a_workspace(fresh_workspace):
    ws = fresh_workspace
    assert (ws / ".tito" / "progress.json").is_file()
    for m in written_modules():
        assert (ws / ".tito" / "release" / f"{m.dirname}.ipynb").is_file()
    assert json.loads((ws / ".tito" / "progress.json").read_text())["completed"] == {}
    # the package is there but empty: importing it works, using Tensor explains what to do
    done = python_in(ws, "import tinytorch; tinytorch.Tensor")
    assert done.returncode != 0 and "module 01" in done.stderr
    assert "tito module complete 01" in done.stderr
    done = python_in(ws, "from tinytorch.core.tensor import Tensor")
    assert "module 01 (Tensor)" in done.stderr and "tito module start 01" in done.stderr
    again = run_tito("init", str(ws), cwd=ws.parent)
    assert again.returncode == 2 and "already a TinyTorch workspace" in again.stderr


def test_student_journey_module_01(ws):
    notebook = ws / "modules" / "01_tensor" / "tensor.ipynb"
    done = run_tito("module", "start", "01", cwd=ws)
    assert done.returncode == 0, done.stderr
    assert notebook.is_file() and "raise NotImplementedError()" in notebook.read_text()
    status = run_tito("module", "status", cwd=ws)
    assert "tito module complete 01" in status.stdout and "module start 01" not in status.stdout

    # The untouched notebook: every test fails, with a message, and nothing is exported.
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 1
    n_tests = sum(c.is_graded for c in read_cells(get_module(1).source))
    assert f"{n_tests} tests: 0 passed, {n_tests} failed" in done.stdout
    assert "not implemented yet" in done.stdout and "Nothing was exported" in done.stdout
    assert "PLACEHOLDER" in (ws / "tinytorch/core/tensor.py").read_text()
    assert json.loads((ws / ".tito/progress.json").read_text())["completed"] == {}

    # A student bug (subtracting in Add) fails exactly the arithmetic test: their code is tested.
    write_like_a_student(ws, 1, bug=("return a + b", "return a - b"))
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 1
    assert "✗ test_unit_arithmetic" in done.stdout and "a + b gave" in done.stdout
    assert f"{n_tests - 1} passed, 1 failed" in done.stdout

    # Fixed: tests pass on THEIR code, which is exported into THEIR package.
    write_like_a_student(ws, 1)
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{n_tests} tests: {n_tests} passed, 0 failed" in done.stdout
    assert "Module 01 completed" in done.stdout
    assert "Next: `tito module start" in done.stdout or "No other module is open" in done.stdout
    exported = (ws / "tinytorch/core/tensor.py").read_text()
    assert "written by the student" in exported and "your notebook" in exported.splitlines()[0]
    second = exported.splitlines()[1]
    assert "change your notebook" in second and "lesson" not in second
    progress = json.loads((ws / ".tito/progress.json").read_text())
    assert progress["completed"]["01"]["tests_passed"] == n_tests
    done = python_in(ws, "import tinytorch; print(tinytorch.Tensor([1,2]) + 1); "
                         "print(tinytorch.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Tensor([2., 3.])"
    assert done.stdout.splitlines()[1].startswith(str(ws))

    status = run_tito("module", "status", "--json", cwd=ws)
    states = {r["key"]: r["state"] for r in json.loads(status.stdout)["modules"]}
    assert states["01"] == "completed"
    assert all(states[m.key] == "not written" for m in MODULES if not m.written)


def test_untouched_release_fails_every_test_through_the_cli(ws):
    for m in written_modules():
        if not prerequisites(m.number):
            run_tito("module", "start", m.key, cwd=ws)
            done = run_tito("module", "test", m.key, cwd=ws)
            assert done.returncode == 1 and " 0 passed" in done.stdout


def test_unknown_module_lists_the_valid_ones(ws):
    for command in (["module", "start", "42"], ["module", "complete", "x"],
                    ["module", "test", "0"]):
        done = run_tito(*command, cwd=ws)
        assert done.returncode == 2 and "Valid modules are 01, 02" in done.stderr


def test_unwritten_module_is_named_coming_soon(ws, planned_course):
    listed = run_tito_from(planned_course, "module", "list", "--json", cwd=ws)
    written = {m["key"]: m["written"] for m in json.loads(listed.stdout)}
    assert written["20"] is False and written["19"] is True, written
    done = run_tito_from(planned_course, "module", "start", "20", cwd=ws)
    assert done.returncode == 2 and "not written yet" in done.stderr, done.stderr
    assert not (ws / "modules" / "20_capstone" / "capstone.ipynb").exists()


def test_complete_before_prerequisites_names_them(ws):
    candidates = [m for m in written_modules() if prerequisites(m.number)]
    assert candidates, "no written module has prerequisites yet"
    m = candidates[0]
    done = run_tito("module", "complete", m.key, cwd=ws)
    assert done.returncode == 2
    for n in prerequisites(m.number):
        assert f"{get_module(n).key} ({get_module(n).title})" in done.stderr


def test_complete_without_notebook_says_start(ws):
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 2 and "tito module start 01" in done.stderr


def test_corrupt_notebook_is_reported_and_left_untouched(ws):
    run_tito("module", "start", "01", cwd=ws)
    notebook = ws / "modules/01_tensor/tensor.ipynb"
    notebook.write_text('{"cells": [ this is not json')
    before = digest(notebook)
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 2 and "not a valid notebook" in done.stderr
    assert "tito module reset 01 --yes" in done.stderr and ".bak" in done.stderr
    assert digest(notebook) == before


def test_start_refuses_to_overwrite_and_force_keeps_a_backup(ws):
    run_tito("module", "start", "01", cwd=ws)
    notebook = ws / "modules/01_tensor/tensor.ipynb"
    write_like_a_student(ws, 1, mark="# my precious work")
    before = digest(notebook)
    done = run_tito("module", "start", "01", cwd=ws)
    assert done.returncode == 2 and "--force" in done.stderr and digest(notebook) == before
    done = run_tito("module", "start", "01", "--force", cwd=ws)
    assert done.returncode == 0
    backups = list(notebook.parent.glob("tensor.ipynb.bak-*"))
    assert len(backups) == 1 and digest(backups[0]) == before
    assert "my precious work" not in notebook.read_text()


def _as_if_handed_out_from_an_older_release(ws, number, notebook):
    """Change one given code cell in the workspace's stored release and in the student's
    notebook alike: the notebook then looks handed out from a release the course has since
    changed. Returns the cell's nbgrader id."""
    module = get_module(number)
    stored = ws / ".tito" / "release" / f"{module.dirname}.ipynb"
    release = nbformat.read(stored, as_version=4)
    given = next(c for c in release.cells if c.cell_type == "code"
                 and c.metadata.get("nbgrader", {}).get("locked")
                 and not c.metadata["nbgrader"].get("solution"))
    grade_id = given.metadata["nbgrader"]["grade_id"]
    for path, nb in ((stored, release), (notebook, nbformat.read(notebook, as_version=4))):
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                c.source += "\n# an older release's line"
        nbformat.write(nb, path)
    return grade_id


def test_init_force_gives_handed_out_notebooks_the_new_given_cells_and_keeps_solutions(ws):
    run_tito("module", "start", "01", cwd=ws)
    write_like_a_student(ws, 1, mark="# my precious work")
    assert run_tito("module", "complete", "01", cwd=ws).returncode == 0
    tensor = ws / "modules/01_tensor/tensor.ipynb"
    _as_if_handed_out_from_an_older_release(ws, 1, tensor)
    before = digest(tensor)
    # module 02: the student added a cell of their own, so it must be left as it is
    run_tito("module", "start", "02", cwd=ws)
    activations = ws / get_module(2).notebook_relpath
    nb = nbformat.read(activations, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("print('my own scratch cell')"))
    nbformat.write(nb, activations)
    _as_if_handed_out_from_an_older_release(ws, 2, activations)
    kept = digest(activations)

    done = run_tito("init", ".", "--force", cwd=ws)
    assert done.returncode == 0, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "modules/01_tensor/tensor.ipynb: the new release's lesson text" in out, out
    assert "run `tito module complete 01` again" in out, out
    assert f"{get_module(2).notebook_relpath}: module 02's release changed, but your notebook " \
           "was left as it is" in out, out
    assert "outside your solution cells" in out and "tito module reset 02" in out, out
    assert "Next: `cd .` then `tito module status`" in out, out  # not "start 01" again

    text = tensor.read_text()
    assert "an older release's line" not in text and "my precious work" in text
    backups = list(tensor.parent.glob("tensor.ipynb.bak-*"))
    assert len(backups) == 1 and digest(backups[0]) == before
    assert digest(activations) == kept and not list(activations.parent.glob("*.bak-*"))
    # the refreshed notebook matches the release: no note blames the student for an edit
    done = run_tito("module", "test", "01", cwd=ws)
    assert done.returncode == 0 and "was edited in your notebook" not in done.stdout, done.stdout
    # and a second --force finds nothing to change
    done = run_tito("init", ".", "--force", cwd=ws)
    assert done.returncode == 0 and "tensor.ipynb" not in done.stdout, done.stdout


def test_init_force_with_a_damaged_progress_file_refreshes_and_leaves_the_file(ws):
    progress = ws / ".tito/progress.json"
    progress.write_text("{ truncated")
    done = run_tito("init", ".", "--force", cwd=ws)
    assert done.returncode == 0, done.stdout + done.stderr
    assert progress.read_text() == "{ truncated"  # `tito system repair-progress` mends it
    done = run_tito("module", "status", cwd=ws)
    assert done.returncode == 2 and "tito system repair-progress" in done.stderr


def test_reset_never_prompts_without_a_terminal(ws):
    run_tito("module", "start", "01", cwd=ws)
    done = run_tito("module", "reset", "01", cwd=ws)  # stdin is not a terminal
    assert done.returncode == 2 and "--yes" in done.stderr
    done = run_tito("module", "reset", "01", "--yes", cwd=ws)
    assert done.returncode == 0 and list((ws / "modules/01_tensor").glob("*.bak-*"))


def test_corrupt_progress_is_an_error_with_the_recovery_command(ws):
    run_tito("module", "start", "01", cwd=ws)
    write_like_a_student(ws, 1)
    assert run_tito("module", "complete", "01", cwd=ws).returncode == 0
    progress = ws / ".tito/progress.json"
    progress.write_text("{ truncated")
    for command in (["module", "status"], ["module", "complete", "01"], ["module", "start", "01"]):
        done = run_tito(*command, cwd=ws)
        assert done.returncode == 2 and "tito system repair-progress" in done.stderr, command
        assert progress.read_text() == "{ truncated", "the damaged file must not be reset silently"
    done = run_tito("system", "repair-progress", cwd=ws)
    assert done.returncode == 0, done.stderr
    assert json.loads(progress.read_text())["completed"]["01"]["rebuilt"] is True
    assert [p.read_text() for p in ws.glob(".tito/progress.json.bak-*")] == ["{ truncated"]


@pytest.mark.journey
def test_outside_a_workspace_complete_explains(tmp_path):
    done = run_tito("module", "complete", "01", cwd=tmp_path)
    assert done.returncode == 2 and "tito init" in done.stderr


@pytest.mark.journey
def test_repository_commands(repo):
    done = run_tito("module", "list", "--json", cwd=repo)
    rows = json.loads(done.stdout)
    assert len(rows) == 20 and rows[12]["slug"] == "transformers"
    assert set(rows[12]["prerequisites"]) == {"01", "02", "03", "04", "05", "06", "07", "08",
                                              "10", "11", "12"}
    assert run_tito("module", "test", "01", cwd=repo).returncode == 0
    assert run_tito("--version", cwd=repo).stdout.strip() == "tito, version 0.1.0"


def test_doctor_checks_kernel_and_workspace(ws):
    done = run_tito("system", "doctor", cwd=ws)
    assert "Jupyter kernel" in done.stdout and "progress file" in done.stdout
    assert "workspace kernel" in done.stdout and kernel_name(ws) in done.stdout
    assert done.returncode == 0, done.stdout
    (ws / ".tito/progress.json").write_text("[]")
    done = run_tito("system", "doctor", cwd=ws)
    assert done.returncode == 1 and "repair-progress" in done.stdout


def test_doctor_explains_a_missing_kernel(monkeypatch):
    """No python3 kernel in any kernel folder and no ipykernel: the check fails with the fix."""
    import importlib.util

    from tito.commands.system import kernel_check
    from tito.student import doctor

    assert kernel_check()[0], "this environment should have the python3 kernel"
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(doctor, "installed_kernels", lambda: {})
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "ipykernel" else find_spec(name, *rest))
    ok, detail = kernel_check()
    assert not ok and "ipykernel install" in detail and "--name python3" in detail


def test_endless_loop_streams_results_and_names_the_line(ws):
    """Results arrive test by test while the run goes on; a loop is stopped at --timeout with
    the function and line that was running."""
    run_tito("module", "start", "01", cwd=ws)
    loop = "while True:\n            a = a + 0\n        return a + b"
    write_like_a_student(ws, 1, bug=("return a + b", loop))
    proc = subprocess.Popen([sys.executable, "-m", "tito", "module", "complete", "01",
                             "--timeout", "8"],
                            cwd=ws, stdout=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "COLUMNS": "300"})
    first = ""
    while "test_unit_tensor_creation" not in first:
        first = proc.stdout.readline()
        assert first, "the run ended before printing the first test"
    assert proc.poll() is None, "the first result must be printed while the loop still runs"
    rest = proc.stdout.read()
    assert proc.wait() == 1
    assert "✓ test_unit_tensor_creation" in first
    assert "stopped after the time limit of 8 s, in Add.forward, cell 'elementwise'" in rest
    assert "`a = a + 0`" in rest and "--timeout 16" in rest
    assert "not run: an earlier cell ran out of time" in rest


def test_syntax_error_is_reported_first_and_named_as_the_cause(ws):
    run_tito("module", "start", "01", cwd=ws)
    write_like_a_student(ws, 1, bug=("self.data = array", "self.data = array +"))
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 1
    out = done.stdout
    syntax = out.index("SyntaxError")
    assert syntax < out.index("NameError"), "the root cause must come before what it caused"
    assert "Nothing in this cell ran" in out and "`self.data = array +`" in out
    assert "probably caused by the error in cell 'tensor-class' above" in out


def test_default_time_limit_is_short():
    from tito.student.runner import DEFAULT_TIMEOUT

    assert 60 <= DEFAULT_TIMEOUT <= 120


def test_milestone_needing_an_unwritten_module_is_coming_soon(ws, planned_course):
    done = run_tito_from(planned_course, "milestone", "run", "olympics", cwd=ws)  # needs 20
    assert done.returncode == 2 and "coming soon" in done.stderr, done.stderr
    assert "tito module complete" not in done.stderr


def test_jupyter_kernel_of_the_workspace_imports_the_students_package(ws):
    """The notebook `start` hands out names the workspace's kernel; a kernel started from that
    spec (as jupyter lab would) imports the workspace's tinytorch, not the reference."""
    from jupyter_client.manager import start_new_kernel

    run_tito("module", "start", "01", cwd=ws)
    nb = json.loads((ws / "modules/01_tensor/tensor.ipynb").read_text())
    assert nb["metadata"]["kernelspec"]["name"] == kernel_name(ws)
    km, kc = start_new_kernel(kernel_name=kernel_name(ws), cwd=str(ws / "modules/01_tensor"))
    try:
        printed = []
        kc.execute_interactive(
            "import tinytorch; print(tinytorch.__file__)", timeout=120,
            output_hook=lambda msg: printed.append(msg["content"].get("text", "")))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "".join(printed).strip() == str(ws / "tinytorch" / "__init__.py")


def test_doctor_names_the_fix_for_a_missing_workspace_kernel(ws):
    from jupyter_client.kernelspec import KernelSpecManager

    KernelSpecManager().remove_kernel_spec(kernel_name(ws))
    done = run_tito("system", "doctor", cwd=ws)
    assert done.returncode == 1 and "no Jupyter kernel" in done.stdout
    assert "tito system kernel" in done.stdout
    assert run_tito("system", "kernel", cwd=ws).returncode == 0
    assert run_tito("system", "doctor", cwd=ws).returncode == 0


@pytest.mark.journey
def test_readme_student_path_works_on_a_fresh_machine(repo):
    """The student path installs, activates (so `tito` is on PATH) before the first tito
    command, and does not hard-code how many modules are ready."""
    text = (repo / "README.md").read_text()
    path = text[text.index("## The student's path"):text.index("## The instructor's")]
    blocks = path.split("```")[1::2]
    student = next(b for b in blocks if "tito init" in b)
    lines = [line.strip() for line in student.splitlines()
             if line.strip() and not line.startswith("#")]
    first_tito = next(i for i, line in enumerate(lines) if line.startswith("tito "))
    assert any("pip install" in line for line in lines[:first_tito])
    assert any(line.startswith("source .venv/bin/activate") for line in lines[:first_tito])
    assert "tito dist student" in path
    assert "Twenty modules" not in text and "the 20 modules" not in text
