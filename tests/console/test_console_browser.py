"""Issue 16's must-show flow in real headless Chromium (Debian's `chromium`, driven by Playwright; nothing
downloaded): `aiops console serve` on the demo's workspace on a free loopback port, then sign in, open the
demo's incident, see its evidence, approve its physical proposal, approve a two-person proposal as two
different people, see the audit rows; a viewer's approve is refused; a job named `<script>...` and a model
answer holding HTML render inert; a POST without the CSRF token is refused; no request leaves the console's
origin; an admin adds an approver in the accounts page, the approver signs in, the admin deletes them and
the approver's next click lands on the sign-in page. Screenshots of the main pages go to $AIOPS_ARTEFACTS/console (default out/artefacts/console).

The model is a scripted OpenAI-protocol server (tests/agent_fakes.py) whose answer is HTML. Needs `chromium`:
skipped without it, failed under AIOPS_REQUIRE_EBPF=1."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.agent_fakes import final, scripted_llm
from tests.clirun import run_cli
from tests.console_helpers import (
    PASSWORD,
    add_users,
    console_serve,
    demo_proposal,
    file_two_person,
    make_demo,
    write_config,
)
from tests.report_browser import MIN_VARIANCE, chromium, one_browser, variance  # noqa: F401
from tests.service_helpers import free_port, service_env

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_JOB = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
MODEL_ANSWER = "<b>bold</b> <script>window.pwned = 3</script><img src=x onerror='window.pwned = 4'> done"


def artefacts() -> Path:
    folder = Path(os.environ.get("AIOPS_ARTEFACTS") or ROOT / "out" / "artefacts") / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The demo workspace with a hostile job name, a two-person proposal and accounts, served by `aiops console
    serve`, its model a scripted server answering HTML."""
    chromium()  # skip or fail before making anything
    folder = tmp_path_factory.mktemp("console-browser")
    db = make_demo(folder)
    with Workspace(db).write() as store:  # a job named like a script, everywhere the console shows it
        store.conn.execute(
            "UPDATE incidents SET title = title || ' of job ' || ? WHERE incident_id = 'INC-0001'",
            [HOSTILE_JOB],
        )
    config = write_config(folder)
    add_users(db)
    pid = demo_proposal(db)
    env = service_env(folder)
    env["AIOPS_CONFIG"] = str(config)
    two = file_two_person(db)
    with scripted_llm([final(MODEL_ANSWER)] * 4) as llm:
        env.update(AIOPS_LLM_BASE_URL=llm.base_url, AIOPS_LLM_MODEL="scripted")
        port = free_port()
        with console_serve(folder, db, port, env) as base:
            yield {"base": base, "db": db, "pid": pid, "two": two, "env": env}


class Tab:
    """One signed-in browser context: every request outside the console's origin is recorded and aborted."""

    def __init__(self, instance: Any, base: str) -> None:
        self.base = base
        self.context = instance.new_context(viewport={"width": 1280, "height": 900})
        self.external: list[str] = []
        self.dialogs: list[str] = []
        self.context.route("**/*", self._guard)
        self.page = self.context.new_page()
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def _guard(self, route: Any) -> None:
        if route.request.url.startswith(self.base + "/"):
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def sign_in(self, name: str) -> None:
        self.page.goto(self.base + "/", wait_until="load")
        assert self.page.url.endswith("/login")
        self.page.fill("input[name=name]", name)
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("form.login button")
        self.page.wait_for_url(self.base + "/")
        assert f"{name} (" in self.page.inner_text("#whoami")

    def shot(self, name: str) -> bytes:
        png: bytes = self.page.screenshot(full_page=True, path=str(artefacts() / f"console-{name}.png"))
        assert variance(png) > MIN_VARIANCE, f"{name}: blank page"
        return png

    def inert(self) -> None:
        assert self.page.evaluate("() => window.pwned === undefined"), "a telemetry or model string ran"
        assert self.dialogs == []
        assert self.external == [], f"requests outside the console: {self.external}"

    def close(self) -> None:
        self.context.close()


def _approve(tab: Tab, pid: str) -> str:
    tab.page.click(f"#proposal-{pid} button.approve")
    tab.page.wait_for_selector("#note")
    return tab.page.inner_text("#note")


