"""What one student's sandbox holds while it runs: a uid of its own (``UidLease``), a control
group for its memory and processes (``Cgroup``), a size-limited runtime folder, and the
per-process limits the launcher sets before it becomes bubblewrap."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .config import UID_BASE, UID_COUNT, KernelConfig, Limits


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


# ---- the launcher's own process --------------------------------------------------------
def set_limits(limits: Limits) -> None:
    """The per-process limits (memory, processes, CPU seconds, file size, no core files)."""
    import resource

    mib = 2**20
    for which, value in ((resource.RLIMIT_AS, limits.memory_mb * mib),
                         (resource.RLIMIT_NPROC, limits.processes),
                         (resource.RLIMIT_CPU, limits.cpu_seconds),
                         (resource.RLIMIT_FSIZE, limits.file_mb * mib),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))


def join_cgroups(cfg: KernelConfig) -> None:
    """Move this process into the student's control groups (before it becomes bubblewrap)."""
    for procs in cfg.cgroups:
        Path(procs).write_text(str(os.getpid()))
