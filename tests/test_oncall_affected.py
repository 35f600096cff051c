"""The operator's day's blast-radius yardstick (bench/oncall_truth.py): GPUs a fault affected against GPUs the
product's actions touched, both read from the twin's physics alike for every fault and every action.

A data-parallel job's ranks wait in the same collective: a GPU that falls off the bus hangs every rank of its job
(no step completes on any of its GPUs), so every GPU of the job is affected; a hot GPU only slows the job (its
other GPUs still step), so only the hot GPU is. A GPU lost on a rack whose cooling failed stops its job because of
the lost GPU, not the rack. An action that restarts a job touches every GPU of the job and the node its ranks were
requeued onto; a power limit touches its target alone."""

from __future__ import annotations

from pathlib import Path

from aiops.scenarios import ClusterSpec, FaultSpec, JobSpec, Scenario
from aiops.sim import operations
from aiops.sim.world import World
from bench.oncall_records import figures
from bench.oncall_state import DayState, Proposal, Records, load, save
from bench.oncall_truth import Executed, Incident, Truth, affected, touched_by

JOB = ["node0", "node1"]  # one 2-node job on rack0 (node0-3); node2-7 idle


def _scenario(*faults: FaultSpec) -> Scenario:
    cluster = ClusterSpec(racks=2, nodes_per_rack=4)
    return Scenario(
        name="blast",
        seed=3,
        duration_s=600.0,
        cluster=cluster,
        jobs=[JobSpec(name="llm", nodes=JOB)],
        faults=list(faults),
    )


def _run(*faults: FaultSpec, seconds: int = 30) -> Truth:
    truth = Truth(World(_scenario(*faults)), {})
    _step(truth, seconds)
    return truth


def _step(truth: Truth, seconds: int) -> None:
    for _ in range(seconds):
        truth.world.step()
        if truth.world.elapsed_s % 15 == 0:
            truth.sample()


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


def test_a_job_already_hung_is_charged_to_the_fault_that_stopped_it_first() -> None:
    """An ECC error on a job a lost GPU already hung kills a rank that was doing nothing: the job's stop stays
    the lost GPU's, and the ECC error affects its own GPU (the day's sum counts the 16 GPUs once)."""
    truth = _run(
        FaultSpec(kind="gpu_fell_off_bus", target="node1/gpu7", start_s=5.0),
        FaultSpec(kind="gpu_ecc_error", target="node0/gpu1", start_s=20.0),
    )
    lost, ecc = truth.faults
    assert affected(lost) == _job_gpus()
    assert affected(ecc) == {"node0/gpu1"}


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


def test_the_days_figures_count_both_sides_and_keep_the_old_yardstick(tmp_path: Path) -> None:
    """The lost GPU's day as bench/oncall.py figures it, after a save and a load (`--refigure` reads the saved
    state): the restart off node1 touches 24 GPUs against the 16 the lost rank stopped; the old yardstick's
    16 / 1 stays beside."""
    lost = FaultSpec(kind="gpu_fell_off_bus", target="node1/gpu7", start_s=5.0)
    truth = _run(lost)
    operations.restart_job(truth.world, "llm", exclude="node1")
    _step(truth, 15)
    incident = Incident(
        "node1",
        "INC-node1-0001",
        10.0,
        None,
        "gpu lost on node1/gpu7",
        ["node1/gpu7"],
        "gpu_fell_off_bus",
        "node1/gpu7",
        "critical",
    )
    proposal = Proposal(
        "node1",
        "P-1",
        "restart_job",
        "job:llm",
        {"exclude": "node1"},
        "executed",
        incident.incident_id,
        20.0,
        True,
        "plan",
    )
    restart = Executed("node1", "P-1", "restart_job", "job:llm", {"exclude": "node1"}, 30.0)
    day = DayState(
        _scenario(lost),
        truth.ground(),
        [],
        [],
        [],
        0,
        [],
        [0],
        Records([incident], [proposal], [restart]),
        0.0,
    )
    save(day, tmp_path / "day_state.json")
    found = figures(load(tmp_path / "day_state.json"), {"product": 1.0, "none": 1.0, "oracle": 1.0}, 15.0)
    (row,) = found["faults"]
    assert (row["gpus_touched"], row["gpus_affected"]) == (24, 16)
    assert (row["gpus_touched_targets"], row["gpus_affected_hardware"]) == (16, 1)
    assert found["total"]["touched_over_affected"] == 1.5
    assert found["total"]["touched_over_affected_hardware"] == 16.0
