"""A fleet's console (`ConsoleOptions(dispatch=True)`, as `aiops fleet` serves it): the incident page says a
node verifies SSH signatures, shows each open physical proposal's approval message and the ssh-keygen line
that signs it; a signature pasted back is verified over that message and recorded as the key's owner's SSH
approval (what the fleet's dispatcher sends to a node); a pasted text that is not a valid signature is refused
and nothing is recorded."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest

from aiops.store import Workspace
from guardrails.audit import read_rows
from guardrails.session_signing import is_session_signature
from guardrails.signing import NAMESPACE
from tests.console_helpers import add_users, client, copy_demo, demo_proposal, form_field, make_demo, sign_in
from tests.signing_helpers import make_keys


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("dispatch-console-demo"))


def test_a_pasted_ssh_signature_approves_in_the_fleet_console(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(tmp_path / "keys", ("alice", "bob", "carol"))
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    db = copy_demo(demo, tmp_path / "ws")
    add_users(db)
    pid = demo_proposal(db)
    c = client(db, dispatch=True, execute=False)
    csrf = sign_in(c, "bob")
    with Workspace(db).read() as store:
        incident_id = store.scalar("SELECT incident_id FROM proposals WHERE proposal_id = ?", [pid])
    page = c.get(f"/incidents/{incident_id}").text
    assert "a node verifies SSH signatures; paste one" in page
    section = page[
        page.index(f'id="proposal-{pid}"') :
    ]  # the proposal's own message (the plan's steps come first)
    message = re.search(r'<pre class="to-sign">([^<]+)</pre>', section)
    assert message is not None and "ssh-keygen -Y sign -n aiops-approval" in section
    text = html.unescape(message.group(1))
    form = {
        "csrf_token": csrf,
        "ts_s": form_field(section, "ts_s"),
        "expires_ts_s": form_field(section, "expires_ts_s"),
    }

    refused = c.post(f"/proposals/{pid}/approve-signed", data={**form, "signature": "not a signature"})
    assert "refused" in refused.text and "not an SSH signature" in refused.text, refused.text[-2000:]

    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(keys.keys["alice"])],
        input=text.encode("ascii"),
        capture_output=True,
        check=True,
    )
    signature = done.stdout.decode("ascii")
    answer = c.post(f"/proposals/{pid}/approve-signed", data={**form, "signature": signature})
    assert "signed by alice" in answer.text and "approved" in answer.text, answer.text[-2000:]
    with Workspace(db).read() as store:
        rows = read_rows(store, proposal_id=pid, event="approval")
    assert [r.actor for r in rows] == ["alice"]  # the key's owner approved, whoever was signed in
    data = rows[0].data()
    assert not is_session_signature(data["signature"]) and data["message"] == text
