"""The analyst's answer about one component, from stored rows only: first whether it is OK (every open incident
that touches it, ranked: aiops/agent/situation.py; with a time, the incidents of that window), then its readings
against its peers' over a window, its events, and the plan steps and actions pending on it or on what holds it.
Every number shown comes from a row a cited SQL returned (an `Evidence`), which the chat re-runs before it shows
the answer. A window without an end ends at the newest telemetry when the answer is made (the horizon), so the
re-run reads the same rows while new data lands.

Peers: a GPU's are the other GPUs of its node; a node's, NIC's or rack's are the others of its kind; a job is
compared with its own step-time baseline (its first tenth of steps in the window).
"""

from __future__ import annotations

import statistics
from typing import Any

from aiops.agent.findings import MAX_ROWS, Findings
from aiops.agent.scope import TimeScope
from aiops.agent.situation import Places
from aiops.agent.standing import standing
from aiops.models import Diagnosis
from aiops.nvml_bits import THROTTLE
from aiops.store import Store
from aiops.text import fields_text, plural, when
from guardrails.records import GuardrailRecords

FAR_PAST_S, FAR_FUTURE_S = 0.0, 1e11  # open window ends, as SQL parameters (JSON has no infinity)


def newest_ts_s(store: Store) -> float | None:
    """The newest telemetry: "now" for the analyst, and the end of every window that names none."""
    newest = store.scalar("SELECT max(ts_s) FROM gpu_samples")
    return float(newest) if newest is not None else None


def window(scope: TimeScope | None, horizon_ts_s: float | None = None) -> list[float]:
    """[start, end] as SQL parameters: an open start is the far past, an open end the horizon (the newest
    telemetry when the answer was made; the far future only when there is none)."""
    end = horizon_ts_s if horizon_ts_s is not None else FAR_FUTURE_S
    if scope is None:
        return [FAR_PAST_S, end]
    return [
        scope.start_ts_s if scope.start_ts_s is not None else FAR_PAST_S,
        scope.end_ts_s if scope.end_ts_s is not None else end,
    ]


def kind_of(store: Store, component: str) -> str | None:
    if component.startswith("job:"):
        found = store.query("SELECT job FROM jobs WHERE job = ?", [component[4:]])
        return "job" if found else None
    rows = store.query("SELECT kind FROM topology WHERE component = ?", [component])
    return str(rows[0]["kind"]) if rows else None


def about(
    store: Store,
    component: str,
    scope: TimeScope | None,
    diagnoses: list[Diagnosis],
    horizon_ts_s: float | None = None,
) -> Findings:
    """What the workspace holds about `component` (a name `kind_of` knows): whether it is OK, its readings,
    what is pending on it. `horizon_ts_s`: the newest telemetry (read here when not given)."""
    horizon = horizon_ts_s if horizon_ts_s is not None else newest_ts_s(store)
    kind = kind_of(store, component)
    found = Findings()
    places = Places.read(store)
    standing(store, component, scope, diagnoses, places, horizon, found)
    readers = {"gpu": _gpu, "node": _node, "nic": _nic, "rack": _rack, "job": _job}
    reader = readers.get(kind or "")
    if reader is None:
        found.lines.append(f"{component}: no telemetry of its kind ({kind}) is read by the offline analyst.")
    else:
        reader(store, component, window(scope, horizon), found)
    _pending(store, component, places, found)
    return found


def _span(rows: list[dict[str, Any]]) -> str:
    lo = min((r["first_ts_s"] for r in rows if r.get("first_ts_s") is not None), default=None)
    hi = max((r["last_ts_s"] for r in rows if r.get("last_ts_s") is not None), default=None)
    return f"from {when(lo)} to {when(hi)}"


def _others(count: int, noun: str) -> str:
    """`the other node`, `the other 7 nodes`."""
    return f"the other {noun}" if count == 1 else f"the other {count} {noun}s"


def _peer_range(rows: list[dict[str, Any]], column: str) -> str:
    values = [r[column] for r in rows if r.get(column) is not None]
    if not values:
        return "-"
    median = statistics.median(values)
    return f"median {median:g} (range {min(values):g} to {max(values):g})"


GPU_SQL = (
    "SELECT gpu, count(*) AS samples, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, "
    "round(avg(temp_c), 1) AS mean_temp_c, round(max(temp_c), 1) AS max_temp_c, "
    "round(avg(power_w), 1) AS mean_power_w, round(avg(sm_clock_mhz), 0) AS mean_sm_clock_mhz, "
    f"count(*) FILTER (WHERE (clocks_event_reasons & {THROTTLE}) != 0) AS throttled_samples, "
    "max(ecc_dbe_total) - min(ecc_dbe_total) AS new_dbe, max(pcie_replay_total) - min(pcie_replay_total) "
    "AS new_pcie_replays, max(nvlink_crc_total) - min(nvlink_crc_total) AS new_nvlink_crc "
    "FROM gpu_samples WHERE node = ? AND ts_s >= ? AND ts_s <= ? GROUP BY gpu ORDER BY gpu = ? DESC, gpu"
)


