"""A module's page, made from its lesson (``lesson.py``), the registry, its figures and its
recorded planted mistakes (``failures.py``)."""

from __future__ import annotations

import html
import re
import textwrap

from ..course.registry import (
    MILESTONES,
    MODULES,
    TIERS,
    Milestone,
    Module,
    get_module,
    prerequisites,
)
from ..errors import FailureSpecError, LessonError, SiteError
from .failures import Mistake, mistakes, recorded
from .figures import figures_of
from .lesson import Lesson, read_lesson
from .links import (
    SITE_DIR,
    milestone_ref,
    module_page,
    module_ref,
    notebook_file,
    ranges,
    reading_order,
    rel_link,
    span_text,
    tier_modules,
)
from .markdown import code_block, difficulty_md, front_matter, inline, points_text
from .wording import command_rows, tier_story, words


def _module_info(m: Module, lesson: Lesson, page: str) -> list[str]:
    prereqs = prerequisites(m.number)
    direct = ", ".join(module_ref(get_module(n), page) for n in m.requires)
    tier = tier_modules()[m.tier]
    namespaces = ", ".join(f"`tinytorch{'.' + ns if ns else ''}`" for ns in m.namespaces)
    lines = []
    if m.difficulty:
        lines.append(f"- **Difficulty:** {difficulty_md(m.difficulty)}")
    if m.hours:
        lines.append(f"- **Time:** {m.hours} hours")
    if prereqs:
        lines.append(f"- **Prerequisites:** {ranges(prereqs)} (directly: {direct})")
    else:
        lines.append("- **Prerequisites:** none: this is where the course starts")
    if m.needs_to_know:
        lines.append(f"- **You need to know:** {m.needs_to_know}")
    lines += [
        f"- **Tier:** {TIERS.get(m.tier, m.tier)} ({span_text(tier)})",
        f"- **You export:** `tinytorch.{m.target}`"
        + (f", re-exported by {namespaces}" if namespaces else ""),
        f"- **Graded tests:** {len(lesson.tests)} tests, {points_text(lesson.points)} points",
        f"- **Notebook:** [download {m.slug}.ipynb]({rel_link(notebook_file(m), page)})"
        f'{{download=""}} (solutions removed by nbgrader, the one `tito module start {m.key}` '
        "hands out)",
    ]
    return ["::: {.module-info}", *lines, ":::"]


def _commands(m: Module) -> str:
    fields = {"key": m.key, "notebook": m.notebook_relpath.as_posix()}
    rows = [(why, command.format(**fields)) for why, command in command_rows()]
    return code_block("\n".join(f"# {why}\n{command}" for why, command in rows), "bash")


