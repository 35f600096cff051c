"""The project's exception tree. The CLI prints `str(error)` (never a traceback) and exits with `exit_code`.

AiopsError                    base; exit code 1
├── InputError                a file or argument does not validate; names the file, field and allowed values; exit 2
│   ├── ScenarioError         a scenario file (aiops/scenarios.py)
│   ├── PolicyError           a lanes policy (aiops/datapath/policy.py)
│   ├── ResponsePolicyError   a response policy (guardrails/responses.py)
│   └── DcimSignalError       a DCIM signal, from a file or the command line (aiops/control/power_inputs.py)
├── SchemaError               a DuckDB file is from a newer schema or is not ours; exit 2
├── IngestError               a batch does not fit its table (unknown table or column); exit 1
├── PrerequisiteError         something the command needs is missing (root, bcc, a device); says what; exit 3
└── GuardrailError            the guardrails refused (unknown proposal, approval not allowed); `rule` names why
"""

from __future__ import annotations

from collections.abc import Sequence


class AiopsError(Exception):
    exit_code = 1


class InputError(AiopsError):
    """Input that does not validate: `path` (file or source), `field`, `problem`, `allowed` values."""

    exit_code = 2

    def __init__(
        self, path: str, field: str, problem: str, allowed: Sequence[str] | str | None = None
    ) -> None:
        self.path = path
        self.field = field
        self.problem = problem
        self.allowed = allowed
        message = f"{path}: field '{field}': {problem}"
        if allowed:
            shown = allowed if isinstance(allowed, str) else ", ".join(allowed)
            message += f" (allowed: {shown})"
        super().__init__(message)


class ScenarioError(InputError):
    """A scenario file that does not follow the contract."""


class SchemaError(AiopsError):
    exit_code = 2


class IngestError(AiopsError):
    pass


class PrerequisiteError(AiopsError):
    exit_code = 3


class GuardrailError(AiopsError):
    """A guardrail refusal a person should see: `rule` names the rule (approval, proposer, expired, ...)."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"{rule}: {message}")
