"""Slurm actuator: the node and job actions a Slurm cluster carries out, through `scontrol` (an argument list,
never a shell; every name validated before it reaches a command line). Checked against Debian's slurm-wlm
22.05 (docs/SLURM.md). A job's read-back is `squeue --json` (22.05's scontrol has no `--json`; squeue's dumps
every job the controller holds), found by id: structured data, so a job named `x JobState=COMPLETED
Restarts=7 ExcNodeList=node-spoofed` is a name, not fields (the one-line `scontrol show job -o` form was parsed
by its first `Key=`, and such a name spoofed the fields the actuator verifies and its rollback: issue 36).

| kind        | target                    | apply                                                        | rollback |
| drain_node  | this node                 | `scontrol update nodename=N state=drain reason=R`            | `state=resume` (or the drain it replaced) |
| resume_node | this node                 | `scontrol update nodename=N state=resume` (nothing when not drained) | the drain (and reason) it lifted |
| reboot_node | this node                 | `scontrol reboot ASAP nextstate=resume reason=R N`           | `scontrol cancel_reboot N`, then resume |
| restart_job | `job:slurm-<id>`          | `scontrol requeue <id>` (a batch job: back to pending)       | none: a requeue cannot be undone |
| migrate_job | `job:slurm-<id>`, the node | `requeuehold`, `update jobid=<id> ExcNodeList=N`, `release`  | `ExcNodeList=` its previous value |

`N` is the Slurm name of the node this actuator runs for (`node_name`); a node-kind target must be that node's
component name (`component`, default `node_name`). `R` is `aiops <proposal id>: <reason_code>`, cut to the
alphabet and length Slurm keeps. Read-back: `scontrol show node -o N` (State=IDLE+DRAIN..., Reason=...) and
`squeue --json` (restart_cnt, excluded_nodes, job_state). migrate_job: 22.05 has no "requeue elsewhere";
holding the requeued job, excluding the node and releasing it is the documented sequence (scontrol(1):
requeuehold, `update ExcNodeList`, release).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiops.errors import SchedulerError
from guardrails.actions import Action
from guardrails.actuators import ActuationResult

KINDS = ("drain_node", "resume_node", "reboot_node", "restart_job", "migrate_job")
DEFAULT_TIMEOUT_S = 15.0
MAX_OUTPUT_BYTES = 64 * 1024
MAX_JSON_BYTES = 64 * 1024 * 1024  # `squeue --json` lists every job the controller holds
MAX_JOBS_PER_NODE = 64
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", re.ASCII)
_JOB_TARGET = re.compile(r"^job:slurm-([0-9]{1,10}(?:_[0-9]{1,10})?)$", re.ASCII)
_JOB_ID = re.compile(r"^[0-9]{1,10}(?:_[0-9]{1,10})?$", re.ASCII)
_REASON_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/ -]+", re.ASCII)
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(\S*)", re.ASCII)
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?: \[[^\]]*\])?(?=\s+[A-Za-z][A-Za-z0-9_]*=|\s*$)", re.ASCII)
REASON_MAX = 100


def _fields(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for match in _FIELD.finditer(text):
        found.setdefault(match.group(1), match.group(2))
    return found


def _number(value: Any) -> int | None:
    """squeue --json's ids: an int, or (23.02 and later) {"set": bool, "number": int}."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_job(job: Mapping[str, Any], job_id: str) -> bool:
    """Whether squeue's `job` is `job_id`: `123` (its job_id) or an array task `123_4`."""
    if "_" in job_id:
        array, task = job_id.split("_", 1)
        return _number(job.get("array_job_id")) == int(array) and _number(job.get("array_task_id")) == int(
            task
        )
    return _number(job.get("job_id")) == int(job_id)


def drain_reason(action: Action) -> str:
    """`aiops <proposal id>: <reason_code>` in Slurm's safe alphabet, at most REASON_MAX characters."""
    code = str(action.parameters.get("reason_code") or action.kind)
    return _REASON_UNSAFE.sub("-", f"aiops {action.proposal_id}: {code}")[:REASON_MAX].strip()


