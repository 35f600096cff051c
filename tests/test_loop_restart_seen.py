"""A node of a job sees a restart of that job that another node or tier ran (issue 34, the runbook day's one
self-inflicted incident). The twin (3 nodes x 2 GPUs; job llm on node0 and node1, node2 idle) is read as node1's
agent reads it: its NVML and its slice of the fabric, nothing else (no ledger row, no peer execution: node1 was
not told). At 100 s `restart_job job:llm` without node0 runs, as node0's runbook step runs it on its own twin:
the scheduler kills every rank and the driver reports Xid 45 on each GPU (aiops/sim/operations.py), then the ranks
re-form and step again. node1's agent sees the ranks end (aiops/detect/ended.py): its idle GPUs are no
`gpu_idle_in_job` and the job no `job_stalled`. A GPU idle in the job with no restart (an input pipeline that
starves node1's ranks) still opens one. node0's agent, which ran the restart (its ledger holds the execution),
takes the kill's Xid 45 for the kill it ordered: nothing opens there; node1, not told, keeps the Xid 45 as an
observe-only symptom (severity `info`), as for any kill."""

from __future__ import annotations

from aiops.detect import detect
from aiops.scenarios import parse_scenario_text
from aiops.service.sim_sources import SlicedCollector, node_slice, sliced_inventory
from aiops.sim import operations as ops
from aiops.sim.telemetry import SimFabricCollector
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector
from guardrails.actions import Action
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords

SCENARIO = """\
name: restart-seen
seed: 5
duration_s: 400
cluster: {racks: 1, nodes_per_rack: 3, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: [node0, node1], step_compute_s: 1.0, allreduce_mb: 64, checkpoint_every_s: 50}
faults: FAULTS
"""
RESTART_AT_S = 100
STARVED = "[{kind: input_pipeline_bottleneck, target: node1, start_s: 100, severity: 0.9}]"
RUN_S = 220  # the restart's 60 s pause, the ranks back on node1, and two detection windows after it
FLUSH_S = 10  # simulated seconds of rows stored at once (one statement per table, not one per second)


def _ran_it(store: Store, ts_s: float) -> None:
    """node0's ledger: its runbook step's executed restart (as guardrails records it)."""
    records = GuardrailRecords(store)
    action = Action(
        proposal_id="P-node0-restart",
        kind="restart_job",
        target="job:llm",
        parameters={"exclude": "node0"},
        proposed_by="analyst",
        created_ts_s=ts_s - 20,
    )
    records.save_proposal(action, status="executed", message="ok", physical=True, approvals_needed=1)
    assert records.claim(ExecutionRecord(action.proposal_id, "restart_job", "job:llm", frozenset(), ts_s))
    records.finish(action.proposal_id, "executed", {"kind": "restart_job", "parameters": {}, "detail": {}})
    records.stamp_data_ts(action.proposal_id, ts_s)


def _nodes_see(faults: str = "[]", restart: bool = False) -> dict[int, set[str]]:
    """The symptoms node0's and node1's agents find over one run; node0's ledger holds the restart it ran."""
    world = World(parse_scenario_text(SCENARIO.replace("FAULTS", faults), "restart-seen.yaml"))
    parts = {n: node_slice(world, f"node{n}") for n in (0, 1)}
    stores = {n: Store(":memory:") for n in parts}
    buffers = {n: RowBuffer() for n in parts}  # each agent's rows, stored once a flush as its service does
    collectors = {
        n: [NvmlCollector(world.nvml(n), f"node{n}"), SlicedCollector(SimFabricCollector(world), part)]
        for n, part in parts.items()
    }
    try:
        for n, part in parts.items():
            stores[n].ingest_many(sliced_inventory(world, part))
        for second in range(RUN_S):
            world.step(1.0)
            if restart and second == RESTART_AT_S:
                assert ops.restart_job(world, "llm", exclude="node0") == "node2"
                _ran_it(stores[0], float(world.now_ts_s))
                for n, part in parts.items():  # the scheduler's placement, as each node's resolvers read it
                    stores[n].ingest("job_ranks", sliced_inventory(world, part)["job_ranks"])
            for n in stores:
                for collector in collectors[n]:
                    buffers[n].add(collector.rows(float(world.now_ts_s)))
            if (second + 1) % FLUSH_S == 0 or second + 1 == RUN_S:
                for n, store in stores.items():
                    store.ingest_all(buffers[n].drain_batches())
        return {n: {s.kind for i in detect(store) for s in i.symptoms} for n, store in stores.items()}
    finally:
        for store in stores.values():
            store.close()


def test_a_restart_another_node_ran_opens_no_idle_or_stall_there_and_nothing_where_it_ran() -> None:
    seen = _nodes_see(restart=True)
    assert not seen[1] & {"gpu_idle_in_job", "job_stalled"}, seen
    assert seen[1] == {"xid"}, "the kill's Xid 45 is what node1 saw of it"
    assert seen[0] == set(), "node0 ran the restart: its kill is expected"


def test_an_idle_gpu_in_the_job_with_no_restart_still_opens_one() -> None:
    assert "gpu_idle_in_job" in _nodes_see(faults=STARVED)[1]