def _heading_html(text: str) -> str:
    """A lesson heading inside raw HTML: escaped, its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _what_you_write(lesson: Lesson) -> list[str]:
    out = [words("module", "what_you_write"), ""]
    for part in lesson.parts:
        names = ", ".join(f"<code>{html.escape(s.name)}</code>" for s in part.stubs)
        title = _heading_html(part.heading) if part.heading else "The code you write"
        out += [
            '<details class="stubs">',
            f"<summary><strong>{title}</strong>: {names}</summary>",
            "",
            code_block("\n\n\n".join(s.code for s in part.stubs), "python"),
            "",
            "</details>",
            "",
        ]
    # Parts with nothing to write are named, so the numbers above do not skip silently.
    with_code = {p.heading for p in lesson.parts}
    quiet = [h for h in lesson.part_headings if h not in with_code]
    if quiet:
        names = [f"**{inline(h)}**" for h in quiet]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        one = len(quiet) == 1
        out += [
            words("module", "parts_without_code", parts=listed, verb="has" if one else "have",
                  whose="its code" if one else "theirs"),
            "",
        ]
    return out


def _how_you_know(lesson: Lesson, curated: set[str]) -> list[str]:
    how = words("module", "how_you_know", key=lesson.module.key, tests=len(lesson.tests),
                points=points_text(lesson.points))
    out = [
        how,
        "",
        "::: {.grades-note}",
        words("grades"),
        ":::",
        "",
        "| Test | Points | What it checks |",
        "|:---------------|--:|:--------------------------------------------|",
    ]
    for t in lesson.tests:
        name = f"`{t.function}`"
        if t.grade_id in curated:
            name = f"[{name}](#fails-{t.grade_id})"
        out.append(f"| {name} | {points_text(t.points)} | {inline(t.doc, True) or '(no docstring)'} |")
    return out + [""]


def _failures(m: Module) -> list[tuple[Mistake, dict]]:
    """The curated mistakes of ``m``, each with what its test printed when it was planted."""
    try:
        planted = mistakes(m)
    except FailureSpecError as error:
        raise SiteError(str(error)) from None
    found = recorded(m)
    out = []
    for mistake in planted:
        result = found.get(mistake.key)
        if result is None:
            raise SiteError(
                f"site/failures/{m.dirname}.yaml has a mistake that was never run "
                f"({mistake.key}): run `tito site failures {m.key}` to record what its test "
                "prints."
            )
        out.append((mistake, result))
    return out


def _when_it_fails(lesson: Lesson, failures: list[tuple[Mistake, dict]]) -> list[str]:
    intro = words("module", "when_it_fails")
    if not failures:
        return [intro, ""]
    out = [f"{words('module', 'when_it_fails_planted', key=lesson.module.key)} {intro}", ""]
    names = {t.grade_id: t.function for t in lesson.tests}
    done: set[str] = set()
    for mistake, result in failures:
        name = names.get(mistake.test, mistake.test)
        anchor = "" if mistake.test in done else f" {{#fails-{mistake.test}}}"
        done.add(mistake.test)
        points = next((t.points for t in lesson.tests if t.grade_id == mistake.test), 0)
        unit = "point" if points == 1 else "points"
        out += [
            f"### `{name}` [{points_text(points)} {unit}]{{.points}}{anchor}",
            "",
        ]
        first, _, rest = mistake.new.strip("\n").partition("\n")
        code = first + ("\n" + textwrap.dedent(rest) if rest else "")
        planted = (
            code_block(code, "python")
            if mistake.new.strip()
            else "A line of the reference left out."
        )
        out += ["::: {.failure}", "**The mistake:**", "", planted, ""]
        out += ["**What it prints:**", "", code_block(result["message"], "text"), ""]
        out += [f"**Why:** {mistake.cause}", "", f"**Fix:** {mistake.fix}", ":::", ""]
    return out


def _whats_next(m: Module, lesson: Lesson, page: str) -> list[str]:
    tier = tier_modules()[m.tier]
    ends = [ms for ms in MILESTONES if get_module(max(ms.requires)).tier == m.tier]
    story = tier_story(m.tier)
    if ends:
        refs = ", ".join(milestone_ref(ms, page) for ms in ends)
        story += f" On the way it reaches the milestones {refs}."
    out = [f"{story} This is module {m.key} of {span_text(tier)}.".strip(), ""]
    order = reading_order()
    unlocked: list[Milestone] = []
    upcoming: Module | None = None
    for item in order[order.index(m) + 1 :]:
        if isinstance(item, Module):
            upcoming = item
            break
        unlocked.append(item)
    lines = [
        f"- **Milestone:** {milestone_ref(ms, page)}: {inline(ms.summary)} "
        f"Run it: `tito milestone run {ms.name}`."
        for ms in unlocked
    ]
    if upcoming is not None:
        lines.append(f"- **Module:** {module_ref(upcoming, page)}: {inline(upcoming.summary)}")
    if lines:
        out += ["::: {.up-next}", "**Up next**", "", *lines, ":::", ""]
    out += [lesson.sections["what comes next"], ""]
    return out


def _used_by(m: Module, page: str) -> list[str]:
    direct = [x for x in MODULES if m.number in x.requires]
    indirect = [x for x in MODULES if m.number in prerequisites(x.number) and x not in direct]
    milestones = [ms for ms in MILESTONES if m.number in ms.requires]
    if not (direct or indirect or milestones):
        return [words("module", "no_later"), ""]
    out = [
        "| Later | What it builds | How it uses this module |",
        "|:------------|:--------------------------------|:----------------|",
    ]
    for x in direct:
        out.append(f"| {module_ref(x, page)} | {inline(x.summary, True)} | builds on it directly |")
    for x in indirect:
        via = [get_module(n) for n in x.requires if m.number in (n, *prerequisites(n))]
        through = ", ".join(v.key for v in via)
        out.append(f"| {module_ref(x, page)} | {inline(x.summary, True)} | through {through} |")
    for ms in milestones:
        last = ", the last module it needs" if max(ms.requires) == m.number else ""
        out.append(
            f"| {milestone_ref(ms, page)} | {inline(ms.summary, True)} | runs your code{last} |"
        )
    return out + [""]


# The width below which a figure's phone layout is shown (the column is then under 600 px).
NARROW_FIGURE = "(max-width: 640px)"


def _figures_md(m: Module, page: str) -> list[str]:
    """Each figure: its phone layout on narrow screens, a link to the full-size SVG, its
    caption (markdown) and its alt text."""
    out = []
    for fig in figures_of(m):
        for path in (fig.path, fig.narrow_path):
            if path and not (SITE_DIR / path).is_file():
                raise SiteError(
                    f"site/{path} is missing: run `tito site figures` to draw it "
                    "(tito/site/figures/, one file per module)."
                )
        src = html.escape(rel_link(fig.path, page))
        width, height = fig.size
        source = ""
        if fig.narrow_path:
            nw, nh = fig.narrow_size
            narrow = html.escape(rel_link(fig.narrow_path, page))
            source = (
                f'<source media="{NARROW_FIGURE}" srcset="{narrow}" '
                f'width="{nw:g}" height="{nh:g}">'
            )
        image = (
            f'<a href="{src}"><picture>{source}<img src="{src}" alt="{html.escape(fig.alt)}" '
            f'width="{width:g}" height="{height:g}"></picture></a>'
        )
        full = f"[Full-size figure (SVG)]({rel_link(fig.path, page)}){{.tt-figure-open}}"
        out += [
            f'<figure class="tt-figure" id="fig-{fig.name}">',
            image,
            "<figcaption>",
            "",
            f"{fig.caption} {full}",
            "",
            "</figcaption>",
            "</figure>",
            "",
        ]
    return out


def _read_why(m: Module) -> list[str]:
    if not m.book:
        return []
    title, url, *why = m.book
    text = (
        words("module", "read_why_closest", title=title, url=url, why=why[0])
        if why
        else words("module", "read_why", title=title, url=url)
    )
    return ["::: {.read-why}", text, ":::", ""]


def module_page_text(m: Module) -> str:
    page = module_page(m)
    try:
        lesson = read_lesson(m)
    except LessonError as error:
        raise SiteError(str(error)) from None
    failures = _failures(m)
    curated = {x.test for x, _ in failures}
    s = lesson.sections
    out = [front_matter(f"Module {m.key}: {m.title}", m.summary)]
    if m.question:
        out += ["::: {.systems-question}", f"**The systems question.** {m.question}", ":::", ""]
    # What a student needs first (time, prerequisites, the notebook) right after the opening.
    out += ["## Module info", "", *_module_info(m, lesson, page), ""]
    out += ["## Overview", "", s["overview"], "", *_figures_md(m, page)]
    out += ["## Commands", "", _commands(m), ""]
    out += ["## Learning objectives", "", s["learning objectives"], ""]
    out += ["## What you build", "", s["what you build"], ""]
    out += ["## What you are not building yet", "", s["what you are not building yet"], ""]
    out += ["## What you write", "", *_what_you_write(lesson)]
    out += ["## How you know it works", "", *_how_you_know(lesson, curated)]
    out += ["## When it fails", "", *_when_it_fails(lesson, failures)]
    out += ["## What's next", "", *_whats_next(m, lesson, page)]
    out += ["## How later modules use this one", "", *_used_by(m, page)]
    out += _read_why(m)
    return "\n".join(out).rstrip("\n") + "\n"
