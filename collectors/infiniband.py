"""InfiniBand/RoCE port state and counters into ib_port_samples (cumulative totals).

Reads /sys/class/infiniband/<dev>/ports/<port>/{state,phys_state,rate,counters/*,hw_counters/*}
(Documentation/ABI/stable/sysfs-class-infiniband). `state` reads "4: ACTIVE" and `phys_state` "5: LinkUp":
the text after the number is stored. `rate` reads "100 Gb/sec (4X EDR)". port_rcv_data and port_xmit_data count
4-octet words (the IBA PortRcvData/PortXmitData counters), stored as read. hw_counters are the driver's (mlx5:
np_cnp_sent, rp_cnp_handled, np_ecn_marked_roce_packets, out_of_sequence, local_ack_timeout_err, and
req_transport_retries_exceeded since kernel 6.11, commit b339e0a "RDMA/mlx5: Add Qcounters
req_transport_retries_exceeded"); any counter file that is absent is NULL, not an error. A host without
/sys/class/infiniband gets one `unavailable` row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from collectors.base import Row, RowBatch
from collectors.hostfs import HostCollector, entries
from collectors.schema import columns

IB_COLUMNS = columns("ib_port_samples")
COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_xmit_wait",
    "port_rcv_data",
    "port_xmit_data",
)
HW_COUNTERS = (
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "out_of_sequence",
    "local_ack_timeout_err",
    "req_transport_retries_exceeded",
)
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def state_name(text: str | None) -> str | None:
    """ "4: ACTIVE" -> "ACTIVE" (the kernel prints the number and the name)."""
    if text is None:
        return None
    return text.partition(":")[2].strip() or text.strip()


def rate_gbps(text: str | None) -> float | None:
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


class InfinibandCollector(HostCollector):
    name = "infiniband"

    def __init__(self, node: str, root: str | Path = "/", nics: Mapping[str, str] | None = None) -> None:
        super().__init__(node, root)
        self.nics = dict(nics or {})  # IB device name (mlx5_0) -> contract name

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        ib = self.root / "sys" / "class" / "infiniband"
        if not ib.is_dir():
            self.errors.once(self.node, "unavailable", f"InfiniBand unavailable: {ib} does not exist")
            return {}
        rows: list[Row] = []
        for dev in entries(ib):
            for port in entries(dev / "ports"):
                if port.name.isdigit():
                    rows.append(self._port(now_ts_s, dev.name, port))
        return {"ib_port_samples": RowBatch(IB_COLUMNS, rows)} if rows else {}

    def _port(self, now_ts_s: float, dev: str, port: Path) -> Row:
        nic = self.nics.get(dev)
        component = nic or self.node
        state = state_name(self.files.text(port / "state", component))
        phys_state = state_name(self.files.text(port / "phys_state", component, required=False))
        rate = rate_gbps(self.files.text(port / "rate", component, required=False))
        counters = [self.files.integer(port / "counters" / c, component, required=False) for c in COUNTERS]
        hw = [self.files.integer(port / "hw_counters" / c, component, required=False) for c in HW_COUNTERS]
        return (now_ts_s, self.node, dev, int(port.name), nic, state, phys_state, rate, *counters, *hw)
