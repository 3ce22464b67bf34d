"""How a sandbox is made: bubblewrap's options and the seccomp filter that refuses user
namespaces. The launcher (``__main__.py``) runs what ``sandbox_command`` returns."""

from __future__ import annotations

import os
import platform
import struct
from pathlib import Path

from .config import CONFIG_INSIDE, DATA, GUARD, RUNTIME, SANDBOX_PACKAGE, WORK, KernelConfig

# ---- no user namespaces: a seccomp filter ----------------------------------------------------
# (AUDIT_ARCH, unshare, clone, clone3) of each machine the filter knows
SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}


def seccomp_filter(machine: str | None = None) -> bytes:
    """A classic BPF program for seccomp: ``unshare`` and ``clone`` with CLONE_NEWUSER fail
    with EPERM, ``clone3`` with ENOSYS (glibc then falls back to ``clone``), x32 system calls
    with EPERM; everything else is allowed."""
    arch, unshare, clone, clone3 = SYSCALLS[machine or platform.machine()]
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


def seccomp_fd() -> int:
    """A pipe's read end holding the filter (inheritable, for bwrap's --seccomp)."""
    return data_fd(seccomp_filter())


def data_fd(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    os.set_inheritable(read, True)
    return read


# ---- bubblewrap's options -------------------------------------------------------------
def base_args() -> list[str]:
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
             "nsswitch.conf", "host.conf", "hosts", "alternatives", "mime.types", "ssl",
             "ca-certificates", "fonts", "os-release", "matplotlibrc")


# The instructor's thread settings reach the student's kernel (and the time zone).
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "TZ")


def bwrap_options(cfg: KernelConfig, data_fds: list[int]) -> list[str]:
    """bubblewrap's options (passed through a pipe; the command comes after ``--``)."""
    args = [*base_args(), "--clearenv", "--hostname", "grading"]
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
        fd = data_fd(text.encode())
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
    fd = seccomp_fd()
    data_fds.append(fd)
    args += ["--seccomp", str(fd), "--chdir", WORK, "--remount-ro", "/"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
           "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "IPYTHONDIR": "/tmp/.ipython", "TINYTORCH_DATA": DATA}
    for name in THREAD_VARIABLES:
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
    fd = data_fd(b"".join(a.encode() + b"\0" for a in options))
    data_fds.append(fd)
    return ["bwrap", "--args", str(fd), "--",
            "setpriv", f"--reuid={cfg.uid}", f"--regid={cfg.uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", *command]
