"""A node agent's dispatch endpoint as the fleet reaches it: where a host's agent listens and which /api token
it takes (`NodeDirectory`), and the POST with its answer read as hostile data (`post_json`, `NodeAnswer`).
aiops/fleet/dispatch.py decides what is sent."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops import outbound
from aiops.config import FleetConfig
from aiops.errors import OutboundError
from aiops.labels import is_host_name

MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class NodeAnswer:
    http_status: int | None  # None: no answer (connection refused, timeout)
    body: dict[str, Any]
    error: str = ""


def post_json(url: str, body: dict[str, Any], token: str, timeout_s: float) -> NodeAnswer:
    """POST `body` to `url`; the answer's JSON object (at most `MAX_ANSWER_BYTES`), or why there is none. No
    redirect is followed (a node agent never redirects: a 3xx is an answer, not a new destination)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = outbound.post_json(
            url, body, headers=headers, timeout_s=timeout_s, max_bytes=MAX_ANSWER_BYTES
        )
    except OutboundError as exc:  # refused, unreachable, timed out, too big, a malformed URL
        return NodeAnswer(exc.status, {}, exc.reason[:200])
    try:
        decoded = reply.json()
    except OutboundError:
        decoded = None
    if not isinstance(decoded, dict):
        return NodeAnswer(reply.status, {}, "the answer is not a JSON object")
    return NodeAnswer(reply.status, decoded)


class NodeDirectory:
    """Where a host's agent listens and which token it takes: `[fleet.nodes]`, else `[fleet] node_url` filled
    with the host, which must be a valid host name (aiops.labels.is_host_name: no `:`, `/`, `#`, `@` or
    space can pass); the token from `[fleet] node_token_dir`/<host> when set, else `node_token_file`'s."""

    def __init__(self, fleet: FleetConfig, token: str = "") -> None:
        self.fleet, self.token = fleet, token

    def url(self, host: str) -> str | None:
        """The host's /api/dispatch URL; None when the host is no valid name or the template would not give a
        URL whose host is the template's own with `{host}` replaced."""
        if not is_host_name(host):
            return None
        configured = self.fleet.nodes.get(host)
        if configured:
            return configured.rstrip("/") + "/api/dispatch"
        filled = self.fleet.node_url.replace("{host}", host)
        template = urllib.parse.urlsplit(self.fleet.node_url.replace("{host}", "h0st"))
        made = urllib.parse.urlsplit(filled)
        try:
            same_port = made.port == template.port
        except ValueError:
            return None
        expected = (template.hostname or "").replace("h0st", host)
        if made.hostname != expected or not same_port or made.path != template.path.replace("h0st", host):
            return None
        return filled.rstrip("/") + "/api/dispatch"

    def token_for(self, host: str) -> str | None:
        """The host's /api token ("" for none configured); None when `node_token_dir` is set and holds none
        for it (nothing is sent then)."""
        folder = self.fleet.node_token_dir
        if not folder:
            return self.token
        if not is_host_name(host):
            return None
        try:
            return (Path(folder) / host).read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError):
            return None