def _gpu_line(r: dict[str, Any]) -> str:
    errors = {k: r[k] for k in ("new_dbe", "new_pcie_replays", "new_nvlink_crc") if r.get(k)}
    return (
        f"mean {r['mean_temp_c']:g} °C (max {r['max_temp_c']:g} °C), mean power {r['mean_power_w']:g} W, "
        f"mean SM clock {r['mean_sm_clock_mhz']:g} MHz, throttled in {plural(r['throttled_samples'], 'sample')} "
        f"of {r['samples']:,}" + (f"; counters rose: {fields_text(errors)}" if errors else "")
    )


def _gpu(store: Store, gpu: str, span: list[float], found: Findings) -> None:
    node = gpu.split("/")[0]
    params = [node, *span, gpu]
    rows = store.query(GPU_SQL, params)
    mine = [r for r in rows if r["gpu"] == gpu]
    if not mine:
        found.lines.append(f"{gpu}: no GPU samples in this window.")
        return
    me, peers = mine[0], [r for r in rows if r["gpu"] != gpu]
    found.lines.append(f"{gpu}, {plural(me['samples'], 'sample')} {_span([me])}: {_gpu_line(me)}.")
    if peers:
        found.lines.append(
            f"  {_others(len(peers), 'GPU')} of {node}: mean temperature {_peer_range(peers, 'mean_temp_c')} °C, "
            f"max {max(r['max_temp_c'] for r in peers):g} °C; mean power {_peer_range(peers, 'mean_power_w')} W; "
            f"throttled samples {_peer_range(peers, 'throttled_samples')}."
        )
    found.fact(
        f"{gpu} against the other GPUs of {node}: temperature, power, clock, throttling",
        GPU_SQL,
        params,
        rows,
    )
    _events(store, "gpu = ?", gpu, span, found)
    ranks = store.query("SELECT job, rank FROM job_ranks WHERE gpu = ? ORDER BY job", [gpu])
    if ranks:
        found.lines.append("  runs " + ", ".join(f"rank {r['rank']} of job {r['job']}" for r in ranks) + ".")


# The hottest GPU by (temperature, name): two GPUs at the same peak name the same one on every run (arg_max picks
# any of a tie, and the re-run of the citation would read as a mismatch)
NODE_SQL = (
    "SELECT node, count(DISTINCT gpu) AS gpus, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, "
    "round(avg(temp_c), 1) AS mean_temp_c, round(max(temp_c), 1) AS max_temp_c, "
    "arg_max(gpu, (temp_c, gpu)) AS hottest_gpu, round(avg(power_w), 1) AS mean_power_w, "
    f"count(*) FILTER (WHERE (clocks_event_reasons & {THROTTLE}) != 0) AS throttled_samples "
    "FROM gpu_samples WHERE ts_s >= ? AND ts_s <= ? GROUP BY node ORDER BY node = ? DESC, node"
)
HOST_SQL = (
    "SELECT node, round(avg(cpu_util_pct), 1) AS mean_cpu_pct, round(avg(loader_wait_ms), 1) AS mean_loader_wait_ms, "
    "round(avg(iowait_pct), 1) AS mean_iowait_pct FROM host_samples WHERE ts_s >= ? AND ts_s <= ? "
    "GROUP BY node ORDER BY node = ? DESC, node"
)


