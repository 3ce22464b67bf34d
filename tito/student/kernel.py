"""A Jupyter kernel per workspace, so that a notebook imports the student's own `tinytorch`.

`tito module complete` tests the package in the workspace; a notebook opened with
`jupyter lab` must see the same package, not whichever `tinytorch` the Python environment
holds (in the course repository's editable install: the reference solution). `tito init`
registers a kernel for the workspace and every notebook it hands out names it:

    name:          tinytorch-<first 10 hex digits of sha256(workspace path)>
    display name:  TinyTorch (<folder name>)
    env:           PYTHONPATH=<workspace>   (so `import tinytorch` is the workspace's)
                   TINYTORCH_DATA=<the course's data folder> (module 10 reads Tiny Shakespeare)
    metadata:      tinytorch_workspace=<workspace path>

It is installed as a user kernel (``jupyter_data_dir()/kernels``, which follows
``JUPYTER_DATA_DIR``), found by any Jupyter the student runs.

The name follows the folder, so a copied or moved workspace is a new folder with a kernel of
its own to register, while its notebooks still name the old one (whose ``PYTHONPATH`` is the
old folder's package, or a folder that is gone). ``misdirected_notebooks`` finds them,
``point_notebooks`` fixes them, ``dead_kernels`` lists the kernels of deleted workspaces.

Looking kernels up reads the kernel folders directly (``jupyter_core.paths``, the folders
``jupyter kernelspec list`` reads): importing ``jupyter_client`` costs a third of a second,
and `tito system doctor` has two seconds in all.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..course.registry import DATA_DIR, DATA_ENV, written_modules
from ..files import atomic_write

PREFIX = "tinytorch-"
WORKSPACE_KEY = "tinytorch_workspace"
# Which tinytorch the kernel's interpreter imports, and whether ipykernel is there. With the
# argument "find", the file `import tinytorch` would run is located without running it: doctor
# runs the package itself with this same interpreter in another process (it imports NumPy and
# every completed module, half a second), and what differs in the kernel, PYTHONPATH and the
# folder, decides which file is found. A kernel with another interpreter imports it for real.
PROBE = """\
import importlib.util, sys
if sys.argv[1:] == ["find"]:
    spec = importlib.util.find_spec("tinytorch")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("No module named 'tinytorch'")
    print(spec.origin)
else:
    import tinytorch
    print(tinytorch.__file__)
print(importlib.util.find_spec("ipykernel") is not None)
"""


def kernel_name(root: Path) -> str:
    digest = hashlib.sha256(str(Path(root).resolve()).encode("utf-8")).hexdigest()[:10]
    return f"{PREFIX}{digest}"


def kernelspec(root: Path) -> dict:
    """The notebook metadata that selects the workspace's kernel."""
    return {"name": kernel_name(root), "display_name": f"TinyTorch ({Path(root).resolve().name})",
            "language": "python"}


def install_kernel(root: Path) -> Path:
    """Register (or refresh) the workspace's kernel; returns the folder holding kernel.json."""
    from jupyter_client.kernelspec import KernelSpecManager

    root = Path(root).resolve()
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": kernelspec(root)["display_name"],
        "language": "python",
        "env": {"PYTHONPATH": str(root), DATA_ENV: str(DATA_DIR)},
        "metadata": {WORKSPACE_KEY: str(root)},
    }
    with tempfile.TemporaryDirectory(prefix="tito-kernel-") as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
        where = KernelSpecManager().install_kernel_spec(tmp, kernel_name(root), user=True)
    return Path(where)


# ---- looking kernels up ------------------------------------------------------------------
@dataclass
class Kernel:
    name: str
    folder: Path
    argv: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    workspace: Path | None = None  # the workspace a tinytorch kernel was registered for

    @property
    def alive(self) -> bool:
        """Its workspace still exists (a folder with .tito)."""
        return self.workspace is not None and (self.workspace / ".tito").is_dir()


def kernel_folders() -> list[Path]:
    """Where Jupyter looks for kernels, in its order (the user's folder first)."""
    from jupyter_core.paths import jupyter_path

    return [Path(p) for p in jupyter_path("kernels")]


def installed_kernels() -> dict[str, Path]:
    """Kernel name -> its folder, the first found of each name, as Jupyter picks them."""
    found: dict[str, Path] = {}
    for folder in kernel_folders():
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if (entry / "kernel.json").is_file():
                found.setdefault(entry.name.lower(), entry)
    return found


