"""Look at rendered pages in headless Chromium, as a reader would, and check them with axe-core.

One Chromium process (Debian's ``/usr/bin/chromium``, driven by Playwright from PyPI; no
browser is downloaded) opens every page at the widths asked, from the files on disk: nothing
is served and nothing goes to the network. For each page and width ``audit()`` returns what a
reader meets:

- the page's own width against the window's (a page that scrolls sideways);
- every table, figure and code block wider than the column that holds it;
- each figure's smallest text, in CSS pixels as drawn at that width (from the SVG file's
  font sizes and the width the image is shown at);
- each in-page link target (the table of contents, the test names) after following it: is
  its heading below the sticky top bar, or hidden under it;
- the menu button, operated from the keyboard alone (Tab to it, Enter, Escape, Space);
- axe-core's violations, by rule and impact.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..course.registry import COURSE_ROOT
from ..errors import BrowserError

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
AXE_VERSION = "4.14.1"
AXE_ENV = "AXE_CORE_JS"


def available() -> bool:
    return Path(CHROMIUM).is_file()


def axe_path() -> Path | None:
    """axe-core's ``axe.min.js``: $AXE_CORE_JS, else the copy `.ci/run` installs with npm into
    ``.ci/node/``, else a global npm install."""
    candidates = []
    if os.environ.get(AXE_ENV):
        candidates.append(Path(os.environ[AXE_ENV]))
    candidates.append(COURSE_ROOT / ".ci" / "node" / "node_modules" / "axe-core" / "axe.min.js")
    npm = shutil.which("npm")
    if npm:
        done = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip():
            candidates.append(Path(done.stdout.strip()) / "axe-core" / "axe.min.js")
    return next((p for p in candidates if p.is_file()), None)


INSTALL_HINT = (
    f"npm install --prefix .ci/node axe-core@{AXE_VERSION} (axe-core), and "
    "pip install playwright (in the dev extra); Playwright drives Debian's /usr/bin/chromium, "
    "so never run `playwright install`"
)


# ---- what the page shows -------------------------------------------------------------------
MEASURE = r"""
() => {
  const vw = document.documentElement.clientWidth;
  function wide(el, container) {
    const r = el.getBoundingClientRect();
    const c = container.getBoundingClientRect();
    const cs = getComputedStyle(container);
    const inner = c.width - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    return {w: Math.round(r.width), room: Math.round(inner),
            right: Math.round(r.right), shown: r.width > 0 && r.height > 0};
  }
  const main = document.querySelector('main') || document.body;
  const over = [];
  main.querySelectorAll('table, figure, pre, img').forEach((el) => {
    const container = el.parentElement;
    const m = wide(el, container);
    if (!m.shown) return;
    // A code block may scroll inside itself (with a cue); a table or figure may not.
    const clipped = el.tagName !== 'PRE' && el.scrollWidth > el.clientWidth + 1;
    if (m.w > m.room + 1 || m.right > vw + 1 || clipped) {
      const label = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
        (el.className ? '.' + String(el.className).split(' ')[0] : '');
      over.push({what: label, width: m.w, room: m.room, right: m.right});
    }
  });
  const figures = Array.from(main.querySelectorAll('figure img')).map((img) => ({
    src: img.currentSrc || img.src, width: img.getBoundingClientRect().width,
    loaded: img.complete && img.naturalWidth > 0, alt: img.getAttribute('alt') || '',
    link: img.closest('a') ? img.closest('a').getAttribute('href') : null,
  }));
  const scrollers = Array.from(main.querySelectorAll('pre')).filter(
    (p) => p.scrollWidth > p.clientWidth + 1).map((p) => ({
      focusable: p.tabIndex >= 0, cue: getComputedStyle(p).overflowX,
      output: p.classList.contains('output')}));
  const box = (sel) => {
    const el = document.querySelector(sel);
    if (!el) return null;
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return {w: r.width, h: r.height, x: r.left, top: r.top, bottom: r.bottom,
            shown: r.width > 0 && r.height > 0 && s.display !== 'none' &&
                   s.visibility !== 'hidden'};
  };
  return {scrollWidth: document.documentElement.scrollWidth, clientWidth: vw,
          height: document.documentElement.scrollHeight, overflowing: over, figures,
          scrollers, topbar: box('.tt-topbar'), menu: box('.tt-menu-button'),
          sidebar: box('.tt-sidebar'), toc: box('.tt-toc'), tocInline: box('.tt-toc-inline'),
          maths: main.querySelectorAll('math').length};
}
"""

ANCHORS = r"""
() => {
  const ids = new Set();
  document.querySelectorAll('a[href^="#"]').forEach((a) => {
    const id = decodeURIComponent(a.getAttribute('href').slice(1));
    if (id && document.getElementById(id)) ids.add(id);
  });
  return Array.from(ids);
}
"""

ANCHOR_SEEN = r"""
(id) => {
  const el = document.getElementById(id);
  const heading = el.matches('h1,h2,h3,h4,h5,h6') ? el :
    (el.querySelector('h1,h2,h3,h4,h5,h6') || el);
  const bar = document.querySelector('.tt-topbar');
  const barBottom = bar ? bar.getBoundingClientRect().bottom : 0;
  const r = heading.getBoundingClientRect();
  return {id, top: Math.round(r.top), bar: Math.round(barBottom),
          atEnd: Math.ceil(window.scrollY + window.innerHeight) >=
                 document.documentElement.scrollHeight - 1};
}
"""

SIDEBAR_SHOWN = r"""
() => {
  const el = document.querySelector('.tt-sidebar');
  if (!el) return false;
  const r = el.getBoundingClientRect(), s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility !== 'hidden';
}
"""

ACTIVE_ENTRY = r"""
() => {
  const nav = document.querySelector('.tt-sidebar');
  const a = nav && nav.querySelector('[aria-current="page"]');
  if (!a) return null;
  const r = a.getBoundingClientRect(), n = nav.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, navTop: n.top, navBottom: n.bottom,
          innerHeight: window.innerHeight};
}
"""

AXE_RUN = r"""
async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.length, targets: v.nodes.slice(0, 3).map((n) => n.target.join(' '))}));
}
"""


# ---- figures' text, from the SVG files -------------------------------------------------------
_VIEWBOX = re.compile(r'viewBox="\s*[-\d.]+\s+[-\d.]+\s+([\d.]+)\s+[\d.]+\s*"')
_FONT = re.compile(r"font-size:\s*([\d.]+)px")


def svg_text_sizes(path: Path) -> tuple[float, float] | None:
    """(smallest font size, viewBox width) of a matplotlib SVG, both in its user units."""
    text = Path(path).read_text(encoding="utf-8")
    box = _VIEWBOX.search(text)
    sizes = [float(s) for s in _FONT.findall(text)]
    if not box or not sizes:
        return None
    return min(sizes), float(box.group(1))


@dataclass
class PageAudit:
    page: str
    width: int
    seen: dict
    anchors: list[dict] = field(default_factory=list)
    menu: dict | None = None
    active: dict | None = None
    violations: list[dict] = field(default_factory=list)
    figure_text: list[tuple[str, float]] = field(default_factory=list)  # (svg, smallest px)

    def serious(self) -> list[dict]:
        return [v for v in self.violations if v["impact"] in ("serious", "critical")]

    def hidden_anchors(self) -> list[dict]:
        """Followed link targets whose heading ends up under the top bar (a target near the
        end of a short page may stop lower, never higher)."""
        return [a for a in self.anchors if a["top"] < a["bar"] - 1]


def _file_of(url: str) -> Path:
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(url).path))


class Browser:
    """One headless Chromium for many pages: ``with Browser() as b: b.audit(path, 390)``."""

    def __init__(self, axe: Path | None = None):
        self.axe_source = Path(axe).read_text(encoding="utf-8") if axe else None
        self._pw = self._browser = None
        self._pages: dict[tuple[int, int], object] = {}

    def __enter__(self) -> Browser:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise BrowserError(f"Playwright is not installed: {INSTALL_HINT}.") from None
        if not available():
            raise BrowserError(f"{CHROMIUM} is missing: apt-get install -y chromium.")
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=list(FLAGS)
        )
        return self

    def __exit__(self, *exc) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()

    def page(self, width: int, height: int = 900):
        key = (width, height)
        if key not in self._pages:
            context = self._browser.new_context(
                viewport={"width": width, "height": height}, reduced_motion="reduce"
            )
            self._pages[key] = context.new_page()
        return self._pages[key]

    def open(self, path: Path, width: int, height: int = 900):
        page = self.page(width, height)
        page.goto(Path(path).resolve().as_uri(), wait_until="load")
        return page

    def screenshot(self, path: Path, out: Path, width: int, height: int = 900,
                   full_page: bool = False) -> Path:
        page = self.open(path, width, height)
        page.screenshot(path=str(out), full_page=full_page)
        return Path(out)

    def audit(self, path: Path, width: int, root: Path | None = None, anchors: int = 12,
              axe: bool = True) -> PageAudit:
        """What a reader meets on ``path`` at ``width`` px (see the module doc)."""
        path = Path(path).resolve()
        name = path.relative_to(root).as_posix() if root else path.name
        page = self.open(path, width)
        result = PageAudit(name, width, page.evaluate(MEASURE))
        for fig in result.seen["figures"]:
            svg = _file_of(fig["src"])
            sizes = svg_text_sizes(svg) if svg.suffix == ".svg" and svg.is_file() else None
            if sizes and fig["width"]:
                result.figure_text.append((svg.name, sizes[0] * fig["width"] / sizes[1]))
        result.active = page.evaluate(ACTIVE_ENTRY)
        # The keyboard first, from the top of the freshly loaded page: following a link
        # moves where Tab starts from.
        if result.seen["menu"] and result.seen["menu"]["shown"]:
            result.menu = self._menu_by_keyboard(page)
        targets = page.evaluate(ANCHORS)
        for target in targets[:anchors]:
            page.evaluate("(id) => { location.hash = '#' + encodeURIComponent(id); }", target)
            result.anchors.append(page.evaluate(ANCHOR_SEEN, target))
        if axe and self.axe_source:
            if not page.evaluate("() => typeof axe !== 'undefined'"):
                page.add_script_tag(content=self.axe_source)
            result.violations = page.evaluate(AXE_RUN)
        return result

    @staticmethod
    def _menu_by_keyboard(page) -> dict:
        """Tab to the menu button from the top of the page, then Enter, Escape, Space."""
        page.evaluate("() => { document.activeElement && document.activeElement.blur(); }")
        reached = False
        for presses in range(1, 8):  # noqa: B007 (how many it took is reported below)
            page.keyboard.press("Tab")
            if page.evaluate(
                "() => !!document.activeElement && "
                "document.activeElement.matches('.tt-menu-button')"
            ):
                reached = True
                break
        out = {"reached": reached, "tabs": presses, "before": page.evaluate(SIDEBAR_SHOWN)}
        if reached:
            page.keyboard.press("Enter")
            out["enter"] = page.evaluate(SIDEBAR_SHOWN)
            out["expanded"] = page.evaluate(
                "() => document.querySelector('.tt-menu-button').getAttribute('aria-expanded')"
            )
            page.keyboard.press("Escape")
            out["escape"] = page.evaluate(SIDEBAR_SHOWN)
            page.keyboard.press("Space")
            out["space"] = page.evaluate(SIDEBAR_SHOWN)
            page.keyboard.press("Escape")
        return out
