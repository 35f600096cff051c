"""The simulated twin the agent's executor acts on, and the what-if preview that copies it.

`Twin` holds an `aiops.sim.World` (or anything with its shape). Its state persists in a pickle next to the
database, so an approved action stays applied across restarts. `preview` never touches the held world: it
steps two copies forward, one with the action applied, and reports the component's metrics for both.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class WorldLike(Protocol):
    elapsed_s: float

    def copy(self) -> Any: ...

    def step(self, dt_s: float = 1.0) -> None: ...


Actuate = Callable[[Any, dict[str, Any]], Any]  # (world, action as a dict) -> backend result


def _num(value: Any) -> float:
    return round(float(value), 2)


def metrics(world: Any, component: str) -> dict[str, Any]:
    """What the twin says about a component now (GPU/node/rack/fleet: its GPUs; NIC; job)."""
    layout = world.layout
    out: dict[str, Any] = {"component": component, "elapsed_s": _num(world.elapsed_s)}
    if component.startswith("job:"):
        name = component.removeprefix("job:")
        for job in layout.jobs:
            if job.name == name:
                out["step_time_s"] = _num(world.step_time_s[job.index])
                gpus = np.asarray(job.gpus)
                out["max_temp_c"] = _num(np.max(world.temp_c[gpus]))
                out["nodes"] = [layout.node_names[n] for n in job.nodes]
                restart_until_s = getattr(world, "restart_until_s", None)
                if restart_until_s is not None and restart_until_s[job.index] >= world.elapsed_s:
                    out["restarting_for_s"] = _num(restart_until_s[job.index] - world.elapsed_s + 1.0)
        return out
    if component in layout.nic_index:
        i = layout.nic_index[component]
        out.update(
            lanes_enforced=bool(world.lanes_enforced[i]),
            ecn_enabled=bool(world.ecn_enabled[i]),
            link_up=bool(world.link_up[i]),
        )
        return out
    gpus = np.asarray(layout.gpus_of(component))
    if gpus.size == 0:
        out["unknown"] = True
        return out
    out.update(
        gpus=int(gpus.size),
        max_temp_c=_num(np.max(world.temp_c[gpus])),
        mean_power_w=_num(np.mean(world.power_w[gpus])),
        power_limit_w=_num(np.min(world.power_limit_w[gpus])),
        min_sm_clock_mhz=_num(np.min(world.sm_clock_mhz[gpus])),
        throttled_gpus=int(np.count_nonzero(world.reasons[gpus] & 0x60)),  # SW/HW thermal slowdown
    )
    jobs = {int(j) for j in world.layout.gpu_job[gpus] if j >= 0}
    if jobs:
        out["job_step_time_s"] = {layout.jobs[j].name: _num(world.step_time_s[j]) for j in sorted(jobs)}
    return out


class Twin:
    def __init__(self, world: Any, state_path: Path | None = None) -> None:
        self.world = world
        self.state_path = state_path

    @classmethod
    def load_or_create(cls, make: Callable[[], Any], state_path: Path | None) -> Twin:
        if state_path is not None and state_path.exists():
            with state_path.open("rb") as fh:
                return cls(pickle.load(fh), state_path)  # our own file, written by `save`
        twin = cls(make(), state_path)
        twin.save()
        return twin

    def save(self) -> None:
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".twin-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(self.world, fh)
        os.replace(tmp, self.state_path)  # atomic: a kill never leaves half a world

    def metrics(self, component: str) -> dict[str, Any]:
        return metrics(self.world, component)

    def advance(self, seconds: float) -> None:
        for _ in range(max(0, round(seconds))):
            self.world.step(1.0)
        self.save()

    def preview(
        self, actuate: Actuate, action: dict[str, Any], component: str, horizon_s: float
    ) -> dict[str, Any]:
        """Metrics after `horizon_s` simulated seconds without and with the action (on copies only)."""
        without, with_action = self.world.copy(), self.world.copy()
        before = metrics(without, component)
        actuate(with_action, action)
        for _ in range(max(1, round(horizon_s))):
            without.step(1.0)
            with_action.step(1.0)
        return {
            "horizon_s": horizon_s,
            "now": before,
            "without_action": metrics(without, component),
            "with_action": metrics(with_action, component),
        }


class TwinWorld:
    """The agent's `World` port over a `Twin`: metrics, advancing time, and what-if previews on copies, with
    actions applied by `actuate` (the guardrails' simulator actuator, the same code execution uses)."""

    def __init__(self, twin: Twin, actuate: Actuate) -> None:
        self.twin = twin
        self.actuate = actuate

    def metrics(self, component: str) -> dict[str, Any]:
        return self.twin.metrics(component)

    def advance(self, seconds: float) -> None:
        self.twin.advance(seconds)

    def preview(self, action: dict[str, Any], horizon_s: float) -> dict[str, Any]:
        """A migration is judged on its job (step time, hottest GPU, where it runs), not on the node it leaves."""
        component = action["target"]
        if action.get("kind") == "migrate_job" and hasattr(self.twin.world, "node_job"):
            job = self.twin.world.node_job(component)  # ValueError for an unknown node: the tool reports it
            component = f"job:{job}" if job else component
        return self.twin.preview(self.actuate, action, component, horizon_s)
