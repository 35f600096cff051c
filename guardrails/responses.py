"""The response policy: a YAML file that says how the control loop answers a DCIM signal, which responses may
run automatically (inside an envelope) and which are only proposed to a person. See docs/POWER.md.

```yaml
version: 1
rules:
  - {rule_id: dcim-cap, on: dcim_cap, respond: apply_allocator, mode: automatic,
     envelope: {min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 1.0, max_step_w: 150}}
  - {rule_id: shed-load, on: dcim_cap, respond: migrate_jobs, mode: propose, when: infeasible}
```

Only power-limit responses (`set_power_limit`, `AUTOMATIC_KINDS`) may be automatic; placement, cooling, resets,
reboots and drains are proposals whatever a file says: asking for more is an error naming the field and the
allowed values. An envelope can only narrow the guardrails' own (40-100 % of TDP, 150 W per step).

A file runs automatically only while a person's approval of its exact bytes (sha256) is in the audit log
(`guardrails.standing`). This module is pure: parse, validate, hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aiops.errors import ResponsePolicyError
from aiops.safeload import MAX_FILE_BYTES, decode_text, parse_yaml, read_limited
from guardrails.envelope import Envelope

DEFAULT_RESPONSES_PATH = Path(
    str(resources.files("aiops") / "data" / "default_responses.yaml")
)  # package data

Signal = Literal["dcim_cap", "dcim_clear"]
Respond = Literal["apply_allocator", "restore_limits", "migrate_jobs", "adjust_cooling"]
Mode = Literal["automatic", "propose"]
ScopeKind = Literal["rack", "fleet"]
SIGNALS: tuple[str, ...] = ("dcim_cap", "dcim_clear")
_ALL_SCOPES: tuple[ScopeKind, ...] = ("rack", "fleet")
MODES: tuple[str, ...] = ("automatic", "propose")
# The closed list of action kinds a policy may run without a person: power limits only.
AUTOMATIC_KINDS: frozenset[str] = frozenset({"set_power_limit"})


@dataclass(frozen=True)
class ResponseSpec:
    respond: str
    kind: str  # the action kind it proposes (guardrails.registry)
    signals: tuple[str, ...]  # the signals it answers
    description: str

    @property
    def automatic_allowed(self) -> bool:
        return self.kind in AUTOMATIC_KINDS


RESPONSES: dict[str, ResponseSpec] = {
    s.respond: s
    for s in (
        ResponseSpec(
            "apply_allocator",
            "set_power_limit",
            ("dcim_cap",),
            "per-GPU power limits from the budget allocator (aiops.control.power)",
        ),
        ResponseSpec(
            "restore_limits",
            "set_power_limit",
            ("dcim_clear",),
            "raise limits this policy lowered back to the envelope's maximum",
        ),
        ResponseSpec(
            "migrate_jobs",
            "migrate_job",
            ("dcim_cap",),
            "move the lowest-priority job out of the capped rack",
        ),
        ResponseSpec(
            "adjust_cooling",
            "set_cooling_state",
            ("dcim_cap", "dcim_clear"),
            "set the capped rack's cooling to cooling_fraction",
        ),
    )
}


class _Strict(BaseModel):
    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ResponseRule(_Strict):
    rule_id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,47}$")
    on: Signal
    respond: Respond
    mode: Mode = "propose"
    scopes: list[ScopeKind] = Field(default_factory=lambda: list(_ALL_SCOPES), min_length=1)
    envelope: Envelope = Envelope()
    step_interval_s: float = Field(default=30.0, ge=0, le=3600)  # between two automatic steps on a GPU
    when: Literal["always", "infeasible"] = "always"  # infeasible: only when the cap cannot be met
    non_gpu_w_per_node: float | None = Field(default=None, ge=0, le=100_000)  # None: measured
    cooling_fraction: float | None = Field(default=None, ge=0.6, le=1.0)  # adjust_cooling only
    description: str = Field(default="", max_length=500)

    @property
    def spec(self) -> ResponseSpec:
        return RESPONSES[self.respond]

    @property
    def proposer(self) -> str:
        return f"policy:{self.rule_id}"

    @property
    def automatic(self) -> bool:
        return self.mode == "automatic"


class ResponsePolicy(_Strict):
    version: Literal[1] = 1
    rules: list[ResponseRule] = Field(min_length=1, max_length=64)

    @property
    def approvals_required(self) -> int:
        """Distinct people who must approve the file: two when an automatic rule may act on the whole fleet
        (as for a manual physical action on `fleet`, guardrails.registry), else one."""
        fleet = any(r.automatic and "fleet" in r.scopes for r in self.rules)
        return 2 if fleet else 1

    def rule(self, rule_id: str) -> ResponseRule | None:
        return next((r for r in self.rules if r.rule_id == rule_id), None)

    def rules_for(self, signal: str, scope_kind: str) -> list[ResponseRule]:
        return [r for r in self.rules if r.on == signal and scope_kind in r.scopes]

    def automatic_summary(self) -> dict[str, dict[str, Any]]:
        """What the automatic rules may do: recorded with each approval (the audit log stands alone)."""
        return {
            r.rule_id: {
                "kinds": [r.spec.kind],
                "on": r.on,
                "scopes": list(r.scopes),
                "envelope": r.envelope.model_dump(mode="json"),
            }
            for r in self.rules
            if r.automatic
        }


@dataclass(frozen=True)
class LoadedPolicy:
    path: str
    sha256: str  # of the file's bytes: what an approval binds to
    policy: ResponsePolicy

    @property
    def approvals_required(self) -> int:
        return self.policy.approvals_required

    def automatic_summary(self) -> dict[str, dict[str, Any]]:
        return self.policy.automatic_summary()


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 booleans (true/false only): `on:` is a key here, not YAML 1.1's boolean True."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _field_name(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


_MODELS: dict[str, type[BaseModel]] = {"rules": ResponseRule, "envelope": Envelope}


def _known_keys(loc: Sequence[int | str]) -> list[str]:
    model: type[BaseModel] = ResponsePolicy
    for part in loc[:-1]:
        if isinstance(part, str) and part in _MODELS:
            model = _MODELS[part]
    return sorted(model.model_fields)


def _allowed(error: Any) -> Sequence[str] | None:
    expected = (error.get("ctx") or {}).get("expected")
    if expected is None:
        return None
    return [w.strip() for w in re.split(r"[',]+| or ", str(expected)) if w.strip()]


def _check(policy: ResponsePolicy, path: str) -> None:
    """What pydantic cannot say with a field name: duplicates, responses that do not answer the signal,
    automatic modes for kinds that never run without a person, and missing response parameters."""
    seen: set[str] = set()
    automatic_ok = sorted(r for r, s in RESPONSES.items() if s.automatic_allowed)
    for i, rule in enumerate(policy.rules):
        where = f"rules[{i}]"
        if rule.rule_id in seen:
            raise ResponsePolicyError(path, f"{where}.rule_id", f"rule_id '{rule.rule_id}' is repeated")
        seen.add(rule.rule_id)
        spec = rule.spec
        if rule.on not in spec.signals:
            answers = sorted(r for r, s in RESPONSES.items() if rule.on in s.signals)
            raise ResponsePolicyError(
                path, f"{where}.respond", f"{rule.respond} does not answer {rule.on}", answers
            )
        if rule.automatic and not spec.automatic_allowed:
            raise ResponsePolicyError(
                path,
                f"{where}.mode",
                f"{rule.respond} ({spec.kind}) can never be automatic: only power limits "
                f"({', '.join(sorted(AUTOMATIC_KINDS))}) run without a person; use mode: propose "
                f"(automatic responses: {', '.join(automatic_ok)})",
                ["propose"],
            )
        if rule.respond == "adjust_cooling" and rule.cooling_fraction is None:
            raise ResponsePolicyError(path, f"{where}.cooling_fraction", "adjust_cooling needs it", "0.6-1.0")
        if rule.when == "infeasible" and rule.on != "dcim_cap":
            raise ResponsePolicyError(
                path, f"{where}.when", "infeasible applies to dcim_cap only", ["always"]
            )


def parse_response_policy(data: Any, path: str = "<responses>") -> ResponsePolicy:
    """Validate parsed YAML; raises ResponsePolicyError naming the file, the field and the allowed values."""
    if not isinstance(data, dict):
        raise ResponsePolicyError(path, "(top level)", "a response policy is a mapping with 'rules'")
    try:
        policy = ResponsePolicy.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = _field_name(error["loc"])
        if error["type"] == "extra_forbidden":
            raise ResponsePolicyError(path, field, "unknown key", _known_keys(error["loc"])) from None
        problem = str(error["msg"]).removeprefix("Value error, ")
        raise ResponsePolicyError(path, field, problem, _allowed(error)) from None
    _check(policy, path)
    return policy


def parse_response_bytes(data: bytes, path: str) -> LoadedPolicy:
    if len(data) > MAX_FILE_BYTES:
        raise ResponsePolicyError(path, "(file)", f"larger than the limit of {MAX_FILE_BYTES} bytes")
    text = decode_text(data, path, ResponsePolicyError)
    parsed = parse_yaml(text, path, ResponsePolicyError, _Yaml12Loader)
    return LoadedPolicy(path, file_sha256(data), parse_response_policy(parsed, path))


def load_response_policy(path: str | Path | None = None) -> LoadedPolicy:
    """Read, hash and validate a response policy file (the shipped default when `path` is None)."""
    where = Path(path) if path is not None else DEFAULT_RESPONSES_PATH
    return parse_response_bytes(read_limited(where, ResponsePolicyError), str(where))
