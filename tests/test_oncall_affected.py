"""The operator's day's blast-radius yardstick (bench/oncall_truth.py): GPUs a fault affected against GPUs the
product's actions touched, both read from the twin's physics alike for every fault and every action.

A data-parallel job's ranks wait in the same collective: a GPU that falls off the bus hangs every rank of its job
(no step completes on any of its GPUs), so every GPU of the job is affected; a hot GPU only slows the job (its
other GPUs still step), so only the hot GPU is. A GPU lost on a rack whose cooling failed stops its job because of
the lost GPU, not the rack. An action that restarts a job touches every GPU of the job and the node its ranks were
requeued onto; a power limit touches its target alone."""

from __future__ import annotations

from aiops.scenarios import ClusterSpec, FaultSpec, JobSpec, Scenario
from aiops.sim import operations
from aiops.sim.world import World
from bench.oncall_truth import Executed, Truth, affected, touched_by

JOB = ["node0", "node1"]  # one 2-node job on rack0 (node0-3); node2-7 idle


def _run(*faults: FaultSpec, seconds: int = 30) -> Truth:
    cluster = ClusterSpec(racks=2, nodes_per_rack=4)
    scenario = Scenario(
        name="blast",
        seed=3,
        duration_s=600.0,
        cluster=cluster,
        jobs=[JobSpec(name="llm", nodes=JOB)],
        faults=list(faults),
    )
    world = World(scenario)
    truth = Truth(world, {})
    for second in range(1, seconds + 1):
        world.step()
        if second % 15 == 0:
            truth.sample()
    return truth


def _job_gpus() -> set[str]:
    return {f"{n}/gpu{g}" for n in JOB for g in range(8)}


def test_a_gpu_off_the_bus_affects_every_gpu_of_its_job_a_hot_gpu_only_itself() -> None:
    (lost,) = _run(FaultSpec(kind="gpu_fell_off_bus", target="node1/gpu7", start_s=5.0)).faults
    assert lost.affected_gpus == ["node1/gpu7"]  # its hardware
    assert affected(lost) == _job_gpus()  # ... and the 16 GPUs whose ranks hang with it
    (hot,) = _run(FaultSpec(kind="thermal_throttle", target="node0/gpu2", start_s=5.0)).faults
    assert affected(hot) == {"node0/gpu2"}  # the job still steps: its other GPUs are not counted


def test_a_crash_stops_its_job_only_where_the_gpu_carries_one() -> None:
    truth = _run(
        FaultSpec(kind="gpu_ecc_error", target="node0/gpu1", start_s=5.0),
        FaultSpec(kind="gpu_ecc_error", target="node5/gpu1", start_s=5.0),  # an idle spare: no rank to kill
    )
    in_job, idle = truth.faults
    assert affected(in_job) == _job_gpus()
    assert affected(idle) == {"node5/gpu1"}


def test_a_lost_gpu_on_a_failed_rack_is_charged_to_the_lost_gpu() -> None:
    truth = _run(
        FaultSpec(kind="rack_cooling_failure", target="rack0", start_s=2.0),
        FaultSpec(kind="gpu_fell_off_bus", target="node1/gpu7", start_s=5.0),
    )
    rack, lost = truth.faults
    assert affected(rack) == {f"node{n}/gpu{g}" for n in range(4) for g in range(8)}  # its hardware alone
    assert lost.stopped_gpus == sorted(_job_gpus())


def test_a_restart_touches_its_job_and_the_node_it_moved_to_a_limit_its_target() -> None:
    truth = _run(seconds=15)
    world = truth.world
    world.elapsed_s = 20.0
    moved = operations.restart_job(world, "llm", exclude="node1/gpu7")
    truth.sample()
    ground = truth.ground()
    restart = Executed("node0", "P-1", "restart_job", "job:llm", {"exclude": "node1/gpu7"}, 20.0)
    assert moved == "node2"
    assert touched_by(restart, ground) == _job_gpus() | {f"node2/gpu{g}" for g in range(8)}
    limit = Executed("node0", "P-2", "set_power_limit", "node0/gpu2", {"watts": 500}, 20.0)
    assert touched_by(limit, ground) == {"node0/gpu2"}
