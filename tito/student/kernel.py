"""A Jupyter kernel per workspace, so that a notebook imports the student's own `tinytorch`.

`tito module complete` tests the package in the workspace; a notebook opened with
`jupyter lab` must see the same package, not whichever `tinytorch` the Python environment
holds (in the course repository's editable install: the reference solution). `tito init`
registers a kernel for the workspace and every notebook it hands out names it:

    name:          tinytorch-<first 10 hex digits of sha256(workspace path)>
    display name:  TinyTorch (<folder name>)
    env:           PYTHONPATH=<workspace>   (so `import tinytorch` is the workspace's)
                   TINYTORCH_DATA=<the course's data folder> (module 10 reads Tiny Shakespeare)

It is installed as a user kernel (``jupyter_data_dir()/kernels``, which follows
``JUPYTER_DATA_DIR``), found by any Jupyter the student runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..course.registry import DATA_DIR, DATA_ENV


def kernel_name(root: Path) -> str:
    digest = hashlib.sha256(str(Path(root).resolve()).encode("utf-8")).hexdigest()[:10]
    return f"tinytorch-{digest}"


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
        "metadata": {"tinytorch_workspace": str(root)},
    }
    with tempfile.TemporaryDirectory(prefix="tito-kernel-") as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
        where = KernelSpecManager().install_kernel_spec(tmp, kernel_name(root), user=True)
    return Path(where)


def find_kernel(root: Path):
    """The installed kernelspec of the workspace, or None."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        return KernelSpecManager().get_kernel_spec(kernel_name(root))
    except NoSuchKernel:
        return None


def kernel_imports(spec, root: Path) -> tuple[bool, str]:
    """Run the kernel's interpreter with its environment: which `tinytorch` does it import?"""
    root = Path(root).resolve()
    env = {**os.environ, **(spec.env or {})}
    folder = root / "modules" if (root / "modules").is_dir() else root  # a notebook's folder
    done = subprocess.run(
        [spec.argv[0], "-c", "import tinytorch, sys; print(tinytorch.__file__)"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return False, f"the kernel cannot import tinytorch: {tail}"
    where = done.stdout.strip()
    if not Path(where).resolve().is_relative_to(root):
        return False, f"the kernel imports {where}, not your workspace's package"
    return True, where


def set_kernel(notebook_path: Path, root: Path) -> None:
    """Point a handed-out notebook at the workspace's kernel (the JSON is kept otherwise)."""
    data = json.loads(Path(notebook_path).read_text(encoding="utf-8"))
    data.setdefault("metadata", {})["kernelspec"] = kernelspec(root)
    Path(notebook_path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
