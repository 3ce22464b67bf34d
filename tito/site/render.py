"""Rendering ``site/`` to HTML: with Quarto when it is installed, else with pandoc.

The pandoc path renders every ``.qmd`` page into the folder Quarto would use
(``site/_site/`` unless told otherwise), with the same navigation on every page: the navbar
and sidebar are read from ``site/_quarto.yml``, so both renderers follow one description of
the site. Links to ``.qmd`` pages become links to ``.html`` pages (a Lua filter), math is
MathML (no network needed), and the hand-written ``site/styles.css`` is shared.
"""

from __future__ import annotations

import html
import os
import posixpath
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import RenderError
from .links import SITE_FILTER, SITE_TITLE, STYLESHEET, TEMPLATES


@dataclass
class NavItem:
    text: str
    href: str | None  # relative to the site root, as in _quarto.yml; None: not a link
    children: list[NavItem] | None = None  # a sidebar section


# ---- navigation, from _quarto.yml ------------------------------------------------------------
def _items(entries) -> list[NavItem]:
    out = []
    for entry in entries or []:
        if isinstance(entry, str):
            out.append(NavItem(Path(entry).stem, entry))
        elif "section" in entry:
            out.append(
                NavItem(str(entry["section"]), entry.get("href"), _items(entry.get("contents")))
            )
        else:
            out.append(NavItem(str(entry.get("text", entry.get("href", ""))), entry.get("href")))
    return out


def read_navigation(site: Path) -> tuple[str, list[NavItem], list[NavItem]]:
    """(site title, navbar items, sidebar items) from ``site/_quarto.yml``."""
    config_path = site / "_quarto.yml"
    if not config_path.is_file():
        raise RenderError(f"{config_path} does not exist: run `tito site build` first.")
    import yaml  # PyYAML comes with jupytext

    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    website = config.get("website", {})
    sidebar = website.get("sidebar", {})
    if isinstance(sidebar, list):  # Quarto allows several sidebars; the first is the site's
        sidebar = sidebar[0] if sidebar else {}
    navbar = website.get("navbar", {})
    return (
        str(website.get("title", SITE_TITLE)),
        _items(navbar.get("left")),
        _items(sidebar.get("contents")),
    )


def _linear(items: list[NavItem]) -> list[NavItem]:
    """Sidebar pages in reading order, each once (for previous / next links)."""
    out, seen = [], set()
    for item in items:
        for x in [item] + _linear(item.children or []):
            if x.href and "#" not in x.href and x.href not in seen:
                seen.add(x.href)
                out.append(x)
    return out


def _html_href(href: str, page: str) -> str:
    """A site-root-relative ``.qmd`` href as a link from ``page`` to the rendered file."""
    if "://" in href or href.startswith(("mailto:", "#")):
        return href
    path, _, fragment = href.partition("#")
    if path.endswith((".qmd", ".md", ".ipynb")):
        path = path.rsplit(".", 1)[0] + ".html"
    rel = posixpath.relpath(path, posixpath.dirname(page) or ".")
    return rel + (f"#{fragment}" if fragment else "")


@dataclass
class NavLink:
    """A navigation entry as the page template shows it (``templates/nav.html``)."""

    name: str
    url: str | None  # relative to the page; None: an unwritten module, never a link
    current: bool = False
    soon: bool = False
    children: list[NavLink] | None = None


def _nav(item: NavItem, page: str) -> NavLink:
    name, soon, rest = item.text.rpartition(" (coming soon)")
    soon = bool(soon) and not rest
    return NavLink(
        name if soon else item.text,
        _html_href(item.href, page) if item.href else None,
        item.href == page,
        soon,
        [_nav(c, page) for c in item.children] if item.children is not None else None,
    )


def _neighbours(items: list[NavItem], page: str) -> tuple[NavItem | None, NavItem | None]:
    pages = _linear(items)
    hrefs = [p.href for p in pages]
    if page not in hrefs:
        return None, None
    i = hrefs.index(page)
    return (pages[i - 1] if i > 0 else None), (pages[i + 1] if i + 1 < len(pages) else None)


# ---- the page shell (Jinja2) and pandoc's parts --------------------------------------------------
PART = "<!--tt-part-->"
PARTS = ("title", "subtitle", "pagetitle", "highlighting", "toc", "body")


def _environment():
    import jinja2  # ships with nbconvert, a dependency of nbgrader

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


_TOC_ID = re.compile(r'\s+id="toc-[^"]*"')
_PRE = re.compile(r"<pre(?![^>]*tabindex)")


