"""The sandbox a student's notebook runs in during `tito nbgrader autograde`.

nbgrader itself runs as the instructor (it must write ``gradebook.db``); only the Jupyter
kernel that executes the student's code is sandboxed. The kernel nbgrader starts is a
kernelspec made for the run, whose command is this module's launcher::

    python -m tito.grading.sandbox CONFIG {connection_file}

The launcher (still the instructor, outside the sandbox) checks that the kernel is being
started in the student's own output folder, hands the connection file to the sandbox user
and replaces itself with bubblewrap (``bwrap``, Debian's package ``bubblewrap``):

- no network (``--unshare-net``): the kernel talks to nbgrader over ZMQ's ``ipc`` transport,
  through sockets in a folder made for this one kernel;
- a new PID namespace: the kernel sees only its own processes, and every process it started
  dies with it (``--die-with-parent``);
- a filesystem of read-only system folders (``/usr``, the ``/etc`` files Python needs), the
  Python environment (read-only, with any ``tinytorch``/``tito`` package in it hidden), the
  prerequisite package of the graded module (read-only, first on ``PYTHONPATH``), the
  student's own output folder (read-only: it is the kernel's working folder) and a private,
  size-limited ``/tmp`` (also ``$HOME``). Nothing else: not the course folder (gradebook,
  ``source/``, other students' submissions), not the instructor's home, not the repository.
- a user of its own: ``setpriv`` switches to an unprivileged uid (one per parallel job)
  before Python starts, so the kernel holds no capability and the process limit holds
  (Linux does not enforce RLIMIT_NPROC for uid 0);
- resource limits: address space (memory), processes, CPU seconds, file size.

Why the output folder is read-only: nbgrader writes the graded notebook into that folder,
as the instructor, after the kernel has stopped. A kernel that could write there could
leave a symbolic link named like the notebook, pointing at ``gradebook.db`` or ``source/``,
and nbgrader would follow it. The lessons write their files under ``tempfile``, which is
the private ``/tmp``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

KERNEL_NAME = "tito-grading"
SANDBOX_PACKAGE = "/grading/package"  # where the prerequisite package appears inside
UID_BASE = 62000  # sandbox user of parallel job k: UID_BASE + k (no login, no files)
CONFIG_ENV = "TITO_SANDBOX_CONFIG"


@dataclass
class Limits:
    memory_mb: int = 4096  # address space of each process (RLIMIT_AS)
    processes: int = 128  # processes and threads of the sandbox user (RLIMIT_NPROC)
    cpu_seconds: int = 3600  # CPU time of each process (RLIMIT_CPU)
    file_mb: int = 1024  # largest file written (RLIMIT_FSIZE)
    tmp_mb: int = 1024  # size of the private /tmp


@dataclass
class KernelConfig:
    """What one student's sandboxed kernel may see; written as JSON for the launcher."""

    output: str  # the student's output folder: the kernel's working folder (read-only)
    runtime: str  # this kernel's connection file and ipc sockets
    package: str  # the prerequisite package (holds tinytorch/)
    python: str
    uid: int
    limits: Limits = field(default_factory=Limits)
    read_only: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> "KernelConfig":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["limits"] = Limits(**data["limits"])
        return cls(**data)


# ---- is there a sandbox here? ------------------------------------------------------------
_checked: dict[str, str | None] = {}


def unavailable() -> str | None:
    """None when bubblewrap works here; otherwise why not, in a sentence."""
    if "reason" in _checked:
        return _checked["reason"]
    reason = None
    if platform.system() != "Linux":
        reason = (f"autograde's sandbox needs Linux (bubblewrap); this is "
                  f"{platform.system()}")
    elif shutil.which("bwrap") is None:
        reason = ("bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap` "
                  "(Debian/Ubuntu) or `dnf install bubblewrap`")
    elif shutil.which("setpriv") is None:
        reason = "`setpriv` (util-linux) is not installed"
    elif os.geteuid() != 0:
        reason = ("the sandbox switches each kernel to a user of its own, which needs root: "
                  "run autograde as root (e.g. in the grading container)")
    else:
        probe = subprocess.run(
            ["bwrap", *_base_args(), "--ro-bind", "/", "/", "--",
             "setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups",
             "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            reason = f"bubblewrap does not work here: {probe.stderr.strip()[:300]}"
    _checked["reason"] = reason
    return reason


# ---- the kernelspec of a grading run -------------------------------------------------------
def write_kernelspec(folder: Path, sandboxed: bool, package: Path) -> Path:
    """``folder/kernels/tito-grading/kernel.json``; returns the folder for JUPYTER_PATH.

    Sandboxed, the kernel is this module's launcher; with ``--unsafe``, a plain ipykernel
    whose ``tinytorch`` is still the prerequisite package (first on PYTHONPATH).
    """
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    if sandboxed:
        spec = {
            "argv": [sys.executable, "-m", "tito.grading.sandbox", "{connection_file}"],
            "display_name": "TinyTorch grading (sandboxed)",
            "language": "python",
            # SIGINT would reach bubblewrap, not the kernel: interrupt over the control channel.
            "interrupt_mode": "message",
        }
    else:
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "TinyTorch grading (unsandboxed)",
            "language": "python",
            "env": {"PYTHONPATH": str(package), "PYTHONNOUSERSITE": "1"},
        }
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


# ---- the launcher (the kernel nbgrader starts) ----------------------------------------------
def _base_args() -> list[str]:
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf",
             "passwd", "group", "alternatives", "mime.types", "ssl/certs", "fonts")


