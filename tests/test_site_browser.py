"""The website as a reader meets it: every page in headless Chromium at 1280 and 390 px.

One Chromium (Debian's, driven by Playwright) opens each rendered page at both widths once;
the checks below read what it measured (``tito.site.browser.audit``): nothing wider than
its column, legible figure text, link targets below the top bar, a menu that opens from the
keyboard, and no serious or critical axe-core violation. Slow (about a minute and a half on
two idle cores), so marked ``slow``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from site_render import rendered_site
from tito.site.browser import INSTALL_HINT, Browser, PageAudit, available, axe_path

# The checks that open Chromium are ``browser`` (slow): those using ``audits`` are marked by
# tests/conftest.py, the screenshot test by hand. The SVG reader's unit test is fast.

WIDTHS = (1280, 390)
# Figure text in CSS pixels, as drawn at each width (#24): at least 11 px on a laptop, and
# legible on a phone (each figure has a phone layout for that).
MIN_FIGURE_TEXT = {1280: 11.0, 390: 10.0}
# A module page at 1280 px is about 8,000-12,000 px tall today; far taller is a layout bug
# (a column squeezed to a sliver makes every page many times taller).
MAX_HEIGHT = {1280: 16_000, 390: 40_000}


def _missing() -> str | None:
    if not available():
        return "/usr/bin/chromium is missing (Debian: apt-get install -y chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return f"Playwright is not installed: {INSTALL_HINT}"
    if axe_path() is None:
        return f"axe-core is not installed: {INSTALL_HINT}"
    return None


@pytest.fixture(scope="module")
def audits(repo) -> dict[tuple[str, int], PageAudit]:
    """Every rendered page measured at 1280 and 390 px, in one browser process."""
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser checks: {missing}")
        pytest.skip(missing)
    root = rendered_site(repo)
    pages = sorted(root.rglob("*.html"))
    assert len(pages) > 20, f"only {len(pages)} pages were rendered"
    out = {}
    with Browser(axe_path()) as browser:
        for width in WIDTHS:
            for page in pages:
                audit = browser.audit(page, width, root)
                out[audit.page, width] = audit
    return out


def _each(audits, width=None):
    return [a for (_, w), a in sorted(audits.items()) if width in (None, w)]


def test_every_page_fits_its_width(audits):
    """No page scrolls sideways, and no table, figure or code block is wider than its column
    (a table too wide for a phone becomes cards; nothing is clipped)."""
    problems = []
    for a in _each(audits):
        seen = a.seen
        if seen["scrollWidth"] > seen["clientWidth"]:
            problems.append(f"{a.page} at {a.width} px is {seen['scrollWidth']} px wide")
        for item in seen["overflowing"]:
            problems.append(
                f"{a.page} at {a.width} px: {item['what']} is {item['width']} px wide in a "
                f"{item['room']} px column"
            )
    assert not problems, "\n".join(problems)


def test_figure_text_is_legible_at_both_widths(audits):
    """Every figure's smallest text, as drawn at the width it is shown at, is at least 11 px
    at 1280 and 10 px at 390; each figure has alt text and links to its full-size SVG."""
    problems, seen = [], 0
    for a in _each(audits):
        for fig in a.seen["figures"]:
            seen += 1
            if not (fig["loaded"] and fig["alt"]):
                problems.append(f"{a.page} at {a.width} px: {fig['src']} not loaded or no alt")
            if not (fig["link"] or "").endswith(".svg"):
                problems.append(f"{a.page}: {fig['src']} does not link to its full-size SVG")
        for svg, px in a.figure_text:
            if px < MIN_FIGURE_TEXT[a.width] - 0.05:
                problems.append(
                    f"{a.page} at {a.width} px: {svg} has {px:.1f} px text "
                    f"(needs {MIN_FIGURE_TEXT[a.width]:g}): draw it larger or give it a phone "
                    "layout (Figure.narrow)"
                )
    assert seen >= 2 * 20, f"only {seen} figures were measured: are the figures on the pages?"
    assert not problems, "\n".join(problems)


def test_followed_links_land_below_the_top_bar(audits):
    """Following an in-page link (the contents, a test's name) shows its heading below the
    sticky top bar, not under it."""
    hidden, followed = [], 0
    for a in _each(audits):
        followed += len(a.anchors)
        hidden += [f"{a.page} at {a.width} px: #{x['id']} at {x['top']} px, under the bar "
                   f"(bottom {x['bar']} px)" for x in a.hidden_anchors()]
    assert followed > 100, f"only {followed} in-page links were followed"
    assert not hidden, "\n".join(hidden)


def test_the_phone_menu_opens_from_the_keyboard(audits):
    """At 390 px the sidebar waits behind a menu button that Tab reaches, Enter and Space
    open and Escape closes."""
    for a in _each(audits, 390):
        menu = a.menu
        assert menu is not None, f"{a.page}: no menu button at 390 px"
        assert menu["reached"], f"{a.page}: Tab never reached the menu button ({menu})"
        assert not menu["before"], f"{a.page}: the sidebar is open before the menu is"
        assert menu["enter"] and menu["expanded"] == "true", f"{a.page}: Enter: {menu}"
        assert not menu["escape"], f"{a.page}: Escape did not close the menu: {menu}"
        assert menu["space"], f"{a.page}: Space did not open the menu: {menu}"


def test_axe_core_finds_no_serious_or_critical_violation(audits):
    """axe-core, run on every page at both widths, reports no serious or critical violation
    (contrast, names, keyboard access to scrolling code, ...)."""
    found = [
        f"{a.page} at {a.width} px: {v['impact']} {v['id']} ({v['nodes']} nodes, e.g. "
        f"{v['targets'][:1]}): {v['help']}"
        for a in _each(audits)
        for v in a.serious()
    ]
    assert not found, "\n".join(found)


def test_code_that_scrolls_can_be_reached_by_keyboard(audits):
    """A block that scrolls sideways takes keyboard focus and shows an edge shadow; on a
    phone code wraps instead, and only a run's printed output (character tables) scrolls."""
    for a in _each(audits):
        for block in a.seen["scrollers"]:
            assert block["focusable"], f"{a.page} at {a.width} px: a scrolling block has no focus"
            assert block["cue"] == "auto", f"{a.page}: a block scrolls without its cue: {block}"
    phone = [a.page for a in _each(audits, 390) for b in a.seen["scrollers"] if not b["output"]]
    assert not phone, f"code blocks scroll sideways at 390 px on {sorted(set(phone))}: wrap them"


def test_navigation_at_each_width(audits):
    """At 1280 the sidebar and the contents column show, with this page's entry in view; at
    390 the sidebar waits behind the menu and module pages fold "On this page" at the top."""
    for a in _each(audits, 1280):
        seen = a.seen
        assert seen["sidebar"]["shown"] and not seen["menu"]["shown"], a.page
        assert seen["height"] < MAX_HEIGHT[1280], f"{a.page} is {seen['height']} px tall"
        if a.active:
            assert a.active["top"] >= a.active["navTop"] - 1, f"{a.page}: {a.active}"
            assert a.active["bottom"] <= min(a.active["navBottom"], a.active["innerHeight"]) + 1, (
                f"{a.page}: its own sidebar entry is cut off at 1280 x 900: {a.active}"
            )
        if a.page.startswith("modules/"):
            assert seen["toc"]["shown"] and seen["toc"]["w"] > 150, f"{a.page}: no contents"
    for a in _each(audits, 390):
        seen = a.seen
        assert seen["clientWidth"] == 390
        assert not seen["sidebar"]["shown"], f"{a.page}: the sidebar should wait behind the menu"
        assert seen["height"] < MAX_HEIGHT[390], f"{a.page} is {seen['height']} px tall"
        if a.page.startswith("modules/"):
            assert seen["tocInline"] and seen["tocInline"]["shown"], f"{a.page}: no contents"


@pytest.mark.browser
def test_screenshots_are_not_blank(repo, tmp_path):
    """Module 13's page at both widths: the stylesheet applied (a dark top bar), text and
    figures drawn (many colours, neither blank nor solid)."""
    if _missing():
        pytest.skip(_missing())
    image = pytest.importorskip("matplotlib.image")
    page = rendered_site(repo) / "modules" / "13_transformers.html"
    with Browser() as browser:
        for width in WIDTHS:
            shot = browser.screenshot(page, tmp_path / f"{width}.png", width, 1600)
            pixels = image.imread(shot)[..., :3]
            assert pixels.shape[:2] == (1600, width)
            if pixels.dtype != "uint8":
                pixels = (pixels * 255).round().astype("uint8")
            flat = pixels.reshape(-1, 3)
            distinct = len({tuple(p) for p in flat[::7]})
            not_white = float((flat.min(axis=1) < 235).mean())
            assert distinct > 30, f"{width} px: only {distinct} colours: a blank page?"
            assert 0.03 < not_white < 0.7, f"{width} px: {not_white:.1%} is not white"
            assert pixels[10, width // 2].max() < 80, "the top bar is not dark: no styles.css?"


def test_svg_text_sizes_reads_matplotlib_svgs(tmp_path):
    """The figure-text check reads the smallest font size and the viewBox of an SVG."""
    from tito.site.browser import svg_text_sizes

    svg = tmp_path / "f.svg"
    svg.write_text('<svg width="576pt" viewBox="0 0 576 244.8"><text style="font-size: 10px; '
                   'font-family: x">a</text><text style="font: 8.5px x; font-size: 8.5px">b'
                   "</text></svg>")
    assert svg_text_sizes(svg) == (8.5, 576.0)
    svg.write_text("<svg></svg>")
    assert svg_text_sizes(Path(svg)) is None
