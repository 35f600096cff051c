"""The project's exception tree: every exception class of aiops, collectors and guardrails is here. The CLI
prints `str(error)` (never a traceback) and exits with `exit_code`.

AiopsError                    base; exit code 1
├── InputError                a file or argument does not validate; names the file, field and allowed values; exit 2
│   ├── ScenarioError         a scenario file (aiops/scenarios.py)
│   ├── PolicyError           a lanes policy (aiops/datapath/policy.py)
│   ├── ResponsePolicyError   a response policy (guardrails/responses.py)
│   ├── DcimSignalError       a DCIM signal, from a file or the command line (aiops/control/dcim_signals.py)
│   └── ConfigError           the aiops config file (aiops/config.py): unknown key, wrong type, out of range
├── EvidenceError             nothing of what `aiops investigate` was given could be read or recognised; exit 2
│   └── BundleLimit           a bundle passed a bound (members, decompressed bytes, seconds): the rest is not
│                             read, the bundle is listed as refused (aiops/evidence/bundle.py)
├── PlaybookError             a playbook file does not validate (names the file and field); exit 2
├── MaintenanceError          a maintenance window or silence that cannot be added or ended (scope, target, times,
│                             reason, an unknown or finished window): the message says which; exit 2
├── PrometheusUnavailable     `--via prometheus`: prometheus/promtool missing, or the server would not start; exit 2
├── SchemaError               a DuckDB file is from a newer schema or is not ours; exit 2
│   └── DatabaseDamaged       the file is truncated or corrupt (aiops/store/faults.py); exit 2
├── StorageError              the database cannot be written: disk full, read-only or no permission; exit 2
├── TwinMismatch              a workspace's twin does not match its stored topology or run; exit 2
├── CalibrationError          the store cannot calibrate a what-if world (no topology, or not a regular grid:
│                             aiops/sim/calibrate.py); the what-if tool says so
├── StoreLocked               another process holds the database's lock (the workspace retries); exit 4
│   ├── WorkspaceBusy         still held after the workspace's lock timeout; names the holder; exit 4
│   └── ServiceRunning        another `aiops run` serves this workspace (one service per store); names its PID
├── IngestError               a batch does not fit its table (unknown table or column); exit 1
├── PrerequisiteError         something the command needs is missing (root, bcc, a device); says what; exit 3
├── LabProcessError           a process of the loopback cluster (aiops/lab/loopback.py: `make fleet-demo`) ended or
│                             never became ready; names it and its log; exit 1
├── ProfileTargetError        `aiops profile`: the process is gone or has no CUDA library mapped; exit 2
├── TcError                   a tc command failed (aiops/datapath/tc.py); carries the command and tc's words
├── AbiMismatch               a pinned BPF map's layout differs from aiops/datapath/abi.py
├── BpfError                  a bpf(2) command failed; also an OSError with its errno
├── SysfsError                a sysfs attribute could not be read, parsed or written; `path` names it
├── SchedulerError            a scheduler command (scontrol) failed, timed out or was refused; names the command and
│                             the scheduler's words (guardrails/actuators_slurm.py)
├── OutboundError             an outbound HTTP call (aiops/outbound.py) got no usable answer: `url` without
│   │                         credentials, `status` (None: no answer), `reason` (one escaped line, secrets
│   │                         replaced); exit 3
│   └── SourceError           a time-series engine (Prometheus, VictoriaMetrics) failed or answered badly; names
│                             the URL and the HTTP status and body (escaped); exit 3
├── AlertPayloadError         a POST to /api/alertmanager is not Alertmanager's version-4 webhook; `reason` is short
│                             ASCII naming the field, never its value (answered with HTTP 400)
├── DispatchError             a POST to /api/dispatch is not a dispatch (guardrails/dispatch_request.py);
│                             `reason` is short ASCII naming the field, never its value (answered with HTTP 400)
├── SlackRequestError         a POST to /api/slack/actions is not a Slack block_actions payload we sent buttons for;
│                             `reason` is short ASCII naming the field, never its value (aiops/service/slack_request.py)
├── AlertInboxFull            more alerts wait for the service's loop than its inbox holds (HTTP 503; Alertmanager
│                             retries)
├── SignInBusy                every console sign-in hashing turn stayed taken (HTTP 503: retry shortly)
├── ListBusy                  the service's flush holds the workspace and no kept read answers a /api list question
│                             (aiops/service/kept_answers.py): HTTP 503, `since_ts_s` the hold's start, Retry-After
├── SignInRefused             a single sign-on (OIDC) the console refuses: provider down, state or token wrong, no role;
│                             the page says why and nobody is signed in (aiops/console/oidc.py)
├── GuardrailError            the guardrails refused (unknown proposal, approval not allowed); `rule` names why
│   ├── SignatureRefused      a signed decision that does not verify, or a signer who may not decide it
│   ├── ApprovalRefused       the agent's view of it: an approval the guardrails would not record
│   ├── ExecutionRefused      the agent's view of it: the executor did not run the action
│   └── DispatchRefused       a node refused a dispatched proposal (guardrails/dispatched.py): `http_status`, `rule`
├── ScopeError                a chat question's time bound cannot be read (aiops/agent/scope.py); the chat says which
│                             words and what it accepts
├── LLMFailure                the LLM endpoint gave no usable turn (`kind`, `detail`); the analyst's answer stands
├── SQLRejected               a query the agent may not run, or one that failed (shown to the model)
└── ToolError                 an agent tool refused its arguments or failed (shown to the model)
    └── UnknownTool           the model called a tool that does not exist
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


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


class PlaybookError(AiopsError):
    exit_code = 2


class PrometheusUnavailable(AiopsError):
    """`aiops eval --via prometheus`: the Prometheus binaries are missing, or the server would not start."""

    exit_code = 2


class SchemaError(AiopsError):
    exit_code = 2


class DatabaseDamaged(SchemaError):
    """The database file is truncated or corrupt (DuckDB could not read a block, or its checksum failed)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"{path}: the database file is damaged (truncated or corrupt): {detail}; restore it from a backup "
            "or start a new workspace with another --db"
        )


