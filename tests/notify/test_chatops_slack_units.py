"""The Slack app's pure parts: Slack's request signing, the hostile payload, the blocks' escaping, the Slack
signature of a decision (and what it lets a principal approve), and the `[chatops.slack]` config."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from aiops.config import parse_config
from aiops.config_chatops import check_users
from aiops.config_example import example_toml
from aiops.errors import ConfigError, SignatureRefused, SlackRequestError
from aiops.integrations.event import TopHypothesis
from aiops.service.slack_actions import SlackChat
from aiops.service.slack_blocks import ProposalLine, incident_message
from aiops.service.slack_request import parse_press, signature_problem
from aiops.store import Workspace
from guardrails.signing import decision_message
from guardrails.slack_signing import SlackEvidence, SlackSigner, SlackVerifier
from tests.notify_helpers import event
from tests.slack_helpers import SECRET, press_payload

HASH = "ab" * 32


def _form(payload: object) -> bytes:
    return urlencode({"payload": payload if isinstance(payload, str) else json.dumps(payload)}).encode()


def _signature(body: bytes, ts: str, secret: str = SECRET) -> str:
    return "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()


def test_slack_request_signing_holds_only_for_the_secret_the_body_and_a_fresh_timestamp() -> None:
    body, now = _form(press_payload(f"P-1 {HASH}")), 1_767_225_600.0
    good = _signature(body, "1767225600")
    assert signature_problem(SECRET.encode(), "1767225600", good, body, now) == ""
    assert "does not verify" in signature_problem(SECRET.encode(), "1767225600", good, body + b"x", now)
    assert "does not verify" in signature_problem(b"other", "1767225600", good, body, now)
    assert "does not verify" in signature_problem(SECRET.encode(), "1767225600", "v0=é", body, now)
    assert "from now" in signature_problem(SECRET.encode(), "1767225600", good, body, now + 301)
    assert "from now" in signature_problem(SECRET.encode(), "1767225600", good, body, now - 301)
    assert "not an integer" in signature_problem(SECRET.encode(), "１７", good, body, now)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("{not json", "payload is not JSON"),
        ([1, 2], "payload is not an object"),
        ({**press_payload(f"P-1 {HASH}"), "type": "view_submission"}, "payload.type"),
        ({**press_payload(f"P-1 {HASH}"), "actions": []}, "payload.actions"),
        ({**press_payload("P-1 nothex"), "x": 1}, "payload.actions[0].value"),
        ({**press_payload(f"P 1/../x {HASH}")}, "payload.actions[0].value"),
        ({**press_payload(f"P-1 {HASH}", user="<!channel>")}, "payload.user.id"),
        ({**press_payload(f"P-1 {HASH}", channel="c-lower")}, "payload.channel.id"),
        ({**press_payload(f"P-1 {HASH}", message_ts="1;DROP")}, "payload.container.message_ts"),
    ],
)
def test_a_hostile_payload_is_refused_naming_the_field(payload: object, field: str) -> None:
    with pytest.raises(SlackRequestError) as caught:
        parse_press(_form(payload))
    assert field in caught.value.reason
    assert "<!channel>" not in caught.value.reason


def test_a_press_names_the_proposal_the_hash_and_who_pressed_where() -> None:
    press = parse_press(_form(press_payload(f"P-1f7d6131 {HASH}", approve=False, user="U0BOB")))
    assert (press.proposal_id, press.action_hash, press.approve) == ("P-1f7d6131", HASH, False)
    assert (press.user_id, press.team_id, press.channel_id) == ("U0BOB", "T0TEAM", "C0INCIDENTS")


def test_hostile_incident_text_stays_escaped_in_the_blocks() -> None:
    hostile = "<!channel> fan & <http://evil.example|click> >"
    top = TopHypothesis("thermal_throttle", "node3/gpu5", 0.9, hostile, evidence=(hostile, "ok"))
    incident = dataclasses.replace(event("diagnosed", title=hostile), top=top)
    line = ProposalLine("P-1", HASH, "open_ticket", "node0/gpu1", {"summary": "<@U0ADMIN> & go"}, False)
    message = incident_message("C0INCIDENTS", incident, [line])
    text = json.dumps(message)
    for raw in ("<!channel>", "<http://evil", "<@U0ADMIN>", " & "):
        assert raw not in text
    escaped = "&lt;!channel&gt; fan &amp; &lt;http://evil.example|click&gt; &gt;"
    assert text.count(escaped) == 4  # the fallback text, the title, the top cause's summary, an evidence line
    assert "&lt;@U0ADMIN&gt; &amp; go" in text
    buttons = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    assert [b["value"] for b in buttons] == [f"P-1 {HASH}"] * 2


def _evidence() -> SlackEvidence:
    return SlackEvidence("U0ALICE", "T0TEAM", "C0INCIDENTS", 1_767_225_600, "cd" * 32, "v0=" + "ef" * 32)


def test_a_slack_signature_verifies_once_and_grants_physical_only_with_both_classes() -> None:
    key, message = b"k" * 32, decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1")
    approvers = {"alice": ["physical"], "bob": []}
    both = SlackSigner("alice", ("digital", "physical"), _evidence(), key).sign(message)
    signed = SlackVerifier(key, approvers).verify(message, both)
    assert signed.principal == "alice" and signed.risk_classes == {"digital", "physical"}
    assert signed.fingerprint.startswith("slack:") and signed.fingerprint.endswith(":alice")
    digital = SlackSigner("alice", ("digital",), _evidence(), key).sign(message)
    assert SlackVerifier(key, approvers).verify(message, digital).risk_classes == {"digital"}
    bob = SlackSigner("bob", ("digital", "physical"), _evidence(), key).sign(message)
    assert SlackVerifier(key, approvers).verify(message, bob).risk_classes == {"digital"}
    for forged, why in (
        (both.replace("principal=alice", "principal=bob"), "does not verify"),
        (both.replace("classes=digital,physical", "classes=physical"), "does not verify"),
        (both.replace("user=U0ALICE", "user=U0BOB"), "does not verify"),
        (both[:-1] + ("0" if both[-1] != "0" else "1"), "does not verify"),
        (both.replace(";team=", ";tean="), "not a Slack signature"),
    ):
        with pytest.raises(SignatureRefused, match=why):
            SlackVerifier(key, approvers).verify(message, forged)
    with pytest.raises(SignatureRefused):
        SlackVerifier(b"x" * 32, approvers).verify(message, both)
    other = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-2")
    with pytest.raises(SignatureRefused):
        SlackVerifier(key, approvers).verify(other, both)


def test_slack_evidence_refuses_what_is_not_a_slack_id() -> None:
    with pytest.raises(ValueError):
        SlackEvidence("U0;x=y", "T0TEAM", "C0", 1, "cd" * 32, "v0=" + "ef" * 32)


def test_the_config_maps_users_to_approvers_and_says_what_is_wrong() -> None:
    config = parse_config(
        {"chatops": {"slack": {"users": {"U0ALICE": "alice"}, "approval_classes": ["digital", "physical"]}}},
        "c.toml",
    )
    assert config.chatops.slack.approval_classes == ["digital", "physical"]
    assert parse_config({}, "c.toml").chatops.slack.approval_classes == ["digital"]
    with pytest.raises(ConfigError, match=r"chatops.slack.users.U0ALICE.*not in \[guardrails.approvers\]"):
        check_users(config.chatops.slack, {"bob": ["physical"]}, "c.toml")
    with pytest.raises(ConfigError, match=r"chatops.slack.approval_classes\[0\].*allowed: digital, physical"):
        parse_config({"chatops": {"slack": {"approval_classes": ["policy"]}}}, "c.toml")
    with pytest.raises(ConfigError, match="not a Slack user id"):
        parse_config({"chatops": {"slack": {"users": {"alice": "alice"}}}}, "c.toml")
    assert "[chatops.slack]" in example_toml() and "# [chatops.slack.users]" in example_toml()


def test_the_service_refuses_a_slack_section_it_cannot_serve(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "token").write_text("xoxb-1")
    slack = {
        "signing_secret_file": str(tmp_path / "secret"),
        "bot_token_file": str(tmp_path / "token"),
        "channel": "C0INCIDENTS",
        "users": {"U0ALICE": "alice"},
    }
    base = {
        "store": {"path": str(tmp_path / "ws.duckdb")},
        "http": {"listen": "127.0.0.1:0"},
        "guardrails": {"approvers": {"alice": ["physical"]}},
    }

    def chat(**changes: Any) -> SlackChat:
        document = {**base, "chatops": {"slack": {**slack, **changes.pop("slack", {})}}, **changes}
        return SlackChat(parse_config(document, "c.toml"), Workspace(str(tmp_path / "ws.duckdb")))

    with pytest.raises(ConfigError, match=r"chatops.slack.signing_secret_file': cannot read"):
        chat(slack={"signing_secret_file": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match=r"chatops.slack.bot_token_file': the file is empty"):
        chat(slack={"bot_token_file": str(tmp_path / "empty")})
    with pytest.raises(ConfigError, match=r"chatops.slack.users.U0BOB': principal 'bob' is not in"):
        chat(slack={"users": {"U0BOB": "bob"}})
    with pytest.raises(ConfigError, match=r"'http.listen': is empty"):
        chat(http={"listen": ""})
    with pytest.raises(ConfigError, match=r"'chatops.slack.channel'"):
        chat(slack={"channel": ""})
    made = chat()
    assert "xoxb" not in repr(made) and SECRET not in repr(made)
    key = tmp_path / "ws.duckdb.slack-key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_bytes() == made.key
