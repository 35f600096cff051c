"""rank_timing_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe
for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per probed process, op and duty-cycled
window from the eBPF uprobes on libnccl and libcudart (aiops/profile/rank_timing.py; the twin's
aiops/sim/rank_timing.py): the calls, the time blocked between entry and return, the window's length.

Its families are more than `stored * scale`, so `hand_written` (rendered in aiops/service/metrics_ranks.py, read
back in aiops/fleet/pivot.py): a rank's calls and blocked time summed per kind of call over its ops and windows
(a rank costs nine series, not one per op), and the seconds its probes counted, each window once (the shares'
denominator)."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

KINDS = ("collective", "group", "sync", "copy")  # the kinds of call exported (aiops/profile/rank_probes.py)
RANK_LABELS = ("node", "job", "rank", "kind")
PROBES = "the rank-timing uprobes"

BLOCKED = Family(
    "aiops_rank_blocked_seconds_total",
    "time a rank was blocked in probed calls of this kind (entry to return; rank-timing uprobes)",
    "seconds",
    "rank_timing_samples.blocked_s summed per rank and kind of call (`collective`, `group`, `sync`, `copy`; "
    "aiops/service/metrics_ranks.py): the fleet's rank_timing_samples, one row per rank, kind and scrape "
    "(RANK_WINDOW_SQL, `StragglerRules`: rank_straggler, network_straggler; `aiops/rca/stragglers.py`)",
    RANK_LABELS,
    per_gpu="—",
    per_node="32",
)
CALLS = Family(
    "aiops_rank_calls_total",
    "probed calls of this kind a rank made",
    "calls",
    "rank_timing_samples.calls, summed the same way",
    RANK_LABELS,
    per_gpu="—",
    per_node="32",
)
PROBED = Family(
    "aiops_rank_probed_seconds_total",
    "seconds the rank-timing probes counted for this rank (the windows; the shares' denominator)",
    "seconds",
    "rank_timing_samples.window_s, each probed window once: the shares' denominator (a scrape interval holds "
    "some windows, or none: then no row)",
    ("node", "job", "rank"),
    per_gpu="—",
    per_node="8",
)

RANK_TIMING_SAMPLES = Table(  # the whole table: migration 21 (its SQL by hand, before declarations)
    "rank_timing_samples",
    (
        Column("ts_s", "float64", key=True),  # the window's close
        Column("node", "string", key=True),
        Column("job", "string", key=True),  # aiops/workload.py's job name; process-<pid> when no job is known
        Column("rank", "int32", key=True),  # NULL when neither ncclCommInitRank nor RANK said it
        Column("world_size", "int32"),
        Column("pid", "int64", key=True),
        Column(
            "op", "string", key=True
        ),  # all_reduce ... group_end, or the CUDA call (cudaStreamSynchronize ...)
        Column("kind", "string", key=True),  # KINDS
        Column("window_s", "float64"),
        Column(
            "calls",
            "int64",
            reacts_to=ANY,
            observed_by=f"{PROBES} (a slower step calls less per window)",
        ),
        Column(
            "blocked_s",
            "float64",
            reacts_to=ANY,
            observed_by=f"{PROBES} (time in a call: the rank's GPU, copies, peers)",
        ),
        Column(
            "bytes",
            "int64",
            reacts_to=ANY,
            observed_by=f"{PROBES} (the collectives' buffers: fewer calls, fewer bytes)",
        ),
        Column("rank_source", "string"),  # nccl | env | none
    ),
    hand_written=(BLOCKED, CALLS, PROBED),
    rows_react_to=(ANY, f"{PROBES}: a job that stalls or restarts calls nothing"),
)