def bwrap_argv(cfg: KernelConfig, connection_file: str) -> list[str]:
    args = ["bwrap", *_base_args(), "--clearenv"]
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        path = Path("/etc", name)
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(cfg.limits.tmp_mb * 2**20), "--perms", "1777", "--tmpfs", "/tmp"]
    # bwrap would make the folders above a bind as private as they are outside (/root is
    # 0700): they are made traversable first, empty but for what is bound into them.
    made: set[str] = {"/", "/tmp"}

    def bind(kind: str, source: str, dest: str) -> None:
        for parent in reversed(Path(dest).parents):
            if str(parent) not in made:
                made.add(str(parent))
                args.extend(["--perms", "0755", "--dir", str(parent)])
        args.extend([kind, source, dest])

    for folder in cfg.read_only:
        bind("--ro-bind", folder, folder)
    for folder in cfg.hidden:
        args += ["--tmpfs", folder]
    bind("--ro-bind", cfg.package, SANDBOX_PACKAGE)
    bind("--ro-bind", cfg.output, cfg.output)
    bind("--bind", cfg.runtime, cfg.runtime)
    args += ["--chdir", cfg.output, "--remount-ro", "/"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
           "LANG": "C.UTF-8", "PYTHONPATH": SANDBOX_PACKAGE, "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "IPYTHONDIR": "/tmp/.ipython"}
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if name in os.environ:
            env[name] = os.environ[name]
    for name, value in env.items():
        args += ["--setenv", name, value]
    args += ["--", "setpriv", f"--reuid={cfg.uid}", f"--regid={cfg.uid}", "--clear-groups",
             "--inh-caps=-all", "--bounding-set=-all",
             cfg.python, "-m", "ipykernel_launcher", "-f", connection_file]
    return args


def _set_limits(limits: Limits) -> None:
    import resource

    mib = 2**20
    for which, value in ((resource.RLIMIT_AS, limits.memory_mb * mib),
                         (resource.RLIMIT_NPROC, limits.processes),
                         (resource.RLIMIT_CPU, limits.cpu_seconds),
                         (resource.RLIMIT_FSIZE, limits.file_mb * mib),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))


def launch(connection_file: str) -> None:
    """Replace this process with the sandboxed kernel (never returns)."""
    where = os.environ.get(CONFIG_ENV)
    if not where:
        sys.exit(f"tito's grading kernel needs {CONFIG_ENV} (set by `tito nbgrader autograde`)")
    cfg = KernelConfig.read(where)
    here = Path.cwd().resolve()
    if here != Path(cfg.output).resolve():
        sys.exit(f"tito's grading kernel was started in {here}, not in the student's output "
                 f"folder {cfg.output}: refusing to run")
    connection = Path(connection_file).resolve()
    if connection.parent != Path(cfg.runtime).resolve():
        sys.exit(f"connection file {connection} is outside this kernel's folder {cfg.runtime}")
    # The sandbox user creates the ipc sockets here and must read the connection file; the
    # folder's parent is private to the instructor, so nothing else can reach either.
    os.chown(cfg.runtime, cfg.uid, cfg.uid)
    os.chown(connection, cfg.uid, cfg.uid)
    argv = bwrap_argv(cfg, str(connection))
    _set_limits(cfg.limits)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tito.grading.sandbox CONNECTION_FILE")
    launch(sys.argv[1])
