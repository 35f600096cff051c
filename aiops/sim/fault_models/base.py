"""A fault model: what one fault kind does to the simulated world at its start, every step while it is active,
and at its end (aiops/sim/faults.py runs them; the registry is `aiops.sim.fault_models.FAULT_MODELS`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiops.sim.faults import ActiveFault, Modifiers
    from aiops.sim.world import World

Change = Callable[["World", "ActiveFault"], None]
# (world, fault, this step's modifiers, DCIM caps in kW by scope: a rack's name or "fleet")
Ongoing = Callable[["World", "ActiveFault", "Modifiers", dict[str, float]], None]


def no_change(w: World, f: ActiveFault) -> None:
    """A fault with no discrete change at this point."""


def no_effect(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    """A fault with no continuous effect."""


@dataclass(frozen=True)
class FaultModel:
    """`start`: discrete changes when the fault begins; `ongoing`: the continuous effects of one step (it may
    draw from the world's random generator: draws happen in the order of the scenario's faults); `end`: undo
    the start's changes when the fault ends (an operator's later fix stays in force); `xids`: the XIDs a fault
    of this kind may report, one picked per fault by the scenario's seed and the fault's index (`ActiveFault.xid`)."""

    start: Change = no_change
    ongoing: Ongoing = no_effect
    end: Change = no_change
    xids: tuple[int, ...] = ()
