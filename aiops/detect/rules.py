"""Streaming detection rules. A `Detector` is fed consecutive windows (t0, t1] of stored telemetry and returns
the symptoms that became true in each. Absolute rules (throttle bits, XIDs, NVML errors, counters that only grow
on faults, lane/class mismatches, DCIM caps) need no baseline; relative rules (step time, collective latency,
queue delay, temperatures, host stalls) compare each entity to its own rolling median/MAD and must persist for
several windows, so that benign bursts (checkpoints, noise) do not open incidents.

The rules live by what they read: a GPU's telemetry and XIDs (aiops/detect/gpu_rules.py), NICs and traffic lanes
(network_rules.py), jobs and their input pipelines (job_rules.py), racks and the site (facility_rules.py), per-rank
timing (stragglers.py); what they remember between windows in aiops/detect/rule_state.py; every kind they report,
and how it weighs, in aiops/detect/kinds.py.

What the product itself set is expected, not a symptom (intended state, guardrails/intended.py, as in force at
the window's end): a power limit equal to the one an executed action set is no `power_limit_drop`, SwPowerCap
alone at it no `gpu_throttle`; a drained node's GPUs idle and its job waits by design (no `gpu_idle_in_job`, no
`job_stalled`). A limit that moved away from what was set, or that nobody set, is still a symptom.
"""

from __future__ import annotations

from collections.abc import Callable

from aiops.detect import windows as w
from aiops.detect.facility_rules import caps_in_force, rack_rules
from aiops.detect.gpu_rules import gpu_rules, xid_rules
from aiops.detect.job_rules import collective_rules, loader_rules, step_rules
from aiops.detect.kinds import INFO as INFO  # re-exported: aiops/detect/severity.py reads it here
from aiops.detect.kinds import STRONG as STRONG
from aiops.detect.network_rules import lane_class_rules, nic_rules, pause_rules
from aiops.detect.rule_state import RuleState
from aiops.models import Symptom

Rule = Callable[[RuleState, float, float], list[Symptom]]

# In this order each window: the GPU rules first (they note which nodes report, which GPUs idle: the job rules
# read both), the step rules after the XIDs (a job's XIDs tell a crash from a stall).
RULES: tuple[Rule, ...] = (
    gpu_rules,
    xid_rules,
    nic_rules,
    pause_rules,
    lane_class_rules,
    collective_rules,
    step_rules,
    rack_rules,
    loader_rules,
)


class Detector(RuleState):
    def process(self, t0: float, t1: float) -> list[Symptom]:
        with w.one_window(self.store):  # a window's rows read once per query (the rules ask some twice)
            return self._process(t0, t1)

    def _process(self, t0: float, t1: float) -> list[Symptom]:
        if self.start_ts_s is None:
            self.start_ts_s = t0
        history = w.for_the_pass(self.store, "intended history", lambda: self.intended_cache.get(self.store))
        if history is None:  # asked every window: what the product executed may have changed
            history = self.intended_cache.get(self.store)
        self.intended = history.at(t1) if history else {}
        if w.for_the_pass(self.store, "product restarts", self._refresh_restarts) is None:
            self._refresh_restarts()  # outside detect()'s pass: every window
        if not self.rack_of:
            self.rack_of = w.racks_of_nodes(self.store)
        self.caps_kw = caps_in_force(self.store, t0, t1)
        out: list[Symptom] = []
        self.ends.window(
            w.window(self.store, w.XID_WINDOW_SQL, t0, t1), self.job_of_gpu
        )  # aiops/detect/ended.py
        for rule in RULES:
            out += rule(self, t0, t1)
        self.stragglers.store = self.store  # the live service may have reopened the file since
        out += self.stragglers.process(t0, t1, warm=self.warm(t1))
        return out

    def _refresh_restarts(self) -> bool:
        self.restarts.refresh(self.store, self.job_of_gpu)
        return True

    def ahead(self, until_s: float) -> list[Symptom]:
        """Rank timing that landed after the last window, up to `until_s`, judged as it landed (a fleet reading
        rank timing more often than a step: aiops/detect/stragglers.py); the rest waits for its window."""
        if self.start_ts_s is None:
            return []
        self.stragglers.store = self.store
        return self.stragglers.ahead(until_s, self.window_s, warm=self.warm(until_s))
