"""The student's path where students really are (issue #23 §1-2, #21's cross-check).

- a completed module exports a package that works (imported in a fresh process, its graded
  tests run against it), or nothing is exported;
- `module status` and `system doctor` say "not verified" when progress and the package or
  the release disagree;
- copied and moved workspaces: notebooks that select another workspace's kernel, dead kernels;
- the wrong folder, and a reset that says what it will undo.

Workspaces here are made from the session's nbgrader release (`released`), without `tito init`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import run_tito
from test_cli import python_in, write_like_a_student
from tito.course.registry import get_module
from tito.student.kernel import install_kernel, kernel_name
from tito.student.workspace import Workspace

# The tests that run the real CLI or a fresh process are slow: those using a workspace
# (``base_ws``) are marked by tests/conftest.py, the others below by hand. The in-process
# checks stay in the fast tier.


@pytest.fixture(scope="module")
def base_ws(released, tmp_path_factory):
    root = tmp_path_factory.mktemp("path") / "course"
    Workspace.create(root, {n: nbformat.read(p, as_version=4) for n, p in released.items()})
    return root


@pytest.fixture
def ws(base_ws, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(base_ws, root)
    return root


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_cell_after(path, grade_id, source):
    """Insert a cell of the student's own (no nbgrader metadata) after the cell ``grade_id``."""
    notebook = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(notebook.cells)
              if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
    nbformat.write(notebook, path)


def progress(ws):
    return json.loads((ws / ".tito/progress.json").read_text())["completed"]


# ---- §1: the exported package works, or nothing is exported ---------------------------------
def test_a_helper_in_a_scratch_cell_is_refused_with_where_to_put_it(ws):
    """A helper defined in a cell without `#| export` passes in the notebook but is missing from
    the package: complete refuses, names the helper and says where to put it; nothing is written."""
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    write_like_a_student(ws, 1, bug=("return a + b", "return _plus(a, b)"))
    notebook = ws / get_module(1).notebook_relpath
    add_cell_after(notebook, "elementwise", "def _plus(a, b):\n    return a + b")
    before = digest(ws / "tinytorch/core/tensor.py")
    done = run_tito("module", "complete", "01", cwd=ws)
    out = done.stdout
    assert done.returncode == 1, out
    assert "passed, 0 failed" in out, "the notebook itself passes: the package is what fails"
    assert "`_plus`" in out and "#| export" in out and "'elementwise'" in out, out
    assert "def _plus(a, b):" in out, "the message must point at the cell that defines it"
    assert "Nothing was exported" in out
    assert digest(ws / "tinytorch/core/tensor.py") == before
    assert progress(ws) == {}


def test_a_self_import_is_refused_and_the_previous_package_is_kept(ws):
    """An exported cell importing its own module (a circular import once exported) is refused;
    the package and progress of the earlier, good completion stay exactly as they were."""
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    write_like_a_student(ws, 1)
    done = run_tito("module", "complete", "01", cwd=ws)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hidden test" in done.stdout, "complete must say the instructor's grade has hidden tests"
    package = {p: digest(p) for p in (ws / "tinytorch").rglob("*.py")}
    record = progress(ws)
    write_like_a_student(ws, 1, bug=("#| export\nclass Tensor:",
                                     "#| export\nfrom tinytorch.core.tensor import Tensor\n"
                                     "class Tensor:"))
    done = run_tito("module", "complete", "01", cwd=ws)
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout
    # the guard refuses the import while the notebook runs (the package check would too)
    assert "your cell 'tensor-class' was refused" in out, out
    assert "it imported tinytorch.core.tensor, the module being graded" in out, out
    assert {p: digest(p) for p in (ws / "tinytorch").rglob("*.py")} == package
    assert progress(ws) == record


@pytest.mark.pipeline
def test_the_package_check_runs_the_graded_tests_on_the_reference(repo):
    """The check itself on module 01's reference package: every graded test passes there."""
    from tito.course.notebook import Cell, read_cells
    from tito.student.package import check_export

    cells = [Cell(i, c.kind, c.source, c.nbgrader, origin="yours" if c.nbgrader.get("solution")
                  else "release") for i, c in enumerate(read_cells(get_module(1).source))
             if c.kind == "code"]
    found = check_export(get_module(1), repo, cells, repo / "modules/01_tensor", timeout=120)
    n_tests = sum(c.is_graded for c in cells)
    assert found.ok and found.tests == n_tests, found.problem


# ---- #21: status and doctor cross-check progress against the package and the release --------
def _complete_by_hand(ws, number):
    """What a student who edits progress.json by hand gets: a completion with no package."""
    path = ws / ".tito/progress.json"
    data = json.loads(path.read_text())
    data["completed"][get_module(number).key] = {"completed_at": "2025-01-01T00:00:00+00:00"}
    path.write_text(json.dumps(data))