def page_html(parts: dict[str, str], page: str, site_title: str, navbar: list[NavItem],
              sidebar: list[NavItem], version: str, toc: bool) -> str:
    """One page of the site: pandoc's ``parts`` (title, body, ...) in the course's shell."""
    from markupsafe import Markup

    previous, following = _neighbours(sidebar, page)
    # Code blocks may scroll sideways: a keyboard must be able to reach them.
    body = _PRE.sub('<pre tabindex="0"', parts["body"])
    contents = parts["toc"].strip() if toc else ""
    return _environment().get_template("page.html").render(
        title=Markup(parts["title"].strip()),
        subtitle=Markup(parts["subtitle"].strip()),
        title_text=html.unescape(re.sub(r"<[^>]+>", "", parts["pagetitle"].strip())),
        site_title=site_title,
        pandoc_version=version,
        stylesheet=posixpath.relpath(STYLESHEET, posixpath.dirname(page) or "."),
        highlighting_css=Markup(parts["highlighting"].strip()),
        home=_html_href("index.qmd", page),
        navbar=[_nav(i, page) for i in navbar],
        sidebar=[_nav(i, page) for i in sidebar],
        previous=_nav(previous, page) if previous else None,
        next=_nav(following, page) if following else None,
        toc=Markup(contents),
        # The same contents, folded, for screens too narrow for the side column (the ids
        # stay on the side column's copy).
        toc_inline=Markup(_TOC_ID.sub("", contents)),
        body=Markup(body.strip()),
    )


def pandoc_path() -> str:
    try:
        import pypandoc
    except ImportError:
        raise RenderError(
            "Quarto is not installed and neither is pypandoc: install one. Here, "
            '`pip install pypandoc-binary` (it is in the dev extra: pip install -e ".[dev]").'
        ) from None
    try:
        return pypandoc.get_pandoc_path()
    except OSError as error:
        raise RenderError(
            f"pypandoc found no pandoc binary ({error}): pip install pypandoc-binary"
        ) from None


def pages_of(site: Path) -> list[str]:
    """Every page of the site, relative to it, in a stable order."""
    pages = []
    for path in sorted(site.rglob("*.qmd")):
        rel = path.relative_to(site).as_posix()
        if not any(part.startswith(("_", ".")) for part in rel.split("/")):
            pages.append(rel)
    return pages


def front_matter(path: Path) -> dict:
    """A page's YAML front matter (Quarto and pandoc read the same keys: title, toc, ...)."""
    import yaml

    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---\n", 4)
    return (yaml.safe_load(text[4:end]) or {}) if end > 0 else {}


def render_with_pandoc(site: Path, out: Path) -> list[Path]:
    """Render every page of ``site`` into ``out``; returns the files written."""
    site, out = Path(site).resolve(), Path(out).resolve()
    pandoc = pandoc_path()
    title, navbar, sidebar = read_navigation(site)
    version = subprocess.run(
        [pandoc, "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n")[0]
    version = version.split()[-1] if version else "?"
    out.mkdir(parents=True, exist_ok=True)
    # The site's own filter (written by `tito site build`, the one Quarto runs too), then
    # the .qmd -> .html links that Quarto makes by itself.
    site_filter = site / SITE_FILTER
    filters = [site_filter if site_filter.is_file() else TEMPLATES / SITE_FILTER,
               TEMPLATES / "links.lua"]
    def one(page: str) -> Path:
        target = out / (page[:-4] + ".html")
        target.parent.mkdir(parents=True, exist_ok=True)
        toc = bool(front_matter(site / page).get("toc", True))
        args = [
            pandoc,
            str(site / page),
            "--from",
            "markdown",
            "--to",
            "html5",
            f"--template={TEMPLATES / 'pandoc.html'}",
            *(f"--lua-filter={f}" for f in filters),
            *(["--toc", "--toc-depth=2"] if toc else []),
            "--mathml",
            "--section-divs",
        ]
        done = subprocess.run(args, capture_output=True, text=True, cwd=site, check=False)
        if done.returncode != 0:
            raise RenderError(f"pandoc failed on site/{page}:\n{done.stderr.strip()}")
        pieces = done.stdout.split(PART)
        if len(pieces) != len(PARTS):
            raise RenderError(f"pandoc's output for site/{page} is not in {len(PARTS)} parts")
        parts = dict(zip(PARTS, pieces))
        text = page_html(parts, page, title, navbar, sidebar, version, toc)
        target.write_text(text, encoding="utf-8")
        return target

    # One pandoc process per page, a few at a time.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        written = list(pool.map(one, pages_of(site)))
    for folder in ("figures", "notebooks"):
        if (site / folder).is_dir():
            shutil.copytree(site / folder, out / folder, dirs_exist_ok=True)
    style = site / STYLESHEET
    if style.is_file():
        shutil.copyfile(style, out / STYLESHEET)
        written.append(out / STYLESHEET)
    return written


def render_with_quarto(quarto: str, site: Path, out: Path | None) -> None:
    args = [quarto, "render", str(site)]
    if out is not None:
        args += ["--output-dir", str(out.resolve())]
    done = subprocess.run(args, check=False)
    if done.returncode != 0:
        raise RenderError(f"`{' '.join(args)}` failed with exit code {done.returncode}.")
