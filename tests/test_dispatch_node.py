"""`POST /api/dispatch` on a real node agent (`aiops run --sim S --node node0` on 127.0.0.1:0) with its own
allowed-signers file made by ssh-keygen: a set_power_limit signed by an allowed person runs on the twin (the
node's audit names the signer, its exported power limit changes); a forged signature (a key the node does not
list, a valid signature over another proposal, a console session's HMAC, an approval dated before the proposal or
outliving the kind's approval lifetime), an unsigned dispatch, another node's target, a replay, an
expired proposal and a tampered hash are each refused with 403/409 and audited on the node (`dispatch_refused`);
malformed bodies get a 4xx with a short reason, never a traceback."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aiops.config import parse_config
from aiops.service.service import Service
from guardrails.dispatch_request import parse_dispatch
from tests.dispatch_helpers import (
    Node,
    action,
    audit,
    body,
    node,
    post,
    power_limit_w,
    refused_and_audited,
    signed,
)
from tests.service_helpers import wait_for

__all__ = ["node"]  # the module's node agent (a fixture)


def test_a_signed_power_limit_runs_on_the_node_and_its_audit_names_the_signer(node: Node) -> None:
    before = power_limit_w(node, "node0/gpu1")
    a = action("fleet-run-1", limit_w=before - 150.0)
    status, answer = post(node.url, body(a, [signed(a, node.keys.keys["alice"])]))
    assert status == 200 and answer["status"] == "executed", answer
    assert answer["approved_by"] == ["alice"] and answer["audit_seq"] > 0
    events = audit(node, "fleet-run-1")
    kinds = [event for event, _, _ in events]
    assert kinds[:4] == ["proposal", "validation", "approval", "execution"], kinds
    approval = next(data for event, _, data in events if event == "approval")
    assert approval["approver"] == "alice" and approval["signature"].startswith("-----BEGIN SSH SIGNATURE")
    execution = next(data for event, _, data in events if event == "execution")
    assert execution["outcome"] == "executed" and execution["approved_by"] == ["alice"]
    assert next(data for event, _, data in events if event == "proposal")["origin"] == "fleet:test-fleet"
    # the next export shows the twin's new limit (NVML is collected every second: polled, 10 s at most)
    wanted = pytest.approx(before - 150.0)
    wait_for(lambda: power_limit_w(node, "node0/gpu1") == wanted, 10, "the new limit exported", 0.2)
    # the same proposal again: a replay, refused and audited, naming what became of the first
    status, answer = post(node.url, body(a, [signed(a, node.keys.keys["alice"])]))
    refused_and_audited(node, "fleet-run-1", status, answer, "replay")
    assert answer["previous"] == "executed"


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("unlisted_key", "signature"),
        ("other_proposal", "signature"),
        ("unsigned", "unsigned"),
        ("other_node", "target"),
        ("expired", "expired"),
        ("tampered_hash", "hash"),
        ("tampered_parameters", "signature"),
        ("garbage_signature", "signature"),
        ("console_session_signature", "signature"),
        ("signed_before_the_proposal", "window"),
        ("outlives_the_approval_lifetime", "window"),
    ],
)
def test_forged_unsigned_and_misdirected_dispatches_are_refused_and_audited(
    node: Node, case: str, rule: str
) -> None:
    pid = f"fleet-bad-{case}"
    alice = node.keys.keys["alice"]
    a = action(pid, target="node1/gpu0" if case == "other_node" else "node0/gpu3")
    approvals = [signed(a, alice)]
    extra: dict[str, Any] = {}
    if case == "unlisted_key":
        approvals = [signed(a, node.mallory)]
    elif case == "other_proposal":  # alice's real signature, over another proposal's message
        approvals = [signed(a, alice, over=action("fleet-something-else"))]
    elif case == "unsigned":
        approvals = []
    elif case == "expired":
        extra = {"expires_ts_s": time.time() - 1}
    elif case == "tampered_hash":
        extra = {"action_hash": "0" * 64}
    elif case == "tampered_parameters":  # signed for 550 W, sent with 300 W
        a = a.model_copy(update={"parameters": {"power_limit_w": 300.0}})
    elif case == "garbage_signature":
        approvals = [
            {**approvals[0], "signature": "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----"}
        ]
    elif case == "console_session_signature":  # the fleet's own console key: never a person's on a node
        approvals = [{**approvals[0], "signature": "aiops-session-v1:alice:" + "0" * 64}]
    elif case == "signed_before_the_proposal":  # a real signature, dated before the action existed
        approvals = [signed(a, alice, ts_s=a.created_ts_s - 60.0)]
    elif case == "outlives_the_approval_lifetime":  # set_power_limit's approvals last 900 s at most
        approvals = [signed(a, alice, lasts_s=900.0 + 3600.0)]
    status, answer = post(node.url, body(a, approvals, **extra))
    refused_and_audited(node, pid, status, answer, rule)
    if case == "console_session_signature":
        assert "SSH signatures only" in answer["message"], answer
    assert "execution" not in [event for event, _, _ in audit(node, pid)]
    assert str(node.keys.allowed) not in answer["message"]  # the node's paths stay on the node


def test_one_forged_signature_beside_a_good_one_refuses_the_dispatch(node: Node) -> None:
    a = action("fleet-mixed")
    approvals = [signed(a, node.keys.keys["alice"]), signed(a, node.mallory)]
    status, answer = post(node.url, body(a, approvals))
    refused_and_audited(node, "fleet-mixed", status, answer, "signature")
    assert [e for e, _, _ in audit(node, "fleet-mixed")] == ["dispatch_refused"]


def test_bad_requests_get_a_short_4xx(node: Node) -> None:
    a = action("fleet-malformed")
    good = body(a, [signed(a, node.keys.keys["alice"])])
    assert post(node.url, good, token="wrong")[0] == 401
    for payload, words in [
        (b"not json", "not JSON"),
        (b"[" * 5000 + b"]" * 5000, "not JSON"),
        (b"[1]", "object"),
        ({**good, "action": {**good["action"], "proposed_by": "alice"}}, "action.proposed_by"),
        ({**good, "approvals": [{"ts_s": "NaN", "expires_ts_s": 1, "signature": "x"}]}, "approvals[0].ts_s"),
        ({**good, "approvals": [good["approvals"][0]] * 9}, "at most 8"),
        ({**good, "fleet": "fleet\x1b[31m"}, "fleet must be"),
    ]:
        status, answer = post(node.url, payload)
        assert status == 400 and words in answer["error"], (
            payload[:60] if isinstance(payload, bytes) else "",
            answer,
        )
    status, answer = post(node.url, b"x" * (64 * 1024 + 1))
    assert status == 413
    assert audit(node, "fleet-malformed") == []  # nothing parsed: nothing filed, nothing judged


def test_one_person_signing_twice_counts_once(node: Node) -> None:
    a = action("fleet-twice", target="node0/gpu2", limit_w=600.0)
    alice = node.keys.keys["alice"]
    status, answer = post(node.url, body(a, [signed(a, alice), signed(a, alice)]))
    assert status == 200 and answer["approved_by"] == ["alice"], answer
    assert [actor for event, actor, _ in audit(node, "fleet-twice") if event == "approval"] == ["alice"]


def test_a_dispatch_wakes_the_loop_between_its_ticks(tmp_path: Path) -> None:
    """The real loop's nap (`Service._nap`, no sleep injected): a dispatch put while it naps is judged in a flush
    at once, not at the next `flush_interval_s` (2 s here); and the nap still lasts its whole span (no tick comes
    early: the twin keeps its pace)."""
    config = parse_config({"store": {"path": str(tmp_path / "n.duckdb")}}, "test config")
    service = Service(config)
    flushed_at_s: list[float] = []
    service.flush = lambda: flushed_at_s.append(time.monotonic())  # type: ignore[method-assign]
    nap_s, put_after_s = 1.5, 0.2
    put_at_s: list[float] = []
    dispatch = parse_dispatch(json.dumps(body(action("fleet-wake"), [])).encode())

    def put() -> None:
        time.sleep(put_after_s)
        put_at_s.append(time.monotonic())
        service.dispatches.put(dispatch)

    started_s = time.monotonic()
    sender = threading.Thread(target=put)
    sender.start()
    service.sleep(nap_s)
    sender.join()
    assert len(flushed_at_s) == 1 and len(put_at_s) == 1, (flushed_at_s, put_at_s)  # one flush, in the nap
    assert 0 <= flushed_at_s[0] - put_at_s[0] < nap_s - put_after_s, (flushed_at_s, put_at_s)
    assert time.monotonic() - started_s >= nap_s  # the rest of the nap slept: the twin's pace is kept
