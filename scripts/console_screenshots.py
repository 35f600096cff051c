"""Screenshots of a running console for the docs (docs/img/fleet-console-*.png), taken with Debian's headless
Chromium through Playwright (`executable_path`, nothing downloaded):

    .venv/bin/python scripts/console_screenshots.py --url http://127.0.0.1:PORT \\
        --user oncall --password-file out/fleet-demo/console-password [--out docs/img] [--timezone Europe/Berlin]

Run it against `make fleet-demo`'s console once the fleet has filed its plan (the demo prints the URL, the user
and where the password is): it signs in, opens the newest incident and saves the incident with its plots
(`fleet-console-incident.png`), its remediation plan (`fleet-console-plan.png`), the coverage page
(`fleet-console-coverage.png`) and the topology coloured by health (`fleet-console-topology.png`). The browser runs
in `--timezone`, so the pages show that zone's times beside UTC."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 900


@contextmanager
def signed_in(
    url: str, user: str, password: str, timezone: str = "UTC", chromium: str = CHROMIUM
) -> Iterator[Any]:
    """A Chromium page in `timezone`, signed in to the console at `url` as `user`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(
                viewport={"width": WIDTH, "height": HEIGHT}, timezone_id=timezone, locale="en-GB"
            )
            page = context.new_page()
            page.goto(url.rstrip("/") + "/login")
            page.fill("input[name=name]", user)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_selector("#whoami")
            yield page
        finally:
            browser.close()


def newest_incident(page: Any, url: str) -> str:
    """The first incident the incidents page lists (newest first): its path."""
    page.goto(url.rstrip("/") + "/")
    href = page.locator("a[href^='/incidents/']").first.get_attribute("href")
    if not href:
        raise SystemExit("the console lists no incident yet: wait until the fleet has diagnosed one")
    return str(href)


def shoot(url: str, user: str, password: str, out: Path, timezone: str, incident_id: str = "") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with signed_in(url, user, password, timezone) as page:
        incident = f"/incidents/{incident_id}" if incident_id else newest_incident(page, url)
        page.goto(url.rstrip("/") + incident)
        page.wait_for_selector(".local-time")
        page.locator("#series").scroll_into_view_if_needed()
        page.evaluate("document.getElementById('incident-title').scrollIntoView()")
        top = page.locator("#incident-title").bounding_box()
        series = page.locator(".plots").bounding_box()
        if top and series:
            clip = {"x": 0, "y": top["y"] - 10, "width": WIDTH, "height": 0.0}
            clip["height"] = min(series["y"] + series["height"] - clip["y"] + 10, 2400)
            # the header and the plots: the page between them holds the plan and proposals, shot below
            page.screenshot(path=str(out / "fleet-console-incident.png"), clip=clip, full_page=True)
        else:
            page.screenshot(path=str(out / "fleet-console-incident.png"))
        saved.append(out / "fleet-console-incident.png")
        page.locator("#plan").scroll_into_view_if_needed()
        page.evaluate("document.getElementById('plan').scrollIntoView()")
        page.screenshot(path=str(out / "fleet-console-plan.png"))
        saved.append(out / "fleet-console-plan.png")
        for name in ("coverage", "topology"):
            page.goto(url.rstrip("/") + f"/{name}")
            page.screenshot(path=str(out / f"fleet-console-{name}.png"), full_page=True)
            saved.append(out / f"fleet-console-{name}.png")
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="the console's base URL")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-file", required=True, type=Path)
    parser.add_argument("--out", default="docs/img", type=Path)
    parser.add_argument("--incident", default="", help="the incident to show (default: the newest listed)")
    parser.add_argument("--timezone", default="Europe/Berlin", help="the browser's zone (IANA name)")
    args = parser.parse_args(argv)
    password = args.password_file.read_text().strip()
    for path in shoot(args.url, args.user, password, args.out, args.timezone, args.incident):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