class StorageError(AiopsError):
    """The database cannot be written (`problem`: the disk is full, a read-only directory); `fix` says what to do.
    A batch that failed this way was rolled back: nothing of it is in the database."""

    exit_code = 2

    def __init__(self, path: str, problem: str, fix: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}; {fix}")


class StoreLocked(AiopsError):
    """DuckDB's file lock is held by another process (`holder` names it when DuckDB says)."""

    exit_code = 4

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path}: locked by {holder}")


class WorkspaceBusy(StoreLocked):
    """The lock stayed held for the whole wait (aiops.store.workspace.Workspace)."""

    def __init__(self, path: str, holder: str, waited_s: float) -> None:
        super().__init__(path, holder)
        self.waited_s = waited_s
        self.args = (
            f"{path}: busy for {waited_s:.0f} s (lock held by {holder}); each command holds it only for a "
            "moment, so a long hold is a long write (a simulation, an import): retry when it ends",
        )


class ServiceRunning(StoreLocked):
    """One service per workspace: the service lock is held (`holder` is its PID)."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(path, f"PID {holder}")
        self.args = (
            f"{path}: another aiops run (PID {holder}) serves this workspace; one service per store",
        )


class IngestError(AiopsError):
    pass


class PrerequisiteError(AiopsError):
    exit_code = 3


class LabProcessError(AiopsError):
    """A process of a loopback cluster (aiops/lab/loopback.py) ended early or never became ready: `name`, what
    happened, and its `log` file when it has one."""

    def __init__(self, name: str, problem: str, log: Path | None = None) -> None:
        self.name = name
        self.problem = problem
        self.log = log
        super().__init__(f"{name}: {problem}" + (f" (its log: {log})" if log is not None else ""))


class ProfileTargetError(AiopsError):
    exit_code = 2


class GuardrailError(AiopsError):
    """A guardrail refusal a person should see: `rule` names the rule (approval, proposer, expired, ...)."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        self.detail = message
        super().__init__(f"{rule}: {message}")


class SignatureRefused(GuardrailError):
    """A signed decision that does not verify, or a signer who may not decide it (rule `signature`)."""

    def __init__(self, detail: str) -> None:
        super().__init__("signature", detail)


class ApprovalRefused(GuardrailError):
    """An approval the guardrails would not record (`rule`: approver, proposer, rejected, status, ...)."""


class ExecutionRefused(GuardrailError):
    """The executor did not run the action (`rule`: approval, envelope, rate_limit, no_backend, failed, ...)."""


class DispatchRefused(GuardrailError):
    """A node refused a proposal the fleet dispatched (`rule`: hash, replay, target, expired, unsigned, signature,
    window, two_person, validation, no_actuator); `http_status` is the answer's, `previous` a replay's status."""

    def __init__(self, http_status: int, rule: str, message: str, previous: str = "") -> None:
        super().__init__(rule, message)
        self.http_status = http_status
        self.previous = previous


class SQLRejected(AiopsError):
    """A query the agent may not run, or one that failed; the message says why (shown to the model)."""


class ToolError(AiopsError):
    """A tool refused its arguments or failed; the message goes back to the model as the tool's result."""


