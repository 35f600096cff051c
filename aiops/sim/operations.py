"""What a scheduler and NVML's operations do to the twin's world: drain and resume a node, restart a job,
reboot a node, reset a GPU, lock its clocks, set its fans. Each is a plain function of the `World`, so the
twin's log replays it deterministically; the readings the NVML fake serves (`world.v`) change at once, as the
driver's would.

- drain: the node takes no new work; the job on it is requeued onto an idle node that is not drained (a
  scheduler's requeue: it restarts from its checkpoint there), or, with none free, stopped in place and held
  until the node resumes (its GPUs idle); either way its ranks there are killed, and the driver reports Xid 45
  (preemptive cleanup) on that node's GPUs. Resume lifts the drain and relaunches a held job.
- restart_job: the scheduler kills every rank of the job (the driver reports Xid 45 on each GPU a rank ran on,
  as for a drain: what a node of the job sees when another node or tier restarted it) and relaunches them from
  the last checkpoint (the step in flight is lost, `restart_s` without progress); `exclude` a component of one
  of its nodes: that node's ranks requeue onto an idle node.
- reboot: every GPU of the node comes back as after a GPU reset, and the job on it restarts.
- GPU reset (NVML's drain, remove, discover): clears a lost GPU, clears its clock lock and fan setting, restores
  the default power limit. A fault that still holds (a GPU that keeps falling off) comes back on the next step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiops.sim import gpu as G

if TYPE_CHECKING:
    from aiops.sim.world import World

FAN_AUTO = -1.0
XID_KILLED = 45  # preemptive cleanup: the driver tore down a killed process's channels


def _node(world: World, name: str) -> int:
    index = name.removeprefix("node")
    if not name.startswith("node") or not (index.isascii() and index.isdigit()):
        raise ValueError(f"no node '{name[:40]}' (node0..node{world.layout.nodes - 1})")
    if int(index) >= world.layout.nodes:
        raise ValueError(f"no node '{name[:40]}' (node0..node{world.layout.nodes - 1})")
    return int(index)


def job_index(world: World, name: str) -> int:
    """A job's index by its name (the component form `job:<name>` too)."""
    name = name.removeprefix("job:")
    for job in world.layout.jobs:
        if job.name == name:
            return job.index
    raise ValueError(f"no job '{name[:60]}' in the twin")


def _idle_node(world: World, besides: int) -> int | None:
    lay = world.layout
    for node in range(lay.nodes):
        if node != besides and not lay.busy_nodes[node] and not world.drained[node]:
            return node
    return None


def _relaunch(world: World, job: int) -> None:
    """The job restarts from its last checkpoint: the step in flight is lost; no step for `restart_s`."""
    world.step_progress[job] = 0.0
    world.hung_since[job] = -1.0
    world.torn_down[job] = False
    world.restart_until_s[job] = world.elapsed_s + world.restart_s
    world.job_restarts[job] += 1


def _hold(world: World, node: int, job: int) -> None:
    """Stop the job's ranks on `node` in place: no progress until resumed; its GPUs idle."""
    gpus = world.layout.node_gpus(node)
    world.held_job[node] = job
    world.restart_until_s[job] = np.inf
    world.rank_duty[gpus], world.rank_starved[gpus] = 0.0, 1.0


def drain(world: World, node_name: str) -> dict[str, str | None]:
    """Drain `node_name`: {"requeued_to": node or None, "held": job or None}."""
    node = _node(world, node_name)
    world.drained[node] = True
    job = world.layout.job_on(node)
    if job is None or world.held_job[node] >= 0:
        return {"requeued_to": None, "held": None}
    # the scheduler kills the job's ranks there (a requeue): the driver cleans up their channels (Xid 45)
    world.emit_xids(world.layout.node_gpus(node), XID_KILLED)
    target = _idle_node(world, node)
    if target is None:
        _hold(world, node, job.index)
        return {"requeued_to": None, "held": job.name}
    world.move_job(node_name, f"node{target}")
    world.job_restarts[job.index] += 1
    return {"requeued_to": f"node{target}", "held": None}


def resume(world: World, node_name: str) -> None:
    """Lift the drain; a job held on the node relaunches there."""
    node = _node(world, node_name)
    world.drained[node] = False
    held = int(world.held_job[node])
    if held >= 0:
        world.held_job[node] = -1
        gpus = world.layout.node_gpus(node)
        world.rank_duty[gpus], world.rank_starved[gpus] = 1.0, 0.0
        _relaunch(world, held)


def restart_job(world: World, name: str, exclude: str | None = None) -> str | None:
    """Relaunch job `name`; with `exclude` (a node or a GPU of one of its nodes) the ranks there requeue onto
    an idle node first. Returns the node they moved to, or None."""
    job = world.layout.jobs[job_index(world, name)]
    # the scheduler kills every rank before it relaunches them: the driver cleans up their channels (Xid 45) on
    # each GPU of the job that is still on the bus (a GPU that fell off it reports nothing)
    ranks = job.gpus
    world.emit_xids(ranks[~(world.lost[ranks] | world.removed[ranks])], XID_KILLED)
    moved = None
    if exclude:
        node = _node(world, exclude.split("/", 1)[0])
        if node in job.nodes:  # else the job already runs elsewhere (a drain requeued it): nothing to move
            target = _idle_node(world, node)
            if target is None:
                raise ValueError(f"no idle node to move job {name[:60]} off {exclude[:40]}")
            world.move_job(f"node{node}", f"node{target}")
            moved = f"node{target}"
    _relaunch(world, job.index)
    return moved


def reset_gpu(world: World, gpu: int) -> None:
    """What a GPU reset clears: the lost state (until a standing fault takes it again), locked clocks, the fan
    setting, NVML's drain state, and the power limit back to its default."""
    world.lost[gpu] = False
    world.removed[gpu] = False
    world.dead[gpu] = False
    world.nvml_draining[gpu] = False
    world.clock_limit_mhz[gpu] = G.MAX_SM_CLOCK_MHZ
    world.fan_speed_pct[gpu] = FAN_AUTO
    world.set_power_limit_w(gpu, G.TDP_W)
    world.gpu_resets[gpu] += 1
    world.v.lost[gpu] = False


def reboot(world: World, node_name: str) -> None:
    """Every GPU of the node reset; the job on it relaunches (a held one stays held: the node is drained)."""
    node = _node(world, node_name)
    for gpu in world.layout.node_gpus(node).tolist():
        reset_gpu(world, gpu)
    world.nvml_hang_until_s[node] = 0.0
    world.v.nvml_hung[node] = False
    world.node_reboots[node] += 1
    job = world.layout.job_on(node)
    if job is not None and world.held_job[node] < 0:
        _relaunch(world, job.index)


def lock_clock(world: World, gpu: int, max_mhz: float) -> None:
    """nvmlDeviceSetGpuLockedClocks' ceiling; the reading follows at once."""
    world.clock_limit_mhz[gpu] = max_mhz
    world.v.sm_clock_mhz[gpu] = min(world.v.sm_clock_mhz[gpu], int(max_mhz))


def unlock_clock(world: World, gpu: int) -> None:
    world.clock_limit_mhz[gpu] = G.MAX_SM_CLOCK_MHZ


def set_fan(world: World, gpu: int, pct: float) -> None:
    """A GPU's fan target in % (FAN_AUTO: the driver's own control). The twin's GPUs are liquid cooled: the
    setting is state that NVML reads back, with no thermal effect."""
    world.fan_speed_pct[gpu] = pct
