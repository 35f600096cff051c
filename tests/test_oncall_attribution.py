"""The operator's day's yardstick (bench/oncall_truth.py `attribute`): an incident opened after the product's
action is self-inflicted only when its symptom is one that kind of action brings about. On 16 nodes with rack1's
cooling failed and job llm-b on node8-13: GPUs idle in the job after the product restarted it are its doing;
hot GPUs on rack1 after a drain are the rack's fault; idle GPUs after a power limit's reset, or anything after a
re-run check, are not the action's."""

from __future__ import annotations

from aiops.scenarios import ClusterSpec, JobSpec, Scenario
from aiops.sim.world import World
from bench.oncall_truth import Executed, FaultTruth, Ground, Incident, attribute

RACK1 = {f"node{n}" for n in range(8, 16)}
JOBS = {"llm-a": [f"node{n}" for n in range(6)], "llm-b": [f"node{n}" for n in range(8, 14)]}


def _ground() -> Ground:
    jobs = [JobSpec(name=name, nodes=nodes) for name, nodes in JOBS.items()]
    cluster = ClusterSpec(racks=2, nodes_per_rack=8)
    world = World(Scenario(name="day", seed=1, duration_s=3600.0, cluster=cluster, jobs=jobs, faults=[]))
    cooling = FaultTruth(0, "rack_cooling_failure", "rack1", 600.0, "repair", own_nodes=RACK1, nodes=RACK1)
    lost = FaultTruth(1, "gpu_fell_off_bus", "node12/gpu1", 500.0, "remedy", own_nodes={"node12"})
    lost.nodes = set(JOBS["llm-b"])
    return Ground(world, [cooling, lost], [(0.0, JOBS)])


def _incident(title: str, node: str, opened_s: float, cause: str = "") -> Incident:
    gpus = [f"{node}/gpu{g}" for g in range(8)]
    return Incident(node, f"INC-{node}", opened_s, None, title, gpus, cause, node, "warning")


def _acted(kind: str, target: str, at_s: float) -> list[Executed]:
    return [Executed("node10", "P-1", kind, target, {}, at_s)]


def test_idle_gpus_after_the_products_restart_are_self_inflicted() -> None:
    found = attribute(
        _incident("gpu idle in job on node10/gpu0", "node10", 870.0),
        _ground(),
        _acted("restart_job", "job:llm-b", 855.0),
        {},
        3600.0,
    )
    assert (found.what, found.action) == ("self", "P-1")


def test_hot_gpus_on_the_failed_rack_after_a_drain_are_the_racks() -> None:
    found = attribute(
        _incident("gpu hot on node8/gpu0", "node8", 961.0, "thermal_throttle"),
        _ground(),
        _acted("drain_node", "node9", 960.0),
        {},
        3600.0,
    )
    assert (found.what, found.fault) == ("fault", 0)


def test_a_dcim_cap_after_the_products_limit_is_the_caps() -> None:
    """The product capped node11/gpu6 at 1,305 s; the facility capped rack1 at 1,913 s; node11 throttles at
    1,921 s: the newest change on its hardware explains it, not the product's limit."""
    ground = _ground()
    cap = FaultTruth(2, "facility_power_cap", "rack1", 1913.0, "transient", own_nodes=RACK1, nodes=RACK1)
    ground.faults.append(cap)
    throttle = _incident("gpu throttle on node11/gpu0", "node11", 1921.0, "power_cap_misconfig")
    found = attribute(throttle, ground, _acted("set_power_limit", "node11/gpu6", 1305.0), {}, 3600.0)
    assert (found.what, found.fault) == ("fault", 2)
    earlier = attribute(throttle, ground, _acted("set_power_limit", "node11/gpu6", 1915.0), {}, 3600.0)
    assert earlier.what == "self"  # the product's limit after the cap: its doing


def test_a_reset_or_a_check_causes_no_idle_job() -> None:
    ground = _ground()
    idle = _incident("gpu idle in job on node12/gpu0", "node12", 900.0)
    for kind, target in (("reset_power_limit", "node12/gpu1"), ("rerun_check", "node12")):
        found = attribute(idle, ground, _acted(kind, target, 880.0), {}, 3600.0)
        assert found.what == "fault", (kind, found)
