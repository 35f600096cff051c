"""The service's HTTP endpoint (stdlib `ThreadingHTTPServer`):

- `GET /metrics`: Prometheus text exposition of the metrics cache (aiops/service/metrics.py);
- `GET /metrics/dcgm`: the same GPU and NIC values in dcgm-exporter's and node_exporter's exact names and labels
  (aiops/sources/exposition.py), so a Prometheus can scrape the twin as it would a GPU node (docs/PROMETHEUS.md);
- `GET /healthz`: 200 while the loop is alive (it ticked recently), else 503;
- `GET /readyz`: 200 once the store is open and the first flush and detection pass are done, else 503;
- `GET /api/incidents`, `GET /api/incidents/{id}` (with hypotheses and evidence), `GET /api/proposals`:
  read-only JSON. With `[http] token` (or `token_file`) set, /api needs `Authorization: Bearer <token>`;
  without one, /api answers loopback clients only. Telemetry text goes out JSON-encoded only;
- `POST /api/alertmanager`: Alertmanager's webhook (version 4), with `[alertmanager_in] token_file` set (else
  404): the bearer token compared in constant time (401), a body of at most 1 MiB (413) that validates (400
  with a short reason), queued for the service's loop (200; 503 when the inbox is full). Nothing is
  investigated in the handler.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from aiops.config import parse_listen
from aiops.errors import AlertInboxFull, AlertPayloadError
from aiops.pipeline import stored_diagnoses
from aiops.service.alerts_in import MAX_BODY_BYTES, AlertInbox, parse_webhook
from aiops.store import Workspace
from guardrails.records import GuardrailRecords

Probe = Callable[[], tuple[bool, str]]
ALERTMANAGER_ROUTE = "/api/alertmanager"
REQUEST_TIMEOUT_S = 10.0  # a client that sends its body slowly loses its connection, not a thread forever


@dataclass(frozen=True)
class AlertRoute:
    """`POST /api/alertmanager`: the token Alertmanager must send, and where accepted alerts go."""

    token: str
    inbox: AlertInbox

    def __repr__(self) -> str:  # never the token
        return "AlertRoute(token=***)"


def _incident_json(d: Any) -> dict[str, Any]:
    top = d.hypotheses[0] if d.hypotheses else None
    return {
        **d.incident.model_dump(exclude={"symptoms"}),
        "status": "open" if d.incident.resolved_ts_s is None else "resolved",
        "top_hypothesis": None
        if top is None
        else {"root_cause": top.root_cause, "component": top.component, "confidence": top.confidence},
    }


class Api:
    """What the JSON API reads: the workspace (opened per request, through the service's own hold)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def incidents(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            diagnoses = stored_diagnoses(store)
        return {"incidents": [_incident_json(d) for d in diagnoses]}

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            found = [d for d in stored_diagnoses(store) if d.incident.incident_id == incident_id]
        if not found:
            return None
        d = found[0]
        return {
            **_incident_json(d),
            "symptoms": [s.model_dump() for s in d.incident.symptoms],
            "hypotheses": [h.model_dump() for h in d.hypotheses],
        }

    def proposals(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            records = GuardrailRecords(store).proposals()
        return {
            "proposals": [
                {
                    "proposal_id": r.proposal_id,
                    "kind": r.action.kind,
                    "target": r.action.target,
                    "parameters": r.action.parameters,
                    "status": r.status,
                    "physical": r.physical,
                    "approvals_needed": r.approvals_needed,
                    "origin": r.origin,
                    "incident_id": r.incident_id,
                    "expires_ts_s": r.expires_ts_s,
                    "message": r.message,
                }
                for r in records
            ]
        }


class HttpEndpoint:
    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        api: Api,
        healthy: Probe,
        ready: Probe,
        token: str = "",
        dcgm: Callable[[], str] | None = None,
        alerts: AlertRoute | None = None,
    ) -> None:
        self.host, self.port = parse_listen(listen)
        self.registry, self.api, self.healthy, self.ready, self.token = registry, api, healthy, ready, token
        self.dcgm = dcgm
        self.alerts = alerts
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "aiops"
            timeout = REQUEST_TIMEOUT_S

            def log_message(self, *args: Any) -> None:  # the service logs its own way
                return

            def do_GET(self) -> None:
                endpoint.handle(self)

            def do_POST(self) -> None:
                endpoint.handle_post(self)

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="aiops-http", daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # -- routing ----------------------------------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._send(req, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
            elif path == "/metrics/dcgm" and self.dcgm is not None:
                self._send(req, 200, self.dcgm().encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/healthz", "/readyz"):
                ok, why = (self.healthy if path == "/healthz" else self.ready)()
                self._send(req, 200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
            elif path.startswith("/api/"):
                self._api(req, path)
            else:
                self._json(req, 404, {"error": "not found"})
        except Exception as exc:  # a bad request never takes the service down
            self._json(req, 500, {"error": type(exc).__name__})

    def handle_post(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        try:
            if path == ALERTMANAGER_ROUTE and self.alerts is not None:
                self._alertmanager(req, self.alerts)
            else:
                self._json(req, 404, {"error": "not found"}, close=True)
        except Exception as exc:  # a bad request never takes the service down
            self._json(req, 500, {"error": type(exc).__name__}, close=True)

    def _alertmanager(self, req: BaseHTTPRequestHandler, route: AlertRoute) -> None:
        given = req.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {route.token}".encode()):
            self._json(
                req, 401, {"error": "a bearer token is needed ([alertmanager_in] token_file)"}, close=True
            )
            return
        length_text = req.headers.get("Content-Length", "")
        if not length_text.isdigit():
            self._json(req, 411, {"error": "Content-Length is needed"}, close=True)
            return
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self._json(req, 413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"}, close=True)
            return
        body = req.rfile.read(length)
        try:
            payload = parse_webhook(body)
        except AlertPayloadError as exc:
            self._json(req, 400, {"error": exc.reason})
            return
        try:
            route.inbox.put(payload.alerts, time.time())
        except AlertInboxFull:
            self._json(req, 503, {"error": "busy: too many alerts wait; retry"})
            return
        self._json(req, 200, {"accepted": len(payload.alerts)})

    def _authorised(self, req: BaseHTTPRequestHandler) -> bool:
        if self.token:
            given = req.headers.get("Authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())
        return ipaddress.ip_address(req.client_address[0]).is_loopback

    def _api(self, req: BaseHTTPRequestHandler, path: str) -> None:
        if not self._authorised(req):
            self._json(req, 401, {"error": "a bearer token is needed (or ask from the node itself)"})
            return
        if path == "/api/incidents":
            self._json(req, 200, self.api.incidents())
        elif path.startswith("/api/incidents/"):
            found = self.api.incident(path.removeprefix("/api/incidents/"))
            self._json(req, 200 if found else 404, found or {"error": "no such incident"})
        elif path == "/api/proposals":
            self._json(req, 200, self.api.proposals())
        else:
            self._json(req, 404, {"error": "not found"})

    @staticmethod
    def _send(
        req: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str, close: bool = False
    ) -> None:
        req.send_response(status)
        if close:  # a body we did not read must not be parsed as the next request
            req.send_header("Connection", "close")
            req.close_connection = True
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("X-Content-Type-Options", "nosniff")
        req.end_headers()
        req.wfile.write(body)

    def _json(self, req: BaseHTTPRequestHandler, status: int, payload: Any, close: bool = False) -> None:
        self._send(req, status, json.dumps(payload, default=str).encode(), "application/json", close)
