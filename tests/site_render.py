"""The committed site/, rendered once per test run (by `tito site render --pandoc`, as a user
would) and shared by tests/test_site.py and tests/test_site_browser.py."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import run_tito

_RENDERED: dict[str, Path] = {}


def rendered_site(repo: Path) -> Path:
    if "site" not in _RENDERED:
        pytest.importorskip("pypandoc", reason="pypandoc-binary (dev extra) renders the site")
        folder = Path(tempfile.mkdtemp(prefix="tito-tests-site-"))
        atexit.register(shutil.rmtree, folder, True)
        out = folder / "_site"
        done = run_tito("site", "render", "--pandoc", "--out", str(out), cwd=repo)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Rendered" in done.stdout and (out / "index.html").is_file()
        _RENDERED["site"] = out
    return _RENDERED["site"]
