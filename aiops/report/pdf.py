"""PDF through headless Chromium's print-to-PDF (Playwright driving the Debian `chromium`; no browser is
downloaded). The page is loaded from its file and every request that is not `file:` or `data:` is aborted
and counted: a report that tried to fetch anything is an error, not a PDF."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from aiops.errors import PrerequisiteError

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def chromium_path() -> str:
    configured = os.environ.get("AIOPS_CHROMIUM")
    for candidate in ([configured] if configured else []) + list(CHROMIUM_PATHS):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium")
    if found:
        return found
    raise PrerequisiteError(
        "PDF reports need Chromium: apt-get install chromium (or set AIOPS_CHROMIUM to its path), "
        "or ask for --format html,md"
    )


def html_to_pdf(html_path: Path, pdf_path: Path) -> None:
    try:
        from playwright.sync_api import Route, sync_playwright
    except ImportError as exc:
        raise PrerequisiteError(
            "PDF reports need the playwright Python package: pip install playwright"
        ) from exc
    blocked: list[str] = []

    def guard(route: Route) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", guard)
            page.goto(html_path.resolve().as_uri(), wait_until="load")
            page.pdf(
                path=str(pdf_path),
                format="A4",
                print_background=True,
                margin={"top": "12mm", "bottom": "12mm", "left": "10mm", "right": "10mm"},
            )
        finally:
            browser.close()
    if blocked:
        pdf_path.unlink(missing_ok=True)
        raise PrerequisiteError(
            f"{html_path}: the report asked for {len(blocked)} external URLs ({blocked[0]}); no PDF written"
        )
