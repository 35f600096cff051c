"""The repair crew: a ticket for a component (`open_ticket` executed on the twin) brings a repair after a stated
time, and the repair ends every fault of that component and of what it holds (a node's ticket covers its GPUs and
NICs; a GPU's or NIC's its own faults only; a rack's, the rack's). A fan stays failed, a PCIe link downtrained, a
PSU braking, until then: moving the job or capping the GPU mitigates, only the repair fixes.

Times are the twin's choice, not measurements (`REPAIR_AFTER_S`): a hot spare swapped in for a GPU or a node's
part within a couple of hours, a transceiver or cable within one, a rack's CDU within four. The weather
(`ambient_drift`) and the facility's own caps (`facility_power_cap`) are nobody's repair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiops.labels import component_kind

if TYPE_CHECKING:
    from aiops.sim.faults import ActiveFault
    from aiops.sim.world import World

REPAIR_AFTER_S: dict[str, float] = {"gpu": 7200.0, "node": 7200.0, "nic": 3600.0, "rack": 14_400.0}
NOBODYS = frozenset({"ambient_drift", "facility_power_cap"})


@dataclass
class Ticket:
    component: str
    opened_s: float  # the twin's elapsed second it was filed
    due_s: float  # when the repair is done
    done: bool = False
    repaired: tuple[str, ...] = ()  # the faults it ended, "kind@target"


def open_ticket(world: World, component: str) -> Ticket | None:
    """File a ticket for `component`; None when nothing of that kind is repaired (a job, the fleet, a policy).
    A ticket for a component with one still open is that ticket (the crew is already coming)."""
    kind = component_kind(component, world.layout.rack_names)
    after_s = REPAIR_AFTER_S.get(kind or "")
    if after_s is None:
        return None
    for ticket in world.tickets:
        if ticket.component == component and not ticket.done:
            return ticket
    ticket = Ticket(component, world.elapsed_s, world.elapsed_s + after_s)
    world.tickets.append(ticket)
    return ticket


def covers(component: str, fault: ActiveFault) -> bool:
    """Whether repairing `component` ends `fault`."""
    target = fault.spec.target
    if fault.kind in NOBODYS:
        return False
    return target == component or target.startswith(component + "/")


def complete_due(world: World) -> list[Ticket]:
    """Repairs whose time has come: the faults they cover end now (their models' `end` runs this step)."""
    done = []
    for ticket in world.tickets:
        if ticket.done or world.elapsed_s < ticket.due_s:
            continue
        ticket.done = True
        ended = []
        for fault in world.faults:
            if fault.active(world.elapsed_s) and covers(ticket.component, fault):
                fault.repaired_s = world.elapsed_s
                ended.append(f"{fault.kind}@{fault.spec.target}")
        ticket.repaired = tuple(ended)
        done.append(ticket)
    return done
