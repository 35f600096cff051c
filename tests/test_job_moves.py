"""Issue 35 item 5: a job the scheduler moves (a drain requeues its ranks onto a spare node) is counted where it
runs now. Before, the fleet read a job's ranks once: after a maintenance window the drained node's idle GPUs
still counted in the job and paged as `gpu_idle_in_job` (docs/BENCHMARKS.md, false pages). The fleet's pivot
of `aiops_job_rank_info`, the store's ingest of `job_ranks`, the twin's fleet view and live detection's ranks
each follow the move. And a job whose ranks left the rank table (no process of it runs: it completed) is not
stalled, while a job whose ranks stay and whose steps stop is."""

from __future__ import annotations

import pyarrow as pa

from aiops.detect.rules import Detector
from aiops.fleet.pivot import statements
from aiops.service.live import LiveDetection
from aiops.sim.fleet_view import FleetView
from aiops.sim.world import World
from aiops.store import Store
from bench.oncall_quiet import quiet_scenario
from collectors.base import RowBatch
from collectors.schema import columns


def _rank_info(store: Store, ts_s: float, placed: dict[int, str]) -> None:
    """The staged `fleet_d` of one scrape: one `aiops_job_rank_info` series per rank of job `llm`."""
    values = ", ".join(
        f"({ts_s}, 'aiops_job_rank_info', 'llm', '{rank}', '{gpu}', '{gpu.split('/')[0]}', "
        f"'{gpu.split('/')[0]}/nic0')"
        for rank, gpu in placed.items()
    )
    store.conn.execute(
        f"CREATE OR REPLACE TEMP VIEW fleet_d AS SELECT * FROM (VALUES {values}) "
        "t(ts_s, name, job, rank, gpu, node, nic)"
    )
    for table, sql in statements():
        if table == "job_ranks":
            store.conn.execute(sql)


def _ranks(store: Store) -> list[tuple[int, str]]:
    return [
        (int(r["rank"]), str(r["gpu"])) for r in store.query("SELECT rank, gpu FROM job_ranks ORDER BY ALL")
    ]


def test_the_fleet_pivot_moves_a_requeued_rank() -> None:
    with Store(":memory:") as store:
        _rank_info(store, 15.0, {0: "node0/gpu0", 1: "node1/gpu0"})
        _rank_info(store, 30.0, {0: "node0/gpu0", 1: "node1/gpu0"})  # the same placement: nothing added
        assert _ranks(store) == [(0, "node0/gpu0"), (1, "node1/gpu0")]
        _rank_info(store, 45.0, {0: "node0/gpu0", 1: "node7/gpu0"})  # node1 drained: rank 1 requeued on node7
        assert _ranks(store) == [(0, "node0/gpu0"), (1, "node7/gpu0")]


def test_the_store_keeps_a_rank_where_it_runs_now() -> None:
    names = columns("job_ranks")
    with Store(":memory:") as store:
        store.ingest("job_ranks", RowBatch(names, [("llm", 0, "node0/gpu0", "node0", "node0/nic0")]))
        store.ingest("job_ranks", RowBatch(names, [("llm", 0, "node7/gpu0", "node7", "node7/nic0")]))
        moved = pa.table({"job": ["llm"], "rank": pa.array([0], pa.int32()), "gpu": ["node6/gpu0"]})
        store.ingest(
            "job_ranks", moved.append_column("node", pa.array(["node6"])).append_column("nic", ["x"])
        )
        assert _ranks(store) == [(0, "node6/gpu0")]


def test_the_fleet_view_and_live_detection_follow_a_drain() -> None:
    world = World(quiet_scenario(7, racks=1))
    view = FleetView(world, 15.0)
    live = LiveDetection(window_s=15.0)
    with Store(":memory:") as store:
        world.step(1.0)
        view.observe()
        store.ingest_many(view.collect(world.now_ts_s))
        live.detector = Detector(store, window_s=15.0)
        live._refresh_inventory(store)
        assert live.detector.job_of_gpu["node3/gpu2"] == "train-00"
        world.move_job("node3", "node7")  # what a drain of node3 does: its ranks requeue onto the spare
        world.step(1.0)
        view.observe()
        store.ingest_many(view.collect(world.now_ts_s))
        live._refresh_inventory(store)
        assert "node3/gpu2" not in live.detector.job_of_gpu
        assert live.detector.job_of_gpu["node7/gpu2"] == "train-00"
        assert store.scalar("SELECT count(*) FROM job_ranks WHERE node = 'node3'") == 0
        # the drain killed the ranks it moved (Xid 45 on node3, in the scrape that shows them on node7): the
        # job was killed and requeued, not a job whose GPUs idle for no reason
        xid = {"gpu": "node3/gpu2", "xid": 45, "ts_s": world.now_ts_s}
        live.detector.ends.saw_xids([xid], live.detector.job_of_gpu)
        assert live.detector.ends.killed("train-00", world.now_ts_s - 1.0)


