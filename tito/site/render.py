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
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import RenderError
from .links import SITE_TITLE, STYLESHEET


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


def _link(item: NavItem, page: str, css: str = "") -> str:
    text = html.escape(item.text)
    if not item.href:
        # An unwritten module: its name and a "coming soon" mark, never a link.
        name, soon, _ = item.text.rpartition(" (coming soon)")
        if soon and not _:
            text = f'{html.escape(name)} <span class="tt-soon">coming soon</span>'
        return f'<span class="tt-nolink{(" " + css) if css else ""}">{text}</span>'
    current = item.href == page
    classes = " ".join(c for c in (css, "tt-active" if current else "") if c)
    attrs = f' class="{classes}"' if classes else ""
    attrs += ' aria-current="page"' if current else ""
    return f'<a href="{html.escape(_html_href(item.href, page))}"{attrs}>{text}</a>'


def navbar_html(title: str, items: list[NavItem], page: str) -> str:
    links = "".join(f"<li>{_link(i, page)}</li>" for i in items)
    home = html.escape(_html_href("index.qmd", page))
    return f'<a class="tt-brand" href="{home}">{html.escape(title)}</a><ul>{links}</ul>'


def sidebar_html(items: list[NavItem], page: str) -> str:
    def render(items: list[NavItem]) -> str:
        out = []
        for item in items:
            if item.children is not None:
                head = (
                    _link(item, page, "tt-section-title")
                    if item.href
                    else (f'<span class="tt-section-title">{html.escape(item.text)}</span>')
                )
                out.append(f'<li class="tt-section">{head}<ul>{render(item.children)}</ul></li>')
            else:
                out.append(f"<li>{_link(item, page)}</li>")
        return "".join(out)

    return f"<ul>{render(items)}</ul>"


def pagenav_html(items: list[NavItem], page: str) -> str:
    pages = _linear(items)
    hrefs = [p.href for p in pages]
    if page not in hrefs:
        return ""
    i = hrefs.index(page)
    parts = []
    if i > 0:
        parts.append(f'<span class="tt-prev">← {_link(pages[i - 1], page)}</span>')
    if i + 1 < len(pages):
        parts.append(f'<span class="tt-next">{_link(pages[i + 1], page)} →</span>')
    return (
        f'<nav class="tt-pagenav" aria-label="Previous and next page">{"".join(parts)}</nav>'
        if parts
        else ""
    )


# ---- pandoc -------------------------------------------------------------------------------------
TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tito site render (pandoc $pandoc-version$)">
<title>$pagetitle$ · $site-title$</title>
$for(css)$
<link rel="stylesheet" href="$css$">
$endfor$
$if(highlighting-css)$
<style>
$highlighting-css$
</style>
$endif$
</head>
<body class="tt-pandoc">
<input type="checkbox" id="tt-menu" class="tt-menu-toggle" aria-hidden="true" tabindex="-1">
<header class="tt-topbar">
<label class="tt-menu-button" for="tt-menu" role="button" aria-controls="tt-sidebar"
  tabindex="0">☰ Menu</label>
$navbar$</header>
<div class="tt-layout">
<nav class="tt-sidebar" id="tt-sidebar" aria-label="Course contents">$sidebar$</nav>
<main class="tt-main" id="content">
<header class="tt-title-block">
<h1 class="title">$title$</h1>
$if(subtitle)$
<p class="subtitle">$subtitle$</p>
$endif$
</header>
$body$
$pagenav$
</main>
$if(toc)$
<nav class="tt-toc" aria-label="On this page">
<h2>On this page</h2>
$table-of-contents$
</nav>
$endif$
</div>
</body>
</html>
"""

# .qmd links become .html links, as Quarto does; links elsewhere are left alone.
LUA_LINKS = r"""
function Link(el)
  local target = el.target
  if target:match("^%a[%w+.-]*:") or target:sub(1, 1) == "#" then
    return el
  end
  local path, fragment = target:match("^([^#]*)(.*)$")
  if path:match("%.qmd$") then
    el.target = path:sub(1, -5) .. ".html" .. fragment
  end
  return el
end
"""


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
    with tempfile.TemporaryDirectory(prefix="tito-site-") as tmp:
        template = Path(tmp, "page.html")
        template.write_text(TEMPLATE, encoding="utf-8")
        lua = Path(tmp, "links.lua")
        lua.write_text(LUA_LINKS, encoding="utf-8")

        def one(page: str) -> Path:
            target = out / (page[:-4] + ".html")
            target.parent.mkdir(parents=True, exist_ok=True)
            toc = ["--toc", "--toc-depth=2"] if front_matter(site / page).get("toc", True) else []
            args = [
                pandoc,
                str(site / page),
                "--from",
                "markdown",
                "--to",
                "html5",
                "--standalone",
                f"--template={template}",
                f"--lua-filter={lua}",
                *toc,
                "--mathml",
                "--section-divs",
                f"--css={posixpath.relpath(STYLESHEET, posixpath.dirname(page) or '.')}",
                "-V",
                f"site-title={title}",
                "-V",
                f"pandoc-version={version}",
                "-V",
                f"navbar={navbar_html(title, navbar, page)}",
                "-V",
                f"sidebar={sidebar_html(sidebar, page)}",
                "-V",
                f"pagenav={pagenav_html(sidebar, page)}",
                "--output",
                str(target),
            ]
            done = subprocess.run(args, capture_output=True, text=True, cwd=site, check=False)
            if done.returncode != 0:
                raise RenderError(f"pandoc failed on site/{page}:\n{done.stderr.strip()}")
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
