"""Single sign-on in real headless Chromium (Debian's `chromium`, driven by Playwright; nothing downloaded), the
issue's must-show: `aiops console serve` on the demo's workspace with `[console.oidc]` naming a real OpenID
Connect provider (oidc-provider-mock, its own process), both on loopback. The browser opens the console, clicks
"Sign in with Mock IdP", types the subject on the provider's authorize page, and lands back on the incidents
signed in with the mapped role; that approver approves the demo's physical proposal. A person whose groups map
to no role gets the refusal page and is not signed in; a local account still signs in with its password.

The browser reaches the provider as `localhost` and the console as `127.0.0.1`: two sites, so the way back is
a cross-site redirect chain, as with a real provider (the pre-session cookie is SameSite=Lax, the session
cookie Strict). No request leaves the two servers from the console's pages. Screenshots go to
$AIOPS_ARTEFACTS/console (default out/artefacts/console). Needs `chromium`: skipped without it, failed under
AIOPS_REQUIRE_EBPF=1."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console.test_console_browser import artefacts
from tests.console_helpers import (
    APPROVERS,
    PASSWORD,
    add_users,
    console_serve,
    demo_proposal,
    make_demo,
    write_config,
)
from tests.oidc_helpers import oidc_provider, oidc_toml
from tests.report_browser import MIN_VARIANCE, chromium, one_browser, variance  # noqa: F401
from tests.service_helpers import free_port, service_env


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    chromium()  # skip or fail before making anything
    folder = tmp_path_factory.mktemp("oidc-browser")
    db = make_demo(folder)
    add_users(db)
    with oidc_provider(folder) as running:
        running.set_user("dana-sub", {"preferred_username": "dana", "groups": ["staff", "aiops-approvers"]})
        running.set_user("frank-sub", {"preferred_username": "frank", "groups": ["staff"]})
        provider = dataclasses.replace(running, host="localhost")  # another site than the console's
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        secret = folder / "client-secret"
        secret.write_text("browser-test-secret\n")
        config = write_config(folder, (*APPROVERS, "oidc-dana"))
        config.write_text(config.read_text() + oidc_toml(provider.issuer, base, secret))
        env = service_env(folder)
        env["AIOPS_CONFIG"] = str(config)
        with console_serve(folder, db, port, env) as served_at:
            assert served_at == base
            yield {"base": base, "db": db, "provider": provider.issuer, "log": folder / "console.log"}


class Tab:
    """A browser context that may reach the console and the provider; anything else is recorded and aborted
    (the provider's own page asks a CDN for its style sheet: aborted too, but not the console's doing)."""

    def __init__(self, instance: Any, served: dict[str, Any]) -> None:
        self.base, self.provider = served["base"], served["provider"]
        self.context = instance.new_context(viewport={"width": 1280, "height": 900})
        self.from_console: list[str] = []
        self.context.route("**/*", self._guard)
        self.page = self.context.new_page()

    def _guard(self, route: Any) -> None:
        url = route.request.url
        if url.startswith((self.base + "/", self.provider + "/")):
            route.continue_()
            return
        if route.request.frame.url.startswith(self.base + "/"):
            self.from_console.append(url)
        route.abort()

    def sso(self, sub: str) -> None:
        """Open the console, choose single sign-on, type `sub` on the provider's page and authorize."""
        self.page.goto(self.base + "/", wait_until="load")
        assert self.page.url == self.base + "/login"
        button = self.page.locator("#oidc-signin")
        assert button.inner_text() == "Sign in with Mock IdP"
        button.click()
        self.page.wait_for_url(self.provider + "/oauth2/authorize?**")
        self.page.get_by_placeholder("sub").fill(sub)
        self.page.get_by_role("button", name="Authorize").click()

    def shot(self, name: str) -> None:
        png: bytes = self.page.screenshot(full_page=True, path=str(artefacts() / f"console-oidc-{name}.png"))
        assert variance(png) > MIN_VARIANCE, f"{name}: blank page"

    def close(self) -> None:
        assert self.from_console == [], f"requests outside the console from its pages: {self.from_console}"
        self.context.close()


def test_single_sign_on_in_chromium_lands_signed_in_with_the_mapped_role_and_approves(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    pid = demo_proposal(served["db"])
    dana = Tab(one_browser, served)
    dana.page.goto(served["base"] + "/login", wait_until="load")
    dana.shot("login")
    dana.sso("dana-sub")
    dana.page.wait_for_selector("#continue")  # the callback's page names who the provider signed in
    assert dana.page.inner_text("#principal") == "oidc-dana"
    dana.shot("continue")
    dana.page.click("#continue")  # the session is made by this press, on the console's own page
    dana.page.wait_for_url(served["base"] + "/")
    assert dana.page.inner_text("#whoami") == "oidc-dana (approver)"
    dana.shot("signed-in")
    dana.page.click("#incidents a")
    dana.page.wait_for_selector("#incident-title")
    dana.page.click(f"#proposal-{pid} button.approve")
    dana.page.wait_for_selector("#note")
    assert "approved by oidc-dana" in dana.page.inner_text("#note")
    dana.close()
    with Workspace(served["db"]).read() as store:
        assert ("approval", "oidc-dana") in [
            (r.event, r.actor) for r in read_rows(store) if r.proposal_id == pid
        ]


def test_a_person_whose_groups_map_to_no_role_is_refused_in_chromium(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    frank = Tab(one_browser, served)
    frank.sso("frank-sub")
    frank.page.wait_for_url(served["base"] + "/oidc/callback?**")
    error = frank.page.inner_text("#error")
    assert "oidc-frank has no console role" in error and "'staff'" in error
    frank.shot("refused")
    assert frank.page.locator("#whoami").count() == 0
    frank.page.goto(served["base"] + "/", wait_until="load")
    assert frank.page.url == served["base"] + "/login"  # nobody was signed in
    frank.close()


def test_a_local_account_still_signs_in_in_chromium(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    carol = Tab(one_browser, served)
    carol.page.goto(served["base"] + "/login", wait_until="load")
    carol.page.fill("input[name=name]", "carol")
    carol.page.fill("input[name=password]", PASSWORD)
    carol.page.click("form.login button")
    carol.page.wait_for_url(served["base"] + "/")
    assert carol.page.inner_text("#whoami") == "carol (admin)"
    carol.close()