def test_sign_in_see_the_evidence_approve_and_find_the_audit_row(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    alice = Tab(one_browser, served["base"])
    alice.sign_in("alice")
    alice.shot("incidents")
    alice.page.click("#incidents a")  # the demo's incident
    alice.page.wait_for_selector("#incident-title")
    title = alice.page.inner_text("#incident-title")
    assert "INC-0001" in title and HOSTILE_JOB in title  # the job's name shown as text
    assert alice.page.locator("#incident-title script, #incident-title img").count() == 0
    sql = alice.page.locator("pre.sql").first.inner_text()
    assert "SELECT" in sql.upper() and alice.page.locator("table.rows td").count() > 0  # evidence rows
    alice.shot("incident")
    alice.page.locator(f"#proposal-{served['pid']}").screenshot(
        path=str(artefacts() / "console-proposal.png")
    )
    note = _approve(alice, served["pid"])
    assert f"{served['pid']}: approved: approved by alice" in note
    one = _approve(alice, served["two"])
    assert "needs 2 distinct approver(s), has 1" in one  # a two-person action: alice alone is not enough
    bob = Tab(one_browser, served["base"])
    bob.sign_in("bob")
    bob.page.goto(f"{served['base']}/incidents/INC-0001")
    assert "approved by alice, bob" in _approve(bob, served["two"])
    alice.page.goto(served["base"] + "/audit")
    assert "every signature verifies" in alice.page.inner_text("#verification")
    actors = {
        (row.locator("td").nth(3).inner_text(), row.locator("td.actor").inner_text())
        for row in alice.page.locator("#audit tr.event-approval").all()
    }
    assert {(served["pid"], "alice"), (served["two"], "alice"), (served["two"], "bob")} <= actors
    alice.shot("audit")
    for page in ("collectors", "topology", "reports"):
        alice.page.goto(f"{served['base']}/{page}")
        alice.shot(page)
    alice.inert()
    bob.inert()
    alice.close()
    bob.close()
    # `aiops audit verify` in this process (tests/clirun.py: the same command line and environment, without a
    # second interpreter's start-up)
    verify = run_cli("audit", "verify", "--db", str(served["db"]), "--witness", env=served["env"])
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_viewer_is_refused_and_a_post_without_csrf_is_refused(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    victor = Tab(one_browser, served["base"])
    victor.sign_in("victor")
    victor.page.goto(f"{served['base']}/incidents/INC-0001")
    assert victor.page.locator("button.approve").count() == 0
    token = victor.page.get_attribute("input[name=csrf_token]", "value")
    url = f"{served['base']}/proposals/{served['two']}/approve"
    refused = victor.page.request.post(url, form={"csrf_token": token or ""})
    assert refused.status == 403 and "viewers cannot decide" in refused.text()
    victor.close()
    alice = Tab(one_browser, served["base"])
    alice.sign_in("alice")
    no_token = alice.page.request.post(url, form={})
    assert no_token.status == 403 and "CSRF" in no_token.text()
    alice.close()


def test_a_model_answer_with_html_streams_in_as_text(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    alice = Tab(one_browser, served["base"])
    alice.sign_in("alice")
    alice.page.goto(served["base"] + "/chat")
    alice.page.fill("#question", "what is wrong with node3?")
    alice.page.click("#chat-form button")
    alice.page.wait_for_function(
        "() => document.getElementById('chat-status').textContent.includes('done')", timeout=60_000
    )
    answer = alice.page.inner_text("#answer")
    status = alice.page.inner_text("#chat-status")
    print(f"chat status: {status}")
    assert re.search(r"answer \((llm|analyst)\)", status)
    assert "<script>" in answer  # shown as text, whichever answered (the analyst quotes the job's name)
    assert alice.page.locator("#answer *").count() == 0  # no element made from the answer
    alice.shot("chat")
    alice.inert()
    alice.close()


def test_an_admin_adds_an_approver_then_deletes_them_and_their_next_click_lands_on_sign_in(
    served: dict[str, Any],
    one_browser: Any,  # noqa: F811
) -> None:
    """Console accounts: the admin page in a browser; a deleted account's open session ends at once."""
    carol = Tab(one_browser, served["base"])
    carol.sign_in("carol")
    carol.page.click("#nav-accounts")
    carol.page.wait_for_selector("#accounts")
    form = carol.page.locator("form.add")
    form.locator("input[name=name]").fill("dana")
    form.locator("select[name=role]").select_option("approver")
    form.locator("input[name=password]").fill(PASSWORD)
    form.locator("input[name=password2]").fill(PASSWORD)
    form.locator("button").click()
    carol.page.wait_for_selector("#note")
    assert carol.page.inner_text("#note") == "added dana (approver)"
    assert carol.page.inner_text("#account-dana td.role") == "approver"
    carol.shot("accounts")
    dana = Tab(one_browser, served["base"])
    dana.sign_in("dana")
    dana.page.goto(f"{served['base']}/incidents/INC-0001")
    assert dana.page.inner_text("#whoami") == "dana (approver)"
    carol.page.click("#account-dana form.delete button")
    carol.page.wait_for_selector("#note")
    assert carol.page.inner_text("#note") == "deleted dana"
    assert carol.page.locator("#account-dana").count() == 0
    dana.page.click("nav a[href='/audit']")
    dana.page.wait_for_url(served["base"] + "/login")
    assert dana.page.locator("form.login").count() == 1
    carol.inert()
    dana.inert()
    carol.close()
    dana.close()
    with Workspace(served["db"]).read() as store:
        rows = [(r.actor, r.data()["op"], r.data()["name"]) for r in read_rows(store, event="account")]
    assert rows == [("carol", "add", "dana"), ("carol", "delete", "dana")]
