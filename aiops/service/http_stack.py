"""The service's HTTP stack: its one listener (`serve`: /metrics, /healthz, /readyz, the JSON API, the
Alertmanager webhook, Slack's actions, a fleet's dispatches, and a `Companion` such as the web console at `/`),
and the probes it answers (`healthy`, `ready`). Nothing here touches the workspace but through the routes' own
short opens (api.py, the inboxes the flush drains)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from starlette.types import ASGIApp

from aiops.service.api import AlertRoute, Api
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app

if TYPE_CHECKING:
    from aiops.service.service import Service


class Companion(Protocol):
    """Something served beside the loop on the service's listener (the web console): its `app` answers at `/`
    every path the service's own routes do not; `start` is told the address once the listener listens, `close`
    comes before the store closes."""

    @property
    def app(self) -> ASGIApp: ...

    def start(self, host: str, port: int) -> None: ...

    def close(self) -> None: ...


def serve(svc: Service) -> WebServer:
    """The listener on `[http] listen`, started; the links notifications carry point at it."""
    route = AlertRoute(svc.alert_token, svc.alert_inbox) if svc.alert_token else None
    chat = svc.slack.routes() if svc.slack is not None else []
    svc.api = Api(svc.workspace)  # the flush reads its default lists again (Api.warm)
    routes = ServiceRoutes(
        svc.registry,
        svc.api,
        svc._healthy,
        svc._ready,
        svc.token,
        svc.metrics.dcgm_text,
        route,
        facility=svc.metrics.facility_text,
        dcim=svc.metrics.dcim_document,
        dispatches=svc.dispatches,
    )
    root = svc.companion.app if svc.companion is not None else None
    http = WebServer(
        service_app([*chat, *routes.routes()], root),
        svc.config.http.listen,
        allowed_hosts=tuple(svc.config.http.allowed_hosts),
        trusted_proxies=tuple(svc.config.http.trusted_proxies),
    )
    http.start()
    svc.outbox.link_base = f"http://{http.address}"
    if svc.slack is not None:
        svc.slack.link_base = svc.outbox.link_base
    return http


def healthy(svc: Service) -> tuple[bool, str]:
    """/healthz: alive while the loop ticks."""
    tick_s = svc.sources.tick_s if svc.sources else 1.0
    silent_s = svc.clock() - svc.last_tick
    # a source read in flight (the fleet's) holds the loop up to its own deadline: alive, maybe not ready
    patience_s = svc.sources.patience_s if svc.sources else 0.0
    if silent_s > max(10.0, 10 * tick_s, patience_s):
        return False, f"the loop has not ticked for {silent_s:.0f} s"
    return True, "ok"


def ready(svc: Service) -> tuple[bool, str]:
    """/readyz: ready once the first flush is done, and while the service sees: not while its source is blind or
    a watched collector reads nothing (the reason says which, since when and why)."""
    if not svc.ready:
        return False, "starting: no flush yet"
    stated = svc.conditions.readiness()
    if stated:
        return False, f"blind: {stated}"
    live = svc.sources.blind() if svc.sources is not None and svc.sources.blind else None
    return (False, live) if live else (True, "ready")
