"""The action kinds the guardrails know: risk class, typed parameter envelope, rate limit, blast radius and
how many people must approve. Deterministic data; `aiops.playbooks` and the agent propose only these kinds.

Physical kinds move power, clocks, cooling, hardware state or where work runs; a mistake there can damage
hardware or kill jobs, so each needs recorded human approval. Digital kinds change configuration that is
cheap to undo (lanes, rules, tickets, checks) and run without approval when their validation passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from guardrails.actions import Action
from guardrails.envelope import POWER_MAX_FRACTION_OF_TDP, POWER_MAX_STEP_W, POWER_MIN_FRACTION_OF_TDP
from guardrails.topology import Scope


class Risk(StrEnum):
    DIGITAL = "digital"
    PHYSICAL = "physical"


@dataclass(frozen=True)
class Param:
    """One parameter's type and bounds. `kind`: number | integer | string | choice."""

    name: str
    kind: str
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    max_len: int = 200


@dataclass(frozen=True)
class KindSpec:
    kind: str
    risk: Risk
    targets: tuple[str, ...]  # component kinds it may target (labels.component_kind words)
    params: tuple[Param, ...] = ()
    one_of: tuple[str, ...] = ()  # exactly one of these parameters must be given
    rate_per_hour: int = 4  # executions per target unit (GPU, node, NIC) in a sliding hour
    max_gpus: int | None = None  # blast radius per action; None: not limited in GPUs
    max_nodes: int | None = None
    max_nics: int | None = None
    approvals: int = 1  # distinct people; 0 for digital kinds
    approval_ttl_s: float = 900.0
    max_step_w: float | None = None  # largest change of a GPU's power limit in one action
    description: str = ""
    changes: str = ""  # what it changes, for the rate limit: kinds that change the same thing count together

    @property
    def family(self) -> str:
        return self.changes or self.kind

    @property
    def physical(self) -> bool:
        return self.risk is Risk.PHYSICAL

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


CLOCK_MIN_FRACTION_OF_MAX = 0.5
TWO_PERSON_APPROVALS = 2

_TEXT = 200
_ANY = ("gpu", "node", "nic", "rack", "fleet", "job", "policy")
_LANES = ("vip", "standard", "bulk")

KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        # -- physical ---------------------------------------------------------------------------------------
        KindSpec(
            "set_power_limit",
            Risk.PHYSICAL,
            ("gpu", "node", "rack", "fleet"),
            (
                Param("power_limit_w", "number"),
                Param(
                    "fraction_of_tdp",
                    "number",
                    minimum=POWER_MIN_FRACTION_OF_TDP,
                    maximum=POWER_MAX_FRACTION_OF_TDP,
                ),
            ),
            one_of=("power_limit_w", "fraction_of_tdp"),
            rate_per_hour=4,
            max_gpus=32,
            max_step_w=POWER_MAX_STEP_W,
            description="cap GPU power (NVML power management limit)",
            changes="power_limit",
        ),
        KindSpec(
            "reset_power_limit",
            Risk.PHYSICAL,
            ("gpu", "node"),
            rate_per_hour=4,
            max_gpus=8,
            description="restore the default power limit (the TDP NVML boots with)",
            changes="power_limit",
        ),
        KindSpec(
            "set_clock_limit",
            Risk.PHYSICAL,
            ("gpu", "node"),
            (Param("sm_clock_max_mhz", "number", required=True),),
            rate_per_hour=4,
            max_gpus=8,
            description="lock the SM clock ceiling (nvmlDeviceSetGpuLockedClocks)",
        ),
        KindSpec(
            "set_cooling_state",
            Risk.PHYSICAL,
            ("node", "rack"),
            (Param("cooling_fraction", "number", required=True, minimum=0.6, maximum=1.0),),
            rate_per_hour=2,
            max_nodes=8,
            description="cooling device / CDU setpoint as a fraction of its maximum",
        ),
        KindSpec(
            "set_fan_speed",
            Risk.PHYSICAL,
            ("node",),
            (Param("fan_speed_pct", "number", required=True, minimum=40.0, maximum=100.0),),
            rate_per_hour=4,
            max_nodes=1,
            description="chassis fan speed",
        ),
        KindSpec(
            "gpu_reset",
            Risk.PHYSICAL,
            ("gpu",),
            rate_per_hour=1,
            max_gpus=1,
            approvals=TWO_PERSON_APPROVALS,
            description="reset one GPU (nvidia-smi -r)",
        ),
        KindSpec(
            "drain_node",
            Risk.PHYSICAL,
            ("node",),
            (Param("reason_code", "string", max_len=64),),
            rate_per_hour=2,
            max_nodes=1,
            description="stop scheduling on a node and move its work away",
            changes="node_service",
        ),
        KindSpec(
            "resume_node",
            Risk.PHYSICAL,
            ("node",),
            (Param("reason_code", "string", max_len=64),),
            rate_per_hour=2,
            max_nodes=1,
            description="return a drained or cordoned node to service (Slurm state=resume, Kubernetes uncordon)",
            changes="node_service",
        ),
        KindSpec(
            "reboot_node",
            Risk.PHYSICAL,
            ("node",),
            rate_per_hour=1,
            max_nodes=1,
            approvals=TWO_PERSON_APPROVALS,
            description="reboot a node",
        ),
        KindSpec(
            "migrate_job",
            Risk.PHYSICAL,
            ("job", "node", "rack"),
            (Param("to", "string", max_len=64),),
            rate_per_hour=2,
            max_nodes=8,
            description="move a job (or the jobs on a node/rack) elsewhere",
        ),
        KindSpec(
            "restart_job",
            Risk.PHYSICAL,
            ("job",),
            (Param("from_checkpoint", "choice", choices=("latest",)), Param("exclude", "string", max_len=64)),
            rate_per_hour=3,
            description="restart a job from its last checkpoint (`exclude`: a component to keep out)",
        ),
        # -- digital ----------------------------------------------------------------------------------------
        KindSpec(
            "set_lane_rate",
            Risk.DIGITAL,
            ("nic",),
            (
                Param("lane", "choice", required=True, choices=_LANES),
                Param("fraction", "number", required=True, minimum=0.05, maximum=0.9),
            ),
            rate_per_hour=12,
            max_nics=1,
            approvals=0,
            description="HTB class rate of a lane",
        ),
        KindSpec(
            "update_lane_rule",
            Risk.DIGITAL,
            ("nic", "policy"),
            (
                Param("rule_id", "string", max_len=64),
                Param("lane", "choice", choices=_LANES),
                Param("fix", "string", max_len=_TEXT),
            ),
            rate_per_hour=6,
            max_nics=1,
            approvals=0,
            description="change one classifier rule",
        ),
        KindSpec(
            "enable_lanes",
            Risk.DIGITAL,
            ("nic",),
            (Param("policy", "string", max_len=64),),
            rate_per_hour=6,
            max_nics=1,
            approvals=0,
            description="enforce priority lanes on a NIC",
        ),
        KindSpec(
            "enable_ecn",
            Risk.DIGITAL,
            ("nic",),
            rate_per_hour=6,
            max_nics=1,
            approvals=0,
            description="ECN marking instead of drops on a NIC",
        ),
        KindSpec(
            "ack_alert",
            Risk.DIGITAL,
            _ANY,
            (Param("incident_id", "string", max_len=64),),
            rate_per_hour=30,
            approvals=0,
            description="acknowledge an alert",
        ),
        KindSpec(
            "open_ticket",
            Risk.DIGITAL,
            _ANY,
            (
                Param("team", "string", max_len=64),
                Param("summary", "string", max_len=_TEXT),
                Param("priority", "choice", choices=("low", "medium", "high", "critical")),
            ),
            rate_per_hour=10,
            approvals=0,
            description="open a ticket for a team",
        ),
        KindSpec(
            "rerun_check",
            Risk.DIGITAL,
            ("gpu", "node", "nic", "rack", "fleet", "job"),
            (Param("check", "string", max_len=64),),
            rate_per_hour=12,
            approvals=0,
            description="re-run a read-only diagnostic check",
        ),
    )
}


@dataclass(frozen=True)
class Registry:
    kinds: dict[str, KindSpec]

    def get(self, kind: str) -> KindSpec | None:
        return self.kinds.get(kind)

    def approvals_needed(self, action: Action, scope: Scope | None) -> int:
        """Distinct people who must approve. Physical actions beyond one rack (or on `fleet`) need two;
        an unknown kind or target needs more than anyone can give."""
        spec = self.get(action.kind)
        if spec is None or scope is None:
            return 10**6
        if not spec.physical:
            return 0
        if scope.kind == "fleet" or len(scope.racks) > 1:
            return max(spec.approvals, TWO_PERSON_APPROVALS)
        return max(spec.approvals, 1)


DEFAULT_REGISTRY = Registry(KINDS)
