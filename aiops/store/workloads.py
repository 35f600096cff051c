"""`job_ranks` and `jobs` of a real host, refreshed from `gpu_processes` (collectors/workloads): the analyst's job
queries (step regression, stragglers, GPU-seconds lost, the fleet's rank joins) read these tables on a real node
exactly as they read the twin's.

`refresh_jobs(store, node, as_of_ts_s)` replaces this node's ranks of every job the collector has seen with the
ranks of its collect at `as_of_ts_s` (a GPU a new job took over is that job's, an ended job's ranks leave), and
upserts each current job's row: `nodes` the nodes its ranks are known on here, `ranks` the job's WORLD_SIZE where
a rank said it (else the ranks seen), `started_ts_s` the first interval a rank of it was seen. A rank a process
does not state (a Kubernetes pod without RANK) is numbered by GPU order on this node. The rank's NIC is its GPU's
rail NIC from `topology` (empty when discovery found none). Job rows of other sources (the twin's scenario, a
scheduler export) are left alone: only names that `gpu_processes` holds are touched.
"""

from __future__ import annotations

from typing import Any

from aiops.store.store import Store

_CURRENT = """
WITH now_rows AS (
    SELECT DISTINCT ON (job, gpu) job, gpu, node, rank, local_rank, world_size
    FROM gpu_processes
    WHERE node = ? AND ts_s = ? AND job IS NOT NULL
    ORDER BY job, gpu, rank NULLS LAST, pid
)
SELECT r.job,
       coalesce(r.rank, CAST(row_number() OVER (PARTITION BY r.job ORDER BY r.gpu) - 1 AS INTEGER)) AS rank,
       r.gpu, r.node, coalesce(t.rail_nic, '') AS nic, r.world_size
FROM now_rows r LEFT JOIN topology t ON t.component = r.gpu
ORDER BY r.job, rank
"""


def current_ranks(store: Store, node: str, as_of_ts_s: float) -> list[dict[str, Any]]:
    """`node`'s ranks as the collect at `as_of_ts_s` saw them: what `write_ranks` writes."""
    return store.query(_CURRENT, [node, as_of_ts_s])


def refresh_jobs(store: Store, node: str, as_of_ts_s: float) -> int:
    """Rewrite `node`'s job_ranks (and upsert jobs) from the collect at `as_of_ts_s`; returns the ranks written."""
    return write_ranks(store, node, current_ranks(store, node, as_of_ts_s))


def write_ranks(store: Store, node: str, rows: list[dict[str, Any]]) -> int:
    """Rewrite `node`'s job_ranks (and upsert jobs) with `rows` (`current_ranks`); returns the ranks written."""
    conn = store.conn
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(
            """DELETE FROM job_ranks WHERE node = ? AND job IN
               (SELECT DISTINCT job FROM gpu_processes WHERE node = ? AND job IS NOT NULL)""",
            [node, node],
        )
        if rows:
            conn.executemany(
                "INSERT INTO job_ranks (job, rank, gpu, node, nic) VALUES (?, ?, ?, ?, ?)",
                [(r["job"], r["rank"], r["gpu"], r["node"], r["nic"]) for r in rows],
            )
        for job in sorted({r["job"] for r in rows}):
            sizes = [r["world_size"] for r in rows if r["job"] == job and r["world_size"] is not None]
            conn.execute(
                """INSERT INTO jobs (job, nodes, ranks, started_ts_s)
                   SELECT ?, (SELECT count(DISTINCT node) FROM job_ranks WHERE job = ?),
                          coalesce(?, (SELECT count(*) FROM job_ranks WHERE job = ?)),
                          (SELECT min(ts_s) FROM gpu_processes WHERE job = ?)
                   ON CONFLICT (job) DO UPDATE SET nodes = excluded.nodes, ranks = excluded.ranks""",
                [job, job, max(sizes) if sizes else None, job, job],
            )
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    return len(rows)
