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