class UnknownTool(ToolError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"unknown tool '{name}' (tools: {', '.join(known)})")


class ConfigError(InputError):
    """The aiops config file does not validate: names the file, the key and the allowed values."""


class TwinMismatch(AiopsError):
    """The twin's cluster is not the workspace's stored topology (or its stored run cannot be read)."""

    exit_code = 2


class CalibrationError(AiopsError):
    """The store cannot calibrate a what-if world (no topology, or one that is not a regular grid)."""


class PolicyError(InputError):
    """A lanes policy file that does not validate."""


class ResponsePolicyError(InputError):
    """A response policy file that does not validate: names the file, the field and the allowed values."""


class DcimSignalError(InputError):
    """A DCIM signal (file or command line) that does not validate: names the source, field and allowed values."""


class TcError(AiopsError):
    """A tc command failed; carries the command and tc's message."""

    def __init__(self, argv: Sequence[str], stderr: str) -> None:
        self.argv, self.stderr = list(argv), stderr.strip()
        super().__init__(f"{' '.join(argv)}: {self.stderr or 'failed'}")


class AbiMismatch(AiopsError):
    """A pinned map's layout differs from abi.py (an old or foreign pin directory)."""


class BpfError(OSError, AiopsError):
    """A bpf(2) command failed; `errno` says why."""


class SysfsError(AiopsError):
    """A sysfs attribute that could not be read, parsed or written; `path` names the file."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class SchedulerError(AiopsError):
    """A scheduler client command that failed: the command and what the scheduler said (an actuation error)."""


class ScopeError(AiopsError):
    """A time the question gives that cannot be read: the message says which words and what is accepted."""


class LLMFailure(AiopsError):
    """The endpoint did not give a usable turn. `kind` and `detail` are shown to the person."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"LLM {kind}: {detail}")


class EvidenceError(AiopsError):
    """An evidence file for `aiops investigate` that cannot be read or whose format no parser recognises; the
    message names the file and the formats accepted."""

    exit_code = 2


class BundleLimit(EvidenceError):
    """A bundle passed one of its bounds (aiops/evidence/bundle.py `Limits`); caught by the investigation,
    which lists the bundle as refused."""


class MaintenanceError(AiopsError):
    """A maintenance window or silence that cannot be added or ended (aiops/runtime/maintenance.py): the message
    says why (scope, target, times, reason, a window that does not exist or is over)."""

    exit_code = 2


class AlertPayloadError(AiopsError):
    """The body of a POST to /api/alertmanager is not Alertmanager's version-4 webhook; `reason` is short, ASCII,
    safe to answer with."""

    exit_code = 2

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SlackRequestError(AiopsError):
    """A POST to /api/slack/actions (signature verified) whose `payload` is not a block_actions payload with one of
    our buttons; `reason` is short, names the field, echoes no value."""

    exit_code = 2

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class DispatchError(AiopsError):
    """The body of a POST to /api/dispatch is not a dispatch; `reason` is short, names the field, echoes no value."""

    exit_code = 2

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AlertInboxFull(AiopsError):
    """More alerts wait than the service's inbox holds: the route answers 503 and Alertmanager retries."""


class SignInBusy(AiopsError):
    """Every console sign-in hashing turn stayed taken for the whole wait (aiops.console.signin): HTTP 503."""


class ListBusy(AiopsError):
    """A /api list question asked while the service's flush holds the workspace, with no kept read that answers it
    (aiops/service/kept_answers.py): HTTP 503 with `Retry-After`; `since_ts_s` is when the hold began (None:
    not known)."""

    def __init__(self, since_ts_s: float | None, retry_after_s: int) -> None:
        super().__init__("busy: the service's flush holds the workspace and nothing read before answers this")
        self.since_ts_s = since_ts_s
        self.retry_after_s = retry_after_s


class SignInRefused(AiopsError):
    """A single sign-on refused; the message is shown on the console's page (plain words, no token or secret)."""


class OutboundError(AiopsError):
    """An outbound HTTP call (aiops/outbound.py) without a usable answer: `url` (no credentials, no query; a
    secret URL's origin only), `status` (None: no answer at all), `reason` (one printable line, secrets
    replaced by ***)."""

    exit_code = 3

    def __init__(self, url: str, status: int | None, reason: str) -> None:
        self.url = url
        self.status = status
        self.reason = reason
        answer = "no answer" if status is None else f"HTTP {status}"
        super().__init__(f"{url}: {answer}: {reason}")


class SourceError(OutboundError):
    """A time-series engine (`aiops analyze --prometheus`) failed: `url`, `status` (None without an answer)."""

    def __init__(self, url: str, status: int | None, detail: str) -> None:
        super().__init__(url, status, detail)
