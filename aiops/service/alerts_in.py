"""Alertmanager in: the webhook body Alertmanager POSTs (version 4), validated, and the alerts it carries mapped
onto contract components; the `AlertInbox` the HTTP handler fills and the service's loop drains.

Everything in a body is hostile text: label names must be Prometheus label names, values and annotations are
bounded, the fingerprint must be hex (it becomes part of an id), and nothing of it is ever logged, put in a
URL or a header, or shown but JSON-encoded. Pure logic and a locked deque: no I/O here (the route is in
web.py, the investigation in alert_investigate.py).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from aiops.errors import AlertInboxFull, AlertPayloadError
from aiops.labels import component_kind, host_component

MAX_BODY_BYTES = 1 << 20  # 1 MiB: Alertmanager's groups are far smaller (it truncates at max_alerts anyway)
MAX_ALERTS = 1000
MAX_LABELS = 64
MAX_LABEL_VALUE_CHARS = 1024
MAX_ANNOTATION_CHARS = 4096
INBOX_LIMIT = 2000  # alerts waiting for the loop; beyond it the route answers 503 (Alertmanager retries)
REASON_CHARS = 200
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}$", re.ASCII)
_ALERT_KINDS = ("fleet", "rack", "node", "gpu", "nic")
_GPU_INDEX = re.compile(r"^\d{1,4}$", re.ASCII)

Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{1,64}$")]


def _check_labels(value: dict[str, str], max_chars: int) -> dict[str, str]:
    if len(value) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} entries")
    for name, text in value.items():
        if not _LABEL_NAME.fullmatch(name):
            raise ValueError("a name is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if len(text) > max_chars:
            raise ValueError(f"a value is longer than {max_chars} characters")
    return value


class WebhookAlert(BaseModel):
    """One alert of the group (Alertmanager's `template.Alert`)."""

    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime  # Alertmanager's field names
    endsAt: datetime
    fingerprint: Fingerprint

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_labels(value, MAX_LABEL_VALUE_CHARS)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_labels(value, MAX_ANNOTATION_CHARS)

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _zoned(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("must carry a zone (RFC 3339)")
        return value

    @property
    def starts_ts_s(self) -> float:
        return self.startsAt.timestamp()

    @property
    def ends_ts_s(self) -> float | None:
        """None for Alertmanager's zero time (`0001-01-01T00:00:00Z`: a firing alert with no end)."""
        return None if self.endsAt.year <= 1 else self.endsAt.timestamp()


class WebhookPayload(BaseModel):
    """The body of Alertmanager's webhook_config (https://prometheus.io/docs/alerting/latest/configuration/
    #webhook_config): fields we do not read (receiver, groupLabels, externalURL, ...) are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    alerts: list[WebhookAlert] = Field(max_length=MAX_ALERTS)


def _short(text: str) -> str:
    ascii_text = text.encode("ascii", "backslashreplace").decode("ascii")
    cleaned = "".join(c if 32 <= ord(c) < 127 else "?" for c in ascii_text)
    return cleaned[:REASON_CHARS]


def parse_webhook(body: bytes) -> WebhookPayload:
    """The validated payload, or AlertPayloadError naming the first field that is wrong (never its value)."""
    if len(body) > MAX_BODY_BYTES:
        raise AlertPayloadError(f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        return WebhookPayload.model_validate_json(body)
    except ValidationError as exc:
        error = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(p) for p in error["loc"] if not isinstance(p, str) or _LABEL_NAME.fullmatch(p))
        raise AlertPayloadError(_short(f"{where or 'body'}: {error['msg']}")) from None


# -- labels -> component --------------------------------------------------------------------------------------
def component_of(
    labels: Mapping[str, str], hosts: Mapping[str, str], known: Collection[str] = ()
) -> str | None:
    """The contract component an alert is about, or None (then the analyst looks at everything):
    a `component` label that is a valid contract name (and, when `known` is given, one of them); else the
    host (`Hostname`, or `instance` without its port) through `hosts` (hostname -> node name, from
    `[node.hosts]`), else the host's own name (`host_component`: its first label, lowercased); with a `gpu`
    label (dcgm-exporter's index), that GPU."""
    component = labels.get("component", "")
    if component_kind(component) in _ALERT_KINDS and (not known or component in known):
        return component
    from aiops.sources.mapping import host_of  # the Prometheus source's label rules: at the first alert

    host = host_of(labels)
    node = None if host is None else hosts.get(host, host_component(host))
    if node is None or (known and node not in known):
        return None
    gpu = labels.get("gpu", "")
    if _GPU_INDEX.fullmatch(gpu):
        candidate = f"{node}/gpu{int(gpu)}"
        if not known or candidate in known:
            return candidate
    return node


def related(a: str, b: str) -> bool:
    """One component is the other or contains it (`node3` and `node3/gpu5`)."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


# -- the inbox ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Received:
    alert: WebhookAlert
    received_ts_s: float  # wall clock


class AlertInbox:
    """Alerts the route accepted, in order, for the service's loop (thread-safe, bounded)."""

    def __init__(self, limit: int = INBOX_LIMIT) -> None:
        self.limit = limit
        self._items: deque[Received] = deque()
        self._lock = threading.Lock()
        self.accepted = 0

    def put(self, alerts: list[WebhookAlert], now_ts_s: float) -> None:
        with self._lock:
            if len(self._items) + len(alerts) > self.limit:
                raise AlertInboxFull(f"{len(self._items)} alerts wait already")
            self._items.extend(Received(a, now_ts_s) for a in alerts)
            self.accepted += len(alerts)

    def drain(self, max_items: int | None = None) -> list[Received]:
        """The oldest `max_items` waiting (all by default), taken out."""
        with self._lock:
            count = len(self._items) if max_items is None else max(0, min(max_items, len(self._items)))
            return [self._items.popleft() for _ in range(count)]
