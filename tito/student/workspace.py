"""A student's workspace: their notebooks, their package, their progress.

    my-course/
      .tito/progress.json          the one progress file (written atomically)
      .tito/release/NN_slug.ipynb  student notebooks made by nbgrader (never edited)
      modules/NN_slug/slug.ipynb   the student's working copies (`tito module start`)
      tinytorch/                   the student's package, filled by `tito module complete`

Nothing here ever deletes or overwrites a student's notebook without keeping a backup.
"""

from __future__ import annotations

import ast
import json
import time
from datetime import datetime, timezone
from pathlib import Path

from ..course.exporter import PLACEHOLDER, export_names, init_files, placeholder
from ..course.registry import MODULES, Module, get_module
from ..errors import WorkspaceError
from ..files import atomic_write, find_upwards

MARKER = ".tito"
PROGRESS_FORMAT = 1


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    return candidate


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    # ---- finding ---------------------------------------------------------------------
    @classmethod
    def find(cls, start: Path | None = None) -> "Workspace | None":
        root = find_upwards(start, lambda folder: (folder / MARKER).is_dir())
        return None if root is None else cls(root)

    @classmethod
    def require(cls) -> "Workspace":
        found = cls.find()
        if found is None:
            raise WorkspaceError(
                "This is not a TinyTorch workspace (no .tito folder here or above). Create one "
                "with `tito init DIR`, then run tito inside it. In the course repository, "
                "`tito module test N` tests the reference solution."
            )
        return found

    # ---- paths -----------------------------------------------------------------------
    @property
    def progress_path(self) -> Path:
        return self.root / MARKER / "progress.json"

    def release_path(self, module: Module) -> Path:
        return self.root / MARKER / "release" / f"{module.dirname}.ipynb"

    def notebook_path(self, module: Module) -> Path:
        return self.root / module.notebook_relpath

    # ---- progress --------------------------------------------------------------------
    def load_progress(self) -> dict:
        recovery = (
            "Your notebooks and package are untouched. To recover, run `tito system "
            "repair-progress` (it keeps the damaged file as a backup and rebuilds progress "
            "by re-testing your notebooks)."
        )
        if not self.progress_path.is_file():
            raise WorkspaceError(f"{self.progress_path} is missing. {recovery}")
        try:
            data = json.loads(self.progress_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise WorkspaceError(f"{self.progress_path} is corrupt ({error}). {recovery}") from None
        valid_keys = {m.key for m in MODULES}
        if (
            not isinstance(data, dict)
            or data.get("format") != PROGRESS_FORMAT
            or not isinstance(data.get("completed"), dict)
            or not set(data["completed"]) <= valid_keys
        ):
            raise WorkspaceError(
                f"{self.progress_path} does not have the expected content "
                f"(format {PROGRESS_FORMAT}, a 'completed' table of module numbers). {recovery}"
            )
        return data

    def save_progress(self, data: dict) -> None:
        atomic_write(self.progress_path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def completed(self) -> set[int]:
        return {int(k) for k in self.load_progress()["completed"]}

    def record_completion(self, module: Module, info: dict) -> None:
        data = self.load_progress()
        data["completed"][module.key] = {"completed_at": now_iso(), **info}
        self.save_progress(data)

    def forget_completion(self, module: Module) -> bool:
        data = self.load_progress()
        removed = data["completed"].pop(module.key, None) is not None
        self.save_progress(data)
        return removed

    # ---- the student's package -------------------------------------------------------
    def exported_names(self, module: Module) -> list[str] | None:
        """``__all__`` of the student's export of ``module``; None when it is a placeholder."""
        path = self.root / module.target_path
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
        if text.startswith(PLACEHOLDER):
            return None
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                return list(ast.literal_eval(node.value))
        return []

    def package_plan(self) -> dict[Path, str]:
        """``__init__`` files and placeholders for the package as it stands now."""
        present: dict[int, list[str]] = {}
        missing: dict[str, Module] = {}
        files: dict[Path, str] = {}
        for m in MODULES:
            names = self.exported_names(m)
            if names is not None:
                present[m.number] = names
                continue
            files[m.target_path] = placeholder(m) if m.written else (
                f"{PLACEHOLDER}: module {m.key} ({m.title}) is not written yet.\n"
                f"raise ImportError(\"tinytorch.{m.target} comes from module {m.key} "
                f"({m.title}), which is not written yet: coming soon.\")\n"
            )
            if m.written:
                for name in export_names(m):
                    missing.setdefault(name, m)
        files.update(init_files(present, missing, "your workspace"))
        return files

    def refresh_package(self) -> None:
        for rel, text in self.package_plan().items():
            path = self.root / rel
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                atomic_write(path, text)

    def export_student(self, module: Module, text: str) -> Path:
        path = self.root / module.target_path
        atomic_write(path, text)
        self.refresh_package()
        return path

    # ---- creating --------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, releases: dict) -> "Workspace":
        import nbformat

        ws = cls(root)
        (ws.root / MARKER / "release").mkdir(parents=True, exist_ok=True)
        (ws.root / "modules").mkdir(exist_ok=True)
        for number, notebook in releases.items():
            target = ws.release_path(get_module(number))
            atomic_write(target, nbformat.writes(notebook))
        if not ws.progress_path.is_file():
            ws.save_progress({"format": PROGRESS_FORMAT, "created": now_iso(), "completed": {}})
        ws.refresh_package()
        readme = ws.root / "README.md"
        if not readme.exists():
            readme.write_text(WORKSPACE_README, encoding="utf-8")
        return ws


WORKSPACE_README = """\
# My TinyTorch workspace

    tito module status        what is done, what is next
    tito module start 01      get the notebook for module 01 (modules/01_tensor/tensor.ipynb)
    tito module complete 01   test YOUR code; on success it goes into ./tinytorch
    tito milestone list       historical runs your package can do

Inside this folder, `import tinytorch` is your own package: in `python` run here, and in
Jupyter through the kernel `tito init` registered for this folder ("TinyTorch (<folder>)"),
which every notebook `tito module start` hands out selects. `tito system doctor` checks it.
"""
