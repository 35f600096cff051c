"""`[chatops]`: acting from chat (docs/CHATOPS.md). One section for now, `[chatops.slack]`: a Slack app that
posts incident messages with Approve/Reject buttons (chat.postMessage with a bot token) and receives the
button presses on the service's listener (`POST /api/slack/actions`, verified with the app's signing secret).

Slack users are mapped to principals of `[guardrails.approvers]`; what a Slack approval may approve is
`approval_classes` (default digital only) and, for physical, also the principal's own approvers classes.
Whether every mapped principal is in `[guardrails.approvers]` is checked when the service starts
(`check_users`), since this section does not see that one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aiops.errors import ConfigError

# Slack's ids: users U…/W… (Enterprise Grid), teams T…/E…, channels C…/G…/D…: upper-case letters and digits.
SLACK_ID = re.compile(r"^[A-Z0-9]{2,32}$")
ChatClass = Literal["digital", "physical"]
CHAT_CLASSES: tuple[str, ...] = get_args(ChatClass)
DEFAULT_API_URL = "https://slack.com/api"


class SlackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    signing_secret_file: str = Field(
        default="",
        description="the Slack app's signing secret, read from this file; empty: Slack is off "
        "(POST /api/slack/actions answers 404, nothing is posted)",
    )
    bot_token_file: str = Field(
        default="", description="the app's bot token (xoxb-…) for chat.postMessage, read from this file"
    )
    api_url: str = Field(
        default=DEFAULT_API_URL, description="Slack's Web API base URL (tests point it at a loopback server)"
    )
    channel: str = Field(
        default="", description="the channel incident messages go to (an id, e.g. C0123ABCD)"
    )
    users: dict[str, str] = Field(
        default_factory=dict,
        description="Slack user id -> principal; each principal must be in [guardrails.approvers]",
    )
    approval_classes: list[ChatClass] = Field(
        default_factory=lambda: list[ChatClass](["digital"]),
        description="what a Slack button may approve: digital, physical (physical also needs the principal's "
        "approvers classes)",
    )
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="a Web API call's timeout")

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s]+$", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("users")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        for user_id in value:
            if not SLACK_ID.match(user_id):
                raise ValueError(f"'{user_id[:40]}' is not a Slack user id (upper-case letters and digits)")
        return value

    @property
    def enabled(self) -> bool:
        return bool(self.signing_secret_file)


class ChatopsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slack: SlackConfig = Field(default_factory=SlackConfig)


def check_users(slack: SlackConfig, approvers: Mapping[str, Sequence[str]], source: str) -> None:
    """Every mapped principal is an approver; raises `ConfigError` naming the user's key otherwise."""
    for user_id, principal in slack.users.items():
        if principal not in approvers:
            raise ConfigError(
                source,
                f"chatops.slack.users.{user_id}",
                f"principal '{principal[:40]}' is not in [guardrails.approvers]",
                sorted(approvers) or "a principal of [guardrails.approvers]",
            )


EXAMPLE_LINES: tuple[str, ...] = (
    "# what a Slack button may approve: digital, physical (physical also needs [guardrails.approvers])",
    '# approval_classes = ["digital"]',
    "# Slack users who may press the buttons, as principals of [guardrails.approvers] (docs/CHATOPS.md)",
    "# [chatops.slack.users]",
    '# U0123ABCD = "alice"',
)
