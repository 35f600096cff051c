"""Guardrails: every proposed action is validated by deterministic code (envelope, step, blast radius, rate
limit), physical actions need recorded human approval bound to the action's hash, and every step lands in a
hash-chained audit log. The LLM proposes; it never approves and never executes. See docs/GUARDRAILS.md."""

from guardrails.actions import Action, action_hash
from guardrails.actuators import ActuationResult, Actuator, RecordingActuator
from guardrails.approvals import Approval, ApprovalBook, Authorisation, Rejection
from guardrails.audit import AuditLog, VerifyResult, verify
from guardrails.envelope import Envelope, GpuPower
from guardrails.executor import ExecutionOutcome, Executor, MemoryLedger, unsafe_executions
from guardrails.policy import Context, ExecutionRecord, RuleResult, Validation, validate
from guardrails.registry import DEFAULT_REGISTRY, KINDS, KindSpec, Registry, Risk
from guardrails.service import Guardrails
from guardrails.topology import Scope, Topology

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
