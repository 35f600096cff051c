"""A job the product restarted is restarting by design (issue 34 item 1: a requeued job is an expected state).

A signed `restart_job` or `migrate_job` (the job's target), or a `drain_node`, `reboot_node` or `gpu_reset` that
took a node of the job away, stops the job's processes and starts them again from the last checkpoint: for a
while its GPUs idle and it makes no step. That is what the person approved, not a new problem: until the job's
next step, and for at most `GRACE_S` after the action, its idle GPUs are no `gpu_idle_in_job` and the missing
steps no `job_stalled` (aiops/detect/rules.py). A job that has not stepped `GRACE_S` after the restart is judged
again as any other: a restart that did not bring it back is a symptom.

What the product ran, and nothing else: this workspace's executions (status `executed`, the proposal's action)
and what the other tier told it it ran (m027 `peer_executions`: a fleet's dispatch, a node agent's export). A
restart nobody here knows of (the user's, the scheduler's) is judged as before (aiops/detect/ended.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiops.store import Store

RESTART_KINDS = frozenset({"restart_job", "migrate_job", "drain_node", "reboot_node", "gpu_reset"})
GRACE_S = 900.0  # a restart from the last checkpoint takes minutes (relaunch, NCCL init, checkpoint load)

_KINDS_SQL = ", ".join(f"'{k}'" for k in sorted(RESTART_KINDS))
_OWN_SQL = (
    "SELECT p.action, coalesce(e.data_ts_s, e.ts_s) AS ts_s FROM executions e JOIN proposals p "
    f"USING (proposal_id) WHERE e.status = 'executed' AND p.kind IN ({_KINDS_SQL})"
)
_KEY_SQL = (
    "SELECT (SELECT count(*) FROM executions WHERE status = 'executed') AS n, "
    "(SELECT count(*) FROM peer_executions) AS p"
)
_PEER_SQL = f"SELECT kind, target, units, ts_s FROM peer_executions WHERE kind IN ({_KINDS_SQL})"


def _jobs_hit(kind: str, target: str, units: list[str], job_of_gpu: Mapping[str, str]) -> set[str]:
    """The jobs an action of `kind` on `target` restarted (their names as job_ranks spells them)."""
    if target.startswith("job:"):
        return {target.removeprefix("job:")}
    nodes = {u.split("/", 1)[0] for u in [target, *units] if u and not u.startswith("job:")}
    return {job for gpu, job in job_of_gpu.items() if gpu.split("/", 1)[0] in nodes}


class ProductRestarts:
    """Per job, when the product last restarted it; re-read only when an execution was added here."""

    def __init__(self) -> None:
        self.key: Any = None
        self.at_ts_s: dict[str, float] = {}

    def refresh(self, store: Store, job_of_gpu: Mapping[str, str]) -> None:
        key = tuple(store.query(_KEY_SQL)[0].values())
        if key == self.key:
            return
        self.key = key
        found: dict[str, float] = {}
        actions: list[tuple[str, str, list[str], float]] = []
        for row in store.query(_OWN_SQL):
            try:
                action = json.loads(str(row["action"]))
            except ValueError:
                continue  # an unreadable row is no evidence of what ran
            actions.append(
                (str(action.get("kind", "")), str(action.get("target", "")), [], float(row["ts_s"]))
            )
        for row in store.query(_PEER_SQL):
            units = [str(u) for u in row["units"] or []]
            actions.append((str(row["kind"]), str(row["target"]), units, float(row["ts_s"])))
        for kind, target, units, ts_s in actions:
            for job in _jobs_hit(kind, target, units, job_of_gpu):
                found[job] = max(found.get(job, ts_s), ts_s)
        self.at_ts_s = found

    def restarting(self, job: str | None, last_step_ts_s: float | None, now_ts_s: float) -> bool:
        """The product restarted `job` after its last step, within `GRACE_S` of `now_ts_s`."""
        ts = self.at_ts_s.get(job) if job is not None else None
        if ts is None or now_ts_s - ts > GRACE_S:
            return False
        return last_step_ts_s is None or ts >= last_step_ts_s
