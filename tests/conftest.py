"""Shared fixtures (the repository, the real CLI, nbgrader releases made once) and the test
tiers: the slow markers and one marker per module (``pytest -m module06``), set here."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import fcntl  # POSIX: workers wait for one shared tinygpt run
except ImportError:  # Windows: each xdist worker trains its own
    fcntl = None

import nbformat
import pytest

# The workers of `pytest -n 4` share the machine's cores (two on CI), so each test process,
# and every process it starts, uses one thread per library unless the caller set another
# number. Four processes' spinning thread pools (OpenBLAS, PyTorch's OpenMP, numba) on two
# cores took the suite from 461 s to 627 s. test_pieces_on_two_real_threads
# (test_compiled_kernels.py) runs the compiled kernels on two threads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the reference package, even without an install

from tito.course.registry import MODULES, MODULES_DIR, Module, written_modules  # noqa: E402
from tito.grading.release import release_notebooks  # noqa: E402

# Workspace kernels that `tito init` registers during the tests go to a folder of their own,
# not the user's Jupyter folder.
JUPYTER_DATA = Path(tempfile.mkdtemp(prefix="tito-tests-jupyter-"))
atexit.register(shutil.rmtree, JUPYTER_DATA, True)
os.environ["JUPYTER_DATA_DIR"] = str(JUPYTER_DATA)


def run_tito(*args: str, cwd: Path, stdin=subprocess.DEVNULL, timeout: float = 600):
    """Run the real `tito` CLI in a subprocess, as a user would (no terminal attached)."""
    return subprocess.run(
        [sys.executable, "-m", "tito", *args], cwd=cwd, stdin=stdin,
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


PLANNED = "20_capstone"  # the module a planned-course copy leaves out


@pytest.fixture(scope="session")
def planned_course(tmp_path_factory) -> Path:
    """A copy of the course whose module 20 lesson is missing: a module that is planned but not
    written, as every module was before its lesson landed. Run it with `run_tito_from`."""
    root = tmp_path_factory.mktemp("planned") / "course"
    skip = shutil.ignore_patterns("__pycache__", PLANNED, "*.egg-info")
    for name in ("tito", "tinytorch", "milestones", "modules", "site"):
        shutil.copytree(REPO / name, root / name, ignore=skip)
    shutil.copy(REPO / "README.md", root / "README.md")  # the site's home page quotes it
    return root


@pytest.fixture(scope="session")
def tinygpt_quick_run(repo, tmp_path_factory):
    """One `tito milestone run tinygpt --quick` for the whole run: its folder (the checkpoint
    in `folder / "run"`) and its output. test_tinygpt checks the run; test_milestones' llm
    test serves its checkpoint. Under pytest-xdist the workers share it: the first to ask
    trains (about 100 s of CPU), the others wait on a lock file and read its result."""
    base = tmp_path_factory.getbasetemp()
    # under xdist, the workers' common folder (one run, behind a lock file) where POSIX
    # locks exist; elsewhere this process's own folder
    xdist = os.environ.get("PYTEST_XDIST_WORKER") and fcntl is not None
    shared = base.parent if xdist else base
    folder = shared / "tinygpt-quick"
    result = folder / "result.json"
    with open(shared / "tinygpt-quick.lock", "w") as lock:
        if xdist:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not result.is_file():
            folder.mkdir(exist_ok=True)
            done = run_tito("milestone", "run", "tinygpt", "--quick", "--out",
                            str(folder / "run"), cwd=folder, timeout=300)
            result.write_text(json.dumps({"args": done.args, "returncode": done.returncode,
                                          "stdout": done.stdout, "stderr": done.stderr}))
    saved = json.loads(result.read_text())
    return folder, subprocess.CompletedProcess(saved["args"], saved["returncode"],
                                               saved["stdout"], saved["stderr"])


def run_tito_from(course: Path, *args: str, cwd: Path, timeout: float = 600):
    """Run the `tito` of a course copy (its registry, lessons and package come first)."""
    return subprocess.run(
        [sys.executable, "-m", "tito", *args], cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200",
             "PYTHONPATH": os.pathsep.join([str(course), os.environ.get("PYTHONPATH", "")])},
    )


@pytest.fixture(scope="session")
def released(tmp_path_factory) -> dict[int, Path]:
    """Every written module's student notebook, made by nbgrader in one run."""
    folder = tmp_path_factory.mktemp("release")
    paths = {}
    for number, notebook in release_notebooks(written_modules()).items():
        path = folder / f"{number:02d}.ipynb"
        nbformat.write(notebook, path)
        paths[number] = path
    return paths


