"""What is installed, read from the distributions' metadata (never by importing them), for
`tito system doctor`: every distribution on ``sys.path``, the course's requirements followed
to the end (what each needed package needs, at versions its requirement allows), and the
doctor's ``Check`` record with the package check built from them. Reading metadata takes
milliseconds; importing nbgrader, jupytext and nbformat to see whether they import took 3
to 8 s."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DISTRIBUTIONS = ("tinytorch-course", "tinytorch")  # the student build's name, the repository's
SHOWN = ("numpy", "jupytext", "nbformat", "nbgrader", "ipykernel", "rich", "click")


@dataclass
class Check:
    name: str
    state: str  # ok, failed, not verified, note
    detail: str

    @property
    def ok(self) -> bool:
        return self.state in ("ok", "note")


# ---- installed packages, from their metadata ---------------------------------------------------
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_lines(folder: Path) -> list[str]:
    for name in ("METADATA", "PKG-INFO"):  # .dist-info, .egg-info
        try:
            with open(folder / name, encoding="utf-8", errors="replace") as handle:
                return handle.read().splitlines()
        except OSError:
            continue
    return []


_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def installed_index() -> dict[str, tuple[str, Path]]:
    """Canonical name -> (version, metadata folder) of every distribution on ``sys.path``, the
    first of each name as the import system would find it."""
    found: dict[str, tuple[str, Path]] = {}
    for entry in sys.path:
        folder = Path(entry or ".")
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            stem = name.rsplit(".", 1)[0]
            project, _, rest = stem.partition("-")
            version = rest.split("-")[0]
            if not version:  # name.egg-info: the version is inside
                version = next((line.split(":", 1)[1].strip()
                                for line in _metadata_lines(folder / name)
                                if line.startswith("Version:")), "?")
            found.setdefault(_canonical(project), (version, folder / name))
    return found


def _requires(folder: Path, extras: set[str]) -> list[str]:
    """The Requires-Dist lines that apply with ``extras`` ("" is the base install): a line
    for another extra is left out before it is parsed (most lines of a big package are)."""
    found = []
    for line in _metadata_lines(folder):
        if line.startswith("Requires-Dist:"):
            line = line.split(":", 1)[1].strip()
            named = _EXTRA.findall(line)
            if not named or set(map(_canonical, named)) & {_canonical(e) for e in extras if e}:
                found.append(line)
    return found


def requirement_problems() -> tuple[str | None, dict[str, str], list[str]]:
    """(the course's distribution, name -> version of what it needs directly, problems), the
    requirements followed to the end: every package needed, and what each of those needs,
    must be installed at a version its requirement allows."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pip's own copy is not importable either: check presence only
        Requirement, InvalidRequirement = None, ValueError
    index = installed_index()
    ours = next((d for d in DISTRIBUTIONS if d in index), None)
    if ours is None:
        return None, {}, []
    problems: list[str] = []
    direct: dict[str, str] = {}
    done: dict[str, set] = {}
    todo = [(line, ours, {""}) for line in _requires(index[ours][1], {""})]
    while todo:
        line, needed_by, extras = todo.pop(0)
        if Requirement is None:
            name = re.split(r"[\s;<>=!~\[(]", line, maxsplit=1)[0]
            if ";" in line:
                continue  # markers cannot be read without `packaging`: leave them
            req = None
        else:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                continue
            name = req.name
        key = _canonical(name)
        if key not in index:
            problems.append(f"{name} is not installed "
                            f"({needed_by} needs `{line.split(';')[0].strip()}`)")
            continue
        version, folder = index[key]
        if needed_by == ours:
            direct[name] = version
        if (req is not None and req.specifier
                and not req.specifier.contains(version, prereleases=True)):
            problems.append(f"{name} {version} is installed, "
                            f"{needed_by} needs `{req.name}{req.specifier}`")
        # what this package needs in turn: its base requirements, and those of each extra
        # asked for (``jsonschema[format-nongpl]``), each followed once
        new = ({""} | set(req.extras if req is not None else ())) - done.get(key, set())
        if not new:
            continue
        done.setdefault(key, set()).update(new)
        todo.extend((sub, name, new) for sub in _requires(folder, new))
    return ours, direct, problems


def package_checks() -> list[Check]:
    ours, direct, problems = requirement_problems()
    if ours is None:
        return [Check("packages", "failed", "the course is not installed in this Python "
                      f"({sys.executable}): run `pip install -e .` in the course folder, or "
                      "install the student build's wheel")]
    fix = f"Fix: `{sys.executable} -m pip install --upgrade {' '.join(sorted(direct) or [ours])}`"
    shown = [f"{n} {direct[n]}" for n in SHOWN if n in direct]
    if problems:
        return [Check("packages", "failed", "; ".join(problems[:4])
                      + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else "")
                      + f". {fix}")]
    return [Check("packages", "ok", ", ".join(shown)
                  + f": the {len(direct)} packages {ours} needs, "
                  "and theirs, installed at the versions required")]
