"""Issue 35 item 3, `open_ticket` reaches a real ticket sink: executed through the guardrails (the one path to an
actuator) on a twin workspace, it files an issue in a loopback server speaking Jira's REST create-issue
(`POST /rest/api/2/issue`, basic auth, `fields.project.key/summary/issuetype`) or ServiceNow's Table API
(`POST /api/now/table/incident`), and the execution's result names the ticket (key and link) in the audit log;
a sink that refuses leaves the proposal failed with the sink's words and never the token; without a sink the
result says the ticket is a note; a bad `[notify.ticket]` is refused naming the field or the file."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aiops.config import parse_config
from aiops.config_notify import TicketConfig
from aiops.errors import ConfigError
from aiops.integrations.ticket import TicketActuator
from aiops.runtime.world import attach, desk
from aiops.store import Workspace
from guardrails.actions import Action
from guardrails.audit import AuditLog
from guardrails.routing import RecordActuator
from tests.demo_template import demo_copy

USER, TOKEN = "aiops@example.com", "s3cr3t-api-token-42"


@dataclass
class TicketServer:
    """Jira's and ServiceNow's create endpoints as their documentation shapes them, on 127.0.0.1."""

    url: str = ""
    got: list[dict[str, Any]] = field(default_factory=list)
    refuse: bool = False


@contextmanager
def ticket_server() -> Iterator[TicketServer]:
    state = TicketServer()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            state.got.append({"path": self.path, "auth": self.headers.get("Authorization", ""), "body": body})
            expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                self._answer(401, {"errorMessages": ["You are not authenticated"]})
            elif self.path == "/rest/api/2/issue":
                fields = body.get("fields", {})
                missing = [k for k in ("project", "summary", "issuetype") if not fields.get(k)]
                if missing or state.refuse:
                    errors = {k: f"{k} is required." for k in missing} or {"project": f"no project {TOKEN}"}
                    self._answer(400, {"errorMessages": [], "errors": errors})
                    return
                number = len(state.got)
                self._answer(
                    201, {"id": str(10000 + number), "key": f"OPS-{number}", "self": f"{state.url}/x"}
                )
            elif self.path == "/api/now/table/incident":
                if not body.get("short_description"):
                    self._answer(400, {"error": {"message": "short_description is mandatory"}})
                    return
                sys_id = "9d385017c611228701d22104cc95c371"
                self._answer(201, {"result": {"sys_id": sys_id, "number": "INC0010002", "state": "1"}})
            else:
                self._answer(404, {"error": "no such endpoint"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def ticket_action(proposal_id: str) -> Action:
    return Action(
        proposal_id=proposal_id,
        kind="open_ticket",
        target="node3/gpu5",
        parameters={"team": "facilities", "summary": "node3/gpu5 fan or cold plate", "priority": "high"},
        reason="node3/gpu5 at 91 C throttles: inspect the fan and cold plate",
        evidence=["SELECT max(temp_c) FROM gpu_samples WHERE gpu = 'node3/gpu5'"],
        expected_effect="a technician looks at it",
        rollback={},
        proposed_by="analyst",
        created_ts_s=time.time(),
    )


def file_ticket(db: Path, sink: TicketActuator | None, proposal_id: str) -> tuple[str, str, dict[str, Any]]:
    """(status, message, the execution's result) after proposing and executing one open_ticket."""
    with Workspace(db).write() as store:
        guard = desk(store, attach(store, ticket=sink))
        filed = guard.propose(ticket_action(proposal_id), origin="test", incident_id="INC-node3-0001")
        assert filed.ok, filed.message
        outcome = guard.execute(proposal_id)
        execution = guard.records.execution(proposal_id) or {}
        result = dict(execution.get("result") or {})
        return outcome.status, outcome.message, result


@pytest.mark.parametrize("kind", ["jira", "servicenow"])
def test_open_ticket_files_an_issue_and_names_it(tmp_path: Path, kind: str) -> None:
    db = demo_copy(tmp_path)
    with ticket_server() as server:
        config = TicketConfig(kind=kind, url=server.url, user=USER, token_file="unused", project="OPS")  # type: ignore[arg-type]
        status, message, result = file_ticket(db, TicketActuator(config, TOKEN), "P-ticket")
        assert status == "executed", message
        (request,) = server.got
    if kind == "jira":
        fields = request["body"]["fields"]
        assert request["path"] == "/rest/api/2/issue"
        assert fields["project"] == {"key": "OPS"} and fields["issuetype"] == {"name": "Task"}
        assert fields["summary"] == "node3/gpu5 fan or cold plate" and "facilities" in fields["labels"]
        assert "incident INC-node3-0001" in fields["description"] and "P-ticket" in fields["description"]
        assert result["detail"]["ticket"] == "OPS-1" and result["detail"]["url"].endswith("/browse/OPS-1")
    else:
        body = request["body"]
        assert request["path"] == "/api/now/table/incident"
        assert body["short_description"] == "node3/gpu5 fan or cold plate" and body["urgency"] == "1"
        assert body["correlation_id"] == "P-ticket"
        assert result["detail"]["ticket"] == "INC0010002"
    with Workspace(db).read() as store:
        audited = [r.data() for r in AuditLog(store).rows(proposal_id="P-ticket", event="execution")]
    assert any(result["detail"]["ticket"] in json.dumps(a) for a in audited), audited


def test_a_sink_that_refuses_leaves_the_proposal_failed_with_its_words_and_never_the_token(
    tmp_path: Path,
) -> None:
    db = demo_copy(tmp_path)
    with ticket_server() as server:
        server.refuse = True
        config = TicketConfig(kind="jira", url=server.url, user=USER, token_file="unused", project="OPS")
        status, message, _ = file_ticket(db, TicketActuator(config, TOKEN), "P-refused")
    assert status == "failed" and "no ticket filed" in message and "HTTP 400" in message, message
    assert TOKEN not in message and "no project ***" in message
    with Workspace(db).read() as store:
        assert store.scalar("SELECT status FROM proposals WHERE proposal_id = 'P-refused'") == "failed"


def test_without_a_sink_a_ticket_is_a_note_and_a_bad_sink_is_refused(tmp_path: Path) -> None:
    recorded = RecordActuator().apply(ticket_action("P-note"), dry_run=False)
    assert recorded.ok and "this ticket is a note in the audit log" in recorded.detail["note"]
    with pytest.raises(ConfigError, match=r"notify\.ticket.*project"):
        parse_config(
            {"notify": {"ticket": {"url": "https://jira.example.com", "token_file": "/x"}}}, "a.toml"
        )
    with pytest.raises(ConfigError, match=r"notify\.ticket.*token_file"):
        parse_config(
            {"notify": {"ticket": {"kind": "servicenow", "url": "https://sn.example.com"}}}, "a.toml"
        )
    config = TicketConfig(
        kind="servicenow", url="https://sn.example.com", token_file=str(tmp_path / "absent")
    )
    with pytest.raises(ConfigError) as caught:
        TicketActuator.configured(config)
    assert str(tmp_path / "absent") in str(caught.value) and "cannot read" in str(caught.value)
    assert TicketActuator.configured(TicketConfig()) is None  # no url: no sink
