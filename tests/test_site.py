"""The course website: generated from the lessons, in sync, rendered, linked, no solutions.

The site is rendered once with pandoc (as `tito site render` does where Quarto is not
installed) into a temporary folder; the checks below read those pages.
"""

from __future__ import annotations

import ast
import html
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from conftest import run_tito, run_tito_from
from site_render import rendered_site
from tito.course.notebook import Cell, read_cells
from tito.course.registry import MILESTONES, MODULES, written_modules
from tito.course.solutions import partition_solution, solution_lines
from tito.site.build import check_site, generate, write_site
from tito.site.leaks import hidden_lines, solution_leaks
from tito.site.links import SITE_DIR
from tito.site.messages import assertion_messages as _messages
from tito.site.messages import message_text
from tito.site.stubs import solution_stubs as _stubs


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return generate()


@pytest.fixture(scope="module")
def rendered(repo) -> Path:
    """The committed site/, rendered by `tito site render --pandoc --out ...` (once per run)."""
    return rendered_site(repo)


class _Page(HTMLParser):
    """Links, ids and text of one HTML page."""

    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, link text)
        self.ids: set[str] = set()
        self.text: list[str] = []
        self._anchor: list[str] | None = None
        self._href = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key) is not None and tag in ("a", "link", "img", "script"):
                if tag == "a":
                    self._anchor, self._href = [], attrs[key]
                else:
                    self.links.append((attrs[key], ""))

    def handle_endtag(self, tag):
        if tag == "a" and self._anchor is not None:
            self.links.append((self._href, "".join(self._anchor)))
            self._anchor = None

    def handle_data(self, data):
        self.text.append(data)
        if self._anchor is not None:
            self._anchor.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _local(href: str) -> bool:
    return not (href.startswith(("http://", "https://", "mailto:", "//", "data:")))


