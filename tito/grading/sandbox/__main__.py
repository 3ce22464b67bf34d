"""The launcher: ``python -m tito.grading.sandbox kernel|unsafe CONNECTION_FILE`` (the
kernelspec's command, for nbgrader) or ``driver CONFIG`` (the second grading). It runs as the
instructor, outside the sandbox, and replaces itself with the sandboxed process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .bwrap import sandbox_command
from .config import CONFIG_ENV, CONFIG_INSIDE, GUARD, RUNTIME, KernelConfig
from .resources import join_cgroups, set_limits


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
    join_cgroups(cfg)
    data_fds: list[int] = []
    argv = sandbox_command(cfg, command, data_fds)
    set_limits(cfg.limits)
    os.execvp(argv[0], argv)



if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tito.grading.sandbox kernel|unsafe CONNECTION_FILE | "
                 "driver CONFIG")
    launch(sys.argv[1], sys.argv[2])
