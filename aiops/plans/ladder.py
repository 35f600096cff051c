"""What each rung of the remediation ladder means for a plan step: its title, and where the actions do not say
it themselves, its expected effect, what it costs the job, how it is undone, and how long after execution its
effect is judged (the verify window the closed loop reads from `plan_steps`, issue 34 contract 3).

The rungs and their order are the playbooks' (`aiops.playbooks.RUNGS`): observe, notify, configure, limit,
move, drain, reset, reboot, rma. A step proposed at first is every step up to and including the first
physical one (the digital ones before it need nobody: a ticket, a re-run check); the others wait.
`expect` names the check that judges the effect (aiops.detect.effects.CHECKS); a ticket is not judged (no
window). A step's window and check are its playbook's `verify` where it says one, else the longest its kinds
need (the closed loop's defaults per kind, aiops.detect.effects.DEFAULTS), else the rung's below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rung:
    name: str  # what the rung does, in two words
    title: str  # "{targets}" is filled with the step's targets
    effect: str
    cost: str
    rollback: str
    within_s: float | None  # None: not judged (a ticket)
    check: str | None  # the check judging the effect (a playbook's `verify.expect`)


LADDER: dict[str, Rung] = {
    "observe": Rung(
        "Re-run checks",
        "Re-run the checks on {targets}",
        "the checks' output confirms or rules out the diagnosis",
        "nothing: read-only checks",
        "nothing to undo",
        300.0,
        "check_ran",
    ),
    "notify": Rung(
        "Ticket",
        "Open a ticket for {targets}",
        "the team that repairs it is told, with the evidence",
        "nothing for the job",
        "close the ticket",
        None,
        None,
    ),
    "configure": Rung(
        "Reconfigure",
        "Reconfigure {targets}",
        "the setting the diagnosis found wrong is put right; the symptom stops",
        "nothing for the job while it applies",
        "the previous setting, recorded with the execution",
        120.0,
        "symptom_gone",
    ),
    "limit": Rung(
        "Power limit",
        "Limit the power of {targets}",
        "less heat or power where it is needed; throttling stops",
        "the capped GPUs run a little slower; the job runs at its slowest rank",
        "the previous limit, recorded with the execution (aiops actions rollback)",
        180.0,
        "temp_below_slowdown",
    ),
    "move": Rung(
        "Move the job",
        "Move the work off {targets} from its last checkpoint",
        "the job restarts from its last checkpoint without the faulty part and runs at its reference pace",
        "a restart: the steps since the last checkpoint and about a minute of restart on all its GPUs",
        "move it back once the part is repaired",
        900.0,
        "step_time_recovered",
    ),
    "drain": Rung(
        "Drain",
        "Drain {targets}",
        "nothing new is scheduled there and its work moves away",
        "the node's GPUs are out of service until it is resumed; a job on it restarts from its last checkpoint",
        "resume the node (Slurm: scontrol update nodename=NODE state=resume; Kubernetes: kubectl uncordon)",
        600.0,
        "symptom_gone",
    ),
    "reset": Rung(
        "GPU reset",
        "Reset {targets} on the drained node",
        "the GPU's state is cleared (row remapping applied, links retrained, GSP restarted)",
        "the GPU is out for about a minute; the node is drained, so no job loses work",
        "none: a reset cannot be undone",
        300.0,
        "symptom_gone",
    ),
    "reboot": Rung(
        "Reboot",
        "Reboot {targets}",
        "the node comes back with its devices re-enumerated and retrained",
        "the node is down for about 10 minutes; its work moved when it was drained",
        "none: a reboot cannot be undone",
        1200.0,
        "symptom_gone",
    ),
    "rma": Rung(
        "RMA",
        "Return {targets} to the vendor (RMA) with a bug-report bundle",
        "the part is replaced; the bundle shows the vendor the fault",
        "the part stays out of service until the replacement arrives",
        "cancel the RMA ticket",
        None,
        None,
    ),
}