# ---- generation ------------------------------------------------------------------------------
def test_committed_site_is_in_sync(repo):
    done = run_tito("site", "build", "--check", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches" in done.stdout


def test_generation_is_deterministic(files):
    assert generate() == files


def test_check_catches_an_edit_a_stale_page_and_a_missing_one(repo, files, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(SITE_DIR, site, ignore=shutil.ignore_patterns("_site", ".quarto"))
    assert check_site(site, files) == []
    page = site / "index.qmd"
    page.write_text(page.read_text() + "\nA hand edit.\n")
    (site / "modules" / "99_old.qmd").write_text("---\ntitle: old\n---\n")
    (site / "milestones" / f"{MILESTONES[0].name}.qmd").unlink()
    problems = check_site(site, files)
    assert any("index.qmd" in p and "differs" in p for p in problems), problems
    assert any("99_old.qmd" in p and "stale" in p for p in problems), problems
    assert any(MILESTONES[0].name in p and "missing" in p for p in problems), problems
    done = run_tito("site", "build", "--check", "--site", str(site), cwd=repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "out of sync" in done.stdout
    changed, stale = write_site(site, files)
    assert changed == ["index.qmd", f"milestones/{MILESTONES[0].name}.qmd"] and stale == [
        "modules/99_old.qmd"
    ]
    assert check_site(site, files) == [] and not (site / "modules" / "99_old.qmd").exists()


def test_quarto_project_lists_every_module_and_milestone(files):
    config = yaml.safe_load(files["_quarto.yml"])
    assert config["project"]["type"] == "website"
    assert config["project"]["output-dir"] == "_site"
    sidebar = yaml.safe_dump(config["website"]["sidebar"])
    for m in MODULES:
        assert f"{m.key} {m.title}" in sidebar, f"module {m.key} is missing from the sidebar"
    for ms in MILESTONES:
        assert f"milestones/{ms.name}.qmd" in sidebar
    written = {f"modules/{m.dirname}.qmd" for m in written_modules()}
    assert {p for p in files if p.startswith("modules/")} == written


# ---- rendering and links ---------------------------------------------------------------------
def _quarto_hrefs(files) -> set[str]:
    config = yaml.safe_load(files["_quarto.yml"])
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("href"), str):
                found.add(node["href"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config["website"])
    return found


def test_every_page_in_quarto_yml_is_rendered(rendered, files):
    hrefs = _quarto_hrefs(files)
    assert "index.qmd" in hrefs
    for href in hrefs:
        path = href.split("#")[0]
        assert (SITE_DIR / path).is_file(), f"_quarto.yml lists {path}, which does not exist"
        assert (rendered / (path[:-4] + ".html")).is_file(), f"{path} was not rendered"
    for page in files:
        if page.endswith(".qmd"):
            assert (rendered / (page[:-4] + ".html")).is_file(), f"{page} was not rendered"
    assert (rendered / "styles.css").is_file()


def test_every_internal_link_resolves(rendered):
    pages = sorted(rendered.rglob("*.html"))
    parsed = {p: _parse(p) for p in pages}
    checked = 0
    for page, doc in parsed.items():
        assert doc.links, f"{page.name} has no links: the navigation is missing"
        for href, _ in doc.links:
            if not _local(href):
                continue
            path, _, fragment = href.partition("#")
            target = page if not path else (page.parent / path).resolve()
            where = f"{page.relative_to(rendered)} links to {href!r}"
            assert target.is_file(), f"{where}, which does not exist"
            assert not path.endswith(".qmd"), f"{where}: .qmd links must become .html"
            if fragment:
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                assert fragment in ids, f"{where}, but that page has no id {fragment!r}"
            checked += 1
    assert checked > 100


def test_every_page_has_the_navigation(rendered):
    for page in sorted(rendered.rglob("*.html")):
        doc = _parse(page)
        hrefs = {
            (page.parent / h.partition("#")[0]).resolve()
            for h, _ in doc.links
            if _local(h) and h.partition("#")[0]
        }
        for m in written_modules():
            assert (rendered / "modules" / f"{m.dirname}.html").resolve() in hrefs, (
                f"{page.name}: the sidebar does not link module {m.key}"
            )
        for ms in MILESTONES:
            assert (rendered / "milestones" / f"{ms.name}.html").resolve() in hrefs


def test_unwritten_modules_are_coming_soon_and_never_links(planned_course):
    """In a course whose module 20 is only planned: no page, never a link, "coming soon"."""
    out = planned_course / "site"
    done = run_tito_from(planned_course, "site", "build", cwd=planned_course)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (out / "modules" / "20_capstone.qmd").exists()
    row = next(line for line in (out / "index.qmd").read_text().splitlines()
               if line.startswith("| 20 |"))
    assert "coming soon" in row and "](" not in row, row
    quarto = (out / "_quarto.yml").read_text()
    assert "20 Capstone (coming soon)" in quarto, "the sidebar should name 20 as coming soon"
    for page in sorted(out.rglob("*.qmd")):
        text = page.read_text()
        assert "20_capstone.qmd" not in text and "20_capstone.html" not in text, (
            f"{page.relative_to(out)} links to the unwritten module 20")
    olympics = (out / "milestones" / "olympics.qmd").read_text()
    assert "coming soon" in olympics, "a milestone needing module 20 should be coming soon"


def test_milestone_pages_say_coming_soon_until_their_script_exists(files, repo):
    for ms in MILESTONES:
        page = files[f"milestones/{ms.name}.qmd"]
        ready = (repo / "milestones" / ms.script).is_file()
        assert ("This milestone is [coming soon]" in page) != ready, ms.name
        assert f"tito milestone run {ms.name}" in page


# ---- what the module pages show ---------------------------------------------------------------
def test_no_solution_line_appears_on_any_page(rendered, files):
    """Every line inside a solution block of any lesson stays off every page, unless the same
    text is public anyway (given code, prose or tests of some lesson: `return`, ...)."""
    public, solutions = [], []
    for m in written_modules():
        cells = read_cells(m.source)
        for cell in cells:
            # by position: a given line may repeat a solution line word for word
            visible, hidden = partition_solution(cell.source)
            assert set(hidden) <= set(solution_lines(cell.source)) | set(visible)
            public += visible
            solutions += [(m.dirname, line.strip()) for line in hidden]
    public_text = "\n".join(public)
    texts = dict(files)
    for notebook in (SITE_DIR / "notebooks").glob("*.ipynb"):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        texts[f"site/notebooks/{notebook.name}"] = "\n".join("".join(c["source"]) for c in cells)
    assert len([t for t in texts if t.endswith(".ipynb")]) == len(written_modules())
    for page in rendered.rglob("*.html"):
        texts[str(page.relative_to(rendered))] = html.unescape("".join(_parse(page).text))
    checked = 0
    for where, line in solutions:
        if len(line) < 3 or line.startswith("#") or line in public_text:
            continue
        checked += 1
        for name, text in texts.items():
            assert line not in text, f"{name} shows the solution line {line!r} of {where}"
    assert checked > 100, "too few solution lines found: is the check reading the lessons?"


def test_the_leak_check_catches_a_solution_line():
    line = next(iter(hidden_lines()))
    assert solution_leaks({"modules/x.qmd": f"text\n    {line}\n"}) != []
    assert solution_leaks({"modules/x.qmd": "text\n"}) == []


def test_every_graded_test_is_on_its_page_with_points(rendered, files):
    for m in written_modules():
        qmd = files[f"modules/{m.dirname}.qmd"]
        page = _parse(rendered / "modules" / f"{m.dirname}.html")
        text = " ".join(html.unescape("".join(page.text)).split())
        graded = [c for c in read_cells(m.source) if c.is_graded]
        assert graded
        for cell in graded:
            name = next(
                n.name
                for n in ast.parse(cell.source).body
                if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
            )
            rows = (
                f"| `{name}` | {cell.points:g} |",
                f"| [`{name}`](#fails-{cell.grade_id}) | {cell.points:g} |",
            )
            assert any(row in qmd for row in rows), (
                f"{m.dirname}: {cell.grade_id} is not listed with {cell.points:g} points"
            )
            assert f"{name} {cell.points:g}" in text, f"{m.dirname}: {cell.grade_id} on the page"
            if rows[1] in qmd:  # a curated failure of this test is on the page
                assert f"fails-{cell.grade_id}" in page.ids
        total = sum(c.points for c in graded)
        assert f"{len(graded)} tests, {total:g} points" in qmd


def test_module_page_sections(files):
    for m in written_modules():
        qmd = files[f"modules/{m.dirname}.qmd"]
        for heading in (
            "Module info",
            "Overview",
            "Commands",
            "Learning objectives",
            "What you build",
            "What you are not building yet",
            "What you write",
            "How you know it works",
            "When it fails",
            "What's next",
            "How later modules use this one",
        ):
            assert f"\n## {heading}\n" in qmd, f"{m.dirname} lacks '{heading}'"
        assert f"tito module start {m.key}" in qmd and f"tito module complete {m.key}" in qmd
        assert f"tinytorch.{m.target}" in qmd
        if m.hours:
            assert f"{m.hours} hours" in qmd


def test_later_modules_and_milestones_are_listed(files):
    first = written_modules()[0]
    qmd = files[f"modules/{first.dirname}.qmd"]
    section = qmd.split("## How later modules use this one", 1)[1]
    for m in MODULES:
        if first.number in m.requires:
            assert f"{m.key} {m.title}" in section
    for ms in MILESTONES:
        if first.number in ms.requires:
            assert f"milestones/{ms.name}.qmd" in section


def test_failure_messages_come_from_the_asserts_with_readable_placeholders():
    source = '''
def test_unit_example():
    """doc"""
    t = make()
    hint = "use keepdims=True"
    assert t.shape == (2, 3), f"Tensor(...).shape is {t.shape}, expected (2, 3)"
    assert ok, ("two " f"parts {x!r:>4}")
    assert done, hint
    raise AssertionError(f"never {t.dtype}")
'''
    messages = [message_text(m) for m in _messages(ast.parse(source).body[0])]
    assert messages == [
        "Tensor(...).shape is <t.shape>, expected (2, 3)",
        "two parts <x>",
        "use keepdims=True",
        "never <t.dtype>",
    ]


def test_stubs_show_signatures_and_docstrings_not_bodies():
    source = '''class Linear(Module):
    """y = x @ W.T + b"""

    def __init__(self, n, m, bias=True):
        """Weights U(-k, k)."""
        ### BEGIN SOLUTION
        self.weight = secret_init(n, m)
        ### END SOLUTION

    def given(self):
        return 1


def helper_written(x, *, axis=-1):
    ### BEGIN SOLUTION
    return secret(x)
    ### END SOLUTION
'''
    cell = Cell(0, "code", source, {"solution": True, "grade_id": "linear"})
    stubs = _stubs(cell, "lesson")
    code = "\n".join(s.code for s in stubs)
    assert [s.name for s in stubs] == ["Linear", "helper_written"]
    assert "def __init__(self, n, m, bias=True):" in code and '"""Weights U(-k, k)."""' in code
    assert "def helper_written(x, *, axis=-1):" in code
    assert "secret" not in code and "given" not in code


def test_each_page_shows_its_curated_failures_and_not_every_message(files):
    from tito.site.failures import mistakes, recorded

    for m in written_modules():
        qmd = files[f"modules/{m.dirname}.qmd"]
        section = qmd.split("## When it fails", 1)[1].split("\n## ", 1)[0]
        planted = mistakes(m)
        # A module that just landed may have no site/failures/NN_slug.yaml yet: its page then
        # says what a failing test prints, without examples. With the file: two or three.
        assert len(planted) in (0, 2, 3), f"{m.dirname}: curate 2-3 failures, not {len(planted)}"
        found = recorded(m)
        for mistake in planted:
            result = found[mistake.key]
            assert result["status"] == "failed", result
            assert result["message"] in section and mistake.fix in section
        assert section.count("{.failure}") == len(planted)
        assert "{.placeholder}" not in section


# ---- planted mistakes still fail ----------------------------------------------------------------
def test_every_planted_mistake_still_fails_its_test_with_the_recorded_message():
    """Each curated failure, planted in the reference and run as `tito module complete` runs
    a notebook, fails the test it names, and prints what the page shows. When a test's message
    changes, `tito site failures` records the new one (and `tito site build` shows it)."""
    from tito.site.failures import recorded, run_all

    stale = []
    for dirname, results in run_all().items():
        m = next(x for x in written_modules() if x.dirname == dirname)
        kept = recorded(m)
        for r in results:
            assert r["status"] == "failed", (
                f"{dirname}: planting {r['new']!r} in {r['cell']} no longer fails {r['test']}: "
                f"choose another mistake in site/failures/{dirname}.yaml"
            )
            key = next(k for k, v in kept.items() if (v["cell"], v["old"], v["new"]) ==
                       (r["cell"], r["old"], r["new"]))
            if kept[key]["message"] != r["message"]:
                stale.append(f"{dirname} {r['test']}")
    assert not stale, f"recorded messages are out of date ({stale}): run `tito site failures`"


def test_a_mistake_that_does_not_fit_its_lesson_is_named(tmp_path):
    from tito.errors import FailureSpecError
    from tito.site.failures import Mistake, planted_notebook

    m = written_modules()[0]
    bad = Mistake("nope", "nope", "x", "y", "c", "f")
    with pytest.raises(FailureSpecError, match="no cell 'nope'"):
        planted_notebook(m, bad)


def test_headline_numbers_of_module_13_are_the_models_own(files):
    """The overview's 163M / 85M come from gpt_parameter_count of the GPT-2-sized config."""
    from tinytorch import nn

    m = next((x for x in written_modules() if x.slug == "transformers"), None)
    if m is None:
        pytest.skip("module 13 is not written")
    config = nn.GPTConfig(vocab_size=50_257, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                          bias=True, tie_weights=False)
    counts = nn.gpt_parameter_count(config)
    overview = files[f"modules/{m.dirname}.qmd"].split("## Overview", 1)[1]
    assert f"**{round(counts['total'] / 1e6)}M** parameters" in overview
    assert f"**{round(counts['blocks'] / 1e6)}M** of them in the blocks" in overview


def test_module_info_uses_the_registry_fields(files):
    from tito.course.registry import prerequisites
    from tito.site.links import ranges as _ranges

    for m in written_modules():
        info = files[f"modules/{m.dirname}.qmd"].split("## Module info", 1)[1].split("\n## ")[0]
        assert ("**Difficulty:**" in info) == bool(m.difficulty)
        assert ("**Time:**" in info) == bool(m.hours)
        if prerequisites(m.number):
            assert _ranges(prerequisites(m.number)) in info
        assert f"notebooks/{m.dirname}.ipynb" in info
    assert _ranges([1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12]) == "01–08, 10–12"


def test_released_notebooks_are_solution_free_and_current(repo):
    from tito.course.solutions import SOLUTION_BEGIN
    from tito.site.build import notebook_problems

    assert notebook_problems() == []
    for m in written_modules():
        text = (SITE_DIR / "notebooks" / f"{m.dirname}.ipynb").read_text(encoding="utf-8")
        assert SOLUTION_BEGIN not in text and "NotImplementedError" in text


def test_reading_order_puts_each_milestone_after_the_module_that_unlocks_it():
    from tito.site.links import reading_order
    from tito.site.render import _linear, read_navigation

    order = reading_order()
    for ms in MILESTONES:
        before = order[order.index(ms) - 1]
        assert not hasattr(before, "year") or max(before.requires) == max(ms.requires)
        assert all(getattr(x, "number", 0) <= max(ms.requires) for x in order[: order.index(ms)])
    _, _, sidebar = read_navigation(SITE_DIR)
    pages = [p.href for p in _linear(sidebar)]
    for ms in MILESTONES:
        last = next(m for m in MODULES if m.number == max(ms.requires))
        if last.written:
            i = pages.index(f"modules/{last.dirname}.qmd")
            count = sum(max(x.requires) == last.number for x in MILESTONES)
            following = pages[i + 1 : i + 1 + count]
            assert f"milestones/{ms.name}.qmd" in following


def test_a_section_ends_where_the_code_starts():
    from tito.course.notebook import Cell
    from tito.site.lesson import _sections

    cells = [
        Cell(0, "markdown", "## What you are not building yet\n\n- gradients", {}),
        Cell(1, "code", "import numpy as np", {}),
        Cell(2, "markdown", "The lesson itself also uses:", {}),
        Cell(3, "markdown", "## What comes next\n\nModule 02.", {}),
    ]
    bodies, _ = _sections(cells)
    assert bodies["What you are not building yet"] == "- gradients"
    assert bodies["What comes next"] == "Module 02."


# ---- milestone pages, the home page, what --check demands -----------------------------------
def test_milestone_pages_quote_a_real_run(files):
    """Each ready milestone's page says what the run does, quotes its recorded output, its
    time and load, its flags and what every module it needs contributes; llm and olympics
    show their scoreboard."""
    from tito.site.links import milestone_ready
    from tito.site.milestone_page import SECTIONS
    from tito.site.runs import recorded_run

    for ms in MILESTONES:
        if not milestone_ready(ms):
            continue
        page = files[f"milestones/{ms.name}.qmd"]
        for section in SECTIONS:
            assert f"\n## {section}\n" in page, f"{ms.name}: no '{section}'"
        run = recorded_run(ms)
        assert run and run["exit_code"] == 0, f"{ms.name}: no successful recorded run"
        quoted = [line for line in run["output"].splitlines() if len(line.strip()) > 20]
        assert sum(line in page for line in quoted) >= 2, f"{ms.name}: the run is not quoted"
        assert f"**{run['seconds']:,.0f} s**" in page and "load average" in page
        assert "--seed" in page.split("## Its flags", 1)[1], f"{ms.name}: flags missing"
        rows = [r.split("|") for r in page.split("## What each module contributes", 1)[1]
                .splitlines() if r.startswith("| [")]
        said = {cells[1].strip()[1:3]: cells[2].strip() for cells in rows}
        for n in ms.requires:
            assert said.get(f"{n:02d}"), f"{ms.name}: nothing said of module {n:02d}"
        assert ("### The scoreboard" in page) == (ms.name in ("llm", "olympics")), ms.name


def test_excerpt_picks_lines_blocks_and_marks_gaps():
    """A milestone page's excerpt: single lines, "A ... B" blocks, "A ... +N", gaps as ⋮."""
    from tito.errors import SiteError
    from tito.site.milestone_page import excerpt

    out = "a 1\nb 2\nc 3\nd 4\ne 5\nf 6"
    assert excerpt(out, None) == out
    assert excerpt(out, ["^a", "^c ... ^d"]) == "a 1\n⋮\nc 3\nd 4"
    assert excerpt(out, ["^e ... +3"]) == "e 5\nf 6"
    with pytest.raises(SiteError, match="no line"):
        excerpt(out, ["^z"])


def test_check_names_a_missing_docstring_and_a_missing_run(monkeypatch, files):
    """`tito site build --check` fails on a graded test without a docstring and on a milestone
    whose recorded run is gone or failed."""
    import tito.site.lesson as lesson_mod
    import tito.site.milestone_page as mp
    from tito.site.build import content_problems
    from tito.site.messages import GradedTest

    real = lesson_mod.read_lesson
    first = written_modules()[0]

    def no_doc(m):
        lesson = real(m)
        if m == first:
            t = lesson.tests[0]
            lesson.tests[0] = GradedTest(**{**t.__dict__, "doc": ""})
        return lesson

    monkeypatch.setattr(lesson_mod, "read_lesson", no_doc)
    real_run = mp.recorded_run

    def runs(ms):
        if ms.name == "xor":
            return None
        if ms.name == "perceptron":
            return {"exit_code": 1, "output": "", "help": "", "command": "tito milestone run x"}
        return real_run(ms)

    monkeypatch.setattr(mp, "recorded_run", runs)
    problems = content_problems(files)
    assert any(first.slug in p and "no docstring" in p for p in problems), problems
    assert any("milestone xor: no recorded run" in p for p in problems), problems
    assert any("milestone perceptron" in p and "failed" in p for p in problems), problems


def test_home_page_steps_grades_and_milestones_by_year(files):
    """The home page: the student's commands as numbered steps, which grade counts, and the
    milestones in the order of their years with a column of commands to run them."""
    index = files["index.qmd"]
    path = index.split("## The student's path", 1)[1].split("\n## ", 1)[0]
    assert "\n1. " in path and "\n2. " in path and "tito module complete 01" in path
    assert "Which grade counts" in path and "never see" in path
    table = index.split("## The milestones", 1)[1]
    years = [int(r.split("|")[1]) for r in table.splitlines() if r.startswith(("| 1", "| 2"))]
    assert years == sorted(years) and len(years) == len(MILESTONES)
    assert "| Run it |" in table and "| Status |" not in table


def test_module_pages_say_which_grade_counts_and_name_a_book_chapter(files):
    """Every module page: the grade note beside its tests, a chapter of the book (or the
    closest one, saying so), and the parts with nothing to write named."""
    from tito.site.lesson import read_lesson

    for m in written_modules():
        qmd = files[f"modules/{m.dirname}.qmd"]
        assert "Which grade counts" in qmd.split("## How you know it works", 1)[1]
        assert "{.read-why}" in qmd and "mlsysbook.ai" in qmd, f"{m.dirname}: no book link"
        lesson = read_lesson(m)
        written = {p.heading for p in lesson.parts}
        for heading in lesson.part_headings:
            if heading not in written:
                assert heading.split(":")[0] in qmd.split("## What you write", 1)[1], heading


def test_the_site_filter_labels_table_cells_and_keeps_math_with_its_comma(tmp_path):
    """site/tinytorch.lua (run by Quarto and by the pandoc renderer): each table cell carries
    its column's header for the phone's card layout; a formula keeps its comma."""
    pypandoc = pytest.importorskip("pypandoc")
    from tito.site.links import SITE_FILTER, TEMPLATES

    text = "| Test | Points |\n|:--|--:|\n| `t` | 5 |\n\nthe sum $x$, then $y$.\n"
    out = pypandoc.convert_text(text, "html5", format="markdown", extra_args=[
        f"--lua-filter={TEMPLATES / SITE_FILTER}", "--mathml"])
    assert 'data-label="Test"' in out and 'data-label="Points"' in out, out
    assert 'class="tt-cards' in out or "tt-cards" in out
    assert out.count('class="tt-nobreak"') == 2, out  # "$x$," and "$y$."
    assert (SITE_DIR / SITE_FILTER).read_text() == (TEMPLATES / SITE_FILTER).read_text()


def test_every_page_has_a_keyboard_menu_a_skip_link_and_one_set_of_ids(rendered):
    """The page shell: a real menu button, a skip link, the contents folded for narrow
    screens without repeating the side column's ids."""
    for page in sorted(rendered.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(rendered)
        assert '<button class="tt-menu-button" type="button" aria-expanded="false"' in text, where
        assert 'class="tt-skip" href="#content"' in text and 'id="content"' in text, where
        ids = _parse(page).ids
        assert text.count('id="toc-') == len({i for i in ids if i.startswith("toc-")}), where
        if 'class="tt-toc-inline"' in text:
            inline = text.split('class="tt-toc-inline"', 1)[1].split("</details>", 1)[0]
            assert 'id="' not in inline, f"{where}: the folded contents repeat ids"
        assert "<pre" not in text.replace('<pre tabindex="0"', ""), (
            f"{where}: a <pre> no key reaches")


def test_every_figure_has_a_phone_layout_drawn_large_enough():
    """Each figure has a phone layout beside its wide one, and the committed SVGs' smallest
    text is at least 11 px in the 1280 px column and 10 px on a 390 px phone (the browser
    test measures the same on the rendered pages)."""
    from tito.site.browser import svg_text_sizes
    from tito.site.figures import FIGURES, FIGURES_DIR
    from tito.site.figures.drawing import COLUMN_PX, MIN_TEXT_PX

    checked = 0
    for m in written_modules():
        for fig in FIGURES.get(m.slug, []):
            assert fig.has_narrow, f"{m.dirname}: figure {fig.name} has no phone layout"
            for narrow in (False, True):
                svg = FIGURES_DIR / fig.path_for(m, narrow).split("/")[-1]
                assert svg.is_file(), f"{svg.name} is missing: run `tito site figures`"
                least, width = svg_text_sizes(svg)
                shown = min(COLUMN_PX[narrow], width * 4 / 3)  # points -> CSS px at 1:1
                px = least * shown / width
                assert px >= MIN_TEXT_PX[narrow], f"{svg.name}: {px:.1f} px text"
                checked += 1
    assert checked >= 40
