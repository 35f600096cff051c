"""The browser half of the fleet demo, as on-call does it, in Debian's headless Chromium (Playwright's
`executable_path`; nothing downloaded):

    .venv/bin/python scripts/fleet_demo_browser.py [--out out/fleet-demo] [--timeout-s 200]
    .venv/bin/python scripts/fleet_demo_browser.py --run-demo [--out out/fleet-demo]   (`make fleet-demo-check`)

Against the demo that runs in `--out` (it reads `demo.json`, which scripts/fleet_demo.py writes once the console
answers: the console URL, the approver, the files of its password and signing key), it
  1. signs in to the fleet's console as the demo's approver,
  2. finds the open incident whose remediation plan has a step waiting for a signature (polling the incidents page
     until the fleet has diagnosed the fault and filed its plan, at most `--timeout-s`),
  3. checks the incident's evidence section draws a plot (an <svg> with a line of at least two points),
  4. opens its plan, takes the step's approval message from the page, signs exactly those bytes with
     `ssh-keygen -Y sign -n aiops-approval` and the demo's key, pastes the armoured signature into the step's
     textarea (the browser submits it with CRLF line endings, as a person's paste does) and submits,
  5. checks the page says the step was approved (signed by the approver) and sent to the node agents, and then
     that every target of the step shows `executed` (the node agent checked the signature and acted).
Exit 0 when every check passed; 1 with one line `fleet demo browser check failed: <check>: <why>` otherwise (a
screenshot of the page goes to `<out>/browser/failed.png`); 2 when the folder holds no running demo.

`--run-demo` starts scripts/fleet_demo.py in `--out` for `--duration-s` (default $FLEET_DEMO_S, else 240 s), runs
the checks against it while it runs, waits for it to stop, and exits 0 only when both did (the demo's own exit
status: it ran until the end and left a diagnosed incident and a plan in its workspace).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from guardrails.signing import NAMESPACE  # what `ssh-keygen -Y sign -n` names: aiops-approval

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scripts" / "fleet_demo.py"
STATE = "demo.json"  # scripts/fleet_demo.py's STATE
CHROMIUM = "/usr/bin/chromium"
DEFAULT_DURATION_S = 240.0
POLL_S = 3.0


class CheckFailed(Exception):
    """One check failed: `check` names it, the message says why."""

    def __init__(self, check: str, why: str) -> None:
        super().__init__(f"{check}: {why}")
        self.check = check


@dataclass(frozen=True)
class DemoState:
    """What a running fleet demo's `demo.json` says (paths resolved against its folder)."""

    folder: Path
    pid: int
    console_url: str
    user: str
    password: str
    key: Path


