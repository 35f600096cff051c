"""Single sign-on against a real OpenID Connect provider (oidc-provider-mock, its own process on loopback,
nonces required): the console's `/oidc/start` sends the browser to the provider, the provider's authorize form
is posted as a person would, and its redirect comes back to `/oidc/callback`. A mapped group signs in with its
role, and an approver's decision is signed by the `oidc-` principal and counts only when `[guardrails.approvers]`
lists it; a group mapping to no role, a changed state, another browser's callback, a second use, the provider
saying no and the provider down are refused with a page saying why, nothing signed in. Local accounts still
sign in beside it. (Real Chromium drives the same flow in test_console_oidc_browser.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.testclient import TestClient

from aiops.config import load_config
from aiops.console.app import ConsoleOptions, create_app
from aiops.console.oidc import Provider
from aiops.errors import SignInRefused
from aiops.store import Workspace
from guardrails.audit import read_rows
from guardrails.decisions import problems
from guardrails.signing import ConfiguredVerifier
from tests.console_helpers import (
    APPROVERS,
    add_users,
    copy_demo,
    demo_proposal,
    make_demo,
    sign_in,
    write_config,
)
from tests.oidc_helpers import RunningProvider, oidc_config, oidc_provider
from tests.service_helpers import free_port

BASE = "http://127.0.0.1:8000"  # the TestClient's origin: the console's redirect_base_url
_CSRF = 'name="csrf_token" value="'


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProvider]:
    with oidc_provider(tmp_path_factory.mktemp("oidc")) as running:
        running.set_user("dana-sub", {"preferred_username": "dana", "groups": ["staff", "aiops-approvers"]})
        running.set_user(
            "erin-sub", {"preferred_username": "erin", "groups": ["aiops-viewers", "aiops-admins"]}
        )
        running.set_user("frank-sub", {"preferred_username": "frank", "groups": ["staff"]})
        running.set_user("gil-sub", {"preferred_username": "gil", "groups": "aiops-approvers"})
        yield running


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("oidc-demo"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo workspace, its local accounts, and approvers: the local three and one single sign-on person."""
    db = copy_demo(demo_source, tmp_path / "ws")
    monkeypatch.setenv("AIOPS_CONFIG", str(write_config(tmp_path, (*APPROVERS, "oidc-dana"))))
    add_users(db)
    return db


def _client(db: Path, issuer: str, tmp_path: Path) -> TestClient:
    secret = tmp_path / "client-secret"
    secret.write_text("s3cret+/=\n")
    options = ConsoleOptions(oidc=oidc_config(issuer, BASE, secret))
    workspace = Workspace(db, guardrails=load_config().guardrails)
    return TestClient(create_app(workspace, options), base_url=BASE)


def _to_provider(c: TestClient, provider: RunningProvider) -> str:
    start = c.get("/oidc/start", follow_redirects=False)
    assert start.status_code == 303, start.text[:500]
    authorize = start.headers["location"]
    assert authorize.startswith(provider.issuer + "/oauth2/authorize?")
    for part in ("code_challenge_method=S256", "code_challenge=", "nonce=", "state=", "scope=openid"):
        assert part in authorize
    return authorize


def _back_from_provider(authorize: str, sub: str) -> str:
    """What a person does on the provider's page: type the subject and press Authorize."""
    back = httpx.post(authorize, data={"sub": sub}, follow_redirects=False, timeout=10)
    assert back.status_code == 302, back.text[:500]
    callback = back.headers["location"]
    assert callback.startswith(BASE + "/oidc/callback?")
    return callback


_CONFIRM = 'name="confirm" value="'


def _continue(c: TestClient, page: str) -> httpx.Response:
    """Press Continue on the callback's page (the session is made only then)."""
    token = page[page.index(_CONFIRM) + len(_CONFIRM) :].split('"', 1)[0]
    return c.post("/oidc/confirm", data={"confirm": token}, follow_redirects=False)


def _sign_in(c: TestClient, provider: RunningProvider, sub: str) -> httpx.Response:
    page = c.get(_back_from_provider(_to_provider(c, provider), sub), follow_redirects=False)
    assert page.status_code == 200, page.text[-800:]
    return _continue(c, page.text)


def _signed_in_as(c: TestClient) -> str:
    page = c.get("/", follow_redirects=False)
    if page.status_code != 200:
        return ""
    start = page.text.index('id="whoami">') + len('id="whoami">')
    return page.text[start : page.text.index("<", start)]


