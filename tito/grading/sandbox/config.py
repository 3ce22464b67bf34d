"""What one student's sandbox is given: where things appear inside it, its limits, the
kernelspec nbgrader starts, and the Python folders it may read."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

KERNEL_NAME = "tito-grading"
SANDBOX_PACKAGE = "/grading/package"  # where the prerequisite package appears inside
GUARD = "/grading/guard"  # protect.py, snapshots.py, driver.py, kernel.py
WORK = "/grading/work"  # the student's output folder, read-only: the working folder
RUNTIME = "/grading/runtime"  # the connection file and the ipc sockets
CONFIG_INSIDE = "/grading/config.json"  # what the guard needs (kernel.py's CONFIG)
DATA = "/grading/data"
UID_BASE = 62000  # sandbox users: UID_BASE .. UID_BASE + UID_COUNT - 1 (no login, no files)
UID_COUNT = 1000
CONFIG_ENV = "TITO_SANDBOX_CONFIG"
GUARD_FILES = ("protect.py", "snapshots.py", "driver.py", "kernel.py")




@dataclass
class Limits:
    memory_mb: int = 4096  # the whole sandbox (control group); also each process's address space
    processes: int = 128  # processes and threads of the whole sandbox (and of its uid)
    cpu_seconds: int = 3600  # CPU time of each process (RLIMIT_CPU)
    file_mb: int = 1024  # largest file written (RLIMIT_FSIZE)
    tmp_mb: int = 1024  # size of the private /tmp (a tmpfs: counted in memory_mb)
    runtime_mb: int = 16  # size of the kernel's runtime folder (connection file, sockets)


@dataclass
class KernelConfig:
    """What one student's sandbox may see; written as JSON for the launcher."""

    output: str  # the student's output folder, bound read-only at WORK
    runtime: str  # this kernel's connection file and ipc sockets (a tmpfs when possible)
    package: str  # the prerequisite package (holds tinytorch/)
    python: str
    uid: int
    limits: Limits = field(default_factory=Limits)
    read_only: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    guard: str = ""  # the folder holding GUARD_FILES
    guard_config: str = ""  # kernel.py's CONFIG, bound at CONFIG_INSIDE
    data: str = ""  # the course's data folder, bound at DATA
    cgroups: list[str] = field(default_factory=list)  # folders whose cgroup.procs to join

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> KernelConfig:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["limits"] = Limits(**data["limits"])
        return cls(**data)


# ---- the kernelspec of a grading run -------------------------------------------------------
def write_kernelspec(folder: Path, sandboxed: bool, package: Path, guard: Path) -> Path:
    """``folder/kernels/tito-grading/kernel.json``; returns the folder for JUPYTER_PATH.

    Sandboxed, the kernel is this package's launcher; with ``--unsafe``, the guarded kernel
    (``kernel.py``) started by the launcher without a sandbox, whose ``tinytorch`` is still
    the prerequisite package.
    """
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    mode = "kernel" if sandboxed else "unsafe"
    spec = {
        "argv": [sys.executable, "-m", "tito.grading.sandbox", mode, "{connection_file}"],
        "display_name": f"TinyTorch grading ({'sandboxed' if sandboxed else 'unsandboxed'})",
        "language": "python",
    }
    if sandboxed:
        # SIGINT would reach bubblewrap, not the kernel: interrupt over the control channel.
        spec["interrupt_mode"] = "message"
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return folder


def python_folders(forbidden: list[Path]) -> tuple[list[str], list[str]]:
    """(folders to bind read-only, package folders inside them to hide) for this Python.

    Refuses when a folder would expose one of ``forbidden`` (the course, the repository).
    """
    folders: list[Path] = []
    for entry in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  str(Path(sys.executable).resolve().parent.parent), *sys.path):
        if not entry:
            continue
        path = Path(entry).resolve()
        if not path.exists():
            continue
        if path.is_file():  # python311.zip
            path = path.parent
        folders.append(path)
    kept: list[Path] = []
    for path in sorted(set(folders), key=lambda p: len(p.parts)):
        if any(path.is_relative_to(k) for k in kept):
            continue
        if any(f.resolve().is_relative_to(path) for f in forbidden):
            continue  # the repository itself on sys.path (an editable install): left out
        kept.append(path)
    hidden = []
    for path in kept:
        for site in [path, *path.glob("lib/python3*/site-packages"),
                     *path.glob("lib/python3*/dist-packages"), *path.glob("site-packages")]:
            for name in ("tinytorch", "tito"):
                if (site / name).is_dir():
                    hidden.append(str(site / name))
    for entry in sys.path:
        for name in ("tinytorch", "tito"):
            candidate = Path(entry or ".").resolve() / name
            if candidate.is_dir() and any(candidate.is_relative_to(k) for k in kept):
                hidden.append(str(candidate))
    return [str(p) for p in kept], sorted(set(hidden))


def copy_guard(folder: Path) -> Path:
    """The guard's files (``tito/guard``) copied for the sandbox, where tito is not."""
    source = Path(__file__).resolve().parents[2] / "guard"
    folder.mkdir(parents=True, exist_ok=True)
    for name in GUARD_FILES:
        shutil.copyfile(source / name, folder / name)
    return folder
