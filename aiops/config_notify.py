"""`[[notify.webhooks]]`: one notification sink of the `[notify]` section (aiops/config.py re-exports it;
docs/NOTIFY.md). A kind is one of `WebhookKind`; `pagerduty` posts to the Events API v2 (its URL by
default) with the integration's routing key read from `routing_key_file` when the service starts (never
written inline in the file, never stored in the queue). A URL that is itself a secret (a Teams or Slack webhook
URL carries its signature) may come from `url_file` instead, read when the service starts as well."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WebhookKind = Literal["json", "slack", "alertmanager", "pagerduty", "teams"]
Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
PagerDutySeverity = Literal["info", "warning", "error", "critical"]  # the Events API v2's payload.severity
SEVERITY_NAMED_BY = ("pagerduty", "alertmanager", "slack", "teams")  # sink kinds whose names are configurable
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
URL_PATTERN = re.compile(r"^https?://[^\s]+$")


class WebhookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        default="", description="where to POST; kind pagerduty: the Events API v2 enqueue URL by default"
    )
    url_file: str = Field(
        default="", description="instead of url: the file holding it, read when the service starts"
    )
    kind: WebhookKind = "json"
    token: str = Field(default="", description="sent as a bearer token; empty: none")
    routing_key_file: str = Field(
        default="", description="kind pagerduty only: the file holding the integration's routing key"
    )

    @model_validator(mode="before")
    @classmethod
    def _pagerduty_url(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("kind") == "pagerduty"
            and "url" not in data
            and "url_file" not in data
        ):
            return {**data, "url": PAGERDUTY_EVENTS_URL}
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not URL_PATTERN.match(value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> WebhookConfig:
        if bool(self.url) == bool(self.url_file.strip()):
            raise ValueError("give url or url_file (a file holding the URL), one of them")
        if self.kind == "pagerduty":
            if not self.routing_key_file.strip():
                raise ValueError(
                    "kind pagerduty needs routing_key_file: the file holding the integration key"
                )
            if self.token:
                raise ValueError("kind pagerduty sends no bearer token: its key goes in routing_key_file")
        elif self.routing_key_file:
            raise ValueError(f"routing_key_file is for kind pagerduty only, not {self.kind}")
        return self


def _identity() -> dict[Severity, str]:
    return {name: name for name in SEVERITIES}


def _pagerduty() -> dict[Severity, PagerDutySeverity]:
    return {"info": "info", "warning": "warning", "critical": "critical"}


class SeverityConfig(BaseModel):
    """`[notify.severity]`: an incident's severity from its impact (aiops/detect/severity.py), and how each sink
    kind names each severity. Critical: hardware lost (a GPU off the bus, uncorrectable ECC, a fatal XID), a job
    stalled, a job slowed by `critical_slowdown_pct` or more, or `critical_gpus` GPUs or more affected; warning:
    slowed by `warning_slowdown_pct` or more, or any other fault; info: no impact (a slowdown below that, a GPU
    warm but below its slowdown point with no job slowed, an application's Xid, benign conditions such as ambient
    drift, early warnings). `page_from`: the least severity that pages (aiops/service/paging.py); an incident
    below it notifies no sink and proposes no change to the cluster (observe-only): the console shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    critical_slowdown_pct: float = Field(
        default=20.0, gt=0, le=10_000, description="a job slowed by this much or more: critical"
    )
    warning_slowdown_pct: float = Field(
        default=5.0, ge=0, le=10_000, description="a job slowed by this much or more: warning"
    )
    critical_gpus: int = Field(default=8, ge=1, le=1_000_000, description="this many GPUs affected: critical")
    hardware_lost: Severity = Field(
        default="critical", description="a GPU lost, uncorrectable ECC, a fatal XID"
    )
    job_stalled: Severity = Field(default="critical", description="a job makes no step, collectives time out")
    job_stalled_after_s: float = Field(
        default=900.0,
        ge=0,
        le=86_400,
        description="no step for this long is a stalled job; a shorter pause (an evaluation, a checkpoint) is info",
    )
    page_from: Severity = Field(
        default="warning",
        description="the least severity that pages; below it: no notification and no actionable proposal",
    )
    pagerduty: dict[Severity, PagerDutySeverity] = Field(
        default_factory=_pagerduty, description="our severity -> PagerDuty's payload.severity"
    )
    alertmanager: dict[Severity, str] = Field(
        default_factory=_identity, description="our severity -> the alert's `severity` label"
    )
    slack: dict[Severity, str] = Field(
        default_factory=_identity, description="our severity -> as Slack shows it"
    )
    teams: dict[Severity, str] = Field(
        default_factory=_identity, description="our severity -> as Teams shows it"
    )

    @model_validator(mode="after")
    def _ordered(self) -> SeverityConfig:
        if self.warning_slowdown_pct > self.critical_slowdown_pct:
            raise ValueError("warning_slowdown_pct must not be above critical_slowdown_pct")
        for kind in SEVERITY_NAMED_BY:
            names: dict[str, str] = getattr(self, kind)
            missing = [name for name in SEVERITIES if name not in names]
            if missing:
                raise ValueError(
                    f"{kind} names no {', '.join(missing)} (give all of info, warning, critical)"
                )
            if any(not value.strip() or len(value) > 40 for value in names.values()):
                raise ValueError(f"{kind}: each name 1 to 40 characters")
        return self

    def for_sink(self, kind: str, severity: str) -> str:
        """How a sink of `kind` names our `severity` (unchanged for a kind or a severity not mapped)."""
        names: dict[str, str] = getattr(self, kind) if kind in SEVERITY_NAMED_BY else {}
        return names.get(severity, severity)


TicketKind = Literal["jira", "servicenow"]


class TicketConfig(BaseModel):
    """`[notify.ticket]`: where `open_ticket` files a ticket (aiops/integrations/ticket.py). `kind` jira: Jira's
    REST create-issue (`POST {url}/rest/api/2/issue`, project `project`, issue type `issue_type`); servicenow:
    the Table API (`POST {url}/api/now/table/incident`, `assignment_group` when set). Credentials: `user` and
    the file `token_file` (Jira Cloud: the account's e-mail and an API token; ServiceNow: the integration
    user and its password) as HTTP basic auth, or `token_file` alone as a bearer token (a Jira Data Center
    personal access token). Without `url` no ticket is filed: `open_ticket` stays a note in the audit log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: TicketKind = "jira"
    url: str = Field(default="", description="the Jira or ServiceNow base URL; empty: open_ticket is a note")
    user: str = Field(default="", description="basic auth user; empty: token_file is a bearer token")
    token_file: str = Field(default="", description="the API token or password, read when the service starts")
    project: str = Field(default="", description="jira: the project key tickets go to (OPS)")
    issue_type: str = Field(default="Task", description="jira: the issue type")
    assignment_group: str = Field(default="", description="servicenow: the group, empty: the table's default")
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="one ticket request at most")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not URL_PATTERN.match(value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _needs(self) -> TicketConfig:
        if not self.url:
            return self
        if not self.token_file.strip():
            raise ValueError("a ticket sink needs token_file: the file holding its API token or password")
        if self.kind == "jira" and not re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", self.project):
            raise ValueError("kind jira needs project: the project key, e.g. OPS")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.url)
