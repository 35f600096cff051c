"""Report sections about GPU health counters, the network, incidents, actions and data coverage."""

from __future__ import annotations

from aiops.report import intended, plots
from aiops.report import queries as q
from aiops.report import queries_health as qh
from aiops.report.model import Section
from aiops.report.period import Period
from aiops.report.sections import _t
from aiops.report.text import clean, duration, num, utc
from aiops.store import Store


def _components(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"


def _int(value: object) -> str:
    return "-" if value is None else f"{int(value):,}"  # type: ignore[call-overload]


def health(store: Store, period: Period, found: qh.Counters) -> Section | None:
    """found: `queries_health.gpu_counters` of the period (computed once, the headline counts drains)."""
    xids = qh.xids_by_code(store, period)
    counters = found.rows
    if not xids and not counters and not found.minor_gpus:
        return None
    section = Section("health", "GPU health counters")
    if xids:
        section.tables.append(
            _t(
                "XIDs by code",
                ("XID", "events", "GPUs", "first GPU"),
                [(r["xid"], r["n"], r["gpus"], r["first_gpu"]) for r in xids],
            )
        )
        section.plots.append(
            plots.bars(
                "xids",
                "XID events by code",
                "events",
                [f"XID {r['xid']}" for r in xids],
                [r["n"] for r in xids],
            )
        )
    if counters:
        section.tables.append(
            _t(
                "GPUs whose counters rose in the period (ECC volatile rise, aggregate DBE total, PCIe, NVLink; "
                f"memory XIDs {'/'.join(str(x) for x in qh.MEMORY_XIDS)}: row remapping or page retirement)",
                (
                    "GPU",
                    "ECC SBE",
                    "ECC DBE",
                    "DBE total",
                    "PCIe replays",
                    "PCIe width",
                    "NVLink CRC",
                    "NVLink replays",
                    "NVML errors",
                    "memory XIDs",
                ),
                [
                    (
                        r["gpu"],
                        _int(r["sbe"]),
                        _int(r["dbe"]),
                        _int(r["dbe_total"]),
                        _int(r["pcie_replays"]),
                        f"x{_int(r['min_width'])}/x{_int(r['max_width'])}",
                        _int(r["nvlink_crc"]),
                        _int(r["nvlink_replays"]),
                        f"{r['nvml_errors']} {r['nvml_error'] or ''}".strip(),
                        ", ".join(str(x) for x in r["memory_xids"]) or "-",
                    )
                    for r in counters
                ],
            )
        )
    if found.minor_gpus:
        gpus = f"{found.minor_gpus} GPU{'s' if found.minor_gpus != 1 else ''}"
        section.lines.append(
            f"{gpus} gained 1-{qh.MINOR_SBE} corrected ECC errors each ({found.minor_sbe} in all) and nothing "
            "else: routine for HBM, summarised here, not listed (a GPU is listed from "
            f"{qh.MINOR_SBE + 1} corrected errors, or with any uncorrected error or memory XID)."
        )
    drain = [(r["gpu"], reason) for r in counters if (reason := qh.drain_reason(r))]
    if drain:
        section.tables.append(_t("GPUs to drain or send back", ("GPU", "reason"), drain))  # type: ignore[arg-type]
    else:
        section.lines.append("No GPU's counters call for draining it.")
    return section


def network(store: Store, period: Period) -> Section | None:
    lanes = qh.lane_traffic(store, period)
    colls = qh.collectives(store, period)
    ib = qh.ib_errors(store, period)
    if not lanes and not colls and not ib:
        return None
    section = Section("network", "Network")
    if lanes:
        section.tables.append(
            _t(
                "Traffic by lane",
                (
                    "lane",
                    "mean Gbit/s",
                    "drops",
                    "CE marks",
                    "retransmits",
                    "carrier changes",
                    "link-down samples",
                    "peak queue ms",
                ),
                [
                    (
                        r["lane"],
                        num((r["tx_bps"] or 0) * 8 / 1e9, ",.2f"),
                        _int(r["drops"]),
                        _int(r["ce_marks"]),
                        _int(r["retransmits"]),
                        _int(r["carrier_changes"]),
                        _int(r["link_down_samples"]),
                        num(r["max_queue_delay_ms"]),
                    )
                    for r in lanes
                ],
            )
        )
        series = qh.lane_series(store, period, q.bucket_s(store, period))
        names = sorted({r["lane"] for r in series})
        ts = sorted({r["ts_s"] for r in series})
        if len(ts) > 1:
            by = {(r["ts_s"], r["lane"]): r["gbps"] for r in series}
            section.plots.append(
                plots.time_series(
                    "lanes",
                    "Throughput by lane",
                    "throughput (Gbit/s)",
                    ts,
                    {n: [by.get((t, n)) for t in ts] for n in names},
                )
            )
    if colls:
        section.tables.append(
            _t(
                "Collectives",
                ("job", "op", "scope", "mean p99 ms", "worst p99 ms", "timeouts", "ops"),
                [
                    (
                        r["job"],
                        r["op"],
                        r["scope"],
                        num(r["p99_ms"], ",.2f"),
                        num(r["max_p99_ms"], ",.2f"),
                        _int(r["timeouts"]),
                        _int(r["ops"]),
                    )
                    for r in colls
                ],
            )
        )
    if ib:
        section.tables.append(
            _t(
                "InfiniBand ports whose error counters rose",
                (
                    "node",
                    "device",
                    "port",
                    "symbol errors",
                    "link downed",
                    "receive errors",
                    "transmit discards",
                ),
                [
                    (
                        r["node"],
                        r["device"],
                        r["port"],
                        _int(r["symbol_errors"]),
                        _int(r["link_downed"]),
                        _int(r["rcv_errors"]),
                        _int(r["xmit_discards"]),
                    )
                    for r in ib
                ],
            )
        )
    return section


def incidents(store: Store, period: Period) -> Section:
    rows = qh.incidents(store, period)
    section = Section("incidents", "Incidents")
    if not rows:
        section.lines.append("No incident was open in this period.")
        return section
    table_rows = []
    total_lost = 0.0
    for r in rows:
        components = list(r["components"] or [])
        ours = intended.explained_by_intended(store, r)  # a limit the service set: no fault lost these hours
        lost = 0.0 if ours else qh.gpu_hours_lost(store, r["opened_ts_s"], r["end_ts_s"], components)
        total_lost += lost
        cause = (
            f"{r['root_cause']} @ {r['component']} ({100 * r['confidence']:.0f} %)"
            if r["root_cause"]
            else "not diagnosed"
        )
        table_rows.append(
            (
                r["incident_id"],
                utc(r["opened_ts_s"]),
                duration(r["end_ts_s"] - r["opened_ts_s"]) + ("" if r["resolved"] else " (open)"),
                r["severity"],
                cause,
                f"{r['summary'] or '-'} [{r['evidence_n'] or 0} evidence items]",
                f"{lost:,.2f}" + (" (a limit the service set)" if ours else ""),
                r["actions"] or "none",
            )
        )
    section.lines.append(
        f"{len(rows)} incident{'s' if len(rows) != 1 else ''}; GPU-hours lost to them: {total_lost:,.2f}."
    )
    section.tables.append(
        _t(
            "Incidents",
            (
                "incident",
                "opened",
                "duration",
                "severity",
                "diagnosis",
                "evidence",
                "GPU-hours lost",
                "actions",
            ),
            table_rows,
        )
    )
    items = [
        (f"{r['incident_id']} {r['root_cause'] or r['title']}", r["opened_ts_s"], r["end_ts_s"]) for r in rows
    ]
    # the axis spans the telemetry the period holds (a 10-minute run in a 24 h period is not a sliver)
    first = store.scalar(
        "SELECT min(ts_s) FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?", [period.start_ts_s, period.end_ts_s]
    )
    last = store.scalar(
        "SELECT max(ts_s) FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?", [period.start_ts_s, period.end_ts_s]
    )
    low = min([float(first)] if first is not None else [] + [r["opened_ts_s"] for r in rows])
    high = max([float(last)] if last is not None else [] + [r["end_ts_s"] for r in rows])
    low, high = max(low, period.start_ts_s), min(max(high, low + 60), period.end_ts_s)
    section.plots.append(plots.timeline("incidents", "Incident timeline", items, low, high))
    return section


def actions(store: Store, period: Period) -> Section:
    from guardrails.audit import verify

    section = Section("actions", "Actions and guardrails")
    statuses = qh.proposals_by_status(store, period)
    if statuses:
        section.tables.append(
            _t(
                "Proposals filed in the period or for its incidents, by status",
                ("status", "proposals", "physical"),
                [(r["status"], r["n"], r["physical"]) for r in statuses],
            )
        )
    else:
        section.lines.append("No action was proposed in this period.")
    set_rows = intended.actions_set(store, period)
    if set_rows:
        section.tables.append(
            _t(
                "What the service set (intended state: expected, not an incident, until replaced or expired)",
                ("proposal", "kind", "property", "value", "components", "set", "until", "by"),
                [
                    (
                        r["proposal_id"],
                        r["kind"],
                        r["property"],
                        ", ".join(sorted(r["values"])),
                        _components(r["components"]),
                        utc(r["set_ts_s"]),
                        utc(r["until_ts_s"]),
                        "this workspace" if r["source"] == "executed" else r["source"],
                    )
                    for r in set_rows
                ],
            )
        )
    judged = intended.outcomes(store, period)
    if judged:
        section.tables.append(
            _t(
                "Did it work: each executed action's effect, judged once its window passed",
                ("proposal", "incident", "verdict", "check", "detail", "judged"),
                [
                    (
                        r["proposal_id"],
                        r["incident_id"] or "-",
                        r["verdict"],
                        r["check"],
                        r["detail"],
                        utc(r["checked_ts_s"]),
                    )
                    for r in judged
                ],
            )
        )
    policies = qh.policy_events(store)
    if policies:
        newest = policies[0]
        section.lines.append(
            f"Response policy: last {newest['event']} by {clean(newest['actor'])} at {utc(newest['ts_s'])}."
        )
    else:
        section.lines.append(
            "Response policy: none approved (every physical action needs a person's approval)."
        )
    result = verify(store)
    section.lines.append(
        ("Audit chain verified: " if result.ok else "AUDIT CHAIN BROKEN: ") + clean(result.message)
    )
    return section


def coverage(store: Store, period: Period, interval_s: float) -> Section:
    section = Section("coverage", "Data coverage")
    sources = q.coverage(store, period)
    seen = [r for r in sources if r["rows"]]
    missing = [r["source"] for r in sources if not r["rows"]]
    if seen:
        section.tables.append(
            _t(
                "Telemetry in the period",
                ("source", "rows", "first", "last"),
                [(r["source"], f"{r['rows']:,}", utc(r["first_ts_s"]), utc(r["last_ts_s"])) for r in seen],
            )
        )
    else:
        section.lines.append("No telemetry in this period: no collector wrote anything between these times.")
        held = q.data_range(store)
        if held is not None:  # say where the data is, and how to ask for it
            section.lines.append(
                f"This workspace holds GPU telemetry from {utc(held['first_ts_s'])} to {utc(held['last_ts_s'])}: "
                "ask for that period with --end latest (or --start/--end)."
            )
    if missing:
        section.lines.append("No rows from: " + ", ".join(missing) + ".")
    gaps = q.gaps(store, period, interval_s)
    if gaps:
        section.tables.append(
            _t(
                "Gaps in GPU telemetry: no GPU reported (longest first)",
                ("from", "gap"),
                [(utc(r["from_ts_s"]), duration(r["gap_s"])) for r in gaps],
            )
        )
    elif seen:
        section.lines.append(f"No gap in fleet GPU telemetry longer than {3 * interval_s:g} s.")
    missing_gpus = q.gpus_missing(store, period)
    if missing_gpus:
        section.tables.append(
            _t(
                "GPUs that reported at fewer than 95 % of the sample times",
                ("GPU", "samples", "of", "NVML errors"),
                [(r["gpu"], r["samples"], r["times"], r["errors"]) for r in missing_gpus],
            )
        )
    errors = q.collector_errors(store, period)
    if errors:
        section.tables.append(
            _t(
                "Collector errors",
                ("collector", "error", "count", "last"),
                [(r["collector"], r["error"], r["n"], utc(r["last_ts_s"])) for r in errors],
            )
        )
    else:
        section.lines.append("No collector reported an error.")
    return section
