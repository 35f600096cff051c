"""A job the product restarted is restarting by design (issue 34 item 1: a requeued job is an expected state).

A signed `restart_job` or `migrate_job` (the job's target), or a `drain_node`, `reboot_node` or `gpu_reset` that
took a node of the job away, stops the job's processes and starts them again from the last checkpoint: for a
while its GPUs idle and it makes no step. That is what the person approved, not a new problem: until the job's
next step, and for at most `GRACE_S` after the action, its idle GPUs are no `gpu_idle_in_job` and the missing
steps no `job_stalled` (aiops/detect/rules.py). A job that has not stepped `GRACE_S` after the restart is judged
again as any other: a restart that did not bring it back is a symptom. The restart kills the job's ranks, and the
driver reports Xid 45 (preemptive cleanup) on their GPUs: within `KILL_S` of the restart that Xid is the kill
the person approved, no `xid` symptom (`killed_by_product`); the program's own errors (Xid 13, 31, 43, 68) and
any Xid later still are.

What the product ran, and nothing else: this workspace's executions (status `executed`, the proposal's action)
and what the other tier told it it ran (m027 `peer_executions`: a fleet's dispatch, a node agent's export). A
restart nobody here knows of (the user's, the scheduler's, another node agent's) is judged as before: its ranks
ended (aiops/detect/ended.py: the kill's Xid 45 came after the job's last step), so its idle GPUs and missing
steps are no symptom either; the Xid 45 opens an observe-only incident (severity `info`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiops.store import Store

RESTART_KINDS = frozenset({"restart_job", "migrate_job", "drain_node", "reboot_node", "gpu_reset"})
GRACE_S = 900.0  # a restart from the last checkpoint takes minutes (relaunch, NCCL init, checkpoint load)
KILL_S = 60.0  # the scheduler kills the ranks within this of the restart's execution
SKEW_S = 5.0  # the execution's recorded time may trail the driver's event by this (clocks, flush order)
XID_KILLED = 45  # the driver's cleanup of a killed process's channels

_KINDS_SQL = ", ".join(f"'{k}'" for k in sorted(RESTART_KINDS))
_OWN_SQL = (
    "SELECT p.action, coalesce(e.data_ts_s, e.ts_s) AS ts_s FROM executions e JOIN proposals p "
    f"USING (proposal_id) WHERE e.status = 'executed' AND p.kind IN ({_KINDS_SQL})"
)
_KEY_SQL = (
    "SELECT (SELECT count(*) FROM executions WHERE status = 'executed') AS n, "
    "(SELECT count(*) FROM peer_executions) AS p"
)
_PEER_SQL = f"SELECT kind, target, units, ts_s, parameters FROM peer_executions WHERE kind IN ({_KINDS_SQL})"


def _nodes_hit(target: str, units: list[str]) -> set[str]:
    """The nodes whose ranks an action killed: its target's and units' (a restart's `exclude` is one)."""
    return {u.split("/", 1)[0] for u in [target, *units] if u and not u.startswith("job:")}


def _jobs_hit(target: str, units: list[str], job_of_gpu: Mapping[str, str]) -> set[str]:
    """The jobs an action on `target` restarted (their names as job_ranks spells them)."""
    if target.startswith("job:"):
        return {target.removeprefix("job:")}
    nodes = _nodes_hit(target, units)
    return {job for gpu, job in job_of_gpu.items() if gpu.split("/", 1)[0] in nodes}


def _excluded(parameters: Any) -> list[str]:
    """A restart's `exclude` (a node or a GPU taken out: the ranks there were killed and moved)."""
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except ValueError:
            return []
    exclude = parameters.get("exclude") if isinstance(parameters, dict) else None
    return [exclude] if isinstance(exclude, str) and exclude else []


class ProductRestarts:
    """Per job, and per node whose ranks it killed, when the product last restarted it; re-read only when an
    execution was added here."""

    def __init__(self) -> None:
        self.key: Any = None
        self.at_ts_s: dict[str, float] = {}
        self.node_ts_s: dict[str, float] = {}  # node -> the newest restart that killed ranks on it

    def refresh(self, store: Store, job_of_gpu: Mapping[str, str]) -> None:
        key = tuple(store.query(_KEY_SQL)[0].values())
        if key == self.key:
            return
        self.key = key
        found: dict[str, float] = {}
        nodes: dict[str, float] = {}
        actions: list[tuple[str, list[str], float]] = []
        for row in store.query(_OWN_SQL):
            try:
                action = json.loads(str(row["action"]))
            except ValueError:
                continue  # an unreadable row is no evidence of what ran
            if isinstance(action, dict):
                units = _excluded(action.get("parameters"))
                actions.append((str(action.get("target", "")), units, float(row["ts_s"])))
        for row in store.query(_PEER_SQL):
            units = [str(u) for u in row["units"] or []] + _excluded(row["parameters"])
            actions.append((str(row["target"]), units, float(row["ts_s"])))
        for target, units, ts_s in actions:
            for job in _jobs_hit(target, units, job_of_gpu):
                found[job] = max(found.get(job, ts_s), ts_s)
            for node in _nodes_hit(target, units):
                nodes[node] = max(nodes.get(node, ts_s), ts_s)
        self.at_ts_s, self.node_ts_s = found, nodes

    def killed_by_product(self, job: str | None, gpu: str, xid: int, ts_s: float) -> bool:
        """An Xid 45 at `ts_s` on `gpu`, of `job` (None: no job is placed there now): the kill of a restart the
        product ran just before, of that job or of the ranks on that GPU's node (they moved off it)."""
        if xid != XID_KILLED:
            return False
        node = gpu.split("/", 1)[0]
        for at in (self.at_ts_s.get(job) if job is not None else None, self.node_ts_s.get(node)):
            if at is not None and at - SKEW_S <= ts_s <= at + KILL_S:
                return True
        return False

    def restarting(self, job: str | None, last_step_ts_s: float | None, now_ts_s: float) -> bool:
        """The product restarted `job` after its last step, within `GRACE_S` of `now_ts_s`."""
        ts = self.at_ts_s.get(job) if job is not None else None
        if ts is None or now_ts_s - ts > GRACE_S:
            return False
        return last_step_ts_s is None or ts >= last_step_ts_s
