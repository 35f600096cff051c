"""The console's fleet-safety pages: the circuit breaker (`/breaker`: what is out of service and why, the limits
per fleet and rack, the active overrides, the proposals waiting), the components' memory (`/components`: the
lemon ranking; `/components/{name}`: one component's failures, actions and outcomes), and the "Roll back"
button of an executed proposal (`POST /proposals/{id}/rollback`: files the recorded rollback as new proposals,
which people then approve with their signature like any other; aiops/runtime/rollback.py).

Everything shown is the workspace's own records; component names and reasons are hostile text, escaped by the
templates. A viewer reads; approvers and admins may file a rollback (CSRF-checked, like every decision)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from aiops.console import data
from aiops.errors import AiopsError
from aiops.memory.history import component_history
from aiops.memory.lemon import lemon_ranking, lemon_score
from aiops.runtime.rollback import rollback
from aiops.runtime.safety import breaker_state, waiting_on_breaker
from aiops.store import Store
from guardrails.context import topology_from_store

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
MAX_NAME_CHARS = 200


def breaker_page(store: Store) -> dict[str, Any]:
    state = breaker_state(store)
    waiting = waiting_on_breaker(store)
    proposals = {p["id"]: p for p in data.proposals(store, here=False)}
    return {"state": state, "waiting": [proposals[pid] for pid in waiting if pid in proposals]}


def components_page(store: Store) -> list[dict[str, Any]]:
    racks = frozenset(topology_from_store(store).rack_nodes)
    return [
        {
            "component": s.component,
            "score": s.score,
            "faults": s.fault_count,
            "repeats": s.repeats,
            "failed_outcomes": s.failed_outcomes,
            "take_out": s.take_out,
            "why": s.why(),
            "last_fault_ts_s": s.last_fault_ts_s,
        }
        for s in lemon_ranking(store, racks=racks)
    ]


def component_page(store: Store, component: str) -> dict[str, Any]:
    history = component_history(store, component)
    now = max([history.since_ts_s, *(f.ts_s for f in history.failures), *(a.ts_s for a in history.actions)])
    score = lemon_score(history, now)
    return {
        "component": component,
        "score": score,
        "timeline": history.timeline(),
        "repeats": [f.incident_id for f in history.repeats()],
    }


class Safety:
    def __init__(self, console: Console) -> None:
        self.console = console

    async def breaker(self, request: Request) -> Response:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login()
        found = await self.console.read(breaker_page)
        return pages.page(request, session, "breaker.html", clock=data.WALL_CLOCK, **found)

    async def components(self, request: Request) -> Response:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login()
        rows, clock = await self.console.read(lambda s: (components_page(s), data.data_clock(s)))
        return pages.page(request, session, "components.html", components=rows, clock=clock.label)

    async def component(self, request: Request) -> Response:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login()
        name = str(request.path_params["component"])[:MAX_NAME_CHARS]
        found, clock = await self.console.read(lambda s: (component_page(s, name), data.data_clock(s)))
        return pages.page(request, session, "component.html", found=found, clock=clock.label)

    async def rollback(self, request: Request) -> Response:
        """File the recorded rollback of an executed proposal; people approve it on the incident's page."""
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login()
        if not await pages.csrf_ok(request, session):
            return pages.refuse(403, "missing or wrong CSRF token: nothing was recorded")
        if session.role not in ("approver", "admin"):
            return pages.refuse(403, f"{session.principal} is a viewer: viewers cannot decide")
        proposal_id = str(request.path_params["proposal_id"])[:MAX_NAME_CHARS]

        def run() -> str:
            with self.console.lock:
                done = rollback(self.console.workspace, proposal_id)
            return f"rollback filed as {', '.join(done.filed)}: approve it to run it"

        try:
            note = await run_in_threadpool(run)
        except AiopsError as exc:
            note = f"refused: {exc}"
        log.info(
            "rollback", extra={"principal": session.principal, "proposal_id": proposal_id, "note": note[:200]}
        )
        incident_id = await self.console.read(lambda s: data.proposal_incident(s, proposal_id))
        where = f"/incidents/{quote(incident_id, safe='')}" if incident_id else "/"
        return pages.back_with_note(session, where, f"{proposal_id}: {note}")
