"""A milestone's page: what the run does, what a real run printed (site/runs/NAME.json, recorded
by ``tito site runs``), how long it took, its flags, and what each module it needs contributes.

The wording is in ``templates/milestones.yaml``; this file lays the page out and checks that
every piece is there (``milestone_problems``, part of ``tito site build --check``).
"""

from __future__ import annotations

import re

from ..course.registry import Milestone, get_module
from ..errors import SiteError
from .links import milestone_page, milestone_ready, module_ref
from .markdown import code_block, front_matter
from .runs import recorded_run
from .wording import milestone_words

SECTIONS = (
    "What the run does",
    "Run it",
    "What you see",
    "How long it takes",
    "Its flags",
    "What each module contributes",
)
GAP = "⋮"


def record_args(ms: Milestone) -> tuple[str, ...]:
    return tuple(milestone_words().get(ms.name, {}).get("record") or ())


def excerpt(output: str, spec: list[str] | None) -> str:
    """The lines of ``output`` that ``spec`` picks (see milestones.yaml), gaps shown as ⋮:
    a pattern picks the first line it matches, "A ... B" the lines from A's to the next B's,
    "A ... +N" A's line and the N lines after it."""
    lines = output.splitlines()
    if not spec:
        return "\n".join(lines)
    keep: set[int] = set()
    for item in spec:
        first, _, last = (part.strip() for part in item.partition(" ... "))
        start = next((i for i, line in enumerate(lines) if re.search(first, line)), None)
        if start is None:
            raise SiteError(f"no line of the recorded run matches {first!r}")
        end = start
        if re.fullmatch(r"\+\d+", last):  # "A ... +N": A's line and the N after it
            end = min(start + int(last[1:]), len(lines) - 1)
        elif last:
            end = next((i for i in range(start, len(lines)) if re.search(last, lines[i])), None)
            if end is None:
                raise SiteError(f"no line after {first!r} matches {last!r}")
        keep.update(range(start, end + 1))
    out, previous = [], None
    for i in sorted(keep):
        if previous is not None and i != previous + 1:
            out.append(GAP)
        out.append(lines[i])
        previous = i
    return "\n".join(out)


def _flags(help_text: str) -> str:
    """The options part of a script's --help."""
    _, found, options = help_text.partition("options:\n")
    return options.rstrip() if found else help_text


def milestone_page_text(ms: Milestone) -> str:
    page = milestone_page(ms)
    last = get_module(max(ms.requires))
    words = milestone_words().get(ms.name)
    if words is None:
        raise SiteError(f"tito/site/templates/milestones.yaml has no entry for {ms.name}")
    out = [front_matter(f"{ms.title} ({ms.year})", ms.summary)]
    ready = milestone_ready(ms)
    if not ready:
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
    out += ["## What the run does", "", words["does"], ""]
    run = recorded_run(ms) if ready else None
    command = f"tito milestone run {' '.join([ms.name, *record_args(ms)])}"
    out += ["## Run it", ""]
    out += [
        "From your course folder, with the package you built:",
        "",
        code_block(f"tito milestone run {ms.name}", "bash"),
        "",
    ]
    if record_args(ms):
        out += ["The run quoted below added its flags:", "", code_block(command, "bash"), ""]
    if run is not None:
        out += _what_you_see(ms, run, words)
        out += _how_long(run, words.get("time_note", ""))
        out += ["## Its flags", "", f"`tito milestone run {ms.name} --help` lists them:", ""]
        out += [code_block(_flags(run["help"]), "text"), ""]
    out += ["## What each module contributes", ""]
    out += ["| Module | What this run takes from it |", "|:-------------|:---------------------|"]
    for n in ms.requires:
        said = (words.get("modules") or {}).get(n, "")
        out.append(f"| {module_ref(get_module(n), page)} | {said} |")
    out += [
        "",
        f"It becomes available when you complete {module_ref(last, page)}, the last of them.",
        "",
    ]
    return "\n".join(out)


def _what_you_see(ms: Milestone, run: dict, words: dict) -> list[str]:
    out = ["## What you see", ""]
    out += [
        (
            f"What `{run['command']}` printed when `tito site runs` recorded it on "
            f"{run['date']} (exit code {run['exit_code']}), with the reference solutions as "
            "the package; your own package prints the same lines with its own figures."
            + (f" Lines left out are marked {GAP}." if words.get("excerpt") else "")
        ),
        "",
    ]
    if words.get("scoreboard"):
        out += ["### The scoreboard", ""]
        out += [code_block(excerpt(run["output"], [words["scoreboard"]]), "output"), ""]
        out += ["### The rest of the run", ""]
    out += [code_block(excerpt(run["output"], words.get("excerpt")), "output"), ""]
    return out


def _how_long(run: dict, note: str = "") -> list[str]:
    before, after = run["load_before"][0], run["load_after"][0]
    busy = max(before, after) > 0.5 * (run.get("cores") or 1) + 0.5
    busy_note = (" Other work shared those cores, so on an idle machine it takes less."
                 if busy else "")
    return [
        "## How long it takes",
        "",
        (
            f"The recorded run took **{run['seconds']:,.0f} s** of wall time on a machine with "
            f"{run.get('cores') or '?'} cores, whose load average was {before:.1f} when it "
            f"started and {after:.1f} when it ended.{busy_note}"
        ),
        "",
        *([note, ""] if note else []),
    ]


def milestone_problems() -> list[str]:
    """What a ready milestone's page lacks: a recorded run that succeeded, an excerpt that
    still matches it, a line for each module it needs, a scoreboard where one is due."""
    from ..course.registry import MILESTONES

    problems = []
    for ms in MILESTONES:
        words = milestone_words().get(ms.name)
        where = f"milestone {ms.name}"
        if not words:
            problems.append(f"{where}: no entry in tito/site/templates/milestones.yaml")
            continue
        missing = [n for n in ms.requires if not (words.get("modules") or {}).get(n)]
        if missing:
            problems.append(
                f"{where}: milestones.yaml says nothing of module(s) "
                f"{', '.join(f'{n:02d}' for n in missing)}: add a line to its `modules`"
            )
        if not milestone_ready(ms):
            continue
        run = recorded_run(ms)
        if run is None:
            problems.append(f"{where}: no recorded run: `tito site runs {ms.name}`")
            continue
        if run["exit_code"] != 0 or not run["output"].strip() or not run.get("help"):
            problems.append(
                f"{where}: the recorded run failed or printed nothing (exit {run['exit_code']}): "
                f"fix it and `tito site runs {ms.name}`"
            )
        if tuple(run["command"].split()[4:]) != record_args(ms):
            problems.append(f"{where}: recorded with other flags than milestones.yaml asks")
        try:
            excerpt(run["output"], words.get("excerpt"))
            if ms.name in ("llm", "olympics"):
                if not words.get("scoreboard"):
                    problems.append(f"{where}: its page must show the run's scoreboard")
                else:
                    excerpt(run["output"], [words["scoreboard"]])
        except SiteError as error:
            problems.append(f"{where}: {error}: update its excerpt in milestones.yaml")
    return problems


def page_sections_missing(text: str) -> list[str]:
    return [s for s in SECTIONS if f"\n## {s}\n" not in text]
