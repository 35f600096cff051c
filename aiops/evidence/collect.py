"""What the parsers found, kept in bounded memory: every event is counted, and the first events of each kind
(up to `KEEP_PER_KIND`) are kept for the rules and the evidence rows. A 1 GB log of one repeated Xid line
keeps 200 lines, not ten million."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from aiops.evidence.events import LogEvent

KEEP_PER_KIND = 200
# Kinds that say only "this line was understood" (a field of nvidia-smi, an NCCL INFO line): counted, not kept.
COUNT_ONLY = frozenset(
    {
        "nvsmi_field",
        "nvidia_info",
        "ib_info",
        "pci_field",
        "prom_meta",
        "prom_sample",
        "nccl_info",
        "nccl_watchdog_detail",
        "aer_detail",
        "sysfs_value",
        "nic_counter",
        "nic_info",
        "dcgm_info",
        "bmc_info",
        "fm_info",
        "driver_param",
        "slurm_info",
        "ras_info",
        "k8s_info",
        "ipmi_info",
        "generic_ids",
    }
)


@dataclass
class Collected:
    kept: dict[str, list[LogEvent]] = field(default_factory=lambda: defaultdict(list))
    counts: Counter[str] = field(default_factory=Counter)
    # (kind, code) counts for kinds with codes, e.g. ("xid", 79)
    code_counts: Counter[tuple[str, int]] = field(default_factory=Counter)

    def add(self, event: LogEvent) -> None:
        self.counts[event.kind] += 1
        if event.code is not None:
            self.code_counts[(event.kind, event.code)] += 1
        if event.kind in COUNT_ONLY:
            return
        bucket = self.kept[event.kind]
        if len(bucket) < KEEP_PER_KIND:
            bucket.append(event)

    def of(self, kind: str) -> list[LogEvent]:
        return self.kept.get(kind, [])
