"""The service's side of notifications: incident changes become queued events inside the flush's write
(`Outbox.notify`, the Responder's callback), and a thread of their own delivers them (`Outbox.start`): every
`pump_every_s` it calls `Notifier.pump`, which holds the workspace only for two brief writes and never during
HTTP, so a slow or dead receiver never stalls collection or detection.

With a console URL (`[notify] console_url`, else `[console] url`), each event carries the console page of its incident (`console_link`): a
live incident's own, an alert investigation's linked incident's (the one its `link` names), else none.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, cast

from aiops.config import NotifyConfig
from aiops.models import Hypothesis, Incident
from aiops.store import Store, Workspace

if TYPE_CHECKING:
    from aiops.integrations.event import EventKind, IncidentEvent
    from aiops.integrations.notifier import Notifier
    from aiops.integrations.sink_queue import Sink

log = logging.getLogger("aiops.service.notify")


class Outbox:
    def __init__(
        self,
        config: NotifyConfig,
        node: str,
        link_base: str = "",
        pump_every_s: float = 1.0,
        *,
        console_url: str | None = None,
    ) -> None:
        # no webhook configured: no notifier, and none of the sinks' modules (queue, payloads, HTTP) loaded
        self.notifier: Notifier | None = None
        if config.webhooks:
            from aiops.integrations.notifier import Notifier

            self.notifier = Notifier(config)
        self.node = node
        self.console_url = config.console_url if console_url is None else console_url
        self.link_base = link_base.rstrip("/")  # http://host:port of the service's API; "" for none
        self.pump_every_s = pump_every_s
        self.queued = 0
        self.delivered = 0
        self.pump_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.notifier is not None and bool(self.notifier.sinks)

    def sinks(self) -> list[Sink]:
        """The configured webhooks (the scheduled report's too)."""
        return list(self.notifier.sinks.values()) if self.notifier is not None else []

    def notify(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
        """Queue the event for every webhook, in the caller's transaction (so it exists iff the change does)."""
        if self.notifier is None or not self.enabled:
            return
        from aiops.integrations.event import EVENT_KINDS, incident_event

        if kind not in EVENT_KINDS:
            return
        if kind == "diagnosed" and top is not None and held_elsewhere(store, incident, top):
            return  # not this incident's diagnosis yet: its pages wait for a cause of its own
        link = f"{self.link_base}/api/incidents/{incident.incident_id}" if self.link_base else ""
        hypotheses = [top] if top is not None else []
        event = incident_event(cast("EventKind", kind), incident, hypotheses, node=self.node, link=link)
        event = dataclasses.replace(event, console_link=self.console_link(incident.incident_id))
        self.queued += self.notifier.enqueue(store, event)

    def enqueue_event(self, store: Store, event: IncidentEvent) -> None:
        """Queue an event built elsewhere (an alert investigation's) for every webhook, in the caller's write."""
        if self.notifier is not None and self.enabled:
            _, marker, linked = event.link.rpartition("/api/incidents/")
            event = dataclasses.replace(event, console_link=self.console_link(linked if marker else ""))
            self.queued += self.notifier.enqueue(store, event)

    def console_link(self, incident_id: str) -> str:
        """The console's page of `incident_id` (<console URL>/incidents/ID); "" without either."""
        from aiops.integrations.event import console_page

        return console_page(self.console_url, incident_id)

    def start(self, workspace: Workspace) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, args=(workspace,), name="aiops-notify", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def pump_once(self, workspace: Workspace) -> None:
        if self.notifier is None:
            return
        try:
            stats = self.notifier.pump(workspace)
        except Exception:  # the queue stays as it was; the next pump tries again
            self.pump_errors += 1
            log.exception("notification pump failed")
            return
        self.delivered += stats.delivered
        if stats.attempted:
            log.info(
                "notifications",
                extra={
                    "attempted": stats.attempted,
                    "delivered": stats.delivered,
                    "retrying": stats.retrying,
                    "failed": stats.failed,
                    "given_up": stats.given_up,
                },
            )

    def _run(self, workspace: Workspace) -> None:
        while not self._stop.wait(self.pump_every_s):
            self.pump_once(workspace)


def held_elsewhere(store: Store, incident: Incident, top: Hypothesis) -> bool:
    """Whether the top cause is another open incident's: its component is none of this incident's and another
    open incident lists it (the analyst ranks such a cause last but keeps it when the incident has nothing of
    its own yet, e.g. a second hot GPU's first seconds beside the first's incident). Telling pagers "top cause:
    that GPU" would name another incident's fault (one in a maintenance window, say) as this one's; the event
    waits for the incident's own cause."""
    if top.component in incident.components:
        return False
    return bool(
        store.scalar(
            "SELECT count(*) FROM incidents WHERE incident_id <> ? AND resolved_ts_s IS NULL "
            "AND list_contains(components, ?)",
            [incident.incident_id, top.component],
        )
    )
