"""tito/files.py: the one atomic writer and the one upward search (issue #15)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tito.files import atomic_write, find_upwards


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "progress.json"
    atomic_write(path, "first\n")
    atomic_write(path, "second\n")
    assert path.read_text(encoding="utf-8") == "second\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["progress.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_atomic_write_gives_the_mode_open_would_under_the_umask(tmp_path, umask):
    # In a child process: setting the umask here would change it for the whole test run.
    code = (
        "import os, sys, stat\n"
        "from pathlib import Path\n"
        "from tito.files import atomic_write\n"
        f"os.umask({umask})\n"
        "atomic_write(Path(sys.argv[1]) / 'a.txt', 'x')\n"
        "open(Path(sys.argv[1]) / 'b.txt', 'w').close()\n"
        "print(os.umask(0))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, check=True)
    assert int(done.stdout) == umask, "atomic_write changed the umask it ran under"
    mode = stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode)
    plain = stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode)
    assert mode == plain == 0o666 & ~umask, (oct(mode), oct(plain))


def test_atomic_write_keeps_the_old_text_when_writing_fails(tmp_path):
    path = tmp_path / "a.txt"
    atomic_write(path, "old")
    with pytest.raises(TypeError):
        atomic_write(path, None)  # type: ignore[arg-type]
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_no_module_of_tito_sets_the_umask():
    """The umask is process-wide: setting it (even to read it back) races with every other
    thread that creates a file. atomic_write needs no umask, so nothing in tito calls it."""
    import ast
    from pathlib import Path

    import tito

    calls = []
    for path in sorted(Path(tito.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "umask"):
                calls.append(f"{path.name}:{node.lineno}")
    assert not calls, f"os.umask called at {calls}"


def test_find_upwards_returns_the_nearest_folder_or_none(tmp_path):
    (tmp_path / "course" / ".tito").mkdir(parents=True)
    deep = tmp_path / "course" / "modules" / "01_tensor"
    deep.mkdir(parents=True)
    marker = lambda folder: (folder / ".tito").is_dir()  # noqa: E731
    assert find_upwards(deep, marker) == (tmp_path / "course").resolve()
    assert find_upwards(tmp_path, marker) is None


def test_atomic_write_takes_bytes(tmp_path):
    target = tmp_path / "state.npz"
    atomic_write(target, b"\x00\x01binary\n")
    assert target.read_bytes() == b"\x00\x01binary\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz"]  # no temporary file left
