"""Look at rendered pages in headless Chromium, as a reader would.

``probe(page, width)`` opens a copy of a rendered page with a small script added at the end
of its body; the script measures the page (height, horizontal scroll, whether the table of
contents and the sidebar are visible, figures and formulas with their sizes), clicks the
menu button when there is one and measures again, and writes what it found into the page as
JSON. Chromium's ``--dump-dom`` prints the page after the script ran; nothing is served and
nothing goes to the network.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

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

PROBE = r"""
<script>
(function () {
  function box(el) {
    if (!el) return null;
    var r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return {w: r.width, h: r.height, x: r.left,
            shown: r.width > 0 && r.height > 0 && s.display !== 'none' &&
                   s.visibility !== 'hidden'};
  }
  function measure() {
    var d = document.documentElement;
    var maths = Array.prototype.map.call(document.querySelectorAll('main math'), box);
    var imgs = document.querySelectorAll('main figure img');
    var figures = Array.prototype.map.call(imgs, function (img) {
      var b = box(img);
      b.alt = img.getAttribute('alt') || '';
      b.loaded = img.complete && img.naturalWidth > 0;
      var cap = img.closest('figure').querySelector('figcaption');
      b.caption = cap ? cap.textContent.trim() : ''; return b;
    });
    var sections = Array.prototype.map.call(document.querySelectorAll('main section.level2'),
      function (el) { return [el.id, Math.round(el.getBoundingClientRect().height)]; });
    return {height: d.scrollHeight, sections: sections,
            scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
            toc: box(document.querySelector('.tt-toc')),
            sidebar: box(document.querySelector('.tt-sidebar')),
            menu: box(document.querySelector('.tt-menu-button')),
            maths: maths, figures: figures};
  }
  function done() {
    var out = {before: measure()};
    var button = document.querySelector('.tt-menu-button');
    if (button && box(button).shown) { button.click(); out.after_menu = measure(); }
    parent.postMessage(JSON.stringify(out), '*');
  }
  var imgs = Array.prototype.slice.call(document.images), left = imgs.length;
  if (!left) { done(); return; }
  var timer = setTimeout(done, 3000);
  imgs.forEach(function (img) {
    function one() { if (--left === 0) { clearTimeout(timer); done(); } }
    if (img.complete) { one(); return; }
    img.addEventListener('load', one);
    img.addEventListener('error', one);
  });
})();
</script>
"""


# Headless Chromium will not make a window narrower than about 500 px, so the page is
# measured inside an iframe of the asked width: media queries and scroll widths are the
# iframe's own, as on a phone 390 px wide.
WRAPPER = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<style>body{{margin:0}} iframe{{border:0;display:block}}</style></head>
<body><iframe src="{src}" width="{width}" height="{height}"></iframe>
<script>
window.addEventListener('message', function (event) {{
  var pre = document.createElement('pre');
  pre.id = 'tt-probe-result'; pre.textContent = event.data;
  document.body.appendChild(pre);
}});
</script></body></html>
"""


def available() -> bool:
    return Path(CHROMIUM).is_file()


def _run(args: list[str], profile: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def probe(page: Path, width: int, height: int = 900, timeout: float = 120) -> dict:
    """What a reader sees of ``page`` in a window ``width`` pixels wide (see module doc)."""
    page = Path(page).resolve()
    text = page.read_text(encoding="utf-8")
    copy = page.with_name(f".probe-{width}-{page.name}")
    wrapper = page.with_name(f".probe-{width}-wrap-{page.name}")
    copy.write_text(text.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    wrapper.write_text(WRAPPER.format(src=copy.name, width=width, height=height), "utf-8")
    try:
        with tempfile.TemporaryDirectory(prefix="tito-chromium-") as profile:
            done = _run(
                [
                    f"--window-size={max(width, 800)},{height + 50}",
                    "--virtual-time-budget=5000",
                    "--dump-dom",
                    wrapper.as_uri(),
                ],
                Path(profile),
                timeout,
            )
    finally:
        copy.unlink()
        wrapper.unlink()
    match = re.search(r'<pre id="tt-probe-result">(.*?)</pre>', done.stdout, re.S)
    if not match:
        raise BrowserError(f"chromium printed no probe result for {page}:\n{done.stderr[-2000:]}")
    import html

    return json.loads(html.unescape(match.group(1)))


def screenshot(page: Path, out: Path, width: int, height: int, timeout: float = 120) -> Path:
    """A PNG of the top ``height`` pixels of ``page`` in a viewport ``width`` pixels wide
    (narrow viewports inside an iframe, see ``WRAPPER``; the PNG is then cropped to it)."""
    page = Path(page).resolve()
    wrapper = page.with_name(f".shot-{width}-wrap-{page.name}")
    wrapper.write_text(WRAPPER.format(src=page.name, width=width, height=height), "utf-8")
    try:
        with tempfile.TemporaryDirectory(prefix="tito-chromium-") as profile:
            done = _run(
                [
                    f"--screenshot={Path(out).resolve()}",
                    f"--window-size={max(width, 800)},{height}",
                    "--virtual-time-budget=5000",
                    wrapper.as_uri(),
                ],
                Path(profile),
                timeout,
            )
    finally:
        wrapper.unlink()
    if not Path(out).is_file():
        raise BrowserError(f"chromium wrote no screenshot of {page}:\n{done.stderr[-2000:]}")
    return Path(out)