class SlurmActuator:
    """The Actuator protocol for Slurm's node and job actions on the node `node_name`.

    `binaries`: the directory holding `scontrol` and `squeue` (None: found on PATH); `env`: the clients'
    environment (SLURM_CONF), None for this process's own."""

    def __init__(
        self,
        node_name: str,
        binaries: Path | None = None,
        *,
        component: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not _NODE.match(node_name):
            raise ValueError(f"Slurm node name {node_name!r}: 1-63 letters, digits or _.- expected")
        self.node = node_name
        self.component = component or node_name
        self.binaries = binaries
        self.env = None if env is None else dict(env)
        self.timeout_s = timeout_s
        self._moved: OrderedDict[str, list[str]] = OrderedDict()  # proposal id -> jobs a node action moved

    # -- commands ---------------------------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        return str(self.binaries / name) if self.binaries is not None else name

    def _run(self, argv: Sequence[str], max_bytes: int = MAX_OUTPUT_BYTES) -> str:
        cmd = [self._bin(argv[0]), *argv[1:]]
        try:
            done = subprocess.run(
                cmd,
                capture_output=True,
                timeout=self.timeout_s,
                env=self.env,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SchedulerError(f"{' '.join(argv)}: {type(exc).__name__}: {exc}") from exc
        if len(done.stdout) > max_bytes:
            raise SchedulerError(f"{' '.join(argv)}: more than {max_bytes} bytes of output")
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            said = done.stderr[:500].decode("utf-8", "replace").strip()
            raise SchedulerError(f"{' '.join(argv)} exited {done.returncode}: {said}")
        return out

    def node_state(self) -> dict[str, Any]:
        """{"state": "IDLE+DRAIN", "flags": [...], "drain": bool, "reboot": bool, "reason": str}."""
        text = self._run(["scontrol", "show", "node", "-o", self.node])
        state = _fields(text).get("State", "")
        flags = [f for f in state.split("+") if f]
        reason = _REASON.search(text)
        reason_text = reason.group(1).strip() if reason else ""
        return {
            "state": state,
            "drain": "DRAIN" in flags,
            "reboot": any(f.startswith("REBOOT") for f in flags),
            "reason": "" if reason_text in ("(null)", "None") else reason_text,
        }

    def is_drained(self, node: str) -> bool:
        """Whether `node` (this actuator's component) is drained in Slurm: the DRAIN flag and nothing left
        running on it (IDLE or DOWN; DRAINING, MIXED+DRAIN or ALLOCATED+DRAIN are not yet). What a GPU reset
        waits for (guardrails/actuators_nvml_ops.py); any other node, or an unreadable state, is not."""
        if node != self.component:
            return False
        try:
            state = self.node_state()
        except SchedulerError:
            return False
        base = str(state["state"]).split("+", 1)[0].rstrip("*")
        return bool(state["drain"]) and base in ("IDLE", "DOWN", "DRAINED")

    def job_state(self, job_id: str) -> dict[str, Any]:
        """{"job_state", "restarts", "exc_nodes"} of job `job_id` (`123` or an array task `123_4`) from
        `squeue --json`; a SchedulerError when the controller does not hold it or the answer is not JSON."""
        if not _JOB_ID.match(job_id):
            raise SchedulerError(f"{job_id[:40]!r} is not a Slurm job id")
        text = self._run(["squeue", "--json"], max_bytes=MAX_JSON_BYTES)
        try:
            jobs = json.loads(text).get("jobs")
        except (ValueError, RecursionError, AttributeError):
            raise SchedulerError("squeue --json: the answer is not a JSON object") from None
        job = (
            next((j for j in jobs if isinstance(j, dict) and _is_job(j, job_id)), None)
            if isinstance(jobs, list)
            else None
        )
        if job is None:
            raise SchedulerError(f"squeue --json: no job {job_id} in the controller")
        state = job.get("job_state")
        if isinstance(state, list):  # 23.02 and later: a list of flags, the base state first
            state = "+".join(str(s) for s in state)
        restarts, excluded = job.get("restart_cnt"), job.get("excluded_nodes")
        return {
            "job_state": str(state or "")[:40],
            "restarts": restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else None,
            "exc_nodes": excluded[:1024] if isinstance(excluded, str) and excluded != "(null)" else "",
        }

    def _node_jobs(self) -> list[str]:
        out = self._run(["squeue", "-h", "-w", self.node, "-t", "RUNNING,SUSPENDED", "-o", "%i"])
        jobs = [j for j in out.split() if _JOB_ID.match(j)]
        return jobs[:MAX_JOBS_PER_NODE]

    # -- targets ----------------------------------------------------------------------------------------
    def _jobs_of(self, action: Action) -> list[str]:
        match = _JOB_TARGET.match(action.target)
        if match:
            return [match.group(1)]
        if action.kind == "migrate_job" and action.target == self.component:
            # the jobs this action moved (they no longer run here, so squeue cannot list them again)
            return self._moved.get(action.proposal_id) or self._node_jobs()
        raise SchedulerError(
            f"{action.kind}: target {action.target!r} is not job:slurm-<id>"
            + (f" or this node ({self.component})" if action.kind == "migrate_job" else "")
        )

    def _check_node_target(self, action: Action) -> None:
        if action.target != self.component:
            raise SchedulerError(
                f"{action.kind}: target {action.target!r} is not this actuator's node {self.component!r}"
            )

    def commands(self, action: Action) -> list[list[str]]:
        """The scontrol calls `apply` would make, in order (what a dry run shows)."""
        reason = drain_reason(action)
        if action.kind == "drain_node":
            self._check_node_target(action)
            return [["scontrol", "update", f"nodename={self.node}", "state=drain", f"reason={reason}"]]
        if action.kind == "reboot_node":
            self._check_node_target(action)
            return [["scontrol", "reboot", "ASAP", "nextstate=resume", f"reason={reason}", self.node]]
        if action.kind == "resume_node":
            self._check_node_target(action)
            return [["scontrol", "update", f"nodename={self.node}", "state=resume"]]
        if action.kind == "restart_job":
            return [["scontrol", "requeue", job] for job in self._jobs_of(action)]
        if action.kind == "migrate_job":
            cmds: list[list[str]] = []
            for job in self._jobs_of(action):
                cmds += [
                    ["scontrol", "requeuehold", job],
                    ["scontrol", "update", f"jobid={job}", f"ExcNodeList={self.node}"],
                    ["scontrol", "release", job],
                ]
            return cmds
        raise SchedulerError(f"{action.kind}: not a Slurm action (Slurm carries out {', '.join(KINDS)})")

    # -- protocol ---------------------------------------------------------------------------------------
    def _observe(self, action: Action) -> dict[str, Any]:
        if action.kind in ("drain_node", "resume_node", "reboot_node"):
            return self.node_state()
        return {job: self.job_state(job) for job in self._jobs_of(action)}

    def _expected(self, action: Action, previous: dict[str, Any]) -> dict[str, Any]:
        if action.kind == "drain_node":
            return {"drain": True, "reason": drain_reason(action)}
        if action.kind == "resume_node":
            return {"drain": False}
        if action.kind == "reboot_node":
            return {"reboot": True}
        expected: dict[str, Any] = {}
        for job, before in previous.items():
            want: dict[str, Any] = {"restarts": (before.get("restarts") or 0) + 1}
            if action.kind == "migrate_job":
                want["exc_nodes"] = self.node
            expected[job] = want
        return expected

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        try:
            commands = self.commands(action)
            previous = self._observe(action)
        except SchedulerError as exc:
            return ActuationResult(False, error=str(exc))
        expected = self._expected(action, previous)
        if action.kind == "resume_node" and not previous.get("drain"):
            commands = []  # in service already (22.05 refuses to resume a node that is not drained)
        if dry_run:
            return ActuationResult(True, {"dry_run": True, "commands": commands}, previous, expected)
        if action.kind == "migrate_job":
            self._moved[action.proposal_id] = list(previous)
            while len(self._moved) > MAX_JOBS_PER_NODE:
                self._moved.popitem(last=False)
        done: list[list[str]] = []
        for cmd in commands:
            try:
                self._run(cmd)
            except SchedulerError as exc:
                return ActuationResult(False, {"commands": done}, previous, expected, str(exc))
            done.append(cmd)
        return ActuationResult(True, {"commands": done}, previous, expected)

    def read_back(self, action: Action) -> dict[str, Any]:
        """What Slurm shows now, in `expected`'s shape (a job action: its fields for each job, so the
        executor's comparison of `expected` per job holds)."""
        observed = self._observe(action)
        if action.kind in ("restart_job", "migrate_job"):
            keys = ("restarts", "exc_nodes") if action.kind == "migrate_job" else ("restarts",)
            return {job: {k: state.get(k) for k in keys} for job, state in observed.items()}
        return observed

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        try:
            if action.kind in ("drain_node", "resume_node"):
                self._restore_node(previous)
            elif action.kind == "reboot_node":
                self._run(["scontrol", "cancel_reboot", self.node])
                self._restore_node(previous)
            elif action.kind == "migrate_job":
                for job, before in previous.items():
                    if _JOB_ID.match(job):
                        self._run(
                            [
                                "scontrol",
                                "update",
                                f"jobid={job}",
                                f"ExcNodeList={before.get('exc_nodes', '')}",
                            ]
                        )
            else:
                return ActuationResult(False, error=f"{action.kind}: a requeue cannot be undone")
            restored = self._observe(action)
        except SchedulerError as exc:
            return ActuationResult(False, error=f"rollback: {exc}")
        return ActuationResult(True, {"restored": previous, "observed": restored})

    def _restore_node(self, previous: dict[str, Any]) -> None:
        """Back to the drain (and reason) `previous` had; nothing sent when the node already is there
        (`cancel_reboot` clears the ASAP drain itself, and 22.05 refuses to resume an undrained node)."""
        now = self.node_state()
        if previous.get("drain") and now["drain"] and now["reason"] == previous.get("reason"):
            return
        if not previous.get("drain") and not now["drain"]:
            return
        if previous.get("drain"):
            reason = _REASON_UNSAFE.sub("-", str(previous.get("reason") or "restored"))[:REASON_MAX]
            self._run(["scontrol", "update", f"nodename={self.node}", "state=drain", f"reason={reason}"])
        else:
            self._run(["scontrol", "update", f"nodename={self.node}", "state=resume"])
