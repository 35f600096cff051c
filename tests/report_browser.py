"""Real headless Chromium (the Debian package, driven by Playwright; nothing downloaded) for the report tests:
load a page with every request routed (anything but file: and data: is recorded and aborted), screenshot it
and its plots, and measure whether an image is blank (pixel variance)."""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from tests.service_helpers import require_binary

# A uniform or nearly uniform image has a grey-level variance near 0; a page or plot with text and lines has
# hundreds. 25 leaves room for anti-aliasing noise on an empty card.
MIN_VARIANCE = 25.0


def variance(png: bytes) -> float:
    return float(ImageStat.Stat(Image.open(io.BytesIO(png)).convert("L")).var[0])


@dataclass
class Loaded:
    external: list[str] = field(default_factory=list)
    page_png: bytes = b""
    plots: dict[str, bytes] = field(default_factory=dict)
    unlabelled: list[str] = field(default_factory=list)
    images: int = 0


def chromium() -> str:
    """Chromium's path, once pdftoppm and the playwright package are there too (skip; fail in CI)."""
    require_binary("pdftoppm")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail("the playwright package is not installed (pip install -e '.[dev]')")
        pytest.skip("the playwright package is not installed")
    return require_binary("chromium")


@contextmanager
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    path = chromium()
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="module")
def one_browser() -> Iterator[object]:
    """One Chromium for all the tests of a module (a launch costs about a CPU-second); each test opens its own
    contexts in it (cookies, storage and sessions apart), as separate browser profiles would be."""
    with browser() as instance:
        yield instance


_LABELS = """() => Array.from(document.querySelectorAll('img, svg')).filter(e => !e.parentElement.closest('svg'))
  .map(e => {
    const title = e.tagName.toLowerCase() === 'svg' ? (e.querySelector(':scope > title')?.textContent || '') : '';
    const label = e.getAttribute('alt') || e.getAttribute('aria-label') || title;
    return [e.id || e.tagName, (label || '').trim().length > 0 && (e.tagName.toLowerCase() !== 'svg' || title.trim().length > 0)];
  })"""


def load(instance: object, html_path: Path, *, color_scheme: str = "light") -> Loaded:
    """Open `html_path` and collect what the checks need."""
    loaded = Loaded()
    page = instance.new_page(viewport={"width": 1200, "height": 900}, color_scheme=color_scheme)  # type: ignore[attr-defined]

    def guard(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith(("file:", "data:")):
            route.continue_()  # type: ignore[attr-defined]
        else:
            loaded.external.append(url)
            route.abort()  # type: ignore[attr-defined]

    page.route("**/*", guard)
    page.on("requestfailed", lambda r: None)
    page.goto(html_path.resolve().as_uri(), wait_until="load")
    loaded.page_png = page.screenshot(full_page=True)
    for element in page.query_selector_all("svg.plot"):
        loaded.plots[element.get_attribute("id") or "?"] = element.screenshot()
    labels = page.evaluate(_LABELS)
    loaded.images = len(labels)
    loaded.unlabelled = [name for name, ok in labels if not ok]
    page.close()
    return loaded


def pdf_pages(pdf_path: Path, out_dir: Path) -> list[bytes]:
    """The PDF's pages as PNGs through pdftoppm (poppler)."""
    subprocess.run(
        [require_binary("pdftoppm"), "-r", "40", "-png", str(pdf_path), str(out_dir / "page")],
        check=True,
        timeout=120,
    )
    pages = sorted(out_dir.glob("page*.png"))
    if not pages:
        pytest.fail(f"pdftoppm made no page of {pdf_path}")
    return [p.read_bytes() for p in pages]


# A4 (210 mm) less the report's @page margins (10 mm each side), in CSS pixels (96 per inch).
A4_CONTENT_WIDTH_PX = (210 - 2 * 10) / 25.4 * 96

_OVERFLOW = """(limit) => {
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    if (e.tagName.toLowerCase() !== 'svg' && e.closest('svg')) continue;  // an SVG's parts: the svg is checked
    const r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const name = `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}`;
    if (r.right > limit + 0.5 || r.left < -0.5) {
      out.push(`${name} ${Math.round(r.left)}..${Math.round(r.right)} px`);
    } else if (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible') {
      out.push(`${name}: content ${e.scrollWidth} px in a box of ${e.clientWidth} px`);  // text spilling out
    }
  }
  const width = document.documentElement.scrollWidth;
  if (width > limit + 0.5) out.push(`document ${width} px wide`);
  return out;
}"""


def overflowing(instance: object, html_path: Path, *, inject: str = "") -> list[str]:
    """The elements of `html_path` laid out for print (print media, a viewport as wide as an A4 page's content)
    whose bounding box leaves the page's content width, or whose content spills out of its box; `inject` is HTML appended to the body first (to show
    that the check catches an element that does not fit)."""
    width = int(A4_CONTENT_WIDTH_PX)
    page = instance.new_page(viewport={"width": width, "height": 1000})  # type: ignore[attr-defined]
    try:
        page.route(
            "**/*",
            lambda route: (
                route.continue_() if route.request.url.startswith(("file:", "data:")) else route.abort()
            ),
        )
        page.goto(html_path.resolve().as_uri(), wait_until="load")
        page.emulate_media(media="print")
        if inject:
            page.evaluate("(html) => document.body.insertAdjacentHTML('beforeend', html)", inject)
        return list(page.evaluate(_OVERFLOW, width))
    finally:
        page.close()