def test_the_test_helpers_are_given_before_and_after_module_01(ws):
    """tinytorch.testing is in a new workspace before module 01 is completed, is not the
    student's export, and after `complete 01` gives float64 inputs of the student's Tensor."""
    helpers = ws / "tinytorch/testing.py"
    given = helpers.read_text()
    assert "released notebook 01_tensor.ipynb" in given.splitlines()[0], given[:200]
    done = python_in(ws, "from tinytorch.testing import expect_close, hidden_cases, best_time\n"
                         "expect_close('x', [1.0], [1.0], 'fix'); print('helpers ok')")
    assert "helpers ok" in done.stdout, done.stdout + done.stderr
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    write_like_a_student(ws, 1)
    assert run_tito("module", "complete", "01", cwd=ws).returncode == 0
    assert helpers.read_text() == given, "complete 01 must not rewrite the given helpers"
    exported = (ws / "tinytorch/core/tensor.py").read_text()
    assert "written by the student" in exported and "def expect_close" not in exported
    done = python_in(ws, "import numpy as np\nfrom tinytorch.testing import float64_inputs\n"
                         "t = float64_inputs(np.random.default_rng(0), (2, 3))\n"
                         "print(type(t).__module__, t.dtype, t.requires_grad)")
    assert done.stdout.split() == ["tinytorch.core.tensor", "float64", "True"], (
        done.stdout + done.stderr)


def test_status_and_doctor_say_not_verified_for_a_hand_edited_progress_file(ws):
    """progress.json says 01 is completed, the package holds only the placeholder: status says
    "not verified" for 01 and doctor does not say "All checks passed"."""
    install_kernel(ws)
    _complete_by_hand(ws, 1)
    status = run_tito("module", "status", "--json", cwd=ws)
    row = next(r for r in json.loads(status.stdout)["modules"] if r["key"] == "01")
    assert row["state"] == "not verified" and "placeholder" in row["why"], row
    shown = run_tito("module", "status", cwd=ws).stdout
    assert "not verified" in shown and "tito module complete 01" in shown
    done = run_tito("system", "doctor", cwd=ws)
    assert done.returncode == 1 and "All checks passed" not in done.stdout
    assert "not verified" in done.stdout and "module 01" in done.stdout