def _node(store: Store, node: str, span: list[float], found: Findings) -> None:
    params = [*span, node]
    rows = store.query(NODE_SQL, params)
    mine = [r for r in rows if r["node"] == node]
    if not mine:
        found.lines.append(f"{node}: no GPU samples in this window.")
    else:
        me, peers = mine[0], [r for r in rows if r["node"] != node]
        found.lines.append(
            f"{node}, {plural(me['gpus'], 'GPU')} {_span([me])}: mean {me['mean_temp_c']:g} °C, hottest "
            f"{me['hottest_gpu']} at {me['max_temp_c']:g} °C, mean power {me['mean_power_w']:g} W per GPU, "
            f"{plural(me['throttled_samples'], 'throttled sample')}."
        )
        if peers:
            found.lines.append(
                f"  {_others(len(peers), 'node')}: mean temperature {_peer_range(peers, 'mean_temp_c')} °C; "
                f"throttled samples {_peer_range(peers, 'throttled_samples')}."
            )
        found.fact(
            f"{node} against the other nodes: GPU temperature, power, throttling", NODE_SQL, params, rows
        )
    hosts = store.query(HOST_SQL, params)
    mine = [r for r in hosts if r["node"] == node]
    if mine:
        me, peers = mine[0], [r for r in hosts if r["node"] != node]
        found.lines.append(
            f"  host: CPU {me['mean_cpu_pct']:g} %, data-loader wait {me['mean_loader_wait_ms']:g} ms, iowait "
            f"{me['mean_iowait_pct']:g} %"
            + (f" (other nodes' loader wait {_peer_range(peers, 'mean_loader_wait_ms')} ms)" if peers else "")
            + "."
        )
        found.fact(f"{node}'s host against the other hosts: CPU, data-loader wait", HOST_SQL, params, hosts)
    _events(store, "node = ?", node, span, found)


NIC_SQL = (
    "SELECT nic, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, sum(drops) AS drops, "
    "sum(retransmits) AS retransmits, sum(ce_marks) AS ce_marks, round(avg(queue_delay_ms), 2) AS mean_queue_delay_ms, "
    "round(sum(tx_bytes) / 1e9, 2) AS tx_gb, sum(carrier_changes) AS carrier_changes "
    "FROM nic_samples WHERE ts_s >= ? AND ts_s <= ? GROUP BY nic ORDER BY nic = ? DESC, nic"
)


def _nic(store: Store, nic: str, span: list[float], found: Findings) -> None:
    params = [*span, nic]
    rows = store.query(NIC_SQL, params)
    mine = [r for r in rows if r["nic"] == nic]
    if not mine:
        found.lines.append(f"{nic}: no NIC samples in this window.")
        return
    me, peers = mine[0], [r for r in rows if r["nic"] != nic]
    found.lines.append(
        f"{nic} {_span([me])}: sent {me['tx_gb']:g} GB, {plural(int(me['drops'] or 0), 'drop')}, "
        f"{plural(int(me['retransmits'] or 0), 'retransmit')}, {plural(int(me['ce_marks'] or 0), 'ECN mark')}, "
        f"mean queue delay {me['mean_queue_delay_ms']:g} ms, {plural(int(me['carrier_changes'] or 0), 'carrier change')}."
    )
    if peers:
        found.lines.append(
            f"  {_others(len(peers), 'NIC')}: drops {_peer_range(peers, 'drops')}, retransmits "
            f"{_peer_range(peers, 'retransmits')}, queue delay {_peer_range(peers, 'mean_queue_delay_ms')} ms."
        )
    found.fact(
        f"{nic} against the other NICs: drops, retransmits, ECN marks, queue delay", NIC_SQL, params, rows
    )


# The power cap is the DCIM input in force at the window's end (dcim_signals, the operator's signal: a rack's own,
# else the fleet's), not a rack_samples column: no real rack reports the facility's cap.
RACK_SQL = (
    "WITH cur AS (SELECT rack, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, "
    "round(avg(inlet_temp_c), 2) AS mean_inlet_c, round(max(inlet_temp_c), 2) AS max_inlet_c, "
    "round(min(coolant_flow_lpm), 1) AS min_flow_lpm, round(avg(power_kw), 2) AS mean_power_kw "
    "FROM rack_samples WHERE ts_s >= ? AND ts_s <= ? GROUP BY rack), "
    "caps AS (SELECT s.scope, max(s.budget_kw) AS cap_kw FROM dcim_signals s WHERE s.kind = 'cap' AND s.ts_s <= ? "
    "AND NOT EXISTS (SELECT 1 FROM dcim_signals c WHERE c.scope = s.scope AND c.ts_s > s.ts_s AND c.ts_s <= ?) "
    "GROUP BY s.scope) "
    "SELECT cur.*, coalesce(r.cap_kw, f.cap_kw) AS power_cap_kw FROM cur LEFT JOIN caps r ON r.scope = cur.rack "
    "LEFT JOIN caps f ON f.scope = 'fleet' ORDER BY cur.rack = ? DESC, cur.rack"
)


