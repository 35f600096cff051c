"""`/metrics`: the node's newest samples, its open incidents and the service's own health, in Prometheus text
exposition through prometheus_client. Values come from a cache the loop updates as rows are collected, never
from a query per scrape. Names follow Prometheus conventions: base units (celsius, watts, hertz, bytes,
seconds, ratio), `_total` for counters, one time series per label set.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aiops import nvml_bits
from aiops.column_model import Table
from aiops.columns import (
    COLLECTIVE_SAMPLES,
    FLOW_CLASS_SAMPLES,
    GPU_SAMPLES,
    HOST_SAMPLES,
    IB_PORT_SAMPLES,
    NETDEV_SAMPLES,
    NIC_SAMPLES,
    PSI_SAMPLES,
    THERMAL_ZONE_SAMPLES,
    exported,
)
from aiops.columns_sensors import HWMON
from aiops.service.metrics_analyst import AnalystExports
from aiops.service.metrics_workloads import WorkloadExports
from aiops.store.conditions import symptoms_agent_instance

PREFIX = "aiops_"
# tables whose rows hold what an interval added: kept per entity as running totals (`_observe_counted`)
COUNTED = {t.name: t for t in (NIC_SAMPLES, FLOW_CLASS_SAMPLES, COLLECTIVE_SAMPLES)}


def declared_metrics(
    table: Table, rows: Sequence[Mapping[str, Any]], agent: Mapping[str, str] | None = None
) -> list[Metric]:
    """Every family the table's columns are declared as (aiops/columns.py), each sample `stored * scale` labelled
    by the family's labels: the row's own values, the column's fixed ones (`type="corrected"`), and for a label
    the table has no column for, the agent's (`node`: a job's rows name none, the node reporting them does)."""
    own = agent or {}
    made: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
    for c in exported(table):
        assert c.family is not None
        name, fixed = c.family.name, dict(c.fixed)
        if name not in made:
            labels = list(c.family.labels)
            # prometheus_client names a counter without its `_total` (it adds it to the sample)
            made[name] = (
                CounterMetricFamily(name.removesuffix("_total"), c.family.help, labels=labels)
                if c.family.kind == "counter"
                else GaugeMetricFamily(name, c.family.help, labels=labels)
            )
        for values in rows:
            if values.get(c.name) is not None:
                label_values = [
                    fixed[n] if n in fixed else _label(values[n] if n in values else own.get(n))
                    for n in c.family.labels
                ]
                made[name].add_metric(label_values, float(values[c.name]) * c.scale)
    return list(made.values())


def _label(value: Any) -> str:
    return "" if value is None else str(value)


class MetricsCache(Collector):
    """Fed by the loop (`observe(table, columns, rows)`), read by scrapes (`collect()`). Thread-safe."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self.gpus: dict[str, dict[str, Any]] = {}
        self.xids: dict[tuple[str, int], int] = defaultdict(int)
        self.last_xid: dict[str, int] = {}  # dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last XID per GPU
        self.nic_up: dict[str, bool] = {}
        # table -> entity (its key columns but the time) -> its newest row, counted columns as running totals
        self.counted: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {name: {} for name in COUNTED}
        self.netdev: dict[
            tuple[str, str], dict[str, Any]
        ] = {}  # (node, dev): the twin's nodes share dev names
        self.ib: dict[tuple[str, str, str], dict[str, Any]] = {}  # (node, device, port)
        # keyed by node first: the twin's service collects every simulated node
        self.host: dict[str, dict[str, Any]] = {}
        self.psi: dict[tuple[str, str], dict[str, Any]] = {}
        self.hwmon: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.zones: dict[tuple[str, str], dict[str, Any]] = {}
        self.kernel_events: dict[str, int] = defaultdict(int)
        self.incidents: list[dict[str, Any]] = []
        self.collector_seconds: dict[str, float] = {}
        self.collector_errors: dict[str, int] = defaultdict(int)
        self.rows_ingested: dict[str, int] = defaultdict(int)
        self.gauges: dict[str, tuple[str, float]] = {}  # name -> (help, value)
        self.counters: dict[str, tuple[str, float]] = {}
        self.racks: dict[str, dict[str, Any]] = {}  # rack -> newest rack_samples row (the twin's facility)
        self.dcim_caps: dict[str, float] = {}  # scope -> kW of the DCIM caps in force
        self.workloads = WorkloadExports(PREFIX)  # aiops_gpu_workload_info (metrics_workloads.py)
        self.analyst = AnalystExports(node)  # what the cluster analyst reads (metrics_analyst.py)

    # -- feeding ------------------------------------------------------------------------------------------------
    def observe(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            if table == "gpu_processes":  # one collect's batch, empty when nothing runs: it replaces the last
                self.workloads.replace(dict(zip(columns, row, strict=False)) for row in rows)
                return
            for row in rows:
                values = dict(zip(columns, row, strict=False))
                self.analyst.observe(table, values)
                if table == "gpu_samples":
                    self.gpus[str(values["gpu"])] = values
                elif table == "gpu_events" and values.get("kind") == "xid":
                    self.xids[(str(values["gpu"]), int(values.get("xid") or 0))] += 1
                    self.last_xid[str(values["gpu"])] = int(values.get("xid") or 0)
                elif table in COUNTED:
                    self._observe_counted(COUNTED[table], values)
                elif table == "netdev_samples":
                    self.netdev[(str(values["node"]), str(values["dev"]))] = values
                elif table == "ib_port_samples":
                    self.ib[(str(values["node"]), str(values["device"]), str(values["port"]))] = values
                elif table == "collector_errors":
                    self.collector_errors[str(values["collector"])] += 1
                elif table == "rack_samples":
                    self.racks[str(values["rack"])] = values
                elif table == "dcim_signals":
                    if values.get("kind") == "cap" and values.get("budget_kw") is not None:
                        self.dcim_caps[str(values["scope"])] = float(values["budget_kw"])
                    else:
                        self.dcim_caps.pop(str(values["scope"]), None)
                else:
                    self._observe_host(table, values)

    def _observe_counted(self, table: Table, values: dict[str, Any]) -> None:
        """A row of a table with counted columns (aiops/columns_nic.py, columns_flows.py): kept per entity (its
        key columns but the time), its counted columns added to their running totals, the others the newest."""
        if table is NIC_SAMPLES and values.get("link_up") is not None:
            self.nic_up[str(values["nic"])] = bool(values["link_up"])
        keys = [c.name for c in table.columns if c.key and c.name != "ts_s"]
        entity = tuple(_label(values.get(k)) for k in keys)
        row = self.counted[table.name].setdefault(entity, dict(zip(keys, entity, strict=True)))
        for c in table.columns:
            if c.key or values.get(c.name) is None:
                continue
            row[c.name] = row.get(c.name, 0.0) + float(values[c.name]) if c.counted else values[c.name]

    def _observe_host(self, table: str, values: dict[str, Any]) -> None:
        node = str(values.get("node"))
        if table == "host_samples":
            self.host[node] = values
        elif table == "psi_samples":
            self.psi[(node, str(values["resource"]))] = values
        elif table == "hwmon_samples":
            self.hwmon[(node, str(values["chip"]), str(values["sensor"]))] = values
        elif table == "thermal_zone_samples":
            self.zones[(node, str(values["zone"]))] = values
        elif table == "kernel_events":
            self.kernel_events[str(values["kind"])] += 1

    def set_incidents(self, incidents: list[dict[str, Any]], pages: Sequence[Any] | None = None) -> None:
        """The open incidents and (`pages`) the paging decisions of the last review (aiops/service/pager.py
        `PageState`s), swapped in together: a scrape never sees an incident open without its decision, so the
        chart's `AiopsIncidentOpen ... unless on (incident_id) aiops_incident_pages == 0` cannot fire between."""
        with self._lock:
            self.incidents = list(incidents)
            self.analyst.set_incidents(incidents)
            if pages is not None:
                self.analyst.set_pages([dict(state.__dict__) for state in pages])

    def set_intended(self, intended: list[dict[str, Any]]) -> None:
        with self._lock:
            self.analyst.set_intended(intended)

    def inventory(self, topology: Sequence[Mapping[str, Any]], ranks: Sequence[Mapping[str, Any]]) -> None:
        """The store's topology and job_ranks rows: node → rack, GPU index and UUID, the jobs' ranks."""
        with self._lock:
            self.analyst.inventory(topology, ranks)

    def timing(self, collector: str, seconds: float) -> None:
        with self._lock:
            self.collector_seconds[collector] = seconds

    def ingested(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            for table, n in counts.items():
                self.rows_ingested[table] += n

    def gauge(self, name: str, help_text: str, value: float) -> None:
        with self._lock:
            self.gauges[name] = (help_text, float(value))

    def count(self, name: str, help_text: str, increment: float = 1.0) -> None:
        with self._lock:
            old = self.counters.get(name, (help_text, 0.0))[1]
            self.counters[name] = (help_text, old + increment)

    def total(self, name: str, help_text: str, value: float) -> None:
        """A counter whose running total is kept elsewhere."""
        with self._lock:
            self.counters[name] = (help_text, float(value))

    def dcgm_text(self) -> str:
        """`/metrics/dcgm`: the same newest values in dcgm-exporter's and node_exporter's names and labels."""
        # the exporters' names and renderer: loaded at the first scrape of this page, not at the start
        from aiops.sources.exposition import NicTotals, render_snapshot

        with self._lock:
            nics: dict[str, NicTotals] = {}
            for lane in self.counted[NIC_SAMPLES.name].values():
                nic = str(lane["nic"])
                totals = nics.setdefault(nic, NicTotals(link_up=self.nic_up.get(nic, True)))
                for column in ("tx_bytes", "tx_packets", "drops", "carrier_changes"):
                    setattr(totals, column, getattr(totals, column) + float(lane.get(column) or 0.0))
            gpus = {gpu: dict(values) for gpu, values in self.gpus.items()}
            return render_snapshot(gpus, dict(self.last_xid), nics)

    def facility_text(self) -> str:
        """`/metrics/facility`: the racks' newest sensor rows as the facility exporters' series (the twin's
        facility agent; empty elsewhere)."""
        with self._lock:
            rows = [dict(r) for r in self.racks.values()]
        if not rows:
            return ""
        from aiops.sources.facility import render_facility_snapshot  # with the Prometheus source's modules

        return render_facility_snapshot(rows)

    def dcim_document(self) -> dict[str, Any]:
        """`/api/dcim`: the caps in force as the DCIM document (`{"rack0": {"kw": 23.1}}`)."""
        with self._lock:
            return {scope: {"kw": kw} for scope, kw in sorted(self.dcim_caps.items())}

    # -- scraping -----------------------------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        with self._lock:
            yield from self._gpu_metrics()
            yield from self.workloads.metrics()
            yield from self._network_metrics()
            yield from self._host_metrics()
            yield from self._incident_metrics()
            yield from self._self_metrics()
            yield from self.analyst.families()

    def _gpu_metrics(self) -> Iterable[Metric]:
        labels = ["gpu", "node"]
        yield from declared_metrics(GPU_SAMPLES, [values for _gpu, values in sorted(self.gpus.items())])
        throttle = GaugeMetricFamily(
            PREFIX + "gpu_clocks_event_reason",
            "1 while NVML reports the clocks-event reason (nvmlClocksEventReason*)",
            labels=[*labels, "reason"],
        )
        lost = GaugeMetricFamily(
            PREFIX + "gpu_nvml_error",
            "1 while NVML answers this GPU with an error",
            labels=[*labels, "error"],
        )
        for gpu, values in sorted(self.gpus.items()):
            mask = int(values.get("clocks_event_reasons") or 0)
            for bit, reason in nvml_bits.NAMES.items():
                throttle.add_metric([gpu, str(values["node"]), reason], 1.0 if mask & bit else 0.0)
            if values.get("nvml_error"):
                lost.add_metric([gpu, str(values["node"]), str(values["nvml_error"])], 1.0)
        yield throttle
        yield lost
        xids = CounterMetricFamily(
            PREFIX + "gpu_xid_events", "XID events seen (NVML event sets, kernel log)", labels=["gpu", "xid"]
        )
        for (gpu, xid), n in sorted(self.xids.items()):
            xids.add_metric([gpu, str(xid)], float(n))
        yield xids

    def _network_metrics(self) -> Iterable[Metric]:
        for table in COUNTED.values():
            rows = [row for _key, row in sorted(self.counted[table.name].items())]
            yield from declared_metrics(table, rows, {"node": self.node})
        yield from declared_metrics(NETDEV_SAMPLES, [values for _key, values in sorted(self.netdev.items())])
        up = GaugeMetricFamily(
            PREFIX + "netdev_up", "1 while the link's operstate is up", labels=["dev", "node", "nic"]
        )
        for (node, dev), values in sorted(self.netdev.items()):
            if values.get("oper_up") is not None:
                up.add_metric([dev, node, str(values.get("nic") or "")], 1.0 if values["oper_up"] else 0.0)
        yield up
        yield from declared_metrics(IB_PORT_SAMPLES, [values for _port, values in sorted(self.ib.items())])

    def _host_metrics(self) -> Iterable[Metric]:
        yield from declared_metrics(HOST_SAMPLES, [values for _node, values in sorted(self.host.items())])
        yield from declared_metrics(PSI_SAMPLES, [values for _key, values in sorted(self.psi.items())])
        # hwmon_samples' families (aiops/columns_sensors.py HWMON): the row's kind chooses one; those with a sensor
        hwmon: dict[str, GaugeMetricFamily] = {}
        for (node, chip, sensor), values in sorted(self.hwmon.items()):
            declared = HWMON.get(str(values["kind"]))
            if declared is None or values.get("value") is None:
                continue
            if declared.name not in hwmon:
                hwmon[declared.name] = GaugeMetricFamily(
                    declared.name, declared.help, labels=list(declared.labels)
                )
            label_values = [node, chip, sensor, _label(values.get("label"))]
            hwmon[declared.name].add_metric(label_values, float(values["value"]))
        yield from hwmon.values()
        yield from declared_metrics(
            THERMAL_ZONE_SAMPLES, [values for _key, values in sorted(self.zones.items())]
        )
        kernel = CounterMetricFamily(
            PREFIX + "kernel_events", "kernel log lines recognised (/dev/kmsg)", labels=["kind"]
        )
        for kind, n in sorted(self.kernel_events.items()):
            kernel.add_metric([kind], float(n))
        yield kernel

    def _incident_metrics(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            PREFIX + "incident_open",
            "1 for each open incident, with its top hypothesis",
            labels=["incident_id", "severity", "root_cause", "component", "agent_instance"],
        )
        for i in self.incidents:
            # a lost agent's scrape target: the chart's AiopsIncidentOpen for it inhibits AiopsAgentDown
            lost = symptoms_agent_instance(i.get("symptoms"))
            family.add_metric(
                [i["incident_id"], i["severity"], i.get("root_cause") or "", i.get("component") or "", lost],
                1.0,
            )
        yield family

    def _self_metrics(self) -> Iterable[Metric]:
        seconds = GaugeMetricFamily(
            PREFIX + "collector_duration_seconds", "how long the last collect took", labels=["collector"]
        )
        for name, value in sorted(self.collector_seconds.items()):
            seconds.add_metric([name], value)
        yield seconds
        errors = CounterMetricFamily(
            PREFIX + "collector_errors", "rows collectors wrote to collector_errors", labels=["collector"]
        )
        for name, value in sorted(self.collector_errors.items()):
            errors.add_metric([name], float(value))
        yield errors
        rows = CounterMetricFamily(PREFIX + "ingested_rows", "rows written to the store", labels=["table"])
        for table, value in sorted(self.rows_ingested.items()):
            rows.add_metric([table], float(value))
        yield rows
        for name, (help_text, value) in sorted(self.gauges.items()):
            yield GaugeMetricFamily(PREFIX + name, help_text, value=value)
        for name, (help_text, value) in sorted(self.counters.items()):
            yield CounterMetricFamily(PREFIX + name.removesuffix("_total"), help_text, value=value)
