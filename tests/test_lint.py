"""The lessons' line length, which ruff cannot check in a jupytext file: a cell header
(`# %% nbgrader={...}`) carries its metadata on one line and a markdown table row cannot be
broken, so ruff's E501 is off for `modules/` (pyproject.toml) and this test holds every
other line of a lesson to the project's 100 columns."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(ROOT.glob("modules/[0-9][0-9]_*/*.py"))
LIMIT = 100


def long_lines(text: str, name: str) -> list[str]:
    """`name:line: N columns: start...` for each line over LIMIT that may be wrapped."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip()
        if len(line) <= LIMIT or line.startswith("# %%") or line.lstrip().startswith("# |"):
            continue
        found.append(f"{name}:{number}: {len(line)} columns: {line[:60]}...")
    return found


def test_the_checker_sees_a_long_line_and_spares_headers_and_tables():
    text = ("# %% " + "x" * 120 + "\n"
            + "# | a | table |" + " x" * 60 + "\n"
            + "y = 1  # " + "z" * 100 + "\n"
            + "short = 2\n")
    assert [f.split(":")[1] for f in long_lines(text, "lesson.py")] == ["3"]


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.parent.name for p in LESSONS])
def test_lesson_lines_fit_in_100_columns(lesson):
    found = long_lines(lesson.read_text(encoding="utf-8"), str(lesson.relative_to(ROOT)))
    assert not found, ("lines over 100 columns (wrap them; only `# %%` cell headers and "
                       "markdown table rows may be longer):\n" + "\n".join(found))
