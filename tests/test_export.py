"""`tito export`: the committed package is generated from the lessons, and drift is caught."""

import shutil
from pathlib import Path

import pytest

from conftest import run_tito, run_tito_from
from tito.course.exporter import HEADER, check_plan, reference_plan
from tito.course.registry import written_modules


def test_committed_package_is_in_sync(repo):
    assert check_plan(repo, reference_plan()) == []
    done = run_tito("export", "--check", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_catches_an_edited_file_and_a_stale_one(repo, tmp_path):
    shutil.copytree(repo / "tinytorch", tmp_path / "tinytorch")
    plan = reference_plan()
    assert check_plan(tmp_path, plan) == []
    edited = tmp_path / written_modules()[0].target_path
    edited.write_text(edited.read_text() + "\n# a hand edit\n")
    stale = tmp_path / "tinytorch" / "core" / "old_module.py"
    stale.write_text(HEADER + " from modules/99_old/old.py\n")
    problems = check_plan(tmp_path, plan)
    assert any("differs" in p and edited.name in p for p in problems)
    assert any("stale" in p and "old_module" in p for p in problems)
    (tmp_path / written_modules()[0].target_path).unlink()
    assert any("missing" in p for p in check_plan(tmp_path, plan))


def test_generated_files_name_their_source(repo):
    for m in written_modules():
        text = (repo / m.target_path).read_text()
        assert text.startswith(HEADER)
        assert f"modules/{m.dirname}/{m.slug}.py" in text.splitlines()[0]


def test_public_api_is_pytorch_style():
    import tinytorch

    assert tinytorch.Tensor is tinytorch.core.tensor.Tensor
    assert "Add" not in dir(tinytorch), "op classes are exported with #| exporti, not into the API"


def test_export_refuses_unknown_and_unwritten_modules(repo, planned_course):
    done = run_tito("export", "99", cwd=repo)
    assert done.returncode == 2 and "Valid modules are 01" in done.stderr
    done = run_tito_from(planned_course, "export", "20", cwd=planned_course)
    assert done.returncode == 2 and "not written yet" in done.stderr, done.stderr


def test_reexport_namespace_is_a_file_that_names_its_module():
    """tinytorch.optim.lr_scheduler (registry `reexports` of module 08): the chosen names when
    module 08 is exported, and an AttributeError naming module 08 when it is not."""
    from tito.course.exporter import init_files
    from tito.course.registry import get_module

    path = Path("tinytorch/optim/lr_scheduler.py")
    done = init_files({8: ["StepLR"], 7: ["SGD"]}, {}, "test")
    assert "from ..core.training import LRScheduler, LambdaLR, StepLR" in done[path]
    assert "from . import lr_scheduler" in done[Path("tinytorch/optim/__init__.py")]
    pending = init_files({7: ["SGD"]}, {}, "test")[path]
    namespace: dict = {"__name__": "tinytorch.optim.lr_scheduler"}
    exec(pending, namespace)
    with pytest.raises(AttributeError, match="module 08 .Training.*tito module complete 08"):
        namespace["__getattr__"]("StepLR")
    assert get_module(8).reexports[0][0] == "optim.lr_scheduler"
