"""Screenshot a report page in headless Chromium (the Debian package, through Playwright) for docs/REPORTS.md:

python scripts/report_screenshot.py out/report-....html docs/img/report.png [--dark] [--height 1800]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import Route, sync_playwright


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("html")
    parser.add_argument("png")
    parser.add_argument("--dark", action="store_true")
    parser.add_argument("--height", type=int, default=1800)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()

    def guard(route: Route) -> None:
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            raise SystemExit(f"the report asked for {route.request.url}")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(
            viewport={"width": 1100, "height": args.height}, color_scheme="dark" if args.dark else "light"
        )
        page.route("**/*", guard)
        page.goto(Path(args.html).resolve().as_uri(), wait_until="load")
        page.screenshot(path=args.png, full_page=False)
        browser.close()


if __name__ == "__main__":
    main()