def test_doctor_checks_the_release_against_its_checksums(ws):
    """A locked test of the workspace's release edited by hand: doctor names it and the fix."""
    install_kernel(ws)
    path = ws / ".tito/release/01_tensor.ipynb"
    notebook = json.loads(path.read_text())
    cell = next(c for c in notebook["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_unit_arithmetic")
    cell["source"] = "def test_unit_arithmetic():\n    pass\n"
    path.write_text(json.dumps(notebook))
    done = run_tito("system", "doctor", cwd=ws)
    assert done.returncode == 1 and "All checks passed" not in done.stdout
    assert "test_unit_arithmetic" in done.stdout and "tito init . --force" in done.stdout


def test_status_says_not_verified_when_the_export_was_edited_after_complete(ws):
    """The package file of a completed module changed after `complete` wrote it: status says
    "not verified", and doctor's fresh-process import shows what the edit broke."""
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    write_like_a_student(ws, 1)
    assert run_tito("module", "complete", "01", cwd=ws).returncode == 0
    assert "not verified" not in run_tito("module", "status", cwd=ws).stdout
    exported = ws / "tinytorch/core/tensor.py"
    exported.write_text(exported.read_text() + "\nraise RuntimeError('edited by hand')\n")
    row = next(r for r in
               json.loads(run_tito("module", "status", "--json", cwd=ws).stdout)["modules"]
               if r["key"] == "01")
    assert row["state"] == "not verified" and "changed" in row["why"], row
    # doctor imports the package for real, in a fresh process: the edit is caught there too
    install_kernel(ws)
    done = run_tito("system", "doctor", cwd=ws)
    out = done.stdout.replace("\n", " ")
    assert (done.returncode == 1 and "edited by hand" in done.stdout
            and "module 01" in out), done.stdout


def test_doctor_imports_no_heavy_package_in_its_own_process(ws):
    """doctor's speed: the package checks read installed metadata and run the imports that
    matter in fresh processes; nbgrader, jupytext and nbformat (seconds to import) stay out."""
    code = ("import sys\nfrom click.testing import CliRunner\nfrom tito.cli import cli\n"
            "CliRunner().invoke(cli, ['system', 'doctor'])\n"
            "print(sorted(m for m in ('nbgrader', 'jupytext', 'nbformat') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ws, capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


# ---- §2: copied and moved workspaces -------------------------------------------------------
def test_a_copied_workspace_is_found_out_by_doctor_and_fixed_by_kernel(ws, tmp_path):
    """`cp -r` keeps the notebooks pointing at the original's kernel: doctor names it, `tito
    system kernel` points them at the copy's own, `--prune` removes the kernel of a deleted one."""
    install_kernel(ws)
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(ws, copy)
    done = run_tito("system", "doctor", cwd=copy)
    assert done.returncode == 1 and "All checks passed" not in done.stdout
    assert "modules/01_tensor/tensor.ipynb" in done.stdout and str(ws) in done.stdout, done.stdout
    before = nbformat.read(copy / "modules/01_tensor/tensor.ipynb", as_version=4)
    done = run_tito("system", "kernel", cwd=copy)
    assert done.returncode == 0 and "modules/01_tensor/tensor.ipynb" in done.stdout, done.stdout
    after = nbformat.read(copy / "modules/01_tensor/tensor.ipynb", as_version=4)
    assert after.metadata.kernelspec.name == kernel_name(copy)
    assert [c.source for c in after.cells] == [c.source for c in before.cells]
    assert run_tito("system", "doctor", cwd=copy).returncode == 0

    from jupyter_client.kernelspec import KernelSpecManager

    shutil.rmtree(ws)
    done = run_tito("system", "kernel", "--prune", cwd=copy)
    assert done.returncode == 0 and kernel_name(ws) in done.stdout, done.stdout
    names = KernelSpecManager().find_kernel_specs()
    assert kernel_name(ws) not in names and kernel_name(copy) in names


# ---- §2: the wrong folder --------------------------------------------------------------------
def test_init_inside_a_workspace_is_refused(ws):
    """`tito init` inside a workspace says where the student is, and makes nothing."""
    done = run_tito("init", "inner", cwd=ws / "modules")
    assert done.returncode == 2 and str(ws) in done.stderr and "inside" in done.stderr, done.stderr
    assert not (ws / "modules" / "inner").exists()


@pytest.mark.journey
def test_doctor_outside_a_workspace_says_where_you_are(tmp_path):
    """Not in a workspace and not in the course repository: doctor does not say "All checks
    passed"; it names the folder and what to do."""
    done = run_tito("system", "doctor", cwd=tmp_path)
    assert "All checks passed" not in done.stdout and done.returncode == 1
    assert str(tmp_path) in done.stdout.replace("\n", "") and "tito init" in done.stdout


@pytest.mark.journey
def test_milestones_outside_a_workspace_say_where_you_are(tmp_path):
    """From a folder that is no workspace, the milestone commands say which package they would
    use and where the student is (here: the course repository's reference, never silently)."""
    for args in (["milestone", "list"], ["milestone", "run", "perceptron", "--quick"]):
        done = run_tito(*args, cwd=tmp_path)
        text = (done.stdout + done.stderr).replace("\n", " ")
        assert "not a TinyTorch workspace" in text and str(tmp_path) in text, (args, text)


def test_milestones_without_a_workspace_or_a_reference_refuse(tmp_path, monkeypatch):
    """A student build has no reference package: outside a workspace, list and run refuse,
    naming the folder and `cd` into the workspace (found through its registered kernel)."""
    from click.testing import CliRunner

    from tito.cli import cli
    from tito.commands import milestone

    monkeypatch.setattr(milestone, "COURSE_ROOT", tmp_path / "no-course")
    monkeypatch.chdir(tmp_path)
    for args in (["milestone", "list"], ["milestone", "run", "perceptron"]):
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 2, (args, done.output)
        # rich wraps the message at the terminal's width, between words or inside a path
        assert str(tmp_path) in done.output.replace("\n", ""), done.output
        assert "tito init" in " ".join(done.output.split()), done.output


# ---- §2: resetting ---------------------------------------------------------------------------
def test_reset_says_what_it_undoes_before_it_does_it(ws):
    """Resetting a completed module names what it un-completes and which modules it locks,
    before the notebook is replaced."""
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    assert run_tito("module", "start", "02", cwd=ws).returncode == 0
    _complete_by_hand(ws, 1)
    done = run_tito("module", "reset", "01", "--yes", cwd=ws)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    warning = out.index("not completed")
    assert warning < out.index("is ready"), "the warning must come before the reset"
    assert "02 (Activations)" in out[:out.index("is ready")], out
    assert progress(ws) == {}
    # without --yes and without a terminal: the same words, and nothing is done
    _complete_by_hand(ws, 1)
    done = run_tito("module", "reset", "01", cwd=ws)
    assert done.returncode == 2 and "02 (Activations)" in done.stdout + done.stderr
    assert "01" in progress(ws)


# ---- doctor's package check, on a planted environment -----------------------------------------
def test_doctor_follows_requirements_to_the_end(tmp_path, monkeypatch):
    """The package check reads installed metadata instead of importing: a dependency of a
    dependency that is missing or outside its version range is named; extras not asked for
    (``dev``) are not required, extras asked for (``sqlalchemy[asyncio]``) are."""
    import packaging.requirements  # noqa: F401 - imported before sys.path is replaced below

    from tito.student.installed import package_checks, requirement_problems

    site = tmp_path / "site-packages"

    def dist(name, version, *requires):
        folder = site / f"{name}-{version}.dist-info"
        folder.mkdir(parents=True)
        (folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))

    dist("tinytorch", "0.1.0", "numpy>=1.26", "nbgrader<0.10,>=0.9", 'pytest>=8; extra == "dev"')
    dist("numpy", "2.0.0")
    dist("nbgrader", "0.9.6", "jupyter_server>=2", "SQLAlchemy[asyncio]>=2")
    dist("jupyter_server", "1.5.0")
    dist("SQLAlchemy", "2.0.1", 'greenlet>=1; extra == "asyncio"', 'mypy; extra == "mypy"')
    monkeypatch.setattr(sys, "path", [str(site)])
    ours, direct, problems = requirement_problems()
    assert ours == "tinytorch" and direct == {"numpy": "2.0.0", "nbgrader": "0.9.6"}, direct
    assert sorted(problems) == [
        "greenlet is not installed (SQLAlchemy needs `greenlet>=1`)",
        "jupyter_server 1.5.0 is installed, nbgrader needs `jupyter_server>=2`",
    ], problems
    (check,) = package_checks()
    assert check.state == "failed" and "pip install --upgrade" in check.detail
    dist("greenlet", "3.0.0")
    (site / "jupyter_server-1.5.0.dist-info").rename(site / "jupyter_server-2.1.0.dist-info")
    (check,) = package_checks()
    assert check.state == "ok" and "numpy 2.0.0" in check.detail, check.detail


# ---- §3: what complete says (see also tests/test_messages.py) -----------------------------------
def test_complete_after_a_refusal_counts_no_test_and_says_what_to_remove(ws):
    """A solution cell that replaces np.allclose at its top level: the tests after it are "not
    counted" (no ✓), the summary says so, and the last line says to remove what was refused,
    not "0 failed ... Fix the failures above"; the note about the line prints without markup."""
    assert run_tito("module", "start", "01", cwd=ws).returncode == 0
    write_like_a_student(ws, 1)
    path = ws / get_module(1).notebook_relpath
    notebook = nbformat.read(path, as_version=4)
    for c in notebook.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "elementwise":
            c.source += "\nnp.allclose = lambda *a, **k: True\n"
    nbformat.write(notebook, path)
    done = run_tito("module", "complete", "01", cwd=ws)
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, out
    assert "✗ your cell 'elementwise' was refused: not allowed: it replaced numpy.allclose" in out
    assert "✓ test_unit_arithmetic" not in out and "✓ test_unit_reductions" not in out, out
    assert "test_unit_arithmetic (6 pts) not counted: it ran after cell 'elementwise'" in out, out
    assert "0 failed, 5 not counted" in out and "Fix the failures above" not in out, out
    assert "Remove what was refused above and run this command again" in out, out
    assert "note: cell 'elementwise', line" in out and "[yellow]" not in out, out


def test_a_lost_student_is_shown_the_most_recently_used_workspace_first(tmp_path, monkeypatch):
    """Outside a workspace, the list of this machine's workspaces starts with the one used
    last (its progress file), not the first in alphabetical order, and says how many more."""
    import os

    from tito.student.kernel import known_workspaces
    from tito.student.workspace import not_a_workspace

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    roots = [tmp_path / f"ws{i}" for i in range(7)]
    for i, root in enumerate(roots):
        (root / ".tito").mkdir(parents=True)
        (root / ".tito" / "progress.json").write_text('{"completed": {}}')
        os.utime(root / ".tito" / "progress.json", (1_000_000 + i, 1_000_000 + i))
        install_kernel(root)
    os.utime(roots[2] / ".tito" / "progress.json", (2_000_000, 2_000_000))  # used last
    assert known_workspaces()[:2] == [roots[2].resolve(), roots[6].resolve()]
    text = not_a_workspace(tmp_path, "run `tito milestone list`")
    assert f"most recently used first: {roots[2].resolve()}, {roots[6].resolve()}" in text, text
    assert "and 2 more" in text, text