def _judge(completes: bool) -> list[str]:
    """Job `llm` steps every second on node0's two GPUs for 30 s, then no step comes: either it completed (its
    processes gone, so the node's refresh from its processes drops its ranks) or it hangs (its ranks stay)."""
    names = columns("job_ranks")
    with Store(":memory:") as store:
        ranks = [("llm", r, f"node0/gpu{r}", "node0", "node0/nic0") for r in range(2)]
        store.ingest("job_ranks", RowBatch(names, ranks))
        store.conn.execute(
            "INSERT INTO gpu_samples (ts_s, gpu, node) SELECT range, 'node0/gpu0', 'node0' FROM range(1, 121)"
        )
        store.conn.execute(
            "INSERT INTO job_steps (ts_s, job, step, step_time_s) SELECT range, 'llm', range, 1.0 FROM range(1, 31)"
        )
        detector = Detector(store, window_s=15.0)
        kinds = []
        for k in range(7):
            if k == 2 and completes:  # what aiops/store/workloads.py does once no process of the job runs
                store.conn.execute("DELETE FROM job_ranks WHERE job = 'llm'")
                detector.job_of_gpu = {}
            kinds += [s.kind for s in detector.process(k * 15.0, (k + 1) * 15.0)]
        return kinds


def test_a_job_that_completed_is_not_stalled_and_a_hung_one_is() -> None:
    assert "job_stalled" in _judge(completes=False)
    assert "job_stalled" not in _judge(completes=True)


def _llm_on_node0(store: Store, gpu_rows_sql: str, steps_until_s: int) -> None:
    """Job `llm` with two ranks on node0, stepping every second until `steps_until_s`, killed by Xid 45 at 31 s on
    node0's GPUs; `gpu_rows_sql` writes the GPUs' rows."""
    store.ingest(
        "job_ranks",
        RowBatch(columns("job_ranks"), [("llm", r, f"node0/gpu{r}", "node0", "x") for r in range(2)]),
    )
    store.conn.execute("INSERT INTO gpu_samples (ts_s, gpu, node, samples, idle_samples) " + gpu_rows_sql)
    store.conn.execute(
        "INSERT INTO job_steps (ts_s, job, step, step_time_s) SELECT range, 'llm', range, 1.0 FROM range(1, ?)",
        [steps_until_s],
    )
    store.conn.execute(
        "INSERT INTO gpu_events (ts_s, gpu, node, kind, xid, message) "
        "SELECT 31, 'node0/gpu' || range, 'node0', 'xid', 45, 'Xid 45' FROM range(2)"
    )


def test_a_requeued_job_relaunching_on_its_new_node_is_not_idle_in_job() -> None:
    """A drain requeues job `llm` from node0 onto node7 (the rank table shows it in the window ending at 30 s);
    the kill's Xid 45 on node0 comes in the next window while node7's GPUs load the checkpoint, idle. The job
    was killed and relaunches: no `gpu_idle_in_job` for node7."""
    names = columns("job_ranks")
    with Store(":memory:") as store:
        _llm_on_node0(
            store,
            "SELECT t, n || '/gpu' || g, n, 15, CASE WHEN n = 'node7' OR t > 15 THEN 15 ELSE 0 END "
            "FROM range(15, 61, 15) a(t), (VALUES ('node0'), ('node7')) b(n), range(2) c(g)",
            15,
        )
        live = LiveDetection(window_s=15.0)
        live.detector = Detector(store, window_s=15.0)
        live._refresh_inventory(store)
        kinds = [s.kind for s in live.detector.process(0.0, 15.0)]
        moved = [("llm", r, f"node7/gpu{r}", "node7", "x") for r in range(2)]
        store.ingest("job_ranks", RowBatch(names, moved))
        live._refresh_inventory(store)
        for k in range(1, 4):
            kinds += [s.kind for s in live.detector.process(k * 15.0, (k + 1) * 15.0)]
        assert "xid" in kinds and "gpu_idle_in_job" not in kinds


def test_a_relaunched_job_counts_its_stall_from_its_relaunch() -> None:
    """Job `llm` steps until 30 s, is killed (Xid 45 at 31 s, its GPUs idle until 60 s), relaunches (busy, no
    step yet): a stall, if any, counts from the relaunch, not from its last step before the kill."""
    with Store(":memory:") as store:
        _llm_on_node0(
            store,
            "SELECT t, 'node0/gpu' || g, 'node0', 15, CASE WHEN t > 30 AND t <= 60 THEN 15 ELSE 0 END "
            "FROM range(15, 151, 15) a(t), range(2) b(g)",
            31,
        )
        detector = Detector(store, window_s=15.0)
        stalls = [
            s
            for k in range(10)
            for s in detector.process(k * 15.0, (k + 1) * 15.0)
            if s.kind == "job_stalled"
        ]
        assert stalls and all(float(s.detail["last_step_ts_s"]) >= 60.0 for s in stalls)
