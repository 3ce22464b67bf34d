"""The sandbox a student's code runs in during `tito nbgrader autograde`, twice per student.

nbgrader itself runs as the instructor (it must write ``gradebook.db``); what is sandboxed is
(1) the Jupyter kernel nbgrader starts for the student's notebook, whose command is this
module's launcher (``python -m tito.grading.sandbox kernel {connection_file}``), and (2) the
second grading (``verify.py``), the guarded driver run on the student's solution cells and the
instructor's own tests (``python -m tito.grading.sandbox driver CONFIG``).

The launcher (still the instructor, outside the sandbox) joins the student's control group,
sets the per-process limits, and replaces itself with bubblewrap (``bwrap``, Debian's
``bubblewrap``), whose options it passes through a pipe (``--args``), so no host path shows
in ``/proc/1/cmdline`` inside. Inside:

- **a user of its own per kernel**: ``setpriv`` switches to an unprivileged uid leased for
  this student alone (``UidLease``: a lock file per uid), never shared with another run or
  another job, so one student's processes never count against another's;
- **no network** (``--unshare-net``): the kernel talks to nbgrader over ZMQ's ``ipc``
  transport, through sockets in a folder made for this one kernel;
- **a new PID namespace and session**: the kernel sees only its own processes; every process
  it started dies with it (``--die-with-parent``), and the control group is emptied after;
- **no user namespaces**: a seccomp filter refuses ``unshare``/``clone`` with
  ``CLONE_NEWUSER``. (bwrap's own ``--disable-userns`` needs bwrap to make a user namespace
  of its own, in which the kernel would be root outside it: the filter gives the same result
  with a real uid.)
- **a filesystem of read-only folders**: ``/usr``, the ``/etc`` files Python, ``pwd``,
  ``localtime`` and ``ssl`` read (``/etc`` itself readable; a ``passwd`` that names the
  sandbox user), the Python environment (with any ``tinytorch``/``tito`` package in it
  hidden), the prerequisite package at ``/grading/package``, the guard at ``/grading/guard``,
  the student's output folder at ``/grading/work`` (read-only; the working folder), the
  course's data at ``/grading/data``. Writable: a private ``/tmp`` (also ``$HOME``), a tmpfs
  of ``tmp_mb``, and the kernel's runtime folder ``/grading/runtime``, itself a tmpfs of
  ``runtime_mb`` mounted on the host. Nothing else: not the course folder (gradebook,
  ``source/``, other students' submissions), not the instructor's home, not the repository.
- **limits for the whole sandbox**: a control group (cgroup v1 ``memory`` and ``pids``, or
  cgroup v2) holds the memory (``memory_mb``, tmpfs pages included: the disk is memory here)
  and the processes (``processes``) of every process of the student together; per process,
  address space (the same ``memory_mb``: a single huge allocation is a MemoryError, not the
  kernel killed), CPU seconds, file size.

Why the output folder is read-only: nbgrader writes the graded notebook into that folder, as
the instructor, after the kernel has stopped. A kernel that could write there could leave a
symbolic link named like the notebook, pointing at ``gradebook.db`` or ``source/``, and
nbgrader would follow it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KERNEL_NAME = "tito-grading"
SANDBOX_PACKAGE = "/grading/package"  # where the prerequisite package appears inside
GUARD = "/grading/guard"  # protect.py, driver.py, kernel.py
WORK = "/grading/work"  # the student's output folder, read-only: the working folder
RUNTIME = "/grading/runtime"  # the connection file and the ipc sockets
CONFIG_INSIDE = "/grading/config.json"  # what the guard needs (kernel.py's CONFIG)
DATA = "/grading/data"
UID_BASE = 62000  # sandbox users: UID_BASE .. UID_BASE + UID_COUNT - 1 (no login, no files)
UID_COUNT = 1000
CONFIG_ENV = "TITO_SANDBOX_CONFIG"
GUARD_FILES = ("protect.py", "driver.py", "kernel.py")


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
    elif platform.machine() not in _SYSCALLS:
        reason = f"the sandbox's seccomp filter knows x86_64 and aarch64, not {platform.machine()}"
    else:
        filter_fd = _seccomp_fd()
        probe = subprocess.run(
            ["bwrap", *_base_args(), "--seccomp", str(filter_fd), "--ro-bind", "/", "/", "--",
             "setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups",
             "true"], capture_output=True, text=True, pass_fds=(filter_fd,))
        os.close(filter_fd)
        if probe.returncode != 0:
            reason = f"bubblewrap does not work here: {probe.stderr.strip()[:300]}"
    _checked["reason"] = reason
    return reason


# ---- one uid per kernel ----------------------------------------------------------------------
def _lock_folder() -> Path:
    for folder in (Path("/run/tito-sandbox"), Path(tempfile.gettempdir()) / "tito-sandbox"):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise OSError("no folder for the sandbox's uid locks (/run or the temporary folder)")


def _uid_busy(uid: int) -> bool:
    """Whether a process still runs as ``uid`` (a run that crashed and left one behind)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    return True
            except OSError:
                continue
    return False


