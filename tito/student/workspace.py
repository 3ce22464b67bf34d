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

from ..course.exporter import PLACEHOLDER, export_names, init_files, placeholder, public_names
from ..course.notebook import read_cells
from ..course.registry import MODULES, Module, get_module
from ..errors import ExportError, NotebookError, WorkspaceError
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


def names_of_export(text: str) -> list[str] | None:
    """``__all__`` of an exported file's text; None for a placeholder."""
    if text.startswith(PLACEHOLDER):
        return None
    for line in text.splitlines()[:12]:  # where `render_module` writes it: no need to parse it all
        if line.startswith("__all__ = [") and line.endswith("]"):
            try:
                return list(ast.literal_eval(line.split("=", 1)[1].strip()))
            except (ValueError, SyntaxError):
                break
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return []
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return []
    return []


def not_a_workspace(cwd: Path, what: str) -> str:
    """Where the student is, and where to go: the workspaces this machine has kernels for."""
    from .kernel import known_workspaces

    text = f"You are in {Path(cwd).resolve()}, which is not a TinyTorch workspace (no .tito folder here or above)."
    try:
        known = known_workspaces()
    except Exception:  # noqa: BLE001 - a broken Jupyter install must not hide the real message
        known = []
    if len(known) == 1:
        text += f" Your workspace is {known[0]}: `cd {known[0]}`, then {what} again."
    elif known:
        more = f" and {len(known) - 5} more" if len(known) > 5 else ""
        text += (f" Workspaces on this machine, the most recently used first: "
                 f"{', '.join(str(k) for k in known[:5])}{more}. `cd` into yours, then {what} again.")
    else:
        text += f" `cd` into the folder you made with `tito init DIR`, then {what} again."
    return text + " To make a workspace: `tito init DIR`."


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    # ---- finding ---------------------------------------------------------------------
    @classmethod
    def find(cls, start: Path | None = None) -> "Workspace | None":
        root = find_upwards(start, lambda folder: (folder / MARKER).is_dir())
        return None if root is None else cls(root)

    @classmethod
    def require(cls, what: str = "run this command") -> "Workspace":
        found = cls.find()
        if found is None:
            raise WorkspaceError(
                not_a_workspace(Path.cwd(), what) + " In the course repository, `tito module "
                "test N` tests the reference solution."
            )
        return found

    @staticmethod
    def check_new_root(root: Path) -> None:
        """Refuse to make a workspace inside another one, or around one: the inner one's
        `tito` commands would find the wrong progress, package and kernel."""
        root = Path(root).resolve()
        outer = Workspace.find(root.parent) if root.parent != root else None
        if outer is not None:
            raise WorkspaceError(
                f"{root} is inside the workspace {outer.root} (you are in {Path.cwd()}): a "
                "workspace in a workspace mixes up their progress and packages. Make the new "
                f"one outside it, for example `tito init {outer.root.parent / root.name}`; to "
                f"refresh this workspace's released notebooks instead, `tito init {outer.root} --force`."
            )
        try:
            inner = [p for p in root.iterdir() if (p / MARKER).is_dir()] if root.is_dir() else []
        except OSError:
            inner = []
        if inner and not (root / MARKER).is_dir():
            raise WorkspaceError(
                f"{root} holds the workspace {inner[0]}: a workspace around another mixes up "
                "their progress and packages. Choose a new, empty folder, for example "
                f"`tito init {root / 'my-course-2'}`."
            )

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
        return names_of_export(path.read_text(encoding="utf-8"))

    def release_names(self, module: Module) -> list[str]:
        """The public names ``module`` exports, read from the workspace's released notebook
        (its stubs define them as the lesson does; JSON, fast), else from the course."""
        path = self.release_path(module)
        if path.is_file():
            try:
                return public_names([c for c in read_cells(path) if c.is_public_export], path.name)
            except (NotebookError, ExportError):
                pass  # a damaged release: the course's own list below
        return export_names(module)

    def package_plan(self, pending: dict[int, str] | None = None) -> dict[Path, str]:
        """``__init__`` files and placeholders for the package as it stands now, or as it will
        once the exports in ``pending`` (module number -> text) are written."""
        pending = pending or {}
        present: dict[int, list[str]] = {}
        missing: dict[str, Module] = {}
        files: dict[Path, str] = {}
        for m in MODULES:
            names = (names_of_export(pending[m.number]) if m.number in pending
                     else self.exported_names(m))
            if names is not None:
                present[m.number] = names
                continue
            files[m.target_path] = placeholder(m) if m.written else (
                f"{PLACEHOLDER}: module {m.key} ({m.title}) is not written yet.\n"
                f"raise ImportError(\"tinytorch.{m.target} comes from module {m.key} "
                f"({m.title}), which is not written yet: coming soon.\")\n"
            )
            if m.written:
                for name in self.release_names(m):
                    missing.setdefault(name, m)
        files.update(init_files(present, missing, "your workspace"))
        return files

    def package_files(self, module: Module, text: str) -> dict[Path, str]:
        """Every file of the package that changes when ``text`` becomes ``module``'s export."""
        return {module.target_path: text, **self.package_plan({module.number: text})}

    def install_package(self, files: dict[Path, str]) -> None:
        """Write each file whose text differs (atomically, one by one). A symbolic link in the
        package is replaced by the file itself (the rename replaces the link, not its target)."""
        for rel, text in files.items():
            path = self.root / rel
            if path.is_symlink() or not path.is_file() or path.read_text(encoding="utf-8") != text:
                atomic_write(path, text)

    def refresh_package(self) -> None:
        self.install_package(self.package_plan())

    def export_student(self, module: Module, text: str) -> Path:
        self.install_package(self.package_files(module, text))
        return self.root / module.target_path

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