# ---- the tiers ---------------------------------------------------------------------------
# What makes a test slow (seconds each, or a costly fixture). Each kind is a marker of its own
# (pyproject.toml lists them); a test with any of them is also marked ``slow``, so the fast
# tier is ``pytest -m "not slow"`` and ``pytest -m render`` runs one kind. A test may also be
# marked ``slow`` alone.
SLOW_KINDS = ("pipeline", "journey", "render", "browser", "sandbox", "milestone", "benchmark")

# Fixtures that make every test using them slow, and which kind they are.
SLOW_FIXTURES = {
    "rendered": "render",  # the whole site rendered with pandoc (tests/site_render.py)
    "fresh_workspace": "journey",  # `tito init` in a subprocess, then the CLI (test_cli.py)
    "audits": "browser",  # every rendered page opened in Chromium (test_site_browser.py)
    "base_ws": "journey",  # a student's workspace, then the CLI (test_student_path.py)
}

# Test files of a module beyond its own ``test_<slug>.py`` (the registry's slug).
MODULE_FILES = {
    "test_lesson_helpers.py": 1,  # the test helpers module 01 gives
    "test_safetensors.py": 8,  # module 08's reader and writer
    "test_compiled_kernels.py": 17,
    "test_serving.py": 18,
    "test_engine_tutorial.py": 18,
}
_MODULE_NAME = re.compile(r"module_?(\d\d)(?!\d)")


def pytest_configure(config):
    for m in MODULES:
        config.addinivalue_line(
            "markers", f"module{m.key}: module {m.key}'s tests ({m.title}): its package test "
                       "files and its rows of the course-wide tests")


def modules_of(item) -> set[int]:
    """The modules a test belongs to: its file's (``test_<slug>.py``, ``MODULE_FILES``); in
    the course-wide files, a parameter that is a module (or a lesson's path, or a module
    ``number``), or a name that says ``module_NN``."""
    filename = item.path.name
    for m in MODULES:
        if filename == f"test_{m.slug}.py":
            return {m.number}
    if filename in MODULE_FILES:
        return {MODULE_FILES[filename]}
    found = set()
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name, value in params.items():
        if isinstance(value, Module):
            found.add(value.number)
        elif isinstance(value, Path) and value.is_relative_to(MODULES_DIR) and value != MODULES_DIR:
            folder = value.relative_to(MODULES_DIR).parts[0]
            found.update(m.number for m in MODULES if m.dirname == folder)
        elif name in ("number", "module") and isinstance(value, int):
            found.add(value)
    name = getattr(item, "originalname", None) or item.name  # a doctest item has no original
    found.update(int(n) for n in _MODULE_NAME.findall(name))
    return {n for n in found if 1 <= n <= len(MODULES)}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(SLOW_FIXTURES[name])
        if any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker("slow")
        for number in sorted(modules_of(item)):
            item.add_marker(f"module{number:02d}")
    # The longest files first (seconds measured serially at load 9, 2026-12-03): with
    # `-n 2 --dist loadfile` each file goes whole to the next free worker, so a long file
    # collected last (test_journey.py, alphabetically in the middle) kept one worker busy
    # alone at the end of the run. Within a file the order is unchanged.
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


LONGEST_FILES = (
    "test_hidden_tests.py",  # 709 s: four modules autograded for two students
    "test_journey.py",  # 553 s: every module completed, then the milestones
    "test_nbgrader.py",  # 333 s
    "test_authoritative_grade.py",  # 301 s
    "test_course.py",  # 295 s
    "test_milestones.py",  # 263 s
    "test_site.py",  # 188 s
    "test_autograde_sandbox.py",  # 143 s
    "test_benchmark.py",  # 124 s
    "test_tinygpt.py",  # 115 s
    "test_honest_grading.py",  # 111 s
)
