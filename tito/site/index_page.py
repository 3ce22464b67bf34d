"""The home page (from README.md and the registry) and the milestone pages."""

from __future__ import annotations

from ..course.registry import (
    COURSE_ROOT,
    MILESTONES,
    MODULES,
    TIERS,
    Milestone,
    get_module,
)
from ..errors import SiteError
from .links import (
    SITE_TITLE,
    hours_total,
    milestone_page,
    milestone_ready,
    milestone_ref,
    module_page,
    module_ref,
    ranges,
    rel_link,
    span_text,
    tier_modules,
)
from .markdown import code_block, difficulty_md, front_matter, inline


def _readme_sections() -> tuple[str, dict[str, str]]:
    path = COURSE_ROOT / "README.md"
    if not path.is_file():
        raise SiteError("README.md is missing: the home page takes the course description from it.")
    intro: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = sections.setdefault(line[3:].strip().lower(), [])
            continue
        if not fenced and line.startswith("# "):
            continue
        (intro if current is None else current).append(line)
    return "\n".join(intro).strip(), {k: "\n".join(v).strip() for k, v in sections.items()}


def index_page() -> str:
    page = "index.qmd"
    intro, sections = _readme_sections()
    path_section = sections.get("the student's path")
    if not intro or not path_section:
        raise SiteError(
            "README.md needs an introduction under '# TinyTorch' and a \"## The student's path\" "
            "section: the home page shows both."
        )
    written = [m for m in MODULES if m.written]
    out = [
        front_matter(
            SITE_TITLE, "Build a deep-learning framework from scratch, one module at a time"
        )
    ]
    out += ["## What the course is", "", intro, ""]
    out += [
        (
            f"{len(MODULES)} modules in {len(TIERS)} tiers; {len(written)} written so far. "
            f"Each module page shows what you write, how the graded tests check it, and what "
            f"their failure messages tell you."
        ),
        "",
    ]

    out += ["## The tiers", ""]
    tiers = tier_modules()
    for tier, name in TIERS.items():
        modules = tiers.get(tier, [])
        if not modules:
            continue
        hours = hours_total(modules) if all(m.hours for m in modules) else None
        titles = ", ".join(module_ref(m, page, short=True) for m in modules)
        out.append(
            f"- **{name}** ({span_text(modules)}{', about ' + hours if hours else ''}): {titles}."
        )
    out.append("")

    out += ["## The student's path", "", path_section, ""]

    out += ["## The modules {#modules}", ""]
    out += [
        "| # | Module | Tier | What you build | Difficulty | Hours | Status |",
        "|--:|:-------|:-----|:----------------------------------------|:--|:--|:--------|",
    ]
    for m in MODULES:
        title = f"[{m.title}]({rel_link(module_page(m), page)})" if m.written else m.title
        status = "ready" if m.written else "[coming soon]{.soon}"
        out.append(
            f"| {m.key} | {title} | {TIERS.get(m.tier, m.tier)} | {inline(m.summary, True)} "
            f"| {difficulty_md(m.difficulty)} | {m.hours} | {status} |"
        )
    rated = [m for m in MODULES if m.hours]
    total = hours_total(rated)
    out += [
        "",
        (
            f"Time estimates are per module; the {len(rated)} estimated so far "
            f"({ranges(m.number for m in rated)}) take about {total} in all."
            if total
            else "Time estimates are per module."
        ),
        "",
    ]

    out += [
        "## The milestones {#milestones}",
        "",
        "Historical results, run with the `tinytorch` package you built:",
        "",
        "| Year | Milestone | Needs modules | Status |",
        "|:--|:------------------|:----------|:------------------|",
    ]
    for ms in MILESTONES:
        needs = ranges(ms.requires)
        status = (
            f"`tito milestone run {ms.name}`" if milestone_ready(ms) else "[coming soon]{.soon}"
        )
        out.append(f"| {ms.year} | {milestone_ref(ms, page, year=False)} | {needs} | {status} |")
    out.append("")
    return "\n".join(out)


def milestone_page_text(ms: Milestone) -> str:
    page = milestone_page(ms)
    ready = milestone_ready(ms)
    last = get_module(max(ms.requires))
    out = [front_matter(f"{ms.title} ({ms.year})", ms.summary, {"toc": False})]
    if ready:
        out += [
            "Run it with the package you built (from your course folder):",
            "",
            code_block(f"tito milestone run {ms.name}", "bash"),
            "",
        ]
    else:
        out += [
            "::: {.soon-note}",
            (
                f"This milestone is [coming soon]{{.soon}}: its script `milestones/{ms.script}` "
                f"is not written yet. When it is, `tito milestone run {ms.name}` runs it with "
                "your own `tinytorch`."
            ),
            ":::",
            "",
        ]
    out += ["## Modules it needs", ""]
    out += [f"- {module_ref(get_module(n), page)}" for n in ms.requires]
    out += [
        "",
        f"It becomes available when you complete {module_ref(last, page)}, the last of them.",
        "",
    ]
    return "\n".join(out)
