"""Two file helpers every part of tito shares: an atomic write, and a search up the tree."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) via a temporary file in the same folder and a rename: a
    reader (or a crash) never sees a half-written file, only the old content or the new.

    The temporary file is created with mode 0666 and ``O_EXCL``, so the kernel applies the
    process umask to it exactly as it does to any file ``open()`` makes: the result has the
    usual permissions without reading or changing the umask. (``tempfile.mkstemp`` would
    make it 0600, and restoring the usual mode needs the umask, which can only be read by
    setting it: a process-wide change that another thread could see.)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as handle:
                handle.write(text)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def find_upwards(start: Path | None, is_root: Callable[[Path], bool]) -> Path | None:
    """The first of ``start`` (default: the current folder) and its parents for which
    ``is_root(folder)`` holds, or None: how tito finds the workspace or course it is in."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_root(folder):
            return folder
    return None
