"""`POST /api/dispatch` on a real node agent (`aiops run --sim S --node node0` on 127.0.0.1:0) with its own
allowed-signers file made by ssh-keygen: a set_power_limit signed by an allowed person runs on the twin (the
node's audit names the signer, its exported power limit changes); a forged signature (a key the node does not
list, a valid signature over another proposal), an unsigned dispatch, another node's target, a replay, an
expired proposal and a tampered hash are each refused with 403/409 and audited on the node (`dispatch_refused`);
malformed bodies get a 4xx with a short reason, never a traceback."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.store import Workspace
from guardrails.actions import Action, action_hash
from guardrails.audit import read_rows
from guardrails.signing import SshSigner, decision_message
from tests.service_helpers import TINY_SCENARIO, get, running_service, service_env
from tests.signing_helpers import Keys, make_keys

TOKEN = "node-token-for-tests"


@dataclass
class Node:
    port: int
    db: Path
    keys: Keys
    mallory: Path  # a key the node's allowed-signers file does not list

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/dispatch"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("dispatch-node")
    keys = make_keys(tmp / "keys", ("alice", "bob"))
    mallory = keys.make_key("id_mallory")
    (tmp / "token").write_text(TOKEN + "\n")
    (tmp / "aiops.toml").write_text(keys.config.read_text() + f'\n[http]\ntoken_file = "{tmp / "token"}"\n')
    scenario = tmp / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    db = tmp / "node0.duckdb"
    with running_service(tmp, db, "--sim", str(scenario), "--node", "node0", env=service_env(tmp)) as (
        _,
        port,
    ):
        yield Node(port, db, keys, mallory)


def action(
    pid: str, target: str = "node0/gpu1", limit_w: float = 550.0, created_ago_s: float = 5.0
) -> Action:
    return Action(
        proposal_id=pid,
        kind="set_power_limit",
        target=target,
        parameters={"power_limit_w": limit_w},
        reason="the fleet's analyst: a hot GPU",
        proposed_by="analyst",
        created_ts_s=time.time() - created_ago_s,
    )


def signed(a: Action, key: Path, *, over: Action | None = None) -> dict[str, Any]:
    """An approval of `a` (or, forged, of `over`'s proposal) signed with `key` over the canonical message."""
    now = time.time()
    basis = over or a
    message = decision_message(
        "approve",
        ts_s=now - 1,
        expires_ts_s=now + 600,
        proposal_id=basis.proposal_id,
        action_hash=action_hash(basis),
    )
    return {"ts_s": now - 1, "expires_ts_s": now + 600, "signature": SshSigner(key).sign(message)}


def body(a: Action, approvals: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "action": a.model_dump(mode="json"),
        "action_hash": action_hash(a),
        "expires_ts_s": time.time() + 3600,
        "approvals": approvals,
        "fleet": "test-fleet",
        **extra,
    }


def post(url: str, payload: bytes | dict[str, Any], token: str = TOKEN) -> tuple[int, dict[str, Any]]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return int(reply.status), json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def power_limit_w(node: Node, gpu: str) -> float:
    status, text = get(f"http://127.0.0.1:{node.port}/metrics")
    assert status == 200
    for line in text.decode().splitlines():
        if line.startswith("aiops_gpu_power_limit_watts{") and f'gpu="{gpu}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no power limit exported for {gpu}")


def audit(node: Node, pid: str) -> list[tuple[str, str, dict[str, Any]]]:
    with Workspace(node.db).read() as store:
        return [(r.event, r.actor, r.data()) for r in read_rows(store, proposal_id=pid)]


def refused_and_audited(node: Node, pid: str, status: int, answer: dict[str, Any], rule: str) -> None:
    assert (status, answer["status"], answer["rule"]) == (
        403 if rule != "replay" else 409,
        "refused",
        rule,
    ), answer
    events = audit(node, pid)
    refusals = [data for event, _, data in events if event == "dispatch_refused"]
    assert refusals and refusals[-1]["rule"] == rule, events
    assert answer["audit_seq"] > 0 and len(answer["audit_hash"]) == 64


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
    time.sleep(3)  # the next export shows the twin's new limit
    assert power_limit_w(node, "node0/gpu1") == pytest.approx(before - 150.0)
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
    status, answer = post(node.url, body(a, approvals, **extra))
    refused_and_audited(node, pid, status, answer, rule)
    assert "execution" not in [event for event, _, _ in audit(node, pid)]


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
    ]:
        status, answer = post(node.url, payload)
        assert status == 400 and words in answer["error"], (
            payload[:60] if isinstance(payload, bytes) else "",
            answer,
        )
    status, answer = post(node.url, b"x" * (64 * 1024 + 1))
    assert status == 413
    assert audit(node, "fleet-malformed") == []  # nothing parsed: nothing filed, nothing judged
