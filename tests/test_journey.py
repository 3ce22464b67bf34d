"""A whole student course: modules 01-08 completed in a workspace, then the milestones run
on the student's own package."""

from __future__ import annotations

import pytest

from conftest import run_tito
from test_cli import write_like_a_student
from tito.core.registry import MILESTONES, MILESTONES_DIR, written_modules

pytestmark = pytest.mark.slow
FOUNDATION = [m for m in written_modules() if m.number <= 8]


@pytest.mark.skipif(len(FOUNDATION) < 8, reason="modules 01-08 are not all written yet")
def test_student_completes_foundation_and_runs_milestones(tmp_path):
    ws = tmp_path / "student"
    assert run_tito("init", str(ws), cwd=tmp_path).returncode == 0

    # Before module 07, the milestones name what is missing instead of crashing.
    done = run_tito("milestone", "run", "xor", cwd=ws)
    assert done.returncode == 2 and "01 (Tensor)" in done.stderr

    for m in FOUNDATION:
        assert run_tito("module", "start", m.key, cwd=ws).returncode == 0
        write_like_a_student(ws, m.number)
        done = run_tito("module", "complete", m.key, cwd=ws)
        assert done.returncode == 0, f"module {m.key}:\n{done.stdout}\n{done.stderr}"
        assert "written by the student" in (ws / m.target_path).read_text()

    for ms in MILESTONES:
        if ms.name in ("perceptron", "xor", "mlp_digits") and (MILESTONES_DIR / ms.script).is_file():
            done = run_tito("milestone", "run", ms.name, "--quick", cwd=ws)
            assert done.returncode == 0, f"{ms.name}:\n{done.stdout}\n{done.stderr}"
            assert f"using tinytorch from {ws / 'tinytorch'}" in done.stdout.replace("\n", "")
