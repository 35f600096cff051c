"""A real node agent for dispatch tests (`aiops run --sim S --node node0` on 127.0.0.1:0, its own allowed-signers
file of alice and bob made by ssh-keygen, an /api token) and the pieces of a dispatch: an action, a signed
approval, the body, the POST, the node's audit and exported power limit. `live_fleet`: two node agents of one
twin, a real Prometheus scraping them and `aiops fleet` with its console (bob an approver there)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.console.accounts import Accounts, accounts_path
from aiops.store import Workspace
from guardrails.actions import Action, action_hash
from guardrails.audit import read_rows
from guardrails.signing import SshSigner, decision_message
from tests.service_helpers import TINY_SCENARIO, get, running_service
from tests.signing_helpers import Keys, make_keys

TOKEN = "node-token-for-tests"
PASSWORD = "correct horse battery staple"


@dataclass
class LiveFleet:
    keys: Keys
    ports: dict[str, int]  # node -> its agent's port
    port: int  # the fleet's (API and console)


@contextmanager
def live_fleet(
    tmp_path: Path,
    scenario: str,
    nodes: tuple[str, ...] = ("node0", "node1"),
    window_s: float | None = None,
) -> Iterator[LiveFleet]:
    """Node agents of `scenario` (each with alice's and bob's allowed-signers and the /api token), a real
    Prometheus scraping them (every 2 s, the fleet's step: tests/test_fleet_live.py SCRAPE_S), and `aiops fleet` with
    its console, which dispatches to them; bob signs in there with
    PASSWORD. All on 127.0.0.1, all stopped after. `window_s`: the fleet's `[detection] window_s` (default
    10 s; a test whose claim is not detection's may take two scrapes, 4 s: its incident comes sooner)."""
    from tests.agent_cluster import agents, prometheus, scrape
    from tests.test_fleet_live import SCRAPE_S, fleet

    keys = make_keys(tmp_path / "keys", ("alice", "bob"))
    (tmp_path / "token").write_text(TOKEN + "\n")
    node_config = keys.config.read_text() + f'\n[http]\ntoken_file = "{tmp_path / "token"}"\n'
    (tmp_path / "aiops.toml").write_text(node_config)  # every agent's (tests.service_helpers.service_env)
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    Accounts(accounts_path(str(tmp_path / "fleet.duckdb"))).add("bob", "approver", PASSWORD)
    with (
        prometheus(tmp_path, SCRAPE_S) as (prom, targets),
        agents(tmp_path, path, time.time(), nodes, "10") as ports,
    ):
        scrape(prom, targets, ports)
        urls = "\n".join(f'{n} = "http://127.0.0.1:{p}"' for n, p in ports.items())
        config = tmp_path / "fleet.toml"
        config.write_text(
            keys.config.read_text()
            + "\n[console]\nenabled = true\n"
            + f'\n[fleet]\nnode_token_file = "{tmp_path / "token"}"\n'
            + f"\n[fleet.nodes]\n{urls}\n"
            + (f"\n[detection]\nwindow_s = {window_s:g}\n" if window_s is not None else "")
        )
        with fleet(tmp_path, prom, config, "fleet.log") as (_, port):
            yield LiveFleet(keys, ports, port)


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
    with running_service(tmp, db, "--sim", str(scenario), "--node", "node0") as (_, port):
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


def signed(
    a: Action,
    key: Path,
    *,
    over: Action | None = None,
    ts_s: float | None = None,
    lasts_s: float = 601.0,
) -> dict[str, Any]:
    """An approval of `a` (or, forged, of `over`'s proposal) signed with `key` over the canonical message,
    dated `ts_s` (a second ago by default) and expiring `lasts_s` after it."""
    signed_ts_s = time.time() - 1 if ts_s is None else ts_s
    expires_ts_s = signed_ts_s + lasts_s
    basis = over or a
    message = decision_message(
        "approve",
        ts_s=signed_ts_s,
        expires_ts_s=expires_ts_s,
        proposal_id=basis.proposal_id,
        action_hash=action_hash(basis),
    )
    return {"ts_s": signed_ts_s, "expires_ts_s": expires_ts_s, "signature": SshSigner(key).sign(message)}


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
