"""The console's plan view and step decisions on the demo's workspace (a fan failure on node3/gpu5, an idle node7;
its plan: a ticket, a cap on the hot GPU, a move to node7 waiting, a drain waiting): the incident page shows the
plan's steps with targets, effect, cost, rollback and status; a step's signature
uploaded as the .sig file ssh-keygen wrote approves it; a pasted text that is not a signature is refused with
what is wrong with it; a viewer cannot decide; a waiting step is proposed on request. In a fleet's console the
plain "Approve" of a step or a proposal says plainly that it cannot dispatch, and records nothing.
(The CRLF paste from a real browser is tests/test_console_steps_browser.py.)"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from aiops.plans import plans
from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console_helpers import add_users, client, copy_demo, form_field, make_demo, sign_in
from tests.signing_helpers import make_keys, ssh_sign


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-plans-demo"))


def _setup(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, object, str, str]:
    keys = make_keys(tmp_path / "keys", ("alice", "bob", "carol"))
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    db = copy_demo(demo, tmp_path / "ws")
    add_users(db)
    with Workspace(db).read() as store:
        (plan,) = plans(store)
    step = next(s for s in plan.steps if s.status == "proposed" and s.risk == "physical")
    return db, keys, plan.incident_id, step.step_id


def _section(page: str, step_id: str) -> str:
    start = page.index(f'id="step-{step_id}"')
    return page[start : page.index("</section>", start)]


def test_the_plan_shows_its_steps_and_an_uploaded_signature_approves_a_step(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, keys, incident_id, step_id = _setup(demo, tmp_path, monkeypatch)
    c = client(db, execute=True)
    csrf = sign_in(c, "bob")
    page = c.get(f"/incidents/{incident_id}").text
    assert "Remediation plan" in page and "One signature approves a whole step" in page
    section = _section(page, step_id)
    for shown in (
        "node3/gpu5",
        "set_power_limit",
        "expected effect:",
        "cost to the job:",
        "48 GPUs",
        "rollback:",
    ):
        assert shown in section, (shown, section[:2000])
    assert "verified: temp_below_slowdown within 180 s" in section
    assert "°C" in section and " W" in section and "steps/s" in section  # said in numbers
    assert "Move the work on node3 to node7" in page and "[waiting]" in page  # the next rung waits
    message = html.unescape(re.search(r'<pre class="to-sign">([^<]+)</pre>', section).group(1))  # type: ignore[union-attr]
    form = {
        "csrf_token": csrf,
        "ts_s": form_field(section, "ts_s"),
        "expires_ts_s": form_field(section, "expires_ts_s"),
    }

    refused = c.post(
        f"/steps/{step_id}/approve-signed", data={**form, "signature": "-----BEGIN SSH SIGNATURE-----\nAAAA"}
    )
    assert "refused" in refused.text and "cut short" in refused.text, refused.text[-1500:]
    assert "allowed-signers" not in refused.text

    signature = ssh_sign(keys.keys["alice"], message.encode("ascii")).encode("ascii")  # type: ignore[attr-defined]
    answer = c.post(
        f"/steps/{step_id}/approve-signed", data=form, files={"signature_file": ("step.json.sig", signature)}
    )
    assert "signed by alice" in answer.text and "executed" in answer.text, answer.text[-2000:]
    with Workspace(db).read() as store:
        assert [r.actor for r in read_rows(store, proposal_id=step_id, event="step_approval")] == ["alice"]
        (plan,) = plans(store)
    assert next(s for s in plan.steps if s.step_id == step_id).status == "done"


def test_a_viewer_cannot_decide_and_a_waiting_step_is_proposed_on_request(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _keys, incident_id, step_id = _setup(demo, tmp_path, monkeypatch)
    with Workspace(db).read() as store:
        (plan,) = plans(store)
    waiting = next(s.step_id for s in plan.steps if s.status == "waiting")
    viewer = client(db)
    csrf = sign_in(viewer, "victor")
    assert viewer.post(f"/steps/{step_id}/approve", data={"csrf_token": csrf}).status_code == 403
    assert viewer.post(f"/steps/{waiting}/propose", data={"csrf_token": csrf}).status_code == 403
    c = client(db)
    csrf = sign_in(c, "carol")
    page = c.get(f"/incidents/{incident_id}").text
    assert f'action="/steps/{waiting}/propose"' in page
    answer = c.post(f"/steps/{waiting}/propose", data={"csrf_token": csrf})
    assert "proposed at carol's request" in html.unescape(answer.text), answer.text[-1500:]
    with Workspace(db).read() as store:
        (plan,) = plans(store)
    step = next(s for s in plan.steps if s.step_id == waiting)
    assert step.status == "proposed" and step.proposal_ids and step.kind == "move"


def test_the_fleet_console_says_plainly_it_cannot_dispatch_a_sign_in_approval(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _keys, incident_id, step_id = _setup(demo, tmp_path, monkeypatch)
    c = client(db, dispatch=True, execute=False)
    csrf = sign_in(c, "bob")
    page = c.get(f"/incidents/{incident_id}").text
    assert f'action="/steps/{step_id}/approve"' not in page and 'class="approve">Approve as' not in page
    assert "cannot approve a step by your sign-in" in page
    with Workspace(db).read() as store:
        pid = next(s.proposal_ids[0] for p in plans(store) for s in p.steps if s.step_id == step_id)
    for url in (f"/steps/{step_id}/approve", f"/proposals/{pid}/approve"):
        answer = c.post(url, data={"csrf_token": csrf})
        assert "cannot dispatch an approval made by signing in" in answer.text, answer.text[-1500:]
    with Workspace(db).read() as store:
        assert read_rows(store, event="approval") == [] and read_rows(store, event="step_approval") == []
