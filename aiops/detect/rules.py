"""Streaming detection rules. A `Detector` is fed consecutive windows (t0, t1] of stored telemetry and returns
the symptoms that became true in each. Absolute rules (throttle bits, XIDs, NVML errors, counters that only grow
on faults, lane/class mismatches, DCIM caps) need no baseline; relative rules (step time, collective latency,
queue delay, temperatures, host stalls) compare each entity to its own rolling median/MAD and must persist for
several windows, so that benign bursts (checkpoints, noise) do not open incidents.

A GPU's temperature is judged against its own at the same load (aiops/detect/heat.py: a GPU back at work after
a long stall is not hot), and its power limit moves in steps, each dated by its own onset and judged against a
DCIM cap in force at the drop (aiops/detect/limits.py: a drop below what the cap asked is not the cap's).

What the product itself set is expected, not a symptom (intended state, guardrails/intended.py, as in force at
the window's end): a power limit equal to the one an executed action set is no `power_limit_drop`, SwPowerCap
alone at it no `gpu_throttle`; a drained node's GPUs idle and its job waits by design (no `gpu_idle_in_job`, no
`job_stalled`). A limit that moved away from what was set, or that nobody set, is still a symptom.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiops import labels
from aiops.control.dcim_signals import dcim_caps_kw
from aiops.detect import windows as w
from aiops.detect.baselines import Persistence, RollingBaseline
from aiops.detect.ended import JobEnds
from aiops.detect.heat import LoadedTemperature, load_level
from aiops.detect.limits import LimitSteps, cap_levels
from aiops.detect.stragglers import EXPECTED, StragglerRules
from aiops.models import Symptom
from aiops.nvml_bits import GPU_IDLE, SW_POWER_CAP, THROTTLE, describe, routine_power_cap
from aiops.store import Store
from collectors.nvml import DRIVER_GONE
from guardrails.intended import Intended, IntendedCache

# Symptom kinds and how they weigh for opening an incident.
STRONG = {
    "gpu_throttle",
    "xid",
    "gpu_lost",
    "ecc_dbe",
    "pcie_replay",
    "pcie_downtrain",
    "nvlink_errors",
    "carrier_flap",
    "lane_mismatch",
    "lane_enforcement_missing",
    "dcim_power_cap",
    "power_limit_drop",
    "job_stalled",
    "collective_timeouts",
    "coolant_flow_drop",
    "loss_without_ecn",
    "loader_outlier",
}
INFO = {"fleet_inlet_drift"}

WARMUP_S = 30.0
CORRECTED_XIDS = frozenset({92})
PAUSE_FLOOR = 50.0  # pause frames per window a NIC may receive above its baseline without a symptom  # high single-bit (correctable) ECC error rate


class Detector:
    def __init__(self, store: Store, *, window_s: float = 10.0) -> None:
        self.store = store
        self.window_s = window_s
        self.start_ts_s: float | None = None
        self.job_of_gpu = w.job_gpus(store)
        self.job_home = w.job_homes(store)
        self.ends = JobEnds()  # a job killed or crashed is not stalled (aiops/detect/ended.py)
        self.reporting: set[str] = set()  # the nodes whose GPUs have a row in the window being judged
        self.persist = Persistence()
        self.baselines: dict[str, RollingBaseline] = defaultdict(lambda: RollingBaseline(size=30))
        self.counters: dict[str, float] = {}
        self.limits = LimitSteps()  # each GPU's power-limit steps (aiops/detect/limits.py)
        self.heat = LoadedTemperature(window_s)  # temperature per load level (aiops/detect/heat.py)
        self.rack_of: dict[str, str] = {}  # node -> rack (topology), read once it exists
        self.caps_kw: dict[str, float] = {}  # scope -> the DCIM cap in force in the current window
        self.last_step_ts_s: dict[str, float] = {}
        self.step_baseline: dict[str, RollingBaseline] = defaultdict(
            lambda: RollingBaseline(size=20, min_count=3)
        )
        self.intended_cache = IntendedCache()  # what the product set: expected, not a symptom (module doc)
        self.intended: dict[tuple[str, str], Intended] = {}
        self.stragglers = StragglerRules(
            store, self._set_slower
        )  # per-rank timing (aiops/detect/stragglers.py)

    # -- helpers ------------------------------------------------------------------------------------------
    def _counter_delta(self, key: str, value: Any) -> float:
        if value is None:
            return 0.0
        previous = self.counters.get(key)
        self.counters[key] = float(value)
        return 0.0 if previous is None else max(0.0, float(value) - previous)

    def _relative(
        self, key: str, value: float | None, ts_s: float, *, ratio: float, floor: float, windows: int
    ) -> bool:
        """A relative rule: value above its baseline for `windows` consecutive windows."""
        if value is None:
            return False
        baseline = self.baselines[key]
        warm = self.start_ts_s is not None and ts_s - self.start_ts_s >= WARMUP_S
        high = warm and baseline.exceeds(value, ratio=ratio, floor=floor)
        if not high:
            baseline.add(value)
        return self.persist.update(key, high, ts_s) >= windows

    # -- the window -------------------------------------------------------------------------------------
    def _set(self, component: str, prop: str) -> Intended | None:
        return self.intended.get((component, prop))

    def _drained(self, gpu: str) -> bool:
        node = labels.node_of(gpu)
        entry = self._set(node, "drained") if node else None
        return entry is not None and bool(entry.value)

    def _set_slower(self, gpu: str) -> bool:
        """The product slowed this GPU (its limit or clocks, intended state) or drained its node."""
        return self._drained(gpu) or any(self._set(gpu, prop) is not None for prop in EXPECTED)

    def process(self, t0: float, t1: float) -> list[Symptom]:
        if self.start_ts_s is None:
            self.start_ts_s = t0
        history = self.intended_cache.get(self.store)
        self.intended = history.at(t1) if history else {}
        if not self.rack_of:
            self.rack_of = w.racks_of_nodes(self.store)
        self.caps_kw = self._caps(t0, t1)
        out: list[Symptom] = []
        out += self._gpus(t0, t1)
        out += self._xids(t0, t1)
        out += self._nics(t0, t1)
        out += self._pauses(t0, t1)
        out += self._flows(t0, t1)
        out += self._collectives(t0, t1)
        out += self._steps(t0, t1)
        out += self._racks(t0, t1)
        out += self._hosts(t0, t1)
        self.stragglers.store = self.store  # the live service may have reopened the file since
        out += self.stragglers.process(t0, t1, warm=t1 - self.start_ts_s >= WARMUP_S)
        return out

    def ahead(self, until_s: float) -> list[Symptom]:
        """Rank timing that landed after the last window, up to `until_s`, judged as it landed (a fleet reading
        rank timing more often than a step: aiops/detect/stragglers.py); the rest waits for its window."""
        if self.start_ts_s is None:
            return []
        self.stragglers.store = self.store
        return self.stragglers.ahead(until_s, self.window_s, warm=until_s - self.start_ts_s >= WARMUP_S)

    def _caps(self, t0: float, t1: float) -> dict[str, float]:
        """Scope (a rack, or `fleet`) -> the DCIM cap in force in the window: the DCIM signals' (`fleet` for a
        site-wide one), and a rack's own cap where a facility collector recorded one with its samples."""
        signals = dcim_caps_kw(self.store, t0, t1)
        caps = dict(signals)
        for r in w.window(self.store, w.RACK_WINDOW_SQL, t0, t1):
            if r["power_cap_kw"] is not None:
                caps[str(r["rack"])] = float(r["power_cap_kw"])
        return caps

    def _gpus(self, t0: float, t1: float) -> list[Symptom]:
        out: list[Symptom] = []
        rows = w.window(self.store, w.GPU_WINDOW_SQL, t0, t1)
        limits_w = {str(r["gpu"]): float(r["power_limit_w"]) for r in rows if r["power_limit_w"] is not None}
        rack_of_gpu = {str(r["gpu"]): self.rack_of.get(str(r["node"])) for r in rows}
        capped = cap_levels(limits_w, list(self.caps_kw), rack_of_gpu)  # what each cap asked, where one is
        warm = self.start_ts_s is not None and t1 - self.start_ts_s >= WARMUP_S
        self.reporting = set()
        self.ends.idle = set()
        for r in rows:
            gpu = str(r["gpu"])
            self.reporting.add(str(r["node"]))
            if r["errors"]:
                if r["error"] not in DRIVER_GONE:  # NVML itself gone: the node's blindness, no GPU's fault
                    out.append(Symptom(kind="gpu_lost", component=gpu, ts_s=t1, detail={"error": r["error"]}))
                continue
            throttled = (r["throttled"] or 0) >= max(2, 0.3 * r["samples"])
            routine = routine_power_cap(
                int(r["reasons"] or 0) & THROTTLE, r["power_limit_w"], r["power_max_w"]
            )
            # SwPowerCap alone at a limit the product set (intended state): the cap doing what it was set for
            limit_set = self._set(gpu, "power_limit_w")
            intended = (
                int(r["reasons"] or 0) & THROTTLE == SW_POWER_CAP
                and limit_set is not None
                and limit_set.matches(r["power_limit_w"])
            )
            throttled = throttled and not routine and not intended  # SwPowerCap at the full limit: at its TDP
            if self.persist.update(f"throttle:{gpu}", throttled, t1) >= 1 and throttled:
                bits = int(r["reasons"] or 0) & THROTTLE
                out.append(
                    Symptom(
                        kind="gpu_throttle",
                        component=gpu,
                        ts_s=t1,
                        detail={"reasons": describe(bits), "mask": bits, "temp_c": r["max_temp_c"]},
                    )
                )
            if self._counter_delta(f"dbe:{gpu}", r["dbe"]) > 0:
                out.append(Symptom(kind="ecc_dbe", component=gpu, ts_s=t1, detail={"dbe_total": r["dbe"]}))
            if self._counter_delta(f"pcie:{gpu}", r["pcie_replay"]) >= 5:
                out.append(
                    Symptom(
                        kind="pcie_replay", component=gpu, ts_s=t1, detail={"replay_total": r["pcie_replay"]}
                    )
                )
            crc = self._counter_delta(f"crc:{gpu}", r["nvlink_crc"]) + self._counter_delta(
                f"nvreplay:{gpu}", r["nvlink_replay"]
            )
            if crc >= 5:
                out.append(
                    Symptom(
                        kind="nvlink_errors", component=gpu, ts_s=t1, detail={"crc_total": r["nvlink_crc"]}
                    )
                )
            if r["link_width"] is not None and r["link_max_width"] and r["link_width"] < r["link_max_width"]:
                out.append(
                    Symptom(
                        kind="pcie_downtrain",
                        component=gpu,
                        ts_s=t1,
                        detail={"width": r["link_width"], "max_width": r["link_max_width"]},
                    )
                )
            limit = r["power_limit_w"]
            if limit is not None:
                # each drop a step of its own, judged against a DCIM cap in force (aiops/detect/limits.py)
                step = self.limits.update(gpu, float(limit), t1, capped.get(gpu))
                # a limit the product set is expected; one that moved away from it, or nobody set, is not
                if step is not None and not (limit_set is not None and limit_set.matches(limit)):
                    detail: dict[str, Any] = {"limit_w": limit, "was_w": self.limits.first_w(gpu)}
                    detail.update(step.detail())
                    if limit_set is not None:
                        detail.update(intended_w=limit_set.value, set_by=limit_set.proposal_id)
                    out.append(Symptom(kind="power_limit_drop", component=gpu, ts_s=t1, detail=detail))
            # hot for the load it ran at: a GPU back at work after a stall is not hot (aiops/detect/heat.py)
            level = load_level(r["power_w"], r["power_max_w"] or self.limits.first_w(gpu))
            hot = self.heat.hot(gpu, r["temp_c"], level, judge=warm)
            if self.persist.update(f"temp:{gpu}", hot, t1) >= 2:
                baseline_c = self.heat.baseline_c(gpu, level)
                detail = {"temp_c": r["temp_c"], "load_level": level, "baseline_c": baseline_c}
                out.append(Symptom(kind="gpu_hot", component=gpu, ts_s=t1, detail=detail))
            in_job = gpu in self.job_of_gpu and not self._drained(gpu)  # a drained node's GPUs idle by design
            idle = (r["idle"] or 0) >= 0.3 * r["samples"]
            if idle:
                self.ends.idle.add(gpu)
            job = self.job_of_gpu.get(gpu)  # its job ended (killed, crashed): idle by design too
            starved = in_job and idle and not self.ends.killed(job, self.last_step_ts_s.get(job or ""))
            if self.persist.update(f"idle:{gpu}", starved, t1) >= 2:
                out.append(
                    Symptom(
                        kind="gpu_idle_in_job",
                        component=gpu,
                        ts_s=t1,
                        detail={"idle_samples": r["idle"], "bits": describe(GPU_IDLE)},
                    )
                )
        return out

    def _xids(self, t0: float, t1: float) -> list[Symptom]:
        # Xid 92 reports a high rate of *corrected* errors (NVIDIA Xid catalogue): the data is intact and the job
        # runs on, so it opens nothing; the analyst still reads it as evidence.
        rows = w.window(self.store, w.XID_WINDOW_SQL, t0, t1)
        self.ends.saw_xids(rows, self.job_of_gpu)
        return [
            Symptom(kind="xid", component=str(r["gpu"]), ts_s=float(r["ts_s"]), detail={"xid": r["xid"]})
            for r in rows
            if r["xid"] not in CORRECTED_XIDS
        ]

    def _nics(self, t0: float, t1: float) -> list[Symptom]:
        rows = w.window(self.store, w.NIC_WINDOW_SQL, t0, t1)
        out: list[Symptom] = []
        enforced_somewhere = any(not r["fifo"] for r in rows)
        ce_rates = sorted(float(r["ce_marks"] or 0) for r in rows)
        peer_ce = ce_rates[len(ce_rates) // 2] if ce_rates else 0.0
        for r in rows:
            nic = str(r["nic"])
            # Peer comparison needs no baseline: a NIC that drops where its peers mark CE under the same load.
            loss = float(r["drops"] or 0) + float(r["retransmits"] or 0)
            unmarked = peer_ce >= 20 and float(r["ce_marks"] or 0) < 0.1 * peer_ce and loss >= 20
            if self.persist.update(f"noecn:{nic}", unmarked, t1) >= 2:
                out.append(
                    Symptom(
                        kind="loss_without_ecn",
                        component=nic,
                        ts_s=t1,
                        detail={"drops": r["drops"], "ce_marks": r["ce_marks"], "peer_ce_marks": peer_ce},
                    )
                )
            if (r["carrier_changes"] or 0) > 0 or not r["link_up_all"]:
                out.append(
                    Symptom(
                        kind="carrier_flap",
                        component=nic,
                        ts_s=t1,
                        detail={"carrier_changes": r["carrier_changes"]},
                    )
                )
            if r["fifo"] and enforced_somewhere:
                out.append(Symptom(kind="lane_enforcement_missing", component=nic, ts_s=t1, detail={}))
            drops = float(r["drops"] or 0) + float(r["retransmits"] or 0)
            if self._relative(f"drops:{nic}", drops, t1, ratio=3.0, floor=50.0, windows=2):
                out.append(
                    Symptom(
                        kind="nic_drops",
                        component=nic,
                        ts_s=t1,
                        detail={
                            "drops": r["drops"],
                            "retransmits": r["retransmits"],
                            "ce_marks": r["ce_marks"],
                        },
                    )
                )
            if self._relative(f"qdelay:{nic}", r["queue_delay_ms"], t1, ratio=2.0, floor=1.0, windows=2):
                out.append(
                    Symptom(
                        kind="queue_delay",
                        component=nic,
                        ts_s=t1,
                        detail={"queue_delay_ms": r["queue_delay_ms"]},
                    )
                )
        return out

    def _pauses(self, t0: float, t1: float) -> list[Symptom]:
        """PFC pause frames received above the NIC's own baseline (relative, 2 windows): on a lossless fabric a
        queue that overflows pauses the port feeding it instead of dropping, so this is the hardware trace of
        congestion there (the NIC paused is the sender, not the congested port: the analyst names that)."""
        out: list[Symptom] = []
        for r in w.window(self.store, w.PAUSE_WINDOW_SQL, t0, t1):
            nic = str(r["nic"])
            pauses = self._counter_delta(f"pause:{nic}", r["rx_pause_total"])
            if self._relative(f"pauses:{nic}", pauses, t1, ratio=3.0, floor=PAUSE_FLOOR, windows=2):
                out.append(
                    Symptom(kind="pfc_pauses", component=nic, ts_s=t1, detail={"rx_pause_frames": pauses})
                )
        return out

    def _flows(self, t0: float, t1: float) -> list[Symptom]:
        rows = w.window(self.store, w.FLOW_WINDOW_SQL, t0, t1)
        total: dict[str, float] = defaultdict(float)
        for r in rows:
            total[r["nic"]] += float(r["tx_bytes"] or 0)
        out: list[Symptom] = []
        for r in rows:
            wrong = (r["traffic_class"] == "collective" and r["lane"] in ("bulk", "standard")) or (
                r["traffic_class"] == "bulk" and r["lane"] == "vip"
            )
            share = float(r["tx_bytes"] or 0) / total[r["nic"]] if total[r["nic"]] else 0.0
            if wrong and share >= 0.01:
                out.append(
                    Symptom(
                        kind="lane_mismatch",
                        component=str(r["nic"]),
                        ts_s=t1,
                        detail={
                            "traffic_class": r["traffic_class"],
                            "lane": r["lane"],
                            "rule_id": r["rule_id"],
                            "share": round(share, 3),
                        },
                    )
                )
        return out

    def _collectives(self, t0: float, t1: float) -> list[Symptom]:
        out: list[Symptom] = []
        for r in w.window(self.store, w.COLLECTIVE_WINDOW_SQL, t0, t1):
            job = f"job:{r['job']}"
            if (r["timeouts"] or 0) > 0:
                out.append(
                    Symptom(
                        kind="collective_timeouts",
                        component=job,
                        ts_s=t1,
                        detail={"op": r["op"], "scope": r["scope"], "timeouts": r["timeouts"]},
                    )
                )
            key = f"coll:{r['job']}:{r['op']}:{r['scope']}"
            if self._relative(key, r["p99_ms"], t1, ratio=0.5, floor=2.0, windows=2):
                out.append(
                    Symptom(
                        kind="collective_latency",
                        component=job,
                        ts_s=t1,
                        detail={"op": r["op"], "scope": r["scope"], "p99_ms": r["p99_ms"]},
                    )
                )
        return out

    def _steps(self, t0: float, t1: float) -> list[Symptom]:
        out: list[Symptom] = []
        seen: set[str] = set()
        for r in w.window(self.store, w.STEP_WINDOW_SQL, t0, t1):
            job = str(r["job"])
            seen.add(job)
            self.last_step_ts_s[job] = float(r["last_ts_s"])
            baseline = self.step_baseline[job]
            warm = self.start_ts_s is not None and t1 - self.start_ts_s >= WARMUP_S
            slow = warm and baseline.exceeds(float(r["step_time_s"]), ratio=0.08, floor=0.0, mads=6.0)
            if not slow:
                baseline.add(float(r["step_time_s"]))
            if self.persist.update(f"step:{job}", slow, t1) >= 2:
                out.append(
                    Symptom(
                        kind="step_regression",
                        component=f"job:{job}",
                        ts_s=t1,
                        detail={
                            "step_time_s": r["step_time_s"],
                            "baseline_s": baseline.median,
                            "slowest_gpu": r["slowest_gpu"],
                        },
                    )
                )
        drained_jobs = {j for g, j in self.job_of_gpu.items() if self._drained(g)}
        for job, last in self.last_step_ts_s.items():
            home = self.job_home.get(job)
            if job in seen or job in drained_jobs:  # a job a drain held or requeued waits by design
                continue
            if self.ends.ended(job, [g for g, j in self.job_of_gpu.items() if j == job], last):
                continue  # killed or crashed, its GPUs idle: ended, not stalled
            if home not in self.reporting if home else not self.reporting:
                continue  # no step, and no sight of where its steps come from either: blind, not stalled
            typical = self.step_baseline[job].median or 1.0
            # no step for 30 s and 10 typical steps, and two windows: at a 30 s scrape interval one window
            # without a step row is one scrape that had not seen the next step yet, not a stall
            if t1 - last > max(30.0, 10.0 * typical, 2.0 * self.window_s):
                out.append(
                    Symptom(
                        kind="job_stalled",
                        component=f"job:{job}",
                        ts_s=t1,
                        detail={"last_step_ts_s": last, "typical_step_s": typical},
                    )
                )
        return out

    def _racks(self, t0: float, t1: float) -> list[Symptom]:
        rows = w.window(self.store, w.RACK_WINDOW_SQL, t0, t1)
        signals = self.caps_kw
        out: list[Symptom] = []
        drifting = 0
        for r in rows:
            rack = str(r["rack"])
            # the cap a facility collector recorded with the rack's samples, else the DCIM signal in force
            cap_kw = (
                r["power_cap_kw"]
                if r["power_cap_kw"] is not None
                else signals.get(rack, signals.get("fleet"))
            )
            if cap_kw is not None:
                out.append(Symptom(kind="dcim_power_cap", component=rack, ts_s=t1, detail={"cap_kw": cap_kw}))
            flow = r["flow_lpm"]
            flow_base = self.baselines[f"flow:{rack}"]
            low_flow = flow is not None and flow_base.ready() and flow < 0.85 * flow_base.median
            if flow is not None and not low_flow:
                flow_base.add(float(flow))
            if self.persist.update(f"flow:{rack}", low_flow, t1) >= 2:
                out.append(
                    Symptom(
                        kind="coolant_flow_drop",
                        component=rack,
                        ts_s=t1,
                        detail={"flow_lpm": flow, "baseline_lpm": flow_base.median},
                    )
                )
            inlet = r["inlet_c"]
            inlet_base = self.baselines[f"inlet:{rack}"]
            if inlet is not None and inlet_base.ready():
                if inlet > inlet_base.median + 3.0 and self.persist.update(f"inlet:{rack}", True, t1) >= 2:
                    out.append(
                        Symptom(
                            kind="rack_inlet_hot",
                            component=rack,
                            ts_s=t1,
                            detail={"inlet_c": inlet, "baseline_c": inlet_base.median},
                        )
                    )
                if inlet > inlet_base.median + 1.5:
                    drifting += 1
            if inlet is not None and len(inlet_base.values) < 6:
                inlet_base.add(float(inlet))  # the first minute is the reference for slow drift
        if rows and drifting == len(rows) and self.persist.update("fleet_drift", True, t1) >= 3:
            out.append(
                Symptom(kind="fleet_inlet_drift", component="fleet", ts_s=t1, detail={"racks": drifting})
            )
        return out

    def _hosts(self, t0: float, t1: float) -> list[Symptom]:
        out: list[Symptom] = []
        rows = w.window(self.store, w.HOST_WINDOW_SQL, t0, t1)
        waits = sorted(float(r["loader_wait_ms"] or 0) for r in rows if (r["loader_wait_ms"] or 0) > 0)
        typical = waits[len(waits) // 2] if waits else 0.0
        for r in rows:
            node = str(r["node"])
            wait = float(r["loader_wait_ms"] or 0)
            outlier = len(waits) >= 3 and wait > max(10.0 * typical, typical + 50.0)
            if self.persist.update(f"loader-peer:{node}", outlier, t1) >= 2:
                out.append(
                    Symptom(
                        kind="loader_outlier",
                        component=node,
                        ts_s=t1,
                        detail={"loader_wait_ms": wait, "peer_median_ms": typical},
                    )
                )
            if self._relative(f"loader:{node}", r["loader_wait_ms"], t1, ratio=2.0, floor=50.0, windows=2):
                out.append(
                    Symptom(
                        kind="loader_stall",
                        component=node,
                        ts_s=t1,
                        detail={"loader_wait_ms": r["loader_wait_ms"], "cpu_pct": r["cpu_pct"]},
                    )
                )
        return out