class UidLease:
    """An unprivileged uid for one student's sandbox, held (a lock file) until released.

    Two `autograde` runs at once, or the jobs of one, never get the same uid: a process limit
    and the files a sandbox leaves belong to that one student only.
    """

    def __init__(self):
        import fcntl

        folder = _lock_folder()
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            fd = os.open(folder / f"uid-{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if _uid_busy(uid):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise OSError(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


# ---- a control group per student ----------------------------------------------------------
def _own_cgroups() -> dict[str, str]:
    """controller (``memory``, ``pids``, ``freezer``, or ``""`` for cgroup v2) -> this
    process's cgroup path, from /proc/self/cgroup."""
    found = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                found[controller] = parts[2]
    return found


class Cgroup:
    """Memory and process limits for every process of one student's sandbox together."""

    ROOT = Path("/sys/fs/cgroup")

    def __init__(self, name: str, limits: Limits):
        self.dirs: dict[str, Path] = {}
        self.version = 0
        own = _own_cgroups()
        v1 = all((self.ROOT / c / "cgroup.procs").exists() for c in ("memory", "pids"))
        memory = limits.memory_mb * 2**20
        try:
            if v1 and "memory" in own and "pids" in own:
                self.version = 1
                for controller in ("memory", "pids", "freezer"):
                    if controller not in own or not (self.ROOT / controller).is_dir():
                        continue
                    folder = self.ROOT / controller / own[controller].lstrip("/") / "tito" / name
                    folder.mkdir(parents=True, exist_ok=True)
                    self.dirs[controller] = folder
                _write(self.dirs["memory"] / "memory.limit_in_bytes", memory)
                if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                    _write(self.dirs["memory"] / "memory.memsw.limit_in_bytes", memory)
                _write(self.dirs["pids"] / "pids.max", limits.processes)
            else:
                unified = self.ROOT if (self.ROOT / "cgroup.controllers").exists() \
                    else self.ROOT / "unified"
                base = unified / own.get("", "/").lstrip("/")
                wanted = {"memory", "pids"}
                if not wanted <= set((base / "cgroup.controllers").read_text().split()):
                    raise OSError("cgroup v2 without the memory and pids controllers here")
                folder = base / "tito" / name
                folder.mkdir(parents=True, exist_ok=True)
                self.version = 2
                self.dirs[""] = folder
                _write(folder / "memory.max", memory)
                if (folder / "memory.swap.max").exists():
                    _write(folder / "memory.swap.max", 0)
                _write(folder / "pids.max", limits.processes)
        except OSError as error:
            self.remove()
            raise OSError(f"could not make a control group for the sandbox: {error}") from None
        self._pids_at_start = self._pids_refused()

    def join_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> set[int]:
        found = set()
        for folder in self.dirs.values():
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def kill(self) -> None:
        """SIGKILL every process left (frozen first, so none can fork in between)."""
        freezer = self.dirs.get("freezer")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            if freezer is not None:
                _write(freezer / "freezer.state", "FROZEN", quiet=True)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if freezer is not None:
                _write(freezer / "freezer.state", "THAWED", quiet=True)
            time.sleep(0.05)

    def _pids_refused(self) -> int:
        folder = self.dirs.get("pids") or self.dirs.get("")
        try:
            for line in (folder / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError, TypeError):
            pass
        return 0

    def pressure(self) -> dict[str, int]:
        """What the limits refused so far: memory failures and refused forks."""
        memory = self.dirs.get("memory") or self.dirs.get("")
        failed = 0
        try:
            if self.version == 1:
                failed = int((memory / "memory.failcnt").read_text())
            else:
                for line in (memory / "memory.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("max", "oom_kill"):
                        failed += int(value)
        except (OSError, ValueError, TypeError):
            pass
        return {"memory": failed, "processes": self._pids_refused() - self._pids_at_start}

    def remove(self) -> None:
        self.kill()
        for folder in self.dirs.values():
            for _ in range(20):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            try:
                folder.parent.rmdir()  # the "tito" group, once no run of any student is left
            except OSError:
                pass


def _write(path: Path, value, quiet: bool = False) -> None:
    try:
        Path(path).write_text(str(value))
    except OSError:
        if not quiet:
            raise


# ---- a size-limited runtime folder ---------------------------------------------------------
def mount_runtime(folder: Path, size_mb: int, uid: int) -> bool:
    """``folder`` as a tmpfs of ``size_mb`` owned by ``uid`` (True), or a plain folder when
    mounting is not possible here (False: then only RLIMIT_FSIZE bounds it)."""
    folder.mkdir(mode=0o700, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o",
                           f"size={size_mb}m,mode=0700,uid={uid},gid={uid},nosuid,nodev",
                           "tito-runtime", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        os.chown(folder, uid, uid)
        return False
    return True


def unmount_runtime(folder: Path, mounted: bool) -> None:
    if mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


# ---- no user namespaces: a seccomp filter ----------------------------------------------------
# (AUDIT_ARCH, unshare, clone, clone3) of each machine the filter knows
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}


def seccomp_filter(machine: str | None = None) -> bytes:
    """A classic BPF program for seccomp: ``unshare`` and ``clone`` with CLONE_NEWUSER fail
    with EPERM, ``clone3`` with ENOSYS (glibc then falls back to ``clone``), x32 system calls
    with EPERM; everything else is allowed."""
    arch, unshare, clone, clone3 = _SYSCALLS[machine or platform.machine()]
    load, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    program = [
        (load, 0, 0, 4),  # 0: the architecture
        (jeq, 1, 0, arch),  # 1: ours -> 3
        (ret, 0, 0, eperm),  # 2: another ABI (a 32-bit call on a 64-bit kernel): refused
        (load, 0, 0, 0),  # 3: the system call's number
        (jge, 0, 1, 0x40000000),  # 4: x32
        (ret, 0, 0, eperm),  # 5
        (jeq, 4, 0, unshare),  # 6 -> 11
        (jeq, 3, 0, clone),  # 7 -> 11
        (jeq, 1, 0, clone3),  # 8 -> 10
        (ret, 0, 0, allow),  # 9
        (ret, 0, 0, enosys),  # 10
        (load, 0, 0, 16),  # 11: the flags (first argument, low word)
        (jset, 0, 1, 0x10000000),  # 12: CLONE_NEWUSER
        (ret, 0, 0, eperm),  # 13
        (ret, 0, 0, allow),  # 14
    ]
    return b"".join(struct.pack("<HBBI", *step) for step in program)


def _seccomp_fd() -> int:
    """A pipe's read end holding the filter (inheritable, for bwrap's --seccomp)."""
    return _data_fd(seccomp_filter())


def _data_fd(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    os.set_inheritable(read, True)
    return read


# ---- the kernelspec of a grading run -------------------------------------------------------
def write_kernelspec(folder: Path, sandboxed: bool, package: Path, guard: Path) -> Path:
    """``folder/kernels/tito-grading/kernel.json``; returns the folder for JUPYTER_PATH.

    Sandboxed, the kernel is this module's launcher; with ``--unsafe``, the guarded kernel
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
    source = Path(__file__).resolve().parents[1] / "guard"
    folder.mkdir(parents=True, exist_ok=True)
    for name in GUARD_FILES:
        shutil.copyfile(source / name, folder / name)
    return folder


# ---- the launcher ----------------------------------------------------------------------------
def _base_args() -> list[str]:
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
             "nsswitch.conf", "host.conf", "hosts", "alternatives", "mime.types", "ssl",
             "ca-certificates", "fonts", "os-release", "matplotlibrc")


def bwrap_options(cfg: KernelConfig, data_fds: list[int]) -> list[str]:
    """bubblewrap's options (passed through a pipe; the command comes after ``--``)."""
    args = [*_base_args(), "--clearenv", "--hostname", "grading"]
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_FILES:
        path = Path("/etc", name)
        if path.exists():
            args += ["--ro-bind", str(path.resolve() if path.is_symlink() else path), str(path)]
    accounts = {
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                  f"student:x:{cfg.uid}:{cfg.uid}:student:/tmp:/usr/sbin/nologin\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nstudent:x:{cfg.uid}:\nnogroup:x:65534:\n",
    }
    for name, text in accounts.items():
        fd = _data_fd(text.encode())
        data_fds.append(fd)
        args += ["--perms", "0644", "--ro-bind-data", str(fd), f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(cfg.limits.tmp_mb * 2**20), "--perms", "1777", "--tmpfs", "/tmp"]
    # bwrap would make the folders above a bind as private as they are outside (/root is
    # 0700): they are made traversable first, empty but for what is bound into them.
    made: set[str] = {"/", "/tmp", "/etc"}

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
    if cfg.guard:
        bind("--ro-bind", cfg.guard, GUARD)
    if cfg.guard_config:
        bind("--ro-bind", cfg.guard_config, CONFIG_INSIDE)
    if cfg.data and Path(cfg.data).is_dir():
        bind("--ro-bind", cfg.data, DATA)
    bind("--ro-bind", cfg.output, WORK)
    if cfg.runtime:
        bind("--bind", cfg.runtime, RUNTIME)
    fd = _seccomp_fd()
    data_fds.append(fd)
    args += ["--seccomp", str(fd), "--chdir", WORK, "--remount-ro", "/"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
           "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "IPYTHONDIR": "/tmp/.ipython", "TINYTORCH_DATA": DATA}
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ"):
        if name in os.environ:
            env[name] = os.environ[name]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def sandbox_command(cfg: KernelConfig, command: list[str], data_fds: list[int]) -> list[str]:
    """The argv that runs ``command`` (paths as seen inside) in ``cfg``'s sandbox, as its
    user. The options go to bwrap through a pipe (``--args``), so no host path is shown in the
    sandbox's ``/proc/1/cmdline``; ``data_fds`` collects the descriptors to keep open."""
    options = bwrap_options(cfg, data_fds)
    fd = _data_fd(b"".join(a.encode() + b"\0" for a in options))
    data_fds.append(fd)
    return ["bwrap", "--args", str(fd), "--",
            "setpriv", f"--reuid={cfg.uid}", f"--regid={cfg.uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", *command]


def _set_limits(limits: Limits) -> None:
    import resource

    mib = 2**20
    for which, value in ((resource.RLIMIT_AS, limits.memory_mb * mib),
                         (resource.RLIMIT_NPROC, limits.processes),
                         (resource.RLIMIT_CPU, limits.cpu_seconds),
                         (resource.RLIMIT_FSIZE, limits.file_mb * mib),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))


def _join(cfg: KernelConfig) -> None:
    for procs in cfg.cgroups:
        Path(procs).write_text(str(os.getpid()))


def launch(mode: str, argument: str) -> None:
    """Replace this process with the sandboxed kernel or driver (never returns).

    ``kernel CONNECTION_FILE``: nbgrader's kernel (config in $TITO_SANDBOX_CONFIG);
    ``driver CONFIG``: the second grading's driver (its stdin and stdout pass through);
    ``unsafe CONNECTION_FILE``: the guarded kernel without a sandbox (``--unsafe``), which
    writes its process id beside the connection file so that autograde ends its session.
    """
    if mode == "driver":
        cfg = KernelConfig.read(argument)
    else:
        where = os.environ.get(CONFIG_ENV)
        if not where:
            sys.exit(f"tito's grading kernel needs {CONFIG_ENV} (set by `tito nbgrader autograde`)")
        cfg = KernelConfig.read(where)
    if mode == "unsafe":
        connection = Path(argument).resolve()
        (connection.parent / "kernel.pid").write_text(str(os.getpid()))
        command = [sys.executable, "-I", "-B", str(Path(cfg.guard) / "kernel.py"),
                   cfg.guard_config, "-f", str(connection)]
        os.execv(command[0], command)
    here = Path.cwd().resolve()
    if mode == "kernel":
        if here != Path(cfg.output).resolve():
            sys.exit(f"tito's grading kernel was started in {here}, not in the student's output "
                     f"folder {cfg.output}: refusing to run")
        connection = Path(argument).resolve()
        if connection.parent != Path(cfg.runtime).resolve():
            sys.exit(f"connection file {connection} is outside this kernel's folder {cfg.runtime}")
        # The kernel sees its runtime folder at RUNTIME: the same sockets, another path.
        info = json.loads(connection.read_text())
        if info.get("transport") == "ipc":
            info["ip"] = f"{RUNTIME}/ipc"
        inside = Path(cfg.runtime) / "kernel.json"
        inside.write_text(json.dumps(info))
        os.chown(cfg.runtime, cfg.uid, cfg.uid)
        os.chown(inside, cfg.uid, cfg.uid)
        command = [cfg.python, "-I", "-B", f"{GUARD}/kernel.py", CONFIG_INSIDE,
                   "-f", f"{RUNTIME}/kernel.json"]
    elif mode == "driver":
        command = [cfg.python, "-I", "-B", f"{GUARD}/driver.py"]
    else:
        sys.exit(f"unknown mode {mode!r}: kernel, driver or unsafe")
    _join(cfg)
    data_fds: list[int] = []
    argv = sandbox_command(cfg, command, data_fds)
    _set_limits(cfg.limits)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tito.grading.sandbox kernel|unsafe CONNECTION_FILE | "
                 "driver CONFIG")
    launch(sys.argv[1], sys.argv[2])