def test_a_mapped_group_signs_in_with_its_role_and_approves_as_its_oidc_principal(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    login = c.get("/login").text
    assert 'href="/oidc/start"' in login and "Sign in with Mock IdP" in login and 'name="password"' in login
    page = c.get(_back_from_provider(_to_provider(c, provider), "dana-sub"), follow_redirects=False)
    assert page.status_code == 200 and "signed you in as <strong" in page.text and "oidc-dana" in page.text
    assert _signed_in_as(c) == ""  # nobody is signed in until the person continues, on the console's page
    done = _continue(c, page.text)
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert _signed_in_as(c) == "oidc-dana (approver)"
    home = c.get("/").text
    csrf = home[home.index(_CSRF) + len(_CSRF) :].split('"', 1)[0]
    pid = demo_proposal(demo)
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert response.status_code == 200 and "approved by oidc-dana" in response.text, response.text[-2000:]
    with Workspace(demo).read() as store:
        rows = [r for r in read_rows(store) if r.proposal_id == pid]
        assert ("approval", "oidc-dana") in [(r.event, r.actor) for r in rows]
        assert problems(store, ConfiguredVerifier(load_config().guardrails, str(demo))) == []


def test_the_highest_mapped_role_wins_and_a_principal_not_among_the_approvers_cannot_approve(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    _sign_in(c, provider, "erin-sub")
    assert _signed_in_as(c) == "oidc-erin (admin)"
    assert c.get("/admin/accounts").status_code == 200  # an admin's page
    home = c.get("/").text
    csrf = home[home.index(_CSRF) + len(_CSRF) :].split('"', 1)[0]
    pid = demo_proposal(demo)
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert "oidc-erin may not approve physical" in response.text, response.text[-2000:]
    with Workspace(demo).read() as store:
        assert "approval" not in [r.event for r in read_rows(store) if r.proposal_id == pid]


def test_a_group_that_maps_to_no_role_is_refused_and_nobody_is_signed_in(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    refused = c.get(_back_from_provider(_to_provider(c, provider), "frank-sub"), follow_redirects=False)
    assert refused.status_code == 403
    assert "oidc-frank has no console role: the groups claim (&#39;staff&#39;)" in refused.text
    assert "aiops_session" not in refused.headers.get("set-cookie", "")
    assert _signed_in_as(c) == ""


def test_a_changed_state_is_refused_and_spends_the_sign_in(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    callback = _back_from_provider(_to_provider(c, provider), "dana-sub")
    tampered = callback.replace("state=", "state=x")
    refused = c.get(tampered, follow_redirects=False)
    assert refused.status_code == 400 and "state does not match" in refused.text
    again = c.get(callback, follow_redirects=False)  # the genuine one, after: the pending sign-in is gone
    assert again.status_code == 400 and "not started in this browser" in again.text
    assert _signed_in_as(c) == ""


def test_another_browsers_callback_and_a_replayed_one_are_refused(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    victim, attacker = _client(demo, provider.issuer, tmp_path), _client(demo, provider.issuer, tmp_path)
    # the attacker's own code, planted in the victim's browser (login CSRF): the victim has no such sign-in
    planted = _back_from_provider(_to_provider(attacker, provider), "gil-sub")
    assert victim.get(planted, follow_redirects=False).status_code == 400
    assert _signed_in_as(victim) == ""
    callback = _back_from_provider(_to_provider(victim, provider), "gil-sub")
    page = victim.get(callback, follow_redirects=False)
    assert page.status_code == 200 and _continue(victim, page.text).status_code == 303
    assert _signed_in_as(victim) == "oidc-gil (approver)"  # a single string claim maps too
    replay = TestClient(victim.app, base_url=BASE, cookies={"aiops_oidc": "guess"})
    assert replay.get(callback, follow_redirects=False).status_code == 400


def test_the_provider_saying_no_and_the_provider_down_are_clear_pages(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    denied = httpx.post(
        _to_provider(c, provider), data={"action": "deny"}, follow_redirects=False, timeout=10
    )
    refused = c.get(denied.headers["location"], follow_redirects=False)
    assert refused.status_code == 403 and "the provider did not sign you in: access_denied" in refused.text
    # a link's own words are never the page's (issue 36): only OAuth's codes, for this browser's sign-in
    crafted = c.get("/oidc/callback?error=Your+account+is+locked%3A+call+555-0100", follow_redirects=False)
    assert crafted.status_code == 403 and "555" not in crafted.text and "locked" not in crafted.text
    down = _client(demo, f"http://127.0.0.1:{free_port()}", tmp_path)
    page = down.get("/oidc/start", follow_redirects=False)
    assert (
        page.status_code == 502 and "the sign-in provider cannot be reached (connection failed)" in page.text
    )
    assert 'href="/login"' in page.text and _signed_in_as(down) == ""


def test_local_accounts_still_sign_in_beside_single_sign_on(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    c = _client(demo, provider.issuer, tmp_path)
    sign_in(c, "alice")
    assert _signed_in_as(c) == "alice (approver)"


def test_without_an_issuer_there_is_no_button_and_no_route(demo: Path) -> None:
    c = TestClient(create_app(Workspace(demo), ConsoleOptions()), base_url=BASE)
    assert "/oidc/start" not in c.get("/login").text
    assert c.get("/oidc/start", follow_redirects=False).status_code == 404


def test_a_token_the_provider_did_not_sign_is_refused_against_its_real_jwks(
    provider: RunningProvider,
) -> None:
    """The relying party alone, with the real provider's discovery document and JWKS: a token signed by a key
    of ours (an unknown kid, or the provider's kid) or with an algorithm the provider does not announce."""
    config = oidc_config(provider.issuer, BASE)
    rp = Provider(config, "")
    assert rp.discovery().algorithms == ("RS256",)  # what the provider announces, among RS256/ES256
    rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    claims = {
        "iss": provider.issuer,
        "aud": config.client_id,
        "sub": "x",
        "iat": now,
        "exp": now + 60,
        "nonce": "n",
    }
    with pytest.raises(SignInRefused, match="signing key is not among the provider's keys"):
        rp.verify(jwt.encode(claims, rogue, algorithm="RS256", headers={"kid": "rogue"}), "n")
    real_kid = httpx.get(provider.issuer + "/jwks", timeout=10).json()["keys"][0]["kid"]
    with pytest.raises(SignInRefused, match="signature does not verify"):
        rp.verify(jwt.encode(claims, rogue, algorithm="RS256", headers={"kid": real_kid}), "n")
    with pytest.raises(SignInRefused, match="signed with 'HS256', not RS256"):
        rp.verify(jwt.encode(claims, "k" * 32, algorithm="HS256", headers={"kid": real_kid}), "n")


def test_a_planted_pre_session_cookie_signs_the_victim_in_as_nobody(
    provider: RunningProvider, demo: Path, tmp_path: Path
) -> None:
    """Issue 36, login CSRF: the attacker starts a sign-in in their browser, plants its pre-session cookie in
    the victim's and sends the victim to the callback with the attacker's own code. On cc01cd6 the victim was
    signed in as the attacker. Now the victim gets a page naming the attacker, and a post of it from another
    site (without the page's Strict cookie) signs nobody in."""
    attacker = _client(demo, provider.issuer, tmp_path)
    attacker.get("/login")
    _to_provider(attacker, provider)
    planted_cookie = attacker.cookies.get("aiops_oidc")
    assert planted_cookie
    authorize = _to_provider(attacker, provider)
    planted_cookie = attacker.cookies.get("aiops_oidc")
    callback = _back_from_provider(authorize, "gil-sub")
    victim = TestClient(attacker.app, base_url=BASE, cookies={"aiops_oidc": planted_cookie})
    page = victim.get(callback, follow_redirects=False)
    assert page.status_code == 200 and "oidc-gil" in page.text  # the victim sees whose sign-in this is
    assert _signed_in_as(victim) == ""
    token = page.text[page.text.index(_CONFIRM) + len(_CONFIRM) :].split('"', 1)[0]
    cross_site = TestClient(attacker.app, base_url=BASE)  # a post from another site: no Strict cookie
    refused = cross_site.post("/oidc/confirm", data={"confirm": token}, follow_redirects=False)
    assert refused.status_code == 403 and _signed_in_as(cross_site) == ""


def test_a_flood_of_sign_in_starts_from_one_address_evicts_nobody_elses() -> None:
    from aiops.console.oidc_signin import MAX_PENDING, PendingSignIns

    pending = PendingSignIns()
    mine, _ = pending.begin("192.0.2.10")
    for n in range(MAX_PENDING + 500):
        pending.begin(f"198.51.100.{n % 4}")  # a flood from four addresses
    assert pending.take(mine) is not None
