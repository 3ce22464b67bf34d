"""`tito site ...`: build the course website from the lessons, and render it."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from ..course.registry import COURSE_ROOT, get_module, written_modules
from ..site.build import check_site, content_problems, generate, write_notebooks, write_site
from ..site.links import SITE_DIR
from ..site.render import render_with_pandoc, render_with_quarto
from .ui import Failure, console


@click.group()
def site():
    """The course website: a Quarto project in site/, made from the lessons."""


def _generate() -> dict[str, str]:
    return generate()


SITE_OPTION = click.option(
    "--site",
    "site_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=SITE_DIR,
    show_default=False,
    help="The site folder (default: the course's site/).",
)


def _shown(path: Path) -> str:
    path = path.resolve()
    try:
        return path.relative_to(COURSE_ROOT).as_posix()
    except ValueError:
        return str(path)


@site.command()
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the committed site/ differs from what would be generated.",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="First regenerate what the pages read: `tito site failures`, `notebooks`, `figures`.",
)
@click.pass_context
@SITE_OPTION
def build(ctx, check, everything, site_dir):
    """Generate site/ (_quarto.yml and .qmd pages) from the lessons and the registry."""
    if everything and not check:
        ctx.invoke(failures)
        ctx.invoke(notebooks, site_dir=site_dir)
        ctx.invoke(figures)
    files = _generate()
    name = _shown(site_dir)
    if check:
        problems = check_site(site_dir, files)
        missing = content_problems(files)
        for p in problems + missing:
            console.print(f"  [red]✗[/] {p}")
        if problems:
            console.print(
                f"{name}/ is out of sync with the lessons and registry: run `tito site build`."
            )
        if missing:
            console.print(
                f"{len(missing)} thing(s) the pages must say are missing: fix them where named."
            )
        if problems or missing:
            raise SystemExit(1)
        console.print(
            f"[green]✓[/] {name}/ matches the lessons and registry ({len(files)} generated files)"
        )
        return
    changed, stale = write_site(site_dir, files)
    for rel in changed:
        console.print(f"  wrote {name}/{rel}")
    for rel in stale:
        console.print(f"  removed {name}/{rel} (stale)")
    console.print(
        f"[green]✓[/] site built: {len(changed)} file(s) changed, {len(stale)} removed, "
        f"{len(files) - len(changed)} already current."
    )
    console.print("Render it: `tito site render`")


@site.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output folder (default: site/_site, where Quarto puts it).",
)
@click.option(
    "--pandoc", "force_pandoc", is_flag=True, help="Use pandoc even if quarto is installed."
)
@SITE_OPTION
def render(out, force_pandoc, site_dir):
    """Render site/ to HTML: `quarto render site` if quarto is installed, else pandoc."""
    if check_site(site_dir, _generate()):
        console.print(
            f"[yellow]note:[/] {_shown(site_dir)}/ is out of sync with the lessons; rendering "
            "it as it is (`tito site build` brings it up to date)."
        )
    quarto = None if force_pandoc else shutil.which("quarto")
    target = out or site_dir / "_site"
    if quarto:
        console.print(f"Rendering with {quarto}")
        render_with_quarto(quarto, site_dir, out)
    else:
        files = render_with_pandoc(site_dir, target)
        pages = sum(1 for f in files if f.suffix == ".html")
        why = "as asked" if force_pandoc else "quarto is not installed"
        console.print(f"Rendered {pages} pages with pandoc ({why}).")
    console.print(f"[green]✓[/] open {_shown(target)}/index.html")


@site.command()
@SITE_OPTION
def notebooks(site_dir):
    """Release every written lesson with nbgrader into site/notebooks/ (the download links)."""
    written = write_notebooks(site_dir)
    where = f"{_shown(site_dir)}/notebooks/"
    console.print(f"[green]✓[/] {len(written)} released notebooks in {where}")


@site.command()
@click.argument("modules", nargs=-1)
def failures(modules):
    """Plant each curated mistake (site/failures/NN_slug.yaml) in the reference, run the
    lesson as `tito module complete` does, and record what the test printed."""
    from ..site.failures import record

    chosen = [get_module(x) for x in modules] if modules else written_modules()
    problems = record(chosen)
    for p in problems:
        console.print(f"  [red]✗[/] {p}")
    console.print(f"Recorded the planted mistakes of {len(chosen)} module(s) in site/failures/.")
    if problems:
        raise Failure("Some planted mistakes no longer fail their test: change them.")
    console.print("Run `tito site build` to put them on the pages.")


@site.command()
def figures():
    """Draw the module pages' figures (tito/site/figures/) into site/figures/."""
    from ..site.figures import draw_all

    for path in draw_all():
        console.print(f"  drew {_shown(path)}")
    console.print("[green]✓[/] figures drawn. Run `tito site build` to put them on the pages.")


@site.command()
@click.argument("names", nargs=-1)
def runs(names):
    """Run each milestone (or those NAMES) as a reader would and record what it printed, its
    wall time and the machine's load in site/runs/NAME.json (the milestone pages quote them)."""
    from ..site.milestone_page import record_args
    from ..site.runs import milestones_to_run, record_run

    for ms in milestones_to_run(names):
        args = record_args(ms)
        console.print(f"running `tito milestone run {' '.join([ms.name, *args])}` ...")
        result = record_run(ms, args)
        console.print(
            f"  exit {result['exit_code']} after {result['seconds']:.0f} s "
            f"(load {result['load_before'][0]:.2f} before, {result['load_after'][0]:.2f} after)"
        )
    console.print("Run `tito site build` to put them on the milestone pages.")
