"""`aiops config example`: a config file with every section, key and default, each explained."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from aiops.config import Config
from aiops.config_chatops import EXAMPLE_LINES as CHATOPS_EXAMPLE


def example_toml() -> str:
    """A config file with every section, key and default, each explained."""
    config = Config()
    lines = [
        "# aiops configuration (aiops config check FILE validates it; every key is optional).",
        "# The values below are the defaults.",
    ]

    def emit(name: str, model: BaseModel) -> None:
        lines.append("")
        lines.append(f"[{name}]")
        for key, field in type(model).model_fields.items():
            value = getattr(model, key)
            inline = (
                isinstance(value, dict) and bool(value) and all(isinstance(v, str) for v in value.values())
            )
            if (
                key == "source"
                or isinstance(value, BaseModel | list)
                or (isinstance(value, dict) and not inline)
            ):
                continue
            comment = f"  # {field.description}" if field.description else ""
            unset = "# " if value is None else ""  # no default: left out (TOML has no null)
            lines.append(f"{unset}{key} = {_toml(value)}{comment}")

    for section in Config.model_fields:
        if section == "source":
            continue
        value = getattr(config, section)
        emit(section, value)
        for key in type(value).model_fields:
            child = getattr(value, key)
            if isinstance(child, BaseModel):
                emit(f"{section}.{key}", child)
        if section == "node":
            lines += [
                "# one file for many nodes: each host finds itself by hostname (the pod's, with hostNetwork)",
                "# (an unlisted host is named after itself, in [node] rack)",
                "# [node.hosts]",
                '# "gpu-a-17" = { name = "gpu-a-17", rack = "row-b" }',
            ]
        if section == "facility":
            lines += [
                "# a series without the rack label: its instance label -> rack (docs/FACILITY.md)",
                "# [facility.racks]",
                '# "10.0.4.17:623" = "rack2"',
                "# another exporter for a column: set metric, match, aggregate and scale in its section above",
            ]
        if section == "console":
            lines += [
                '# scopes = ["openid", "profile", "email"]  # the default',
                '# allowed_domains = ["example.com"]  # only these e-mail domains (verified); empty: any',
                "# allowed_subjects = []  # only these subjects (sub); empty: any",
                "# a claim value -> a console role (no value mapped: refused) (docs/CONSOLE.md)",
                "# [console.oidc.role_map]",
                '# "aiops-admins" = "admin"',
            ]
        if section == "guardrails":
            lines += [
                "# who may approve what (docs/SECURITY.md): physical proposals, response policies, and",
                "# overrides of the circuit breaker (aiops actions override; docs/GUARDRAILS.md)",
                "# [guardrails.approvers]",
                '# alice = ["physical", "policy", "breaker"]',
            ]
        if section == "chatops":
            lines += list(CHATOPS_EXAMPLE)
        if section == "notify":
            lines += [
                "# one table per sink; kind: json (generic), slack (incoming webhook), alertmanager (v2 alerts",
                "# API), teams (Workflows webhook URL), pagerduty (Events API v2; url defaults to its enqueue URL)",
                "# [[notify.webhooks]]",
                '# url = "https://hooks.example.com/aiops"',
                '# kind = "json"',
                '# url_file = "/etc/aiops/teams.url"  # instead of url: a file holding it (a URL with a secret)',
                "# [[notify.webhooks]]",
                '# kind = "pagerduty"',
                '# routing_key_file = "/etc/aiops/pagerduty.key"  # the integration key, never inline',
            ]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return '""'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