def _rack(store: Store, rack: str, span: list[float], found: Findings) -> None:
    params = [*span, span[1], span[1], rack]
    rows = store.query(RACK_SQL, params)
    mine = [r for r in rows if r["rack"] == rack]
    if not mine:
        found.lines.append(f"{rack}: no rack samples in this window.")
        return
    me, peers = mine[0], [r for r in rows if r["rack"] != rack]
    cap = f", capped at {me['power_cap_kw']:g} kW" if me["power_cap_kw"] is not None else ", no power cap"
    found.lines.append(
        f"{rack} {_span([me])}: inlet mean {me['mean_inlet_c']:g} °C (max {me['max_inlet_c']:g} °C), coolant flow "
        f"at least {me['min_flow_lpm']:g} l/min, power {me['mean_power_kw']:g} kW{cap}."
    )
    if peers:
        found.lines.append(
            f"  {_others(len(peers), 'rack')}: inlet {_peer_range(peers, 'mean_inlet_c')} °C, "
            f"coolant flow {_peer_range(peers, 'min_flow_lpm')} l/min."
        )
    found.fact(f"{rack} against the other racks: inlet, coolant flow, power", RACK_SQL, params, rows)
    nodes = store.query(
        "SELECT component FROM topology WHERE kind = 'node' AND rack = ? ORDER BY idx", [rack]
    )
    if nodes:
        found.lines.append(f"  nodes: {', '.join(str(n['component']) for n in nodes)}.")


# The usual slowest GPU: the most frequent, ties to the first by name (mode() picks any of a tie, so a re-run of the
# citation could name another and read as a mismatch)
USUAL_SLOWEST = (
    "(SELECT slowest_gpu FROM s WHERE slowest_gpu IS NOT NULL{recent} GROUP BY slowest_gpu "
    "ORDER BY count(*) DESC, slowest_gpu LIMIT 1) AS usual_slowest_gpu"
)
JOB_SQL = (
    "WITH s AS (SELECT * FROM job_steps WHERE job = ? AND ts_s >= ? AND ts_s <= ?) "
    "SELECT job, count(*) AS steps, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, "
    "round(median(step_time_s), 3) AS median_step_s, round(max(step_time_s), 3) AS max_step_s, "
    f"{USUAL_SLOWEST.format(recent='')} FROM s GROUP BY job"
)


def _job(store: Store, component: str, span: list[float], found: Findings) -> None:
    job = component[4:]
    params = [job, *span]
    rows = store.query(JOB_SQL, params)
    ranks = store.query(
        "SELECT count(*) AS ranks, count(DISTINCT node) AS nodes FROM job_ranks WHERE job = ?", [job]
    )
    where = f"{plural(ranks[0]['ranks'], 'rank')} on {plural(ranks[0]['nodes'], 'node')}" if ranks else ""
    if not rows:
        found.lines.append(f"job {job} ({where}): no steps recorded in this window.")
        return
    r = rows[0]
    found.lines.append(
        f"job {job} ({where}), {plural(r['steps'], 'step')} {_span(rows)}: median step {r['median_step_s']:g} s, "
        f"slowest {r['max_step_s']:g} s; the slowest rank was most often on {r['usual_slowest_gpu']}."
    )
    found.fact(f"job {job}: step times and its usual slowest GPU", JOB_SQL, params, rows)


EVENTS_SQL = "SELECT ts_s, gpu, kind, xid, message FROM gpu_events WHERE {where} AND ts_s >= ? AND ts_s <= ? ORDER BY ts_s"


def _events(store: Store, where: str, component: str, span: list[float], found: Findings) -> None:
    sql = EVENTS_SQL.format(where=where)
    params = [component, *span]
    rows = store.query(sql, params)
    if not rows:
        found.lines.append(f"  no GPU events (XID, ECC) on {component} in this window.")
        return
    found.lines.append(f"  {plural(len(rows), 'GPU event')} on {component}, the latest:")
    for r in rows[-3:]:
        xid = f" XID {r['xid']}" if r.get("xid") is not None else ""
        found.lines.append(f"    {when(r['ts_s'])} {r['gpu']} {r['kind']}{xid}: {str(r['message'])[:160]}")
    found.fact(f"GPU events on {component}", sql, params, rows[-MAX_ROWS:])


def _pending(store: Store, component: str, places: Places, found: Findings) -> None:
    """The actions pending on `component`, on its parts or on what holds it (a rack's cap for a node)."""
    pending = [
        r
        for r in GuardrailRecords(store).proposals("pending")
        if places.holds(component, r.action.target) or places.holds(r.action.target, component)
    ]
    if not pending:
        found.lines.append(f"No action is pending on {component}, its parts or what holds it.")
        return
    found.lines.append(
        f"{plural(len(pending), 'action')} pending on {component}, its parts or what holds it "
        "('what should I do' ranks every pending one):"
    )
    for r in pending:
        a = r.action
        params = f" ({fields_text(a.parameters)})" if a.parameters else ""
        risk = "physical, needs approval" if r.physical else "digital"
        found.lines.append(f"  {a.proposal_id}: {a.kind} {a.target}{params}, {risk} (/why {a.proposal_id})")
