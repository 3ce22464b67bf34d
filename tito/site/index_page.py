"""The home page, from README.md, the registry and templates/wording.yaml."""

from __future__ import annotations

from ..course.registry import (
    COURSE_ROOT,
    MILESTONES,
    MODULES,
    TIERS,
)
from ..errors import SiteError
from .links import (
    SITE_TITLE,
    hours_total,
    milestone_ready,
    milestone_ref,
    module_page,
    module_ref,
    ranges,
    rel_link,
    span_text,
    tier_modules,
)
from .markdown import difficulty_md, front_matter, inline
from .wording import words


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


def _steps(block: list[str]) -> list[str]:
    """A README code block whose ``# comment`` lines say what the next commands do, as
    numbered steps: the comment, then its commands."""
    groups: list[tuple[list[str], list[str]]] = [([], [])]
    for line in block:
        if line.startswith("# "):
            if groups[-1][1]:
                groups.append(([], []))
            groups[-1][0].append(line[2:].strip())
        elif line.strip():
            groups[-1][1].append(line)
    out = []
    for i, (said, commands) in enumerate(groups, 1):
        text = " ".join(said) or words("home", "first_step")
        text = text[0].upper() + text[1:]
        out += [f"{i}. {inline(text)}", "", "    ```bash"]
        out += [f"    {c}" for c in commands] + ["    ```", ""]
    return out


def _student_path(section: str) -> list[str]:
    """The README's student path, its commented command block as numbered steps."""
    out: list[str] = []
    block: list[str] | None = None
    for line in section.splitlines():
        if line.startswith("```"):
            if block is None:
                block = []
                continue
            commented = any(x.startswith("# ") for x in block)
            out += _steps(block) if commented else ["```bash", *block, "```"]
            block = None
            continue
        if block is not None:
            block.append(line)
        else:
            out.append(line)
    return out


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
    out = [front_matter(SITE_TITLE, words("home", "subtitle"))]
    out += ["## What the course is", "", intro, ""]
    count = words("home", "count", modules=len(MODULES), tiers=len(TIERS), written=len(written))
    out += [count, ""]

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

    out += ["## The student's path", "", *_student_path(path_section), ""]
    out += ["::: {.grades-note}", words("grades"), ":::", ""]

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
            words("home", "modules_total", rated=len(rated),
                  which=ranges(m.number for m in rated), total=total)
            if total
            else words("home", "modules_total_none")
        ),
        "",
    ]

    out += [
        "## The milestones {#milestones}",
        "",
        words("home", "milestones_intro"),
        "",
        f"| Year | Milestone | Needs modules | {words('home', 'run_column')} |",
        "|:--|:------------------|:----------|:------------------|",
    ]
    for ms in sorted(MILESTONES, key=lambda ms: ms.year):  # stable: same years keep their order
        needs = ranges(ms.requires)
        run = f"`tito milestone run {ms.name}`" if milestone_ready(ms) else "[coming soon]{.soon}"
        out.append(f"| {ms.year} | {milestone_ref(ms, page, year=False)} | {needs} | {run} |")
    out.append("")
    return "\n".join(out)
