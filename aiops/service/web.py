"""The service's HTTP routes (Starlette), served on its one listener (aiops/service/server.py):

- `GET /metrics`: Prometheus text exposition of the metrics cache (aiops/service/metrics.py);
- `GET /metrics/dcgm`: the same GPU and NIC values in dcgm-exporter's and node_exporter's exact names and labels
  (aiops/sources/exposition.py), so a Prometheus can scrape the twin as it would a GPU node (docs/PROMETHEUS.md);
- `GET /healthz`: 200 while the loop is alive (it ticked recently), else 503; a reason line either way;
- `GET /readyz`: 200 once the store is open and the first flush and detection pass are done, and while the
  service sees (not while its source is blind or a watched collector reads nothing: the body says why), else 503;
- `GET /api/incidents` (bounded: `?limit=` incidents, default 200, at most 1000, the open ones first, `?status=open`;
  each with its first 20 components and `component_count`; `total`, `cut`, `as_of_ts_s`, and `stale` when the
  flush kept the workspace and the answer is the last one read: aiops/service/incident_list.py, api.py,
  docs/SERVICE.md "The incident list"), `GET /api/incidents/{id}` (with hypotheses and evidence, its components
  paged: `?components_offset=`, `?components_limit=` default 1000, at most 10000), `GET /api/proposals` (bounded as
  the list: `?limit=`, the open ones first, `?status=` one of guardrails/records.py's; `total`, `cut`,
  `as_of_ts_s`, `stale`: aiops/service/proposal_list.py); either list, while the flush keeps the workspace and no
  earlier read answers the question, 503 with `Retry-After` and `busy_since_ts_s` (kept_answers.py),
  `GET /api/coverage` (what the workspace sees now: nodes, GPUs and NICs reporting, absent collectors, open
  conditions and blind periods, aiops/store/coverage.py): read-only JSON. With `[http] token` (or `token_file`) set, /api needs `Authorization: Bearer <token>`;
  without one, /api answers loopback clients only. Telemetry text goes out JSON-encoded only;
- `POST /api/alertmanager`: Alertmanager's webhook (version 4), with `[alertmanager_in] token_file` set (else
  404): the bearer token compared in constant time (401), a Content-Length (411) of at most 1 MiB (413) and a
  body, read up to that cap whatever the header said, that validates (400 with a short reason), queued for the
  service's loop (200; 503 when the inbox is full). Nothing is investigated in the handler.
- `POST /api/dispatch`: a proposal the fleet's people signed, judged and run by this node's loop
  (aiops/service/dispatch_in.py, guardrails/dispatched.py): the /api token (or a loopback client without one),
  a Content-Length (411) of at most 64 KiB (413), a body that parses (400 with a short reason); the node's
  answer (200 executed or failed, 403 refused, 409 a replay, 503 nothing acts here or the inbox is full, 504 the
  loop did not take it in time).

- `GET /api/maintenance` (`?all=1`: ended ones too), `POST /api/maintenance` (JSON {scope, target, duration_s,
  reason, by, kind}: 201 with the window, 400 naming what is wrong), `POST /api/maintenance/{id}/end` ({by}):
  maintenance windows and silences (aiops/store/maintenance.py), the /api token (or a loopback client without
  one), at most 16 KiB, each change audited with the actor `api:<by>`.

- `POST /api/slack/actions`, with `[chatops.slack]`: Slack's button presses, signed with the app's signing secret
  (aiops/service/slack_actions.py adds the route before the others).

Machines authenticate here with bearer tokens (Slack with its request signatures); people sign in to the console, which `service_app` mounts at
`/` (its own sessions and CSRF checks) when the service is given one. Every service answer carries
`X-Content-Type-Options: nosniff`; an endpoint that fails answers 500 naming the exception's type only. The
endpoints that read the store or the registry are sync (Starlette runs them in its threadpool, off the event
loop); the probes (two fields) and the webhook (it reads its body and only queues) run on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from aiops.errors import AlertInboxFull, AlertPayloadError, DispatchError, ListBusy, MaintenanceError
from aiops.service import dispatch_in
from aiops.service.alerts_in import MAX_BODY_BYTES, parse_webhook
from aiops.service.api import AlertRoute, Api
from aiops.service.forwarded import is_loopback
from aiops.service.incident_list import (
    DEFAULT_LIMIT,
    DETAIL_COMPONENTS,
    MAX_DETAIL_COMPONENTS,
    MAX_LIMIT,
    bounded_int,
)
from aiops.service.proposal_list import STATUSES

Probe = Callable[[], tuple[bool, str]]
ALERTMANAGER_ROUTE = "/api/alertmanager"
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
TEXT = "text/plain; charset=utf-8"
DCGM_TEXT = "text/plain; version=0.0.4; charset=utf-8"
MAINTENANCE_BODY_BYTES = 16 * 1024


def _send(
    status: int, body: bytes, content_type: str, close: bool = False, more: dict[str, str] | None = None
) -> Response:
    headers = {"X-Content-Type-Options": "nosniff", **(more or {})}
    if close:  # a body we did not read must not be parsed as the next request
        headers["Connection"] = "close"
    return Response(
        body, status_code=status, media_type=None, headers={"Content-Type": content_type, **headers}
    )


def _json(status: int, payload: Any, close: bool = False, more: dict[str, str] | None = None) -> Response:
    return _send(status, json.dumps(payload, default=str).encode(), "application/json", close, more)


def _listed(answer: Callable[[], dict[str, Any]]) -> Response:
    """A list's answer; 503 with `Retry-After` while the flush holds the workspace and nothing read before
    answers the question (aiops/service/kept_answers.py), never a wait for the flush."""
    try:
        return _json(200, answer())
    except ListBusy as exc:
        body = {
            "error": "busy: the service's flush holds the workspace and no earlier read answers this question; "
            f"retry in {exc.retry_after_s} s",
            "busy": True,
            "busy_since_ts_s": exc.since_ts_s,
            "retry_after_s": exc.retry_after_s,
        }
        return _json(503, body, more={"Retry-After": str(exc.retry_after_s)})


def _guarded_sync(endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
    @functools.wraps(endpoint)
    def guarded(request: Request) -> Response:
        try:
            return endpoint(request)
        except Exception as exc:  # a bad request never takes the service down
            return _json(500, {"error": type(exc).__name__})

    return guarded


def _guarded_async(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # a bad request never takes the service down
            return _json(500, {"error": type(exc).__name__}, close=request.method != "GET")

    return guarded


class ServiceRoutes:
    """The routes of one service: what they read and who may ask."""

    def __init__(
        self,
        registry: CollectorRegistry,
        api: Api,
        healthy: Probe,
        ready: Probe,
        token: str = "",
        dcgm: Callable[[], str] | None = None,
        alerts: AlertRoute | None = None,
        *,
        facility: Callable[[], str] | None = None,
        dcim: Callable[[], dict[str, Any]] | None = None,
        dispatches: dispatch_in.DispatchInbox | None = None,
    ) -> None:
        self.registry, self.api, self.healthy, self.ready, self.token = registry, api, healthy, ready, token
        self.dcgm = dcgm
        self.alerts = alerts
        self.facility = facility  # the twin's rack sensors as facility exporters' series (docs/FACILITY.md)
        self.dcim = dcim  # the DCIM caps in force, as the document the fleet's DCIM input reads
        self.dispatches = dispatches

    def routes(self) -> list[BaseRoute]:
        found: list[BaseRoute] = [
            Route("/metrics", _guarded_sync(self.metrics), methods=["GET"]),
            Route("/healthz", _guarded_async(self.health), methods=["GET"]),
            Route("/readyz", _guarded_async(self.readiness), methods=["GET"]),
            Route("/api/incidents", _guarded_sync(self.incidents), methods=["GET"]),
            Route("/api/incidents/{incident_id:path}", _guarded_sync(self.incident), methods=["GET"]),
            Route("/api/proposals", _guarded_sync(self.proposals), methods=["GET"]),
            Route("/api/coverage", _guarded_sync(self.coverage), methods=["GET"]),
            Route("/api/maintenance", _guarded_sync(self.maintenance), methods=["GET"]),
            Route("/api/maintenance", _guarded_async(self.add_maintenance), methods=["POST"]),
            Route("/api/maintenance/{window_id}/end", _guarded_async(self.end_maintenance), methods=["POST"]),
        ]
        if self.dcgm is not None:
            found.append(Route("/metrics/dcgm", _guarded_sync(self.dcgm_metrics), methods=["GET"]))
        if self.facility is not None:
            found.append(Route("/metrics/facility", _guarded_sync(self.facility_metrics), methods=["GET"]))
        if self.dcim is not None:
            found.append(Route("/api/dcim", _guarded_sync(self.dcim_document), methods=["GET"]))
        if self.alerts is not None:
            found.append(Route(ALERTMANAGER_ROUTE, _guarded_async(self.alertmanager), methods=["POST"]))
        if self.dispatches is not None:
            found.append(Route(dispatch_in.DISPATCH_ROUTE, _guarded_async(self.dispatch), methods=["POST"]))
        found.append(Route("/api/{rest:path}", _guarded_sync(self.api_not_found), methods=ALL_METHODS))
        return found

    # -- metrics and probes -----------------------------------------------------------------------------------
    def metrics(self, request: Request) -> Response:
        return _send(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)

    def dcgm_metrics(self, request: Request) -> Response:
        assert self.dcgm is not None
        return _send(200, self.dcgm().encode(), DCGM_TEXT)

    def facility_metrics(self, request: Request) -> Response:
        assert self.facility is not None
        return _send(200, self.facility().encode(), DCGM_TEXT)

    def dcim_document(self, request: Request) -> Response:
        assert self.dcim is not None
        return self._refused(request) or _json(200, self.dcim())

    def _probe(self, probe: Probe) -> Response:
        ok, why = probe()
        return _send(200 if ok else 503, (why + "\n").encode(), TEXT)

    # the probes read two fields and never block: on the event loop, so a threadpool busy with slow /api
    # requests never makes the node look dead
    async def health(self, request: Request) -> Response:
        return self._probe(self.healthy)

    async def readiness(self, request: Request) -> Response:
        return self._probe(self.ready)

    # -- the JSON API -------------------------------------------------------------------------------------------
    def _authorised(self, request: Request) -> bool:
        if self.token:
            given = request.headers.get("Authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())
        client = request.client
        return client is not None and is_loopback(client.host)  # never a 500 on a host that is no address

    def _refused(self, request: Request) -> Response | None:
        if self._authorised(request):
            return None
        return _json(401, {"error": "a bearer token is needed (or ask from the node itself)"})

    def incidents(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        query = request.query_params
        limit = bounded_int(query.get("limit"), DEFAULT_LIMIT, 1, MAX_LIMIT)
        status = query.get("status", "")
        if limit is None:
            return _json(400, {"error": f"limit: a whole number from 1 to {MAX_LIMIT}"})
        if status not in ("", "open"):
            return _json(400, {"error": "status: open, or leave it out for every incident"})
        return _listed(lambda: self.api.incidents(limit, open_only=status == "open"))

    def incident(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        query = request.query_params
        offset = bounded_int(query.get("components_offset"), 0, 0, 10**9)
        limit = bounded_int(query.get("components_limit"), DETAIL_COMPONENTS, 1, MAX_DETAIL_COMPONENTS)
        if offset is None or limit is None:
            return _json(
                400,
                {
                    "error": "components_offset: a whole number from 0; components_limit: from 1 to "
                    f"{MAX_DETAIL_COMPONENTS}"
                },
            )
        found = self.api.incident(str(request.path_params["incident_id"]), offset, limit)
        return _json(200 if found else 404, found or {"error": "no such incident"})

    def proposals(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        query = request.query_params
        limit = bounded_int(query.get("limit"), DEFAULT_LIMIT, 1, MAX_LIMIT)
        status = query.get("status", "")
        if limit is None:
            return _json(400, {"error": f"limit: a whole number from 1 to {MAX_LIMIT}"})
        if status and status not in STATUSES:
            return _json(
                400, {"error": f"status: one of {', '.join(STATUSES)}, or leave it out for every proposal"}
            )
        return _listed(lambda: self.api.proposals(limit, status=status))

    def coverage(self, request: Request) -> Response:
        return self._refused(request) or _json(200, self.api.coverage())

    # -- maintenance windows and silences --------------------------------------------------------------------------
    def maintenance(self, request: Request) -> Response:
        every = request.query_params.get("all", "") in ("1", "true")
        return self._refused(request) or _json(200, self.api.maintenance(every))

    async def _maintenance_body(self, request: Request) -> Any:
        if not self._authorised(request):
            return _json(401, {"error": "a bearer token is needed ([http] token_file)"}, close=True)
        body = await _bounded_body(request, MAINTENANCE_BODY_BYTES)
        if isinstance(body, Response):
            return body
        try:
            return json.loads(body or b"{}")
        except ValueError:
            return _json(400, {"error": "the body is not JSON"})

    async def add_maintenance(self, request: Request) -> Response:
        body = await self._maintenance_body(request)
        if isinstance(body, Response):
            return body
        try:
            added = await run_in_threadpool(self.api.add_maintenance, body)
        except MaintenanceError as exc:
            return _json(400, {"error": str(exc)[:300]})
        return _json(201, added)

    async def end_maintenance(self, request: Request) -> Response:
        body = await self._maintenance_body(request)
        if isinstance(body, Response):
            return body
        by = body.get("by", "") if isinstance(body, dict) else ""
        try:
            ended = await run_in_threadpool(
                self.api.end_maintenance, str(request.path_params["window_id"])[:40], str(by)[:200]
            )
        except MaintenanceError as exc:
            return _json(404 if "no maintenance window" in str(exc) else 409, {"error": str(exc)[:300]})
        return _json(200, ended)

    def api_not_found(self, request: Request) -> Response:
        return self._refused(request) or _json(404, {"error": "not found"}, close=request.method != "GET")

    # -- the fleet's dispatches ------------------------------------------------------------------------------------
    async def dispatch(self, request: Request) -> Response:
        inbox = self.dispatches
        assert inbox is not None
        if not self._authorised(request):
            return _json(401, {"error": "a bearer token is needed ([http] token_file)"}, close=True)
        body = await _bounded_body(request, dispatch_in.MAX_BODY_BYTES)
        if isinstance(body, Response):
            return body
        from guardrails.dispatch_request import parse_dispatch  # a fleet's first dispatch loads its checks

        try:
            dispatch = parse_dispatch(body)
        except DispatchError as exc:
            return _json(400, {"error": exc.reason})
        answer = inbox.put(dispatch)
        if answer is None:
            return _json(503, {"error": "busy: too many dispatches wait; retry"})
        waiting = asyncio.wrap_future(answer)
        done, _ = await asyncio.wait({waiting}, timeout=dispatch_in.WAIT_S)
        if not done and answer.cancel():
            return _json(
                504, {"error": "the node's loop did not take the dispatch in time; nothing was done"}
            )
        judged = await waiting
        return _json(judged.http_status, judged.json())

    # -- Alertmanager's webhook ---------------------------------------------------------------------------------
    async def alertmanager(self, request: Request) -> Response:
        route = self.alerts
        assert route is not None
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {route.token}".encode()):
            return _json(
                401, {"error": "a bearer token is needed ([alertmanager_in] token_file)"}, close=True
            )
        body = await _bounded_body(request, MAX_BODY_BYTES)
        if isinstance(body, Response):
            return body
        try:
            payload = parse_webhook(body)
        except AlertPayloadError as exc:
            return _json(400, {"error": exc.reason})
        try:
            route.inbox.put(payload.alerts, time.time())
        except AlertInboxFull:
            return _json(503, {"error": "busy: too many alerts wait; retry"})
        return _json(200, {"accepted": len(payload.alerts)})


async def _bounded_body(request: Request, max_bytes: int) -> bytes | Response:
    """The request's body, read up to `max_bytes` whatever the header said; else the answer refusing it."""
    length_text = request.headers.get("Content-Length", "")
    if not (length_text.isascii() and length_text.isdigit()):  # "²".isdigit() is True: ASCII digits only
        return _json(411, {"error": "Content-Length is needed"}, close=True)
    if int(length_text) > max_bytes:
        return _json(413, {"error": f"body larger than {max_bytes} bytes"}, close=True)
    body = bytearray()
    async for chunk in request.stream():  # never more than the cap, whatever the header said
        body += chunk
        if len(body) > max_bytes:
            return _json(413, {"error": f"body larger than {max_bytes} bytes"}, close=True)
    return bytes(body)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await _json(404, {"error": "not found"}, close=scope.get("method") != "GET")(scope, receive, send)


def service_app(routes: list[BaseRoute], root: ASGIApp | None = None) -> Starlette:
    """One app for the one listener: the service's routes first, then `root` (the console) at `/` for every
    other path, or a JSON 404 without one."""
    return Starlette(routes=[*routes, Mount("/", app=root if root is not None else _not_found)])
