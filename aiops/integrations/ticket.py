"""The ticket sink: what `open_ticket` does once it is approved (or needs no approval) and executes (`TicketActuator`,
routed by aiops/runtime/world.py when `[notify.ticket]` names one). One request, in the documented shape of:

- **Jira** REST create-issue, `POST {url}/rest/api/2/issue` with `{"fields": {"project": {"key"}, "summary",
  "description", "issuetype": {"name"}, "labels"}}`; Jira answers 201 `{"id", "key", "self"}`;
- **ServiceNow** Table API, `POST {url}/api/now/table/incident` with `short_description`, `description`,
  `urgency`/`impact`, `correlation_id` (the proposal id), `assignment_group`; it answers 201
  `{"result": {"sys_id", "number", ...}}`.

Authentication: `user` and the secret of `token_file` as HTTP basic auth, or the secret alone as a bearer token.
Everything goes through `aiops.outbound` (no redirect, a byte cap, one deadline). The ticket's key (`OPS-24`,
`INC0010002`) and a link to it are the execution's result, so the audit log and the console name the ticket.
The text comes from the proposal (its reason, the incident it remedies, the team and summary it names): hostile
data, JSON-encoded only; the URL and the credentials come from the configuration only.

Without a sink (`[notify.ticket] url` empty), `open_ticket` executes as a note: the audit log is its record and
its result says so.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiops import outbound
from aiops.config_notify import TicketConfig
from aiops.errors import ConfigError, OutboundError
from guardrails.actions import Action
from guardrails.actuators import ActuationResult

JIRA_PATH = "/rest/api/2/issue"
SERVICENOW_PATH = "/api/now/table/incident"
_SUMMARY_CHARS = 250  # Jira's summary field takes 255
_DESCRIPTION_CHARS = 8000
# our priority -> ServiceNow's urgency and impact (1 high, 2 medium, 3 low)
_URGENCY = {"critical": "1", "high": "1", "medium": "2", "low": "3"}


def read_secret(path: str, field_name: str = "notify.ticket.token_file") -> str:
    try:
        secret = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            path, field_name, f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}"
        ) from None
    if not secret or "\n" in secret:
        raise ConfigError(path, field_name, "the file must hold the token (one line)")
    return secret


def _summary(action: Action) -> str:
    named = str(action.parameters.get("summary") or "").strip()
    text = named or f"{action.reason or 'aiops: look at'} {action.target}".strip()
    return " ".join(text.split())[:_SUMMARY_CHARS]


def _description(action: Action, incident_id: str) -> str:
    lines = [
        f"Filed by aiops for {action.target}" + (f" (incident {incident_id})" if incident_id else "") + ".",
        f"Team: {action.parameters.get('team') or '-'}; priority: {action.parameters.get('priority') or '-'}.",
        f"Why: {action.reason or '-'}",
    ]
    if action.expected_effect:
        lines.append(f"Expected: {action.expected_effect}")
    if action.evidence:
        lines.append("Evidence:")
        lines += [f"- {e}" for e in action.evidence[:10]]
    lines.append(f"aiops proposal {action.proposal_id}")
    return "\n".join(lines)[:_DESCRIPTION_CHARS]


def ticket_request(config: TicketConfig, action: Action, incident_id: str = "") -> tuple[str, dict[str, Any]]:
    """(URL, JSON body) of the create request for `action` (an open_ticket), in the sink's own shape."""
    team = str(action.parameters.get("team") or "")
    if config.kind == "jira":
        labels = ["aiops", *([team] if team and " " not in team else [])]
        fields: dict[str, Any] = {
            "project": {"key": config.project},
            "summary": _summary(action),
            "description": _description(action, incident_id),
            "issuetype": {"name": config.issue_type},
            "labels": labels,
        }
        return config.url + JIRA_PATH, {"fields": fields}
    priority = str(action.parameters.get("priority") or "medium")
    body: dict[str, Any] = {
        "short_description": _summary(action),
        "description": _description(action, incident_id),
        "urgency": _URGENCY.get(priority, "2"),
        "impact": _URGENCY.get(priority, "2"),
        "correlation_id": action.proposal_id,
        "correlation_display": "aiops",
    }
    if config.assignment_group:
        body["assignment_group"] = config.assignment_group
    return config.url + SERVICENOW_PATH, body


def filed(config: TicketConfig, answer: Any) -> tuple[str, str]:
    """(the ticket's key, a link to it) from the sink's answer; ValueError when the answer is not its shape."""
    if config.kind == "jira":
        if not isinstance(answer, dict) or not isinstance(answer.get("key"), str):
            raise ValueError("Jira's answer has no issue key")
        key = answer["key"][:64]
        return key, f"{config.url}/browse/{key}"
    result = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("sys_id"), str):
        raise ValueError("ServiceNow's answer has no result.sys_id")
    number = str(result.get("number") or result["sys_id"])[:64]
    return number, f"{config.url}/nav_to.do?uri=incident.do?sys_id={result['sys_id'][:64]}"


@dataclass
class TicketActuator:
    """`open_ticket` filed in Jira or ServiceNow. `incident_of(proposal_id)`: the incident a proposal remedies
    (for the ticket's text); `secret`: the token file's content, read when the service starts."""

    config: TicketConfig
    secret: str = field(repr=False)
    incident_of: Any = None

    @classmethod
    def configured(cls, config: TicketConfig, incident_of: Any = None) -> TicketActuator | None:
        if not config.enabled:
            return None
        return cls(config, read_secret(config.token_file), incident_of)

    def _headers(self) -> dict[str, str]:
        if self.config.user:
            pair = base64.b64encode(f"{self.config.user}:{self.secret}".encode()).decode()
            auth = f"Basic {pair}"
        else:
            auth = f"Bearer {self.secret}"
        return {"Content-Type": "application/json", "Accept": "application/json", "Authorization": auth}

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind != "open_ticket":
            return ActuationResult(False, error=f"the ticket sink files open_ticket, not {action.kind}")
        incident_id = str(self.incident_of(action.proposal_id) or "") if self.incident_of else ""
        url, body = ticket_request(self.config, action, incident_id)
        if dry_run:
            return ActuationResult(True, {"dry_run": True, "sink": self.config.kind, "would_post": url})
        try:
            answer = outbound.request(
                "POST",
                url,
                body=json.dumps(body).encode(),
                headers=self._headers(),
                timeout_s=self.config.timeout_s,
                max_bytes=256 * 1024,
                secrets=[self.secret],
            ).raise_for_status()
            key, link = filed(self.config, answer.json())
        except (OutboundError, ValueError) as exc:
            return ActuationResult(False, {"sink": self.config.kind}, error=f"no ticket filed: {exc}"[:500])
        return ActuationResult(True, {"sink": self.config.kind, "ticket": key, "url": link})

    def bind(self, action: Action) -> TicketActuator:
        """This sink with `action`'s incident read now (from the workspace, still open), so that `apply`
        reads no store: the POST is made with the workspace closed (Guardrails.begin)."""
        incident_id = str(self.incident_of(action.proposal_id) or "") if self.incident_of else ""
        return dataclasses.replace(self, incident_of=lambda _proposal_id: incident_id)

    def read_back(self, action: Action) -> dict[str, Any]:
        return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        return ActuationResult(
            True, {"restored": f"nothing: a filed ticket stays; close it in {self.config.kind}"}
        )