def read_state(folder: Path) -> DemoState:
    """The demo in `folder`, from its `demo.json`; CheckFailed("demo folder", ...) naming the file and field."""
    path = folder / STATE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckFailed(
            "demo folder", f"{path} does not exist: is a fleet demo running there (make fleet-demo)?"
        ) from None
    except (OSError, ValueError) as exc:
        raise CheckFailed("demo folder", f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckFailed("demo folder", f"{path}: not a JSON object")
    for field in ("pid", "console_url", "user", "password_file", "key"):
        if field not in data:
            raise CheckFailed("demo folder", f"{path}: field {field!r} missing")
    url = str(data["console_url"])
    if not url.startswith(("http://", "https://")):
        raise CheckFailed("demo folder", f"{path}: console_url {url!r} is not an http(s) URL")
    if not isinstance(data["pid"], int) or isinstance(data["pid"], bool):
        raise CheckFailed("demo folder", f"{path}: pid {data['pid']!r} is not an integer")
    secret = folder / str(data["password_file"])
    try:
        password = secret.read_text().strip()
    except OSError as exc:
        raise CheckFailed("demo folder", f"{secret} (password_file): {exc.strerror}") from None
    key = folder / str(data["key"])
    if not key.is_file():
        raise CheckFailed("demo folder", f"{key} (key): no such signing key")
    return DemoState(folder, data["pid"], url.rstrip("/"), str(data["user"]), password, key)


def wait_state(folder: Path, timeout_s: float, pid: int, running: Callable[[], bool]) -> DemoState:
    """The state the demo of process `pid` writes once its console answers (an earlier demo's is ignored)."""
    deadline = time.monotonic() + timeout_s
    why = f"{folder / STATE} not written"
    while True:
        try:
            state = read_state(folder)
            if state.pid == pid:
                return state
        except CheckFailed as exc:
            why = str(exc)
        if not running():
            raise CheckFailed("demo", "the fleet demo stopped before its console answered")
        if time.monotonic() >= deadline:
            raise CheckFailed("demo", f"no console after {timeout_s:g} s ({why})")
        time.sleep(0.5)


def ssh_sign(key: Path, message: bytes) -> str:
    """`ssh-keygen -Y sign -n aiops-approval -f KEY` over exactly `message`: the armoured signature."""
    try:
        done = subprocess.run(
            ["ssh-keygen", "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(key)],
            input=message,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        raise CheckFailed("sign", "ssh-keygen is not installed (apt-get install openssh-client)") from None
    if done.returncode != 0:
        raise CheckFailed(
            "sign", f"ssh-keygen -Y sign failed: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout.decode("ascii")


@contextmanager
def chromium_page(chromium: str = CHROMIUM) -> Iterator[Page]:
    from playwright.sync_api import sync_playwright

    if not os.access(chromium, os.X_OK):
        raise CheckFailed("chromium", f"{chromium} is not there (apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000}, locale="en-GB")
            yield context.new_page()
        finally:
            browser.close()


def sign_in(page: Page, state: DemoState) -> None:
    page.goto(state.console_url + "/login", wait_until="load")
    page.fill("input[name=name]", state.user)
    page.fill("input[name=password]", state.password)
    with page.expect_navigation(wait_until="load"):
        page.click("form.login button[type=submit]")
    if page.locator("#error").count():
        raise CheckFailed("sign-in", page.inner_text("#error"))
    if not page.locator("#whoami").count() or state.user not in page.inner_text("#whoami"):
        raise CheckFailed("sign-in", f"the console does not show {state.user} signed in ({page.url})")


def open_incidents(page: Page, state: DemoState) -> list[str]:
    """The incidents page's open incidents (their paths), as listed."""
    page.goto(state.console_url + "/", wait_until="load")
    found: list[str] = []
    for row in page.locator("#incidents tbody tr").all():
        cells = row.locator("td")
        if cells.count() >= 6 and cells.nth(5).inner_text().strip() == "open":
            href = cells.nth(0).locator("a").get_attribute("href")
            if href:
                found.append(href)
    return found


def find_step(
    page: Page, state: DemoState, timeout_s: float, running: Callable[[], bool], out: TextIO
) -> tuple[str, str]:
    """(incident path, step section id) of the first open incident whose plan has a step to sign, polled for at
    most `timeout_s` (the fleet diagnoses the demo's fault about a minute in)."""
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    while True:
        seen = open_incidents(page, state)
        for href in seen:
            page.goto(state.console_url + href, wait_until="load")
            steps = page.locator("section.step").filter(has=page.locator("pre.to-sign"))
            if steps.count():
                section = steps.first.get_attribute("id") or ""
                print(f"found {href} with step {section.removeprefix('step-')} to sign", file=out, flush=True)
                return href, section
        if not running():
            raise CheckFailed("incident", "the fleet demo stopped (or its time ran out) before it listed one")
        if time.monotonic() >= deadline:
            what = (
                f"open incidents {', '.join(seen)}, none with a plan step to sign" if seen else "no incident"
            )
            raise CheckFailed("incident", f"{what} after {timeout_s:g} s")
        time.sleep(POLL_S)


def check_plot(page: Page) -> str:
    """The evidence section draws at least one plot: an <svg> whose line has two points or more."""
    if not page.locator("#series").count():
        raise CheckFailed(
            "evidence plot", "the incident page has no section of the series its evidence cites"
        )
    lines = page.locator(".plots figure.plot svg polyline.plot-line")
    drawn = [p for p in (lines.nth(i).get_attribute("points") or "" for i in range(lines.count())) if p]
    drawn = [p for p in drawn if len(p.split()) >= 2]
    if not drawn:
        raise CheckFailed(
            "evidence plot", f"no plot with a line of two points or more ({lines.count()} svg lines)"
        )
    caption = page.locator(".plots figure.plot figcaption").first.inner_text()
    return f"{len(drawn)} plot(s), the first: {caption}"


def approve(page: Page, section: str, sign: Callable[[bytes], str]) -> tuple[str, bytes]:
    """Sign the step's message the page shows, paste it, submit: (the console's note, the bytes posted)."""
    if not page.locator("#plan-head").count():
        raise CheckFailed("plan", "the incident page shows no remediation plan")
    step = page.locator(f"[id='{section}']")
    message = step.locator("pre.to-sign").inner_text()
    if not message.strip():
        raise CheckFailed("plan", f"{section} shows no approval message to sign")
    posted: list[bytes] = []
    action = step.locator("form.signed").get_attribute("action") or ""
    page.on(
        "request",
        lambda r: (
            posted.append(r.post_data_buffer or b"")
            if r.method == "POST" and r.url.endswith(action)
            else None
        ),
    )
    step.locator("textarea[name=signature]").fill(sign(message.encode("ascii")))
    with page.expect_navigation(wait_until="load"):
        step.locator("button.approve-signed").click()
    if not page.locator("#note").count():
        raise CheckFailed("approval", "the console answered the signature with no note")
    return page.inner_text("#note"), b"".join(posted)


def check_note(note: str, state: DemoState) -> None:
    """The console's answer to the pasted signature: approved by the demo's approver, sent to the node agents."""
    if f"signed by {state.user}" not in note or "refused" in note or "not approved" in note:
        raise CheckFailed("approval", f"the console did not approve the step: {note}")
    if "node agent" not in note:
        raise CheckFailed(
            "dispatch", f"the console does not say it sends the step to its node agents: {note}"
        )


def wait_executed(page: Page, state: DemoState, href: str, section: str, timeout_s: float) -> list[str]:
    """Every target of the step shows `executed` on the incident page (polled for at most `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    statuses: list[str] = []
    while True:
        page.goto(state.console_url + href, wait_until="load")
        cells = page.locator(f"[id='{section}'] td.target-status")
        statuses = [cells.nth(i).inner_text().strip() for i in range(cells.count())]
        if statuses and all(s == "executed" for s in statuses):
            return statuses
        if any(s in ("failed", "rejected", "expired") for s in statuses) or time.monotonic() >= deadline:
            raise CheckFailed("execution", f"the step's targets are {', '.join(statuses) or 'not listed'}")
        time.sleep(POLL_S)


def check(
    state: DemoState,
    timeout_s: float,
    out: TextIO = sys.stdout,
    running: Callable[[], bool] = lambda: True,
    chromium: str = CHROMIUM,
) -> None:
    """Every check against the running demo `state`; CheckFailed at the first that fails."""
    shots = state.folder / "browser"
    shots.mkdir(exist_ok=True)
    for stale in shots.glob("*.png"):  # an earlier check's screenshots
        stale.unlink()
    say: Callable[[str], None] = lambda text: print(f"browser check: {text}", file=out, flush=True)  # noqa: E731
    with chromium_page(chromium) as page:
        try:
            sign_in(page, state)
            say(f"signed in to {state.console_url} as {state.user}")
            href, section = find_step(page, state, timeout_s, running, out)
            say(f"evidence: {check_plot(page)}")
            page.screenshot(path=str(shots / "incident.png"), full_page=True)
            note, posted = approve(page, section, lambda m: ssh_sign(state.key, m))
            check_note(note, state)
            crlf = b"-----BEGIN SSH SIGNATURE-----\r\n" in posted
            say(f"approved ({'pasted with CRLF' if crlf else 'pasted'}): {note}")
            statuses = wait_executed(page, state, href, section, 90.0)
            say(f"{section.removeprefix('step-')}: {len(statuses)} target(s) executed by their node agents")
            page.screenshot(path=str(shots / "approved.png"), full_page=True)
        except CheckFailed:
            page.screenshot(path=str(shots / "failed.png"), full_page=True)
            raise
        except Exception as exc:  # Playwright's errors (a page that did not load, a timeout): one line
            if not running():
                raise CheckFailed(
                    "demo", "the fleet demo stopped (or its time ran out) during the check"
                ) from exc
            page.screenshot(path=str(shots / "failed.png"), full_page=True)
            raise CheckFailed("browser", f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from exc


def run_with_demo(
    folder: Path, duration_s: float, timeout_s: float, chromium: str = CHROMIUM, out: TextIO = sys.stdout
) -> int:
    """scripts/fleet_demo.py for `duration_s` in `folder`, the checks against it while it runs; 0 if both passed."""
    env = {**os.environ, "FLEET_DEMO_S": f"{duration_s:g}"}
    demo = subprocess.Popen([sys.executable, str(DEMO), "--out", str(folder)], env=env)
    ends = time.monotonic() + duration_s  # then it stops by itself (its console first)
    failed = ""
    try:
        running: Callable[[], bool] = lambda: demo.poll() is None and time.monotonic() < ends  # noqa: E731
        state = wait_state(folder, 120.0, demo.pid, running)
        check(state, max(30.0, min(timeout_s, duration_s - 60.0)), out, running, chromium)
        print("browser check: passed", file=out, flush=True)
    except CheckFailed as exc:
        failed = str(exc)
        if demo.poll() is None:
            demo.send_signal(signal.SIGTERM)  # no need to wait out the demo: the check already failed
    except KeyboardInterrupt:
        demo.send_signal(signal.SIGTERM)
        demo.wait()
        raise
    status = demo.wait()
    if failed:
        print(f"fleet demo browser check failed: {failed}", file=out, flush=True)
    if status != 0:
        print(f"fleet demo check failed: scripts/fleet_demo.py exited {status}", file=out, flush=True)
    if failed or status != 0:
        return 1
    print(
        "fleet demo check: passed (the browser check passed; the demo ran to its end and exited 0)", file=out
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out", default="out/fleet-demo", type=Path, help="the demo's folder (out/fleet-demo)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=200.0, help="how long to wait for the incident and its plan (200)"
    )
    parser.add_argument(
        "--run-demo", action="store_true", help="start the demo too (`make fleet-demo-check`)"
    )
    parser.add_argument(
        "--duration-s", type=float, default=float(os.environ.get("FLEET_DEMO_S") or DEFAULT_DURATION_S),
        help=f"with --run-demo: the demo's duration (default $FLEET_DEMO_S, else {DEFAULT_DURATION_S:g})",
    )  # fmt: skip
    parser.add_argument("--chromium", default=CHROMIUM, help=f"Chromium's executable ({CHROMIUM})")
    args = parser.parse_args(argv)
    if args.run_demo:
        return run_with_demo(args.out, args.duration_s, args.timeout_s, args.chromium)
    try:
        state = read_state(args.out)
    except CheckFailed as exc:
        print(f"fleet demo browser check: {exc}", file=sys.stderr)
        return 2
    try:
        os.kill(state.pid, 0)
    except OSError:
        print(
            f"fleet demo browser check: the demo of {args.out} (PID {state.pid}) does not run",
            file=sys.stderr,
        )
        return 2

    def running() -> bool:
        try:
            os.kill(state.pid, 0)
        except OSError:
            return False
        return True

    try:
        check(state, args.timeout_s, running=running, chromium=args.chromium)
    except CheckFailed as exc:
        print(f"fleet demo browser check failed: {exc}", file=sys.stderr)
        return 1
    print("browser check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
