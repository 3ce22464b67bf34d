"""The sandbox a student's code runs in during `tito nbgrader autograde`, twice per student.

nbgrader itself runs as the instructor (it must write ``gradebook.db``); what is sandboxed is
(1) the Jupyter kernel nbgrader starts for the student's notebook, whose command is this
package's launcher (``python -m tito.grading.sandbox kernel {connection_file}``), and (2) the
second grading (``verify.py``), the guarded driver run on the student's solution cells and the
instructor's own tests (``python -m tito.grading.sandbox driver CONFIG``).

The files, by job: ``config.py`` what one sandbox is given (its paths inside, limits, the
kernelspec, the Python folders it may read); ``resources.py`` what it holds while it runs (a
uid of its own, a control group, a size-limited runtime folder, per-process limits);
``bwrap.py`` how it is made (bubblewrap's options, the seccomp filter); ``__main__.py`` the
launcher. This file says whether a sandbox works here (``unavailable``) and names what the
rest of tito uses.

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

import os
import platform
import shutil
import subprocess

from .bwrap import SYSCALLS, base_args, sandbox_command, seccomp_fd
from .config import (
    CONFIG_ENV,
    KERNEL_NAME,
    SANDBOX_PACKAGE,
    UID_BASE,
    WORK,
    KernelConfig,
    Limits,
    copy_guard,
    python_folders,
    write_kernelspec,
)
from .resources import Cgroup, UidLease, mount_runtime, unmount_runtime

__all__ = [
    "CONFIG_ENV", "KERNEL_NAME", "SANDBOX_PACKAGE", "WORK", "Cgroup", "KernelConfig", "Limits",
    "UidLease", "copy_guard", "mount_runtime", "python_folders", "sandbox_command",
    "unavailable", "unmount_runtime", "write_kernelspec",
]

# ---- is there a sandbox here? ---------------------------------------------------------------
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
    elif platform.machine() not in SYSCALLS:
        reason = f"the sandbox's seccomp filter knows x86_64 and aarch64, not {platform.machine()}"
    else:
        filter_fd = seccomp_fd()
        probe = subprocess.run(
            ["bwrap", *base_args(), "--seccomp", str(filter_fd), "--ro-bind", "/", "/", "--",
             "setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups",
             "true"], capture_output=True, text=True, pass_fds=(filter_fd,))
        os.close(filter_fd)
        if probe.returncode != 0:
            reason = f"bubblewrap does not work here: {probe.stderr.strip()[:300]}"
    _checked["reason"] = reason
    return reason