def read_kernel(name: str, folder: Path) -> Kernel:
    try:
        spec = json.loads((folder / "kernel.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    owner = (spec.get("metadata") or {}).get(WORKSPACE_KEY)
    return Kernel(name, folder, list(spec.get("argv") or []), dict(spec.get("env") or {}),
                  Path(owner) if owner else None)


def find_kernel(root: Path) -> Kernel | None:
    """The installed kernel of the workspace at ``root``, or None."""
    folder = installed_kernels().get(kernel_name(root))
    return None if folder is None else read_kernel(kernel_name(root), folder)


def workspace_kernels() -> list[Kernel]:
    """Every kernel tito registered for a workspace (``tinytorch-*`` with its metadata)."""
    kernels = [read_kernel(name, folder) for name, folder in installed_kernels().items()
               if name.startswith(PREFIX)]
    return [k for k in kernels if k.workspace is not None]


def dead_kernels() -> list[Kernel]:
    """Kernels of workspaces that were deleted or moved away."""
    return [k for k in workspace_kernels() if not k.alive]


def known_workspaces() -> list[Path]:
    """The workspaces this machine has kernels for (to tell a lost student where they are),
    the most recently used first: its progress file changes at every `complete`."""
    def last_used(workspace: Path) -> float:
        for path in (workspace / ".tito" / "progress.json", workspace / ".tito"):
            try:
                return path.stat().st_mtime
            except OSError:
                continue
        return 0.0

    found = {k.workspace for k in workspace_kernels() if k.alive}
    return sorted(found, key=lambda w: (-last_used(w), str(w)))


def remove_kernel(kernel: Kernel) -> None:
    import shutil

    shutil.rmtree(kernel.folder)


# ---- the notebooks of a workspace ----------------------------------------------------------
def notebook_kernel(path: Path) -> str | None:
    """The kernel name a notebook selects (None: none, or not readable)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return ((data.get("metadata") or {}).get("kernelspec") or {}).get("name")
    except (OSError, ValueError, AttributeError):
        return None


@dataclass
class Misdirected:
    notebook: Path  # relative to the workspace
    kernel: str | None
    owner: Path | None  # the workspace that kernel belongs to, when it is one of tito's

    def describe(self, root: Path) -> str:
        if self.kernel is None:
            return f"{self.notebook} selects no kernel"
        if self.owner is not None and self.owner != Path(root).resolve():
            gone = "" if (self.owner / ".tito").is_dir() else ", which no longer exists"
            return (f"{self.notebook} selects kernel {self.kernel}, the kernel of the workspace "
                    f"{self.owner}{gone}: it would import that folder's tinytorch, not yours")
        return (f"{self.notebook} selects kernel {self.kernel}, which does not import this "
                "workspace's tinytorch")


def misdirected_notebooks(root: Path) -> list[Misdirected]:
    """The course's notebooks in the workspace that select another kernel than its own."""
    root = Path(root).resolve()
    mine = kernel_name(root)
    owners = {k.name: k.workspace for k in workspace_kernels()}
    found = []
    for m in written_modules():
        path = root / m.notebook_relpath
        if not path.is_file():
            continue
        name = notebook_kernel(path)
        if name != mine:
            found.append(Misdirected(m.notebook_relpath, name, owners.get(name)))
    return found


def set_kernel(notebook_path: Path, root: Path) -> None:
    """Point a handed-out notebook at the workspace's kernel (the JSON is kept otherwise;
    written atomically, so a crash never leaves half a notebook)."""
    data = json.loads(Path(notebook_path).read_text(encoding="utf-8"))
    data.setdefault("metadata", {})["kernelspec"] = kernelspec(root)
    atomic_write(Path(notebook_path), json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def point_notebooks(root: Path) -> list[Misdirected]:
    """Point every misdirected course notebook at the workspace's own kernel; what was changed."""
    changed = []
    for item in misdirected_notebooks(root):
        try:
            set_kernel(Path(root) / item.notebook, root)
        except (OSError, ValueError):
            continue  # not a readable notebook: `tito module complete` says so, with the fix
        changed.append(item)
    return changed


# ---- does the kernel import the workspace's package? --------------------------------------
def start_probe(kernel: Kernel, root: Path) -> subprocess.Popen:
    """Start the kernel's interpreter with its environment, from a notebook's folder, asking
    which `tinytorch` it imports and whether ipykernel is there (read with ``probe_result``).
    When the kernel's interpreter is this one, the file is located, not run (see PROBE)."""
    root = Path(root).resolve()
    env = {**os.environ, **kernel.env}
    folder = root / "modules" if (root / "modules").is_dir() else root
    how = ["find"] if Path(kernel.argv[0]).resolve() == Path(sys.executable).resolve() else []
    return subprocess.Popen([kernel.argv[0], "-c", PROBE, *how], cwd=folder, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def probe_result(proc: subprocess.Popen, root: Path) -> tuple[bool, str]:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return False, "the kernel's Python did not answer within 120 s"
    if proc.returncode != 0:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        return False, f"the kernel cannot import tinytorch: {tail}"
    lines = out.strip().splitlines()
    where = lines[0] if lines else ""
    if not Path(where).resolve().is_relative_to(Path(root).resolve()):
        return False, f"the kernel imports {where}, not your workspace's package"
    if lines[1:2] != ["True"]:
        return False, "ipykernel is not installed for the kernel's Python (pip install ipykernel)"
    return True, where


def kernel_imports(kernel: Kernel, root: Path) -> tuple[bool, str]:
    """Which `tinytorch` does the kernel import? (ok, its file or what is wrong)."""
    if not kernel.argv:
        return False, f"{kernel.folder / 'kernel.json'} names no interpreter"
    try:
        proc = start_probe(kernel, root)
    except OSError as error:
        return False, f"the kernel's interpreter {kernel.argv[0]} cannot start: {error}"
    return probe_result(proc, root)
