"""Guardrails: every proposed action is validated by deterministic code (envelope, step, blast radius, rate
limit), physical actions need recorded human approval bound to the action's hash, and every step lands in a
hash-chained audit log. The LLM proposes; it never approves and never executes. See docs/GUARDRAILS.md."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardrails.actions import Action, action_hash
    from guardrails.actuators import ActuationResult, Actuator, RecordingActuator
    from guardrails.approvals import Approval, ApprovalBook, Authorisation, Rejection
    from guardrails.audit import AuditLog, VerifyResult, verify
    from guardrails.envelope import Envelope, GpuPower
    from guardrails.executor import ExecutionOutcome, Executor, MemoryLedger, unsafe_executions
    from guardrails.policy import Context, ExecutionRecord, RuleResult, Validation, validate
    from guardrails.proposal_desk import Guardrails
    from guardrails.registry import DEFAULT_REGISTRY, KINDS, KindSpec, Registry, Risk
    from guardrails.topology import Scope, Topology

# The names below load with their module on first use (PEP 562): `import guardrails.actions` alone (the action
# model, as `aiops investigate` reads the playbooks through it) must not pull in the store, DuckDB and Arrow.
_WHERE: dict[str, str] = {
    "Action": "guardrails.actions",
    "action_hash": "guardrails.actions",
    "ActuationResult": "guardrails.actuators",
    "Actuator": "guardrails.actuators",
    "RecordingActuator": "guardrails.actuators",
    "Approval": "guardrails.approvals",
    "ApprovalBook": "guardrails.approvals",
    "Authorisation": "guardrails.approvals",
    "Rejection": "guardrails.approvals",
    "AuditLog": "guardrails.audit",
    "VerifyResult": "guardrails.audit",
    "verify": "guardrails.audit",
    "Envelope": "guardrails.envelope",
    "GpuPower": "guardrails.envelope",
    "ExecutionOutcome": "guardrails.executor",
    "Executor": "guardrails.executor",
    "MemoryLedger": "guardrails.executor",
    "unsafe_executions": "guardrails.executor",
    "Context": "guardrails.policy",
    "ExecutionRecord": "guardrails.policy",
    "RuleResult": "guardrails.policy",
    "Validation": "guardrails.policy",
    "validate": "guardrails.policy",
    "DEFAULT_REGISTRY": "guardrails.registry",
    "KINDS": "guardrails.registry",
    "KindSpec": "guardrails.registry",
    "Registry": "guardrails.registry",
    "Risk": "guardrails.registry",
    "Guardrails": "guardrails.proposal_desk",
    "Scope": "guardrails.topology",
    "Topology": "guardrails.topology",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'guardrails' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_REGISTRY",
    "KINDS",
    "Action",
    "ActuationResult",
    "Actuator",
    "Approval",
    "ApprovalBook",
    "AuditLog",
    "Authorisation",
    "Context",
    "Envelope",
    "ExecutionOutcome",
    "ExecutionRecord",
    "Executor",
    "GpuPower",
    "Guardrails",
    "KindSpec",
    "MemoryLedger",
    "RecordingActuator",
    "Registry",
    "Rejection",
    "Risk",
    "RuleResult",
    "Scope",
    "Topology",
    "Validation",
    "VerifyResult",
    "action_hash",
    "unsafe_executions",
    "validate",
    "verify",
]
